/**
 * The recall tool's parts (`Recall` is its public face): the tool definition, reading its input, the sources a
 * session's entries can give back, what each compaction and eviction removed, pages, answers and their text, the
 * eviction's view of a recall call, and the store read they answer from; the search and the sources' text are in
 * `internal/recallSearch` (re-exported here), which `Retention` uses without reaching the store.
 *
 * @internal
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import type { Message, ToolUseBlock } from "../Message.ts"
import { isText, isToolResult, isToolUse } from "./blocks.ts"
import { isTextRef, textRef } from "./textRef.ts"
import { decodeLine, type Entry } from "../SessionEntry.ts"
import type { RemovedItem as EntryRemovedItem } from "./sessionEntry.ts"
import { SessionStore } from "../SessionStore.ts"
import { CHARS_PER_TOKEN } from "./estimate.ts"
import type { ToolAction } from "../Tools.ts"
import type { SessionLogError } from "./sessionLogError.ts"
import { headOf } from "./text.ts"
import { isHumanMessage } from "./turns.ts"
import { isWordsRef, wordsRef } from "./userWords.ts"
import {
  MAX_REGEX_LINE,
  messageSource,
  opaqueField,
  type RecallHit,
  type RecallKind,
  type RecallSource,
  recallText,
  riskyPattern,
  searchSources
} from "./recallSearch.ts"

export {
  DEFAULT_CONTEXT_LINES,
  MAX_REGEX_LINE,
  type RecallHit,
  type RecallKind,
  type RecallSource,
  recallText,
  removedSources,
  searchSources
} from "./recallSearch.ts"

// ============================================================================
// The tool definition
// ============================================================================

/** The name of the recall tool. @category constants */
export const RECALL_TOOL_NAME = "recall"

/**
 * The recall tool's definition in the Messages API's tool shape (`name`, `description`, JSON `input_schema`): add it
 * to a request's `tools` as it is.
 * @category tool
 */
export interface RecallToolDefinition {
  readonly name: typeof RECALL_TOOL_NAME
  readonly description: string
  readonly input_schema: {
    readonly type: "object"
    readonly properties: Readonly<Record<string, unknown>>
    readonly additionalProperties: false
  }
}

/** The recall tool, ready for a request's `tools`. @category tool */
export const recallTool: RecallToolDefinition = {
  name: RECALL_TOOL_NAME,
  description: "Read back, exactly, what was removed from this conversation to save context. " +
    "Give `ref` (the id in an offloaded-output pointer, or a reference a compaction summary lists) to get that " +
    "output or message exactly, in pages (`lines` narrows it to a line range, `page` picks a later page). " +
    "Or give `query` to search everything removed (plain text, or a regular expression with `regex: true`): " +
    "hits come newest first, each with its ref and a few lines of context. Give either `ref` or `query`.",
  input_schema: {
    type: "object",
    properties: {
      ref: { type: "string", description: "The reference of a removed tool output or message." },
      lines: { type: "string", pattern: "^[1-9][0-9]*(-([1-9][0-9]*)?)?$", description: "A line range, like 120-240." },
      page: { type: "integer", minimum: 1, description: "Which page of the answer (default 1)." },
      query: { type: "string", description: "Text to search for in everything removed." },
      regex: {
        type: "boolean",
        description: "Read `query` as a JavaScript regular expression, tried on the first " +
          `${MAX_REGEX_LINE} characters of each line; a repeated group holding a repeat, like (a+)+, is refused.`
      }
    },
    additionalProperties: false
  }
}

// ============================================================================
// The input
// ============================================================================

/** A line range, 1-based and inclusive; `end` absent: to the last line. @category models */
export interface RecallLines {
  readonly start: number
  readonly end?: number
}

/** What the model asked for: one reference (a page of it) or one search. @category models */
export type RecallRequest =
  | { readonly _tag: "ByRef"; readonly ref: string; readonly lines?: RecallLines; readonly page: number }
  | { readonly _tag: "Search"; readonly query: string; readonly regex: boolean; readonly page: number }

