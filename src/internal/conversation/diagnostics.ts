/**
 * Cache diagnostics for `Conversation`: the library's own prediction of what the API answers to
 * `diagnostics: { previous_message_id }`, from its cache model (`Cache`'s breakpoints and lookback, `Tokens`'
 * estimate), and the check of that prediction against the reason the API reported.
 *
 * The model: a request is its system prompt and tools (one unit), then each message block. The previous request
 * wrote the cache at its breakpoints (those whose prefix reaches the minimum cacheable length); what it left cached
 * ends at its last such breakpoint. The new request reuses the longest of those written prefixes that it shares and
 * that one of its own breakpoints reaches (at most `LOOKBACK_BLOCKS` units back). The first unit where the two differ
 * (`cache_control` aside) is the divergence: none (the previous request is a prefix of the new one) is no miss,
 * `null`; otherwise the reason is the part it falls in (model, system, tools, messages) and the missed tokens are
 * the cached prefix minus the reused one. Each is exact where a reply told it (`KnownPrefix`: a request's cache reads
 * plus writes are its prompt's count up to its last written breakpoint, `knownPrefixOf`); elsewhere it is the
 * library's estimate weighted by each message's ratio to the provider's count (`MessageRatios`: learned from the
 * spans between known prefixes, by content, else fitted, else the ratio of the prompt tokens the previous reply
 * reported to the library's estimate of that prompt, `calibrationOf`), interpolated between the nearest known
 * prefixes around it (the empty one first) and added past the last one.
 *
 * @internal
 */
import type { BlockPosition } from "../../Cache.ts"
import type { ContentBlock, Message } from "../../Message.ts"
import { estimateContentTokens, estimateMessageTokens } from "../../Tokens.ts"
import { blocksOf } from "../blocks.ts"
import { LOOKBACK_BLOCKS } from "../breakpoints.ts"

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

/**
 * What the prediction compares of a request: with the model, system prompt, tools and messages, the prompt-affecting
 * parameters the API's docs name: `output_config.format` (a change misses the whole cache once, as a system change:
 * the format is part of what the model reads before the messages) and `speed` (a change is `model_changed`).
 */
export interface PromptShape {
  readonly model?: string | undefined
  readonly system?: unknown
  readonly tools?: unknown
  readonly messages: ReadonlyArray<unknown>
  readonly output_config?: unknown
  readonly speed?: unknown
}

/** The `output_config.format` of a request, or `undefined`. */
const formatOf = (prompt: PromptShape): unknown =>
  typeof prompt.output_config === "object" && prompt.output_config !== null
    ? (prompt.output_config as { readonly format?: unknown }).format
    : undefined

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

/** The provider's exact token count of a request's prefix up to and including the block `at`. */
export interface KnownPrefix {
  readonly at: BlockPosition
  readonly tokens: number
}

const precedes = (a: BlockPosition, b: BlockPosition): boolean =>
  a.message < b.message || (a.message === b.message && a.block < b.block)

/**
 * The prefix a reply's usage tells exactly: its cache reads plus writes are the prompt's count up to the request's
 * last breakpoint (`{ message: -1, block: 0 }`: on the system prompt or tools), or `undefined` when it wrote and read
 * nothing (no breakpoint, or one short of the minimum cacheable length) or the usage is unknown.
 */
export const knownPrefixOf = (
  prompt: PromptShape,
  usage: {
    readonly cache_read_input_tokens?: number | null | undefined
    readonly cache_creation_input_tokens?: number | null | undefined
  } | undefined
): KnownPrefix | undefined => {
  const tokens = (usage?.cache_read_input_tokens ?? 0) + (usage?.cache_creation_input_tokens ?? 0)
  if (tokens <= 0) return undefined
  const units = unitsOf(prompt)
  for (let m = units.length - 1; m >= 0; m--) {
    const blocks = units[m]!
    for (let k = blocks.length - 1; k >= 0; k--) if (marked(blocks[k])) return { at: { message: m, block: k }, tokens }
  }
  return headMarked(prompt) ? { at: { message: -1, block: 0 }, tokens } : undefined
}

/**
 * The known prefixes of `previous` that still hold for the request after it, given the prediction for that request
 * (`undefined`: `previous` unknown, none hold; `null`: it only grew, all hold; else those before the divergence),
 * with `learned` (the new request's own, `knownPrefixOf`) in their place.
 */
