/**
 * Reading JSONL: one line into its JSON values (`parseJsonLine`), and `LineReader`, which decides the mode from the
 * first line and collects the entries.
 *
 * @internal
 */
import { EXPECTED, ImportError, preview } from "./model.ts"
import * as Predicate from "effect/Predicate"

// ============================================================================
// Line parsing
// ============================================================================

/**
 * Parses one JSONL line. A line holding several JSON values with no newline between them (`{…}{…}`) is split into
 * its values. Returns `undefined` when the line is not JSON.
 * @category parsing
 */
export const parseJsonLine = (line: string): ReadonlyArray<unknown> | undefined => {
  try {
    return [JSON.parse(line)]
  } catch {
    const pieces = splitConcatenated(line)
    if (pieces === undefined || pieces.length < 2) return undefined
    const values: Array<unknown> = []
    for (const piece of pieces) {
      try {
        values.push(JSON.parse(piece))
      } catch {
        return undefined
      }
    }
    return values
  }
}

/** Splits `{…}{…}` (top-level objects/arrays, whitespace between) at depth 0; undefined on stray text. */
const splitConcatenated = (line: string): Array<string> | undefined => {
  const pieces: Array<string> = []
  let depth = 0
  let inString = false
  let start = -1
  for (let i = 0; i < line.length; i++) {
    const c = line.charCodeAt(i)
    if (inString) {
      if (c === 92) i++ // backslash: skip the escaped char
      else if (c === 34) inString = false
      continue
    }
    if (c === 34) inString = true
    else if (c === 123 || c === 91) {
      if (depth === 0) start = i
      depth++
    } else if (c === 125 || c === 93) {
      depth--
      if (depth < 0) return undefined
      if (depth === 0) pieces.push(line.slice(start, i + 1))
    } else if (depth === 0 && c !== 32 && c !== 9 && c !== 13) return undefined
  }
  return depth === 0 && !inString ? pieces : undefined
}

/** One JSON object read from a JSONL file, with its 1-based line number. @category parsing */
export interface JsonlEntry {
  readonly line: number
  readonly value: Readonly<Record<string, unknown>>
}

/** What reading JSONL lines produced: the objects, and the lines that held none. @category parsing */
export interface JsonlLines {
  readonly entries: ReadonlyArray<JsonlEntry>
  readonly lines: number
  readonly skipped: Readonly<Record<string, number>>
  readonly recoveredLines: number
  readonly warnings: ReadonlyArray<string>
}

/** Counts by reason; `total` is the sum. */
export class Counter {
  readonly counts: Record<string, number> = {}
  add(reason: string, n = 1): void {
    if (n > 0) this.counts[reason] = (this.counts[reason] ?? 0) + n
  }
  get total(): number {
    return Object.values(this.counts).reduce((a, b) => a + b, 0)
  }
}

/** True for a plain object (not an array). */
export const isRecord = (u: unknown): u is Readonly<Record<string, unknown>> =>
  Predicate.isObject(u) && !Array.isArray(u)

/**
 * Accumulates lines one at a time (the file importer feeds it from a stream). The first non-blank line decides the
 * mode: a JSONL entry starts JSONL mode; `[` or `{` that is not a JSONL entry starts JSON mode (lines are buffered and
 * parsed whole at the end); anything else fails at once, so a wrong file is rejected without reading it all.
 */
export class LineReader {
  mode: "undecided" | "jsonl" | "json" = "undecided"
  readonly entries: Array<JsonlEntry> = []
  readonly json: Array<string> = []
  readonly skipped = new Counter()
  lines = 0
  recoveredLines = 0
  firstInvalid: number | undefined

  push(text: string): ImportError | undefined {
    const line = ++this.lines
    if (this.mode === "json") {
      this.json.push(text)
      return undefined
    }
    if (text.includes("\u0000")) return binaryError(line)
    if (text.trim() === "") {
      if (this.mode === "jsonl") this.skipped.add("blank-line")
      else this.json.push(text)
      return undefined
    }
    const values = parseJsonLine(text)
    if (this.mode === "undecided") {
      const first = values?.[0]
      if (values !== undefined && isRecord(first) && !Array.isArray(first["messages"])) {
        this.mode = "jsonl"
        this.skipped.add("blank-line", this.json.length)
        this.json.length = 0
      } else if (/^\s*[[{]/.test(text)) {
        this.mode = "json"
        this.json.push(text)
        return undefined
      } else {
        return new ImportError({
          reason: "unknown-format",
          line,
          message: `not a known session format: ${EXPECTED}; line ${line} starts with ${preview(text)}`
        })
      }
    }
    if (values === undefined) {
      this.skipped.add("invalid-json")
      this.firstInvalid ??= line
      return undefined
    }
    if (values.length > 1) this.recoveredLines++
    for (const value of values) {
      if (isRecord(value)) this.entries.push({ line, value: this.entries.length === 0 ? value : slim(value) })
      else this.skipped.add("not-an-object")
    }
    return undefined
  }

  result(): JsonlLines {
    const warnings: Array<string> = []
    if (this.recoveredLines > 0) {
      warnings.push(`${this.recoveredLines} line(s) held several JSON objects with no newline between; split`)
    }
    if (this.firstInvalid !== undefined) {
      warnings.push(`${this.skipped.counts["invalid-json"]} line(s) were not JSON (first: line ${this.firstInvalid})`)
    }
    return {
      entries: this.entries,
      lines: this.lines,
      skipped: this.skipped.counts,
      recoveredLines: this.recoveredLines,
      warnings
    }
  }
}

/** Entry types that can become (part of) a message, in either JSONL format; `session` is pi's header. */
const CONTENT_TYPES: ReadonlySet<string> = new Set([
  "session",
  "message",
  "compaction",
  "custom_message",
  "branch_summary",
  "user",
  "assistant"
])

/**
 * Keeps only what the converters read of an entry that will be skipped (its type, tree links and sidechain flag), so
 * memory while streaming grows with the content kept, not with the size of skipped lines. The first entry is kept
 * whole: format detection and its error message read it.
 */
const slim = (value: Readonly<Record<string, unknown>>): Readonly<Record<string, unknown>> => {
  if (CONTENT_TYPES.has(value["type"] as string) && value["isSidechain"] !== true) return value
  const stub: Record<string, unknown> = {}
  for (const key of ["type", "id", "parentId", "isSidechain"]) if (key in value) stub[key] = value[key]
  return stub
}

/** The error for a NUL byte on `line`: the input is binary, not a session. */
export const binaryError = (line: number): ImportError =>
  new ImportError({
    reason: "binary",
    line,
    message: `not a known session format: ${EXPECTED}; found binary data (a NUL byte) on line ${line}`
  })
