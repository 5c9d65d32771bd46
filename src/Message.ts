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
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"

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

/** The source of an image: inline base64, a URL, or an uploaded file. @category models */
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

/** The source of a document: base64 PDF, plain text, a list of content blocks, a URL, or an uploaded file. @category models */
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

/** A search result block, as returned by a tool or passed by the caller. @category models */
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

/** Thinking the provider redacted; `data` is opaque and must be sent back unchanged. @category models */
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

/** A server tool call (web search, web fetch, code execution, …) that the provider ran itself. @category models */
export interface ServerToolUseBlock {
  readonly type: "server_tool_use"
  readonly id: string
  readonly name: string
  readonly input: unknown
  readonly cache_control?: unknown
}

/** The `type` of every server tool result block the API has. @category models */
export const SERVER_TOOL_RESULT_TYPES = [
  "web_search_tool_result",
  "web_fetch_tool_result",
  "code_execution_tool_result",
  "bash_code_execution_tool_result",
  "text_editor_code_execution_tool_result",
  "tool_search_tool_result"
] as const

/** The result of a server tool call. It lives in the same assistant message as its `server_tool_use`. @category models */
export interface ServerToolResultBlock {
  readonly type: (typeof SERVER_TOOL_RESULT_TYPES)[number]
  readonly tool_use_id: string
  readonly content: unknown
  readonly cache_control?: unknown
}

/** A file uploaded into a code-execution container. @category models */
export interface ContainerUploadBlock {
  readonly type: "container_upload"
  readonly file_id: string
  readonly cache_control?: unknown
}

/**
 * A block of a type this library does not know. It passes through every function untouched, is counted by the token
 * estimator as its JSON size, and is never dropped.
 * @category models
 */
export interface UnknownBlock {
  readonly type: string
}

/** Every block this library models by name. @category models */
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
  | ContainerUploadBlock

/** Any content block, known or not. Narrow it with the guards below (`isText`, `isToolUse`, …). @category models */
export type ContentBlock = KnownBlock | UnknownBlock

/**
 * The roles of the Messages API. `system` is the mid-conversation system message that `@anthropic-ai/sdk` 1.14 added
 * to `MessageParam` (text only); it never starts a turn and never pairs with tools.
 * @category models
 */
export type Role = "user" | "assistant" | "system"

/** One message of a conversation. `@anthropic-ai/sdk`'s `MessageParam` is assignable to it. @category models */
export interface Message {
  readonly role: Role
  readonly content: string | ReadonlyArray<ContentBlock>
}

/** A text block this library builds itself, with no extra fields. @category models */
export interface BuiltTextBlock {
  readonly type: "text"
  readonly text: string
}

/**
 * A message this library builds itself (a summary). It is assignable to the SDK's `MessageParam`.
 * @category models
 */
export interface BuiltMessage {
  readonly role: "user" | "assistant"
  readonly content: Array<BuiltTextBlock>
}

// ============================================================================
// Guards
// ============================================================================

/** The block types this library models by name. @category guards */
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
  "container_upload",
  ...SERVER_TOOL_RESULT_TYPES
])

/** @category guards */
export const isText = (block: ContentBlock): block is TextBlock => block.type === "text"
/** @category guards */
export const isImage = (block: ContentBlock): block is ImageBlock => block.type === "image"
/** @category guards */
export const isDocument = (block: ContentBlock): block is DocumentBlock => block.type === "document"
/** @category guards */
export const isThinking = (block: ContentBlock): block is ThinkingBlock => block.type === "thinking"
/** @category guards */
export const isRedactedThinking = (block: ContentBlock): block is RedactedThinkingBlock =>
  block.type === "redacted_thinking"
/** @category guards */
export const isToolUse = (block: ContentBlock): block is ToolUseBlock => block.type === "tool_use"
/** @category guards */
export const isToolResult = (block: ContentBlock): block is ToolResultBlock => block.type === "tool_result"
/** @category guards */
export const isServerToolUse = (block: ContentBlock): block is ServerToolUseBlock => block.type === "server_tool_use"
/** True for every server tool result block (web search, web fetch, code execution, …). @category guards */
export const isServerToolResult = (block: ContentBlock): block is ServerToolResultBlock =>
  (SERVER_TOOL_RESULT_TYPES as ReadonlyArray<string>).includes(block.type)
/** True for a block whose type this library does not model. @category guards */
export const isUnknownBlock = (block: ContentBlock): boolean => !KNOWN_BLOCK_TYPES.has(block.type)

