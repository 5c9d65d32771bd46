/**
 * Concept: the request a conversation state sends.
 *
 * The request a conversation state sends: `requestOf` builds the Messages API body for a `ConversationState` (the
 * view's messages with the library's `cache_control` breakpoints, the system prompt and tools), binds its thinking
 * config to the rewrites the view went through, puts it in its thread form, and the
 * `diagnostics` it carries. Pure: the state is never changed, and the same state and options give the
 * same bytes, so a resumed conversation sends the live one's requests.
 *
 * @since 0.2.0
 */
import type Anthropic from "@anthropic-ai/sdk"
import { cacheControlOf } from "./internal/cacheTtl.ts"
import { applyBreakpoints, type BlockPosition, minCacheableTokens, planBreakpoints } from "./Cache.ts"
import { breakpointBefore, callerMarks, callerMarksError, endsMarked, markedMessage } from "./internal/breakpoints.ts"
import type { ConversationState, MessageParam } from "./ConversationState.ts"
import { evictionFrontier } from "./internal/eviction.ts"
import { CarriedIndex } from "./internal/conversation/carried.ts"
import { systemAndToolsTokens } from "./internal/estimate.ts"
import { boundTokensBefore, carriesBinding, DROP_BLOCK, THINKING_BINDING_BETA } from "./internal/thinkingBinding.ts"
import { strippedMessage, withoutThinkingAt } from "./internal/conversation/appendOnly.ts"
import type { ThreadAnchor, ThreadParam } from "./internal/conversation/thread.ts"

/** A request's `thread` parameter, and the reply a thread continues from. */
export type { ThreadAnchor, ThreadParam } from "./internal/conversation/thread.ts"
import type { ThinkingConfig } from "./internal/conversation/thinking.ts"
import { asMessages } from "./internal/conversation/wire.ts"
import type { Message } from "./Message.ts"
import type { ToolClassifier } from "./Tools.ts"

/**
 * A request body ready for `client.messages.create` (add `model`, `max_tokens`). It carries the library's
 * `cache_control` breakpoints (see `Cache`); the state it was built from carries none. With a `thinking` option it
 * carries that config; once a rewrite invalidated thinking blocks of the view the config also asks for
 * `block_binding: { prefix_mismatch_behavior: "drop_block" }` (unless it sets its own `block_binding`) and `betas`
 * names the binding beta: send such a request with `client.beta.messages.create`. Without a config that can carry the
 * binding (none, `disabled`, `between_tools`), those blocks are left out of `messages` instead. @category models
 */
export interface Request {
  /**
   * The system prompt; its last block carries the breakpoint that ends tools and system when they reach the minimum
   * cacheable length (unless a caller's mark is there already; the caller's marks are kept). Absent when none, and on
   * a thread's `continue`.
   */
  readonly system?: string | Array<Anthropic.TextBlockParam>
  /**
   * The tool definitions, the caller's marks kept; without a system prompt the last one carries that breakpoint.
   * Absent when none, and on a thread's `continue`.
   */
  readonly tools?: Array<Anthropic.ToolUnion>
  /** The view's messages (after `thread`'s anchor, with one), the library's breakpoints placed on copies. */
  readonly messages: Array<MessageParam>
  /**
   * With `ConversationOptions.threads`: the server-held thread (the beta
   * `message-threads-2026-08-12`). `continue`: `messages` are only those after the reply it names, and the request
   * has no `system` and no `tools`; `create`: the whole view, `system` and `tools` included.
   */
  readonly thread?: ThreadParam
  /**
   * With `ConversationOptions.diagnostics`: the id of the reply the latest request got, so the API reports why this
   * request missed the cache; `null` (opted in, nothing to compare) before the first SDK reply.
   */
  readonly diagnostics?: { readonly previous_message_id: string | null }
  /** The thinking config, with the drop-block binding once a rewrite invalidated thinking blocks. */
  readonly thinking?: ThinkingConfig
  /** The betas the request needs (the thinking binding beta); send it with `client.beta.messages.create` then. */
  readonly betas?: Array<string>
}

