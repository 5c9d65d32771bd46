/**
 * Concept: one compaction: prepare (pure), summarize, finish (pure), record.
 *
 * The warm layer: summarize the older prefix of a conversation and keep the recent tail verbatim.
 *
 * `compactContext` cuts per `planForPolicy` (tool-safe, with the turn floor and the oversized-turn rule), renders the
 * head as a transcript, asks the `Summarizer` service for a summary (updating an earlier summary found in the head
 * rather than summarizing it again), and returns `[summaryMessage, ...tail]`: a list `validate` accepts. The summary
 * ends with a deterministic appendix of the files the summarized prefix read and modified, carried forward across
 * compactions. When a `SessionLog` is in the context, the boundary is persisted before the result is reported (with
 * the repaired kept messages, when `repair` had to change them, so a resume rebuilds exactly the returned view).
 *
 * Nothing is lost on failure: a failed summary or a failed persist returns the caller's messages unchanged inside
 * `CompactError`.
 *
 * @since 0.1.0
 */
import { type RemovedRecord, removedRecords } from "./internal/removed.ts"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import { type ViewCompaction, viewCompaction } from "./ApiView.ts"
import type { BlockPosition } from "./Cache.ts"
import { type CutPlan, planForPolicy, safeCut } from "./Cut.ts"
import { placeSystemMessages, type SystemPlacement } from "./internal/repair.ts"
import type { ContentBlock, Message } from "./Message.ts"
import { allThinking, thinkingAfter, tokensAt } from "./internal/thinkingBinding.ts"
import { carriedListings, liveHeadSystems, withListings } from "./internal/headSystems.ts"
import { referencedTools } from "./internal/toolReferences.ts"
import type { CompactionPolicy } from "./Policy.ts"
import { anchorsOf, type Retention, retention } from "./Retention.ts"
import { type CompactionInput, SessionLog, type SessionLogShape } from "./internal/sessionLogContract.ts"
import { SessionLogError } from "./internal/sessionLogError.ts"
import type { SummarizeError } from "./SummarizeError.ts"
import { Summarizer, type SummarizeRequest, summarizeRequest, type Summary } from "./Summarizer.ts"
import { filesMessage, filesOfMessage, type Manifest, splitSummary } from "./Summary.ts"
import * as SummaryModule from "./Summary.ts"
import { estimateTokens } from "./Tokens.ts"
import { CHARS_PER_TOKEN } from "./internal/estimate.ts"
import { filesTouched, type ToolClassifier } from "./Tools.ts"
import { countTurns } from "./Turns.ts"
import { type RepairReport, repairResult } from "./Validate.ts"
import { apiViewStart } from "./internal/apiView.ts"
import { blocksOf, isServerToolCall, isToolUse } from "./internal/blocks.ts"
import type { BuiltMessage } from "./internal/wireTypes.ts"

/** A message the library built for the wire (a compaction block, a summary): what a compacted view may hold. */
export type { BuiltMessage } from "./internal/wireTypes.ts"
import { isTurnStart } from "./internal/turns.ts"
import { DEFAULT_MIN_FREED_TOKENS } from "./internal/compactDefaults.ts"
import {
  filesRoom,
  isPrompt,
  mergeFiles,
  nextManifest,
  noFiles,
  type SummaryBudget,
  summaryFloorTokens,
  summaryWithManifest
} from "./internal/summary.ts"
import type { Snapshot, StepMeta } from "./internal/sessionEntry.ts"

// ============================================================================
// Outcome and errors
// ============================================================================

/**
 * A range of message indices, `from` inclusive, `to` exclusive. @category models
 */
export interface MessageRange {
  /** The first index of the range. */
  readonly from: number
  /** The index after its last. */
  readonly to: number
}

/**
 * Where a compaction cut, over the view before it (`messagesBefore` messages): `removed` is the span the summary
 * replaces (always from 0; its system messages are re-emitted after the summary, not summarized), `kept` the tail
 * that stays verbatim (`removed.to` to `messagesBefore`). Indices only: no message is copied.
 * @category models
 */
export interface CompactionCut {
  /** The span the summary replaces, from index 0. */
  readonly removed: MessageRange
  /** The tail kept verbatim, `removed.to` to `messagesBefore`. */
  readonly kept: MessageRange
}

/** What a compaction that ran did. @category models */
export interface CompactedInfo {
  /** Which messages of the view before left (`removed`) and which stayed (`kept`). */
  readonly cut: CompactionCut
  /**
   * What of the removed span survives in the new view: `Retention.measure(removed span, new view)` with the kept
   * tail's anchors counted apart (`tail`: the kept messages as they are in the new view). The span's anchors are
   * found when the compaction runs; their presence in the new view is measured when this is first read (once), so a
   * conversation whose caller never reads it does not pay for it.
   */
  readonly retention: Retention
  /**
   * What the removed span held, in order: each message (kind, role, size) and each tool result in it, whose `ref`
   * (its tool_use_id) `Recall.recall` answers from the session log. A session log stores the same records in the
   * compaction's entry (`removed`), each message named by its entry id and each tool result by where it is stored.
   */
  readonly removed: ReadonlyArray<RemovedRecord>
  /** User turns in the summarized head (an earlier summary not counted). */
  readonly turnsSummarized: number
  /** Messages in the view before the compaction. */
  readonly messagesBefore: number
  /** Messages in the new view (summary, re-emitted system messages and tail). */
  readonly messagesAfter: number
  /** Estimated tokens of the view before (thinking the API drops not counted). */
  readonly tokensBefore: number
  /** Estimated tokens of the new view (thinking the API drops not counted). */
  readonly tokensAfter: number
  /** The cut lies inside a turn: that turn's prefix was summarized too. */
  readonly splitTurn: boolean
  /** The kept tail is still larger than `policy.maxTailTokens` (the newest step alone does not fit). */
  readonly overBudget: boolean
  /** The summarizer's answer: its text, model, usage and whether it fell back. */
  readonly summary: Summary
  /** The summarizer whose text is in the summary message. */
  readonly summarizer: string
  /** Structural repairs applied to the new view (results for aborted calls, merges), as `repair` reported them. */
  readonly repairs: RepairReport
}

/**
 * What a compaction pass did:
 * - `Skipped`: nothing changed; the caller's array is returned as it was.
 * - `Compacted`: the head was summarized by the configured summarizer.
 * - `FellBack`: the primary summarizer failed after its retries and the fallback (extractive) summarizer wrote it.
 * @category models
 */
