/**
 * Concept: the conversation service, the agent loop for Effect code over the state value.
 *
 * The conversation service: the agent loop as one owned API over a `ConversationState`, the front door for Effect
 * code. It runs the state's pure transitions (`ConversationState`), hands out the request each state sends
 * (`Request`), compacts when the trigger fires (its `Summarizer`, in the background with `CompactionPolicy.
 * backgroundAt`), and serializes its steps. Everything a step decides from is a field of its state: a state copied
 * into another service, or resumed from the log, decides as the live one; only the background summary's fiber lives
 * in the service (its cut is in the state).
 *
 * Two layers of the service, told apart by their types: `layerMemory` needs only a `Summarizer`; `layerLogged` also
 * needs a `SessionLog`, resumes from it and records every transition in it (`Conversation.layerLogged(options)` with
 * the barrel's namespace, as Effect's `Chat.layerPersisted`; the service class carries the same two as statics).
 *
 * @since 0.1.0
 */
import type Anthropic from "@anthropic-ai/sdk"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Semaphore from "effect/Semaphore"
import { ttlMs } from "./internal/cacheTtl.ts"
import { minCacheableTokens } from "./Cache.ts"
import { type CompactionPlan, CompactOutcome } from "./Compact.ts"
import {
  type AppendMends,
  appendMessage,
  applyCompaction,
  Change,
  type ConversationState,
  emptyState,
  type MessageParam,
  type OffloadOptions,
  type PrepareStep,
  prepareStep,
  recordReply,
  type SdkReply,
  type Transition
} from "./ConversationState.ts"
import type { Offloaded } from "./Offload.ts"
import { type Request, requestOf, type RequestOptions } from "./Request.ts"
import { CarriedIndex } from "./internal/conversation/carried.ts"
import { logSkip } from "./internal/conversation/skipLog.ts"
import { finishCounted, prepareCounted } from "./internal/conversation/counted.ts"
import { systemAndToolsTokens } from "./internal/estimate.ts"
import { type CacheBreakpointError, callerMarks, callerMarksError } from "./internal/breakpoints.ts"
import { type ArrivedSummary, makeBackground } from "./internal/conversation/background.ts"
import { headAfter, recordChange, recordCompaction, storesSame, type Written } from "./internal/conversation/record.ts"
import { resumeFrom, resumeState } from "./internal/conversation/resume.ts"
import { ConversationError } from "./internal/conversation/error.ts"
import {
  CONTINUE_REQUEST_OPTIONS,
  isThreadLostAgain,
  isThreadReplayError,
  isThreadUnsupportedError,
  threadRecordOf
} from "./internal/conversation/thread.ts"
import type { ThinkingConfig } from "./internal/conversation/thinking.ts"
import { type CachePrediction, learnFromReply, predictionFor } from "./internal/conversation/diagnostics.ts"
import {
  continuesPausedTurn,
  countFires,
  overflowed,
  resumesServerCompaction,
  triggerContext,
  viewTokens
} from "./internal/conversation/stepChecks.ts"
import { asMessages, isSdkReply } from "./internal/conversation/wire.ts"
import { appendRefusal, replyRefusal } from "./internal/conversation/input.ts"
import { answerFrom, type RecallOptions, renderAnswer } from "./internal/recall.ts"
import { type CompactionPolicy, defaultPolicy, type ReportedUsage } from "./Policy.ts"
import type { SessionLogShape } from "./SessionLog.ts"
import { SessionLog, SessionLogError } from "./SessionLog.ts"
import { Summarizer } from "./Summarizer.ts"
import { TokenCounter } from "./TokenCounter.ts"
import { defaultToolClassifier } from "./Tools.ts"
import type { Message } from "./Message.ts"
import { pendingCall, shortenResults } from "./internal/shorten.ts"

export { ConversationError } from "./internal/conversation/error.ts"

/** Options of a conversation service. Every option may be `undefined`, which means its default. @category models */
export interface ConversationOptions extends Omit<OffloadOptions, "cacheTtl"> {
  /** Default `defaultPolicy`. */
  readonly policy?: CompactionPolicy | undefined
  /**
   * The system prompt every request carries. Its blocks' own `cache_control` marks are kept and count toward the
   * request's 4 breakpoints, as do the tools' (see `Request.requestOf`): marks no request could carry fail the
   * conversation's build with a `Cache.CacheBreakpointError` naming the mark.
   */
  readonly system?: string | Array<Anthropic.TextBlockParam> | undefined
  /** Tokens a compaction must free (see `compactContext`). */
  readonly minFreedTokens?: number | undefined
  /**
   * The tools every request carries (a breakpoint ends them when there is no system prompt); their own
   * `cache_control` marks are kept and count, as the system prompt's do.
   */
  readonly tools?: ReadonlyArray<Anthropic.ToolUnion> | undefined
  /** The model; it sets the minimum cacheable length of the breakpoints. */
  readonly model?: string | undefined
  /**
   * Ask the API why each request missed the cache: every request carries `diagnostics:
   * { previous_message_id }`, the id of the latest recorded SDK reply (`null` before the first), `Prepared.
   * cachePrediction` is the library's own prediction for it (its missed tokens calibrated by the usage that reply
   * reported), and the reply's `state.reply.cacheDiagnosis` holds the prediction beside the reported
   * `cache_miss_reason` and whether they agree. Default off.
   */
  readonly diagnostics?: boolean | undefined
  /** The thinking config every request carries (see `RequestOptions.thinking`: the binding after a rewrite). */
  readonly thinking?: ThinkingConfig | undefined
}

