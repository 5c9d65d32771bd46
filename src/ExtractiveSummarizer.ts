/**
 * Concept: the summarizer that needs no model.
 *
 * The extractive summarizer: a deterministic, bounded summary written from the messages themselves, with no model
 * (`extractiveSummary`), and the `Summarizer` built on it. It is the offline default and the fallback of
 * `AnthropicSummarizer.layerWithFallback`.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { errorLine } from "./internal/anchors.ts"
import { clipEnd, clipLine } from "./internal/text.ts"
import type { ContentBlock } from "./Message.ts"
import { zeroUsage } from "./Policy.ts"
import { Summarizer, type SummarizeRequest, type SummarizerShape, type Summary } from "./Summarizer.ts"
import type { ToolClassifier } from "./Tools.ts"
import { defaultToolClassifier, filesTouched } from "./Tools.ts"
import { isHumanMessage } from "./Turns.ts"
import { blocksOf, isCompaction, isServerToolUse, isText, isToolResult, isToolUse } from "./internal/blocks.ts"
import { shortInput } from "./internal/toolInput.ts"
import { stripAppendix } from "./internal/summary.ts"

/** Options of the extractive summarizer. @category models */
export interface ExtractiveOptions {
  /** Classifies tool calls for the summary's file lists; default `defaultToolClassifier`. */
  readonly classifier?: ToolClassifier
}

/** `text` trimmed, clipped to `max` and quoted line by line (`> `). */
const quote = (text: string, max: number): string =>
  clipEnd(text.trim(), max).split(/\r\n?|\n/).map((line) => `> ${line}`).join("\n")

const textOf = (content: unknown): string => {
  if (typeof content === "string") return content
  if (!Array.isArray(content)) return ""
  return (content as ReadonlyArray<ContentBlock>).filter(isText).map((b) => b.text).join("\n")
}

/** The tool a `tool_addition` / `tool_removal` block names, on one line. */
const toolName = (block: ContentBlock): string => {
  const tool = (block as { readonly tool?: { readonly name?: unknown; readonly server_name?: unknown } }).tool
  const name = typeof tool?.name === "string"
    ? tool.name
    : typeof tool?.server_name === "string"
    ? tool.server_name
    : ""
  return clipLine(name, 64)
}

/** How many of each list the extractive summary keeps. @category constants */
export const EXTRACTIVE_LIMITS = {
  requests: 20,
  requestChars: 300,
  errors: 5,
  errorChars: 300,
  outcomes: 15,
  outcomeResultChars: 120,
  statements: 3,
  statementChars: 800,
  previousChars: 16_000,
  files: 100,
  systemMessages: 10,
  systemChars: 2000
} as const

/** The first line of every extractive summary. */
const EXTRACTIVE_HEADER = "# Summary of the earlier conversation (extractive: written without a model)"

/** The section that carries earlier summaries forward, and the sections of ours it does not carry. */
const EARLIER = "Earlier summary"
/**
 * The section of the user's requests. It is not carried into a later summary: the summary's manifest keeps each of
 * the user's messages whole and carries them itself, so carrying them here too would only repeat them.
 */
const USER_REQUESTS = "User requests (the user's own words, each clipped; not carried forward)"
/** The section of the assistant's last statements. */
const STATEMENTS = "The assistant's last statements (its words, not the user's)"
const NOT_CARRIED: ReadonlySet<string> = new Set([
  "Files read",
  "Files modified",
  "Tools used",
  STATEMENTS,
  USER_REQUESTS,
  // the names of earlier versions
  "User requests (verbatim)",
  "Last assistant statements"
])

/**
 * The lines an earlier summary carries into this one, unquoted, newest first. A summary of ours is flattened: each of
 * its own sections as `### title` with its lines (except the files, which the appendix carries, the tool counts, the
 * assistant's statements and the user's requests, which the manifest carries), then the lines it carried itself, so
 * a chain of summaries never nests and its oldest lines come last. Any other summary (a model's, the server's) is
 * carried as its text.
 */
const carriedLines = (previous: string): ReadonlyArray<string> => {
  const text = previous.trim()
  if (!text.startsWith(EXTRACTIVE_HEADER)) return text.length === 0 ? [] : text.split(/\r\n?|\n/)
  const earlier: Array<string> = []
  const own: Array<string> = []
  let title: string | undefined
  for (const line of text.slice(EXTRACTIVE_HEADER.length).split(/\r\n?|\n/)) {
    const heading = /^## (.+)$/.exec(line)
    if (heading !== null) {
      title = heading[1]!.trim()
      if (title !== EARLIER && !NOT_CARRIED.has(title)) own.push(`### ${title}`)
      continue
    }
    if (title === undefined || NOT_CARRIED.has(title) || line.trim().length === 0) continue
    if (title === EARLIER) earlier.push(line.startsWith("> ") ? line.slice(2) : line.replace(/^>$/, ""))
    else own.push(line.startsWith("> ") ? line.slice(2) : line.replace(/^>$/, ""))
  }
  return [...own, ...earlier]
}

