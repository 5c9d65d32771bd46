/**
 * Issue 38's agent-loop shapes (one long request of ~300 tool steps, 5 requests × 60 steps, 200 chatty exchanges,
 * steps of 3–5 parallel calls; `test/fixtures/AgentLoopShapes.ts`).
 *
 * First, outside the timed region, each shape is driven through `Conversation` at the defaults and at compact-at-20k
 * / keep-4k (offline extractive summarizer, each reply's usage the size of the request it answered) and its figures
 * are printed: the peak request after the trigger first fired, the bound (trigger + largest step + 10%), the
 * compactions and the skips by reason and field (COMPACTION.md, "The cut obeys the trigger").
 *
 * Then the timed rows: for each shape, the view of the first request past 60k tokens (taken from a run that never
 * compacts), and on it `planForPolicy` and `prepareCompaction` at the trigger, per policy: what the step that
 * compacts pays before the summarizer.
 * Run: npx node --expose-gc bench/shapes.bench.ts
 */
import { Effect } from "effect"
import { bench, do_not_optimize, summary } from "mitata"
import { prepareCompaction } from "../src/Compact.ts"
import { planForPolicy } from "../src/Cut.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy, defaultPolicy } from "../src/Policy.ts"
import { runShape, type Shape, SHAPES } from "../test/fixtures/AgentLoopShapes.ts"
import { runBenchmarks } from "./util.ts"

const SEED = 38
const SMALL = CompactionPolicy.makeUnsafe({ compactAtTokens: 20_000, keepRecentTokens: 4_000 })
const POLICIES: ReadonlyArray<readonly [string, CompactionPolicy]> = [["defaults", defaultPolicy], ["20k/4k", SMALL]]
const NEVER = CompactionPolicy.makeUnsafe({ compactAtTokens: 180_000, keepRecentTokens: 20_000 })
const shapes = Object.keys(SHAPES) as ReadonlyArray<Shape>

const rows: Array<string> = [
  "| shape | policy | peak after the trigger | bound | compactions | skips |",
  "| --- | --- | ---: | ---: | ---: | --- |"
]
for (const shape of shapes) {
  for (const [label, policy] of POLICIES) {
    const o = Effect.runSync(runShape(shape, policy, true, SEED))
    const skips: Record<string, number> = {}
    for (const s of o.skips) skips[`${s.reason} (${s.field})`] = (skips[`${s.reason} (${s.field})`] ?? 0) + 1
    const bound = Math.round((o.trigger + o.largestStep) * 1.1)
    rows.push(
      `| ${shape} | ${label} | ${(o.peakAfter / 1000).toFixed(1)}k | ${(bound / 1000).toFixed(1)}k | ` +
        `${o.compactions} | ${Object.entries(skips).map(([k, n]) => `${k} ${n}`).join(", ") || "none"} |`
    )
  }
}
console.log(rows.join("\n"))

const views = new Map<Shape, ReadonlyArray<Message>>(
  shapes.map((shape) => {
    const o = Effect.runSync(runShape(shape, NEVER, true, SEED, 60_000))
    return [shape, (o.captured ?? []) as unknown as ReadonlyArray<Message>]
  })
)

for (const [label, policy] of POLICIES) {
  summary(() => {
    for (const shape of shapes) {
      const view = views.get(shape)!
      bench(`planForPolicy ${label} [${shape}]`, () => do_not_optimize(planForPolicy(view, policy)))
      bench(
        `prepareCompaction ${label} [${shape}]`,
        () => do_not_optimize(prepareCompaction(view, policy, { trigger: 60_000 })._tag)
      )
    }
  })
}

await runBenchmarks()
