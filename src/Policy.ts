/**
 * Concept: the compaction policy, when to compact and how much to keep.
 *
 * When to compact, and how much recent history to keep.
 *
 * Retention is absolute (a token budget plus a turn floor), not a fraction of the window, so it means the same on an
 * 8k and a 1M model. The trigger reads the provider-reported usage of the latest reply, to which a conversation adds
 * its estimate of the messages appended after that reply (the tool results it asked for, which no report measured
 * yet); a conversation whose latest reply came without usage passes it the library's estimate of the request instead
 * (`ConversationState.prepareStep`).
 * Estimates also place the cut (`Cut.ts`).
 *
 * @since 0.1.0
 */
import type * as Cause from "effect/Cause"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import { CACHE_TTLS, type CacheTtl } from "./internal/cacheTtl.ts"

/** The prompt cache's lifetimes: `"5m"` or `"1h"`. */
export type { CacheTtl } from "./internal/cacheTtl.ts"

// ============================================================================
// Defaults
// ============================================================================

/**
 * The defaults `CompactionPolicy.make` fills in; each field's doc on `CompactionPolicy` says why it is what it is.
 * `maxTailTokens` and `minGrowthTokens` have none of their own: `deriveDefaults` derives them from the trigger.
 */
const DEFAULTS = {
  keepRecentTokens: 20_000,
  keepRecentTurns: 2,
  minRemaining: 20_000,
  contextWindow: 200_000,
  compactAtTokens: 60_000,
  cacheTtl: "5m" as CacheTtl
}

/**
 * The share of `compactAtTokens` the kept tail is at most by default (`CompactionPolicy#keepRecentTokens`): with the
 * summary's budget at most another share as large, a compaction at the trigger frees over half of it.
 */
const KEEP_SHARE = 0.25

/** The share of `compactAtTokens` the summary's budget is by default (`CompactionPolicy#summaryBudgetTokens`). */
const SUMMARY_BUDGET_SHARE = 0.25

/** The largest default summary budget, in tokens. */
const SUMMARY_BUDGET_MAX = 8_000

/**
 * The default summary budget of a policy that compacts at `compactAtTokens`: its `SUMMARY_BUDGET_SHARE`, at most
 * `SUMMARY_BUDGET_MAX`, at least 1.
 */
const defaultSummaryBudget = (compactAtTokens: number): number =>
  Math.max(1, Math.min(SUMMARY_BUDGET_MAX, Math.round(compactAtTokens * SUMMARY_BUDGET_SHARE)))

/**
 * At a human turn after a pause that let the cache expire, compaction is brought forward once the context reaches
 * this fraction of `compactAtTokens` (0.5): the prompt is rewritten in full anyway, so a summary now costs only the
 * summarizer call and spares the next requests the longer prefix. @category constants
 */
const COLD_COMPACT_FRACTION = 0.5

// ============================================================================
// Policy
// ============================================================================

const PolicyErrorBase: Schema.Class<
  PolicyError,
  Schema.TaggedStruct<
    "PolicyError",
    { readonly field: Schema.String; readonly value: Schema.Unknown; readonly reason: Schema.String }
  >,
  Cause.YieldableError
> = Schema.TaggedError<PolicyError>()("PolicyError", {
  field: Schema.String,
  value: Schema.Unknown,
  reason: Schema.String
})

/**
 * A field of the policy was not a positive integer, or the fields contradict each other. `field` names the field and
 * `reason` says what was expected.
 * @category errors
 */
export class PolicyError extends PolicyErrorBase {
  /** The error as one line: `Invalid compaction policy: <field> = <value>: <reason>`. */
  override get message(): string {
    return `Invalid compaction policy: ${this.field} = ${String(this.value)}: ${this.reason}`
  }
}

/**
 * The fields of a `CompactionPolicy` as a plain object type (every field the class declares). @category models
 */
export type PolicyFields = { readonly [K in keyof CompactionPolicy]: CompactionPolicy[K] }

/** What `CompactionPolicy.make` takes: any field, absent or `undefined` for its default. @category models */
export type PolicyOptions = { readonly [K in keyof PolicyFields]?: PolicyFields[K] | undefined }

