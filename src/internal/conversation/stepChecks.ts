/**
 * What a step's decisions read off a conversation state: the view's tokens as the API counts them, the compaction
 * trigger (on the reported usage, on the library's estimate of the request when the latest reply reported none, or on
 * an exact count of the next request), and the stop reasons of the latest reply that steer `prepareStep`. Pure, over
 * the fields of `ConversationState` it reads.
 *
 * @internal
 */
import type { BlockPosition } from "../../Cache.ts"
import { isCompactionWithContent } from "../blocks.ts"
import { type CompactionPolicy, contextTokens, type ReportedUsage, shouldCompact } from "../../Policy.ts"
import { estimateTokens } from "../../Tokens.ts"
import { tokensAt } from "../thinkingBinding.ts"
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
}

/**
 * The context the trigger reads, in tokens, and whether it is the library's estimate (`estimated`) rather than a
 * provider's report:
 * - the latest reply's reported usage (`Policy.contextTokens`), when it reported one for a request of the current
 *   epoch;
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
  if (current && state.reply?.noUsage !== true) return { tokens: contextTokens(usage.usage), estimated: false }
  const estimate = viewTokens(state) + headTokens
  return { tokens: current ? Math.max(estimate, contextTokens(usage.usage)) : estimate, estimated: true }
}

/**
 * True when the context the trigger reads (`triggerContext`: the latest reported usage, else the estimate of the
 * request with `headTokens` for its system prompt and tools) leaves less than the policy's room or reaches its cost
 * target (`shouldCompact`); with `cacheCold` and a view that ends on a human turn, the lower cold target applies. Also
 * true when the latest reply, to a request of the current epoch, stopped with `model_context_window_exceeded` (the
 * request did not fit), whatever its usage says.
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
