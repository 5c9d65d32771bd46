/**
 * The summary message, its file appendix and its manifest, with the plumbing `Compact` and the conversation build them
 * with (the budget, the next manifest, the summary text with its manifest and appendix). `Summary` re-exports what a
 * user reads and writes; the rest is the library's own.
 *
 * @internal
 */
import {
  type Anchor,
  ANCHOR_LIMITS,
  caselessKind,
  checklistItems,
  clipped,
  commandOf,
  type CommandOutcome,
  errorLine,
  firstLine,
  type IdentifierAnchor,
  identifiersOf,
  normalize,
  printedValues,
  resultText,
  spanAnchors,
  textOf,
  todoItems
} from "./anchors.ts"
import { LEADING_USER_TEXT, MISSING_RESULT_TEXT } from "./repair.ts"
import { clipEnd, headOf, tailOf } from "./text.ts"
import type { Message, ToolResultBlock, ToolUseBlock } from "../Message.ts"
import { MAX_POINTER_LENGTH, parsePointer } from "./pointer.ts"
import { estimateTokens } from "../Tokens.ts"
import { defaultToolClassifier, type FilesTouched, type ToolClassifier } from "../Tools.ts"
import { isHumanMessage } from "../Turns.ts"
import type { BuiltMessage } from "./wireTypes.ts"
import { isText, isToolResult, isToolUse } from "./blocks.ts"
import { wordsRef } from "./userWords.ts"
import { CHARS_PER_TOKEN } from "./estimate.ts"
import { textRef } from "./textRef.ts"
import { briefCommand, omittedRuns, parseOmittedRuns, SUMMARY_TRAIL_SHARE } from "./commandTrail.ts"

/**
 * The longest summary, in tokens: 8,192. It is the `max_tokens` a summarizer asks for by default, and the cap the
 * simulator puts on a simulated summary, so both count the same room for the summary.
 * @category constants
 */
export const DEFAULT_SUMMARY_MAX_TOKENS = 8192

// ============================================================================
// The summary message
// ============================================================================

/** The first line of every summary message; it is how a later compaction finds an earlier summary. @category constants */
export const SUMMARY_HEADER = "[Summary of the earlier conversation]"

const SUMMARY_PREAMBLE = "This message was written by the context compactor, not by the user. It summarizes the " +
  "earlier part of this conversation, which was removed to fit the context window. It is background for continuing " +
  "the work, not a new instruction: follow the most recent user messages below."

/**
 * The user-role message injected in place of a summarized prefix. It says plainly that it is a summary of earlier
 * conversation and not new instructions. It is assignable to the SDK's `MessageParam`.
 * @category constructors
 */
export const summaryMessage = (summaryText: string): BuiltMessage => ({
  role: "user",
  content: [{ type: "text", text: `${SUMMARY_HEADER}\n${SUMMARY_PREAMBLE}\n\n${summaryText}` }]
})

/**
 * The summary text of a message built by `summaryMessage` (appendix included), or `undefined` for any other message.
 * @category guards
 */
export const summaryText = (message: Message): string | undefined => {
  if (message.role !== "user") return undefined
  const first = typeof message.content === "string" ? message.content : message.content[0]
  const text = typeof first === "string" ? first : first !== undefined && isText(first) ? first.text : undefined
  if (text === undefined || !text.startsWith(`${SUMMARY_HEADER}\n`)) return undefined
  const body = text.slice(SUMMARY_HEADER.length + 1)
  return body.startsWith(`${SUMMARY_PREAMBLE}\n\n`) ? body.slice(SUMMARY_PREAMBLE.length + 2) : body
}

/**
 * The first line of the files message: the user message that follows a server compaction block (`filesMessage`).
 * @category constants
 */
export const FILES_HEADER = "[Files of the earlier conversation]"

/**
 * The user-role message that follows a server compaction block opening a view: the block's summary is the server's
 * and is sent back verbatim, so the deterministic file lists (`renderAppendix`) travel in this message instead, and a
 * later compaction carries them forward (`filesOfMessage`). Assignable to the SDK's `MessageParam`. Within `maxTokens`
 * when given (`filesRoom`: what the summary's budget leaves beside the server's summary), the newest paths, modified
 * ones first, are listed and the others counted (unless even the bare message, every path counted, is over it);
 * without it, the newest `APPENDIX_MAX_FILES` of each list.
 * @category constructors
 */
export const filesMessage = (files: FileLists, maxTokens?: number): BuiltMessage => {
  const message = (keep: KeptFiles): BuiltMessage => ({
    role: "user",
    content: [{ type: "text", text: `${FILES_HEADER}\n${renderKept(files, keep)}` }]
  })
  if (maxTokens === undefined) return message({ read: APPENDIX_MAX_FILES, modified: APPENDIX_MAX_FILES })
  const keep = { read: 0, modified: 0 }
  // the estimate counts characters (`Tokens`): the bare message's tokens, then the characters each path adds
  let room = (maxTokens - estimateTokens([message(keep)])) * CHARS_PER_TOKEN
  for (const kind of ["modified", "read"] as const) {
    const list = files[kind]
    const counted = (files.omitted?.[kind] ?? 0) > 0
    for (let i = list.length - 1; i >= 0; i--) {
      // the last path of a list with nothing else left out takes the omitted line's place
      const cost = pathLine(kind, list[i]!).length + 1 - (i === 0 && !counted ? omittedPaths(kind, 1).length + 1 : 0)
      if (cost > room) break
      room -= cost
      keep[kind]++
    }
    if (keep[kind] < list.length) break
  }
  // the estimate per path is close, not exact: the oldest listed path goes until the message fits
  while (estimateTokens([message(keep)]) > maxTokens && keep.read + keep.modified > 0) {
    if (keep.read > 0) keep.read--
    else keep.modified--
  }
  return message(keep)
}

/**
 * The tokens the files message after a server's compaction block may take (`filesMessage`): what the summary's budget
 * (`budgetTokens`, `CompactionPolicy#summaryBudgetTokens`) leaves beside the server's summary (`summaryTokens`), and
 * never less than the files list's share of a summary of ours (`SUMMARY_FILES_SHARE` of what the model's text leaves),
 * so a server summary at or over the budget still lets the newest paths be listed.
 * @category appendix
 */
export const filesRoom = (budgetTokens: number, summaryTokens: number): number =>
  Math.max(Math.floor((budgetTokens - textReserve(budgetTokens)) * SUMMARY_FILES_SHARE), budgetTokens - summaryTokens)

/**
 * The file lists of a message built by `filesMessage`, or `undefined` for any other message.
 * @category guards
 */
export const filesOfMessage = (message: Message): FilesTouched | undefined => {
  if (message.role !== "user" || typeof message.content === "string" || message.content.length !== 1) return undefined
  const first = message.content[0]!
  if (!isText(first) || !first.text.startsWith(`${FILES_HEADER}\n`)) return undefined
  return splitAppendix(first.text.slice(FILES_HEADER.length + 1)).files
}

// ============================================================================
// Deterministic appendix
// ============================================================================

const APPENDIX_OPEN = '<compaction-files version="1">'
const APPENDIX_CLOSE = "</compaction-files>"
const APPENDIX_INTRO = "Files touched so far (computed from the conversation by code, not written by the model):"

/**
 * The most paths of each list an appendix keeps (the newest); the rest are counted. @category constants
 */
export const APPENDIX_MAX_FILES = 300

/**
 * The file lists a summary carries: the paths it lists, and how many more of each list an earlier summary left out
 * (counted, not listed; absent when none was).
 * @category models
 */
export interface FileLists extends FilesTouched {
  /** How many paths of each list an earlier summary left out for room, when any. */
  readonly omitted?: { readonly read: number; readonly modified: number } | undefined
}

/**
 * An empty `FilesTouched`. @category constructors
 */
export const noFiles: FilesTouched = { read: [], modified: [] }

/**
 * Merges an earlier summary's lists with the head's: order of first appearance, no duplicates, and a path modified in
 * either is listed under `modified` only; the counts of paths left out add up. `mergeFiles(noFiles, x)` lists the
 * same paths as `x`.
 * @category appendix
 */
export const mergeFiles = (earlier: FileLists, later: FileLists): FileLists => {
  const modified = new Set([...earlier.modified, ...later.modified])
  const read = new Set([...earlier.read, ...later.read].filter((path) => !modified.has(path)))
  const omitted = {
    read: (earlier.omitted?.read ?? 0) + (later.omitted?.read ?? 0),
    modified: (earlier.omitted?.modified ?? 0) + (later.omitted?.modified ?? 0)
  }
  return omitted.read + omitted.modified === 0
    ? { read: [...read], modified: [...modified] }
    : { read: [...read], modified: [...modified], omitted }
}

/** How many paths of each list an appendix keeps: the newest that many. */
interface KeptFiles {
  readonly read: number
  readonly modified: number
}

/**
 * The deterministic appendix that ends a summary message: an intro line and a `<compaction-files version="1">` block
 * with one line per path, `read "<json string>"` or `modified "<json string>"`. Paths are JSON strings, so any path
 * (newlines, quotes, tags) fits on one line and `parseAppendix` gets it back exactly. At most `maxFiles` paths per
 * list are kept (the newest); the count of the others (with those an earlier summary left out) is written first, as
 * `read-omitted N: …` / `modified-omitted N: …`, with the way back to them.
 * @category appendix
 */
export const renderAppendix = (files: FileLists, maxFiles: number = APPENDIX_MAX_FILES): string =>
  renderKept(files, { read: maxFiles, modified: maxFiles })

/** `renderAppendix` keeping the newest `keep.read` read paths and `keep.modified` modified ones. */
const renderKept = (files: FileLists, keep: KeptFiles): string => {
  const lines = [APPENDIX_INTRO, APPENDIX_OPEN]
  for (const kind of ["read", "modified"] as const) {
    const list = files[kind]
    const kept = list.slice(Math.max(0, list.length - Math.max(0, keep[kind])))
    const left = list.length - kept.length + (files.omitted?.[kind] ?? 0)
    if (left > 0) lines.push(omittedPaths(kind, left))
    for (const path of kept) lines.push(pathLine(kind, path))
  }
  lines.push(APPENDIX_CLOSE)
  return lines.join("\n")
}

const pathLine = (kind: "read" | "modified", path: string): string => `${kind} ${JSON.stringify(path)}`

/** The line that counts the paths of a list left out, and says how to get them back. */
const omittedPaths = (kind: "read" | "modified", count: number): string =>
  `${kind}-omitted ${count}: the oldest paths, left out for room; a \`recall\` query with a path finds its calls`

