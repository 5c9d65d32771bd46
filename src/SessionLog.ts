/**
 * The cold layer: an append-only session log, and a resume that rebuilds the same view.
 *
 * A session is a list of entries (see `SessionEntry`): `message` (one message, stored as it was given), `eviction`
 * (tool results replaced by their offload pointers) and `compaction` (a summary that replaces every view message
 * before the first kept entry; when the caller repaired the kept messages, it stores them too). The view an agent
 * sends to the model is *derived* from the entries by a pure fold; the live service keeps the same fold up to date as
 * entries are written, so the view a resumed session rebuilds is the view the live session had, byte for byte. Every
 * stored line carries a checksum, and every compaction the hash of the view it produced; loading checks both.
 *
 * The service never knows the backend: it writes through a `SessionStore` (memory, the JSONL file, or SQL), appending
 * at the sequence number it has folded up to. When another worker was first it catches up with the entries written
 * since and tries again (bounded), so appends from many workers stay ordered and are never lost or doubled.
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import type * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import type * as Path from "effect/Path"
import * as Result from "effect/Result"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as Semaphore from "effect/Semaphore"
import type * as SqlClient from "effect/sql/SqlClient"
import { randomUUID } from "node:crypto"
import { type Message, validateMessage } from "./Message.ts"
import {
  applyStored,
  type CompactionEntry,
  CURRENT_VERSION,
  encodeEntry,
  type Entry,
  Eviction,
  type EvictionEntry,
  type KeptMessages,
  type LiveView,
  type Loaded,
  type LoadIssue,
  type LoadOptions,
  loadStored,
  type MessageEntry,
  SessionLogError,
  type Snapshot,
  StepMeta,
  viewHash
} from "./SessionEntry.ts"
import { type MemorySessions, SessionStore, type SessionStoreShape, validateSessionId } from "./SessionStore.ts"
import { SessionStoreJsonl } from "./SessionStoreJsonl.ts"
import { SessionStoreSql } from "./SessionStoreSql.ts"
import { estimateTokens } from "./Tokens.ts"

export {
  canonicalJson,
  CompactionEntry,
  CURRENT_VERSION,
  Entry,
  Eviction,
  EvictionEntry,
  type HashMismatch,
  KeptMessages,
  type Loaded,
  type LoadIssue,
  type LoadOptions,
  MessageEntry,
  rebuildView,
  SessionLogError,
  SessionLogErrorReason,
  type Snapshot,
  StepMeta,
  viewHash
} from "./SessionEntry.ts"
export { type MemorySessions as MemoryStore, validateSessionId } from "./SessionStore.ts"
export { listSessions, readJsonl } from "./SessionStoreJsonl.ts"

/**
 * How a store operation is retried when it fails: up to 5 retries, exponential from 10 ms, and only while the error
 * `isRetryable`. Appends are retried with the same entry ids, so a retry of an append that landed is recognised.
 * @category retry
 */
export const retryPolicy: Schedule.Schedule<unknown, SessionLogError> = Schedule.exponential("10 millis").pipe(
  Schedule.upTo({ times: 5 }),
  Schedule.setInputType<SessionLogError>(),
  Schedule.while(({ input }) => input.isRetryable)
)

/** How many times a write is tried again after a `Conflict` (each time after catching up) before failing. @category models */
export const MAX_CONFLICT_RETRIES = 100

/** Appends that found another writer first (each one is followed by a catch-up and a retry). @category metrics */
export const conflictCounter: Metric.Counter<number> = Metric.counter("effect_compaction.session_log.conflicts", {
  description: "appends answered Conflict by the store",
  incremental: true
})

/** Appends the store answered `AlreadyWritten` (a retried append that had landed). @category metrics */
export const alreadyWrittenCounter: Metric.Counter<number> = Metric.counter(
  "effect_compaction.session_log.already_written",
  { description: "appends answered AlreadyWritten by the store", incremental: true }
)

