/**
 * The offload pointer's text format, in one place: what a ref holds (`OffloadRef`), how its text is written
 * (`writePointer`, from few pieces since an eviction writes one per offloaded result) and read back (`parsePointer`,
 * which accepts only what `writePointer` writes), and the one length limit a pointer's text keeps
 * (`MAX_POINTER_LENGTH`). Before any escape, `pointerLengthAtLeast` bounds a pointer's length from below by its
 * fields' own lengths, so an eviction can drop a pointer that would not pay before it writes it.
 *
 * `Offload` is the public face of this format (its names, `isOffloaded` and the block-level reads); the eviction's
 * pricing (`internal/evictionRules`) uses the writer's fast paths here, which are not API.
 *
 * @internal
 */
import type { ToolResultBlock } from "../Message.ts"
import { estimateContentTokens } from "../Tokens.ts"
import type { LineRange } from "./toolInput.ts"

/** Why a result was offloaded (`Offload.OffloadReason`). */
export type OffloadReason = "superseded" | "modified" | "stale"

/**
 * What an offload pointer records (`Offload.OffloadRef`): a `Read` (re-reading `path`, with `range`, restores the
 * output) or an `Output` (the tool and a short form of its input); `tokens` the payload's estimated size, `images` its
 * image blocks.
 */
export type OffloadRef =
  | {
    readonly _tag: "Read"
    readonly tool: string
    readonly toolUseId: string
    readonly path: string
    readonly range?: LineRange
    readonly reason: OffloadReason
    readonly tokens: number
    readonly images: number
    /**
     * The caller offers the `recall` tool (`Recall`): a `modified` read's pointer then says that `recall` with its id
     * returns the content the read showed (re-reading shows the file as it is now). Absent: not offered.
     */
    readonly recall?: true
  }
  | {
    readonly _tag: "Output"
    readonly tool: string
    readonly toolUseId: string
    readonly input: string
    readonly reason: OffloadReason
    readonly tokens: number
    readonly images: number
    /**
     * What the removed output printed worth keeping (`anchors.printedValues`: its last lines holding a count or an
     * identifier, joined by ` | `), so a value it printed survives its offload; absent when it printed none.
     */
    readonly printed?: string
    /**
     * The URLs the removed output held, kept so a later `web_fetch` may still fetch them (else
     * `url_not_in_prior_context`); absent when it held none. No URL holds a space.
     */
    readonly urls?: ReadonlyArray<string>
    /**
     * The caller offers the `recall` tool (`Recall`): the pointer says to call it with its id to see the output
     * exactly (making the call again shows the state of now). Absent: not offered.
     */
    readonly recall?: true
  }

/**
 * The longest text read as a pointer: pointers are short, and longer text is never parsed, which keeps the check
 * cheap on real tool output. A pointer whose payload is larger than this text is never written
 * (`evictionRules.MAX_POINTER_TOKENS`).
 */
export const MAX_POINTER_LENGTH = 2048

/** The start of every pointer. */
const PREFIX = "[offloaded "

const OUTPUT_HEAD = PREFIX + 'output tool="'
const READ_HEAD = PREFIX + 'read tool="'

/**
 * The text after a pointer's tokens field: `] ` and the fixed instruction, by kind and reason. The parser requires
 * it, so stray text never parses as a pointer.
 */
const READ_TAIL: Readonly<Record<OffloadReason, string>> = {
  superseded: "] A later read of this file is further down. Re-read the file to restore this output.",
  modified: "] The file was changed after this read. Re-read the file to see its current content.",
  stale: "] This file read was removed to save context. Re-read the file to restore it."
}
const OUTPUT_TAIL = "] This tool output was removed to save context. Make the same call again to see it."

/** The tails of a pointer whose caller offers `recall` (`via=recall`): the exact way back is the id. */
const OUTPUT_RECALL_TAIL = "] This tool output was removed to save context. Call recall with this id to see it exactly."
const MODIFIED_RECALL_TAIL =
  "] The file was changed after this read. Re-read the file to see its current content, or call recall with this id to see what this read showed."

/** The field of a pointer whose caller offers `recall`, before its tail. */
const RECALL_FIELD = " via=recall"

/** The tail of a read pointer. */
const readTail = (reason: OffloadReason, recall: true | undefined): string =>
  recall === true && reason === "modified" ? RECALL_FIELD + MODIFIED_RECALL_TAIL : READ_TAIL[reason]

/** The fields from the closing quote of `id` to the tokens value, by reason. */
const REASON_FIELD: Readonly<Record<OffloadReason, string>> = {
  superseded: '" reason=superseded tokens=',
  modified: '" reason=modified tokens=',
  stale: '" reason=stale tokens='
}

/**
 * A character `JSON.stringify` may escape: a quote, backslash, control character or surrogate. The engine's scan for
 * it is faster than a loop over char codes (29 against 39 ns on the real session's tool_use ids).
 */