/** The content of a message as a list of blocks (a string becomes one text block). @category utility */
export const blocksOf = (message: Message): ReadonlyArray<ContentBlock> =>
  typeof message.content === "string" ? [{ type: "text", text: message.content }] : message.content

/**
 * True when a user message holds only tool results (the agent loop's reply to a tool call), so it is not a human turn.
 * @category guards
 */
export const isToolResultMessage = (message: Message): boolean =>
  message.role === "user" && typeof message.content !== "string" && message.content.length > 0 &&
  message.content.every(isToolResult)

/** The ids of the tool_use blocks in a message, in order. @category utility */
export const toolUseIds = (message: Message): ReadonlyArray<string> =>
  typeof message.content === "string" ? [] : message.content.filter(isToolUse).map((b) => b.id)

/** The `tool_use_id`s of the tool_result blocks in a message, in order. @category utility */
export const toolResultIds = (message: Message): ReadonlyArray<string> =>
  typeof message.content === "string" ? [] : message.content.filter(isToolResult).map((b) => b.tool_use_id)

/** A user message with one text block, assignable to the SDK's `MessageParam`. @category constructors */
export const userText = (text: string): BuiltMessage => ({ role: "user", content: [{ type: "text", text }] })

// ============================================================================
// Schemas
// ============================================================================

const Text = Schema.String
const NonEmpty = Schema.String.check(Schema.isMinLength(1, { message: "Expected a non-empty string" }))
const Id = NonEmpty
const Optional = Schema.optionalKey

const TextBlockSchema = Schema.Struct({ type: Schema.Literal("text"), text: Text })

const Base64Source = Schema.Struct({ type: Schema.Literal("base64"), media_type: Schema.String, data: Schema.String })
const UrlSource = Schema.Struct({ type: Schema.Literal("url"), url: Schema.String })
const FileSource = Schema.Struct({ type: Schema.Literal("file"), file_id: Schema.String })
const TextSource = Schema.Struct({ type: Schema.Literal("text"), media_type: Schema.String, data: Schema.String })
const ContentSource = Schema.Struct({
  type: Schema.Literal("content"),
  content: Schema.Union([Schema.String, Schema.Array(Schema.Unknown)])
})

/** Blocks whose nested block lists are validated recursively by `validateBlock`. */
const NestedBlocks = Schema.Union([Schema.String, Schema.Array(Schema.Unknown)])

const BlockSchemas: Readonly<Record<string, Schema.Codec<unknown, unknown>>> = {
  text: TextBlockSchema,
  image: Schema.Struct({ type: Schema.Literal("image"), source: Schema.Union([Base64Source, UrlSource, FileSource]) }),
  document: Schema.Struct({
    type: Schema.Literal("document"),
    source: Schema.Union([Base64Source, TextSource, ContentSource, UrlSource, FileSource]),
    title: Optional(Schema.NullOr(Schema.String)),
    context: Optional(Schema.NullOr(Schema.String))
  }),
  search_result: Schema.Struct({
    type: Schema.Literal("search_result"),
    source: Schema.String,
    title: Schema.String,
    content: Schema.Array(TextBlockSchema)
  }),
  thinking: Schema.Struct({ type: Schema.Literal("thinking"), thinking: Text, signature: Optional(Schema.String) }),
  redacted_thinking: Schema.Struct({ type: Schema.Literal("redacted_thinking"), data: Schema.String }),
  tool_use: Schema.Struct({
    type: Schema.Literal("tool_use"),
    id: Id,
    name: NonEmpty,
    input: Schema.Record(Schema.String, Schema.Unknown)
  }),
  tool_result: Schema.Struct({
    type: Schema.Literal("tool_result"),
    tool_use_id: Id,
    content: Optional(NestedBlocks),
    is_error: Optional(Schema.Boolean)
  }),
  server_tool_use: Schema.Struct({
    type: Schema.Literal("server_tool_use"),
    id: Id,
    name: Schema.String,
    input: Schema.Record(Schema.String, Schema.Unknown)
  }),
  container_upload: Schema.Struct({ type: Schema.Literal("container_upload"), file_id: Schema.String }),
  ...Object.fromEntries(
    SERVER_TOOL_RESULT_TYPES.map((type) => [
      type,
      Schema.Struct({ type: Schema.Literal(type), tool_use_id: Id, content: Schema.Unknown })
    ])
  )
}

