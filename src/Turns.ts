/**
 * User turns. A turn starts at a user message that carries human content (any block other than a tool_result) and
 * that follows an assistant message, a user message holding only tool results, or nothing. Consecutive human user
 * messages are one turn; a user message holding only tool results never starts one.
 *
 * @since 0.1.0
 */
import type { Message } from "./Message.ts"

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
 * The indices at which a turn starts, ascending.
 * @category turns
 */
export const turnStarts = (messages: ReadonlyArray<Message>): ReadonlyArray<number> => {
  const starts: Array<number> = []
  let previousHuman = false
  for (let i = 0; i < messages.length; i++) {
    const human = isHumanMessage(messages[i]!)
    if (human && !previousHuman) starts.push(i)
    previousHuman = human
  }
  return starts
}

/**
 * How many user turns the slice contains. `countTurns(a ++ b)` is `countTurns(a) + countTurns(b)`, or one less when
 * `a` ends and `b` begins with a human user message (the join falls inside a turn).
 * @category turns
 */
export const countTurns = (messages: ReadonlyArray<Message>): number => turnStarts(messages).length