// deno-lint-ignore no-control-regex -- control characters are what JSON escapes
const ESCAPED = /["\\\u0000-\u001f\ud800-\udfff]/

/**
 * `JSON.stringify(text)` without its quotes: `text` itself when it needs no escape (the common case for names, ids
 * and paths, which a scan finds faster than `JSON.stringify` copies).
 */
export const escaped = (text: string): string => ESCAPED.test(text) ? JSON.stringify(text).slice(1, -1) : text

/**
 * `escaped` for a text that often needs an escape (most shell commands hold a quote): one native pass, no scan
 * first. Equal lengths mean nothing was escaped, since every escape is longer than its character.
 */
export const escapedOften = (text: string): string => {
  const quoted = JSON.stringify(text)
  return quoted.length === text.length + 2 ? text : quoted.slice(1, -1)
}

const INPUT_FIELD = '" input="'
const PATH_FIELD = '" path="'
/** The closing quote of the input or path and the id field's name. */
const ID_FIELD = '" id="'
/** A ranged read's path: its closing quote, the lines field's name; its id field's name after the range. */
const LINES_FIELD = '" lines='
const ID_AFTER_LINES = ' id="'
const IMAGES_FIELD = " images="
const URLS_FIELD = ' urls="'
const PRINTED_FIELD = ' printed="'

/** The printed field of an output pointer (before its urls), empty without values. */
const printedField = (printed: string | undefined): string =>
  printed === undefined || printed.length === 0 ? "" : `${PRINTED_FIELD}${escapedOften(printed)}"`

/** The urls field of an output pointer (before the tail), empty without URLs. */
const urlsField = (urls: ReadonlyArray<string> | undefined): string =>
  urls === undefined || urls.length === 0 ? "" : `${URLS_FIELD}${escaped(urls.join(" "))}"`

/**
 * A pointer's text up to the value of its input (`output`) or path field, for the last tool each was asked for: an
 * eviction writes many pointers of one tool in a row, and one string for them all saves each its own copy of it.
 */
const lastHead = {
  outputTool: "",
  output: OUTPUT_HEAD + INPUT_FIELD,
  readTool: "",
  read: READ_HEAD + PATH_FIELD
}

const outputHead = (tool: string): string => {
  if (tool !== lastHead.outputTool) {
    lastHead.outputTool = tool
    lastHead.output = OUTPUT_HEAD + escaped(tool) + INPUT_FIELD
  }
  return lastHead.output
}

const readHead = (tool: string): string => {
  if (tool !== lastHead.readTool) {
    lastHead.readTool = tool
    lastHead.read = READ_HEAD + escaped(tool) + PATH_FIELD
  }
  return lastHead.read
}

/**
 * The pointer text of `ref` (`Offload.formatOffloadRef`): one line, a bracketed header of `key=value` fields (strings
 * JSON-quoted) and a fixed instruction; deterministic (no time, no message index), every string field escaped once.
 * `escapedField`: the path of a read or the input of an output already escaped (an eviction escapes each file's path
 * once, and an input's head before it is clipped).
 */
export const writePointer = (ref: OffloadRef, escapedField?: string): string => {
  const reason = ref.reason
  const counts = ref.images > 0 ? `${ref.tokens}${IMAGES_FIELD}${ref.images}` : ref.tokens
  if (ref._tag === "Output") {
    return outputHead(ref.tool) + (escapedField ?? escapedOften(ref.input)) + ID_FIELD + escaped(ref.toolUseId) +
      REASON_FIELD[reason] + counts + printedField(ref.printed) + urlsField(ref.urls) +
      (ref.recall === true ? RECALL_FIELD + OUTPUT_RECALL_TAIL : OUTPUT_TAIL)
  }
  const range = ref.range
  const idField = range === undefined ? ID_FIELD : `${LINES_FIELD}${range.start}-${range.end ?? ""}${ID_AFTER_LINES}`
  return readHead(ref.tool) + (escapedField ?? escaped(ref.path)) + idField + escaped(ref.toolUseId) +
    REASON_FIELD[reason] + counts + readTail(reason, ref.recall)
}

const digits = (n: number): number => `${n}`.length

/**
 * At most the length of an output pointer with these fields (`input`: the input's length), and exactly it when no
 * string field needs an escape: the sum of the fields' own lengths, with nothing escaped or built.
 */
export const outputLengthAtLeast = (
  tool: string,
  toolUseId: string,
  input: number,
  reason: OffloadReason,
  tokens: number,
  images: number
): number =>
  OUTPUT_HEAD.length + INPUT_FIELD.length + input + ID_FIELD.length + tool.length + toolUseId.length +
  REASON_FIELD[reason].length + countsLength(tokens, images) + OUTPUT_TAIL.length

const countsLength = (tokens: number, images: number): number =>
  digits(tokens) + (images > 0 ? IMAGES_FIELD.length + digits(images) : 0)

/**
 * At most the length of `ref`'s pointer (`writePointer`), and exactly it when no string field needs an escape. A
 * pointer this long already is no smaller than its payload.
 */
export const pointerLengthAtLeast = (ref: OffloadRef): number => {
  if (ref._tag === "Output") {
    return outputLengthAtLeast(ref.tool, ref.toolUseId, ref.input.length, ref.reason, ref.tokens, ref.images) +
      (ref.printed === undefined || ref.printed.length === 0 ? 0 : PRINTED_FIELD.length + ref.printed.length + 1) +
      (ref.urls === undefined || ref.urls.length === 0
        ? 0
        : URLS_FIELD.length + 1 + ref.urls.reduce((n, u) => n + u.length + 1, -1)) +
      (ref.recall === true ? RECALL_FIELD.length + OUTPUT_RECALL_TAIL.length - OUTPUT_TAIL.length : 0)
  }
  const range = ref.range
  const idField = range === undefined
    ? ID_FIELD.length
    : LINES_FIELD.length + digits(range.start) + 1 + (range.end === undefined ? 0 : digits(range.end)) +
      ID_AFTER_LINES.length
  return READ_HEAD.length + PATH_FIELD.length + ref.path.length + idField + ref.tool.length +
    ref.toolUseId.length + REASON_FIELD[ref.reason].length + countsLength(ref.tokens, ref.images) +
    readTail(ref.reason, ref.recall).length
}

const FIELD = /^ ([a-z]+)=("(?:[^"\\]|\\.)*"|[0-9a-z-]+)/
const REASONS: ReadonlySet<string> = new Set(["superseded", "modified", "stale"])
const NAT = /^(?:0|[1-9][0-9]*)$/
const READ_FIELDS: ReadonlyArray<string> = ["tool", "path", "lines", "id", "reason", "tokens", "images", "via"]
const OUTPUT_FIELDS: ReadonlyArray<string> = [
  "tool",
  "input",
  "id",
  "reason",
  "tokens",
  "images",
  "printed",
  "urls",
  "via"
]

