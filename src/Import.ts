/**
 * Importers: turn a saved agent session into the wire model.
 *
 * `importSession(text)` auto-detects the format and converts it: a JSON message array, an Anthropic Messages request
 * (or a corpus file `{ system, messages, meta }`), Claude Code session JSONL, or pi session JSONL. `importSessionFile`
 * does the same from a file and streams JSONL line by line, so a large JSONL file is never held whole as one string.
 *
 * The conversion is pure (functions over parsed lines); reading the file is a thin shell around it. Every line that
 * does not become (part of) a message is counted in `skipped`, by reason. Structure is not repaired (orphan tool
 * calls, consecutive same-role messages stay as they are): only what the format itself splits is merged.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import type { PlatformError } from "effect/PlatformError"
import * as Predicate from "effect/Predicate"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { type ContentBlock, type Message, MessageDecodeError, validateMessage } from "./Message.ts"
import type { Usage } from "./Policy.ts"

// ============================================================================
// Models
// ============================================================================

/** The formats `importSession` recognises. @category models */
export type SessionFormat = "anthropic-request" | "messages" | "claude-code" | "pi"

/** Provider-reported usage of one assistant reply: the one `Policy.Usage` type, under its old name. @category models */
export type ProviderUsage = Usage

/** The usage the provider reported for `messages[messageIndex]` (an assistant reply). @category models */
export interface MessageUsage {
  readonly messageIndex: number
  readonly usage: ProviderUsage
}

/**
 * A compaction the original agent performed (pi `compaction` entries, or `meta.compactions` of a corpus file). The
 * messages are the full history; the compaction happened just before `messages[messageIndex]`.
 * @category models
 */
export interface CompactionRecord {
  readonly messageIndex: number
  /** The first message the agent kept verbatim, when the entry says which one and it maps to a message. */
  readonly firstKeptMessageIndex?: number
  readonly tokensBefore?: number
  /** Length of the summary text, in characters. */
  readonly summaryChars?: number
  /** 1-based line of the entry in a JSONL file. */
  readonly line?: number
}

/** An assistant reply the provider ended abnormally (`aborted`, `error`); it is kept in `messages`. @category models */
export interface Interruption {
  readonly messageIndex: number
  readonly stopReason: string
}

/** Lines (or entries) that did not become part of a message, counted by reason. @category models */
export interface Skipped {
  readonly total: number
  readonly byReason: Readonly<Record<string, number>>
}

/**
 * An imported session. `messages` pass `decodeMessages`. For JSONL formats the accounting is exact: every JSON object
 * read either starts a message, is merged into one (`mergedLines`), or is counted in `skipped`; lines holding no object
 * are counted there too (`blank-line`, `invalid-json`, `not-an-object`). So objects read =
 * `messages.length + mergedLines + skipped.total − (those three line-level counts)`.
 * @category models
 */
export interface Session {
  readonly format: SessionFormat
  readonly messages: ReadonlyArray<Message>
  readonly system?: string
  readonly usage: ReadonlyArray<MessageUsage>
  readonly skipped: Skipped
  readonly compactions: ReadonlyArray<CompactionRecord>
  readonly interrupted: ReadonlyArray<Interruption>
  /** Lines read (JSONL) or 1 (JSON). */
  readonly lines: number
  /** Lines merged into the message before them (Claude Code blocks, consecutive tool results). */
  readonly mergedLines: number
  /** Lines that held more than one JSON object and were split. */
  readonly recoveredLines: number
  /** Human-readable notes on anything unusual (recovered lines, invalid JSON, ignored system blocks). */
  readonly warnings: ReadonlyArray<string>
}

/**
 * Why an import failed. `message` is one line saying what was expected and what was found; `line` (1-based, JSONL)
 * or `messageIndex` says where; `decodeError` is set when a message failed `decodeMessages`.
 * @category errors
 */
export class ImportError extends Schema.TaggedError<ImportError>()("ImportError", {
  reason: Schema.Literals(["empty", "binary", "unknown-format", "invalid-json", "invalid-message"]),
  message: Schema.String,
  line: Schema.optionalKey(Schema.Int),
  messageIndex: Schema.optionalKey(Schema.Int),
  decodeError: Schema.optionalKey(MessageDecodeError)
}) {}

const EXPECTED = "expected a JSON message array, an Anthropic Messages request, Claude Code JSONL or pi JSONL"