export type CompactOutcome = Data.TaggedEnum<{
  /**
   * Why the pass did nothing, explained. `reason`: `TooShort` (no more turns than the floor keeps, and none over
   * `maxTailTokens` to cut inside), `NothingToCut` (the plan keeps everything, or the head holds nothing but an earlier
   * summary) or `TooLittleFreed` (the compacted view would free fewer than `minFreedTokens`, at the trigger
   * `minGrowthTokens`); `tokens`: the view's estimate; `field`: the setting that would change the outcome (a policy
   * field, the `minFreedTokens` option, or `upTo`); `detail`: one sentence with the figures.
   */
  Skipped: {
    readonly reason: "TooShort" | "NothingToCut" | "TooLittleFreed"
    readonly tokens: number
    readonly field: keyof CompactionPolicy | "minFreedTokens" | "upTo"
    readonly detail: string
  }
  Compacted: CompactedInfo
  FellBack: CompactedInfo & { readonly primary: string; readonly primaryError: string }
}>

/** Constructors and matchers for `CompactOutcome`. @category constructors */
export const CompactOutcome: Data.TaggedEnum.Constructor<CompactOutcome> = Data.taggedEnum<CompactOutcome>()

const CompactErrorBase: ReturnType<typeof Data.TaggedError<"CompactError">> = Data.TaggedError("CompactError")

/**
 * A compaction that could not complete. `messages` is the caller's input, unchanged: nothing is lost. It has the type
 * of `CompactResult#messages`, so `Effect.catchTag("CompactError", (e) => Effect.succeed(e.messages))` goes on with
 * the uncompacted view. `reason` says which step failed; `cause` is the underlying typed error.
 * @category errors
 */
export class CompactError<M extends Message = Message> extends CompactErrorBase<{
  readonly reason: "Summarize" | "Persist"
  readonly messages: Array<M | BuiltMessage>
  readonly cause: SummarizeError | SessionLogError
}> {
  /** The error as one line: the failed step and the cause's message. */
  override get message(): string {
    const step = this.reason === "Summarize" ? "summarizing failed" : "persisting the compaction failed"
    return `compaction not applied (${step}): ${this.cause.message}`
  }
}

// ============================================================================
// compactContext: prepare (pure) → summarize → finish (pure) → record
// ============================================================================

/** Options of `compactContext`. Every option may be `undefined`, which means absent. @category models */
export interface CompactOptions {
  /** The user's `/compact <focus>` argument, passed to the summarizer. */
  readonly instructions?: string | undefined
  /** Tokens the pass must free; default 2,000. */
  readonly minFreedTokens?: number | undefined
  /** Classifies tool calls for the files appendix; default `defaultToolClassifier`. */
  readonly classifier?: ToolClassifier | undefined
  /**
   * Summarize up to here: the messages before index `upTo` are summarized and the rest kept, instead of the policy's
   * cut. The cut is moved to the nearest safe cut at or before it (`Cut.safeCut`: a tool call never leaves without
   * its result), so the kept tail may start a little earlier; the turn floor does not apply. Clamped to the list.
   */
  readonly upTo?: number | undefined
  /**
   * The thinking blocks of `messages` that an earlier rewrite invalidated (`Conversation`'s `unboundThinking`): the
   * API drops them, so `tokensBefore` and the freed-tokens checks count them as nothing.
   */
  readonly unboundThinking?: ReadonlyArray<BlockPosition> | undefined
  /**
   * The pass runs because the trigger fired (`Conversation`'s `prepare`, the simulator), not on demand: the context
   * tokens it fired on (the reported usage with the estimate of what was appended after it, the estimate of the
   * request, or the exact count). Below the window's line (`contextWindow -
   * minRemaining`) the pass must also free `policy.minGrowthTokens` net of its summary, or it is `Skipped`
   * ("TooLittleFreed", naming that field): a compaction that frees less would be needed again a few steps later (no
   * thrash), and waiting costs nothing, since the head it would summarize only grows. Past the window's line nothing
   * waits.
   */
  readonly trigger?: number | undefined
  /**
   * The API's tokens per estimated token (`trigger` over the estimate of the request it measured, or an exact count's
   * ratio to its estimate). `trigger` and `policy.minGrowthTokens` are the API's tokens while the freed-tokens checks
   * are made on estimates: at the trigger the pass must free `minGrowthTokens / tokensPerEstimate` estimated tokens,
   * the same bound on the trigger's scale. Default 1 (estimates taken for the API's tokens).
   */
  readonly tokensPerEstimate?: number | undefined
  /**
   * The list ends on calls still waiting for their results: the `tool_use` blocks of its last assistant turn that no
   * result after it answers are running (a `Conversation`'s pending calls, when `compact()` is asked while a tool
   * runs). The cut stays before that assistant turn (`upTo` too), so the turn and everything after it stay in the
   * kept tail as they are, the calls open for the results to come instead of answered as interrupted. A pass that
   * this holds back says so in its `Skipped` detail. Default: a call with no result is answered as interrupted.
   */
  readonly callsWaiting?: boolean | undefined
}

/** The result of `compactContext`: the new view and what happened. @category models */
export interface CompactResult<M extends Message> {
  /** The new view: the input itself when `Skipped`, else summary first, then the kept tail. */
  readonly messages: Array<M | BuiltMessage>
  /** What the pass did: `Skipped` (with why), `Compacted` or `FellBack`. */
  readonly outcome: CompactOutcome
}

/**
 * A compaction that is worth a summary, planned purely by `prepareCompaction`: the cut, the summarize request and
 * everything `finishCompaction` needs. Nothing in it has been sent or stored.
 * @category models
 */
