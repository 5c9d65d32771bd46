/**
 * Concept: user turns, where they start and how many there are.
 *
 * User turns. A turn starts at a user message that carries human content (any block other than a tool_result) and
 * that follows an assistant message, a user message holding only tool results, or nothing. Consecutive human user
 * messages are one turn; a user message holding only tool results never starts one.
 *
 * @since 0.1.0
 */
import type { Message } from "./Message.ts"
import { apiViewStart } from "./internal/apiView.ts"
import { isHumanMessage, isTurnStart } from "./internal/turns.ts"

/**
 * True when the message is a user message with human content: a string, or at least one block that is not a
 * tool_result.
 * @category guards
 */
export { isHumanMessage } from "./internal/turns.ts"

/**
 * The indices at which a turn starts, ascending, in the API view only (what `ApiView.apiView` returns): turns before the
 * last compaction block with content were dropped by the API, and the block's summary stands for them.
 * @category turns
 */
export const turnStarts = (messages: ReadonlyArray<Message>): ReadonlyArray<number> => {
  const starts: Array<number> = []
  const start = apiViewStart(messages)
  for (let i = start; i < messages.length; i++) {
    if (i === start ? isHumanMessage(messages[i]!) : isTurnStart(messages, i)) starts.push(i)
  }
  return starts
}

/**
 * How many user turns the API view of the slice contains. On a slice without compaction blocks, `countTurns(a ++ b)` is `countTurns(a) + countTurns(b)`, or one less when
 * `a` ends and `b` begins with a human user message (the join falls inside a turn).
 * @category turns
 */
export const countTurns = (messages: ReadonlyArray<Message>): number => turnStarts(messages).length