/** How `requestOf` places breakpoints. Every option may be `undefined`, which means its default. @category models */
export interface RequestOptions {
  /** The tool definitions to send; default none. */
  readonly tools?: ReadonlyArray<Anthropic.ToolUnion> | undefined
  /** The model; it sets the minimum cacheable length (`Cache.minCacheableTokens`). */
  readonly model?: string | undefined
  /** The minimum cacheable length, overriding the model's. */
  readonly minCacheTokens?: number | undefined
  /** Classifies tool calls, to find the eviction frontier that gets a breakpoint; default `defaultToolClassifier`. */
  readonly classifier?: ToolClassifier | undefined
  /**
   * The state before this step's offload: when the offload moved the eviction frontier, its frontier keeps a
   * breakpoint in this one request, so it still reads the prefix the previous request wrote.
   */
  readonly before?: ConversationState | undefined
  /** Place no breakpoints and check none (a caller that places its own, on messages too). */
  readonly breakpoints?: false | undefined
  /**
   * The cache lifetime every breakpoint of the library asks for: `"5m"` (default, `{ type: "ephemeral" }`) or `"1h"`.
   * The caller's own marks on tools and system blocks keep theirs.
   */
  readonly ttl?: "5m" | "1h" | undefined
  /**
   * The thinking config every request carries. Once a rewrite invalidated thinking blocks of the view,
   * it gets `block_binding: { prefix_mismatch_behavior: "drop_block" }` and the request the binding beta in `betas`;
   * a config with its own `block_binding` opts out (`{ prefix_mismatch_behavior: "error" }` keeps the API's 400).
   * Without a config that can carry the binding (absent, `disabled`, `between_tools`) the request leaves those blocks
   * out of its messages.
   */
  readonly thinking?: ThinkingConfig | undefined
  /**
   * The request as it goes on the state's server-held thread: while the view extends the reply
   * `state.thread` anchors, a `continue` of only the messages after it (no `system`, no `tools`), built without
   * copying the view; otherwise a `create` with the whole request. What `Conversation` sends with `threads` on.
   */
  readonly thread?: boolean | undefined
}

const systemBlocks = (
  system: string | Array<Anthropic.TextBlockParam>
): Array<Anthropic.TextBlockParam> => typeof system === "string" ? [{ type: "text", text: system }] : system

/**
 * The request for the current state: `{ system?, tools?, messages }` over the view's messages, with its
 * `cache_control` breakpoints (`Cache.planBreakpoints`): the end of the system prompt and tools, the eviction
 * frontier, the frontier of `options.before` when this step's offload moved it, and the newest message; none below
 * the model's minimum cacheable length, none on thinking or empty blocks. The caller's own marks on `tools` and
 * `system` blocks are kept (on messages, any other `cache_control` is removed) and count: the request carries at most
 * 4 breakpoints in all, and the library's (of `options.ttl`) all come after the caller's. Throws a
 * `Cache.CacheBreakpointError` naming the mark when the caller's marks make every request invalid: more than 4, a
 * `"1h"` one after a `"5m"` one, or a `"5m"` one while `options.ttl` is `"1h"` and leaves the library room (a
 * `Conversation` refuses such marks when it is built, so its `prepare` never meets them).
 * Deterministic in its inputs, so a resumed conversation sends the same bytes. The state is never changed: messages
 * that carry a breakpoint are copies. With `options.thread`, the request as it goes on the state's thread
 * (`RequestOptions.thread`): a `continue` holds exactly the messages of the whole request after the anchored reply.
 * @category transitions
 */
export const requestOf = (
  state: ConversationState,
  system?: string | Array<Anthropic.TextBlockParam> | undefined,
  options: RequestOptions = {}
): Request => {
  if (options.thread !== true) return buildRequest(state, system, options, undefined)
  const anchor = state.thread
  if (anchor === undefined || anchor.held > state.view.length) {
    return { ...buildRequest(state, system, options, undefined), thread: { type: "create" } }
  }
  return buildRequest(state, system, options, anchor)
}

/**
 * `requestOf` off threads (`anchor` undefined), or the `continue` of `anchor`'s thread: only the messages after the
 * anchored reply, each as the whole request has it (its breakpoints included), the view never copied. Its messages
 * are sendable (`thinkingLeftOut`).
 */