// ============================================================================
// The service
// ============================================================================

/** What `recordCompaction` needs. @category models */
export interface CompactionInput {
  /** The summary message that replaces `snapshot.view[0, cut)` (with `kept`: the message heading the new view). */
  readonly summary: Message
  /** The snapshot that was summarized (from `SessionLog.snapshot`). Entries appended since are kept. */
  readonly snapshot: Snapshot
  /** How many messages of `snapshot.view` the summary replaces (0 ≤ cut ≤ snapshot.view.length). */
  readonly cut: number
  /** The name of the summarizer that wrote `summary`. */
  readonly summarizer: string
  /** Default: `estimateTokens` of the view before the boundary. */
  readonly tokensBefore?: number
  /** Default: `estimateTokens` of the view after the boundary. */
  readonly tokensAfter?: number
  readonly turnsSummarized?: number
  /**
   * The messages that follow `summary` in place of `snapshot.view.slice(cut)`, when the caller changed them (a
   * `repair` that answered an aborted tool call or merged messages). They are stored in the entry only when they
   * differ from `snapshot.view.slice(cut)` (the same messages, by identity or by their JSON, store ids only), so a
   * resume rebuilds them; entries appended after the snapshot still follow them. Fails with `Conflict` when an
   * eviction changed `snapshot.view.slice(cut)` since the snapshot (it would be undone).
   */
  readonly kept?: ReadonlyArray<Message>
  /**
   * The view the caller goes on with, built from `snapshot` (`[summary, ...snapshot.view.slice(cut)]`, or
   * `[summary, ...kept]`). When given, the boundary is written only if the log rebuilds exactly that (same
   * `viewHash`); otherwise nothing is written and it fails with `HashMismatch`. A safety net: a caller that changed the
   * kept messages without passing them as `kept` would otherwise diverge on resume.
   */
  readonly expectedView?: ReadonlyArray<Message>
}

/** Options of `SessionLogShape.append`. @category models */
export interface AppendOptions {
  /**
   * The step metadata of each message (`meta[i]` for `messages[i]`; `undefined`: none), stored in its entry and
   * returned by `load` in `entries`, never in the view. At most one per message; each a JSON object.
   */
  readonly meta?: ReadonlyArray<StepMeta | undefined>
}

/** The service over one session. @category services */
export interface SessionLogShape {
  readonly sessionId: string
  /**
   * Appends each message as one entry, in order, after every entry already written, with its step metadata when
   * given. Returns their entry ids.
   */
  readonly append: (
    messages: ReadonlyArray<Message>,
    options?: AppendOptions
  ) => Effect.Effect<ReadonlyArray<string>, SessionLogError>
  /** Records offloaded tool results (`block` must be a tool_result for `toolUseId`). */
  readonly recordEviction: (evictions: ReadonlyArray<Eviction>) => Effect.Effect<EvictionEntry, SessionLogError>
  /**
   * Records a compaction boundary as one atomic entry. Fails with `Conflict` when another compaction was recorded
   * since `input.snapshot` was taken (by this or another worker; nothing is written), and `InvalidInput` for a bad
   * summary or cut.
   */
  readonly recordCompaction: (input: CompactionInput) => Effect.Effect<CompactionEntry, SessionLogError>
  /** The live view with its entry ids: the fold of every entry this worker has written or caught up with. */
  readonly snapshot: Effect.Effect<Snapshot>
  /**
   * The live fold as `load` returns it (every entry, the view, `seq`), without reading the store again: what a resume
   * starts from. `issues` are what opening found (`recovered`).
   */
  readonly loaded: Effect.Effect<Loaded>
  /**
   * Reads only the entries other workers wrote since this worker's last write or catch-up, folds them into the live
   * view, and returns it. Checks them like `load`.
   */
  readonly catchUp: Effect.Effect<Snapshot, SessionLogError>
  /**
   * Reads the stored log again and rebuilds the view, checking every line's checksum, the parent chain and every
   * compaction's hash. Fails with `Corrupt`, `HashMismatch` or `FutureVersion`, naming the line; with
   * `{ repair: true }` corrupt lines are skipped and mismatched hashes accepted, each reported in `issues` (a future
   * version still fails). A torn last line is always reported and skipped.
   */
  readonly load: (options?: LoadOptions) => Effect.Effect<Loaded, SessionLogError>
  /** What opening the session found and fixed (a torn last line, which the writer cuts off before appending). */
  readonly recovered: ReadonlyArray<LoadIssue>
}