export interface CompactionPlan<M extends Message> {
  /** Marks a plan (against `CompactionSkip`). */
  readonly _tag: "Planned"
  /** The input view the plan cuts. */
  readonly messages: ReadonlyArray<M>
  /** How many messages of `messages` the summary replaces. */
  readonly cut: number
  /** The kept tail, `messages.slice(cut)`. */
  readonly tail: ReadonlyArray<M>
  /** What the summarizer gets (the head without an earlier summary, which is passed as `previousSummary`). */
  readonly request: SummarizeRequest
  /** The file lists carried forward: the earlier summary's merged with what the new head touched. */
  readonly files: ReturnType<typeof mergeFiles>
  /** What the summary keeps by rule: the earlier summary's manifest merged with the new head's. */
  readonly manifest: Manifest
  /** The policy's summary budget, and the most a summary may take to stay smaller than the head it replaces. */
  readonly summaryBudget: SummaryBudget
  /**
   * The system messages of the summarized head (of its API view): not summarized but kept, re-emitted after the
   * summary at the first place the rules allow, so their instructions and tool changes still apply to the tail. With
   * them, the head's tool state: first the `tool_changes` of the compaction block that opens the head
   * (it leaves the view), last a system message of `tool_addition`s of the tools the head loaded by `tool_reference`
   * (a tool search) and did not remove afterwards. Both are built messages of tool changes only.
   */
  readonly systemMessages: ReadonlyArray<M>
  /**
   * How many messages of `messages` a server compaction block replaces (`Summary.compaction`): those that
   * `request.head` covers. It is `cut`, or less when the head ends on an unfinished assistant turn (the API's docs,
   * "Compaction": the on-demand request must end on a finished turn); the messages between stay in the view, after the
   * block.
   */
  readonly compactionCut: number
  /** Estimated tokens of `messages` (thinking the API drops not counted). */
  readonly tokensBefore: number
  /** User turns in the summarized head (an earlier summary not counted). */
  readonly turnsSummarized: number
  /** The cut lies inside a turn: that turn's prefix is summarized too. */
  readonly splitTurn: boolean
  /** The kept tail is still larger than `policy.maxTailTokens`. */
  readonly overBudget: boolean
  /** Estimated tokens the finished compaction must free, or it is `Skipped` (`TooLittleFreed`). */
  readonly minFreedTokens: number
  /** The setting `minFreedTokens` comes from: the option, or `policy.minGrowthTokens` at the trigger. */
  readonly minFreedField?: "minFreedTokens" | "minGrowthTokens" | undefined
  /**
   * That setting's own value (the API's tokens) when `minFreedTokens` is it taken to estimated tokens
   * (`minGrowthTokens` at `CompactOptions.tokensPerEstimate`); absent when they are the same.
   */
  readonly minFreedSetting?: number | undefined
  /** The classifier of the options, which the outcome's retention reads too. */
  readonly classifier?: ToolClassifier | undefined
  /**
   * Where the assistant turn whose calls still wait for their results starts (`CompactOptions.callsWaiting`): the
   * kept tail from there on is left as it is, its calls open. Absent when no call waits.
   */
  readonly waitingFrom?: number | undefined
}

/** A pass that stops before the summary: the input is returned as it was. @category models */
export interface CompactionSkip<M extends Message> {
  /** Marks a skip (against `CompactionPlan`). */
  readonly _tag: "Skip"
  /** The input returned as it was, with the `Skipped` outcome that says why. */
  readonly result: CompactResult<M>
}

/**
 * What a finished compaction stores in a `SessionLog` (`SessionLogShape#recordCompaction`): the new view itself (the
 * array `FinishedCompaction#messages` is), where it was cut, and its figures. The log derives its entry and hash from
 * `view` and goes on with that same array; `recordInput` is the one mapping to the log's input.
 * @category models
 */
export interface CompactionRecord<M extends Message> {
  /** The new view, summary first: `FinishedCompaction#messages`, the same array. */
  readonly view: ReadonlyArray<M | BuiltMessage>
  /** How many messages of the compacted view the summary replaces. */
  readonly cut: number
  /** The name of the summarizer whose text is in the summary message. */
  readonly summarizer: string
  /** Estimated tokens of the view before the compaction. */
  readonly tokensBefore: number
  /** Estimated tokens of the new view. */
  readonly tokensAfter: number
  /** User turns in the summarized head. */
  readonly turnsSummarized: number
}

/**
 * The input of `SessionLogShape#recordCompaction` for a finished compaction of `snapshot.view`: the record's own
 * view, cut and figures, and the caller's step metadata for the boundary (`meta`), if any. The one mapping between a
 * finished compaction and the log.
 * @category compaction
 */
export const recordInput = <M extends Message>(
  record: CompactionRecord<M>,
  snapshot: Snapshot,
  meta?: StepMeta | undefined
): CompactionInput => ({
  snapshot,
  view: record.view,
  cut: record.cut,
  summarizer: record.summarizer,
  tokensBefore: record.tokensBefore,
  tokensAfter: record.tokensAfter,
  turnsSummarized: record.turnsSummarized,
  ...(meta === undefined ? {} : { meta })
})

/** A finished compaction: the new view, its outcome, and the record to persist (absent when `Skipped`). @category models */
export interface FinishedCompaction<M extends Message> extends CompactResult<M> {
  /** What to persist in the session log; absent when the outcome is `Skipped`. */
  readonly record?: CompactionRecord<M>
  /**
   * True when the new view is the API's keep-tail shape: the server's compaction block, then the kept turns exactly
   * as they were, the first of them neither a system message nor of the role of the last message the server read.
   * Their thinking stays valid (a model with preserved thinking takes the block in place of what it summarized),
   * so nothing of them is stripped, bound or rewritten.
   */
  readonly keptVerbatim?: boolean
}

const unchanged = <M extends Message>(
  messages: ReadonlyArray<M>,
  reason: Skipped["reason"],
  tokens: number,
  field: Skipped["field"],
  detail: string
): CompactionSkip<M> => ({
  _tag: "Skip",
  result: { messages: messages as Array<M>, outcome: CompactOutcome.Skipped({ reason, tokens, field, detail }) }
})

type Skipped = Extract<CompactOutcome, { _tag: "Skipped" }>

const fmt = (n: number): string => Math.round(n).toLocaleString("en-US")

/**
 * The skip of a pass that would free too little: `freed` estimated tokens (net of the summary's floor, or measured),
 * below `minFreedTokens`, which is `policy.minGrowthTokens` at the trigger when that is the larger (`field`).
 */
const tooLittleFreed = <M extends Message>(
  messages: ReadonlyArray<M>,
  tokens: number,
  freed: number,
  min: MinFreed
): CompactionSkip<M> =>
  unchanged(
    messages,
    "TooLittleFreed",
    tokens,
    min.field,
    `the compaction would free about ${fmt(freed)} of ${fmt(tokens)} estimated tokens (net of its summary), fewer ` +
      `than ${min.field} (${fmt(min.setting ?? min.tokens)}` +
      `${min.setting === undefined ? "" : `, about ${fmt(min.tokens)} estimated`}): it would not pay for itself`
  )

/** The fewest tokens a pass must free (estimated), and the setting that says so (its value when on another scale). */
interface MinFreed {
  readonly tokens: number
  readonly field: "minFreedTokens" | "minGrowthTokens"
  readonly setting?: number | undefined
}

/**
 * The fewest estimated tokens a pass must free: `minFreedTokens` (default `DEFAULT_MIN_FREED_TOKENS`), and at the
 * cost trigger (`options.trigger`, below the window's line) at least `policy.minGrowthTokens`, taken from the API's
 * tokens to estimated ones by `options.tokensPerEstimate`.
 */
