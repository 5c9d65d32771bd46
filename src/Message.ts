/**
 * Concept: the wire model, a conversation as the Messages API takes it, and its decoding.
 *
 * The wire model: Anthropic Messages API conversations, as plain readonly data.
 *
 * Every block type the API has is modelled, plus an open case (a block of any other `type`) for block types this library does not
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
import { checkMessage } from "./internal/decode.ts"
import type {
  ContainerUploadBlock,
  ImageSource,
  McpToolUseBlock,
  RedactedThinkingBlock,
  ServerToolResultBlock,
  ServerToolUseBlock,
  UnknownBlock
} from "./internal/wireTypes.ts"

/** An image block's source, and a block type this reader does not know (kept as it came). */
export type { ImageSource, UnknownBlock } from "./internal/wireTypes.ts"

// ============================================================================
// Block types
// ============================================================================

/** A plain text block. @category models */
export interface TextBlock {
  /** Always `"text"`. */
  readonly type: "text"
  /** The text itself. */
  readonly text: string
  /** A prompt-cache breakpoint, as the API defines it; kept as given. */
  readonly cache_control?: unknown
  /** The API's citations for this text, as the API sent them; kept as given. */
  readonly citations?: unknown
}

/** An image block. @category models */
export interface ImageBlock {
  /** Always `"image"`. */
  readonly type: "image"
  /** Where the image comes from: base64 data, a URL or an uploaded file. */
  readonly source: ImageSource
  /** A prompt-cache breakpoint, as the API defines it; kept as given. */
  readonly cache_control?: unknown
}

/**
 * The source of a document: base64 PDF, plain text, a list of content blocks, a URL, or an uploaded file. @category models
 */
export type DocumentSource =
  | { readonly type: "base64"; readonly media_type: string; readonly data: string }
  | { readonly type: "text"; readonly media_type: string; readonly data: string }
  | { readonly type: "content"; readonly content: string | ReadonlyArray<ContentBlock> }
  | { readonly type: "url"; readonly url: string }
  | { readonly type: "file"; readonly file_id: string }

/** A document block (PDF, text, or custom content). @category models */
export interface DocumentBlock {
  /** Always `"document"`. */
  readonly type: "document"
  /** The document's content: base64 PDF, plain text, content blocks, a URL or an uploaded file. */
  readonly source: DocumentSource
  /** The document's title, if any. */
  readonly title?: string | null
  /** Text about the document that the model reads but does not cite. */
  readonly context?: string | null
  /** A prompt-cache breakpoint, as the API defines it; kept as given. */
  readonly cache_control?: unknown
  /** The API's citation settings for this document; kept as given. */
  readonly citations?: unknown
}

/**
 * A search result block, as returned by a tool or passed by the caller. @category models
 */
interface SearchResultBlock {
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
  /** Always `"thinking"`. */
  readonly type: "thinking"
  /** The model's reasoning text. */
  readonly thinking: string
  /** The API's signature over the block; absent on unsigned (aborted) thinking. */
  readonly signature?: string
}

/** A client tool call made by the assistant. @category models */
export interface ToolUseBlock {
  /** Always `"tool_use"`. */
  readonly type: "tool_use"
  /** The call's id (`toolu_…`); the matching `tool_result` names it in `tool_use_id`. */
  readonly id: string
  /** The name of the tool called. */
  readonly name: string
  /** The call's arguments, a JSON object. */
  readonly input: unknown
  /** A prompt-cache breakpoint, as the API defines it; kept as given. */
  readonly cache_control?: unknown
}

/** The result of a client tool call; it must sit in the user message right after its `tool_use`. @category models */
export interface ToolResultBlock {
  /** Always `"tool_result"`. */
  readonly type: "tool_result"
  /** The `id` of the `tool_use` this answers. */
  readonly tool_use_id: string
  /** The tool's output: a string or text/image/document blocks; absent for an empty result. */
  readonly content?: string | ReadonlyArray<ContentBlock>
  /** `true` when the tool failed and `content` describes the failure. */
  readonly is_error?: boolean
  /** A prompt-cache breakpoint, as the API defines it; kept as given. */
  readonly cache_control?: unknown
}

/**
 * The API's own compaction block: the server's summary of everything before it. It is sent back
 * verbatim: `content`, `encrypted_content`, `signature` and `tool_changes` are never changed, and any other field is
 * preserved. `content: null` marks a failed compaction, which the server treats as a no-op; an empty string is
 * rejected by decode. The API drops everything before the last compaction block with content (see `ApiView`).
 * @category models
 */
export interface CompactionBlock {
  /** Always `"compaction"`. */
  readonly type: "compaction"
  /** The server's summary text; `null` for a failed compaction (a no-op). */
  readonly content?: string | null
  /** Opaque state the server needs back; sent verbatim. */
  readonly encrypted_content?: string | null
  /** The server's signature over the block; sent verbatim. */
  readonly signature?: string | null
  /** The server's record of tool definition changes; sent verbatim. */
  readonly tool_changes?: ReadonlyArray<unknown> | null
  /** A prompt-cache breakpoint, as the API defines it; kept as given. */
  readonly cache_control?: unknown
}

/**
 * Every block this library models by name. @category models
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

/** Any content block, known or not. Narrow it on its `type`. @category models */
export type ContentBlock = KnownBlock | UnknownBlock

/**
 * The roles of the Messages API. `system` is the mid-conversation system message, in `@anthropic-ai/sdk`'s
 * `MessageParam` at the peer range (^1.17: `SystemMessageParam`, text only; the beta `BetaSystemMessageParam` also
 * carries tool changes, `output_config` and `clear_at`); it is never first and never sits inside a tool call.
 * @category models
 */
export type Role = "user" | "assistant" | "system"

/**
 * One message of a conversation. `@anthropic-ai/sdk`'s `MessageParam` is assignable to it.
 *
 * A system message may also carry `output_config` (per-turn settings for the turn after it) and `clear_at`. **Gotcha:**
 * a system message that carries `output_config` may have no `content` at all (the API accepts it), and decodes so; the
 * type keeps `content` required, so test `message.content != null` before reading the content of a system message.
 * @category models
 */
export interface Message {
  /** Who speaks: `user`, `assistant`, or a mid-conversation `system` message. */
  readonly role: Role
  /** A string (one text block) or the message's blocks, in order. */
  readonly content: string | ReadonlyArray<ContentBlock>
}

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
  /** The error as one line: where (`messages[i].content[j].path`, block type) and why. */
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
 * Total: never throws, whatever the input (nesting deeper than 128 levels, cycles and wrong types are errors).
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
