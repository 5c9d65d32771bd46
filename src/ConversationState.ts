/**
 * Concept: the state of the agent loop and its pure transitions.
 *
 * The state value of the agent loop and its pure transitions: append a message, record a reply, prepare a step
 * (answer abandoned calls, offload stale output, say whether to compact), finish a compaction. Everything a step
 * depends on is a field of the state or an argument, so a copied or resumed state decides as the live one.
 *
 * The state (`ConversationState`) is the view sent to the model, the hot paths, the compaction epoch, the tool calls
 * still waiting for results and the last reported usage, and what its transition carries about the view for the next
 * one (`carried`: the eviction index and frontier, so a step costs what it adds). Every transition returns the changes
 * it made (`Transition`), each with the state after it, so a caller (the `Conversation` service) persists exactly
 * what the pure step produced and commits the state only once its change is stored.
 *
 * The rules every transition keeps, so that every prepared request is one the Messages API accepts:
 * - messages are stored as wire messages: private `_` keys and empty text blocks (inside a tool result too) are
 *   dropped, empty messages skipped, a reply's trailing whitespace trimmed;
 * - a tool call's results are the only thing that may follow it: anything else (a typed message, another reply, a
 *   prepared request) first answers the calls still pending with an interrupted error result, so no compaction ever
 *   runs while a `tool_use` awaits its result, and a real result is never answered twice;
 * - results that answer no pending call are dropped; a reply that reuses a `tool_use` id already in the view gets a
 *   fresh id (`<id>_2`, …), and its results are matched by the id the caller knows;
 * - the hot paths observe every appended message and every offload, in the order they happen, and a resume replays
 *   the log's entries through the same two calls: a resumed state equals the live one.
 * - thinking blocks are bound to what precedes them: the state lists those a rewrite invalidated (an
 *   offload, a compaction, a renamed id or dropped block in a reply, a reply recorded after the view changed under its
 *   request: `unboundThinking`, restored on resume), and with a `thinking` option that can carry a binding the request
 *   (`Request.requestOf`) then asks the API to drop them instead of rejecting it, without one it leaves them out;
 *   eviction's rent-or-buy counts the thinking an offload would drop.
 *
 * @since 0.2.0
 */
import type Anthropic from "@anthropic-ai/sdk"
import type { BlockPosition } from "./Cache.ts"
import type { FinishedCompaction } from "./Compact.ts"
import { DEFAULT_KEEP_RECENT } from "./Evict.ts"
import { CarriedIndex } from "./internal/conversation/carried.ts"
import { appendStep, Change, closePending, none } from "./internal/conversation/steps.ts"
import {
  allThinking,
  firstChangedBlock,
  type InputTransformation,
  mergePositions,
  newlyUnboundTokens,
  thinkingAfter,
  thinkingIn
} from "./internal/thinkingBinding.ts"
import type { ReplyMeta } from "./internal/conversation/record.ts"
import {
  type AppendOnlyReason,
  appendOnlyReason,
  holdsThinking,
  reasonAfterReply,
  type StaleThinking,
  staleThinkingOf,
  withoutThinking
} from "./internal/conversation/appendOnly.ts"
import type { ThinkingConfig } from "./internal/conversation/thinking.ts"
import { anchorAfterReply, type ThreadAnchor, type ThreadRecord } from "./internal/conversation/thread.ts"
import {
  type CacheDiagnosis,
  type CacheLearning,
  type CachePrediction,
  diagnosisAgrees,
  type PromptShape,
  reportedOf
} from "./internal/conversation/diagnostics.ts"
import {
  continuesPausedTurn,
  resumesServerCompaction,
  triggerContext,
  triggerFires,
  viewTokens
} from "./internal/conversation/stepChecks.ts"
import {
  asMessages,
  type Block,
  blocksOf,
  interrupted,
  isSdkReply,
  wireMessage,
  wireReply
} from "./internal/conversation/wire.ts"
import { defersToCompaction, restartCost, threadRestartOf, type ThreadRestartPrice } from "./internal/threadCost.ts"
import { HotPaths } from "./HotPaths.ts"
import { decodeMessagesSync, type Message } from "./Message.ts"
import { type CompactionPolicy, defaultPolicy, type ReportedUsage } from "./Policy.ts"
import { filesMessage, filesOfMessage, summaryText } from "./Summary.ts"
import { filesRoom, mergeFiles, noFiles, parseAppendix } from "./internal/summary.ts"
import { estimateTokens } from "./Tokens.ts"
import { filesTouched, type ToolClassifier } from "./Tools.ts"
import { LEADING_USER_TEXT } from "./internal/repair.ts"

/** One sampling step of a reply's usage (`usage.iterations`). */
type UsageIteration = NonNullable<ReportedUsage["iterations"]>[number]

/** The SDK's message type: what goes in and what comes out. @category models */
export type MessageParam = Anthropic.MessageParam

// ============================================================================
// The state
// ============================================================================

/**
 * The whole state of a conversation, as a plain immutable value.
 * - `view`: what the next request sends (wire messages only);
 * - `hot`: the re-read tracker, fed every appended message and every offload;
 * - `epoch`: the number of compactions applied;
 * - `pending`: the calls of the latest reply still waiting for results (never present during a compaction);
 * - `usage`: the last usage a reply reported, if any (`reply.noUsage` says when the latest reply reported none);
 * - `reply`: the id and stop reason of the latest reply, if any (the API's stop reasons steer `prepareStep`);
 * - `thread`: with threads on, the reply the next request continues and how many view messages the server holds
 *   under it (absent: the next request starts a new thread);
 * - `carried`: what the transition that made the state hands the next one about `view` (opaque);
 * - `lastRequestAt`, `unthreaded`, `issued`, `cacheLearning`, `backgroundCut`: what the `Conversation` service
 *   remembers between its steps (the cache's age, a refused thread, the request awaiting its reply, the cache
 *   diagnostics learned, the background summary's cut), so a copied or resumed state decides as the live one. The
 *   pure transitions carry them unchanged (a compaction clears `backgroundCut`).
 * @category models
 */
