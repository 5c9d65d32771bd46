/**
 * Resume: the state a conversation's log holds, rebuilt from its entries through the same effects the transitions
 * had (messages observed, offloads observed, compactions counted), starting from the checkpoint of the last compaction
 * boundary when the entries hold one. What `Conversation.layerLogged` opens with.
 *
 * @internal
 */
import type { BlockPosition } from "../../Cache.ts"
import type { ConversationState, MessageParam } from "../../ConversationState.ts"
import { HotPaths } from "../../HotPaths.ts"
import type { Message } from "../../Message.ts"
import { isCompactionWithContent, isToolResult, isToolUse } from "../blocks.ts"
import { filesOfMessage } from "../summary.ts"
import type { Entry, Loaded } from "../../SessionEntry.ts"
import type { MessageEntry } from "../sessionEntry.ts"
import type { ToolClassifier } from "../../Tools.ts"
import { isBoundBlock, mergePositions, thinkingIn } from "../thinkingBinding.ts"
import { isAppendOnlyReason } from "./appendOnly.ts"
import { resumeCut } from "./background.ts"
import { CarriedIndex } from "./carried.ts"
import { type Checkpoint, checkpointOf } from "./checkpoint.ts"
import { META_KEY, offloadsOf, type ReplyMeta } from "./record.ts"
import type { ThreadAnchor } from "./thread.ts"
import { asMessages, blocksOf, wireMessage } from "./wire.ts"

type PendingCall = ConversationState["pending"][number]
type UsageReport = NonNullable<ConversationState["usage"]>
type ReplyReport = NonNullable<ConversationState["reply"]>
/** Where logs written before step metadata existed kept it: a private key of the stored message. */
const LEGACY_META_KEY = "_conversation"

const asReplyMeta = (meta: unknown): ReplyMeta | undefined =>
  typeof meta === "object" && meta !== null && !Array.isArray(meta) ? meta as ReplyMeta : undefined

/** The reply metadata of a message entry: its step metadata, or (older logs) the message's `_conversation` key. */
const metaOf = (entry: MessageEntry): ReplyMeta | undefined =>
  asReplyMeta(entry.meta?.[META_KEY]) ??
    asReplyMeta((entry.message as unknown as Record<string, unknown>)[LEGACY_META_KEY])

/**
 * The state a log holds: the view it rebuilds (wire messages), the hot paths replayed over every entry in order
 * (messages observed, offloads observed), the epoch (its compactions), the latest reply's usage, id and stop reason
 * (a reply with empty content has them in the step metadata of an eviction entry with no evictions),
 * the thread anchor (the latest reply's, when its metadata holds one and no offload or compaction followed it), and
 * the calls of the last reply not yet answered, and the background summary's cut the latest reply recorded (unless a
 * compaction followed it). Equal to the live state that wrote the log. When a compaction entry
 * holds the conversation's checkpoint (every boundary a `Conversation` records does), the last one is the state at
 * that boundary and only the entries after it are replayed: so a log opened from its tail resumes as the whole log.
 */
export const resumeState = (loaded: Loaded, classifier?: ToolClassifier | undefined): ConversationState =>
  resumeFrom(loaded, classifier) ?? stateOf(loaded, foldEntries(loaded.entries, 0, undefined, classifier))

/**
 * The state `resumeState` resumes, when `loaded` has what it needs: every entry (`verifiedFrom` unset), or a
 * checkpoint among the entries it holds. `undefined` for a tail without one: the caller reads the whole log.
 */
export const resumeFrom = (loaded: Loaded, classifier: ToolClassifier | undefined): ConversationState | undefined => {
  const entries = loaded.entries as ReadonlyArray<Entry>
  for (let k = entries.length - 1; k >= 0; k--) {
    const checkpoint = checkpointOf(entries[k]!, META_KEY, classifier)
    if (checkpoint !== undefined) {
      return stateOf(loaded, foldEntries(entries, k + 1, checkpoint, classifier), { at: k, checkpoint })
    }
  }
  return loaded.verifiedFrom === undefined ? stateOf(loaded, foldEntries(entries, 0, undefined, classifier)) : undefined
}

