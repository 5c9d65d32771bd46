/**
 * The simulator's model: prices, strategies, options and report types (`Simulate` re-exports its public ones).
 *
 * @internal
 */
import { FIXED_MIN_SAVINGS } from "../../Evict.ts"
import type { OffloadOptions } from "../../ConversationState.ts"
import type { Request } from "../../Request.ts"
import type { Message } from "../../Message.ts"
import type { CompactionPolicy, PolicyOptions, ReportedUsage } from "../../Policy.ts"
import type { Category } from "../../Retention.ts"
import * as Summary from "../../Summary.ts"
import type { MessageUsage, RecordedAt } from "../import/model.ts"

// ============================================================================
// Prices
// ============================================================================

/** Token prices relative to one uncached input token. @category models */
export interface PriceTable {
  /** An uncached input token: 1 by definition. */
  readonly input: number
  /** An input token written to the cache (5-minute TTL). */
  readonly cacheWrite: number
  /** An input token read from the cache. */
  readonly cacheRead: number
  /** An output token. */
  readonly output: number
}

/**
 * Anthropic's price ratios: input 1, cache write (5-minute) 1.25, cache read 0.1, output 5. @category constants
 */
export const ANTHROPIC_PRICES: PriceTable = { input: 1, cacheWrite: 1.25, cacheRead: 0.1, output: 5 }

/** Dollars per million input and output tokens of one model family. @category models */
export interface ModelPrice {
  /** The family's name, as the report shows it (`Claude Sonnet`, …). */
  readonly family: string
  /** Matches the model ids of the family. */
  readonly pattern: RegExp
  /** Dollars per million uncached input tokens. */
  readonly input: number
  /** Dollars per million output tokens. */
  readonly output: number
}

/**
 * Current Anthropic list prices by model family, in dollars per million tokens (first match wins); cache writes are
 * 1.25× input and cache reads 0.1× input for all of them.
 * @category constants
 */
export const MODEL_PRICES: ReadonlyArray<ModelPrice> = [
  { family: "Claude Opus 4.5+", pattern: /opus-4-[5-9]|opus-[5-9]/i, input: 5, output: 25 },
  { family: "Claude Opus 4 / 4.1 / 3", pattern: /opus/i, input: 15, output: 75 },
  { family: "Claude Sonnet", pattern: /sonnet/i, input: 3, output: 15 },
  { family: "Claude Haiku 4.5+", pattern: /haiku-4|haiku-[5-9]/i, input: 1, output: 5 },
  { family: "Claude Haiku 3.5", pattern: /3-5-haiku|haiku-3-5/i, input: 0.8, output: 4 },
  { family: "Claude Haiku 3", pattern: /haiku/i, input: 0.25, output: 1.25 }
]

/**
 * Dollars per million uncached input tokens when the model is unknown: $3, Claude Sonnet's price. @category constants
 */
export const DEFAULT_DOLLARS_PER_MTOK = 3

/**
 * The price of `model` in dollars per million tokens (`prices` first, then `MODEL_PRICES`; unknown: Sonnet). @category cost
 */
export const modelPrice = (
  model: string | undefined,
  prices: ReadonlyArray<ModelPrice> = MODEL_PRICES
): ModelPrice =>
  (model === undefined ? undefined : prices.find((p) => p.pattern.test(model))) ??
    { family: "unknown (Sonnet prices)", pattern: /$^/, input: DEFAULT_DOLLARS_PER_MTOK, output: 15 }

/**
 * Largest simulated summary, in tokens: the summarizer's own cap (8,192).
 */
export const DEFAULT_SUMMARY_MAX_TOKENS: typeof Summary.DEFAULT_SUMMARY_MAX_TOKENS = Summary.DEFAULT_SUMMARY_MAX_TOKENS

/**
 * A simulated summary is this fraction of its transcript (then capped): 10%. @category constants
 */
export const DEFAULT_SUMMARY_RATIO = 0.1

/**
 * Tokens of instructions (and a previous-summary wrapper) added to every summarizer call: 1,000. @category constants
 */
export const DEFAULT_SUMMARIZER_OVERHEAD_TOKENS = 1_000

/**
 * The cost, in input-token units, of one request's cache read, cache write, uncached input and output. @category cost
 */
export const requestCost = (
  prices: PriceTable,
  usage: {
    readonly cacheRead: number
    readonly cacheWrite: number
    readonly output: number
    readonly input?: number | undefined
  }
): number =>
  usage.cacheRead * prices.cacheRead + usage.cacheWrite * prices.cacheWrite + (usage.input ?? 0) * prices.input +
  usage.output * prices.output

