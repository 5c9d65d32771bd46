/**
 * Concept: where the prompt cache's breakpoints go.
 *
 * Where the prompt cache's `cache_control` breakpoints go. Pure: messages in, positions and copies
 * out; the input is never changed, so a conversation's state stays free of breakpoints and only the request carries
 * them.
 *
 * The API reads a cached prefix only at a breakpoint, looking back about 20 blocks from it, and only when the prefix
 * is at least the model's minimum cacheable length. A request may carry at most 4 breakpoints. The library places:
 * 1. the end of the system prompt and tools (what never changes);
 * 2. the eviction frontier: the last block before the oldest tool result an eviction may still offload, so the prefix
 *    before it survives every eviction;
 * 3. the previous frontier, for the one request after the frontier moved, so that request still reads the prefix the
 *    last one wrote;
 * 4. the newest message, so the next request reads everything this one sent.
 *
 * The caller's own marks on tools and system blocks stay in the request and take their places first: the library
 * places its own in what is left, by priority the newest message, the end of system and tools (none when a caller's
 * mark already ends them), the frontier, then the previous frontier. Its breakpoints follow every caller mark, so their
 * lifetime is never longer than one of those; marks that no request could carry are a `CacheBreakpointError`.
 *
 * @since 0.1.0
 */
import { cacheControlOf, type CacheTtl } from "./internal/cacheTtl.ts"
import type { Message } from "./Message.ts"
import { estimateMessageTokens } from "./Tokens.ts"
import { estimateContentTokensUncached, MESSAGE_OVERHEAD_TOKENS } from "./internal/estimate.ts"
import { blocksOf } from "./internal/blocks.ts"
import {
  acceptsBreakpoint,
  type BlockPosition,
  lastBreakpoint,
  markedMessage,
  MAX_BREAKPOINTS
} from "./internal/breakpoints.ts"

/** A block of a message list: `messages[message].content[block]` (a string content is block 0). @category models */
export type { BlockPosition } from "./internal/breakpoints.ts"

/**
 * The error `Request.requestOf` (so `Conversation.prepare`, as a defect) throws when the caller's own marks on tools
 * and system blocks make every request invalid; `path` names the mark. @category errors
 */
export type { CacheBreakpointError } from "./internal/breakpoints.ts"

/** The API's limit on `cache_control` breakpoints in one request (system, tools and messages together). @category constants */
export { MAX_BREAKPOINTS } from "./internal/breakpoints.ts"

/**
 * The smallest prefix a model caches, in tokens: 1,024 for Sonnet-class models, 4,096 for Opus- and
 * Haiku-class ones. An unknown (or absent) model gets 4,096, the largest minimum, so no breakpoint ever sits below
 * the minimum of the model really used.
 * @category constants
 */
export const minCacheableTokens = (model?: string | undefined): number =>
  model !== undefined && /sonnet/i.test(model) ? 1024 : 4096

/** Where a request's breakpoints go: at the end of system and tools, and on these message blocks (in order). @category models */
export interface BreakpointPlan {
  /**
   * Whether the end of the system prompt and tools gets a breakpoint (only when the request has them and they reach
   * `minCacheableTokens`).
   */
  readonly system: boolean
  /** The message blocks that get a breakpoint, in message order. */
  readonly blocks: ReadonlyArray<BlockPosition>
}

/**
 * The estimated tokens of the prefix that ends with the block at `position`, system and tools included. A position on
 * a message's last block reads the message's cached estimate (its content's and the framing's); an earlier one
 * estimates its blocks up to it (no cache entry for the slice, which is never seen again).
 */
const prefixTokens = (
  messages: ReadonlyArray<Message>,
  position: BlockPosition,
  systemTokens: number,
  before: (message: number) => number,
  tokens: ((message: number) => number) | undefined
): number => {
  const message = messages[position.message]!
  const content = message.content as Message["content"] | undefined
  const head = content === undefined
    ? 0
    : typeof content === "string" || position.block + 1 >= content.length
    ? (tokens === undefined ? estimateMessageTokens(message) : tokens(position.message)) - MESSAGE_OVERHEAD_TOKENS
    : estimateContentTokensUncached(content.slice(0, position.block + 1))
  return systemTokens + before(position.message) + head
}

