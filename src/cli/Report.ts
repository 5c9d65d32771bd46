/**
 * The data of the HTML report (`inspect --html`, `replay --html`): where a session's tokens and money went, request
 * by request.
 *
 * `buildReport` computes every figure the page shows from the same functions the other commands print, so the page
 * equals them for the same file: `inspect` is `analyze` (`inspect --json`), `simulate` is `simulate` with the options
 * of the `simulate` command (`simulate --json`), and `replay` and the chart are one run of the replay engine under the
 * chosen policy (`Library` with the replay's settings: `Conversation`'s transitions, each reply recorded with the
 * usage its own request is predicted to be billed), the run `compaction replay` makes (`replay --json`), beside the
 * engine's run under no compaction. The offloads the chart marks are read from the requests that run sent.
 *
 * @since 0.1.0
 */
import type { ConversationState } from "../ConversationState.ts"
import * as Effect from "effect/Effect"
import type { Session } from "../Import.ts"
import type { Message } from "../Message.ts"
import { isOffloaded } from "../Offload.ts"
import { DEFAULT_KEEP_RECENT } from "../Evict.ts"
import { CompactionPolicy, defaultPolicy, type PolicyOptions } from "../Policy.ts"
import { minCacheableTokens } from "../Cache.ts"
import { calibrationOf, predictCacheMiss } from "../internal/conversation/diagnostics.ts"
import { systemAndToolsTokens } from "../internal/estimate.ts"
import {
  type PolicyReport,
  type SimPolicy,
  simulate,
  type SimulateOptions,
  type SimulationReport
} from "../Simulate.ts"
import { estimateContentTokens } from "../Tokens.ts"
import { validate } from "../Validate.ts"
import { type Analysis, analyze, type InspectReport, toolsTokens } from "./Inspect.ts"
import {
  type CompactionRetentionRow,
  type ReplaySummary,
  replaySummaryOf,
  type RequestTokens,
  requestTokensOf,
  retentionRowsOf
} from "./Replay.ts"
import { isText, isToolResult, isToolUse } from "../internal/blocks.ts"
import type { MissCause, RequestEvent, RequestFigures } from "../internal/simulate/model.ts"
import { simulatePolicy } from "../internal/simulate/replay.ts"

// ============================================================================
// Shared with the commands
// ============================================================================

/**
 * The simulator's options for a session as the `simulate` command runs it: `systemTokens` as given, else calibrated
 * from the recorded usage when there is some, else the file's system prompt and tools, estimated.
 * @category simulation
 */
export const simulateOptionsFor = (
  session: Session,
  tools: ReadonlyArray<unknown> | undefined,
  systemTokens?: number | undefined
): SimulateOptions => {
  const system = systemTokens ??
    (session.usage.length > 0 ? undefined : estimateContentTokens(session.system ?? "") + toolsTokens(tools))
  return system === undefined ? {} : { systemTokens: system }
}

/**
 * The `simulate --json` document: each policy's report with its per-request tokens (`requestTokens`) instead of the
 * full per-request figures. @category simulation
 */
export type SimulateJson = { readonly file: string } & Omit<SimulationReport, "policies"> & {
  readonly policies: ReadonlyArray<
    Omit<PolicyReport, "perRequest" | "retention"> & {
      /** The policy's mean share of the compacted spans' anchors in the next request; null without a compaction. */
      readonly retention: number | null
      readonly requestTokens: ReadonlyArray<RequestTokens>
    }
  >
}

/** The `simulate --json` document of a report. @category simulation */
export const simulateJson = (file: string, report: SimulationReport): SimulateJson => ({
  file,
  ...report,
  policies: report.policies.map((p) => {
    const { perRequest: _, ...rest } = p
    return { ...rest, retention: p.retention ?? null, requestTokens: requestTokensOf(p) }
  })
})

/**
 * The policy `replay` runs for its flags: the window's room is a tenth of it, at most 20,000 tokens (the default's).
 * @category models
 */
