/**
 * Eviction against the AI SDK's `pruneMessages` on the issue's workload (the largest real session repeated 10 times,
 * ~9.6k messages) and on generated sessions of 1k, 10k and 50k messages. Every row is a mitata median of this run:
 * - prune: `pruneMessages` deleting tool parts before the last 40 messages (the same session in the AI SDK's format);
 * - cold: `evictStaleToolResults` (keepRecent 20, `minSavings` 0) on a session nothing was offloaded from, as new
 *   objects per sample (messages and blocks, estimated before as a live loop has), so no cache of ours has seen them,
 *   and moved out of the young generation before the call (`aged`), as a live session's messages are;
 * - warm: one new turn (a read and its 8,000-character result) on an already-evicted session, decided on the carried
 *   index as `Conversation`'s prepare does (`warmEviction`);
 * - hot paths: `HotPaths.fromMessages` on the evicted session (what a resumed session pays once), and the same with
 *   the copying tracker `HotPaths` was before its state became persistent maps (`test/fixtures/HotPathsReference.ts`).
 * Every workload is evicted and pruned a few times, untimed, before the first measurement.
 * Then one step of the hot-path tracker (a reply that reads a new file and its result) on a tracker that has seen 100
 * and 10,000 distinct files, persistent against copying: observed in one call, and one call per message as
 * `Conversation` does.
 * Run: npx node --expose-gc bench/evict.bench.ts
 */
import { do_not_optimize } from "mitata"
import { evictStaleToolResults } from "../src/Evict.ts"
import { HotPaths } from "../src/HotPaths.ts"
import type { Message } from "../src/Message.ts"
import { CopyingHotPaths } from "../test/fixtures/HotPathsReference.ts"
import { filesRead, hotPathStep, perSample, perSampleOptions, repeatedRealSession } from "./baselines.ts"
import {
  freshForEviction,
  GENERATED_SIZES,
  KEEP_RECENT_TOOL_RESULTS,
  peers,
  type PreparedSession,
  prepareSession,
  prepareWorkload,
  warmEviction
} from "./peers/adapters.ts"
import { aged, duration, p50 } from "./util.ts"

const sessions: ReadonlyArray<PreparedSession> = [
  prepareSession("real session ×10", repeatedRealSession(10)),
  ...GENERATED_SIZES.map((n) => prepareWorkload(n).sessions[0]!)
]

const lines = [
  "| workload | messages | `pruneMessages` | cold | cold / prune | warm (+1 turn) | warm / prune | `HotPaths.fromMessages` | copying | copying / persistent |",
  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
]
/** One eviction of every kind on every workload, untimed: the first timed workload would otherwise pay the JIT's tiers. */
for (const s of sessions) {
  for (let i = 0; i < 5; i++) {
    peers.aiPrune(s)
    evictStaleToolResults(freshForEviction(s.messages), KEEP_RECENT_TOOL_RESULTS, { minSavings: 0 })
  }
}

for (const s of sessions) {
  const messages = s.messages
  const prune = await p50(() => do_not_optimize(peers.aiPrune(s)))
  const cold = await p50(
    perSample(
      () => aged(freshForEviction(messages)),
      (m) => evictStaleToolResults(m, KEEP_RECENT_TOOL_RESULTS, { minSavings: 0 })
    ),
    perSampleOptions(messages.length > 20_000 ? 20 : 60)
  )
  const warm = warmEviction(messages)
  const warmNs = await p50(perSample(warm.input, warm.evict), perSampleOptions(1000))
  const evicted = evictStaleToolResults(messages, KEEP_RECENT_TOOL_RESULTS, { minSavings: 0 }).messages
  const hot = await p50(() => do_not_optimize(HotPaths.fromMessages(evicted)))
  const copying = await p50(() => do_not_optimize(CopyingHotPaths.fromMessages(evicted)))
  lines.push(
    `| ${s.name} | ${messages.length.toLocaleString("en")} | ${duration(prune)} | ${duration(cold)} | ${
      (cold / prune).toFixed(2)
    } | ${duration(warmNs)} | ${(warmNs / prune).toFixed(3)} | ${duration(hot)} | ${duration(copying)} | ${
      (copying / hot).toFixed(2)
    } |`
  )
}
console.log(lines.join("\n"))

// ============================================================================
// One hot-path step against the files seen
// ============================================================================

interface Tracker {
  observe(messages: ReadonlyArray<Message>): Tracker
}

const step = hotPathStep
const stepRows = [
  "| files seen | observed | copying | persistent | copying / persistent |",
  "| ---: | --- | ---: | ---: | ---: |"
]
const measured: Record<string, { readonly copying: number; readonly persistent: number }> = {}
for (const files of [100, 10_000]) {
  const seen = filesRead(files)
  const copyingTracker: Tracker = CopyingHotPaths.fromMessages(seen)
  const persistentTracker: Tracker = HotPaths.fromMessages(seen)
  for (
    const [observed, run] of [
      ["in one call", (t: Tracker) => t.observe(step)],
      ["per message", (t: Tracker) => t.observe([step[0]]).observe([step[1]])]
    ] as const
  ) {
    const copying = await p50(() => do_not_optimize(run(copyingTracker)))
    const persistent = await p50(() => do_not_optimize(run(persistentTracker)))
    measured[`${files} ${observed}`] = { copying, persistent }
    stepRows.push(
      `| ${files.toLocaleString("en")} | ${observed} | ${duration(copying)} | ${duration(persistent)} | ${
        (copying / persistent).toFixed(1)
      } |`
    )
  }
}
console.log(`\n${stepRows.join("\n")}`)
for (const observed of ["in one call", "per message"]) {
  const [small, large] = [measured[`100 ${observed}`]!, measured[`10000 ${observed}`]!]
  console.log(
    `step ${observed}, 10,000 files / 100 files: persistent ${(large.persistent / small.persistent).toFixed(2)}, ` +
      `copying ${(large.copying / small.copying).toFixed(1)}`
  )
}
