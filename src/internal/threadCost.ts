/**
 * What restarting a server-held thread costs, for eviction's rent-or-buy rule and for batching
 * offloads with compactions. A rewrite of the view (an offload, a compaction) cannot go on the thread: the next
 * request starts a new one and uploads the whole view, where a `continue` uploads only the new messages.
 *
 * The model, in the unit of the cache prices (an uncached input token), with assumed defaults (no price or latency
 * of a thread is documented):
 * - `perViewToken` (default 0.1): each view token a restart uploads again, priced like one more cache read of it
 *   (the bytes go over the wire again, about 4 a token, and the server parses them again);
 * - `perRestart` (default 1,000): the first request's added latency on a new thread, as a fixed number of input
 *   tokens;
 * - `margin` (default 0.2): an offload whose view would still be within this fraction of the compaction trigger is
 *   deferred to that compaction, so one restart covers both (the offload cannot avert the compaction).
 * A restart is priced only while the next request would continue a thread: when it starts a new one anyway (after a
 * refusal, a fallback reply, a cut stream), a rewrite costs no extra restart.
 *
 * @internal
 */

/** The restart model's three figures (see the module doc). */
export interface ThreadRestartPrice {
  readonly perViewToken: number
  readonly perRestart: number
  readonly margin: number
}

/** The assumed defaults of the restart model (see the module doc). */
export const DEFAULT_THREAD_RESTART: ThreadRestartPrice = Object.freeze({
  perViewToken: 0.1,
  perRestart: 1_000,
  margin: 0.2
})

/** The option as callers give it: any figure may be left out (its default), `false` prices no restart at all. */
export type ThreadRestartOption = Partial<{ readonly [K in keyof ThreadRestartPrice]: number | undefined }> | false

/** The model of an option: its figures over the defaults, or `undefined` for `false` (no restart priced). */
export const threadRestartOf = (option: ThreadRestartOption | undefined): ThreadRestartPrice | undefined =>
  option === false ? undefined : {
    perViewToken: option?.perViewToken ?? DEFAULT_THREAD_RESTART.perViewToken,
    perRestart: option?.perRestart ?? DEFAULT_THREAD_RESTART.perRestart,
    margin: option?.margin ?? DEFAULT_THREAD_RESTART.margin
  }

/** What restarting a thread whose view holds `viewTokens` tokens costs, in uncached input tokens. */
export const restartCost = (price: ThreadRestartPrice, viewTokens: number): number =>
  price.perViewToken * viewTokens + price.perRestart

/**
 * Whether an offload that leaves the context at `contextAfter` tokens waits for the compaction the trigger
 * (`trigger` tokens) will soon fire: the context stays within `margin` of it, so the compaction comes anyway and
 * one restart covers both.
 */
export const defersToCompaction = (price: ThreadRestartPrice, contextAfter: number, trigger: number): boolean =>
  price.margin > 0 && contextAfter >= (1 - price.margin) * trigger
