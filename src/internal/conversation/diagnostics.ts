/**
 * Cache diagnostics (API-RULES 33) for `Conversation`: the library's own prediction of what the API answers to
 * `diagnostics: { previous_message_id }`, from its cache model (`Cache`'s breakpoints and lookback, `Tokens`'
 * estimate), and the check of that prediction against the reason the API reported.
 *
 * The model: a request is its system prompt and tools (one unit), then each message block. The previous request
 * wrote the cache at its breakpoints (those whose prefix reaches the minimum cacheable length); what it left cached
 * ends at its last such breakpoint. The new request reuses the longest of those written prefixes that it shares and
 * that one of its own breakpoints reaches (at most `LOOKBACK_BLOCKS` units back). The first unit where the two differ
 * (`cache_control` aside) is the divergence: none (the previous request is a prefix of the new one) is no miss,
 * `null`; otherwise the reason is the part it falls in (model, system, tools, messages) and the missed tokens are
 * the cached prefix minus the reused one, in the library's estimate calibrated to the provider's count: times the
 * ratio of the prompt tokens the previous reply reported to the library's estimate of that same prompt
 * (`calibrationOf`), when known.
 *
 * @internal
 */
import { type BlockPosition, LOOKBACK_BLOCKS } from "../../Cache.ts"
import { blocksOf, type ContentBlock, type Message } from "../../Message.ts"
import { estimateContentTokens, estimateMessageTokens } from "../../Tokens.ts"

/** The reasons of a miss the library can predict (the API's `cache_miss_reason.type`s that carry a token count). */
export type PredictedMissReason = "model_changed" | "system_changed" | "tools_changed" | "messages_changed"

/**
 * The library's prediction for one request: `null` for no divergence from the previous request (the API's
 * `diagnostics: null`), or the miss it expects: its reason, the estimated input tokens the previous request left
 * cached that this one cannot read (`cache_missed_input_tokens`), and the first block of the previous request that
 * differs (`{ message: -1, block: 0 }`: the model, system prompt or tools).
 */
export type CachePrediction = {
  readonly reason: PredictedMissReason
  readonly missedInputTokens: number
  readonly divergedAt: BlockPosition
} | null

/** The API's `diagnostics.cache_miss_reason` as a reply carries it (the SDK's `BetaCacheMissReason`), or `null`. */
export type ReportedCacheMiss = {
  readonly type: string
  readonly cache_missed_input_tokens?: number | undefined
} | null

/**
 * A step's cache diagnosis: the library's prediction for the request beside what the API reported for it.
 * `predicted` is absent when the library did not see the previous request (the first request after a resume);
 * `reported` is `null` for the API's `diagnostics: null` (no divergence), and absent when the reply carried no
 * diagnostics, or the diagnosis was still pending (`cache_miss_reason: null` under `diagnostics`).
 */
export interface CacheDiagnosis {
  readonly predicted?: CachePrediction | undefined
  readonly reported?: ReportedCacheMiss | undefined
  /** Both are known and agree (`diagnosisAgrees`). */
  readonly agrees?: boolean | undefined
}

/** What the prediction compares of a request. */
export interface PromptShape {
  readonly model?: string | undefined
  readonly system?: unknown
  readonly tools?: unknown
  readonly messages: ReadonlyArray<unknown>
}

const stripCacheControl = (key: string, value: unknown) => key === "cache_control" ? undefined : value
const sameUnit = (a: unknown, b: unknown): boolean =>
  a === b || JSON.stringify(a, stripCacheControl) === JSON.stringify(b, stripCacheControl)
const marked = (value: unknown): boolean =>
  typeof value === "object" && value !== null && (value as { cache_control?: unknown }).cache_control != null

/** The system prompt's and tools' breakpoint: any of their blocks carries `cache_control`. */
const headMarked = (prompt: PromptShape): boolean =>
  [prompt.system, prompt.tools].some((part) => Array.isArray(part) && part.some(marked))

/** Each message's blocks, as the list of units after the head. */
const unitsOf = (prompt: PromptShape): ReadonlyArray<ReadonlyArray<ContentBlock>> =>
  (prompt.messages as ReadonlyArray<Message>).map((m) => blocksOf(m))

/**
 * The library's prediction for `next` after `previous` (see the module doc). `headTokens`: the estimated tokens of
 * the previous request's system prompt and tools (as `requestOf` counts them); `minTokens`: the minimum cacheable
 * length; `scale`: the calibration of the estimate (default 1).
 */