export interface ConversationState {
  /** What the next request sends: wire messages only. */
  readonly view: ReadonlyArray<MessageParam>
  /** The re-read tracker, fed every appended message and every offload. */
  readonly hot: HotPaths
  /** The number of compactions applied (0 for a new state). */
  readonly epoch: number
  /** The tool calls of the latest reply still waiting for their results: each one's id in the view and the id the caller knows. */
  readonly pending: ReadonlyArray<{ readonly id: string; readonly originalId: string }>
  /** The latest provider-reported usage and the epoch of the request it measured. */
  readonly usage: { readonly usage: ReportedUsage; readonly requestEpoch: number } | undefined
  /**
   * The latest reply as the API described it: its id and stop reason when the caller recorded the SDK's reply (a
   * `MessageParam` reply has neither), and the epoch of the request it answered.
   */
  readonly reply?: {
    readonly id?: string
    readonly stopReason?: string
    readonly requestEpoch: number
    /**
     * The reply was recorded with no usage (a `MessageParam` and no `usage` argument): the trigger then runs on the
     * library's estimate of the request until a reply reports one (`prepareStep`).
     */
    readonly noUsage?: true
    /**
     * The reply had empty content (or only blank text): it added no message. The SDK's reply with this `id` recorded
     * again is refused, as the latest reply with content is.
     */
    readonly empty?: true
    /** The reply's `input_transformations` (the thinking blocks the API dropped or let pass), if any. */
    readonly inputTransformations?: ReadonlyArray<InputTransformation>
    /**
     * With `ConversationOptions.diagnostics`: the library's prediction for the request this reply
     * answered (`null`: no divergence from the request before; else the miss it expects, its reason and estimated
     * tokens) beside the `cache_miss_reason` the API reported, and whether they agree (same reason, missed tokens
     * within 5%).
     */
    readonly cacheDiagnosis?: CacheDiagnosis
    /**
     * With threads on: the request went without `thread`, because the API refused threads for this conversation (a
     * `thread_unsupported_request`, or a thread lost twice in a row). Kept in the log, so every later
     * request goes without `thread`, after a resume too.
     */
    readonly unthreaded?: true
  } | undefined
  /**
   * The server-held thread the next request continues: the latest reply's id and the number of view
   * messages the server holds under it. Set only by a reply recorded with threads on, kept by appends, cleared by
   * every rewrite (an offload, a compaction) and by a reply the server does not hold as the view does.
   */
  readonly thread?: ThreadAnchor | undefined
  /**
   * The thinking blocks of `view` that a rewrite made after they were created invalidated, or that a reply brought
   * after messages its request did not send, sorted: the requests ask the API to drop them (`block_binding:
   * drop_block`), or leave them out when their thinking config cannot carry the binding. Absent or empty when none.
   */
  readonly unboundThinking?: ReadonlyArray<BlockPosition> | undefined
  /**
   * Why the conversation stays append-only between compactions (thinking on or seen in a reply, threads, the caller's
   * `appendOnly`): every offload then waits for the next compaction (`OffloadOptions.appendOnly`). Once decided it
   * stays, and the log keeps it (each reply's step metadata, each compaction's checkpoint). Absent: rewrites in place.
   */
  readonly appendOnly?: AppendOnlyReason | undefined
  /**
   * The eviction decisions made for `view` (its eviction index, its frontier), so the next step costs what it adds.
   * Applies only to this very `view` array: a state with another view (a copy, one set by hand) or none decides from
   * scratch, once, and sends the same requests. Derived from `view`: leave it out when comparing states; it is not
   * serialized.
   */
  readonly carried?: CarriedIndex | undefined
  /**
   * The time (ms, the `Clock` of the `Conversation` service) the service last handed out a request from `prepare`:
   * the next `prepare` counts the provider's cache cold (`prepareStep`'s `cacheCold`) once it is older than the
   * policy's `cacheTtl`. Absent: no request handed out yet, or a state resumed from a log (it starts warm).
   */
  readonly lastRequestAt?: number | undefined
  /**
   * The compaction skip the latest `prepare` logged (its reason and the policy field it names), so that a skip that
   * repeats is logged at debug level only. Absent: the latest `prepare` compacted, or skipped nothing.
   */
  readonly skipLogged?: string | undefined
  /**
   * With threads on: `true` once a reply was recorded `unthreaded` (the API refused a thread, `threadReplay`), so
   * every later request goes without `thread`. A state resumed from a log whose latest reply went without `thread`
   * has it too (the reply's metadata keeps `unthreaded`). Absent: threads as the options say.
   */
  readonly unthreaded?: true | undefined
  /**
   * The latest request the service handed out that no reply has answered yet: the length of the view it sent (its
   * reply keeps its thinking bound, and with threads on anchors the thread, only when it follows exactly those
   * messages); with diagnostics on, the whole request and the library's prediction for it (its reply's
   * `cacheDiagnosis` compares them).
   */
  readonly issued?: {
    readonly sent?: number | undefined
    readonly diagnosed?: { readonly full: PromptShape; readonly predicted: CachePrediction | undefined } | undefined
  } | undefined
  /**
   * With diagnostics on: what the SDK replies taught about the provider's cache (the request the latest one
   * answered, the exact counts of its prefixes, each message's ratio of the provider's count to the estimate), which
   * the next request's `cachePrediction` reads. Absent: nothing learned (a state resumed from a log predicts nothing
   * for its first request).
   */
  readonly cacheLearning?: CacheLearning | undefined
  /**
   * With `CompactionPolicy.backgroundAt`: the cut of the summary being made in the background as of the latest reply
   * (what that reply's step metadata records; a cut only, never a summary), cleared by a compaction. A `Conversation`
   * opened on a state that holds one starts that summary again, so a copied or resumed state applies what the live
   * one would have.
   */
  readonly backgroundCut?: number | undefined
}