const RecallInputErrorBase: ReturnType<typeof Data.TaggedError<"RecallInputError">> = Data.TaggedError(
  "RecallInputError"
)

/** A recall input that cannot be answered: what is wrong with it, in words the model can act on. @category errors */
export class RecallInputError extends RecallInputErrorBase<{ readonly detail: string }> {
  override get message(): string {
    return `recall: ${this.detail}`
  }
}

const LINES = /^([1-9][0-9]*)(?:-([1-9][0-9]*)?)?$/

const parseLines = (text: string): RecallLines | undefined => {
  const match = LINES.exec(text)
  if (match === null) return undefined
  const start = Number(match[1])
  if (!text.includes("-")) return { start, end: start }
  if (match[2] === undefined) return { start }
  const end = Number(match[2])
  return end >= start ? { start, end } : undefined
}

/**
 * Reads a recall tool call's input (`tool_use.input`): exactly one of `ref` and `query`, a valid `lines` range and
 * `page`, a `regex` that compiles. Anything else is a `RecallInputError`, never a guess.
 * @category input
 */
export const decodeRecallInput = (input: unknown): Result.Result<RecallRequest, RecallInputError> => {
  const fail = (detail: string) => Result.fail(new RecallInputError({ detail }))
  if (typeof input !== "object" || input === null || Array.isArray(input)) return fail("the input must be an object")
  const fields = input as Record<string, unknown>
  for (const key of Object.keys(fields)) {
    if (!(key in recallTool.input_schema.properties)) return fail(`unknown field ${JSON.stringify(key)}`)
  }
  const { lines, page, query, ref, regex } = fields
  const pageNumber = page ?? 1
  if (typeof pageNumber !== "number" || !Number.isInteger(pageNumber) || pageNumber < 1) {
    return fail("page must be an integer from 1")
  }
  if ((ref === undefined) === (query === undefined)) return fail("give exactly one of ref and query")
  if (ref !== undefined) {
    if (typeof ref !== "string" || ref === "") return fail("ref must be a non-empty string")
    if (regex !== undefined) return fail("regex goes with query, not ref")
    if (lines === undefined) return Result.succeed({ _tag: "ByRef", ref, page: pageNumber })
    const range = typeof lines === "string" ? parseLines(lines) : undefined
    if (range === undefined) return fail(`lines must look like 120-240 (got ${JSON.stringify(lines)})`)
    return Result.succeed({ _tag: "ByRef", ref, lines: range, page: pageNumber })
  }
  if (typeof query !== "string" || query === "") return fail("query must be a non-empty string")
  if (lines !== undefined) return fail("lines goes with ref, not query")
  if (regex !== undefined && typeof regex !== "boolean") return fail("regex must be true or false")
  if (regex === true) {
    try {
      new RegExp(query, "u")
    } catch (e) {
      return fail(`query is not a regular expression: ${(e as Error).message}`)
    }
    const risk = riskyPattern(query)
    if (risk !== undefined) return fail(`query is refused: ${risk}`)
  }
  return Result.succeed({ _tag: "Search", query, regex: regex === true, page: pageNumber })
}

// ============================================================================
// Sources: what the log can give back
// ============================================================================