/** The hot paths, epoch, usage, reply and thread after `entries` from `from` on, starting from `start` (or nothing). */
const foldEntries = (
  entries: ReadonlyArray<Entry>,
  from: number,
  start: Checkpoint | undefined,
  classifier: ToolClassifier | undefined
) => {
  let hot = start?.hot ?? HotPaths.empty(classifier)
  let epoch = start?.epoch ?? 0
  let usage = start?.usage as UsageReport | undefined
  let reply = start?.reply as ReplyReport | undefined
  let thread: ThreadAnchor | undefined
  let appendOnly = isAppendOnlyReason(start?.appendOnly) ? start.appendOnly : undefined
  // consecutive messages are observed in one call: `observe` reads them in order, as one call per message would
  let run: Array<MessageParam> = []
  const flush = () => {
    if (run.length > 0) hot = hot.observe(run)
    run = []
  }
  for (let k = from; k < entries.length; k++) {
    const entry = entries[k]!
    if (entry.type === "message") {
      run.push(wireOf(entry.message))
      const meta = metaOf(entry)
      if (meta?.usage !== undefined) usage = { usage: meta.usage, requestEpoch: meta.requestEpoch }
      if (meta !== undefined && entry.message.role === "assistant") reply = replyOf(meta)
      if (isAppendOnlyReason(meta?.appendOnly)) appendOnly = meta.appendOnly
      if (entry.message.role === "assistant") {
        thread = meta?.threadHeld === undefined || meta.replyId === undefined
          ? undefined
          : meta.threadReplacesLost === true
          ? { previousMessageId: meta.replyId, held: meta.threadHeld, replacesLost: true }
          : { previousMessageId: meta.replyId, held: meta.threadHeld }
      }
      continue
    }
    flush()
    thread = undefined
    if (entry.type === "eviction") {
      hot = hot.observeOffloads(offloadsOf(entry.evictions))
      // a reply with empty content: its step metadata alone (no evictions)
      const meta = entry.meta === undefined ? undefined : asReplyMeta(entry.meta[META_KEY])
      if (meta !== undefined) {
        if (meta.usage !== undefined) usage = { usage: meta.usage, requestEpoch: meta.requestEpoch }
        reply = { ...replyOf(meta), empty: true }
      }
    } else epoch++
  }
  flush()
  return { hot, epoch, usage, reply, thread, appendOnly }
}

/** The checkpoint a resume started from, and the index of its compaction entry. */
interface StartedAt {
  readonly at: number
  readonly checkpoint: Checkpoint
}

/** The resumed state: the log's view with what `foldEntries` gave (from the checkpoint `start`, if any). */
const stateOf = (
  loaded: Loaded,
  folded: ReturnType<typeof foldEntries>,
  start?: StartedAt | undefined
): ConversationState => {
  const { hot, epoch, usage, reply, thread, appendOnly } = folded
  const view = loaded.view.map(wireOf)
  const unbound = unboundOnResume(loaded, view, start)
  const backgroundCut = resumeCut(loaded, META_KEY)
  return {
    view,
    hot,
    epoch,
    pending: pendingAtEnd(loaded),
    usage,
    ...(reply === undefined ? {} : { reply }),
    // a conversation whose latest reply went without `thread` (the API refused threads) does not try one again
    ...(reply?.unthreaded === true ? { unthreaded: true as const } : {}),
    ...(thread === undefined ? {} : { thread }),
    ...(unbound.length === 0 ? {} : { unboundThinking: unbound }),
    ...(appendOnly === undefined ? {} : { appendOnly }),
    carried: CarriedIndex.fresh(asMessages(view)),
    ...(backgroundCut === undefined ? {} : { backgroundCut })
  }
}

/**
 * The thinking blocks of a resumed view that rewrites invalidated, as the live transitions marked them (thinking
 * binding): every thinking block of a message that a later compaction kept, or that follows a result a later eviction
 * offloaded, and the blocks of a reply from the first one stored differently than received (`rewrittenFrom`). A
 * message whose entry is not in the log (a kept copy `c#i`) counts as kept by a compaction; after a last compaction
 * that kept its turns verbatim, its blocks that compaction's checkpoint (`start`, when it is that one) holds unbound.
 */