const preview = (text: string): string => JSON.stringify(text.trimStart().slice(0, 40))

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

class Counter {
  readonly counts: Record<string, number> = {}
  add(reason: string, n = 1): void {
    if (n > 0) this.counts[reason] = (this.counts[reason] ?? 0) + n
  }
  get total(): number {
    return Object.values(this.counts).reduce((a, b) => a + b, 0)
  }
}

const isRecord = (u: unknown): u is Readonly<Record<string, unknown>> => Predicate.isObject(u) && !Array.isArray(u)

/**
 * Accumulates lines one at a time (the file importer feeds it from a stream). The first non-blank line decides the
 * mode: a JSONL entry starts JSONL mode; `[` or `{` that is not a JSONL entry starts JSON mode (lines are buffered and
 * parsed whole at the end); anything else fails at once, so a wrong file is rejected without reading it all.
 */
class LineReader {
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

const binaryError = (line: number): ImportError =>
  new ImportError({
    reason: "binary",
    line,
    message: `not a known session format: ${EXPECTED}; found binary data (a NUL byte) on line ${line}`
  })

// ============================================================================
// Usage
// ============================================================================

const num = (u: unknown): number => (typeof u === "number" && Number.isFinite(u) ? u : 0)

/**
 * Normalizes provider usage: the SDK's names (`input_tokens`, …) or pi's (`input`, `output`, `cacheRead`,
 * `cacheWrite`). Missing counts are 0; returns `undefined` when the value has neither shape.
 * @category usage
 */
export const normalizeUsage = (u: unknown): ProviderUsage | undefined => {
  if (!isRecord(u)) return undefined
  if ("input_tokens" in u || "output_tokens" in u) {
    return {
      input_tokens: num(u["input_tokens"]),
      output_tokens: num(u["output_tokens"]),
      cache_read_input_tokens: num(u["cache_read_input_tokens"]),
      cache_creation_input_tokens: num(u["cache_creation_input_tokens"])
    }
  }
  if ("input" in u || "output" in u) {
    return {
      input_tokens: num(u["input"]),
      output_tokens: num(u["output"]),
      cache_read_input_tokens: num(u["cacheRead"]),
      cache_creation_input_tokens: num(u["cacheWrite"])
    }
  }
  return undefined
}

// ============================================================================
// Shared builder
// ============================================================================

type Kind = "assistant" | "tool-results" | "other"

/** Builds the message list; `kinds` and `keys` record what each message came from, so merges know what they extend. */
class Builder {
  readonly messages: Array<{ role: "user" | "assistant"; content: Array<ContentBlock> }> = []
  readonly kinds: Array<Kind> = []
  readonly keys: Array<string | undefined> = []
  readonly lines: Array<number> = []
  readonly usage = new Map<number, ProviderUsage>()
  readonly interrupted: Array<Interruption> = []
  readonly compactions: Array<CompactionRecord> = []
  readonly skipped = new Counter()
  mergedLines = 0

  add(role: "user" | "assistant", content: Array<ContentBlock>, kind: Kind, line: number, key?: string): number {
    this.messages.push({ role, content })
    this.kinds.push(kind)
    this.keys.push(key)
    this.lines.push(line)
    return this.messages.length - 1
  }

  /** Breaks merging: the next tool result or block starts a new message (used at compactions). */
  barrier(): void {
    if (this.kinds.length > 0) this.kinds[this.kinds.length - 1] = "other"
  }

