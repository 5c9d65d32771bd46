/**
 * The replay engine: one session under one policy, through `Conversation`'s pure transitions (see `Simulate`). It is
 * the only one: `simulate`, the sweep, the HTML report and `compaction replay` (`cli/Replay.ts`, which adds the log
 * and the resumes around its steps) all run `replaySteps`.
 *
 * @internal
 */
import { cacheWritePrice, ttlMs } from "../cacheTtl.ts"
import { minCacheableTokens } from "../../Cache.ts"
import { finishCompaction, prepareCompaction } from "../../Compact.ts"
import {
  appendMessage,
  applyCompaction,
  asMessageParams,
  type Change,
  type ConversationState,
  emptyState,
  type MessageParam,
  prepareStep,
  recordReply,
  type SdkReply,
  type Transition
} from "../../ConversationState.ts"
import { type Request, requestOf } from "../../Request.ts"
import { triggerContext } from "../conversation/stepChecks.ts"
import { requestBytes } from "../requestBytes.ts"
import type { ContentBlock, Message } from "../../Message.ts"
import { CompactionPolicy, defaultPolicy, type PolicyOptions, type ReportedUsage, zeroUsage } from "../../Policy.ts"
import { CATEGORIES, measure } from "../../Retention.ts"
import { type RecallSource, removedSources } from "../recallSearch.ts"
import { DEFAULT_SUMMARY_MAX_TOKENS, summaryText } from "../../Summary.ts"
import { estimateContentTokens } from "../../Tokens.ts"
import { blockKey, type CacheBill, chainKey, PromptCache } from "./cache.ts"
import { blockEstimate, calibrateSession, type Calibration } from "./calibrate.ts"
import {
  ANTHROPIC_PRICES,
  type CompactionRetention,
  DEFAULT_SUMMARIZER_OVERHEAD_TOKENS,
  DEFAULT_SUMMARY_RATIO,
  type LibraryOptions,
  type MissCause,
  MODEL_PRICES,
  type ModelPrice,
  modelPrice,
  type PolicyReport,
  type PriceTable,
  type RecordedSession,
  type RemovalTally,
  removalTally,
  requestCost,
  type RequestEvent,
  type RequestFigures,
  type RetentionTally,
  type SimPolicy,
  type SimulateOptions,
  type Strategy,
  summarizerCost
} from "./model.ts"
import { clearToolUses, mask, prune } from "./strategies.ts"
import { pendingCall, shortenResults } from "../shorten.ts"
import { defaultToolClassifier } from "../../Tools.ts"
import { blocksOf } from "../blocks.ts"
import { lastBreakpoint } from "../breakpoints.ts"
import { CHARS_PER_TOKEN, MESSAGE_OVERHEAD_TOKENS } from "../estimate.ts"

/** The options with their defaults. */
export interface Settings {
  readonly prices: PriceTable
  readonly modelPrices: ReadonlyArray<ModelPrice>
  readonly model: string | undefined
  readonly dollarsPerMTok: number | undefined
  readonly compaction: CompactionPolicy
  readonly summaryMaxTokens: number
  readonly summaryRatio: number
  readonly summarizerOverheadTokens: number
  readonly externalMisses: boolean
  readonly threads: boolean
  readonly onRequest: ((event: RequestEvent) => void) | undefined
}

/** The options with their defaults filled in. */
export const settingsOf = (options: SimulateOptions): Settings => ({
  prices: { ...ANTHROPIC_PRICES, ...options.prices },
  modelPrices: options.modelPrices ?? MODEL_PRICES,
  model: options.model,
  dollarsPerMTok: options.dollarsPerMTok,
  compaction: options.compaction ?? defaultPolicy,
  summaryMaxTokens: options.summaryMaxTokens ?? DEFAULT_SUMMARY_MAX_TOKENS,
  summaryRatio: options.summaryRatio ?? DEFAULT_SUMMARY_RATIO,
  summarizerOverheadTokens: options.summarizerOverheadTokens ?? DEFAULT_SUMMARIZER_OVERHEAD_TOKENS,
  externalMisses: options.externalMisses ?? true,
  threads: options.threads ?? false,
  onRequest: options.onRequest
})