/**
 * `lines` (newest first) within `max` chars: whole lines from the front (each clipped to a quarter of `max`), then
 * one line counting the older lines left out, so the newest carried lines win and the oldest leave first.
 */
const boundLines = (lines: ReadonlyArray<string>, max: number): ReadonlyArray<string> => {
  const size = lines.reduce((n, line) => n + line.length + 1, 0)
  if (size <= max) return lines
  const kept: Array<string> = []
  let budget = max - 40
  for (const line of lines) {
    const clipped = clipLine(line, max / 4)
    if (clipped.length + 1 > budget) break
    kept.push(clipped)
    budget -= clipped.length + 1
  }
  return [...kept, `(… ${lines.length - kept.length} older lines omitted …)`]
}

/** The first non-blank line of `text`. */
const firstLine = (text: string): string => text.split(/\r\n?|\n/).find((line) => line.trim().length > 0)?.trim() ?? ""

/**
 * The extractive summary: deterministic, bounded, no model, a record of the earlier conversation with the newest
 * material first (a summary cut to its budget loses its end: the oldest carried lines). Sections: the requested
 * focus; the mid-conversation system messages verbatim (each clipped, the last 10, with their tool changes); the
 * assistant's last statements (its words, marked as such); the last errors seen (the error line of each failed
 * result); the outcome of the last 15 successful tool calls on one line each (tool, short input, first line of the
 * result, clipped); the user's requests in the user's words (each clipped; the first 3 and the last 17 when there are
 * more than 20; the summary's manifest keeps them whole); the tools used with counts; files read and modified; and
 * last, the earlier summary (carried once, never nested: an extractive one is flattened into its lines, newest first,
 * the files, tool counts, statements and requests left out; a compaction block's `content` in the messages counts as
 * one too: it is the server's summary; whole lines from the front within 16,000 chars, the oldest left out). An
 * earlier summary that is not ours (the server's, a model's) is the only record of what it summarized: it comes first,
 * right after the focus.
 * @category extractive
 */