/** A fold of a session's entries into its sources, calling `onRemoval` at each compaction and eviction. */
const foldSources = (
  entries: ReadonlyArray<Entry>,
  onRemoval: (removal: Removal) => void = () => undefined
): ReadonlyArray<RecallSource> => {
  const sources: Array<Omit<RecallSource, "removed">> = []
  /** Entry id → the indices (in `sources`) of its message and its tool results. */
  const byEntry = new Map<string, Array<number>>()
  /** tool_use_id → the indices of its tool result sources that are not kept copies, in log order. */
  const byResult = new Map<string, Array<number>>()
  /** tool_use_id → the indices of every tool result source of it, kept copies included. */
  const everyResult = new Map<string, Array<number>>()
  const toolNames = new Map<string, string>()
  /** The indices of the tool result sources an eviction replaced in the view. */
  const evicted = new Set<number>()
  let view: Array<string> = []
  const add = (entryId: string, source: Omit<RecallSource, "removed">) => {
    const list = byEntry.get(entryId) ?? []
    list.push(sources.length)
    byEntry.set(entryId, list)
    sources.push(source)
  }
  const addMessage = (entryId: string, message: Message, kind: RecallKind, kept: boolean) => {
    const words = kind === "message" && isHumanMessage(message) ? { words: wordsRef(message) } : {}
    add(entryId, { ref: entryId, kind, entryId, role: message.role, ...words, ...messageSource(message) })
    if (typeof message.content === "string") return
    message.content.forEach((block, index) => {
      if (isToolUse(block)) toolNames.set(block.id, block.name)
      if (!isToolResult(block)) return
      const id = block.tool_use_id
      // a kept message's result is a copy of one stored before (its own only when none was: a repair's)
      const copy = kept && byResult.has(id)
      if (!copy) byResult.set(id, [...(byResult.get(id) ?? []), sources.length])
      everyResult.set(id, [...(everyResult.get(id) ?? []), sources.length])
      const tool = toolNames.get(id)
      add(entryId, {
        ref: copy ? qualifiedRef(id, entryId) : id,
        kind: "tool_result",
        entryId,
        block: index,
        toolUseId: id,
        ...(copy ? { copy: true as const } : {}),
        role: message.role,
        ...(tool === undefined ? {} : { tool }),
        text: recallText(block.content),
        ...opaqueField(block.content)
      })
    })
  }
  for (const entry of entries) {
    switch (entry.type) {
      case "message":
        addMessage(entry.id, entry.message, "message", false)
        view.push(entry.id)
        break
      case "eviction": {
        // none: the entry holds only a step's metadata (a reply with empty content), and removes nothing
        if (entry.evictions.length === 0) break
        // an eviction replaces every result of its id the view holds
        const inView = new Set(view)
        const removed = entry.evictions.flatMap((e) =>
          (everyResult.get(e.toolUseId) ?? []).filter((at) => inView.has(sources[at]!.entryId)).map((at) => {
            evicted.add(at)
            return removedItem(sources[at]!)
          })
        )
        onRemoval({ entryId: entry.id, type: "eviction", removed })
        break
      }
      case "compaction": {
        const before = view
        addMessage(entry.id, entry.summary, "summary", false)
        if (entry.kept === undefined) {
          const from = entry.firstKeptEntryId === null ? view.length : view.indexOf(entry.firstKeptEntryId)
          view = [entry.id, ...view.slice(Math.max(0, from))]
        } else {
          const through = entry.kept.through
          const end = through === null ? 0 : view.indexOf(through) + 1
          const kept = entry.kept.messages.map((message, i) => {
            const id = `${entry.id}#${i + 1}`
            addMessage(id, message, "message", true)
            return id
          })
          view = [entry.id, ...kept, ...view.slice(end)]
        }
        if (entry.removed !== undefined) {
          onRemoval({ entryId: entry.id, type: "compaction", removed: entry.removed })
          break
        }
        // a log written before compaction entries carried their record: what the view no longer holds
        const after = new Set(view)
        const removed = before.filter((id) => !after.has(id)).flatMap((id) =>
          (byEntry.get(id) ?? []).filter((at) => sources[at]!.copy !== true).map((at) => removedItem(sources[at]!))
        )
        onRemoval({ entryId: entry.id, type: "compaction", removed })
        break
      }
    }
  }
  // a reused id names each of its results by where it is stored
  for (const list of byResult.values()) {
    if (list.length < 2) continue
    for (const at of list) {
      sources[at] = { ...sources[at]!, ref: qualifiedRef(sources[at]!.toolUseId!, sources[at]!.entryId) }
    }
  }
  const present = new Set(view)
  return sources.map((s, i) => ({ ...s, removed: !present.has(s.entryId) || evicted.has(i) }))
}

/** The reference of the tool result `toolUseId` stored in entry `entryId`: `<toolUseId>@<entryId>`. @category sources */
export const qualifiedRef = (toolUseId: string, entryId: string): string => `${toolUseId}@${entryId}`

