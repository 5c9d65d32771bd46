/**
 * The outcome of a compaction says what happened: the cut (which messages left, which stayed) judged against the
 * views before and after, and its retention judged by the independent extractor (test/fixtures/Anchors.ts).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { compactContext, type CompactOutcome } from "../src/Compact.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { CATEGORIES } from "../src/Retention.ts"
import { REF_CATEGORIES, referenceAnchors, tallyRetention } from "./fixtures/Anchors.ts"
import { checkApiRules, formatApiViolations } from "./fixtures/ApiRules.ts"
import { generateSession } from "./fixtures/Conversation.ts"

const policy = CompactionPolicy.makeUnsafe({
  keepRecentTokens: 2_000,
  keepRecentTurns: 2,
  contextWindow: 50_000,
  minRemaining: 5_000
})

const compacted = (outcome: CompactOutcome) => {
  assert.isTrue(outcome._tag === "Compacted" || outcome._tag === "FellBack", `expected a compaction: ${outcome._tag}`)
  return outcome as Extract<CompactOutcome, { _tag: "Compacted" | "FellBack" }>
}

const assertApiValid = (view: ReadonlyArray<unknown>, where: string) => {
  const violations = checkApiRules(view as never)
  assert.strictEqual(violations.length, 0, `${where}: ${formatApiViolations(violations)}`)
}

describe("the outcome of a compaction", () => {
  it.effect("reports the cut (which left, which stayed) and the retention of the removed span", () =>
    Effect.gen(function* () {
      for (const seed of [1, 2, 3]) {
        const before = generateSession(seed, { messages: 60, maxOutput: 3_000 })
        const { messages: after, outcome } = yield* compactContext(before, policy, { minFreedTokens: 1 })
        const info = compacted(outcome)
        const { removed, kept } = info.cut
        assert.strictEqual(removed.from, 0)
        assert.strictEqual(removed.to, kept.from)
        assert.strictEqual(kept.to, before.length)
        assert.isAbove(removed.to, 0)
        // judged on the views: every kept message is in the new view, in order, after the summary; no removed
        // message other than a system message is
        const tail = after.slice(1)
        assert.deepStrictEqual(tail, before.slice(kept.from), `seed ${seed}: the new view is summary + kept`)
        for (const m of before.slice(0, removed.to)) {
          if (m.role !== "system") assert.isFalse(after.includes(m), `seed ${seed}: a removed message stayed`)
        }
        // the retention agrees with the independent extractor over the same span, view and tail
        const reference = tallyRetention(referenceAnchors(before.slice(0, removed.to)), after, tail)
        assert.deepStrictEqual(CATEGORIES, REF_CATEGORIES)
        for (const c of REF_CATEGORIES) {
          const got = info.retention.categories[c]
          assert.deepStrictEqual(
            { counted: got.counted, present: got.present, inTail: got.inTail },
            reference[c],
            `seed ${seed}, ${c}`
          )
        }
        assertApiValid(after, `seed ${seed}`)
      }
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))
})
