/**
 * The placement rules under `Cache.planBreakpoints`: how far the API looks back from a breakpoint, which blocks accept
 * one, the last such block before a position, one message with its breakpoints placed, and a count of the breakpoints
 * a request carries.
 *
 * @internal
 */
import type { ContentBlock, Message } from "../Message.ts"
import { blocksOf, hasContent } from "./blocks.ts"

/**
 * How far back from a breakpoint, in blocks, the API looks for a cached prefix: 20. @category constants
 */
export const LOOKBACK_BLOCKS = 20

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
