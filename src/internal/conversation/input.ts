/**
 * The checks a conversation runs on a caller's message before any step changes anything: `appendRefusal` for what
 * `append` takes, `replyRefusal` for what `recordReply` takes. Each answers `undefined` for input the step takes, or a
 * `MessageDecodeError` that names the path and the problem (and what to do instead): a malformed message, a block its
 * role cannot hold, or a system message the API would refuse where it lands (API-RULES 9 and 10). O(the message's
 * size); of the state only the last message and the pending calls are read.
 *
 * @internal
 */
import { type Message, MessageDecodeError, validateMessage } from "../../Message.ts"
import { KNOWN_BLOCK_TYPES } from "../blocks.ts"
import { SERVER_TOOL_RESULT_TYPES } from "../wireTypes.ts"
import { endsInServerResult, SYSTEM_BLOCK_TYPES } from "../validate.ts"
import { isSdkReply, type MessageParam, wireMessage } from "./wire.ts"

/** What the checks read of the conversation: its view, the calls still waiting for results, the latest reply's id. */
export interface InputContext {
  readonly view: ReadonlyArray<MessageParam>
  readonly pending: ReadonlyArray<{ readonly originalId: string }>
  readonly reply?: { readonly id?: string | undefined } | undefined
}

/** Blocks only the assistant's replies hold: the API refuses them in a user message. */
const ASSISTANT_BLOCKS: ReadonlySet<string> = new Set([
  "thinking",
  "redacted_thinking",
  "tool_use",
  "server_tool_use",
  "mcp_tool_use",
  ...SERVER_TOOL_RESULT_TYPES
])

/** Blocks a system message holds: those `validate` allows there (`SYSTEM_BLOCK_TYPES`), and any type it does not know. */
const systemHolds = (type: string): boolean => SYSTEM_BLOCK_TYPES.has(type) || !KNOWN_BLOCK_TYPES.has(type)

type Path = ReadonlyArray<string | number>

const refusal = (at: number, path: Path, reason: string, block?: { index: number; type: string }) =>
  new MessageDecodeError({
    messageIndex: at,
    ...(block === undefined ? {} : { blockIndex: block.index, blockType: block.type }),
    path: [at, ...path],
    reason
  })

/** The first block the role cannot hold, as a refusal saying where it goes instead. */
const misplacedBlock = (message: MessageParam, at: number): MessageDecodeError | undefined => {
  if (typeof message.content === "string" || message.content == null) return undefined
  const blocks = message.content as ReadonlyArray<{ readonly type: string }>
  for (let i = 0; i < blocks.length; i++) {
    const type = blocks[i]!.type
    const reason = message.role === "user" && ASSISTANT_BLOCKS.has(type)
      ? `a user message cannot hold a ${type} block (only the assistant's replies do): record replies with ` +
        "recordReply"
      : message.role === "system" && !systemHolds(type)
      ? `a system message holds only text and tool changes (tool_addition, tool_removal): move the ${type} block ` +
        "out of it (an image or a document goes in a user message)"
      : message.role === "assistant" && type === "tool_result"
      ? "an assistant message cannot hold a tool_result block: append tool results in a user message"
      : undefined
    if (reason !== undefined) return refusal(at, ["content", i, "type"], reason, { index: i, type })
  }
  return undefined
}

/**
 * Where a system message lands, judged by the message before it (API-RULES 9): after a user turn (the interrupted
 * results of pending calls, or the leading user message of an empty view, are one) or an assistant turn ending in a
 * server tool result.
 */
const systemPlacement = (context: InputContext, at: number): MessageDecodeError | undefined => {
  const last = context.view.at(-1)
  if (context.pending.length > 0 || last === undefined || last.role === "user") return undefined
  if (last.role === "system") {
    return refusal(
      at,
      ["role"],
      "a system message cannot follow another system message: put both in one system message (its content blocks " +
        "and output_config together)"
    )
  }
  if (endsInServerResult(last as unknown as Message)) return undefined
  return refusal(
    at,
    ["role"],
    "a system message cannot follow the assistant's reply (it follows a user turn, or a reply ending in a server " +
      "tool result): append it after the next user message"
  )
}

/**
 * A user message after a system message (API-RULES 10: a system message is followed by an assistant turn), when the
 * message stores anything: a message of only results that answer no pending call stores nothing.
 */
