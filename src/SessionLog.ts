/**
 * Concept: the session log service, append-only, over a `SessionStore`.
 *
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
 * since and tries again (bounded), so appends from many workers stay ordered and are never lost or doubled. A write
 * that names the head its caller saw (`WriteCondition.ifHead`, what a `Conversation` passes) is not tried again: it
 * fails with `Conflict` once the log is past that head, so a writer that keeps state derived from the log never
 * writes after entries it has not seen.
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as Semaphore from "effect/Semaphore"
import { randomUUID } from "node:crypto"
import {
  type AppendOptions,
  type CompactionInput,
  type EvictionOptions,
  SessionLog as SessionLogService,
  type WriteCondition
} from "./internal/sessionLogContract.ts"
import {
  conflictPause,
  DEFAULT_RETRY_DEADLINE,
  type RetryBudget,
  retryTransient,
  retryTransientThen,
  startBudget,
  triedBy
} from "./internal/outage.ts"
import { SessionLogError, withFields } from "./internal/sessionLogError.ts"
import { openSession } from "./internal/sessionOpen.ts"
import { removalRecord } from "./internal/removed.ts"
import { type Message, validateMessage } from "./Message.ts"
import * as SessionEntry from "./internal/sessionEntry.ts"
import { encodeEntry, loadStored } from "./SessionEntry.ts"
import * as Store from "./SessionStore.ts"
import { SessionStore, type SessionStoreShape } from "./SessionStore.ts"
import { estimateTokens } from "./Tokens.ts"
import {
  applyStored,
  type KeptMessages as KeptPart,
  type LiveView,
  sameMessage,
  viewHash as hashOfView
} from "./internal/sessionEntry.ts"

export type {
  AppendOptions,
  CompactionInput,
  EvictionOptions,
  SessionLogShape,
  WriteCondition
} from "./internal/sessionLogContract.ts"
export { SessionLogError, SessionLogErrorReason } from "./internal/sessionLogError.ts"

// ============================================================================
// Helpers and metrics
// ============================================================================

/** The id of the last compaction entry of `entries` (the summary heading the view), or `undefined`. */
const lastCompactionId = (entries: ReadonlyArray<SessionEntry.Entry>): string | undefined => {
  for (let i = entries.length - 1; i >= 0; i--) if (entries[i]!.type === "compaction") return entries[i]!.id
  return undefined
}

/** The trace options of the spans made at each eviction: no stack trace captured (an `Error` per call). */
const NO_STACK = { captureStackTrace: false } as const

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

/**
 * What an acknowledged write survives (the JSONL store; SQL commits every write before answering, so every mode is
 * `"always"` there):
 *
 * - `"compaction"` (default): every entry is written to the file before it is acknowledged, so it survives the
 *   process dying; a compaction is fsynced with everything before it, so it survives the machine failing.
 * - `"always"`: every entry is written and fsynced before it is acknowledged.
 * - `"never"`: every entry is written before it is acknowledged; nothing is fsynced.
 * - `"deferred"`: appends and evictions are acknowledged once queued, and what was queued within a few milliseconds
 *   is written in one write (a logged step then costs no file write of its own); a compaction is written and fsynced
 *   with everything before it; what is queued is written before the log reads and when it closes. A process that dies loses
 *   the entries acknowledged in its last few milliseconds, never a part of a line and never one out of order: the
 *   file is always a prefix of what was acknowledged. A queued write that fails (a full disk) fails every later
 *   operation of the log, naming the lines lost; reopen the session.
 *
 * In every mode the file holds whole lines in acknowledged order, and an append of several entries (a compaction with
 * its offloads, several messages) is whole or absent: a torn tail (a write cut short by a crash: a torn last line, or
 * the lines of an append whose later lines are missing) is never read as part of the log, and is cut off when the
 * session is next opened for writing. A write that is not deferred (up to 1 MiB) is one synchronous write to the page
 * cache, so the event loop waits for it (microseconds; the fsync stays asynchronous).
 * @category models
 */
export type SyncMode = "compaction" | "always" | "never" | "deferred"