const ENTRY = /^(read|modified) ("(?:[^"\\]|\\.)*")$/
const OMITTED = /^(read|modified)-omitted (\d+)(?::.*)?$/

/**
 * Splits a summary text into its body and the lists of its appendix. Only an appendix at the very end counts (after
 * it, only whitespace), so a block the model imitated inside its own text is never read as the real one; when the end
 * is not a well-formed appendix, `files` is `undefined` and `body` is the whole text.
 * @category appendix
 */
export const splitAppendix = (text: string): { readonly body: string; readonly files: FileLists | undefined } => {
  const trimmed = text.trimEnd()
  if (!trimmed.endsWith(APPENDIX_CLOSE)) return { body: text, files: undefined }
  const open = trimmed.lastIndexOf(`\n${APPENDIX_OPEN}\n`)
  const start = open === -1 ? (trimmed.startsWith(`${APPENDIX_OPEN}\n`) ? 0 : -1) : open + 1
  if (start === -1) return { body: text, files: undefined }
  const inner = trimmed.slice(start + APPENDIX_OPEN.length + 1, trimmed.length - APPENDIX_CLOSE.length)
  const read: Array<string> = []
  const modified: Array<string> = []
  const omitted = { read: 0, modified: 0 }
  for (const line of inner.split("\n")) {
    if (line.length === 0) continue
    const left = OMITTED.exec(line)
    if (left !== null) {
      omitted[left[1] as "read" | "modified"] += Number(left[2])
      continue
    }
    const match = ENTRY.exec(line)
    if (match === null) return { body: text, files: undefined }
    let path: unknown
    try {
      path = JSON.parse(match[2]!)
    } catch {
      return { body: text, files: undefined }
    }
    if (typeof path !== "string") return { body: text, files: undefined }
    ;(match[1] === "read" ? read : modified).push(path)
  }
  let body = trimmed.slice(0, start)
  if (body.endsWith(`${APPENDIX_INTRO}\n`)) body = body.slice(0, body.length - APPENDIX_INTRO.length - 1)
  const files = omitted.read + omitted.modified === 0 ? { read, modified } : { read, modified, omitted }
  return { body: body.trimEnd(), files }
}

/**
 * The file lists of the appendix that ends `summaryText`, or `undefined` when it has none. @category appendix
 */
export const parseAppendix = (summaryText: string): FileLists | undefined => splitAppendix(summaryText).files

/**
 * `summaryText` without its trailing appendix (unchanged when it has none). @category appendix
 */
export const stripAppendix = (summaryText: string): string => splitAppendix(summaryText).body

// ============================================================================
// The manifest: what a summary keeps by rule
// ============================================================================

/**
 * The kinds of manifest entry, in the order a manifest lists them: the user's instructions, the assistant's latest
 * status board, errors, the latest plan, commands (with the values their latest successful run printed),
 * identifiers, and the latest known content of recently modified files.
 * @category constants
 */
export const MANIFEST_KINDS = [
  "instruction",
  "status",
  "error",
  "plan",
  "command",
  "identifier",
  "file"
] as const

/** A kind of manifest entry. @category models */
export type ManifestKind = typeof MANIFEST_KINDS[number]

/**
 * One entry of a manifest. `age` counts the compactions since it was last seen in a summarized span (0: the span
 * just summarized); `text` is exact (an instruction or plan item verbatim, up to its cap; a command's first line; an
 * error line; an identifier; a file's path).
 * @category models
 */
export type ManifestEntry =
  | {
    readonly kind: "instruction"
    readonly text: string
    readonly age: number
    /**
     * The reference `Recall.recall` gives the whole message back by: `msg_` and a digest of its words (absent in a
     * summary written before instructions carried one).
     */
    readonly ref?: string
    /**
     * The conversation's first task statement (`first`: the user's first message), or the message that opened the
     * turn still running (`turn`): kept before every other entry.
     */
    readonly task?: "first" | "turn"
  }
  | { readonly kind: "status" | "plan" | "identifier"; readonly text: string; readonly age: number }
  | {
    readonly kind: "error"
    readonly text: string
    readonly age: number
    /** The command, or the tool and path, whose failed result it was. */
    readonly source: string
    /** A later call of the same `source` succeeded. */
    readonly resolved: boolean
    /** The tool_use_id of the failed result (the reference `Recall.recall` answers), when it is known. */
    readonly ref?: string
  }
  | {
    readonly kind: "command"
    readonly text: string
    readonly age: number
    readonly runs: number
    readonly failures: number
    readonly last: CommandOutcome
    /** The lines with values (counts, versions, ids) its latest successful run printed, joined by ` | `. */
    readonly printed?: string
    /** The tool_use_id of its latest answered run (the reference `Recall.recall` answers), when it is known. */
    readonly ref?: string
    /**
     * Kept in its short form (`briefCommand`: its leading `cd` dropped, clipped), with its runs and last outcome (no
     * failures counted), and its ref and what it printed where the room allowed.
     */
    readonly brief?: true
  }
  | {
    readonly kind: "file"
    readonly text: string
    readonly age: number
    /** The file's latest known content, or `undefined` when unknown or over `MANIFEST_FILE_CONTENT_MAX`. */
    readonly content: string | undefined
  }

/**
 * What a summary keeps by rule, computed by code from the summarized messages (`nextManifest`): entries grouped by
 * kind in `MANIFEST_KINDS` order, newest first within a kind (identifiers: the most mentioned first).
 * @category models
 */
export interface Manifest {
  /**
   * The kept entries, grouped by kind in `MANIFEST_KINDS` order, newest first within a kind (identifiers: the most
   * mentioned first).
   */
  readonly entries: ReadonlyArray<ManifestEntry>
  /** The user's messages left out for room (their line follows the instructions), when any was. */
  readonly omitted?: OmittedMessages | undefined
  /**
   * How many runs of commands were left out for room, not even in short form (their line follows the commands), when
   * any was.
   */
  readonly omittedRuns?: number | undefined
}

/**
 * The user's messages a summary left out of its manifest for room: the references `Recall.recall` gives each back by
 * (`msg_…`; the tasks first, then newest first), and how many more it left out without naming them.
 * @category models
 */
export interface OmittedMessages {
  /** The references of the left-out messages. */
  readonly refs: ReadonlyArray<string>
  /** How many more were left out unnamed: no reference known, or past the room the references may take. */
  readonly unnamed: number
}

/**
 * The longest instruction kept, in code units; a longer one keeps its head and `…`. @category constants
 */
export const MANIFEST_INSTRUCTION_MAX = 1_000

/**
 * The longest plan item kept, in code units. @category constants
 */
export const MANIFEST_PLAN_ITEM_MAX = 500

/**
 * The most recently modified files whose latest content a manifest may carry. @category constants
 */
export const MANIFEST_MAX_FILES = 3

/**
 * The longest file content a manifest carries, in code units; above it, the path only. @category constants
 */
export const MANIFEST_FILE_CONTENT_MAX = 4_000

const MANIFEST_OPEN = '<compaction-manifest version="1">'
const MANIFEST_CLOSE = "</compaction-manifest>"
const INTRO_BEFORE_TRAIL =
  "A record of the earlier conversation, kept by rule (computed from it by code, not written " +
  "by the model). Each line: what it is, how many compactions ago it was last seen (0: in the part just summarized), " +
  "the exact text as a JSON string. An instruction is a message the user wrote, quoted in the user's own words " +
  "(newest first; a long one as its head and its tail); a status is the assistant's own latest status board and a " +
  "command what the assistant ran (with what it printed): neither is the user's. They describe the past: the most " +
  "recent messages after this summary come first. A file's latest known content follows its line. A command or " +
  "error line may end with [ref id]: the id of the tool call whose output it was; an instruction's [ref id] gives " +
  "back its whole message. `first task` marks the user's first message, `turn task` the one that opened the turn " +
  "still running. The line `omitted N user messages` names those left out for room: `recall` with a ref gives one " +
  "back whole, and a `recall` query finds the others."

const MANIFEST_INTRO = INTRO_BEFORE_TRAIL + " A command with no colon after its count is in short form: its leading " +
  "`cd` dropped, clipped."

/** The intros of earlier versions, still recognized when a summary is split. */
const EARLIER_INTROS: ReadonlyArray<string> = [
  INTRO_BEFORE_TRAIL,
  "A record of the earlier conversation, kept by rule (computed from it by code, not written " +
  "by the model). Each line: what it is, how many compactions ago it was last seen (0: in the part just summarized), " +
  "the exact text as a JSON string. An instruction is a message the user wrote, quoted in the user's own words " +
  "(newest first; a long one as its head and its tail); a status is the assistant's own latest status board and a " +
  "command what the assistant ran (with what it printed): neither is the user's. They describe the past: the most " +
  "recent messages after this summary come first. A file's latest known content follows its line. A command or " +
  "error line may end with [ref id]: the id of the tool call whose output it was.",
  "A record of the earlier conversation, kept by rule (computed from it by code, not written " +
  "by the model). Each line: what it is, how many compactions ago it was last seen (0: in the part just summarized), " +
  "the exact text as a JSON string. An instruction is a message the user wrote, quoted in the user's own words " +
  "(newest first; a long one as its head and its tail); a status is the assistant's own latest status board and a " +
  "command what the assistant ran (with what it printed): neither is the user's. They describe the past: the most " +
  "recent messages after this summary come first. A file's latest known content follows its line.",
  "Kept by rule (computed from the conversation by code, not written by the model). Each line: what it is, how " +
  "many compactions ago it was last seen (0: in the part just summarized), the exact text as a JSON string. " +
  "Instructions are the user's own words, newest first; a file's latest known content follows its line."
]

/** The summary, files and leading messages the library writes in the user's role. */
const isLibraryMessage = (message: Message): boolean =>
  summaryText(message) !== undefined || filesOfMessage(message) !== undefined ||
  normalize(textOf(message)) === LEADING_USER_TEXT

/** The source of a tool call for resolving its errors: its command's first line, or its name and path. */
const sourceOf = (toolUse: ToolUseBlock, classifier: ToolClassifier): string => {
  const command = commandOf(toolUse)
  if (command !== undefined) return clipped(firstLine(command), ANCHOR_LIMITS.command)
  const action = classifier(toolUse)
  return action._tag === "Other" ? toolUse.name : `${toolUse.name} ${normalize(action.path)}`
}

/** The first string field of `input` among `names`. */
const stringField = (input: unknown, names: ReadonlyArray<string>): string | undefined => {
  if (typeof input !== "object" || input === null) return undefined
  const fields = input as Record<string, unknown>
  for (const name of names) if (typeof fields[name] === "string") return fields[name]
  return undefined
}

