/**
 * The eviction decisions of `Evict.evictStaleToolResults`, as an index that is built once and carried forward (what
 * `Conversation` keeps from step to step; a single call decides in one backward pass, `internal/coldEviction`). Both
 * apply the rules of `internal/evictionRules` (eligibility, reasons, pricing, rent-or-buy); this module only keeps what
 * those rules read up to date as messages arrive.
 *
 * An `EvictionIndex` holds what a decision needs to know about every tool result of the API view, maintained in
 * conversation order as messages are appended:
 * - the result's call and its classified action (a result's call is the nearest preceding tool_use with its id);
 * - for reads, whether a later successful read covers it (superseded, and the message of the earliest such read),
 *   whether a later successful write of its file exists (modified, and the earliest), whether any later successful
 *   read of the file exists (so it is not the file's latest);
 * - whether it is *counted* for `keepRecent` (`countedForKeep`), in a Fenwick tree, so a result's rank (counted
 *   results after it) and the result `keepRecent` places after it are O(log n);
 * - the *open* results: `eligible`, and not parked (a failed read with no reason yet, or a result whose pointer can
 *   never be smaller: only an event on its file wakes it).
 * Appending a message costs its blocks and, per read or write, the reads of that file not yet superseded. A decision
 * (`decide`) visits only the open results and the pin-sensitive ones (modified latest reads: their count follows the
 * `pinned` option), never the whole conversation; building the result copies the outer array only when it changes.
 *
 * @internal
 */
import type { ContentBlock, Message, ToolResultBlock, ToolUseBlock } from "../Message.ts"
import type { Offloaded, OffloadReason } from "../Offload.ts"
import { estimateMessageTokens } from "../Tokens.ts"
import { estimateMessageTokensUncached } from "./estimate.ts"
import { defaultToolClassifier, type ToolAction, type ToolClassifier } from "../Tools.ts"
import * as rules from "./evictionRules.ts"
import { Fenwick, FenwickCursor } from "./fenwick.ts"
import { opensApiView } from "./apiView.ts"
import { covers } from "./toolInput.ts"
import { payloadTokens } from "./pointer.ts"
import { isToolResult, isToolUse } from "./blocks.ts"

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
  /** The payload's estimated tokens (`payloadOf`). */
  readonly payload: number
  /** `evictionRules.eligible` when indexed (what the frontier looks for). */
  readonly eligible: boolean
  superseded: boolean
  /**
   * The message of the earliest later read that covers it, when `superseded` (-1 before: a small integer keeps the
   * field unboxed).
   */
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
 * The index of `messages` (its API view starting at `apiViewStart`), built in one forward pass: a message that
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
 * Indexes `messages[index.length..)` and returns -1. With `stopAtOpener` (building an index), a message after
 * `index.viewStart` that opens an API view stops it: its position is returned and the index is left half-built (build
 * one from there). Building reads the estimates through their cache (a compaction's view was mostly estimated
 * before); extending estimates its new messages without a cache entry (an entry for a new object costs more than its
 * estimate, and the index keeps it for the requests: `tokens`).
 */