/** Options of `planBreakpoints`. Every option may be `undefined`, which means absent. @category models */
export interface BreakpointOptions {
  /** Estimated tokens of system prompt and tools; with `hasSystem`, a breakpoint ends them. Default 0. */
  readonly systemTokens?: number | undefined
  /** The request has a system prompt or tools to end with a breakpoint. Default false. */
  readonly hasSystem?: boolean | undefined
  /**
   * Breakpoints the request carries already (the caller's own marks on tools and system blocks): the plan places at
   * most `MAX_BREAKPOINTS` minus these. Default 0.
   */
  readonly reserved?: number | undefined
  /** The eviction frontier's breakpoint (from `breakpointBefore` on the oldest result that may be offloaded). */
  readonly frontier?: BlockPosition | undefined
  /** The frontier of the previous request, when it moved since. */
  readonly previousFrontier?: BlockPosition | undefined
  /** The model's minimum cacheable length; default `minCacheableTokens()` (4,096). */
  readonly minTokens?: number | undefined
  /**
   * The estimated tokens of `messages[0..m)` for a message index `m`, when the caller keeps them (it must equal the
   * sum of `estimateMessageTokens`); absent, they are summed here, in one pass over the messages.
   */
  readonly messageTokensBefore?: ((message: number) => number) | undefined
  /**
   * The estimated tokens of the message at an index, when the caller keeps them (it must equal
   * `estimateMessageTokens`); absent, they are read from that function's cache.
   */
  readonly messageTokens?: ((message: number) => number) | undefined
}

const samePosition = (a: BlockPosition, b: BlockPosition): boolean => a.message === b.message && a.block === b.block

/**
 * The breakpoints of a request: system and tools, the previous frontier, the frontier and the newest block, each only
 * when it accepts a breakpoint, lies inside the list, and its prefix is at least `minTokens` estimated tokens (so
 * never below the model's minimum). Positions are distinct and in list order; never more than `MAX_BREAKPOINTS` in
 * all, the system one and `reserved` included: when they do not all fit, by priority the newest block, system and
 * tools, the frontier, then the previous frontier.
 * @category placement
 */
export const planBreakpoints = (messages: ReadonlyArray<Message>, options: BreakpointOptions = {}): BreakpointPlan => {
  const systemTokens = options.systemTokens ?? 0
  const minTokens = options.minTokens ?? minCacheableTokens()
  let before = options.messageTokensBefore
  if (before === undefined) {
    const sums: Array<number> = [0]
    for (let i = 0; i < messages.length; i++) sums.push(sums[i]! + estimateMessageTokens(messages[i]!))
    before = (message) => sums[message]!
  }
  const tokensBefore = before
  const valid = (p: BlockPosition | undefined): p is BlockPosition => {
    if (p === undefined || p.message < 0 || p.message >= messages.length) return false
    const block = blocksOf(messages[p.message]!)[p.block]
    return block !== undefined && acceptsBreakpoint(block) &&
      prefixTokens(messages, p, systemTokens, tokensBefore, options.messageTokens) >= minTokens
  }
  let room = MAX_BREAKPOINTS - (options.reserved ?? 0)
  const chosen: Array<BlockPosition> = []
  const take = (p: BlockPosition | undefined): void => {
    if (room > 0 && valid(p) && !chosen.some((c) => samePosition(c, p))) {
      chosen.push(p)
      room--
    }
  }
  // by priority: the newest block (the next request's read), system and tools, the frontier, the previous frontier
  take(lastBreakpoint(messages))
  const system = room > 0 && options.hasSystem === true && systemTokens >= minTokens
  if (system) room--
  take(options.frontier)
  take(options.previousFrontier)
  chosen.sort((a, b) => a.message - b.message || a.block - b.block)
  return { system, blocks: chosen }
}

/**
 * The messages with `cache_control` of `ttl` (default `"5m"`: `{ type: "ephemeral" }`) on exactly the planned blocks:
 * any other `cache_control` is removed,
 * so the request carries the plan's breakpoints and no others. Only touched messages and blocks are copied (a string
 * content becomes one text block); the input is never changed.
 * @category placement
 */
export const applyBreakpoints = <M extends Message>(
  messages: ReadonlyArray<M>,
  blocks: ReadonlyArray<BlockPosition>,
  ttl?: CacheTtl | undefined
): Array<M> => {
  const marker = cacheControlOf(ttl)
  const marks = new Map<number, Array<number>>()
  for (const p of blocks) {
    const list = marks.get(p.message)
    if (list === undefined) marks.set(p.message, [p.block])
    else if (!list.includes(p.block)) list.push(p.block)
  }
  return messages.map((message, m) => markedMessage(message, marks.get(m), marker))
}
