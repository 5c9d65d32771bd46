/**
 * Eviction decisions: which tool_result payloads to offload, and `evictStaleToolResults`, which offloads them. The
 * pointer that replaces a payload (its format, parser and `isOffloaded`) lives in `Offload` and is re-exported here.
 *
 * Tool output is most of a coding agent's context, and most of it is stale: a file read that was read again later, a
 * test run from ten turns ago. `evictStaleToolResults` replaces the payload of such tool_result blocks with a short,
 * typed pointer back to its source (`OffloadRef`). It never removes a block, so every tool_use keeps its tool_result.
 *
 * Order of decisions, for each tool_result whose tool_use is known:
 * 1. a read covered by a later successful read of the same file is **superseded**: offloaded, even when recent;
 * 2. a read followed by a successful write or edit of the same file is **modified**: offloaded, even when recent
 *    (unless it is a pinned path's latest read);
 * 3. of the rest, the newest `keepRecent` stay verbatim; errors, a pinned path's latest read, and results whose
 *    pointer would not be smaller than the payload stay too; everything else is **stale** and offloaded.
 *
 * An error stays unless a later read or write superseded it: a failed read followed by a successful read of the file
 * (1) or a successful write of it (2) goes, since what it failed to show is out of date anyway.
 *
 * "Later" only ever looks forward from a read, so the decision survives the prefix being cut away. Only the API view
 * is read and rewritten (`ApiView.apiViewStart` on): what lies before the last compaction block with content is
 * dropped by the API, so rewriting it would free nothing and still change the request's prefix.
 *
 * @since 0.1.0
 */
import { apiViewStart } from "./ApiView.ts"
import type { ContentBlock, Message, ToolResultBlock, ToolUseBlock } from "./Message.ts"
import { isImage, isToolResult, isToolUse } from "./Message.ts"
import type { Offloaded, OffloadReason, OffloadRef } from "./Offload.ts"
import { formatOffloadRef, isOffloaded, payloadTokens, pointerBlock } from "./Offload.ts"
import { CHARS_PER_TOKEN, estimateMessageTokens } from "./Tokens.ts"
import type { LineRange, ToolAction, ToolClassifier } from "./Tools.ts"
import { covers, defaultToolClassifier, shortInput } from "./Tools.ts"

/** The pointer format, moved to `Offload`; re-exported so `Evict.formatOffloadRef` and the rest keep working. */
export {
  formatOffloadRef,
  isOffloaded,
  type Offloaded,
  type OffloadReason,
  type OffloadRef,
  offloadRefOf,
  OMITTED_TOOL_RESULT,
  parseOffloadRef
} from "./Offload.ts"

// ============================================================================
// Eviction
// ============================================================================

/**
 * The recommended `keepRecent`: the newest 10 live tool results stay verbatim. It matches the observation window of
 * the published masking study, and on the corpus keepRecent 3, 5 and 10 free almost the same tokens (superseded reads
 * dominate), so the larger working set costs little. @category constants
 */
export const DEFAULT_KEEP_RECENT = 10

/**
 * The recommended `minSavings` for an agent loop, in estimated tokens. Each eviction rewrites the prompt prefix, so
 * the provider re-writes its cache (1.25× input) instead of reading it (0.1×). With `minSavings` 0 the pi sessions
 * break the cache about every other request (179 breaks, 0.647× the cost of no eviction); from 2,000 evictions are
 * batched (39 breaks, 0.627×); up to 15,000 the corpus cost stays within 1.5% of its minimum. It is what
 * `evictStaleToolResults` uses when `minSavings` is absent; pass `minSavings: 0` to evict whatever is stale.
 * @category constants
 */
export const DEFAULT_MIN_SAVINGS = 2_000

/**
 * The cache prices the rent-or-buy rule weighs, relative to an uncached input token (API-RULES 20): a read costs 0.1,
 * a 5-minute write 1.25. @category constants
 */
export const CACHE_PRICES = { cacheRead: 0.1, cacheWrite: 1.25 } as const

