/**
 * The cost simulator: what a recorded session would have cost under a context policy.
 *
 * **The replay.** The recorded messages are walked in order. The live view (what the client holds) starts empty and
 * each recorded message is appended to it as it happens. Every assistant message is a reply, so a request was made
 * just before it: the policy acts on the view, and the prompt is what it leaves. The reply's estimated tokens are the
 * request's output. The system prompt and tool definitions are not in the record: `systemTokens` (default 0) stands
 * for them; it is part of every prompt and cached from the second request on. All sizes are `estimateMessageTokens`
 * estimates (about 4 characters per token), so the figures compare policies; they do not predict an invoice.
 *
 * **The cache.** Anthropic caches a prompt's prefix; we model one breakpoint at the end of every prompt. A request's
 * cache read is the longest prefix of messages identical to the previous request's prompt (same object, or equal
 * content), in tokens, plus `systemTokens`; its cache write is the rest of the prompt, so read + write = tokens sent.
 * A request whose cached prefix is shorter than the previous prompt is a cache invalidation: the policy rewrote
 * something the cache held (an eviction, a mask, a compaction). The cache TTL is ignored: the cache never expires.
 *
 * **Compaction.** Every policy except `None` also compacts with a `CompactionPolicy` (default `defaultPolicy`) when the
 * prompt it leaves still exceeds `contextWindow - minRemaining`: the head that `planForPolicy` picks is replaced by
 * one summary message. No summarizer is called. The summary is `min(summaryMaxTokens, summaryRatio × transcript)`
 * tokens (defaults `DEFAULT_SUMMARY_MAX_TOKENS`, 8,192, and 10%), where the transcript is `render(head)` at 4 characters per token. The summarizer
 * call is charged as `transcript + summarizerOverheadTokens` uncached input (the rendered transcript shares no prefix
 * with the agent's prompt) and the summary as its output. The check runs on the prompt about to be sent, which
 * already holds the last reply and the tool results since; the library's real trigger reads the provider's usage of
 * that reply, without those results, so the simulator compacts at the same request or one earlier.
 *
 * **Cost.** In input-token units: `cacheRead × prices.cacheRead + cacheWrite × prices.cacheWrite + output ×
 * prices.output` per request, plus `input × prices.input + output × prices.output` per summarizer call. Dollars are the
 * units times `dollarsPerMTok / 1e6` (the price of a million uncached input tokens, default $3).
 *
 * The simulator is pure: it never mutates the recorded messages and keeps unchanged messages as the same objects,
 * so estimates stay cached; a 900-message session runs all seven standard policies in one to three seconds.
 *
 * @since 0.1.0
 */
import { sharedPrefix, sumTokens } from "./internal/simulate/cache.ts"
import { clearToolUses, mask, prune } from "./internal/simulate/strategies.ts"
import type { Message } from "./Message.ts"
import type { CompactionPolicy } from "./Policy.ts"
import { defaultPolicy } from "./Policy.ts"
import { planForPolicy } from "./Cut.ts"
import { DEFAULT_KEEP_RECENT, DEFAULT_MIN_SAVINGS, evictStaleToolResults } from "./Evict.ts"
import type { EvictOptions } from "./Evict.ts"
import { HotPaths } from "./HotPaths.ts"
import { render } from "./Render.ts"
import { DEFAULT_SUMMARY_MAX_TOKENS } from "./Summary.ts"
import { CHARS_PER_TOKEN, estimateContentTokens, estimateMessageTokens } from "./Tokens.ts"

// ============================================================================
// Prices
// ============================================================================

/** Token prices relative to one uncached input token. @category models */
export interface PriceTable {
  readonly input: number
  readonly cacheWrite: number
  readonly cacheRead: number
  readonly output: number
}

/** Anthropic's price ratios: input 1, cache write (5-minute) 1.25, cache read 0.1, output 5. @category constants */
export const ANTHROPIC_PRICES: PriceTable = { input: 1, cacheWrite: 1.25, cacheRead: 0.1, output: 5 }

