/**
 * The rules of `Evict.evictStaleToolResults`, written once. Two passes apply them: the backward pass of a single call
 * (`internal/coldEviction`) and the index `Conversation` carries from step to step (`internal/eviction`); they differ
 * only in how they learn what follows a result (a backward sweep, or records updated as messages arrive), so a new
 * rule is added here and both passes follow it (`test/EvictCarried.property.test.ts` holds them and the reference
 * scan of `test/fixtures/EvictReference.ts` equal on every list).
 *
 * - eligibility (`eligible`): which results an eviction may ever offload, also the eviction frontier's rule;
 * - reasons (`reasonFor`, `countedForKeep`, `isPinnedLatest`): superseded, modified or stale, and which results count
 *   towards `keepRecent`;
 * - pricing (`pricedPointer`): a result's pointer, when it is smaller than the payload (with `keepPrinted`, an
 *   output's keeps the values it printed, by the summary's rule, `anchors.printedValues`);
 * - rent-or-buy (`worthIt`): whether the eviction's rewrite of the prompt pays.
 *
 * @internal
 */
import type { Message, ToolResultBlock, ToolUseBlock } from "../Message.ts"
import type { Offloaded, OffloadReason, OffloadRef } from "../Offload.ts"
import { isOffloaded } from "../Offload.ts"
import { CHARS_PER_TOKEN, estimateContentTokensUncached, estimateMessageTokensUncached } from "./estimate.ts"
import type { ToolAction } from "../Tools.ts"
import { escapedOften, MAX_POINTER_LENGTH, outputLengthAtLeast, pointerLengthAtLeast, writePointer } from "./pointer.ts"
import { CLIP_MARK, clipHead } from "./text.ts"
import { inputLine, SHORT_INPUT_MAX } from "./toolInput.ts"
import { holdsToolReference } from "./toolReferences.ts"
import { isImage } from "./blocks.ts"
import { printedValues, resultText } from "./anchors.ts"

// ============================================================================
// Eligibility
// ============================================================================

/** No pointer is shorter than this many tokens: its fixed text alone is longer. */
export const MIN_POINTER_TOKENS: number = Math.floor(
  Math.min(
    ...(["superseded", "modified", "stale"] as const).flatMap((reason) => {
      const common = { tool: "", toolUseId: "", reason, tokens: 0, images: 0 }
      return [
        writePointer({ _tag: "Output", input: "", ...common }).length,
        writePointer({ _tag: "Read", path: "", ...common }).length
      ]
    })
  ) / CHARS_PER_TOKEN
)

/**
 * Most estimated tokens a pointer's payload can have: a pointer is read only from a text of at most
 * `MAX_POINTER_LENGTH` characters (`test/EvictCarried.property.test.ts` holds it to that), so a larger payload is not
 * offloaded already.
 */
export const MAX_POINTER_TOKENS: number = MAX_POINTER_LENGTH / CHARS_PER_TOKEN

/** `Offload.payloadTokens(block)` without a cache entry: an eviction prices each payload once. */
export const payloadOf = (block: ToolResultBlock): number =>
  block.content === undefined ? 0 : estimateContentTokensUncached(block.content)

/** `isOffloaded(block)`, asked only of a payload small enough to be a pointer. */
export const offloadedAlready = (block: ToolResultBlock, payload: number): boolean =>
  payload <= MAX_POINTER_TOKENS && isOffloaded(block)

/**
 * Whether an eviction may ever offload `result` (answering a call classified `action`, its payload `payload` tokens):
 * not offloaded already, larger than any pointer, not a failed call other than a read (nothing later makes such a
 * failure out of date, and a failure is never stale), and holding no `tool_reference` (it loads a deferred tool:
 * offloading it would unload the tool for every later call). The eviction frontier is the oldest result
 * this holds for.
 */
export const eligible = (result: ToolResultBlock, action: ToolAction, failed: boolean, payload: number): boolean =>
  !(failed && action._tag !== "Read") && payload > MIN_POINTER_TOKENS && !offloadedAlready(result, payload) &&
  !holdsToolReference(result)

// ============================================================================
// Reasons
// ============================================================================

/** Whether a result is its file's latest read (no later successful read of the file) and the file is pinned. */
export const isPinnedLatest = (
  action: ToolAction,
  readLater: boolean,
  pinned: ((path: string) => boolean) | undefined
): boolean => action._tag === "Read" && !readLater && pinned !== undefined && pinned(action.path)

/**
 * Whether a result counts towards `keepRecent`: every result but a superseded read and a modified read that is not a
 * pinned latest one (those go anyway, so they hold no place in the working set).
 */
export const countedForKeep = (superseded: boolean, modified: boolean, pinnedLatest: boolean): boolean =>
  !superseded && !(modified && !pinnedLatest)