/**
 * A file's content after a write call, from its content before (`undefined`: unknown): a full write gives it, an
 * edit that replaces a string found exactly once applies to a known content; anything else makes it unknown.
 */
const contentAfter = (toolUse: ToolUseBlock, before: string | undefined): string | undefined => {
  const full = stringField(toolUse.input, ["content", "file_text"])
  if (full !== undefined) return full
  const oldText = stringField(toolUse.input, ["oldText", "old_string", "old_str"])
  const newText = stringField(toolUse.input, ["newText", "new_string", "new_str"])
  if (before === undefined || oldText === undefined || newText === undefined || oldText.length === 0) return undefined
  const at = before.indexOf(oldText)
  if (at === -1 || before.indexOf(oldText, at + 1) !== -1) return undefined
  return before.slice(0, at) + newText + before.slice(at + oldText.length)
}

/** `text` up to `max` code units: itself, or its head and `…` (whose folded form still starts like the text's). */
const verbatim = (text: string, max: number): string => clipEnd(text.trim(), max)

/**
 * The longest user message a manifest keeps whole, in code units: the conversation's first task statement (the first
 * message of the user when no earlier summary exists) 8,000, any other 3,000. A longer message keeps its head and
 * its tail (`INSTRUCTION_TAIL_SHARE` of the cap less the omission line), so its closing request survives; each text
 * block of a message (a follow-up merged into it) is clipped on its own, so a short follow-up is never cut with a long
 * block before it.
 */
const INSTRUCTION_CAP = { first: 8_000, other: 3_000 } as const

/** The share of an instruction's cap its tail keeps when the message is longer than the cap. */
const INSTRUCTION_TAIL_SHARE = 0.4

/**
 * The line that stands for the middle of a long text the manifest left out (`of`: whose text it is): how much, and
 * the reference `recall` answers with the whole text (`textRef` of the text as it was written).
 */
const omittedMiddle = (chars: number, of: string, ref: string): string =>
  `[… ${chars} characters of ${of} left out here; recall ref ${ref} gives the whole text …]`

/**
 * `text` (trimmed) within `max` code units: itself, or its head, an omission line naming the reference of `text`
 * (as given, untrimmed) and its tail, the three within `max` (the tail `INSTRUCTION_TAIL_SHARE` of what the line
 * leaves).
 */
const headAndTail = (text: string, max: number, of: string): string => {
  const whole = text.trim()
  if (whole.length <= max) return whole
  const ref = textRef(text)
  // the line counting the whole text is at least as long as the one written
  const room = Math.max(0, max - omittedMiddle(whole.length, of, ref).length - 2)
  const tailChars = Math.floor(room * INSTRUCTION_TAIL_SHARE)
  const head = headOf(whole, room - tailChars).trimEnd()
  const tail = tailOf(whole, tailChars).trimStart()
  return `${head}\n${omittedMiddle(whole.length - head.length - tail.length, of, ref)}\n${tail}`
}

/**
 * The instruction a user message gives, within `cap`: its text blocks joined by newlines, whole when that fits; else
 * each short block (at most a quarter of the cap) whole and the long ones sharing the rest, each as head and tail.
 */
const instructionText = (message: Message, cap: number): string => {
  const blocks = typeof message.content === "string"
    ? [message.content]
    : message.content.flatMap((b) => isText(b) ? [b.text] : [])
  // each block as written (its reference is of that text), and trimmed
  const parts = blocks.map((raw) => ({ raw, text: raw.trim() })).filter((b) => b.text.length > 0)
  const whole = parts.map((part) => part.text).join("\n")
  if (whole.length <= cap) return whole
  const short = (part: { readonly text: string }) => part.text.length <= cap / 4
  const shortChars = parts.reduce((n, part) => short(part) ? n + part.text.length + 1 : n, 0)
  const long = parts.filter((part) => !short(part)).length
  const each = Math.max(Math.floor(cap / 4), Math.floor((cap - shortChars) / Math.max(1, long)))
  return parts.map((part) => short(part) ? part.text : headAndTail(part.raw, each, "the user's message")).join("\n")
}

/** The key two entries of one kind are the same by (errors and the rest by text; files by path). */
const entryKey = (entry: ManifestEntry): string => `${entry.kind}\u0000${normalize(entry.text)}`

/** The longest status board kept, in code units; a longer one keeps its head and its tail. */
const STATUS_MAX = 3_000

/** A line of a status board: a checklist item, `name: state`, or a `Next action:` / `Status:` heading line. */
const STATUS_LINE = new RegExp(
  [
    "^\\s*[-*] \\[[ xX]\\] \\S",
    "^\\s*(?:[-*]|\\d+[.)])?\\s*\\**[\\w./#@-]+(?: [\\w./#@-]+){0,5}\\**\\s*(?::|—|–| - )\\s*\\**(?:done|complete|completed|" +
    "in[- ]progress|pending|todo|to do|blocked|started|not started|wip|failing|passing)\\b",
    "^\\s*(?:[-*]\\s*)?\\**(?:next(?: actions?| steps?)?|status|remaining|blocked on|done so far|current task)\\**\\s*:",
    "^\\s*(?:[-*]\\s*)?(?:✅|⏳|❌|🔄|☐|☑|✔)"
  ].join("|"),
  "i"
)

/**
 * The assistant's status board, todo list or plan in a text block: the block (trimmed), when at least two of its lines
 * are status lines (`STATUS_LINE`); `undefined` otherwise.
 */
const statusBoard = (text: string): string | undefined => {
  let found = 0
  for (const line of text.split("\n")) if (STATUS_LINE.test(line) && ++found >= 2) return text.trim()
  return undefined
}

/**
 * What a successful result printed worth keeping (`printedValues`): an offloaded output's, as its pointer kept them;
 * any other result's, read from its text.
 */
const valuesOf = (content: ToolResultBlock["content"]): string => {
  const text = resultText(content)
  const ref = text.length <= MAX_POINTER_LENGTH ? parsePointer(text) : undefined
  return ref === undefined ? printedValues(text) : ref._tag === "Output" ? ref.printed ?? "" : ""
}

/**
 * The manifest of a summary that replaces an earlier summary (its model text `body` and its `manifest`, both
 * optional) and the messages `span` after it: the earlier entries one compaction older, merged with the span's.
 *
 * - **instruction**: each message the user wrote (not the library's), whole up to its cap (`INSTRUCTION_CAP`: the
 *   first task statement the largest), beyond it head and tail around a line that names the reference `recall`
 *   answers with the whole text block; each text block of a merged message clipped apart.
 * - **status**: the assistant's latest status board, todo list or plan written as text (a text block with at least two
 *   status lines: checklist items, `task: in-progress`, `Next action: …`), verbatim up to 3,000 code units (beyond it
 *   head and tail, the line between naming its reference as an instruction's does); it replaces the earlier one.
 * - **error**: each failed tool result's error line (as `Retention` reads it), with the call it came from; it is
 *   `resolved` once a later call of the same command (or tool and path) succeeds, in this span or a later one.
 * - **plan**: the items of the span's latest todo list or checklist (verbatim up to `MANIFEST_PLAN_ITEM_MAX`); it
 *   replaces the earlier plan.
 * - **command**: each command's first line, deduplicated: runs and failures add up across spans, and what its latest
 *   successful run printed worth keeping (`printedValues`: its last two lines, not code, holding a count or an
 *   identifier: "Tests: 42 passed", a version, a hash; folded, 160 code units each; an offloaded output's, as its
 *   pointer kept them) is kept with it; the last outcome is the latest.
 * - **identifier**: the identifiers (`Retention.anchorsOf`'s: hashes, UUIDs, URLs, digests, ARNs, paths with a line
 *   number, versions, error codes, ids) of the user's and assistant's text and of what tools printed (not file
 *   reads), those held by more messages first, then the newest; then those of the earlier model text (so what the
 *   earlier model kept is not lost when the next one drops it). None that an instruction's kept text shows; within
 *   `MANIFEST_IDENTIFIER_SHARE` of the summary's budget (`options.budgetTokens`).
 * - **file**: the `MANIFEST_MAX_FILES` most recently modified files with their latest known content (a full write,
 *   a full read, then exact single replacements applied; an earlier manifest's content counts as known).
 *
 * Each instruction carries the reference `Recall.recall` finds its whole message by (`msg_…`, a digest of its words),
 * so a summary that leaves it out can name it. The user's first message is marked `first` (the task); with
 * `options.turnGoesOn` (the kept tail holds no message the user typed apart from tool results: the turn the span ends
 * in is still running), the newest such message of the span is marked `turn`, or, when the span has none, the
 * earlier `turn` stays. The user's messages an earlier summary left out (`Manifest.omitted`) are carried on, and so is
 * its count of the runs of commands left out (`Manifest.omittedRuns`).
 *
 * A repeated entry keeps one copy, the newest. Pure and deterministic.
 * @category manifest
 */