/**
 * Every text of a session's entries that `recall` can give back, oldest first: each message entry, each tool result
 * in it (by its `tool_use_id`, or `<tool_use_id>@<entry id>` for an id the session reuses), each kept message (and
 * its tool results, copies named by where they are stored) and each summary; marked `removed` when the view the
 * entries fold to no longer holds it as stored. Pure.
 * @category sources
 */
export const recallSources = (entries: ReadonlyArray<Entry>): ReadonlyArray<RecallSource> => foldSources(entries)

/**
 * The text a text reference (`textRef`, which a summary names where it shortened a text) stands for, as a source:
 * the first text block (or string content) of a message, summary or kept message of `entries` whose reference it is,
 * one the view no longer holds first; `undefined` when none is. Pure.
 * @category sources
 */
export const textSourceOf = (
  entries: ReadonlyArray<Entry>,
  sources: ReadonlyArray<RecallSource>,
  ref: string
): RecallSource | undefined => {
  if (!isTextRef(ref)) return undefined
  const removed = new Map(sources.flatMap((s) => s.kind === "tool_result" ? [] : [[s.entryId, s.removed] as const]))
  let found: RecallSource | undefined
  const look = (entryId: string, message: Message): boolean => {
    const texts = typeof message.content === "string"
      ? [message.content]
      : message.content.flatMap((b) => isText(b) ? [b.text] : [])
    const text = texts.find((t) => textRef(t) === ref)
    if (text === undefined) return false
    const source: RecallSource = {
      ref,
      kind: "message",
      entryId,
      role: message.role,
      text,
      removed: removed.get(entryId) ?? false
    }
    found ??= source
    if (!source.removed) return false
    found = source
    return true
  }
  for (const entry of entries) {
    if (entry.type === "message" && look(entry.id, entry.message)) break
    if (entry.type !== "compaction") continue
    if (look(entry.id, entry.summary)) break
    if (entry.kept?.messages.some((m, i) => look(`${entry.id}#${i + 1}`, m)) === true) break
  }
  return found
}

/**
 * What a reference names: a message or summary by entry id; a user's message by its words (`msg_…`, as a summary
 * names one it left out: the first message with those words); a tool result by its `ref` (its `tool_use_id`, or
 * `<tool_use_id>@<entry id>` for a reused id or a kept copy); else `Ambiguous` for a `tool_use_id` the session
 * reused (the results it names), or `undefined`. Pure.
 * @category sources
 */
export const sourceOf = (
  sources: ReadonlyArray<RecallSource>,
  ref: string
): RecallSource | { readonly _tag: "Ambiguous"; readonly sources: ReadonlyArray<RecallSource> } | undefined => {
  if (isWordsRef(ref)) {
    const byWords = sources.find((s) => s.words === ref)
    if (byWords !== undefined) return byWords
  }
  const named = sources.find((s) => s.ref === ref && s.kind !== "tool_result") ?? sources.find((s) => s.ref === ref)
  if (named !== undefined) return named
  const at = ref.lastIndexOf("@")
  const stored = at <= 0 ?
    undefined :
    sources.find((s) => s.kind === "tool_result" && s.toolUseId === ref.slice(0, at) && s.entryId === ref.slice(at + 1))
  if (stored !== undefined) return stored
  const results = sources.filter((s) => s.kind === "tool_result" && s.toolUseId === ref)
  const originals = results.filter((s) => s.copy !== true)
  if (originals.length > 1) return { _tag: "Ambiguous", sources: originals }
  return results[0]
}

// ============================================================================
// What each compaction removed
// ============================================================================

/**
 * One item a compaction or an eviction removed from the view: its reference, kind, role, tool, size and (a tool
 * result) the entry that stores it (`SessionEntry`'s `RemovedItem`, the record a compaction entry stores).
 * @category models
 */
export type RemovedItem = EntryRemovedItem

/** What one log entry removed from the view: a compaction (the messages it summarized) or an eviction. @category models */
export interface Removal {
  readonly entryId: string
  readonly type: "compaction" | "eviction"
  readonly removed: ReadonlyArray<RemovedItem>
}