/**
 * Why a result is offloaded, or `undefined` when it stays, from what follows it: `superseded` when a later successful
 * read covers it (even a pinned latest read's duplicates go), else `modified` when a later successful write of its
 * file exists (unless it is a pinned latest read), else `stale` when at least `keep` counted results follow it
 * (`countedAfter`), unless it failed or is a pinned latest read.
 */
export const reasonFor = (
  superseded: boolean,
  modified: boolean,
  pinnedLatest: boolean,
  failed: boolean,
  countedAfter: number,
  keep: number
): OffloadReason | undefined => {
  if (superseded) return "superseded"
  if (modified && !pinnedLatest) return "modified"
  return !pinnedLatest && !failed && countedAfter >= keep ? "stale" : undefined
}

/**
 * `keepRecent` as the decisions read it: a whole number of results, at least 0 (0 for NaN; a fraction rounds up, since
 * "the newest 2.5 stay" keeps the 3 whose rank is below 2.5).
 */
export const keepOf = (keepRecent: number): number => Number.isNaN(keepRecent) ? 0 : Math.max(0, Math.ceil(keepRecent))

// ============================================================================
// Pricing
// ============================================================================

const countImages = (content: ToolResultBlock["content"]): number => {
  if (content === undefined || typeof content === "string") return 0
  let n = 0
  for (const block of content) if (isImage(block)) n++
  return n
}

/** A read's ref, in the key order of `parseOffloadRef`'s refs, so an offload's ref serializes as the one read back. */
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

