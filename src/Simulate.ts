/**
 * The cost simulator: what a recorded session would have cost under a context policy, priced as Anthropic bills it.
 *
 * **The replay goes through `Conversation`.** The recorded messages are walked in order through the conversation's
 * own pure transitions (`appendMessage`, `prepareStep`, `prepareCompaction`/`finishCompaction`, `recordReply`), so
 * the requests priced are exactly those the library would send, breakpoints included (`requestOf`). Before each
 * recorded reply a request is made; the reply is then recorded with the usage the simulated request was billed, and
 * that usage drives the trigger, as a provider's would. No summarizer is called: a summary is
 * `min(summaryMaxTokens, summaryRatio × transcript)` tokens, and its call is billed as uncached input (the transcript
 * plus `summarizerOverheadTokens`) and output.
 *
 * **The cache** is modelled as the API does it (`internal/simulate/cache.ts`): entries at each request's breakpoints,
 * a hit only at a breakpoint looking back 20 blocks, no entry below the model's minimum cacheable length, 5 minutes of
 * life from the last write or hit, the times taken from the record (the request for a reply is sent when the message
 * before it was recorded). Misses the record shows and no rule explains (a client changing its thinking settings) are
 * replayed as the provider losing the cache, under every policy alike.
 *
 * **Sizes** are calibrated with the recorded usage (`internal/simulate/calibrate.ts`): each recorded block weighs what
 * the billed prompt grew by when it arrived; new blocks (pointers, summaries) weigh their estimate times the session's
 * factor; the system prompt and tools weigh what the first request billed beyond its messages. Output is the billed
 * output of each reply.
 *
 * **Prices** are per model (`MODEL_PRICES`, overridable): a reply's recorded model, else `options.model`.
 *
 * Pure: the recorded messages are never mutated.
 *
 * @since 0.1.0
 */
import { lastBreakpoint, minCacheableTokens } from "./Cache.ts"
import { prepareCompaction, finishCompaction } from "./Compact.ts"
import {
  appendMessage,
  applyCompaction,
  asMessageParams,
  type ConversationState,
  emptyState,
  type MessageParam,
  prepareStep,
  recordReply,
  requestOf
} from "./Conversation.ts"
import { DEFAULT_KEEP_RECENT, DEFAULT_MIN_SAVINGS } from "./Evict.ts"
import type { MessageUsage, RecordedAt } from "./Import.ts"
import { calibrateSession, type Calibration, blockEstimate } from "./internal/simulate/calibrate.ts"
import { blockKey, chainKey, type CacheBill, PromptCache } from "./internal/simulate/cache.ts"
import { clearToolUses, mask, prune } from "./internal/simulate/strategies.ts"
import type { ContentBlock, Message } from "./Message.ts"
import { CompactionPolicy, defaultPolicy, type PolicyOptions, type ReportedUsage, zeroUsage } from "./Policy.ts"
import { DEFAULT_SUMMARY_MAX_TOKENS } from "./Summary.ts"
import { CHARS_PER_TOKEN, estimateContentTokens, MESSAGE_OVERHEAD_TOKENS } from "./Tokens.ts"

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

/** Anthropic's price ratios (API-RULES 20): input 1, cache write (5-minute) 1.25, cache read 0.1, output 5. @category constants */
export const ANTHROPIC_PRICES: PriceTable = { input: 1, cacheWrite: 1.25, cacheRead: 0.1, output: 5 }