/**
 * The tokens-valued fields `make` fills in when they are absent, each derived from the trigger so that the defaults
 * never contradict each other (a policy given only `compactAtTokens: 5_000` gets a tail, a summary and a growth that
 * fit under it). `room` is `contextWindow - minRemaining`. Given fields are taken as they are; `make` refuses the
 * contradictions.
 */
const deriveDefaults = (
  options: PolicyOptions,
  room: number
): Pick<
  PolicyFields,
  "keepRecentTokens" | "maxTailTokens" | "compactAtTokens" | "summaryBudgetTokens" | "minGrowthTokens"
> => {
  // a large explicit tail or keep moves the default trigger up, so that the tail, a summary and the growth fit under it
  const largest = Math.max(options.keepRecentTokens ?? 0, options.maxTailTokens ?? 0)
  const summaryGiven = options.summaryBudgetTokens ?? SUMMARY_BUDGET_MAX
  const compactAtTokens = options.compactAtTokens ??
    Math.min(room, Math.max(DEFAULTS.compactAtTokens, Math.ceil((largest + summaryGiven) * 1.25)))
  const keepRecentTokens = options.keepRecentTokens ??
    Math.max(
      1,
      Math.min(DEFAULTS.keepRecentTokens, Math.floor(compactAtTokens * KEEP_SHARE), options.maxTailTokens ?? Infinity)
    )
  const maxTailTokens = options.maxTailTokens ?? Math.max(keepRecentTokens, Math.floor(compactAtTokens / 2))
  const summaryBudgetTokens = options.summaryBudgetTokens ??
    defaultSummaryBudget(compactAtTokens)
  const minGrowthTokens = options.minGrowthTokens ??
    Math.min(Math.floor(compactAtTokens / 5), compactAtTokens - maxTailTokens - summaryBudgetTokens)
  return { keepRecentTokens, maxTailTokens, compactAtTokens, summaryBudgetTokens, minGrowthTokens }
}

/**
 * An immutable, validated compaction policy. Build it with `CompactionPolicy.make` (a `Result`) or
 * `CompactionPolicy.makeUnsafe` (throws `PolicyError`); every instance satisfies:
 *
 * - every field is a positive integer, but `backgroundAt` (absent, or a fraction strictly between 0 and 1);
 * - `minRemaining < contextWindow`;
 * - `keepRecentTokens <= maxTailTokens <= contextWindow - minRemaining`;
 * - `compactAtTokens <= contextWindow - minRemaining`;
 * - `maxTailTokens + summaryBudgetTokens + minGrowthTokens <= compactAtTokens`: a compaction that keeps a tail within
 *   `maxTailTokens` and a summary within its budget leaves the context at least `minGrowthTokens` under the trigger.
 * @category models
 */
