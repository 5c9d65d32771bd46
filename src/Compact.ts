/**
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
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import { planForPolicy } from "./Cut.ts"
import { type BuiltMessage, isText, type Message } from "./Message.ts"
import type { CompactionPolicy } from "./Policy.ts"
import { mergeFiles, noFiles, renderAppendix, splitAppendix } from "./Render.ts"
import { SessionLog, SessionLogError } from "./SessionLog.ts"
import { type SummarizeError, Summarizer, summarizeRequest, type Summary } from "./Summarizer.ts"
import { estimateTokens } from "./Tokens.ts"
import { filesTouched, type ToolClassifier } from "./Tools.ts"
import { countTurns } from "./Turns.ts"
import { type RepairReport, repairResult } from "./Validate.ts"

// ============================================================================
// The summary message
// ============================================================================

/** The first line of every summary message; it is how a later compaction finds an earlier summary. @category constants */
export const SUMMARY_HEADER = "[Summary of the earlier conversation]"

const SUMMARY_PREAMBLE = "This message was written by the context compactor, not by the user. It summarizes the " +
  "earlier part of this conversation, which was removed to fit the context window. It is background for continuing " +
  "the work, not a new instruction: follow the most recent user messages below."

/**
 * The user-role message injected in place of a summarized prefix. It says plainly that it is a summary of earlier
 * conversation and not new instructions. It is assignable to the SDK's `MessageParam`.
 * @category constructors
 */
export const summaryMessage = (summaryText: string): BuiltMessage => ({
  role: "user",
  content: [{ type: "text", text: `${SUMMARY_HEADER}\n${SUMMARY_PREAMBLE}\n\n${summaryText}` }]
})

/**
 * The summary text of a message built by `summaryMessage` (appendix included), or `undefined` for any other message.
 * @category guards
 */
export const summaryText = (message: Message): string | undefined => {
  if (message.role !== "user") return undefined
  const first = typeof message.content === "string" ? message.content : message.content[0]
  const text = typeof first === "string" ? first : first !== undefined && isText(first) ? first.text : undefined
  if (text === undefined || !text.startsWith(`${SUMMARY_HEADER}\n`)) return undefined
  const body = text.slice(SUMMARY_HEADER.length + 1)
  return body.startsWith(`${SUMMARY_PREAMBLE}\n\n`) ? body.slice(SUMMARY_PREAMBLE.length + 2) : body
}

// ============================================================================
// Outcome and errors
// ============================================================================

/** Why a compaction did nothing. @category models */
export type SkipReason =
  /** No more turns than the floor keeps, and no oversized turn to split. */
  | "TooShort"
  /** The plan keeps everything, or the head holds nothing but an earlier summary. */
  | "NothingToCut"
  /** The compacted view would free fewer than `minFreedTokens`; compacting would not be worth it (or would loop). */
  | "TooLittleFreed"

/** What a compaction that ran did. @category models */
export interface CompactedInfo {
  readonly turnsSummarized: number
  readonly messagesBefore: number
  readonly messagesAfter: number
  readonly tokensBefore: number
  readonly tokensAfter: number
  /** The cut lies inside a turn: that turn's prefix was summarized too. */
  readonly splitTurn: boolean
  /** The kept tail is still larger than `policy.maxTailTokens` (the newest step alone does not fit). */
  readonly overBudget: boolean
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
  Skipped: { readonly reason: SkipReason; readonly tokens: number }
  Compacted: CompactedInfo
  FellBack: CompactedInfo & { readonly primary: string; readonly primaryError: string }
}>

/** Constructors and matchers for `CompactOutcome`. @category constructors */
export const CompactOutcome: Data.TaggedEnum.Constructor<CompactOutcome> = Data.taggedEnum<CompactOutcome>()

/**
 * A compaction that could not complete. `messages` is the caller's input, unchanged: nothing is lost. `reason`
 * says which step failed; `cause` is the underlying typed error.
 * @category errors
 */
export class CompactError<M extends Message = Message> extends Data.TaggedError("CompactError")<{
  readonly reason: "Summarize" | "Persist"
  readonly messages: ReadonlyArray<M>
  readonly cause: SummarizeError | SessionLogError
}> {
  override get message(): string {
    const step = this.reason === "Summarize" ? "summarizing failed" : "persisting the compaction failed"
    return `compaction not applied (${step}): ${this.cause.message}`
  }
}

// ============================================================================
// compactContext
// ============================================================================

/**
 * Tokens a compaction must free at least, by default. Below it the pass is `Skipped` ("TooLittleFreed"), which is
 * what stops compact-again loops: a second pass with no new turns would free almost nothing. @category constants
 */
export const DEFAULT_MIN_FREED_TOKENS = 2_000

/** Options of `compactContext`. @category models */
export interface CompactOptions {
  /** The user's `/compact <focus>` argument, passed to the summarizer. */
  readonly instructions?: string
  /** Tokens the pass must free; default `DEFAULT_MIN_FREED_TOKENS`. */
  readonly minFreedTokens?: number
  /** Classifies tool calls for the files appendix; default `defaultToolClassifier`. */
  readonly classifier?: ToolClassifier
}

/** The result of `compactContext`: the new view and what happened. @category models */
export interface CompactResult<M extends Message> {
  readonly messages: Array<M | BuiltMessage>
  readonly outcome: CompactOutcome
}

const unchanged = <M extends Message>(
  messages: ReadonlyArray<M>,
  reason: SkipReason,
  tokens: number
): CompactResult<M> => ({
  messages: messages as Array<M>,
  outcome: CompactOutcome.Skipped({ reason, tokens })
})

