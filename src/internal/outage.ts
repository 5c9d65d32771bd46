/**
 * Riding out a store's outage: every store call of one session log operation (an append's write, its catch-up reads,
 * its tries after a conflict) is retried on one schedule while its error `isRetryable` (a restarting or unreachable
 * database, a lost connection, `EAGAIN`), until one deadline for the whole operation; then it fails with
 * `Unavailable`, naming the last cause and how long it tried.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import { SessionLogError, withFields } from "./sessionLogError.ts"

/** The default deadline of one operation: a PostgreSQL restart (fast shutdown and start) fits in it. */
export const DEFAULT_RETRY_DEADLINE: Duration.Duration = Duration.seconds(30)

/** The first pause after a transient failure, and the longest one (the pauses double in between). */
const FIRST_PAUSE_MILLIS = 10
const LONGEST_PAUSE_MILLIS = 1_000

/**
 * The pause after the `attempt`-th transient failure (0 first): exponential from 10 ms to at most 1 s, drawn in
 * [half, whole] of that (jitter, so writers that failed together do not come back together), and never past `left`.
 */
export const outagePause = (attempt: number, left: number, random: number): number => {
  const ceiling = Math.min(FIRST_PAUSE_MILLIS * 2 ** Math.min(attempt, 20), LONGEST_PAUSE_MILLIS)
  return Math.max(0, Math.min(left, Math.round(ceiling * (0.5 + random / 2))))
}

/** One operation's budget: when it started and the deadline of its retries. */
export interface RetryBudget {
  readonly startedAt: number
  readonly deadlineMillis: number
}

/** A budget starting now. */
export const startBudget = (deadline: Duration.Duration): Effect.Effect<RetryBudget> =>
  Effect.map(Clock.currentTimeMillis, (startedAt) => ({ startedAt, deadlineMillis: Duration.toMillis(deadline) }))

/**
 * Runs `effect` (one store call of the operation `budget` belongs to), retrying it while it fails with a retryable
 * error and the budget's deadline has not passed; after the deadline, `Unavailable` with the last error as its cause.
 * Appends are retried with the same entry ids, so a retry of one that landed is answered `AlreadyWritten`.
 */
export const retryTransient = <A, R>(
  budget: RetryBudget,
  what: string,
  effect: Effect.Effect<A, SessionLogError, R>
): Effect.Effect<A, SessionLogError, R> =>
  // the first try runs as is: the loop is entered only after a retryable failure
  Effect.catch(effect, (error) => error.isRetryable ? retryAfter(budget, what, effect, error) : Effect.fail(error))

/**
 * `retryTransient` of one store write (`effect`, which writes the entries `tried`) with every error mapped by `name`
 * first (the session log names its session in them), then `andThen` applied to the value: one continuation for the
 * first try's two outcomes, not a `mapError`, a `catch` and a `flatMap` (this runs for every append). `andThen`'s own
 * failures are not retried. A failure of the write itself may come after the store wrote (an answer lost with its
 * connection, a failed fsync): it carries the ids of `tried` (`SessionLogError.entryIds`, `triedBy`).
 */
export const retryTransientThen = <A, B, R, R2>(
  budget: RetryBudget,
  what: string,
  effect: Effect.Effect<A, SessionLogError, R>,
  name: (error: SessionLogError) => SessionLogError,
  andThen: (value: A) => Effect.Effect<B, SessionLogError, R2>,
  tried: ReadonlyArray<{ readonly entryId: string }>
): Effect.Effect<B, SessionLogError, R | R2> =>
  Effect.matchEffect(effect, {
    onFailure: (raw) => {
      const error = name(raw)
      return error.isRetryable
        ? Effect.matchEffect(retryAfter(budget, what, Effect.mapError(effect, name), error), {
          onFailure: (last) => Effect.fail(triedBy(last, tried)),
          onSuccess: andThen
        })
        : Effect.fail(triedBy(error, tried))
    },
    onSuccess: andThen
  })

/**
 * `error`, the failure of a write whose outcome is unknown, naming the entries it tried (`entryIds`); its `cause` is
 * not enumerable, so it is passed on by name.
 */
export const triedBy = (error: SessionLogError, tried: ReadonlyArray<{ readonly entryId: string }>): SessionLogError =>
  withFields(error, { entryIds: tried.map((e) => e.entryId) })

/** The retries of `effect` after its first try failed with the retryable `first`. */
const retryAfter = <A, R>(
  budget: RetryBudget,
  what: string,
  effect: Effect.Effect<A, SessionLogError, R>,
  first: SessionLogError
): Effect.Effect<A, SessionLogError, R> =>
  Effect.gen(function* () {
    let error = first
    for (let attempt = 0;; attempt++) {
      const now = yield* Clock.currentTimeMillis
      const left = budget.startedAt + budget.deadlineMillis - now
      if (left <= 0) {
        const seconds = ((now - budget.startedAt) / 1000).toFixed(1)
        return yield* new SessionLogError({
          reason: "Unavailable",
          ...(error.sessionId === undefined ? {} : { sessionId: error.sessionId }),
          ...(error.code === undefined ? {} : { code: error.code }),
          detail: `${what}: the store stayed unavailable for ${seconds} s (${attempt + 1} tries, deadline ` +
            `${budget.deadlineMillis / 1000} s); last: ${error.detail}`,
          cause: error
        })
      }
      yield* Effect.sleep(outagePause(attempt, left, Math.random()))
      const result = yield* Effect.result(effect)
      if (Result.isSuccess(result)) return result.success
      error = result.failure
      if (!error.isRetryable) return yield* Effect.fail(error)
    }
  })

/** The longest pause after a conflict. */
const LONGEST_CONFLICT_PAUSE_MILLIS = 16

/**
 * The pause after the `attempt`-th conflict in a row (0 first): a random moment in [0, 2^attempt) ms, at most 16 ms.
 * The jitter keeps writers that lost together from colliding again in step; the low cap is for fairness: a writer
 * that lost must catch up before it tries again while the winner goes on at once, so a pause that grew with its
 * losses (as an outage's does) would hand the session to the winners and starve it.
 */
export const conflictPause = (attempt: number, random: number): number =>
  Math.floor(random * Math.min(2 ** Math.min(attempt, 10), LONGEST_CONFLICT_PAUSE_MILLIS))