/** A call still pending (an entry of `ConversationState.pending`). */
type PendingCall = ConversationState["pending"][number]

/** The latest reply's report (`ConversationState.reply`). */
type ReplyReport = NonNullable<ConversationState["reply"]>

/**
 * One change a transition made, the service records each in the log: `Appended` (a message and, for a reply, its
 * step metadata), `EmptyReply` (the step metadata of a reply with empty content, which adds no message), `Offloaded`
 * (the tool results an offload replaced), `CompactionApplied` (the compaction's record); and its constructors.
 * @category models
 */
export { Change }

/** One change and the state right after it. @category models */
export interface Step {
  /** The change the transition made. */
  readonly change: Change
  /** The state right after that change. */
  readonly state: ConversationState
}

/** What a pure transition did: its changes in order (possibly none) and the final state. @category models */
export interface Transition {
  /** The changes in the order they were made, each with the state after it; empty when nothing changed. */
  readonly steps: ReadonlyArray<Step>
  /** The final state (the last step's, or the input state when there is none). */
  readonly state: ConversationState
  /** What `appendMessage` mended in the caller's message (absent when nothing). */
  readonly mends?: AppendMends | undefined
}

/**
 * What `appendMessage` mends in a caller's message, ids as the caller knows them: tool results that answer no pending
 * call (dropped: the API refuses them), and pending calls a message with other content (or a system message) leaves
 * unanswered (answered as interrupted: the API needs every call answered). The service logs each as a warning.
 * @category models
 */
export interface AppendMends {
  /** The ids (as the caller knows them) of the tool results dropped: they answer no pending call. */
  readonly droppedResults: ReadonlyArray<string>
  /** The ids (as the caller knows them) of the pending calls answered as interrupted. */
  readonly interruptedCalls: ReadonlyArray<string>
}

/** `t` reporting `mends`, when there is any. */
const withMends = (t: Transition, droppedResults: ReadonlyArray<string>, interruptedCalls: ReadonlyArray<string>) =>
  droppedResults.length === 0 && interruptedCalls.length === 0
    ? t
    : { ...t, mends: { droppedResults, interruptedCalls } }

/** The state of a conversation that has seen nothing. @category constructors */
export const emptyState = (classifier?: ToolClassifier | undefined): ConversationState => {
  const view: ReadonlyArray<MessageParam> = []
  return {
    view,
    hot: HotPaths.empty(classifier),
    epoch: 0,
    pending: [],
    usage: undefined,
    carried: CarriedIndex.fresh(asMessages(view))
  }
}

/** The state with `anchor` as its thread; without one, the state has no `thread` key (a resumed state has none). */
const withThread = (state: ConversationState, anchor: ThreadAnchor | undefined): ConversationState => {
  if (anchor !== undefined) return { ...state, thread: anchor }
  if (!("thread" in state)) return state
  const { thread: _thread, ...rest } = state
  return rest
}

const chain = (first: Transition, next: (state: ConversationState) => Transition): Transition => {
  const second = next(first.state)
  return first.steps.length === 0 ? second : { steps: [...first.steps, ...second.steps], state: second.state }
}

// ============================================================================
// Wire messages
// ============================================================================

type AssistantContent = Anthropic.AssistantMessageParam["content"]

/**
 * Decodes untrusted JSON into SDK messages (`decodeMessagesSync`'s checks, then typed as `MessageParam`); throws
 * `MessageDecodeError` on bad input.
 * @category wire
 */
export const decodeMessageParams = (input: unknown): Array<MessageParam> =>
  [...decodeMessagesSync(input)] as unknown as Array<MessageParam>

/** The same list, typed as SDK messages: for conversations this library decoded or built (its types are wider). @category wire */
export const asMessageParams = (messages: ReadonlyArray<Message>): Array<MessageParam> =>
  [...messages] as unknown as Array<MessageParam>

// ============================================================================
// Pure transitions
// ============================================================================

const leadingUser = (state: ConversationState): Transition =>
  state.view.length > 0 ? none(state) : appendStep(state, { role: "user", content: LEADING_USER_TEXT })

/**
 * Appends a user or system message (tool results included). Results are matched to the pending calls by the id the
 * caller knows; results that answer nothing pending are dropped. A message with other content, and any system
 * message, first answers the calls still pending (interrupted). An assistant message is `recordReply` without usage.
 * The message is taken as checked: the `Conversation` service refuses first what does not decode, a block the role
 * cannot hold, blank content, and a system message (or a user message after one) placed where the API refuses it.
 * Here blank text blocks are dropped, and a message left with nothing adds nothing.
 * @category transitions
 */
export const appendMessage = (state: ConversationState, message: MessageParam): Transition => {
  if (message.role === "assistant") return recordReply(state, message)
  const clean = wireMessage(message)
  if (clean === undefined) return none(state)
  if (clean.role === "system") {
    const closed = chain(chain(closePending(state), leadingUser), (s) => appendStep(s, clean))
    return withMends(closed, [], state.pending.map((p) => p.originalId))
  }
  const blocks = blocksOf(clean)
  const waiting = new Map(state.pending.map((p) => [p.originalId, p]))
  const answered: Array<Block> = []
  const others: Array<Block> = []
  const dropped: Array<string> = []
  let changed = false
  for (const block of blocks) {
    if (block.type !== "tool_result") {
      others.push(block)
      continue
    }
    const call = waiting.get(block.tool_use_id)
    if (call === undefined) {
      dropped.push(block.tool_use_id)
      changed = true
      continue
    }
    waiting.delete(block.tool_use_id)
    if (call.id !== block.tool_use_id) changed = true
    answered.push(call.id === block.tool_use_id ? block : { ...block, tool_use_id: call.id })
    if (others.length > 0) changed = true
  }
  const closing = others.length > 0 ? [...waiting.values()] : []
  const interruptedCalls = closing.map((p) => p.originalId)
  if (answered.length + closing.length + others.length === 0) return withMends(none(state), dropped, interruptedCalls)
  const stored: MessageParam = changed || closing.length > 0
    ? { role: "user", content: [...answered, ...closing.map((p) => interrupted(p.id)), ...others] }
    : clean
  const rest = closing.length > 0 ? [] : state.pending.filter((p) => waiting.has(p.originalId))
  return withMends(appendStep(state, stored, undefined, { pending: rest }), dropped, interruptedCalls)
}

