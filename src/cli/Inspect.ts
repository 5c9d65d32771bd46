/**
 * `compaction inspect`: what a session holds and what compaction would do to it.
 *
 * `analyze` is pure: from an imported `Session` it computes the `InspectReport` (the `--json` output, described by a
 * Schema so scripts and tests can decode it) and a per-message `TimelineEntry` list that the HTML report draws.
 * `formatInspect` renders the report for a person, with a fixed-width composition bar.
 *
 * @since 0.1.0
 */
import * as Schema from "effect/Schema"
import { type ConversationState, prepareStep } from "../ConversationState.ts"
import { summaryText } from "../Summary.ts"
import { planForPolicy } from "../Cut.ts"
import { DEFAULT_KEEP_RECENT, evictStaleToolResults } from "../Evict.ts"
import { isOffloaded, type Offloaded } from "../Offload.ts"
import { HotPaths } from "../HotPaths.ts"
import type { Session } from "../Import.ts"
import type { ContentBlock, Message } from "../Message.ts"
import { systemAndToolsTokens } from "../internal/estimate.ts"
import { contextTokens, defaultPolicy } from "../Policy.ts"
import { estimateContentTokens, estimateMessageTokens, estimateTokens } from "../Tokens.ts"
import { turnStarts } from "../Turns.ts"
import { validate, type Violation } from "../Validate.ts"
import {
  isImage,
  isRedactedThinking,
  isServerToolUse,
  isText,
  isThinking,
  isToolResult,
  isToolUse
} from "../internal/blocks.ts"

// ============================================================================
// Report schema
// ============================================================================

/** What a content block mostly is. @category models */
export const BlockKind = Schema.Literals(["prose", "tool-call", "tool-output", "thinking", "image", "other"])
/** @category models */
export type BlockKind = typeof BlockKind.Type

/** Kinds in display order. @category constants */
export const KINDS: ReadonlyArray<BlockKind> = ["prose", "tool-call", "tool-output", "thinking", "image", "other"]

const Count = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))

const Composition = Schema.Struct({
  prose: Count,
  "tool-call": Count,
  "tool-output": Count,
  thinking: Count,
  image: Count,
  other: Count
})

/** One violation of `validate`, with a one-line description. @category models */
export const ViolationReport = Schema.Struct({
  _tag: Schema.String,
  messageIndex: Count,
  blockIndex: Schema.optionalKey(Count),
  toolUseId: Schema.optionalKey(Schema.String),
  description: Schema.String
})

/**
 * The `compaction inspect --json` output. Token figures are `estimateTokens` estimates unless named `provider`.
 * `composition` splits the estimated tokens of the content blocks (per-message overhead excluded) by kind; tool_result
 * content counts as `tool-output` except its images, which count as `image`.
 * @category models
 */
