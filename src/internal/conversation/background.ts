/**
 * Background compaction for `Conversation` (`CompactionPolicy.backgroundAt`): the summary of the prefix the next
 * compaction will cut, made in a fiber forked in the conversation's scope while the agent goes on, and handed to the
 * step that compacts.
 *
 * The rules it keeps:
 * - it only ever computes a summary: the view, the state and the log are never touched until `Conversation` applies
 *   the summary through the blocking path's own `finishCompaction` and `applyCompaction` (the log records it then);
 * - it is started once per epoch, at the first `prepare` (that did not compact) after the context passed the
 *   pre-trigger, on the plan's cut then, or a later one whose tail will still fit `keptCeiling` at the trigger
 *   (`startPlan`); a `refresh` starts it again, on the plan's cut of the moment, only when a
 *   message of its head changed (an offload rewrote it) or it failed, so the pending summary is always of the head
 *   of the current view: the very request the blocking path would send for that cut;
 * - a server compaction block (the API's background compaction) is swapped in at the first step after it came back
 *   (`arrived`), before the trigger: the messages its request sent are dropped from the front and the block put in
 *   their place, every message appended since kept after it as it is, so the thinking produced while the summary
 *   was being written stays valid; not applied then, it is never applied;
 * - at the trigger (`take`), it is applied on its own cut (`prepareCompaction` with `upTo` that cut: the same
 *   request, so the same summary, view and retention as a blocking compaction on that cut), the messages after it
 *   kept; when the tail from that cut is over `keptCeiling` (`compactAtTokens − summaryBudgetTokens −
 *   minGrowthTokens`: the compaction still leaves `minGrowthTokens` of room under the trigger), it is updated to the
 *   trigger's cut instead, with only the messages between the two cuts (the summarizer's request with it as
 *   `previousSummary`). A later cut, a changed head, a failed or interrupted fiber, a failed update or a server
 *   compaction block gives `undefined`: the caller falls back to the blocking path;
 * - a resumed conversation recomputes it: the cut of the pending summary goes in each reply's step metadata, an
 *   empty reply's too (`ReplyMeta.backgroundCut`: a cut, never a summary), and opening the log starts the summary of
 *   that cut again (`resumeCut`), so a resumed conversation applies what the live one would have;
 * - closing the conversation's scope interrupts the fiber.
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import type * as Scope from "effect/Scope"
import { type CompactionPlan, prepareCompaction } from "../../Compact.ts"
import type { Message } from "../../Message.ts"
import { safeCut } from "../../Cut.ts"
import type { CompactionPolicy } from "../../Policy.ts"
import type { Entry, Loaded } from "../../SessionEntry.ts"
import type { SummarizeError } from "../../SummarizeError.ts"
import { type SummarizeRequest, summarizeRequest, type SummarizerShape, type Summary } from "../../Summarizer.ts"
import { splitSummary } from "../../Summary.ts"
import { estimateMessageTokens, estimateTokens } from "../../Tokens.ts"
import type { ToolClassifier } from "../../Tools.ts"
import { blocksOf, isCompactionWithContent } from "../blocks.ts"
import { summaryWithManifest } from "../summary.ts"
import { type CheckedState, triggerContext } from "./stepChecks.ts"

/** What the background reads of a conversation state: what the trigger reads (view, epoch, latest reply and usage). */
export type BackgroundState = CheckedState

/**
 * The compaction options the background plans with (the trigger path's: no instructions, no `upTo`), and the
 * estimated tokens of the system prompt and tools the requests carry (`headTokens`, which the trigger's estimate
 * counts when the latest reply reported no usage).
 */
export interface BackgroundOptions {
  readonly minFreedTokens?: number | undefined
  readonly classifier?: ToolClassifier | undefined
  readonly headTokens?: number | undefined
}

