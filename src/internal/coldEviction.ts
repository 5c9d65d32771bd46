/**
 * The cold eviction of `Evict.evictStaleToolResults`: one backward pass that decides each tool result with what the
 * results after it already told, and rebuilds the messages it changes on the way. It keeps no per-result record: per
 * file, the nearest later read, partial reads and write; per counted result, its message. It applies the rules of
 * `internal/evictionRules`, as the carried index of `internal/eviction` does, so the two decide the same on every list
 * (`test/EvictCarried.property.test.ts`). It is a pass of its own because building the index for one call costs 3 to
 * 4 times this pass.
 *
 * @internal
 */
import type { ContentBlock, Message, ToolResultBlock, ToolUseBlock } from "../Message.ts"
import type { Offloaded, OffloadReason } from "../Offload.ts"
import { estimateMessageTokens } from "../Tokens.ts"
import type { ToolClassifier } from "../Tools.ts"
import * as rules from "./evictionRules.ts"
import { escaped } from "./pointer.ts"
import { opensApiView } from "./apiView.ts"
import { covers, type LineRange } from "./toolInput.ts"

/** A later successful partial read: its lines, its message and the replies after it. */
interface PartialRead {
  readonly range: LineRange
  readonly message: number
  readonly replies: number
}

/**
 * What the messages after the current position hold for one file. A later successful read exists (this read is not
 * the file's latest) exactly when `whole` or `ranges` is set.
 */
interface LaterReads {
  readonly path: string
  /** The nearest later successful whole read, or -1; and the replies after it. */
  whole: number
  wholeReplies: number
  /** Later successful partial reads after the nearest whole one, none of which another one covers. */
  ranges: Array<PartialRead> | undefined
  /** The nearest later successful write, or -1; and the replies after it. */
  write: number
  writeReplies: number
  /** The path as a pointer writes it (`pointer.escaped`), once a pointer of a read of it was priced. */
  escapedPath: string | undefined
}

const laterReadsOf = (paths: Map<string, LaterReads>, path: string): LaterReads => {
  let facts = paths.get(path)
  if (facts === undefined) {
    facts = {
      path,
      whole: -1,
      wholeReplies: 0,
      ranges: undefined,
      write: -1,
      writeReplies: 0,
      escapedPath: undefined
    }
    paths.set(path, facts)
  }
  return facts
}

/** Records a successful read at `message` as the nearest later one. */
const addRead = (facts: LaterReads, range: LineRange | undefined, message: number, replies: number): void => {
  if (range === undefined) {
    facts.whole = message
    facts.wholeReplies = replies
    facts.ranges = undefined
    return
  }
  // a farther read this one covers can no longer be the nearest covering one
  const kept = facts.ranges?.filter((later) => !covers(range, later.range)) ?? []
  kept.push({ range, message, replies })
  facts.ranges = kept
}

/** Whether a later successful read of the file exists. */
const readLater = (facts: LaterReads): boolean => facts.whole >= 0 || facts.ranges !== undefined

/**
 * The replies after the nearest later read covering `range` (the moment this read became superseded), or -1 when no
 * later read covers it. A later whole read covers every range.
 */
const coveringReplies = (facts: LaterReads, range: LineRange | undefined): number => {
  let at = facts.whole
  let replies = facts.wholeReplies
  if (range !== undefined && facts.ranges !== undefined) {
    for (const later of facts.ranges) {
      if ((at < 0 || later.message < at) && covers(later.range, range)) (at = later.message, replies = later.replies)
    }
  }
  return at < 0 ? -1 : replies
}

/** How many blocks of the reply before a result, from its end, the call lookup compares before it asks the map. */
const LAST_REPLY_SCAN = 16

/** Every call of the view from `viewStart` on, by id, each id's in conversation order. */
type CallsById = Map<string, Array<{ readonly message: number; readonly block: ToolUseBlock }>>

const callsById = (messages: ReadonlyArray<Message>, viewStart: number): CallsById => {
  const byId: CallsById = new Map()
  for (let i = viewStart; i < messages.length; i++) {
    const message = messages[i]!
    if (message.role !== "assistant" || typeof message.content === "string") continue
    for (const block of message.content) {
      if (block.type !== "tool_use") continue
      const call = block as ToolUseBlock
      let list = byId.get(call.id)
      if (list === undefined) byId.set(call.id, list = [])
      list.push({ message: i, block: call })
    }
  }
  return byId
}

/** The nearest call with `id` before message `before` (`calls` holds the view's). */
const callBefore = (calls: CallsById, id: string, before: number): ToolUseBlock | undefined => {
  const list = calls.get(id)
  if (list === undefined) return undefined
  for (let k = list.length - 1; k >= 0; k--) if (list[k]!.message < before) return list[k]!.block
  return undefined
}

/** The call with `id` among the last `LAST_REPLY_SCAN` blocks of `reply`, the latest first. */
const callInReply = (reply: string | ReadonlyArray<ContentBlock>, id: string): ToolUseBlock | undefined => {
  if (typeof reply === "string") return undefined
  for (let b = reply.length - 1; b >= 0 && b >= reply.length - LAST_REPLY_SCAN; b--) {
    const block = reply[b]!
    if (block.type === "tool_use" && (block as ToolUseBlock).id === id) return block as ToolUseBlock
  }
  return undefined
}

