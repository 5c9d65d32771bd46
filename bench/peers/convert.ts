/**
 * Converters from our wire model (Anthropic Messages) to each peer's message format, used only by the peer
 * benchmarks. They run once, outside any timed region.
 *
 * - pi (`@mariozechner/pi-coding-agent`): roles `user`, `assistant`, `toolResult`; tool calls are `toolCall` blocks;
 *   `findCutPoint` takes session entries (`{ type: "message", message }`), so the pi form carries both.
 * - LangChain (`@langchain/core`): `HumanMessage`, `AIMessage` (tool calls in `tool_calls`), `ToolMessage`.
 * - AI SDK (`ai`): `ModelMessage`s with roles `user`, `assistant`, `tool`, and `tool-call` / `tool-result` parts.
 *
 * Every converter keeps every character of text, thinking, tool input and tool output, and every image. A user
 * message that holds tool results becomes one message per result in pi and LangChain (their formats have one result
 * per message) and one `tool` message in the AI SDK; any human blocks in it follow as a user message. Block types
 * that a peer has no counterpart for (server tools, documents, unknown blocks) become text holding their JSON, so
 * their size still counts. `is_error` is kept everywhere except on a multi-block result in the AI SDK, whose
 * `content` output has no error flag.
 */
import type { SessionMessageEntry } from "@mariozechner/pi-coding-agent"
import { AIMessage, type BaseMessage, HumanMessage, ToolMessage } from "@langchain/core/messages"
import type {
  AssistantModelMessage,
  ImagePart,
  ModelMessage,
  TextPart,
  ToolModelMessage,
  ToolResultPart,
  UserModelMessage
} from "ai"
import type { ContentBlock, ImageBlock, Message } from "../../src/Message.ts"
import { isImage, isRedactedThinking, isText, isThinking, isToolResult, isToolUse } from "../../src/internal/blocks.ts"

// ============================================================================
// Shared
// ============================================================================

/** A peer's form of a conversation, with the index of the source message each peer message came from. */
export interface Converted<A> {
  readonly messages: ReadonlyArray<A>
  /** `origin[i]` is the index in the source conversation of the message that produced `messages[i]`. */
  readonly origin: ReadonlyArray<number>
}

const blocks = (message: Message): ReadonlyArray<ContentBlock> =>
  typeof message.content === "string" ? [{ type: "text", text: message.content }] : message.content

/** The tool name of every tool_use id in the conversation (tool results need it in pi and the AI SDK). */
const toolNames = (messages: ReadonlyArray<Message>): Map<string, string> => {
  const names = new Map<string, string>()
  for (const message of messages) {
    for (const block of blocks(message)) if (isToolUse(block)) names.set(block.id, block.name)
  }
  return names
}

/** A block with no counterpart in a peer's format, as text holding its JSON. */
export const blockAsText = (block: ContentBlock): string => JSON.stringify(block)

const base64Image = (block: ImageBlock): { readonly data: string; readonly mimeType: string } | undefined =>
  block.source.type === "base64" ? { data: block.source.data, mimeType: block.source.media_type } : undefined

/** Splits a user message into its tool results and the runs of other blocks, in order. */
const userParts = (
  message: Message
): ReadonlyArray<
  | { readonly kind: "results"; readonly blocks: ReadonlyArray<ContentBlock> }
  | { readonly kind: "human"; readonly blocks: ReadonlyArray<ContentBlock> }
> => {
  const parts: Array<{ kind: "results" | "human"; blocks: Array<ContentBlock> }> = []
  for (const block of blocks(message)) {
    const kind = isToolResult(block) ? "results" : "human"
    const last = parts[parts.length - 1]
    if (last !== undefined && last.kind === kind) last.blocks.push(block)
    else parts.push({ kind, blocks: [block] })
  }
  return parts
}

const resultBlocks = (content: string | ReadonlyArray<ContentBlock> | undefined): ReadonlyArray<ContentBlock> =>
  content === undefined ? [] : typeof content === "string" ? [{ type: "text", text: content }] : content

// ============================================================================
// pi
// ============================================================================

/** pi's message types, read off its session entry type (its `pi-ai` types are not re-exported). */
type PiAgentMessage = SessionMessageEntry["message"]
type PiAssistant = Extract<PiAgentMessage, { role: "assistant" }>
type PiUser = Extract<PiAgentMessage, { role: "user" }>
type PiToolResult = Extract<PiAgentMessage, { role: "toolResult" }>
type TextContent = Extract<Exclude<PiUser["content"], string>[number], { type: "text" }>
type ImageContent = Extract<Exclude<PiUser["content"], string>[number], { type: "image" }>
type Usage = PiAssistant["usage"]