/** Dollars per million input and output tokens of one model family. @category models */
export interface ModelPrice {
  readonly family: string
  /** Matches the model ids of the family. */
  readonly pattern: RegExp
  readonly input: number
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

/** Dollars per million uncached input tokens when the model is unknown: $3, Claude Sonnet's price. @category constants */
export const DEFAULT_DOLLARS_PER_MTOK = 3

/** The price of `model` in dollars per million tokens (`prices` first, then `MODEL_PRICES`; unknown: Sonnet). @category cost */
export const modelPrice = (
  model: string | undefined,
  prices: ReadonlyArray<ModelPrice> = MODEL_PRICES
): ModelPrice =>
  (model === undefined ? undefined : prices.find((p) => p.pattern.test(model))) ??
    { family: "unknown (Sonnet prices)", pattern: /$^/, input: DEFAULT_DOLLARS_PER_MTOK, output: 15 }

/** Largest simulated summary, in tokens: the summarizer's own cap, `Summary.DEFAULT_SUMMARY_MAX_TOKENS` (8,192). */
export { DEFAULT_SUMMARY_MAX_TOKENS } from "./Summary.ts"

/** A simulated summary is this fraction of its transcript (then capped): 10%. @category constants */
export const DEFAULT_SUMMARY_RATIO = 0.1

/** Tokens of instructions (and a previous-summary wrapper) added to every summarizer call: 1,000. @category constants */
export const DEFAULT_SUMMARIZER_OVERHEAD_TOKENS = 1_000

/** The cost, in input-token units, of one request's cache read, cache write, uncached input and output. @category cost */
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

/** The cost, in input-token units, of one summarizer call (all input uncached). @category cost */
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
  readonly keepRecent?: number | undefined
  /** A fixed eviction threshold instead of the rent-or-buy rule. */
  readonly minSavings?: number | undefined
  /** The policy's fields (`compactAtTokens`, `keepRecentTokens`, …). */
  readonly policy?: PolicyOptions | undefined
  /** Bring compaction and eviction forward when the cache is known cold (default true, as the library does). */
  readonly coldRules?: boolean | undefined
}

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

/** The library's eviction defaults: `DEFAULT_KEEP_RECENT` and the rent-or-buy rule (no fixed `minSavings`). @category constants */
export const OURS_DEFAULTS = { keepRecent: DEFAULT_KEEP_RECENT } as const

/** The fixed threshold of the "minSavings" row, the former default: `DEFAULT_MIN_SAVINGS` (2,000). @category constants */
export const OURS_TUNED_MIN_SAVINGS = DEFAULT_MIN_SAVINGS

/**
 * The policies of the report, in order: none, compaction at the window, masking (10), opencode pruning (40k/20k),
 * `clear_tool_uses` (100k, keep 3), ours with the defaults, ours with a fixed `minSavings` instead of rent-or-buy.
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
    }
  ]
}

// ============================================================================
// Input, options and report
// ============================================================================

/** A recorded session: its messages and what the record says beside them (as `Import.Session` holds it). @category models */
export interface RecordedSession {
  readonly messages: ReadonlyArray<Message>
  readonly usage?: ReadonlyArray<MessageUsage> | undefined
  readonly recorded?: ReadonlyArray<RecordedAt> | undefined
  readonly system?: string | undefined
}

/** One request the policy made to the provider. @category models */
export interface RequestEvent {
  readonly policy: string
  /** Index of the recorded reply this request produced. */
  readonly index: number
  /** The messages sent (without the system prompt), breakpoints included. */
  readonly prompt: ReadonlyArray<Message>
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
  /** The policies `simulate` runs (default `standardPolicies()`). */
  readonly policies?: ReadonlyArray<SimPolicy>
  /** Called with every request's prompt; for tests and tracing. */
  readonly onRequest?: (event: RequestEvent) => void
}

/** Why a request read less than the previous one left in the cache. @category models */
export type MissCause = "ttl" | "external" | "policy"

/** One request's figures. `cacheRead + cacheWrite + input === promptTokens`. @category models */
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
  readonly breakpoints: number
  /** Set when the request read less than the previous request left in the cache. */
  readonly miss: MissCause | undefined
  /** The cached prefix was rewritten by the policy (a `policy` miss). */
  readonly invalidated: boolean
  readonly overWindow: boolean
  readonly compacted: boolean
}

/** Cache misses by cause. @category models */
export interface MissCounts {
  readonly ttl: number
  readonly external: number
  readonly policy: number
}

/** The figures of one policy over the whole session. @category models */
export interface PolicyReport {
  readonly name: string
  readonly strategy: Strategy
  readonly requests: number
  readonly tokensSent: number
  readonly cacheRead: number
  readonly cacheWrite: number
  readonly inputTokens: number
  readonly outputTokens: number
  readonly compactions: number
  readonly summarizerCalls: number
  readonly summarizerInput: number
  readonly summarizerOutput: number
  /** Compactions the trigger asked for that found nothing worth compacting. */
  readonly failedCompactions: number
  /** Total cost in uncached-input-token units (`prices`). */
  readonly cost: number
  /** Total cost in dollars at each request's model price. */
  readonly dollars: number
  /** Largest prompt plus reply, in tokens. */
  readonly peakContext: number
  readonly overWindow: number
  readonly misses: MissCounts
  /** Policy misses: requests whose cached prefix the policy rewrote. */
  readonly cacheInvalidations: number
  /** Calibrated tokens removed by eviction, masking, pruning or clearing. */
  readonly tokensOffloaded: number
  readonly perRequest: ReadonlyArray<RequestFigures>
}

