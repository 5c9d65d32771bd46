/**
 * The placement rules under `Cache.planBreakpoints`: how far the API looks back from a breakpoint, how many a request
 * may carry, which blocks accept one, the last such block before a position, one message with its breakpoints placed,
 * a count of the breakpoints a request carries, and the caller's own marks on tools and system blocks with what makes
 * them invalid.
 *
 * @internal
 */
import * as Data from "effect/Data"
import type { ContentBlock, Message } from "../Message.ts"
import { blocksOf, hasContent } from "./blocks.ts"
import type { CacheTtl } from "./cacheTtl.ts"

/**
 * How far back from a breakpoint, in blocks, the API looks for a cached prefix: 20. @category constants
 */
export const LOOKBACK_BLOCKS = 20

/**
 * The API's limit on `cache_control` breakpoints in one request (system, tools and messages together): 4.
 * @category constants
 */
export const MAX_BREAKPOINTS = 4

/** A block of a message list: `messages[message].content[block]` (a string content is block 0). @category models */
export interface BlockPosition {
  /** Index of the message. */
  readonly message: number
  /** Index of the block in the message's content (0 for a string content). */
  readonly block: number
}

/**
 * True when the API accepts `cache_control` on the block: every block type but `thinking` and `redacted_thinking`
 * (their SDK params have no `cache_control`), and never an empty text block.
 * @category placement
 */
export const acceptsBreakpoint = (block: ContentBlock): boolean => {
  if (block.type === "thinking" || block.type === "redacted_thinking") return false
  if (block.type === "text") {
    const text = (block as { readonly text?: unknown }).text
    return typeof text === "string" && text.trim().length > 0
  }
  return true
}

/**
 * The last block strictly before `position` that accepts a breakpoint (searching back through earlier messages), or
 * `undefined` when there is none.
 * @category placement
 */
export const breakpointBefore = (
  messages: ReadonlyArray<Message>,
  position: BlockPosition
): BlockPosition | undefined => {
  for (let m = Math.min(position.message, messages.length - 1); m >= 0; m--) {
    const blocks = blocksOf(messages[m]!)
    const from = m === position.message ? position.block - 1 : blocks.length - 1
    for (let b = from; b >= 0; b--) if (acceptsBreakpoint(blocks[b]!)) return { message: m, block: b }
  }
  return undefined
}

/**
 * The last block of the list that accepts a breakpoint, or `undefined`. @category placement
 */
export const lastBreakpoint = (messages: ReadonlyArray<Message>): BlockPosition | undefined =>
  messages.length === 0 ? undefined : breakpointBefore(messages, {
    message: messages.length - 1,
    block: blocksOf(messages[messages.length - 1]!).length
  })

/**
 * The number of `cache_control` breakpoints in a list of blocks or messages (for tests and reports). @category placement
 */
export const countBreakpoints = (items: ReadonlyArray<unknown>): number => {
  let n = 0
  for (const item of items) {
    if (typeof item !== "object" || item === null) continue
    if ("cache_control" in item && (item as { cache_control?: unknown }).cache_control != null) n++
    const content = (item as { content?: unknown }).content
    if (Array.isArray(content) && "role" in item) n += countBreakpoints(content)
  }
  return n
}

const withoutCacheControl = (block: ContentBlock): ContentBlock => {
  if (!("cache_control" in block)) return block
  const { cache_control: _, ...rest } = block as ContentBlock & { readonly cache_control?: unknown }
  return rest as ContentBlock
}

/**
 * `message` with `marker` as the `cache_control` of exactly the blocks at `marks` (its content's indexes; none:
 * `undefined` or empty) and no other `cache_control`: the message itself when that changes nothing, else a copy of
 * it and of the blocks that change (a string content becomes one text block). What `Cache.applyBreakpoints` does to
 * each message.
 * @category placement
 */
export const markedMessage = <M extends Message>(
  message: M,
  marks: ReadonlyArray<number> | undefined,
  marker: unknown
): M => {
  if (!hasContent(message)) return message // a system message with no content (API-RULES 26) has no blocks
  const marked = marks === undefined || marks.length === 0 ? undefined : marks
  if (typeof message.content === "string") {
    return marked?.includes(0) === true
      ? { ...message, content: [{ type: "text", text: message.content, cache_control: marker }] }
      : message
  }
  if (marked === undefined && !message.content.some((b) => "cache_control" in b)) return message
  const content = message.content.map((block, b) =>
    marked?.includes(b) === true ? { ...block, cache_control: marker } as ContentBlock : withoutCacheControl(block)
  )
  return { ...message, content }
}

/** A `cache_control` the caller put on a tool or a system block. @category models */
export interface CallerMark {
  /** Where it is in the request: `tools[i].cache_control` or `system[j].cache_control`. */
  readonly path: string
  /** The lifetime it asks for (`"5m"` when it names none), or `undefined` for a `ttl` the API alone can judge. */
  readonly ttl: CacheTtl | undefined
}