const minFreedOf = (policy: CompactionPolicy, options: CompactOptions): MinFreed => {
  const given = options.minFreedTokens ?? DEFAULT_MIN_FREED_TOKENS
  const costTrigger = options.trigger !== undefined &&
    policy.contextWindow - options.trigger >= policy.minRemaining
  const ratio = options.tokensPerEstimate
  const scaled = ratio !== undefined && Number.isFinite(ratio) && ratio > 0 && ratio !== 1
  const growth = scaled ? Math.ceil(policy.minGrowthTokens / ratio) : policy.minGrowthTokens
  return costTrigger && growth > given
    ? { tokens: growth, field: "minGrowthTokens", ...(scaled ? { setting: policy.minGrowthTokens } : {}) }
    : { tokens: given, field: "minFreedTokens" }
}

/**
 * The pure first step: plans the cut per `planForPolicy` and builds the summarize request, or says why the pass is
 * skipped (`TooShort`, `NothingToCut`, or `TooLittleFreed` when even a free summary could not free `minFreedTokens`).
 * Deterministic; the input is never mutated.
 *
 * Next to the server's compaction: the cut always lies after the API view's start (`Cut.planForPolicy`), so the
 * summary never lands before a compaction block the API reads. When the head holds the block that opens the view,
 * its `content` (the server's summary of everything before it) is the `previousSummary`, only the head's API view is
 * summarized (what lies before the block is already in the server's summary), and the block and everything before it
 * leave the view. An earlier summary of ours found first in the head is the `previousSummary` otherwise. The head's
 * system messages are not summarized: they are kept (`systemMessages`). A head whose view holds nothing else is
 * `NothingToCut`. The request's `head` is the head's API view as it is (for the server's own compaction), shortened
 * to end on a finished turn (`compactionCut`); a files message after the opening block gives back its file lists.
 * @category compaction
 */
export const prepareCompaction = <M extends Message>(
  messages: ReadonlyArray<M>,
  policy: CompactionPolicy,
  options: CompactOptions = {}
): CompactionPlan<M> | CompactionSkip<M> => {
  const waitingFrom = options.callsWaiting === true ? waitingTurnStart(messages) : undefined
  const requested = options.upTo === undefined
    ? planAfterSummary(messages, policy)
    : planUpTo(messages, Math.min(options.upTo, waitingFrom ?? options.upTo), policy)
  // the policy's cut keeps the newest step whole, so it never passes the waiting turn; held back all the same if it did
  const cutPlan = waitingFrom !== undefined && requested.cut > waitingFrom
    ? planUpTo(messages, waitingFrom, policy)
    : requested
  const held = waitingFrom !== undefined && (options.upTo ?? requested.cut) > waitingFrom
  const planned = planCut(messages, policy, options, cutPlan, waitingFrom)
  return planned._tag === "Skip" && held ? heldBack(planned, waitingFrom) : planned
}

/**
 * Where the last assistant turn starts when calls of it wait for their results (`CompactOptions.callsWaiting`): a
 * `tool_use` of it that none of the messages after it (tool results alone) answers. `undefined` when none waits.
 */
const waitingTurnStart = (messages: ReadonlyArray<Message>): number | undefined => {
  let i = messages.length - 1
  const answered = new Set<string>()
  for (; i >= 0 && messages[i]!.role === "user"; i--) {
    const content = messages[i]!.content
    if (typeof content === "string") return undefined
    for (const block of content) {
      if (block.type !== "tool_result") return undefined
      answered.add((block as { readonly tool_use_id: string }).tool_use_id)
    }
  }
  if (i < 0 || messages[i]!.role !== "assistant") return undefined
  if (!blocksOf(messages[i]!).some((b) => isToolUse(b) && !answered.has(b.id))) return undefined
  while (i > 0 && messages[i - 1]!.role === "assistant") i--
  return i
}

/** `skip` with its detail saying that calls waiting for their results held the cut back to `at`. */
const heldBack = <M extends Message>(skip: CompactionSkip<M>, at: number): CompactionSkip<M> => {
  const outcome = skip.result.outcome as Skipped
  return {
    _tag: "Skip",
    result: {
      messages: skip.result.messages,
      outcome: CompactOutcome.Skipped({
        ...outcome,
        detail: `${outcome.detail}; calls of the reply at message ${at} are waiting for their results, so the cut ` +
          "stays before it (that reply and everything after it are kept)"
      })
    }
  }
}

