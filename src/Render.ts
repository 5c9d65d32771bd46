/**
 * Concept: the transcript a summarizer reads.
 *
 * The transcript for a summarizer: `render` turns a summarized head into plain text, bounded by `renderBound`. (The
 * file appendix that ends a summary message belongs to `Summary`.)
 *
 * `render` is lossy in the safe direction: user and assistant prose is kept nearly whole, a tool call becomes a
 * one-liner, tool output is clipped (head and tail kept, the clip says how much was cut), thinking is left out, images
 * and documents become markers, and offloaded pointers (and other short single-line tool outputs) stay exactly as
 * they are, on their `[Tool result]` line. The transcript carries no instructions: it is pure session content.
 *
 * **Structure and safety.** Every structural line starts at column 0 with `[` and is written by `render` itself
 * (`[User]:`, `[Assistant]:`, `[System]:`, `[Earlier summary]:`, `[Tool call] …`, `[Tool result] …`, `[Image: …]`, `[… 812 chars cut …]`). A content line
 * that starts with `[` or `\` gets a `\` in front, and line breaks of every kind (`\r`, U+2028, …) become `\n`, so
 * session text cannot forge a structural line. The tags the summarizer wraps the transcript in (`<transcript>`, `<previous_summary>`, `<instructions>`,
 * `<compaction-files>`) are
 * neutralised (`<` → `&lt;`), so content cannot close the wrapper. No clip splits a surrogate pair.
 *
 * **Size bound.** `render(M).length <= renderBound(M)`, where `renderBound` is a function of the block counts and the
 * options only (see its doc), and always `render(M).length <= max(maxChars, OMISSION_MARKER_MAX)`. With the defaults
 * (400,000 chars, about 100k–133k tokens) the summarization request fits a 200k-token window together with the system
 * prompt, a previous summary and the summary's own output.
 *
 * @since 0.1.0
 */
import type { ContentBlock, Message } from "./Message.ts"
import { clipEnd, headOf, LONE_SURROGATE, tailOf } from "./internal/text.ts"
import { isOffloaded } from "./Offload.ts"
import {
  blocksOf,
  isCompaction,
  isDocument,
  isImage,
  isRedactedThinking,
  isServerToolResult,
  isServerToolUse,
  isText,
  isThinking,
  isToolResult,
  isToolUse
} from "./internal/blocks.ts"
import { shortInput } from "./internal/toolInput.ts"
import { CLIP_MARKER_MAX, neutralizeTags, OMISSION_MARKER_MAX, TAG_PATTERN } from "./internal/renderLimits.ts"

// ============================================================================
// Options
// ============================================================================

/** How much of each part `render` keeps. Every limit is in UTF-16 code units (JS string length). @category models */
export interface RenderOptions {
  /** Longest user or assistant text block kept whole; longer ones keep their head and tail. Default 12,000. */
  readonly proseChars?: number
  /** Longest tool output kept whole; longer ones keep their head (2/3) and tail (1/3). Default 1,500. */
  readonly toolResultChars?: number
  /** Longest one-line form of a tool call's input. Default 160. */
  readonly toolInputChars?: number
  /** Hard cap on the whole transcript; past it, middle entries are omitted whole. Default 400,000. */
  readonly maxChars?: number
}

/** The defaults of `RenderOptions`. @category constants */
export const DEFAULT_RENDER_OPTIONS: Required<RenderOptions> = {
  proseChars: 12_000,
  toolResultChars: 1_500,
  toolInputChars: 160,
  maxChars: 400_000
}

/**
 * Smallest accepted value of each per-part limit; smaller values are raised to it. @category constants
 */
const MIN_PART_CHARS = 16

/**
 * Longest tool name, block type or title kept on a structural line. @category constants
 */
const LABEL_MAX = 64

/**
 * Longest single-line tool output shown inline on its `[Tool result]` line (when `toolResultChars` allows). @category constants
 */
const INLINE_RESULT_MAX = 240

