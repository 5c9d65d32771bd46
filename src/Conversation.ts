/**
 * The agent loop as one owned API: a pure state value with pure transitions, and an Effect service over it.
 *
 * The state (`ConversationState`) is the view sent to the model, the hot paths, the compaction epoch, the tool calls
 * still waiting for results and the last reported usage, and what its transition carries about the view for the next
 * one (`carried`: the eviction index and frontier, so a step costs what it adds). Every transition returns the changes
 * it made (`Transition`), each with the state after it, so the service persists exactly what the pure step produced
 * and commits the state only once its change is stored.
 *
 * The rules every transition keeps, so that every prepared request is one the Messages API accepts:
 * - messages are stored as wire messages: private `_` keys and empty text blocks are dropped, empty messages skipped;
 * - a tool call's results are the only thing that may follow it: anything else (a typed message, another reply, a
 *   prepared request) first answers the calls still pending with an interrupted error result, so no compaction ever
 *   runs while a `tool_use` awaits its result, and a real result is never answered twice;
 * - results that answer no pending call are dropped; a reply that reuses a `tool_use` id already in the view gets a
 *   fresh id (`<id>_2`, …), and its results are matched by the id the caller knows;
 * - the hot paths observe every appended message and every offload, in the order they happen, and a resume replays
 *   the log's entries through the same two calls: a resumed state equals the live one.
 * - thinking blocks are bound to what precedes them (API-RULES 29): the state lists those a rewrite invalidated (an
 *   offload, a compaction, a renamed id or dropped block in a reply: `unboundThinking`, restored on resume), and with
 *   a `thinking` option the request then asks the API to drop them (`block_binding: drop_block` and its beta) instead
 *   of rejecting it; eviction's rent-or-buy counts the thinking an offload would drop.
 *
 * Two layers of the service, told apart by their types: `layerMemory` needs only a `Summarizer`; `layerLogged` also
 * needs a `SessionLog`, resumes from it and records every transition in it (`Conversation.layerLogged(options)` with
 * the barrel's namespace, as Effect's `Chat.layerPersisted`; the service class carries the same two as statics).
 *
 * @since 0.1.0
 */
import type Anthropic from "@anthropic-ai/sdk"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Clock from "effect/Clock"
import * as Option from "effect/Option"
import * as Semaphore from "effect/Semaphore"
import { cacheControlOf, ttlMs } from "./internal/cacheTtl.ts"
import { applyBreakpoints, type BlockPosition, minCacheableTokens, planBreakpoints } from "./Cache.ts"
import { type CompactionRecord, CompactOutcome, type FinishedCompaction } from "./Compact.ts"
import { DEFAULT_KEEP_RECENT } from "./Evict.ts"
import type { Offloaded } from "./Offload.ts"
import { CarriedIndex } from "./internal/conversation/carried.ts"
import { finishCounted, prepareCounted } from "./internal/conversation/counted.ts"
import { systemAndToolsTokens } from "./internal/estimate.ts"
import {
  allThinking,
  boundTokensBefore,
  DROP_BLOCK,
  firstChangedBlock,
  type InputTransformation,
  isBoundBlock,
  mergePositions,
  newlyUnboundTokens,
  THINKING_BINDING_BETA,
  thinkingAfter,
  thinkingIn,
  tokensAt
} from "./internal/thinkingBinding.ts"
import { makeBackground, resumeCut } from "./internal/conversation/background.ts"
import { type Checkpoint, checkpointOf } from "./internal/conversation/checkpoint.ts"
import { META_KEY, offloadsOf, recordChange } from "./internal/conversation/record.ts"
import { ConversationError } from "./internal/conversation/error.ts"
import {
  anchorAfterReply,
  isThreadReplayError,
  isThreadUnsupportedError,
  type ThreadAnchor,
  type ThreadParam
} from "./internal/conversation/thread.ts"
import type { ThinkingConfig } from "./internal/conversation/thinking.ts"
import {
  type CacheDiagnosis,
  type CachePrediction,
  calibrationOf,
  diagnosisAgrees,
  emptyRatios,
  keptPrefixes,
  type KnownPrefix,
  knownPrefixOf,
  learnRatios,
  predictCacheMiss,
  reportedOf
} from "./internal/conversation/diagnostics.ts"
import { defersToCompaction, restartCost, threadRestartOf, type ThreadRestartPrice } from "./internal/threadCost.ts"
import { HotPaths } from "./HotPaths.ts"
import { decodeMessagesSync, type Message } from "./Message.ts"
import { type CompactionPolicy, contextTokens, defaultPolicy, type ReportedUsage, shouldCompact } from "./Policy.ts"
import type { Entry, Loaded } from "./SessionEntry.ts"
import type { SessionLogError, SessionLogShape } from "./SessionLog.ts"
import { SessionLog } from "./SessionLog.ts"
import { Summarizer } from "./Summarizer.ts"
import { estimateTokens } from "./Tokens.ts"
import { TokenCounter } from "./TokenCounter.ts"
import { filesMessage, filesOfMessage, summaryText } from "./Summary.ts"
import { filesTouched, type ToolClassifier } from "./Tools.ts"
import {
  blocksOf as messageBlocks,
  hasOutputConfig,
  isCompactionWithContent,
  isToolResult,
  isToolUse
} from "./internal/blocks.ts"
import { evictionFrontier } from "./internal/eviction.ts"
import { breakpointBefore } from "./internal/breakpoints.ts"
import { LEADING_USER_TEXT, MISSING_RESULT_TEXT } from "./internal/repair.ts"
import { mergeFiles, noFiles, parseAppendix } from "./internal/summary.ts"
import type { MessageEntry } from "./internal/sessionEntry.ts"

/** The SDK's message type: what goes in and what comes out. @category models */
export type MessageParam = Anthropic.MessageParam

/**
 * A request body ready for `client.messages.create` (add `model`, `max_tokens`). It carries the library's
 * `cache_control` breakpoints (see `Cache`); the state it was built from carries none. With a `thinking` option it
 * carries that config; once a rewrite invalidated thinking blocks of the view (API-RULES 29) the config also asks for
 * `block_binding: { prefix_mismatch_behavior: "drop_block" }` (unless it sets its own `block_binding`) and `betas`
 * names the binding beta: send such a request with `client.beta.messages.create`. @category models
 */
export interface Request {
  readonly system?: string | Array<Anthropic.TextBlockParam>
  readonly tools?: Array<Anthropic.ToolUnion>
  readonly messages: Array<MessageParam>
  /**
   * With `ConversationOptions.threads`: the server-held thread (API-RULES 22–24, the beta
   * `message-threads-2026-08-12`). `continue`: `messages` are only those after the reply it names, and the request
   * has no `system` and no `tools`; `create`: the whole view, `system` and `tools` included.
   */
  readonly thread?: ThreadParam
  /**
   * With `ConversationOptions.diagnostics`: the id of the reply the latest request got, so the API reports why this
   * request missed the cache (API-RULES 33); `null` (opted in, nothing to compare) before the first SDK reply.
   */
  readonly diagnostics?: { readonly previous_message_id: string | null }
  readonly thinking?: ThinkingConfig
  readonly betas?: Array<string>
}

// ============================================================================
// The state
// ============================================================================

/**
 * A tool call of the latest reply still waiting for its result: its id in the view and the id the caller knows. @category models
 * @deprecated Use `Conversation.ConversationState`'s `pending` field: each of its entries has this shape.
 */
export interface PendingCall {
  readonly id: string
  readonly originalId: string
}

/**
 * The latest provider-reported usage and the epoch of the request it measured. @category models
 * @deprecated Use `Conversation.ConversationState`'s `usage` field: it has this shape.
 */
export interface UsageReport {
  readonly usage: ReportedUsage
  readonly requestEpoch: number
}

/**
 * The latest reply as the API described it: its id and stop reason when the caller recorded the SDK's reply (a
 * `MessageParam` reply has neither), and the epoch of the request it answered. @category models
 * @deprecated Use `Conversation.ConversationState`'s `reply` field: it has this shape.
 */