/** `prepareCompaction` from its cut (`cutPlan`), held before `waitingFrom` when calls wait there. */
const planCut = <M extends Message>(
  messages: ReadonlyArray<M>,
  policy: CompactionPolicy,
  options: CompactOptions,
  cutPlan: CutPlan,
  waitingFrom: number | undefined
): CompactionPlan<M> | CompactionSkip<M> => {
  const tokensBefore = estimateTokens(messages) - tokensAt(messages, options.unboundThinking ?? [])
  // the summary changes the prefix of every thinking block the tail keeps: the API drops them all (API-RULES 29)
  const plan = cutPlan.cut === 0 ? cutPlan : {
    ...cutPlan,
    keptTokens: cutPlan.keptTokens - tokensAt(messages, thinkingAfter(messages, { message: cutPlan.cut, block: -1 }))
  }
  if (plan.cut === 0) return nothingToCut(messages, policy, options, tokensBefore)
  // the new view holds the whole kept tail plus a summary, so it cannot free more than the head: skip before
  // paying for a summary that would be thrown away
  const min = minFreedOf(policy, options)
  const minFreedTokens = min.tokens
  if (tokensBefore - plan.keptTokens < minFreedTokens) {
    return tooLittleFreed(messages, tokensBefore, tokensBefore - plan.keptTokens, min)
  }
  const head = messages.slice(0, plan.cut)
  const first = head[0]!
  const previous = SummaryModule.summaryText(first)
  // an earlier summary is fed as `previousSummary`, not summarized again; blocks merged into its message after the
  // summary text (a caller's own `repair` merges consecutive user messages) are new content
  const sinceSummary: ReadonlyArray<Message> = previous === undefined
    ? head
    : typeof first.content !== "string" && first.content.length > 1
    ? [{ role: first.role, content: first.content.slice(1) }, ...head.slice(1)]
    : head.slice(1)
  const earlier = previous === undefined ? undefined : splitSummary(previous)
  // the server's compaction opens the API view inside the head: its summary replaces ours as the earlier summary, and
  // only what follows it is summarized (the part before it is dropped by the API and already in its summary); the
  // files message that follows a block this library put there carries the file lists on
  const server = Option.getOrUndefined(viewCompaction(head))
  const afterServer = server === undefined ? 0 : server.messageIndex + 1
  // the files message a block's compaction put right after it, or after the turns it kept verbatim
  const filesAt = server === undefined
    ? -1
    : head.findIndex((m, i) => i >= afterServer && filesOfMessage(m) !== undefined)
  const carried = filesAt < 0 ? undefined : filesOfMessage(head[filesAt]!)
  const summarized: ReadonlyArray<Message> = server === undefined ? sinceSummary : [
    ...afterBlock(head[server.messageIndex]!, server.blockIndex),
    ...head.slice(afterServer).filter((_, k) => afterServer + k !== filesAt)
  ]
  const previousSummary = server === undefined ? earlier?.body : server.block.content
  const fresh = summarized.filter((m) => m.role !== "system")
  if (fresh.length === 0) {
    return unchanged(
      messages,
      "NothingToCut",
      tokensBefore,
      "keepRecentTokens",
      "the head before the cut holds nothing but an earlier summary: the kept tail (keepRecentTokens " +
        `${fmt(policy.keepRecentTokens)}) is everything added since`
    )
  }
  // the block's message itself is never left out: the head must hold it (and the kept part must not)
  const compactionCut = finishedTurnEnd(head, afterServer)
  // the files appendix is computed from the whole conversation, the part the API dropped included
  const files = mergeFiles(
    mergeFiles(earlier?.files ?? noFiles, carried ?? noFiles),
    filesTouched(sinceSummary, options.classifier)
  )
  // after a server's compaction, the manifest is that of what follows its block (the server's summary, carried as
  // the earlier text, holds the part before it: its identifiers are carried, and it held the first task statement)
  // the turn the head ends in goes on in the kept tail when the tail holds no message the user typed apart from tool
  // results: its task is kept before the user's other messages; the identifiers' room follows the summary's budget
  const spanOptions = { turnGoesOn: !messages.slice(plan.cut).some(isPrompt), budgetTokens: policy.summaryBudgetTokens }
  const manifest = server === undefined
    ? nextManifest(earlier ?? {}, sinceSummary, options.classifier, spanOptions)
    : nextManifest({ ...earlier, body: server.block.content }, summarized, options.classifier, spanOptions)
  // the summary carries the head's manifest whatever the model writes: a head too short to free enough with it waits
  const floor = summaryFloorTokens(manifest, files, policy.summaryBudgetTokens)
  if (tokensBefore - plan.keptTokens - floor < minFreedTokens) {
    return tooLittleFreed(messages, tokensBefore, tokensBefore - plan.keptTokens - floor, min)
  }
  return {
    _tag: "Planned",
    messages,
    cut: plan.cut,
    tail: messages.slice(plan.cut),
    request: summarizeRequest(fresh, {
      ...(options.instructions === undefined ? {} : { instructions: options.instructions }),
      ...(previousSummary === undefined ? {} : { previousSummary }),
      head: serverHead(head, server, compactionCut)
    }),
    files,
    manifest,
    summaryBudget: {
      budgetTokens: policy.summaryBudgetTokens,
      // never more than what it replaces: the fresh content and the earlier summary it updates (ours, or the server's
      // it carries: the API dropped what that summarized), nor than what leaves the pass its `minFreedTokens`
      spanTokens: Math.max(
        0,
        Math.min(tokensBefore - plan.keptTokens - minFreedTokens, estimateTokens(fresh) + earlierTokens(first, server))
      )
    },
    systemMessages: headToolChanges(messages, plan.cut, server, afterServer),
    compactionCut,
    tokensBefore,
    turnsSummarized: countTurns(fresh),
    splitTurn: plan.splitTurn,
    overBudget: plan.overBudget,
    minFreedTokens,
    minFreedField: min.field,
    ...(min.setting === undefined ? {} : { minFreedSetting: min.setting }),
    classifier: options.classifier,
    ...(waitingFrom === undefined ? {} : { waitingFrom })
  }
}

/**
 * The tokens of the earlier summary a new one replaces along with the fresh span: the server's block's content when
 * one opens the head's API view, else this library's summary opening the head (its message, without the blocks merged
 * into it after the summary text, which are fresh content), else 0.
 */
const earlierTokens = (first: Message, server: ViewCompaction | undefined): number => {
  if (server !== undefined) return Math.ceil(server.block.content.length / CHARS_PER_TOKEN)
  if (SummaryModule.summaryText(first) === undefined) return 0
  return estimateTokens([typeof first.content === "string" ? first : { ...first, content: first.content.slice(0, 1) }])
}

/** The skip of a pass whose cut is 0, explained: the setting that would give it a cut. */
const nothingToCut = <M extends Message>(
  messages: ReadonlyArray<M>,
  policy: CompactionPolicy,
  options: CompactOptions,
  tokens: number
): CompactionSkip<M> => {
  if (options.upTo !== undefined) {
    return unchanged(
      messages,
      "NothingToCut",
      tokens,
      "upTo",
      `no safe cut after the API view's start at or before upTo (${options.upTo})`
    )
  }
  const turns = countTurns(messages)
  return turns <= policy.keepRecentTurns
    ? unchanged(
      messages,
      "TooShort",
      tokens,
      "maxTailTokens",
      `the view holds ${turns} turn(s), no more than keepRecentTurns (${policy.keepRecentTurns}), and its ` +
        `${fmt(tokens)} estimated tokens fit maxTailTokens (${fmt(policy.maxTailTokens)}): the cut goes inside a ` +
        "turn only past maxTailTokens"
    )
    : unchanged(
      messages,
      "NothingToCut",
      tokens,
      "keepRecentTokens",
      `the tail kept by keepRecentTokens (${fmt(policy.keepRecentTokens)}) and keepRecentTurns ` +
        `(${policy.keepRecentTurns}) reaches back to the start of the API view`
    )
}

/**
 * `planForPolicy` on a view that may open with this library's summary message: the summary is head, never part of the
 * kept turns, so the cut is planned on what follows it (and shifted past it). Planned with the summary, the turn
 * counting would merge it with the user message after it (consecutive user messages are one turn), and a tail that
 * fitted `maxTailTokens` when it was kept would be measured with the summary on top and split again: compacting an
 * output again with the same policy and nothing new would not be a fixed point.
 */
const planAfterSummary = (messages: ReadonlyArray<Message>, policy: CompactionPolicy): CutPlan => {
  if (messages.length < 2 || SummaryModule.summaryText(messages[0]!) === undefined) {
    return planForPolicy(messages, policy)
  }
  const after = planForPolicy(messages.slice(1), policy)
  return after.cut === 0 ? after : { ...after, cut: after.cut + 1, turnStart: after.turnStart + 1 }
}

