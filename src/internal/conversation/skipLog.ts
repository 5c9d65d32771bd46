/**
 * The log line of a compaction the trigger asked for and that did not run: once at info level when the reason (or
 * the field it names) changes, at debug level while the same skip repeats, so a long agent loop says why it is not
 * compacting without saying it on every step.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type { CompactOutcome } from "../../Compact.ts"

/**
 * Logs `outcome` when it is `Skipped` (info when its reason and field differ from `previous`, debug otherwise) and
 * returns the key to pass as `previous` next time: the skip's, or `undefined` after a pass that compacted (or none).
 */
export const logSkip = (
  outcome: CompactOutcome | undefined,
  previous: string | undefined
): Effect.Effect<string | undefined> => {
  if (outcome === undefined) return Effect.succeed(previous)
  if (outcome._tag !== "Skipped") return Effect.succeed(undefined)
  const key = `${outcome.reason}:${outcome.field}`
  const line = `effect-compaction: compaction skipped (${outcome.reason}; ${outcome.field}): ${outcome.detail}`
  const annotations = { reason: outcome.reason, field: outcome.field, tokens: outcome.tokens }
  return (key === previous ? Effect.logDebug(line, annotations) : Effect.logInfo(line, annotations)).pipe(
    Effect.as(key)
  )
}