/** What `simulate` returns: the settings used and one report per policy, in order. @category models */
export interface SimulationReport {
  readonly messages: number
  readonly prices: PriceTable
  readonly models: ReadonlyArray<string>
  readonly dollarsPerMTok: number
  readonly systemTokens: number
  readonly tokenFactor: number
  readonly contextWindow: number
  readonly policies: ReadonlyArray<PolicyReport>
}

interface Settings {
  readonly prices: PriceTable
  readonly modelPrices: ReadonlyArray<ModelPrice>
  readonly model: string | undefined
  readonly dollarsPerMTok: number | undefined
  readonly compaction: CompactionPolicy
  readonly summaryMaxTokens: number
  readonly summaryRatio: number
  readonly summarizerOverheadTokens: number
  readonly externalMisses: boolean
  readonly onRequest: ((event: RequestEvent) => void) | undefined
}

const settingsOf = (options: SimulateOptions): Settings => ({
  prices: { ...ANTHROPIC_PRICES, ...options.prices },
  modelPrices: options.modelPrices ?? MODEL_PRICES,
  model: options.model,
  dollarsPerMTok: options.dollarsPerMTok,
  compaction: options.compaction ?? defaultPolicy,
  summaryMaxTokens: options.summaryMaxTokens ?? DEFAULT_SUMMARY_MAX_TOKENS,
  summaryRatio: options.summaryRatio ?? DEFAULT_SUMMARY_RATIO,
  summarizerOverheadTokens: options.summarizerOverheadTokens ?? DEFAULT_SUMMARIZER_OVERHEAD_TOKENS,
  externalMisses: options.externalMisses ?? true,
  onRequest: options.onRequest
})

/** A session ready to replay: its messages, calibration and reply models. */
interface Prepared {
  readonly messages: ReadonlyArray<Message>
  readonly calibration: Calibration
  readonly models: ReadonlyMap<number, string>
  readonly modelOf: (index: number) => string | undefined
}

const prepareSession = (input: ReadonlyArray<Message> | RecordedSession, options: SimulateOptions): Prepared => {
  const session: RecordedSession = Array.isArray(input) ? { messages: input as ReadonlyArray<Message> } : input as RecordedSession
  const usage = new Map<number, ReportedUsage>()
  for (const u of session.usage ?? []) usage.set(u.messageIndex, u.usage)
  // the converted corpus keeps usage on the messages themselves (`_usage`)
  if (usage.size === 0) {
    session.messages.forEach((m, i) => {
      const u = (m as unknown as { readonly _usage?: Record<string, number> })._usage
      if (u !== undefined && typeof u === "object") {
        usage.set(i, {
          input_tokens: u["input"] ?? 0,
          output_tokens: u["output"] ?? 0,
          cache_read_input_tokens: u["cacheRead"] ?? 0,
          cache_creation_input_tokens: u["cacheWrite"] ?? 0
        })
      }
    })
  }
  const times = new Map<number, number>()
  const models = new Map<number, string>()
  for (const r of session.recorded ?? []) {
    if (r.timestamp !== undefined) times.set(r.messageIndex, r.timestamp)
    if (r.model !== undefined) models.set(r.messageIndex, r.model)
  }
  const systemTokens = options.systemTokens ??
    (usage.size === 0 && session.system !== undefined ? estimateContentTokens(session.system) : undefined)
  const calibration = calibrateSession(session.messages, { usage, times, models }, {
    systemTokens,
    factor: options.tokenFactor ?? (usage.size === 0 ? 1 : undefined)
  })
  let last: string | undefined = options.model
  const byIndex: Array<string | undefined> = []
  session.messages.forEach((_, i) => {
    last = models.get(i) ?? last
    byIndex.push(last)
  })
  return { messages: session.messages, calibration, models, modelOf: (i) => models.get(i) ?? byIndex[i] ?? options.model }
}

// ============================================================================
// Prompts as units
// ============================================================================

const blocksOf = (message: Message): ReadonlyArray<ContentBlock> =>
  typeof message.content === "string" ? [{ type: "text", text: message.content }] : message.content