/** A session ready to replay: its messages, system prompt, calibration and reply models. */
export interface Prepared {
  readonly messages: ReadonlyArray<Message>
  /** The recorded system prompt, when the file holds it. */
  readonly system: string | undefined
  readonly calibration: Calibration
  readonly models: ReadonlyMap<number, string>
  readonly modelOf: (index: number) => string | undefined
}

/** Calibrates a session and indexes its reply models. */
export const prepareSession = (input: ReadonlyArray<Message> | RecordedSession, options: SimulateOptions): Prepared => {
  const session: RecordedSession = Array.isArray(input)
    ? { messages: input as ReadonlyArray<Message> }
    : input as RecordedSession
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
  return {
    messages: session.messages,
    system: session.system,
    calibration,
    models,
    modelOf: (i) => models.get(i) ?? byIndex[i] ?? options.model
  }
}

// ============================================================================
// Prompts as units
// ============================================================================

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
  withOptions(base, { compactAtTokens: base.contextWindow - base.minRemaining })

/**
 * `base` with `options` over it. A new trigger re-derives the sizes the policy derives from it (`maxTailTokens`,
 * `summaryBudgetTokens`, `minGrowthTokens`, unless `options` sets them): the base's, derived from its own trigger,
 * would contradict a lower one.
 */
const withOptions = (base: CompactionPolicy, options: PolicyOptions): CompactionPolicy => {
  const fields: PolicyOptions = { ...base }
  const { maxTailTokens: _tail, summaryBudgetTokens: _summary, minGrowthTokens: _growth, ...kept } = fields
  return CompactionPolicy.makeUnsafe({ ...(options.compactAtTokens === undefined ? fields : kept), ...options })
}

/** A stand-in summary text whose calibrated size is `tokens`. */
const summaryTextOf = (tokens: number, factor: number, summarized: number): string => {
  const header = `Simulated summary of ${summarized} earlier messages.`
  return header.padEnd(Math.max(header.length, Math.round((tokens * CHARS_PER_TOKEN) / factor)), " .")
}

/** One change of a replay with the states before and after it (what a log stores of it: `recordChange`). */
export interface ReplayChange {
  readonly change: Change
  readonly before: ConversationState
  readonly after: ConversationState
}

/** One request of a replay: the event (request, predicted usage, figures) and the changes that led to it, in order. */
export interface ReplayStep {
  readonly event: RequestEvent
  /** The transitions' changes since the previous request, ending with the recorded reply. */
  readonly changes: ReadonlyArray<ReplayChange>
}

/** The end of a replay: the report, and the changes after the last request (messages appended after it). */
export interface ReplayEnd {
  readonly report: PolicyReport
  readonly changes: ReadonlyArray<ReplayChange>
}

/**
 * The replay engine: walks one prepared session under one policy, yielding each request as it is priced. The driver
 * may answer a step with a state to go on from (a conversation resumed from its log); the engine never reads a clock,
 * so a resumed replay sends what an uninterrupted one sends when the state it is given is equal.
 */