/** The counts of one sampling step a state keeps (the SDK's iteration entries have more). */
const iterationOf = (step: UsageIteration): UsageIteration => ({
  type: step.type,
  input_tokens: step.input_tokens,
  output_tokens: step.output_tokens,
  ...(step.cache_read_input_tokens == null ? {} : { cache_read_input_tokens: step.cache_read_input_tokens }),
  ...(step.cache_creation_input_tokens == null ? {} : { cache_creation_input_tokens: step.cache_creation_input_tokens })
})

/**
 * The usage fields a state keeps (the SDK's `Usage` has more): the counts, the cache writes by TTL
 * (`cache_creation`) and the sampling steps (`iterations`, which the trigger reads).
 */
const usageOf = (usage: ReportedUsage): ReportedUsage => ({
  input_tokens: usage.input_tokens,
  output_tokens: usage.output_tokens,
  ...(usage.cache_read_input_tokens == null ? {} : { cache_read_input_tokens: usage.cache_read_input_tokens }),
  ...(usage.cache_creation_input_tokens == null
    ? {}
    : { cache_creation_input_tokens: usage.cache_creation_input_tokens }),
  ...(usage.cache_creation == null ? {} : {
    cache_creation: {
      ephemeral_5m_input_tokens: usage.cache_creation.ephemeral_5m_input_tokens,
      ephemeral_1h_input_tokens: usage.cache_creation.ephemeral_1h_input_tokens
    }
  }),
  ...(usage.iterations == null ? {} : { iterations: usage.iterations.map(iterationOf) })
})

/**
 * A reply as `@anthropic-ai/sdk` returns it: `Message` from `client.messages.create`, `BetaMessage` from
 * `client.beta.messages.create` (both are assignable). @category models
 */
export interface SdkReply {
  /** The reply's id (`msg_…`). */
  readonly id: string
  /** Always `"message"`. */
  readonly type: "message"
  /** Always `"assistant"`. */
  readonly role: "assistant"
  /** The reply's content blocks. */
  readonly content: ReadonlyArray<{ readonly type: string }>
  /** Why the model stopped (`end_turn`, `tool_use`, `max_tokens`, `pause_turn`, …), or `null`. */
  readonly stop_reason: string | null
  /** The usage the API reported for the request. */
  readonly usage: ReportedUsage
  /** What the API did to the request's thinking blocks (dropped or let pass), if anything. */
  readonly input_transformations?: ReadonlyArray<InputTransformation> | null
  /** The reply's `diagnostics` (`cache_miss_reason`, or `null` for no divergence). */
  readonly diagnostics?: unknown
}

/**
 * Records an assistant reply and the usage the provider reported for it (`requestEpoch`: the epoch the request was
 * prepared in, by default the current one). The reply is a `MessageParam` or the SDK's reply (`SdkReply`): its
 * content is stored as an assistant message, its `usage` is the usage unless one is given, and its `id` and
 * `stop_reason` go in the state's `reply` and the log entry's step metadata. Calls still pending are answered as
 * interrupted first; a `tool_use` id already in the view is renamed; the reply's calls become pending. A reply with
 * empty content (or only blank text), the SDK's or a `MessageParam`, adds no message and leaves the calls pending: its
 * usage (the SDK reply's, or the one given), id and stop reason are kept all the same (the trigger reads them), the
 * state's `reply` marked `empty`, in one `EmptyReply` change that the log stores. Its last block, when it is text, is
 * stored without trailing whitespace: a continued turn sends it as the final assistant message, which the API refuses
 * ending in whitespace. The reply is taken as checked (the `Conversation` service refuses first what is not one).
 *
 * `thread` (threads on): `sent` is the length of the view the request sent. The reply anchors the next request's
 * thread (`state.thread`, and `threadHeld` in its step metadata) when the view holds it exactly as the server does,
 * right after the messages its request sent: an SDK reply, in the request's epoch, appended after `sent` messages with
 * no id renamed and no block dropped, that is not a refusal, a cut stream (`stop_reason: null`) or a fallback model's
 * reply. Any other reply leaves no anchor, so the next request starts a new thread.
 *
 * `diagnosis` (diagnostics on: the request asked for them): the reply's report carries `cacheDiagnosis`, the
 * library's `predicted` miss for that request beside the reason the SDK reply's `diagnostics` reported.
 *
 * `sent`: the length of the view the request was built from (`ConversationState.issued`; absent: the view before the
 * reply). The reply's thinking is bound to that view: when the view changed under the request (a message appended
 * while it was in flight, or a compaction: `requestEpoch` is not the state's epoch), the reply lands after messages
 * its thinking was not made on, and its thinking is unbound (`unboundThinking`), as after a rewrite of the reply.
 * @category transitions
 */
