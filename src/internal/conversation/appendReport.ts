/**
 * What `append` mends in a caller's message, said out loud: tool results that answer no pending call (dropped, as the
 * API refuses them), and pending calls a message with other content leaves unanswered (answered as interrupted, as
 * the API needs every call answered). The service logs each at warning level; nothing is mended in silence.
 *
 * @internal
 */
import type { ConversationState, MessageParam } from "../../ConversationState.ts"

/** The mends `append` makes to `message` against `state`'s pending calls: ids as the caller knows them. */
export interface AppendMends {
  /** Results whose `tool_use_id` answers no pending call: dropped. */
  readonly droppedResults: ReadonlyArray<string>
  /** Pending calls the message leaves without a result, though it carries other content: answered as interrupted. */
  readonly interruptedCalls: ReadonlyArray<string>
}

/** The mends `appendMessage(state, message)` makes (a user message; a system message closes every pending call). */
export const appendMends = (state: ConversationState, message: MessageParam): AppendMends => {
  const waiting = new Set(state.pending.map((p) => p.originalId))
  if ((message.role as string) === "system") return { droppedResults: [], interruptedCalls: [...waiting] }
  const blocks = typeof message.content === "string"
    ? [{ type: "text" }]
    : (message.content as ReadonlyArray<{ readonly type: string; readonly tool_use_id?: string }>)
  const droppedResults: Array<string> = []
  let others = false
  for (const block of blocks) {
    if (block.type !== "tool_result") {
      others = true
      continue
    }
    if (block.tool_use_id !== undefined && waiting.delete(block.tool_use_id)) continue
    droppedResults.push(block.tool_use_id ?? "")
  }
  return { droppedResults, interruptedCalls: others ? [...waiting] : [] }
}
