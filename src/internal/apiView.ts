/**
 * Where the API view starts: the message and block of the last compaction with content, and the system messages still
 * live from there on. `ApiView.apiView` and the validator, the cut and the estimates read these.
 *
 * @internal
 */
import type { Message } from "../Message.ts"
import { isCompactionWithContent, systemFields } from "./blocks.ts"

const lastBlockCache = new WeakMap<Message, number>()

/**
 * The index of the last compaction block with content in one message, or -1. A system message never counts: a
 * compaction block there is misplaced and `Validate` reports it. Cached by identity.
 * @category api view
 */
export const compactionBlockIndex = (message: Message): number => {
  let index = lastBlockCache.get(message)
  if (index === undefined) {
    index = -1
    const content = message.content
    if (message.role !== "system" && typeof content !== "string") {
      for (let b = content.length - 1; b >= 0; b--) {
        if (isCompactionWithContent(content[b]!)) {
          index = b
          break
        }
      }
    }
    lastBlockCache.set(message, index)
  }
  return index
}

/**
 * True when the API view may start at this message (it holds a compaction block with content): the same answer as
 * `compactionBlockIndex(message) >= 0`, but a message without any compaction block is answered by a scan of its block
 * types, with no cache entry, so a walk over a long list stays cheap.
 * @category api view
 */
export const opensApiView = (message: Message): boolean => {
  const content = message.content
  if (typeof content === "string" || message.role === "system") return false
  for (let b = 0; b < content.length; b++) {
    if (content[b]!.type === "compaction") return compactionBlockIndex(message) >= 0
  }
  return false
}

/**
 * The index where the API view starts: the message holding the last compaction block with content, or 0 when there
 * is none. `messages.slice(apiViewStart(messages))` is what the API processes; everything before is dropped.
 * @category api view
 */
export const apiViewStart = (messages: ReadonlyArray<Message>): number => {
  for (let i = messages.length - 1; i > 0; i--) if (opensApiView(messages[i]!)) return i
  return 0
}

/**
 * The indices of the system messages the API still shows the model at the end of `messages`, ascending:
 * those in the API view (`apiViewStart` on) that are not cleared. A system message with `clear_at:
 * "next_user_message"` is cleared once any later `role: "user"` message exists (tool results included): it stays in
 * the list and is sent unchanged, but it costs no tokens and is dead, so a compaction must never re-emit it as live
 * (in a summary, or moved after one). A content-less settings message (`output_config`) counts as any other.
 * O(messages).
 * @category api view
 */
export const liveSystemMessages = (messages: ReadonlyArray<Message>): ReadonlyArray<number> => {
  const live: Array<number> = []
  const start = apiViewStart(messages)
  let laterUser = false
  for (let i = messages.length - 1; i >= start; i--) {
    const message = messages[i]!
    if (message.role === "user") laterUser = true
    else if (message.role === "system" && !(laterUser && systemFields(message).clear_at === "next_user_message")) {
      live.push(i)
    }
  }
  return live.reverse()
}