/**
 * The cut of `CompactOptions.upTo`: `Cut.safeCut(messages, upTo)`, 0 (nothing to cut) when that is at or before the
 * API view's start. The fields `prepareCompaction` reads are those of `planForPolicy`'s plan.
 */
const planUpTo = (messages: ReadonlyArray<Message>, upTo: number, policy: CompactionPolicy): CutPlan => {
  const found = safeCut(messages, upTo)
  const cut = found <= apiViewStart(messages) ? 0 : found
  const kept = messages.slice(cut)
  const keptTokens = estimateTokens(kept)
  return {
    cut,
    turnStart: cut,
    splitTurn: cut > 0 && cut < messages.length && !isTurnStart(messages, cut),
    keptTurns: countTurns(kept),
    keptTokens,
    oversizedTurn: false,
    overBudget: keptTokens > policy.maxTailTokens
  }
}

/**
 * The head's system messages as `CompactionPlan.systemMessages` holds them: the opening block's `tool_changes` first
 * (as a system message of their own), then the head's system messages, then the tools the head's API view loaded by
 * reference and still holds (a removal by a later system message of the head unloads them). Loaded tools are never
 * lost when their tool search result is summarized away.
 */
const headToolChanges = <M extends Message>(
  messages: ReadonlyArray<M>,
  cut: number,
  server: ViewCompaction | undefined,
  afterServer: number
): ReadonlyArray<M> => {
  const head = messages.slice(0, cut)
  // only the live ones: not those a later user message cleared, and no settings of a summarized turn (API-RULES 26–27)
  const systems = liveHeadSystems(messages, afterServer, cut)
  const carried = server?.block.tool_changes ?? []
  const loaded = new Set<string>()
  for (const message of head.slice(afterServer)) {
    for (const block of blocksOf(message)) {
      if (message.role === "system" && block.type === "tool_removal") {
        const tool = (block as { readonly tool?: { readonly name?: unknown } }).tool
        if (typeof tool?.name === "string") loaded.delete(tool.name)
      } else if (message.role !== "system") {
        for (const name of referencedTools(block)) loaded.add(name)
      }
    }
  }
  const additions = [...loaded].map((name) => ({ type: "tool_addition", tool: { type: "tool_reference", name } }))
  return [
    ...(carried.length === 0 ? [] : [{ role: "system", content: [...carried] } as unknown as M]),
    ...systems,
    ...(additions.length === 0 ? [] : [{ role: "system", content: additions } as unknown as M])
  ]
}

/** True for an assistant message the API would call an unfinished turn at the end of an on-demand request. */
const isUnfinished = (message: Message): boolean => {
  if (message.role !== "assistant") return false
  if (typeof message.content === "string") return message.content.trim().length === 0
  const last = message.content.at(-1)
  return last === undefined || isToolUse(last) || isServerToolCall(last)
}

/**
 * The length of the longest prefix of `head` (not shorter than `from`) that ends on a finished turn: trailing
 * unfinished assistant messages (ending on a call, or empty), and the system messages after them, are left out.
 */
const finishedTurnEnd = (head: ReadonlyArray<Message>, from: number): number => {
  let end = head.length
  for (;;) {
    let last = end - 1
    while (last >= from && head[last]!.role === "system") last--
    if (last < from || !isUnfinished(head[last]!)) return end
    end = last
  }
}

/**
 * The head as a server compaction reads it: its API view, from the block that opens it (that block first in its
 * message, so it is the first block of the request), up to `end`.
 */
const serverHead = (
  head: ReadonlyArray<Message>,
  server: ViewCompaction | undefined,
  end: number
): ReadonlyArray<Message> => {
  if (server === undefined) return head.slice(0, end)
  const opening = head[server.messageIndex]!
  const first: Message = server.blockIndex === 0
    ? opening
    : { role: opening.role, content: (opening.content as ReadonlyArray<ContentBlock>).slice(server.blockIndex) }
  return [first, ...head.slice(server.messageIndex + 1, end)]
}

/** The blocks of `message` after its block `blockIndex`, as a message of the same role (none when there are none). */
const afterBlock = (message: Message, blockIndex: number): ReadonlyArray<Message> => {
  const rest = (message.content as ReadonlyArray<ContentBlock>).slice(blockIndex + 1)
  return rest.length === 0 ? [] : [{ role: message.role, content: rest }]
}

/**
 * The pure last step: builds `[summaryMessage, ...repaired tail]` from a plan and its summary, the outcome, and the
 * record a log stores, all from that one view. `Skipped` ("TooLittleFreed") when the new view would not free
 * `minFreedTokens` (a long summary). The result always passes `validate` when the tail did.
 *
 * The summary opens the new view (the API reads it: no compaction block with content is left after it). The head's
 * system messages (`plan.systemMessages`) follow it at the first place the API allows one: right after the summary
 * when the tail starts with an assistant message, otherwise after the tail's first user turn, joined to a system
 * message already there. With a user message first such a place always exists, so no system message is dropped or
 * folded into the summary text. The tail's own system messages stay where they are.
 *
 * **A server compaction block** (`summary.compaction`, from `ServerCompactionSummarizer`): the API's keep-tail shape,
 * `[{ role: "assistant", content: [block] }, ...kept, filesMessage(plan.files)]`, with `kept` exactly as it was
 * (`keptVerbatim`: its thinking stays valid on models with preserved thinking). The block is the server's, sent back
 * verbatim and first, so the deterministic files appendix cannot go inside it: it follows in a user text message of
 * its own (`Summary.filesMessage`), within what the summary's budget leaves beside the block's summary (the newest
 * paths, the others counted), which a later compaction reads back and carries forward. `kept` is
 * `messages.slice(plan.compactionCut)`: what the server did not read stays. When the kept turns cannot follow the block
 * unchanged (they need a repair beyond merging neighbours, a carried tool listing or the head's system messages, their
 * first message is a system message or has the role of the last one the server read, or they end on an open call),
 * the view is `[block, filesMessage, ...repaired kept]` with the head's system messages placed in it, re-emitted as
 * text only (the block's `tool_changes` already carry their tool changes). A later compaction takes the block's
 * content as its `previousSummary` (and a later server compaction sends the block first).
 * @category compaction
 */