/**
 * The cost, in input-token units, of one summarizer call (all input uncached). @category cost
 */
export const summarizerCost = (
  prices: PriceTable,
  usage: { readonly input: number; readonly output: number }
): number => usage.input * prices.input + usage.output * prices.output

// ============================================================================
// Strategies
// ============================================================================

/**
 * What a policy does. Every one but `None` runs `Conversation`'s compaction when its trigger fires.
 *
 * - `None`: nothing; its context can exceed the window (`overWindow` counts those requests): no provider accepts it.
 * - `CompactOnly`: the feasible baseline: compaction only at the window (`compactAtTokens` = window − minRemaining),
 *   no eviction.
 * - `Library`: `Conversation` as configured by `options` (absent fields: the library's defaults), its breakpoints.
 * - `Evict`: `Library` with `keepRecent` and `minSavings` (the earlier form; `pinning` is always on in
 *   `Conversation`).
 * - `Masking`, `Prune`, `ClearToolUses`: the peers (observation masking, opencode pruning, Anthropic's
 *   `clear_tool_uses`), compacting at the window, with the breakpoints a typical client places (end of system, newest
 *   message).
 * @category models
 */
export type Strategy =
  | { readonly _tag: "None" }
  | { readonly _tag: "CompactOnly" }
  | { readonly _tag: "Library"; readonly options: LibraryOptions }
  | { readonly _tag: "Masking"; readonly window: number }
  | { readonly _tag: "Prune"; readonly protectTokens: number; readonly minimumTokens: number }
  | { readonly _tag: "ClearToolUses"; readonly triggerTokens: number; readonly keep: number }
  | { readonly _tag: "Evict"; readonly keepRecent: number; readonly minSavings: number; readonly pinning: boolean }

/** The `Conversation` settings a `Library` strategy runs with. Absent: the library's default. @category models */
export interface LibraryOptions {
  /** Newest live tool results kept verbatim (`OffloadOptions.keepRecent`). */
  readonly keepRecent?: number | undefined
  /** A fixed eviction threshold instead of the rent-or-buy rule. */
  readonly minSavings?: number | undefined
  /** The policy's fields (`compactAtTokens`, `keepRecentTokens`, …). */
  readonly policy?: PolicyOptions | undefined
  /** Bring compaction and eviction forward when the cache is known cold (default true, as the library does). */
  readonly coldRules?: boolean | undefined
  /**
   * With `SimulateOptions.threads`: `Conversation`'s `threadRestart` (the restart a rewrite costs on a thread, and
   * offloads batched with compactions); `false` replays the library as if a rewrite cost only the cache.
   */
  readonly threadRestart?: OffloadOptions["threadRestart"]
  /** `Conversation`'s `appendOnly` (`false`: offloads in place between compactions). */
  readonly appendOnly?: OffloadOptions["appendOnly"]
  /** `Conversation`'s `staleThinking` (what a compaction does with the thinking of the turns it keeps). */
  readonly staleThinking?: OffloadOptions["staleThinking"]
}

/** A named strategy: one row of the report. @category models */
export interface SimPolicy {
  /** The row's label in the report. */
  readonly name: string
  /** What the policy does to the context. */
  readonly strategy: Strategy
}

/**
 * Tool results kept by masking, as in the published observation-masking study (window 10). @category constants
 */
export const MASKING_WINDOW = 10

/**
 * opencode's `PRUNE_PROTECT` (40,000) and `PRUNE_MINIMUM` (20,000). @category constants
 */
export const OPENCODE_PRUNE = { protectTokens: 40_000, minimumTokens: 20_000 } as const

/**
 * `clear_tool_uses_20250919` defaults: trigger at 100,000 input tokens, keep 3 tool uses. @category constants
 */
export const CLEAR_TOOL_USES_DEFAULTS = { triggerTokens: 100_000, keep: 3 } as const

/**
 * The fixed threshold of the "minSavings" row, `FIXED_MIN_SAVINGS` (2,000), the former default. @category constants
 */
export const OURS_TUNED_MIN_SAVINGS = FIXED_MIN_SAVINGS

/**
 * The policies of the report, in order: none, compaction at the window, masking (10), opencode pruning (40k/20k),
 * `clear_tool_uses` (100k, keep 3), ours with the defaults, ours with a fixed `minSavings` instead of rent-or-buy, and
 * ours rewriting in place (`appendOnly: false`: offloads between compactions, the thinking after them invalidated),
 * beside the default's append-only discipline.
 * @category constructors
 */