/** Builds the priced units of prompts, reusing the prefix shared with the previous prompt (same message objects). */
class Units {
  private messages: ReadonlyArray<Message> = []
  private keys: Array<number> = []
  private cumulative: Array<number> = []
  /** First unit index of each message. */
  private starts: Array<number> = []
  private system = 0
  private readonly calibration: Calibration
  constructor(calibration: Calibration) {
    this.calibration = calibration
  }

  tokensOf(block: ContentBlock, first: boolean): number {
    return this.calibration.blockTokens(block) ??
      this.calibration.factor * (blockEstimate(block) + (first ? MESSAGE_OVERHEAD_TOKENS : 0))
  }

  build(view: ReadonlyArray<Message>, systemTokens: number) {
    if (systemTokens !== this.system) {
      this.messages = []
      this.starts = []
      this.keys = []
      this.cumulative = []
      this.system = systemTokens
    }
    let same = 0
    while (same < view.length && same < this.messages.length && view[same] === this.messages[same]) same++
    const { cumulative, keys, starts } = this
    const keep = same < starts.length ? starts[same]! : keys.length
    keys.length = keep
    cumulative.length = keep
    starts.length = same
    if (keys.length === 0 && systemTokens > 0) {
      keys.push(chainKey(0, systemTokens, "system"))
      cumulative.push(systemTokens)
    }
    for (let m = same; m < view.length; m++) {
      const message = view[m]!
      starts.push(keys.length)
      blocksOf(message).forEach((block, b) => {
        const prevKey = keys.length === 0 ? 0 : keys[keys.length - 1]!
        const prevTokens = cumulative.length === 0 ? 0 : cumulative[cumulative.length - 1]!
        const content = typeof message.content === "string" ? message : block
        keys.push(chainKey(prevKey, blockKey(content), b === 0 ? message.role : ""))
        cumulative.push(prevTokens + this.tokensOf(block, b === 0))
      })
    }
    this.messages = view
    return { keys, cumulative, starts }
  }
}

/** Unit indices of the breakpoints of a request (`cache_control` on message blocks), given the message starts. */
const breakpointUnits = (request: ReadonlyArray<Message>, starts: ReadonlyArray<number>): Array<number> => {
  const out: Array<number> = []
  request.forEach((message, m) => {
    if (typeof message.content === "string") return
    message.content.forEach((block, b) => {
      if ((block as { cache_control?: unknown }).cache_control != null) out.push(starts[m]! + b)
    })
  })
  return out
}

// ============================================================================
// Replay
// ============================================================================

const libraryOptionsOf = (strategy: Strategy): LibraryOptions | undefined => {
  switch (strategy._tag) {
    case "Library":
      return strategy.options
    case "Evict":
      return { keepRecent: strategy.keepRecent, minSavings: strategy.minSavings }
    default:
      return undefined
  }
}

const windowPolicy = (base: CompactionPolicy): CompactionPolicy =>
  CompactionPolicy.makeUnsafe({ ...fieldsOf(base), compactAtTokens: base.contextWindow - base.minRemaining })

const fieldsOf = (p: CompactionPolicy): PolicyOptions => ({
  keepRecentTokens: p.keepRecentTokens,
  keepRecentTurns: p.keepRecentTurns,
  minRemaining: p.minRemaining,
  contextWindow: p.contextWindow,
  maxTailTokens: p.maxTailTokens,
  compactAtTokens: p.compactAtTokens
})

/** A stand-in summary text whose calibrated size is `tokens`. */
const summaryTextOf = (tokens: number, factor: number, summarized: number): string => {
  const header = `Simulated summary of ${summarized} earlier messages.`
  return header.padEnd(Math.max(header.length, Math.round((tokens * CHARS_PER_TOKEN) / factor)), " .")
}

/**
 * Replays one session under one policy (see the module doc) and returns its figures. Pure: the input is not
 * modified, and the same input and options give the same report.
 * @category simulation
 */
export const simulatePolicy = (
  input: ReadonlyArray<Message> | RecordedSession,
  policy: SimPolicy,
  options: SimulateOptions = {}
): PolicyReport => replay(prepareSession(input, options), policy, settingsOf(options))