export const keptPrefixes = (
  previous: ReadonlyArray<KnownPrefix>,
  prediction: CachePrediction | undefined,
  learned: KnownPrefix | undefined
): ReadonlyArray<KnownPrefix> => {
  const kept = prediction === undefined
    ? []
    : previous.filter((p) =>
      (prediction === null || precedes(p.at, prediction.divergedAt)) &&
      (learned === undefined || precedes(p.at, learned.at) || precedes(learned.at, p.at))
    )
  return learned === undefined ? kept : [...kept, learned]
}

/**
 * What the replies taught of the provider's count against the library's estimate, for the estimate between known
 * prefixes. `byMessage`: the ratio of each message whose count a span between two known prefixes told (the messages
 * after the one the first ends in, to the one the second ends in), by its content (`featuresOf`): it holds for the same message wherever it sits, so it outlives the rewrites that drop the known
 * prefixes around it. `fit`: the sums of the least-squares fit of those spans' counts on two features of their
 * messages, the estimate and the serialized size (`[ee, es, ss, ey, sy]`): the count of a message not yet seen, and
 * the share of a span each of its new messages takes.
 */
export interface MessageRatios {
  readonly byMessage: Map<string, number>
  readonly fit: [ee: number, es: number, ss: number, ey: number, sy: number]
}

/** No ratio learned yet. */
export const emptyRatios = (): MessageRatios => ({ byMessage: new Map(), fit: [0, 0, 0, 0, 0] })

/** The fitted count of a message of estimate `e` and size `size` (`undefined` until the spans determine the fit). */
const fitted = (ratios: MessageRatios | undefined) => {
  if (ratios === undefined) return undefined
  const [ee, es, ss, ey, sy] = ratios.fit
  const det = ee * ss - es * es
  if (!(det > 1e-9 * ee * ss)) return undefined
  const a = (ey * ss - sy * es) / det
  const b = (sy * ee - ey * es) / det
  return (e: number, size: number): number | undefined => {
    const count = a * e + b * size
    return count > 0 ? count : undefined
  }
}

const features = new WeakMap<object, { readonly key: string; readonly size: number }>()

/** A message's content, `cache_control` aside, as a short key (two 32-bit hashes and the length), and its size. */
const featuresOf = (message: Message): { readonly key: string; readonly size: number } => {
  let known = features.get(message)
  if (known === undefined) {
    const text = JSON.stringify(message, stripCacheControl)
    let a = 0x811c9dc5
    let b = 0x01000193
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i)
      a = Math.imul(a ^ c, 0x01000193)
      b = Math.imul(b ^ c, 0x5bd1e995) ^ (b >>> 15)
    }
    known = { key: `${(a >>> 0).toString(36)}.${(b >>> 0).toString(36)}.${text.length}`, size: text.length }
    features.set(message, known)
  }
  return known
}

/** A message's ratio of the provider's count to the estimate: learned, else fitted, else `scale`. */
const ratioOf = (
  ratios: MessageRatios | undefined,
  fit: ReturnType<typeof fitted>,
  message: Message,
  scale: number
): number => {
  const { key, size } = featuresOf(message)
  const learned = ratios?.byMessage.get(key)
  if (learned !== undefined) return learned
  const e = estimateMessageTokens(message)
  const count = e > 0 ? fit?.(e, size) : undefined
  return count === undefined ? scale : count / e
}

/**
 * Learns into `ratios` the span `learned` ends in `prompt`, from the nearest of `known` before it (none: nothing to
 * learn): the span joins the fit; its count, less the messages in it whose ratio is known, is shared among the rest
 * by their fitted counts (their estimates times `scale` before the fit is determined).
 */