/** Options of `SessionLog.layer`. @category models */
export interface SessionLogOptions {
  /** The session to open: the store's key for its entries (`<sessionId>.jsonl` in the JSONL store). */
  readonly sessionId: string
  /** Open a damaged log anyway, from what decodes (see `load`). Default false: damage fails the layer. */
  readonly repair?: boolean
  /** When entries are written and made durable (see `SyncMode`). Default `"compaction"`. */
  readonly sync?: SyncMode
  /**
   * Where the fold is kept when the log closes, and looked up when it opens: a resume of the same session then
   * decodes only the lines written since (see `ClosedFolds`). Default none: every open folds every line.
   */
  readonly closedFolds?: ClosedFolds
  /**
   * Open from the log's tail (see `LoadOptions.tail`): read and check only the entries from the last compaction
   * boundary's first kept one on, so `loaded.entries` starts there (`loaded.verifiedFrom`). The live view, entry ids,
   * head and `seq` are the full fold's, and a `Conversation` resumes from the checkpoint of the last boundary. Default
   * true, unless `closedFolds` is given (its kept fold makes a full open cheap). `false`: every line is read and
   * checked (a full verification, what the CLI's `inspect` does, and what a caller that needs `loaded.entries` from
   * the first entry asks for). Ignored with `repair`.
   */
  readonly tail?: boolean
  /**
   * How long one operation (opening, an append with its catch-up reads and its tries after conflicts, a catch-up)
   * keeps going through transient store failures (a database shutting down, starting up or unreachable, a lost
   * connection, `EAGAIN`) and conflicts before it fails: with `Unavailable` (naming the last cause) or `Conflict`.
   * Retries pause 10 ms to 1 s, doubling, with jitter. Default 30 s.
   */
  readonly retryDeadline?: Duration.Input
}

/**
 * A closed log's fold and the stored lines it folded (`lines[i]` is `seq` i + 1). @category models
 */
export interface ClosedFold {
  /** The stored lines, in order. */
  readonly lines: ReadonlyArray<string>
  /** Their fold: the view and what a writer needs to go on. */
  readonly live: LiveView
}

/**
 * How many closed sessions' folds a `ClosedFolds` keeps by default (the most recently closed ones). @category models
 */
const DEFAULT_CLOSED_FOLDS = 16

/**
 * The folds of recently closed sessions, kept for the next open of the same session: a resume reuses one instead of
 * decoding and checking every line again. Folding is a pure function of the stored lines, so a fold is reused only
 * when the session's stored lines start with exactly the lines it folded; then only the lines after them are decoded
 * and checked. Anything else (a changed byte, a rewritten log) folds from scratch. Pass one to the logs of one store
 * (`SessionLogOptions.closedFolds`); `SessionLog.layerMemory` makes one per call.
 * @category models
 */
export class ClosedFolds {
  private readonly folds = new Map<string, ClosedFold>()
  /** How many folds it keeps. */
  readonly capacity: number

  /** Keeps at most `capacity` folds; default 16. */
  constructor(capacity: number = DEFAULT_CLOSED_FOLDS) {
    this.capacity = capacity
  }

  /** Keeps the fold of a closing session, dropping the least recently closed one beyond `capacity`. */
  keep(sessionId: string, fold: ClosedFold): void {
    this.folds.delete(sessionId)
    this.folds.set(sessionId, fold)
    if (this.folds.size > this.capacity) this.folds.delete(this.folds.keys().next().value!)
  }

  /** The kept fold of `sessionId`, if any. */
  get(sessionId: string): ClosedFold | undefined {
    return this.folds.get(sessionId)
  }
}

const isStepMetaSchema = Schema.is(SessionEntry.StepMeta)

/**
 * True when `u` is JSON built of plain objects, arrays and JSON leaves (finite numbers), at most `depth` levels deep:
 * what the step metadata of a message almost always is, checked without the schema's parser. False only means "not
 * sure" (a deep value, a cycle, a class instance…): the schema decides then.
 */
const isPlainJson = (u: unknown, depth: number): boolean => {
  if (u === null || typeof u === "string" || typeof u === "boolean") return true
  if (typeof u === "number") return Number.isFinite(u)
  if (typeof u !== "object" || depth === 0) return false
  if (Array.isArray(u)) {
    for (let i = 0; i < u.length; i++) if (!isPlainJson(u[i], depth - 1)) return false
    return true
  }
  const prototype = Object.getPrototypeOf(u)
  if (prototype !== Object.prototype && prototype !== null) return false
  for (const key in u) {
    if (Object.hasOwn(u, key) && !isPlainJson((u as Record<string, unknown>)[key], depth - 1)) return false
  }
  return true
}