export const InspectReport = Schema.Struct({
  file: Schema.String,
  format: Schema.String,
  messages: Count,
  turns: Count,
  estimatedTokens: Count,
  /**
   * What every request sends besides the messages, as far as the file holds it: the system prompt and the tool
   * definitions (`tools` of a request document), estimated.
   */
  context: Schema.Struct({
    systemTokens: Count,
    tools: Count,
    toolsTokens: Count
  }),
  /**
   * The last provider-reported usage, when it describes these messages: the context after that reply, and our
   * estimate of the same prefix. Null when the file has none, or when it was reported on a different form of the
   * conversation (`providerNote` says which).
   */
  provider: Schema.NullOr(Schema.Struct({
    messageIndex: Count,
    contextTokens: Count,
    inputTokens: Count,
    outputTokens: Count,
    cacheReadTokens: Count,
    cacheWriteTokens: Count,
    estimatedTokens: Count
  })),
  /** Why a usage found in the file is not reported as `provider`. */
  providerNote: Schema.optionalKey(Schema.String),
  composition: Composition,
  cut: Schema.Struct({
    keepRecentTokens: Count,
    keepRecentTurns: Count,
    maxTailTokens: Count,
    /** First kept message; 0 means nothing would be compacted. */
    cut: Count,
    summarizedMessages: Count,
    summarizedTokens: Count,
    summarizedTurns: Count,
    keptMessages: Count,
    keptTokens: Count,
    keptTurns: Count,
    splitTurn: Schema.Boolean,
    oversizedTurn: Schema.Boolean,
    overBudget: Schema.Boolean
  }),
  eviction: Schema.Struct({
    keepRecent: Count,
    /** The fixed threshold given; `null`: the rent-or-buy rule (the library's default). */
    minSavings: Schema.NullOr(Count),
    offloaded: Count,
    tokensFreed: Count,
    superseded: Count,
    modified: Count,
    stale: Count,
    /**
     * A session log's conversation is append-only between compactions (`ConversationState.appendOnly`: thinking,
     * threads, or asked for): the live loop offloads nothing now, and the offloads wait for the next compaction. The
     * reason; absent when it is not (or the file is not a session log).
     */
    appendOnly: Schema.optionalKey(Schema.String),
    /**
     * The figures are what the live loop's next `prepare` would offload on this log (`"next-prepare"`: a session log,
     * its state resumed, `ConversationState.prepareStep`), or an eviction of the messages as they are
     * (`"messages"`: any other file). Both count every recorded reply as a request that read the cache.
     */
    rule: Schema.optionalKey(Schema.Literals(["next-prepare", "messages"])),
    /**
     * With `"next-prepare"`: the default policy's trigger fires at that `prepare` (by the log's last reported usage).
     * The figures are the offloads before its compaction; an append-only conversation's compaction then applies those
     * its kept tail is due.
     */
    triggerFires: Schema.optionalKey(Schema.Boolean)
  }),
  /** Reads a later read of the same file covers, grouped by path, largest first. */
  supersededReads: Schema.Array(Schema.Struct({ path: Schema.String, reads: Count, tokens: Count })),
  hotPaths: Schema.Array(Schema.String),
  violations: Schema.Array(ViolationReport),
  skippedLines: Count,
  /** `skippedLines` by the importer's reason (an entry kind that holds no message, a blank or corrupt line, …). */
  skippedByReason: Schema.Record(Schema.String, Count),
  compactions: Count,
  interrupted: Count,
  warnings: Schema.Array(Schema.String)
})
/** @category models */
export type InspectReport = typeof InspectReport.Type

/** What happens to a message under the default policy: kept verbatim (`hot`) or summarized at the cut. @category models */
export type Fate = "hot" | "summarized"

/** One message of the timeline the HTML report draws. @category models */
export interface TimelineEntry {
  readonly index: number
  readonly role: string
  readonly tokens: number
  readonly kind: BlockKind
  readonly fate: Fate
  /** Tokens eviction would free in this message (also in the summarized part: eviction runs on the whole session). */
  readonly offloadedTokens: number
  /** A short, single-line preview of the message (text, tool names). */
  readonly preview: string
}

/** The report and its timeline. @category models */
export interface Analysis {
  readonly report: InspectReport
  readonly timeline: ReadonlyArray<TimelineEntry>
}

// ============================================================================
// Analysis
// ============================================================================

const blockTokens = (block: ContentBlock): number => estimateContentTokens([block])

const kindOf = (block: ContentBlock): BlockKind =>
  isText(block)
    ? "prose"
    : isThinking(block) || isRedactedThinking(block)
    ? "thinking"
    : isToolUse(block) || isServerToolUse(block)
    ? "tool-call"
    : isImage(block)
    ? "image"
    : block.type.endsWith("_tool_result")
    ? "tool-output"
    : "other"

type Tally = Record<BlockKind, number>

const emptyTally = (): Tally => ({ prose: 0, "tool-call": 0, "tool-output": 0, thinking: 0, image: 0, other: 0 })

const tallyMessage = (message: Message, into: Tally): void => {
  if (typeof message.content === "string") {
    into.prose += estimateContentTokens(message.content)
    return
  }
  for (const block of message.content) {
    if (isToolResult(block)) {
      const content = block.content
      if (typeof content === "string") into["tool-output"] += estimateContentTokens(content)
      else if (content !== undefined) {
        for (const inner of content) into[isImage(inner) ? "image" : "tool-output"] += blockTokens(inner)
      }
    } else into[kindOf(block)] += blockTokens(block)
  }
}

const oneLine = (text: string, max: number): string => {
  const flat = text.replace(/\s+/g, " ").trim()
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat
}

