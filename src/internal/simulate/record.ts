/**
 * The cache model checked against a bill: a recorded session's own requests (its real prompts, its real compactions,
 * its real timing, the misses its record shows) priced by the cache model, beside what the provider billed.
 *
 * The prompts are rebuilt as the recording agent sent them: every message so far, and after one of its compactions a
 * summary followed by the messages it kept (`Session.compactions`). Each prompt's tokens are the billed prompt size;
 * its blocks weigh their calibrated sizes, scaled to that total. Breakpoints are the recording client's (pi: the end of
 * the system prompt and the newest message). Where the record shows a miss that no cache rule explains, the cache is
 * dropped, as the provider did.
 *
 * @internal
 */
import { minCacheableTokens } from "../../Cache.ts"
import type { CompactionRecord } from "../../Import.ts"
import type { Message } from "../../Message.ts"
import type { ReportedUsage } from "../../Policy.ts"
import { blockKey, chainKey, PromptCache } from "./cache.ts"
import { blockEstimate, calibrateSession, promptOf } from "./calibrate.ts"
import { lastBreakpoint } from "../breakpoints.ts"
import type { MessageUsage, RecordedAt } from "../import/model.ts"

/** Read, write and uncached input tokens, summed over requests. */
export interface TokenSums {
  readonly read: number
  readonly write: number
  readonly input: number
}

/** What `checkAgainstRecord` found. @category models */
export interface RecordCheck {
  readonly requests: number
  readonly billed: TokenSums
  readonly modelled: TokenSums
  /** Billed tokens weighted by their price (read 0.1, write 1.25, input 1), and the model's. */
  readonly billedCost: number
  readonly modelledCost: number
  /** `modelledCost / billedCost - 1`. */
  readonly error: number
  /** Misses the record shows that the model explains (TTL, minimum length, changed prompt), and those it was given. */
  readonly explainedMisses: number
  readonly givenMisses: number
}

const weigh = (t: TokenSums): number => t.read * 0.1 + t.write * 1.25 + t.input

/**
 * Prices a recorded session's own requests with the cache model and compares them with its billed usage (see the
 * module doc). Only requests with recorded usage count.
 * @category simulation
 */
export const checkAgainstRecord = (session: {
  readonly messages: ReadonlyArray<Message>
  readonly usage: ReadonlyArray<MessageUsage>
  readonly recorded: ReadonlyArray<RecordedAt>
  readonly compactions: ReadonlyArray<CompactionRecord>
}): RecordCheck => {
  const usage = new Map<number, ReportedUsage>(session.usage.map((u) => [u.messageIndex, u.usage]))
  const times = new Map<number, number>()
  const models = new Map<number, string>()
  for (const r of session.recorded) {
    if (r.timestamp !== undefined) times.set(r.messageIndex, r.timestamp)
    if (r.model !== undefined) models.set(r.messageIndex, r.model)
  }
  const calibration = calibrateSession(session.messages, { usage, times, models })
  const cache = new PromptCache(minCacheableTokens([...models.values()][0]))
  const billed = { read: 0, write: 0, input: 0 }
  const modelled = { read: 0, write: 0, input: 0 }
  let requests = 0
  let explainedMisses = 0
  let lastRead = 0
  let lastPrompt = 0
  const system = calibration.systemTokens
  session.messages.forEach((message, index) => {
    const u = usage.get(index)
    if (message.role !== "assistant" || u === undefined || promptOf(u) === 0) return
    // the prompt the recording agent sent: after its latest compaction before this reply, a summary and the kept tail
    const compaction = [...session.compactions].reverse().find((c) => c.messageIndex <= index)
    const from = compaction === undefined ? 0 : compaction.firstKeptMessageIndex ?? compaction.messageIndex
    // the system prompt and tools as one unit, or two when a part of them was cached before the session began
    const warm = calibration.warmSystemTokens
    const keys: Array<number> = warm > 0
      ? [chainKey(0, warm, "warm"), chainKey(chainKey(0, warm, "warm"), system, "system")]
      : [chainKey(0, system, "system")]
    const weights: Array<number> = warm > 0 ? [warm, system - warm] : [system]
    if (requests === 0 && warm > 0) cache.seed(keys[0]!, calibration.requestTime(index))
    let prev = keys[keys.length - 1]!
    if (compaction !== undefined) {
      prev = chainKey(prev, compaction.messageIndex, "summary")
      keys.push(prev)
      weights.push(calibration.factor * ((compaction.summaryChars ?? 0) / 4))
    }
    const view = session.messages.slice(from, index)
    for (const m of view) {
      const blocks = typeof m.content === "string" ? [{ type: "text" as const, text: m.content }] : m.content
      blocks.forEach((block, b) => {
        prev = chainKey(prev, blockKey(typeof m.content === "string" ? m : block), b === 0 ? m.role : "")
        keys.push(prev)
        weights.push(calibration.blockTokens(block) ?? calibration.factor * blockEstimate(block))
      })
    }
    const total = promptOf(u)
    const sum = weights.reduce((a, b) => a + b, 0)
    const scale = sum > 0 ? total / sum : 1
    const cumulative: Array<number> = []
    let running = 0
    for (const w of weights) cumulative.push(running += w * scale)
    const last = lastBreakpoint(view)
    let lastUnit = keys.length - 1
    if (last !== undefined) {
      let unit = keys.length - view.reduce((n, m) => n + (typeof m.content === "string" ? 1 : m.content.length), 0)
      for (let m = 0; m < last.message; m++) {
        const c = view[m]!.content
        unit += typeof c === "string" ? 1 : c.length
      }
      lastUnit = unit + last.block
    }
    if (calibration.externalMisses.has(index)) cache.clear()
    const systemEnd = warm > 0 ? 1 : 0
    const breakpoints = [...(warm > 0 ? [0] : []), systemEnd, lastUnit]
    const bill = cache.price({ keys, cumulative, breakpoints }, calibration.requestTime(index))
    const read = u.cache_read_input_tokens ?? 0
    if (read < 0.5 * lastPrompt && !calibration.externalMisses.has(index) && bill.read < 0.5 * lastRead + 1) {
      explainedMisses++
    }
    billed.read += read
    billed.write += u.cache_creation_input_tokens ?? 0
    billed.input += u.input_tokens
    modelled.read += bill.read
    modelled.write += bill.write
    modelled.input += bill.input
    lastRead = bill.read + bill.write
    lastPrompt = total
    requests++
  })
  const billedCost = weigh(billed)
  const modelledCost = weigh(modelled)
  return {
    requests,
    billed,
    modelled,
    billedCost,
    modelledCost,
    error: billedCost === 0 ? 0 : modelledCost / billedCost - 1,
    explainedMisses,
    givenMisses: calibration.externalMisses.size
  }
}
