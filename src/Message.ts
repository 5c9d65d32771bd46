/**
 * The wire model: Anthropic Messages API conversations, as plain readonly data.
 *
 * Every block type the API has is modelled, plus an open case (`UnknownBlock`) for block types this library does not
 * know yet. The types are supertypes of `@anthropic-ai/sdk`'s `MessageParam`, so an SDK conversation can be passed in
 * as it is; functions that transform a conversation are generic in the message type, so what comes out can be passed
 * straight back to `client.messages.create`.
 *
 * Decoding (`decodeMessages`) validates untrusted input and returns the input objects themselves: nothing is copied,
 * and extra fields (`cache_control`, `citations`, private `_`-prefixed keys) are preserved.
 *
 * @since 0.1.0
 */
import type * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { checkMessage, MAX_NESTING_DEPTH } from "./internal/decode.ts"

export {
  /** @deprecated Use `Message.decodeMessages(input)`: it fails on input nested too deep; the limit is its plumbing. */
  MAX_NESTING_DEPTH
}

// ============================================================================
// Block types
// ============================================================================

/** A plain text block. @category models */
export interface TextBlock {
  readonly type: "text"
  readonly text: string
  readonly cache_control?: unknown
  readonly citations?: unknown
}

/**
 * The source of an image: inline base64, a URL, or an uploaded file. @category models
 * @deprecated Use `ImageBlock` (its `source` field); the source shapes are the block's plumbing.
 */
export type ImageSource =
  | { readonly type: "base64"; readonly media_type: string; readonly data: string }
  | { readonly type: "url"; readonly url: string }
  | { readonly type: "file"; readonly file_id: string }

/** An image block. @category models */
export interface ImageBlock {
  readonly type: "image"
  readonly source: ImageSource
  readonly cache_control?: unknown
}

/**
 * The source of a document: base64 PDF, plain text, a list of content blocks, a URL, or an uploaded file. @category models
 * @deprecated Use `DocumentBlock` (its `source` field); the source shapes are the block's plumbing.
 */
export type DocumentSource =
  | { readonly type: "base64"; readonly media_type: string; readonly data: string }
  | { readonly type: "text"; readonly media_type: string; readonly data: string }
  | { readonly type: "content"; readonly content: string | ReadonlyArray<ContentBlock> }
  | { readonly type: "url"; readonly url: string }
  | { readonly type: "file"; readonly file_id: string }

/** A document block (PDF, text, or custom content). @category models */
export interface DocumentBlock {
  readonly type: "document"
  readonly source: DocumentSource
  readonly title?: string | null
  readonly context?: string | null
  readonly cache_control?: unknown
  readonly citations?: unknown
}

/**
 * A search result block, as returned by a tool or passed by the caller. @category models
 * @deprecated Use `ContentBlock`: the library carries search results as they are and never reads them.
 */
export interface SearchResultBlock {
  readonly type: "search_result"
  readonly source: string
  readonly title: string
  readonly content: ReadonlyArray<TextBlock>
  readonly cache_control?: unknown
  readonly citations?: unknown
}

/**
 * Extended thinking. The `signature` proves the block is unmodified; the API rejects a changed signed block in the
 * latest assistant turn. Real sessions contain unsigned thinking (aborted replies), so the signature is optional here.
 * @category models
 */
export interface ThinkingBlock {
  readonly type: "thinking"
  readonly thinking: string
  readonly signature?: string
}

/**
 * Thinking the provider redacted; `data` is opaque and must be sent back unchanged. @category models
 * @deprecated Use `ContentBlock`: the library carries redacted thinking as it is.
 */
export interface RedactedThinkingBlock {
  readonly type: "redacted_thinking"
  readonly data: string
}

/** A client tool call made by the assistant. @category models */
export interface ToolUseBlock {
  readonly type: "tool_use"
  readonly id: string
  readonly name: string
  readonly input: unknown
  readonly cache_control?: unknown
}

/** The result of a client tool call; it must sit in the user message right after its `tool_use`. @category models */
export interface ToolResultBlock {
  readonly type: "tool_result"
  readonly tool_use_id: string
  readonly content?: string | ReadonlyArray<ContentBlock>
  readonly is_error?: boolean
  readonly cache_control?: unknown
}

