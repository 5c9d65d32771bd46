/**
 * Concept: the store contract, and the memory store.
 *
 * The storage seam of the session log: a store keeps, per session, an ordered list of entry lines (`StoredEntry`:
 * `seq` 1, 2, … and the line `SessionEntry.encodeEntry` wrote) and knows nothing of what they mean. Reads return the
 * entries after a sequence number; an append names the sequence number it expects to follow and answers `Appended`,
 * `AlreadyWritten` (the same entry ids are stored already: an idempotent retry) or `Conflict` (another writer was
 * first). `SessionLog` is written against this contract only; this module holds it and the memory store.
 *
 * @since 0.1.0
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import { SessionLogError } from "./internal/sessionLogError.ts"
import { tailOf } from "./internal/sessionTail.ts"
import { isSessionId, SESSION_ID, spanAttributes } from "./internal/storeSupport.ts"
import type { LoadIssue, StoredEntry } from "./SessionEntry.ts"

// ============================================================================
// The contract
// ============================================================================

/** One entry to append: its id (what makes a retry idempotent) and its line. @category models */
export interface NewEntry {
  /** The entry's id, unique in its session: an append of an id already stored writes nothing. */
  readonly entryId: string
  /** The encoded entry, as `SessionEntry.encodeEntry` wrote it. */
  readonly line: string
}

/**
 * What an append did. `Appended`: the entries now end the session at `seq`. `AlreadyWritten`: entries with these ids
 * were stored before (a retry of an append that landed), the last of them at `seq`; nothing was written. `Conflict`:
 * the session ends at `seq`, not at the expected sequence number; nothing was written.
 * @category models
 */
export type AppendResult =
  | { readonly _tag: "Appended"; readonly seq: number }
  | { readonly _tag: "AlreadyWritten"; readonly seq: number }
  | { readonly _tag: "Conflict"; readonly seq: number }

/** What a read returns: the entries in `seq` order, and what the store found on the way (a torn tail). @category models */
export interface ReadResult {
  /** The stored entries in `seq` order. */
  readonly entries: ReadonlyArray<StoredEntry>
  /**
   * What the read found and did not fail on (a torn tail: a torn last line, or the lines of an append whose later
   * lines are missing, none of which the entries hold); empty when nothing.
   */
  readonly issues: ReadonlyArray<LoadIssue>
}

/** Options of `SessionStoreShape.append`. @category models */
export interface AppendOptions {
  /**
   * Make the entries durable before answering (fsync for a file; a committed transaction always is), and every entry
   * acknowledged before them.
   */
  readonly durable?: boolean
  /**
   * The store may answer before the entries are written (ignored with `durable`). The JSONL store then queues their
   * lines and writes what was queued within a few milliseconds in one write, in order, and before any later
   * non-deferred append, read or close; a process that dies first loses them (never a line in part, never out of
   * order). A deferred write that fails leaves the writer failing every later call with that error. The memory and SQL
   * stores ignore it (their appends are written when they answer).
   */
  readonly defer?: boolean
  /**
   * The writer will not try this append again after a `Conflict` (a write conditional on the head its caller saw,
   * `WriteCondition.ifHead`): a store that queues contended appends (SQL) keeps no place for it, so the writers after
   * it do not wait for that place to lapse. The memory and JSONL stores ignore it.
   */
  readonly once?: boolean
}

/**
 * A session store. Every read of a session that does not exist fails with `NotFound` (an existing session may be
 * empty); `acquire` creates it.
 * @category services
 */