export const recordReply = (
  state: ConversationState,
  reply: MessageParam | SdkReply,
  usage?: ReportedUsage | undefined,
  requestEpoch?: number | undefined,
  thread?: ThreadRecord | undefined,
  diagnosis?: { readonly predicted: CachePrediction | undefined } | undefined,
  sent?: number | undefined
): Transition => {
  const sdk = isSdkReply(reply) ? reply : undefined
  const message: MessageParam = sdk === undefined
    ? reply as MessageParam
    : { role: "assistant", content: sdk.content as AssistantContent }
  const reported = usage ?? sdk?.usage
  const report: ReplyReport = {
    ...(sdk === undefined ? {} : { id: sdk.id }),
    ...(sdk?.stop_reason == null ? {} : { stopReason: sdk.stop_reason }),
    requestEpoch: requestEpoch ?? state.epoch,
    ...(reported === undefined ? { noUsage: true as const } : {}),
    ...(sdk?.input_transformations == null || sdk.input_transformations.length === 0
      ? {}
      : { inputTransformations: sdk.input_transformations.map(transformationOf) }),
    ...(diagnosis === undefined ? {} : { cacheDiagnosis: diagnosisOf(diagnosis.predicted, sdk) }),
    ...(thread !== undefined && "unthreaded" in thread ? { unthreaded: true as const } : {})
  }
  const onThread = thread !== undefined && "sent" in thread ? thread : undefined
  const clean = wireReply(message)
  if (clean === undefined) return emptyReply(state, report, reported)
  return chain(chain(closePending(state), leadingUser), (s) => {
    const inView = CarriedIndex.toolUseIds(asMessages(s.view), s.carried)
    // the ids this reply's calls take, in order (a reply holds a few: a scan)
    const added: Array<string> = []
    const used = (id: string) => inView.has(id) || added.includes(id)
    const renamed: Record<string, string> = {}
    let content = clean.content
    if (typeof content !== "string") {
      let copy: Array<Block> | undefined
      for (let i = 0; i < content.length; i++) {
        const block = content[i]!
        if (block.type !== "tool_use") continue
        if (used(block.id)) {
          let k = 2
          while (used(`${block.id}_${k}`)) k++
          const id = `${block.id}_${k}`
          renamed[id] = block.id
          copy ??= [...content]
          copy[i] = { ...block, id }
          added.push(id)
        } else added.push(block.id)
      }
      if (copy !== undefined) content = copy
    }
    const stored: MessageParam = content === clean.content ? clean : { role: "assistant", content }
    const epoch = report.requestEpoch
    const kept = reported === undefined ? undefined : usageOf(reported)
    const anchor: ThreadAnchor | undefined = onThread === undefined || sdk === undefined ? undefined : anchorAfterReply(
      sdk,
      clean === message && stored === clean && s.view.length === onThread.sent && epoch === state.epoch,
      s.view.length + 1,
      onThread.replacesLost
    )
    // where the reply's thinking stops being bound (API-RULES 29): its first block when the view changed under its
    // request, else where the stored reply first differs from the received one; kept only when thinking follows
    const viewChanged = epoch !== state.epoch || (sent !== undefined && s.view.length !== sent)
    const changedAt = viewChanged
      ? 0
      : typeof stored.content === "string" || typeof message.content === "string"
      ? undefined
      : firstChangedBlock(message.content, stored.content)
    const rewrittenFrom = changedAt !== undefined && thinkingIn(stored as unknown as Message, 0, changedAt).length > 0
      ? changedAt
      : undefined
    const appendOnly = reasonAfterReply(s.appendOnly, stored as unknown as Message)
    const meta: ReplyMeta = {
      ...reportMeta(report, kept, epoch),
      ...(Object.keys(renamed).length === 0 ? {} : { toolUseIds: renamed }),
      ...(anchor === undefined ? {} : { threadHeld: anchor.held }),
      ...(anchor?.replacesLost === true ? { threadReplacesLost: true as const } : {}),
      ...(rewrittenFrom === undefined ? {} : { rewrittenFrom }),
      ...(appendOnly === undefined ? {} : { appendOnly })
    }
    const unbound = rewrittenFrom === undefined
      ? {}
      : unboundBy({ ...s, view: s.view.concat([stored]) }, { message: s.view.length, block: rewrittenFrom })
    const t = appendStep(s, stored, meta, {
      ...unbound,
      pending: pendingOf(stored, renamed),
      usage: kept === undefined ? s.usage : { usage: kept, requestEpoch: epoch },
      reply: report,
      ...(appendOnly === undefined ? {} : { appendOnly })
    })
    const final: ConversationState = withThread(t.state, anchor)
    return final === t.state ? t : { steps: [{ ...t.steps[0]!, state: final }], state: final }
  })
}

/**
 * The step metadata every reply's record carries, with content or without (resume reads it back into the report): its
 * usage when it has one (`kept`), the epoch of the request it answers, and its report's id, stop reason, thread
 * opt-out, input transformations and cache diagnosis.
 */
const reportMeta = (report: ReplyReport, kept: ReplyMeta["usage"], epoch: number): ReplyMeta => ({
  ...(kept === undefined ? {} : { usage: kept }),
  requestEpoch: epoch,
  ...(report.id === undefined ? {} : { replyId: report.id }),
  ...(report.stopReason === undefined ? {} : { stopReason: report.stopReason }),
  ...(report.unthreaded === true ? { unthreaded: true as const } : {}),
  ...(report.inputTransformations === undefined ? {} : { inputTransformations: report.inputTransformations }),
  ...(report.cacheDiagnosis === undefined ? {} : { cacheDiagnosis: report.cacheDiagnosis })
})

/**
 * A reply with empty content (`report` its report, `reported` its usage, the SDK reply's or the one given): no
 * message, but its usage (when there is one), its report (marked `empty`) and the end of the thread, which the change
 * carries as the reply's step metadata, so the log keeps them and a resume restores them.
 */
const emptyReply = (state: ConversationState, report: ReplyReport, reported: ReportedUsage | undefined): Transition => {
  const kept = reported === undefined ? undefined : usageOf(reported)
  const meta = reportMeta(report, kept, report.requestEpoch)
  const usage = kept === undefined ? state.usage : { usage: kept, requestEpoch: report.requestEpoch }
  const next = withThread({ ...state, usage, reply: { ...report, empty: true } }, undefined)
  return { steps: [{ change: Change.EmptyReply({ meta }), state: next }], state: next }
}

