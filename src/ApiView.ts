/**
 * Concept: the API view, what the Messages API processes of a list.
 *
 * What the Messages API processes of a list: the *API view*.
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
import { apiViewStart, compactionBlockIndex } from "./internal/apiView.ts"

/**
 * The messages the API processes (from the last compaction block with content on): the input array itself when the view is the whole list,
 * otherwise a copy of the view.
 * @category api view
 */
export const apiView = <M extends Message>(messages: ReadonlyArray<M>): ReadonlyArray<M> => {
  const start = apiViewStart(messages)
  return start === 0 ? messages : messages.slice(start)
}

/** The compaction block that opens the API view, and where it sits. @category models */
export interface ViewCompaction {
  /** Index of the message holding the block. */
  readonly messageIndex: number
  /** Index of the block in that message's content. */
  readonly blockIndex: number
  /** The compaction block itself (one with content: a failed, `null` one never opens the view). */
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