const previewOf = (message: Message): string => {
  if (typeof message.content === "string") return oneLine(message.content, 100)
  const parts: Array<string> = []
  for (const block of message.content) {
    if (isText(block)) parts.push(block.text)
    else if (isToolUse(block) || isServerToolUse(block)) parts.push(`[${block.name}]`)
    else if (isToolResult(block)) {
      const c = block.content
      parts.push(typeof c === "string" ? c : `[tool result${block.is_error === true ? ", error" : ""}]`)
    } else if (isThinking(block)) parts.push("[thinking]")
    else parts.push(`[${block.type}]`)
  }
  return oneLine(parts.join(" "), 100)
}

/** One line describing a violation. @category formatting */
export const describeViolation = (v: Violation): string => {
  switch (v._tag) {
    case "OrphanedToolResult":
      return `message ${v.messageIndex} block ${v.blockIndex}: tool_result ${v.toolUseId} answers no tool_use in the message before it`
    case "DuplicateToolResult":
      return `message ${v.messageIndex} block ${v.blockIndex}: a second tool_result for ${v.toolUseId}`
    case "ToolResultNotFirst":
      return `message ${v.messageIndex} block ${v.blockIndex}: tool_result ${v.toolUseId} comes after other content`
    case "MissingToolResult":
      return `message ${v.messageIndex} block ${v.blockIndex}: tool_use ${v.toolUseId} has no tool_result`
    case "FirstMessageNotUser":
      return `message ${v.messageIndex}: the conversation does not start with a user message`
    case "EmptyMessage":
      return `message ${v.messageIndex}: empty content`
    case "EmptyTextBlock":
      return `message ${v.messageIndex} block ${v.blockIndex}: empty text block`
    case "ModifiedThinking":
      return `message ${v.messageIndex} block ${v.blockIndex}: signed thinking block was modified`
    case "ThinkingPrefixChanged":
      return `message ${v.messageIndex} block ${v.blockIndex}: the messages before this signed thinking block changed`
    default:
      return `message ${v.messageIndex}${"blockIndex" in v ? ` block ${v.blockIndex}` : ""}: ${v._tag}`
  }
}

/**
 * One line per distinct problem: violations of the same kind in the same message are one line, with their count
 * (`MissingToolResult ×16: message 3 …`). In the order of their first occurrence.
 * @category formatting
 */
export const groupViolations = (violations: ReadonlyArray<typeof ViolationReport.Type>): Array<string> => {
  const groups = new Map<string, { first: typeof ViolationReport.Type; count: number }>()
  for (const v of violations) {
    const key = `${v._tag}\u0000${v.messageIndex}`
    const group = groups.get(key)
    if (group === undefined) groups.set(key, { first: v, count: 1 })
    else group.count++
  }
  return [...groups.values()].map(({ count, first }) =>
    count === 1
      ? `${first._tag}: ${first.description}`
      : `${first._tag} ×${count}: ${first.description} (and ${count - 1} more like it in message ${first.messageIndex})`
  )
}

/** A violation as the report lists it. @category formatting */
export const violationReport = (v: Violation): typeof ViolationReport.Type => ({
  _tag: v._tag,
  messageIndex: v.messageIndex,
  ...("blockIndex" in v ? { blockIndex: v.blockIndex } : {}),
  ...("toolUseId" in v ? { toolUseId: v.toolUseId } : {}),
  description: describeViolation(v)
})

/** Options of `analyze`. @category models */
export interface AnalyzeOptions {
  /** Shown as `file` in the report. */
  readonly file: string
  readonly keepRecent?: number
  /** Fewest tokens worth an eviction; absent: the rent-or-buy rule, as `evictStaleToolResults` without it. */
  readonly minSavings?: number | undefined
  /** The `tools` of the request document, when it had them. */
  readonly tools?: ReadonlyArray<unknown>
  /**
   * The conversation state a session log holds (`resumeState` of the log, whose view is `session.messages`). With it
   * the eviction figures are the live loop's: what `ConversationState.prepareStep` (the step `Conversation#prepare`
   * runs, with `keepRecent` and `minSavings`) would offload next, nothing while the conversation is append-only.
   */
  readonly state?: ConversationState | undefined
}

/** The estimated tokens of tool definitions (0 when there are none). @category analysis */
export const toolsTokens = (tools: ReadonlyArray<unknown> | undefined): number => systemAndToolsTokens(undefined, tools)