export const learnRatios = (
  ratios: MessageRatios,
  prompt: PromptShape,
  known: ReadonlyArray<KnownPrefix>,
  learned: KnownPrefix,
  scale = 1
): void => {
  let from: KnownPrefix | undefined
  for (const p of known) if (precedes(p.at, learned.at) && (from === undefined || precedes(from.at, p.at))) from = p
  if (from === undefined) return
  const messages = prompt.messages as ReadonlyArray<Message>
  const span = learned.tokens - from.tokens
  const last = Math.min(learned.at.message, messages.length - 1)
  let e = 0
  let size = 0
  for (let m = from.at.message + 1; m <= last; m++) {
    e += estimateMessageTokens(messages[m]!)
    size += featuresOf(messages[m]!).size
  }
  if (span <= 0 || e <= 0) return
  const sums = ratios.fit
  sums[0] += e * e
  sums[1] += e * size
  sums[2] += size * size
  sums[3] += e * span
  sums[4] += size * span
  const fit = fitted(ratios)
  let residual = span
  let unknown = 0
  const fresh: Array<{ readonly key: string; readonly tokens: number; readonly count: number }> = []
  for (let m = from.at.message + 1; m <= last; m++) {
    const message = messages[m]!
    const tokens = estimateMessageTokens(message)
    const { key } = featuresOf(message)
    const ratio = ratios.byMessage.get(key)
    if (ratio !== undefined) residual -= tokens * ratio
    else if (tokens > 0) {
      const count = tokens * ratioOf(undefined, fit, message, scale)
      unknown += count
      fresh.push({ key, tokens, count })
    }
  }
  if (unknown <= 0 || residual <= 0) return
  for (const f of fresh) ratios.byMessage.set(f.key, f.count * residual / unknown / f.tokens)
}

/**
 * The library's prediction for `next` after `previous` (see the module doc). `headTokens`: the estimated tokens of
 * the previous request's system prompt and tools (as `requestOf` counts them); `minTokens`: the minimum cacheable
 * length; `scale`: the calibration of the estimate (default 1); `known`: the exact counts of prefixes of `previous`;
 * `ratios`: each message's ratio to the provider's count, for the estimate between them (`learnRatios`).
 */
export const predictCacheMiss = (
  previous: PromptShape,
  next: PromptShape,
  options: {
    readonly headTokens: number
    readonly minTokens: number
    readonly scale?: number | undefined
    readonly known?: ReadonlyArray<KnownPrefix> | undefined
    readonly ratios?: MessageRatios | undefined
  }
): CachePrediction => {
  const reason: PredictedMissReason | undefined = previous.model !== next.model || !sameUnit(previous.speed, next.speed)
    ? "model_changed"
    : !sameUnit(previous.system, next.system) || !sameUnit(formatOf(previous), formatOf(next))
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
  // `weighted`: the estimate with each message's own ratio to the provider's count where learned, else `scale`
  const scale = options.scale ?? 1
  const fit = fitted(options.ratios)
  const units: Array<
    { readonly at: BlockPosition; readonly tokens: number; readonly weighted: number; readonly breakpoint: boolean }
  > = []
  if (hasHead) {
    units.push({
      at: { message: -1, block: 0 },
      tokens: options.headTokens,
      weighted: options.headTokens * scale,
      breakpoint: headMarked(previous)
    })
  }
  let before = options.headTokens
  let weighted = options.headTokens * scale
  prevMessages.forEach((message, m) => {
    const blocks = prevBlocks[m]!
    const ratio = ratioOf(options.ratios, fit, message, scale)
    blocks.forEach((block, k) => {
      const tokens = estimateContentTokens(blocks.slice(0, k + 1))
      units.push({
        at: { message: m, block: k },
        tokens: before + tokens,
        weighted: weighted + tokens * ratio,
        breakpoint: marked(block)
      })
    })
    const tokens = estimateMessageTokens(message)
    before += tokens
    weighted += tokens * ratio
  })
  const indices = new Map(units.map((u, i) => [`${u.at.message}:${u.at.block}`, i]))
  const index = (p: BlockPosition): number => indices.get(`${p.message}:${p.block}`) ?? units.length
  const divergence = reason === undefined ? index(diverged) : 0
  const written = units.flatMap((u, i) => u.breakpoint && u.tokens >= options.minTokens ? [i] : [])
  const exact = exactOf(units, options.known ?? [], index)
  const cached = written.length === 0 ? 0 : exact(written.at(-1)!)
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
  let reused = -1
  for (const j of written) {
    if (j >= divergence) break
    if (nextMarks.some((k) => k >= j && k - j < LOOKBACK_BLOCKS)) reused = j
  }
  return {
    reason: reason ?? "messages_changed",
    missedInputTokens: Math.round(Math.max(0, cached - (reused < 0 ? 0 : exact(reused)))),
    divergedAt: diverged
  }
}

/**
 * The provider's count of the prefix to each unit of `units` (by index): the known count where there is one, else
 * the weighted estimate interpolated between the nearest known prefixes around it (the empty prefix, 0, below them
 * all), past the last one that count plus the weighted estimate beyond it.
 */
