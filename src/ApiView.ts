/**
 * What the Messages API processes of a list: the *API view* (API-RULES 12).
 *
 * The API drops everything before the last compaction block that carries content (`content: null` is a failed
 * compaction and a no-op). The view starts at the message holding that block; with no such block it is the whole
 * list. Estimates, turn counts, cuts and calibration are taken on the view, and nothing this library produces is
 * placed before its start (the API would throw it away).
 *
 * Every function here is O(messages + blocks) at worst: a message without a compaction block costs a scan of its block
 * types, and one holding such a block is answered from a cache by identity.
 *
 * @since 0.1.0
 */
import * as Option from "effect/Option"
import type { CompactionBlock, ContentBlock, Message } from "./Message.ts"
import { isCompactionWithContent, systemFields } from "./Message.ts"

const lastBlockCache = new WeakMap<Message, number>()

/**
 * The index of the last compaction block with content in one message, or -1. A system message never counts: a
 * compaction block there is misplaced (API-RULES 13) and `Validate` reports it. Cached by identity.
 * @category api view
 */
const compactionBlockIndex = (message: Message): number => {
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
const opensApiView = (message: Message): boolean => {
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
const apiViewStart = (messages: ReadonlyArray<Message>): number => {
  for (let i = messages.length - 1; i > 0; i--) if (opensApiView(messages[i]!)) return i
  return 0
}

/**
 * The messages the API processes (see `apiViewStart`): the input array itself when the view is the whole list,
 * otherwise a copy of the view.
 * @category api view
 */
export const apiView = <M extends Message>(messages: ReadonlyArray<M>): ReadonlyArray<M> => {
  const start = apiViewStart(messages)
  return start === 0 ? messages : messages.slice(start)
}

/** The compaction block that opens the API view, and where it sits. @category models */
export interface ViewCompaction {
  readonly messageIndex: number
  readonly blockIndex: number
  readonly block: CompactionBlock & { readonly content: string }
}

/**
 * The compaction block that opens the API view (the last one with content), or none when the list holds none. Its
 * `content` is the server's summary of everything before it: a compaction of our own that summarizes the view must
 * carry it on (as `previousSummary`), or what the server summarized is lost.
 * @category api view
 */
export const viewCompaction = (messages: ReadonlyArray<Message>): Option.Option<ViewCompaction> => {
  const messageIndex = apiViewStart(messages)
  const message = messages[messageIndex]
  if (message === undefined) return Option.none()
  const blockIndex = compactionBlockIndex(message)
  if (blockIndex < 0) return Option.none()
  const block = (message.content as ReadonlyArray<ContentBlock>)[blockIndex] as ViewCompaction["block"]
  return Option.some({ messageIndex, blockIndex, block })
}

/**
 * The server's summary that opens the API view (`viewCompaction`'s `content`), or none.
 * @category api view
 */
export const viewSummary = (messages: ReadonlyArray<Message>): Option.Option<string> =>
  Option.map(viewCompaction(messages), (c) => c.block.content)

/**
 * The indices of the system messages the API still shows the model at the end of `messages`, ascending (API-RULES 27):
 * those in the API view (`apiViewStart` on) that are not cleared. A system message with `clear_at:
 * "next_user_message"` is cleared once any later `role: "user"` message exists (tool results included): it stays in
 * the list and is sent unchanged, but it costs no tokens and is dead, so a compaction must never re-emit it as live
 * (in a summary, or moved after one). A content-less settings message (`output_config`, rule 26) counts as any other.
 * O(messages).
 * @category api view
 */
const liveSystemMessages = (messages: ReadonlyArray<Message>): ReadonlyArray<number> => {
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