export const extractiveSummary = (request: SummarizeRequest, options: ExtractiveOptions = {}): string => {
  const limits = EXTRACTIVE_LIMITS
  const classifier = options.classifier ?? defaultToolClassifier
  const sections: Array<string> = [EXTRACTIVE_HEADER]
  const focus = request.instructions?.trim() ?? ""
  if (focus.length > 0) sections.push(`## Focus requested\n${quote(focus, limits.requestChars)}`)
  // an earlier summary of ours ends the text (its oldest lines are cut first); any other (the server's, a model's) is
  // the only record of what it summarized, and comes first
  const ours = request.previousSummary?.trim().startsWith(EXTRACTIVE_HEADER) === true
  const earlierSection = (): void => {
    if (earlier.length === 0) return
    const kept = boundLines(earlier, limits.previousChars)
    sections.push(`## ${EARLIER}\n${kept.map((line) => line.length === 0 ? ">" : `> ${line}`).join("\n")}`)
  }
  const earlier = [
    // the server's summaries in the messages, the newest first
    ...request.messages.flatMap((m) =>
      m.role === "system" ?
        [] :
        blocksOf(m).flatMap((b) => isCompaction(b) && typeof b.content === "string" ? [carriedLines(b.content)] : [])
    ).reverse().flat(),
    ...(request.previousSummary === undefined ? [] : carriedLines(stripAppendix(request.previousSummary)))
  ]
  if (!ours) earlierSection()
  const systems = request.messages.filter((m) => m.role === "system").map((m) =>
    blocksOf(m).map((b) =>
      isText(b)
        ? b.text.trim()
        : b.type === "tool_addition" || b.type === "tool_removal"
        ? `(${b.type === "tool_addition" ? "tool added" : "tool removed"}: ${toolName(b)})`
        : ""
    ).filter((text) => text.length > 0).join("\n")
  ).filter((text) => text.length > 0)
  if (systems.length > 0) {
    const kept = systems.slice(-limits.systemMessages)
    const more = systems.length - kept.length
    sections.push(
      `## System messages (verbatim)\n${more > 0 ? `(… ${more} earlier system messages omitted …)\n` : ""}${
        kept.map((text) => quote(text, limits.systemChars)).join("\n\n")
      }`
    )
  }

  const requests: Array<string> = []
  const names = new Map<string, ContentBlock>()
  const toolCounts = new Map<string, number>()
  const errors: Array<string> = []
  const outcomes: Array<string> = []
  const statements: Array<string> = []
  for (const message of request.messages) {
    const blocks = blocksOf(message)
    if (message.role === "user" && isHumanMessage(message)) {
      const text = blocks.filter(isText).map((b) => b.text).join("\n").trim()
      if (text.length > 0) requests.push(text)
    }
    for (const block of blocks) {
      if (isToolUse(block) || isServerToolUse(block)) {
        names.set(block.id, block)
        toolCounts.set(block.name, (toolCounts.get(block.name) ?? 0) + 1)
      } else if (isToolResult(block) && block.is_error === true) {
        const call = names.get(block.tool_use_id)
        const what = call !== undefined && isToolUse(call)
          ? `${clipLine(call.name, 64)}: ${shortInput(call, 120)}`
          : "unknown call"
        errors.push(`- [${what}] ${clipLine(errorLine(textOf(block.content)), limits.errorChars)}`)
      } else if (isToolResult(block)) {
        const call = names.get(block.tool_use_id)
        const result = firstLine(textOf(block.content))
        if (call !== undefined && isToolUse(call)) {
          outcomes.push(
            `- ${clipLine(call.name, 64)}: ${shortInput(call, 120)} → ${
              result.length > 0 ? clipLine(result, limits.outcomeResultChars) : "(no text)"
            }`
          )
        }
      } else if (message.role === "assistant" && isText(block) && block.text.trim().length > 0) {
        statements.push(block.text)
      }
    }
  }

  if (statements.length > 0) {
    sections.push(
      `## ${STATEMENTS}\n${
        statements.slice(-limits.statements).map((s) => quote(s, limits.statementChars)).join("\n\n")
      }`
    )
  }
  if (errors.length > 0) sections.push(`## Last errors\n${errors.slice(-limits.errors).join("\n")}`)
  if (outcomes.length > 0) {
    const more = outcomes.length - limits.outcomes
    sections.push(
      `## Tool outcomes (successful calls)\n${more > 0 ? `(… ${more} earlier outcomes omitted …)\n` : ""}${
        outcomes.slice(-limits.outcomes).join("\n")
      }`
    )
  }
  if (requests.length > 0) {
    const omitted = Math.max(0, requests.length - limits.requests)
    const lines: Array<string> = []
    requests.forEach((text, i) => {
      if (omitted > 0 && i >= 3 && i < 3 + omitted) {
        if (i === 3) lines.push(`(… ${omitted} requests omitted …)`)
        return
      }
      lines.push(`${i + 1}.\n${quote(text, limits.requestChars)}`)
    })
    sections.push(`## ${USER_REQUESTS}\n${lines.join("\n")}`)
  }
  if (toolCounts.size > 0) {
    const tools = [...toolCounts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, 30)
    sections.push(`## Tools used\n${tools.map(([name, n]) => `- ${clipLine(name, 64)} ×${n}`).join("\n")}`)
  }
  const files = filesTouched(request.messages, classifier)
  const list = (paths: ReadonlyArray<string>) => {
    const kept = paths.slice(Math.max(0, paths.length - limits.files))
    const more = paths.length - kept.length
    return [...(more > 0 ? [`- (${more} earlier files)`] : []), ...kept.map((p) => `- ${clipLine(p, 300)}`)].join("\n")
  }
  if (files.read.length > 0) sections.push(`## Files read\n${list(files.read)}`)
  if (files.modified.length > 0) sections.push(`## Files modified\n${list(files.modified)}`)
  if (ours) earlierSection()
  return sections.join("\n\n")
}

const extractive = (options: ExtractiveOptions = {}): SummarizerShape => ({
  name: "extractive",
  summarize: (request) =>
    Effect.sync((): Summary => ({
      text: extractiveSummary(request, options),
      model: "extractive",
      usage: zeroUsage,
      summarizer: "extractive"
    })).pipe(Effect.withSpan("ExtractiveSummarizer.summarize"))
})

/**
 * The offline summarizer: `extractiveSummary` as a service. It never fails and needs no API key, so the library
 * works in tests and on a laptop.
 * @category layers
 */
export const ExtractiveSummarizer = {
  /** The summarizer as a value. */
  make: extractive,
  /** A layer with a tool classifier. */
  layerWith: (options: ExtractiveOptions): Layer.Layer<Summarizer> => Layer.succeed(Summarizer, extractive(options)),
  /** `layerWith({})`. */
  layer: Layer.succeed(Summarizer, extractive()) as Layer.Layer<Summarizer>
} as const