export interface SessionStoreShape {
  /** What the store is, for messages and spans: `memory`, `jsonl:<directory>` or `sql`. */
  readonly name: string
  /**
   * Opens a session for writing for the scope, creating it (empty) when missing. A store that allows one writer at a
   * time (the JSONL file) takes its lock here (`Locked` while another live process holds it) and cuts a torn tail (a
   * torn last line, or the lines of an append whose later lines are missing), which it reports in the returned issues.
   */
  readonly acquire: (sessionId: string) => Effect.Effect<ReadonlyArray<LoadIssue>, SessionLogError, Scope.Scope>
  /** The entries with `seq > afterSeq`, in order. `NotFound` when the session does not exist. */
  readonly read: (sessionId: string, afterSeq: number) => Effect.Effect<ReadResult, SessionLogError>
  /**
   * The entries of the log's tail, in order: from the first entry the last compaction boundary keeps (or the boundary
   * itself) to the end, found without reading the lines before it (the JSONL file from the offset its tail index
   * names, or walking back from its end when the index does not check out; SQL by an index of boundary rows). A hint
   * the reader checks: a tail that does not fold is read again in full. Optional: without it a tail open reads
   * everything and folds only the tail.
   */
  readonly readTail?: (sessionId: string) => Effect.Effect<ReadResult, SessionLogError>
  /**
   * Appends `entries` (all or none, also when the process dies during the write: a store that cannot write them at
   * once never reads a part of them, as the JSONL file tells one by the entries' `more`) right after `expectedSeq`, or
   * answers `AlreadyWritten` / `Conflict` without writing. The ids are checked before the sequence number, so a retry
   * of an append that landed is recognised even when others appended since. `NotFound` when the session does not
   * exist.
   */
  readonly append: (
    sessionId: string,
    expectedSeq: number,
    entries: ReadonlyArray<NewEntry>,
    options?: AppendOptions
  ) => Effect.Effect<AppendResult, SessionLogError>
  /** The ids of the stored sessions, sorted. */
  readonly list: Effect.Effect<ReadonlyArray<string>, SessionLogError>
}

const SessionStoreBase: Context.ServiceClass<SessionStore, "effect-compaction/SessionStore", SessionStoreShape> =
  Context.Service<SessionStore, SessionStoreShape>()("effect-compaction/SessionStore")

/** The store a `SessionLog` writes to. @category services */
export class SessionStore extends SessionStoreBase {
  /**
   * Sessions in memory, as entries (not file text). Pass a shared `sessions` map to reopen sessions after a
   * simulated restart, or to look at and change what is stored.
   */
  static readonly layerMemory = (sessions: MemorySessions = new Map()): Layer.Layer<SessionStore> =>
    Layer.succeed(SessionStore, makeMemoryStore(sessions))
}

// ============================================================================
// Session ids
// ============================================================================

/**
 * Checks a session id: 1–128 characters of `[A-Za-z0-9._-]`, starting with a letter or digit. So it has no path
 * separator and cannot be `.` or `..`: it never escapes a directory. Fails with `InvalidId`.
 * @category sessions
 */
export const validateSessionId = (sessionId: string): Effect.Effect<string, SessionLogError> =>
  SESSION_ID.test(sessionId) ? Effect.succeed(sessionId) : Effect.fail(
    new SessionLogError({
      reason: "InvalidId",
      detail: `session id ${JSON.stringify(sessionId)} must match ${SESSION_ID.source} (no path separators, no "..")`
    })
  )

/** The `NotFound` error of a session that does not exist in `store`. @category errors */
export const notFound = (sessionId: string, store: string): SessionLogError =>
  new SessionLogError({ reason: "NotFound", sessionId, detail: `no session ${sessionId} in ${store}` })

// ============================================================================
// The memory store
// ============================================================================

/**
 * One entry of a memory session: its `seq`, id and line. @category models
 */
export interface MemoryEntry extends StoredEntry {
  /** The id of the entry the line stores. */
  readonly entryId: string
}

/**
 * The memory store's contents: session id → its entries in order. A store indexes each session's entry ids (so an
 * append is O(1)), and indexes again when the array's length or last entry is no longer the one it indexed.
 * @category models
 */
export type MemorySessions = Map<string, Array<MemoryEntry>>