export const nextManifest = (
  earlier: { readonly body?: string | undefined; readonly manifest?: Manifest | undefined },
  span: ReadonlyArray<Message>,
  classifier: ToolClassifier = defaultToolClassifier,
  options: SpanOptions = {}
): Manifest => {
  const anchors = spanAnchors(span, isLibraryMessage, classifier)
  const fresh: Array<ManifestEntry> = []
  const newestFirst = (a: Anchor, b: Anchor) => b.messageIndex - a.messageIndex
  // instructions: verbatim, newest first
  const instructions: Array<ManifestEntry & { readonly kind: "instruction" }> = []
  // the first task statement: the user's first message, when no earlier summary holds it
  let first = earlier.manifest === undefined && earlier.body === undefined
  /** The newest message of the span the user typed apart from tool results, by its index in `instructions`. */
  let prompt = -1
  for (const message of span) {
    if (message.role !== "user" || !isHumanMessage(message) || isLibraryMessage(message)) continue
    const text = instructionText(message, first ? INSTRUCTION_CAP.first : INSTRUCTION_CAP.other)
    if (text.length === 0) continue
    if (isPrompt(message)) prompt = instructions.length
    instructions.push({
      kind: "instruction",
      text,
      age: 0,
      ref: wordsRef(message),
      ...(first ? { task: "first" as const } : {})
    })
    first = false
  }
  const turnGoesOn = options.turnGoesOn === true
  if (turnGoesOn && prompt !== -1 && instructions[prompt]!.task === undefined) {
    instructions[prompt] = { ...instructions[prompt]!, task: "turn" }
  }
  fresh.push(...instructions.reverse())
  // the assistant's latest status board, verbatim
  let status: string | undefined
  for (const message of span) {
    if (message.role !== "assistant" || typeof message.content === "string") continue
    for (const block of message.content) if (isText(block) && statusBoard(block.text) !== undefined) status = block.text
  }
  if (status !== undefined) {
    fresh.push({ kind: "status", text: headAndTail(status, STATUS_MAX, "the assistant's status board"), age: 0 })
  }
  // tool calls and their results, in order
  const calls = new Map<string, ToolUseBlock>()
  const succeeded: Array<{ readonly source: string; readonly index: number }> = []
  const printed = new Map<string, string>()
  const failed: Array<
    { readonly text: string; readonly source: string; readonly index: number; readonly ref: string }
  > = []
  /** A command's anchor text → the tool_use_id of its latest answered run. */
  const commandRefs = new Map<string, string>()
  const known = new Map<string, string | undefined>()
  for (const entry of earlier.manifest?.entries ?? []) {
    if (entry.kind === "file") known.set(entry.text, entry.content)
  }
  const modified: Array<string> = []
  span.forEach((message, index) => {
    // a system message may have no content (API-RULES 26)
    if (!Array.isArray(message.content)) return
    for (const block of message.content) {
      if (isToolUse(block)) {
        calls.set(block.id, block)
        const action = classifier(block)
        if (action._tag === "Write") {
          known.set(action.path, contentAfter(block, known.get(action.path)))
          modified.push(action.path)
        }
      } else if (isToolResult(block)) {
        const call = calls.get(block.tool_use_id)
        const source = call === undefined ? "" : sourceOf(call, classifier)
        const command = call === undefined ? undefined : commandOf(call)
        if (command !== undefined) {
          commandRefs.set(clipped(firstLine(command), ANCHOR_LIMITS.command), block.tool_use_id)
        }
        if (block.is_error === true) {
          const text = resultText(block.content)
          if (normalize(text) === MISSING_RESULT_TEXT) continue
          failed.push({ text: clipped(errorLine(text), ANCHOR_LIMITS.error), source, index, ref: block.tool_use_id })
        } else {
          succeeded.push({ source, index })
          const values = call === undefined || commandOf(call) === undefined ? "" : valuesOf(block.content)
          if (values.length > 0) {
            printed.delete(source)
            printed.set(source, values)
          }
          const action = call === undefined ? undefined : classifier(call)
          if (action?._tag === "Read" && action.range === undefined) known.set(action.path, resultText(block.content))
        }
      }
    }
  })
  const resolvedAfter = (source: string, index: number): boolean =>
    source.length > 0 && succeeded.some((s) => s.source === source && s.index > index)
  const errors = new Map<string, ManifestEntry>()
  for (const error of failed.reverse()) {
    if (error.text.length === 0) continue
    const earlierOne = errors.get(error.text)
    const resolved = resolvedAfter(error.source, error.index)
    if (earlierOne === undefined) {
      errors.set(error.text, {
        kind: "error",
        text: error.text,
        source: error.source,
        resolved,
        age: 0,
        ...(isRef(error.ref) ? { ref: error.ref } : {})
      })
    } else if (earlierOne.kind === "error" && earlierOne.resolved && !resolved) {
      errors.set(error.text, { ...earlierOne, resolved: false })
    }
  }
  fresh.push(...errors.values())
  const plan = anchors.filter((a) => a.category === "plan")
  if (plan.length > 0) {
    const items = rawPlanItems(span, plan[0]!.messageIndex)
    for (const text of items) fresh.push({ kind: "plan", text: verbatim(text, MANIFEST_PLAN_ITEM_MAX), age: 0 })
  }
  for (const a of anchors.filter((a) => a.category === "command").sort(newestFirst)) {
    if (a.category !== "command") continue
    const values = printed.get(a.text)
    const ref = commandRefs.get(a.text)
    fresh.push({
      kind: "command",
      text: a.text,
      runs: a.runs,
      failures: a.failures,
      last: a.outcome,
      age: 0,
      ...(values === undefined ? {} : { printed: values }),
      ...(ref !== undefined && isRef(ref) ? { ref } : {})
    })
  }
  for (const a of anchors.flatMap((a) => a.category === "identifier" ? [a] : []).sort(mostMentioned)) {
    fresh.push({ kind: "identifier", text: a.text, age: 0 })
  }
  const recent = [...new Set([...modified].reverse())].slice(0, MANIFEST_MAX_FILES)
  for (const path of recent) {
    const content = known.get(path)
    fresh.push({
      kind: "file",
      text: path,
      content: content !== undefined && content.length <= MANIFEST_FILE_CONTENT_MAX ? content : undefined,
      age: 0
    })
  }
  // the earlier entries, one compaction older; the model text's identifiers join them
  const okSources = new Set(succeeded.map((s) => s.source))
  const older: Array<ManifestEntry> = (earlier.manifest?.entries ?? []).map((entry) =>
    entry.kind === "error" && !entry.resolved && okSources.has(entry.source)
      ? { ...entry, resolved: true, age: entry.age + 1 }
      : { ...entry, age: entry.age + 1 }
  )
  if (earlier.body !== undefined) {
    for (const id of identifiersOf(earlier.body)) older.push({ kind: "identifier", text: id.text, age: 1 })
  }
  // an earlier turn's task stays marked only while that turn goes on (no newer message the user typed)
  const carried = turnGoesOn && prompt === -1
    ? older
    : older.map((e) => e.kind === "instruction" && e.task === "turn" ? withoutTask(e) : e)
  const entries = boundIdentifiers(
    mergeEntries(fresh, carried, plan.length > 0, status !== undefined, recent),
    identifierRoom(options.budgetTokens)
  )
  const omitted = earlier.manifest?.omitted
  const runs = earlier.manifest?.omittedRuns
  return {
    entries,
    ...(omitted === undefined ? {} : { omitted }),
    ...(runs === undefined ? {} : { omittedRuns: runs })
  }
}

/**
 * What `nextManifest` knows of a span beyond its messages. @category models
 */
export interface SpanOptions {
  /** The turn the span ends in goes on after it: the kept tail holds no message the user typed apart from results. */
  readonly turnGoesOn?: boolean | undefined
  /**
   * The summary's budget (`CompactionPolicy#summaryBudgetTokens`), which the identifiers' room follows
   * (`MANIFEST_IDENTIFIER_SHARE`); absent, they get `MANIFEST_IDENTIFIER_CHARS`.
   */
  readonly budgetTokens?: number | undefined
}

/**
 * A message the user typed apart from tool results: a user message with human content and no tool result (a text
 * that rides with tool results is the user's too, but it steers a turn rather than opening one).
 */
export const isPrompt = (message: Message): boolean =>
  message.role === "user" && isHumanMessage(message) && !isLibraryMessage(message) &&
  (typeof message.content === "string" || !message.content.some(isToolResult))

/** An instruction without its task mark. */
const withoutTask = (entry: ManifestEntry & { readonly kind: "instruction" }): ManifestEntry => {
  const { task: _, ...rest } = entry
  return rest
}

/** Identifiers held by more messages first, then the newest. */
const mostMentioned = (a: IdentifierAnchor, b: IdentifierAnchor): number =>
  b.mentions - a.mentions || b.messageIndex - a.messageIndex

/**
 * The share of the summary's budget the identifier lines of a manifest take: 7.5% (2,400 code units, about 600 tokens,
 * at the default budget of 8,000 tokens), within `MANIFEST_IDENTIFIER_CHARS` and `MANIFEST_IDENTIFIER_MAX_CHARS`. The
 * identifiers beyond it, the lowest in the manifest's order (the span's own first, the most mentioned and newest first;
 * then the earlier ones), are left out. @category constants
 */
export const MANIFEST_IDENTIFIER_SHARE = 0.075

/**
 * The least room the identifier lines of a manifest get, in code units: 2,400, their share of the default budget. A
 * smaller budget keeps it: the user's words, open errors, the status, the plan and the files list are admitted before
 * any identifier, so these lines never crowd them out, and a smaller room only drops identifiers. @category constants
 */
export const MANIFEST_IDENTIFIER_CHARS = 2_400

/** The most room the identifier lines of a manifest get, in code units: 24,000 (their share of an 80,000-token budget). @category constants */
export const MANIFEST_IDENTIFIER_MAX_CHARS = 24_000

/**
 * The code units the identifier lines of a manifest may take under a summary budget of `budgetTokens`:
 * `MANIFEST_IDENTIFIER_SHARE` of it, within `MANIFEST_IDENTIFIER_CHARS` and `MANIFEST_IDENTIFIER_MAX_CHARS`.
 */
const identifierRoom = (budgetTokens: number | undefined): number =>
  budgetTokens === undefined ? MANIFEST_IDENTIFIER_CHARS : Math.min(
    MANIFEST_IDENTIFIER_MAX_CHARS,
    Math.max(MANIFEST_IDENTIFIER_CHARS, Math.floor(budgetTokens * MANIFEST_IDENTIFIER_SHARE) * CHARS_PER_TOKEN)
  )

/**
 * `entries` with their identifiers bounded: none that is no longer one (`identifiersOf`), none already visible in an
 * instruction's kept text (case aside for hashes, digests and UUIDs), and within `room` code units.
 */
const boundIdentifiers = (entries: ReadonlyArray<ManifestEntry>, room: number): ReadonlyArray<ManifestEntry> => {
  const kept = normalize(entries.flatMap((e) => e.kind === "instruction" ? [e.text] : []).join("\n"))
  const keptLower = kept.toLowerCase()
  return entries.filter((entry) => {
    if (entry.kind !== "identifier") return true
    const id = identifiersOf(entry.text).find((found) => found.text === entry.text)
    if (id === undefined) return false
    if (caselessKind(id.kind) ? keptLower.includes(id.text.toLowerCase()) : kept.includes(id.text)) return false
    const cost = renderEntry(entry).length + 1
    if (cost > room) return false
    room -= cost
    return true
  })
}

/** The raw items of the plan found in `span[messageIndex]` (the latest one), in order. */
const rawPlanItems = (span: ReadonlyArray<Message>, messageIndex: number): ReadonlyArray<string> => {
  const message = span[messageIndex]
  if (message === undefined || typeof message.content === "string") return []
  let items: ReadonlyArray<string> = []
  for (const block of message.content) {
    if (block.type === "text") items = checklistItems((block as { readonly text: string }).text) ?? items
    else if (isToolUse(block)) items = todoItems(block) ?? items
  }
  return items
}

/**
 * `fresh` then `older`, one per key (the fresh one), grouped by kind; an older plan or status board gives way to a new
 * one; an older command in its short form merges into the span's newest command with that short form.
 */