/**
 * The eviction of `messages` (`evictStaleToolResults`), decided backward: a read is superseded by the nearest later
 * covering read, modified by the nearest later write, stale when `keep` counted results follow it.
 */
export const evictCold = <M extends Message>(
  messages: ReadonlyArray<M>,
  keep: number,
  classify: ToolClassifier,
  options: rules.DecideOptions
): rules.Decision<M> => {
  const pinned = options.pinned
  const paths = new Map<string, LaterReads>()
  // the message of each counted result after the current one, newest first, and the replies after it
  const countedAt: Array<number> = []
  const countedReplies: Array<number> = []
  const offloaded: Array<Offloaded> = []
  let out: Array<M> | undefined
  let tokensFreed = 0
  let readsPaid = 0
  let firstChange = messages.length
  // assistant messages after message i
  let replies = 0
  let calls: CallsById | undefined
  // where the search for the reply before a user message stopped: an assistant message, an opener, or -1
  let stop = messages.length
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i]!
    const content = message.content
    if (message.role === "assistant") {
      replies++
      if (opensApiView(message)) break
      continue
    }
    if (message.role !== "user" || typeof content === "string") {
      if (opensApiView(message)) break
      continue
    }
    const opens = opensApiView(message)
    // the reply the results answer: the nearest assistant message before, unless a view opens between (the stop of
    // the last search holds for every message after it up to here, so each message is searched over once)
    if (stop >= i) {
      stop = i - 1
      while (stop >= 0 && messages[stop]!.role !== "assistant" && !opensApiView(messages[stop]!)) stop--
    }
    const reply = opens || stop < 0 || messages[stop]!.role !== "assistant" ? undefined : messages[stop]!.content
    let newContent: Array<ContentBlock> | undefined
    for (let j = content.length - 1; j >= 0; j--) {
      const block = content[j]!
      if (block.type !== "tool_result") continue
      const result = block as ToolResultBlock
      const id = result.tool_use_id
      let toolUse = reply === undefined ? undefined : callInReply(reply, id)
      if (toolUse === undefined && !opens) {
        toolUse = callBefore(calls ??= callsById(messages, viewStart(messages, i)), id, i)
      }
      if (toolUse === undefined) continue
      const action = classify(toolUse)
      const failed = result.is_error === true
      let reason: OffloadReason | undefined
      // the replies after the moment it became offloadable: the covering read's, the write's, or (stale) the
      // keep-th counted result's after it, or its own with keep 0
      let sinceReplies = replies
      const counted = countedAt.length
      let read: LaterReads | undefined
      if (action._tag === "Read") {
        const facts = read = laterReadsOf(paths, action.path)
        const pinnedLatest = rules.isPinnedLatest(action, readLater(facts), pinned)
        const covering = coveringReplies(facts, action.range)
        const superseded = covering >= 0
        const modified = facts.write >= 0
        reason = rules.reasonFor(superseded, modified, pinnedLatest, failed, counted, keep)
        if (reason === "superseded") sinceReplies = covering
        else if (reason === "modified") sinceReplies = facts.writeReplies
        if (rules.countedForKeep(superseded, modified, pinnedLatest)) {
          countedAt.push(i)
          countedReplies.push(replies)
        }
        if (!failed) addRead(facts, action.range, i, replies)
      } else {
        if (action._tag === "Write" && !failed) {
          const facts = laterReadsOf(paths, action.path)
          facts.write = i
          facts.writeReplies = replies
        }
        // nothing supersedes or modifies a call that is not a read: it is counted, and only ever stale
        reason = rules.reasonFor(false, false, false, failed, counted, keep)
        countedAt.push(i)
        countedReplies.push(replies)
      }
      if (reason === undefined) continue
      if (reason === "stale" && keep > 0) sinceReplies = countedReplies[counted - keep]!
      const payload = rules.payloadOf(result)
      if (!rules.eligible(result, action, failed, payload)) continue
      const path = read === undefined ? undefined : (read.escapedPath ??= escaped(read.path))
      const pointer = rules.pricedPointer(
        toolUse,
        action,
        result,
        reason,
        payload,
        path,
        options.recall,
        options.keepPrinted
      )
      if (pointer === undefined) continue
      newContent ??= content.slice()
      newContent[j] = pointer.replacement
      const o = rules.offloadedBy(i, j, pointer)
      readsPaid += o.tokensFreed * sinceReplies
      offloaded.push(o)
    }
    if (newContent !== undefined) {
      const replaced = { ...message, content: newContent } as M
      tokensFreed += rules.freedBy(message, replaced)
      out ??= messages.slice()
      out[i] = replaced
      firstChange = i
    }
    if (opens) break
  }
  if (out === undefined) return rules.unchanged(messages)
  const evicted = out
  const behind = () => {
    let sum = 0
    for (let k = firstChange; k < evicted.length; k++) sum += estimateMessageTokens(evicted[k]!)
    return sum
  }
  const dropped = () => options.droppedThinking?.(firstChange) ?? 0
  if (!rules.worthIt(options, tokensFreed, readsPaid, behind, dropped)) return rules.unchanged(messages)
  offloaded.reverse()
  return { messages: out, offloaded, tokensFreed }
}

/** The start of the API view of `messages` given that none of `messages[from..)` opens it. */
const viewStart = (messages: ReadonlyArray<Message>, from: number): number => {
  for (let i = from - 1; i > 0; i--) if (opensApiView(messages[i]!)) return i
  return 0
}