const markTtl = (control: unknown): CacheTtl | undefined => {
  const ttl = typeof control === "object" && control !== null ? (control as { readonly ttl?: unknown }).ttl : undefined
  return ttl === undefined || ttl === "5m" ? "5m" : ttl === "1h" ? "1h" : undefined
}

/** The marks of `items` (tools, or system blocks) appended to `out`; read on every request, so a plain loop. */
const addMarks = (out: Array<CallerMark>, name: string, items: ReadonlyArray<unknown>): void => {
  for (let i = 0; i < items.length; i++) {
    const item = items[i]
    const control = typeof item === "object" && item !== null
      ? (item as { readonly cache_control?: unknown }).cache_control
      : undefined
    if (control != null) out.push({ path: `${name}[${i}].cache_control`, ttl: markTtl(control) })
  }
}

/**
 * The caller's `cache_control` marks on `tools` and on the blocks of `system`, in the order the API reads the prefix
 * (tools, then system). A string system prompt has none.
 * @category placement
 */
export const callerMarks = (
  tools: ReadonlyArray<unknown> | undefined,
  system: string | ReadonlyArray<unknown> | undefined
): ReadonlyArray<CallerMark> => {
  const out: Array<CallerMark> = []
  if (tools !== undefined) addMarks(out, "tools", tools)
  if (system !== undefined && typeof system !== "string") addMarks(out, "system", system)
  return out
}

/**
 * True when the caller's own mark ends the system prompt and tools: on the last system block, or on the last tool
 * when there is no system prompt. The library then places no breakpoint of its own there.
 * @category placement
 */
export const endsMarked = (
  tools: ReadonlyArray<unknown> | undefined,
  system: string | ReadonlyArray<unknown> | undefined
): boolean => {
  if (typeof system === "string") return false
  const last = system === undefined ? tools?.at(-1) : system.at(-1)
  return typeof last === "object" && last !== null &&
    (last as { readonly cache_control?: unknown }).cache_control != null
}

const CacheBreakpointErrorBase: ReturnType<typeof Data.TaggedError<"CacheBreakpointError">> = Data.TaggedError(
  "CacheBreakpointError"
)

/**
 * The caller's own `cache_control` marks on tools or system blocks make every request invalid (API: at most 4
 * breakpoints; a longer lifetime never after a shorter one, in the order tools, system, messages). `path` names the
 * mark; `reason`: `TooManyBreakpoints` (more than 4 marks: the fifth), `LongerTtlAfterShorter` (a `"1h"` mark after a
 * `"5m"` one: the `"1h"` one), `ShorterTtlThanPolicy` (a `"5m"` mark while the library's breakpoints, which follow
 * every caller mark, ask for `"1h"`: the first such mark).
 * @category errors
 */
export class CacheBreakpointError extends CacheBreakpointErrorBase<{
  readonly path: string
  readonly reason: "TooManyBreakpoints" | "LongerTtlAfterShorter" | "ShorterTtlThanPolicy"
  readonly detail: string
}> {
  /** The error as one line: the mark's path and what is wrong with it. */
  override get message(): string {
    return `${this.path}: ${this.detail}`
  }
}

/**
 * What makes the caller's marks (`callerMarks`, in order) invalid in every request, or `undefined`: more than
 * `MAX_BREAKPOINTS`; a `"1h"` mark after a `"5m"` one; a `"5m"` mark when the library adds breakpoints of `ttl`
 * `"1h"` after it (it adds some while the caller's leave room). A mark whose `ttl` the API alone can judge is not
 * ordered here.
 * @category placement
 */
export const callerMarksError = (
  marks: ReadonlyArray<CallerMark>,
  ttl: CacheTtl | undefined
): CacheBreakpointError | undefined => {
  if (marks.length > MAX_BREAKPOINTS) {
    return new CacheBreakpointError({
      path: marks[MAX_BREAKPOINTS]!.path,
      reason: "TooManyBreakpoints",
      detail: `${marks.length} marks on tools and system blocks; a request carries at most ${MAX_BREAKPOINTS}`
    })
  }
  const short = marks.find((m) => m.ttl === "5m")
  const late = short === undefined ? undefined : marks.slice(marks.indexOf(short)).find((m) => m.ttl === "1h")
  if (short !== undefined && late !== undefined) {
    return new CacheBreakpointError({
      path: late.path,
      reason: "LongerTtlAfterShorter",
      detail: `ttl "1h" after the "5m" mark at ${short.path}; a longer ttl must come first (tools, then system)`
    })
  }
  if (short !== undefined && ttl === "1h" && marks.length < MAX_BREAKPOINTS) {
    return new CacheBreakpointError({
      path: short.path,
      reason: "ShorterTtlThanPolicy",
      detail: `ttl "5m" before the library's breakpoints, which cacheTtl "1h" asks for; a longer ttl may not ` +
        `follow a shorter one: give this mark ttl "1h", or use cacheTtl "5m"`
    })
  }
  return undefined
}