/** True when `u` is step metadata (a JSON object): the plain case checked directly, any other by `StepMeta`. */
const isStepMeta = (u: unknown): boolean =>
  (u !== null && typeof u === "object" && !Array.isArray(u) && isPlainJson(u, 32)) || isStepMetaSchema(u)

const isEviction = Schema.is(SessionEntry.Eviction)

const invalid = (sessionId: string, detail: string) =>
  new SessionLogError({ reason: "InvalidInput", sessionId, detail })

/** Why `meta` (named `name` in the error) is not step metadata, or `undefined` when it is one or absent. */
const metaProblem = (sessionId: string, name: string, meta: unknown): SessionLogError | undefined =>
  meta === undefined || isStepMeta(meta)
    ? undefined
    : invalid(sessionId, `${name}: step metadata must be a JSON object (finite numbers, no undefined)`)

/** `e` naming `sessionId` when it names no session. */
const withSession = (sessionId: string) => (e: SessionLogError): SessionLogError =>
  e.sessionId === undefined ? withFields(e, { sessionId }) : e

/**
 * What a write derives from the live view: the entries to append, how the live fold takes them once stored, and what
 * the caller gets.
 */
interface PendingWrite<A> {
  readonly entries: ReadonlyArray<SessionEntry.Entry>
  readonly fold: (live: LiveView) => void
  readonly value: (stored: ReadonlyArray<SessionEntry.Entry>) => A
}

const foldEach = (entries: ReadonlyArray<SessionEntry.Entry>) => (live: LiveView) => {
  for (const entry of entries) live.apply(entry)
}

/** `pending` with `entry` after its entries: written in the same store append, folded after them. */
const followedBy = <A>(pending: PendingWrite<A>, entry: SessionEntry.Entry): PendingWrite<A> => ({
  entries: [...pending.entries, entry],
  fold: (live) => {
    pending.fold(live)
    live.apply(entry)
  },
  value: pending.value
})

/** The fold of `stored`: a kept fold of a prefix of them caught up with the rest, or a fold from scratch. */
const openFold = (
  closedFolds: ClosedFolds | undefined,
  sessionId: string,
  stored: ReadonlyArray<SessionEntry.StoredEntry>,
  options: SessionEntry.LoadOptions
) => {
  const kept = options.repair === true ? undefined : closedFolds?.get(sessionId)
  const reusable = kept !== undefined && kept.lines.length <= stored.length &&
    kept.lines.every((line, i) => stored[i]!.seq === i + 1 && stored[i]!.line === line)
  if (!reusable) return Result.map(loadStored(stored, options), ({ live, loaded }) => ({ live, issues: loaded.issues }))
  const live = kept.live.clone()
  return Result.map(applyStored(live, stored.slice(kept.lines.length)), ({ issues }) => ({ live, issues }))
}

/** True when `view` after its first message holds the messages of `snapshot.view` from `cut` on (identity or JSON). */
const keepsSnapshotTail = (view: ReadonlyArray<Message>, snapshot: SessionEntry.Snapshot, cut: number): boolean =>
  view.length - 1 === snapshot.view.length - cut &&
  snapshot.view.every((message, i) => i < cut || sameMessage(view[i - cut + 1]!, message))