const tokensOf = (text: string): number => Math.ceil(text.length / CHARS_PER_TOKEN)

/**
 * What each compaction and eviction entry of a session removed, in log order: a compaction the record its entry
 * stores (a log written before entries carried it: every message, with its tool results, and an earlier summary of
 * the view before it that the view after it no longer holds, sized from their text); an eviction the tool results
 * it offloaded. Each item carries the reference `recall` answers (a reused id's tool result `<tool_use_id>@<entry>`).
 * Pure.
 * @category removals
 */
export const removalsOf = (entries: ReadonlyArray<Entry>): ReadonlyArray<Removal> => {
  const out: Array<Removal> = []
  const sources = foldSources(entries, (removal) => void out.push(removal))
  // a reused id's results are named by where they are stored, as `recall` names them
  const reused = new Set(
    sources.flatMap((s) => s.kind === "tool_result" && s.copy !== true && s.toolUseId !== s.ref ? [s.toolUseId!] : [])
  )
  if (reused.size === 0) return out
  return out.map((removal) => ({
    ...removal,
    removed: removal.removed.map((item) =>
      item.kind === "tool_result" && item.entry !== undefined && reused.has(item.ref)
        ? { ...item, ref: qualifiedRef(item.ref, item.entry) }
        : item
    )
  }))
}

const removedItem = (s: Omit<RecallSource, "removed">): RemovedItem => ({
  ref: s.toolUseId ?? s.ref,
  kind: s.kind,
  ...(s.role === undefined ? {} : { role: s.role }),
  ...(s.tool === undefined ? {} : { tool: s.tool }),
  tokens: tokensOf(s.text),
  ...(s.kind === "tool_result" ? { entry: s.entryId } : {})
})

// ============================================================================
// Pages
// ============================================================================

/** The tokens one recall answer holds at most, by default. @category constants */
export const DEFAULT_MAX_TOKENS = 4_000

/** One page of a text: its part, the lines it was cut from, and where the next page is. @category models */
export interface RecallPage {
  readonly text: string
  readonly page: number
  readonly pages: number
  /** The line range the pages were cut from (all lines when none was asked for). */
  readonly lines: { readonly start: number; readonly end: number; readonly total: number }
}

/**
 * Page `page` (from 1) of the lines `lines` of `text`, each page at most `maxChars` code units and never between
 * the halves of a surrogate pair: the pages, joined, are the selected lines exactly (all of `text` without `lines`).
 * A page past the last is empty. Pure.
 * @category pages
 */
export const pageOf = (
  text: string,
  options: { readonly lines?: RecallLines | undefined; readonly page?: number; readonly maxChars: number }
): RecallPage => {
  const starts = [0]
  for (let i = text.indexOf("\n"); i !== -1; i = text.indexOf("\n", i + 1)) starts.push(i + 1)
  const total = starts.length
  const start = Math.min(options.lines?.start ?? 1, total)
  const end = Math.max(start, Math.min(options.lines?.end ?? total, total))
  const from = options.lines === undefined ? 0 : starts[start - 1]!
  const to = options.lines === undefined || end === total ? text.length : starts[end]!
  const selected = text.slice(from, to)
  const maxChars = Math.max(2, options.maxChars)
  const cuts = [0]
  while (cuts.at(-1)! < selected.length) {
    const at = cuts.at(-1)!
    cuts.push(at + Math.max(1, headOf(selected.slice(at, at + maxChars + 1), maxChars).length))
  }
  const pages = Math.max(1, cuts.length - 1)
  const page = options.page ?? 1
  const pageText = page <= cuts.length - 1 ? selected.slice(cuts[page - 1], cuts[page]) : ""
  return { text: pageText, page, pages, lines: { start, end, total } }
}

// ============================================================================
// Search
// ============================================================================

// ============================================================================
// Answers
// ============================================================================