const mergeEntries = (
  fresh: ReadonlyArray<ManifestEntry>,
  older: ReadonlyArray<ManifestEntry>,
  newPlan: boolean,
  newStatus: boolean,
  recentFiles: ReadonlyArray<string>
): ReadonlyArray<ManifestEntry> => {
  const merged = new Map<string, ManifestEntry>()
  /** The short form of each of the span's commands → the key of the newest with it. */
  const byBrief = new Map<string, string>()
  for (const entry of fresh) {
    merged.set(entryKey(entry), entry)
    if (entry.kind === "command" && !byBrief.has(briefCommand(entry.text))) {
      byBrief.set(briefCommand(entry.text), entryKey(entry))
    }
  }
  let files = recentFiles.length
  for (const entry of older) {
    if ((entry.kind === "plan" && newPlan) || (entry.kind === "status" && newStatus)) continue
    const key = entry.kind === "command" && entry.brief === true
      ? byBrief.get(entry.text) ?? `${entryKey(entry)}\u0000brief`
      : entryKey(entry)
    const seen = merged.get(key)
    if (seen === undefined) {
      if (entry.kind === "file") {
        if (files >= MANIFEST_MAX_FILES) continue
        files++
      }
      merged.set(key, entry)
    } else if (seen.kind === "command" && entry.kind === "command") {
      const printed = seen.printed ?? entry.printed
      const ref = seen.ref ?? entry.ref
      merged.set(key, {
        ...seen,
        runs: seen.runs + entry.runs,
        failures: seen.failures + entry.failures,
        ...(printed === undefined ? {} : { printed }),
        ...(ref === undefined ? {} : { ref })
      })
    } else if (seen.kind === "error" && entry.kind === "error" && seen.age === 0 && !seen.resolved) {
      merged.set(key, seen)
    } else if (seen.kind === "instruction" && entry.kind === "instruction") {
      // the user repeated an earlier message: the newest copy, with the earlier one's task mark and reference
      const task = seen.task === "first" || entry.task === "first" ? "first" : seen.task ?? entry.task
      const ref = seen.ref ?? entry.ref
      merged.set(key, { ...seen, ...(task === undefined ? {} : { task }), ...(ref === undefined ? {} : { ref }) })
    }
  }
  const all = [...merged.values()]
  return MANIFEST_KINDS.flatMap((kind) => all.filter((e) => e.kind === kind))
}

// ----------------------------------------------------------------------------
// Rendering and parsing
// ----------------------------------------------------------------------------

const OUTCOME_WORDS: { readonly [O in CommandOutcome]: string } = {
  ok: "passed",
  failed: "failed",
  unanswered: "no result"
}

/**
 * The command line of a manifest: `"npm test" ×7: 5 failed, last passed` (`×1: passed` for one run); in its short
 * form, `"npm test" ×7` when its last run passed, else `"npm test" ×7, last failed` (no colon).
 */
const commandSuffix = (entry: Extract<ManifestEntry, { kind: "command" }>): string =>
  entry.brief === true
    ? `×${entry.runs}${entry.last === "ok" ? "" : `, last ${OUTCOME_WORDS[entry.last]}`}`
    : entry.runs === 1
    ? `×1: ${OUTCOME_WORDS[entry.last]}`
    : `×${entry.runs}: ${entry.failures} failed, last ${OUTCOME_WORDS[entry.last]}`

/** A reference the manifest can show compactly: no white space, no `]`. */
const isRef = (ref: string): boolean => /^[^\s\]]+$/.test(ref)

/** A command's or error's reference at the end of its line: ` [ref toolu_…]`. */
const refSuffix = (ref: string | undefined): string => ref === undefined ? "" : ` [ref ${ref}]`

const REF_SUFFIX = / \[ref ([^\s\]]+)\]$/

/** An entry line's suffix without its trailing `[ref …]`, and the ref; the suffix absent gives neither. */
const splitRef = (
  suffix: string | undefined
): { readonly rest: string | undefined; readonly ref: string | undefined } => {
  const match = suffix === undefined ? null : REF_SUFFIX.exec(suffix)
  return match === null ? { rest: suffix, ref: undefined } : { rest: suffix!.slice(0, match.index), ref: match[1] }
}

/** One entry's text in a manifest block (a file's content follows its line). */
const renderEntry = (entry: ManifestEntry): string => {
  // an instruction keeps its lines: its length, then the text itself on the lines that follow
  if (entry.kind === "instruction") {
    const task = entry.task === undefined ? "" : `, ${TASK_WORDS[entry.task]}`
    return `${entry.kind} ${entry.age} ${entry.text.length} chars${task}${refSuffix(entry.ref)}:\n${entry.text}`
  }
  if (entry.kind === "status") return `${entry.kind} ${entry.age} ${entry.text.length} chars:\n${entry.text}`
  const head = `${entry.kind} ${entry.age} ${JSON.stringify(entry.text)}`
  switch (entry.kind) {
    case "command":
      return `${head} ${commandSuffix(entry)}${
        entry.printed === undefined ? "" : ` printed ${JSON.stringify(entry.printed)}`
      }${refSuffix(entry.ref)}`
    case "error":
      return `${head} from ${JSON.stringify(entry.source)} ${entry.resolved ? "resolved later" : "unresolved"}${
        refSuffix(entry.ref)
      }`
    case "file":
      return entry.content === undefined
        ? `${head} path only`
        : `${head} ${entry.content.length} chars:\n${entry.content}`
    default:
      return head
  }
}

/** How an instruction's task mark is written after its length. */
const TASK_WORDS = { first: "first task", turn: "turn task" } as const

/**
 * The line that names the user's messages left out for room: `omitted N user messages for room`, then the named
 * ones' references (`; by ref: [ref a] [ref b]`) and how many are unnamed (`; K not named`).
 */
const renderOmitted = (omitted: OmittedMessages): string => {
  const total = omitted.refs.length + omitted.unnamed
  const named = omitted.refs.length === 0 ? "" : `; by ref: ${omitted.refs.map((ref) => `[ref ${ref}]`).join(" ")}`
  const unnamed = omitted.unnamed === 0 ? "" : `; ${omitted.unnamed} not named`
  return `omitted ${total} user message${total === 1 ? "" : "s"} for room${named}${unnamed}`
}

const OMITTED_LINE =
  /^omitted (\d+) user messages? for room(?:; by ref: ((?:\[ref [^\s\]]+\] ?)+))?(?:; (\d+) not named)?$/

/** The left-out messages of an omitted line, or `undefined` when `line` is not one (its count must add up). */
const parseOmitted = (line: string): OmittedMessages | undefined => {
  const match = OMITTED_LINE.exec(line)
  if (match === null) return undefined
  const refs = match[2] === undefined ? [] : [...match[2].matchAll(/\[ref ([^\s\]]+)\]/g)].map((m) => m[1]!)
  const unnamed = match[3] === undefined ? 0 : Number(match[3])
  if (refs.length + unnamed !== Number(match[1]) || refs.length + unnamed === 0) return undefined
  const omitted = { refs, unnamed }
  return renderOmitted(omitted) === line ? omitted : undefined
}

/** True when a manifest has an omitted line to write: some message left out. */
const hasOmitted = (omitted: OmittedMessages | undefined): omitted is OmittedMessages =>
  omitted !== undefined && omitted.refs.length + omitted.unnamed > 0

/**
 * A manifest as the block that follows the model's text in a summary: an intro line, then
 * `<compaction-manifest version="1">`, one line per entry (`kind age "json text" …`; an instruction's or a status
 * board's text, and a file's content, their length given, follow their line), the omitted line after the
 * instructions when some user message was left out, the line counting the runs of commands left out after the
 * commands when any was, and `</compaction-manifest>`. `parseManifest` reads it back exactly.
 * @category manifest
 */
export const renderManifest = (manifest: Manifest): string => {
  const lines = manifest.entries.map(renderEntry)
  if ((manifest.omittedRuns ?? 0) > 0) {
    const after = manifest.entries.findIndex((e) => e.kind === "identifier" || e.kind === "file")
    lines.splice(after === -1 ? lines.length : after, 0, omittedRuns(manifest.omittedRuns!))
  }
  if (hasOmitted(manifest.omitted)) {
    const after = manifest.entries.findIndex((e) => e.kind !== "instruction")
    lines.splice(after === -1 ? lines.length : after, 0, renderOmitted(manifest.omitted))
  }
  return [MANIFEST_INTRO, MANIFEST_OPEN, ...lines, MANIFEST_CLOSE].join("\n")
}

const JSON_STRING = '("(?:[^"\\\\]|\\\\.)*")'
const INSTRUCTION_LINE =
  /^(instruction|status) (\d+) (\d+) chars(?:, (first task|turn task))?(?: \[ref ([^\s\]]+)\])?:$/
const ENTRY_LINE = new RegExp(`^(plan|identifier|command|error|file) (\\d+) ${JSON_STRING}(?: (.*))?$`)
const COMMAND_SUFFIX = new RegExp(
  `^×(\\d+): (?:(\\d+) failed, last )?(passed|failed|no result)(?: printed ${JSON_STRING})?$`
)
const BRIEF_COMMAND_SUFFIX = new RegExp(`^×(\\d+)(?:, last (failed|no result))?(?: printed ${JSON_STRING})?$`)
const ERROR_SUFFIX = new RegExp(`^from ${JSON_STRING} (resolved later|unresolved)$`)
const FILE_SUFFIX = /^(?:path only|(\d+) chars:)$/

const jsonString = (text: string): string | undefined => {
  try {
    const value: unknown = JSON.parse(text)
    return typeof value === "string" ? value : undefined
  } catch {
    return undefined
  }
}

const outcomeOf = (word: string): CommandOutcome =>
  word === "passed" ? "ok" : word === "failed" ? "failed" : "unanswered"

/**
 * A command line's suffix after its text and ref (what `commandSuffix` wrote): its runs, failures and last outcome,
 * what it printed (still a JSON string), and whether it is the short form (`×N[, last …]`, no failure count: one when
 * the last run failed); `undefined` when it is neither form.
 */
const parseCommandSuffix = (
  rest: string
):
  | {
    readonly runs: number
    readonly failures: number
    readonly last: CommandOutcome
    readonly printed: string | undefined
    readonly brief: boolean
  }
  | undefined => {
  const brief = BRIEF_COMMAND_SUFFIX.exec(rest)
  if (brief !== null) {
    const last: CommandOutcome = brief[2] === undefined ? "ok" : outcomeOf(brief[2])
    return { runs: Number(brief[1]), failures: last === "failed" ? 1 : 0, last, printed: brief[3], brief: true }
  }
  const whole = COMMAND_SUFFIX.exec(rest)
  if (whole === null) return undefined
  const last = outcomeOf(whole[3]!)
  const failures = whole[2] === undefined ? (last === "failed" ? 1 : 0) : Number(whole[2])
  return { runs: Number(whole[1]), failures, last, printed: whole[4], brief: false }
}