/** Dollars per million uncached input tokens by default: $3, Claude Sonnet's price. @category constants */
export const DEFAULT_DOLLARS_PER_MTOK = 3

/** Largest simulated summary, in tokens: the summarizer's own cap, `Summary.DEFAULT_SUMMARY_MAX_TOKENS` (8,192). */
export { DEFAULT_SUMMARY_MAX_TOKENS } from "./Summary.ts"

/** A simulated summary is this fraction of its transcript (then capped): 10%. @category constants */
export const DEFAULT_SUMMARY_RATIO = 0.1

/** Tokens of instructions (and a previous-summary wrapper) added to every summarizer call: 1,000. @category constants */
export const DEFAULT_SUMMARIZER_OVERHEAD_TOKENS = 1_000

/** The cost, in input-token units, of one request's cache read, cache write and output. @category cost */
export const requestCost = (
  prices: PriceTable,
  usage: { readonly cacheRead: number; readonly cacheWrite: number; readonly output: number }
): number => usage.cacheRead * prices.cacheRead + usage.cacheWrite * prices.cacheWrite + usage.output * prices.output

/** The cost, in input-token units, of one summarizer call (all input uncached). @category cost */
export const summarizerCost = (
  prices: PriceTable,
  usage: { readonly input: number; readonly output: number }
): number => usage.input * prices.input + usage.output * prices.output

// ============================================================================
// Strategies
// ============================================================================

/**
 * What a policy does to the view before each request (every one but `None` also compacts, see the module doc).
 *
 * - `None`: nothing; the raw baseline. Its context can exceed the window (`overWindow` counts those requests).
 * - `CompactOnly`: compaction alone.
 * - `Masking`: observation masking; every tool_result older than the newest `window` gets a placeholder.
 * - `Prune`: opencode-style pruning. Walking back from the newest tool result (and stopping at one already pruned),
 *   the first `protectTokens` of tool output are protected, and the older outputs are pruned only when together
 *   they free at least `minimumTokens`.
 * - `ClearToolUses`: Anthropic's `clear_tool_uses` context edit. When the prompt exceeds `triggerTokens`, the
 *   results of every tool use but the newest `keep` are cleared in the prompt sent; the client's view keeps them,
 *   as with the server-side edit.
 * - `Evict`: ours, `evictStaleToolResults(view, keepRecent, { minSavings, pinned })`, with `HotPaths` pinning when
 *   `pinning` is set; the view keeps the pointers.
 *
 * Masking, pruning and clearing replace a result's content with a short placeholder, and only when the placeholder
 * is smaller than the content (as our eviction does), so no strategy ever grows a prompt.
 * @category models
 */
export type Strategy =
  | { readonly _tag: "None" }
  | { readonly _tag: "CompactOnly" }
  | { readonly _tag: "Masking"; readonly window: number }
  | { readonly _tag: "Prune"; readonly protectTokens: number; readonly minimumTokens: number }
  | { readonly _tag: "ClearToolUses"; readonly triggerTokens: number; readonly keep: number }
  | { readonly _tag: "Evict"; readonly keepRecent: number; readonly minSavings: number; readonly pinning: boolean }

/** A named strategy: one row of the report. @category models */
export interface SimPolicy {
  readonly name: string
  readonly strategy: Strategy
}

/** Tool results kept by masking, as in the published observation-masking study (window 10). @category constants */
export const MASKING_WINDOW = 10

/** opencode's `PRUNE_PROTECT` (40,000) and `PRUNE_MINIMUM` (20,000). @category constants */
export const OPENCODE_PRUNE = { protectTokens: 40_000, minimumTokens: 20_000 } as const

/** `clear_tool_uses_20250919` defaults: trigger at 100,000 input tokens, keep 3 tool uses. @category constants */
export const CLEAR_TOOL_USES_DEFAULTS = { triggerTokens: 100_000, keep: 3 } as const

/**
 * Our eviction defaults in the simulator: the library's recommended `DEFAULT_KEEP_RECENT` (10, the masking study's
 * window, so the two compare on the same working set) and `DEFAULT_MIN_SAVINGS` (2,000).
 * @category constants
 */
