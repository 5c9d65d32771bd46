/**
 * A compaction checked with exact counts (a `TokenCounter` that answered `count_tokens`): the plan's
 * checks, made on estimates, take `minFreedTokens` in estimate units by the calibration of the count before, and the
 * finished compaction is kept only when the exact count of the view after it is `minFreedTokens` below the count
 * before. Without an exact count before, or after, the estimate decides, as without a counter.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import {
  type CompactionPlan,
  type CompactionSkip,
  type CompactOptions,
  CompactOutcome,
  finishCompaction,
  type FinishedCompaction,
  prepareCompaction
} from "../../Compact.ts"
import type { Message } from "../../Message.ts"
import type { CompactionPolicy } from "../../Policy.ts"
import type { Summary } from "../../Summarizer.ts"
import type { TokenCounter } from "../../TokenCounter.ts"
import { DEFAULT_MIN_FREED_TOKENS } from "../compactDefaults.ts"

/** The exact count's ratio to the estimate of the same request, when `count` is exact (and the estimate not 0). */
const ratioOf = (count: TokenCounter.Count | undefined): number | undefined =>
  count?.exact === true && count.estimate > 0 ? count.tokens / count.estimate : undefined

/**
 * `prepareCompaction`, with `minFreedTokens` converted to estimated tokens by the calibration of `before` when it is
 * exact (and that calibration its `tokensPerEstimate`, for `minGrowthTokens` at the trigger): the plan's checks (a
 * head too small to free it even with a free summary) are made on estimates.
 */
export const prepareCounted = <M extends Message>(
  messages: ReadonlyArray<M>,
  policy: CompactionPolicy,
  options: CompactOptions,
  before: TokenCounter.Count | undefined
): CompactionPlan<M> | CompactionSkip<M> => {
  const ratio = ratioOf(before)
  if (ratio === undefined) return prepareCompaction(messages, policy, options)
  const minFreedTokens = Math.ceil((options.minFreedTokens ?? DEFAULT_MIN_FREED_TOKENS) / ratio)
  return prepareCompaction(messages, policy, { ...options, minFreedTokens, tokensPerEstimate: ratio })
}

/**
 * `finishCompaction`, with `minFreedTokens` checked on exact counts when `before` is exact: the compaction is built
 * whatever the estimate says, `countAfter` counts the request after it, and it is `Skipped` (`TooLittleFreed`) when
 * it frees fewer than `minFreedTokens` (the caller's, in exact tokens). A count after that is not exact leaves the
 * plan's estimate check to decide.
 */
export const finishCounted = <M extends Message, E, R>(
  plan: CompactionPlan<M>,
  summary: Summary,
  before: TokenCounter.Count | undefined,
  minFreedTokens: number | undefined,
  countAfter: (candidate: FinishedCompaction<M>) => Effect.Effect<TokenCounter.Count | undefined, E, R>
): Effect.Effect<FinishedCompaction<M>, E, R> =>
  Effect.gen(function* () {
    if (ratioOf(before) === undefined) return finishCompaction(plan, summary)
    const candidate = finishCompaction({ ...plan, minFreedTokens: Number.NEGATIVE_INFINITY }, summary)
    const after = yield* countAfter(candidate)
    if (after?.exact !== true) return finishCompaction(plan, summary)
    // at the trigger the minimum is the policy's `minGrowthTokens`, in the API's tokens as the counts are (the plan
    // holds it taken to estimated tokens, and the setting itself beside it)
    const min = plan.minFreedField === "minGrowthTokens"
      ? Math.max(plan.minFreedSetting ?? plan.minFreedTokens, minFreedTokens ?? DEFAULT_MIN_FREED_TOKENS)
      : minFreedTokens ?? DEFAULT_MIN_FREED_TOKENS
    if (before!.tokens - after.tokens >= min) return candidate
    return {
      messages: plan.messages as Array<M>,
      outcome: CompactOutcome.Skipped({
        reason: "TooLittleFreed",
        tokens: plan.tokensBefore,
        field: plan.minFreedField ?? "minFreedTokens",
        detail: `the compaction would free ${before!.tokens - after.tokens} of ${before!.tokens} counted tokens, ` +
          `fewer than ${plan.minFreedField ?? "minFreedTokens"} (${min}): it would not pay for itself`
      })
    }
  })
