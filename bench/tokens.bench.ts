/**
 * The token estimator on the real sessions and on generated sessions of 1k, 10k and 50k messages.
 * - cold: every message estimated from scratch (no cache);
 * - warm: `estimateTokens` on a session whose messages were estimated before, plus one new message;
 * - floor: a bare loop that sums the string lengths of every text field (the least any estimator can do).
 * Run: npx node --expose-gc bench/tokens.bench.ts
 */
import { bench, do_not_optimize, group, summary } from "mitata"
import type { Message } from "../src/Message.ts"
import { estimateTokens, jsonSize } from "../src/Tokens.ts"
import { corpus } from "../test/fixtures/Corpus.ts"
import { generateSession } from "../test/fixtures/Conversation.ts"
import { coldEstimate, sumStringLengths } from "./baselines.ts"
import { runBenchmarks } from "./util.ts"

const sessions: Array<readonly [string, ReadonlyArray<Message>]> = [
  ...corpus().map((s) => [s.name, s.messages] as const),
  ...[1_000, 10_000, 50_000].map((n) => [`generated-${n / 1000}k`, generateSession(n, { messages: n })] as const)
]

for (const [name, messages] of sessions) {
  estimateTokens(messages) // fill the cache: warm runs measure the appended-message path
  const next: Message = { role: "user", content: "and one more question about the build" }
  const grown = [...messages, next]
  group(`${name} (${messages.length} messages)`, () => {
    summary(() => {
      bench("floor: sum string lengths", () => do_not_optimize(sumStringLengths(messages))).baseline(true)
      bench("estimate cold (no cache)", () => do_not_optimize(coldEstimate(messages)))
      bench("estimate warm (+1 message)", () => do_not_optimize(estimateTokens(grown)))
    })
  })
}

const inputs = generateSession(3, { messages: 5_000 }).flatMap((m) =>
  typeof m.content === "string"
    ? []
    : m.content.flatMap((b) => b.type === "tool_use" ? [(b as { input: unknown }).input] : [])
)
group(`tool input JSON size (${inputs.length} inputs)`, () => {
  summary(() => {
    bench("JSON.stringify(input).length", () => {
      let n = 0
      for (const input of inputs) n += JSON.stringify(input).length
      return do_not_optimize(n)
    }).baseline(true)
    bench("jsonSize(input)", () => {
      let n = 0
      for (const input of inputs) n += jsonSize(input)
      return do_not_optimize(n)
    })
  })
})

await runBenchmarks()