/**
 * Whether the provider's usage reported on `messages[index]` describes `messages[0..index]`: not when something
 * before it was rewritten after the reply (a summary, an offloaded tool result, a compaction block), nor when the
 * agent itself compacted before it (the provider then saw the compacted context, not this history). Returns why not.
 */
const staleUsage = (session: Session, index: number): string | undefined => {
  const agentCompaction = session.compactions.find((c) => c.messageIndex <= index)
  if (agentCompaction !== undefined) {
    return `the provider usage after message ${index} was reported on the agent's own compacted context (it ` +
      `compacted before message ${agentCompaction.messageIndex}), not on the full history in this file`
  }
  for (let i = 0; i <= index; i++) {
    const message = session.messages[i]!
    const rewritten = summaryText(message) !== undefined ||
      (typeof message.content !== "string" &&
        message.content.some((b) => isOffloaded(b) || b.type === "compaction"))
    if (rewritten) {
      return `the provider usage after message ${index} was reported before message ${i} was rewritten ` +
        "(compacted or evicted), so it does not describe these messages"
    }
  }
  return undefined
}

/**
 * What the live loop's next `prepare` would offload on a session log's `state`: `ConversationState.prepareStep` (its
 * calls left open answered first, as `prepare` does, then the offload of the rent-or-buy rule or `minSavings`, with
 * the hot paths, thinking and thread the state carries), nothing while the conversation is append-only. The cache is
 * taken as warm, as every recorded reply counts as a request that read it.
 */
const nextPrepareEviction = (
  state: ConversationState,
  keepRecent: number,
  minSavings: number | undefined
): { readonly offloaded: ReadonlyArray<Offloaded>; readonly tokensFreed: number; readonly triggerFires: boolean } => {
  const { transition, compact } = prepareStep(state, { keepRecent, minSavings })
  const steps = transition.steps
  const at = steps.findIndex((step) => step.change._tag === "Offloaded")
  const step = steps[at]
  if (step === undefined || step.change._tag !== "Offloaded") {
    return { offloaded: [], tokensFreed: 0, triggerFires: compact }
  }
  const before = at === 0 ? state : steps[at - 1]!.state
  const tokens = (s: ConversationState) => estimateTokens(s.view as unknown as ReadonlyArray<Message>)
  return { offloaded: step.change.offloaded, tokensFreed: tokens(before) - tokens(step.state), triggerFires: compact }
}

/**
 * Analyzes a session: size and composition, the default policy's cut, what eviction at the default settings would
 * free, superseded reads, hot paths and `validate` violations. Pure; linear in the size of the session.
 * @category analysis
 */