/** Options of `evictStaleToolResults`. @category models */
export interface EvictOptions {
  /**
   * A hot path (see `HotPaths`): its latest live read survives the `keepRecent` cutoff and a later write. Its
   * superseded duplicates still go, since that is deduplication, not thrash.
   */
  readonly pinned?: (path: string) => boolean
  /**
   * Fewest estimated tokens worth an eviction (default `DEFAULT_MIN_SAVINGS`, 2,000). When the eviction would free fewer, nothing changes and
   * the input array itself is returned, so the provider's prompt cache stays valid.
   */
  readonly minSavings?: number | undefined
  /** Which tool reads or writes what (default `defaultToolClassifier`). */
  readonly classifier?: ToolClassifier | undefined
  /** The provider's cache is known to have expired: everything is rewritten anyway, so offload at once. */
  readonly cacheCold?: boolean | undefined
  /** Cache prices the rent-or-buy rule weighs; default `CACHE_PRICES`. */
  readonly prices?: { readonly cacheRead: number; readonly cacheWrite: number } | undefined
}

/** What `evictStaleToolResults` returns. @category models */
export interface EvictResult<M extends Message> {
  /** The conversation with offloaded payloads; the input array itself when nothing changed. */
  readonly messages: Array<M>
  /** The offloaded blocks, in conversation order. */
  readonly offloaded: ReadonlyArray<Offloaded>
  /** `estimateTokens(input) - estimateTokens(messages)`, exactly. */
  readonly tokensFreed: number
}

/** Per-path facts about the part of the conversation after the current position (the backward scan). */
interface PathState {
  /** A later successful read of the whole file exists. */
  whole: boolean
  /** Ranges of later successful partial reads (none covered by another). */
  ranges: Array<LineRange>
  /** A later successful write or edit exists. */
  modified: boolean
  /** A later successful read exists (so this one is not the path's latest). */
  readLater: boolean
  /** Message index of the earliest later whole read, and of the earliest later write. */
  wholeAt: number
  modifiedAt: number
  /** Message index of each range in `ranges`. */
  rangeAt: Array<number>
}

const countImages = (content: ToolResultBlock["content"]): number => {
  if (content === undefined || typeof content === "string") return 0
  let n = 0
  for (const block of content) if (isImage(block)) n++
  return n
}

const makeRef = (
  toolUse: ToolUseBlock,
  action: ToolAction,
  block: ToolResultBlock,
  reason: OffloadReason,
  tokens: number
): OffloadRef => {
  const images = countImages(block.content)
  const common = { tool: toolUse.name, toolUseId: block.tool_use_id, reason, tokens, images }
  if (action._tag !== "Read") return { _tag: "Output", input: shortInput(toolUse), ...common }
  return action.range === undefined
    ? { _tag: "Read", path: action.path, ...common }
    : { _tag: "Read", path: action.path, range: action.range, ...common }
}

