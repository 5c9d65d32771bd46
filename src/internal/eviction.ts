/**
 * The eviction decisions of `Evict.evictStaleToolResults`, as an index that is built once and carried forward (what
 * `Conversation` keeps from step to step; a single call decides in one backward pass, `internal/coldEviction`, and the
 * two agree on every list). The pointer pricing and the rent-or-buy rule here are shared by both.
 *
 * An `EvictionIndex` holds what a decision needs to know about every tool result of the API view, maintained in
 * conversation order as messages are appended:
 * - the result's call and its classified action (a result's call is the nearest preceding tool_use with its id);
 * - for reads, whether a later successful read covers it (superseded, and the message of the earliest such read),
 *   whether a later successful write of its file exists (modified, and the earliest), whether any later successful
 *   read of the file exists (so it is not the file's latest);
 * - whether it is *counted* for `keepRecent` (every result but a superseded read and a modified read that is not a
 *   pinned latest one), in a Fenwick tree, so a result's rank (counted results after it) and the result `keepRecent`
 *   places after it are O(log n);
 * - the *open* results: not offloaded, larger than any pointer, not a failed non-read, and not parked (a failed read
 *   with no reason yet, or a result whose pointer can never be smaller: only an event on its file wakes it).
 * Appending a message costs its blocks and, per read or write, the reads of that file not yet superseded. A decision
 * (`decide`) visits only the open results and the pin-sensitive ones (modified latest reads: their count follows the
 * `pinned` option), never the whole conversation; building the result copies the outer array only when it changes.
 *
 * @internal
 */
import { opensApiView } from "../ApiView.ts"
import type { ContentBlock, Message, ToolResultBlock, ToolUseBlock } from "../Message.ts"
import { isImage } from "../Message.ts"
import type { Offloaded, OffloadReason, OffloadRef } from "../Offload.ts"
import { formatOffloadRef, isOffloaded } from "../Offload.ts"
import {
  CHARS_PER_TOKEN,
  estimateContentTokensUncached,
  estimateMessageTokens,
  estimateMessageTokensUncached
} from "../Tokens.ts"
import type { ToolAction, ToolClassifier } from "../Tools.ts"
import { covers } from "../Tools.ts"
import { Fenwick, FenwickCursor } from "./fenwick.ts"
import { escapedOften, outputLengthAtLeast, pointerLengthAtLeast, writePointer } from "./pointer.ts"
import { CLIP_MARK, clipHead } from "./text.ts"
import { inputLine, SHORT_INPUT_MAX } from "./toolInput.ts"

/** What one tool result of the view is, and what the results after it decided about it. */
interface ResultRecord {
  /** Position among the view's resolved results, from 0. */
  readonly ordinal: number
  readonly message: number
  readonly block: number
  readonly toolUse: ToolUseBlock
  /** The tool_result block as indexed: an offload replaces it in the messages, so another block there is a pointer. */
  readonly result: ToolResultBlock
  readonly action: ToolAction
  readonly failed: boolean
  /** The payload's estimated tokens (`payloadOf`), computed when a pointer could replace it, else 0. */
  readonly payload: number
  /** When indexed: not offloaded, larger than any pointer, not a failed non-read (what the frontier looks for). */
  readonly eligible: boolean
  superseded: boolean
  /** The message of the earliest later read that covers it, when `superseded` (-1 before: a small integer keeps the field unboxed). */
  coveredAt: number
  modified: boolean
  /** The message of the earliest later write of its file, when `modified` (-1 before). */
  modifiedAt: number
  readLater: boolean
  counted: boolean
  /** In `open`; `parked`: waiting for an event on its file. */
  state: "open" | "parked" | "closed"
}

/** The reads of one file not yet superseded, in order: the modified ones first (see the write case of `addResult`). */
type LiveReads = Array<ResultRecord>