const userPlacement = (context: InputContext, clean: MessageParam, at: number): MessageDecodeError | undefined => {
  const pending = new Set(context.pending.map((p) => p.originalId))
  const stores = typeof clean.content === "string" ||
    clean.content.some((b) => b.type !== "tool_result" || pending.has(b.tool_use_id))
  if (!stores) return undefined
  return refusal(
    at,
    ["role"],
    "a user message cannot follow a system message (the assistant's turn follows it): prepare and record the reply " +
      "first, or append the system message after the user message"
  )
}

/**
 * Why `append` refuses `message` in `context`, or `undefined` when it takes it: a message that does not decode, a
 * block its role cannot hold, or a user or system message placed where the API refuses it. An assistant message is
 * not judged here (`append` refuses it on its own). A message that stores nothing (blank) is taken.
 */
export const appendRefusal = (context: InputContext, message: unknown): MessageDecodeError | undefined => {
  const at = context.view.length
  const malformed = validateMessage(message, at)
  if (malformed !== undefined) return malformed
  const given = message as MessageParam
  const block = misplacedBlock(given, at)
  if (block !== undefined) return block
  // placement is judged only where it can refuse, and then only for a message that stores anything (`wireMessage`,
  // which the step runs again: the common append, a result after the reply, never needs it here)
  if (given.role === "system") {
    const misplaced = systemPlacement(context, at)
    return misplaced === undefined || wireMessage(given) === undefined ? undefined : misplaced
  }
  if (given.role !== "user" || context.view.at(-1)?.role !== "system") return undefined
  const clean = wireMessage(given)
  return clean === undefined ? undefined : userPlacement(context, clean, at)
}

/** A name for what was given instead of a reply, and what to pass instead. */
const notAReply = (reply: unknown): string | undefined => {
  const expected = "Expected an assistant message or the SDK's reply"
  if (reply === null || typeof reply !== "object") {
    return `${expected}, got ${reply === null ? "null" : typeof reply}`
  }
  if (typeof (reply as { readonly then?: unknown }).then === "function") {
    return `${expected}, got a Promise: await it and pass the reply`
  }
  if (Array.isArray(reply)) {
    return `${expected}, got an array (a reply's content?): pass the reply, or { role: "assistant", content }`
  }
  const fields = reply as { readonly role?: unknown; readonly data?: unknown }
  if (fields.role === undefined) {
    return "data" in fields
      ? `${expected}, got { data, response } (withResponse()): pass its data`
      : `${expected}, got an object with no role (a stream? pass await stream.finalMessage())`
  }
  return undefined
}

/** What `recordedLast` reads of an SDK reply. */
interface SdkReplyFields {
  readonly id: string
  readonly content: unknown
}

/**
 * Whether `reply` is the SDK reply the conversation recorded last, given again: the same `id` as the latest reply, and
 * the same content as the view's last message (a reply that arrived with a recycled id but other content is taken).
 */
const recordedLast = (context: InputContext, reply: SdkReplyFields): boolean => {
  if (context.reply?.id === undefined || reply.id !== context.reply.id) return false
  const last = context.view.at(-1)
  return last?.role === "assistant" && JSON.stringify(last.content) === JSON.stringify(reply.content)
}

/**
 * Why `recordReply` refuses `reply` in `context`, or `undefined` when it takes it: anything that is not an assistant
 * message or the SDK's reply (a Promise not awaited, `{ data, response }`, a stream, a bare content array, a user or
 * system message), a message or reply content that does not decode, a `tool_result` block in it, or the SDK's reply
 * the conversation recorded last, given again (its `id` and content: recorded twice, its calls would be answered as interrupted
 * and asked again). A reply with empty content is taken (its stop reason and usage are kept).
 */
export const replyRefusal = (context: InputContext, reply: unknown): MessageDecodeError | undefined => {
  const at = context.view.length
  const wrong = notAReply(reply)
  if (wrong !== undefined) return refusal(at, [], wrong)
  const given = reply as MessageParam
  if (isSdkReply(given) && recordedLast(context, given as unknown as SdkReplyFields)) {
    return refusal(
      at,
      ["id"],
      `reply ${context.reply!.id} is the one recorded last: record each reply once (a retried request's reply has a ` +
        "new id)"
    )
  }
  const message = isSdkReply(given) ? { role: "assistant", content: (given as { content?: unknown }).content } : given
  if (message.role === "user" || message.role === "system") {
    return refusal(at, ["role"], `recordReply takes the assistant's reply: a ${message.role} message goes to append`)
  }
  const malformed = validateMessage(message, at)
  if (malformed !== undefined) return malformed
  return misplacedBlock(message as MessageParam, at)
}
