/**
 * The checks a conversation runs on a caller's message before any step changes anything: `appendRefusal` for what
 * `append` takes, `replyRefusal` for what `recordReply` takes. Each answers `undefined` for input the step takes, or a
 * `MessageDecodeError` that names the path and the problem (and what to do instead): a malformed message, a block its
 * role cannot hold, blank content (API-RULES 4), or a system message the API would refuse where it lands (API-RULES 9
 * and 10). O(the message's size); of the state only the last message and the pending calls are read.
 *
 * @internal
 */
import { type Message, MessageDecodeError, validateMessage } from "../../Message.ts"
import { KNOWN_BLOCK_TYPES } from "../blocks.ts"
import { SERVER_TOOL_RESULT_TYPES } from "../wireTypes.ts"
import { endsInServerResult, SYSTEM_BLOCK_TYPES } from "../validate.ts"
import { isSdkReply, type MessageParam } from "./wire.ts"

/** What the checks read of the conversation: its view, the calls still waiting for results, the latest reply's id. */
export interface InputContext {
  readonly view: ReadonlyArray<MessageParam>
  readonly pending: ReadonlyArray<{ readonly originalId: string }>
  readonly reply?: { readonly id?: string | undefined; readonly empty?: true | undefined } | undefined
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

/** Empty or whitespace-only (what `trim` removes): a scan that stops at the first other character. */
const isBlank = (text: string): boolean => !/\S/.test(text)

/** The `output_config` of a system message when it holds a field (what lets the message go without `content`). */
const configured = (message: MessageParam): boolean => {
  const config = (message as { readonly output_config?: unknown }).output_config
  return typeof config === "object" && config !== null && Object.keys(config).length > 0
}

/**
 * Blank content in a user or system message (API-RULES 4: no empty content, no empty or whitespace-only text block;
 * rule 26: a system message without content needs an `output_config` field): the API refuses it, and stored as it is
 * the message would be dropped, so the caller hears of it. Blank text inside a tool result is not the caller's (a tool
 * printed nothing): the step drops it.
 */
const blankContent = (message: MessageParam, at: number): MessageDecodeError | undefined => {
  const role = message.role
  const content = message.content as MessageParam["content"] | undefined
  // what to do instead: a system message that carries settings goes without content, never with blank content
  const instead = () =>
    role === "system" && configured(message)
      ? "leave content out (a system message with output_config needs none)"
      : "append the message once it has something to say, or leave it out"
  if (content == null) {
    if (configured(message)) return undefined
    return refusal(
      at,
      ["output_config"],
      "a system message with no content needs an output_config field (effort, …): the API refuses it with neither"
    )
  }
  if (typeof content === "string") {
    if (!isBlank(content)) return undefined
    return refusal(
      at,
      ["content"],
      `a ${role} message cannot be blank (the API refuses empty and whitespace-only text): ${instead()}`
    )
  }
  if (content.length === 0) {
    return refusal(at, ["content"], `a ${role} message cannot have empty content (the API refuses it): ${instead()}`)
  }
  for (let i = 0; i < content.length; i++) {
    const block = content[i]!
    if (block.type !== "text" || !isBlank(block.text)) continue
    return refusal(
      at,
      ["content", i, "text"],
      "a text block cannot be blank (the API refuses empty and whitespace-only text): " +
        (content.length === 1 ? instead() : "remove the block"),
      { index: i, type: "text" }
    )
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
 * message stores anything: a message of only results that answer no pending call stores nothing. A reply with empty
 * content adds no message, so after one the assistant's turn is still to come: the refusal says how to go on.
 */
const userPlacement = (context: InputContext, given: MessageParam, at: number): MessageDecodeError | undefined => {
  const pending = new Set(context.pending.map((p) => p.originalId))
  const stores = typeof given.content === "string" ||
    given.content.some((b) => b.type !== "tool_result" || pending.has(b.tool_use_id))
  if (!stores) return undefined
  return refusal(
    at,
    ["role"],
    "a user message cannot follow a system message (the assistant's turn follows it): prepare and record the reply " +
      "first, or append the system message after the user message. A reply with empty content adds no message, so " +
      "after one the turn is still to come: send the request again, or record a reply with content first " +
      '(recordReply({ role: "assistant", content }))'
  )
}

/**
 * Why `append` refuses `message` in `context`, or `undefined` when it takes it: a message that does not decode, a
 * block its role cannot hold, blank content (an empty string or list, a blank text block: the API refuses them, and
 * the step would drop the message), or a user or system message placed where the API refuses it. An assistant message
 * is not judged here (`append` refuses it on its own). A message of only results that answer no pending call is taken
 * (the step drops them and says so).
 */
export const appendRefusal = (context: InputContext, message: unknown): MessageDecodeError | undefined => {
  const at = context.view.length
  const malformed = validateMessage(message, at)
  if (malformed !== undefined) return malformed
  const given = message as MessageParam
  const wrong = misplacedBlock(given, at) ?? (given.role === "assistant" ? undefined : blankContent(given, at))
  if (wrong !== undefined) return wrong
  // placement is judged only where it can refuse (the common append, a result after the reply, never needs it)
  if (given.role === "system") return systemPlacement(context, at)
  return given.role === "user" && context.view.at(-1)?.role === "system" ? userPlacement(context, given, at) : undefined
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

/** Content with nothing the API takes: no block, or only blank text (what `wireReply` leaves nothing of). */
const emptyContent = (content: unknown): boolean =>
  Array.isArray(content) &&
  content.every((b: { readonly type?: unknown; readonly text?: unknown } | null) =>
    b?.type === "text" && typeof b.text === "string" && isBlank(b.text)
  )

/**
 * Whether `reply` is the SDK reply the conversation recorded last, given again: the same `id` as the latest reply, and
 * the same content as the view's last message, or empty content when the latest reply had none (it added no message).
 * A reply that arrived with a recycled id but other content is taken.
 */
const recordedLast = (context: InputContext, reply: SdkReplyFields): boolean => {
  if (context.reply?.id === undefined || reply.id !== context.reply.id) return false
  if (context.reply.empty === true) return emptyContent(reply.content)
  const last = context.view.at(-1)
  return last?.role === "assistant" && JSON.stringify(last.content) === JSON.stringify(reply.content)
}

/**
 * Why `recordReply` refuses `reply` in `context`, or `undefined` when it takes it: anything that is not an assistant
 * message or the SDK's reply (a Promise not awaited, `{ data, response }`, a stream, a bare content array, a user or
 * system message), a message or reply content that does not decode, a `tool_result` block in it, or the SDK's reply
 * the conversation recorded last, given again (its `id` and content: recorded twice, its calls would be answered as interrupted
 * and asked again; an empty one would be logged twice). A reply with empty content is taken (its usage, id and stop
 * reason are kept, and logged).
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