/** When the writer makes entries durable (fsync for a file): after compactions (default), after every append, or never. @category models */
export type SyncMode = "compaction" | "always" | "never"

/** Options of `SessionLog.layerJsonl`. @category models */
export interface JsonlOptions extends SessionLogOptions {
  /** The directory holding `<sessionId>.jsonl` (created with mode 0700 if missing). */
  readonly directory: string
}

/** Options of `SessionLog.layer`. @category models */
export interface SessionLogOptions {
  readonly sessionId: string
  /** Open a damaged log anyway, from what decodes (see `load`). Default false: damage fails the layer. */
  readonly repair?: boolean
  /** When to make entries durable. Default `"compaction"`. */
  readonly sync?: SyncMode
}

const isStepMeta = Schema.is(StepMeta)

const invalid = (sessionId: string, detail: string) =>
  new SessionLogError({ reason: "InvalidInput", sessionId, detail })

const withSession = (sessionId: string) => (e: SessionLogError): SessionLogError =>
  e.sessionId === undefined ? new SessionLogError({ ...e, sessionId }) : e

/** What a write builds from the live view: the entries to append and what the caller gets once they are stored. */
interface Built<A> {
  readonly entries: ReadonlyArray<Entry>
  readonly value: (stored: ReadonlyArray<Entry>) => A
}

/** True when both lists hold equal messages: the same objects or the same JSON. */
const equalMessages = (a: ReadonlyArray<Message>, b: ReadonlyArray<Message>): boolean =>
  a.length === b.length && a.every((m, i) => m === b[i] || JSON.stringify(m) === JSON.stringify(b[i]))

/** A closed log's fold and the stored lines it folded (`lines[i]` is `seq` i + 1). */
interface Fold {
  readonly lines: ReadonlyArray<string>
  readonly live: LiveView
}

/** How many closed sessions' folds each store keeps for the next open (the most recently closed ones). */
const FOLDS_PER_STORE = 16

/**
 * The folds of recently closed sessions, per store object. Folding is a pure function of the stored lines, so a fold
 * is reused only when the session's stored lines start with exactly the lines it folded; then only the lines after
 * them are decoded and checked. Anything else (a changed byte, a rewritten log) folds from scratch.
 */
const closedFolds = new WeakMap<SessionStoreShape, Map<string, Fold>>()

const keepFold = (store: SessionStoreShape, sessionId: string, fold: Fold): void => {
  let folds = closedFolds.get(store)
  if (folds === undefined) closedFolds.set(store, folds = new Map())
  folds.delete(sessionId)
  folds.set(sessionId, fold)
  if (folds.size > FOLDS_PER_STORE) folds.delete(folds.keys().next().value!)
}

/** The fold of `stored`: a kept fold of a prefix of them caught up with the rest, or a fold from scratch. */
const openFold = (
  store: SessionStoreShape,
  sessionId: string,
  stored: ReadonlyArray<{ readonly seq: number; readonly line: string }>,
  options: LoadOptions
) => {
  const kept = options.repair === true ? undefined : closedFolds.get(store)?.get(sessionId)
  const reusable = kept !== undefined && kept.lines.length <= stored.length &&
    kept.lines.every((line, i) => stored[i]!.seq === i + 1 && stored[i]!.line === line)
  if (!reusable) return Result.map(loadStored(stored, options), ({ live, loaded }) => ({ live, issues: loaded.issues }))
  const live = kept.live.clone()
  return Result.map(applyStored(live, stored.slice(kept.lines.length)), ({ issues }) => ({ live, issues }))
}