export const analyze = (session: Session, options: AnalyzeOptions): Analysis => {
  const messages = session.messages
  const n = messages.length
  const keepRecent = options.keepRecent ?? DEFAULT_KEEP_RECENT
  const minSavings = options.minSavings
  const tokens = messages.map(estimateMessageTokens)
  const estimatedTokens = tokens.reduce((a, b) => a + b, 0)
  const starts = turnStarts(messages)

  const composition = emptyTally()
  const kinds: Array<BlockKind> = []
  for (const message of messages) {
    const own = emptyTally()
    tallyMessage(message, own)
    let kind: BlockKind = "prose"
    for (const k of KINDS) {
      composition[k] += own[k]
      if (own[k] > own[kind]) kind = k
    }
    kinds.push(kind)
  }

  const plan = planForPolicy(messages, defaultPolicy)
  const summarizedTokens = tokens.slice(0, plan.cut).reduce((a, b) => a + b, 0)

  const hot = HotPaths.fromMessages(messages)
  const live = options.state === undefined ? undefined : nextPrepareEviction(options.state, keepRecent, minSavings)
  const evicted = live ?? evictStaleToolResults(messages, keepRecent, { minSavings, pinned: hot.pinned })
  const byReason = { superseded: 0, modified: 0, stale: 0 }
  const offloadedByMessage = new Map<number, number>()
  const superseded = new Map<string, { reads: number; tokens: number }>()
  for (const o of evicted.offloaded) {
    byReason[o.reason]++
    offloadedByMessage.set(o.messageIndex, (offloadedByMessage.get(o.messageIndex) ?? 0) + o.tokensFreed)
    if (o.reason === "superseded" && o.ref._tag === "Read") addSuperseded(superseded, o)
  }

  let provider: InspectReport["provider"] = null
  const last = session.usage.at(-1)
  const providerNote = last !== undefined && last.messageIndex < n ? staleUsage(session, last.messageIndex) : undefined
  if (last !== undefined && last.messageIndex < n && providerNote === undefined) {
    const u = last.usage
    provider = {
      messageIndex: last.messageIndex,
      contextTokens: contextTokens(u),
      inputTokens: u.input_tokens,
      outputTokens: u.output_tokens,
      cacheReadTokens: u.cache_read_input_tokens,
      cacheWriteTokens: u.cache_creation_input_tokens,
      estimatedTokens: tokens.slice(0, last.messageIndex + 1).reduce((a, b) => a + b, 0)
    }
  }

  const report: InspectReport = {
    file: options.file,
    format: session.format,
    messages: n,
    turns: starts.length,
    estimatedTokens,
    context: {
      systemTokens: estimateContentTokens(session.system ?? ""),
      tools: options.tools?.length ?? 0,
      toolsTokens: toolsTokens(options.tools)
    },
    provider,
    ...(providerNote === undefined ? {} : { providerNote }),
    composition,
    cut: {
      keepRecentTokens: defaultPolicy.keepRecentTokens,
      keepRecentTurns: defaultPolicy.keepRecentTurns,
      maxTailTokens: defaultPolicy.maxTailTokens,
      cut: plan.cut,
      summarizedMessages: plan.cut,
      summarizedTokens,
      summarizedTurns: starts.filter((s) => s < plan.cut).length,
      keptMessages: n - plan.cut,
      keptTokens: plan.keptTokens,
      keptTurns: plan.keptTurns,
      splitTurn: plan.splitTurn,
      oversizedTurn: plan.oversizedTurn,
      overBudget: plan.overBudget
    },
    eviction: {
      keepRecent,
      minSavings: minSavings ?? null,
      offloaded: evicted.offloaded.length,
      tokensFreed: evicted.tokensFreed,
      ...byReason,
      ...(options.state?.appendOnly === undefined ? {} : { appendOnly: options.state.appendOnly }),
      ...(live === undefined
        ? { rule: "messages" as const }
        : { rule: "next-prepare" as const, triggerFires: live.triggerFires })
    },
    supersededReads: [...superseded].map(([path, s]) => ({ path, ...s }))
      .sort((a, b) => b.tokens - a.tokens || (a.path < b.path ? -1 : 1)),
    hotPaths: hot.paths,
    violations: validate(messages).map(violationReport),
    skippedLines: session.skipped.total,
    skippedByReason: session.skipped.byReason,
    compactions: session.compactions.length,
    interrupted: session.interrupted.length,
    warnings: session.warnings
  }

  const timeline: Array<TimelineEntry> = messages.map((message, index) => {
    const offloadedTokens = offloadedByMessage.get(index) ?? 0
    const fate: Fate = index < plan.cut ? "summarized" : "hot"
    return {
      index,
      role: message.role,
      tokens: tokens[index]!,
      kind: kinds[index]!,
      fate,
      offloadedTokens,
      preview: previewOf(message)
    }
  })
  return { report, timeline }
}

const addSuperseded = (into: Map<string, { reads: number; tokens: number }>, o: Offloaded): void => {
  if (o.ref._tag !== "Read") return
  const entry = into.get(o.ref.path) ?? { reads: 0, tokens: 0 }
  into.set(o.ref.path, { reads: entry.reads + 1, tokens: entry.tokens + o.tokensFreed })
}

// ============================================================================
// Terminal formatting
// ============================================================================

/** Labels of the kinds, padded for the legend. @category constants */
export const KIND_LABELS: Readonly<Record<BlockKind, string>> = {
  prose: "prose",
  "tool-call": "tool calls",
  "tool-output": "tool output",
  thinking: "thinking",
  image: "images",
  other: "other"
}

const GLYPHS: Readonly<Record<BlockKind, string>> = {
  prose: "█",
  "tool-call": "▓",
  "tool-output": "▒",
  thinking: "░",
  image: "▚",
  other: "·"
}

const COLORS: Readonly<Record<BlockKind, number>> = {
  prose: 34, // blue
  "tool-call": 36, // cyan
  "tool-output": 33, // yellow
  thinking: 35, // magenta
  image: 32, // green
  other: 90 // grey
}

