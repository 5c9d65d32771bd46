/**
 * Opening a stored session: its tail (`sessionTail`) or every line, through a store's reads, with the fall back to a
 * full read when a tail does not fold.
 */
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import { type Loaded, type LoadOptions, loadStored, type StoredEntry } from "../SessionEntry.ts"
import type { ReadResult, SessionStoreShape } from "../SessionStore.ts"
import type { SessionLogError } from "./sessionLogError.ts"
import { loadTail, tailOf } from "./sessionTail.ts"
import type { LiveView } from "./sessionEntry.ts"

/** A loaded session, its live fold and the stored entries it folded (the tail, or every entry). */
export interface Opened {
  readonly loaded: Loaded
  readonly live: LiveView
  readonly stored: ReadonlyArray<StoredEntry>
}

/**
 * Reads and folds a stored session: its tail with `options.tail` (the store's `readTail`, or a full read cut to its
 * tail), read again in full when the tail does not fold; every line otherwise (and always with `repair`).
 */
export const openSession = (
  store: SessionStoreShape,
  sessionId: string,
  options: LoadOptions = {}
): Effect.Effect<Opened, SessionLogError> => {
  const full = (r: ReadResult) =>
    Effect.map(
      Effect.fromResult(loadStored(r.entries, options.repair === true ? { repair: true } : {}, r.issues)),
      ({ live, loaded }): Opened => ({ loaded, live, stored: r.entries })
    )
  if (options.tail !== true || options.repair === true) return Effect.flatMap(store.read(sessionId, 0), full)
  const readTail = store.readTail === undefined
    ? Effect.map(store.read(sessionId, 0), (r): ReadResult => ({ entries: tailOf(r.entries), issues: r.issues }))
    : store.readTail(sessionId)
  return Effect.flatMap(readTail, (r) => {
    const folded = loadTail(r.entries, r.issues)
    return Result.isSuccess(folded)
      ? Effect.succeed({ ...folded.success, stored: r.entries })
      : Effect.flatMap(store.read(sessionId, 0), full)
  })
}
