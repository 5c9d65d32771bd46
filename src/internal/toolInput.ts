/**
 * Reading a tool call's input, below `Tools`: its fields by name, its line ranges (`LineRange`), whether one covers
 * another, and a call's short one-line form. Shared by the classifier (`Tools`) and the eviction's pointers;
 * it imports nothing of `Tools`.
 *
 * @internal
 */
import type { ToolUseBlock } from "../Message.ts"
import { clipEnd, oneLineHead } from "./text.ts"

/** A line range of a read, 1-based and inclusive; `end` absent means to the end of the file (`Tools.LineRange`). */
export interface LineRange {
  readonly start: number
  readonly end?: number
}

/**
 * A tool input's fields as the classifier reads them. Each is read by name at its own site (a property load the
 * engine caches per input shape), not through a shared lookup by a variable key.
 */
export interface Input {
  readonly command?: unknown
  readonly cmd?: unknown
  readonly path?: unknown
  readonly file_path?: unknown
  readonly file?: unknown
  readonly filename?: unknown
  readonly notebook_path?: unknown
  readonly pattern?: unknown
  readonly query?: unknown
  readonly url?: unknown
  readonly offset?: unknown
  readonly limit?: unknown
  readonly line_number?: unknown
  readonly view_range?: unknown
}

/** The shortest path `SAVED_OUTPUT` matches: a separator, `bash-output-`, a character, a separator, a uuid, `.txt`. */
const SAVED_OUTPUT_MIN_LENGTH = 1 + 12 + 1 + 1 + 36 + 4

const SAVED_OUTPUT = /[/\\]bash-output-[^/\\]+[/\\][0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.txt$/i

/**
 * True for the temp file the SDK agent toolset's `bash` saves a long output to (the SDK's docs:
 * `<tmpdir>/bash-output-XXXXXX/<uuid>.txt`, deleted when the next long output is saved): never a file to re-read.
 */
export const isSavedOutputPath = (path: string): boolean =>
  path.length >= SAVED_OUTPUT_MIN_LENGTH && SAVED_OUTPUT.test(path)

/** The input as an object to read fields of, or `undefined` when it is not one. */
export const fields = (input: unknown): Input | undefined =>
  typeof input === "object" && input !== null ? input as Input : undefined

/** `value` when it is a non-empty string. */
export const nonEmpty = (value: unknown): string | undefined =>
  typeof value === "string" && value.length > 0 ? value : undefined

/** `value` when it is a finite number. */
export const finite = (value: unknown): number | undefined =>
  typeof value === "number" && Number.isFinite(value) ? value : undefined

/** An `offset` (first line, 1-based) plus `limit` (line count) read, as Claude Code and pi send it. */
export const offsetLimit = (input: Input): LineRange | undefined => {
  const offset = finite(input.offset)
  const limit = finite(input.limit)
  if (offset === undefined && limit === undefined) return undefined
  const start = Math.max(1, offset ?? 1)
  return limit === undefined ? { start } : { start, end: start + Math.max(0, limit) - 1 }
}

/**
 * The `view_range` of Anthropic's text editor tool and of the SDK agent toolset's `read`: `[start, end]`,
 * 1-based and inclusive, or `[start]` (or an end of 0 or less, or before the start) to the end.
 */
export const viewRange = (input: Input): LineRange | undefined => {
  const range = input.view_range
  if (!Array.isArray(range) || typeof range[0] !== "number") return undefined
  const end = range[1]
  return typeof end === "number" && end >= range[0] ? { start: range[0], end } : { start: range[0] }
}

/** The length `Tools.shortInput` clips to by default, and an eviction's pointers to. */
export const SHORT_INPUT_MAX = 120

/**
 * The one line `Tools.shortInput` clips to `max`: the command, path, pattern, query or URL when there is one (with its
 * line range), otherwise the input's JSON, folded to one line from its first `max * 4` code units and only as far as
 * the clip reads (at most `max` code units, or longer than `max` when it is to be clipped). An eviction clips it
 * itself, to escape the kept head alone.
 */
export const inputLine = (toolUse: ToolUseBlock, max: number): string => {
  const input = toolUse.input
  const f = fields(input)
  const key = f === undefined ?
    undefined :
    nonEmpty(f.command) ?? nonEmpty(f.cmd) ?? nonEmpty(f.file_path) ?? nonEmpty(f.path) ??
      nonEmpty(f.pattern) ?? nonEmpty(f.query) ?? nonEmpty(f.url) ?? nonEmpty(f.notebook_path)
  const raw = key ?? (input === undefined ? "" : JSON.stringify(input) ?? "")
  // folded from its first max * 4 code units, and only as far as the clip to max reads
  let text = oneLineHead(raw, max * 4, max)
  if (key !== undefined) {
    const range = offsetLimit(f!) ?? viewRange(f!)
    if (range !== undefined) text += `:${range.start}-${range.end ?? ""}`
  }
  return text
}

/**
 * True when range `outer` contains range `inner` (an absent range is the whole file). @category ranges
 */
export const covers = (outer: LineRange | undefined, inner: LineRange | undefined): boolean => {
  if (outer === undefined) return true
  if (inner === undefined) return false
  const outerEnd = outer.end ?? Infinity
  const innerEnd = inner.end ?? Infinity
  return outer.start <= inner.start && innerEnd <= outerEnd
}

/**
 * A short, single-line form of a tool call's input: the command, path, pattern, query or URL when there is one,
 * otherwise the input's JSON, clipped to `max` characters. Deterministic.
 * @category formatting
 */
export const shortInput = (toolUse: ToolUseBlock, max = SHORT_INPUT_MAX): string =>
  clipEnd(inputLine(toolUse, max), max) // never splits a surrogate pair