export const standardPolicies = (
  options: { readonly tunedMinSavings?: number; readonly keepRecent?: number } = {}
): ReadonlyArray<SimPolicy> => {
  const keepRecent = options.keepRecent
  const tuned = options.tunedMinSavings ?? OURS_TUNED_MIN_SAVINGS
  return [
    { name: "none", strategy: { _tag: "None" } },
    { name: "compaction at the window", strategy: { _tag: "CompactOnly" } },
    { name: `masking (${MASKING_WINDOW})`, strategy: { _tag: "Masking", window: MASKING_WINDOW } },
    { name: "opencode prune (40k/20k)", strategy: { _tag: "Prune", ...OPENCODE_PRUNE } },
    { name: "clear_tool_uses (100k, keep 3)", strategy: { _tag: "ClearToolUses", ...CLEAR_TOOL_USES_DEFAULTS } },
    { name: "ours (defaults)", strategy: { _tag: "Library", options: { keepRecent } } },
    {
      name: `ours (minSavings ${tuned.toLocaleString("en-US")})`,
      strategy: { _tag: "Library", options: { keepRecent, minSavings: tuned } }
    },
    { name: "ours (rewrites in place)", strategy: { _tag: "Library", options: { keepRecent, appendOnly: false } } }
  ]
}

// ============================================================================
// Input, options and report
// ============================================================================

/** A recorded session: its messages and what the record says beside them (as `Import.Session` holds it). @category models */
export interface RecordedSession {
  /** The conversation, in the wire model. */
  readonly messages: ReadonlyArray<Message>
  /**
   * The usage the provider reported for each recorded reply, when the record has it (calibrates sizes and shows
   * external misses).
   */
  readonly usage?: ReadonlyArray<MessageUsage> | undefined
  /** Per-message timestamps and reply models, when the record has them (cache TTLs, prices). */
  readonly recorded?: ReadonlyArray<RecordedAt> | undefined
  /** The system prompt, when the record has it (its size when `usage` does not calibrate one). */
  readonly system?: string | undefined
}

/**
 * One request the policy made to the provider. @category models
 */
export interface RequestEvent {
  readonly policy: string
  /** Index of the recorded reply this request produced. */
  readonly index: number
  /** The messages the model reads (without the system prompt), breakpoints included: on a thread, the whole view. */
  readonly prompt: ReadonlyArray<Message>
  /**
   * The request sent: system prompt (the session's, or a stand-in of its calibrated size) and `prompt`, priced as
   * such; with `threads`, as it goes on its thread (a `continue` holds only the messages after the anchored reply).
   */
  readonly request: Request
  /** The usage the request is predicted to be billed, which the reply is recorded with. */
  readonly usage: ReportedUsage
  /** Its priced figures. */
  readonly figures: RequestFigures
  /**
   * The provider lost the cache before this request (a miss the record shows and no cache rule explains, replayed
   * under every policy alike): nothing cached before it can be read.
   */
  readonly cacheLost: boolean
  /** Set when a compaction ran right before this request: the messages it summarized. */
  readonly summarized?: ReadonlyArray<Message> | undefined
}

/** Options of `simulate` and `simulatePolicy`. Every field is optional. @category models */
export interface SimulateOptions {
  /** Prices relative to an uncached input token for `cost` (default `ANTHROPIC_PRICES`). */
  readonly prices?: Partial<PriceTable>
  /** Model prices (default `MODEL_PRICES`). */
  readonly modelPrices?: ReadonlyArray<ModelPrice>
  /** The model when a reply names none (prices, minimum cacheable length). */
  readonly model?: string
  /** Dollars per million uncached input tokens: overrides the model's input price (output keeps its ratio). */
  readonly dollarsPerMTok?: number
  /** Tokens of system prompt and tools in every prompt (default: calibrated from the record, else the system text). */
  readonly systemTokens?: number
  /** Billed tokens per estimated token for blocks the record has no size for (default: calibrated, else 1.4). */
  readonly tokenFactor?: number
  /** The compaction policy's window and room (default `defaultPolicy`). */
  readonly compaction?: CompactionPolicy
  /** Cap on a simulated summary (default `DEFAULT_SUMMARY_MAX_TOKENS`, 8,192). */
  readonly summaryMaxTokens?: number
  /** Summary size as a fraction of the transcript (default 0.1). */
  readonly summaryRatio?: number
  /** Instruction tokens added to every summarizer call (default 1,000). */
  readonly summarizerOverheadTokens?: number
  /** Replay the misses the record shows and no rule explains (default true). */
  readonly externalMisses?: boolean
  /**
   * Send the library's requests on server-held threads (`Conversation`'s `threads` option): each
   * recorded reply gets an id (`msg_replay_<index>`) and each request continues the thread while the view only grew
   * (default false). The peers never thread.
   */
  readonly threads?: boolean
  /** The policies `simulate` runs (default `standardPolicies()`). */
  readonly policies?: ReadonlyArray<SimPolicy>
  /** Called with every request's prompt; for tests and tracing. */
  readonly onRequest?: (event: RequestEvent) => void
}