/**
 * Splits `width` cells among `values` in proportion (largest remainder), so the cells always add up to `width`
 * (or to 0 when every value is 0).
 * @category formatting
 */
export const apportion = (values: ReadonlyArray<number>, width: number): Array<number> => {
  const total = values.reduce((a, b) => a + Math.max(0, b), 0)
  if (total <= 0) return values.map(() => 0)
  const exact = values.map((v) => (Math.max(0, v) / total) * width)
  const cells = exact.map(Math.floor)
  let left = width - cells.reduce((a, b) => a + b, 0)
  const order = exact.map((e, i) => [e - Math.floor(e), i] as const).sort((a, b) => b[0] - a[0] || a[1] - b[1])
  for (const [, i] of order) {
    if (left <= 0) break
    cells[i]!++
    left--
  }
  return cells
}

/** Bar width in cells. @category constants */
export const BAR_WIDTH = 60

/**
 * The composition bar: `BAR_WIDTH` cells of █ blocks, one segment per kind. With `color`, segments are coloured █;
 * without, each kind has its own shade glyph (the legend shows it), so the bar reads on any terminal.
 * @category formatting
 */
export const compositionBar = (composition: Readonly<Record<BlockKind, number>>, color: boolean): string => {
  const cells = apportion(KINDS.map((k) => composition[k]), BAR_WIDTH)
  let bar = ""
  KINDS.forEach((k, i) => {
    const w = cells[i]!
    if (w === 0) return
    bar += color ? `\u001b[${COLORS[k]}m${"█".repeat(w)}\u001b[0m` : GLYPHS[k].repeat(w)
  })
  return bar.length === 0 ? "(empty)" : bar
}

const fmt = (n: number): string => n.toLocaleString("en-US")
const pct = (part: number, whole: number): string =>
  whole <= 0 || part <= 0 ? "0%" : `${(100 * part / whole).toFixed(part / whole < 0.1 ? 1 : 0)}%`

/** Options of `formatInspect`. @category models */
export interface FormatOptions {
  /** ANSI colours (only when stdout is a TTY and NO_COLOR is unset). */
  readonly color: boolean
  /** Most superseded paths listed. Default 10. */
  readonly maxRows?: number
}

/** Why lines were skipped, most first: ` (93 model_change, 26 blank-line: no message in them)`; empty for none. */
const skippedReasons = (byReason: Readonly<Record<string, number>>): string => {
  const reasons = Object.entries(byReason).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1])
  return reasons.length === 0 ? "" : ` (${reasons.map(([reason, n]) => `${fmt(n)} ${reason}`).join(", ")})`
}

/**
 * The report for a person: size, composition bar with legend, the default cut, what eviction would free, superseded
 * reads, hot paths and violations. Plain text plus optional ANSI colour; ends with a newline.
 * @category formatting
 */