/** The reasons the API reports without a diagnosis to compare (the previous reply unknown to it, or none given). */
const UNDIAGNOSED: ReadonlyArray<string> = ["previous_message_not_found", "unavailable"]

/** A reply's cache diagnosis: the prediction, the reported reason (an SDK reply's), and whether they agree. */
const diagnosisOf = (predicted: CachePrediction | undefined, sdk: SdkReply | undefined): CacheDiagnosis => {
  const reported = sdk === undefined || !("diagnostics" in sdk) ? undefined : reportedOf(sdk.diagnostics)
  const comparable = predicted !== undefined && reported !== undefined &&
    (reported === null || !UNDIAGNOSED.includes(reported.type))
  return {
    ...(predicted === undefined ? {} : { predicted }),
    ...(reported === undefined ? {} : { reported }),
    ...(comparable ? { agrees: diagnosisAgrees(predicted, reported) } : {})
  }
}

/** The entry of `input_transformations` a state keeps. */
const transformationOf = (t: InputTransformation): InputTransformation => ({
  type: t.type,
  path: t.path,
  ...(t.reason === undefined ? {} : { reason: t.reason })
})

/**
 * The `unboundThinking` field after a rewrite of `state.view` at `from` (its message; its block, or none for no
 * rewrite): the thinking blocks after it join the unbound ones. Empty when nothing changes.
 */
const unboundBy = (
  state: ConversationState,
  from: { readonly message: number; readonly block: number | undefined }
): Pick<ConversationState, "unboundThinking"> => {
  if (from.block === undefined) return {}
  const added = thinkingAfter(asMessages(state.view), { message: from.message, block: from.block - 1 })
  if (added.length === 0) return {}
  return { unboundThinking: mergePositions(state.unboundThinking ?? [], added) }
}

const pendingOf = (reply: MessageParam, renamed: Readonly<Record<string, string>>): ReadonlyArray<PendingCall> => {
  const pending: Array<PendingCall> = []
  if (typeof reply.content === "string") return pending
  // no lookup without a rename: a fresh id as a property key is interned, which costs more than the rest of the reply
  const anyRenamed = Object.keys(renamed).length > 0
  for (const b of reply.content) {
    if (b.type === "tool_use") pending.push({ id: b.id, originalId: anyRenamed ? renamed[b.id] ?? b.id : b.id })
  }
  return pending
}

/**
 * How `prepareStep` (and `applyCompaction` on a thread) offloads. Every option may be `undefined`, which means its
 * default. @category models
 */
export interface OffloadOptions {
  /** Newest live tool results kept verbatim; default `DEFAULT_KEEP_RECENT`. */
  readonly keepRecent?: number | undefined
  /**
   * Fewest tokens worth an eviction (each one rewrites the cached prompt). Absent: the rent-or-buy rule of
   * `evictStaleToolResults` (offload once the cache reads paid on the evictable tokens reach the cost of rewriting
   * the prompt behind the first change; at once when the cache is known cold).
   */
  readonly minSavings?: number | undefined
  /** Classifies tool calls, to find superseded reads and the files a summary lists; default `defaultToolClassifier`. */
  readonly classifier?: ToolClassifier | undefined
  /**
   * The model has the `recall` tool (`Recall.recallTool`, answered from this conversation's log): offload pointers
   * then say to call it with their id (`Evict.EvictOptions.recall`). Default: not offered.
   */
  readonly recall?: boolean | undefined
  /**
   * An offloaded output's pointer keeps the values the output printed (`Evict.EvictOptions.keepPrinted`), so a value
   * survives its offload and the summary that later covers it. Default: kept (`false`: a pointer without them).
   */
  readonly keepPrinted?: boolean | undefined
  /**
   * The cache lifetime the requests ask for; the rent-or-buy rule prices a rewrite at its write price (1.25× input
   * for `"5m"`, the default, 2× for `"1h"`). `prepareStep` and `Conversation` take it from the policy's `cacheTtl`.
   */
  readonly cacheTtl?: "5m" | "1h" | undefined
  /**
   * The caller sends on a server-held thread: each request carries `thread`, a `continue` with only
   * the messages after the latest reply while the view only grew since it, a `create` with the whole view after any
   * rewrite. Record the SDK's replies (`recordReply(reply)`): their ids anchor the thread. After a reply recorded
   * `{ unthreaded: true }` (the API refused a thread: `threadReplay`) the requests go without `thread`. Default off.
   * With it, a rewrite also costs a restart of the thread (`threadRestart`).
   */
  readonly threads?: boolean | undefined
  /**
   * With `threads`: what restarting the thread costs, in uncached input tokens, and how offloads are batched with
   * compactions. A rewrite that breaks a thread the next request would continue costs `perViewToken` (default 0.1)
   * per view token (the whole view uploaded again) plus `perRestart` (default 1,000: the first request's latency);
   * the rent-or-buy rule adds it to the rewrite's price. An offload that would leave the context within `margin`
   * (default 0.2) of the compaction trigger waits for that compaction (it cannot avert it), and a compaction applies
   * the offloads its kept tail is due in the same rewrite: one restart covers both. The defaults are assumptions (no
   * price or latency of a thread is documented). `false`: none of this (a rewrite is priced by the cache alone).
   */
  readonly threadRestart?:
    | {
      readonly perViewToken?: number | undefined
      readonly perRestart?: number | undefined
      readonly margin?: number | undefined
    }
    | false
    | undefined
  /**
   * The rewrite discipline between compactions. Absent (the default): the conversation is
   * append-only once it has a reason (a `thinking` config that is not `disabled`, a reply that held thinking, threads
   * on with `threadRestart` not `false`; `ConversationState.appendOnly`): the offloads that come due wait for the next
   * compaction, which applies those its kept tail is due in the same rewrite, so no request between two compactions
   * rewrites what an earlier one sent. `true`: append-only from the start. `false`: offloads in place (the thinking
   * they invalidate is dropped by the API when the requests carry a `thinking` config that can carry the binding, left
   * out of the requests otherwise).
   */
  readonly appendOnly?: boolean | undefined
  /**
   * What a compaction does with the thinking of the turns it keeps (their prefix changed): `"strip"`
   * (the default, as the docs recommend: a client compaction that keeps no stale thinking) leaves it out of the
   * compacted view; `"bind"` keeps it, and the requests ask the API to drop it (`block_binding: drop_block`), which
   * needs a `thinking` config that can carry the binding (`enabled`, `adaptive`; without one the thinking is stripped).
   * A reply left empty by it is left out, and a system message that this leaves before a user turn moves to the next
   * place the API allows.
   */
  readonly staleThinking?: StaleThinking | undefined
}

