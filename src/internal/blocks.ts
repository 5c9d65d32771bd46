/**
 * Guards and readers of blocks and messages: narrowing a block on its type, a message's blocks and tool ids, its
 * system fields. Plumbing of the library's modules; code outside `src/` narrows on `block.type` itself.
 *
 * @internal
 */
import type {
  CompactionBlock,
  ContentBlock,
  DocumentBlock,
  ImageBlock,
  Message,
  TextBlock,
  ThinkingBlock,
  ToolResultBlock,
  ToolUseBlock
} from "../Message.ts"
import {
  type BuiltMessage,
  type McpToolUseBlock,
  type RedactedThinkingBlock,
  SERVER_TOOL_RESULT_TYPES,
  type ServerToolResultBlock,
  type ServerToolUseBlock,
  type SystemMessageFields
} from "./wireTypes.ts"

/**
 * The system-message fields of a message (none on a user or assistant message). @category utility
 */
export const systemFields = (message: Message): SystemMessageFields =>
  message.role === "system" ? message as SystemMessageFields : {}

/**
 * The block types this library models by name. @category guards
 */
export const KNOWN_BLOCK_TYPES: ReadonlySet<string> = new Set([
  "text",
  "image",
  "document",
  "search_result",
  "thinking",
  "redacted_thinking",
  "tool_use",
  "tool_result",
  "server_tool_use",
  "mcp_tool_use",
  "container_upload",
  "compaction",
  ...SERVER_TOOL_RESULT_TYPES
])

/**
 * True when the block is a `text` block. @category guards
 */
export const isText = (block: ContentBlock): block is TextBlock => block.type === "text"
/**
 * True when the block is an `image` block. @category guards
 */
export const isImage = (block: ContentBlock): block is ImageBlock => block.type === "image"
/**
 * True when the block is a `document` block. @category guards
 */
export const isDocument = (block: ContentBlock): block is DocumentBlock => block.type === "document"
/**
 * True when the block is a `thinking` block. @category guards
 */
export const isThinking = (block: ContentBlock): block is ThinkingBlock => block.type === "thinking"
/**
 * True when the block is a `redacted_thinking` block. @category guards
 */
export const isRedactedThinking = (block: ContentBlock): block is RedactedThinkingBlock =>
  block.type === "redacted_thinking"
/**
 * True when the block is a client `tool_use` block. @category guards
 */
export const isToolUse = (block: ContentBlock): block is ToolUseBlock => block.type === "tool_use"
/**
 * True when the block is a client `tool_result` block. @category guards
 */
export const isToolResult = (block: ContentBlock): block is ToolResultBlock => block.type === "tool_result"
/**
 * True when the block is a `server_tool_use` block. @category guards
 */
export const isServerToolUse = (block: ContentBlock): block is ServerToolUseBlock => block.type === "server_tool_use"
/**
 * True for every server tool result block (web search, web fetch, code execution, tool search, advisor, MCP).
 * @category guards
 */
export const isServerToolResult = (block: ContentBlock): block is ServerToolResultBlock =>
  (SERVER_TOOL_RESULT_TYPES as ReadonlyArray<string>).includes(block.type)
/**
 * True for a call the provider runs itself (`server_tool_use`, `mcp_tool_use`): its result lives in the same
 * assistant turn, so it never pairs with a client `tool_result`, and a turn ending in one is unfinished.
 * @category guards
 */
export const isServerToolCall = (block: ContentBlock): block is ServerToolUseBlock | McpToolUseBlock =>
  block.type === "server_tool_use" || block.type === "mcp_tool_use"
/**
 * True for the API's compaction block, with content or not (`content: null` is a no-op). @category guards
 */
export const isCompaction = (block: ContentBlock): block is CompactionBlock => block.type === "compaction"
/**
 * True for a compaction block that carries a summary (`content` is a string): the API drops everything before the
 * last such block. A block with `content: null` is a failed compaction and changes nothing.
 * @category guards
 */
export const isCompactionWithContent = (block: ContentBlock): block is CompactionBlock & { readonly content: string } =>
  block.type === "compaction" && typeof (block as CompactionBlock).content === "string"
/**
 * True for a block whose type this library does not model. @category guards
 */
export const isUnknownBlock = (block: ContentBlock): boolean => !KNOWN_BLOCK_TYPES.has(block.type)

/**
 * The content of a message as a list of blocks (a string becomes one text block; a system message without content
 * has none).
 * @category utility
 */
export const blocksOf = (message: Message): ReadonlyArray<ContentBlock> => {
  const content = message.content as Message["content"] | undefined
  return typeof content === "string" ? [{ type: "text", text: content }] : content ?? []
}

/**
 * False only for a system message with no `content` (one that carries `output_config` alone): every
 * other decoded message has `content`.
 * @category guards
 */
export const hasContent = (message: Message): boolean => (message.content as Message["content"] | undefined) != null

/**
 * True for a system message that carries per-turn settings (`output_config`): it governs the turn that
 * follows it, so moving it changes which turn that is.
 * @category guards
 */
export const hasOutputConfig = (message: Message): boolean => {
  const config = systemFields(message).output_config
  return config !== undefined && config !== null
}

/**
 * True when a user message holds only tool results (the agent loop's reply to a tool call), so it is not a human turn.
 * @category guards
 */
export const isToolResultMessage = (message: Message): boolean =>
  message.role === "user" && typeof message.content !== "string" && message.content.length > 0 &&
  message.content.every(isToolResult)

/**
 * The ids of the tool_use blocks in a message, in order. @category utility
 */
export const toolUseIds = (message: Message): ReadonlyArray<string> =>
  blocksOf(message).filter(isToolUse).map((b) => b.id)

/**
 * The `tool_use_id`s of the tool_result blocks in a message, in order. @category utility
 */
export const toolResultIds = (message: Message): ReadonlyArray<string> =>
  blocksOf(message).filter(isToolResult).map((b) => b.tool_use_id)

/**
 * A user message with one text block, assignable to the SDK's `MessageParam`. @category constructors
 */
export const userText = (text: string): BuiltMessage => ({ role: "user", content: [{ type: "text", text }] })