export interface ReplyReport {
  readonly id?: string
  readonly stopReason?: string
  readonly requestEpoch: number
  /** The reply's `input_transformations` (the thinking blocks the API dropped or let pass: API-RULES 29), if any. */
  readonly inputTransformations?: ReadonlyArray<InputTransformation>
  /**
   * With `ConversationOptions.diagnostics` (API-RULES 33): the library's prediction for the request this reply
   * answered (`null`: no divergence from the request before; else the miss it expects, its reason and estimated
   * tokens) beside the `cache_miss_reason` the API reported, and whether they agree (same reason, missed tokens
   * within 5%).
   */
  readonly cacheDiagnosis?: CacheDiagnosis
}

/**
 * The whole state of a conversation, as a plain immutable value.
 * - `view`: what the next request sends (wire messages only);
 * - `hot`: the re-read tracker, fed every appended message and every offload;
 * - `epoch`: the number of compactions applied;
 * - `pending`: the calls of the latest reply still waiting for results (never present during a compaction);
 * - `usage`: the last usage a reply reported, if any;
 * - `reply`: the id and stop reason of the latest reply, if any (the stop reasons of API-RULES 31 steer `prepareStep`);
 * - `thread`: with threads on, the reply the next request continues and how many view messages the server holds
 *   under it (absent: the next request starts a new thread);
 * - `carried`: what the transition that made the state hands the next one about `view` (see `CarriedIndex`).
 * @category models
 */
export interface ConversationState {
  readonly view: ReadonlyArray<MessageParam>
  readonly hot: HotPaths
  readonly epoch: number
  readonly pending: ReadonlyArray<PendingCall>
  readonly usage: UsageReport | undefined
  readonly reply?: ReplyReport | undefined
  /**
   * The server-held thread the next request continues (API-RULES 22–24): the latest reply's id and the number of view
   * messages the server holds under it. Set only by a reply recorded with threads on, kept by appends, cleared by
   * every rewrite (an offload, a compaction) and by a reply the server does not hold as the view does.
   */
  readonly thread?: { readonly previousMessageId: string; readonly held: number } | undefined
  /**
   * The thinking blocks of `view` that a rewrite made after they were created invalidated (API-RULES 29), sorted:
   * the API drops them (or rejects the request without `block_binding: drop_block`). Absent or empty when none.
   */
  readonly unboundThinking?: ReadonlyArray<BlockPosition> | undefined
  /**
   * The eviction decisions made for `view` (its eviction index, its frontier), so the next step costs what it adds.
   * Applies only to this very `view` array: a state with another view (a copy, one set by hand) or none decides from
   * scratch, once, and sends the same requests. Derived from `view`: leave it out when comparing states; it is not
   * serialized.
   */
  readonly carried?: CarriedIndex | undefined
}

/**
 * What a state carries about its view from the transition that made it: the eviction index (handed from view to view
 * by each transition), the positions of `cache_control`s and the view's eviction frontier. Opaque: only the
 * transitions read it, and only for the view it was made for. @category models
 * @deprecated Use `Conversation.ConversationState`'s `carried` field: the transitions make it and hand it on
 * themselves.
 */
export type { CarriedIndex } from "./internal/conversation/carried.ts"

/**
 * What a reply stores beside its message in a log (its entry's step metadata, under `conversation`), so a resume
 * restores usage and renamed ids. Never part of the view or a request.
 * @category models
 * @deprecated Use `Conversation.layerLogged(options)`: it writes and reads this metadata itself.
 */
export interface ReplyMeta {
  readonly usage?: ReportedUsage
  readonly requestEpoch: number
  /** View id → the id the caller knows, for the calls this reply's ids were renamed from. */
  readonly toolUseIds?: Readonly<Record<string, string>>
  /** The reply's `id` (SDK replies only; absent in logs written before it was kept). */
  readonly replyId?: string
  /** The reply's `stop_reason` (SDK replies only; absent in logs written before it was kept). */
  readonly stopReason?: string
  /** With threads on, the view messages the server holds under this reply (absent: the next request creates a thread). */
  readonly threadHeld?: number
  /** The reply's `input_transformations` (SDK replies only). */
  readonly inputTransformations?: ReadonlyArray<InputTransformation>
  /** The first block of the stored reply that differs from the reply as received (a renamed id, a dropped block). */
  readonly rewrittenFrom?: number
  /**
   * With `CompactionPolicy.backgroundAt`: the cut of the summary being made in the background when the reply was
   * recorded (a cut only, never a summary), which a resumed conversation starts again.
   */
  readonly backgroundCut?: number
  /** With diagnostics on: the predicted and the reported cache miss of the request this reply answered. */
  readonly cacheDiagnosis?: CacheDiagnosis
}

/** One change a transition made; the service records each in the log. @category models */
export type Change = Data.TaggedEnum<{
  Appended: { readonly message: MessageParam; readonly meta: ReplyMeta | undefined }
  Offloaded: { readonly offloaded: ReadonlyArray<Offloaded> }
  CompactionApplied: { readonly record: CompactionRecord<MessageParam> }
}>

/** Constructors for `Change`. @category constructors */
export const Change: Data.TaggedEnum.Constructor<Change> = Data.taggedEnum<Change>()

/** One change and the state right after it. @category models */
export interface Step {
  readonly change: Change
  readonly state: ConversationState
}

/** What a pure transition did: its changes in order (possibly none) and the final state. @category models */
export interface Transition {
  readonly steps: ReadonlyArray<Step>
  readonly state: ConversationState
}

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

const none = (state: ConversationState): Transition => ({ steps: [], state })

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

type Block = Exclude<MessageParam["content"], string>[number]
type AssistantContent = Anthropic.AssistantMessageParam["content"]

const isBlankText = (block: Block): boolean => block.type === "text" && block.text.trim().length === 0

/**
 * The message as the API takes it: top-level keys starting with `_` removed and empty text blocks dropped; the same
 * object when there is nothing to remove. `undefined` when nothing is left. A system message with no `content` that
 * carries `output_config` (API-RULES 26) is kept as it is, its private keys removed.
 * @category wire
 * @deprecated Use `Conversation.requestOf(state, options)`: its messages are wire messages already.
 */
export const wireMessage = (message: MessageParam): MessageParam | undefined => {
  const keys = Object.keys(message)
  const extra = keys.some((k) => k.startsWith("_"))
  const content = message.content as MessageParam["content"] | undefined
  if (content == null) {
    if (!hasOutputConfig(message as unknown as Message)) return undefined
    if (!extra) return message
    const out: Record<string, unknown> = {}
    for (const k of keys) if (!k.startsWith("_")) out[k] = (message as never)[k]
    return out as unknown as MessageParam
  }
  if (typeof content === "string") {
    if (content.trim().length === 0) return undefined
    return extra ? { role: message.role, content } as MessageParam : message
  }
  const blank = content.some(isBlankText)
  if (!extra && !blank) return content.length === 0 ? undefined : message
  const kept = blank ? content.filter((b) => !isBlankText(b)) : content
  if (kept.length === 0) return undefined
  const out: Record<string, unknown> = {}
  for (const k of keys) if (!k.startsWith("_")) out[k] = k === "content" ? kept : (message as never)[k]
  return out as unknown as MessageParam
}

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

const asMessages = (view: ReadonlyArray<MessageParam>): ReadonlyArray<Message> => view as unknown as Array<Message>

/** The message's blocks (a string is one text block; a system message with no content, API-RULES 26, has none). */
const blocksOf = (message: MessageParam): ReadonlyArray<Block> =>
  messageBlocks(message as unknown as Message) as unknown as ReadonlyArray<Block>

const interrupted = (id: string): Anthropic.ToolResultBlockParam => ({
  type: "tool_result",
  tool_use_id: id,
  content: MISSING_RESULT_TEXT,
  is_error: true
})

// ============================================================================
// Pure transitions
// ============================================================================

const appendStep = (state: ConversationState, message: MessageParam, meta?: ReplyMeta): Transition => {
  const view = state.view.concat([message]) // concat copies the outer array fastest (a large spread is ~2x slower)
  const carried = CarriedIndex.appended(asMessages(state.view), state.carried, asMessages(view))
  const next: ConversationState = { ...state, view, hot: state.hot.observe([message]), carried }
  return { steps: [{ change: Change.Appended({ message, meta }), state: next }], state: next }
}