/** No pointer is shorter than this many tokens: its fixed text alone is longer. */
const MIN_POINTER_TOKENS = Math.floor(
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

/** Results whose pointer for the given reason was not smaller than their payload (their decision is cached). */
const tooSmall = new WeakMap<ToolResultBlock, OffloadReason>()

const addRead = (state: PathState, range: LineRange | undefined, at: number): void => {
  state.readLater = true
  if (range === undefined) {
    state.whole = true
    state.wholeAt = at
    state.ranges = []
    state.rangeAt = []
    return
  }
  if (state.whole) return
  const kept = state.ranges.map((r, k) => ({ r, at: state.rangeAt[k]! })).filter(({ r }) => !covers(range, r))
  state.ranges = [...kept.map((k) => k.r), range]
  state.rangeAt = [...kept.map((k) => k.at), at]
}

const isCovered = (state: PathState, range: LineRange | undefined): boolean =>
  state.whole || (range !== undefined && state.ranges.some((r) => covers(r, range)))

/** Message index of the earliest later read covering `range` (the moment this read became superseded). */
const coveredAt = (state: PathState, range: LineRange | undefined): number => {
  let at = state.whole ? state.wholeAt : Infinity
  if (range !== undefined) state.ranges.forEach((r, k) => covers(r, range) && (at = Math.min(at, state.rangeAt[k]!)))
  return at
}

/**
 * Whether an eviction that frees `tokensFreed` pays. With `minSavings` set: when it frees at least that many. Otherwise
 * the rent-or-buy rule: when the cache is known cold, always (everything is rewritten anyway); else once the cache
 * reads already paid on the freed tokens (their tokens times the requests sent since they became evictable, at the read
 * price) reach the cost of rewriting the prompt behind the first change (its tokens after the eviction, at the write
 * price). Like renting skis until the rent paid equals the price, it never pays more than twice the best choice made
 * with hindsight.
 */
const worthIt = (
  options: EvictOptions,
  tokensFreed: number,
  readsPaid: number,
  out: ReadonlyArray<Message>,
  firstChange: number
): boolean => {
  if (options.minSavings !== undefined) return tokensFreed >= options.minSavings
  if (tokensFreed <= 0) return false
  if (options.cacheCold === true) return true
  const prices = options.prices ?? CACHE_PRICES
  let behind = 0
  for (let i = firstChange; i < out.length; i++) behind += estimateMessageTokens(out[i]!)
  return readsPaid * prices.cacheRead >= behind * prices.cacheWrite
}

/**
 * Offloads the payload of old tool_result blocks, replacing it with a typed pointer (`formatOffloadRef`).
 *
 * Guarantees:
 * - no block is added or removed, and every tool_use/tool_result id pair is unchanged; only `content` changes;
 * - superseded and modified reads go first; of the rest, the newest `keepRecent` stay verbatim; errors stay unless
 *   superseded or modified (a later read or write of the file made them stale); a pinned path's latest read stays;
 *   a result is offloaded only when its pointer is smaller;
 * - only the API view (`ApiView.apiViewStart` on) is touched: results before the last compaction block with content
 *   are left as they are (the API drops them), so `tokensFreed` is what the API view loses;
 * - the estimate never grows, and `tokensFreed` is the exact drop of `estimateTokens` (taken on the API view);
 * - when fewer than `minSavings` tokens (default `DEFAULT_MIN_SAVINGS`) would be freed (or nothing would change), the input array is returned;
 * - the input is never mutated; unchanged messages and blocks are shared by reference;
 * - pure and idempotent: the same input and options give byte-identical output, and a second application changes
 *   nothing. Tool results without a preceding tool_use, and blocks already offloaded, are left as they are.
 *
 * One forward pass indexes the tool calls, one backward pass decides and rebuilds: linear in the number of blocks.
 * @category eviction
 */
export const evictStaleToolResults = <M extends Message>(
  messages: ReadonlyArray<M>,
  keepRecent: number,
  options: EvictOptions = {}
): EvictResult<M> => {
  const classify = options.classifier ?? defaultToolClassifier
  const pinned = options.pinned
  const keep = Number.isNaN(keepRecent) ? 0 : Math.max(0, keepRecent)
  // forward: each tool_result's call is the nearest preceding tool_use with its id (real sessions reuse ids)
  const calls = new Map<string, ToolUseBlock>()
  const resolved: Array<ToolUseBlock | undefined> = []
  const viewStart = apiViewStart(messages)
  // replies at or before each message: the requests sent with a message in the prompt are the replies after it
  const repliesUpTo: Array<number> = []
  let replies = 0
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i]!
    if (message.role === "assistant") replies++
    repliesUpTo.push(replies)
    if (i < viewStart || typeof message.content === "string") continue
    if (message.role === "assistant") {
      for (const block of message.content) if (isToolUse(block)) calls.set(block.id, block)
    } else if (message.role === "user") {
      for (const block of message.content) if (isToolResult(block)) resolved.push(calls.get(block.tool_use_id))
    }
  }
  const paths = new Map<string, PathState>()
  const stateOf = (path: string): PathState => {
    let state = paths.get(path)
    if (state === undefined) {
      state = {
        whole: false,
        ranges: [],
        modified: false,
        readLater: false,
        wholeAt: Infinity,
        modifiedAt: Infinity,
        rangeAt: []
      }
      paths.set(path, state)
    }
    return state
  }
  const offloaded: Array<Offloaded> = []
  let out: Array<M> | undefined
  let tokensFreed = 0
  let rank = 0
  // message index of each live result by rank (newest first): the result of rank r went stale with rank r - keep
  const rankAt: Array<number> = []
  // rent-or-buy: the cache reads already paid on the tokens an offload frees, and the first changed message
  let readsPaid = 0
  let firstChange = messages.length
  for (let i = messages.length - 1; i >= viewStart; i--) {
    const message = messages[i]!
    if (message.role !== "user" || typeof message.content === "string") continue
    const content = message.content
    let newContent: Array<ContentBlock> | undefined
    for (let j = content.length - 1; j >= 0; j--) {
      const block = content[j]!
      if (!isToolResult(block)) continue
      const toolUse = resolved.pop()
      if (toolUse === undefined) continue
      const action = classify(toolUse)
      const failed = block.is_error === true
      let reason: OffloadReason | undefined
      let since = i
      const staleSince = (r: number) => r - keep < rankAt.length ? rankAt[r - keep]! : i
      if (action._tag === "Read") {
        const state = stateOf(action.path)
        const superseded = isCovered(state, action.range)
        const pinnedLatest = !state.readLater && pinned !== undefined && pinned(action.path)
        const r = rank
        if (superseded) (reason = "superseded", since = coveredAt(state, action.range))
        else if (state.modified && !pinnedLatest) (reason = "modified", since = state.modifiedAt)
        else if (rank++ >= keep && !pinnedLatest) (reason = "stale", since = staleSince(r))
        if (!failed) addRead(state, action.range, i)
      } else {
        if (action._tag === "Write" && !failed) {
          const state = stateOf(action.path)
          state.modified = true
          state.modifiedAt = i
        }
        if (rank++ >= keep) (reason = "stale", since = staleSince(rank - 1))
      }
      if (rank > rankAt.length) rankAt.push(i)
      if (reason === undefined || (failed && reason === "stale") || isOffloaded(block)) continue
      const before = payloadTokens(block)
      if (before <= MIN_POINTER_TOKENS || tooSmall.get(block) === reason) continue
      const ref = makeRef(toolUse, action, block, reason, before)
      const replacement = pointerBlock(block, ref)
      const after = Math.ceil((replacement.content as string).length / CHARS_PER_TOKEN)
      if (after >= before) {
        tooSmall.set(block, reason)
        continue
      }
      newContent ??= content.slice()
      newContent[j] = replacement
      readsPaid += (before - after) * (replies - (repliesUpTo[since] ?? replies))
      firstChange = i
      offloaded.push({
        messageIndex: i,
        blockIndex: j,
        toolUseId: block.tool_use_id,
        block: replacement,
        reason,
        tokensFreed: before - after,
        ref
      })
    }
    if (newContent !== undefined) {
      const replaced = { ...message, content: newContent } as M
      tokensFreed += estimateMessageTokens(message) - estimateMessageTokens(replaced)
      out ??= messages.slice()
      out[i] = replaced
    }
  }
  if (out === undefined || !worthIt(options, tokensFreed, readsPaid, out, firstChange)) {
    return { messages: messages as Array<M>, offloaded: [], tokensFreed: 0 }
  }
  offloaded.reverse()
  return { messages: out, offloaded, tokensFreed }
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
    if (typeof message.content === "string") continue
    if (message.role === "assistant") {
      for (const block of message.content) if (isToolUse(block)) calls.set(block.id, block)
      continue
    }
    for (let j = 0; j < message.content.length; j++) {
      const block = message.content[j]!
      if (!isToolResult(block) || isOffloaded(block)) continue
      const call = calls.get(block.tool_use_id)
      if (call === undefined || payloadTokens(block) <= MIN_POINTER_TOKENS) continue
      if (block.is_error === true && classify(call)._tag !== "Read") continue
      return { message: i, block: j }
    }
  }
  return undefined
}