export const OURS_DEFAULTS = { keepRecent: DEFAULT_KEEP_RECENT, minSavings: DEFAULT_MIN_SAVINGS } as const

/**
 * `minSavings` of the tuned row: 5,000 tokens, picked on the corpus (COMPACTION.md has the sweep). With `minSavings`
 * 0 every new tool result pushes one old result out of the working set and rewrites the cache behind it, about one
 * invalidation every other request. From 2,000 to 15,000 evictions are batched and the corpus total stays within
 * 1.5% of its minimum (at 5,000); past 30,000 eviction fires too rarely to pay.
 * @category constants
 */
export const OURS_TUNED_MIN_SAVINGS = 5_000

/**
 * The seven policies the issue compares, in report order: none, compaction only, masking (10), opencode pruning
 * (40k/20k), `clear_tool_uses` (100k, keep 3), ours with defaults, ours with `minSavings` tuned.
 * @category constructors
 */
export const standardPolicies = (
  options: { readonly tunedMinSavings?: number; readonly keepRecent?: number } = {}
): ReadonlyArray<SimPolicy> => {
  const keepRecent = options.keepRecent ?? OURS_DEFAULTS.keepRecent
  const tuned = options.tunedMinSavings ?? OURS_TUNED_MIN_SAVINGS
  return [
    { name: "none", strategy: { _tag: "None" } },
    { name: "compaction only", strategy: { _tag: "CompactOnly" } },
    { name: `masking (${MASKING_WINDOW})`, strategy: { _tag: "Masking", window: MASKING_WINDOW } },
    { name: "opencode prune (40k/20k)", strategy: { _tag: "Prune", ...OPENCODE_PRUNE } },
    { name: "clear_tool_uses (100k, keep 3)", strategy: { _tag: "ClearToolUses", ...CLEAR_TOOL_USES_DEFAULTS } },
    {
      name: "ours (defaults)",
      strategy: { _tag: "Evict", keepRecent, minSavings: OURS_DEFAULTS.minSavings, pinning: true }
    },
    {
      name: `ours (minSavings ${tuned.toLocaleString("en-US")})`,
      strategy: { _tag: "Evict", keepRecent, minSavings: tuned, pinning: true }
    }
  ]
}

// ============================================================================
// Options and report
// ============================================================================

/** One request the policy made to the provider. @category models */
export interface RequestEvent {
  readonly policy: string
  /** Index of the recorded reply this request produced. */
  readonly index: number
  /** The messages sent (without the system prompt). The simulator never mutates it, so it may be kept. */
  readonly prompt: ReadonlyArray<Message>
}

/** Options of `simulate` and `simulatePolicy`. Every field is optional. @category models */
export interface SimulateOptions {
  /** Prices relative to an uncached input token (default `ANTHROPIC_PRICES`; missing fields take it). */
  readonly prices?: Partial<PriceTable>
  /** Dollars per million uncached input tokens (default $3). */
  readonly dollarsPerMTok?: number
  /** Tokens of system prompt and tools in every prompt (default 0). */
  readonly systemTokens?: number
  /** The compaction policy (default `defaultPolicy`); its `contextWindow` is the window `overWindow` checks. */
  readonly compaction?: CompactionPolicy
  /** Cap on a simulated summary (default `DEFAULT_SUMMARY_MAX_TOKENS`, 8,192). */
  readonly summaryMaxTokens?: number
  /** Summary size as a fraction of the transcript (default 0.1). */
  readonly summaryRatio?: number
  /** Instruction tokens added to every summarizer call (default 1,000). */
  readonly summarizerOverheadTokens?: number
  /** The policies `simulate` runs (default `standardPolicies()`). */
  readonly policies?: ReadonlyArray<SimPolicy>
  /** Called with every request's prompt; for tests and tracing. */
  readonly onRequest?: (event: RequestEvent) => void
}