/**
 * Answers every call still pending with an interrupted error result (one user message), so nothing but results ever
 * follows a `tool_use`. No change when nothing is pending.
 * @category transitions
 * @deprecated Use `Conversation.prepareStep(state, options)`: it answers the pending calls first.
 */
export const closePending = (state: ConversationState): Transition => {
  if (state.pending.length === 0) return none(state)
  const t = appendStep(state, { role: "user", content: state.pending.map((p) => interrupted(p.id)) })
  const closed = { ...t.state, pending: [] }
  return { steps: [{ ...t.steps[0]!, state: closed }], state: closed }
}

const leadingUser = (state: ConversationState): Transition =>
  state.view.length > 0 ? none(state) : appendStep(state, { role: "user", content: LEADING_USER_TEXT })

/**
 * Appends a user or system message (tool results included). Results are matched to the pending calls by the id the
 * caller knows; results that answer nothing pending are dropped. A message with other content, and any system
 * message, first answers the calls still pending (interrupted). An assistant message is `recordReply` without usage.
 * @category transitions
 */
export const appendMessage = (state: ConversationState, message: MessageParam): Transition => {
  if (message.role === "assistant") return recordReply(state, message)
  const clean = wireMessage(message)
  if (clean === undefined) return none(state)
  if (clean.role === "system") return chain(chain(closePending(state), leadingUser), (s) => appendStep(s, clean))
  const blocks = blocksOf(clean)
  const waiting = new Map(state.pending.map((p) => [p.originalId, p]))
  const answered: Array<Block> = []
  const others: Array<Block> = []
  let changed = false
  for (const block of blocks) {
    if (block.type !== "tool_result") {
      others.push(block)
      continue
    }
    const call = waiting.get(block.tool_use_id)
    if (call === undefined) {
      changed = true
      continue
    }
    waiting.delete(block.tool_use_id)
    if (call.id !== block.tool_use_id) changed = true
    answered.push(call.id === block.tool_use_id ? block : { ...block, tool_use_id: call.id })
    if (others.length > 0) changed = true
  }
  const closing = others.length > 0 ? [...waiting.values()] : []
  const content = [...answered, ...closing.map((p) => interrupted(p.id)), ...others]
  if (content.length === 0) return none(state)
  const stored: MessageParam = changed || closing.length > 0 ? { role: "user", content } : clean
  const rest = closing.length > 0 ? [] : state.pending.filter((p) => waiting.has(p.originalId))
  const t = appendStep(state, stored)
  const final = { ...t.state, pending: rest }
  return { steps: [{ ...t.steps[0]!, state: final }], state: final }
}

/** One sampling step of a reply (`usage.iterations`). */
type UsageIteration = NonNullable<ReportedUsage["iterations"]>[number]

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
 * (`cache_creation`) and the sampling steps (`iterations`, which the trigger reads: API-RULES 25).
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
  readonly id: string
  readonly type: "message"
  readonly role: "assistant"
  readonly content: ReadonlyArray<{ readonly type: string }>
  readonly stop_reason: string | null
  readonly usage: ReportedUsage
  readonly input_transformations?: ReadonlyArray<InputTransformation> | null
  /** The reply's `diagnostics` (API-RULES 33: `cache_miss_reason`, or `null` for no divergence). */
  readonly diagnostics?: unknown
}

const isSdkReply = (reply: MessageParam | SdkReply): reply is SdkReply =>
  (reply as { readonly type?: unknown }).type === "message" &&
  typeof (reply as { readonly id?: unknown }).id === "string"

/**
 * Records an assistant reply and the usage the provider reported for it (`requestEpoch`: the epoch the request was
 * prepared in, by default the current one). The reply is a `MessageParam` or the SDK's reply (`SdkReply`): its
 * content is stored as an assistant message, its `usage` is the usage unless one is given, and its `id` and
 * `stop_reason` go in the state's `reply` and the log entry's step metadata. Calls still pending are answered as
 * interrupted first; a `tool_use` id already in the view is renamed; the reply's calls become pending. An empty reply
 * adds no message (its stop reason and usage are still kept, in the state only).
 *
 * `thread` (threads on): `sent` is the length of the view the request sent. The reply anchors the next request's
 * thread (`state.thread`, and `threadHeld` in its step metadata) when the view holds it exactly as the server does,
 * right after the messages its request sent: an SDK reply, in the request's epoch, appended after `sent` messages with
 * no id renamed and no block dropped, that is not a refusal, a cut stream (`stop_reason: null`) or a fallback model's
 * reply. Any other reply leaves no anchor, so the next request starts a new thread.
 *
 * `diagnosis` (diagnostics on: the request asked for them): the reply's report carries `cacheDiagnosis`, the
 * library's `predicted` miss for that request beside the reason the SDK reply's `diagnostics` reported.
 * @category transitions
 */
export const recordReply = (
  state: ConversationState,
  reply: MessageParam | SdkReply,
  usage?: ReportedUsage | undefined,
  requestEpoch?: number | undefined,
  thread?: { readonly sent: number } | undefined,
  diagnosis?: { readonly predicted: CachePrediction | undefined } | undefined
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
    ...(sdk?.input_transformations == null || sdk.input_transformations.length === 0
      ? {}
      : { inputTransformations: sdk.input_transformations.map(transformationOf) }),
    ...(diagnosis === undefined ? {} : { cacheDiagnosis: diagnosisOf(diagnosis.predicted, sdk) })
  }
  const clean = wireMessage(message)
  if (clean === undefined) {
    if (sdk === undefined) return none(state)
    const kept = reported === undefined ? state.usage : { usage: usageOf(reported), requestEpoch: report.requestEpoch }
    return none(withThread({ ...state, usage: kept, reply: report }, undefined))
  }
  return chain(chain(closePending(state), leadingUser), (s) => {
    const inView = CarriedIndex.toolUseIds(asMessages(s.view), s.carried)
    const added = new Set<string>()
    const used = { has: (id: string) => inView.has(id) || added.has(id), add: (id: string) => added.add(id) }
    const renamed: Record<string, string> = {}
    let content = clean.content
    if (typeof content !== "string") {
      let copy: Array<Block> | undefined
      content.forEach((block, i) => {
        if (block.type !== "tool_use") return
        if (used.has(block.id)) {
          let k = 2
          while (used.has(`${block.id}_${k}`)) k++
          const id = `${block.id}_${k}`
          renamed[id] = block.id
          copy ??= [...(content as Array<Block>)]
          copy[i] = { ...block, id }
          used.add(id)
        } else used.add(block.id)
      })
      if (copy !== undefined) content = copy
    }
    const stored: MessageParam = content === clean.content ? clean : { role: "assistant", content }
    const epoch = report.requestEpoch
    const kept = reported === undefined ? undefined : usageOf(reported)
    const anchor: ThreadAnchor | undefined = thread === undefined || sdk === undefined ? undefined : anchorAfterReply(
      sdk,
      clean === message && stored === clean && s.view.length === thread.sent && epoch === state.epoch,
      s.view.length + 1
    )
    // where the stored reply first differs from the received one, kept only when thinking follows (API-RULES 29)
    const changedAt = typeof stored.content === "string" || typeof message.content === "string"
      ? undefined
      : firstChangedBlock(message.content, stored.content)
    const rewrittenFrom = changedAt !== undefined && thinkingIn(asMessages([stored])[0]!, 0, changedAt).length > 0
      ? changedAt
      : undefined
    const meta: ReplyMeta = {
      ...(kept === undefined ? {} : { usage: kept }),
      requestEpoch: epoch,
      ...(Object.keys(renamed).length === 0 ? {} : { toolUseIds: renamed }),
      ...(report.id === undefined ? {} : { replyId: report.id }),
      ...(report.stopReason === undefined ? {} : { stopReason: report.stopReason }),
      ...(anchor === undefined ? {} : { threadHeld: anchor.held }),
      ...(report.inputTransformations === undefined ? {} : { inputTransformations: report.inputTransformations }),
      ...(rewrittenFrom === undefined ? {} : { rewrittenFrom }),
      ...(report.cacheDiagnosis === undefined ? {} : { cacheDiagnosis: report.cacheDiagnosis })
    }
    const t = appendStep(s, stored, meta)
    const pending = pendingOf(stored, renamed)
    const final: ConversationState = withThread({
      ...t.state,
      ...unboundBy(t.state, { message: t.state.view.length - 1, block: rewrittenFrom }),
      pending,
      usage: kept === undefined ? s.usage : { usage: kept, requestEpoch: epoch },
      reply: report
    }, anchor)
    return { steps: [{ ...t.steps[0]!, state: final }], state: final }
  })
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
 * rewrite): the thinking blocks after it join the unbound ones (API-RULES 29). Empty when nothing changes.
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

