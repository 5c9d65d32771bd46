/**
 * How a conversation's change is stored in its `SessionLog`, the one mapping for `Conversation.layerLogged` and the
 * replay engine's log: an appended message with its step metadata under `conversation`, a reply with empty content as
 * its step metadata alone (on an eviction entry with no evictions: the view does not change), an offload as an
 * eviction entry, a compaction as its boundary carrying the checkpoint of the state after it (`checkpoint.ts`) when
 * the log's view before it is the conversation's (no other writer appended in between), with the eviction entry of the
 * offloads applied with it in the same append (`recordCompaction`); and back, what an eviction entry tells the hot
 * paths (`offloadsOf`). A conversation names the log's head it knows with each change (`WriteCondition.ifHead`) and learns
 * the new one from what was written (`headAfter`), so it never records a change after entries it has not seen.
 *
 * @internal
 */
import * as Effect from "effect/Effect"
import type { BlockPosition } from "../../Cache.ts"
import { type CompactionRecord, recordInput } from "../../Compact.ts"
import type { HotPaths } from "../../HotPaths.ts"
import type { Message, ToolResultBlock } from "../../Message.ts"
import type { ReportedUsage } from "../../Policy.ts"
import type { InputTransformation } from "../thinkingBinding.ts"
import { type Offloaded, offloadRefOf } from "../../Offload.ts"
import type { SessionLogShape } from "../sessionLogContract.ts"
import type { SessionLogError } from "../sessionLogError.ts"
import { sameMessage } from "../sessionEntry.ts"
import { checkpointMeta } from "./checkpoint.ts"
import type { AppendOnlyReason } from "./appendOnly.ts"
import type { CacheDiagnosis } from "./diagnostics.ts"
import type { CompactionEntry, Eviction, EvictionEntry, StepMeta } from "../sessionEntry.ts"

/** The step metadata key `Conversation` owns. */
export const META_KEY = "conversation"

/**
 * What a reply stores beside its message in a log (its entry's step metadata, under `META_KEY`), so a resume restores
 * usage and renamed ids. Never part of the view or a request.
 */
export interface ReplyMeta {
  readonly usage?: ReportedUsage
  readonly requestEpoch: number
  /** View id → the id the caller knows, for the calls this reply's ids were renamed from. */
  readonly toolUseIds?: Readonly<Record<string, string>>
  /** The reply's `id` (SDK replies only; absent in logs written before it was kept). */
  readonly replyId?: string
  /** The reply's `stop_reason` (SDK replies only; absent in logs written before it was kept). */
  readonly stopReason?: string
  /** With threads on, the view messages the server holds under this reply (absent: the next request creates a thread). */
  readonly threadHeld?: number
  /** The reply answered the `create` that replayed a lost thread (`thread_not_found`). */
  readonly threadReplacesLost?: true
  /** With threads on, the request went without `thread`: the conversation stopped threading. */
  readonly unthreaded?: true
  /** The reply's `input_transformations` (SDK replies only). */
  readonly inputTransformations?: ReadonlyArray<InputTransformation>
  /**
   * The first block of the stored reply whose prefix differs from the one it was made on: the first that differs from
   * the reply as received (a renamed id, a dropped block), or 0 when the view changed under the reply's request.
   */
  readonly rewrittenFrom?: number
  /**
   * With `CompactionPolicy.backgroundAt`: the cut of the summary being made in the background when the reply was
   * recorded (a cut only, never a summary), which a resumed conversation starts again.
   */
  readonly backgroundCut?: number
  /** With diagnostics on: the predicted and the reported cache miss of the request this reply answered. */
  readonly cacheDiagnosis?: CacheDiagnosis
  /** Why the conversation stayed append-only when the reply was recorded (`ConversationState.appendOnly`). */
  readonly appendOnly?: AppendOnlyReason
}

/** What a stored change reads of a conversation's change (`ConversationState.Change` is one). */
export type StoredChange =
  | { readonly _tag: "Appended"; readonly message: object; readonly meta: object | undefined }
  | { readonly _tag: "EmptyReply"; readonly meta: object }
  | {
    readonly _tag: "Offloaded"
    readonly offloaded: ReadonlyArray<{ readonly block: ToolResultBlock; readonly toolUseId: string }>
  }
  | { readonly _tag: "CompactionApplied"; readonly record: CompactionRecord<Message> }

/** What a stored change reads of the states around it (`ConversationState.ConversationState` is one). */
export interface StoredState {
  readonly view: ReadonlyArray<unknown>
  readonly epoch: number
  readonly hot: HotPaths
  readonly usage?: object | undefined
  readonly reply?: object | undefined
  readonly appendOnly?: string | undefined
  readonly unboundThinking?: ReadonlyArray<BlockPosition> | undefined
}

/** What `recordChange` wrote: the appended entries' ids, or the eviction or compaction entry. */
export type Written = ReadonlyArray<string> | EvictionEntry | CompactionEntry