export function* replaySteps(
  session: Prepared,
  policy: SimPolicy,
  settings: Settings
): Generator<ReplayStep, ReplayEnd, ConversationState | undefined> {
  const { calibration } = session
  const strategy = policy.strategy
  const library = libraryOptionsOf(strategy)
  const base = library?.policy === undefined ? settings.compaction : withOptions(settings.compaction, library.policy)
  const compactionPolicy = library === undefined ? windowPolicy(settings.compaction) : base
  const coldRules = library?.coldRules ?? true
  const systemTokens = calibration.systemTokens
  const system = session.system ?? systemStandIn(systemTokens, calibration.factor)
  const units = new Units(calibration)
  const peerUnits = new Units(calibration)
  let cache: PromptCache | undefined
  /** A cache write's price relative to input under the policy's lifetime (1.25 for 5 minutes, 2 for an hour). */
  const writePrice = cacheWritePrice(compactionPolicy.cacheTtl)
  let state: ConversationState = emptyState()
  const cleared = new Set<string>()
  const perRequest: Array<RequestFigures> = []
  let changes: Array<ReplayChange> = []
  /** What was removed from the view so far, as `recall` searches it: summarized spans and offloaded originals. */
  const removedMessages: Array<Message> = []
  const remove = (messages: ReadonlyArray<Message>) => {
    for (const message of messages) removedMessages.push(message)
  }
  // their sources, made when a measure first needs them (only an anchor missing from the request does)
  const sources: Array<RecallSource> = []
  let sourced = 0
  const removed = (): ReadonlyArray<RecallSource> => {
    for (const source of removedSources(removedMessages.slice(sourced), sourced)) sources.push(source)
    sourced = removedMessages.length
    return sources
  }
  const apply = (t: Transition) => {
    for (const step of t.steps) {
      if (step.change._tag === "Offloaded") {
        const view = asMessages(state.view)
        remove(step.change.offloaded.flatMap((o) => {
          const content = view[o.messageIndex]?.content
          const block = Array.isArray(content) ? content[o.blockIndex] : undefined
          return block === undefined ? [] : [{ role: "user" as const, content: [block] }]
        }))
      }
      changes.push({ change: step.change, before: state, after: step.state })
      state = step.state
    }
    state = t.state
  }
  let offloaded = 0
  let offloadedResults = 0
  let evictions = 0
  let compactions = 0
  let summarizerCalls = 0
  let summarizerInput = 0
  let summarizerOutput = 0
  let summarizerDollars = 0
  // the summaries made since the last request: their cost is the next request's (`RequestFigures.summarizerDollars`)
  let summaryDollarsDue = 0
  let failedCompactions = 0
  let lastTime: number | undefined
  let previousCached = 0
  let summarized: ReadonlyArray<Message> | undefined
  let removedTally: RemovalTally | undefined
  const shares: Array<number> = []
  const sumOffloaded = (before: ConversationState, after: ConversationState) => {
    if (before.view === after.view) return
    const b = units.build(asMessages(before.view), 0).cumulative.at(-1) ?? 0
    const a = units.build(asMessages(after.view), 0).cumulative.at(-1) ?? 0
    offloaded += Math.max(0, b - a)
  }

  /** What the library's transitions know of threads: on them, a rewrite also costs a restart (`threadRestart`). */
  const threaded = settings.threads && library !== undefined
  const threadOptions = threaded
    ? {
      threads: true,
      threadRestart: library.threadRestart,
      keepRecent: library.keepRecent,
      minSavings: library.minSavings,
      policy: compactionPolicy
    }
    : undefined
  /** The rewrite discipline the library runs with (`appendOnly`, `staleThinking`), on threads or not. */
  const discipline = library === undefined ? undefined : {
    keepRecent: library.keepRecent,
    minSavings: library.minSavings,
    policy: compactionPolicy,
    appendOnly: library.appendOnly,
    staleThinking: library.staleThinking,
    ...(threadOptions === undefined ? {} : { threads: true, threadRestart: library.threadRestart })
  }
  let compactionOffloads = 0
  let threadRestarts = 0
  let thinkingDropped = 0
  let uploadedBytes = 0
  let fullBytes = 0
  const compact = (model: string | undefined): boolean => {
    const plan = prepareCompaction(state.view, compactionPolicy, {
      unboundThinking: state.unboundThinking,
      // what the trigger read (`prepareStep`, no head): the reported usage plus what the view gained since
      trigger: state.usage === undefined ? undefined : triggerContext(state, 0).tokens
    })
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
    const summaryDollars = ((transcript + settings.summarizerOverheadTokens) * price.input + tokens * price.output) /
      1e6
    summarizerDollars += summaryDollars
    summaryDollarsDue += summaryDollars
    const applied = applyCompaction(state, finished, discipline)
    apply(applied)
    // append-only or on a thread, the compaction applies its kept tail's offloads in the same rewrite
    for (const s of applied.steps) if (s.change._tag === "Offloaded") compactionOffloads += s.change.offloaded.length
    if (compactionOffloads > 0) sumOffloaded(applied.steps[0]!.state, applied.state)
    summarized = plan.request.messages
    removedTally = finished.outcome._tag === "Skipped" ? undefined : removalTally(finished.outcome.removed)
    remove(plan.request.messages)
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
      // shorten before the first send (`CompactionPolicy.maxToolResultTokens`), as `Conversation#append` does
      const limit = library === undefined ? undefined : compactionPolicy.maxToolResultTokens
      const shortened = limit === undefined ? message : shortenResults(
        message as unknown as Message,
        (id) => pendingCall(asMessages(state.view), state.pending, id),
        defaultToolClassifier,
        limit
      ) as unknown as typeof message
      apply(appendMessage(state, shortened))
      continue
    }
    const model = session.modelOf(index)
    cache ??= new PromptCache(minCacheableTokens(model), ttlMs(compactionPolicy.cacheTtl))
    const time = calibration.requestTime(index)
    const expired = lastTime !== undefined && time - lastTime >= cache.ttlMs
    const cold = coldRules && expired
    const before = state
    let compacted = false
    let results = 0
    let request: Request
    let threadRequest: Request | undefined
    let breakpoints: Array<number>
    let priced: { readonly keys: ReadonlyArray<number>; readonly cumulative: ReadonlyArray<number> }
    if (library !== undefined) {
      const step = prepareStep(state, discipline, cold)
      apply(step.transition)
      for (const s of step.transition.steps) if (s.change._tag === "Offloaded") results += s.change.offloaded.length
      sumOffloaded(before, state)
      if (step.compact) {
        compactionOffloads = 0
        compacted = compact(model)
        results += compactionOffloads
      }
      if (results > 0) evictions++
      offloadedResults += results
      const requestOptions = { model, before: compacted ? undefined : before, ttl: compactionPolicy.cacheTtl }
      request = requestOf(state, system, requestOptions)
      // on a thread, what goes out: a `continue` holds only the messages after the anchored reply
      if (threaded) threadRequest = requestOf(state, system, { ...requestOptions, thread: true })
      const built = units.build(asMessages(state.view), systemTokens)
      const withSystem = Array.isArray(request.system) && request.system.some((b) => b.cache_control != null)
      breakpoints = [...(withSystem ? [0] : []), ...breakpointUnits(asMessages(request.messages), built.starts)]
      priced = built
    } else {
      const step = prepareStep(state, { keepRecent: Infinity, minSavings: Infinity, policy: compactionPolicy })
      apply(step.transition)
      if (strategy._tag !== "None" && step.compact) compacted = compact(model)
      const peer = peerRewrite(strategy, state.view, cleared, units, systemTokens)
      if (peer.persist) {
        sumOffloaded(state, { ...state, view: peer.view })
        state = { ...state, view: peer.view }
      } else offloaded += peer.freed
      const sent = asMessages(peer.view)
      request = { ...(system === undefined ? {} : { system }), messages: [...peer.view] }
      const built = (peer.view === state.view ? units : peerUnits).build(sent, systemTokens)
      // a typical client: a breakpoint at the end of the system prompt and one on the newest block
      const last = lastBreakpoint(sent)
      breakpoints = [
        ...(systemTokens >= cache.minTokens ? [0] : []),
        ...(last === undefined ? [] : [built.starts[last.message]! + last.block])
      ]
      priced = built
    }
    const cacheLost = settings.externalMisses && calibration.externalMisses.has(index)
    if (cacheLost) cache.clear()
    const bill: CacheBill = cache.price({ keys: priced.keys, cumulative: priced.cumulative, breakpoints }, time)
    // whole tokens, as a provider reports them: read + write + input is the rounded prompt
    const cacheRead = Math.round(bill.read)
    const cachedTo = Math.round(bill.read + bill.write)
    const promptTokens = Math.round(bill.read + bill.write + bill.input)
    const output = Math.round(
      calibration.output(index) ?? calibration.factor * estimateContentTokens(message.content as never)
    )
    const miss: MissCause | undefined = perRequest.length > 0 && bill.read < previousCached
      ? expired ? "ttl" : calibration.externalMisses.has(index) && settings.externalMisses ? "external" : "policy"
      : undefined
    previousCached = bill.read + bill.write
    const usage: ReportedUsage = {
      input_tokens: promptTokens - cachedTo,
      output_tokens: output,
      cache_read_input_tokens: cacheRead,
      cache_creation_input_tokens: cachedTo - cacheRead
    }
    const span = compacted ? summarized : undefined
    const retention = span === undefined ? undefined : retentionOf(span, request, removed)
    if (retention !== undefined) shares.push(retention.total.share)
    const sent = threadRequest ?? request
    const whole = requestBytes(request)
    const upload = sent === request ? whole : requestBytes(sent)
    uploadedBytes += upload
    fullBytes += whole
    if (sent.thread?.type === "create" && perRequest.length > 0) threadRestarts++
    // the thinking blocks this request holds that a rewrite invalidated: the API drops them (or refuses the request)
    thinkingDropped += (state.unboundThinking ?? []).length
    const price = dollarsOf(model)
    const dollars = (cacheRead * price.input * 0.1 + (cachedTo - cacheRead) * price.input * writePrice +
      (promptTokens - cachedTo) * price.input + output * price.output) / 1e6
    const figures: RequestFigures = {
      index,
      time,
      model,
      promptTokens,
      cacheRead,
      cacheWrite: cachedTo - cacheRead,
      input: promptTokens - cachedTo,
      output,
      dollars,
      summarizerDollars: summaryDollarsDue,
      breakpoints: breakpoints.length,
      miss,
      invalidated: miss === "policy",
      overWindow: promptTokens + output > settings.compaction.contextWindow,
      compacted,
      offloadedResults: results,
      ...(retention === undefined ? {} : { retention }),
      ...(span === undefined || removedTally === undefined ? {} : { removed: removedTally }),
      uploadedBytes: upload,
      fullBytes: whole,
      ...(sent.thread === undefined ? {} : { thread: sent.thread.type })
    }
    perRequest.push(figures)
    summaryDollarsDue = 0
    lastTime = time
    const sentLength = state.view.length
    apply(
      threaded && Array.isArray(message.content)
        ? recordReply(state, sdkReplyOf(message, index, usage), usage, state.epoch, { sent: sentLength })
        : recordReply(state, message, usage, state.epoch)
    )
    const event: RequestEvent = {
      policy: policy.name,
      index,
      prompt: asMessages(request.messages),
      // on a thread, what goes out: the prompt above is the whole conversation the server reads
      request: sent,
      usage,
      figures,
      cacheLost,
      ...(span === undefined ? {} : { summarized: span })
    }
    settings.onRequest?.(event)
    const step: ReplayStep = { event, changes }
    changes = []
    const resumed = yield step
    if (resumed !== undefined) state = resumed
  }
  const report = summarize(policy, perRequest, settings, {
    compactions,
    summarizerCalls,
    summarizerInput,
    summarizerOutput,
    summarizerDollars,
    failedCompactions,
    offloaded,
    evictions,
    offloadedResults,
    retention: shares.length === 0 ? undefined : shares.reduce((a, b) => a + b, 0) / shares.length,
    writePrice,
    uploadedBytes,
    fullBytes,
    threadRestarts,
    thinkingDropped
  })
  return { report, changes }
}