/** The carried-forward decisions of one API view (see the module doc). Mutable: owned by one caller at a time. */
export interface EvictionIndex {
  readonly classify: ToolClassifier
  /** The first message of the API view. */
  readonly viewStart: number
  /** Messages indexed so far. */
  length: number
  /** The view's tool calls by id, each the latest with its id so far (a result's call is the nearest before it). */
  readonly calls: Map<string, ToolUseBlock>
  readonly records: Array<ResultRecord>
  readonly paths: Map<string, LiveReads>
  /** 1 for each counted result, by ordinal. */
  readonly counted: Fenwick
  /** The estimate of each message (0 before `viewStart`), for the rent-or-buy rule. */
  readonly tokens: Fenwick
  /** `repliesUpTo[i]`: assistant messages at or before message i. */
  repliesUpTo: Int32Array
  /** Open results, by ordinal. */
  open: Array<ResultRecord>
  /** Parked results an event woke, to merge into `open`. */
  readonly woken: Array<ResultRecord>
  /** Modified reads with no later read and not superseded: counted exactly when their path is pinned. */
  readonly pinSensitive: Set<ResultRecord>
  /** Ordinal of the oldest result that may still be offloaded (the eviction frontier), advanced lazily. */
  frontier: number
}

/** No pointer is shorter than this many tokens: its fixed text alone is longer. */
export const MIN_POINTER_TOKENS: number = Math.floor(
  Math.min(
    ...(["superseded", "modified", "stale"] as const).flatMap((reason) => {
      const common = { tool: "", toolUseId: "", reason, tokens: 0, images: 0 }
      return [
        formatOffloadRef({ _tag: "Output", input: "", ...common }).length,
        formatOffloadRef({ _tag: "Read", path: "", ...common }).length
      ]
    })
  ) / CHARS_PER_TOKEN
)

/**
 * Most estimated tokens a pointer's payload can have: `Offload` reads a pointer only from a text of at most 2,048
 * characters (`test/EvictCarried.property.test.ts` holds it to that), so a larger payload is not offloaded.
 */
export const MAX_POINTER_TOKENS: number = 2048 / CHARS_PER_TOKEN

/** `Offload.payloadTokens(block)` without a cache entry: a cold eviction prices each payload once. */
export const payloadOf = (block: ToolResultBlock): number =>
  block.content === undefined ? 0 : estimateContentTokensUncached(block.content)

/** `isOffloaded(block)`, asked only of a payload small enough to be a pointer. */
export const offloadedAlready = (block: ToolResultBlock, payload: number): boolean =>
  payload <= MAX_POINTER_TOKENS && isOffloaded(block)

/**
 * The index of an empty view starting at `viewStart` (nothing indexed yet), sized for `capacity` messages; `replies`:
 * the `repliesUpTo` of an index of the same messages, to keep.
 */
const emptyIndex = (
  classify: ToolClassifier,
  viewStart: number,
  capacity: number,
  replies?: Int32Array
): EvictionIndex => ({
  classify,
  viewStart,
  length: 0,
  calls: new Map(),
  records: [],
  paths: new Map(),
  counted: new Fenwick(Math.max(64, capacity >> 1)),
  tokens: new Fenwick(Math.max(64, capacity)),
  repliesUpTo: replies ?? new Int32Array(Math.max(64, capacity)),
  open: [],
  woken: [],
  pinSensitive: new Set(),
  frontier: 0
})

/**
 * The index of `messages` (its API view starting at `ApiView.apiViewStart`), built in one forward pass: a message that
 * opens a later view restarts the index there, so finding the view's start costs no scan of its own.
 */
export const buildIndex = (
  messages: ReadonlyArray<Message>,
  classify: ToolClassifier
): EvictionIndex => {
  let index = emptyIndex(classify, 0, messages.length)
  for (let opener = indexMessages(index, messages, true); opener >= 0;) {
    // what lies before the view keeps its replies and costs nothing
    index = emptyIndex(classify, opener, messages.length, index.repliesUpTo)
    for (let i = 0; i < opener; i++) index.tokens.push(0)
    index.length = opener
    opener = indexMessages(index, messages, true)
  }
  return index
}

/**
 * Indexes `messages[index.length..)`, which must extend the messages indexed so far. Returns false (and indexes
 * nothing) when a new message opens a new API view: the index no longer applies, build a new one.
 */
export const extendIndex = (index: EvictionIndex, messages: ReadonlyArray<Message>): boolean => {
  for (let i = Math.max(index.length, index.viewStart + 1); i < messages.length; i++) {
    if (opensApiView(messages[i]!)) return false
  }
  indexMessages(index, messages, false)
  return true
}

/**
 * Indexes `messages[index.length..)` and returns -1. With `stopAtOpener`, a message after `index.viewStart` that
 * opens an API view stops it: its position is returned and the index is left half-built (build one from there).
 */