/** What `prepare` returns: the request, the epoch it was built in, and what this step did to the view. @category models */
export interface Prepared {
  /** The request to send next. */
  readonly request: Request
  /** The state's compaction epoch the request was built in; pass it back with the reply's usage. */
  readonly epoch: number
  /**
   * The tool results this step offloaded: before its compaction (positions in the view before it) and, with
   * `threads`, those the compaction's kept tail was due, applied in the same rewrite (positions in the compacted view).
   */
  readonly offloaded: ReadonlyArray<Offloaded>
  /** The compaction this step ran, when the trigger fired (`Skipped` when it found nothing worth compacting). */
  readonly compaction: CompactOutcome | undefined
  /**
   * When `request` continues a thread: the same step as one `thread: { type: "create" }` request with the whole
   * view, to send instead when the API answers `thread_not_found`, `thread_already_continued`,
   * `thread_continue_in_flight` or `thread_fingerprint_mismatch` (`threadReplay(prepared, error)` picks it). Absent
   * otherwise.
   */
  readonly fullRequest?: Request | undefined
  /**
   * The calls of the latest reply the caller never answered (ids as the caller knows them): this step answered each
   * with an interrupted error result, as the API needs every call answered, and logged a warning. Absent when none.
   */
  readonly interrupted?: ReadonlyArray<string> | undefined
  /**
   * When `request` continues a thread: the SDK request options to send it with, `{ maxRetries: 0 }`.
   * SDK 1.17 sends a non-streamed request again when its response body is cut; a `continue` sent again meets
   * `thread_already_continued`, and its replay costs the lost reply and an upload of the whole view. Retry such a
   * request on your own schedule. Absent otherwise.
   */
  readonly requestOptions?: { readonly maxRetries: 0 } | undefined
  /**
   * When `request` continues from the reply to a replay of a lost thread: a `thread_not_found` now means the server
   * is not keeping this conversation's threads, and `threadReplay` answers it without `thread`.
   */
  readonly replacesLostThread?: true | undefined
  /**
   * With a `TokenCounter` in the layer: its count of the request this step checked the trigger on (the view after the
   * offload, before any compaction). When `exact`, the trigger and `minFreedTokens` went by it; otherwise (the
   * estimate counter, or `count_tokens` failed: `error` says why) by the reported usage and the estimates.
   */
  readonly count?: TokenCounter.Count | undefined
  /**
   * With diagnostics on: what the library's cache model predicts the API reports for `request` against the request
   * the latest reply answered: `null` for no divergence (a hit of everything that request cached), else the reason
   * (`model_changed`, `system_changed`, `tools_changed`, `messages_changed`), the estimated missed input tokens and
   * the first block that differs. Absent without diagnostics, and when that request was not seen (after a resume).
   */
  readonly cachePrediction?: CachePrediction | undefined
}

/**
 * The request to send after the API refused `prepared.request` on its thread (`error` is the SDK's
 * typed `Thread*Error`, an `APIError`, or its parsed body):
 * - `thread_not_found`, `thread_already_continued`, `thread_continue_in_flight` or `thread_fingerprint_mismatch`:
 *   `prepared.fullRequest`, the whole view under `thread: { type: "create" }` (`undefined` for a request that started
 *   its thread already);
 * - `thread_unsupported_request` (a field or an organization setting threads refuse), or `thread_not_found` on a
 *   `continue` from the reply to a replay of a lost thread (`prepared.replacesLostThread`: lost twice in a row, so the
 *   server is not keeping threads): the whole view without `thread`, from a `continue` or a `create`. Record its reply
 *   with `{ unthreaded: true }`: every later request of the conversation then goes without `thread`, as the SDK's
 *   `unsupportedRequestBehavior: "continue_unthreaded"`;
 * - any other error: `undefined`.
 * @category transitions
 */
export const threadReplay = (prepared: Prepared, error: unknown): Request | undefined => {
  if (isThreadUnsupportedError(error) || isThreadLostAgain(prepared.replacesLostThread === true, error)) {
    const full = prepared.fullRequest ?? prepared.request
    if (full.thread === undefined) return undefined
    const { thread: _thread, ...unthreaded } = full
    return unthreaded
  }
  return prepared.fullRequest !== undefined && isThreadReplayError(error) ? prepared.fullRequest : undefined
}

/** What `compact` returns: the request after it and the outcome. @category models */
export interface RequestAfterCompaction {
  /**
   * The request to send next, built from the state after the compaction. While calls of the latest reply wait for
   * their results (`compact` asked while a tool runs), it ends on them: append the results, then `prepare`.
   */
  readonly request: Request
  /** What the compaction did: `Skipped` (with why), `Compacted` or `FellBack`. */
  readonly outcome: CompactOutcome
}