/** One request's figures. `cacheRead + cacheWrite === promptTokens`. @category models */
export interface RequestFigures {
  readonly index: number
  /** Tokens sent: system plus messages. */
  readonly promptTokens: number
  readonly cacheRead: number
  readonly cacheWrite: number
  readonly output: number
  /** The cached prefix was shorter than the previous prompt. */
  readonly invalidated: boolean
  /** Prompt plus reply exceed the context window. */
  readonly overWindow: boolean
  /** A compaction ran just before this request. */
  readonly compacted: boolean
}

/** The figures of one policy over the whole session. @category models */
export interface PolicyReport {
  readonly name: string
  readonly strategy: Strategy
  readonly requests: number
  readonly tokensSent: number
  readonly cacheRead: number
  readonly cacheWrite: number
  readonly outputTokens: number
  readonly summarizerCalls: number
  readonly summarizerInput: number
  readonly summarizerOutput: number
  /** Compactions that found nothing to cut (`planForPolicy` returned cut 0). */
  readonly failedCompactions: number
  /** Total cost in uncached-input-token units. */
  readonly cost: number
  readonly dollars: number
  /** Largest prompt plus reply, in tokens. */
  readonly peakContext: number
  /** Requests whose prompt plus reply exceed the context window. */
  readonly overWindow: number
  readonly cacheInvalidations: number
  /** Estimated tokens removed by eviction, masking, pruning or clearing (each tool result counted once). */
  readonly tokensOffloaded: number
  readonly perRequest: ReadonlyArray<RequestFigures>
}

/** What `simulate` returns: the settings used and one report per policy, in order. @category models */
export interface SimulationReport {
  readonly messages: number
  readonly prices: PriceTable
  readonly dollarsPerMTok: number
  readonly systemTokens: number
  readonly contextWindow: number
  readonly policies: ReadonlyArray<PolicyReport>
}

interface Settings {
  readonly prices: PriceTable
  readonly dollarsPerMTok: number
  readonly systemTokens: number
  readonly compaction: CompactionPolicy
  readonly summaryMaxTokens: number
  readonly summaryRatio: number
  readonly summarizerOverheadTokens: number
  readonly onRequest: ((event: RequestEvent) => void) | undefined
}

const settingsOf = (options: SimulateOptions): Settings => ({
  prices: { ...ANTHROPIC_PRICES, ...options.prices },
  dollarsPerMTok: options.dollarsPerMTok ?? DEFAULT_DOLLARS_PER_MTOK,
  systemTokens: Math.max(0, options.systemTokens ?? 0),
  compaction: options.compaction ?? defaultPolicy,
  summaryMaxTokens: options.summaryMaxTokens ?? DEFAULT_SUMMARY_MAX_TOKENS,
  summaryRatio: options.summaryRatio ?? DEFAULT_SUMMARY_RATIO,
  summarizerOverheadTokens: options.summarizerOverheadTokens ?? DEFAULT_SUMMARIZER_OVERHEAD_TOKENS,
  onRequest: options.onRequest
})

// ============================================================================
// Replay
// ============================================================================

/**
 * A stand-in for the summary message, `tokens` estimated tokens long (the simulated summarizer output, with no
 * frame): only its size matters to the replay. It is not `Summary.summaryMessage`, whose fixed header and preamble
 * would add about 75 tokens to every simulated summary.
 */
const simulatedSummary = (tokens: number, summarized: number): Message => {
  const header = `[Simulated summary of ${summarized} earlier messages]`
  const chars = Math.max(header.length, tokens * CHARS_PER_TOKEN)
  return { role: "user", content: [{ type: "text", text: header.padEnd(chars, " .") }] }
}

/**
 * Replays `messages` under one policy (see the module doc for the model) and returns its figures. Pure: the input
 * is not modified, and the same input and options give the same report.
 * @category simulation
 */
export const simulatePolicy = <M extends Message>(
  messages: ReadonlyArray<M>,
  policy: SimPolicy,
  options: SimulateOptions = {}
): PolicyReport => replay(messages, policy, settingsOf(options))