export const replayPolicyOptions = (flags: {
  readonly keepRecentTokens?: number | undefined
  readonly keepRecentTurns?: number | undefined
  readonly contextWindow: number
  readonly compactAtTokens?: number | undefined
}): PolicyOptions => ({
  ...(flags.keepRecentTokens === undefined ? {} : { keepRecentTokens: flags.keepRecentTokens }),
  ...(flags.keepRecentTurns === undefined ? {} : { keepRecentTurns: flags.keepRecentTurns }),
  contextWindow: flags.contextWindow,
  minRemaining: Math.min(20_000, Math.floor(flags.contextWindow / 10)),
  ...(flags.compactAtTokens === undefined ? {} : { compactAtTokens: flags.compactAtTokens })
})

/**
 * The `replay --json` document: the summary, the tokens of every request and, per compaction, what of its span the
 * next request holds. @category models
 */
export type ReplayJson = { readonly file: string } & ReplaySummary & {
  readonly requestTokens: ReadonlyArray<RequestTokens>
  readonly retention: ReadonlyArray<CompactionRetentionRow>
}

// ============================================================================
// Report data
// ============================================================================

/** One request of the chosen policy's simulated replay, as the chart draws it. @category models */
export interface ReportRequest {
  /** Request number, from 1. */
  readonly n: number
  /** Index of the recorded reply this request produced. */
  readonly message: number
  readonly cacheRead: number
  readonly cacheWrite: number
  /** Uncached input tokens. */
  readonly input: number
  readonly output: number
  readonly dollars: number
  readonly miss: MissCause | null
  /** A compaction ran before this request. */
  readonly compacted: boolean
  /** Tool results offloaded before this request (each counted once, the first time). */
  readonly offloadedResults: number
  /** The messages holding them, ascending. */
  readonly offloaded: ReadonlyArray<number>
  /** Tokens the same request sends under no compaction. */
  readonly none: number
  readonly noneDollars: number
  /** The bytes the request uploads: on a thread's `continue`, only the new messages (`RequestFigures.uploadedBytes`). */
  readonly uploadedBytes: number
  /** The bytes of the whole request, what it uploads off threads (`RequestFigures.fullBytes`). */
  readonly fullBytes: number
  /** On threads: whether the request started a new thread or continued one; null off threads. */
  readonly thread: "create" | "continue" | null
}

/** One of the largest tool results of the session. @category models */
export interface LargeToolResult {
  readonly message: number
  readonly toolUseId: string
  /** The tool's name, when its call is in the session. */
  readonly tool: string
  /** What it acted on: the call's path, command or pattern, shortened. */
  readonly target: string
  readonly tokens: number
  /** The request before which the chosen policy offloaded it, or null when it never did. */
  readonly offloadedAt: number | null
}

/** A policy's totals in the chart. @category models */
export interface ChartPolicy {
  readonly name: string
  readonly dollars: number
  readonly tokensSent: number
  readonly cacheRead: number
  readonly cacheWrite: number
  readonly inputTokens: number
  readonly peakContext: number
  readonly compactions: number
  /** Requests before which tool results were offloaded. */
  readonly evictions: number
  readonly offloadedResults: number
  /** The bytes every request uploaded, summed (on threads, `continue`s hold only the new messages). */
  readonly uploadedBytes: number
  /** The bytes the same requests sent whole, summed. */
  readonly fullBytes: number
  /** On threads: the requests that started a new thread after the first (0 off threads). */
  readonly threadRestarts: number
}

/** Everything the report shows; embedded in the page as JSON (`#report-data`). @category models */
export interface ReportData {
  /** Equals `inspect --json`. */
  readonly inspect: InspectReport
  /** Equals `replay --json` with the same settings. */
  readonly replay: ReplayJson
  /** Equals `simulate --json`. */
  readonly simulate: SimulateJson
  readonly chosen: ChartPolicy
  readonly none: ChartPolicy
  readonly contextWindow: number
  readonly requests: ReadonlyArray<ReportRequest>
  readonly largestToolResults: ReadonlyArray<LargeToolResult>
  /**
   * The cache diagnostics `Conversation` predicts (its `diagnostics` option, API-RULES 33) checked against the
   * replay's cache model standing in for the API: `predictedMisses` counts the requests predicted to miss tokens the
   * request before cached; `disagreements` lists the requests (numbered from 1) whose predicted missed tokens differ
   * by more than 5% from what the cache model shows lost (requests after a cache expiry or loss are not compared).
   */
  readonly diagnostics: { readonly predictedMisses: number; readonly disagreements: ReadonlyArray<number> }
}