/** The steps of an agent loop. Each is serialized with the others. @category services */
export interface ConversationShape {
  /**
   * The current state. After a step whose write failed with its outcome unknown (`ConversationError`), the state
   * before that change, until the next step finds out from the log whether it landed.
   */
  readonly state: Effect.Effect<ConversationState>
  /**
   * Appends a user or system message, or tool results (see `appendMessage`): the SDK's `MessageParam`, or its beta
   * `BetaMessageParam` (the tool results `BetaToolRunner.generateToolResponse` returns), kept in the wire format. An
   * assistant message is refused (`ConversationError` `Refused`, nothing changed): replies go to `recordReply`. So is,
   * on every layer and before anything is logged, a message that does not decode, a block its role cannot hold
   * (`tool_use` or thinking from a user, anything but text and tool changes in a system message), blank content (an
   * empty or whitespace-only string, empty content, a blank text block, a system message with neither content nor an
   * `output_config` field: the API refuses each), a system message after the assistant's reply (unless it ends in a
   * server tool result) or after another system message, and a user message after a system message (the assistant's
   * turn comes next, also after a reply with empty content, which adds no message: send the request again, or record
   * a reply with content): the cause is a `MessageDecodeError` naming the path and what to do instead. A result that
   * answers no pending call is dropped, and calls a message with other content leaves unanswered are answered as
   * interrupted (the API accepts neither otherwise); each is logged as a warning.
   */
  readonly append: (
    message: MessageParam | Anthropic.Beta.BetaMessageParam
  ) => Effect.Effect<ConversationState, ConversationError<ConversationState>>
  /**
   * Records an assistant reply (a `MessageParam` or the SDK's reply) with its reported usage (see `recordReply`). A
   * reply recorded with no usage (a `MessageParam` and no `usage`) leaves the trigger to the library's estimate of the
   * request until a reply reports one; the next `prepare` logs a warning saying so, once per conversation.
   * Anything else (a Promise not awaited, `withResponse()`'s `{ data, response }`, a stream, a bare content array, a
   * user or system message), a reply that does not decode or that holds a `tool_result`, is refused (`ConversationError`
   * `Refused`, a `MessageDecodeError` cause; nothing changed or logged), as is the SDK's reply recorded last given
   * again (its id). A reply with empty content (or only blank text) is taken and adds no message (after a system
   * message, the assistant's turn is then still to come: see `append`); its usage (an SDK reply's, or the `usage`
   * given beside a `MessageParam`), id and stop reason are kept all the same, and logged, so a resumed conversation
   * compacts as this one does.
   * `unthreaded`: the request went without `thread` (`threadReplay`'s answer to `thread_unsupported_request`), so the
   * reply anchors no thread and, with threads on, every later request goes without `thread`: the reply's metadata
   * keeps it, so a conversation resumed from the log does not try a thread again. `replayedAfter`: the error the
   * replay answered (`threadReplay(prepared, error)`); after `thread_not_found` the reply's anchor remembers it, and a
   * second `thread_not_found` in a row goes on without `thread`.
   */
  readonly recordReply: (
    message: MessageParam | SdkReply,
    usage?: ReportedUsage | undefined,
    options?: {
      readonly requestEpoch?: number | undefined
      readonly unthreaded?: boolean | undefined
      /** The API error `threadReplay` answered with the request this reply answers. */
      readonly replayedAfter?: unknown
    } | undefined
  ) => Effect.Effect<ConversationState, ConversationError<ConversationState>>
  /**
   * Builds the next request: answers abandoned calls, offloads stale output, and compacts when the trigger fires
   * (only here, after the results are in): by the latest reply's reported usage plus the estimate of the messages
   * appended after it (its tool results among them), or, when it reported none, by the estimate of the request with its
   * system prompt and tools (`ConversationState.prepareStep`). A failed summary or persist fails with the request of
   * the state as it was.
   */
  readonly prepare: Effect.Effect<Prepared, ConversationError<Prepared>>
  /**
   * Compacts now (`/compact <focus>`), whatever the trigger says; with `upTo`, summarizes the messages of the view
   * before that index ("summarize up to here", moved to the nearest safe cut at or before it: `CompactOptions.upTo`).
   * Calls still waiting for their results (`state.pending`) are left waiting: the cut stays before the reply that made
   * them, which stays in the kept tail with everything after it (`CompactOptions.callsWaiting`), so the results that
   * arrive next answer them. A `Skipped` pass changes nothing, in the state or in the log.
   */
  readonly compact: (
    options?: { readonly instructions?: string | undefined; readonly upTo?: number | undefined } | undefined
  ) => Effect.Effect<RequestAfterCompaction, ConversationError<RequestAfterCompaction>>
  /**
   * Answers a call of the `recall` tool (`Recall.recallTool`; give the model the tool and the conversation
   * `recall: true`) from this conversation's session log, with no model call: the text of the call's tool_result
   * (`Recall.renderAnswer`), by reference or by search over what compactions and offloads removed, read from the
   * store as it is now (what any worker wrote). A bad input is answered with what was wrong, for the model to read. A
   * conversation that keeps no log (`layerMemory`) fails with `SessionLogError` `NotFound`; a store failure fails too.
   */
  readonly recall: (input: unknown, options?: RecallOptions | undefined) => Effect.Effect<string, SessionLogError>
}

/**
 * The context the trigger fired on: the exact count, else what the trigger read (`triggerContext`: the latest
 * reported usage plus the estimate of what the view gained since, or the estimate of the request with `head` for its
 * system prompt and tools); infinite after an overflow.
 */
const firedOn = (state: ConversationState, count: TokenCounter.Count | undefined, head: number): number =>
  overflowed(state)
    ? Number.POSITIVE_INFINITY
    : count?.exact === true
    ? count.tokens
    : triggerContext(state, head).tokens

/** A warning for each mend `append` or `prepare` made to the caller's messages (`AppendMends`); nothing when none. */
const logMends = (mends: AppendMends): Effect.Effect<void> =>
  Effect.all([
    mends.droppedResults.length === 0 ? Effect.void : Effect.logWarning(
      `effect-compaction: dropped ${mends.droppedResults.length} tool result(s) that answer no pending call`,
      { toolUseIds: mends.droppedResults }
    ),
    mends.interruptedCalls.length === 0 ? Effect.void : Effect.logWarning(
      `effect-compaction: answered ${mends.interruptedCalls.length} tool call(s) with no result as interrupted`,
      { toolUseIds: mends.interruptedCalls }
    )
  ], { discard: true })

/**
 * The warning a conversation logs once, at the first `prepare` after a reply recorded with no usage: its trigger then
 * runs on the library's estimate of the request instead of the provider's count.
 */
const logNoUsage: Effect.Effect<void> = Effect.logWarning(
  "effect-compaction: a reply was recorded with no usage, so the compaction trigger runs on the library's estimate " +
    "of the request (about 4 characters per token); record the SDK's reply, or pass its usage to recordReply, for " +
    "the provider's count"
)

/**
 * The trigger a pass runs at (`firedOn`) and its scale: the API's tokens it fired on per estimated token of the
 * request they measured (the view as the API counts it, plus `head`, the system prompt and tools), so that
 * `minGrowthTokens` is checked on the trigger's scale (`CompactOptions.tokensPerEstimate`). An exact count's own
 * ratio replaces it (`prepareCounted`). What the view gained since the usage was reported is in the trigger as its
 * estimate, so the ratio measures the same request as the estimate it divides.
 */
const atTheTrigger = (state: ConversationState, count: TokenCounter.Count | undefined, head: number) => {
  const trigger = firedOn(state, count, head)
  const estimate = viewTokens(state) + head
  return { trigger, ...(Number.isFinite(trigger) && estimate > 0 ? { tokensPerEstimate: trigger / estimate } : {}) }
}

/**
 * The transition with `cut` (the background summary's, or none) in its reply's step metadata (the log's record of the
 * pending summary; an empty reply's `EmptyReply` change carries it too) and as the `backgroundCut` of the states from
 * the reply on, as a resume of that log gives it.
 */
const withBackgroundCut = (t: Transition, cut: number | undefined): Transition => {
  const at = t.steps.findIndex((step) =>
    step.change._tag === "Appended"
      ? step.change.meta !== undefined && step.change.message.role === "assistant"
      : step.change._tag === "EmptyReply"
  )
  if (at < 0) return t
  // the usual step: no summary pending, and states that already say so
  if (cut === undefined && t.steps.every((step, k) => k < at || holdsCut(step.state, cut)) && holdsCut(t.state, cut)) {
    return t
  }
  const withCut = (s: ConversationState): ConversationState => ({ ...s, backgroundCut: cut })
  return {
    steps: t.steps.map((step, k) => {
      if (k < at) return step
      const change = k !== at || cut === undefined
        ? step.change
        : step.change._tag === "Appended"
        ? Change.Appended({ message: step.change.message, meta: { ...step.change.meta!, backgroundCut: cut } })
        : step.change._tag === "EmptyReply"
        ? Change.EmptyReply({ meta: { ...step.change.meta, backgroundCut: cut } })
        : step.change
      return { change, state: withCut(step.state) }
    }),
    state: withCut(t.state)
  }
}

