/**
 * What a tool call does to files. A `ToolClassifier` maps a tool_use to a read (path, optional line range), a write or
 * edit (path), or another call. Eviction uses it to find superseded reads, hot-path tracking to spot re-reads, and the
 * summary appendix to list the files a summarized prefix read and modified.
 *
 * @since 0.1.0
 */
import type { Message, ToolUseBlock } from "./Message.ts"
import { clipEnd, oneLineHead } from "./internal/text.ts"
import { isToolUse } from "./Message.ts"

/** A line range of a read, 1-based and inclusive; `end` absent means to the end of the file. @category models */
export interface LineRange {
  readonly start: number
  readonly end?: number
}

/** What a tool call does to files. @category models */
export type ToolAction =
  | { readonly _tag: "Read"; readonly path: string; readonly range?: LineRange }
  | { readonly _tag: "Write"; readonly path: string }
  | { readonly _tag: "Other" }

/** Maps a tool_use block to its `ToolAction`. Must be pure: the same call always classifies the same. @category models */
export type ToolClassifier = (toolUse: ToolUseBlock) => ToolAction

const OTHER: ToolAction = { _tag: "Other" }

const str = (input: unknown, ...keys: ReadonlyArray<string>): string | undefined => {
  if (typeof input !== "object" || input === null) return undefined
  for (const key of keys) {
    const value = (input as Record<string, unknown>)[key]
    if (typeof value === "string" && value.length > 0) return value
  }
  return undefined
}

const num = (input: unknown, key: string): number | undefined => {
  const value = typeof input === "object" && input !== null ? (input as Record<string, unknown>)[key] : undefined
  return typeof value === "number" && Number.isFinite(value) ? value : undefined
}

const read = (path: string | undefined, range?: LineRange): ToolAction =>
  path === undefined ? OTHER : range === undefined ? { _tag: "Read", path } : { _tag: "Read", path, range }

const write = (path: string | undefined): ToolAction => path === undefined ? OTHER : { _tag: "Write", path }

/** An `offset` (first line, 1-based) plus `limit` (line count) read, as Claude Code and pi send it. */
const offsetLimit = (input: unknown): LineRange | undefined => {
  const offset = num(input, "offset")
  const limit = num(input, "limit")
  if (offset === undefined && limit === undefined) return undefined
  const start = Math.max(1, offset ?? 1)
  return limit === undefined ? { start } : { start, end: start + Math.max(0, limit) - 1 }
}

const viewRange = (input: unknown): LineRange | undefined => {
  const range = typeof input === "object" && input !== null ? (input as Record<string, unknown>).view_range : undefined
  if (!Array.isArray(range) || typeof range[0] !== "number") return undefined
  const end = range[1]
  return typeof end === "number" && end >= range[0] ? { start: range[0], end } : { start: range[0] }
}

/**
 * The default classifier. It knows:
 * - Claude Code: `Read` (file_path, offset, limit), `Write`, `Edit`, `MultiEdit`, `NotebookEdit`;
 * - Anthropic's text editor tool (`str_replace_based_edit_tool`, `str_replace_editor`): `view` (with `view_range`)
 *   reads, `create` / `str_replace` / `insert` / `undo_edit` write;
 * - pi: `read` (path, offset, limit), `write`, `edit`;
 * - plain `read_file` / `write_file` / `edit_file`;
 * - SWE-agent: `open` (a read of the window around `line_number`), `create` and `edit`.
 *
 * Every other tool is `Other`.
 * @category classifiers
 */
export const defaultToolClassifier: ToolClassifier = (toolUse) => {
  const input = toolUse.input
  switch (toolUse.name) {
    case "Read":
      return read(str(input, "file_path"), offsetLimit(input))
    case "Write":
    case "Edit":
    case "MultiEdit":
      return write(str(input, "file_path"))
    case "NotebookEdit":
      return write(str(input, "notebook_path"))
    case "str_replace_based_edit_tool":
    case "str_replace_editor": {
      const command = str(input, "command")
      if (command === "view") return read(str(input, "path"), viewRange(input))
      if (command === "create" || command === "str_replace" || command === "insert" || command === "undo_edit") {
        return write(str(input, "path"))
      }
      return OTHER
    }
    case "read":
    case "read_file":
      return read(str(input, "path", "file_path"), offsetLimit(input))
    case "open": {
      // SWE-agent shows a window around `line_number`: only an identical `open` (or a whole-file read) covers it
      const line = Math.max(1, num(input, "line_number") ?? 1)
      return read(str(input, "path", "file"), { start: line, end: line })
    }
    case "write":
    case "edit":
    case "write_file":
    case "edit_file":
    case "create":
      return write(str(input, "path", "file_path", "filename"))
    default:
      return OTHER
  }
}

/** True when range `outer` contains range `inner` (an absent range is the whole file). @category ranges */
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
export const shortInput = (toolUse: ToolUseBlock, max = 120): string => {
  const input = toolUse.input
  const key = str(input, "command", "cmd", "file_path", "path", "pattern", "query", "url", "notebook_path")
  const raw = key ?? (input === undefined ? "" : JSON.stringify(input) ?? "")
  // folded from its first max * 4 code units, and only as far as the clip to max reads
  let text = oneLineHead(raw, max * 4, max)
  if (key !== undefined && typeof input === "object" && input !== null) {
    const range = offsetLimit(input) ?? viewRange(input)
    if (range !== undefined) text += `:${range.start}-${range.end ?? ""}`
  }
  return clipEnd(text, max) // never splits a surrogate pair
}

/** The files a conversation read and the files it modified, each in order of first appearance. @category models */
export interface FilesTouched {
  readonly read: ReadonlyArray<string>
  readonly modified: ReadonlyArray<string>
}

/**
 * Lists the files read and modified by the tool calls in `messages`, in order of first appearance, without duplicates.
 * A file that was modified is listed under `modified` only.
 * @category classifiers
 */
export const filesTouched = (
  messages: ReadonlyArray<Message>,
  classify: ToolClassifier = defaultToolClassifier
): FilesTouched => {
  const readSet = new Set<string>()
  const modifiedSet = new Set<string>()
  for (const message of messages) {
    if (message.role !== "assistant" || typeof message.content === "string") continue
    for (const block of message.content) {
      if (!isToolUse(block)) continue
      const action = classify(block)
      if (action._tag === "Read") readSet.add(action.path)
      else if (action._tag === "Write") modifiedSet.add(action.path)
    }
  }
  return { read: [...readSet].filter((path) => !modifiedSet.has(path)), modified: [...modifiedSet] }
}