/** The report's data and the inspect timeline the block strip draws. @category models */
export interface Report {
  readonly data: ReportData
  readonly timeline: Analysis["timeline"]
}

/** Options of `buildReport`. @category models */
export interface ReportOptions {
  /** Shown as `file` (inspect, simulate). */
  readonly file: string
  /** Shown as `file` of the replay (the argument `replay` was given); default `file`. */
  readonly replayFile?: string | undefined
  /** Default `DEFAULT_KEEP_RECENT`, as `replay`. */
  readonly keepRecent?: number | undefined
  /** A fixed eviction threshold; absent: the library's rent-or-buy rule, as `replay` without `--min-savings`. */
  readonly minSavings?: number | undefined
  /** The chosen policy (as `replay` builds it from its flags); default `replay`'s for its default flags. */
  readonly policy?: CompactionPolicy | undefined
  readonly tools?: ReadonlyArray<unknown> | undefined
  /**
   * The summary of the replay `replay --html` ran with these settings (its resumes); absent: the report's own run of
   * the engine, with no resumes.
   */
  readonly replay?: ReplaySummary | undefined
  /** Most tool results listed (default 10). */
  readonly largest?: number | undefined
  /** The chosen policy sends on server-held threads (`SimulateOptions.threads`), as `replay --threads`. */
  readonly threads?: boolean | undefined
  /** A session log's conversation state (`AnalyzeOptions.state`): the inspect figures are the live loop's then. */
  readonly state?: ConversationState | undefined
  /** With `threads`: a rewrite priced by the cache alone (`LibraryOptions.threadRestart: false`). */
  readonly threadRestart?: false | undefined
}

const fmt = (n: number): string => Math.round(n).toLocaleString("en-US")

/**
 * The library's cache prediction for each request of a replay against the replay's own cache model: the missed
 * tokens `Conversation`'s diagnostics predict (calibrated to the engine's tokens) beside the tokens the engine's
 * cache shows the request could not read of what the one before it cached (0 without a policy miss).
 */
const diagnosticsOf = () => {
  let previous: RequestEvent | undefined
  let n = 0
  let predictedMisses = 0
  const disagreements: Array<number> = []
  const promptOf = (e: RequestEvent) => ({
    model: e.figures.model,
    system: e.request.system,
    tools: e.request.tools,
    messages: e.prompt
  })
  return {
    onRequest: (event: RequestEvent) => {
      n++
      const before = previous
      previous = event
      if (before === undefined) return
      const head = systemAndToolsTokens(before.request.system as never, before.request.tools)
      const predicted = predictCacheMiss(promptOf(before), promptOf(event), {
        headTokens: head,
        minTokens: minCacheableTokens(before.figures.model),
        scale: calibrationOf(promptOf(before), head, { input_tokens: before.figures.promptTokens })
      })
      const expected = predicted?.missedInputTokens ?? 0
      if (expected > 0) predictedMisses++
      const miss = event.figures.miss
      if (event.cacheLost || miss === "ttl" || miss === "external") return
      const lost = miss === "policy"
        ? before.figures.cacheRead + before.figures.cacheWrite - event.figures.cacheRead
        : 0
      if (Math.abs(expected - lost) > Math.max(1, 0.05 * lost)) disagreements.push(n)
    },
    result: () => ({ predictedMisses, disagreements })
  }
}

/**
 * The `Library` strategy `replay` runs: its eviction settings (`minSavings` absent: rent-or-buy, the simulator's
 * `ours (defaults)` rule) and its policy. @category simulation
 */
