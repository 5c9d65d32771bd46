/**
 * `evictStaleToolResults` on the real sessions and on generated sessions of 1k, 10k and 50k messages.
 * - baseline: one pass that visits every block of every message (the least any eviction can do);
 * - cold: eviction of a session nothing was offloaded from yet (keepRecent 5);
 * - warm: one new turn (a read and its result) appended to a session that was already evicted, evicted again;
 * - hot paths: `HotPaths.fromMessages` on the evicted session (what a resumed session pays once).
 * Run: npx node --expose-gc bench/evict.bench.ts
 */
import { bench, do_not_optimize, group, summary } from "mitata"
import { evictStaleToolResults } from "../src/Evict.ts"
import { HotPaths } from "../src/HotPaths.ts"
import type { Message } from "../src/Message.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { generateSession } from "../test/fixtures/Conversation.ts"
import { corpus } from "../test/fixtures/Corpus.ts"
import { visitBlocks } from "./baselines.ts"
import { runBenchmarks } from "./util.ts"

const sessions: Array<readonly [string, ReadonlyArray<Message>]> = [
  ...corpus().map((s) => [s.name, s.messages] as const),
  ...[1_000, 10_000, 50_000].map((n) => [`generated-${n / 1000}k`, generateSession(n, { messages: n })] as const)
]

const KEEP = 5

for (const [name, messages] of sessions) {
  estimateTokens(messages) // a live loop has estimated every message before
  const evicted = evictStaleToolResults(messages, KEEP, { minSavings: 0 }).messages
  estimateTokens(evicted)
  const turn: ReadonlyArray<Message> = [
    { role: "assistant", content: [{ type: "tool_use", id: "bench_new", name: "read", input: { path: "/new.ts" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "bench_new", content: "x".repeat(8000) }] }
  ]
  const grown = [...evicted, ...turn]
  group(`${name} (${messages.length} messages)`, () => {
    summary(() => {
      bench("baseline: visit every block", () => do_not_optimize(visitBlocks(messages))).baseline(true)
      bench("evict cold", () => do_not_optimize(evictStaleToolResults(messages, KEEP, { minSavings: 0 })))
      bench("evict warm (+1 turn)", () => do_not_optimize(evictStaleToolResults(grown, KEEP, { minSavings: 0 })))
      bench("HotPaths.fromMessages", () => do_not_optimize(HotPaths.fromMessages(evicted)))
    })
  })
}

await runBenchmarks()