const replay = (messages: ReadonlyArray<Message>, policy: SimPolicy, settings: Settings): PolicyReport => {
  const { compaction, prices, systemTokens } = settings
  const strategy = policy.strategy
  const trigger = compaction.contextWindow - compaction.minRemaining
  let view: ReadonlyArray<Message> = []
  let previous: ReadonlyArray<Message> | undefined
  let hot = HotPaths.empty()
  const cleared = new Set<string>()
  const perRequest: Array<RequestFigures> = []
  let offloaded = 0
  let summarizerCalls = 0
  let summarizerInput = 0
  let summarizerOutput = 0
  let failedCompactions = 0

  /** Applies the strategy: updates the view (stateful strategies) and returns the prompt. */
  const act = (): ReadonlyArray<Message> => {
    switch (strategy._tag) {
      case "None":
      case "CompactOnly":
        return view
      case "Masking": {
        const next = mask(view, strategy.window)
        offloaded += next.freed
        return view = next.view
      }
      case "Prune": {
        const next = prune(view, strategy.protectTokens, strategy.minimumTokens)
        offloaded += next.freed
        return view = next.view
      }
      case "ClearToolUses": {
        if (systemTokens + sumTokens(view, 0, view.length) <= strategy.triggerTokens) return view
        const next = clearToolUses(view, strategy.keep, cleared)
        offloaded += next.freed
        return next.prompt
      }
      case "Evict": {
        const evictOptions: EvictOptions = strategy.pinning
          ? { minSavings: strategy.minSavings, pinned: hot.pinned }
          : { minSavings: strategy.minSavings }
        const result = evictStaleToolResults(view, strategy.keepRecent, evictOptions)
        if (result.messages !== view) {
          offloaded += result.tokensFreed
          hot = hot.observeOffloads(result.offloaded)
          view = result.messages
        }
        return view
      }
    }
  }

  /** Compacts the view; false when there is nothing to cut. */
  const compact = (): boolean => {
    const plan = planForPolicy(view, compaction)
    if (plan.cut === 0) {
      failedCompactions++
      return false
    }
    const head = view.slice(0, plan.cut)
    const transcript = estimateContentTokens(render(head))
    const summary = Math.max(1, Math.min(settings.summaryMaxTokens, Math.ceil(transcript * settings.summaryRatio)))
    summarizerCalls++
    summarizerInput += transcript + settings.summarizerOverheadTokens
    summarizerOutput += summary
    view = [simulatedSummary(summary, head.length), ...view.slice(plan.cut)]
    return true
  }

  for (let index = 0; index < messages.length; index++) {
    const message = messages[index]!
    if (message.role === "assistant") {
      let prompt = act()
      let total = sumTokens(prompt, 0, prompt.length)
      let compacted = false
      if (strategy._tag !== "None" && systemTokens + total > trigger && compact()) {
        compacted = true
        prompt = strategy._tag === "ClearToolUses" ? act() : view
        total = sumTokens(prompt, 0, prompt.length)
      }
      const snapshot = prompt
      const shared = previous === undefined ? 0 : sharedPrefix(previous, snapshot)
      const sharedTokens = sumTokens(snapshot, 0, shared)
      const first = previous === undefined
      const cacheRead = first ? 0 : systemTokens + sharedTokens
      const promptTokens = systemTokens + total
      const output = estimateMessageTokens(message)
      perRequest.push({
        index,
        promptTokens,
        cacheRead,
        cacheWrite: promptTokens - cacheRead,
        output,
        invalidated: previous !== undefined && shared < previous.length,
        overWindow: promptTokens + output > compaction.contextWindow,
        compacted
      })
      settings.onRequest?.({ policy: policy.name, index, prompt: snapshot })
      previous = snapshot
    }
    view = [...view, message]
    if (strategy._tag === "Evict" && strategy.pinning) hot = hot.observe([message])
  }

  let tokensSent = 0
  let cacheRead = 0
  let cacheWrite = 0
  let outputTokens = 0
  let peakContext = 0
  let overWindow = 0
  let cacheInvalidations = 0
  let cost = 0
  for (const r of perRequest) {
    tokensSent += r.promptTokens
    cacheRead += r.cacheRead
    cacheWrite += r.cacheWrite
    outputTokens += r.output
    peakContext = Math.max(peakContext, r.promptTokens + r.output)
    if (r.overWindow) overWindow++
    if (r.invalidated) cacheInvalidations++
    cost += requestCost(prices, r)
  }
  cost += summarizerCost(prices, { input: summarizerInput, output: summarizerOutput })
  return {
    name: policy.name,
    strategy,
    requests: perRequest.length,
    tokensSent,
    cacheRead,
    cacheWrite,
    outputTokens,
    summarizerCalls,
    summarizerInput,
    summarizerOutput,
    failedCompactions,
    cost,
    dollars: cost * settings.dollarsPerMTok / 1e6,
    peakContext,
    overWindow,
    cacheInvalidations,
    tokensOffloaded: offloaded,
    perRequest
  }
}