const unboundOnResume = (
  loaded: Loaded,
  view: ReadonlyArray<MessageParam>,
  start: StartedAt | undefined
): ReadonlyArray<BlockPosition> => {
  const entries = loaded.entries as ReadonlyArray<Entry>
  if (!view.some((m) => m.role === "assistant" && blocksOf(m).some((b) => isBoundBlock(b)))) return []
  const order = new Map<string, number>()
  entries.forEach((e, k) => order.set(e.id, k))
  const resultAt = new Map<string, number>()
  view.forEach((m, i) => {
    if (m.role === "user") { for (const b of blocksOf(m)) if (b.type === "tool_result") resultAt.set(b.tool_use_id, i) }
  })
  // a last compaction that kept its turns verbatim after the server's block left their thinking bound (the live
  // `FinishedCompaction.keptVerbatim`): its view is the block, then the kept turns, the files message after them
  const lastKeptVerbatim = keptVerbatimAfterBlock(asMessages(view))
  let lastCompaction = -1
  for (let k = entries.length - 1; k >= 0 && lastCompaction < 0; k--) {
    if (entries[k]!.type === "compaction") lastCompaction = k
  }
  // the thinking a verbatim last compaction left unbound in the copies it kept (an earlier rewrite had unbound it)
  const marked = lastKeptVerbatim && start?.at === lastCompaction ? start.checkpoint.unboundThinking ?? [] : []
  // for each entry: whether a compaction follows it, and the earliest view message an eviction after it rewrote
  const compactedAfter = new Array<boolean>(entries.length + 1).fill(false)
  const evictedAfter = new Array<number>(entries.length + 1).fill(Infinity)
  for (let k = entries.length - 1; k >= 0; k--) {
    const e = entries[k + 1]
    compactedAfter[k] = compactedAfter[k + 1]! ||
      (e?.type === "compaction" && !(lastKeptVerbatim && k + 1 === lastCompaction))
    let earliest = evictedAfter[k + 1]!
    if (e?.type === "eviction") {
      for (const ev of e.evictions) earliest = Math.min(earliest, resultAt.get(ev.toolUseId) ?? Infinity)
    }
    evictedAfter[k] = earliest
  }
  let out: ReadonlyArray<BlockPosition> = []
  view.forEach((message, i) => {
    if (message.role !== "assistant" || typeof message.content === "string") return
    const id = loaded.entryIds[i]
    const k = id === undefined ? undefined : order.get(id)
    const entry = k === undefined ? undefined : entries[k]
    // a message with no entry of its own is a copy a compaction kept: bound when that was the verbatim last one,
    // but for what it left unbound
    if (entry === undefined && lastKeptVerbatim) {
      const blocks = blocksOf(message)
      const left = marked.filter((p) => p.message === i && isBoundBlock(blocks[p.block] ?? { type: "" }))
      if (left.length > 0) out = mergePositions(out, left)
      return
    }
    const whole = entry === undefined || entry.type !== "message" || compactedAfter[k!]! || evictedAfter[k!]! < i
    const from = whole ? 0 : entry?.type === "message" ? metaOf(entry)?.rewrittenFrom : undefined
    if (from === undefined) return
    const added = thinkingIn(asMessages(view)[i]!, i, from)
    if (added.length > 0) out = mergePositions(out, added)
  })
  return out
}

/**
 * True when `view` has the API's keep-tail shape after a server compaction: a message holding only the server's
 * block, then a kept turn that is not the files message (a compaction that could not keep its turns verbatim put the
 * files message right after the block).
 */
const keptVerbatimAfterBlock = (view: ReadonlyArray<Message>): boolean => {
  const opening = view[0]
  if (opening === undefined || typeof opening.content === "string" || opening.content.length !== 1) return false
  if (!isCompactionWithContent(opening.content[0]!)) return false
  const first = view[1]
  return first !== undefined && filesOfMessage(first) === undefined
}

/** The reply report a reply's step metadata holds (its id and stop reason are absent in older logs). */
const replyOf = (meta: ReplyMeta): ReplyReport => ({
  ...(meta.replyId === undefined ? {} : { id: meta.replyId }),
  ...(meta.stopReason === undefined ? {} : { stopReason: meta.stopReason }),
  requestEpoch: meta.requestEpoch,
  ...(meta.usage === undefined ? { noUsage: true as const } : {}),
  ...(meta.inputTransformations === undefined ? {} : { inputTransformations: meta.inputTransformations }),
  ...(meta.cacheDiagnosis === undefined ? {} : { cacheDiagnosis: meta.cacheDiagnosis }),
  ...(meta.unthreaded === true ? { unthreaded: true as const } : {})
})

const wireOf = (message: Message): MessageParam => {
  const params = message as unknown as MessageParam
  return wireMessage(params) ?? params
}

const pendingAtEnd = (loaded: Loaded): ReadonlyArray<PendingCall> => {
  const view = loaded.view
  let i = view.length - 1
  const answered = new Set<string>()
  while (i >= 0 && view[i]!.role === "user") {
    const content = view[i]!.content
    if (typeof content === "string") return []
    for (const block of content) {
      if (!isToolResult(block)) return []
      answered.add(block.tool_use_id)
    }
    i--
  }
  const reply = view[i]
  if (reply === undefined || reply.role !== "assistant" || typeof reply.content === "string") return []
  const replyId = loaded.entryIds[i]
  let entry: Entry | undefined
  for (let k = loaded.entries.length - 1; k >= 0 && entry === undefined; k--) {
    if (loaded.entries[k]!.id === replyId) entry = loaded.entries[k]
  }
  const renamed = (entry?.type === "message" ? metaOf(entry) : undefined)?.toolUseIds ?? {}
  return reply.content.flatMap((b) =>
    isToolUse(b) && !answered.has(b.id) ? [{ id: b.id, originalId: renamed[b.id] ?? b.id }] : []
  )
}