/**
 * The kept tail of a request that opens with a summary: every message after it (the blocks merged into the summary
 * message, as a message of their own, first).
 */
const tailOf = (messages: ReadonlyArray<Message>): ReadonlyArray<Message> => {
  const first = messages[0]
  if (first === undefined || summaryText(first) === undefined) return messages
  const merged = typeof first.content === "string" ? [] : first.content.slice(1)
  return merged.length === 0 ? messages.slice(1) : [{ role: first.role, content: merged }, ...messages.slice(1)]
}

/**
 * What of `span` a request holds, per category and in total (the kept tail after its summary counted apart): the
 * request right after the span's compaction, or a later one (the sweep's retention at the end). With `removed` (what was
 * removed so far, as `recall` searches it), the anchors absent from the request that one search finds too.
 */
export const retentionOf = (
  span: ReadonlyArray<Message>,
  request: Request,
  removed?: () => ReadonlyArray<RecallSource>
): CompactionRetention => {
  const messages = asMessages(request.messages)
  const present = measure(span, messages, { tail: tailOf(messages) })
  // what one recall search finds is looked for only when something is missing
  const measured = removed !== undefined && CATEGORIES.some((c) => present.categories[c].missing.length > 0)
    ? measure(span, messages, { tail: tailOf(messages), removed: removed() })
    : present
  const tally = (counted: number, present: number, inTail: number, recoverable: number): RetentionTally => ({
    counted,
    present,
    inTail,
    share: counted === 0 ? 1 : present / counted,
    ...(removed === undefined
      ? {}
      : { recoverable, recoverableShare: counted === 0 ? 1 : (present + recoverable) / counted })
  })
  const categories = Object.fromEntries(CATEGORIES.map((c) => {
    const r = measured.categories[c]
    return [c, tally(r.counted, r.present, r.inTail, r.recoverable)]
  })) as CompactionRetention["categories"]
  const all = Object.values(categories)
  return {
    categories,
    total: tally(
      all.reduce((a, t) => a + t.counted, 0),
      all.reduce((a, t) => a + t.present, 0),
      all.reduce((a, t) => a + t.inTail, 0),
      all.reduce((a, t) => a + (t.recoverable ?? 0), 0)
    )
  }
}