/**
 * True when `a` and `b` store the same entry: the same message (identity or canonical JSON) and, for a reply, the same
 * reply id; or two empty replies with the same reply id, stop reason, request epoch and usage (a `MessageParam`'s has no
 * id: its usage tells it apart). What a step tried again stores, when the failed try stored `a`.
 */
export const storesSame = (a: StoredChange, b: StoredChange): boolean =>
  a._tag === "Appended"
    ? b._tag === "Appended" && sameMessage(a.message as Message, b.message as Message) &&
      (a.meta as ReplyMeta | undefined)?.replyId === (b.meta as ReplyMeta | undefined)?.replyId
    : a._tag === "EmptyReply" && b._tag === "EmptyReply" && sameEmptyReply(a.meta as ReplyMeta, b.meta as ReplyMeta)

/** Two empty replies' step metadata name the same reply: its id, stop reason, request epoch and usage. */
const sameEmptyReply = (a: ReplyMeta, b: ReplyMeta): boolean =>
  a.replyId === b.replyId && a.stopReason === b.stopReason && a.requestEpoch === b.requestEpoch &&
  JSON.stringify(a.usage) === JSON.stringify(b.usage)

/** The log's head once `written` was stored: the id of its last entry. */
export const headAfter = (written: Written): string =>
  Array.isArray(written) ? (written as ReadonlyArray<string>).at(-1)! : (written as EvictionEntry | CompactionEntry).id

/**
 * Stores `change`, made in state `before` and leading to state `after`, right after entry `ifHead` when given (the
 * log's head the writer knows: `Conflict` when another writer appended since, nothing written); answers what it wrote
 * (`headAfter` names the new head).
 */
export const recordChange = (
  log: SessionLogShape,
  change: StoredChange,
  before: StoredState,
  after: StoredState,
  ifHead?: string | null
): Effect.Effect<Written, SessionLogError> => {
  switch (change._tag) {
    case "Appended": {
      const meta = [change.meta === undefined ? undefined : { [META_KEY]: change.meta as StepMeta }]
      // the entry ids, left as they are: no `map` per logged message
      return log.append([change.message as Message], ifHead === undefined ? { meta } : { meta, ifHead })
    }
    case "EmptyReply": {
      // no message: an eviction entry with no evictions carries the reply's step metadata, and no view changes
      const meta = { [META_KEY]: change.meta as StepMeta }
      return log.recordEviction([], ifHead === undefined ? { meta } : { meta, ifHead })
    }
    case "Offloaded": {
      const condition = ifHead === undefined ? undefined : { ifHead }
      return log.recordEviction(evictionsOf(change), condition)
    }
    case "CompactionApplied":
      return recordCompaction(log, change, undefined, before, after, ifHead)
  }
}

/**
 * Stores a compaction (`change`, made in state `before` and leading to state `after`, whose checkpoint its boundary
 * carries) and, when given, the offloads applied with it (`offloaded`, the change right after it in the same
 * transition) in one store append: the boundary and its eviction entry land together or not at all, so a resumed
 * conversation never holds the compaction without the offloads it applied. The entries are the ones `recordChange`
 * stores for each change alone.
 */
export const recordCompaction = (
  log: SessionLogShape,
  change: Extract<StoredChange, { readonly _tag: "CompactionApplied" }>,
  offloaded: Extract<StoredChange, { readonly _tag: "Offloaded" }> | undefined,
  before: StoredState,
  after: StoredState,
  ifHead?: string | null
): Effect.Effect<Written, SessionLogError> =>
  Effect.flatMap(log.snapshot, (snapshot) => {
    const input = recordInput(
      change.record,
      snapshot,
      snapshot.view.length === before.view.length ? checkpointMeta(META_KEY, after) : undefined
    )
    const written = log.recordCompaction(
      offloaded === undefined ? input : { ...input, evictions: evictionsOf(offloaded) },
      ifHead === undefined ? undefined : { ifHead }
    )
    // with the offloads, the head is their eviction entry, written right after the boundary in the same append
    return offloaded === undefined ? written : Effect.andThen(written, Effect.map(log.snapshot, headWritten))
  })

/** The log's head as a `Written` value: the id of its last entry (of the compaction's eviction entry, just written). */
const headWritten = (snapshot: { readonly head: string | null }): Written => [snapshot.head!]

/** The evictions an `Offloaded` change stores: each offloaded result's new block, by its tool use id. */
const evictionsOf = (change: Extract<StoredChange, { readonly _tag: "Offloaded" }>) =>
  change.offloaded.map(({ block, toolUseId }) => ({ block, toolUseId }))

/** The offloads an eviction entry recorded, as `HotPaths#observeOffloads` reads them. */
export const offloadsOf = (
  evictions: ReadonlyArray<Eviction>
): ReadonlyArray<Pick<Offloaded, "toolUseId" | "reason" | "ref">> =>
  evictions.flatMap((e) => {
    const ref = offloadRefOf(e.block)
    return ref === undefined ? [] : [{ toolUseId: e.toolUseId, reason: ref.reason, ref }]
  })