/**
 * Compacts `messages` per `policy`: keeps the newest messages per `planForPolicy` and replaces the rest with
 * `summaryMessage`. The result always passes `validate`. An earlier summary in the head is fed to the summarizer as
 * `previousSummary` and its file lists are carried forward. When a `SessionLog` is provided, the boundary is persisted
 * (a repaired tail included, so a resume rebuilds exactly the returned view) and a failed persist fails the pass: the
 * result is never reported as applied unless it is stored.
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
  Effect.gen(function* () {
    const tokensBefore = estimateTokens(messages)
    yield* Effect.annotateCurrentSpan({
      "compaction.tokens_before": tokensBefore,
      "compaction.messages": messages.length
    })
    const plan = planForPolicy(messages, policy)
    if (plan.cut === 0) {
      return unchanged(
        messages,
        countTurns(messages) <= policy.keepRecentTurns ? "TooShort" : "NothingToCut",
        tokensBefore
      )
    }
    // the new view holds the whole kept tail plus a summary, so it cannot free more than the head: skip before
    // paying for a summary that would be thrown away
    const minFreed = options.minFreedTokens ?? DEFAULT_MIN_FREED_TOKENS
    if (tokensBefore - plan.keptTokens < minFreed) return unchanged(messages, "TooLittleFreed", tokensBefore)
    const head = messages.slice(0, plan.cut)
    const tail = messages.slice(plan.cut)
    const first = head[0]!
    const previous = summaryText(first)
    // an earlier summary is fed as `previousSummary`, not summarized again; blocks merged into its message after the
    // summary text (a caller's own `repair` merges consecutive user messages) are new content
    const fresh = previous === undefined
      ? head
      : typeof first.content !== "string" && first.content.length > 1
      ? [{ role: first.role, content: first.content.slice(1) } as unknown as M, ...head.slice(1)]
      : head.slice(1)
    if (fresh.length === 0) return unchanged(messages, "NothingToCut", tokensBefore)

    const log = Option.getOrUndefined(yield* Effect.serviceOption(SessionLog))
    const snapshot = log === undefined ? undefined : yield* log.snapshot
    if (log !== undefined && snapshot !== undefined && snapshot.view.length !== messages.length) {
      return yield* new CompactError({
        reason: "Persist",
        messages,
        cause: new SessionLogError({
          reason: "InvalidInput",
          sessionId: log.sessionId,
          detail: `compactContext got ${messages.length} messages but the session log's view has ` +
            `${snapshot.view.length}: pass the log's current view`
        })
      })
    }
    const earlier = previous === undefined ? undefined : splitAppendix(previous)
    const summarizer = yield* Summarizer
    const summary = yield* summarizer.summarize(summarizeRequest(fresh, {
      ...(options.instructions === undefined ? {} : { instructions: options.instructions }),
      ...(earlier === undefined ? {} : { previousSummary: earlier.body })
    })).pipe(Effect.mapError((cause) => new CompactError({ reason: "Summarize", messages, cause })))

    const files = mergeFiles(earlier?.files ?? noFiles, filesTouched(fresh, options.classifier))
    const text = `${summary.text.trim()}\n\n${renderAppendix(files)}`
    const summaryMsg = summaryMessage(text)
    // the tail is repaired on its own, so the summary stays a message of its own (a tail that starts with an assistant
    // message gets no filler in front of it: the summary is its user message)
    // (a tail with nothing to send leaves the summary alone)
    const repairedTail = repairResult(tail)
    const repaired = Result.isSuccess(repairedTail)
      ? repairedTail.success
      : { messages: [], report: repairedTail.failure.report }
    const keptTail = repaired.report.insertedLeadingUser ? repaired.messages.slice(1) : repaired.messages
    const next: Array<M | BuiltMessage> = [summaryMsg, ...keptTail]
    const tokensAfter = estimateTokens(next)
    if (tokensBefore - tokensAfter < minFreed) return unchanged(messages, "TooLittleFreed", tokensBefore)

    const info: CompactedInfo = {
      turnsSummarized: countTurns(fresh),
      messagesBefore: messages.length,
      messagesAfter: next.length,
      tokensBefore,
      tokensAfter,
      splitTurn: plan.splitTurn,
      overBudget: plan.overBudget,
      summary,
      summarizer: summary.summarizer,
      repairs: repaired.report
    }
    if (log !== undefined && snapshot !== undefined) {
      // a repaired tail (an aborted call answered, messages merged) is stored as it is; an unrepaired one as
      // "summary + kept entries", with ids only
      yield* log.recordCompaction({
        summary: summaryMsg,
        ...(repaired.messages === tail ? {} : { kept: keptTail }),
        snapshot,
        cut: plan.cut,
        summarizer: summary.summarizer,
        tokensBefore,
        tokensAfter,
        turnsSummarized: info.turnsSummarized,
        expectedView: next
      }).pipe(Effect.mapError((cause) => new CompactError({ reason: "Persist", messages, cause })))
    }
    yield* Effect.annotateCurrentSpan({
      "compaction.tokens_after": tokensAfter,
      "compaction.turns_summarized": info.turnsSummarized,
      "compaction.summarizer": summary.summarizer
    })
    const outcome = summary.fellBackFrom === undefined ? CompactOutcome.Compacted(info) : CompactOutcome.FellBack({
      ...info,
      primary: summary.fellBackFrom.summarizer,
      primaryError: summary.fellBackFrom.error.message
    })
    return { messages: next, outcome }
  }).pipe(Effect.withSpan("compactContext"))