export class CompactionPolicy {
  /**
   * Recent context kept raw, in estimated tokens. Default a quarter of `compactAtTokens`, at most pi's
   * `keepRecentTokens` (20,000): it holds the last few steps of a coding agent (a handful of file reads and edits).
   * The tail a compaction keeps and its summary are what it does not free: with the tail at most a quarter of the
   * trigger and the summary's budget at most another, each compaction at the trigger frees most of it (a third, as
   * this default was, left the compacted view near half the trigger, and compactions came more often). opencode keeps
   * turns instead of tokens; we keep both (`keepRecentTurns`).
   */
  declare readonly keepRecentTokens: number
  /**
   * Whole turns always kept raw, whatever their size (up to `maxTailTokens`). Default 2, like opencode's tail of 2
   * turns: the latest turn holds the request being worked on; the one before it is what a follow-up ("now do the same
   * for X") refers to. pi has no turn floor and cuts anywhere inside a turn; ours gives way when the whole
   * turns would make a tail over `maxTailTokens` (one long agent turn of many tool steps): the cut then goes inside the
   * turn, at a step boundary (`Cut.planForPolicy`).
   */
  declare readonly keepRecentTurns: number
  /**
   * Tokens held free below the context window: compaction fires once fewer remain. Default 20,000, opencode's buffer:
   * the room must take the next reply, and what the estimate misses of the tool results that arrive before the next
   * usage report (the trigger counts them, by the library's estimate). pi reserves 16,384, about one full-size reply;
   * the corpus has single tool results of ~51k characters (~13k tokens), so a 4–8k reply and the estimate's error on
   * a few such results fit in 20,000.
   */
  declare readonly minRemaining: number
  /** The model's context window, in tokens. Default 200,000, the standard Claude window. */
  declare readonly contextWindow: number
  /**
   * The largest tail a compaction keeps raw. Past it the turn floor yields (`Cut.planForPolicy`): the cut moves inside
   * the kept turns, to the latest whole step that keeps `keepRecentTokens`. Default half of `compactAtTokens` (30,000
   * at the default trigger), at least `keepRecentTokens`: derived from the trigger, not from the window, so that a
   * compaction always brings the context well under the trigger (a tail derived from the window, 90,000 by default,
   * was larger than the 60,000 trigger, and a long agent turn compacted again on every step).
   */
  declare readonly maxTailTokens: number
  /**
   * The cost target: compaction fires once the reported context, with the estimate of what was appended after the
   * reply that reported it (or, for a reply recorded without usage, the estimate of the request), passes it (at most
   * `contextWindow - minRemaining`).
   * Default 60,000, well before the window: every request re-reads the whole prefix from the cache, so a session's
   * bill grows with the context it carries. Chosen on cost and retention together, on the Pareto front of a sweep over
   * long recorded sessions: its cost against no compaction and against compaction at the window, its cache misses, and
   * how many anchors of each compacted span (paths, commands, errors, identifiers, instructions) the next request and
   * the session's last request still hold are in bench/README.md ("What a session costs"). The price is verbatim
   * history: more summaries than at a later trigger. Set it to `contextWindow - minRemaining` to compact only at the
   * window.
   */
  declare readonly compactAtTokens: number
  /**
   * The largest summary message (model text, manifest and files appendix), in estimated tokens. Default: a quarter of
   * `compactAtTokens`, at most 8,000 (8,000 at the default 60k, 6,000 at a 24k trigger, 850 at 3.4k), so the budget
   * follows the trigger and each compaction frees most of it: a fixed budget that is a third of a small trigger makes
   * every later compaction free little, and so run more often. The model's text, the manifest kept by rule and the
   * files appendix share it (the summary `Compact.compactContext` writes), the newest material first; the summary aims below it
   * (the entries of earlier spans fill at most 85% of the manifest's room), so it is not pinned at its budget hop
   * after hop.
   */
  declare readonly summaryBudgetTokens: number
  /**
   * No thrash: the context a compaction leaves must grow by at least this many tokens before the trigger can fire
   * again. `make` holds `maxTailTokens + summaryBudgetTokens + minGrowthTokens <= compactAtTokens`, so a compaction
   * whose tail fits `maxTailTokens` leaves that much room; and a compaction at the trigger that would free fewer
   * tokens than this (net of its summary) does not run (`Skipped` "TooLittleFreed", naming this field): it would be
   * paid for again a few steps later. Default a fifth of `compactAtTokens` (12,000 at the default trigger), at most
   * what the tail and the summary leave under it.
   */
  declare readonly minGrowthTokens: number
  /**
   * The prompt cache's lifetime the requests ask for: `"5m"` (default: the marker every earlier
   * version wrote, refreshed on each hit) or `"1h"`, whose writes cost 2× input instead of 1.25×. The breakpoints carry
   * it, and the rest follows it: a pause counts as cold (offload at once, compaction brought forward at a human turn)
   * only after it, eviction's rent-or-buy prices a rewrite at its write price, and the simulator prices and expires
   * the cache by it. An agent whose user often pauses for more than 5 minutes and less than an hour is the case for
   * `"1h"`.
   */
  declare readonly cacheTtl: CacheTtl
  /**
   * Background compaction (`Conversation`): once the context the trigger reads passes this fraction of
   * `compactAtTokens` (e.g. 0.8), the summary of the prefix the next compaction will cut is made in a background fiber while the agent
   * goes on, and the step that compacts applies it instead of waiting for the summarizer. A number strictly between
   * 0 and 1; absent (the default): off, every compaction waits for its summary.
   */
  declare readonly backgroundAt?: number
  /**
   * Shorten before the first send: `Conversation` cuts a tool result whose text is larger than this
   * many tokens when it is appended, keeping its head and tail around an offload pointer that says how to get the
   * middle back, so the model keeps seeing what it saw first and no later offload has to rewrite it. An integer of at
   * least 256; absent (the default): results are appended whole.
   */
  declare readonly maxToolResultTokens?: number