const indexMessages = (index: EvictionIndex, messages: ReadonlyArray<Message>, stopAtOpener: boolean): number => {
  const estimate = stopAtOpener ? estimateMessageTokens : estimateMessageTokensUncached
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
    index.tokens.push(inView ? estimate(message) : 0)
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

/**
 * Recomputes whether a read is counted (`countedForKeep`) after an event on its file. A modified latest read not
 * superseded is counted exactly when its path is pinned, which only `decide` knows: it is pin-sensitive until then.
 */
const recount = (index: EvictionIndex, record: ResultRecord): void => {
  if (record.modified && !record.superseded && !record.readLater) index.pinSensitive.add(record)
  else {
    if (record.modified || record.superseded) index.pinSensitive.delete(record)
    // being pinned matters only to a modified latest read (above): false stands for it here
    setCounted(index, record, rules.countedForKeep(record.superseded, record.modified, false))
  }
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
  const payload = rules.payloadOf(result)
  const open = rules.eligible(result, action, failed, payload)
  const record: ResultRecord = {
    ordinal: index.records.length,
    message,
    block,
    toolUse,
    result,
    action,
    failed,
    payload,
    eligible: open,
    superseded: false,
    coveredAt: -1,
    modified: false,
    modifiedAt: -1,
    readLater: false,
    counted: true,
    state: open ? "open" : "closed"
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

/** The pointers built for a block, by reason (blocks are immutable, and a pointer depends on nothing else). */
const pointers = new WeakMap<ToolResultBlock, Array<rules.PricedPointer>>()

/**
 * `pricedPointer` for an indexed result, remembered by block: the index decides again next step. `recall`: the
 * caller offers the recall tool (`DecideOptions.recall`), and `keepPrinted` (`DecideOptions.keepPrinted`), which a
 * remembered pointer must match.
 */
const pointerFor = (
  record: ResultRecord,
  block: ToolResultBlock,
  reason: OffloadReason,
  recall: boolean | undefined,
  keepPrinted: boolean | undefined
): rules.PricedPointer | undefined => {
  // the pointers that say how to recall: an output's, and a modified read's
  const says = recall === true && (record.action._tag !== "Read" || reason === "modified")
  let built = pointers.get(block)
  if (built !== undefined) {
    for (const p of built) {
      if (p.reason === reason && (p.ref.recall === true) === says && p.keptPrinted === (keepPrinted === true)) return p
    }
  }
  const pointer = rules.pricedPointer(
    record.toolUse,
    record.action,
    block,
    reason,
    record.payload,
    undefined,
    recall,
    keepPrinted
  )
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
  options: rules.DecideOptions
): rules.Decision<M> => {
  const pinned = options.pinned
  // a pin-sensitive read is a modified latest read, not superseded
  for (const record of index.pinSensitive) {
    setCounted(index, record, rules.countedForKeep(false, true, rules.isPinnedLatest(record.action, false, pinned)))
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
    const pinnedLatest = rules.isPinnedLatest(record.action, record.readLater, pinned)
    const after = ranks.prefix(record.ordinal + 1)
    const reason = rules.reasonFor(record.superseded, record.modified, pinnedLatest, record.failed, total - after, keep)
    // the message it became offloadable at: the covering read's, the write's, or (stale) the keep-th counted result's
    // after it, or its own with keep 0
    let since = record.message
    if (reason === "superseded") since = record.coveredAt
    else if (reason === "modified") since = record.modifiedAt
    else if (reason === "stale" && keep > 0) since = index.records[places.search(after + keep)]!.message
    if (reason === undefined) {
      // a failed read of a file nothing happened to since: only an event on its file can give it a reason
      if (record.failed && !record.modified) record.state = "parked"
      else open[kept++] = record
      continue
    }
    const pointer = pointerFor(record, block, reason, options.recall, options.keepPrinted)
    if (pointer === undefined) {
      // until an event on its file, a read keeps its reason (or has none); other results are only ever stale
      const never = reachableReasons(record).every((r) =>
        r === reason || pointerFor(record, block, r, options.recall, options.keepPrinted) === undefined
      )
      record.state = never ? "closed" : "parked"
      continue
    }
    open[kept++] = record
    offloaded.push(rules.offloadedBy(record.message, record.block, pointer))
    sinces.push(since)
  }
  open.length = kept
  if (offloaded.length === 0) return rules.unchanged(messages)
  // rebuild the changed messages, newest first (the order the backward scan summed in); the view is copied only once
  // the eviction pays (most steps that find a candidate keep the view as it is)
  const changed: Array<number> = []
  const replacements: Array<M> = []
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
    tokensFreed += rules.freedBy(message, replaced)
    changed.push(i)
    replacements.push(replaced)
    t = u
  }
  const firstChange = offloaded[0]!.messageIndex
  const tokens = index.tokens
  const behind = () => tokens.prefix(tokens.length) - tokens.prefix(firstChange) - tokensFreed
  const dropped = () => options.droppedThinking?.(firstChange) ?? 0
  if (!rules.worthIt(options, tokensFreed, readsPaid, behind, dropped)) return rules.unchanged(messages)
  const out = messages.slice()
  for (let k = 0; k < changed.length; k++) out[changed[k]!] = replacements[k]!
  return { messages: out, offloaded, tokensFreed }
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
 * The eviction frontier of the indexed messages (`Evict.evictionFrontier`: the oldest `evictionRules.eligible`
 * result), found by advancing a carried position: a result once offloaded stays so.
 */
export const indexedFrontier = (
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

/**
 * The eviction frontier: the position (message, block) of the oldest tool result an eviction may still offload — not
 * offloaded yet, answering a known tool call, larger than any pointer, and not a failed non-read (those are never
 * offloaded). Everything before it is never changed by `evictStaleToolResults`, so a cache breakpoint just before it
 * survives every eviction. `undefined` when no result may still be offloaded.
 * @category eviction
 */
export const evictionFrontier = (
  messages: ReadonlyArray<Message>,
  options: { readonly classifier?: ToolClassifier | undefined } = {}
): { readonly message: number; readonly block: number } | undefined => {
  const classify = options.classifier ?? defaultToolClassifier
  const calls = new Map<string, ToolUseBlock>()
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i]!
    if (!Array.isArray(message.content)) continue // a system message may have no content (API-RULES 26)
    if (message.role === "assistant") {
      for (const block of message.content) if (isToolUse(block)) calls.set(block.id, block)
      continue
    }
    for (let j = 0; j < message.content.length; j++) {
      const block = message.content[j]!
      if (!isToolResult(block)) continue
      const call = calls.get(block.tool_use_id)
      if (call === undefined) continue
      if (rules.eligible(block, classify(call), block.is_error === true, payloadTokens(block))) {
        return { message: i, block: j }
      }
    }
  }
  return undefined
}