/**
 * Replays `messages` under every policy of `options.policies` (default `standardPolicies()`), each from the same
 * recorded session, and returns one report per policy in that order. Pure.
 * @category simulation
 */
export const simulate = <M extends Message>(
  messages: ReadonlyArray<M>,
  options: SimulateOptions = {}
): SimulationReport => {
  const settings = settingsOf(options)
  const policies = options.policies ?? standardPolicies()
  return {
    messages: messages.length,
    prices: settings.prices,
    dollarsPerMTok: settings.dollarsPerMTok,
    systemTokens: settings.systemTokens,
    contextWindow: settings.compaction.contextWindow,
    policies: policies.map((policy) => replay(messages, policy, settings))
  }
}

// ============================================================================
// Formatting
// ============================================================================

const int = (n: number): string => Math.round(n).toLocaleString("en-US")

/**
 * The report as a markdown table (one row per policy), followed by a line per policy that went over the window.
 * Columns: cost in input-token units and dollars, requests, tokens sent, cache read / write, output, summarizer
 * calls and their input / output tokens, peak context, requests over the window, cache invalidations, tokens
 * offloaded. Deterministic: the same report gives the same text.
 * @category formatting
 */
export const formatReport = (report: SimulationReport, options: { readonly title?: string } = {}): string => {
  const header = [
    "policy",
    "cost (input-token units)",
    "$",
    "requests",
    "tokens sent",
    "cache read",
    "cache write",
    "output",
    "summarizer calls",
    "summarizer in / out",
    "peak context",
    "over window",
    "cache invalidations",
    "tokens offloaded"
  ]
  const rows = report.policies.map((p) => [
    p.name,
    int(p.cost),
    `$${p.dollars.toFixed(2)}`,
    int(p.requests),
    int(p.tokensSent),
    int(p.cacheRead),
    int(p.cacheWrite),
    int(p.outputTokens),
    int(p.summarizerCalls),
    `${int(p.summarizerInput)} / ${int(p.summarizerOutput)}`,
    int(p.peakContext),
    int(p.overWindow),
    int(p.cacheInvalidations),
    int(p.tokensOffloaded)
  ])
  const line = (cells: ReadonlyArray<string>) => `| ${cells.join(" | ")} |`
  const lines: Array<string> = []
  if (options.title !== undefined) lines.push(`### ${options.title}`, "")
  lines.push(
    `${int(report.messages)} messages; prices per input token: input ${report.prices.input}, cache write ` +
      `${report.prices.cacheWrite}, cache read ${report.prices.cacheRead}, output ${report.prices.output}; ` +
      `$${report.dollarsPerMTok}/MTok input; system prompt ${int(report.systemTokens)} tokens; window ` +
      `${int(report.contextWindow)}.`,
    "",
    line(header),
    line(header.map((_, i) => i === 0 ? "---" : "---:")),
    ...rows.map(line)
  )
  const over = report.policies.filter((p) => p.overWindow > 0)
  if (over.length > 0) lines.push("")
  for (const p of over) {
    lines.push(
      `Note: ${p.name} exceeds the ${int(report.contextWindow)}-token window on ${int(p.overWindow)} of ` +
        `${int(p.requests)} requests (peak ${int(p.peakContext)}); a provider would reject those requests.`
    )
  }
  return lines.join("\n")
}