export const chosenPolicy = (options: {
  readonly keepRecent: number
  readonly minSavings?: number | undefined
  readonly policy: CompactionPolicy
  /** On threads: `LibraryOptions.threadRestart` (`false`: a rewrite priced by the cache alone). */
  readonly threadRestart?: false | undefined
}): SimPolicy => {
  const p = options.policy
  const eviction = options.minSavings === undefined ? "rent-or-buy" : `minSavings ${fmt(options.minSavings)}`
  return {
    name: `ours (keep ${options.keepRecent} results, ${eviction}, ` +
      `keep ${fmt(p.keepRecentTokens)} tokens / ${p.keepRecentTurns} turns)`,
    strategy: {
      _tag: "Library",
      options: {
        keepRecent: options.keepRecent,
        minSavings: options.minSavings,
        policy: p,
        ...(options.threadRestart === false ? { threadRestart: false } : {})
      }
    }
  }
}

const blocksOf = (m: Message) => typeof m.content === "string" ? [] : m.content

/** Tool-use id → the index of the message holding its result, in the recorded session. */
const resultMessages = (messages: ReadonlyArray<Message>): Map<string, number> => {
  const out = new Map<string, number>()
  messages.forEach((m, i) => {
    for (const b of blocksOf(m)) if (isToolResult(b) && !out.has(b.tool_use_id)) out.set(b.tool_use_id, i)
  })
  return out
}

const oneLine = (text: string, max: number): string => {
  const flat = text.replace(/\s+/g, " ").trim()
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat
}

const targetOf = (input: unknown): string => {
  if (input === null || typeof input !== "object") return ""
  const o = input as Record<string, unknown>
  for (const key of ["file_path", "path", "command", "pattern", "query", "url"]) {
    if (typeof o[key] === "string") return oneLine(o[key], 80)
  }
  return ""
}

const chartTotals = (
  name: string,
  report: PolicyReport,
  requests: ReadonlyArray<{ readonly offloadedResults: number }>
): ChartPolicy => ({
  name,
  dollars: report.dollars,
  tokensSent: report.tokensSent,
  cacheRead: report.cacheRead,
  cacheWrite: report.cacheWrite,
  inputTokens: report.inputTokens,
  peakContext: report.peakContext,
  compactions: report.compactions,
  evictions: requests.filter((r) => r.offloadedResults > 0).length,
  offloadedResults: requests.reduce((a, r) => a + r.offloadedResults, 0),
  uploadedBytes: report.uploadedBytes,
  fullBytes: report.fullBytes,
  threadRestarts: report.threadRestarts
})

/**
 * Builds the report of a session: `analyze`, `simulate`, and the replay engine's run under the chosen policy (the
 * replay's figures and the chart) with the requests it sent. Deterministic: the same session and options give the
 * same data.
 * @category report
 */