/** A memory session's entry ids → their `seq`, as of its `array`'s `length` and `last` entry. */
interface IdIndex {
  readonly array: Array<MemoryEntry>
  readonly seqs: Map<string, number>
  length: number
  last: MemoryEntry | undefined
}

const makeMemoryStore = (sessions: MemorySessions): SessionStoreShape => {
  const name = "memory"
  const indexes = new Map<string, IdIndex>()
  /** The id index of session `sessionId`'s `stored`, built again when the array changed other than by an append. */
  const indexOf = (sessionId: string, stored: Array<MemoryEntry>): IdIndex => {
    const known = indexes.get(sessionId)
    if (known?.array === stored && known.length === stored.length && known.last === stored.at(-1)) return known
    const index: IdIndex = {
      array: stored,
      seqs: new Map(stored.map((e) => [e.entryId, e.seq])),
      length: stored.length,
      last: stored.at(-1)
    }
    indexes.set(sessionId, index)
    return index
  }
  const existing = (sessionId: string) =>
    Effect.flatMap(validateSessionId(sessionId), () => {
      const entries = sessions.get(sessionId)
      return entries === undefined ? Effect.fail(notFound(sessionId, name)) : Effect.succeed(entries)
    })
  return {
    name,
    acquire: (sessionId) =>
      Effect.map(validateSessionId(sessionId), () => {
        if (!sessions.has(sessionId)) sessions.set(sessionId, [])
        return []
      }),
    read: (sessionId, afterSeq) =>
      existing(sessionId).pipe(
        Effect.map((entries) => ({
          // the entries are seq 1, 2, … in order unless a caller changed the array
          entries: entries[afterSeq]?.seq === afterSeq + 1 && entries.at(-1)?.seq === entries.length
            ? entries.slice(afterSeq)
            : entries.filter((e) => e.seq > afterSeq),
          issues: []
        })),
        Effect.tap(({ entries }) => Effect.annotateCurrentSpan("session.entries", entries.length)),
        Effect.withSpan("SessionStore.read", { attributes: spanAttributes(name, sessionId, { afterSeq }) })
      ),
    readTail: (sessionId) =>
      existing(sessionId).pipe(
        Effect.map((entries) => ({ entries: tailOf(entries), issues: [] })),
        Effect.withSpan("SessionStore.readTail", { attributes: spanAttributes(name, sessionId) })
      ),
    append: (sessionId, expectedSeq, entries) =>
      // a leaf span (nothing runs under it), ended with the append's exit: the same span as `withSpan`, without the
      // parent span and stack frame `withSpan` provides to the effect it wraps
      Effect.useSpan(
        "SessionStore.append",
        // `spanAttributes`'s members, written out (no spread per append)
        {
          attributes: {
            "session.store": name,
            "session.id": sessionId,
            expectedSeq,
            "session.entries": entries.length
          }
        },
        (): Effect.Effect<AppendResult, SessionLogError> => {
          const stored = isSessionId(sessionId) ? sessions.get(sessionId) : undefined
          if (stored === undefined) {
            return Effect.andThen(validateSessionId(sessionId), Effect.fail(notFound(sessionId, name)))
          }
          const index = indexOf(sessionId, stored)
          let written = 0
          for (const e of entries) written = Math.max(written, index.seqs.get(e.entryId) ?? 0)
          if (written > 0) return Effect.succeed({ _tag: "AlreadyWritten", seq: written })
          const last = index.last?.seq ?? 0
          if (last !== expectedSeq) return Effect.succeed({ _tag: "Conflict", seq: last })
          let n = 0
          for (const e of entries) {
            const entry = { seq: last + ++n, entryId: e.entryId, line: e.line }
            stored.push(entry)
            index.seqs.set(e.entryId, entry.seq)
            index.last = entry
          }
          index.length = stored.length
          return Effect.succeed({ _tag: "Appended", seq: last + n })
        }
      ),
    list: Effect.sync(() => [...sessions.keys()].sort())
  }
}