const exactOf = (
  units: ReadonlyArray<{ readonly weighted: number }>,
  known: ReadonlyArray<KnownPrefix>,
  index: (p: BlockPosition) => number
) => {
  const points = [{ i: -1, estimate: 0, tokens: 0 }]
  for (const p of known) {
    const i = index(p.at)
    if (i < units.length) points.push({ i, estimate: units[i]!.weighted, tokens: p.tokens })
  }
  points.sort((a, b) => a.i - b.i)
  return (i: number): number => {
    const estimate = units[i]!.weighted
    let below = points[0]!
    for (const p of points) {
      if (p.i === i) return p.tokens
      if (p.i > i) {
        const span = p.estimate - below.estimate
        return span <= 0 ? below.tokens : below.tokens + (estimate - below.estimate) * (p.tokens - below.tokens) / span
      }
      below = p
    }
    return below.tokens + estimate - below.estimate
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

/** A copy of `ratios` to learn into, so a state that holds `ratios` keeps deciding as it did. */
export const copyRatios = (ratios: MessageRatios): MessageRatios => ({
  byMessage: new Map(ratios.byMessage),
  fit: [...ratios.fit]
})

/**
 * What the replies taught about the provider's cache (a state's `cacheLearning`): the request the latest SDK reply
 * answered, with its id, the calibration its usage gave and the exact counts of its prefixes the replies told (each
 * reply its last breakpoint's, kept while unchanged); and each message's ratio of the provider's count to the
 * estimate, learned between those exact prefixes. Never mutated: learning copies `ratios` first (`copyRatios`).
 */
export interface CacheLearning {
  readonly answered?: {
    readonly full: PromptShape
    readonly id: string
    readonly scale: number | undefined
    readonly known: ReadonlyArray<KnownPrefix>
  } | undefined
  readonly ratios: MessageRatios
}

/** A request handed out with diagnostics on: the whole request, and the library's prediction for it. */
export interface DiagnosedRequest {
  readonly full: PromptShape
  readonly predicted: CachePrediction | undefined
}

/**
 * The prediction for `next` (the whole request about to go out, `model` aside) against the request the reply
 * `previousId` answered, from what `learning` holds (`predictCacheMiss` with its calibration, known prefixes and
 * ratios); `undefined` when `learning` is not of that reply (nothing learned yet, or a resumed state).
 */
export const predictionFor = (
  learning: CacheLearning | undefined,
  previousId: string | undefined,
  next: PromptShape,
  options: { readonly model: string | undefined; readonly headTokens: number; readonly minTokens: number }
): CachePrediction | undefined => {
  const answered = learning?.answered
  if (learning === undefined || answered === undefined || previousId === undefined || answered.id !== previousId) {
    return undefined
  }
  return predictCacheMiss({ ...answered.full, model: options.model }, { ...next, model: options.model }, {
    headTokens: options.headTokens,
    minTokens: options.minTokens,
    scale: answered.scale,
    known: answered.known,
    ratios: learning.ratios
  })
}

/**
 * What a state has learned once a reply is recorded (its next `cacheLearning`): with `diagnosed` (the request the
 * reply answered) and an SDK reply (its `id` and `usage`), that request, the calibration its usage gives and the
 * prefix it tells exactly, and the ratios learned between the known prefixes (into a copy: `learning` is left as it
 * was); otherwise only the ratios learned so far. `undefined` when there is nothing to keep.
 */
export const learnFromReply = (
  learning: CacheLearning | undefined,
  diagnosed: DiagnosedRequest | undefined,
  reply: {
    readonly id: string
    readonly usage: {
      readonly input_tokens: number
      readonly cache_read_input_tokens?: number | null | undefined
      readonly cache_creation_input_tokens?: number | null | undefined
    }
  } | undefined,
  headTokens: number
): CacheLearning | undefined => {
  let ratios = learning?.ratios
  if (diagnosed === undefined || reply === undefined) return ratios === undefined ? undefined : { ratios }
  const kept = keptPrefixes(learning?.answered?.known ?? [], diagnosed.predicted, undefined)
  const learned = knownPrefixOf(diagnosed.full, reply.usage)
  const scale = calibrationOf(diagnosed.full, headTokens, reply.usage)
  if (learned !== undefined) {
    ratios = copyRatios(ratios ?? emptyRatios())
    learnRatios(ratios, diagnosed.full, kept, learned, scale)
  }
  return {
    answered: { full: diagnosed.full, id: reply.id, scale, known: keptPrefixes(kept, null, learned) },
    ratios: ratios ?? emptyRatios()
  }
}