const pendingOf = (reply: MessageParam, renamed: Readonly<Record<string, string>>): ReadonlyArray<PendingCall> =>
  typeof reply.content === "string"
    ? []
    : reply.content.flatMap((b) => b.type === "tool_use" ? [{ id: b.id, originalId: renamed[b.id] ?? b.id }] : [])

/** How `offloadStaleResults` evicts. Every option may be `undefined`, which means its default. @category models */
export interface OffloadOptions {
  /** Newest live tool results kept verbatim; default `DEFAULT_KEEP_RECENT`. */
  readonly keepRecent?: number | undefined
  /**
   * Fewest tokens worth an eviction (each one rewrites the cached prompt). Absent: the rent-or-buy rule of
   * `evictStaleToolResults` (offload once the cache reads paid on the evictable tokens reach the cost of rewriting
   * the prompt behind the first change; at once when the cache is known cold).
   */
  readonly minSavings?: number | undefined
  readonly classifier?: ToolClassifier | undefined
  /**
   * The cache lifetime the requests ask for; the rent-or-buy rule prices a rewrite at its write price (1.25× input
   * for `"5m"`, the default, 2× for `"1h"`). `prepareStep` and `Conversation` take it from the policy's `cacheTtl`.
   */
  readonly cacheTtl?: "5m" | "1h" | undefined
  /**
   * The caller sends on a server-held thread (API-RULES 22–24): each request carries `thread`, a `continue` with only
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
}

/** The restart model of `options` when it sends on threads, else `undefined` (no restart is priced). */
const threadPriceOf = (options: OffloadOptions): ThreadRestartPrice | undefined =>
  options.threads === true ? threadRestartOf(options.threadRestart) : undefined

/**
 * Offloads stale tool output (`evictStaleToolResults`, the hot paths pinned) and lets the hot paths observe the
 * offloads. No change when the pass does not pay (`minSavings`, or the rent-or-buy rule; `cacheCold`: the provider's
 * cache has expired, so offloading rewrites nothing that would have been read).
 * @category transitions
 * @deprecated Use `Conversation.prepareStep(state, options)`: it offloads stale results after closing the pending
 * calls.
 */
export const offloadStaleResults = (
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

/** The same transition as `offloadStaleResults`. @deprecated Use `Conversation.offloadStaleResults` */
export const offload: typeof offloadStaleResults = offloadStaleResults

/**
 * True when the last reported usage, measured on the current epoch, leaves less than the policy's room or reaches its
 * cost target (`shouldCompact`); with `cacheCold` and a view that ends on a human turn, the lower cold target applies.
 * Also true when the latest reply, to a request of the current epoch, stopped with `model_context_window_exceeded`
 * (the request did not fit: API-RULES 31), whatever its usage says.
 * @category transitions
 * @deprecated Use `Conversation.prepareStep(state, options)`: its `compact` field says whether the trigger fires.
 */
export const triggerFires = (
  state: ConversationState,
  policy: CompactionPolicy,
  cacheCold?: boolean | undefined
): boolean =>
  overflowed(state) ||
  state.usage !== undefined &&
    shouldCompact(policy, state.usage.usage, { requestEpoch: state.usage.requestEpoch, currentEpoch: state.epoch }, {
      coldHumanTurn: cacheCold === true && endsOnHumanTurn(state.view)
    })

/**
 * `triggerFires` with `tokens`, the exact count of the next request (a `TokenCounter`'s), in place of the last
 * reported usage: the same thresholds (`shouldCompact`), on the request about to be sent, whatever its epoch.
 */
const countFires = (
  state: ConversationState,
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
 * (API-RULES 29) and count nothing.
 */
const viewTokens = (state: ConversationState): number =>
  estimateTokens(asMessages(state.view)) - tokensAt(asMessages(state.view), state.unboundThinking ?? [])

/** The latest reply, to a request of the current epoch, stopped because the request did not fit the window. */
const overflowed = (state: ConversationState): boolean =>
  state.reply?.stopReason === "model_context_window_exceeded" && state.reply.requestEpoch === state.epoch

/** The view ends on a message a person wrote: a user message with content other than tool results. */
const endsOnHumanTurn = (view: ReadonlyArray<MessageParam>): boolean =>
  view.at(-1)?.role === "user" && blocksOf(view.at(-1)!).some((b) => b.type !== "tool_result")

/** What `prepareStep` decided: its changes (closing calls, offloading) and whether the trigger now fires. @category models */
export interface PrepareStep {
  readonly transition: Transition
  readonly compact: boolean
}

/**
 * The pure part of `Conversation#prepare`: answers abandoned calls, offloads (`offloadStaleResults`), and says whether compaction
 * must run now (`triggerFires`). `cacheCold`: the provider's cache is known to have expired (the last request is
 * older than the policy's `cacheTtl`). The service and the simulator both run exactly this; the eviction prices a
 * rewrite at the write price of the policy's `cacheTtl`. After a reply that stopped with
 * `pause_turn` and is still last, nothing changes (the same request continues the turn); after one that stopped with
 * `compaction` (the server's block, threshold mode), the files message follows the block and nothing else changes
 * (API-RULES 31).
 * @category transitions
 */
export const prepareStep = (
  state: ConversationState,
  options: Omit<OffloadOptions, "cacheTtl"> & { readonly policy?: CompactionPolicy | undefined } = {},
  cacheCold?: boolean | undefined
): PrepareStep => {
  if (continuesPausedTurn(state)) return { transition: none(state), compact: false }
  if (resumesServerCompaction(state)) return { transition: filesAfterBlock(state, options.classifier), compact: false }
  const policy = options.policy ?? defaultPolicy
  const closed = closePending(state)
  const transition = chain(closed, (s) => offloadStaleResults(s, { ...options, cacheTtl: policy.cacheTtl }, cacheCold))
  const compact = triggerFires(transition.state, policy, cacheCold)
  if (!compact && deferredToCompaction(closed.state, transition.state, policy, options)) {
    return { transition: closed, compact: false }
  }
  return { transition, compact }
}

/**
 * On a thread (`threadRestart`'s `margin`): whether the offload from `before` to `after` waits for the compaction,
 * because the context it leaves (the last reported one, less the tokens freed) stays within the margin of the
 * trigger. Only an offload that breaks a thread the next request would continue waits.
 */
const deferredToCompaction = (
  before: ConversationState,
  after: ConversationState,
  policy: CompactionPolicy,
  options: OffloadOptions
): boolean => {
  const price = threadPriceOf(options)
  const usage = before.usage
  if (price === undefined || after.view === before.view || before.thread === undefined) return false
  if (usage === undefined || usage.requestEpoch !== before.epoch) return false
  const freed = viewTokens(before) - viewTokens(after)
  const trigger = Math.min(policy.compactAtTokens, policy.contextWindow - policy.minRemaining)
  return defersToCompaction(price, contextTokens(usage.usage) - freed, trigger)
}

/** The latest reply stopped with `stopReason` and is still the view's last message. */
const endsOnReplyStopped = (state: ConversationState, stopReason: string): boolean =>
  state.reply?.stopReason === stopReason && state.pending.length === 0 && state.view.at(-1)?.role === "assistant"

/** `pause_turn` (API-RULES 31): the paused reply goes back unchanged, so the server continues its turn. */
const continuesPausedTurn = (state: ConversationState): boolean => endsOnReplyStopped(state, "pause_turn")

/**
 * `compaction` (threshold mode with `pause_after_compaction`, API-RULES 31): the reply is the server's compaction
 * block, and the request that resumes the turn is the moment to add the files message after it.
 */
const resumesServerCompaction = (state: ConversationState): boolean => {
  if (!endsOnReplyStopped(state, "compaction")) return false
  const first = blocksOf(state.view.at(-1)!)[0]
  return first !== undefined && isCompactionWithContent(first as never)
}

/**
 * Appends `Summary.filesMessage` of the files the view read and modified before the server's block (an earlier
 * summary's appendix and files messages merged in), as after a compaction of our own; nothing when there are none.
 */
const filesAfterBlock = (state: ConversationState, classifier: ToolClassifier | undefined): Transition => {
  const before = asMessages(state.view.slice(0, -1))
  const opening = before[0] === undefined ? undefined : summaryText(before[0])
  const files = [
    ...(opening === undefined ? [] : [parseAppendix(opening) ?? noFiles]),
    ...before.flatMap((m) => filesOfMessage(m) ?? []),
    filesTouched(before, classifier)
  ].reduce(mergeFiles, noFiles)
  if (files.read.length === 0 && files.modified.length === 0) return none(state)
  return appendStep(state, filesMessage(files) as MessageParam)
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
  options?: Omit<OffloadOptions, "cacheTtl"> & { readonly policy?: CompactionPolicy | undefined }
): Transition => {
  if (finished.record === undefined) return none(state)
  const compacted = compactionStep(state, finished)
  if (options === undefined || threadPriceOf(options) === undefined) return compacted
  // the compaction restarts the thread and rewrote everything after the summary: its kept tail's offloads go now
  const cacheTtl = (options.policy ?? defaultPolicy).cacheTtl
  return chain(compacted, (s) => offloadStaleResults(s, { ...options, cacheTtl }, true))
}

const compactionStep = (state: ConversationState, finished: FinishedCompaction<MessageParam>): Transition => {
  const view = finished.messages
  const unbound = allThinking(asMessages(view))
  const { unboundThinking: _, ...rest } = state
  const next: ConversationState = withThread({
    ...rest,
    view,
    epoch: state.epoch + 1,
    carried: CarriedIndex.fresh(asMessages(view)),
    ...(unbound.length === 0 ? {} : { unboundThinking: unbound })
  }, undefined)
  return { steps: [{ change: Change.CompactionApplied({ record: finished.record! }), state: next }], state: next }
}

// ============================================================================
// The request
// ============================================================================

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
  /** The cache lifetime every breakpoint asks for: `"5m"` (default, `{ type: "ephemeral" }`) or `"1h"`. */
  readonly ttl?: "5m" | "1h" | undefined
  /**
   * The thinking config every request carries. Once a rewrite invalidated thinking blocks of the view (API-RULES 29),
   * it gets `block_binding: { prefix_mismatch_behavior: "drop_block" }` and the request the binding beta in `betas`;
   * a config with its own `block_binding` opts out (`{ prefix_mismatch_behavior: "error" }` keeps the API's 400).
   */
  readonly thinking?: ThinkingConfig | undefined
  /**
   * The request as it goes on the state's server-held thread (API-RULES 22–24): while the view extends the reply
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
 * frontier, the frontier of `options.before` when this step's offload moved it, and the newest message; at most 4,
 * none below the model's minimum cacheable length, none on thinking or empty blocks. Deterministic in its inputs, so a
 * resumed conversation sends the same bytes. The state is never changed: messages that carry a breakpoint are copies.
 * With `options.thread`, the request as it goes on the state's thread (`RequestOptions.thread`): a `continue` holds
 * exactly the messages of the whole request after the anchored reply.
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
 * anchored reply, each as the whole request has it (its breakpoints included), the view never copied.
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
    return anchor === undefined ? withMessages([...state.view]) : continued(state.view.slice(from))
  }
  const frontier = frontierBreakpoint(state, options.classifier)
  const before = options.before !== undefined && options.before.epoch === state.epoch
    ? frontierBreakpoint(options.before, options.classifier)
    : undefined
  const previous = before !== undefined &&
      (frontier === undefined || before.message !== frontier.message || before.block !== frontier.block)
    ? before
    : undefined
  const systemTokens = systemAndToolsTokens(system as never, tools)
  const carried = CarriedIndex.requestParts(view, state.carried)
  const plan = planBreakpoints(view, {
    systemTokens,
    hasSystem: system !== undefined || tools !== undefined,
    frontier,
    previousFrontier: previous,
    minTokens: options.minCacheTokens ?? minCacheableTokens(options.model),
    messageTokensBefore: boundTokensBefore(view, state.unboundThinking ?? [], carried?.tokensBefore)
  })
  const messages = carried === undefined
    ? (applyBreakpoints(view, plan.blocks, options.ttl) as unknown as Array<MessageParam>).slice(from)
    : breakpointsAt(state.view, plan.blocks, carried.cacheControlled, options.ttl, from)
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
 * once the view holds thinking a rewrite invalidated, unless the config sets its own binding (API-RULES 29).
 */
const thinkingOf = (
  state: ConversationState,
  config: ThinkingConfig | undefined
): Pick<Request, "thinking" | "betas"> => {
  if (config === undefined) return {}
  if ((state.unboundThinking ?? []).length === 0 || config.block_binding != null || config.type === "disabled") {
    return { thinking: config }
  }
  return { thinking: { ...config, block_binding: DROP_BLOCK }, betas: [THINKING_BINDING_BETA] }
}

/**
 * `applyBreakpoints(view, blocks).slice(from)` when only the messages at `cacheControlled` carry a `cache_control`:
 * the view from `from` on is copied and only the planned and the carrying messages there are rewritten (each exactly
 * as `applyBreakpoints` would).
 */
const breakpointsAt = (
  view: ReadonlyArray<MessageParam>,
  blocks: ReadonlyArray<BlockPosition>,
  cacheControlled: ReadonlyArray<number>,
  ttl: "5m" | "1h" | undefined,
  from: number
): Array<MessageParam> => {
  const messages = from === 0 ? view.slice() : view.slice(from)
  const touched = new Set<number>()
  for (const p of blocks) if (p.message >= from) touched.add(p.message)
  for (const m of cacheControlled) if (m >= from && m < view.length) touched.add(m)
  for (const m of touched) {
    const marks = blocks.filter((p) => p.message === m).map((p) => ({ message: 0, block: p.block }))
    messages[m - from] = applyBreakpoints(asMessages([view[m]!]), marks, ttl)[0] as unknown as MessageParam
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

// ============================================================================
// Resume: the log's entries through the same transitions' effects
// ============================================================================

/** Where logs written before step metadata existed kept it: a private key of the stored message. */
const LEGACY_META_KEY = "_conversation"

const asReplyMeta = (meta: unknown): ReplyMeta | undefined =>
  typeof meta === "object" && meta !== null && !Array.isArray(meta) ? meta as ReplyMeta : undefined

/** The reply metadata of a message entry: its step metadata, or (older logs) the message's `_conversation` key. */
const metaOf = (entry: MessageEntry): ReplyMeta | undefined =>
  asReplyMeta(entry.meta?.[META_KEY]) ??
    asReplyMeta((entry.message as unknown as Record<string, unknown>)[LEGACY_META_KEY])

/**
 * The state a log holds: the view it rebuilds (wire messages), the hot paths replayed over every entry in order
 * (messages observed, offloads observed), the epoch (its compactions), the latest reply's usage, id and stop reason,
 * the thread anchor (the latest reply's, when its metadata holds one and no offload or compaction followed it), and
 * the calls of the last reply not yet answered. Equal to the live state that wrote the log. When a compaction entry
 * holds the conversation's checkpoint (every boundary a `Conversation` records does), the last one is the state at
 * that boundary and only the entries after it are replayed: so a log opened from its tail resumes as the whole log.
 * @category resume
 * @deprecated Use `Conversation.layerLogged(options)`: opening a logged conversation resumes its state from the log.
 */
export const resumeState = (loaded: Loaded, classifier?: ToolClassifier | undefined): ConversationState =>
  resumeFrom(loaded, classifier) ?? stateOf(loaded, foldEntries(loaded.entries, 0, undefined, classifier))

/**
 * The state `resumeState` resumes, when `loaded` has what it needs: every entry (`verifiedFrom` unset), or a
 * checkpoint among the entries it holds. `undefined` for a tail without one: the caller reads the whole log.
 */
const resumeFrom = (loaded: Loaded, classifier: ToolClassifier | undefined): ConversationState | undefined => {
  const entries = loaded.entries as ReadonlyArray<Entry>
  for (let k = entries.length - 1; k >= 0; k--) {
    const checkpoint = checkpointOf(entries[k]!, META_KEY, classifier)
    if (checkpoint !== undefined) return stateOf(loaded, foldEntries(entries, k + 1, checkpoint, classifier))
  }
  return loaded.verifiedFrom === undefined ? stateOf(loaded, foldEntries(entries, 0, undefined, classifier)) : undefined
}

/** The hot paths, epoch, usage, reply and thread after `entries` from `from` on, starting from `start` (or nothing). */
const foldEntries = (
  entries: ReadonlyArray<Entry>,
  from: number,
  start: Checkpoint | undefined,
  classifier: ToolClassifier | undefined
) => {
  let hot = start?.hot ?? HotPaths.empty(classifier)
  let epoch = start?.epoch ?? 0
  let usage = start?.usage as UsageReport | undefined
  let reply = start?.reply as ReplyReport | undefined
  let thread: ThreadAnchor | undefined
  // consecutive messages are observed in one call: `observe` reads them in order, as one call per message would
  let run: Array<MessageParam> = []
  const flush = () => {
    if (run.length > 0) hot = hot.observe(run)
    run = []
  }
  for (let k = from; k < entries.length; k++) {
    const entry = entries[k]!
    if (entry.type === "message") {
      run.push(wireOf(entry.message))
      const meta = metaOf(entry)
      if (meta?.usage !== undefined) usage = { usage: meta.usage, requestEpoch: meta.requestEpoch }
      if (meta !== undefined && entry.message.role === "assistant") reply = replyOf(meta)
      if (entry.message.role === "assistant") {
        thread = meta?.threadHeld === undefined || meta.replyId === undefined
          ? undefined
          : { previousMessageId: meta.replyId, held: meta.threadHeld }
      }
      continue
    }
    flush()
    thread = undefined
    if (entry.type === "eviction") hot = hot.observeOffloads(offloadsOf(entry.evictions))
    else epoch++
  }
  flush()
  return { hot, epoch, usage, reply, thread }
}

/** The resumed state: the log's view with what `foldEntries` gave. */
const stateOf = (loaded: Loaded, folded: ReturnType<typeof foldEntries>): ConversationState => {
  const { hot, epoch, usage, reply, thread } = folded
  const view = loaded.view.map(wireOf)
  const unbound = unboundOnResume(loaded, view)
  return {
    view,
    hot,
    epoch,
    pending: pendingAtEnd(loaded),
    usage,
    ...(reply === undefined ? {} : { reply }),
    ...(thread === undefined ? {} : { thread }),
    ...(unbound.length === 0 ? {} : { unboundThinking: unbound }),
    carried: CarriedIndex.fresh(asMessages(view))
  }
}

/**
 * The thinking blocks of a resumed view that rewrites invalidated, as the live transitions marked them (API-RULES
 * 29): every thinking block of a message that a later compaction kept, or that follows a result a later eviction
 * offloaded, and the blocks of a reply from the first one stored differently than received (`rewrittenFrom`). A
 * message whose entry is not in the log (a kept copy `c#i`) counts as kept by a compaction.
 */
const unboundOnResume = (loaded: Loaded, view: ReadonlyArray<MessageParam>): ReadonlyArray<BlockPosition> => {
  const entries = loaded.entries as ReadonlyArray<Entry>
  if (!view.some((m) => m.role === "assistant" && blocksOf(m).some((b) => isBoundBlock(b)))) return []
  const order = new Map<string, number>()
  entries.forEach((e, k) => order.set(e.id, k))
  const resultAt = new Map<string, number>()
  view.forEach((m, i) => {
    if (m.role === "user") { for (const b of blocksOf(m)) if (b.type === "tool_result") resultAt.set(b.tool_use_id, i) }
  })
  // for each entry: whether a compaction follows it, and the earliest view message an eviction after it rewrote
  const compactedAfter = new Array<boolean>(entries.length + 1).fill(false)
  const evictedAfter = new Array<number>(entries.length + 1).fill(Infinity)
  for (let k = entries.length - 1; k >= 0; k--) {
    const e = entries[k + 1]
    compactedAfter[k] = compactedAfter[k + 1]! || e?.type === "compaction"
    let earliest = evictedAfter[k + 1]!
    if (e?.type === "eviction") {
      for (const ev of e.evictions) earliest = Math.min(earliest, resultAt.get(ev.toolUseId) ?? Infinity)
    }
    evictedAfter[k] = earliest
  }
  let out: ReadonlyArray<BlockPosition> = []
  view.forEach((message, i) => {
    if (message.role !== "assistant" || typeof message.content === "string") return
    const id = loaded.entryIds[i]
    const k = id === undefined ? undefined : order.get(id)
    const entry = k === undefined ? undefined : entries[k]
    const whole = entry?.type !== "message" || compactedAfter[k!]! || evictedAfter[k!]! < i
    const from = whole ? 0 : metaOf(entry)?.rewrittenFrom
    if (from === undefined) return
    const added = thinkingIn(asMessages(view)[i]!, i, from)
    if (added.length > 0) out = mergePositions(out, added)
  })
  return out
}

/** The reply report a reply's step metadata holds (its id and stop reason are absent in older logs). */
const replyOf = (meta: ReplyMeta): ReplyReport => ({
  ...(meta.replyId === undefined ? {} : { id: meta.replyId }),
  ...(meta.stopReason === undefined ? {} : { stopReason: meta.stopReason }),
  requestEpoch: meta.requestEpoch,
  ...(meta.inputTransformations === undefined ? {} : { inputTransformations: meta.inputTransformations }),
  ...(meta.cacheDiagnosis === undefined ? {} : { cacheDiagnosis: meta.cacheDiagnosis })
})

const wireOf = (message: Message): MessageParam => {
  const params = message as unknown as MessageParam
  return wireMessage(params) ?? params
}

const pendingAtEnd = (loaded: Loaded): ReadonlyArray<PendingCall> => {
  const view = loaded.view
  let i = view.length - 1
  const answered = new Set<string>()
  while (i >= 0 && view[i]!.role === "user") {
    const content = view[i]!.content
    if (typeof content === "string") return []
    for (const block of content) {
      if (!isToolResult(block)) return []
      answered.add(block.tool_use_id)
    }
    i--
  }
  const reply = view[i]
  if (reply === undefined || reply.role !== "assistant" || typeof reply.content === "string") return []
  const replyId = loaded.entryIds[i]
  let entry: Entry | undefined
  for (let k = loaded.entries.length - 1; k >= 0 && entry === undefined; k--) {
    if (loaded.entries[k]!.id === replyId) entry = loaded.entries[k]
  }
  const renamed = (entry?.type === "message" ? metaOf(entry) : undefined)?.toolUseIds ?? {}
  return reply.content.flatMap((b) =>
    isToolUse(b) && !answered.has(b.id) ? [{ id: b.id, originalId: renamed[b.id] ?? b.id }] : []
  )
}

// ============================================================================
// The service
// ============================================================================

export { ConversationError } from "./internal/conversation/error.ts"

/** Options of a conversation service. Every option may be `undefined`, which means its default. @category models */
export interface ConversationOptions extends Omit<OffloadOptions, "cacheTtl"> {
  /** Default `defaultPolicy`. */
  readonly policy?: CompactionPolicy | undefined
  /** The system prompt every request carries. */
  readonly system?: string | Array<Anthropic.TextBlockParam> | undefined
  /** Tokens a compaction must free (see `compactContext`). */
  readonly minFreedTokens?: number | undefined
  /** The tools every request carries (a breakpoint ends them when there is no system prompt). */
  readonly tools?: ReadonlyArray<Anthropic.ToolUnion> | undefined
  /** The model; it sets the minimum cacheable length of the breakpoints. */
  readonly model?: string | undefined
  /**
   * Ask the API why each request missed the cache (API-RULES 33): every request carries `diagnostics:
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
  readonly request: Request
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
 * The request to send after the API refused `prepared.request` on its thread (API-RULES 24; `error` is the SDK's
 * typed `Thread*Error`, an `APIError`, or its parsed body):
 * - `thread_not_found`, `thread_already_continued`, `thread_continue_in_flight` or `thread_fingerprint_mismatch`:
 *   `prepared.fullRequest`, the whole view under `thread: { type: "create" }` (`undefined` for a request that started
 *   its thread already);
 * - `thread_unsupported_request` (a field or an organization setting threads refuse): the whole view without
 *   `thread`, from a `continue` or a `create`. Record its reply with `{ unthreaded: true }`: every later request of
 *   the conversation then goes without `thread`, as the SDK's `unsupportedRequestBehavior: "continue_unthreaded"`;
 * - any other error: `undefined`.
 * @category transitions
 */
export const threadReplay = (prepared: Prepared, error: unknown): Request | undefined => {
  if (isThreadUnsupportedError(error)) {
    const full = prepared.fullRequest ?? prepared.request
    if (full.thread === undefined) return undefined
    const { thread: _thread, ...unthreaded } = full
    return unthreaded
  }
  return prepared.fullRequest !== undefined && isThreadReplayError(error) ? prepared.fullRequest : undefined
}

/** What `compact` returns: the request after it and the outcome. @category models */
export interface RequestAfterCompaction {
  readonly request: Request
  readonly outcome: CompactOutcome
}

/** @deprecated Use `RequestAfterCompaction` (`Compacted` is also an outcome's tag). */
export type Compacted = RequestAfterCompaction

/** The steps of an agent loop. Each is serialized with the others. @category services */
export interface ConversationShape {
  /** The current state. */
  readonly state: Effect.Effect<ConversationState>
  /**
   * Appends a user or system message, or tool results (see `appendMessage`): the SDK's `MessageParam`, or its beta
   * `BetaMessageParam` (the tool results `BetaToolRunner.generateToolResponse` returns), kept in the wire format.
   */
  readonly append: (
    message: MessageParam | Anthropic.Beta.BetaMessageParam
  ) => Effect.Effect<ConversationState, ConversationError<ConversationState>>
  /**
   * Records an assistant reply (a `MessageParam` or the SDK's reply) with its reported usage (see `recordReply`).
   * `unthreaded`: the request went without `thread` (`threadReplay`'s answer to `thread_unsupported_request`), so the
   * reply anchors no thread and, with threads on, every later request of this service goes without `thread` (a
   * conversation resumed from the log tries a thread again).
   */
  readonly recordReply: (
    message: MessageParam | SdkReply,
    usage?: ReportedUsage | undefined,
    options?: {
      readonly requestEpoch?: number | undefined
      readonly unthreaded?: boolean | undefined
    } | undefined
  ) => Effect.Effect<ConversationState, ConversationError<ConversationState>>
  /**
   * Builds the next request: answers abandoned calls, offloads stale output, and compacts when the trigger fires
   * (only here, after the results are in). A failed summary or persist fails with the request of the state as it was.
   */
  readonly prepare: Effect.Effect<Prepared, ConversationError<Prepared>>
  /**
   * Compacts now (`/compact <focus>`), whatever the trigger says; with `upTo`, summarizes the messages of the view
   * before that index ("summarize up to here", moved to the nearest safe cut at or before it: `CompactOptions.upTo`).
   */
  readonly compact: (
    options?: { readonly instructions?: string | undefined; readonly upTo?: number | undefined } | undefined
  ) => Effect.Effect<RequestAfterCompaction, ConversationError<RequestAfterCompaction>>
}

/** The transition with `backgroundCut` in its reply's step metadata (the log's record of the pending summary). */
const withBackgroundCut = (t: Transition, cut: number | undefined): Transition =>
  cut === undefined ? t : {
    ...t,
    steps: t.steps.map((step) =>
      step.change._tag === "Appended" && step.change.meta !== undefined && step.change.message.role === "assistant"
        ? {
          ...step,
          change: Change.Appended({ message: step.change.message, meta: { ...step.change.meta, backgroundCut: cut } })
        }
        : step
    )
  }

const make = (
  initial: ConversationState,
  log: SessionLogShape | undefined,
  options: ConversationOptions,
  backgroundCut?: number | undefined
) =>
  Effect.gen(function* () {
    const summarizer = yield* Summarizer
    const counter = Option.getOrUndefined(yield* Effect.serviceOption(TokenCounter))
    const lock = yield* Semaphore.make(1)
    const policy = options.policy ?? defaultPolicy
    const background = makeBackground(summarizer, yield* Effect.scope, policy, options)
    // a state built by hand gets a carry for its view, so its first eviction's index is kept for the next step
    let state: ConversationState = initial.carried?.view === asMessages(initial.view)
      ? initial
      : { ...initial, carried: CarriedIndex.fresh(asMessages(initial.view)) }
    // the time of the last request lives here, never in the state: a resumed conversation starts warm
    let lastRequestAt: number | undefined
    const { classifier, model, tools, thinking } = options
    const requestOptions = (before?: ConversationState): RequestOptions => ({
      tools,
      model,
      classifier,
      before,
      ttl: policy.cacheTtl,
      thinking
    })
    // with threads on (until a reply to an unthreaded replay): the length of the view the latest request handed out
    // sent, for the reply that answers it
    let threading = options.threads === true
    let sent: number | undefined
    // with diagnostics on: the latest request handed out (and its prediction), and the one the latest reply answered,
    // with the exact counts of its prefixes the replies told (each reply its last breakpoint's, kept while unchanged)
    let issued: { readonly full: Request; readonly predicted: CachePrediction | undefined } | undefined
    let answered: {
      readonly full: Request
      readonly id: string
      readonly scale: number | undefined
      readonly known: ReadonlyArray<KnownPrefix>
    } | undefined
    // and each message's ratio of the provider's count to the estimate, learned between those exact prefixes
    const ratios = emptyRatios()
    const minTokens = minCacheableTokens(model)
    const head = systemAndToolsTokens(options.system as never, tools)
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
        const predicted = previousId !== undefined && answered?.id === previousId
          ? predictCacheMiss({ ...answered.full, model }, { ...whole, model }, {
            headTokens: head,
            minTokens,
            scale: answered.scale,
            known: answered.known,
            ratios
          })
          : undefined
        issued = { full: whole, predicted }
        if (previousId !== undefined) prediction = { cachePrediction: predicted }
      }
      if (!threading) return { request: whole ?? requestOf(state, options.system, built), ...prediction, ...fields }
      sent = state.view.length
      const request = diagnosed(requestOf(state, options.system, { ...built, thread: true }))
      if (request.thread?.type !== "continue") return { request, ...prediction, ...fields }
      const at = state
      let full: Request | undefined
      return Object.defineProperty({ request, ...prediction, ...fields }, "fullRequest", {
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
     * transition with no change (an empty reply's stop reason) only sets the state.
     */
    const persist = <A>(t: Transition, fallback: () => A): Effect.Effect<void, ConversationError<A>> =>
      t.steps.length === 0 ? Effect.sync(() => void (state = t.state)) : Effect.forEach(t.steps, (step) =>
        // stored with the state it was made in (the current one) and the state after it
        (log === undefined ? Effect.void : Effect.suspend(() => recordChange(log, step.change, state, step.state)))
          .pipe(
            Effect.tap(() => Effect.sync(() => void (state = step.state))),
            Effect.mapError((cause) => new ConversationError({ reason: "Persist", cause, value: fallback() }))
          ), { discard: true })

    // with threads on: the offloads the latest compaction applied to its kept tail (one restart covers both)
    let offloadedAtCompaction: ReadonlyArray<Offloaded> = []
    const compactNow = <A>(
      instructions: string | undefined,
      fallback: () => A,
      upTo?: number | undefined,
      counted?: TokenCounter.Count | undefined,
      atTrigger?: true
    ) =>
      Effect.gen(function* () {
        yield* persist(closePending(state), fallback)
        // with an exact count before and after, `minFreedTokens` is checked on them (internal/conversation/counted.ts)
        const before = counted ?? (yield* countOf(state))
        const plan = prepareCounted(state.view, policy, {
          instructions,
          upTo,
          minFreedTokens: options.minFreedTokens,
          classifier: options.classifier,
          unboundThinking: state.unboundThinking
        }, before)
        if (plan._tag === "Skip") return plan.result.outcome
        // at the trigger, the summary made in the background (`CompactionPolicy.backgroundAt`), if it is usable
        const ready = atTrigger === true ? yield* background.take(state, plan) : undefined
        const summary = ready?.summary ?? (yield* summarizer.summarize(plan.request).pipe(
          Effect.mapError((cause) => new ConversationError({ reason: "Summarize", cause, value: fallback() }))
        ))
        const finished = yield* finishCounted(
          ready === undefined ? plan : ready.plan as typeof plan,
          summary,
          before,
          options.minFreedTokens,
          (candidate) => countOf(applyCompaction(state, candidate, { ...options, threads: threading, policy }).state)
        )
        const applied = applyCompaction(state, finished, { ...options, threads: threading, policy })
        yield* persist(applied, fallback)
        for (const s of applied.steps) if (s.change._tag === "Offloaded") offloadedAtCompaction = s.change.offloaded
        if (finished.record !== undefined) yield* background.drop
        return finished.outcome
      })

    const serialized = <A, E>(effect: Effect.Effect<A, E>) => Semaphore.withPermits(lock, 1, effect)
    const stateNow = () => state
    if (backgroundCut !== undefined) yield* background.resume(state, backgroundCut)

    return Conversation.of({
      state: Effect.sync(stateNow),
      append: (message) =>
        serialized(
          Effect.suspend(() => persist(appendMessage(state, message as MessageParam), stateNow)).pipe(
            Effect.map(stateNow)
          )
        ),
      recordReply: (message, usage, replyOptions) =>
        serialized(
          Effect.suspend(() => {
            if (replyOptions?.unthreaded === true) threading = false
            const thread = threading && sent !== undefined ? { sent } : undefined
            sent = undefined
            const request = issued
            issued = undefined
            // the reply's own usage calibrates the estimate of the request it answered (not a `usage` given beside it)
            // and tells its prefix to its last breakpoint exactly
            if (request !== undefined && isSdkReply(message)) {
              const kept = keptPrefixes(answered?.known ?? [], request.predicted, undefined)
              const learned = knownPrefixOf(request.full, message.usage)
              const scale = calibrationOf(request.full, head, message.usage)
              if (learned !== undefined) learnRatios(ratios, request.full, kept, learned, scale)
              answered = {
                full: request.full,
                id: message.id,
                scale,
                known: keptPrefixes(kept, null, learned)
              }
            } else answered = undefined
            const diagnosis = request === undefined ? undefined : { predicted: request.predicted }
            const t = recordReply(state, message, usage, replyOptions?.requestEpoch, thread, diagnosis)
            return persist(withBackgroundCut(t, background.pendingCut(state.epoch)), stateNow)
          }).pipe(Effect.map(stateNow))
        ),
      prepare: serialized(Effect.gen(function* () {
        let offloaded: ReadonlyArray<Offloaded> = []
        let compaction: CompactOutcome | undefined
        let count: TokenCounter.Count | undefined
        const prepared = (): Prepared =>
          issue(undefined, { epoch: state.epoch, offloaded, compaction, ...(count === undefined ? {} : { count }) })
        const now = yield* Clock.currentTimeMillis
        const cold = lastRequestAt !== undefined && now - lastRequestAt >= ttlMs(policy.cacheTtl)
        const before = state
        const step = prepareStep(state, { ...options, threads: threading, policy }, cold)
        yield* persist(step.transition, prepared)
        for (const s of step.transition.steps) if (s.change._tag === "Offloaded") offloaded = s.change.offloaded
        // a paused turn goes on unchanged, a server compaction is resumed: neither compacts, so neither is counted
        if (!continuesPausedTurn(before) && !resumesServerCompaction(before)) count = yield* countOf(state, before)
        const fires = count?.exact === true ? countFires(state, policy, cold, count.tokens) : step.compact
        if (fires) {
          offloadedAtCompaction = []
          compaction = yield* compactNow(undefined, prepared, undefined, count, true)
          if (offloadedAtCompaction.length > 0) offloaded = [...offloaded, ...offloadedAtCompaction]
        }
        if (compaction === undefined || compaction._tag === "Skipped") yield* background.refresh(state)
        lastRequestAt = now
        return issue(before, { epoch: state.epoch, offloaded, compaction, ...(count === undefined ? {} : { count }) })
      })),
      compact: (compactOptions) =>
        serialized(Effect.gen(function* () {
          const outcome = yield* compactNow(compactOptions?.instructions, (): RequestAfterCompaction => ({
            request: request(),
            outcome: CompactOutcome.Skipped({ reason: "NothingToCut", tokens: viewTokens(state) })
          }), compactOptions?.upTo)
          return { request: request(), outcome }
        }))
    })
  })

const ConversationBase: Context.ServiceClass<Conversation, "effect-compaction/Conversation", ConversationShape> =
  Context.Service<Conversation, ConversationShape>()("effect-compaction/Conversation")

/**
 * A conversation kept in memory only, from `emptyState` (or `initial`): nothing is persisted. Needs a `Summarizer`.
 * @category layers
 */
export const layerMemory = (
  options: ConversationOptions & { readonly initial?: ConversationState | undefined } = {}
): Layer.Layer<Conversation, never, Summarizer> =>
  Layer.effect(Conversation, make(options.initial ?? emptyState(options.classifier), undefined, options))

/**
 * A conversation recorded in the `SessionLog`: opening resumes from the log's live fold (`resumeState` of
 * `SessionLog.loaded`: the entries the log folded when it opened, not read or decoded again), and every transition
 * is stored before it is applied. A log opened from its tail (`SessionLogOptions.tail`, so `loaded.verifiedFrom` is
 * set) holds only the entries from the tail on: the state resumes from the checkpoint of the last compaction boundary
 * among them (each boundary the conversation records carries one) and the entries after it, reading nothing else.
 * A tail with no checkpoint (a log whose boundaries another writer recorded, or one written before checkpoints) is
 * read once in full (`load()`, up to the log's `seq`), so the state is the live one either way.
 * Needs a `Summarizer` and a `SessionLog`.
 * @category layers
 */
export const layerLogged = (
  options: ConversationOptions = {}
): Layer.Layer<Conversation, SessionLogError, Summarizer | SessionLog> =>
  Layer.effect(
    Conversation,
    Effect.gen(function* () {
      const log = yield* SessionLog
      const opened = yield* log.loaded
      const resumed = resumeFrom(opened, options.classifier)
      if (resumed !== undefined) return yield* make(resumed, log, options, resumeCut(opened, META_KEY))
      // the entries up to the log's fold (another worker may have appended since it opened)
      const loaded = { ...opened, entries: (yield* log.load()).entries.slice(0, opened.seq) }
      return yield* make(resumeState(loaded, options.classifier), log, options, resumeCut(loaded, META_KEY))
    })
  )

/** The conversation service; its layers are the module's `layerMemory` and `layerLogged`. @category services */
export class Conversation extends ConversationBase {
  /** The module's `layerMemory`, also reachable from the service. */
  static readonly layerMemory: typeof layerMemory = layerMemory
  /** The module's `layerLogged`, also reachable from the service. */
  static readonly layerLogged: typeof layerLogged = layerLogged
}