export const finishCompaction = <M extends Message>(
  plan: CompactionPlan<M>,
  summary: Summary
): FinishedCompaction<M> => {
  const block = summary.compaction
  // a server compaction block replaces only what the server read (`compactionCut`); the rest is kept after it
  const cut = block === undefined ? plan.cut : plan.compactionCut
  const tail = cut === plan.cut ? plan.tail : plan.messages.slice(cut)
  // the block goes first, verbatim, in an assistant message of its own (the typed view keeps `BuiltMessage` for SDK
  // assignability: this message is a beta block, sent with `client.beta.messages`)
  const summaryMsg: BuiltMessage = block === undefined
    ? SummaryModule.summaryMessage(summaryWithManifest(summary.text, plan.manifest, plan.files, plan.summaryBudget))
    : { role: "assistant", content: [block] } as unknown as BuiltMessage
  // the tail is repaired on its own, so the summary stays a message of its own (a tail that starts with an assistant
  // message gets no filler in front of it: the summary, or the files message after a block, is its user message)
  // (a tail with nothing to send leaves the summary alone)
  // the turn whose calls wait for their results goes on as it is, after the repaired rest: repair would answer them
  const waiting = plan.waitingFrom === undefined ? [] : plan.messages.slice(Math.max(cut, plan.waitingFrom))
  const repairedTail = repairResult(waiting.length === 0 ? tail : tail.slice(0, tail.length - waiting.length))
  const repairedRest = Result.isSuccess(repairedTail)
    ? repairedTail.success
    : { messages: [], report: repairedTail.failure.report }
  const repaired = waiting.length === 0
    ? repairedRest
    : { messages: [...repairedRest.messages, ...waiting], report: repairedRest.report }
  // the newest MCP tool listing of each server the kept part still calls goes with it (API-RULES 30)
  const listings = carriedListings(plan.messages, apiViewStart(plan.messages), cut)
  const repairedKept = withListings(
    repaired.report.insertedLeadingUser ? repaired.messages.slice(1) : repaired.messages,
    listings
  )
  // the filler put before a tail that opens on an assistant reply is dropped again (the summary is its user message):
  // it is no repair of the new view, so a valid tail (a `Conversation`'s, which it built itself) reports none
  const repairs = repaired.report.insertedLeadingUser
    ? { ...repaired.report, insertedLeadingUser: false }
    : repaired.report
  const headSystems = block === undefined
    ? plan.systemMessages
    : plan.systemMessages.filter((m) => !tail.includes(m)).flatMap(withoutToolChanges)
  // the API's keep-tail shape: the block, then the kept turns as they were (their thinking stays valid)
  const verbatim = block !== undefined && headSystems.length === 0 &&
    keepsTurnsVerbatim(plan.messages, cut, repaired.report, listings.length)
  // the files message keeps within what the summary's budget leaves beside the server's summary
  const files = block === undefined
    ? undefined
    : filesMessage(plan.files, filesRoom(plan.summaryBudget.budgetTokens, estimateTokens([summaryMsg])))
  const next: Array<M | BuiltMessage> = files === undefined
    ? withSystemMessages(summaryMsg, repairedKept, headSystems)
    : verbatim
    ? [summaryMsg, ...tail, files]
    : withSystemMessages<M | BuiltMessage>(summaryMsg, [files, ...repairedKept], headSystems)
  // every thinking block of the new view was bound to the head the summary replaced: the API drops them (not those
  // of turns kept verbatim after the server's block)
  const tokensAfter = estimateTokens(next) - (verbatim ? 0 : tokensAt(next, allThinking(next)))
  if (plan.tokensBefore - tokensAfter < plan.minFreedTokens) {
    return tooLittleFreed(plan.messages, plan.tokensBefore, plan.tokensBefore - tokensAfter, {
      tokens: plan.minFreedTokens,
      field: plan.minFreedField ?? "minFreedTokens",
      setting: plan.minFreedSetting
    }).result
  }
  // the removed span's anchors now (the outcome holds them, not the span); their presence in the new view when read
  const retentionOptions = { tail: verbatim ? tail : repairedKept, classifier: plan.classifier }
  const anchors = anchorsOf(plan.messages.slice(0, cut), retentionOptions)
  let measured: Retention | undefined
  const info: CompactedInfo = {
    cut: { removed: { from: 0, to: cut }, kept: { from: cut, to: plan.messages.length } },
    // set as an accessor below: an object spread reads a getter, and the outcome is one
    retention: undefined as unknown as Retention,
    removed: removedRecords(plan.messages.slice(0, cut)),
    turnsSummarized: plan.turnsSummarized,
    messagesBefore: plan.messages.length,
    messagesAfter: next.length,
    tokensBefore: plan.tokensBefore,
    tokensAfter,
    splitTurn: plan.splitTurn,
    overBudget: plan.overBudget,
    summary,
    summarizer: summary.summarizer,
    // turns kept verbatim are sent as they were: nothing of them was repaired
    repairs: verbatim ? { ...repairs, mergedMessages: 0 } : repairs
  }
  const outcome = summary.fellBackFrom === undefined ? CompactOutcome.Compacted(info) : CompactOutcome.FellBack({
    ...info,
    primary: summary.fellBackFrom.summarizer,
    primaryError: summary.fellBackFrom.error.message
  })
  Object.defineProperty(outcome, "retention", {
    enumerable: true,
    configurable: true,
    get: (): Retention => (measured ??= retention(anchors, next, retentionOptions))
  })
  return {
    messages: next,
    outcome,
    record: {
      view: next,
      cut,
      summarizer: summary.summarizer,
      tokensBefore: plan.tokensBefore,
      tokensAfter,
      turnsSummarized: plan.turnsSummarized
    },
    ...(verbatim ? { keptVerbatim: true } : {})
  }
}

/**
 * True when the turns after a server's compaction block can follow it exactly as they were, as the API's keep-tail
 * compaction wants them ("Compaction and preserved thinking"): the repair of them changed nothing but merge
 * neighbours of the same role (the API merges them itself), no tool listing is carried into them, and the
 * first of them is neither a system message nor of the role of the last message the server read (the API would merge
 * it into that one). The files message goes after them, so they must end on a user turn or a finished assistant one.
 * No turn kept is trivially verbatim.
 */
const keepsTurnsVerbatim = (
  messages: ReadonlyArray<Message>,
  cut: number,
  report: RepairReport,
  listings: number
): boolean => {
  const { mergedMessages: _merged, insertedLeadingUser: _leading, ...changes } = report
  const changed = Object.values(changes).some((v) =>
    v === true || (typeof v === "number" ? v > 0 : Array.isArray(v) && v.length > 0)
  )
  if (listings > 0 || changed) return false
  const tail = messages.slice(cut)
  const first = tail[0]
  const last = messages[cut - 1]
  if (first === undefined) return true
  if (first.role === "system" || last === undefined || first.role === last.role) return false
  const end = tail.at(-1)!
  return end.role === "user" || (end.role === "assistant" && !isUnfinished(end))
}

