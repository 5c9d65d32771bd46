/**
 * What every converter shares: usage normalization, the message `Builder` (merges and accounting), and validation
 * of the built messages.
 *
 * @internal
 */
import { type ContentBlock, validateMessage } from "../../Message.ts"
import { Counter, isRecord, type JsonlLines } from "./lines.ts"
import {
  type CompactionRecord,
  ImportError,
  type Interruption,
  type ProviderUsage,
  type RecordedAt,
  type Session,
  type SessionFormat
} from "./model.ts"
import * as Result from "effect/Result"

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

/** What a built message came from, so a later line knows whether it may merge into it. */
type MessageSource = "assistant" | "tool-results" | "other"

/** Builds the message list; `kinds` and `keys` record what each message came from, so merges know what they extend. */
export class Builder {
  readonly messages: Array<{ role: "user" | "assistant"; content: Array<ContentBlock> }> = []
  readonly kinds: Array<MessageSource> = []
  readonly keys: Array<string | undefined> = []
  readonly lines: Array<number> = []
  readonly usage = new Map<number, ProviderUsage>()
  readonly times = new Map<number, number>()
  readonly models = new Map<number, string>()
  readonly interrupted: Array<Interruption> = []
  readonly compactions: Array<CompactionRecord> = []
  readonly skipped = new Counter()
  mergedLines = 0

  add(
    role: "user" | "assistant",
    content: Array<ContentBlock>,
    kind: MessageSource,
    line: number,
    key?: string
  ): number {
    this.messages.push({ role, content })
    this.kinds.push(kind)
    this.keys.push(key)
    this.lines.push(line)
    return this.messages.length - 1
  }

  /**
   * Notes a line's timestamp (an ISO string or milliseconds) and model on message `index`: the latest time wins, so a
   * merged message carries the time it was complete.
   */
  note(index: number, timestamp: unknown, model?: unknown): void {
    const ms = typeof timestamp === "number" ? timestamp : typeof timestamp === "string" ? Date.parse(timestamp) : NaN
    if (Number.isFinite(ms)) this.times.set(index, Math.max(ms, this.times.get(index) ?? -Infinity))
    if (typeof model === "string" && model !== "") this.models.set(index, model)
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
      recorded: recordedOf(this),
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

/** The notes as `RecordedAt`s, one per message that has any, in message order. */
const recordedOf = (b: Builder): Array<RecordedAt> => {
  const out: Array<RecordedAt> = []
  for (let i = 0; i < b.messages.length; i++) {
    const timestamp = b.times.get(i)
    const model = b.models.get(i)
    if (timestamp === undefined && model === undefined) continue
    out.push({
      messageIndex: i,
      ...(timestamp === undefined ? {} : { timestamp }),
      ...(model === undefined ? {} : { model })
    })
  }
  return out
}

/** The first built message that fails `validateMessage`, as an `invalid-message` error (with its line when known). */
export const validateAll = (
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

/** A message's content as blocks: a string becomes one text block; anything but an array, none. */
export const contentBlocks = (content: unknown): Array<ContentBlock> =>
  typeof content === "string"
    ? [{ type: "text", text: content }]
    : Array.isArray(content)
    ? content as Array<ContentBlock>
    : []

/** True for a `tool_result` block (before validation). */
export const isToolResultBlock = (b: unknown): boolean => isRecord(b) && b["type"] === "tool_result"