/** A pi message of the three roles the converter produces. */
export type PiMessage = PiUser | PiAssistant | PiToolResult

const ZERO_USAGE: Usage = {
  input: 0,
  output: 0,
  cacheRead: 0,
  cacheWrite: 0,
  totalTokens: 0,
  cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 }
}

const piContent = (block: ContentBlock): TextContent | ImageContent => {
  if (isText(block)) return { type: "text", text: block.text }
  if (isImage(block)) {
    const image = base64Image(block)
    if (image !== undefined) return { type: "image", ...image }
  }
  return { type: "text", text: blockAsText(block) }
}

/** The pi form of a conversation: its messages, and the same messages as session entries for `findCutPoint`. */
export interface PiConversation extends Converted<PiMessage> {
  readonly entries: ReadonlyArray<SessionMessageEntry>
}

/** Converts a conversation to pi's messages and session entries. */
export const toPi = (messages: ReadonlyArray<Message>): PiConversation => {
  const names = toolNames(messages)
  const out: Array<PiMessage> = []
  const origin: Array<number> = []
  const timestamp = 1_700_000_000_000
  messages.forEach((message, index) => {
    if (message.role === "assistant") {
      const content: Array<PiAssistant["content"][number]> = []
      for (const block of blocks(message)) {
        if (isText(block)) content.push({ type: "text", text: block.text })
        else if (isThinking(block)) {
          content.push({
            type: "thinking",
            thinking: block.thinking,
            ...(block.signature === undefined ? {} : { thinkingSignature: block.signature })
          })
        } else if (isRedactedThinking(block)) {
          content.push({ type: "thinking", thinking: "", thinkingSignature: block.data, redacted: true })
        } else if (isToolUse(block)) {
          content.push({
            type: "toolCall",
            id: block.id,
            name: block.name,
            arguments: block.input as Record<string, unknown>
          })
        } else content.push({ type: "text", text: blockAsText(block) })
      }
      const calls = content.some((b) => b.type === "toolCall")
      out.push({
        role: "assistant",
        content,
        api: "anthropic-messages",
        provider: "anthropic",
        model: "claude-sonnet-4-5",
        usage: ZERO_USAGE,
        stopReason: calls ? "toolUse" : "stop",
        timestamp
      })
      origin.push(index)
      return
    }
    if (typeof message.content === "string") {
      out.push({ role: "user", content: message.content, timestamp })
      origin.push(index)
      return
    }
    for (const part of userParts(message)) {
      if (part.kind === "human") {
        out.push({ role: "user", content: part.blocks.map(piContent), timestamp })
        origin.push(index)
        continue
      }
      for (const block of part.blocks) {
        if (!isToolResult(block)) continue
        const result: PiToolResult = {
          role: "toolResult",
          toolCallId: block.tool_use_id,
          toolName: names.get(block.tool_use_id) ?? "unknown",
          content: resultBlocks(block.content).map(piContent),
          isError: block.is_error === true,
          timestamp
        }
        out.push(result)
        origin.push(index)
      }
    }
  })
  const entries = out.map((message, i): SessionMessageEntry => ({
    type: "message",
    id: `e${i}`,
    parentId: i === 0 ? null : `e${i - 1}`,
    timestamp: "2026-01-01T00:00:00.000Z",
    message
  }))
  return { messages: out, origin, entries }
}

// ============================================================================
// LangChain
// ============================================================================

type LcBlock = { type: "text"; text: string } | { type: "image_url"; image_url: { url: string } } | {
  type: "thinking"
  thinking: string
  signature?: string
} | { type: "redacted_thinking"; data: string }

const lcContent = (block: ContentBlock): LcBlock => {
  if (isText(block)) return { type: "text", text: block.text }
  if (isImage(block)) {
    const image = base64Image(block)
    if (image !== undefined) {
      return { type: "image_url", image_url: { url: `data:${image.mimeType};base64,${image.data}` } }
    }
  }
  return { type: "text", text: blockAsText(block) }
}