/**
 * Why a request read less than the previous one left in the cache. @category models
 */
export type MissCause = "ttl" | "external" | "policy"

/**
 * One request's figures. `cacheRead + cacheWrite + input === promptTokens`. @category models
 */
export interface RequestFigures {
  readonly index: number
  readonly time: number
  readonly model: string | undefined
  readonly promptTokens: number
  readonly cacheRead: number
  readonly cacheWrite: number
  readonly input: number
  readonly output: number
  readonly dollars: number
  /** The cost of the summaries made since the previous request (0 when none was): priced at the request's model. */
  readonly summarizerDollars: number
  readonly breakpoints: number
  /** Set when the request read less than the previous request left in the cache. */
  readonly miss: MissCause | undefined
  /** The cached prefix was rewritten by the policy (a `policy` miss). */
  readonly invalidated: boolean
  readonly overWindow: boolean
  readonly compacted: boolean
  /** Tool results the policy's eviction offloaded right before this request (0 for the peers). */
  readonly offloadedResults: number
  /** Set on a request right after a compaction: what of the span it summarized this request still holds. */
  readonly retention?: CompactionRetention | undefined
  /** Set on a request right after a compaction: what it removed (`Compact.CompactedInfo.removed`, tallied). */
  readonly removed?: RemovalTally | undefined
  /**
   * The bytes the request uploads (its JSON body in UTF-8): on a thread's `continue`, only the messages after the
   * anchored reply; otherwise the whole request, `fullBytes`.
   */
  readonly uploadedBytes: number
  /** The bytes of the whole request (every message of the view, system and tools): what a request off threads sends. */
  readonly fullBytes: number
  /** With `SimulateOptions.threads` (the library's requests): how the request went on its thread. */
  readonly thread?: "create" | "continue" | undefined
}

/**
 * What one compaction removed, tallied from its outcome's records (`Compact.CompactedInfo.removed`): the messages and
 * tool results of the span, their estimated tokens (the messages', which hold their results), the tool results per
 * tool (most first) and the references of the first few, the ids `recall` answers. @category models
 */
export interface RemovalTally {
  readonly messages: number
  readonly toolResults: number
  readonly tokens: number
  readonly tools: ReadonlyArray<{ readonly tool: string; readonly count: number }>
  readonly refs: ReadonlyArray<string>
}

/** How many references a `RemovalTally` lists. @category constants */
export const TALLIED_REFS = 5

/** The tally of a compaction's removal records. Pure. @category models */
export const removalTally = (
  removed: ReadonlyArray<
    { readonly kind: string; readonly ref?: string; readonly tool?: string; readonly tokens: number }
  >
): RemovalTally => {
  const messages = removed.filter((r) => r.kind !== "tool_result")
  const results = removed.filter((r) => r.kind === "tool_result")
  const counts = new Map<string, number>()
  for (const r of results) counts.set(r.tool ?? "?", (counts.get(r.tool ?? "?") ?? 0) + 1)
  return {
    messages: messages.length,
    toolResults: results.length,
    tokens: messages.reduce((n, r) => n + r.tokens, 0),
    tools: [...counts].map(([tool, count]) => ({ tool, count })).sort((a, b) => b.count - a.count),
    refs: results.slice(0, TALLIED_REFS).flatMap((r) => r.ref === undefined ? [] : [r.ref])
  }
}

/**
 * Anchors of one category (or of all, `total`) of a compacted span: the share is `present / counted`. @category models
 */
export interface RetentionTally {
  /** The span's anchors not in the kept tail: those the share is of. */
  readonly counted: number
  /** Of `counted`, those present in the request after the compaction. */
  readonly present: number
  /** The span's anchors present in the kept tail, counted apart. */
  readonly inTail: number
  /** `present / counted`, 1 when nothing was counted. */
  readonly share: number
  /**
   * Of `counted` minus `present` (absent from the request), those one `recall` search over what the replay removed
   * so far finds (`Retention.retention`'s `recoverable`). Absent when the measure was not given what was removed.
   */
  readonly recoverable?: number | undefined
  /** `(present + recoverable) / counted`, 1 when nothing was counted; with `recoverable` only. */
  readonly recoverableShare?: number | undefined
}