const makeSessionLog = Effect.fnUntraced(function* (store: SessionStoreShape, options: SessionLogOptions) {
  const sessionId = yield* validateSessionId(options.sessionId)
  const sync = options.sync ?? "compaction"
  const recoveredByStore = yield* store.acquire(sessionId).pipe(Effect.mapError(withSession(sessionId)))
  const read = (afterSeq: number) => store.read(sessionId, afterSeq).pipe(Effect.mapError(withSession(sessionId)))
  const initial = yield* read(0)
  const repair = options.repair === true
  const opened = yield* Effect.fromResult(openFold(store, sessionId, initial.entries, repair ? { repair } : {}))
    .pipe(Effect.mapError(withSession(sessionId)))
  const live: LiveView = opened.live
  const recovered: ReadonlyArray<LoadIssue> = [...recoveredByStore, ...initial.issues, ...opened.issues]
  // the stored lines `live` has folded, in order; kept with the fold when the log closes (not after a repair, whose
  // fold skipped lines, nor after a failed catch-up, which may have folded part of what it read)
  const lines: Array<string> = initial.entries.map((e) => e.line)
  let keepable = !repair
  yield* Effect.addFinalizer(() =>
    Effect.sync(() => {
      if (keepable && lines.length === live.seq) keepFold(store, sessionId, { lines: [...lines], live: live.clone() })
    })
  )
  const lock = yield* Semaphore.make(1)
  const serialized = <A>(effect: Effect.Effect<A, SessionLogError>) => Semaphore.withPermits(lock, 1, effect)

  /** Folds the entries other workers wrote since `live.seq`; returns them. */
  const catchUpNow = Effect.flatMap(
    Effect.suspend(() => read(live.seq)),
    (r) =>
      Effect.fromResult(applyStored(live, r.entries)).pipe(
        Effect.map((applied) => {
          for (const e of r.entries) lines.push(e.line)
          return applied.entries
        }),
        Effect.tapError(() => Effect.sync(() => void (keepable = false))),
        Effect.mapError(withSession(sessionId))
      )
  )

  const header = (id: string, parentId: string | null) =>
    Effect.map(Clock.currentTimeMillis, (timestamp) => ({ v: CURRENT_VERSION, id, parentId, timestamp }))

  /**
   * Builds the entries from the live view and appends them at `live.seq`. `Conflict`: catch up, wait a random moment
   * (up to 2^attempt ms, at most 200 ms) and build again (the same entry ids), at most `MAX_CONFLICT_RETRIES` times. `AlreadyWritten`: a retried append had landed; catch up.
   * Uninterruptible, so the live view never misses an entry that reached the store.
   */
  const commit = <A>(durable: boolean, build: () => Effect.Effect<Built<A>, SessionLogError>) =>
    Effect.uninterruptible(Effect.gen(function* () {
      for (let attempt = 0; attempt <= MAX_CONFLICT_RETRIES; attempt++) {
        const built = yield* build()
        const encoded = built.entries.map((e) => ({ entryId: e.id, line: encodeEntry(e) }))
        const result = yield* store.append(sessionId, live.seq, encoded, { durable }).pipe(
          Effect.retry(retryPolicy),
          Effect.mapError(withSession(sessionId))
        )
        if (result._tag === "Appended" && result.seq === live.seq + encoded.length) {
          for (const entry of built.entries) live.apply(entry)
          for (const e of encoded) lines.push(e.line)
          live.seq = result.seq
          return built.value(built.entries)
        }
        if (result._tag === "Conflict") yield* Metric.update(conflictCounter, 1)
        if (result._tag === "AlreadyWritten") yield* Metric.update(alreadyWrittenCounter, 1)
        const others = yield* catchUpNow
        if (result._tag !== "Conflict") {
          const ids = new Set(built.entries.map((e) => e.id))
          return built.value(others.filter((e) => ids.has(e.id)))
        }
        // writers that lost together should not collide again in step: a short random pause, growing
        yield* Effect.sleep(Math.floor(Math.random() * Math.min(2 ** attempt, 200)))
      }
      return yield* new SessionLogError({
        reason: "Conflict",
        sessionId,
        detail: `other writers were first ${MAX_CONFLICT_RETRIES + 1} times in a row; try again later`
      })
    }))

  const append = (messages: ReadonlyArray<Message>, appendOptions: AppendOptions = {}) =>
    serialized(Effect.gen(function* () {
      for (let i = 0; i < messages.length; i++) {
        const error = validateMessage(messages[i], i)
        if (error !== undefined) return yield* invalid(sessionId, error.message)
      }
      const meta = appendOptions.meta ?? []
      if (meta.length > messages.length) {
        return yield* invalid(sessionId, `${meta.length} step metadata for ${messages.length} messages`)
      }
      for (let i = 0; i < meta.length; i++) {
        if (meta[i] !== undefined && !isStepMeta(meta[i])) {
          return yield* invalid(
            sessionId,
            `meta ${i}: step metadata must be a JSON object (finite numbers, no undefined)`
          )
        }
      }
      if (messages.length === 0) return []
      const ids = messages.map(() => randomUUID() as string)
      return yield* commit(sync === "always", () =>
        Effect.gen(function* () {
          const entries: Array<MessageEntry> = []
          for (let i = 0; i < messages.length; i++) {
            const h = yield* header(ids[i]!, entries.at(-1)?.id ?? live.head)
            const m = meta[i]
            entries.push({ ...h, type: "message", message: messages[i]!, ...(m === undefined ? {} : { meta: m }) })
          }
          return { entries, value: () => ids }
        }))
    })).pipe(
      Effect.withSpan("SessionLog.append", {
        attributes: { "session.id": sessionId, "session.entries": messages.length }
      })
    )

  const recordEviction = (evictions: ReadonlyArray<Eviction>) =>
    serialized(Effect.gen(function* () {
      for (const e of evictions) {
        if (!Schema.is(Eviction)(e) || e.block.tool_use_id !== e.toolUseId) {
          return yield* invalid(sessionId, `eviction of ${e.toolUseId}: block must be a tool_result for that id`)
        }
      }
      const id = randomUUID() as string
      return yield* commit(sync === "always", () =>
        Effect.map(header(id, live.head), (h): Built<EvictionEntry> => {
          const entry: EvictionEntry = { ...h, type: "eviction", evictions }
          return { entries: [entry], value: (stored) => (stored[0] as EvictionEntry | undefined) ?? entry }
        }))
    })).pipe(Effect.withSpan("SessionLog.recordEviction", {
      attributes: { "session.id": sessionId, "session.evictions": evictions.length }
    }))

  /** The compaction entry for `input` against the live view, or why it cannot be written. */
  const buildCompaction = (input: CompactionInput, id: string) =>
    Effect.gen(function* () {
      const { cut, snapshot } = input
      // the snapshot must still be a prefix of the live view: only appends and evictions may have happened since
      const items = live.items
      const stale = snapshot.entryIds.length > items.length ||
        snapshot.entryIds.some((entryId, i) => items[i]!.entryId !== entryId)
      if (stale) {
        return yield* new SessionLogError({
          reason: "Conflict",
          sessionId,
          detail: "another compaction was recorded after this snapshot was taken; summarize the new view"
        })
      }
      const firstKept = items[cut]?.entryId ?? null
      const before = live.view()
      const end = snapshot.entryIds.length
      // no copy without a reason: kept messages equal to the snapshot's are stored as ids only
      const keptGiven = input.kept !== undefined && !equalMessages(input.kept, snapshot.view.slice(cut))
        ? input.kept
        : undefined
      let kept: KeptMessages | undefined = undefined
      if (keptGiven !== undefined) {
        if (viewHash(before.slice(cut, end)) !== viewHash(snapshot.view.slice(cut))) {
          return yield* new SessionLogError({
            reason: "Conflict",
            sessionId,
            detail: "an eviction changed the kept messages after this snapshot was taken; compact the new view"
          })
        }
        kept = { through: snapshot.entryIds.at(-1) ?? null, messages: [...keptGiven] }
      }
      const after = kept === undefined
        ? [input.summary, ...before.slice(cut)]
        : [input.summary, ...kept.messages, ...before.slice(end)]
      const afterHash = viewHash(after)
      if (input.expectedView !== undefined) {
        const expected = viewHash(input.expectedView)
        // the caller's view is `after` itself unless messages were appended since the snapshot
        const compared = 1 + (kept === undefined ? end - cut : kept.messages.length)
        const actual = compared === after.length ? afterHash : viewHash(after.slice(0, compared))
        if (expected !== actual) {
          return yield* new SessionLogError({
            reason: "HashMismatch",
            sessionId,
            detail: `the caller's view (${expected}) is not the view the log rebuilds (${actual}): ` +
              "the kept messages were changed, so the boundary was not written"
          })
        }
      }
      const entry: CompactionEntry = {
        ...(yield* header(id, live.head)),
        type: "compaction",
        summary: input.summary,
        firstKeptEntryId: firstKept,
        tokensBefore: input.tokensBefore ?? estimateTokens(before),
        tokensAfter: input.tokensAfter ?? estimateTokens(after),
        summarizer: input.summarizer,
        ...(input.turnsSummarized === undefined ? {} : { turnsSummarized: input.turnsSummarized }),
        ...(kept === undefined ? {} : { kept }),
        viewHash: afterHash
      }
      return {
        entries: [entry],
        value: (stored: ReadonlyArray<Entry>) => (stored[0] as CompactionEntry | undefined) ?? entry
      }
    })

  const recordCompaction = (input: CompactionInput) =>
    serialized(Effect.gen(function* () {
      const summaryError = validateMessage(input.summary, 0)
      if (summaryError !== undefined) return yield* invalid(sessionId, `summary: ${summaryError.message}`)
      const { cut, snapshot } = input
      if (!Number.isInteger(cut) || cut < 0 || cut > snapshot.view.length) {
        return yield* invalid(sessionId, `cut ${cut} is outside the snapshot's view (0..${snapshot.view.length})`)
      }
      for (let i = 0; i < (input.kept ?? []).length; i++) {
        const error = validateMessage(input.kept![i], i)
        if (error !== undefined) return yield* invalid(sessionId, `kept: ${error.message}`)
      }
      const id = randomUUID() as string
      return yield* commit(sync !== "never", () => buildCompaction(input, id))
    })).pipe(Effect.withSpan("SessionLog.recordCompaction", {
      attributes: { "session.id": sessionId, "session.cut": input.cut }
    }))

  const load = (loadOptions: LoadOptions = {}) =>
    Effect.flatMap(read(0), (r) =>
      Effect.fromResult(loadStored(r.entries, loadOptions, r.issues)).pipe(
        Effect.map((l) => l.loaded),
        Effect.mapError(withSession(sessionId))
      )).pipe(
        Effect.tap((l) => Effect.annotateCurrentSpan("session.entries", l.entries.length)),
        Effect.withSpan("SessionLog.load", { attributes: { "session.id": sessionId } })
      )

  const catchUp = serialized(catchUpNow).pipe(
    Effect.tap((entries) => Effect.annotateCurrentSpan("session.entries", entries.length)),
    Effect.map(() => live.snapshot()),
    Effect.withSpan("SessionLog.catchUp", { attributes: { "session.id": sessionId } })
  )

  return SessionLog.of({
    sessionId,
    append,
    recordEviction,
    recordCompaction,
    snapshot: Effect.sync(() => live.snapshot()),
    loaded: Effect.sync(() => live.loaded(recovered)),
    catchUp,
    load,
    recovered
  })
})