/** A summary in the making: its plan (over the view it was started on) and its fiber. */
interface Pending {
  readonly epoch: number
  readonly plan: CompactionPlan<Message>
  readonly fiber: Fiber.Fiber<Summary, SummarizeError>
}

/**
 * True once the context the trigger reads (`triggerContext`: the latest usage reported for a request of the current
 * epoch plus the estimate of what the view gained since, else the estimate of the request with `headTokens`) passes
 * `backgroundAt` of the trigger (`compactAtTokens`). Always false without `backgroundAt`.
 */
export const backgroundDue = (state: BackgroundState, policy: CompactionPolicy, headTokens: number): boolean =>
  policy.backgroundAt !== undefined &&
  triggerContext(state, headTokens).tokens > Math.floor(policy.backgroundAt * policy.compactAtTokens)

/**
 * The largest tail the trigger's step keeps on the background's cut: `compactAtTokens − summaryBudgetTokens −
 * minGrowthTokens`, what a tail may hold for the context after the compaction (that tail and a summary within its
 * budget) to leave `minGrowthTokens` of room under the trigger, as the policy's own cut does (`make` holds
 * `maxTailTokens` under it). Over it, the summary is updated to the trigger's cut.
 */
export const keptCeiling = (policy: CompactionPolicy): number =>
  policy.compactAtTokens - policy.summaryBudgetTokens - policy.minGrowthTokens

/**
 * The cut the background summarizes at the pre-trigger: the policy's plan of the view, or, when the tail it keeps
 * would outgrow `keptCeiling` by the trigger (it grows by what the context still has to grow to reach
 * `compactAtTokens`, and by the overshoot of the step that passes it: a tenth of the trigger is kept for that), the
 * earliest safe cut after it whose tail leaves that room under the ceiling (a
 * `prepareCompaction` with `upTo` that cut: the request a blocking compaction on that cut sends). So the summary is
 * usually applied on its own cut at the trigger, without an update. Not when the tail such a cut keeps at the trigger
 * (about the ceiling less that tenth) would be under `keepRecentTokens`.
 */
const startPlan = (
  view: ReadonlyArray<Message>,
  context: number,
  policy: CompactionPolicy,
  planOf: (view: ReadonlyArray<Message>, upTo?: number) => CompactionPlan<Message> | { readonly _tag: "Skip" }
) => {
  const plan = planOf(view)
  if (plan._tag === "Skip") return plan
  // a tenth of the trigger spare: the step that fires the trigger usually passes it by that much or less
  const spare = Math.floor(policy.compactAtTokens / 10)
  // the tail such a cut keeps at the trigger (about the ceiling less the spare) must still hold keepRecentTokens
  if (keptCeiling(policy) - spare < policy.keepRecentTokens) return plan
  const room = keptCeiling(policy) - Math.max(0, policy.compactAtTokens - context) - spare
  if (estimateTokens(plan.tail) <= room) return plan
  let at = view.length
  let tail = 0
  while (at > plan.cut + 1 && tail + estimateMessageTokens(view[at - 1]!) <= room) {
    tail += estimateMessageTokens(view[at - 1]!)
    at--
  }
  if (at >= view.length) return plan
  for (let upTo = at; upTo < view.length; upTo++) {
    if (safeCut(view, upTo) < at) continue
    const later = planOf(view, upTo)
    return later._tag === "Planned" && later.cut > plan.cut ? later : plan
  }
  return plan
}

/** The first `cut` messages of `view` are the very messages (the same objects) the plan summarizes. */
const headIntact = (plan: CompactionPlan<Message>, view: ReadonlyArray<unknown>): boolean => {
  if (view.length < plan.cut) return false
  for (let i = 0; i < plan.cut; i++) if (view[i] !== plan.messages[i]) return false
  return true
}

/**
 * The request that updates `summary` (of `from.cut`) to the cut of `to`: the messages between the two cuts (system
 * messages aside, as `prepareCompaction` leaves them), with the summary's body as the summary message would hold it
 * (`previousSummary`). `undefined` when the span holds a compaction block (its summary would replace ours).
 */