const parseRange = (text: string): LineRange | undefined => {
  const match = /^([1-9][0-9]*)-([1-9][0-9]*)?$/.exec(text)
  if (match === null) return undefined
  const start = Number(match[1])
  if (match[2] === undefined) return { start }
  const end = Number(match[2])
  return end >= start ? { start, end } : undefined
}

/**
 * The ref of a pointer text written by `writePointer`, or `undefined` for any other text (the canonical form is the
 * only one accepted: field order, spacing and instruction must match exactly). `parsePointer(writePointer(ref))`
 * deep-equals `ref`.
 */
export const parsePointer = (text: string): OffloadRef | undefined => {
  if (!text.startsWith(PREFIX)) return undefined
  const kind = text.startsWith("read", PREFIX.length)
    ? "read"
    : text.startsWith("output", PREFIX.length)
    ? "output"
    : ""
  if (kind === "") return undefined
  let rest = text.slice(PREFIX.length + kind.length)
  const fields = new Map<string, string>()
  for (;;) {
    const match = FIELD.exec(rest)
    if (match === null) break
    const key = match[1]!
    if (fields.has(key)) return undefined
    let value = match[2]!
    if (value.startsWith('"')) {
      try {
        value = JSON.parse(value) as string
      } catch {
        return undefined
      }
    }
    fields.set(key, value)
    rest = rest.slice(match[0].length)
  }
  if (!rest.startsWith("] ")) return undefined
  const tool = fields.get("tool")
  const toolUseId = fields.get("id")
  const reason = fields.get("reason")
  const tokens = fields.get("tokens")
  const images = fields.get("images") ?? "0"
  if (tool === undefined || toolUseId === undefined || reason === undefined || !REASONS.has(reason)) return undefined
  if (tokens === undefined || !NAT.test(tokens) || !NAT.test(images)) return undefined
  const via = fields.get("via")
  if (via !== undefined && via !== "recall") return undefined
  const common = {
    tool,
    toolUseId,
    reason: reason as OffloadReason,
    tokens: Number(tokens),
    images: Number(images),
    ...(via === undefined ? {} : { recall: true as const })
  }
  const expected = kind === "read" ? READ_FIELDS : OUTPUT_FIELDS
  for (const key of fields.keys()) if (!expected.includes(key)) return undefined
  let ref: OffloadRef
  if (kind === "read") {
    const path = fields.get("path")
    if (path === undefined) return undefined
    const lines = fields.get("lines")
    const range = lines === undefined ? undefined : parseRange(lines)
    if (lines !== undefined && range === undefined) return undefined
    ref = range === undefined ? { _tag: "Read", path, ...common } : { _tag: "Read", path, range, ...common }
  } else {
    const input = fields.get("input")
    if (input === undefined) return undefined
    const urls = fields.get("urls")?.split(" ")
    if (urls !== undefined && urls.some((u) => u === "")) return undefined
    const printed = fields.get("printed")
    ref = {
      _tag: "Output",
      input,
      ...common,
      ...(printed === undefined ? {} : { printed }),
      ...(urls === undefined ? {} : { urls })
    }
  }
  return writePointer(ref) === text ? ref : undefined
}

/**
 * The estimated tokens of a tool_result's payload, as the estimator counts its content inside a message: what
 * offloading it would remove before the pointer is added.
 * @category pointers
 */
export const payloadTokens = (block: ToolResultBlock): number =>
  block.content === undefined ? 0 : estimateContentTokens(block.content)