const SessionLogBase: Context.ServiceClass<SessionLog, "effect-compaction/SessionLog", SessionLogShape> = Context
  .Service<SessionLog, SessionLogShape>()("effect-compaction/SessionLog")

/** The service over one session. @category services */
export class SessionLog extends SessionLogBase {
  /**
   * The log of `options.sessionId` on the `SessionStore` in the context. Opening creates the session when missing,
   * takes what the store needs for writing (the JSONL lock), and rebuilds the live view (failing on damage unless
   * `repair`); closing the scope releases it.
   */
  static readonly layer = (options: SessionLogOptions): Layer.Layer<SessionLog, SessionLogError, SessionStore> =>
    Layer.effect(
      SessionLog,
      Effect.gen(function* () {
        return yield* makeSessionLog(yield* SessionStore, options)
      })
    )

  /**
   * An in-memory log (tests): entries in a `SessionStore.layerMemory`. Pass a shared `store` to reopen a session after
   * a simulated restart, or to have several logs (workers) over one session.
   */
  static readonly layerMemory = (
    options: { readonly sessionId?: string; readonly store?: MemorySessions; readonly repair?: boolean } = {}
  ): Layer.Layer<SessionLog, SessionLogError> =>
    SessionLog.layer({
      sessionId: options.sessionId ?? "memory",
      ...(options.repair === undefined ? {} : { repair: options.repair }),
      sync: "never"
    }).pipe(Layer.provide(SessionStore.layerMemory(options.store)))