const updateRequest = (
  from: CompactionPlan<Message>,
  summary: Summary,
  to: CompactionPlan<Message>
): SummarizeRequest | undefined => {
  const span = to.messages.slice(from.cut, to.cut)
  if (span.some((m) => blocksOf(m).some((b) => isCompactionWithContent(b)))) return undefined
  const fresh = span.filter((m) => m.role !== "system")
  if (fresh.length === 0) return undefined
  const body = splitSummary(summaryWithManifest(summary.text, from.manifest, from.files, from.summaryBudget)).body
  return summarizeRequest(fresh, { previousSummary: body })
}

/** A summary made in the background, with the plan (of the view it is applied to) it finishes. */
export interface ArrivedSummary {
  readonly plan: CompactionPlan<Message>
  readonly summary: Summary
}

/** The background of one conversation: what `Conversation`'s service calls at its steps. */
export interface Background {
  /**
   * After a `prepare` that did not compact: when due, (re)starts the summary of the current plan's head unless the
   * pending one is of that very head and has not failed.
   */
  readonly refresh: (state: BackgroundState) => Effect.Effect<void>
  /**
   * At the trigger, for the plan of the blocking path: the summary to finish it with (waiting for the fiber if it is
   * still running, and updating it when the cut moved on), or `undefined` for the blocking path.
   */
  readonly take: (
    state: BackgroundState,
    plan: CompactionPlan<Message>
  ) => Effect.Effect<ArrivedSummary | undefined>
  /**
   * At any step: a server compaction block (`Summary.compaction`) that has come back, with the plan of the current
   * view on its cut, to be swapped in now, on the first request after it arrived (the API's background compaction:
   * thinking produced while the summary was being written stays valid only then). Handed out once: not applied now,
   * it is gone (a later swap would invalidate the thinking produced after it came back). `undefined` when none. Runs
   * at once (it polls the fiber, never waits): call it only from inside an effect of the service.
   */
  readonly arrived: (state: BackgroundState) => ArrivedSummary | undefined
  /** Interrupts and forgets the pending summary (after a compaction was applied). */
  readonly drop: Effect.Effect<void>
  /** The cut of the pending summary of `epoch`, if any: what a reply's step metadata records. */
  readonly pendingCut: (epoch: number) => number | undefined
  /** Starts the summary of the first `cut` messages of the state's view again (a resumed conversation). */
  readonly resume: (state: BackgroundState, cut: number) => Effect.Effect<void>
}