/** Replays one prepared session under one policy (`replaySteps` run to its end). */
export const replay = (session: Prepared, policy: SimPolicy, settings: Settings): PolicyReport => {
  const steps = replaySteps(session, policy, settings)
  let next = steps.next()
  while (next.done !== true) next = steps.next()
  return next.value.report
}

/**
 * The system prompt a request carries when the session's text is not recorded: a stand-in of the tokens the record
 * billed for system prompt and tools, so the request has the size it was priced at.
 */
const systemStandIn = (tokens: number, factor: number): string | undefined => {
  if (tokens <= 0) return undefined
  const header = `[The recorded session's system prompt and tools, not in the file: ${Math.round(tokens)} tokens]`
  return header.padEnd(Math.max(header.length, Math.round((tokens / factor) * CHARS_PER_TOKEN)), " .")
}

const asParam = (message: Message): MessageParam => asMessageParams([message])[0]!

/**
 * A recorded reply as the SDK would have returned it on a thread: an id of its own (`msg_replay_<index>`), its
 * content, and the stop reason its content implies (`tool_use` when it calls a tool, else `end_turn`).
 */
const sdkReplyOf = (message: MessageParam, index: number, usage: ReportedUsage): SdkReply => {
  const content = message.content as ReadonlyArray<{ readonly type: string }>
  return {
    id: `msg_replay_${index}`,
    type: "message",
    role: "assistant",
    content,
    stop_reason: content.some((b) => b.type === "tool_use") ? "tool_use" : "end_turn",
    usage
  }
}
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
    readonly evictions: number
    readonly offloadedResults: number
    readonly retention: number | undefined
    /** The policy's cache write price relative to input: the table's write price scales by it over 1.25. */
    readonly writePrice: number
    readonly uploadedBytes: number
    readonly fullBytes: number
    readonly threadRestarts: number
    readonly thinkingDropped: number
  }
): PolicyReport => {
  // the price table's cache write is the 5-minute one; a 1-hour cache writes at 2 / 1.25 of it (API-RULES 20)
  const prices = {
    ...settings.prices,
    cacheWrite: settings.prices.cacheWrite * extra.writePrice / cacheWritePrice("5m")
  }
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
    cost += requestCost(prices, r)
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
    evictions: extra.evictions,
    offloadedResults: extra.offloadedResults,
    ...(extra.retention === undefined ? {} : { retention: extra.retention }),
    uploadedBytes: extra.uploadedBytes,
    fullBytes: extra.fullBytes,
    threadRestarts: extra.threadRestarts,
    thinkingDropped: extra.thinkingDropped,
    perRequest
  }
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
