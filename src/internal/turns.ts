/**
 * Where a turn starts, read locally: whether a message is human and whether a turn starts at an index. Below `Turns`
 * (which re-exports `isHumanMessage`) and the cut.
 *
 * @internal
 */
import type { Message } from "../Message.ts"

/**
 * True when the message is a user message with human content: a string, or at least one block that is not a
 * tool_result.
 * @category guards
 */
export const isHumanMessage = (message: Message): boolean => {
  if (message.role !== "user") return false
  if (typeof message.content === "string") return true
  for (const block of message.content) if (block.type !== "tool_result") return true
  return false
}

/**
 * True when a turn starts at index `i`: the message is human and the one before it (if any) is not. Reads only
 * messages `i - 1` and `i`, so a caller can walk back from the end.
 * @category turns
 */
export const isTurnStart = (messages: ReadonlyArray<Message>, i: number): boolean =>
  isHumanMessage(messages[i]!) && (i === 0 || !isHumanMessage(messages[i - 1]!))