/** What a recall answers. @category models */
export type RecallAnswer = Data.TaggedEnum<{
  /** A page of the source `ref` names. */
  Found: { readonly source: Omit<RecallSource, "text">; readonly page: RecallPage }
  /** No source of this session has the reference. */
  Missing: { readonly ref: string }
  /** The reference is a `tool_use_id` the session reused: the results it names, each under its own reference. */
  Ambiguous: { readonly ref: string; readonly sources: ReadonlyArray<Omit<RecallSource, "text"> & { head: string }> }
  /** A page of a search's hits, newest first. */
  Hits: {
    readonly query: string
    readonly hits: ReadonlyArray<RecallHit>
    readonly total: number
    readonly page: number
    readonly pages: number
  }
  /** The input could not be read. */
  Invalid: { readonly error: RecallInputError }
}>

/** Constructors and matchers for `RecallAnswer`. @category constructors */
export const RecallAnswer: Data.TaggedEnum.Constructor<RecallAnswer> = Data.taggedEnum<RecallAnswer>()

/** Options of `answerFromSources` and `recall`. @category models */
export interface RecallOptions {
  /** The tokens one answer holds at most; default `DEFAULT_MAX_TOKENS`. */
  readonly maxTokens?: number | undefined
  /** Lines of context each side of a search hit; default `DEFAULT_CONTEXT_LINES`. */
  readonly context?: number | undefined
}

/** The first line of `text`. */
const firstLine = (text: string): string => {
  const end = text.indexOf("\n")
  return end === -1 ? text : text.slice(0, end)
}

/** The code units an answer's header and next-page line take at most, besides a reference and a tool name. */
const ANSWER_FRAME = 160

/** A hit's size in a rendered answer, in code units. */
const hitChars = (hit: RecallHit): number => hit.ref.length + hit.excerpt.length + 64

/**
 * Answers a request from a session's sources: a page of the referenced text (`maxTokens` per page), or the page of
 * search hits that fits in `maxTokens` (pages beyond). Pure.
 * @category answers
 */
export const answerFromSources = (
  sources: ReadonlyArray<RecallSource>,
  request: RecallRequest,
  options: RecallOptions = {}
): RecallAnswer => {
  // the header and the next-page line share the cap with the text
  const maxChars = Math.max(CHARS_PER_TOKEN, (options.maxTokens ?? DEFAULT_MAX_TOKENS) * CHARS_PER_TOKEN - ANSWER_FRAME)
  if (request._tag === "ByRef") {
    const source = sourceOf(sources, request.ref)
    if (source === undefined) return RecallAnswer.Missing({ ref: request.ref })
    if ("_tag" in source) {
      return RecallAnswer.Ambiguous({
        ref: request.ref,
        sources: source.sources.map(({ opaque: _, text, ...rest }) => ({ ...rest, head: headOf(firstLine(text), 120) }))
      })
    }
    const { opaque: _, words: __, text, ...rest } = source
    // the reference is in the header and in the next-page line, the tool in the header
    const room = maxChars - 2 * JSON.stringify(source.ref).length - JSON.stringify(source.tool ?? "").length
    const page = pageOf(text, { lines: request.lines, page: request.page, maxChars: Math.max(CHARS_PER_TOKEN, room) })
    return RecallAnswer.Found({ source: rest, page })
  }
  const hits = searchSources(sources, request.query, {
    regex: request.regex,
    ...(options.context === undefined ? {} : { context: options.context })
  })
  const pages: Array<Array<RecallHit>> = [[]]
  let used = 0
  for (const hit of hits) {
    const size = hitChars(hit)
    if (used + size > maxChars && pages.at(-1)!.length > 0) {
      pages.push([])
      used = 0
    }
    pages.at(-1)!.push(hit)
    used += size
  }
  return RecallAnswer.Hits({
    query: request.query,
    hits: pages[request.page - 1] ?? [],
    total: hits.length,
    page: request.page,
    pages: pages.length
  })
}

const linesField = (page: RecallPage): string =>
  page.lines.start === 1 && page.lines.end === page.lines.total
    ? `lines=1-${page.lines.total}`
    : `lines=${page.lines.start}-${page.lines.end} of ${page.lines.total}`