const indexMessages = (index: EvictionIndex, messages: ReadonlyArray<Message>, stopAtOpener: boolean): number => {
  const from = index.length
  if (index.repliesUpTo.length < messages.length) {
    let capacity = index.repliesUpTo.length
    while (capacity < messages.length) capacity *= 2
    const grown = new Int32Array(capacity)
    grown.set(index.repliesUpTo)
    index.repliesUpTo = grown
  }
  let replies = from === 0 ? 0 : index.repliesUpTo[from - 1]!
  const opensAt = (i: number): boolean => stopAtOpener && i > index.viewStart && opensApiView(messages[i]!)
  for (let i = from; i < messages.length; i++) {
    const message = messages[i]!
    if (message.role === "assistant") replies++
    index.repliesUpTo[i] = replies
    const inView = i >= index.viewStart
    index.tokens.push(inView ? estimateMessageTokens(message) : 0)
    if (!inView || typeof message.content === "string") continue
    const content = message.content
    if (message.role === "assistant") {
      for (const block of content) {
        const type = block.type
        if (type === "tool_use") index.calls.set((block as ToolUseBlock).id, block as ToolUseBlock)
        else if (type === "compaction" && opensAt(i)) return i
      }
    } else if (message.role === "user") {
      for (let j = 0; j < content.length; j++) {
        const block = content[j]!
        const type = block.type
        if (type === "tool_result") {
          const result = block as ToolResultBlock
          const toolUse = index.calls.get(result.tool_use_id)
          if (toolUse !== undefined) addResult(index, i, j, result, toolUse)
        } else if (type === "compaction" && opensAt(i)) return i
      }
    }
  }
  index.length = messages.length
  return -1
}

const setCounted = (index: EvictionIndex, record: ResultRecord, counted: boolean): void => {
  if (record.counted === counted) return
  record.counted = counted
  index.counted.set(record.ordinal, counted ? 1 : 0)
}

/** Recomputes whether a read is counted after an event on its file (pin-sensitive ones are settled by `decide`). */
const recount = (index: EvictionIndex, record: ResultRecord): void => {
  if (record.superseded) {
    index.pinSensitive.delete(record)
    setCounted(index, record, false)
  } else if (!record.modified) setCounted(index, record, true)
  else if (record.readLater) {
    index.pinSensitive.delete(record)
    setCounted(index, record, false)
  } else index.pinSensitive.add(record)
}

const wake = (index: EvictionIndex, record: ResultRecord): void => {
  if (record.state !== "parked") return
  record.state = "open"
  index.woken.push(record)
}

const addResult = (
  index: EvictionIndex,
  message: number,
  block: number,
  result: ToolResultBlock,
  toolUse: ToolUseBlock
): void => {
  const action = index.classify(toolUse)
  const failed = result.is_error === true
  let eligible = !(failed && action._tag !== "Read")
  let payload = 0
  if (eligible) {
    payload = payloadOf(result)
    eligible = payload > MIN_POINTER_TOKENS && !offloadedAlready(result, payload)
  }
  const record: ResultRecord = {
    ordinal: index.records.length,
    message,
    block,
    toolUse,
    result,
    action,
    failed,
    payload,
    eligible,
    superseded: false,
    coveredAt: -1,
    modified: false,
    modifiedAt: -1,
    readLater: false,
    counted: true,
    state: eligible ? "open" : "closed"
  }
  if (action._tag === "Read") {
    let live = index.paths.get(action.path)
    if (live === undefined) index.paths.set(action.path, live = [])
    if (!failed) {
      let kept = 0
      for (let k = 0; k < live.length; k++) {
        const earlier = live[k]!
        const first = !earlier.readLater
        earlier.readLater = true
        if (covers(action.range, earlier.action._tag === "Read" ? earlier.action.range : undefined)) {
          earlier.superseded = true
          earlier.coveredAt = message
        } else {
          live[kept++] = earlier
          // a read that already had a later one and is not covered: nothing it is decided on changed
          if (!first) continue
        }
        recount(index, earlier)
        wake(index, earlier)
      }
      live.length = kept
    }
    live.push(record)
  } else if (action._tag === "Write" && !failed) {
    const live = index.paths.get(action.path)
    if (live !== undefined) {
      // a write modifies every live read, and reads come after it unmodified: the unmodified ones are a suffix
      let from = live.length
      while (from > 0 && !live[from - 1]!.modified) from--
      for (let k = from; k < live.length; k++) {
        const earlier = live[k]!
        earlier.modified = true
        earlier.modifiedAt = message
        recount(index, earlier)
        wake(index, earlier)
      }
    }
  }
  index.records.push(record)
  index.counted.push(1)
  if (record.state === "open") index.open.push(record)
}