  private constructor(fields: PolicyFields) {
    Object.assign(this, fields)
    Object.freeze(this)
  }

  /**
   * Validates the fields; missing (or `undefined`) ones take the defaults, derived so that they never contradict each
   * other or the fields given (`deriveDefaults`): `compactAtTokens` 60,000 (capped at `contextWindow - minRemaining`,
   * raised to make room for a large `keepRecentTokens`), `keepRecentTokens` a quarter of the trigger (at most 20,000),
   * `maxTailTokens` half the trigger (at least `keepRecentTokens`), `summaryBudgetTokens` 8,000 (at most a quarter of
   * the trigger), `minGrowthTokens` a fifth of the trigger (at most what the tail and the summary leave under it).
   * Fails with the first broken rule; a contradiction names the fields that contradict each other.
   */
  static make(options: PolicyOptions = {}): Result.Result<CompactionPolicy, PolicyError> {
    const base = {
      keepRecentTurns: options.keepRecentTurns ?? DEFAULTS.keepRecentTurns,
      minRemaining: options.minRemaining ?? DEFAULTS.minRemaining,
      contextWindow: options.contextWindow ?? DEFAULTS.contextWindow
    }
    for (const [field, value] of Object.entries(base)) {
      if (!Number.isSafeInteger(value) || value <= 0) {
        return Result.fail(new PolicyError({ field, value, reason: "expected a positive integer" }))
      }
    }
    for (const field of ["keepRecentTokens", "maxTailTokens", "compactAtTokens", "summaryBudgetTokens"] as const) {
      const value = options[field]
      if (value !== undefined && (!Number.isSafeInteger(value) || value <= 0)) {
        return Result.fail(new PolicyError({ field, value, reason: "expected a positive integer" }))
      }
    }
    const fields: PolicyFields = {
      ...base,
      ...deriveDefaults(options, base.contextWindow - base.minRemaining),
      cacheTtl: options.cacheTtl ?? DEFAULTS.cacheTtl,
      ...(options.backgroundAt === undefined ? {} : { backgroundAt: options.backgroundAt }),
      ...(options.maxToolResultTokens === undefined ? {} : { maxToolResultTokens: options.maxToolResultTokens })
    }
    const check = (field: keyof PolicyFields, ok: boolean, reason: string): PolicyError | undefined =>
      ok ? undefined : new PolicyError({ field, value: fields[field], reason })
    const room = fields.contextWindow - fields.minRemaining
    const error = check(
      "backgroundAt",
      fields.backgroundAt === undefined ||
        (Number.isFinite(fields.backgroundAt) && fields.backgroundAt > 0 && fields.backgroundAt < 1),
      "expected a fraction of compactAtTokens, strictly between 0 and 1"
    ) ??
      check(
        "maxToolResultTokens",
        fields.maxToolResultTokens === undefined ||
          (Number.isSafeInteger(fields.maxToolResultTokens) && fields.maxToolResultTokens >= 256),
        "expected an integer of at least 256"
      ) ?? check("cacheTtl", CACHE_TTLS.includes(fields.cacheTtl), `expected one of ${CACHE_TTLS.join(", ")}`) ??
      check("minRemaining", fields.minRemaining < fields.contextWindow, "must be below contextWindow") ??
      check(
        "compactAtTokens",
        fields.compactAtTokens <= room,
        `must be at most contextWindow - minRemaining (${room})`
      ) ??
      check(
        "maxTailTokens",
        fields.maxTailTokens >= fields.keepRecentTokens,
        `must be at least keepRecentTokens (${fields.keepRecentTokens})`
      ) ??
      check(
        "maxTailTokens",
        fields.maxTailTokens <= room,
        `must be at most contextWindow - minRemaining (${room})`
      ) ??
      check(
        "minGrowthTokens",
        Number.isSafeInteger(fields.minGrowthTokens) && fields.minGrowthTokens > 0,
        `expected a positive integer; maxTailTokens (${fields.maxTailTokens}) + summaryBudgetTokens ` +
          `(${fields.summaryBudgetTokens}) leave no room under compactAtTokens (${fields.compactAtTokens})`
      ) ??
      check(
        "minGrowthTokens",
        fields.maxTailTokens + fields.summaryBudgetTokens + fields.minGrowthTokens <= fields.compactAtTokens,
        `maxTailTokens (${fields.maxTailTokens}) + summaryBudgetTokens (${fields.summaryBudgetTokens}) + ` +
          `minGrowthTokens (${fields.minGrowthTokens}) must be at most compactAtTokens (${fields.compactAtTokens}): ` +
          "a compaction keeps up to maxTailTokens raw beside a summary of up to summaryBudgetTokens, and the context " +
          "must then grow by minGrowthTokens before the trigger fires again"
      )
    return error === undefined ? Result.succeed(new CompactionPolicy(fields)) : Result.fail(error)
  }

