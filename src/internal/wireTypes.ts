/**
 * The wire model's block shapes that the library carries without reading them (server tool calls and results, MCP
 * calls, container uploads, search results, redacted thinking, unknown blocks), the image and document sources, the
 * system-message fields, and the messages the library builds. `Message.ContentBlock` is their union with the blocks the
 * library reads; code outside `src/` narrows a `ContentBlock` on its `type`.
 *
 * @internal
 */

/**
 * The source of an image: inline base64, a URL, or an uploaded file. @category models
 */
export type ImageSource =
  | { readonly type: "base64"; readonly media_type: string; readonly data: string }
  | { readonly type: "url"; readonly url: string }
  | { readonly type: "file"; readonly file_id: string }

/**
 * Thinking the provider redacted; `data` is opaque and must be sent back unchanged. @category models
 */
export interface RedactedThinkingBlock {
  readonly type: "redacted_thinking"
  readonly data: string
}

/**
 * A server tool call (web search, web fetch, code execution, …) that the provider ran itself. @category models
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
 * ends in one. @category models
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
 * The result of a server tool call. It lives in the same assistant turn as its `server_tool_use` or `mcp_tool_use`,
 * and goes back verbatim and in place. @category models
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
 */
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
  /** The block's type, as the API named it. */
  readonly type: string
}

/**
 * The fields of a mid-conversation system message besides its content (the SDK's `BetaSystemMessageParam`):
 * `output_config`, per-turn settings such as `effort` for the turn after it, and `clear_at`
 * (`"next_user_message"`: the API stops showing the message once a later user message exists).
 * @category models
 */
export interface SystemMessageFields {
  readonly output_config?: unknown
  readonly clear_at?: "next_user_message" | "never" | null
}

/**
 * A text block this library builds itself, with no extra fields. @category models
 */
export interface BuiltTextBlock {
  readonly type: "text"
  readonly text: string
}

/**
 * A message this library builds itself (a summary). It is assignable to the SDK's `MessageParam`.
 * @category models
 */
export interface BuiltMessage {
  /** Who the message is from: a summary is a user message. */
  readonly role: "user" | "assistant"
  /** Its text blocks. */
  readonly content: Array<BuiltTextBlock>
}