/**
 * The tool_result text of an answer: a one-line header in brackets (reference, kind, tool, lines, page), then the
 * text; a line saying how to get the next page when there is one. A search lists its hits, each under its reference
 * and line. `Missing` and `Invalid` say what to do instead.
 * @category answers
 */
export const renderAnswer = (answer: RecallAnswer): string => {
  switch (answer._tag) {
    case "Found": {
      const { page, source } = answer
      const tool = source.tool === undefined ? "" : ` tool=${JSON.stringify(source.tool)}`
      const head = `[recall ref=${JSON.stringify(source.ref)} kind=${source.kind}${tool} ${linesField(page)} ` +
        `page ${page.page} of ${page.pages}]`
      const more = page.page < page.pages
        ? `\n[more: call recall with ref=${JSON.stringify(source.ref)}${
          page.lines.start === 1 && page.lines.end === page.lines.total
            ? ""
            : ` lines="${page.lines.start}-${page.lines.end}"`
        } page=${page.page + 1}]`
        : ""
      return `${head}\n${page.text}${more}`
    }
    case "Missing":
      return `[recall] No removed output or message of this conversation has ref ${JSON.stringify(answer.ref)}. ` +
        "Search with query instead."
    case "Ambiguous":
      return [
        `[recall] This conversation used the id ${JSON.stringify(answer.ref)} for ${answer.sources.length} tool ` +
        "calls: call recall with the ref of the one you want.",
        ...answer.sources.map((s) =>
          `--- ref=${JSON.stringify(s.ref)}${s.tool === undefined ? "" : ` tool=${JSON.stringify(s.tool)}`} ${
            s.removed ? "removed" : "still in the conversation"
          }: ${s.head}`
        )
      ].join("\n")
    case "Hits": {
      if (answer.total === 0) return `[recall] Nothing removed matches ${JSON.stringify(answer.query)}.`
      const head = `[recall query=${JSON.stringify(answer.query)} ${answer.total} hits, newest first, ` +
        `page ${answer.page} of ${answer.pages}]`
      const body = answer.hits.map((h) =>
        `--- ref=${JSON.stringify(h.ref)} kind=${h.kind}${
          h.tool === undefined ? "" : ` tool=${JSON.stringify(h.tool)}`
        } line ${h.line}\n${h.excerpt}`
      )
      const more = answer.page < answer.pages
        ? [`[more: call recall with the same query and page=${answer.page + 1}]`]
        : []
      return [head, ...body, ...more].join("\n")
    }
    case "Invalid":
      return `[recall] ${answer.error.detail}`
  }
}

/**
 * Answers a recall tool call's `input` from a session's entries, read by `read` only when the input is valid:
 * `Invalid` (without a read) when it cannot be decoded, else the answer of `answerFromSources` over what the entries
 * (every stored entry, oldest first) removed; a text reference no source has is answered by the text it stands for
 * (`textSourceOf`).
 * @category answers
 */
export const answerFrom = <E, R>(
  read: Effect.Effect<ReadonlyArray<Entry>, E, R>,
  input: unknown,
  options: RecallOptions = {}
): Effect.Effect<RecallAnswer, E, R> => {
  const request = decodeRecallInput(input)
  return Result.isFailure(request)
    ? Effect.succeed(RecallAnswer.Invalid({ error: request.failure }))
    : Effect.map(read, (entries) => {
      const sources = recallSources(entries)
      const asked = request.success
      // a text reference stands for a text block a summary shortened: found by its content
      const text = asked._tag === "ByRef" && sourceOf(sources, asked.ref) === undefined
        ? textSourceOf(entries, sources, asked.ref)
        : undefined
      return answerFromSources(text === undefined ? sources : [...sources, text], asked, options)
    })
}

// ============================================================================
// From the log
// ============================================================================

/**
 * The entries of session `sessionId`, read from the `SessionStore` (every line decoded; a line that does not decode
 * is skipped, as a repairing load skips it): what `recall` answers from. Reads no other session.
 * @category log
 */