/** A background forked in `scope` (closing it interrupts the fiber), summarizing with `summarizer`. */
export const makeBackground = (
  summarizer: SummarizerShape,
  scope: Scope.Scope,
  policy: CompactionPolicy,
  options: BackgroundOptions
): Background => {
  let pending: Pending | undefined
  const planOf = (view: ReadonlyArray<unknown>, upTo?: number) =>
    prepareCompaction(view as ReadonlyArray<Message>, policy, {
      minFreedTokens: options.minFreedTokens,
      classifier: options.classifier,
      upTo
    })
  const drop = Effect.suspend(() => {
    const fiber = pending?.fiber
    pending = undefined
    return fiber === undefined ? Effect.void : Fiber.interrupt(fiber)
  })
  const start = (epoch: number, plan: CompactionPlan<Message>) =>
    Effect.flatMap(drop, () =>
      Effect.map(Effect.forkIn(summarizer.summarize(plan.request), scope), (fiber) => {
        pending = { epoch, plan, fiber }
      }))
  const failed = (fiber: Fiber.Fiber<Summary, SummarizeError>): boolean => {
    const exit = fiber.pollUnsafe()
    return exit !== undefined && Exit.isFailure(exit)
  }
  return {
    refresh: (state) =>
      Effect.suspend(() => {
        if (policy.backgroundAt === undefined) return Effect.void
        if (pending !== undefined && pending.epoch !== state.epoch) return drop
        if (!backgroundDue(state, policy, options.headTokens ?? 0)) return Effect.void
        if (pending !== undefined && headIntact(pending.plan, state.view) && !failed(pending.fiber)) return Effect.void
        // a stale or failed summary is never kept, even when no new one can start (a resume would not know it)
        const context = triggerContext(state, options.headTokens ?? 0).tokens
        const plan = startPlan(state.view as unknown as ReadonlyArray<Message>, context, policy, planOf)
        return plan._tag === "Skip" ? drop : start(state.epoch, plan)
      }),
    take: (state, plan) =>
      Effect.suspend(() => {
        const p = pending
        if (p === undefined || p.epoch !== state.epoch || p.plan.cut > plan.cut || !headIntact(p.plan, plan.messages)) {
          return Effect.succeed(undefined)
        }
        return Effect.gen(function* () {
          const exit = yield* Fiber.await(p.fiber)
          if (Exit.isFailure(exit)) return undefined
          const summary = exit.value
          if (p.plan.cut === plan.cut) return { plan, summary }
          const own = planOf(plan.messages, p.plan.cut)
          if (own._tag === "Planned" && own.cut === p.plan.cut && estimateTokens(own.tail) <= keptCeiling(policy)) {
            return { plan: own, summary }
          }
          if (summary.compaction !== undefined) return undefined
          const update = updateRequest(p.plan, summary, plan)
          if (update === undefined) return undefined
          const updated = yield* Effect.exit(summarizer.summarize(update))
          return Exit.isSuccess(updated) ? { plan, summary: updated.value } : undefined
        })
      }),
    arrived: (state) => {
      const p = pending
      if (p === undefined || p.epoch !== state.epoch) return undefined
      const exit = p.fiber.pollUnsafe()
      if (exit === undefined || Exit.isFailure(exit) || exit.value.compaction === undefined) return undefined
      // handed out once, whatever the caller makes of it
      pending = undefined
      if (!headIntact(p.plan, state.view)) return undefined
      // the same cut over the current view: the server read exactly the messages it drops
      const own = planOf(state.view, p.plan.cut)
      return own._tag === "Planned" && own.cut === p.plan.cut && own.compactionCut === p.plan.compactionCut
        ? { plan: own, summary: exit.value }
        : undefined
    },
    drop,
    pendingCut: (epoch) =>
      pending !== undefined && pending.epoch === epoch && !failed(pending.fiber) ? pending.plan.cut : undefined,
    resume: (state, cut) =>
      Effect.suspend(() => {
        if (policy.backgroundAt === undefined) return Effect.void
        const plan = planOf(state.view, cut)
        return plan._tag === "Skip" || plan.cut !== cut ? Effect.void : start(state.epoch, plan)
      })
  }
}

/**
 * The cut of the summary a logged conversation had pending when it stopped: the `backgroundCut` of the step
 * metadata (under `key`) of the latest reply after the log's last compaction (a reply with empty content: the step
 * metadata of its eviction entry with no evictions), when that reply holds one. A resumed conversation recomputes
 * that summary.
 */
export const resumeCut = (loaded: Loaded, key: string): number | undefined => {
  const entries = loaded.entries as ReadonlyArray<Entry>
  for (let k = entries.length - 1; k >= 0; k--) {
    const entry = entries[k]!
    if (entry.type === "compaction") return undefined
    const reply = entry.type === "message" ? entry.message.role === "assistant" : entry.meta?.[key] !== undefined
    if (!reply) continue
    const meta = entry.meta?.[key] as { readonly backgroundCut?: unknown } | undefined
    const cut = meta?.backgroundCut
    return typeof cut === "number" && Number.isSafeInteger(cut) && cut > 0 ? cut : undefined
  }
  return undefined
}