const replay = (session: Prepared, policy: SimPolicy, settings: Settings): PolicyReport => {
  const { calibration } = session
  const strategy = policy.strategy
  const library = libraryOptionsOf(strategy)
  const base = library?.policy === undefined
    ? settings.compaction
    : CompactionPolicy.makeUnsafe({ ...fieldsOf(settings.compaction), ...library.policy })
  const compactionPolicy = library === undefined ? windowPolicy(settings.compaction) : base
  const coldRules = library?.coldRules ?? true
  const systemTokens = calibration.systemTokens
  const systemPlaceholder = systemTokens > 0
    ? "s".repeat(Math.round((systemTokens / calibration.factor) * CHARS_PER_TOKEN))
    : undefined
  const units = new Units(calibration)
  const peerUnits = new Units(calibration)
  const minTokensOf = (model: string | undefined) => minCacheableTokens(model)
  let cache: PromptCache | undefined
  let state: ConversationState = emptyState()
  const cleared = new Set<string>()
  const perRequest: Array<RequestFigures> = []
  let offloaded = 0
  let compactions = 0
  let summarizerCalls = 0
  let summarizerInput = 0
  let summarizerOutput = 0
  let summarizerDollars = 0
  let failedCompactions = 0
  let lastTime: number | undefined
  let previousCached = 0
  const sumOffloaded = (before: ConversationState, after: ConversationState) => {
    if (before.view === after.view) return
    const b = units.build(asMessages(before.view), 0).cumulative.at(-1) ?? 0
    const a = units.build(asMessages(after.view), 0).cumulative.at(-1) ?? 0
    offloaded += Math.max(0, b - a)
  }

  const compact = (model: string | undefined): boolean => {
    const plan = prepareCompaction(state.view, compactionPolicy)
    if (plan._tag === "Skip") {
      failedCompactions++
      return false
    }
    const transcript = calibration.factor * estimateContentTokens(plan.request.transcript)
    const tokens = Math.max(1, Math.min(settings.summaryMaxTokens, Math.ceil(transcript * settings.summaryRatio)))
    const finished = finishCompaction(plan, {
      text: summaryTextOf(tokens, calibration.factor, plan.cut),
      model: "simulated",
      usage: zeroUsage,
      summarizer: "simulated"
    })
    if (finished.record === undefined) {
      failedCompactions++
      return false
    }
    const price = dollarsOf(model)
    summarizerCalls++
    summarizerInput += transcript + settings.summarizerOverheadTokens
    summarizerOutput += tokens
    summarizerDollars += ((transcript + settings.summarizerOverheadTokens) * price.input + tokens * price.output) / 1e6
    state = applyCompaction(state, finished).state
    compactions++
    return true
  }

  const dollarsOf = (model: string | undefined) => {
    const p = modelPrice(model, settings.modelPrices)
    return settings.dollarsPerMTok === undefined
      ? p
      : { ...p, input: settings.dollarsPerMTok, output: (settings.dollarsPerMTok * p.output) / p.input }
  }

  const messages = session.messages
  for (let index = 0; index < messages.length; index++) {
    const message = asParam(messages[index]!)
    if (message.role !== "assistant") {
      state = appendMessage(state, message).state
      continue
    }
    const model = session.modelOf(index)
    cache ??= new PromptCache(minTokensOf(model))
    const time = calibration.requestTime(index)
    const expired = lastTime !== undefined && time - lastTime >= cache.ttlMs
    const cold = coldRules && expired
    const before = state
    let compacted = false
    let sent: ReadonlyArray<Message>
    let breakpoints: Array<number>
    let priced: { readonly keys: ReadonlyArray<number>; readonly cumulative: ReadonlyArray<number> }
    if (library !== undefined) {
      const step = prepareStep(state, {
        keepRecent: library.keepRecent,
        minSavings: library.minSavings,
        policy: compactionPolicy
      }, cold)
      state = step.transition.state
      sumOffloaded(before, state)
      if (step.compact) compacted = compact(model)
      const request = requestOf(state, systemPlaceholder, { model, before: compacted ? undefined : before })
      sent = asMessages(request.messages)
      const built = units.build(asMessages(state.view), systemTokens)
      const system = Array.isArray(request.system) && request.system.some((b) => b.cache_control != null)
      breakpoints = [...(system ? [0] : []), ...breakpointUnits(sent, built.starts)]
      priced = built
    } else {
      const step = prepareStep(state, { keepRecent: Infinity, minSavings: Infinity, policy: compactionPolicy })
      state = step.transition.state
      if (strategy._tag !== "None" && step.compact) compacted = compact(model)
      const peer = peerRewrite(strategy, state.view, cleared, units, systemTokens)
      if (peer.persist) {
        sumOffloaded(state, { ...state, view: peer.view })
        state = { ...state, view: peer.view }
      } else offloaded += peer.freed
      sent = asMessages(peer.view)
      const built = (peer.view === state.view ? units : peerUnits).build(sent, systemTokens)
      // a typical client: a breakpoint at the end of the system prompt and one on the newest block
      const last = lastBreakpoint(sent)
      const minTokens = cache.minTokens
      breakpoints = [
        ...(systemTokens >= minTokens ? [0] : []),
        ...(last === undefined ? [] : [built.starts[last.message]! + last.block])
      ]
      priced = built
    }
    if (settings.externalMisses && calibration.externalMisses.has(index)) cache.clear()
    const bill: CacheBill = cache.price({ keys: priced.keys, cumulative: priced.cumulative, breakpoints }, time)
    const output = calibration.output(index) ?? calibration.factor * estimateContentTokens(message.content as never)
    const promptTokens = bill.read + bill.write + bill.input
    const miss: MissCause | undefined = perRequest.length > 0 && bill.read < previousCached
      ? expired ? "ttl" : calibration.externalMisses.has(index) && settings.externalMisses ? "external" : "policy"
      : undefined
    previousCached = bill.read + bill.write
    const price = dollarsOf(model)
    const dollars = (bill.read * price.input * 0.1 + bill.write * price.input * 1.25 + bill.input * price.input +
      output * price.output) / 1e6
    perRequest.push({
      index,
      time,
      model,
      promptTokens,
      cacheRead: bill.read,
      cacheWrite: bill.write,
      input: bill.input,
      output,
      dollars,
      breakpoints: breakpoints.length,
      miss,
      invalidated: miss === "policy",
      overWindow: promptTokens + output > settings.compaction.contextWindow,
      compacted
    })
    settings.onRequest?.({ policy: policy.name, index, prompt: sent })
    lastTime = time
    const usage: ReportedUsage = {
      input_tokens: Math.round(bill.input),
      output_tokens: Math.round(output),
      cache_read_input_tokens: Math.round(bill.read),
      cache_creation_input_tokens: Math.round(bill.write)
    }
    state = recordReply(state, message, usage, state.epoch).state
  }
  return summarize(policy, perRequest, settings, {
    compactions,
    summarizerCalls,
    summarizerInput,
    summarizerOutput,
    summarizerDollars,
    failedCompactions,
    offloaded
  })
}