export const readEntries = (sessionId: string): Effect.Effect<ReadonlyArray<Entry>, SessionLogError, SessionStore> =>
  Effect.gen(function* () {
    const store = yield* SessionStore
    const { entries } = yield* store.read(sessionId, 0)
    return entries.flatMap((stored) => {
      const decoded = decodeLine(stored.line)
      return Result.isSuccess(decoded) ? [decoded.success] : []
    })
  })

// ============================================================================
// Eviction
// ============================================================================

/**
 * What a recall call does to "files", for the eviction rules: a recall by reference reads the file
 * `recall:<ref>` (page `n` > 1 the file `recall:<ref> page=n`), with its `lines` as the range, so a later recall of
 * the same reference supersedes it as a later read of a file does; a search is `Other`.
 * @category eviction
 */
export const recallAction = (toolUse: ToolUseBlock): ToolAction => {
  const request = decodeRecallInput(toolUse.input)
  if (Result.isFailure(request) || request.success._tag !== "ByRef") return { _tag: "Other" }
  const { lines, page, ref } = request.success
  const path = page === 1 ? `recall:${ref}` : `recall:${ref} page=${page}`
  return lines === undefined ? { _tag: "Read", path } : { _tag: "Read", path, range: lines }
}

// ============================================================================
// The SDK's tool runner
// ============================================================================

/**
 * The recall tool as the SDK's tool runner takes it (`client.beta.messages.toolRunner({ tools })`): the shape
 * `betaTool` builds (`type: "custom"`, the definition, `run`, `parse`), made without loading the SDK.
 * @category tool
 */
export interface RecallRunnableTool extends Omit<RecallToolDefinition, "input_schema"> {
  readonly type: "custom"
  readonly input_schema: RecallToolDefinition["input_schema"]
  /** Answers one call: the answer's text, or a thrown `RecallInputError` the runner turns into an error result. */
  readonly run: (args: unknown) => Promise<string>
  /** The input as the model sent it (`run` checks it). */
  readonly parse: (content: unknown) => unknown
}

// ============================================================================
// Removal records, for people
// ============================================================================

/** How many refs `formatRemoval` lists before it counts the rest. */
const LISTED_REFS = 6

/**
 * One line on what a log entry removed: `compaction <id>: removed 12 messages (user 4, assistant 8), 7 tool results
 * (bash 5, read 2), ~4210 tokens; recall refs: toolu_a, toolu_b, … (+5)` (an eviction: its tool results only). Pure.
 * @category removals
 */
export const formatRemoval = (removal: Removal): string => {
  const messages = removal.removed.filter((i) => i.kind !== "tool_result")
  const results = removal.removed.filter((i) => i.kind === "tool_result")
  const tally = (names: ReadonlyArray<string>): string => {
    const counts = new Map<string, number>()
    for (const name of names) counts.set(name, (counts.get(name) ?? 0) + 1)
    return [...counts].map(([name, n]) => `${name} ${n}`).join(", ")
  }
  const parts: Array<string> = []
  if (removal.type === "compaction") {
    const roles = tally(messages.map((m) => m.kind === "summary" ? "summary" : m.role ?? "message"))
    parts.push(`${messages.length} messages${messages.length === 0 ? "" : ` (${roles})`}`)
  }
  parts.push(
    `${results.length} tool results${results.length === 0 ? "" : ` (${tally(results.map((r) => r.tool ?? "?"))})`}`
  )
  // a message's text holds its tool results: a compaction's size is its messages'
  const tokens = (removal.type === "compaction" ? messages : results).reduce((n, i) => n + i.tokens, 0)
  const refs = (results.length > 0 ? results : messages).map((i) => i.ref)
  const listed = refs.slice(0, LISTED_REFS).join(", ") +
    (refs.length > LISTED_REFS ? `, … (+${refs.length - LISTED_REFS})` : "")
  return `${removal.type} ${removal.entryId}: removed ${parts.join(", ")}, ~${tokens} tokens` +
    (refs.length === 0 ? "" : `; recall refs: ${listed}`)
}