const UnknownBlockSchema = Schema.Struct({ type: NonEmpty })

const MessageShape = Schema.Struct({
  role: Schema.Literals(["user", "assistant", "system"]),
  content: Schema.Union([Schema.String, Schema.Array(Schema.Unknown)])
})

// ============================================================================
// Decode errors
// ============================================================================

/**
 * Raised when input is not a valid conversation. It says where (`messageIndex`, `blockIndex`, and the `path` of the
 * field inside the message) and what was wrong (`reason`). Its `message` reads like
 * `messages[3].content[1].input (tool_use): Expected object, got "ls"`.
 * @category errors
 */
export class MessageDecodeError extends Schema.TaggedError<MessageDecodeError>()("MessageDecodeError", {
  messageIndex: Optional(Schema.Int),
  blockIndex: Optional(Schema.Int),
  path: Schema.Array(Schema.Union([Schema.String, Schema.Number])),
  blockType: Optional(Schema.String),
  reason: Schema.String
}) {
  override get message(): string {
    const where = this.path.reduce<string>(
      (acc, key) => typeof key === "number" ? `${acc}[${key}]` : `${acc}.${key}`,
      "messages"
    )
    const kind = this.blockType === undefined ? "" : ` (${this.blockType})`
    return `${where}${kind}: ${this.reason}`
  }
}

const formatIssue = SchemaIssue.makeFormatterDefault()

/** The first line of a Schema issue, plus the path inside the decoded value. */
const describe = (issue: SchemaIssue.Issue): { readonly path: ReadonlyArray<PropertyKey>; readonly reason: string } => {
  let current: SchemaIssue.Issue = issue
  const path: Array<PropertyKey> = []
  for (;;) {
    if (current._tag === "Pointer") {
      path.push(...current.path)
      current = current.issue
    } else if (current._tag === "Composite" && current.issues.length > 0) {
      current = current.issues[0]!
    } else if (current._tag === "Encoding") {
      current = current.issue
    } else break
  }
  return { path, reason: formatIssue(current).split("\n")[0] ?? "invalid" }
}

type Path = ReadonlyArray<string | number>

const check = (
  schema: Schema.Codec<unknown, unknown>,
  value: unknown,
  at: Path,
  where: { readonly messageIndex?: number; readonly blockIndex?: number; readonly blockType?: string }
): MessageDecodeError | undefined => {
  const result = Schema.decodeUnknownResult(schema)(value)
  if (Result.isSuccess(result)) return undefined
  const { path, reason } = describe(result.failure.issue)
  return new MessageDecodeError({
    ...where,
    path: [...at, ...path.map((key) => typeof key === "number" ? key : String(key))],
    reason
  })
}

const validateBlock = (
  value: unknown,
  at: Path,
  where: { readonly messageIndex: number; readonly blockIndex: number }
): MessageDecodeError | undefined => {
  const shape = check(UnknownBlockSchema, value, at, where)
  if (shape !== undefined) return shape
  const type = (value as UnknownBlock).type
  const schema = BlockSchemas[type]
  if (schema === undefined) return undefined
  const error = check(schema, value, at, { ...where, blockType: type })
  if (error !== undefined) return error
  const nested = type === "tool_result"
    ? (value as ToolResultBlock).content
    : type === "document" && (value as DocumentBlock).source.type === "content"
    ? ((value as DocumentBlock).source as { readonly content: unknown }).content
    : undefined
  if (!Array.isArray(nested)) return undefined
  const nestedAt = type === "tool_result" ? [...at, "content"] : [...at, "source", "content"]
  for (let i = 0; i < nested.length; i++) {
    const inner = validateBlock(nested[i], [...nestedAt, i], where)
    if (inner !== undefined) return inner
  }
  return undefined
}

/**
 * Validates one message. Returns the error for the first problem found, or `undefined` when the message is valid.
 * @category decoding
 */
export const validateMessage = (input: unknown, messageIndex: number): MessageDecodeError | undefined => {
  const shape = check(MessageShape, input, [messageIndex], { messageIndex })
  if (shape !== undefined) return shape
  const content = (input as Message).content
  if (typeof content === "string") return undefined
  for (let blockIndex = 0; blockIndex < content.length; blockIndex++) {
    const error = validateBlock(content[blockIndex], [messageIndex, "content", blockIndex], {
      messageIndex,
      blockIndex
    })
    if (error !== undefined) return error
  }
  return undefined
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