/** Whether the block an index record points at in `messages` is still its result. */
const holds = (messages: ReadonlyArray<Message>, record: ResultRecord): boolean => {
  const content = messages[record.message]?.content
  return content !== undefined && typeof content !== "string" && content[record.block] === record.result
}

const countImages = (content: ToolResultBlock["content"]): number => {
  if (content === undefined || typeof content === "string") return 0
  let n = 0
  for (const block of content) if (isImage(block)) n++
  return n
}

/** A read's ref, with the key order of `parseOffloadRef`'s refs, so an offload's ref serializes as the one read back. */
const readRef = (
  action: Extract<ToolAction, { _tag: "Read" }>,
  tool: string,
  toolUseId: string,
  reason: OffloadReason,
  tokens: number,
  images: number
): OffloadRef =>
  action.range === undefined
    ? { _tag: "Read", path: action.path, tool, toolUseId, reason, tokens, images }
    : { _tag: "Read", path: action.path, range: action.range, tool, toolUseId, reason, tokens, images }

/** A result's pointer for one reason: the replacement block, its ref, and its tokens (payload and pointer). */
export interface Pointer {
  readonly reason: OffloadReason
  readonly ref: OffloadRef
  readonly replacement: ToolResultBlock
  readonly before: number
  readonly after: number
}

/**
 * The pointer of `block` (answering `toolUse`, classified `action`, its payload `before` tokens) for `reason` when it
 * is smaller than the payload, else undefined. It is priced by its fields' lengths before its text is written, and an
 * output's before its input is shortened. `path`: a read's path already escaped (`pointer.escaped`).
 */
export const pointerOf = (
  toolUse: ToolUseBlock,
  action: ToolAction,
  block: ToolResultBlock,
  reason: OffloadReason,
  before: number,
  path?: string
): Pointer | undefined => {
  const tool = toolUse.name
  const toolUseId = block.tool_use_id
  const images = countImages(block.content)
  let ref: OffloadRef
  let escapedField = path
  if (action._tag === "Read") ref = readRef(action, tool, toolUseId, reason, before, images)
  else {
    if (Math.ceil(outputLengthAtLeast(tool, toolUseId, 0, reason, before, images) / CHARS_PER_TOKEN) >= before) {
      return undefined
    }
    // `shortInput(toolUse)`; a clipped one's head is escaped before the clip mark joins it (escaping the joined
    // text would first copy it into one string)
    const line = inputLine(toolUse, SHORT_INPUT_MAX)
    const head = clipHead(line, SHORT_INPUT_MAX)
    let input = line
    if (head !== line) (input = head + CLIP_MARK, escapedField = escapedOften(head) + CLIP_MARK)
    ref = { _tag: "Output", input, tool, toolUseId, reason, tokens: before, images }
  }
  if (Math.ceil(pointerLengthAtLeast(ref) / CHARS_PER_TOKEN) >= before) return undefined
  const content = writePointer(ref, escapedField)
  const after = Math.ceil(content.length / CHARS_PER_TOKEN)
  if (after >= before) return undefined
  return { reason, ref, replacement: { ...block, content }, before, after }
}

/** The pointers built for a block, by reason (blocks are immutable, and a pointer depends on nothing else). */
const pointers = new WeakMap<ToolResultBlock, Array<Pointer>>()

/** `pointerOf` for an indexed result, remembered by block: the index decides again next step. */
const pointerFor = (
  record: ResultRecord,
  block: ToolResultBlock,
  reason: OffloadReason
): Pointer | undefined => {
  let built = pointers.get(block)
  if (built !== undefined) { for (const p of built) if (p.reason === reason) return p }
  const pointer = pointerOf(record.toolUse, record.action, block, reason, record.payload)
  if (pointer !== undefined) {
    if (built === undefined) pointers.set(block, built = [])
    built.push(pointer)
  }
  return pointer
}

