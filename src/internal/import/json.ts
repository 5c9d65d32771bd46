/**
 * The JSON converter: a message array, an Anthropic Messages request, or a corpus file `{ system, messages, meta }`.
 *
 * @internal
 */
import type { Message } from "../../Message.ts"
import { normalizeUsage, validateAll } from "./builder.ts"
import { isRecord } from "./lines.ts"
import {
  type CompactionRecord,
  EXPECTED,
  ImportError,
  type Interruption,
  type MessageUsage,
  type Session
} from "./model.ts"
import * as Result from "effect/Result"

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
    recorded: [],
    skipped: { total: 0, byReason: {} },
    compactions,
    interrupted,
    lines: 1,
    mergedLines: 0,
    recoveredLines: 0,
    warnings
  })
}