/**
 * A server tool call (web search, web fetch, code execution, …) that the provider ran itself. @category models
 * @deprecated Use `ContentBlock`: server tool calls are carried and paired by `Validate.validate(messages)`.
 */
export interface ServerToolUseBlock {
  readonly type: "server_tool_use"
  readonly id: string
  readonly name: string
  readonly input: unknown
  readonly cache_control?: unknown
}

/**
 * The `type` of every server tool result block the API has: the results of `server_tool_use` (web search, web fetch,
 * code execution, tool search, the advisor) and of `mcp_tool_use`. A system message may follow an assistant turn that
 * ends in one (API-RULES 9, 30). @category models
 * @deprecated Use `Validate.validate(messages)`, which pairs server tool results; the list is its plumbing.
 */
export const SERVER_TOOL_RESULT_TYPES = [
  "web_search_tool_result",
  "web_fetch_tool_result",
  "code_execution_tool_result",
  "bash_code_execution_tool_result",
  "text_editor_code_execution_tool_result",
  "tool_search_tool_result",
  "advisor_tool_result",
  "mcp_tool_result"
] as const

/**
 * The `type` of every call the provider runs itself: `server_tool_use` and `mcp_tool_use`. Its result comes in the
 * same assistant turn; an assistant turn that ends in one is unfinished (a `pause_turn`, API-RULES 15, 31).
 * @category models
 * @deprecated Use `Validate.validate(messages)`, which pairs server tool calls; the list is its plumbing.
 */
export const SERVER_TOOL_CALL_TYPES = ["server_tool_use", "mcp_tool_use"] as const

/**
 * The result of a server tool call. It lives in the same assistant turn as its `server_tool_use` or `mcp_tool_use`,
 * and goes back verbatim and in place (API-RULES 30). @category models
 * @deprecated Use `ContentBlock`: server tool results are carried and paired by `Validate.validate(messages)`.
 */
export interface ServerToolResultBlock {
  readonly type: (typeof SERVER_TOOL_RESULT_TYPES)[number]
  readonly tool_use_id: string
  readonly content: unknown
  readonly cache_control?: unknown
}

/**
 * A call of a tool on a remote MCP server, run by the provider (its result is an `mcp_tool_result` in the same
 * assistant turn). @category models
 * @deprecated Use `ContentBlock`: MCP tool calls are carried and paired by `Validate.validate(messages)`.
 */
export interface McpToolUseBlock {
  readonly type: "mcp_tool_use"
  readonly id: string
  readonly name: string
  readonly server_name: string
  readonly input: unknown
  readonly cache_control?: unknown
}

/**
 * A file uploaded into a code-execution container. @category models
 * @deprecated Use `ContentBlock`: container uploads are carried as they are.
 */
export interface ContainerUploadBlock {
  readonly type: "container_upload"
  readonly file_id: string
  readonly cache_control?: unknown
}

/**
 * The API's own compaction block (API-RULES 12–16): the server's summary of everything before it. It is sent back
 * verbatim: `content`, `encrypted_content`, `signature` and `tool_changes` are never changed, and any other field is
 * preserved. `content: null` marks a failed compaction, which the server treats as a no-op; an empty string is
 * rejected by decode. The API drops everything before the last compaction block with content (see `ApiView`).
 * @category models
 */
export interface CompactionBlock {
  readonly type: "compaction"
  readonly content?: string | null
  readonly encrypted_content?: string | null
  readonly signature?: string | null
  readonly tool_changes?: ReadonlyArray<unknown> | null
  readonly cache_control?: unknown
}

/**
 * A block of a type this library does not know. It passes through every function untouched, is counted by the token
 * estimator as its JSON size, and is never dropped.
 * @category models
 * @deprecated Use `ContentBlock`: an unknown block is carried as it is.
 */
export interface UnknownBlock {
  readonly type: string
}

/**
 * Every block this library models by name. @category models
 * @deprecated Use `ContentBlock`, the union every block belongs to.
 */
export type KnownBlock =
  | TextBlock
  | ImageBlock
  | DocumentBlock
  | SearchResultBlock
  | ThinkingBlock
  | RedactedThinkingBlock
  | ToolUseBlock
  | ToolResultBlock
  | ServerToolUseBlock
  | ServerToolResultBlock
  | McpToolUseBlock
  | ContainerUploadBlock
  | CompactionBlock