export const formatInspect = (report: InspectReport, options: FormatOptions): string => {
  const bold = (s: string) => options.color ? `\u001b[1m${s}\u001b[0m` : s
  const maxRows = options.maxRows ?? 10
  const lines: Array<string> = []
  lines.push(bold(`${report.file}`) + `  (${report.format})`)
  lines.push(`  messages  ${fmt(report.messages)}    turns  ${fmt(report.turns)}`)
  lines.push(`  tokens    ${fmt(report.estimatedTokens)} estimated`)
  const ctx = report.context
  lines.push(
    `  context   system prompt ${ctx.systemTokens === 0 ? "not in this file" : `${fmt(ctx.systemTokens)} tokens`} · ` +
      `tools ${ctx.tools === 0 ? "not in this file" : `${ctx.tools} (${fmt(ctx.toolsTokens)} tokens)`}`
  )
  if (report.provider !== null) {
    const p = report.provider
    lines.push(
      `            ${fmt(p.contextTokens)} reported by the provider after message ${p.messageIndex}` +
        ` (system prompt and tools included; messages 0–${p.messageIndex} alone: ${fmt(p.estimatedTokens)} estimated)`
    )
    const unseen = p.contextTokens - p.estimatedTokens - ctx.systemTokens - ctx.toolsTokens
    if (unseen > 0.2 * p.contextTokens) {
      lines.push(
        `            the provider counted ${fmt(unseen)} tokens more than this file holds: the agent's system prompt` +
          " and tools are not (all) in it"
      )
    }
  } else if (report.providerNote !== undefined) {
    lines.push(`            not reporting provider usage: ${report.providerNote}`)
  } else lines.push("            no provider-reported usage in this file")
  if (report.skippedLines > 0 || report.compactions > 0 || report.interrupted > 0) {
    lines.push(
      `  skipped ${fmt(report.skippedLines)} lines${skippedReasons(report.skippedByReason)} · ` +
        `${report.compactions} earlier compactions · ` +
        `${report.interrupted} interrupted replies`
    )
  }

  const c = report.composition
  const total = KINDS.reduce((a, k) => a + c[k], 0)
  lines.push("", bold("Composition") + " (estimated tokens)")
  lines.push(`  ${compositionBar(c, options.color)}`)
  for (const k of KINDS) {
    if (c[k] === 0 && k === "other") continue
    const swatch = options.color ? `\u001b[${COLORS[k]}m██\u001b[0m` : GLYPHS[k].repeat(2)
    lines.push(`  ${swatch} ${KIND_LABELS[k].padEnd(12)} ${pct(c[k], total).padStart(6)}  ${fmt(c[k]).padStart(10)}`)
  }

  const cut = report.cut
  lines.push(
    "",
    bold("Cut") +
      ` (default policy: keep ${fmt(cut.keepRecentTokens)} tokens and ${cut.keepRecentTurns} turns,` +
      ` tail at most ${fmt(cut.maxTailTokens)})`
  )
  if (cut.cut === 0) lines.push("  nothing to compact: the whole session fits the kept tail")
  else {
    lines.push(
      `  summarize messages 0–${cut.cut - 1}: ${fmt(cut.summarizedMessages)} messages, ${cut.summarizedTurns} turns,` +
        ` ${fmt(cut.summarizedTokens)} tokens`
    )
    lines.push(
      `  keep messages ${cut.cut}–${report.messages - 1}: ${fmt(cut.keptMessages)} messages, ${cut.keptTurns} turns,` +
        ` ${fmt(cut.keptTokens)} tokens` +
        (cut.splitTurn ? " (the cut splits a turn)" : "") +
        (cut.overBudget ? " (over the tail budget: the newest step alone is larger)" : "")
    )
  }

  const e = report.eviction
  lines.push(
    "",
    bold("Eviction") +
      ` (keep ${e.keepRecent} recent tool results, ${
        e.minSavings === null ? "rent-or-buy" : `min savings ${fmt(e.minSavings)}`
      })`
  )
  if (e.appendOnly !== undefined) {
    lines.push(
      `  nothing now: the conversation is append-only between compactions (${e.appendOnly}); offloads wait for the ` +
        (e.triggerFires === true ? "compaction the trigger fires at the next prepare" : "next compaction")
    )
  } else if (e.offloaded === 0) lines.push("  nothing to offload")
  else {
    lines.push(
      `  would offload ${fmt(e.offloaded)} tool results, freeing ${fmt(e.tokensFreed)} tokens` +
        ` (${pct(e.tokensFreed, report.estimatedTokens)} of the session):` +
        ` ${e.superseded} superseded, ${e.modified} modified, ${e.stale} stale`
    )
  }

  lines.push("", bold("Superseded reads") + ` (${report.supersededReads.length} files)`)
  if (report.supersededReads.length === 0) lines.push("  none")
  for (const s of report.supersededReads.slice(0, maxRows)) {
    lines.push(`  ${fmt(s.tokens).padStart(8)} tokens  ${String(s.reads).padStart(3)}×  ${s.path}`)
  }
  if (report.supersededReads.length > maxRows) lines.push(`  … ${report.supersededReads.length - maxRows} more`)

  lines.push("", bold("Hot paths") + ` (${report.hotPaths.length})`)
  lines.push(report.hotPaths.length === 0 ? "  none" : report.hotPaths.map((p) => `  ${p}`).join("\n"))

  lines.push("", bold("Validation"))
  if (report.violations.length === 0) lines.push("  valid: no violations")
  const problems = groupViolations(report.violations)
  for (const line of problems.slice(0, maxRows * 2)) lines.push(`  ${line}`)
  if (problems.length > maxRows * 2) lines.push(`  … ${problems.length - maxRows * 2} more`)
  for (const w of report.warnings.slice(0, 5)) lines.push(`  warning: ${w}`)
  return `${lines.join("\n")}\n`
}