/** The tool results a transition offloaded: its last `Offloaded` change's (none when it has none). */
const offloadsOf = (t: Transition): ReadonlyArray<Offloaded> => {
  let offloaded: ReadonlyArray<Offloaded> = []
  for (const s of t.steps) if (s.change._tag === "Offloaded") offloaded = s.change.offloaded
  return offloaded
}

/** The state has the fields `issued` and `cacheLearning`, equal to these. */
const holdsFields = (
  s: ConversationState,
  issued: ConversationState["issued"],
  cacheLearning: ConversationState["cacheLearning"]
): boolean => s.issued === issued && s.cacheLearning === cacheLearning && "issued" in s && "cacheLearning" in s

/** The state has a `backgroundCut` field, equal to `cut`. */
const holdsCut = (s: ConversationState, cut: number | undefined): boolean =>
  s.backgroundCut === cut && "backgroundCut" in s

/**
 * A change whose write failed with its outcome unknown: the store failed while or after it wrote, and its error names
 * the entries it tried (`SessionLogError.entryIds`). The conversation's next step finds out whether it landed.
 */
interface Uncertain {
  /** The log's head once the change landed: the last entry its write tried. */
  readonly head: string
  /** The change. */
  readonly change: Change
  /** The state after it. */
  readonly state: ConversationState
  /** A compaction `compact` made: the call's options and the outcome it returns, for a retry of the same call. */
  readonly compacted?: {
    readonly instructions: string | undefined
    readonly upTo: number | undefined
    readonly outcome: CompactOutcome
  }
}

