/**
 * Concept: the cost simulator, a recorded session replayed and priced under a policy.
 *
 * The cost simulator: what a recorded session would have cost under a context policy, priced as Anthropic bills it.
 *
 * **The replay goes through `Conversation`.** The recorded messages are walked in order through the conversation's
 * own pure transitions (`appendMessage`, `prepareStep`, `prepareCompaction`/`finishCompaction`, `recordReply`), so
 * the requests priced are exactly those the library would send, breakpoints included (`requestOf`). Before each
 * recorded reply a request is made; the reply is then recorded with the usage the simulated request was billed, and
 * that usage drives the trigger, as a provider's would (the recorded usage, which measured the original session's
 * view, only calibrates sizes). `compaction replay` and the HTML report run this same engine
 * (`internal/simulate/replay.ts`), so they send, count and price the same requests. No summarizer is called: a
 * summary is `min(summaryMaxTokens, summaryRatio × transcript)` tokens, and its call is billed as uncached input (the transcript
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
 * **Prices** are per model (the list prices of each model family, overridable with `modelPrices`): a reply's recorded model, else `options.model`.
 *
 * Pure: the recorded messages are never mutated.
 *
 * @since 0.1.0
 */
import type { Message } from "./Message.ts"
import {
  modelPrice,
  type RecordedSession,
  type SimulateOptions,
  type SimulationReport,
  standardPolicies
} from "./internal/simulate/model.ts"
import { prepareSession, replay, settingsOf } from "./internal/simulate/replay.ts"

export {
  type LibraryOptions,
  type ModelPrice,
  type PolicyReport,
  type PriceTable,
  type RecordedSession,
  type SimPolicy,
  type SimulateOptions,
  type SimulationReport,
  standardPolicies,
  type Strategy
} from "./internal/simulate/model.ts"

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
 * Columns: dollars, cost in input-token units, retention (the mean share of the compacted spans' anchors in the next
 * request, n/a without a compaction), requests, tokens sent, cache read / write, uncached input, output,
 * compactions, summarizer input / output, peak context, requests over the window, cache misses (policy / TTL /
 * external), tokens offloaded. Deterministic: the same report gives the same text.
 * @category formatting
 */
export const formatReport = (report: SimulationReport, options: { readonly title?: string } = {}): string => {
  const header = [
    "policy",
    "$",
    "cost (input-token units)",
    "retention",
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
    p.retention === undefined ? "n/a" : p.retention.toFixed(2),
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

/** The sweep over the library's settings (cost, misses and retention of each) and its Pareto front of cost and retention. */
export { paretoFront, sweep, type SweepOptions, type SweepPoint } from "./internal/simulate/sweep.ts"