/** Any content block, known or not. Narrow it with the guards below (`isText`, `isToolUse`, …). @category models */
export type ContentBlock = KnownBlock | UnknownBlock

/**
 * The roles of the Messages API. `system` is the mid-conversation system message that `@anthropic-ai/sdk` 1.14 added
 * to `MessageParam` (text only); it never starts a turn and never pairs with tools.
 * @category models
 */
export type Role = "user" | "assistant" | "system"

/**
 * One message of a conversation. `@anthropic-ai/sdk`'s `MessageParam` is assignable to it.
 *
 * A system message may also carry `SystemMessageFields` (read them with `systemFields`). **Gotcha:** a system message
 * that carries `output_config` may have no `content` at all (API-RULES 26), and decodes so; the type keeps `content`
 * required until 0.2.0 (making it optional would break every reader), so read a message's blocks with `blocksOf`
 * (which gives `[]` for it) or test `hasContent` before reading `content`.
 * @category models
 */
export interface Message {
  readonly role: Role
  readonly content: string | ReadonlyArray<ContentBlock>
}

/**
 * The fields of a mid-conversation system message besides its content (the SDK's `BetaSystemMessageParam`):
 * `output_config`, per-turn settings such as `effort` for the turn after it (API-RULES 26), and `clear_at`
 * (`"next_user_message"`: the API stops showing the message once a later user message exists, rule 27).
 * @category models
 * @deprecated Use `Message` (its optional system fields); this view of them is request-building plumbing.
 */
export interface SystemMessageFields {
  readonly output_config?: unknown
  readonly clear_at?: "next_user_message" | "never" | null
}

/**
 * The system-message fields of a message (none on a user or assistant message). @category utility
 * @deprecated Use `Conversation.requestOf(state)`, which places the system fields; this is its plumbing.
 */
export const systemFields = (message: Message): SystemMessageFields =>
  message.role === "system" ? message as SystemMessageFields : {}

/**
 * A text block this library builds itself, with no extra fields. @category models
 * @deprecated Use `TextBlock`: a built block is a text block.
 */
export interface BuiltTextBlock {
  readonly type: "text"
  readonly text: string
}

/**
 * A message this library builds itself (a summary). It is assignable to the SDK's `MessageParam`.
 * @category models
 * @deprecated Use `Message`: a built message is a message.
 */
export interface BuiltMessage {
  readonly role: "user" | "assistant"
  readonly content: Array<BuiltTextBlock>
}

// ============================================================================
// Guards
// ============================================================================

/**
 * The block types this library models by name. @category guards
 * @deprecated Use `Message.decodeMessages(input)`, which checks every block; the list is its plumbing.
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
 * @deprecated Use `block.type === "text"`, which narrows the same.
 */
export const isText = (block: ContentBlock): block is TextBlock => block.type === "text"
/**
 * True when the block is an `image` block. @category guards
 * @deprecated Use `block.type === "image"`, which narrows the same.
 */
export const isImage = (block: ContentBlock): block is ImageBlock => block.type === "image"
/**
 * True when the block is a `document` block. @category guards
 * @deprecated Use `block.type === "document"`, which narrows the same.
 */
export const isDocument = (block: ContentBlock): block is DocumentBlock => block.type === "document"
/**
 * True when the block is a `thinking` block. @category guards
 * @deprecated Use `block.type === "thinking"`, which narrows the same.
 */
export const isThinking = (block: ContentBlock): block is ThinkingBlock => block.type === "thinking"
/**
 * True when the block is a `redacted_thinking` block. @category guards
 * @deprecated Use `block.type === "redacted_thinking"`, which narrows the same.
 */
export const isRedactedThinking = (block: ContentBlock): block is RedactedThinkingBlock =>
  block.type === "redacted_thinking"
/**
 * True when the block is a client `tool_use` block. @category guards
 * @deprecated Use `block.type === "tool_use"`, which narrows the same.
 */
export const isToolUse = (block: ContentBlock): block is ToolUseBlock => block.type === "tool_use"
/**
 * True when the block is a client `tool_result` block. @category guards
 * @deprecated Use `block.type === "tool_result"`, which narrows the same.
 */
export const isToolResult = (block: ContentBlock): block is ToolResultBlock => block.type === "tool_result"
/**
 * True when the block is a `server_tool_use` block. @category guards
 * @deprecated Use `block.type === "server_tool_use"`, which narrows the same.
 */