/** The restart model of `options` when it sends on threads, else `undefined` (no restart is priced). */
const threadPriceOf = (options: OffloadOptions): ThreadRestartPrice | undefined =>
  options.threads === true ? threadRestartOf(options.threadRestart) : undefined

/**
 * Offloads stale tool output (`evictStaleToolResults`, the hot paths pinned) and lets the hot paths observe the
 * offloads. No change when the pass does not pay (`minSavings`, or the rent-or-buy rule; `cacheCold`: the provider's
 * cache has expired, so offloading rewrites nothing that would have been read). `prepareStep` runs it after closing the
 * pending calls; `applyCompaction` after a compaction on a thread.
 */
const offloadStaleResults = (
  state: ConversationState,
  options: OffloadOptions = {},
  cacheCold?: boolean | undefined
): Transition => {
  // equal to `evictStaleToolResults(state.view, keepRecent, { minSavings, pinned, cacheCold, classifier,
  // droppedThinking, restartCost })`, the dropped thinking being what the offload newly unbinds (API-RULES 29)
  const price = threadPriceOf(options)
  const { decision, carried } = CarriedIndex.evict(
    asMessages(state.view),
    state.carried,
    options.keepRecent ?? DEFAULT_KEEP_RECENT,
    {
      minSavings: options.minSavings,
      pinned: state.hot.pinned,
      cacheCold,
      classifier: options.classifier,
      cacheTtl: options.cacheTtl,
      recall: options.recall,
      keepPrinted: options.keepPrinted ?? true,
      droppedThinking: (message) =>
        newlyUnboundTokens(asMessages(state.view), { message, block: -1 }, state.unboundThinking ?? []),
      // a restart is priced only when the next request would continue a thread
      restart: price === undefined || state.thread === undefined
        ? undefined
        : () => restartCost(price, viewTokens(state))
    }
  )
  if (decision.offloaded.length === 0) return none(state)
  const view = decision.messages as unknown as ReadonlyArray<MessageParam>
  const first = decision.offloaded.reduce((a, o) =>
    o.messageIndex < a.messageIndex || (o.messageIndex === a.messageIndex && o.blockIndex < a.blockIndex) ? o : a
  )
  const next: ConversationState = withThread({
    ...state,
    view,
    hot: state.hot.observeOffloads(decision.offloaded),
    carried,
    ...unboundBy({ ...state, view }, { message: first.messageIndex, block: first.blockIndex })
  }, undefined)
  return { steps: [{ change: Change.Offloaded({ offloaded: decision.offloaded }), state: next }], state: next }
}

/**
 * The options of `prepareStep` and `applyCompaction`: the offload options, the policy, and the thinking config the
 * requests carry (a reason to stay append-only, and what lets a compaction keep stale thinking bound).
 */
type StepOptions = Omit<OffloadOptions, "cacheTtl"> & {
  readonly policy?: CompactionPolicy | undefined
  readonly thinking?: ThinkingConfig | undefined
  /**
   * The estimated tokens of what the requests carry beside the view (the system prompt and tools,
   * `Tokens.systemAndToolsTokens`), which the trigger adds to the view's estimate when it runs on the estimate (the
   * latest reply reported no usage); default 0.
   */
  readonly headTokens?: number | undefined
}

/** What `prepareStep` decided: its changes (closing calls, offloading) and whether the trigger now fires. @category models */
export interface PrepareStep {
  /** The changes made (closing unanswered calls, offloading) and the state after them. */
  readonly transition: Transition
  /** Whether the compaction trigger fires for that state: compact before sending. */
  readonly compact: boolean
}

/**
 * The pure part of `Conversation#prepare`: answers abandoned calls, offloads stale tool output
 * (`Evict.evictStaleToolResults`, the hot paths pinned, the hot paths told), and says whether compaction must run now
 * (the latest reply's reported usage plus the estimate of the messages appended after it, the tool results it asked
 * for among them, against the policy's trigger, `Policy.shouldCompact`; when that reply reported none, or no reply
 * did yet, or it measured the view before the latest compaction, the library's estimate of the whole request, the
 * view as the API counts it plus `headTokens`, so a conversation recorded without usage compacts at the same
 * trigger; or the latest reply stopped with `model_context_window_exceeded`). `cacheCold`: the provider's cache
 * is known to have expired (the last request is older than the policy's `cacheTtl`). The service and the simulator
 * both run exactly this; the eviction prices a rewrite at the write price of the policy's `cacheTtl`. After a reply
 * that stopped with `pause_turn` and is still last, nothing changes (the same request continues the turn); after one
 * that stopped with `compaction` (the server's block, threshold mode), the files message follows the block and nothing
 * else changes.
 * @category transitions
 */