/** The reasons a result may still be offloaded for, now or after later messages. */
const reachableReasons = (record: ResultRecord): ReadonlyArray<OffloadReason> => {
  if (record.action._tag !== "Read") return ["stale"]
  if (record.superseded) return ["superseded"]
  return record.failed ? ["superseded", "modified"] : ["superseded", "modified", "stale"]
}

/** Options of `decide`: `EvictOptions` without the classifier (the index's). */
export interface DecideOptions {
  readonly pinned?: ((path: string) => boolean) | undefined
  readonly minSavings?: number | undefined
  readonly cacheCold?: boolean | undefined
  readonly prices: { readonly cacheRead: number; readonly cacheWrite: number }
}

/** What `decide` returns: `EvictResult` fields. */
export interface Decision<M extends Message> {
  readonly messages: Array<M>
  readonly offloaded: ReadonlyArray<Offloaded>
  readonly tokensFreed: number
}

/**
 * The eviction of `messages`: exactly the messages the index holds, where only eviction outputs recorded with
 * `applyOffloads` replaced blocks: `evictStaleToolResults`' result. Settles the
 * counts of pin-sensitive reads under `pinned`, drops results offloaded since, and parks results no pointer can ever
 * replace. Never changes what a later call decides; `applyOffloads` records a result that was taken.
 */
export const decide = <M extends Message>(
  index: EvictionIndex,
  messages: ReadonlyArray<M>,
  keep: number,
  options: DecideOptions
): Decision<M> => {
  const pinned = options.pinned
  for (const record of index.pinSensitive) {
    setCounted(index, record, pinned !== undefined && pinned((record.action as { path: string }).path))
  }
  if (index.woken.length > 0) {
    index.open = [...index.open, ...index.woken].sort((a, b) => a.ordinal - b.ordinal)
    index.woken.length = 0
  }
  const counted = index.counted
  const total = counted.prefix(counted.length)
  // a result's rank and the result keepRecent places after it: the open results come in order, so these walk on
  const ranks = new FenwickCursor(counted)
  const places = new FenwickCursor(counted)
  const replies = messages.length === 0 ? 0 : index.repliesUpTo[messages.length - 1]!
  // the offloads in conversation order, and the message each became offloadable at
  const offloaded: Array<Offloaded> = []
  const sinces: Array<number> = []
  let kept = 0
  const open = index.open
  for (let k = 0; k < open.length; k++) {
    const record = open[k]!
    if (record.state !== "open" || !holds(messages, record)) {
      record.state = "closed"
      continue
    }
    const block = record.result
    let reason: OffloadReason | undefined
    let since = record.message
    const action = record.action
    const pinnedLatest = action._tag === "Read" && !record.readLater && pinned !== undefined && pinned(action.path)
    if (record.superseded) (reason = "superseded", since = record.coveredAt)
    else if (record.modified && !pinnedLatest) (reason = "modified", since = record.modifiedAt)
    else if (!pinnedLatest && !record.failed) {
      const after = ranks.prefix(record.ordinal + 1)
      if (total - after >= keep) {
        reason = "stale"
        since = keep === 0 ? record.message : index.records[places.search(after + keep)]!.message
      }
    }
    if (reason === undefined) {
      // a failed read of a file nothing happened to since: only an event on its file can give it a reason
      if (record.failed && !record.modified) record.state = "parked"
      else open[kept++] = record
      continue
    }
    const pointer = pointerFor(record, block, reason)
    if (pointer === undefined) {
      // until an event on its file, a read keeps its reason (or has none); other results are only ever stale
      const never = reachableReasons(record).every((r) => r === reason || pointerFor(record, block, r) === undefined)
      record.state = never ? "closed" : "parked"
      continue
    }
    open[kept++] = record
    offloaded.push({
      messageIndex: record.message,
      blockIndex: record.block,
      toolUseId: pointer.replacement.tool_use_id,
      block: pointer.replacement,
      reason: pointer.reason,
      tokensFreed: pointer.before - pointer.after,
      ref: pointer.ref
    })
    sinces.push(since)
  }
  open.length = kept
  if (offloaded.length === 0) return unchanged(messages)
  // rebuild the changed messages, newest first (the order the backward scan summed in)
  let out: Array<M> | undefined
  let tokensFreed = 0
  let readsPaid = 0
  for (let t = offloaded.length - 1; t >= 0;) {
    const i = offloaded[t]!.messageIndex
    const message = messages[i]!
    const newContent = (message.content as ReadonlyArray<ContentBlock>).slice()
    let u = t
    for (; u >= 0 && offloaded[u]!.messageIndex === i; u--) {
      const o = offloaded[u]!
      newContent[o.blockIndex] = o.block
      readsPaid += o.tokensFreed * (replies - index.repliesUpTo[sinces[u]!]!)
    }
    const replaced = { ...message, content: newContent } as M
    // both uncached: a cache entry per changed message would cost more than the walk (their blocks are few)
    tokensFreed += estimateMessageTokensUncached(message) - estimateMessageTokensUncached(replaced)
    out ??= messages.slice()
    out[i] = replaced
    t = u
  }
  const firstChange = offloaded[0]!.messageIndex
  if (!worthIt(index.tokens, options, tokensFreed, readsPaid, out!, firstChange)) return unchanged(messages)
  return { messages: out!, offloaded, tokensFreed }
}