/**
 * What of a compacted span survives in the next request (`Retention.measure` of the span in that request, the kept
 * tail's anchors counted apart), per category and in total. @category models
 */
export interface CompactionRetention {
  readonly categories: { readonly [C in Category]: RetentionTally }
  readonly total: RetentionTally
}

/**
 * Cache misses by cause. @category models
 */
export interface MissCounts {
  readonly ttl: number
  readonly external: number
  readonly policy: number
}

/** The figures of one policy over the whole session. @category models */
export interface PolicyReport {
  /** The policy's name (`SimPolicy.name`). */
  readonly name: string
  /** The policy's strategy. */
  readonly strategy: Strategy
  /** Requests replayed: one per recorded assistant reply. */
  readonly requests: number
  /** Prompt tokens summed over the requests (cached or not). */
  readonly tokensSent: number
  /** Prompt tokens read from the cache, summed. */
  readonly cacheRead: number
  /** Prompt tokens written to the cache, summed. */
  readonly cacheWrite: number
  /** Uncached prompt tokens, summed. */
  readonly inputTokens: number
  /** Reply tokens, summed: each recorded reply's reported output (else its calibrated estimate). */
  readonly outputTokens: number
  /** Compactions applied. */
  readonly compactions: number
  /** Simulated summarizer calls (one per compaction applied). */
  readonly summarizerCalls: number
  /** Tokens the summarizer read: each transcript plus `summarizerOverheadTokens`, summed. */
  readonly summarizerInput: number
  /** Tokens of the simulated summaries, summed. */
  readonly summarizerOutput: number
  /** Compactions the trigger asked for that found nothing worth compacting. */
  readonly failedCompactions: number
  /** Total cost in uncached-input-token units (`prices`). */
  readonly cost: number
  /** Total cost in dollars at each request's model price. */
  readonly dollars: number
  /** Largest prompt plus reply, in tokens. */
  readonly peakContext: number
  /** Requests whose prompt plus reply exceeds the policy's `contextWindow` (no provider accepts them). */
  readonly overWindow: number
  /** Requests that read less than the previous one left in the cache, by cause. */
  readonly misses: MissCounts
  /** Policy misses: requests whose cached prefix the policy rewrote. */
  readonly cacheInvalidations: number
  /** Calibrated tokens removed by eviction, masking, pruning or clearing. */
  readonly tokensOffloaded: number
  /** Requests before which the library's eviction changed the view (0 for the peers). */
  readonly evictions: number
  /** Tool results the library's eviction offloaded, over the session. */
  readonly offloadedResults: number
  /** The mean total share of the compacted spans' anchors kept in the next request; absent without a compaction. */
  readonly retention?: number | undefined
  /** The bytes every request uploaded, summed (`RequestFigures.uploadedBytes`). */
  readonly uploadedBytes: number
  /** The bytes the same requests sent whole, summed (`RequestFigures.fullBytes`): the upload off threads. */
  readonly fullBytes: number
  /**
   * With threads: the requests that started a new thread after the first (each rewrite's restart: an offload, a
   * compaction, or a reply the server does not hold as the view does). 0 off threads.
   */
  readonly threadRestarts: number
  /**
   * The library's requests' thinking blocks that a rewrite invalidated, summed over the requests:
   * each one the API drops (with `block_binding: drop_block`) or refuses. 0 while the conversation stays append-only
   * and its compactions keep no stale thinking (the default); not tracked for the peers.
   */
  readonly thinkingDropped: number
  /** Every request's figures, in order. */
  readonly perRequest: ReadonlyArray<RequestFigures>
}

/** What `simulate` returns: the settings used and one report per policy, in order. @category models */
export interface SimulationReport {
  /** Messages in the recorded session. */
  readonly messages: number
  /** The price ratios `cost` used. */
  readonly prices: PriceTable
  /** The models the record's replies name, sorted, without duplicates. */
  readonly models: ReadonlyArray<string>
  /** Dollars per million uncached input tokens: the option, else the price of the last reply's model. */
  readonly dollarsPerMTok: number
  /** Tokens of system prompt and tools in every prompt, as calibrated (or given). */
  readonly systemTokens: number
  /** Billed tokens per estimated token, as calibrated (or given). */
  readonly tokenFactor: number
  /** The compaction policy's context window, in tokens. */
  readonly contextWindow: number
  /** One report per policy, in the order of `SimulateOptions.policies`. */
  readonly policies: ReadonlyArray<PolicyReport>
}