  /** `make`, throwing the `PolicyError` instead of returning it. */
  static makeUnsafe(options: PolicyOptions = {}): CompactionPolicy {
    const result = CompactionPolicy.make(options)
    if (Result.isFailure(result)) throw result.failure
    return result.success
  }
}

/**
 * The default policy: keep 15,000 tokens and 2 turns, hold 20,000 free on a 200,000 window, tail at most 30,000,
 * compact at 60,000 reported tokens (the cost target), and not again before the context grew by 12,000.
 * @category constructors
 */
export const defaultPolicy: CompactionPolicy = CompactionPolicy.makeUnsafe()

// ============================================================================
// Trigger
// ============================================================================

/**
 * Token usage of one Messages API call, in the API's field names, every count present (0 when not reported). It is
 * the one usage type: a summary's usage (`Summarizer.Summary`'s `usage`) and an imported reply's (`Import.Session`'s usage entries)
 * are this type.
 * @category models
 */
export interface Usage {
  /** Input tokens read neither from nor into the cache. */
  readonly input_tokens: number
  /** Output tokens generated. */
  readonly output_tokens: number
  /** Input tokens read from the prompt cache. */
  readonly cache_read_input_tokens: number
  /** Input tokens written to the prompt cache. */
  readonly cache_creation_input_tokens: number
}

/** A `Usage` of zero tokens (a summary made without a model). @category constants */
export const zeroUsage: Usage = {
  input_tokens: 0,
  output_tokens: 0,
  cache_read_input_tokens: 0,
  cache_creation_input_tokens: 0
}

/**
 * One sampling step of a reply, as `usage.iterations` lists it (the SDK's `BetaIterationsUsage` entries): `message`
 * for a step of the model (a server tool loop has several), `compaction` for the server's compaction step,
 * `advisor_message` for the advisor model, `fallback_message` for the step a fallback model finished the reply with.
 * @category models
 */
export type UsageIteration =
  & { readonly type: string }
  & Pick<Usage, "input_tokens" | "output_tokens">
  & { readonly [K in "cache_read_input_tokens" | "cache_creation_input_tokens"]?: number | null }

/**
 * `Usage` as `@anthropic-ai/sdk` reports it on a `Message` or `BetaMessage` (`message.usage`): the cache counts may
 * be missing or null; `cache_creation` splits the cache writes by TTL; `iterations` lists the
 * sampling steps when server tools or compaction ran. The SDK's `Usage` and `BetaUsage`, and every
 * `Usage`, are assignable to it.
 * @category models
 */