/** The decision that changes nothing: the input array itself. */
export const unchanged = <M extends Message>(messages: ReadonlyArray<M>): Decision<M> => ({
  messages: messages as Array<M>,
  offloaded: [],
  tokensFreed: 0
})

/**
 * `keepRecent` as the decisions read it: a whole number of results, at least 0 (0 for NaN; a fraction rounds up, since
 * "the newest 2.5 stay" keeps the 3 whose rank is below 2.5).
 */
export const keepOf = (keepRecent: number): number => Number.isNaN(keepRecent) ? 0 : Math.max(0, Math.ceil(keepRecent))

/**
 * Whether an eviction that frees `tokensFreed` pays. With `minSavings` set: when it frees at least that many. Otherwise
 * the rent-or-buy rule: when the cache is known cold, always (everything is rewritten anyway); else once the cache
 * reads already paid on the freed tokens (their tokens times the requests sent since they became evictable, at the read
 * price) reach the cost of rewriting the prompt behind the first change (its tokens after the eviction, at the write
 * price). Like renting skis until the rent paid equals the price, it never pays more than twice the best choice made
 * with hindsight.
 */
export const worthIt = (
  tokens: Fenwick | undefined,
  options: DecideOptions,
  tokensFreed: number,
  readsPaid: number,
  out: ReadonlyArray<Message>,
  firstChange: number
): boolean => {
  if (options.minSavings !== undefined) return tokensFreed >= options.minSavings
  if (tokensFreed <= 0) return false
  if (options.cacheCold === true) return true
  let behind = 0
  if (tokens === undefined) { for (let i = firstChange; i < out.length; i++) behind += estimateMessageTokens(out[i]!) }
  else behind = tokens.prefix(tokens.length) - tokens.prefix(firstChange) - tokensFreed
  return readsPaid * options.prices.cacheRead >= behind * options.prices.cacheWrite
}

/**
 * Records an eviction's result as the index's messages: the offloaded results close and their messages' estimates
 * are replaced. `messages` is the eviction's output.
 */
export const applyOffloads = (
  index: EvictionIndex,
  messages: ReadonlyArray<Message>,
  offloaded: ReadonlyArray<Offloaded>
): void => {
  const tokens = index.tokens
  let last = -1
  for (const o of offloaded) {
    if (o.messageIndex === last) continue
    last = o.messageIndex
    tokens.set(last, estimateMessageTokens(messages[last]!))
  }
  // the offloaded records are dropped from `open` by the next `decide` (their blocks are offloaded now)
}

/**
 * The eviction frontier of the indexed messages (`Evict.evictionFrontier`: the oldest result not offloaded, larger
 * than any pointer and not a failed non-read), found by advancing a carried position: a result once offloaded stays so.
 */
export const frontierOf = (
  index: EvictionIndex,
  messages: ReadonlyArray<Message>
): { readonly message: number; readonly block: number } | undefined => {
  const records = index.records
  let f = index.frontier
  while (f < records.length && !(records[f]!.eligible && holds(messages, records[f]!))) f++
  index.frontier = f
  const at = records[f]
  return at === undefined ? undefined : { message: at.message, block: at.block }
}