export const isServerToolUse = (block: ContentBlock): block is ServerToolUseBlock => block.type === "server_tool_use"
/**
 * True for every server tool result block (web search, web fetch, code execution, tool search, advisor, MCP).
 * @category guards
 * @deprecated Use `Validate.validate(messages)`, which pairs server tool results; this guard is its plumbing.
 */
export const isServerToolResult = (block: ContentBlock): block is ServerToolResultBlock =>
  (SERVER_TOOL_RESULT_TYPES as ReadonlyArray<string>).includes(block.type)
/**
 * True for a call the provider runs itself (`server_tool_use`, `mcp_tool_use`): its result lives in the same
 * assistant turn, so it never pairs with a client `tool_result`, and a turn ending in one is unfinished.
 * @category guards
 * @deprecated Use `Validate.validate(messages)`, which pairs server tool calls; this guard is its plumbing.
 */
export const isServerToolCall = (block: ContentBlock): block is ServerToolUseBlock | McpToolUseBlock =>
  block.type === "server_tool_use" || block.type === "mcp_tool_use"
/**
 * True for the API's compaction block, with content or not (`content: null` is a no-op). @category guards
 * @deprecated Use `block.type === "compaction"`, which narrows the same.
 */
export const isCompaction = (block: ContentBlock): block is CompactionBlock => block.type === "compaction"
/**
 * True for a compaction block that carries a summary (`content` is a string): the API drops everything before the
 * last such block. A block with `content: null` is a failed compaction and changes nothing.
 * @category guards
 * @deprecated Use `ApiView.apiView(messages)`, which finds the compaction that opens the view.
 */
export const isCompactionWithContent = (block: ContentBlock): block is CompactionBlock & { readonly content: string } =>
  block.type === "compaction" && typeof (block as CompactionBlock).content === "string"
/**
 * True for a block whose type this library does not model. @category guards
 * @deprecated Use `Message.decodeMessages(input)`, which accepts an unknown block and keeps it as it is.
 */
export const isUnknownBlock = (block: ContentBlock): boolean => !KNOWN_BLOCK_TYPES.has(block.type)

/**
 * The content of a message as a list of blocks (a string becomes one text block; a system message without content,
 * API-RULES 26, has none).
 * @category utility
 * @deprecated Use `message.content` (a string content is one text block); this normalization is internal plumbing.
 */
export const blocksOf = (message: Message): ReadonlyArray<ContentBlock> => {
  const content = message.content as Message["content"] | undefined
  return typeof content === "string" ? [{ type: "text", text: content }] : content ?? []
}

/**
 * False only for a system message with no `content` (one that carries `output_config` alone, API-RULES 26): every
 * other decoded message has `content`.
 * @category guards
 * @deprecated Use `Message.decodeMessages(input)`, which rejects a message without content.
 */
export const hasContent = (message: Message): boolean => (message.content as Message["content"] | undefined) != null

/**
 * True for a system message that carries per-turn settings (`output_config`, API-RULES 26): it governs the turn that
 * follows it, so moving it changes which turn that is.
 * @category guards
 * @deprecated Use `Conversation.requestOf(state)`, which carries output config; this check is its plumbing.
 */
export const hasOutputConfig = (message: Message): boolean => {
  const config = systemFields(message).output_config
  return config !== undefined && config !== null
}

/**
 * True when a user message holds only tool results (the agent loop's reply to a tool call), so it is not a human turn.
 * @category guards
 * @deprecated Use `Validate.validate(messages)`, which reads tool results; this check is its plumbing.
 */
export const isToolResultMessage = (message: Message): boolean =>
  message.role === "user" && typeof message.content !== "string" && message.content.length > 0 &&
  message.content.every(isToolResult)

/**
 * The ids of the tool_use blocks in a message, in order. @category utility
 * @deprecated Use `Validate.validate(messages)`, which pairs tool calls and results; this is its plumbing.
 */
export const toolUseIds = (message: Message): ReadonlyArray<string> =>
  blocksOf(message).filter(isToolUse).map((b) => b.id)

/**
 * The `tool_use_id`s of the tool_result blocks in a message, in order. @category utility
 * @deprecated Use `Validate.validate(messages)`, which pairs tool calls and results; this is its plumbing.
 */