const asParam = (message: Message): MessageParam => asMessageParams([message])[0]!
const asMessages = (view: ReadonlyArray<MessageParam>): ReadonlyArray<Message> => view as unknown as Array<Message>

/** What a peer does to the view: the prompt it sends, whether the client keeps it, and the tokens it removed. */
const peerRewrite = (
  strategy: Strategy,
  view: ReadonlyArray<MessageParam>,
  cleared: Set<string>,
  units: Units,
  systemTokens: number
): { readonly view: ReadonlyArray<MessageParam>; readonly persist: boolean; readonly freed: number } => {
  const messages = asMessages(view)
  switch (strategy._tag) {
    case "Masking":
      return { view: mask(messages, strategy.window).view as never, persist: true, freed: 0 }
    case "Prune":
      return {
        view: prune(messages, strategy.protectTokens, strategy.minimumTokens).view as never,
        persist: true,
        freed: 0
      }
    case "ClearToolUses": {
      const total = units.build(messages, systemTokens).cumulative.at(-1) ?? 0
      if (total <= strategy.triggerTokens) return { view, persist: false, freed: 0 }
      const next = clearToolUses(messages, strategy.keep, cleared)
      return { view: next.prompt as never, persist: false, freed: next.freed }
    }
    default:
      return { view, persist: false, freed: 0 }
  }
}