export const predictCacheMiss = (
  previous: PromptShape,
  next: PromptShape,
  options: { readonly headTokens: number; readonly minTokens: number; readonly scale?: number | undefined }
): CachePrediction => {
  const reason: PredictedMissReason | undefined = previous.model !== next.model
    ? "model_changed"
    : !sameUnit(previous.system, next.system)
    ? "system_changed"
    : !sameUnit(previous.tools, next.tools)
    ? "tools_changed"
    : undefined
  const prevMessages = previous.messages as ReadonlyArray<Message>
  const nextMessages = next.messages as ReadonlyArray<Message>
  const prevBlocks = unitsOf(previous)
  const nextBlocks = unitsOf(next)
  // the first differing block of the previous request, in list order (message, block); none: a prefix
  let diverged: BlockPosition | undefined = reason === undefined ? undefined : { message: -1, block: 0 }
  for (let m = 0; diverged === undefined && m < prevMessages.length; m++) {
    const a = prevMessages[m]!
    const b = nextMessages[m]
    if (b === undefined) {
      diverged = { message: m, block: 0 }
      break
    }
    if (a === b) continue
    const ab = prevBlocks[m]!
    const bb = nextBlocks[m]!
    if (a.role !== b.role) {
      diverged = { message: m, block: 0 }
      break
    }
    for (let k = 0; k < ab.length; k++) {
      if (k >= bb.length || !sameUnit(ab[k], bb[k])) {
        diverged = { message: m, block: k }
        break
      }
    }
  }
  if (diverged === undefined) return null
  // cumulative estimated tokens, per unit of the previous request (the head is unit 0 when present)
  const hasHead = previous.system !== undefined || previous.tools !== undefined
  const units: Array<{ readonly at: BlockPosition; readonly tokens: number; readonly breakpoint: boolean }> = []
  if (hasHead) {
    units.push({ at: { message: -1, block: 0 }, tokens: options.headTokens, breakpoint: headMarked(previous) })
  }
  let before = options.headTokens
  prevMessages.forEach((message, m) => {
    const blocks = prevBlocks[m]!
    blocks.forEach((block, k) => {
      units.push({
        at: { message: m, block: k },
        tokens: before + estimateContentTokens(blocks.slice(0, k + 1)),
        breakpoint: marked(block)
      })
    })
    before += estimateMessageTokens(message)
  })
  const index = (p: BlockPosition): number => {
    const i = units.findIndex((u) => u.at.message === p.message && u.at.block === p.block)
    return i < 0 ? units.length : i
  }
  const divergence = reason === undefined ? index(diverged) : 0
  const written = units.flatMap((u, i) => u.breakpoint && u.tokens >= options.minTokens ? [i] : [])
  const cached = written.length === 0 ? 0 : units[written.at(-1)!]!.tokens
  // the new request's breakpoints, as unit indices of the same list (the shared prefix has the same units)
  const nextMarks: Array<number> = []
  if (reason === undefined) {
    if (hasHead && headMarked(next)) nextMarks.push(0)
    let u = hasHead ? 1 : 0
    for (let m = 0; m < nextMessages.length; m++) {
      const blocks = nextBlocks[m]!
      for (let k = 0; k < blocks.length; k++, u++) if (marked(blocks[k])) nextMarks.push(u)
    }
  }
  let reused = 0
  for (const j of written) {
    if (j >= divergence) break
    if (nextMarks.some((k) => k >= j && k - j < LOOKBACK_BLOCKS)) reused = units[j]!.tokens
  }
  return {
    reason: reason ?? "messages_changed",
    missedInputTokens: Math.round(Math.max(0, cached - reused) * (options.scale ?? 1)),
    divergedAt: diverged
  }
}

/**
 * The ratio of the prompt tokens a reply reported (`input_tokens` plus cache reads and writes) to the library's
 * estimate of the request it answered (`headTokens` plus its messages), or `undefined` when either is unknown or 0.
 */
export const calibrationOf = (
  prompt: PromptShape,
  headTokens: number,
  usage: {
    readonly input_tokens: number
    readonly cache_read_input_tokens?: number | null | undefined
    readonly cache_creation_input_tokens?: number | null | undefined
  } | undefined
): number | undefined => {
  if (usage === undefined) return undefined
  const reported = usage.input_tokens + (usage.cache_read_input_tokens ?? 0) + (usage.cache_creation_input_tokens ?? 0)
  let estimate = headTokens
  for (const message of prompt.messages as ReadonlyArray<Message>) estimate += estimateMessageTokens(message)
  return reported > 0 && estimate > 0 ? reported / estimate : undefined
}

/**
 * Whether a prediction agrees with the reported reason: both `null` (no divergence), or the same reason with missed
 * tokens within `tolerance` (a share of the reported tokens; default 5%, at least 1 token apart allowed).
 */
export const diagnosisAgrees = (
  predicted: CachePrediction,
  reported: ReportedCacheMiss,
  tolerance = 0.05
): boolean => {
  if (predicted === null || reported === null) return predicted === reported
  if (predicted.reason !== reported.type) return false
  const tokens = reported.cache_missed_input_tokens ?? 0
  return Math.abs(predicted.missedInputTokens - tokens) <= Math.max(1, tolerance * tokens)
}

/** The reported reason of a reply's `diagnostics` (`undefined`: none, or still pending). */
export const reportedOf = (diagnostics: unknown): ReportedCacheMiss | undefined => {
  if (diagnostics === null) return null
  if (typeof diagnostics !== "object" || diagnostics === undefined) return undefined
  const reason = (diagnostics as { readonly cache_miss_reason?: unknown }).cache_miss_reason
  if (typeof reason !== "object" || reason === null) return undefined
  const { cache_missed_input_tokens: tokens, type } = reason as {
    readonly type?: unknown
    readonly cache_missed_input_tokens?: unknown
  }
  if (typeof type !== "string") return undefined
  return typeof tokens === "number" ? { type, cache_missed_input_tokens: tokens } : { type }
}
