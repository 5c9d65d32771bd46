/**
 * The resume checkpoint a `Conversation` stores in each compaction boundary it records (the boundary's step metadata,
 * under the conversation's key): the state right after the compaction that the entries before the boundary decided.
 * That is the hot paths (`HotPaths#toSnapshot`), the epoch counting this compaction, and the latest usage and reply
 * as the state holds them, and its unbound thinking (`ConversationState.unboundThinking`, absent in logs written before
 * it was kept: read as none). The thread is not in it: a compaction ends it. A resume starts from the last checkpoint
 * it finds and replays only the entries after it, so a log opened from its tail needs no entry before the tail.
 * Pure: JSON in and out; a checkpoint it cannot read is no checkpoint, never an error.
 *
 * @internal
 */
import type { BlockPosition } from "../../Cache.ts"
import { HotPaths } from "../../HotPaths.ts"
import type { Entry } from "../../SessionEntry.ts"
import type { ToolClassifier } from "../../Tools.ts"
import type { StepMeta } from "../sessionEntry.ts"

/** The version of the checkpoint's JSON; a boundary holding another is read as holding none. */
const VERSION = 1

/**
 * The state a checkpoint holds. `usage` and `reply` are the state's own values, kept as JSON objects with a numeric
 * `requestEpoch` (the resume gives them back as its types).
 */
export interface Checkpoint {
  readonly hot: HotPaths
  readonly epoch: number
  readonly usage?: object | undefined
  readonly reply?: object | undefined
  /** Why the conversation stays append-only (`ConversationState.appendOnly`), if it does. */
  readonly appendOnly?: string | undefined
  /** The thinking blocks of the view after the compaction that it leaves unbound, if any. */
  readonly unboundThinking?: ReadonlyArray<BlockPosition> | undefined
}

/**
 * The step metadata of a boundary whose state after it is `checkpoint`, under `key`: JSON as the log stores it
 * (undefined fields dropped, so the log accepts it and a resume reads back what the state holds).
 */
export const checkpointMeta = (key: string, checkpoint: Checkpoint): StepMeta => {
  const json = {
    v: VERSION,
    epoch: checkpoint.epoch,
    hot: checkpoint.hot.toSnapshot(),
    ...(checkpoint.usage === undefined ? {} : { usage: checkpoint.usage }),
    ...(checkpoint.reply === undefined ? {} : { reply: checkpoint.reply }),
    ...(checkpoint.appendOnly === undefined ? {} : { appendOnly: checkpoint.appendOnly }),
    ...(checkpoint.unboundThinking === undefined || checkpoint.unboundThinking.length === 0
      ? {}
      : { unbound: checkpoint.unboundThinking.map(({ message, block }) => ({ message, block })) })
  }
  return { [key]: JSON.parse(JSON.stringify({ checkpoint: json })) as StepMeta }
}

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)
const isIndex = (u: unknown): boolean => Number.isSafeInteger(u) && (u as number) >= 0
const isPositions = (u: unknown): u is ReadonlyArray<BlockPosition> =>
  Array.isArray(u) && u.every((p) => isObject(p) && isIndex(p["message"]) && isIndex(p["block"]))
const hasEpoch = (u: unknown): u is Record<string, unknown> => isObject(u) && Number.isSafeInteger(u["requestEpoch"])

/**
 * The checkpoint a compaction entry carries under `key`, with its hot paths restored with `classifier`; `undefined`
 * for any other entry, and for one whose checkpoint is missing, of another version or not well formed.
 */
export const checkpointOf = (
  entry: Entry,
  key: string,
  classifier: ToolClassifier | undefined
): Checkpoint | undefined => {
  if (entry.type !== "compaction") return undefined
  const owned = entry.meta?.[key]
  const json = isObject(owned) ? owned["checkpoint"] : undefined
  if (!isObject(json) || json["v"] !== VERSION) return undefined
  const { epoch, usage, reply, appendOnly, unbound } = json
  if (typeof epoch !== "number" || !Number.isSafeInteger(epoch) || epoch < 1) return undefined
  if (usage !== undefined && !(hasEpoch(usage) && isObject(usage["usage"]))) return undefined
  if (reply !== undefined && !hasEpoch(reply)) return undefined
  const hot = HotPaths.fromSnapshot(json["hot"], classifier)
  if (appendOnly !== undefined && typeof appendOnly !== "string") return undefined
  if (unbound !== undefined && !isPositions(unbound)) return undefined
  return hot === undefined ? undefined : {
    hot,
    epoch,
    usage,
    reply,
    ...(appendOnly === undefined ? {} : { appendOnly }),
    ...(unbound === undefined ? {} : { unboundThinking: unbound })
  }
}