/**
 * `[summary, ...kept]` with the head's system messages put in: each wants the place right after the summary, and
 * the kept ones keep theirs (a valid tail's system messages are at allowed places, which stay allowed after a user
 * message), so `placeSystemMessages` moves only the head's, to the first allowed place, or joins them to a kept one.
 */
const withSystemMessages = <M extends Message>(
  summary: BuiltMessage,
  kept: ReadonlyArray<M>,
  headSystems: ReadonlyArray<M>
): Array<M | BuiltMessage> => {
  if (headSystems.length === 0) return [summary, ...kept]
  const list: Array<M | BuiltMessage> = [summary]
  const systems: Array<SystemPlacement<M | BuiltMessage>> = headSystems.map((message) => ({ wanted: 1, message }))
  for (const message of kept) {
    if (message.role === "system") systems.push({ wanted: list.length, message })
    else list.push(message)
  }
  return placeSystemMessages(list, systems).messages
}

/**
 * A head system message as it is re-emitted after a server compaction block: its text only. The block's
 * `tool_changes` already take the tools to the set in effect at the end of the head, so applying the message's tool
 * changes again would apply them twice; a message of tool changes only is not re-emitted.
 */
const withoutToolChanges = <M extends Message>(message: M): ReadonlyArray<M> => {
  if (!Array.isArray(message.content)) return [message] // a string, or no content (API-RULES 26)
  const text = message.content.filter((b) => b.type === "text")
  if (text.length === message.content.length) return [message]
  return text.length === 0 ? [] : [{ role: message.role, content: text } as unknown as M]
}

/** The summarize step: the plan's request through the `Summarizer`; a failure keeps the caller's messages. */
const summarizePlan = <M extends Message>(plan: CompactionPlan<M>) =>
  Effect.gen(function* () {
    const summarizer = yield* Summarizer
    return yield* summarizer.summarize(plan.request)
  }).pipe(
    Effect.mapError((cause) => new CompactError<M>({ reason: "Summarize", messages: plan.messages as Array<M>, cause }))
  )

const annotateFinished = <M extends Message>(finished: FinishedCompaction<M>) =>
  finished.record === undefined ? Effect.void : Effect.annotateCurrentSpan({
    "compaction.tokens_after": finished.record.tokensAfter,
    "compaction.turns_summarized": finished.record.turnsSummarized,
    "compaction.summarizer": finished.record.summarizer
  })

/**
 * Records a finished compaction in `log`. The snapshot is taken before the summary, so its view must be the
 * compacted messages (same length); otherwise it fails with `InvalidInput` and nothing is written.
 */
const recordIn = <M extends Message>(
  log: SessionLogShape,
  snapshot: Snapshot,
  finished: FinishedCompaction<M>,
  messages: ReadonlyArray<M>
) =>
  finished.record === undefined ? Effect.void : log.recordCompaction(recordInput(finished.record, snapshot)).pipe(
    Effect.asVoid,
    Effect.mapError((cause) => new CompactError<M>({ reason: "Persist", messages: messages as Array<M>, cause }))
  )

const checkSnapshot = <M extends Message>(log: SessionLogShape, messages: ReadonlyArray<M>) =>
  Effect.flatMap(
    log.snapshot,
    (snapshot) =>
      snapshot.view.length === messages.length ? Effect.succeed(snapshot) : Effect.fail(
        new CompactError<M>({
          reason: "Persist",
          messages: messages as Array<M>,
          cause: new SessionLogError({
            reason: "InvalidInput",
            sessionId: log.sessionId,
            detail: `compactContext got ${messages.length} messages but the session log's view has ` +
              `${snapshot.view.length}: pass the log's current view`
          })
        })
      )
  )

const compactWith = <M extends Message>(
  messages: ReadonlyArray<M>,
  policy: CompactionPolicy,
  options: CompactOptions,
  log: SessionLogShape | undefined
): Effect.Effect<CompactResult<M>, CompactError<M>, Summarizer> =>
  Effect.gen(function* () {
    yield* Effect.annotateCurrentSpan({
      "compaction.tokens_before": estimateTokens(messages),
      "compaction.messages": messages.length
    })
    const plan = prepareCompaction(messages, policy, options)
    if (plan._tag === "Skip") return plan.result
    const snapshot = log === undefined ? undefined : yield* checkSnapshot(log, messages)
    const finished = finishCompaction(plan, yield* summarizePlan(plan))
    if (log !== undefined && snapshot !== undefined) yield* recordIn(log, snapshot, finished, messages)
    yield* annotateFinished(finished)
    return { messages: finished.messages, outcome: finished.outcome }
  })

/**
 * Compacts `messages` per `policy`: keeps the newest messages per `planForPolicy` and replaces the rest with
 * `summaryMessage`. The result always passes `validate`. An earlier summary in the head is fed to the summarizer as
 * `previousSummary` and its file lists are carried forward. When a `SessionLog` is provided, the boundary is persisted
 * (a repaired tail included, so a resume rebuilds exactly the returned view) and a failed persist fails the pass: the
 * result is never reported as applied unless it is stored. `compactAndRecord` is the same pass with the log required
 * by its type.
 *
 * It is `prepareCompaction` (pure) → the `Summarizer` → `finishCompaction` (pure) → the record.
 *
 * Guarantees: the input is never mutated; on failure `CompactError.messages` is the input; compacting again with no
 * new turns never makes the context larger (it is `Skipped`).
 * @category compaction
 */
export const compactContext = <M extends Message>(
  messages: ReadonlyArray<M>,
  policy: CompactionPolicy,
  options: CompactOptions = {}
): Effect.Effect<CompactResult<M>, CompactError<M>, Summarizer> =>
  Effect.serviceOption(SessionLog).pipe(
    Effect.flatMap((log) => compactWith(messages, policy, options, Option.getOrUndefined(log))),
    Effect.withSpan("compactContext")
  )

/**
 * `compactContext` with the `SessionLog` a requirement: the boundary is always recorded before the result is
 * returned, and a failed persist fails with `CompactError("Persist")` carrying the input.
 * @category compaction
 */
export const compactAndRecord = <M extends Message>(
  messages: ReadonlyArray<M>,
  policy: CompactionPolicy,
  options: CompactOptions = {}
): Effect.Effect<CompactResult<M>, CompactError<M>, Summarizer | SessionLog> =>
  Effect.gen(function* () {
    return yield* compactWith(messages, policy, options, yield* SessionLog)
  }).pipe(Effect.withSpan("compactContext"))
