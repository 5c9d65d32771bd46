/**
 * The extractive summarizer: a deterministic, bounded summary written from the messages themselves, with no model
 * (`extractiveSummary`), and the `Summarizer` built on it. It is the offline default and the fallback of
 * `AnthropicSummarizer.layerWithFallback`.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { clipEnd, clipLine, clipMiddle } from "./internal/text.ts"
import type { ContentBlock } from "./Message.ts"
import { blocksOf, isCompaction, isServerToolUse, isText, isToolResult, isToolUse } from "./Message.ts"
import { zeroUsage } from "./Policy.ts"
import { Summarizer, type SummarizeRequest, type SummarizerShape, type Summary } from "./Summarizer.ts"
import { stripAppendix } from "./Summary.ts"
import type { ToolClassifier } from "./Tools.ts"
import { defaultToolClassifier, filesTouched, shortInput } from "./Tools.ts"
import { isHumanMessage } from "./Turns.ts"

/** Options of the extractive summarizer. @category models */
export interface ExtractiveOptions {
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
  requestChars: 800,
  errors: 5,
  errorChars: 300,
  statements: 3,
  statementChars: 800,
  previousChars: 8000,
  files: 100,
  systemMessages: 10,
  systemChars: 2000
} as const

/**
 * The extractive summary: deterministic, bounded, no model. Sections: the requested focus, the earlier summary
 * (clipped; a compaction block's `content` in the messages counts as one too: it is the server's summary), the
 * mid-conversation system messages verbatim (each clipped, the last 10, with their tool changes), the user's requests
 * verbatim (each clipped; the first 3 and the last 17 when there are more than 20), files read and modified, the tools
 * used with counts, the last errors seen, and the assistant's last statements.
 * @category extractive
 */
export const extractiveSummary = (request: SummarizeRequest, options: ExtractiveOptions = {}): string => {
  const limits = EXTRACTIVE_LIMITS
  const classifier = options.classifier ?? defaultToolClassifier
  const sections: Array<string> = ["# Summary of the earlier conversation (extractive: written without a model)"]
  const focus = request.instructions?.trim() ?? ""
  if (focus.length > 0) sections.push(`## Focus requested\n${quote(focus, limits.requestChars)}`)
  const earlier = [
    request.previousSummary === undefined ? "" : stripAppendix(request.previousSummary).trim(),
    ...request.messages.flatMap((m) =>
      m.role === "system" ?
        [] :
        blocksOf(m).flatMap((b) => isCompaction(b) && typeof b.content === "string" ? [b.content.trim()] : [])
    )
  ].filter((text) => text.length > 0).join("\n\n")
  if (earlier.length > 0) {
    const clipped = clipMiddle(earlier, limits.previousChars)
    sections.push(`## Earlier summary\n${clipped.split("\n").map((line) => `> ${line}`).join("\n")}`)
  }
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
        errors.push(`- [${what}] ${clipLine(textOf(block.content), limits.errorChars)}`)
      } else if (message.role === "assistant" && isText(block) && block.text.trim().length > 0) {
        statements.push(block.text)
      }
    }
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
    sections.push(`## User requests (verbatim)\n${lines.join("\n")}`)
  }
  const files = filesTouched(request.messages, classifier)
  const list = (paths: ReadonlyArray<string>) => {
    const kept = paths.slice(Math.max(0, paths.length - limits.files))
    const more = paths.length - kept.length
    return [...(more > 0 ? [`- (${more} earlier files)`] : []), ...kept.map((p) => `- ${clipLine(p, 300)}`)].join("\n")
  }
  if (files.read.length > 0) sections.push(`## Files read\n${list(files.read)}`)
  if (files.modified.length > 0) sections.push(`## Files modified\n${list(files.modified)}`)
  if (toolCounts.size > 0) {
    const tools = [...toolCounts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, 30)
    sections.push(`## Tools used\n${tools.map(([name, n]) => `- ${clipLine(name, 64)} ×${n}`).join("\n")}`)
  }
  if (errors.length > 0) sections.push(`## Last errors\n${errors.slice(-limits.errors).join("\n")}`)
  if (statements.length > 0) {
    sections.push(
      `## Last assistant statements\n${
        statements.slice(-limits.statements).map((s) => quote(s, limits.statementChars)).join("\n\n")
      }`
    )
  }
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
