/**
 * Concept: token estimation.
 *
 * Token estimation, used to place cuts, and by the compaction trigger: for the messages appended after the reply whose
 * provider-reported usage it reads, and for the whole request when the latest reply was recorded without one.
 *
 * About 4 characters per token over text, thinking, tool calls (name + input JSON size), tool results and unknown
 * blocks, plus a fixed per-message overhead. Images cost what the provider charges for their pixel size (read from the
 * image header); documents cost a per-page estimate. `estimateMessageTokens` caches each message's estimate by
 * identity; `estimateTokens` carries a conversation's running sum forward from its last call on the same conversation
 * (a reference comparison per message, an estimate per new or replaced message; see `estimateTokens`).
 *
 * @since 0.1.0
 */
import * as Estimate from "./internal/estimate.ts"
import { CHARS_PER_TOKEN } from "./internal/estimate.ts"
import { makeTally } from "./internal/tally.ts"
import type { ContentBlock, Message } from "./Message.ts"
import { opensApiView } from "./internal/apiView.ts"

const cache = new WeakMap<Message, number>()

const contentCache = new WeakMap<ReadonlyArray<ContentBlock>, number>()

/**
 * The estimated tokens of a message's (or a tool result's) content, without the per-message overhead: what that
 * content adds to any message that holds it. A block list is estimated once and cached by identity (a string costs
 * O(1) anyway), so eviction can price the same tool result on every turn for a lookup.
 * @category estimation
 */
export const estimateContentTokens = (content: string | ReadonlyArray<ContentBlock>): number => {
  if (typeof content === "string") return Math.ceil(content.length / CHARS_PER_TOKEN)
  let tokens = contentCache.get(content)
  if (tokens === undefined) {
    tokens = Estimate.blocksTokens(content)
    contentCache.set(content, tokens)
  }
  return tokens
}

/**
 * The estimated prompt tokens of one message. Messages are immutable, so the result is cached by identity: a second
 * call on the same object is a lookup. Never throws on a decoded message.
 * @category estimation
 */
export const estimateMessageTokens = (message: Message): number => {
  let tokens = cache.get(message)
  if (tokens === undefined) {
    tokens = Estimate.estimateMessageTokensUncached(message)
    cache.set(message, tokens)
  }
  return tokens
}

const tally = makeTally({
  fresh: Estimate.estimateMessageTokensUncached,
  cached: (message) => cache.get(message) ?? Estimate.estimateMessageTokensUncached(message),
  opensView: opensApiView
})

/**
 * The estimated prompt tokens of a conversation as the API processes it: exactly the sum of `estimateMessageTokens`
 * over its API view (what `ApiView.apiView` returns; the messages before the last compaction block with content are
 * dropped by the API and cost nothing).
 *
 * Cost: the estimate is carried forward from the last list estimated that starts with the same message object. The
 * list is compared with it by reference, one `===` per shared message (about a nanosecond each, no estimate, no
 * cache lookup), and only what differs is estimated: messages appended since (each estimated once, O(new)), or, from
 * the first position that differs, every message that is not the same object at the same position as before (a
 * replacement in the middle, as eviction makes). The same list again, or a prefix of it, is the comparison alone. A
 * list whose first message is new is estimated in full, in one pass with no per-message cache entry (nor does a
 * replacement add one: it reads the cache, and a message it misses is usually a request's copy, never seen again).
 * The result is always the full recomputation's; the list may even have been mutated in place since.
 * @category estimation
 */
export const estimateTokens = (messages: ReadonlyArray<Message>): number => tally(messages)

/**
 * The ratio of the provider's reported input tokens for a prompt to our estimate of the same prompt. Multiply an
 * estimate (or divide a token budget) by it to correct for a model's tokenizer. Pass the messages that made up the
 * request, and `input_tokens + cache_read_input_tokens + cache_creation_input_tokens` from its usage. The estimate is
 * taken on the API view (see `estimateTokens`), the part the provider counted. Returns 1 when the estimate is zero.
 * @category estimation
 */
export const calibrate = (messages: ReadonlyArray<Message>, reportedInputTokens: number): number => {
  const estimate = estimateTokens(messages)
  return estimate === 0 ? 1 : reportedInputTokens / estimate
}