/** Converts a conversation to LangChain messages. Tool calls go in `AIMessage.tool_calls`, as LangChain expects. */
export const toLangChain = (messages: ReadonlyArray<Message>): Converted<BaseMessage> => {
  const names = toolNames(messages)
  const out: Array<BaseMessage> = []
  const origin: Array<number> = []
  messages.forEach((message, index) => {
    if (message.role === "assistant") {
      const content: Array<LcBlock> = []
      const toolCalls: Array<{ type: "tool_call"; id: string; name: string; args: Record<string, unknown> }> = []
      for (const block of blocks(message)) {
        if (isThinking(block)) {
          content.push({
            type: "thinking",
            thinking: block.thinking,
            ...(block.signature === undefined ? {} : { signature: block.signature })
          })
        } else if (isRedactedThinking(block)) content.push({ type: "redacted_thinking", data: block.data })
        else if (isToolUse(block)) {
          toolCalls.push({
            type: "tool_call",
            id: block.id,
            name: block.name,
            args: block.input as Record<string, unknown>
          })
        } else content.push(lcContent(block))
      }
      out.push(new AIMessage({ content, tool_calls: toolCalls }))
      origin.push(index)
      return
    }
    if (typeof message.content === "string") {
      out.push(new HumanMessage({ content: message.content }))
      origin.push(index)
      return
    }
    for (const part of userParts(message)) {
      if (part.kind === "human") {
        out.push(new HumanMessage({ content: part.blocks.map(lcContent) }))
        origin.push(index)
        continue
      }
      for (const block of part.blocks) {
        if (!isToolResult(block)) continue
        const content = block.content
        out.push(
          new ToolMessage({
            tool_call_id: block.tool_use_id,
            name: names.get(block.tool_use_id) ?? "unknown",
            status: block.is_error === true ? "error" : "success",
            content: typeof content === "string" ? content : resultBlocks(content).map(lcContent)
          })
        )
        origin.push(index)
      }
    }
  })
  return { messages: out, origin }
}

// ============================================================================
// AI SDK
// ============================================================================

const aiUserPart = (block: ContentBlock): TextPart | ImagePart => {
  if (isText(block)) return { type: "text", text: block.text }
  if (isImage(block)) {
    const image = base64Image(block)
    if (image !== undefined) return { type: "image", image: image.data, mediaType: image.mimeType }
  }
  return { type: "text", text: blockAsText(block) }
}

type AiResultValue = Extract<ToolResultPart["output"], { type: "content" }>["value"][number]

const aiResultValue = (block: ContentBlock): AiResultValue => {
  if (isText(block)) return { type: "text", text: block.text }
  if (isImage(block)) {
    const image = base64Image(block)
    if (image !== undefined) return { type: "media", data: image.data, mediaType: image.mimeType }
  }
  return { type: "text", text: blockAsText(block) }
}

const aiOutput = (content: string | ReadonlyArray<ContentBlock> | undefined, isError: boolean) =>
  typeof content === "string" || content === undefined
    ? { type: isError ? "error-text" as const : "text" as const, value: content ?? "" }
    : { type: "content" as const, value: content.map(aiResultValue) }

/** Converts a conversation to AI SDK `ModelMessage`s. */
export const toAiSdk = (messages: ReadonlyArray<Message>): Converted<ModelMessage> => {
  const names = toolNames(messages)
  const out: Array<ModelMessage> = []
  const origin: Array<number> = []
  messages.forEach((message, index) => {
    if (message.role === "assistant") {
      const content: Exclude<AssistantModelMessage["content"], string> = []
      for (const block of blocks(message)) {
        if (isText(block)) content.push({ type: "text", text: block.text })
        else if (isThinking(block)) {
          content.push({
            type: "reasoning",
            text: block.thinking,
            ...(block.signature === undefined ? {} : { providerOptions: { anthropic: { signature: block.signature } } })
          })
        } else if (isRedactedThinking(block)) {
          content.push({ type: "reasoning", text: "", providerOptions: { anthropic: { redactedData: block.data } } })
        } else if (isToolUse(block)) {
          content.push({ type: "tool-call", toolCallId: block.id, toolName: block.name, input: block.input })
        } else content.push({ type: "text", text: blockAsText(block) })
      }
      out.push({ role: "assistant", content })
      origin.push(index)
      return
    }
    if (typeof message.content === "string") {
      out.push({ role: "user", content: message.content } satisfies UserModelMessage)
      origin.push(index)
      return
    }
    for (const part of userParts(message)) {
      if (part.kind === "human") {
        out.push({ role: "user", content: part.blocks.map(aiUserPart) } satisfies UserModelMessage)
        origin.push(index)
        continue
      }
      const content: Array<ToolResultPart> = []
      for (const block of part.blocks) {
        if (!isToolResult(block)) continue
        content.push({
          type: "tool-result",
          toolCallId: block.tool_use_id,
          toolName: names.get(block.tool_use_id) ?? "unknown",
          output: aiOutput(block.content, block.is_error === true)
        })
      }
      out.push({ role: "tool", content } satisfies ToolModelMessage)
      origin.push(index)
    }
  })
  return { messages: out, origin }
}