const make = (
  initial: ConversationState,
  log: SessionLogShape | undefined,
  options: ConversationOptions,
  openedAt: string | null = null
) =>
  Effect.gen(function* () {
    const summarizer = yield* Summarizer
    const counter = Option.getOrUndefined(yield* Effect.serviceOption(TokenCounter))
    const lock = yield* Semaphore.make(1)
    const policy = options.policy ?? defaultPolicy
    // the caller's own `cache_control` marks on the system prompt and tools that no request could carry: refused
    // here, when the conversation is built (every `prepare` would fail on them)
    const marksProblem = callerMarksError(callerMarks(options.tools, options.system), policy.cacheTtl)
    if (marksProblem !== undefined) return yield* Effect.fail(marksProblem)
    // the system prompt and tools every request carries, in estimated tokens
    const head = systemAndToolsTokens(options.system as never, options.tools)
    const background = makeBackground(summarizer, yield* Effect.scope, policy, { ...options, headTokens: head })
    // a state built by hand gets a carry for its view, so its first eviction's index is kept for the next step
    let state: ConversationState = initial.carried?.view === asMessages(initial.view)
      ? initial
      : { ...initial, carried: CarriedIndex.fresh(asMessages(initial.view)) }
    const { classifier, model, tools, thinking } = options
    const requestOptions = (before?: ConversationState): RequestOptions => ({
      tools,
      model,
      classifier,
      before,
      ttl: policy.cacheTtl,
      thinking
    })
    // what the service remembers between steps is in the state (`lastRequestAt`, `unthreaded`, `issued`,
    // `cacheLearning`, `backgroundCut`): threads go on until a reply to an unthreaded replay
    const threading = () => options.threads === true && state.unthreaded !== true
    const minTokens = minCacheableTokens(model)
    /**
     * The request for the current state as it goes out, with `fields`: on its thread, a `continue` built from the
     * messages after the anchor alone, beside it the whole view under `create` (`fullRequest`), built only when read;
     * with diagnostics on, each carries `diagnostics` and the step has the library's `cachePrediction`.
     */
    const issue = <A extends object>(
      before: ConversationState | undefined,
      fields: A
    ): A & Pick<Prepared, "request" | "fullRequest" | "cachePrediction"> => {
      const built = requestOptions(before)
      const previousId = options.diagnostics === true ? state.reply?.id : undefined
      const diagnosed = (r: Request): Request =>
        options.diagnostics === true ? { ...r, diagnostics: { previous_message_id: previousId ?? null } } : r
      let whole: Request | undefined
      let prediction: Pick<Prepared, "cachePrediction"> = {}
      if (options.diagnostics === true) {
        // the prediction compares the whole requests, on a thread or not
        whole = diagnosed(requestOf(state, options.system, built))
        const predicted = predictionFor(state.cacheLearning, previousId, whole, { model, headTokens: head, minTokens })
        state = { ...state, issued: { ...state.issued, diagnosed: { full: whole, predicted } } }
        if (previousId !== undefined) prediction = { cachePrediction: predicted }
      }
      // the view the request is built from: its reply keeps its thinking bound only right after it (`recordReply`)
      state = { ...state, issued: { ...state.issued, sent: state.view.length } }
      if (!threading()) return { request: whole ?? requestOf(state, options.system, built), ...prediction, ...fields }
      const request = diagnosed(requestOf(state, options.system, { ...built, thread: true }))
      if (request.thread?.type !== "continue") return { request, ...prediction, ...fields }
      const at = state
      let full: Request | undefined
      const continued = {
        request,
        requestOptions: CONTINUE_REQUEST_OPTIONS,
        ...(state.thread?.replacesLost === true ? { replacesLostThread: true as const } : {}),
        ...prediction,
        ...fields
      }
      return Object.defineProperty(continued, "fullRequest", {
        enumerable: true,
        get: (): Request => (full ??= {
          ...(whole ?? diagnosed(requestOf(at, options.system, built))),
          thread: { type: "create" }
        })
      }) as A & Pick<Prepared, "request" | "fullRequest" | "cachePrediction">
    }
    const request = () => issue(undefined, {}).request
    /** The counter's count of the whole request for `s` (none without a counter or with an empty view). */
    const countOf = (s: ConversationState, before?: ConversationState) =>
      counter === undefined || s.view.length === 0
        ? Effect.succeed(undefined)
        : counter.count(requestOf(s, options.system, requestOptions(before)))

    /**
     * Records each change, then makes the state after it current; on failure the state is the last stored one. A
     * transition with no change only sets the state.
     */
    const persist = <A>(t: Transition, fallback: () => A): Effect.Effect<void, ConversationError<A>> =>
      t.steps.length === 0
        ? Effect.sync(() => void (state = t.state))
        : t.steps.length === 1
        ? persistStep(t.steps[0]!, fallback, state)
        // each change is stored with the state it was made in: the one the change before it made current
        : Effect.forEach(t.steps, (step) => Effect.suspend(() => persistStep(step, fallback, state)), { discard: true })
    /**
     * Makes `t`'s final state current: at once when there is nothing to record (no log, or no change), the answer
     * `undefined` then; else the effect that records each change first (`persist`).
     */
    const commit = <A>(t: Transition, fallback: () => A): Effect.Effect<void, ConversationError<A>> | undefined => {
      if (log !== undefined && t.steps.length > 0) return persist(t, fallback)
      state = t.steps.length === 0 ? t.state : t.steps[t.steps.length - 1]!.state
      return undefined
    }
    /**
     * The log's head the state was derived to (`openedAt`, then the last entry this conversation wrote): each change is
     * stored only right after it (`WriteCondition.ifHead`), so a change made on a state that misses another writer's
     * entries fails with `Conflict`, nothing written, instead of landing after them.
     */
    let knownHead = openedAt
    /**
     * The change whose write failed with its outcome unknown, until the next step finds out whether it landed
     * (`settle`, before anything else of that step).
     */
    let uncertain: Uncertain | undefined
    /**
     * Once `written` (the record of `change`) is stored: the log's head it leaves is the one known, and `after` is the
     * state; a failure is the step's `Persist` error, with `fallback()` as its value, and when the store may have
     * written the change all the same (the error names its entries), the change is `uncertain`. One continuation for
     * both outcomes (not a `tap` and a `mapError`): this runs for every logged change.
     */
    const stored = <A>(
      written: Effect.Effect<Written, SessionLogError>,
      change: Change,
      after: ConversationState,
      fallback: () => A
    ): Effect.Effect<void, ConversationError<A>> =>
      Effect.matchEffect(written, {
        onFailure: (cause) => {
          const tried = cause.entryIds
          if (tried !== undefined && tried.length > 0) {
            uncertain = { head: tried[tried.length - 1]!, change, state: after }
          }
          return Effect.fail(new ConversationError({ reason: "Persist", cause, value: fallback() }))
        },
        onSuccess: (w) => {
          knownHead = headAfter(w)
          state = after
          return Effect.void
        }
      })
    /** Records one change (stored with the state it was made in, `before`, and the state after it), then sets it. */
    const persistStep = <A>(step: Transition["steps"][number], fallback: () => A, before: ConversationState) =>
      log === undefined
        ? Effect.sync(() => void (state = step.state))
        : stored(recordChange(log, step.change, before, step.state, knownHead), step.change, step.state, fallback)

    /**
     * Records a compaction's transition (`applyCompaction`): the compaction and the offloads applied with it (the
     * `Offloaded` change after it) in one append, then makes the state after both current; so a crash leaves the state
     * before the compaction or the one after its offloads, never the compaction alone. Any other shape: `persist`.
     */
    const persistCompaction = <A>(t: Transition, fallback: () => A): Effect.Effect<void, ConversationError<A>> => {
      const [compacted, offloads] = t.steps
      if (
        log === undefined || t.steps.length !== 2 || compacted?.change._tag !== "CompactionApplied" ||
        offloads?.change._tag !== "Offloaded"
      ) return persist(t, fallback)
      return stored(
        recordCompaction(log, compacted.change, offloads.change, state, compacted.state, knownHead),
        compacted.change,
        offloads.state,
        fallback
      )
    }

    /**
     * Finds out whether the `uncertain` change landed, before a step does anything else: catches up with the log, then
     * adopts the change when the log's head is its last entry (the state after it is current, its entry the known
     * head), or forgets it when the head is still the one known (nothing landed). Answers the change it adopted, or
     * `undefined`. Any other head means another writer appended since: the step fails with `Persist` (`Conflict`),
     * nothing written, as every step does until the conversation is reopened; so does a failed catch-up (the next step
     * tries again).
     */
    const settle = <A>(fallback: () => A): Effect.Effect<Change | undefined, ConversationError<A>> =>
      Effect.matchEffect(log!.catchUp, {
        onFailure: (cause) => Effect.fail(new ConversationError({ reason: "Persist", cause, value: fallback() })),
        onSuccess: ({ head }) => {
          const doubt = uncertain!
          if (head === doubt.head) {
            uncertain = undefined
            knownHead = head
            state = doubt.state
            return Effect.succeed(doubt.change)
          }
          if (head === knownHead) {
            uncertain = undefined
            return Effect.succeed(undefined)
          }
          return Effect.fail(
            new ConversationError({
              reason: "Persist",
              cause: new SessionLogError({
                reason: "Conflict",
                sessionId: log!.sessionId,
                detail: `another writer appended to the session after a step of this conversation whose write ` +
                  `failed with its outcome unknown (the log's head is entry ${head}, neither the last entry this ` +
                  `conversation knows nor the one that step tried); nothing was written: reopening continues from ` +
                  `the log, with every writer's entries`
              }),
              value: fallback()
            })
          )
        }
      })
    /**
     * A step after a change whose write failed with its outcome unknown (`uncertain`): `settle`, then `run` the step
     * from the state settled, unless the change adopted is the one the step stores last when made in the state the
     * failed step left (`made`: the same message, so the failed step tried again), which is then done, with
     * `done()` its value and nothing written again.
     */
    const afterUncertain = <A>(
      made: Transition | undefined,
      fallback: () => A,
      done: () => Effect.Effect<A, ConversationError<A>>,
      run: () => Effect.Effect<A, ConversationError<A>>
    ): Effect.Effect<A, ConversationError<A>> =>
      Effect.flatMap(settle(fallback), (adopted) => {
        const last = made?.steps.at(-1)
        return adopted !== undefined && last !== undefined && storesSame(adopted, last.change) ? done() : run()
      })

    /** Compacts now: the outcome, and (with threads on) the offloads applied to its kept tail (one restart covers both). */
    const compactNow = <A>(
      instructions: string | undefined,
      fallback: () => A,
      upTo?: number | undefined,
      counted?: TokenCounter.Count | undefined,
      atTrigger?: true,
      arrived?: ArrivedSummary
    ) =>
      Effect.gen(function* () {
        // with an exact count before and after, `minFreedTokens` is checked on them (internal/conversation/counted.ts)
        const before = counted ?? (yield* countOf(state))
        const plan = arrived !== undefined ?
          arrived.plan as CompactionPlan<MessageParam> :
          prepareCounted(state.view, policy, {
            instructions,
            upTo,
            minFreedTokens: options.minFreedTokens,
            classifier: options.classifier,
            unboundThinking: state.unboundThinking,
            // `compact()` while calls wait for their results: they stay open, in the kept tail
            callsWaiting: state.pending.length > 0,
            ...(atTrigger === true ? atTheTrigger(state, before, head) : {})
          }, before)
        if (plan._tag === "Skip") return { outcome: plan.result.outcome, offloaded: [] }
        // at the trigger, the summary made in the background (`CompactionPolicy.backgroundAt`), if it is usable
        const ready = arrived ?? (atTrigger === true ? yield* background.take(state, plan) : undefined)
        const summary = ready?.summary ?? (yield* summarizer.summarize(plan.request).pipe(
          Effect.mapError((cause) => new ConversationError({ reason: "Summarize", cause, value: fallback() }))
        ))
        const finished = yield* finishCounted(
          ready === undefined ? plan : ready.plan as typeof plan,
          summary,
          before,
          options.minFreedTokens,
          (candidate) => countOf(applyCompaction(state, candidate, { ...options, threads: threading(), policy }).state)
        )
        const applied = applyCompaction(state, finished, { ...options, threads: threading(), policy })
        yield* atTrigger === true || arrived !== undefined
          ? persistCompaction(applied, fallback)
          // `compact`'s own: a retry of the same call after it landed returns its outcome
          : Effect.tapError(persistCompaction(applied, fallback), () =>
            Effect.sync(() => {
              if (uncertain?.state === applied.state) {
                uncertain = { ...uncertain, compacted: { instructions, upTo, outcome: finished.outcome } }
              }
            }))
        const offloaded = offloadsOf(applied)
        if (finished.record !== undefined) yield* background.drop
        return { outcome: finished.outcome, offloaded }
      })

    /**
     * `prepare` from its step (`prepareStep` at `now`, from `before`, not yet applied): records it, logs the calls it
     * answered as interrupted, swaps in a server compaction block that came back, counts the request with the
     * `TokenCounter`, compacts when the trigger fires, and starts or drops the background summary.
     */
    const prepareFully = (
      now: number,
      cold: boolean,
      before: ConversationState,
      step: PrepareStep,
      interrupted: ReadonlyArray<string>
    ): Effect.Effect<Prepared, ConversationError<Prepared>> =>
      Effect.gen(function* () {
        let offloaded: ReadonlyArray<Offloaded> = []
        let compaction: CompactOutcome | undefined
        let count: TokenCounter.Count | undefined
        const prepared = (): Prepared =>
          issue(undefined, { epoch: state.epoch, offloaded, compaction, ...(count === undefined ? {} : { count }) })
        const persisting = commit(step.transition, prepared)
        if (persisting !== undefined) yield* persisting
        if (interrupted.length > 0) yield* logMends({ droppedResults: [], interruptedCalls: interrupted })
        const noUsage = warnsNoUsage(before)
        offloaded = offloadsOf(step.transition)
        // a server compaction block made in the background goes in on the first request after it came back
        const arrived = background.arrived(state)
        if (arrived !== undefined) {
          const swapped = yield* compactNow(undefined, prepared, undefined, undefined, undefined, arrived)
          compaction = swapped.outcome
          if (swapped.offloaded.length > 0) offloaded = [...offloaded, ...swapped.offloaded]
        }
        const swappedIn = compaction !== undefined && compaction._tag !== "Skipped"
        // a paused turn goes on unchanged, a server compaction is resumed: neither compacts, so neither is counted
        if (counter !== undefined && !continuesPausedTurn(before) && !resumesServerCompaction(before)) {
          count = yield* countOf(state, before)
        }
        // the trigger runs on the estimate (no exact count) because the latest reply reported no usage: said once
        if (noUsage && count?.exact !== true) {
          noUsageWarned = true
          yield* logNoUsage
        }
        const fires = !swappedIn &&
          (count?.exact === true ? countFires(state, policy, cold, count.tokens) : step.compact)
        if (fires) {
          const compacted = yield* compactNow(undefined, prepared, undefined, count, true)
          compaction = compacted.outcome
          if (compacted.offloaded.length > 0) offloaded = [...offloaded, ...compacted.offloaded]
        }
        // without `backgroundAt` there is no summary to start or drop
        if (policy.backgroundAt !== undefined && (compaction === undefined || compaction._tag === "Skipped")) {
          yield* background.refresh(state)
        }
        const skipLogged = compaction === undefined ? state.skipLogged : yield* logSkip(compaction, state.skipLogged)
        state = { ...state, lastRequestAt: now, skipLogged }
        return issue(before, {
          epoch: state.epoch,
          offloaded,
          compaction,
          ...(count === undefined ? {} : { count }),
          ...(interrupted.length === 0 ? {} : { interrupted })
        })
      })

    /**
     * `prepare` at `now`: under the lock (`"locked"`), or at once (`"now"`: `undefined` when it must answer calls,
     * count, swap in or compact, having changed nothing).
     */
    const prepareAt = (
      now: number,
      at: "locked" | "now"
    ): Effect.Effect<Prepared, ConversationError<Prepared>> | undefined => {
      if (uncertain !== undefined) {
        return Effect.flatMap(
          settle(() => issue(undefined, { epoch: state.epoch, offloaded: [], compaction: undefined })),
          () => prepareAt(now, at)!
        )
      }
      const fully = pendingOrSlow()
      if (at === "now" && fully) return undefined
      const last = state.lastRequestAt
      const cold = last !== undefined && now - last >= ttlMs(policy.cacheTtl)
      const before = state
      const step = prepareStep(state, { ...options, threads: threading(), policy, headTokens: head }, cold)
      // calls the caller never answered are answered as interrupted: said, never silent
      const interrupted = before.pending.length > 0 && step.transition.state.pending.length === 0
        ? before.pending.map((p) => p.originalId)
        : []
      if (fully || interrupted.length > 0 || step.compact || warnsNoUsage(before)) {
        return at === "now" ? undefined : prepareFully(now, cold, before, step, interrupted)
      }
      // the common step: nothing to log, count, swap in or compact, so it waits for its record alone
      const offloaded = offloadsOf(step.transition)
      const finish = (): Prepared => {
        state = { ...state, lastRequestAt: now }
        return issue(before, { epoch: state.epoch, offloaded, compaction: undefined })
      }
      const persisting = commit(
        step.transition,
        () => issue(undefined, { epoch: state.epoch, offloaded: [], compaction: undefined })
      )
      return persisting === undefined ? Effect.succeed(finish()) : Effect.map(persisting, finish)
    }
    /** Whether the conversation has logged `logNoUsage` (it does once). */
    let noUsageWarned = false
    /** A `prepare` from `before` logs `logNoUsage`: its latest reply reported no usage, and it was not said yet. */
    const warnsNoUsage = (before: ConversationState) => !noUsageWarned && before.reply?.noUsage === true
    /** A `prepare` that answers calls, counts the request, or keeps a background summary: it runs `prepareFully`. */
    const pendingOrSlow = () => state.pending.length > 0 || counter !== undefined || policy.backgroundAt !== undefined

    /**
     * Steps holding or waiting for the lock, counted without a log: while none does, a step of such a conversation
     * may skip it (`serializedOrNow`).
     */
    let lockedSteps = 0
    const serialized = <A, E>(effect: Effect.Effect<A, E>): Effect.Effect<A, E> =>
      log !== undefined ? Semaphore.withPermits(lock, 1, effect) : Effect.suspend(() => {
        lockedSteps++
        return Effect.ensuring(Semaphore.withPermits(lock, 1, effect), Effect.sync(() => void lockedSteps--))
      })
    /**
     * A step, serialized with the others: `locked` under the lock. A conversation without a log changes its state in
     * synchronous code only, so when no step holds or waits for the lock, `now()` runs at once instead (between two
     * steps, where the lock would place it), unless it answers `undefined` (it would wait for something, or log: it
     * changed nothing, and `locked` runs under the lock).
     */
    const serializedOrNow = <A, E>(
      locked: Effect.Effect<A, E>,
      now: () => Effect.Effect<A, E> | undefined
    ): Effect.Effect<A, E> =>
      Effect.suspend(() => (log === undefined && lockedSteps === 0 ? now() : undefined) ?? serialized(locked))
    // shorten before the first send (`CompactionPolicy.maxToolResultTokens`, internal/shorten.ts)
    const shortened = (message: MessageParam): MessageParam =>
      policy.maxToolResultTokens === undefined ? message : shortenResults(
        message as unknown as Message,
        (id) => pendingCall(asMessages(state.view), state.pending, id),
        classifier ?? defaultToolClassifier,
        policy.maxToolResultTokens
      ) as unknown as MessageParam
    const stateNow = () => state
    if (state.backgroundCut !== undefined) yield* background.resume(state, state.backgroundCut)

    return Conversation.of({
      state: Effect.sync(stateNow),
      append: (message) => {
        const appendNow = (
          at: "locked" | "now"
        ): Effect.Effect<ConversationState, ConversationError<ConversationState>> | undefined => {
          const given = message as MessageParam
          if (uncertain !== undefined) {
            // what this append stores in the state the failed step left: the same message is that step tried again
            const made = given?.role === "assistant" || appendRefusal(state, given) !== undefined
              ? undefined
              : appendMessage(state, shortened(given))
            return afterUncertain(
              made,
              stateNow,
              () => made?.mends === undefined ? Effect.sync(stateNow) : Effect.map(logMends(made.mends), stateNow),
              () => appendNow(at)!
            )
          }
          if ((message as { readonly role?: unknown } | null | undefined)?.role === "assistant") {
            return Effect.fail(
              new ConversationError({
                reason: "Refused",
                cause: {
                  _tag: "AssistantToAppend",
                  message: "append takes user and system messages and tool results; record an assistant reply with " +
                    "recordReply (nothing was changed)"
                },
                value: state
              })
            )
          }
          const refused = appendRefusal(state, given)
          if (refused !== undefined) {
            return Effect.fail(new ConversationError({ reason: "Refused", cause: refused, value: state }))
          }
          const t = appendMessage(state, shortened(given))
          // a mend is logged under the lock
          if (at === "now" && t.mends !== undefined) return undefined
          const persisting = commit(t, stateNow)
          // the record, then the mends' log line; nothing to wait for when neither is
          const mended = t.mends === undefined ? undefined : logMends(t.mends)
          const after = mended === undefined || persisting === undefined
            ? persisting ?? mended
            : Effect.andThen(persisting, mended)
          return after === undefined ? Effect.succeed(state) : Effect.map(after, stateNow)
        }
        return serializedOrNow(Effect.suspend(() => appendNow("locked")!), () => appendNow("now"))
      },
      recordReply: (message, usage, replyOptions) => {
        const record = (): Effect.Effect<ConversationState, ConversationError<ConversationState>> => {
          if (uncertain !== undefined) {
            // the reply this step records in the state the failed step left: the same one is that step tried again
            const made = replyRefusal(state, message) !== undefined
              ? undefined
              : recordReply(state, message, usage, replyOptions?.requestEpoch)
            return afterUncertain(made, stateNow, () => Effect.sync(stateNow), record)
          }
          const refused = replyRefusal(state, message)
          if (refused !== undefined) {
            return Effect.fail(new ConversationError({ reason: "Refused", cause: refused, value: state }))
          }
          if (replyOptions?.unthreaded === true && options.threads === true) state = { ...state, unthreaded: true }
          const sent = state.issued?.sent
          const thread = options.threads === true
            ? threadRecordOf(threading(), sent, replyOptions?.replayedAfter)
            : undefined
          const request = state.issued?.diagnosed
          // the reply's own usage calibrates the estimate of the request it answered (not a `usage` given beside it)
          // and tells its prefix to its last breakpoint exactly; what it teaches is the state's from now on
          const sdk = isSdkReply<SdkReply>(message) ? message : undefined
          const cacheLearning = learnFromReply(state.cacheLearning, request, sdk, head)
          if (!holdsFields(state, undefined, cacheLearning)) state = { ...state, issued: undefined, cacheLearning }
          const diagnosis = request === undefined ? undefined : { predicted: request.predicted }
          const t = recordReply(state, message, usage, replyOptions?.requestEpoch, thread, diagnosis, sent)
          const persisting = commit(withBackgroundCut(t, background.pendingCut(state.epoch)), stateNow)
          return persisting === undefined ? Effect.succeed(state) : Effect.map(persisting, stateNow)
        }
        return serializedOrNow(Effect.suspend(record), record)
      },
      prepare: Effect.clockWith((clock) =>
        serializedOrNow(
          Effect.suspend(() => prepareAt(clock.currentTimeMillisUnsafe(), "locked")!),
          () => prepareAt(clock.currentTimeMillisUnsafe(), "now")
        )
      ),
      compact: (compactOptions) =>
        serialized(Effect.gen(function* () {
          const failed = (): RequestAfterCompaction => ({
            request: request(),
            outcome: CompactOutcome.Skipped({
              reason: "NothingToCut",
              tokens: viewTokens(state),
              field: "upTo",
              detail: "the compaction failed: the view is unchanged"
            })
          })
          if (uncertain !== undefined) {
            const compacted = uncertain.compacted
            const adopted = yield* settle(failed)
            // the same `compact` tried again after its compaction landed: its outcome, nothing compacted twice
            if (
              adopted !== undefined && compacted !== undefined &&
              compacted.instructions === compactOptions?.instructions && compacted.upTo === compactOptions?.upTo
            ) return { request: request(), outcome: compacted.outcome }
          }
          const { outcome } = yield* compactNow(compactOptions?.instructions, failed, compactOptions?.upTo)
          return { request: request(), outcome }
        })),
      recall: (input, recallOptions) =>
        log === undefined
          ? Effect.fail(
            new SessionLogError({
              reason: "NotFound",
              detail: "this conversation keeps no session log (layerMemory); recall answers from the log of a " +
                "logged one (layerLogged)"
            })
          )
          : Effect.map(
            answerFrom(Effect.map(log.load(), ({ entries }) => entries), input, recallOptions),
            renderAnswer
          ).pipe(Effect.withSpan("Conversation.recall", { attributes: { "session.id": log.sessionId } }))
    })
  })