/** The manifest of a block's inside (`text` from just after the open line), or `undefined` when malformed. */
const parseEntries = (text: string): Manifest | undefined => {
  const entries: Array<ManifestEntry> = []
  let omitted: OmittedMessages | undefined
  let runsLeft: number | undefined
  let at = 0
  while (at < text.length) {
    const end = text.indexOf("\n", at)
    const line = text.slice(at, end === -1 ? text.length : end)
    at = end === -1 ? text.length : end + 1
    if (line === MANIFEST_CLOSE) {
      if (at < text.length) return undefined
      return {
        entries,
        ...(omitted === undefined ? {} : { omitted }),
        ...(runsLeft === undefined ? {} : { omittedRuns: runsLeft })
      }
    }
    const instruction = INSTRUCTION_LINE.exec(line)
    if (instruction !== null) {
      const length = Number(instruction[3])
      if (end === -1 || at + length > text.length || text[at + length] !== "\n") return undefined
      const entryText = text.slice(at, at + length)
      const age = Number(instruction[2])
      if (instruction[1] === "status") {
        if (instruction[4] !== undefined || instruction[5] !== undefined) return undefined
        entries.push({ kind: "status", text: entryText, age })
      } else {
        const task = instruction[4] === undefined ? undefined : instruction[4] === TASK_WORDS.first ? "first" : "turn"
        entries.push({
          kind: "instruction",
          text: entryText,
          age,
          ...(instruction[5] === undefined ? {} : { ref: instruction[5] }),
          ...(task === undefined ? {} : { task })
        })
      }
      at += length + 1
      continue
    }
    const left = omitted === undefined ? parseOmitted(line) : undefined
    if (left !== undefined) {
      omitted = left
      continue
    }
    const runsCounted = runsLeft === undefined ? parseOmittedRuns(line) : undefined
    if (runsCounted !== undefined) {
      runsLeft = runsCounted
      continue
    }
    const match = ENTRY_LINE.exec(line)
    if (match === null) return undefined
    const kind = match[1] as ManifestKind
    const age = Number(match[2])
    const entryText = jsonString(match[3]!)
    const suffix = match[4]
    if (entryText === undefined) return undefined
    if (kind === "plan" || kind === "identifier") {
      if (suffix !== undefined) return undefined
      entries.push({ kind, text: entryText, age })
    } else if (kind === "command") {
      const { rest, ref } = splitRef(suffix)
      const command = rest === undefined ? undefined : parseCommandSuffix(rest)
      if (command === undefined) return undefined
      const printed = command.printed === undefined ? undefined : jsonString(command.printed)
      if (command.printed !== undefined && printed === undefined) return undefined
      entries.push({
        kind,
        text: entryText,
        age,
        runs: command.runs,
        failures: command.failures,
        last: command.last,
        ...(printed === undefined ? {} : { printed }),
        ...(ref === undefined ? {} : { ref }),
        ...(command.brief ? { brief: true as const } : {})
      })
    } else if (kind === "error") {
      const { rest, ref } = splitRef(suffix)
      const m = rest === undefined ? null : ERROR_SUFFIX.exec(rest)
      const source = m === null ? undefined : jsonString(m[1]!)
      if (m === null || source === undefined) return undefined
      entries.push({
        kind,
        text: entryText,
        age,
        source,
        resolved: m[2] === "resolved later",
        ...(ref === undefined ? {} : { ref })
      })
    } else {
      const m = suffix === undefined ? null : FILE_SUFFIX.exec(suffix)
      if (m === null) return undefined
      if (m[1] === undefined) entries.push({ kind, text: entryText, age, content: undefined })
      else {
        const length = Number(m[1])
        if (end === -1 || at + length > text.length || text[at + length] !== "\n") return undefined
        entries.push({ kind, text: entryText, age, content: text.slice(at, at + length) })
        at += length + 1
      }
    }
  }
  return undefined
}

/**
 * Splits a text into the part before its manifest block and the manifest. Only a block that ends the text counts
 * (after it, only white space), so a block the model imitated earlier in its text is never read as the real one;
 * when the end is not a well-formed block, `manifest` is `undefined` and `body` is the whole text.
 * @category manifest
 */
export const splitManifest = (text: string): { readonly body: string; readonly manifest: Manifest | undefined } => {
  const trimmed = text.trimEnd()
  if (!trimmed.endsWith(MANIFEST_CLOSE)) return { body: text, manifest: undefined }
  const open = `${MANIFEST_OPEN}\n`
  for (let start = trimmed.indexOf(open); start !== -1; start = trimmed.indexOf(open, start + 1)) {
    if (start > 0 && trimmed[start - 1] !== "\n") continue
    const manifest = parseEntries(trimmed.slice(start + open.length))
    if (manifest === undefined) continue
    let body = trimmed.slice(0, start)
    for (const intro of [MANIFEST_INTRO, ...EARLIER_INTROS]) {
      if (body.endsWith(`${intro}\n`)) {
        body = body.slice(0, body.length - intro.length - 1)
        break
      }
    }
    return { body: body.trimEnd(), manifest }
  }
  return { body: text, manifest: undefined }
}

/** A summary text's parts: the model's text, the manifest and the file lists, each `undefined` when absent. @category models */
export interface SummaryParts {
  /** The model's text, without the manifest and the files appendix. */
  readonly body: string
  /** The manifest the summary carries, if any. */
  readonly manifest: Manifest | undefined
  /** The files appendix's read and modified lists (with the counts of paths it left out), if any. */
  readonly files: FileLists | undefined
}

/**
 * `summaryText` split into the model's text, its manifest and its files appendix (`splitAppendix`, then
 * `splitManifest` on what precedes the appendix).
 * @category manifest
 */
export const splitSummary = (summaryText: string): SummaryParts => {
  const { body, files } = splitAppendix(summaryText)
  const split = splitManifest(body)
  return { body: split.body, manifest: split.manifest, files }
}

// ----------------------------------------------------------------------------
// The budget
// ----------------------------------------------------------------------------

/** What decides where an entry stands when the budget is short: its kind, and for an error whether it was resolved. */
type KeepClass =
  | Exclude<ManifestEntry["kind"], "error">
  | "task"
  | "open error"
  | "resolved error"
  | "command with values"

/**
 * The order in which entries are kept when the budget is short, by class. `tier` comes first: every entry of a tier is
 * considered before any entry of the next, newest first within it: the user's tasks (the first task statement, the
 * message that opened the turn still running), then the user's other messages, then unresolved errors, then the
 * assistant's latest status board and plan. The files list comes next (`SUMMARY_FILES_SHARE`), then every command in
 * its short form, newest first (`SUMMARY_TRAIL_SHARE`), then the rest (tier 4), ranked by the class's `rank` (lower is
 * kept first) plus its age times `ageWeight`, how fast it falls behind: identifiers and commands that printed values
 * by half, other commands, resolved errors and file contents by one.
 */
const KEEP_ORDER: Readonly<
  Record<KeepClass, { readonly tier: number; readonly rank: number; readonly ageWeight: number }>
> = {
  task: { tier: 0, rank: 0, ageWeight: 0 },
  instruction: { tier: 1, rank: 0, ageWeight: 0 },
  "open error": { tier: 2, rank: 0, ageWeight: 0 },
  status: { tier: 3, rank: 0, ageWeight: 0 },
  plan: { tier: 3, rank: 0, ageWeight: 0 },
  identifier: { tier: 4, rank: 1, ageWeight: 0.5 },
  command: { tier: 4, rank: 1, ageWeight: 1 },
  "command with values": { tier: 4, rank: 1, ageWeight: 0.5 },
  "resolved error": { tier: 4, rank: 2, ageWeight: 1 },
  file: { tier: 4, rank: 3, ageWeight: 1 }
}

/** The tier of the rest: the entries ranked by `rank` and age, kept after the files list. */
const REST_TIER = 4

/** An entry's class under `KEEP_ORDER`. */
const keepClass = (entry: ManifestEntry): KeepClass =>
  entry.kind === "instruction"
    ? entry.task === undefined ? "instruction" : "task"
    : entry.kind === "error"
    ? entry.resolved ? "resolved error" : "open error"
    : entry.kind === "command" && entry.printed !== undefined
    ? "command with values"
    : entry.kind

/** An entry's rank among the rest under `KEEP_ORDER`: lower is kept first. */
const keepRank = (entry: ManifestEntry): number => {
  const order = KEEP_ORDER[keepClass(entry)]
  return order.rank + entry.age * order.ageWeight
}

const CUT_NOTE = "\n[… the summary was cut here to fit the summary budget]"

const messageTokens = (text: string): number => estimateTokens([summaryMessage(text)])

/**
 * The budget a summary is built within (`summaryWithManifest`). @category models
 */
export interface SummaryBudget {
  /** The policy's budget for the whole summary message (`CompactionPolicy#summaryBudgetTokens`), in tokens. */
  readonly budgetTokens: number
  /**
   * The most the summary message may take so that it is smaller than the span it replaces (and frees what the pass
   * must free), in tokens; the manifest never pushes it past this. Absent: no such cap.
   */
  readonly spanTokens?: number | undefined
}

/** True when `entry` is found (folded, or JSON-escaped) in the folded model text. */
const inText = (entry: ManifestEntry, folded: string): boolean => {
  const needle = normalize(entry.text)
  return folded.includes(needle) || folded.includes(JSON.stringify(needle).slice(1, -1))
}

/**
 * The share of the summary budget kept for the model's text when the manifest could use it: a quarter. A shorter
 * text leaves the rest to the manifest; a longer one gets what the manifest leaves, and is cut past that.
 * @category constants
 */
export const SUMMARY_TEXT_SHARE = 0.25

/**
 * The share of the manifest's room the rest's entries of earlier spans (older than the span just summarized) may
 * fill: 0.85. The span's own entries may use the whole room; earlier ones give way first, oldest first, so a summary
 * aims below its budget instead of growing to it and staying there hop after hop. The user's messages, unresolved
 * errors, the status board and the plan are not held to it.
 */
const SUMMARY_OLDER_SHARE = 0.85

/**
 * The share of the manifest's room the files list may take: a fifth. Past it the newest paths are listed (modified
 * ones first) and the others counted.
 * @category constants
 */
export const SUMMARY_FILES_SHARE = 0.2

