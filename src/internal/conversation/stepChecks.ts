/**
 * What a step's decisions read off a conversation state: the view's tokens as the API counts them, the compaction
 * trigger (on the reported usage plus the estimate of what the view gained after the reply that reported it, on the
 * library's estimate of the request when the latest reply reported none, or on an exact count of the next request),
 * and the stop reasons of the latest reply that steer `prepareStep`. Pure, over the fields of `ConversationState` it
 * reads.
 *
 * @internal
 */
import type { BlockPosition } from "../../Cache.ts"
import { isCompactionWithContent } from "../blocks.ts"
import { type CompactionPolicy, contextTokens, type ReportedUsage, shouldCompact } from "../../Policy.ts"
import { estimateMessageTokens, estimateTokens } from "../../Tokens.ts"
import { tokensAt } from "../thinkingBinding.ts"
import { CarriedIndex } from "./carried.ts"
import { asMessages, blocksOf, type MessageParam } from "./wire.ts"

/** The fields of a `ConversationState` the checks read. */
export interface CheckedState {
  readonly view: ReadonlyArray<MessageParam>
  readonly epoch: number
  readonly pending: ReadonlyArray<unknown>
  readonly usage: { readonly usage: ReportedUsage; readonly requestEpoch: number } | undefined
  readonly reply?:
    | {
      readonly stopReason?: string | undefined
      readonly requestEpoch: number
      readonly noUsage?: true | undefined
    }
    | undefined
  readonly unboundThinking?: ReadonlyArray<BlockPosition> | undefined
  /** What the transition that made the state carries about its view (the eviction index and its estimates). */
  readonly carried?: CarriedIndex | undefined
}

/**
 * The context the trigger reads, in tokens, and whether it is the library's estimate (`estimated`) rather than a
 * provider's report:
 * - the latest reply's reported usage (`Policy.contextTokens`), when it reported one for a request of the current
 *   epoch, plus the estimate of what the view gained after that reply (`gainedSinceReply`: the tool results, user text
 *   and system messages appended since, which the report did not measure), so a large result appended after a report
 *   just under the trigger makes the next request compact before it is sent;
 * - otherwise (the latest reply reported none, no reply ever did, or the latest report measured the view before the
 *   latest compaction) the estimate of the whole request: the view as the API counts it (`viewTokens`) plus
 *   `headTokens`, the system prompt and tools it carries. An earlier report of the current epoch still counts when it
 *   says more: the view has only grown since, but for offloads.
 * The estimate is the one `estimateTokens` carries forward from the view's previous step: a step costs what it added.
 */
export const triggerContext = (
  state: CheckedState,
  headTokens: number
): { readonly tokens: number; readonly estimated: boolean } => {
  const usage = state.usage
  const current = usage !== undefined && usage.requestEpoch >= state.epoch
  if (current && state.reply?.noUsage !== true) {
    return { tokens: contextTokens(usage.usage) + gainedSinceReply(state), estimated: false }
  }
  const estimate = viewTokens(state) + headTokens
  return { tokens: current ? Math.max(estimate, contextTokens(usage.usage)) : estimate, estimated: true }
}

/**
 * The estimated tokens the view gained after its latest reply: the messages after its last assistant message (tool
 * results, user text, system messages, the interrupted results of calls left open), which the usage that reply
 * reported did not measure. Each is read from the eviction index the state carries when it covers the view, else from
 * the message's own estimate (`estimateMessageTokens`, cached by identity); only those messages are visited, so it
 * costs what the view gained, not what it holds. A reply with empty content adds no message: after one, the messages
 * since the reply before it (all of them, when there is none) are counted, some twice. A message appended while the
 * reply's request was in flight sits before the reply: neither the report nor this counts it.
 */
export const gainedSinceReply = (state: CheckedState): number => {
  const view = asMessages(state.view)
  let i = view.length - 1
  if (i < 0 || view[i]!.role === "assistant") return 0
  const parts = CarriedIndex.requestParts(view, state.carried)
  let tokens = 0
  for (; i >= 0 && view[i]!.role !== "assistant"; i--) {
    tokens += parts === undefined ? estimateMessageTokens(view[i]!) : parts.tokensOf(i)
  }
  return tokens
}

/**
 * True when the context the trigger reads (`triggerContext`: the latest reported usage plus the estimate of what the
 * view gained since, else the estimate of the request with `headTokens` for its system prompt and tools) leaves less
 * than the policy's room or reaches its cost target (`shouldCompact`); with `cacheCold` and a view that ends on a
 * human turn, the lower cold target applies. Also true when the latest reply, to a request of the current epoch,
 * stopped with `model_context_window_exceeded` (the request did not fit), whatever its usage says.
 */
export const triggerFires = (
  state: CheckedState,
  policy: CompactionPolicy,
  cacheCold?: boolean | undefined,
  headTokens = 0
): boolean =>
  overflowed(state) ||
  shouldCompact(policy, { input_tokens: triggerContext(state, headTokens).tokens, output_tokens: 0 }, {
    requestEpoch: state.epoch,
    currentEpoch: state.epoch
  }, { coldHumanTurn: cacheCold === true && endsOnHumanTurn(state.view) })

/**
 * `triggerFires` with `tokens`, the exact count of the next request (a `TokenCounter`'s), in place of the last
 * reported usage: the same thresholds (`shouldCompact`), on the request about to be sent, whatever its epoch.
 */
export const countFires = (
  state: CheckedState,
  policy: CompactionPolicy,
  cacheCold: boolean | undefined,
  tokens: number
): boolean =>
  overflowed(state) ||
  shouldCompact(policy, { input_tokens: tokens, output_tokens: 0 }, {
    requestEpoch: state.epoch,
    currentEpoch: state.epoch
  }, { coldHumanTurn: cacheCold === true && endsOnHumanTurn(state.view) })

/**
 * The estimated tokens of the view as the API counts them: the thinking blocks a rewrite invalidated are dropped
 * and count nothing.
 */
export const viewTokens = (state: CheckedState): number =>
  estimateTokens(asMessages(state.view)) - tokensAt(asMessages(state.view), state.unboundThinking ?? [])

/** The latest reply, to a request of the current epoch, stopped because the request did not fit the window. */
export const overflowed = (state: CheckedState): boolean =>
  state.reply?.stopReason === "model_context_window_exceeded" && state.reply.requestEpoch === state.epoch

/** The view ends on a message a person wrote: a user message with content other than tool results. */
export const endsOnHumanTurn = (view: ReadonlyArray<MessageParam>): boolean =>
  view.at(-1)?.role === "user" && blocksOf(view.at(-1)!).some((b) => b.type !== "tool_result")

/** The latest reply stopped with `stopReason` and is still the view's last message. */
export const endsOnReplyStopped = (state: CheckedState, stopReason: string): boolean =>
  state.reply?.stopReason === stopReason && state.pending.length === 0 && state.view.at(-1)?.role === "assistant"

/** `pause_turn`: the paused reply goes back unchanged, so the server continues its turn. */
export const continuesPausedTurn = (state: CheckedState): boolean => endsOnReplyStopped(state, "pause_turn")

/**
 * `compaction` (threshold mode with `pause_after_compaction`): the reply is the server's compaction
 * block, and the request that resumes the turn is the moment to add the files message after it.
 */
export const resumesServerCompaction = (state: CheckedState): boolean => {
  if (!endsOnReplyStopped(state, "compaction")) return false
  const first = blocksOf(state.view.at(-1)!)[0]
  return first !== undefined && isCompactionWithContent(first as never)
}
