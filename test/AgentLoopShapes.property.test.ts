/**
 * Issue 38: compaction in the loops agents actually run. Generated sessions of four shapes go through `Conversation`
 * (offline extractive summarizer), each reply's usage being the size of the request it answered, at the default
 * policy and at a small one a user would set (compact at 20k, keep 4k), with thinking on and off:
 *
 * - one long request of ~300 tool steps;
 * - 5 requests of 60 tool steps each;
 * - 200 chatty exchanges (no tools);
 * - steps of 3–5 parallel calls.
 *
 * Every request must pass the independent checker (`fixtures/ApiRules.ts`), and once the session passed the trigger
 * (a reply reported a usage over it, or the trigger ran a compaction) no request may be larger than the trigger plus
 * the largest single step plus 10%.
 * The size of a request and of a step is measured here, independently of the library's estimate: a quarter of the
 * characters of their JSON.
 *
 * Also the regression of the issue: a 20-step loop under one request at `compactAtTokens: 5_000` compacts, and a
 * skip names its reason and the field that would change it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import type { CompactOutcome } from "../src/Compact.ts"
import { Conversation } from "../src/Conversation.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { CompactionPolicy, defaultPolicy } from "../src/Policy.ts"
import { type Outcome, requestSize, runShape, type Shape, SHAPES } from "./fixtures/AgentLoopShapes.ts"

const SMALL = CompactionPolicy.makeUnsafe({ compactAtTokens: 20_000, keepRecentTokens: 4_000 })
const POLICIES: ReadonlyArray<readonly [string, CompactionPolicy]> = [["defaults", defaultPolicy], ["20k/4k", SMALL]]
/** How many skips of each reason and field. */
const skipCounts = (skips: Outcome["skips"]): Record<string, number> => {
  const counts: Record<string, number> = {}
  for (const s of skips) counts[`${s.reason} (${s.field})`] = (counts[`${s.reason} (${s.field})`] ?? 0) + 1
  return counts
}

const Seed = Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 1_000_000 }))

describe("issue 38: the cut obeys the trigger in the loops agents run", () => {
  for (const shape of Object.keys(SHAPES) as ReadonlyArray<Shape>) {
    for (const [label, policy] of POLICIES) {
      for (const thinking of [false, true]) {
        it.effect.prop(
          `${shape}, ${label}, thinking ${thinking ? "on" : "off"}: valid requests, none over the bound`,
          [Seed],
          ([seed]) =>
            Effect.gen(function* () {
              const o = yield* runShape(shape, policy, thinking, seed)
              // the session reaches the trigger (or it proves nothing), and then compacts
              assert.isDefined(o.firstOver, `${shape} seed ${seed} never passed the trigger`)
              assert.isAbove(o.compactions, 0)
              const bound = (o.trigger + o.largestStep) * 1.1
              assert.isAtMost(
                o.peakAfter,
                bound,
                `${shape} ${label} seed ${seed}: peak ${o.peakAfter} over trigger ${o.trigger} + step ${o.largestStep}` +
                  ` + 10%; skips: ${JSON.stringify(skipCounts(o.skips))}`
              )
              // every skip names its reason and the setting that would change it
              for (const skip of o.skips) {
                assert.isString(skip.field)
                assert.isAbove(skip.detail.length, 0)
              }
            }),
          { timeout: 60_000, arbitrary: { runs: 1, maxShrinks: 0 } }
        )
      }
    }
  }
})

describe("issue 38: the regression", () => {
  it.effect("a 20-step loop under one request at compactAtTokens 5,000 compacts; a skip names its reason and field", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      yield* conversation.append({ role: "user", content: "fix the failing build" })
      const outcomes: Array<CompactOutcome> = []
      for (let step = 0; step < 20; step++) {
        const prepared = yield* conversation.prepare
        if (prepared.compaction !== undefined) outcomes.push(prepared.compaction)
        const size = requestSize(prepared.request)
        const call = `toolu_${step}`
        yield* conversation.recordReply(
          {
            role: "assistant",
            content: [{ type: "tool_use", id: call, name: "bash", input: { command: `step ${step}` } }]
          },
          { input_tokens: size, output_tokens: 20 }
        )
        yield* conversation.append({
          role: "user",
          content: [{ type: "tool_result", tool_use_id: call, content: `output ${step} `.repeat(200) }]
        })
      }
      assert.isTrue(outcomes.some((o) => o._tag === "Compacted"), outcomes.map((o) => o._tag).join(", "))
      // a compaction asked for right after another (whatever the first did with what the last steps added) finds too
      // little to free: it says why and what would change it
      yield* conversation.compact()
      const skip = (yield* conversation.compact()).outcome
      assert.strictEqual(skip._tag, "Skipped")
      if (skip._tag === "Skipped") {
        assert.oneOf(skip.reason, ["TooShort", "NothingToCut", "TooLittleFreed"])
        assert.oneOf(skip.field, ["maxTailTokens", "keepRecentTokens", "minFreedTokens", "minGrowthTokens"])
        assert.include(skip.detail, skip.field)
      }
    }).pipe(
      Effect.provide(
        Conversation.layerMemory({ policy: CompactionPolicy.makeUnsafe({ compactAtTokens: 5_000 }) }).pipe(
          Layer.provide(ExtractiveSummarizer.layer)
        )
      )
    ))
})