  finish(format: SessionFormat, read: JsonlLines): Result.Result<Session, ImportError> {
    for (const [reason, n] of Object.entries(read.skipped)) this.skipped.add(reason, n)
    const error = validateAll(this.messages, (i) => this.lines[i])
    if (error !== undefined) return Result.fail(error)
    return Result.succeed({
      format,
      messages: this.messages,
      usage: [...this.usage].sort((a, b) => a[0] - b[0]).map(([messageIndex, usage]) => ({ messageIndex, usage })),
      skipped: { total: this.skipped.total, byReason: this.skipped.counts },
      compactions: this.compactions,
      interrupted: this.interrupted,
      lines: read.lines,
      mergedLines: this.mergedLines,
      recoveredLines: read.recoveredLines,
      warnings: read.warnings
    })
  }
}

const validateAll = (
  messages: ReadonlyArray<unknown>,
  lineOf: (i: number) => number | undefined
): ImportError | undefined => {
  for (let i = 0; i < messages.length; i++) {
    const decodeError = validateMessage(messages[i], i)
    if (decodeError !== undefined) {
      const line = lineOf(i)
      return new ImportError({
        reason: "invalid-message",
        messageIndex: i,
        ...(line === undefined ? {} : { line }),
        decodeError,
        message: `invalid message ${i}${line === undefined ? "" : ` (from line ${line})`}: ${decodeError.message}`
      })
    }
  }
  return undefined
}

const contentBlocks = (content: unknown): Array<ContentBlock> =>
  typeof content === "string"
    ? [{ type: "text", text: content }]
    : Array.isArray(content)
    ? content as Array<ContentBlock>
    : []

const isToolResultBlock = (b: unknown): boolean => isRecord(b) && b["type"] === "tool_result"

// ============================================================================
// Claude Code
// ============================================================================

/**
 * Converts Claude Code session JSONL entries. Assistant lines sharing `message.id` are one reply (also when Claude
 * Code interleaved their tool results: a block whose reply sits just before the current tool-result message joins
 * that reply); consecutive tool-result lines are one user message. Sidechain lines (`isSidechain: true`), lines of
 * other types and empty replies are counted in `skipped`. Usage is the last one reported for each reply.
 * @category converters
 */
export const convertClaudeCode = (read: JsonlLines): Result.Result<Session, ImportError> => {
  const b = new Builder()
  for (const { line, value } of read.entries) {
    const type = typeof value["type"] === "string" ? value["type"] : "untyped"
    if (value["isSidechain"] === true) {
      b.skipped.add("sidechain")
      continue
    }
    const message = value["message"]
    if ((type !== "user" && type !== "assistant") || !isRecord(message)) {
      b.skipped.add(`type:${type}`)
      continue
    }
    const blocks = contentBlocks(message["content"])
    if (blocks.length === 0) {
      b.skipped.add(type === "assistant" ? "empty-assistant" : "empty-user")
      continue
    }
    const last = b.messages.length - 1
    if (type === "assistant") {
      const id = typeof message["id"] === "string" ? message["id"] : undefined
      const target = id === undefined
        ? -1
        : b.keys[last] === id
        ? last
        : b.kinds[last] === "tool-results" && b.keys[last - 1] === id && b.kinds[last - 1] === "assistant"
        ? last - 1
        : -1
      let index: number
      if (target >= 0) {
        b.messages[target]!.content.push(...blocks)
        b.mergedLines++
        index = target
      } else {
        index = b.add("assistant", [...blocks], "assistant", line, id)
      }
      const usage = normalizeUsage(message["usage"])
      if (usage !== undefined) b.usage.set(index, usage)
    } else if (blocks.every(isToolResultBlock)) {
      if (b.kinds[last] === "tool-results") {
        b.messages[last]!.content.push(...blocks)
        b.mergedLines++
      } else b.add("user", [...blocks], "tool-results", line)
    } else {
      b.add("user", [...blocks], "other", line)
    }
  }
  return b.finish("claude-code", read)
}

// ============================================================================
// pi
// ============================================================================

const str = (u: unknown): string => (typeof u === "string" ? u : "")

/** A pi content block as a wire block: `toolCall` → `tool_use`, `thinking` → (redacted_)thinking, images → base64. */
const piBlock = (block: unknown): ContentBlock => {
  if (!isRecord(block)) return { type: "text", text: String(block) }
  switch (block["type"]) {
    case "text":
      return { type: "text", text: str(block["text"]) }
    case "thinking":
      if (block["redacted"] === true) return { type: "redacted_thinking", data: str(block["thinkingSignature"]) }
      return typeof block["thinkingSignature"] === "string" && block["thinkingSignature"] !== ""
        ? { type: "thinking", thinking: str(block["thinking"]), signature: block["thinkingSignature"] }
        : { type: "thinking", thinking: str(block["thinking"]) }
    case "toolCall":
      return { type: "tool_use", id: str(block["id"]), name: str(block["name"]), input: block["arguments"] ?? {} }
    case "image":
      return {
        type: "image",
        source: { type: "base64", media_type: str(block["mimeType"]), data: str(block["data"]) }
      }
    default:
      return block as unknown as ContentBlock
  }
}

const piBlocks = (content: unknown): Array<ContentBlock> =>
  typeof content === "string" ? [{ type: "text", text: content }] : Array.isArray(content) ? content.map(piBlock) : []

/** pi's `bashExecution` (a command the user ran with `!`) as the text the model sees. */
const bashText = (m: Readonly<Record<string, unknown>>): string => {
  let text = `$ ${str(m["command"])}\n${str(m["output"])}`
  if (m["cancelled"] === true) text += "\n(command cancelled)"
  else if (typeof m["exitCode"] === "number" && m["exitCode"] !== 0) text += `\n(exit code ${m["exitCode"]})`
  return text
}

/** Ids of the entries on the active branch (from the last entry up its `parentId` chain); undefined for v1 files. */
const activeBranch = (entries: ReadonlyArray<JsonlEntry>): ReadonlySet<string> | undefined => {
  const byId = new Map<string, Readonly<Record<string, unknown>>>()
  let leaf: string | undefined
  for (const { value } of entries) {
    if (value["type"] !== "session" && typeof value["id"] === "string") {
      byId.set(value["id"], value)
      leaf = value["id"]
    }
  }
  if (leaf === undefined || ![...byId.values()].some((v) => "parentId" in v)) return undefined
  const path = new Set<string>()
  for (let id: unknown = leaf; typeof id === "string" && !path.has(id);) {
    path.add(id)
    id = byId.get(id)?.["parentId"]
  }
  return path
}

/**
 * Converts pi session JSONL entries (version 1 and later). `message` entries become messages: `toolResult` → a user
 * `tool_result` block (consecutive results share one user message), `bashExecution` → user text `$ cmd\noutput`
 * (unless `excludeFromContext`); `custom`/`hookMessage` messages, `custom_message` and `branch_summary` entries → user
 * text (pi puts them in the model's context); empty assistant replies are dropped and counted.
 * `compaction` entries are reported in `compactions`; on v2+ tree sessions, entries off the active branch are counted
 * as `off-branch`. All other entry types are counted in `skipped` as `type:<name>`.
 * @category converters
 */
export const convertPi = (read: JsonlLines): Result.Result<Session, ImportError> => {
  const b = new Builder()
  const branch = activeBranch(read.entries)
  const messageIndexOfEntry = new Map<number | string, number>()
  const pendingKept: Array<{ record: CompactionRecord; key: number | string }> = []
  read.entries.forEach(({ line, value }, entryIndex) => {
    messageIndexOfEntry.set(entryIndex, b.messages.length)
    if (typeof value["id"] === "string") messageIndexOfEntry.set(value["id"], b.messages.length)
    const type = typeof value["type"] === "string" ? value["type"] : "untyped"
    if (type === "session") return b.skipped.add("session-header")
    if (branch !== undefined && typeof value["id"] === "string" && !branch.has(value["id"])) {
      return b.skipped.add("off-branch")
    }
    if (type === "compaction") {
      b.barrier()
      const record: CompactionRecord = {
        messageIndex: b.messages.length,
        line,
        ...(typeof value["tokensBefore"] === "number" ? { tokensBefore: value["tokensBefore"] } : {}),
        ...(typeof value["summary"] === "string" ? { summaryChars: value["summary"].length } : {})
      }
      b.compactions.push(record)
      const key = typeof value["firstKeptEntryId"] === "string"
        ? value["firstKeptEntryId"]
        : typeof value["firstKeptEntryIndex"] === "number"
        ? value["firstKeptEntryIndex"]
        : undefined
      if (key !== undefined) pendingKept.push({ record, key })
      return b.skipped.add("compaction")
    }
    if (type === "custom_message") {
      b.add("user", piBlocks(value["content"]), "other", line)
      return
    }
    if (type === "branch_summary") {
      b.add("user", [{ type: "text", text: str(value["summary"]) }], "other", line)
      return
    }
    const message = value["message"]
    if (type !== "message" || !isRecord(message)) return b.skipped.add(`type:${type}`)
    const role = message["role"]
    const last = b.messages.length - 1
    switch (role) {
      case "user":
        b.add("user", piBlocks(message["content"]), "other", line)
        return
      case "assistant": {
        const blocks = piBlocks(message["content"])
        if (blocks.length === 0) return b.skipped.add("empty-assistant")
        const index = b.add("assistant", blocks, "assistant", line)
        const usage = normalizeUsage(message["usage"])
        if (usage !== undefined) b.usage.set(index, usage)
        const stop = message["stopReason"]
        if (stop === "aborted" || stop === "error") b.interrupted.push({ messageIndex: index, stopReason: stop })
        return
      }
      case "toolResult": {
        const result: ContentBlock = {
          type: "tool_result",
          tool_use_id: str(message["toolCallId"]),
          content: piBlocks(message["content"]),
          ...(message["isError"] === true ? { is_error: true } : {})
        }
        if (b.kinds[last] === "tool-results") {
          b.messages[last]!.content.push(result)
          b.mergedLines++
        } else b.add("user", [result], "tool-results", line)
        return
      }
      case "bashExecution":
        if (message["excludeFromContext"] === true) return b.skipped.add("bash-excluded")
        b.add("user", [{ type: "text", text: bashText(message) }], "other", line)
        return
      case "custom":
      case "hookMessage":
        b.add("user", piBlocks(message["content"]), "other", line)
        return
      default:
        return b.skipped.add(`role:${String(role)}`)
    }
  })
  for (const { record, key } of pendingKept) {
    const index = messageIndexOfEntry.get(key)
    if (index !== undefined) (record as { firstKeptMessageIndex?: number }).firstKeptMessageIndex = index
  }
  return b.finish("pi", read)
}

// ============================================================================
// JSON formats
// ============================================================================

/** The system prompt as one string: text blocks are joined with a blank line. */
const systemText = (system: unknown, warnings: Array<string>): string | undefined => {
  if (typeof system === "string") return system
  if (!Array.isArray(system)) return undefined
  const texts = system.filter((b) => isRecord(b) && b["type"] === "text" && typeof b["text"] === "string")
  if (texts.length < system.length) warnings.push(`${system.length - texts.length} non-text system block(s) ignored`)
  return texts.map((b) => b.text as string).join("\n\n")
}

/**
 * Converts an already-parsed JSON value: a bare message array, or an object with a `messages` array (an Anthropic
 * Messages request, or a corpus file with `system`, `messages`, `meta`). Messages are validated and returned as
 * they are (extras such as `_usage` kept); `_usage` → `usage`, `_stop_reason` (the corpus sets it only on errored or
 * aborted replies) → `interrupted`, and `meta.compactions` → `compactions`.
 * @category converters
 */
export const convertJson = (value: unknown): Result.Result<Session, ImportError> => {
  const isRequest = isRecord(value) && Array.isArray(value["messages"])
  if (!isRequest && !Array.isArray(value)) {
    return Result.fail(
      new ImportError({
        reason: "unknown-format",
        message: `not a known session format: ${EXPECTED}; found JSON ${
          isRecord(value) ? `object with keys ${JSON.stringify(Object.keys(value).slice(0, 6))}` : typeof value
        }`
      })
    )
  }
  const messages = (isRequest ? value["messages"] : value) as ReadonlyArray<unknown>
  const error = validateAll(messages, () => undefined)
  if (error !== undefined) return Result.fail(error)
  const warnings: Array<string> = []
  const usage: Array<MessageUsage> = []
  const interrupted: Array<Interruption> = []
  messages.forEach((m, messageIndex) => {
    const u = normalizeUsage((m as Record<string, unknown>)["_usage"])
    if (u !== undefined) usage.push({ messageIndex, usage: u })
    const stop = (m as Record<string, unknown>)["_stop_reason"]
    if (typeof stop === "string") interrupted.push({ messageIndex, stopReason: stop })
  })
  const system = isRequest ? systemText(value["system"], warnings) : undefined
  const meta = isRequest ? value["meta"] : undefined
  const compactions: Array<CompactionRecord> = isRecord(meta) && Array.isArray(meta["compactions"])
    ? meta["compactions"].filter(isRecord).filter((c) => typeof c["at_message_index"] === "number").map((c) => ({
      messageIndex: c["at_message_index"] as number,
      ...(typeof c["firstKept_message_index"] === "number"
        ? { firstKeptMessageIndex: c["firstKept_message_index"] }
        : {}),
      ...(typeof c["tokensBefore"] === "number" ? { tokensBefore: c["tokensBefore"] } : {}),
      ...(typeof c["summary_chars"] === "number" ? { summaryChars: c["summary_chars"] } : {})
    }))
    : []
  return Result.succeed({
    format: isRequest ? "anthropic-request" : "messages",
    messages: messages as ReadonlyArray<Message>,
    ...(system === undefined ? {} : { system }),
    usage,
    skipped: { total: 0, byReason: {} },
    compactions,
    interrupted,
    lines: 1,
    mergedLines: 0,
    recoveredLines: 0,
    warnings
  })
}

// ============================================================================
// Detection
// ============================================================================

const CLAUDE_CODE_TYPES: ReadonlySet<string> = new Set(["user", "assistant"])

/**
 * Picks the JSONL converter: pi when the first entry is a `session` header, Claude Code when any entry is a
 * `user`/`assistant` line with a `message` object; otherwise an `unknown-format` error.
 * @category converters
 */
export const convertJsonl = (read: JsonlLines): Result.Result<Session, ImportError> => {
  const first = read.entries[0]
  if (first === undefined) {
    return Result.fail(
      new ImportError({ reason: "empty", message: `empty input: ${EXPECTED}; found no JSON object on any line` })
    )
  }
  if (first.value["type"] === "session") return convertPi(read)
  if (read.entries.some((e) => CLAUDE_CODE_TYPES.has(e.value["type"] as string) && isRecord(e.value["message"]))) {
    return convertClaudeCode(read)
  }
  return Result.fail(
    new ImportError({
      reason: "unknown-format",
      line: first.line,
      message: `not a known session format: ${EXPECTED}; JSONL, but line ${first.line} is not a pi "session" header ` +
        `and no line is a Claude Code user/assistant entry (line ${first.line} has keys ${
          JSON.stringify(Object.keys(first.value).slice(0, 6))
        })`
    })
  )
}

const finishReader = (reader: LineReader): Result.Result<Session, ImportError> => {
  if (reader.mode === "jsonl") return convertJsonl(reader.result())
  if (reader.mode === "undecided") {
    return Result.fail(new ImportError({ reason: "empty", message: `empty input: ${EXPECTED}; found no content` }))
  }
  return parseWholeJson(reader.json.join("\n"))
}

const parseWholeJson = (text: string): Result.Result<Session, ImportError> => {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch (cause) {
    return Result.fail(
      new ImportError({
        reason: "invalid-json",
        message: `invalid JSON: ${EXPECTED}; ${cause instanceof Error ? cause.message : String(cause)}`
      })
    )
  }
  return convertJson(value)
}

/** Splits text into lines (`\n`, `\r\n`, `\r`) and reads them. */
const readText = (text: string): Result.Result<Session, ImportError> => {
  const reader = new LineReader()
  const lines = text.split(/\r\n|\r|\n/)
  if (lines.at(-1) === "") lines.pop()
  for (const line of lines) {
    const error = reader.push(line)
    if (error !== undefined) return Result.fail(error)
  }
  return finishReader(reader)
}

/**
 * Imports a session from its text, auto-detecting the format (JSON message array, Anthropic Messages request or
 * corpus file, Claude Code JSONL, pi JSONL). The messages of the result pass `decodeMessages`. Fails with
 * `ImportError` when the text is empty, binary, not a known format, or holds an invalid message.
 * @category importing
 */
export const importSession = (text: string): Effect.Effect<Session, ImportError> =>
  Effect.suspend(() => {
    if (text.includes("\u0000")) {
      return Effect.fail(binaryError(text.slice(0, text.indexOf("\u0000")).split("\n").length))
    }
    const trimmed = text.trimStart()
    if (trimmed.startsWith("[")) return Effect.fromResult(parseWholeJson(text))
    if (trimmed.startsWith("{")) {
      try {
        const value: unknown = JSON.parse(text)
        if (!isRecord(value) || Array.isArray(value["messages"])) return Effect.fromResult(convertJson(value))
      } catch {
        // several lines (JSONL) or broken JSON: read line by line
      }
    }
    return Effect.fromResult(readText(text))
  })

/**
 * Imports a session from a file. JSONL is streamed line by line (bytes → UTF-8 text → lines → parsed objects), so the
 * file is never held whole as one string; a file whose first line is not JSON fails without reading the rest. JSON
 * formats are read whole. Fails with `ImportError` like `importSession`, or `PlatformError` when reading fails.
 * @category importing
 */
export const importSessionFile = (
  path: string
): Effect.Effect<Session, ImportError | PlatformError, FileSystem.FileSystem> =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const reader = new LineReader()
    yield* fs.stream(path, { chunkSize: 1 << 20 }).pipe(
      Stream.decodeText,
      Stream.splitLines,
      Stream.runForEachArray((lines) => {
        for (const line of lines) {
          const error = reader.push(line)
          if (error !== undefined) return Effect.fail(error)
        }
        return Effect.void
      })
    )
    return yield* Effect.fromResult(finishReader(reader))
  })