export type ReportedUsage =
  & Pick<Usage, "input_tokens" | "output_tokens">
  & { readonly [K in "cache_read_input_tokens" | "cache_creation_input_tokens"]?: number | null }
  & {
    readonly cache_creation?: {
      readonly ephemeral_5m_input_tokens: number
      readonly ephemeral_1h_input_tokens: number
    } | null
    readonly iterations?: ReadonlyArray<UsageIteration> | null
  }

/**
 * Which view a usage report belongs to. The caller keeps a compaction epoch that each compaction increments, and
 * records the epoch a request was built from next to its usage. A report whose `requestEpoch` is older than
 * `currentEpoch` describes a view that no longer exists.
 * @category models
 */
export interface UsageEpoch {
  /** The epoch of the view the request was built from. */
  readonly requestEpoch: number
  /** The caller's epoch now (each compaction increments it). */
  readonly currentEpoch: number
}

/** True for the iterations of the model answering this conversation (not the compaction step, not the advisor). */
const isMessageStep = (step: UsageIteration): boolean => step.type === "message" || step.type === "fallback_message"

const prompt = (u: Omit<UsageIteration, "type">): number =>
  u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0)

/**
 * The tokens the context holds after a reply: the prompt the provider saw (`input_tokens` plus cache reads and cache
 * writes) plus the reply itself (`output_tokens`), which is now part of the context. With `usage.iterations` (server
 * tools, compaction) it is that sum for the last step of the model (a `message` entry, or the
 * `fallback_message` that finished a fallback-served reply): the top-level counts add up every step, so three web
 * search steps over a 60k context read 180k there, and the compaction step measures the context it closed.
 * @category trigger
 */
export const contextTokens = (usage: ReportedUsage): number => {
  const steps = usage.iterations ?? []
  let last: Omit<UsageIteration, "type"> = usage
  for (let i = steps.length - 1; i >= 0; i--) {
    if (isMessageStep(steps[i]!)) {
      last = steps[i]!
      break
    }
  }
  return prompt(last) + last.output_tokens
}

/**
 * The prompt tokens the provider counted for the request as it was sent: the prompt of the first step of the model
 * when `usage.iterations` lists the steps (later steps also read the server tool results of the reply), otherwise
 * `input_tokens` plus cache reads and writes. Pass it to `Tokens.calibrate` with the request's messages.
 * @category trigger
 */
export const promptTokens = (usage: ReportedUsage): number => prompt(usage.iterations?.find(isMessageStep) ?? usage)

/** Tokens left below the context window after that reply (negative when over). @category trigger */
export const remainingTokens = (policy: Pick<PolicyFields, "contextWindow">, usage: ReportedUsage): number =>
  policy.contextWindow - contextTokens(usage)

/**
 * The trigger: true once fewer than `policy.minRemaining` tokens remain, or the context passes the cost target
 * `policy.compactAtTokens` (when the policy has one), by the provider-reported usage of the latest reply (a
 * `Conversation` adds to its `input_tokens` the estimate of the messages appended after that reply), or by the
 * estimate of the request, as `{ input_tokens: estimate, output_tokens: 0 }`, when the reply reported none. With
 * `coldHumanTurn` (the next request starts a human turn and the cache has expired) the target is
 * `COLD_COMPACT_FRACTION` of it. A report from a request made before the latest compaction
 * (`requestEpoch < currentEpoch`) never triggers: it measured the old, longer view, and compacting again on it would
 * compact twice for one overflow.
 * @category trigger
 */
export const shouldCompact = (
  policy: Pick<PolicyFields, "contextWindow" | "minRemaining"> & { readonly compactAtTokens?: number | undefined },
  usage: ReportedUsage,
  epoch: UsageEpoch,
  options: { readonly coldHumanTurn?: boolean | undefined } = {}
): boolean => {
  if (epoch.requestEpoch < epoch.currentEpoch) return false
  if (remainingTokens(policy, usage) < policy.minRemaining) return true
  if (policy.compactAtTokens === undefined) return false
  const target = options.coldHumanTurn === true
    ? Math.floor(policy.compactAtTokens * COLD_COMPACT_FRACTION)
    : policy.compactAtTokens
  return contextTokens(usage) > target
}
