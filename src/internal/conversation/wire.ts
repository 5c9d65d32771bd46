/**
 * Wire messages for `ConversationState`: a message as the Messages API takes it (private keys and blank text blocks
 * dropped, a reply's trailing whitespace trimmed), its blocks, the interrupted result that answers an abandoned call,
 * and the test for the SDK's reply.
 *
 * @internal
 */
import type Anthropic from "@anthropic-ai/sdk"
import type { Message } from "../../Message.ts"
import { blocksOf as messageBlocks, hasOutputConfig } from "../blocks.ts"
import { MISSING_RESULT_TEXT } from "../repair.ts"

/** The SDK's message type (`ConversationState.MessageParam`). */
export type MessageParam = Anthropic.MessageParam

/** One content block of an SDK message. */
export type Block = Exclude<MessageParam["content"], string>[number]

const isBlankText = (block: { readonly type: string }): boolean =>
  block.type === "text" && (block as unknown as { readonly text: string }).text.trim().length === 0

/** A tool result whose content blocks hold blank text (API-RULES 4: no blank text anywhere). */
const holdsBlankText = (block: Block): boolean =>
  block.type === "tool_result" && Array.isArray(block.content) && block.content.some(isBlankText)

/** The tool result without its blank text blocks; with no `content` when nothing else is left (an empty result). */
const withoutBlankText = (block: Anthropic.ToolResultBlockParam): Anthropic.ToolResultBlockParam => {
  const kept = (block.content as Exclude<typeof block.content, string | undefined>).filter((b) => !isBlankText(b))
  if (kept.length > 0) return { ...block, content: kept }
  const { content: _content, ...rest } = block
  return rest
}

/** The blocks the API takes: blank text dropped, at the top and inside tool results. */
const keptBlocks = (content: ReadonlyArray<Block>): Array<Block> => {
  const out: Array<Block> = []
  for (const block of content) {
    if (isBlankText(block)) continue
    out.push(holdsBlankText(block) ? withoutBlankText(block as Anthropic.ToolResultBlockParam) : block)
  }
  return out
}

/**
 * The message as the API takes it: top-level keys starting with `_` removed and empty text blocks dropped (inside a
 * tool result's content too; a result left with no content has none); the same object when there is nothing to
 * remove. `undefined` when nothing is left. A system message with no `content` that carries `output_config` is kept as
 * it is, its private keys removed.
 */
export const wireMessage = (message: MessageParam): MessageParam | undefined => {
  const keys = Object.keys(message)
  const extra = keys.some((k) => k.startsWith("_"))
  const content = message.content as MessageParam["content"] | undefined
  if (content == null) {
    if (!hasOutputConfig(message as unknown as Message)) return undefined
    if (!extra) return message
    const out: Record<string, unknown> = {}
    for (const k of keys) if (!k.startsWith("_")) out[k] = (message as never)[k]
    return out as unknown as MessageParam
  }
  if (typeof content === "string") {
    if (content.trim().length === 0) return undefined
    return extra ? { role: message.role, content } as MessageParam : message
  }
  const blank = content.some((b) => isBlankText(b) || holdsBlankText(b))
  if (!extra && !blank) return content.length === 0 ? undefined : message
  const kept = blank ? keptBlocks(content) : content
  if (kept.length === 0) return undefined
  const out: Record<string, unknown> = {}
  for (const k of keys) if (!k.startsWith("_")) out[k] = k === "content" ? kept : (message as never)[k]
  return out as unknown as MessageParam
}

/**
 * A reply as the API takes it (`wireMessage`), its last block's trailing whitespace trimmed when it is text: a final
 * assistant message (the prefill of a continued turn) must not end in whitespace (API-RULES 4). The same object when
 * nothing changes. Only the last block: what precedes a thinking block never changes.
 */
export const wireReply = (message: MessageParam): MessageParam | undefined => {
  const clean = wireMessage(message)
  if (clean === undefined) return undefined
  const content = clean.content
  if (typeof content === "string") {
    const trimmed = content.trimEnd()
    return trimmed === content ? clean : { ...clean, content: trimmed }
  }
  const last = content.at(-1)
  if (last?.type !== "text") return clean
  const text = last.text.trimEnd()
  if (text === last.text) return clean
  return { ...clean, content: [...content.slice(0, -1), { ...last, text }] } as MessageParam
}

/** The same list, typed as the library's messages. */
export const asMessages = (view: ReadonlyArray<MessageParam>): ReadonlyArray<Message> =>
  view as unknown as Array<Message>

/** The message's blocks (a string is one text block; a system message with no content, has none). */
export const blocksOf = (message: MessageParam): ReadonlyArray<Block> =>
  messageBlocks(message as unknown as Message) as unknown as ReadonlyArray<Block>

/** The error result that answers an abandoned call `id`. */
export const interrupted = (id: string): Anthropic.ToolResultBlockParam => ({
  type: "tool_result",
  tool_use_id: id,
  content: MISSING_RESULT_TEXT,
  is_error: true
})

/** The reply is the SDK's (`ConversationState.SdkReply`: a `type: "message"` with an `id`), not a `MessageParam`. */
export const isSdkReply = <R extends object>(reply: MessageParam | R): reply is R =>
  (reply as { readonly type?: unknown }).type === "message" &&
  typeof (reply as { readonly id?: unknown }).id === "string"