/**
 * The share of the manifest's room the references of the user's messages left out may take: a tenth. Past it they are
 * counted, not named.
 * @category constants
 */
export const SUMMARY_REFS_SHARE = 0.1

/** The tokens the model's text may claim ahead of the manifest under `budgetTokens`. */
const textReserve = (budgetTokens: number): number => Math.floor(budgetTokens * SUMMARY_TEXT_SHARE)

/** A command entry of a manifest. */
type CommandEntry = Extract<ManifestEntry, { kind: "command" }>

/**
 * A command in its short form (`briefCommand`): its runs and last outcome, with its ref when `ref`, with what it
 * printed when `printed`.
 */
const briefForm = (entry: CommandEntry, ref: boolean, printed: boolean): CommandEntry => ({
  kind: "command",
  text: briefCommand(entry.text),
  age: entry.age,
  runs: entry.runs,
  failures: entry.last === "failed" ? 1 : 0,
  last: entry.last,
  ...(printed && entry.printed !== undefined ? { printed: entry.printed } : {}),
  ...(ref && entry.ref !== undefined ? { ref: entry.ref } : {}),
  brief: true
})

/**
 * The form of an entry kept at `level` (0 to 3) when the budget is short, rather than dropping the entry: a command in
 * its short form (0: `briefForm`), then with its `ref`, the way back to its output (1), then with what it printed (2),
 * then whole, its text unshortened (3); a file's path without its content (0 to 2), then with it (3); any other entry
 * whole at every level. (A user's message left out has its own shorter form: its reference on the omitted line.)
 */
const formAt = (entry: ManifestEntry, level: number): ManifestEntry => {
  if (entry.kind === "command") {
    return level === 3 && entry.brief !== true ? entry : briefForm(entry, level > 0, level > 1)
  }
  if (entry.kind === "file" && entry.content !== undefined && level < 3) return { ...entry, content: undefined }
  return entry
}

/**
 * The characters of the omitted line (`renderOmitted`) and its line break for `count` references taking `chars`
 * (each one's length and 7) and `unnamed` more; 0 when none is left out.
 */
const omittedChars = (count: number, chars: number, unnamed: number): number => {
  const total = count + unnamed
  if (total === 0) return 0
  return `omitted ${total} user message${total === 1 ? "" : "s"} for room`.length + (count === 0 ? 0 : 9 + chars) +
    (unnamed === 0 ? 0 : `; ${unnamed} not named`.length) + 1
}

/** One step of `admit`, in order, so that the last can be taken back first. */
type Admission =
  | { readonly _tag: "Entry"; readonly index: number; readonly form: ManifestEntry; readonly before?: ManifestEntry }
  | { readonly _tag: "Path"; readonly kind: "read" | "modified" }

/**
 * `body`, then the manifest's entries admitted within `limit` tokens, in manifest order, then the files list, each
 * part admitted by `KEEP_ORDER`: the user's tasks, then the user's other messages, newest first, each whole where
 * the room allows and else named by its reference on the omitted line (with the messages an earlier summary left
 * out, within `SUMMARY_REFS_SHARE` of the room; the others counted); then unresolved errors, the status board and the
 * plan; then the files list, the newest paths (modified first) within `SUMMARY_FILES_SHARE` of the room, the others
 * counted; then, when every message of the user is whole, the command trail: every command in its short form, newest
 * first, within `SUMMARY_TRAIL_SHARE` of the room (those of earlier spans within `SUMMARY_OLDER_SHARE` of it too),
 * leaving the identifiers' lines room; then the rest, by rank in its shortest form (`formAt`), the span's own entries
 * first (file contents aside), then the earlier ones within `SUMMARY_OLDER_SHARE` of the room, then in the same order
 * in each longer form where the room allows (commands only when every message of the user is whole). One that does
 * not fit is skipped and a smaller one may still enter. A command with no form kept adds its runs to the kept short
 * line of the same short form, or else to the count of runs left out (with an earlier summary's). The result is
 * within `limit` unless the bare message (the body, the omitted lines naming nothing and counting every run, the empty
 * files list) is not.
 */
const admit = (body: string, manifest: Manifest, files: FileLists, limit: number): string => {
  const candidates = manifest.entries
  const earlier = manifest.omitted ?? { refs: [], unnamed: 0 }
  const earlierRuns = manifest.omittedRuns ?? 0
  // the estimate counts characters (`Tokens`): a message of `n` more characters costs at most `ceil(n / 4)` more
  const overhead = messageTokens("")
  const fits = (chars: number, room: number): boolean => overhead + Math.ceil(chars / CHARS_PER_TOKEN) <= room
  const classed = candidates.map((entry, index) => ({ entry, index, order: KEEP_ORDER[keepClass(entry)] }))
  const tier = (t: number) =>
    classed.filter((c) => c.order.tier === t).sort((a, b) => a.entry.age - b.entry.age || a.index - b.index)
  const instructions = [...tier(0), ...tier(1)]
  /** The form each admitted entry is kept in, by its index in `candidates`. */
  const admitted = new Map<number, ManifestEntry>()
  /** The short forms of the commands admitted (in any form). */
  const briefs = new Set<string>()
  const keep = { read: 0, modified: 0 }
  const steps: Array<Admission> = []
  let refRoom = Math.floor(limit * SUMMARY_REFS_SHARE) * CHARS_PER_TOKEN
  /** The user's messages left out (`skip` counted as admitted): the tasks first, then newest first, then earlier. */
  const omittedNow = (skip = -1): OmittedMessages => {
    const refs: Array<string> = []
    const named = new Set<string>()
    let unnamed = earlier.unnamed
    let chars = 0
    const name = (ref: string | undefined) => {
      if (ref !== undefined && named.has(ref)) return
      const cost = ref === undefined ? 0 : ref.length + 7
      if (ref === undefined || chars + cost > refRoom) {
        unnamed++
        return
      }
      named.add(ref)
      chars += cost
      refs.push(ref)
    }
    for (const c of instructions) {
      if (c.index !== skip && !admitted.has(c.index)) name(c.entry.kind === "instruction" ? c.entry.ref : undefined)
    }
    for (const ref of earlier.refs) name(ref)
    return { refs, unnamed }
  }
  /**
   * The admitted entries, and the runs of commands left out (with an earlier summary's count): a command with no form
   * kept whose short form a kept short line shows adds its runs to that line; any other adds them to the count.
   */
  const keptNow = (): { readonly entries: ReadonlyArray<ManifestEntry>; readonly runsLeft: number } => {
    const lines = new Map<string, number>()
    for (const [index, form] of admitted) {
      if (form.kind === "command" && form.brief === true) lines.set(form.text, index)
    }
    const more = new Map<number, number>()
    let runsLeft = earlierRuns
    candidates.forEach((entry, index) => {
      if (entry.kind !== "command" || admitted.has(index)) return
      const line = lines.get(briefCommand(entry.text))
      if (line === undefined) runsLeft += entry.runs
      else more.set(line, (more.get(line) ?? 0) + entry.runs)
    })
    const entries = candidates.flatMap((_, index) => {
      const form = admitted.get(index)
      return form === undefined ?
        [] :
        form.kind === "command" && more.has(index)
        ? [{ ...form, runs: form.runs + more.get(index)! }]
        : [form]
    })
    return { entries, runsLeft }
  }
  const lineChars = (omitted: OmittedMessages): number => hasOmitted(omitted) ? renderOmitted(omitted).length + 1 : 0
  /** Each entry's line, rendered once: the passes below weigh the same entries and forms again and again. */
  const lines = new Map<ManifestEntry, string>()
  const rendered = (entry: ManifestEntry): string => {
    const known = lines.get(entry)
    if (known !== undefined) return known
    const line = renderEntry(entry)
    lines.set(entry, line)
    return line
  }
  /** `formAt(candidates[index], level)`, made once per entry and level (so that its line is rendered once). */
  const forms = new Map<number, ManifestEntry>()
  const formOf = (index: number, level: number): ManifestEntry => {
    const key = index * 4 + level
    const known = forms.get(key)
    if (known !== undefined) return known
    const form = formAt(candidates[index]!, level)
    forms.set(key, form)
    return form
  }
  // `omittedNow`'s references as numbers (one per distinct reference, -1 for none), for `lineWithout`
  const refIds = new Map<string, number>()
  const idOf = (ref: string | undefined): number => {
    if (ref === undefined) return -1
    const id = refIds.get(ref)
    if (id !== undefined) return id
    refIds.set(ref, refIds.size)
    return refIds.size - 1
  }
  const instructionRefs = instructions.map((c) => idOf(c.entry.kind === "instruction" ? c.entry.ref : undefined))
  const earlierRefs = earlier.refs.map(idOf)
  const refCosts = Array.from(refIds.keys(), (ref) => ref.length + 7)
  /** The call of `lineWithout` that named each reference last. */
  const namedIn = new Int32Array(refIds.size)
  let call = 0
  /**
   * `lineChars(omittedNow(skip))` without building the line: the same pass over the same references, counted in
   * numbers.
   */
  const lineWithout = (skip: number): number => {
    call++
    let [count, chars, unnamed] = [0, 0, earlier.unnamed]
    const name = (id: number): void => {
      if (id !== -1 && namedIn[id] === call) return
      const cost = id === -1 ? 0 : refCosts[id]!
      if (id === -1 || chars + cost > refRoom) {
        unnamed++
        return
      }
      namedIn[id] = call
      chars += cost
      count++
    }
    for (let i = 0; i < instructions.length; i++) {
      const index = instructions[i]!.index
      if (index !== skip && !admitted.has(index)) name(instructionRefs[i]!)
    }
    for (const id of earlierRefs) name(id)
    return omittedChars(count, chars, unnamed)
  }
  const admitEntry = (index: number, form: ManifestEntry, cost: number) => {
    const before = admitted.get(index)
    admitted.set(index, form)
    if (form.kind === "command") briefs.add(briefCommand(form.text))
    steps.push(before === undefined ? { _tag: "Entry", index, form } : { _tag: "Entry", index, form, before })
    used += cost
  }
  const compose = (): string => {
    const { entries, runsLeft } = keptNow()
    const omitted = omittedNow()
    const kept: Manifest = {
      entries,
      ...(hasOmitted(omitted) ? { omitted } : {}),
      ...(runsLeft > 0 ? { omittedRuns: runsLeft } : {})
    }
    const block = entries.length === 0 && !hasOmitted(omitted) && runsLeft === 0 ? "" : `${renderManifest(kept)}\n\n`
    return `${body}\n\n${block}${renderKept(files, keep)}`
  }
  // the bare message: the body, an empty manifest block, the line counting every run of a command and the files list
  // with every path counted, not listed (the omitted line is counted apart)
  const allRuns = candidates.reduce((n, e) => e.kind === "command" ? n + e.runs : n, earlierRuns)
  let used = `${body}\n\n${renderKept(files, keep)}`.length + renderManifest({ entries: [] }).length + 2 +
    (allRuns > 0 ? omittedRuns(allRuns).length + 1 : 0)
  // the user's messages: each whole where the room allows, beside the omitted line naming those not (yet) admitted;
  // a second sweep admits those the line's room kept out, now that it names fewer
  for (const _ of [0, 1]) {
    for (const c of instructions) {
      if (admitted.has(c.index)) continue
      const cost = rendered(c.entry).length + 1
      if (fits(used + cost + lineWithout(c.index), limit)) admitEntry(c.index, c.entry, cost)
    }
  }
  const line = lineChars(omittedNow())
  // unresolved errors, the status board, the plan
  for (const c of [...tier(2), ...tier(3)]) {
    const cost = rendered(c.entry).length + 1
    if (fits(used + line + cost, limit)) admitEntry(c.index, c.entry, cost)
  }
  // the files list: the newest paths, modified first, within `chars` and `room`; a list kept whole loses its omitted
  // line
  const admitPaths = (chars: number, room: number) => {
    for (const kind of ["modified", "read"] as const) {
      const list = files[kind]
      const counted = (files.omitted?.[kind] ?? 0) > 0
      for (let i = list.length - 1 - keep[kind]; i >= 0; i--) {
        const cost = pathLine(kind, list[i]!).length + 1
        // the last path of a list with nothing else left out takes the omitted line's place
        const saved = i === 0 && !counted ? omittedPaths(kind, 1).length + 1 : 0
        if (cost - saved > chars || !fits(used + line + cost - saved, room)) return
        chars -= cost - saved
        used += cost - saved
        keep[kind]++
        steps.push({ _tag: "Path", kind })
      }
    }
  }
  admitPaths(Math.floor(limit * SUMMARY_FILES_SHARE) * CHARS_PER_TOKEN, limit)
  const olderRoom = Math.floor(limit * SUMMARY_OLDER_SHARE)
  // the command trail: every command in its short form, newest first, within a room of its own (and the earlier
  // entries' share for those of earlier spans), until one does not fit (one whose short form is already kept is named
  // by it); the identifiers rank above it, and their lines (within a room of their own too) are kept free of it. None
  // while a message of the user is left out.
  const identifiers = candidates.reduce((n, e) => e.kind === "identifier" ? n + rendered(e).length + 1 : n, 0)
  const wordsWhole = instructions.every((c) => admitted.has(c.index))
  let trailRoom = Math.floor(limit * SUMMARY_TRAIL_SHARE) * CHARS_PER_TOKEN
  const commands = classed.filter((c) => c.entry.kind === "command")
  commands.sort((a, b) => a.entry.age - b.entry.age || a.index - b.index)
  for (const { entry, index } of wordsWhole ? commands : []) {
    const brief = formOf(index, 0)
    if (briefs.has(brief.text)) continue
    const cost = rendered(brief).length + 1
    if (cost > trailRoom || !fits(used + line + identifiers + cost, entry.age === 0 ? limit : olderRoom)) break
    trailRoom -= cost
    admitEntry(index, brief, cost)
  }
  // the rest: shortest forms first, then longer ones; at each, the span's own entries first, then the earlier ones
  const rest = classed.filter((c) => c.order.tier >= REST_TIER).map((c) => ({ ...c, rank: keepRank(c.entry) }))
  const fresh = (e: ManifestEntry): number => e.age === 0 && e.kind !== "file" ? 0 : 1
  rest.sort((a, b) => fresh(a.entry) - fresh(b.entry) || a.rank - b.rank || a.index - b.index)
  for (const level of [0, 1, 2, 3]) {
    for (const group of [0, 1]) {
      const room = group === 0 ? limit : olderRoom
      for (const { entry, index } of rest) {
        if (fresh(entry) !== group || (entry.kind === "command" && !wordsWhole)) continue
        const form = formOf(index, level)
        const now = admitted.get(index)
        if (now === undefined) {
          // a command whose short form another one's line already shows enters whole
          const least = entry.kind === "command" && briefs.has(briefCommand(entry.text)) ? 3 : 0
          if (level !== least) continue
          const cost = rendered(form).length + 1
          if (fits(used + line + cost, room)) admitEntry(index, form, cost)
          continue
        }
        const [longer, kept] = [rendered(form), rendered(now)]
        if (longer !== kept && fits(used + line + longer.length - kept.length, room)) {
          admitEntry(index, form, longer.length - kept.length)
        }
      }
    }
  }
  // the files list again, in the room the rest left under the earlier entries' share
  admitPaths(Number.POSITIVE_INFINITY, olderRoom)
  // the estimate per part is close, not exact: take back the last admitted until the whole message fits, and at the
  // end, the references of the omitted line
  let result = compose()
  while (messageTokens(result) > limit && (steps.length > 0 || refRoom > 0)) {
    const step = steps.pop()
    if (step === undefined) refRoom = 0
    else if (step._tag === "Path") keep[step.kind]--
    else if (step.before === undefined) admitted.delete(step.index)
    else admitted.set(step.index, step.before)
    result = compose()
  }
  return result
}

