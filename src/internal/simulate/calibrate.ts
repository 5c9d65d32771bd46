/**
 * Sizes and timing of a recorded session, from its provider-reported usage and timestamps: the true tokens of every
 * recorded block (the growth of the billed prompt between two requests, spread over the blocks that arrived in
 * between), one factor for blocks the record never sent (pointers, summaries), the tokens of system prompt and tools,
 * each reply's billed output, the time of each request, and the misses the provider reported that no cache rule
 * explains (a client changing thinking settings, the provider losing the cache).
 *
 * @internal
 */
import { ttlMs } from "../cacheTtl.ts"
import type { ContentBlock, Message } from "../../Message.ts"
import type { ReportedUsage } from "../../Policy.ts"
import { estimateContentTokens } from "../../Tokens.ts"
import { blockKey } from "./cache.ts"
import { blocksOf } from "../blocks.ts"
import { MESSAGE_OVERHEAD_TOKENS } from "../estimate.ts"

/** What the simulator knows of a session beyond its messages. */
export interface Recording {
  readonly usage: ReadonlyMap<number, ReportedUsage>
  /** Milliseconds since the epoch, by message index. */
  readonly times: ReadonlyMap<number, number>
  readonly models: ReadonlyMap<number, string>
}

/** The calibrated sizes and times of a session. */
export interface Calibration {
  /** Billed tokens per estimated token, for blocks the record has no size for. */
  readonly factor: number
  readonly systemTokens: number
  /**
   * The true tokens of a recorded block (its message's overhead on the first block), found by content, so a block
   * read back from a session log weighs what the recorded one did.
   */
  readonly blockTokens: (block: object) => number | undefined
  /** Billed output of reply `index`, when recorded. */
  readonly output: (index: number) => number | undefined
  /** The time request `index` (the reply at `index`) was sent. */
  readonly requestTime: (index: number) => number
  /** Requests whose recorded cache read shows a miss that neither the TTL nor a changed prompt explains. */
  readonly externalMisses: ReadonlySet<number>
  /**
   * Tokens of the system prompt and tools that were cached before the session began (another session of the same
   * client wrote them): what the first request read. 0 when it read nothing.
   */
  readonly warmSystemTokens: number
}

/** Default billed tokens per estimated token when nothing is recorded: 1.4, the corpus's pi sessions' mean. */
export const DEFAULT_TOKEN_FACTOR = 1.4

const estimates = new WeakMap<object, number>()

/** The estimated tokens of one block. */
export const blockEstimate = (block: ContentBlock): number => {
  let e = estimates.get(block)
  if (e === undefined) {
    e = estimateContentTokens([block])
    estimates.set(block, e)
  }
  return e
}

/** The prompt tokens a request was billed for: `input_tokens` plus cache reads and cache writes. */
export const promptOf = (u: ReportedUsage): number =>
  u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0)

/** Calibrates a session from its record (see the module doc). */
export const calibrateSession = (
  messages: ReadonlyArray<Message>,
  recording: Recording,
  options: { readonly systemTokens?: number | undefined; readonly factor?: number | undefined } = {}
): Calibration => {
  const replies: Array<number> = []
  messages.forEach((m, i) => {
    const u = recording.usage.get(i)
    if (m.role === "assistant" && u !== undefined && promptOf(u) > 0) replies.push(i)
  })
  const estimateOf = (from: number, to: number): number => {
    let e = 0
    for (let i = from; i < to; i++) {
      e += MESSAGE_OVERHEAD_TOKENS
      for (const b of blocksOf(messages[i]!)) e += blockEstimate(b)
    }
    return e
  }
  // segments: the messages between two recorded requests, when the prompt grew by what was appended
  const segments: Array<{ from: number; to: number; tokens: number; estimate: number }> = []
  for (let k = 1; k < replies.length; k++) {
    const a = replies[k - 1]!
    const b = replies[k]!
    const tokens = promptOf(recording.usage.get(b)!) - promptOf(recording.usage.get(a)!)
    const estimate = estimateOf(a, b)
    if (estimate > 0 && tokens > 0 && tokens / estimate > 0.5 && tokens / estimate < 4) {
      segments.push({ from: a, to: b, tokens, estimate })
    }
  }
  const sumTokens = segments.reduce((s, x) => s + x.tokens, 0)
  const sumEstimate = segments.reduce((s, x) => s + x.estimate, 0)
  const factor = options.factor ?? (sumEstimate > 0 ? sumTokens / sumEstimate : DEFAULT_TOKEN_FACTOR)
  const sizes = new Map<number, number>()
  for (const seg of segments) {
    const ratio = seg.tokens / seg.estimate
    for (let i = seg.from; i < seg.to; i++) {
      blocksOf(messages[i]!).forEach((b, j) => {
        if (typeof messages[i]!.content === "string") return
        sizes.set(blockKey(b), ratio * (blockEstimate(b) + (j === 0 ? MESSAGE_OVERHEAD_TOKENS : 0)))
      })
    }
  }
  const first = replies[0]
  const systemTokens = options.systemTokens ??
    (first === undefined
      ? 0
      : Math.max(0, Math.round(promptOf(recording.usage.get(first)!) - factor * estimateOf(0, first))))
  const times: Array<number> = []
  let last = 0
  for (let i = 0; i < messages.length; i++) {
    const t = recording.times.get(i)
    if (t !== undefined) last = t
    times.push(last)
  }
  const requestTime = (index: number): number =>
    recording.times.size === 0 ? index * 1000 : (index > 0 ? times[index - 1]! : times[0]!)
  const externalMisses = new Set<number>()
  for (let k = 1; k < replies.length; k++) {
    const a = replies[k - 1]!
    const b = replies[k]!
    const read = recording.usage.get(b)!.cache_read_input_tokens ?? 0
    const before = promptOf(recording.usage.get(a)!)
    const warm = requestTime(b) - requestTime(a) < ttlMs("5m")
    // a prompt that shrank by more than a tenth was rewritten by the agent (its own compaction): not a provider miss
    const grew = promptOf(recording.usage.get(b)!) >= 0.9 * before
    if (warm && grew && read < 0.5 * before) externalMisses.add(b)
  }
  return {
    factor,
    systemTokens,
    blockTokens: (block) => sizes.size === 0 ? undefined : sizes.get(blockKey(block)),
    output: (index) => recording.usage.get(index)?.output_tokens,
    requestTime,
    externalMisses,
    warmSystemTokens: first === undefined
      ? 0
      : Math.min(systemTokens, recording.usage.get(first)!.cache_read_input_tokens ?? 0)
  }
}