const summarize = (
  policy: SimPolicy,
  perRequest: ReadonlyArray<RequestFigures>,
  settings: Settings,
  extra: {
    readonly compactions: number
    readonly summarizerCalls: number
    readonly summarizerInput: number
    readonly summarizerOutput: number
    readonly summarizerDollars: number
    readonly failedCompactions: number
    readonly offloaded: number
  }
): PolicyReport => {
  let tokensSent = 0
  let cacheRead = 0
  let cacheWrite = 0
  let inputTokens = 0
  let outputTokens = 0
  let peakContext = 0
  let overWindow = 0
  let cost = 0
  let dollars = extra.summarizerDollars
  const misses = { ttl: 0, external: 0, policy: 0 }
  for (const r of perRequest) {
    tokensSent += r.promptTokens
    cacheRead += r.cacheRead
    cacheWrite += r.cacheWrite
    inputTokens += r.input
    outputTokens += r.output
    peakContext = Math.max(peakContext, r.promptTokens + r.output)
    if (r.overWindow) overWindow++
    if (r.miss !== undefined) misses[r.miss]++
    cost += requestCost(settings.prices, r)
    dollars += r.dollars
  }
  cost += summarizerCost(settings.prices, { input: extra.summarizerInput, output: extra.summarizerOutput })
  return {
    name: policy.name,
    strategy: policy.strategy,
    requests: perRequest.length,
    tokensSent,
    cacheRead,
    cacheWrite,
    inputTokens,
    outputTokens,
    compactions: extra.compactions,
    summarizerCalls: extra.summarizerCalls,
    summarizerInput: extra.summarizerInput,
    summarizerOutput: extra.summarizerOutput,
    failedCompactions: extra.failedCompactions,
    cost,
    dollars,
    peakContext,
    overWindow,
    misses,
    cacheInvalidations: misses.policy,
    tokensOffloaded: extra.offloaded,
    perRequest
  }
}

/**
 * Replays a session under every policy of `options.policies` (default `standardPolicies()`), each from the same
 * record, and returns one report per policy in that order. Pure.
 * @category simulation
 */
export const simulate = (
  input: ReadonlyArray<Message> | RecordedSession,
  options: SimulateOptions = {}
): SimulationReport => {
  const settings = settingsOf(options)
  const session = prepareSession(input, options)
  const policies = options.policies ?? standardPolicies()
  return {
    messages: session.messages.length,
    prices: settings.prices,
    models: [...new Set(session.models.values())].sort(),
    dollarsPerMTok: settings.dollarsPerMTok ?? modelPrice(session.modelOf(session.messages.length - 1)).input,
    systemTokens: session.calibration.systemTokens,
    tokenFactor: session.calibration.factor,
    contextWindow: settings.compaction.contextWindow,
    policies: policies.map((policy) => replay(session, policy, settings))
  }
}


// ============================================================================
// Formatting
// ============================================================================

const int = (n: number): string => Math.round(n).toLocaleString("en-US")

/**
 * The report as a markdown table (one row per policy), followed by a line per policy that went over the window.
 * Columns: dollars, cost in input-token units, requests, tokens sent, cache read / write, uncached input, output,
 * compactions, summarizer input / output, peak context, requests over the window, cache misses (policy / TTL /
 * external), tokens offloaded. Deterministic: the same report gives the same text.
 * @category formatting
 */
export const formatReport = (report: SimulationReport, options: { readonly title?: string } = {}): string => {
  const header = [
    "policy",
    "$",
    "cost (input-token units)",
    "requests",
    "tokens sent",
    "cache read",
    "cache write",
    "uncached input",
    "output",
    "compactions",
    "summarizer in / out",
    "peak context",
    "over window",
    "misses policy / TTL / external",
    "tokens offloaded"
  ]
  const rows = report.policies.map((p) => [
    p.name,
    `$${p.dollars.toFixed(2)}`,
    int(p.cost),
    int(p.requests),
    int(p.tokensSent),
    int(p.cacheRead),
    int(p.cacheWrite),
    int(p.inputTokens),
    int(p.outputTokens),
    int(p.compactions),
    `${int(p.summarizerInput)} / ${int(p.summarizerOutput)}`,
    int(p.peakContext),
    int(p.overWindow),
    `${p.misses.policy} / ${p.misses.ttl} / ${p.misses.external}`,
    int(p.tokensOffloaded)
  ])
  const line = (cells: ReadonlyArray<string>) => `| ${cells.join(" | ")} |`
  const lines: Array<string> = []
  if (options.title !== undefined) lines.push(`### ${options.title}`, "")
  lines.push(
    `${int(report.messages)} messages; models ${report.models.length === 0 ? "unknown" : report.models.join(", ")}; ` +
      `system prompt and tools ${int(report.systemTokens)} tokens; ${report.tokenFactor.toFixed(2)} billed tokens ` +
      `per estimated token; window ${int(report.contextWindow)}.`,
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