/**
 * The tokens of the smallest summary message that keeps what the manifest keeps under `budgetTokens`: the entries
 * and the files list admitted within the budget less the model text's share (`SUMMARY_TEXT_SHARE`), and
 * `SUMMARY_TEXT_RESERVE_TOKENS` for the text. `Compact.prepareCompaction` skips a pass (`TooLittleFreed`) whose head
 * would not free `minFreedTokens` with a summary this large, so a head too short to hold the manifest waits for more
 * turns instead of squeezing it.
 * @category manifest
 */
export const summaryFloorTokens = (manifest: Manifest, files: FileLists, budgetTokens: number): number =>
  manifestTokens(manifest, files, budgetTokens) + SUMMARY_TEXT_RESERVE_TOKENS

/** The tokens of a summary message with an empty text and the parts admitted under the budget less the text's share. */
const manifestTokens = (manifest: Manifest, files: FileLists, budgetTokens: number): number => {
  const known = manifestTokensFound.get(manifest)
  if (known !== undefined && known.files === files && known.budgetTokens === budgetTokens) return known.tokens
  const tokens = messageTokens(admit("", manifest, files, budgetTokens - textReserve(budgetTokens)))
  manifestTokensFound.set(manifest, { files, budgetTokens, tokens })
  return tokens
}

/**
 * The last `manifestTokens` of each manifest, with the files list and budget it was for: a compaction's floor
 * (`summaryFloorTokens`) and its summary (`summaryWithManifest`) ask for the same one.
 */
const manifestTokensFound = new WeakMap<
  Manifest,
  { readonly files: FileLists; readonly budgetTokens: number; readonly tokens: number }
>()

/**
 * The room a summary floor (`summaryFloorTokens`) keeps for the model's text beyond the manifest: 256 tokens. A text
 * gets at least this much when the head is short, and up to `SUMMARY_TEXT_SHARE` of the budget when the head allows.
 * @category constants
 */
export const SUMMARY_TEXT_RESERVE_TOKENS = 256

/**
 * The text of a summary message: the model's `text`, then the manifest's entries that fit, then the files list, all
 * within `limit = min(budgetTokens, spanTokens)`. The model's text claims up to `SUMMARY_TEXT_SHARE` of the budget
 * first; the manifest and the files list are admitted in the rest by `KEEP_ORDER` (`admit`: the user's messages
 * first, the tasks before the others and then newest first, each whole or named by its reference on the omitted
 * line; then unresolved errors, the status board and the plan; then the newest paths within `SUMMARY_FILES_SHARE`;
 * then every command in its short form, newest first, within `SUMMARY_TRAIL_SHARE`; then the rest, each one rank
 * lower per compaction of age); the text then gets what they leave, and a longer text is cut at its end (and marked).
 * Identifiers the model's text holds are not repeated (unless the text had to be cut). The message never exceeds
 * `limit`, unless the bare message (header, omitted lines naming nothing or counting every run of a command, an empty
 * files list) does.
 * @category manifest
 */
export const summaryWithManifest = (
  text: string,
  manifest: Manifest,
  files: FileLists,
  budget: SummaryBudget
): string => {
  const limit = Math.min(budget.budgetTokens, budget.spanTokens ?? Number.POSITIVE_INFINITY)
  const whole = text.trim()
  const folded = normalize(whole)
  const entries = manifest.entries.filter((e) => !(e.kind === "identifier" && inText(e, folded)))
  const unrepeated: Manifest = entries.length === manifest.entries.length ? manifest : { ...manifest, entries }
  // the text claims up to its share of the budget, but not the room the floor promised the manifest (beyond the
  // floor's own reserve for the text)
  const promised = manifestTokens(unrepeated, files, budget.budgetTokens)
  const textClaim = Math.max(
    0,
    Math.min(
      Math.ceil(whole.length / CHARS_PER_TOKEN) + 1,
      textReserve(budget.budgetTokens),
      Math.max(SUMMARY_TEXT_RESERVE_TOKENS, limit - promised)
    )
  )
  // the manifest's share, measured with an empty text; the text gets what it leaves
  const withEntries = (kept: Manifest) => admit("", kept, files, limit - textClaim)
  let manifestPart = withEntries(unrepeated)
  const cut = (room: number): string =>
    room < CUT_NOTE.length ? "" : headOf(whole, room - CUT_NOTE.length).trimEnd() + CUT_NOTE
  // the text gets what the entries leave, up to its claim or its share of the budget, whichever is more: beyond
  // that, a long text (an extractive one always is) would grow every summary to its budget
  const textRoom = (part: string): number =>
    (Math.min(limit - messageTokens(part), Math.max(textClaim, textReserve(budget.budgetTokens)))) *
      CHARS_PER_TOKEN - 8
  let room = textRoom(manifestPart)
  if (whole.length <= room) return `${whole}${manifestPart}`
  // a cut text may have lost identifiers it held: none is left out then
  if (unrepeated !== manifest) manifestPart = withEntries(manifest)
  room = textRoom(manifestPart)
  // a limit so small that the manifest's bare frame leaves the text less than its claim: the text goes first (it
  // carries an earlier summary, which nothing else does), and the manifest is left out
  const claimed = textClaim * CHARS_PER_TOKEN - 8
  if (room < Math.min(claimed, whole.length)) {
    const alone = Math.max(room, textRoom(""))
    return whole.length <= alone ? whole : cut(alone)
  }
  return `${cut(room)}${manifestPart}`
}