  /**
   * The embedded default: `<directory>/<sessionId>.jsonl`, created with mode 0600 (see `SessionStoreJsonl`). Opening
   * takes the session's lock (`Locked` if a live process holds it) and cuts off a torn last line.
   */
  static readonly layerJsonl = (
    options: JsonlOptions
  ): Layer.Layer<SessionLog, SessionLogError, FileSystem.FileSystem | Path.Path> =>
    SessionLog.layer(options).pipe(Layer.provide(SessionStoreJsonl.layer({ directory: options.directory })))

  /**
   * The log in a SQL database through `effect/sql`'s `SqlClient` (PostgreSQL; see `SessionStoreSql`). The tables must
   * exist: run `SessionStoreSql.layerMigrations` once (a deploy step), or use `SessionLog.layerPg`.
   */
  static readonly layerSql = (
    options: SessionLogOptions
  ): Layer.Layer<SessionLog, SessionLogError, SqlClient.SqlClient> =>
    SessionLog.layer(options).pipe(Layer.provide(SessionStoreSql.layer))

  /** The log in PostgreSQL at `url`, with the migrations run first (see `SessionStoreSql.layerPg`). */
  static readonly layerPg = (
    options: SessionLogOptions & { readonly url: string }
  ): Layer.Layer<SessionLog, SessionLogError> =>
    SessionLog.layer(options).pipe(Layer.provide(SessionStoreSql.layerPg({ url: options.url })))
}

/**
 * Reads a stored session from the `SessionStore` in the context without opening it for writing (no lock, nothing
 * changed). The same checks as `SessionLog.load`; `NotFound` when the session does not exist.
 * @category sessions
 */
export const readSession = (
  sessionId: string,
  options: LoadOptions = {}
): Effect.Effect<Loaded, SessionLogError, SessionStore> =>
  Effect.gen(function* () {
    const store = yield* SessionStore
    const r = yield* store.read(yield* validateSessionId(sessionId), 0)
    return yield* Effect.fromResult(Result.map(loadStored(r.entries, options, r.issues), (l) => l.loaded))
  }).pipe(
    Effect.mapError(withSession(sessionId)),
    Effect.withSpan("SessionLog.readSession", { attributes: { "session.id": sessionId } })
  )