const ConversationBase: Context.ServiceClass<Conversation, "effect-compaction/Conversation", ConversationShape> =
  Context.Service<Conversation, ConversationShape>()("effect-compaction/Conversation")

/**
 * A conversation kept in memory only, from `emptyState` (or `initial`): nothing is persisted. A state taken from
 * another conversation (its `state`, at any step) goes on as that one would: the age of its cache (`lastRequestAt`),
 * the request awaiting its reply (`issued`), the cache diagnostics learned, a refused thread and the background
 * summary's cut are its fields. Needs a `Summarizer`.
 * @category layers
 */
export const layerMemory = (
  options: ConversationOptions & { readonly initial?: ConversationState | undefined } = {}
): Layer.Layer<Conversation, CacheBreakpointError, Summarizer> =>
  Layer.effect(Conversation, make(options.initial ?? emptyState(options.classifier), undefined, options))

/**
 * A conversation recorded in the `SessionLog`: opening resumes from the log's live fold (`resumeState` of
 * `SessionLog.loaded`: the entries the log folded when it opened, not read or decoded again), and every transition
 * is stored before it is applied. A log opened from its tail (the default of `SessionLogOptions.tail`, so
 * `loaded.verifiedFrom` is set; `tail: false` verifies every line) holds only the entries from the tail on: the state resumes from the checkpoint of the last compaction boundary
 * among them (each boundary the conversation records carries one) and the entries after it, reading nothing else.
 * A tail with no checkpoint (a log whose boundaries another writer recorded, or one written before checkpoints) is
 * read once in full (`load()`, up to the log's `seq`), so the state is the live one either way.
 *
 * The state is derived from the log up to its head, so each change is stored only right after the last entry the
 * conversation knows (`WriteCondition.ifHead`): when another writer appended to the session since this conversation's
 * last step (a second conversation on a shared PostgreSQL session, a plain `SessionLog` appender), the step fails with
 * `ConversationError` `Persist` whose cause is `SessionLogError` `Conflict`, nothing written and the state unchanged;
 * reopening the conversation continues from the log, with every writer's entries. Workers that take turns on one
 * session open it for their turn and close it after.
 *
 * A step whose write failed after the store may have written it (its `Persist` cause names `entryIds`: an answer lost
 * with its connection, a failed fsync) leaves the state the one before the change, and the next step first catches up
 * with the log: it adopts the change when its entries landed and drops it when none did, then goes on. So the same
 * step taken again (the same message or reply, `compact` with the same options) stores the change once, and no step
 * writes after entries the state misses: another writer's since then fail every step with `Conflict` until a reopen.
 * Needs a `Summarizer` and a `SessionLog`.
 * @category layers
 */
export const layerLogged = (
  options: ConversationOptions = {}
): Layer.Layer<Conversation, SessionLogError | CacheBreakpointError, Summarizer | SessionLog> =>
  Layer.effect(
    Conversation,
    Effect.gen(function* () {
      const log = yield* SessionLog
      const opened = yield* log.loaded
      const resumed = resumeFrom(opened, options.classifier)
      // the state is the fold's up to its head: every change is stored right after it, or fails with `Conflict`
      if (resumed !== undefined) return yield* make(resumed, log, options, opened.head)
      // the entries up to the log's fold (another worker may have appended since it opened)
      const loaded = { ...opened, entries: (yield* log.load()).entries.slice(0, opened.seq) }
      return yield* make(resumeState(loaded, options.classifier), log, options, opened.head)
    })
  )

/** The conversation service; its layers are the module's `layerMemory` and `layerLogged`. @category services */
export class Conversation extends ConversationBase {
  /** The module's `layerMemory`, also reachable from the service. */
  static readonly layerMemory: typeof layerMemory = layerMemory
  /** The module's `layerLogged`, also reachable from the service. */
  static readonly layerLogged: typeof layerLogged = layerLogged
}