export const toolResultIds = (message: Message): ReadonlyArray<string> =>
  blocksOf(message).filter(isToolResult).map((b) => b.tool_use_id)

/**
 * A user message with one text block, assignable to the SDK's `MessageParam`. @category constructors
 * @deprecated Use `{ role: "user", content: [{ type: "text", text }] }`, the message it builds.
 */
export const userText = (text: string): BuiltMessage => ({ role: "user", content: [{ type: "text", text }] })

// ============================================================================
// Decode errors
// ============================================================================

type MessageDecodeErrorFields = {
  readonly messageIndex: Schema.optionalKey<Schema.Int>
  readonly blockIndex: Schema.optionalKey<Schema.Int>
  readonly path: Schema.$Array<Schema.Union<readonly [Schema.String, Schema.Number]>>
  readonly blockType: Schema.optionalKey<Schema.String>
  readonly reason: Schema.String
}

const MessageDecodeErrorBase: Schema.Class<
  MessageDecodeError,
  Schema.TaggedStruct<"MessageDecodeError", MessageDecodeErrorFields>,
  Cause.YieldableError
> = Schema.TaggedError<MessageDecodeError>()("MessageDecodeError", {
  messageIndex: Schema.optionalKey(Schema.Int),
  blockIndex: Schema.optionalKey(Schema.Int),
  path: Schema.Array(Schema.Union([Schema.String, Schema.Number])),
  blockType: Schema.optionalKey(Schema.String),
  reason: Schema.String
})

/**
 * Raised when input is not a valid conversation. It says where (`messageIndex`, `blockIndex`, and the `path` of the
 * field inside the message) and what was wrong (`reason`). Its `message` reads like
 * `messages[3].content[1].input (tool_use): Expected object, got "ls"`.
 * @category errors
 */
export class MessageDecodeError extends MessageDecodeErrorBase {
  override get message(): string {
    const where = this.path.reduce<string>(
      (acc, key) => typeof key === "number" ? `${acc}[${key}]` : `${acc}.${key}`,
      "messages"
    )
    const kind = this.blockType === undefined ? "" : ` (${this.blockType})`
    return `${where}${kind}: ${this.reason}`
  }
}

/**
 * Validates one message. Returns the error for the first problem found, or `undefined` when the message is valid.
 * Total: never throws, whatever the input (deep nesting past `MAX_NESTING_DEPTH`, cycles and wrong types are errors).
 * O(size of the message).
 * @category decoding
 */
export const validateMessage = (input: unknown, messageIndex: number): MessageDecodeError | undefined => {
  const problem = checkMessage(input)
  if (problem === undefined) return undefined
  const { blockIndex, failure } = problem
  return new MessageDecodeError({
    messageIndex,
    ...(blockIndex === undefined ? {} : { blockIndex }),
    ...(failure.blockType === undefined ? {} : { blockType: failure.blockType }),
    path: [messageIndex, ...failure.reversedPath.reverse()],
    reason: failure.reason
  })
}

const validateAll = (input: unknown): MessageDecodeError | undefined => {
  if (!Array.isArray(input)) {
    return new MessageDecodeError({ path: [], reason: `Expected an array of messages, got ${describeValue(input)}` })
  }
  for (let i = 0; i < input.length; i++) {
    const error = validateMessage(input[i], i)
    if (error !== undefined) return error
  }
  return undefined
}

const describeValue = (value: unknown): string =>
  value === null ? "null" : Array.isArray(value) ? "an array" : typeof value

/**
 * Decodes untrusted input into a conversation. On success the result *is* the input array (validated, not copied),
 * so unknown fields and unknown block types are preserved exactly. On failure the error names the message, the block
 * and the field.
 * @category decoding
 */
export const decodeMessages = (input: unknown): Effect.Effect<ReadonlyArray<Message>, MessageDecodeError> =>
  Effect.suspend(() => {
    const error = validateAll(input)
    return error === undefined ? Effect.succeed(input as ReadonlyArray<Message>) : Effect.fail(error)
  })

/**
 * The synchronous form of `decodeMessages`: returns the validated input, or throws `MessageDecodeError`.
 * @category decoding
 */
export const decodeMessagesSync = (input: unknown): ReadonlyArray<Message> => {
  const error = validateAll(input)
  if (error !== undefined) throw error
  return input as ReadonlyArray<Message>
}
