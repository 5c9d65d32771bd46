/**
 * A conversation's request with the library's `cache_control` breakpoints (`Cache`), built from the state and put on
 * copies: the state never carries a breakpoint. Re-exported by `Conversation`.
 *
 * @internal
 */
import type Anthropic from "@anthropic-ai/sdk"
import {
  applyBreakpoints,
  type BlockPosition,
  breakpointBefore,
  EPHEMERAL,
  minCacheableTokens,
  planBreakpoints
} from "../../Cache.ts"
import type { ConversationState, MessageParam, Request } from "../../Conversation.ts"
import { evictionFrontier } from "../../Evict.ts"
import { carriedFrontier, carriedRequestParts } from "./carried.ts"
import type { Message } from "../../Message.ts"
import { CHARS_PER_TOKEN, estimateContentTokens, jsonSize } from "../../Tokens.ts"
import type { ToolClassifier } from "../../Tools.ts"

/** How `requestOf` places breakpoints. Every option may be `undefined`, which means its default. @category models */
export interface RequestOptions {
  readonly tools?: ReadonlyArray<Anthropic.ToolUnion> | undefined
  /** The model; it sets the minimum cacheable length (`Cache.minCacheableTokens`). */
  readonly model?: string | undefined
  /** The minimum cacheable length, overriding the model's. */
  readonly minCacheTokens?: number | undefined
  readonly classifier?: ToolClassifier | undefined
  /**
   * The state before this step's offload: when the offload moved the eviction frontier, its frontier keeps a
   * breakpoint in this one request, so it still reads the prefix the previous request wrote.
   */
  readonly before?: ConversationState | undefined
  /** Place no breakpoints (a caller that places its own). */
  readonly breakpoints?: false | undefined
}

const systemBlocks = (
  system: string | Array<Anthropic.TextBlockParam>
): Array<Anthropic.TextBlockParam> => typeof system === "string" ? [{ type: "text", text: system }] : system

/**
 * The request for the current state: `{ system?, tools?, messages }` over the view's messages, with its
 * `cache_control` breakpoints (`Cache.planBreakpoints`): the end of the system prompt and tools, the eviction
 * frontier, the frontier of `options.before` when this step's offload moved it, and the newest message; at most 4,
 * none below the model's minimum cacheable length, none on thinking or empty blocks. Deterministic in its inputs, so a
 * resumed conversation sends the same bytes. The state is never changed: messages that carry a breakpoint are copies.
 * @category transitions
 */
export const requestOf = (
  state: ConversationState,
  system?: string | Array<Anthropic.TextBlockParam> | undefined,
  options: RequestOptions = {}
): Request => {
  const tools = options.tools === undefined || options.tools.length === 0 ? undefined : [...options.tools]
  const view = state.view
  const frontier = frontierOf(view, options.classifier)
  const withMessages = (messages: Array<MessageParam>): Request => ({
    ...(system === undefined ? {} : { system }),
    ...(tools === undefined ? {} : { tools }),
    messages
  })
  if (options.breakpoints === false) return withMessages([...view])
  const before = options.before !== undefined && options.before.epoch === state.epoch
    ? frontierOf(options.before.view, options.classifier)
    : undefined
  const previous = before !== undefined &&
      (frontier === undefined || before.message !== frontier.message || before.block !== frontier.block)
    ? before
    : undefined
  const systemTokens = (system === undefined ? 0 : estimateContentTokens(systemBlocks(system) as never)) +
    (tools === undefined ? 0 : Math.ceil(jsonSize(tools) / CHARS_PER_TOKEN))
  const carried = carriedRequestParts(asMessages(view))
  const plan = planBreakpoints(asMessages(view), {
    systemTokens,
    hasSystem: system !== undefined || tools !== undefined,
    frontier,
    previousFrontier: previous,
    minTokens: options.minCacheTokens ?? minCacheableTokens(options.model),
    messageTokensBefore: carried?.tokensBefore
  })
  const messages = carried === undefined
    ? applyBreakpoints(asMessages(view), plan.blocks) as unknown as Array<MessageParam>
    : breakpointsAt(view, plan.blocks, carried.cacheControlled)
  if (!plan.system) return withMessages(messages)
  if (system !== undefined) {
    const blocks = systemBlocks(system)
    const last = blocks.length - 1
    return {
      system: blocks.map((b, i) => i === last ? { ...b, cache_control: EPHEMERAL } : b),
      ...(tools === undefined ? {} : { tools }),
      messages
    }
  }
  const all = tools ?? []
  const marked = all.map((t, i) => i === all.length - 1 ? { ...t, cache_control: EPHEMERAL } : t)
  return { tools: marked as Array<Anthropic.ToolUnion>, messages }
}

/**
 * `applyBreakpoints(view, blocks)` when only the messages at `cacheControlled` carry a `cache_control`: the view is
 * copied and only the planned and the carrying messages are rewritten (each exactly as `applyBreakpoints` would).
 */
const breakpointsAt = (
  view: ReadonlyArray<MessageParam>,
  blocks: ReadonlyArray<BlockPosition>,
  cacheControlled: ReadonlyArray<number>
): Array<MessageParam> => {
  const messages = view.slice()
  const touched = new Set<number>()
  for (const p of blocks) touched.add(p.message)
  for (const m of cacheControlled) if (m < view.length) touched.add(m)
  for (const m of touched) {
    const marks = blocks.filter((p) => p.message === m).map((p) => ({ message: 0, block: p.block }))
    messages[m] = applyBreakpoints(asMessages([view[m]!]), marks)[0] as unknown as MessageParam
  }
  return messages
}

/** The frontier breakpoint of a view: the last block before the oldest result that may still be offloaded. */
const frontierOf = (
  view: ReadonlyArray<MessageParam>,
  classifier: ToolClassifier | undefined
): BlockPosition | undefined => {
  const carried = carriedFrontier(asMessages(view), classifier)
  const result = carried.known ? carried.at : evictionFrontier(asMessages(view), { classifier })
  return result === undefined ? undefined : breakpointBefore(asMessages(view), result)
}

const asMessages = (view: ReadonlyArray<MessageParam>): ReadonlyArray<Message> => view as unknown as Array<Message>