const makeSessionLog = Effect.fnUntraced(function* (store: SessionStoreShape, options: SessionLogOptions) {
  const sessionId = yield* Store.validateSessionId(options.sessionId)
  const sync = options.sync ?? "compaction"
  /** How an append's or an eviction's entries are written (`SyncMode`). */
  const entryWrite: Store.AppendOptions = { durable: sync === "always", defer: sync === "deferred" }
  /** How a compaction's entry is written. */
  const compactionWrite: Store.AppendOptions = { durable: sync !== "never" }
  /** `how`, for a write that is not tried again after a `Conflict` (`ifHead`): the store keeps no place for it. */
  const entryWriteOnce: Store.AppendOptions = { ...entryWrite, once: true }
  const compactionWriteOnce: Store.AppendOptions = { ...compactionWrite, once: true }
  const deadline = options.retryDeadline === undefined
    ? DEFAULT_RETRY_DEADLINE
    : Duration.fromInputUnsafe(options.retryDeadline)
  const deadlineMillis = Duration.toMillis(deadline)
  /** A store error named with this session (a store may leave the session out). */
  const named = withSession(sessionId)
  /** `effect` (one store call) retried through an outage, within the budget of the operation it belongs to. */
  const ridden = <A, R>(budget: RetryBudget, what: string, effect: Effect.Effect<A, SessionLogError, R>) =>
    retryTransient(budget, what, Effect.mapError(effect, named))
  const opening = yield* startBudget(deadline)
  const recoveredByStore = yield* ridden(opening, "open", store.acquire(sessionId))
  const read = (budget: RetryBudget, afterSeq: number) => ridden(budget, "read", store.read(sessionId, afterSeq))
  const repair = options.repair === true
  const fromTail = (options.tail ?? options.closedFolds === undefined) && !repair
  const opened = fromTail
    ? yield* ridden(opening, "open", openSession(store, sessionId, { tail: true })).pipe(
      Effect.map((o) => ({ live: o.live, stored: o.stored, issues: o.loaded.issues }))
    )
    : yield* Effect.flatMap(read(opening, 0), (initial) =>
      Effect.fromResult(
        Result.map(
          openFold(options.closedFolds, sessionId, initial.entries, repair ? { repair } : {}),
          (o) => ({
            live: o.live,
            stored: initial.entries,
            issues: [...initial.issues, ...o.issues]
          })
        )
      ).pipe(Effect.mapError(withSession(sessionId))))
  const live: LiveView = opened.live
  // opened from its tail, the log keeps no more than it read: each boundary drops the entries before it
  if (fromTail) live.forgetHistory()
  const recovered: ReadonlyArray<SessionEntry.LoadIssue> = [...recoveredByStore, ...opened.issues]
  // with `closedFolds` only: the stored lines `live` has folded, in order; kept with the fold when the log closes (not
  // after a repair, whose fold skipped lines, nor after a failed catch-up, which may have folded part of what it read;
  // a tail's lines do not start at the first one, so they never match a whole log). Without it nothing keeps them:
  // the log's memory follows its view, not its history.
  const closedFolds = options.closedFolds
  const lines: Array<string> = closedFolds === undefined ? [] : opened.stored.map((e) => e.line)
  const keepLines = (more: ReadonlyArray<{ readonly line: string }>) => {
    if (closedFolds !== undefined) { for (const { line } of more) lines.push(line) }
  }
  let keepable = !repair
  if (closedFolds !== undefined) {
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        if (keepable && lines.length === live.seq) {
          closedFolds.keep(sessionId, { lines: [...lines], live: live.clone() })
        }
      })
    )
  }
  const lock = yield* Semaphore.make(1)
  const serialized = <A>(effect: Effect.Effect<A, SessionLogError>) => Semaphore.withPermits(lock, 1, effect)

  /** Folds the entries other workers wrote since `live.seq`; returns them. */
  const catchUpNow = (budget: RetryBudget) =>
    Effect.flatMap(
      Effect.suspend(() => read(budget, live.seq)),
      (r) =>
        Effect.fromResult(applyStored(live, r.entries)).pipe(
          Effect.map((applied) => {
            keepLines(r.entries)
            return applied.entries
          }),
          Effect.tapError(() => Effect.sync(() => void (keepable = false))),
          Effect.mapError(withSession(sessionId))
        )
    )

  /**
   * The `Conflict` of a conditional write whose caller has not seen the log's head (another writer appended since),
   * or `undefined` when the head is the one it saw, or it named none (`WriteCondition.ifHead`).
   */
  const headMoved = (ifHead: string | null | undefined): SessionLogError | undefined =>
    ifHead === undefined || live.head === ifHead ? undefined : new SessionLogError({
      reason: "Conflict",
      sessionId,
      detail: `another writer appended to the session since this writer's last step (it last saw ` +
        `${ifHead === null ? "an empty session" : `entry ${ifHead}`}; the log has folded up to entry ${live.head} ` +
        `since); nothing was written: reopening continues from the log, with every writer's entries`
    })

  const header = (id: string, parentId: string | null, timestamp: number) => ({
    v: SessionEntry.CURRENT_VERSION,
    id,
    parentId,
    timestamp
  })

  /**
   * The eviction entry recording `evictions` (its own, or the offloads applied with a compaction), with the step
   * metadata `meta` when given.
   */
  const evictionEntry = (
    id: string,
    parentId: string | null,
    timestamp: number,
    evictions: ReadonlyArray<SessionEntry.Eviction>,
    meta?: SessionEntry.StepMeta | undefined
  ): SessionEntry.EvictionEntry =>
    meta === undefined
      ? { ...header(id, parentId, timestamp), type: "eviction", evictions }
      : { ...header(id, parentId, timestamp), type: "eviction", evictions, meta }

  /** What is wrong with `evictions`, if anything: each block must be a `tool_result` for its tool use id. */
  const evictionProblem = (evictions: ReadonlyArray<SessionEntry.Eviction>): SessionLogError | undefined => {
    for (const e of evictions) {
      if (!isEviction(e) || e.block.tool_use_id !== e.toolUseId) {
        return invalid(sessionId, `eviction of ${e.toolUseId}: block must be a tool_result for that id`)
      }
    }
    return undefined
  }

  /**
   * Derives the entries from the live view (`derive`, given the time of the try) and appends them at `live.seq`,
   * every store call retried through an outage within one deadline (`retryDeadline`). `Conflict`: catch up, wait a
   * random moment (`conflictPause`) and derive again (the same entry ids), until the deadline; a conditional write
   * (`ifHead`) fails with `Conflict` instead, once caught up, when the head moved. `AlreadyWritten`: a retried append
   * had landed; catch up. Uninterruptible, so the live view never misses an entry that reached the store. A first try
   * that lands runs no more than its store call (the common case: one writer) and, with `ifHead`, one comparison. A
   * store call that fails for good (past the deadline, or with an error not worth retrying) may have written: its
   * failure names the entries it tried (`SessionLogError.entryIds`), which the live view has not folded.
   */
  const appendDerived = <A>(
    how: Store.AppendOptions,
    ifHead: string | null | undefined,
    derive: (timestamp: number) => PendingWrite<A> | SessionLogError
  ) =>
    Effect.uninterruptible(
      Clock.clockWith((clock) => appendFrom(clock.currentTimeMillisUnsafe(), how, ifHead, derive))
    )

  /** `appendDerived` started at `startedAt` (the caller read the clock, uninterruptible). */
  const appendFrom = <A>(
    startedAt: number,
    how: Store.AppendOptions,
    ifHead: string | null | undefined,
    derive: (timestamp: number) => PendingWrite<A> | SessionLogError
  ): Effect.Effect<A, SessionLogError> => {
    const budget: RetryBudget = { startedAt, deadlineMillis }
    const attempt = (n: number, timestamp: number): Effect.Effect<A, SessionLogError> => {
      const moved = headMoved(ifHead)
      if (moved !== undefined) return Effect.fail(moved)
      const pending = derive(timestamp)
      if (pending instanceof SessionLogError) return Effect.fail(pending)
      const encoded: Array<Store.NewEntry> = []
      for (const entry of pending.entries) encoded.push({ entryId: entry.id, line: encodeEntry(entry) })
      // `ridden`, and the answer's handling, in one continuation (this runs for every append)
      return retryTransientThen(budget, "append", store.append(sessionId, live.seq, encoded, how), named, (result) => {
        if (result._tag === "Appended" && result.seq === live.seq + encoded.length) {
          pending.fold(live)
          keepLines(encoded)
          live.advance(result.seq)
          return Effect.succeed(pending.value(pending.entries))
        }
        return missed(n, pending, result, encoded)
      }, encoded)
    }
    /**
     * After a try another writer was first to (`Conflict`), or that had landed before (`AlreadyWritten`: a failed
     * catch-up then fails naming the entries, stored and not folded).
     */
    const missed = (
      n: number,
      pending: PendingWrite<A>,
      result: Store.AppendResult,
      tried: ReadonlyArray<Store.NewEntry>
    ) =>
      Effect.gen(function* () {
        if (result._tag === "Conflict") yield* Metric.update(conflictCounter, 1)
        if (result._tag === "AlreadyWritten") yield* Metric.update(alreadyWrittenCounter, 1)
        const others = yield* (result._tag === "Conflict"
          ? catchUpNow(budget)
          : Effect.mapError(catchUpNow(budget), (e) => triedBy(e, tried)))
        if (result._tag !== "Conflict") {
          const ids = new Set(pending.entries.map((e) => e.id))
          return pending.value(others.filter((e) => ids.has(e.id)))
        }
        // a conditional write is not derived again after entries its caller has not seen
        const moved = headMoved(ifHead)
        if (moved !== undefined) return yield* moved
        const elapsed = (yield* Clock.currentTimeMillis) - budget.startedAt
        if (elapsed >= budget.deadlineMillis) {
          return yield* new SessionLogError({
            reason: "Conflict",
            sessionId,
            detail: `other writers were first ${n + 1} times in a row for ${(elapsed / 1000).toFixed(1)} s ` +
              `(deadline ${budget.deadlineMillis / 1000} s); try again later`
          })
        }
        yield* Effect.sleep(conflictPause(n, Math.random()))
        return yield* attempt(n + 1, yield* Clock.currentTimeMillis)
      })
    return attempt(0, startedAt)
  }

  /** What is wrong with an append's messages or their step metadata, if anything. */
  const appendProblem = (messages: ReadonlyArray<Message>, meta: ReadonlyArray<SessionEntry.StepMeta | undefined>) => {
    for (let i = 0; i < messages.length; i++) {
      const error = validateMessage(messages[i], i)
      if (error !== undefined) return invalid(sessionId, error.message)
    }
    if (meta.length > messages.length) {
      return invalid(sessionId, `${meta.length} step metadata for ${messages.length} messages`)
    }
    for (let i = 0; i < meta.length; i++) {
      const problem = metaProblem(sessionId, `meta ${i}`, meta[i])
      if (problem !== undefined) return problem
    }
    return undefined
  }

  const append = (messages: ReadonlyArray<Message>, appendOptions: AppendOptions = {}) =>
    // `appendDerived` written out: the checks run in the same primitive as the clock read (no `suspend` per append)
    serialized(
      Effect.uninterruptible(Clock.clockWith((clock): Effect.Effect<ReadonlyArray<string>, SessionLogError> => {
        const meta = appendOptions.meta ?? []
        const problem = appendProblem(messages, meta)
        if (problem !== undefined) return Effect.fail(problem)
        if (messages.length === 0) return Effect.succeed([])
        const ids: Array<string> = []
        for (let i = 0; i < messages.length; i++) ids.push(randomUUID())
        return appendFrom(
          clock.currentTimeMillisUnsafe(),
          appendOptions.ifHead === undefined ? entryWrite : entryWriteOnce,
          appendOptions.ifHead,
          (timestamp): PendingWrite<ReadonlyArray<string>> => {
            const entries: Array<SessionEntry.MessageEntry> = []
            let parentId = live.head
            const last = messages.length - 1
            for (let i = 0; i < messages.length; i++) {
              const id = ids[i]!
              const m = meta[i]
              const entry: SessionEntry.MessageEntry = {
                ...header(id, parentId, timestamp),
                type: "message",
                message: messages[i]!
              }
              const withMeta = m === undefined ? entry : { ...entry, meta: m }
              // each entry but the last of an append of several says how many follow it (`more`), as its last member
              entries.push(i === last ? withMeta : { ...withMeta, more: last - i })
              parentId = id
            }
            return { entries, fold: foldEach(entries), value: () => ids }
          }
        )
      }))
    )

  const recordEviction = (evictions: ReadonlyArray<SessionEntry.Eviction>, condition: EvictionOptions = {}) =>
    serialized(Effect.gen(function* () {
      const badEviction = evictionProblem(evictions)
      if (badEviction !== undefined) return yield* badEviction
      const badMeta = metaProblem(sessionId, "meta", condition.meta)
      if (badMeta !== undefined) return yield* badMeta
      const id = randomUUID() as string
      return yield* appendDerived(
        condition.ifHead === undefined ? entryWrite : entryWriteOnce,
        condition.ifHead,
        (timestamp): PendingWrite<SessionEntry.EvictionEntry> => {
          const entry = evictionEntry(id, live.head, timestamp, evictions, condition.meta)
          return {
            entries: [entry],
            fold: foldEach([entry]),
            value: (stored) => (stored[0] as SessionEntry.EvictionEntry | undefined) ?? entry
          }
        }
      )
    })).pipe(Effect.withSpan("SessionLog.recordEviction", {
      attributes: { "session.id": sessionId, "session.evictions": evictions.length }
    }, NO_STACK))

  /**
   * The compaction entry derived from `view` (the caller's new view) against the live view, or why it cannot be
   * written. The kept messages are stored only when they are not the snapshot's own; the hash is of `view` followed by
   * what was appended after the snapshot, and that same array becomes the live view once the entry is stored.
   */
  const deriveCompaction = (
    input: CompactionInput,
    view: ReadonlyArray<Message>,
    id: string,
    timestamp: number,
    more: number | undefined
  ): PendingWrite<SessionEntry.CompactionEntry> | SessionLogError => {
    const { cut, snapshot } = input
    // the snapshot must still be a prefix of the live view: only appends and evictions may have happened since
    const end = snapshot.entryIds.length
    const stale = end > live.size || snapshot.entryIds.some((entryId, i) => live.itemAt(i)!.entryId !== entryId)
    if (stale) {
      return new SessionLogError({
        reason: "Conflict",
        sessionId,
        detail: "another compaction was recorded after this snapshot was taken; summarize the new view"
      })
    }
    // an eviction since the snapshot replaced a kept message: keeping it by id would put the eviction in the log's
    // view and not in the caller's, storing the caller's would undo it
    for (let i = cut; i < end; i++) {
      if (live.itemAt(i)!.message !== snapshot.view[i]) {
        return new SessionLogError({
          reason: "Conflict",
          sessionId,
          detail: "an eviction changed the kept messages after this snapshot was taken; compact the new view"
        })
      }
    }
    // no copy without a reason: kept messages equal to the snapshot's are stored as ids only
    const kept: KeptPart | undefined = keepsSnapshotTail(view, snapshot, cut)
      ? undefined
      : { through: snapshot.entryIds.at(-1) ?? null, messages: view.slice(1) }
    const before = live.view()
    const after = end === live.size ? view : [...view, ...before.slice(end)]
    const entry: SessionEntry.CompactionEntry = {
      ...header(id, live.head, timestamp),
      type: "compaction",
      summary: view[0]!,
      firstKeptEntryId: live.itemAt(cut)?.entryId ?? null,
      tokensBefore: input.tokensBefore ?? estimateTokens(before),
      tokensAfter: input.tokensAfter ?? estimateTokens(after),
      summarizer: input.summarizer,
      ...(input.turnsSummarized === undefined ? {} : { turnsSummarized: input.turnsSummarized }),
      ...(kept === undefined ? {} : { kept }),
      viewHash: hashOfView(after),
      ...(input.meta === undefined ? {} : { meta: input.meta }),
      // what the view no longer holds, by reference: the span the summarizer read (as the caller's outcome lists it),
      // and the snapshot's messages a stored kept part replaces
      removed: removalRecord(
        snapshot.view.slice(0, cut),
        snapshot.entryIds,
        lastCompactionId(live.entries),
        kept === undefined ? [] : snapshot.view.slice(cut)
      ),
      // the entries of its append that follow it (the offloads applied with it), as its last member
      ...(more === undefined ? {} : { more })
    }
    return {
      entries: [entry],
      fold: (l: LiveView) => void l.applyCompaction(entry, after),
      value: (stored: ReadonlyArray<SessionEntry.Entry>) =>
        (stored[0] as SessionEntry.CompactionEntry | undefined) ?? entry
    }
  }

  const recordCompaction = (input: CompactionInput, condition: WriteCondition = {}) =>
    serialized(Effect.gen(function* () {
      // before the input's checks: a caller that missed entries built its cut on a view the log no longer has
      const moved = headMoved(condition.ifHead)
      if (moved !== undefined) return yield* moved
      const view = input.view
      if (view.length === 0) {
        return yield* invalid(sessionId, "a compaction needs its view (the summary first)")
      }
      const summaryError = validateMessage(view[0], 0)
      if (summaryError !== undefined) return yield* invalid(sessionId, `summary: ${summaryError.message}`)
      const { cut, snapshot } = input
      if (!Number.isInteger(cut) || cut < 0 || cut > snapshot.view.length) {
        return yield* invalid(sessionId, `cut ${cut} is outside the snapshot's view (0..${snapshot.view.length})`)
      }
      if (!keepsSnapshotTail(view, snapshot, cut)) {
        for (let i = 1; i < view.length; i++) {
          const error = validateMessage(view[i], i - 1)
          if (error !== undefined) return yield* invalid(sessionId, `kept: ${error.message}`)
        }
      }
      const badMeta = metaProblem(sessionId, "meta", input.meta)
      if (badMeta !== undefined) return yield* badMeta
      const evictions = input.evictions ?? []
      const badEviction = evictionProblem(evictions)
      if (badEviction !== undefined) return yield* badEviction
      const id = randomUUID() as string
      // the offloads applied with the compaction: their eviction entry follows the boundary in the same store append
      const evictionId = evictions.length === 0 ? undefined : randomUUID() as string
      return yield* appendDerived(
        condition.ifHead === undefined ? compactionWrite : compactionWriteOnce,
        condition.ifHead,
        (timestamp) => {
          const pending = deriveCompaction(input, view, id, timestamp, evictionId === undefined ? undefined : 1)
          if (evictionId === undefined || pending instanceof SessionLogError) return pending
          return followedBy(pending, evictionEntry(evictionId, id, timestamp, evictions))
        }
      )
    })).pipe(Effect.withSpan("SessionLog.recordCompaction", {
      attributes: { "session.id": sessionId, "session.cut": input.cut }
    }))

  const load = (loadOptions: SessionEntry.LoadOptions = {}) =>
    Effect.flatMap(
      startBudget(deadline),
      (budget) => ridden(budget, "load", openSession(store, sessionId, loadOptions))
    )
      .pipe(
        Effect.map((o) => o.loaded),
        Effect.tap((l) => Effect.annotateCurrentSpan("session.entries", l.entries.length)),
        Effect.withSpan("SessionLog.load", { attributes: { "session.id": sessionId } })
      )

  const catchUp = serialized(Effect.flatMap(startBudget(deadline), catchUpNow)).pipe(
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

/**
 * The service over one session. `SessionLog.layer` opens it on the `SessionStore` in the context; the stores'
 * modules have the shorthands that bring their store along (`SessionStoreJsonl.layerSessionLog`,
 * `SessionStoreSql.layerSessionLog`, `SessionStoreSql.layerSessionLogPg`).
 * @category services
 */
export class SessionLog extends SessionLogService {
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
   * a simulated restart, or to have several logs (workers) over one session. Each call keeps its own `ClosedFolds`, so
   * reopening through the same layer reuses the fold of the last close.
   */
  static readonly layerMemory = (
    options: {
      readonly sessionId?: string
      readonly store?: Store.MemorySessions
      readonly repair?: boolean
    } = {}
  ): Layer.Layer<SessionLog, SessionLogError> =>
    SessionLog.layer({
      sessionId: options.sessionId ?? "memory",
      ...(options.repair === undefined ? {} : { repair: options.repair }),
      sync: "never",
      closedFolds: new ClosedFolds()
    }).pipe(Layer.provide(SessionStore.layerMemory(options.store)))
}

/**
 * Reads a stored session from the `SessionStore` in the context without opening it for writing (no lock, nothing
 * changed). The same checks as `SessionLog.load`; `NotFound` when the session does not exist.
 * @category sessions
 */
export const readSession = (
  sessionId: string,
  options: SessionEntry.LoadOptions = {}
): Effect.Effect<SessionEntry.Loaded, SessionLogError, SessionStore> =>
  Effect.gen(function* () {
    const store = yield* SessionStore
    return (yield* openSession(store, yield* Store.validateSessionId(sessionId), options)).loaded
  }).pipe(
    Effect.mapError(withSession(sessionId)),
    Effect.withSpan("SessionLog.readSession", { attributes: { "session.id": sessionId } })
  )