const resolve = (options: RenderOptions | undefined): Required<RenderOptions> => {
  const o = { ...DEFAULT_RENDER_OPTIONS, ...options }
  return {
    proseChars: Math.max(MIN_PART_CHARS, Math.floor(o.proseChars)),
    toolResultChars: Math.max(MIN_PART_CHARS, Math.floor(o.toolResultChars)),
    toolInputChars: Math.max(MIN_PART_CHARS, Math.floor(o.toolInputChars)),
    maxChars: Math.max(0, Math.floor(o.maxChars))
  }
}

// ============================================================================
// Escaping and clipping
// ============================================================================

const LINE_BREAKS = /\r\n?|[\u2028\u2029\v\f\u0085]/g
const ODD_BREAK = /[\r\u2028\u2029\v\f\u0085]/
const LINE_START_ESCAPE = /(^|\n)(?=[[\\])/g
const NON_BLANK = /\S/
const ANY_BREAK = /[\n\r\u2028\u2029\v\f\u0085]/
const WHITESPACE_RUN = /[\s\u0085]+/g

/**
 * Content-safe text: reserved tags neutralised, every line break a `\n`, lines starting with `[` or `\` escaped. Each
 * pass runs only when a cheap scan finds something to do (most text has no `<`, no odd line break, no `\n[`).
 */
const escapeText = (text: string): string => {
  let s = text.includes("<") ? text.replace(TAG_PATTERN, "&lt;$1$2") : text
  if (ODD_BREAK.test(s)) s = s.replace(LINE_BREAKS, "\n")
  if (s.startsWith("[") || s.startsWith("\\") || s.includes("\n[") || s.includes("\n\\")) {
    s = s.replace(LINE_START_ESCAPE, "$1\\")
  }
  return s
}

const countBreaks = (s: string, from: number, to: number): number => {
  let n = 0
  for (let i = s.indexOf("\n", from); i !== -1 && i < to; i = s.indexOf("\n", i + 1)) n++
  return n
}

const clipMarker = (chars: number, lines: number): string =>
  lines > 0 ? `[… ${chars} chars cut, ${lines} lines …]` : `[… ${chars} chars cut …]`

const joinClip = (head: string, tail: string, cutChars: number, cutLines: number): string => {
  // the tail starts a line: re-escape it in case the cut removed the `\` of an escaped line
  const safeTail = tail.length > 0 && (tail[0] === "[" || tail[0] === "\\") ? `\\${tail}` : tail
  return `${head}\n${clipMarker(cutChars, cutLines)}\n${safeTail}`
}

/**
 * `text` escaped, and clipped to `budget` code units plus one clip marker line: at most
 * `budget + CLIP_MARKER_MAX + 2` code units. Only the two ends of a long text are escaped, so the cost is O(budget)
 * plus a newline count over the cut.
 */
const clipText = (text: string, budget: number): string => {
  const headN = Math.ceil((budget * 2) / 3)
  const tailN = budget - headN - 1 // one unit is kept for a re-escape of the tail's first line
  if (text.length <= budget) {
    const escaped = escapeText(text)
    if (escaped.length <= budget) return escaped
    const head = headOf(escaped, headN)
    const tail = tailOf(escaped, tailN)
    return joinClip(
      head,
      tail,
      escaped.length - head.length - tail.length,
      countBreaks(escaped, head.length, escaped.length - tail.length)
    )
  }
  // escaping never shortens text, so an escaped slice of each end is enough to fill its share
  const rawHead = headOf(text, headN)
  const rawTail = tailOf(text, tailN)
  const head = headOf(escapeText(rawHead), headN)
  const tail = tailOf(escapeText(rawTail), tailN)
  const cutFrom = rawHead.length
  const cutTo = text.length - rawTail.length
  return joinClip(head, tail, cutTo - cutFrom, countBreaks(text, cutFrom, cutTo))
}

/**
 * A label for a structural line: one line, tags neutralised, lone surrogates (as a clip elsewhere may leave) replaced
 * by U+FFFD, clipped to `max` with `…`.
 */
const label = (text: string, max: number): string => {
  const flat = neutralizeTags(text.replace(WHITESPACE_RUN, " ").trim()).replace(LONE_SURROGATE, "\ufffd")
  return clipEnd(flat, max)
}

// ============================================================================
// Blocks
// ============================================================================

const PROSE_HEADER_MAX = "[Earlier summary]:\n".length
const CALL_PREFIX_MAX = "[Server tool call] ".length + LABEL_MAX + ": ".length
const RESULT_HEADER_MAX = "[Server tool result] ".length + LABEL_MAX + " (error):\n".length
const MARKER_MAX = "[Search result: ".length + LABEL_MAX + "]".length + 16

const mediaLabel = (source: unknown): string => {
  if (typeof source !== "object" || source === null) return ""
  const s = source as { readonly type?: unknown; readonly media_type?: unknown }
  return typeof s.media_type === "string" ? s.media_type : typeof s.type === "string" ? s.type : ""
}

/** Flattens tool output into text: text as is, images and documents as `(image: …)` lines. */
const flattenContent = (content: unknown): string => {
  if (typeof content === "string") return content
  if (!Array.isArray(content)) return content === undefined || content === null ? "" : safeJson(content)
  const parts: Array<string> = []
  for (const block of content as ReadonlyArray<ContentBlock>) {
    if (typeof block !== "object" || block === null) continue
    if (isText(block)) parts.push(block.text)
    else if (isImage(block)) parts.push(`(image: ${mediaLabel(block.source)})`)
    else if (isDocument(block)) parts.push(`(document: ${block.title ?? mediaLabel(block.source)})`)
    else if (block.type === "search_result") {
      const s = block as { readonly title?: unknown; readonly content?: unknown }
      parts.push(`(search result: ${String(s.title)})`, flattenContent(s.content))
    } else {
      const u = block as { readonly title?: unknown; readonly url?: unknown }
      const described = [u.title, u.url].filter((x): x is string => typeof x === "string").join(" ")
      parts.push(described.length > 0 ? `(${block.type}: ${described})` : `(${block.type} block)`)
    }
  }
  return parts.join("\n")
}

const safeJson = (value: unknown): string => {
  try {
    return JSON.stringify(value) ?? ""
  } catch {
    return String(value)
  }
}

interface RenderState {
  readonly options: Required<RenderOptions>
  readonly names: Map<string, string>
}

const resultItem = (
  kind: string,
  name: string | undefined,
  isError: boolean,
  raw: string,
  ctx: RenderState,
  isPointer = false
): string => {
  const head = `[${kind}]${name === undefined ? "" : ` ${label(name, LABEL_MAX)}`}${isError ? " (error)" : ""}:`
  if (!NON_BLANK.test(raw)) return `${head} (no output)`
  // an offloaded pointer stays whole on its header line, up to what a clipped output may take
  const inlineMax = isPointer
    ? ctx.options.toolResultChars + CLIP_MARKER_MAX + 2
    : Math.min(INLINE_RESULT_MAX, ctx.options.toolResultChars)
  if (raw.length <= inlineMax && !ANY_BREAK.test(raw)) {
    const inline = neutralizeTags(raw)
    if (inline.length <= inlineMax) return `${head} ${inline}`
  }
  return `${head}\n${clipText(raw, ctx.options.toolResultChars)}`
}

const ROLE_HEADERS: Readonly<Record<Message["role"], string>> = {
  user: "[User]:",
  assistant: "[Assistant]:",
  system: "[System]:"
}

/** The name a `tool_addition` / `tool_removal` block names (a tool, an MCP tool, a toolset or an inline definition). */
const toolChangeName = (block: ContentBlock): string => {
  const tool = (block as { readonly tool?: unknown }).tool
  if (typeof tool !== "object" || tool === null) return ""
  const t = tool as { readonly name?: unknown; readonly server_name?: unknown; readonly definition?: unknown }
  const definition = t.definition as { readonly name?: unknown } | undefined
  const name = [t.server_name, t.name, typeof definition === "object" && definition !== null ? definition.name : ""]
    .filter((x): x is string => typeof x === "string" && x.length > 0)
  return name.join(" ")
}

const blockItem = (block: ContentBlock, role: Message["role"], ctx: RenderState): string | undefined => {
  if (isText(block)) {
    if (!NON_BLANK.test(block.text)) return undefined
    return `${ROLE_HEADERS[role]}\n${clipText(block.text, ctx.options.proseChars)}`
  }
  // the server's own summary of what it compacted: the summarizer must carry it on (`content: null` is a no-op)
  if (isCompaction(block)) {
    if (typeof block.content !== "string" || !NON_BLANK.test(block.content)) return undefined
    return `[Earlier summary]:\n${clipText(block.content, ctx.options.proseChars)}`
  }
  if (block.type === "tool_addition" || block.type === "tool_removal") {
    const kind = block.type === "tool_addition" ? "Tool added" : "Tool removed"
    return `[${kind}] ${label(toolChangeName(block), LABEL_MAX)}`
  }
  if (isToolUse(block) || isServerToolUse(block)) {
    ctx.names.set(block.id, block.name)
    const kind = isToolUse(block) ? "Tool call" : "Server tool call"
    const input = label(
      shortInput({ ...block, type: "tool_use" }, ctx.options.toolInputChars),
      ctx.options.toolInputChars
    )
    return `[${kind}] ${label(block.name, LABEL_MAX)}: ${input}`
  }
  if (isToolResult(block)) {
    return resultItem(
      "Tool result",
      ctx.names.get(block.tool_use_id),
      block.is_error === true,
      flattenContent(block.content),
      ctx,
      isOffloaded(block)
    )
  }
  if (isServerToolResult(block)) {
    return resultItem("Server tool result", block.type, false, flattenContent(block.content), ctx)
  }
  // thinking is the model's scratch work: what it decided shows up in the prose and calls that follow, and keeping it
  // would double the transcript of a thinking-heavy session. Redacted thinking is opaque. Both are left out.
  if (isThinking(block) || isRedactedThinking(block)) return undefined
  if (isImage(block)) return `[Image: ${label(mediaLabel(block.source), LABEL_MAX)}]`
  if (isDocument(block)) return `[Document: ${label(block.title ?? mediaLabel(block.source), LABEL_MAX)}]`
  if (block.type === "search_result") {
    const s = block as { readonly title?: unknown; readonly source?: unknown; readonly content?: unknown }
    return `[Search result: ${label(String(s.title ?? s.source ?? ""), LABEL_MAX)}]\n${
      clipText(flattenContent(s.content), ctx.options.toolResultChars)
    }`
  }
  return `[Block: ${label(block.type, LABEL_MAX)}]`
}

/** The largest item `render` can make from `block` (0 when the block renders nothing), plus its joining newline. */
const blockBound = (block: ContentBlock, options: Required<RenderOptions>): number => {
  if (isThinking(block) || isRedactedThinking(block)) return 0
  if (isText(block) || isCompaction(block)) return PROSE_HEADER_MAX + options.proseChars + CLIP_MARKER_MAX + 2 + 1
  if (isToolUse(block) || isServerToolUse(block)) return CALL_PREFIX_MAX + options.toolInputChars + 1
  if (isToolResult(block) || isServerToolResult(block) || block.type === "search_result") {
    return RESULT_HEADER_MAX + Math.max(options.toolResultChars + CLIP_MARKER_MAX + 2, INLINE_RESULT_MAX) + 1
  }
  return MARKER_MAX + 1
}

// ============================================================================
// Render
// ============================================================================

const omissionMarker = (entries: number, chars: number): string =>
  `[… ${entries} entries omitted (${chars} chars) to fit the transcript limit …]`

/** Share of the budget given to the oldest entries when `maxChars` cuts the middle; the rest goes to the newest. */
const FRONT_SHARE = 0.3

/**
 * Flattens `messages` (the head being summarized) into a plain-text transcript. See the module doc for the format,
 * the safety guarantees and the size bound. Pure and deterministic; the input is not modified.
 *
 * One entry per block, in order, joined by `\n`:
 * - text → `[User]:` / `[Assistant]:` / `[System]:` (a mid-conversation system message) then the text (clipped at
 *   `proseChars`);
 * - compaction block → `[Earlier summary]:` then its `content` (the server's summary, clipped at `proseChars`);
 *   `content: null` (a failed compaction) → nothing;
 * - tool_addition / tool_removal (a system message's tool changes) → `[Tool added] name` / `[Tool removed] name`;
 * - tool_use → `[Tool call] name: short input`; server_tool_use → `[Server tool call] …`;
 * - tool_result → `[Tool result] name (error):` then the output, clipped at `toolResultChars`; a short single-line
 *   output (up to `INLINE_RESULT_MAX`) and an offloaded pointer (`Offload.isOffloaded`, up to `toolResultChars +
 *   CLIP_MARKER_MAX + 2`) stay verbatim on the header line; server tool results likewise;
 * - image, document, unknown block → `[Image: image/png]`, `[Document: title]`, `[Block: type]`;
 * - thinking, redacted thinking → nothing (the reasoning's outcome is in the prose and calls that follow).
 *
 * When the entries exceed `maxChars`, whole entries are dropped from the middle (30% of the budget for the oldest,
 * the rest for the newest) and one `[… N entries omitted …]` line says so.
 * @category rendering
 */
export const render = (messages: ReadonlyArray<Message>, options?: RenderOptions): string => {
  const ctx: RenderState = { options: resolve(options), names: new Map() }
  const items: Array<string> = []
  let total = 0
  for (const message of messages) {
    for (const block of blocksOf(message)) {
      if (typeof block !== "object" || block === null) continue
      const item = blockItem(block, message.role, ctx)
      if (item === undefined) continue
      items.push(item)
      total += item.length + 1
    }
  }
  const maxChars = ctx.options.maxChars
  if (total - 1 <= maxChars) return items.join("\n")
  const budget = maxChars - OMISSION_MARKER_MAX - 1
  let frontEnd = 0
  let used = 0
  while (frontEnd < items.length && used + items[frontEnd]!.length + 1 <= budget * FRONT_SHARE) {
    used += items[frontEnd]!.length + 1
    frontEnd++
  }
  let backStart = items.length
  while (backStart > frontEnd && used + items[backStart - 1]!.length + 1 <= budget) {
    used += items[backStart - 1]!.length + 1
    backStart--
  }
  let omittedChars = 0
  for (let i = frontEnd; i < backStart; i++) omittedChars += items[i]!.length + 1
  return [
    ...items.slice(0, frontEnd),
    omissionMarker(backStart - frontEnd, omittedChars),
    ...items.slice(backStart)
  ].join("\n")
}

/**
 * An upper bound of `render(messages, options).length` that depends only on the block counts and the options:
 *
 * `min(max(maxChars, OMISSION_MARKER_MAX), Σ cost(block))`, where (with the defaults in brackets)
 * - text, compaction: `19 + proseChars + CLIP_MARKER_MAX + 3` [12,086];
 * - tool_use, server_tool_use: `19 + LABEL_MAX + 2 + toolInputChars + 1` [246];
 * - tool_result, server tool result, search_result: `31 + LABEL_MAX + max(toolResultChars + CLIP_MARKER_MAX + 2,
 *   INLINE_RESULT_MAX) + 1` [1,662];
 * - thinking, redacted thinking: 0; any other block: 98.
 * @category rendering
 */
export const renderBound = (messages: ReadonlyArray<Message>, options?: RenderOptions): number => {
  const resolved = resolve(options)
  let sum = 0
  for (const message of messages) {
    for (const block of blocksOf(message)) {
      if (typeof block === "object" && block !== null) sum += blockBound(block, resolved)
    }
  }
  return Math.min(Math.max(resolved.maxChars, OMISSION_MARKER_MAX), sum)
}