export const buildReport = (
  session: Session,
  reportOptions: ReportOptions
): Effect.Effect<Report> =>
  Effect.sync(() => {
    const options = {
      ...reportOptions,
      keepRecent: reportOptions.keepRecent ?? DEFAULT_KEEP_RECENT,
      policy: reportOptions.policy ?? CompactionPolicy.makeUnsafe(replayPolicyOptions({
        keepRecentTokens: defaultPolicy.keepRecentTokens,
        keepRecentTurns: defaultPolicy.keepRecentTurns,
        contextWindow: defaultPolicy.contextWindow
      }))
    }
    const analysis = analyze(session, {
      file: options.file,
      keepRecent: options.keepRecent,
      minSavings: options.minSavings,
      ...(options.tools === undefined ? {} : { tools: options.tools }),
      state: options.state
    })
    const simOptions = simulateOptionsFor(session, options.tools)
    const simulation = simulate(session, simOptions)
    const noneReport = simulation.policies.find((p) => p.strategy._tag === "None") ??
      simulatePolicy(session, { name: "none", strategy: { _tag: "None" } }, simOptions)

    // the chosen policy's replay, and the messages it offloaded before each request
    const owner = resultMessages(session.messages)
    const seen = new Set<string>()
    const newlyOffloaded: Array<{ readonly results: number; readonly messages: ReadonlyArray<number> }> = []
    const chosen = chosenPolicy(options)
    let invalidRequests = 0
    const diagnostics = diagnosticsOf()
    const chosenReport = simulatePolicy(session, chosen, {
      ...simOptions,
      compaction: options.policy,
      ...(options.threads === true ? { threads: true } : {}),
      onRequest: (event) => {
        diagnostics.onRequest(event)
        if (validate(event.prompt).length > 0) invalidRequests++
        const fresh = new Set<number>()
        let results = 0
        for (const m of event.prompt) {
          for (const b of blocksOf(m)) {
            if (isToolResult(b) && isOffloaded(b) && !seen.has(b.tool_use_id)) {
              seen.add(b.tool_use_id)
              results++
              const at = owner.get(b.tool_use_id)
              if (at !== undefined) fresh.add(at)
            }
          }
        }
        newlyOffloaded.push({ results, messages: [...fresh].sort((a, b) => a - b) })
      }
    })
    const noneByIndex = new Map<number, RequestFigures>(noneReport.perRequest.map((r) => [r.index, r]))
    const requests: Array<ReportRequest> = chosenReport.perRequest.map((r, i) => ({
      n: i + 1,
      message: r.index,
      cacheRead: r.cacheRead,
      cacheWrite: r.cacheWrite,
      input: r.input,
      output: r.output,
      // the summaries made before the request count with it, so the cumulative chart ends at the policy's total
      dollars: r.dollars + r.summarizerDollars,
      miss: r.miss ?? null,
      compacted: r.compacted,
      offloadedResults: newlyOffloaded[i]?.results ?? 0,
      offloaded: newlyOffloaded[i]?.messages ?? [],
      none: noneByIndex.get(r.index)?.promptTokens ?? 0,
      noneDollars: noneByIndex.get(r.index)?.dollars ?? 0,
      uploadedBytes: r.uploadedBytes,
      fullBytes: r.fullBytes,
      thread: r.thread ?? null
    }))

    // the largest tool results, and when the chosen policy offloaded each
    const offloadedAt = new Map<number, number>()
    for (const r of requests) for (const m of r.offloaded) if (!offloadedAt.has(m)) offloadedAt.set(m, r.n)
    const calls = new Map<string, { readonly name: string; readonly input: unknown }>()
    for (const m of session.messages) {
      for (const b of blocksOf(m)) if (isToolUse(b)) calls.set(b.id, { name: b.name, input: b.input })
    }
    const results: Array<LargeToolResult> = []
    session.messages.forEach((m, i) => {
      for (const b of blocksOf(m)) {
        if (!isToolResult(b)) continue
        const call = calls.get(b.tool_use_id)
        const text = typeof b.content === "string"
          ? b.content
          : (b.content ?? []).map((c) => isText(c) ? c.text : "").join(" ")
        results.push({
          message: i,
          toolUseId: b.tool_use_id,
          tool: call?.name ?? "(call not in the session)",
          target: call === undefined ? oneLine(text, 80) : targetOf(call.input) || oneLine(text, 80),
          tokens: estimateContentTokens([b]),
          offloadedAt: offloadedAt.get(i) ?? null
        })
      }
    })
    results.sort((a, b) => b.tokens - a.tokens || a.message - b.message)

    const data: ReportData = {
      inspect: analysis.report,
      replay: {
        file: options.replayFile ?? options.file,
        ...(options.replay ?? replaySummaryOf(chosenReport, invalidRequests, 0)),
        requestTokens: requestTokensOf(chosenReport),
        retention: retentionRowsOf(chosenReport)
      },
      simulate: simulateJson(options.file, simulation),
      chosen: chartTotals(chosen.name, chosenReport, requests),
      none: chartTotals("none", noneReport, noneReport.perRequest.map(() => ({ offloadedResults: 0 }))),
      contextWindow: options.policy.contextWindow,
      requests,
      largestToolResults: results.slice(0, options.largest ?? 10),
      diagnostics: diagnostics.result()
    }
    return { data, timeline: analysis.timeline }
  })
