/**
 * Concept: the tool classifier, what a tool call reads or writes.
 *
 * What a tool call does to files. A `ToolClassifier` maps a tool_use to a read (path, optional line range), a write or
 * edit (path), or another call. Eviction uses it to find superseded reads, hot-path tracking to spot re-reads, and the
 * summary appendix to list the files a summarized prefix read and modified.
 *
 * @since 0.1.0
 */
import type { Message, ToolUseBlock } from "./Message.ts"
import {
  fields,
  finite,
  type Input,
  isSavedOutputPath,
  type LineRange,
  nonEmpty,
  offsetLimit,
  viewRange
} from "./internal/toolInput.ts"
import { isToolUse } from "./internal/blocks.ts"

/** What a tool call does to files. @category models */
export type ToolAction =
  | { readonly _tag: "Read"; readonly path: string; readonly range?: LineRange }
  | { readonly _tag: "Write"; readonly path: string }
  | { readonly _tag: "Other" }

/**
 * Maps a tool_use block to its `ToolAction`. Must be pure: the same call always classifies the same.
 * @category models
 */
export type ToolClassifier = (toolUse: ToolUseBlock) => ToolAction

const OTHER: ToolAction = { _tag: "Other" }

/** A read of `path`; a read of the SDK `bash` tool's saved output is none (its temp file is gone soon after). */
const read = (path: string | undefined, range?: LineRange): ToolAction =>
  path === undefined || isSavedOutputPath(path)
    ? OTHER
    : range === undefined
    ? { _tag: "Read", path }
    : { _tag: "Read", path, range }

const write = (path: string | undefined): ToolAction => path === undefined ? OTHER : { _tag: "Write", path }

/** Anthropic's text editor tool: `view` reads, `create` / `str_replace` / `insert` / `undo_edit` write. */
const textEditor = (input: Input): ToolAction => {
  const command = nonEmpty(input.command)
  if (command === "view") return read(nonEmpty(input.path), viewRange(input))
  if (command === "create" || command === "str_replace" || command === "insert" || command === "undo_edit") {
    return write(nonEmpty(input.path))
  }
  return OTHER
}

/** Claude Code's `Write`, `Edit` and `MultiEdit`. */
const fileWrite = (input: Input): ToolAction => write(nonEmpty(input.file_path))

/** pi's and the plain `read` / `read_file`, and the SDK agent toolset's `read { file_path, view_range? }`. */
const plainRead = (input: Input): ToolAction =>
  read(nonEmpty(input.path) ?? nonEmpty(input.file_path), offsetLimit(input) ?? viewRange(input))

/**
 * pi's and the plain `write` / `edit` / `write_file` / `edit_file`, SWE-agent's `create`, and the SDK agent toolset's
 * `write { file_path, content }` and `edit { file_path, old_string, new_string, replace_all? }`.
 */
const plainWrite = (input: Input): ToolAction =>
  write(nonEmpty(input.path) ?? nonEmpty(input.file_path) ?? nonEmpty(input.filename))

/** SWE-agent shows a window around `line_number`: only an identical `open` (or a whole-file read) covers it. */
const openWindow = (input: Input): ToolAction => {
  const line = Math.max(1, finite(input.line_number) ?? 1)
  return read(nonEmpty(input.path) ?? nonEmpty(input.file), { start: line, end: line })
}

/** The classification of each known tool's input, by tool name (one lookup instead of a chain of name comparisons). */
const KNOWN_TOOLS: ReadonlyMap<string, (input: Input) => ToolAction> = new Map([
  ["Read", (input: Input) => read(nonEmpty(input.file_path), offsetLimit(input))],
  ["Write", fileWrite],
  ["Edit", fileWrite],
  ["MultiEdit", fileWrite],
  ["NotebookEdit", (input: Input) => write(nonEmpty(input.notebook_path))],
  ["str_replace_based_edit_tool", textEditor],
  ["str_replace_editor", textEditor],
  ["read", plainRead],
  ["read_file", plainRead],
  ["open", openWindow],
  ["write", plainWrite],
  ["edit", plainWrite],
  ["write_file", plainWrite],
  ["edit_file", plainWrite],
  ["create", plainWrite]
])

/**
 * The default classifier. It knows:
 * - Claude Code: `Read` (file_path, offset, limit), `Write`, `Edit`, `MultiEdit`, `NotebookEdit`;
 * - Anthropic's text editor tool (`str_replace_based_edit_tool`, `str_replace_editor`): `view` (with `view_range`)
 *   reads, `create` / `str_replace` / `insert` / `undo_edit` write;
 * - pi: `read` (path, offset, limit), `write`, `edit`;
 * - the SDK agent toolset: `read` (file_path, view_range), `write`, `edit`; `bash` is `Other`, and a
 *   read of the temp file `bash` saved a long output to is `Other` too (never listed as a file read);
 * - plain `read_file` / `write_file` / `edit_file`;
 * - SWE-agent: `open` (a read of the window around `line_number`), `create` and `edit`.
 *
 * Every other tool is `Other`.
 * @category classifiers
 */
export const defaultToolClassifier: ToolClassifier = (toolUse): ToolAction => {
  const input = fields(toolUse.input)
  const classify = input === undefined ? undefined : KNOWN_TOOLS.get(toolUse.name)
  return classify === undefined ? OTHER : classify(input!)
}

/** The files a conversation read and the files it modified, each in order of first appearance. @category models */
export interface FilesTouched {
  /** Files read and never modified, in order of first appearance. */
  readonly read: ReadonlyArray<string>
  /** Files written or edited, in order of first appearance. */
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