/** The most URLs an output pointer keeps, and the longest URL it keeps. */
const MAX_URLS = 16
const MAX_URL_LENGTH = 256
const URL = /https?:\/\/[^\s"'<>()\[\]{}\\]+/g

/**
 * The distinct URLs in a result's text, in order (at most `MAX_URLS`, none longer than `MAX_URL_LENGTH`, trailing
 * punctuation left out): what a later `web_fetch` may fetch only while they are in the context.
 */
export const urlsOf = (content: ToolResultBlock["content"]): ReadonlyArray<string> => {
  const texts = typeof content === "string"
    ? [content]
    : Array.isArray(content)
    ? content.flatMap((b) => b.type === "text" ? [b.text] : [])
    : []
  const out: Array<string> = []
  for (const text of texts) {
    if (!text.includes("://")) continue
    for (const match of text.matchAll(URL)) {
      const url = match[0].replace(/[.,;:!?]+$/, "")
      if (url.length > MAX_URL_LENGTH || out.includes(url)) continue
      out.push(url)
      if (out.length === MAX_URLS) return out
    }
  }
  return out
}

/** A result's pointer for one reason: the replacement block, its ref, and its tokens (payload and pointer). */
export interface PricedPointer {
  readonly reason: OffloadReason
  readonly ref: OffloadRef
  readonly replacement: ToolResultBlock
  readonly before: number
  readonly after: number
  /** It was priced with `keepPrinted` (an output's pointer then holds what the output printed, if anything). */
  readonly keptPrinted: boolean
}

/**
 * The pointer of `block` (answering `toolUse`, classified `action`, its payload `before` tokens) for `reason` when it
 * is smaller than the payload, else undefined. It is priced by its fields' lengths before its text is written, and an
 * output's before its input is shortened. `path`: a read's path already escaped (`pointer.escaped`); `recall` and
 * `keepPrinted` as `DecideOptions` has them.
 */
export const pricedPointer = (
  toolUse: ToolUseBlock,
  action: ToolAction,
  block: ToolResultBlock,
  reason: OffloadReason,
  before: number,
  path?: string,
  recall?: boolean,
  keepPrinted?: boolean
): PricedPointer | undefined => {
  const tool = toolUse.name
  const toolUseId = block.tool_use_id
  const images = countImages(block.content)
  let ref: OffloadRef
  let escapedField = path
  if (action._tag === "Read") {
    const read = readRef(action, tool, toolUseId, reason, before, images)
    ref = recall === true && reason === "modified" ? { ...read, recall: true } : read
  } else {
    if (Math.ceil(outputLengthAtLeast(tool, toolUseId, 0, reason, before, images) / CHARS_PER_TOKEN) >= before) {
      return undefined
    }
    // `shortInput(toolUse)`; a clipped one's head is escaped before the clip mark joins it (escaping the joined
    // text would first copy it into one string)
    const line = inputLine(toolUse, SHORT_INPUT_MAX)
    const head = clipHead(line, SHORT_INPUT_MAX)
    let input = line
    if (head !== line) (input = head + CLIP_MARK, escapedField = escapedOften(head) + CLIP_MARK)
    const urls = urlsOf(block.content)
    const printed = keepPrinted === true ? printedValues(resultText(block.content)) : ""
    const output: OffloadRef = {
      _tag: "Output",
      input,
      tool,
      toolUseId,
      reason,
      tokens: before,
      images,
      ...(printed.length === 0 ? {} : { printed }),
      ...(urls.length === 0 ? {} : { urls })
    }
    ref = recall === true ? { ...output, recall: true } : output
  }
  if (Math.ceil(pointerLengthAtLeast(ref) / CHARS_PER_TOKEN) >= before) return undefined
  const content = writePointer(ref, escapedField)
  const after = Math.ceil(content.length / CHARS_PER_TOKEN)
  if (after >= before) return undefined
  return { reason, ref, replacement: { ...block, content }, before, after, keptPrinted: keepPrinted === true }
}

/** The offload of the result at (`message`, `block`) by `pointer`, as `EvictResult.offloaded` lists it. */
export const offloadedBy = (message: number, block: number, pointer: PricedPointer): Offloaded => ({
  messageIndex: message,
  blockIndex: block,
  toolUseId: pointer.replacement.tool_use_id,
  block: pointer.replacement,
  reason: pointer.reason,
  tokensFreed: pointer.before - pointer.after,
  ref: pointer.ref
})

/**
 * The estimated tokens `replaced` frees against `message`, as `estimateTokens` counts them. Both uncached: a cache
 * entry per changed message would cost more than the walk (their blocks are few).
 */
export const freedBy = (message: Message, replaced: Message): number =>
  estimateMessageTokensUncached(message) - estimateMessageTokensUncached(replaced)

// ============================================================================
// Rent-or-buy
// ============================================================================

/** Options of an eviction's decisions: `EvictOptions` without the classifier, with the prices filled in. */
export interface DecideOptions {
  readonly pinned?: ((path: string) => boolean) | undefined
  readonly minSavings?: number | undefined
  readonly cacheCold?: boolean | undefined
  readonly prices: { readonly cacheRead: number; readonly cacheWrite: number }
  /** `EvictOptions.droppedThinking`: the thinking tokens a rewrite from a message on would make the API drop. */
  readonly droppedThinking?: ((message: number) => number) | undefined
  /**
   * What restarting the server-held thread the rewrite breaks costs, in uncached input tokens (`internal/threadCost`);
   * absent: no thread, nothing beyond the cache is rewritten.
   */
  readonly restart?: (() => number) | undefined
  /** `EvictOptions.recall`: the caller offers the `recall` tool, so pointers say how to call it. */
  readonly recall?: boolean | undefined
  /** `EvictOptions.keepPrinted`: an output's pointer keeps the values the output printed. */
  readonly keepPrinted?: boolean | undefined
}

/**
 * What a dropped thinking token costs, relative to an uncached input token: the model thinks it again, at the output
 * price of current Sonnet- and Opus-class models (5x input).
 */
export const THINKING_REDO_PRICE = 5

/** What an eviction decides: `EvictResult` fields. */
export interface Decision<M extends Message> {
  readonly messages: Array<M>
  readonly offloaded: ReadonlyArray<Offloaded>
  readonly tokensFreed: number
}

/** The decision that changes nothing: the input array itself. */
export const unchanged = <M extends Message>(messages: ReadonlyArray<M>): Decision<M> => ({
  messages: messages as Array<M>,
  offloaded: [],
  tokensFreed: 0
})

/**
 * Whether an eviction that frees `tokensFreed` pays. With `minSavings` set: when it frees at least that many. Otherwise
 * the rent-or-buy rule: when the cache is known cold, always (everything is rewritten anyway); else once the cache
 * reads already paid on the freed tokens (`readsPaid`: each offload's freed tokens times the requests sent since it
 * became offloadable, at the read price) reach the cost of the rewrite: the prompt behind the first change (`behind`:
 * its tokens after the eviction, asked only here) at the write price, plus restarting the server-held thread when
 * there is one (`options.restart`: the whole view uploaded again, the first request's latency), except the thinking
 * blocks the rewrite makes the API drop (`dropped`), which are not written but thought again
 * (`THINKING_REDO_PRICE`). Like renting skis until the rent paid equals the price, it never pays more than twice the
 * best choice made with hindsight.
 */
export const worthIt = (
  options: DecideOptions,
  tokensFreed: number,
  readsPaid: number,
  behind: () => number,
  dropped: () => number = () => 0
): boolean => {
  if (options.minSavings !== undefined) return tokensFreed >= options.minSavings
  if (tokensFreed <= 0) return false
  if (options.cacheCold === true) return true
  const reads = readsPaid * options.prices.cacheRead
  let rewrite = behind() * options.prices.cacheWrite
  // the restart and the thinking only add to the cost: ask for each only when needed
  if (reads < rewrite) return false
  if (options.restart !== undefined) {
    rewrite += options.restart()
    if (reads < rewrite) return false
  }
  const lost = dropped()
  return lost <= 0 || reads >= rewrite + lost * (THINKING_REDO_PRICE - options.prices.cacheWrite)
}