export const prepareStep = (
  state: ConversationState,
  options: StepOptions = {},
  cacheCold?: boolean | undefined
): PrepareStep => {
  if (continuesPausedTurn(state)) return { transition: none(state), compact: false }
  const policy = options.policy ?? defaultPolicy
  if (resumesServerCompaction(state)) {
    return { transition: filesAfterBlock(state, policy, options.classifier), compact: false }
  }
  // append-only (`OffloadOptions.appendOnly`): no offload between compactions; the compaction applies them
  const reason = appendOnlyReason(options, state.appendOnly)
  const closed = closePending(reason === state.appendOnly ? state : { ...state, appendOnly: reason })
  const head = options.headTokens ?? 0
  if (reason !== undefined) return { transition: closed, compact: triggerFires(closed.state, policy, cacheCold, head) }
  const transition = chain(closed, (s) => offloadStaleResults(s, { ...options, cacheTtl: policy.cacheTtl }, cacheCold))
  const compact = triggerFires(transition.state, policy, cacheCold, head)
  if (!compact && deferredToCompaction(closed.state, transition.state, policy, options)) {
    return { transition: closed, compact: false }
  }
  return { transition, compact }
}

/**
 * On a thread (`threadRestart`'s `margin`): whether the offload from `before` to `after` waits for the compaction,
 * because the context it leaves (what the trigger reads, `triggerContext`: the last reported one plus what the view
 * gained since, less the tokens freed) stays within the margin of the trigger. Only an offload that breaks a thread
 * the next request would continue waits.
 */
const deferredToCompaction = (
  before: ConversationState,
  after: ConversationState,
  policy: CompactionPolicy,
  options: StepOptions
): boolean => {
  const price = threadPriceOf(options)
  const usage = before.usage
  if (price === undefined || after.view === before.view || before.thread === undefined) return false
  if (usage === undefined || usage.requestEpoch !== before.epoch) return false
  const freed = viewTokens(before) - viewTokens(after)
  const trigger = Math.min(policy.compactAtTokens, policy.contextWindow - policy.minRemaining)
  return defersToCompaction(price, triggerContext(before, options.headTokens ?? 0).tokens - freed, trigger)
}

/**
 * Appends `Summary.filesMessage` of the files the view read and modified before the server's block (an earlier
 * summary's appendix and files messages merged in), as after a compaction of our own, within what the policy's
 * summary budget leaves beside the block's reply (`filesRoom`); nothing when there are none.
 */
const filesAfterBlock = (
  state: ConversationState,
  policy: CompactionPolicy,
  classifier: ToolClassifier | undefined
): Transition => {
  const view = asMessages(state.view)
  const before = view.slice(0, -1)
  const opening = before[0] === undefined ? undefined : summaryText(before[0])
  const files = [
    ...(opening === undefined ? [] : [parseAppendix(opening) ?? noFiles]),
    ...before.flatMap((m) => filesOfMessage(m) ?? []),
    filesTouched(before, classifier)
  ].reduce(mergeFiles, noFiles)
  if (files.read.length === 0 && files.modified.length === 0) return none(state)
  const room = filesRoom(policy.summaryBudgetTokens, estimateTokens(view.slice(-1)))
  return appendStep(state, filesMessage(files, room) as MessageParam)
}

/**
 * Applies a finished compaction of `state.view` (from `prepareCompaction` → summary → `finishCompaction`): the view
 * becomes the compacted one and the epoch advances. No change when it was skipped. With `options` that send on threads
 * (`OffloadOptions.threads`, `threadRestart` not `false`), the offloads the compacted view is due follow in the same
 * transition (as on a cold cache: everything after the summary is rewritten anyway), so the one restart the
 * compaction costs covers them too.
 * @category transitions
 */
export const applyCompaction = (
  state: ConversationState,
  finished: FinishedCompaction<MessageParam>,
  options?: StepOptions
): Transition => {
  if (finished.record === undefined) return none(state)
  const compacted = compactionStep(state, keptThinking(finished, options))
  if (options === undefined) return compacted
  if (threadPriceOf(options) === undefined && appendOnlyReason(options, state.appendOnly) === undefined) {
    return compacted
  }
  // turns kept verbatim after the server's block keep their thinking valid only as they are: their offloads wait
  if (finished.keptVerbatim === true && asMessages(finished.messages).some(holdsThinking)) return compacted
  // the compaction restarts the thread and rewrote everything after the summary: its kept tail's offloads go now
  const cacheTtl = (options.policy ?? defaultPolicy).cacheTtl
  return chain(compacted, (s) => offloadStaleResults(s, { ...options, cacheTtl }, true))
}

/**
 * `finished` with the thinking of its kept turns left out (`StepOptions.staleThinking` `"strip"`, the default), the
 * view and its record the same new array; as it is with `"bind"` (and a thinking config) or when it holds none.
 */
const keptThinking = (
  finished: FinishedCompaction<MessageParam>,
  options: StepOptions | undefined
): FinishedCompaction<MessageParam> => {
  if (finished.keptVerbatim === true) return finished
  if (staleThinkingOf(options?.staleThinking, options?.thinking) === "bind") return finished
  const view = withoutThinking(asMessages(finished.messages)) as unknown as Array<MessageParam>
  if (view === (finished.messages as unknown)) return finished
  return { ...finished, messages: view, record: { ...finished.record!, view } }
}

const compactionStep = (state: ConversationState, finished: FinishedCompaction<MessageParam>): Transition => {
  const view = finished.messages
  // the kept turns' thinking was bound to the head the summary replaced, unless they follow the server's block
  // verbatim: then only what was already unbound in them stays so (one message after the block for each kept one)
  const cut = finished.record!.cut
  const unbound = finished.keptVerbatim === true
    ? (state.unboundThinking ?? []).filter((p) => p.message >= cut).map((p) => ({ ...p, message: p.message - cut + 1 }))
    : allThinking(asMessages(view))
  const { unboundThinking: _, backgroundCut: _cut, ...rest } = state
  const next: ConversationState = withThread({
    ...rest,
    view,
    epoch: state.epoch + 1,
    carried: CarriedIndex.fresh(asMessages(view)),
    ...(unbound.length === 0 ? {} : { unboundThinking: unbound })
  }, undefined)
  return { steps: [{ change: Change.CompactionApplied({ record: finished.record! }), state: next }], state: next }
}
