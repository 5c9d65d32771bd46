/**
 * The session log's contract: the service key, its shape and what its writes take. `SessionLog` re-exports all of it
 * and adds the implementation (`SessionLog.layer`); it lives here so that `Compact` can find the log in the context
 * without loading the service, its stores or `effect/sql`.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type { Message } from "../Message.ts"
import type { Loaded, LoadIssue, LoadOptions } from "../SessionEntry.ts"
import type { SessionLogError } from "./sessionLogError.ts"
import type { CompactionEntry, Eviction, EvictionEntry, Snapshot, StepMeta } from "./sessionEntry.ts"

/**
 * What `recordCompaction` needs: the new view the caller goes on with, the snapshot it was built from and the cut.
 * `Compact.finishCompaction`'s `record` is this without the snapshot, so a finished compaction is recorded as
 * `{ ...finished.record, snapshot }`.
 * @category models
 */
export interface CompactionInput {
  /** The snapshot that was summarized (from `SessionLog.snapshot`). Entries appended since are kept. */
  readonly snapshot: Snapshot
  /** How many messages of `snapshot.view` the summary replaces (0 ≤ cut ≤ snapshot.view.length). */
  readonly cut: number
  /**
   * The view the caller goes on with: the summary first, then the kept messages in place of
   * `snapshot.view.slice(cut)` (`Compact.finishCompaction`'s `messages`). The log stores the kept messages only when
   * they differ from `snapshot.view.slice(cut)` (by identity or JSON; otherwise their entry ids), hashes this view,
   * and goes on with this same array (followed by the entries appended since the snapshot). Fails with `Conflict`
   * when an eviction changed `snapshot.view.slice(cut)` since the snapshot (it would be undone, or the log's view would
   * not be the caller's).
   */
  readonly view: ReadonlyArray<Message>
  /** The name of the summarizer that wrote the summary. */
  readonly summarizer: string
  /** Default: `estimateTokens` of the view before the boundary. */
  readonly tokensBefore?: number
  /** Default: `estimateTokens` of the view after the boundary. */
  readonly tokensAfter?: number
  /** User turns the summary replaced, when the caller counted them; stored in the boundary's entry. */
  readonly turnsSummarized?: number
  /**
   * The step metadata stored in the boundary's entry (`CompactionEntry.meta`, returned by `load` in `entries`, never
   * in the view): a JSON object, such as the state `Conversation` resumes from without reading the entries before it.
   */
  readonly meta?: StepMeta
  /**
   * The offloads applied with the compaction (`block` a tool_result for `toolUseId`, as `recordEviction` takes them),
   * stored as an eviction entry right after the boundary, in the same store append: a crash leaves both or neither.
   * Absent or empty: the boundary alone.
   */
  readonly evictions?: ReadonlyArray<Eviction>
}

/**
 * The condition a write may carry (`append`, `recordEviction`, `recordCompaction`): the log's head the caller last
 * saw. A writer that keeps its own state derived from the log (a `Conversation`) passes it, so that it never writes an
 * entry derived from a state that misses what another writer stored.
 * @category models
 */
export interface WriteCondition {
  /**
   * The id of the log's last entry as the caller last saw it (`Snapshot.head` or `Loaded.head` when it read the log,
   * the id of the last entry it wrote since; `null` for an empty session). The write then lands only right after that
   * entry: when another writer appended since (the live view, or the store, is past it), the log catches up with the
   * other writers' entries and fails with `Conflict`, writing nothing, instead of deriving the write again after
   * them. Absent (the default): the write goes after whatever is stored, as appends from many workers do.
   */
  readonly ifHead?: string | null
}

/** Options of `SessionLogShape.append`. @category models */
export interface AppendOptions extends WriteCondition {
  /**
   * The step metadata of each message (`meta[i]` for `messages[i]`; `undefined`: none), stored in its entry and
   * returned by `load` in `entries`, never in the view. At most one per message; each a JSON object.
   */
  readonly meta?: ReadonlyArray<StepMeta | undefined>
}

/** Options of `SessionLogShape.recordEviction`. @category models */
export interface EvictionOptions extends WriteCondition {
  /**
   * The entry's step metadata (a JSON object), returned by `load` in `entries`, never in the view. With no evictions
   * the entry holds only it: a step of the writer that changed no message.
   */
  readonly meta?: StepMeta
}

/** The service over one session. @category services */
export interface SessionLogShape {
  /** The session this log reads and appends to. */
  readonly sessionId: string
  /**
   * Appends each message as one entry, in order, after every entry already written, with its step metadata when
   * given, all in one store append: a crash leaves all of them or none. Returns their entry ids. With `ifHead`, only
   * right after that entry (`WriteCondition`). A failure that names `entryIds` (`SessionLogError`) may have stored
   * them all: the store failed while or after it wrote. Appending the messages again would store them twice;
   * `catchUp` first, and the log's head is the last of those ids when they landed. So with `recordEviction` and
   * `recordCompaction`.
   */
  readonly append: (
    messages: ReadonlyArray<Message>,
    options?: AppendOptions
  ) => Effect.Effect<ReadonlyArray<string>, SessionLogError>
  /**
   * Records offloaded tool results (`block` must be a tool_result for `toolUseId`), with the step metadata `meta` when
   * given (none: an entry that only carries it). With `ifHead`, only right after that entry (`WriteCondition`).
   */
  readonly recordEviction: (
    evictions: ReadonlyArray<Eviction>,
    options?: EvictionOptions
  ) => Effect.Effect<EvictionEntry, SessionLogError>
  /**
   * Records a compaction boundary as one atomic entry, derived from `input.view`, followed by an eviction entry of
   * `input.evictions` when given, both in one store append (all or none). Returns the boundary's entry. Fails with
   * `Conflict` when another compaction was recorded since `input.snapshot` was taken (by this or another worker;
   * nothing is written), and `InvalidInput` for a bad view, cut or eviction. With `ifHead`, only right after that entry
   * (`WriteCondition`; checked before the input, so a caller that missed entries gets `Conflict`, not a cut outside the
   * log's view).
   */
  readonly recordCompaction: (
    input: CompactionInput,
    options?: WriteCondition
  ) => Effect.Effect<CompactionEntry, SessionLogError>
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
   * version still fails). A torn tail (a torn last line, or the lines of an append whose later lines are missing) is
   * always reported and skipped.
   */
  readonly load: (options?: LoadOptions) => Effect.Effect<Loaded, SessionLogError>
  /** What opening the session found and fixed (a torn tail, which the writer cuts off before appending). */
  readonly recovered: ReadonlyArray<LoadIssue>
}

const SessionLogBase: Context.ServiceClass<SessionLog, "effect-compaction/SessionLog", SessionLogShape> = Context
  .Service<SessionLog, SessionLogShape>()("effect-compaction/SessionLog")

/** The key of the session log service; the public `SessionLog` extends it with its layers. @category services */
export class SessionLog extends SessionLogBase {}