const buildRequest = (
  state: ConversationState,
  system: string | Array<Anthropic.TextBlockParam> | undefined,
  options: RequestOptions,
  anchor: ThreadAnchor | undefined
): Request => {
  const from = anchor?.held ?? 0
  const tools = options.tools === undefined || options.tools.length === 0 ? undefined : [...options.tools]
  const view = asMessages(state.view)
  const thinking = thinkingOf(state, options.thinking)
  const leftOut = thinkingLeftOut(state, options, from)
  // the request's messages are its own fresh array (the view is copied): changed in place
  const sendable = (messages: Array<MessageParam>): Array<MessageParam> =>
    leftOut === undefined
      ? messages
      : withoutThinkingAt(asMessages(messages), leftOut, true) as unknown as Array<MessageParam>
  const withMessages = (messages: Array<MessageParam>): Request => ({
    ...(system === undefined ? {} : { system }),
    ...(tools === undefined ? {} : { tools }),
    messages,
    ...thinking
  })
  const continued = (messages: Array<MessageParam>): Request => ({
    messages,
    ...thinking,
    thread: { type: "continue", previous_message_id: anchor!.previousMessageId }
  })
  if (options.breakpoints === false) {
    return anchor === undefined ? withMessages(sendable([...state.view])) : continued(sendable(state.view.slice(from)))
  }
  const frontier = frontierBreakpoint(state, options.classifier)
  // the state itself as `before` (a step that offloaded nothing) has the same frontier
  const before = options.before !== undefined && options.before !== state && options.before.epoch === state.epoch
    ? frontierBreakpoint(options.before, options.classifier)
    : undefined
  const previous = before !== undefined &&
      (frontier === undefined || before.message !== frontier.message || before.block !== frontier.block)
    ? before
    : undefined
  const marks = callerMarks(tools, system)
  const invalid = callerMarksError(marks, options.ttl)
  if (invalid !== undefined) throw invalid
  const systemTokens = systemAndToolsTokens(system as never, tools)
  const carried = CarriedIndex.requestParts(view, state.carried)
  const plan = planBreakpoints(view, {
    systemTokens,
    hasSystem: (system !== undefined || tools !== undefined) && !endsMarked(tools, system),
    reserved: marks.length,
    frontier,
    previousFrontier: previous,
    minTokens: options.minCacheTokens ?? minCacheableTokens(options.model),
    messageTokensBefore: boundTokensBefore(view, state.unboundThinking ?? [], carried?.tokensBefore),
    messageTokens: carried?.tokensOf
  })
  const placed = (): Array<MessageParam> => {
    if (carried === undefined) {
      return sendable((applyBreakpoints(view, plan.blocks, options.ttl) as unknown as Array<MessageParam>).slice(from))
    }
    // thinking left out of the whole view: from the copy without it that the carry keeps up to date, when it has one
    const stripped = leftOut === undefined || from !== 0
      ? undefined
      : CarriedIndex.withoutThinking(view, state.carried, leftOut)
    const marked = stripped === undefined
      ? undefined
      : strippedBreakpointsAt(view, stripped, leftOut!, plan.blocks, carried.cacheControlled, options.ttl)
    return marked ?? sendable(breakpointsAt(state.view, plan.blocks, carried.cacheControlled, options.ttl, from))
  }
  const messages = placed()
  if (anchor !== undefined) return continued(messages)
  const marker = cacheControlOf(options.ttl)
  if (!plan.system) return withMessages(messages)
  if (system !== undefined) {
    const blocks = systemBlocks(system)
    const last = blocks.length - 1
    return {
      system: blocks.map((b, i) => i === last ? { ...b, cache_control: marker } : b),
      ...(tools === undefined ? {} : { tools }),
      messages,
      ...thinking
    }
  }
  const all = tools ?? []
  const marked = all.map((t, i) => i === all.length - 1 ? { ...t, cache_control: marker } : t)
  return { tools: marked as Array<Anthropic.ToolUnion>, messages, ...thinking }
}

/**
 * The request's `thinking` (and `betas`): the caller's config, with `block_binding: drop_block` and the binding beta
 * once the view holds thinking a rewrite invalidated, unless the config sets its own binding or cannot carry one.
 */
const thinkingOf = (
  state: ConversationState,
  config: ThinkingConfig | undefined
): Pick<Request, "thinking" | "betas"> => {
  if (config === undefined) return {}
  if ((state.unboundThinking ?? []).length === 0 || config.block_binding != null || !carriesBinding(config)) {
    return { thinking: config }
  }
  return { thinking: { ...config, block_binding: DROP_BLOCK }, betas: [THINKING_BINDING_BETA] }
}

