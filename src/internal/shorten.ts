/**
 * Shorten before the first send (the API's docs on preserved thinking: "shorten a tool result before the first time it
 * is sent, not after"): a tool result whose text is larger than a limit is cut when it is appended, its head and tail
 * kept and its middle replaced by an offload pointer (`Offload.formatOffloadRef`, the one pointer format) that says how
 * to get the rest back: a read's pointer names the omitted lines (`lines=a-b`, counted from the read's first line, one
 * output line a file line), any other output's the call to make again. The model sees the shortened result from its
 * first request on, so nothing it saw is rewritten later.
 *
 * Pure: a function of the message, the calls it answers and the limit.
 *
 * @internal
 */
import type { ContentBlock, Message, TextBlock, ToolResultBlock, ToolUseBlock } from "../Message.ts"
import { formatOffloadRef, isOffloaded, type OffloadRef } from "../Offload.ts"
import type { ToolClassifier } from "../Tools.ts"
import { CHARS_PER_TOKEN } from "./estimate.ts"
import { CLIP_MARK, clipHead } from "./text.ts"
import { inputLine, SHORT_INPUT_MAX } from "./toolInput.ts"

/** The smallest limit a policy may set: room for a head, a tail and the pointer between them. */
export const MIN_RESULT_TOKENS = 256

/** The text of a result that is all text (a string, or text blocks joined by newlines); undefined otherwise. */
const textOf = (content: ToolResultBlock["content"]): string | undefined => {
  if (typeof content === "string") return content
  if (content === undefined || content.length === 0) return undefined
  const texts: Array<string> = []
  for (const block of content as ReadonlyArray<ContentBlock>) {
    if (block.type !== "text") return undefined
    texts.push((block as TextBlock).text)
  }
  return texts.join("\n")
}

const lines = (text: string): number => {
  let n = 0
  for (let i = text.indexOf("\n"); i !== -1; i = text.indexOf("\n", i + 1)) n++
  return n
}

/**
 * `result` (answering `call`, classified by `classify`) cut to about `maxTokens` tokens: the head and tail, each
 * about half of it and ending (starting) at a line boundary where there is one, around the pointer to the middle.
 * `undefined` when it is within the limit, not all text, or already a pointer.
 */
export const shortenResult = (
  result: ToolResultBlock,
  call: ToolUseBlock,
  classify: ToolClassifier,
  maxTokens: number
): ToolResultBlock | undefined => {
  const text = textOf(result.content)
  if (text === undefined || text.length <= maxTokens * CHARS_PER_TOKEN || isOffloaded(result)) return undefined
  // the pointer's own length comes out of the budget (a pointer is at most a few hundred characters)
  const budget = Math.max(2, maxTokens * CHARS_PER_TOKEN - 400)
  const half = Math.floor(budget / 2)
  const headBreak = text.lastIndexOf("\n", half)
  const headEnd = headBreak > 0 ? headBreak : half
  const tailBreak = text.indexOf("\n", text.length - half)
  const tailStart = tailBreak !== -1 && tailBreak + 1 < text.length ? tailBreak + 1 : text.length - half
  if (tailStart <= headEnd) return undefined
  const head = text.slice(0, headEnd)
  const middle = text.slice(headEnd, tailStart)
  const tokens = Math.ceil(middle.length / CHARS_PER_TOKEN)
  const action = classify(call)
  const common = { tool: call.name, toolUseId: result.tool_use_id, reason: "stale" as const, tokens, images: 0 }
  let ref: OffloadRef
  if (action._tag === "Read") {
    // lines in the middle: those after the head's last line break, up to the tail's first line
    const first = (action.range?.start ?? 1) + lines(head) + 1
    const omitted = headBreak > 0 && tailBreak !== -1 ? lines(middle) - 1 : 0
    ref = omitted > 0
      ? { _tag: "Read", path: action.path, range: { start: first, end: first + omitted - 1 }, ...common }
      : { _tag: "Read", path: action.path, ...common }
  } else {
    const line = inputLine(call, SHORT_INPUT_MAX)
    const clipped = clipHead(line, SHORT_INPUT_MAX)
    ref = { _tag: "Output", input: clipped === line ? line : clipped + CLIP_MARK, ...common }
  }
  return { ...result, content: `${head}\n${formatOffloadRef(ref)}\n${text.slice(tailStart)}` }
}

/**
 * `message` with each tool result larger than `maxTokens` cut (`shortenResult`), the same object when none is;
 * `callOf` finds the call a result answers (by the id the result carries).
 */
export const shortenResults = <M extends Message>(
  message: M,
  callOf: (toolUseId: string) => ToolUseBlock | undefined,
  classify: ToolClassifier,
  maxTokens: number
): M => {
  if (message.role !== "user" || typeof message.content === "string") return message
  let copy: Array<ContentBlock> | undefined
  message.content.forEach((block, i) => {
    if (block.type !== "tool_result") return
    const result = block as ToolResultBlock
    const call = callOf(result.tool_use_id)
    const cut = call === undefined ? undefined : shortenResult(result, call, classify, maxTokens)
    if (cut === undefined) return
    copy ??= [...message.content as ReadonlyArray<ContentBlock>]
    copy[i] = cut
  })
  return copy === undefined ? message : { ...message, content: copy }
}

/**
 * The call a result with `toolUseId` answers, in `view`: a pending call of the latest reply (`pending`, by the id the
 * caller knows, `originalId`, which the view may hold renamed, `id`).
 */
export const pendingCall = (
  view: ReadonlyArray<Message>,
  pending: ReadonlyArray<{ readonly id: string; readonly originalId: string }>,
  toolUseId: string
): ToolUseBlock | undefined => {
  const id = pending.find((p) => p.originalId === toolUseId)?.id
  if (id === undefined) return undefined
  for (let i = view.length - 1; i >= 0; i--) {
    const message = view[i]!
    if (message.role !== "assistant") continue
    if (typeof message.content === "string") return undefined
    return message.content.find((b) => b.type === "tool_use" && (b as ToolUseBlock).id === id) as
      | ToolUseBlock
      | undefined
  }
  return undefined
}