/**
 * The positions, in a request's messages from the view's message `from` on, of the thinking a rewrite invalidated
 * (`state.unboundThinking`) that the request leaves out when its config cannot ask the API to drop it (no config, or
 * one without `block_binding`: `disabled`, `between_tools`): the API would refuse it (API-RULES 29, 43), and leaving it
 * out is what the docs allow ("keeps no stale thinking"). `undefined` when there is none to leave out: a config that
 * sets its own `block_binding` gets what it asked for. A `continue` holds only the messages after the anchor (a
 * rewrite restarts the thread, so the held ones have nothing to leave out).
 */
const thinkingLeftOut = (
  state: ConversationState,
  options: RequestOptions,
  from: number
): ReadonlyArray<BlockPosition> | undefined => {
  const unbound = state.unboundThinking ?? []
  const config = options.thinking
  if (unbound.length === 0 || (config !== undefined && (config.block_binding != null || carriesBinding(config)))) {
    return undefined
  }
  return from === 0
    ? unbound
    : unbound.filter((p) => p.message >= from).map((p) => ({ message: p.message - from, block: p.block }))
}

/**
 * `withoutThinkingAt(breakpointsAt(view, blocks, cacheControlled, ttl, 0), positions)` from `stripped`, a fresh
 * `withoutThinkingAt(view, positions)`: only the planned and the carrying messages are rewritten, each marked as
 * `breakpointsAt` marks it, then its thinking left out as `withoutThinkingAt` leaves it out. `undefined` (build it the
 * other way) should a marked message be left empty (the list would close up).
 */
const strippedBreakpointsAt = (
  view: ReadonlyArray<Message>,
  stripped: Array<Message>,
  positions: ReadonlyArray<BlockPosition>,
  blocks: ReadonlyArray<BlockPosition>,
  cacheControlled: ReadonlyArray<number>,
  ttl: "5m" | "1h" | undefined
): Array<MessageParam> | undefined => {
  const marker = cacheControlOf(ttl)
  for (const m of touchedBy(blocks, cacheControlled, 0, view.length)) {
    const marks: Array<number> = []
    for (const p of blocks) if (p.message === m) marks.push(p.block)
    const message = strippedMessage(positions, m, markedMessage(view[m]!, marks, marker))
    if (message === null) return undefined
    stripped[m] = message
  }
  return stripped as unknown as Array<MessageParam>
}

/** The messages a request rewrites from `from` on: the planned ones, then the ones that carry a `cache_control`. */
const touchedBy = (
  blocks: ReadonlyArray<BlockPosition>,
  cacheControlled: ReadonlyArray<number>,
  from: number,
  length: number
): Array<number> => {
  const touched: Array<number> = []
  for (const p of blocks) if (p.message >= from && !touched.includes(p.message)) touched.push(p.message)
  for (const m of cacheControlled) if (m >= from && m < length && !touched.includes(m)) touched.push(m)
  return touched
}

/**
 * `applyBreakpoints(view, blocks).slice(from)` when only the messages at `cacheControlled` carry a `cache_control`:
 * the view from `from` on is copied and only the planned and the carrying messages there are rewritten (each exactly
 * as `applyBreakpoints` would, `markedMessage`).
 */
const breakpointsAt = (
  view: ReadonlyArray<MessageParam>,
  blocks: ReadonlyArray<BlockPosition>,
  cacheControlled: ReadonlyArray<number>,
  ttl: "5m" | "1h" | undefined,
  from: number
): Array<MessageParam> => {
  const messages = from === 0 ? view.slice() : view.slice(from)
  const marker = cacheControlOf(ttl)
  for (const m of touchedBy(blocks, cacheControlled, from, view.length)) {
    const marks: Array<number> = []
    for (const p of blocks) if (p.message === m) marks.push(p.block)
    messages[m - from] = markedMessage(view[m]!, marks, marker)
  }
  return messages
}

/** The frontier breakpoint of a state's view: the last block before the oldest result that may still be offloaded. */
const frontierBreakpoint = (
  state: ConversationState,
  classifier: ToolClassifier | undefined
): BlockPosition | undefined => {
  const view = asMessages(state.view)
  const carried = CarriedIndex.frontier(view, state.carried, classifier)
  const result = carried.known ? carried.at : evictionFrontier(view, { classifier })
  return result === undefined ? undefined : breakpointBefore(view, result)
}
