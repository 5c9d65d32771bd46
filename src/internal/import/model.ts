/**
 * The imported session's model (`Session` and its parts) and `ImportError`: what every converter returns.
 *
 * @internal
 */
import { type Message, MessageDecodeError } from "../../Message.ts"
import type { Usage } from "../../Policy.ts"
import type * as Cause from "effect/Cause"
import * as Schema from "effect/Schema"

// ============================================================================
// Models
// ============================================================================

/** The formats `importSession` recognises. @category models */
export type SessionFormat = "anthropic-request" | "messages" | "claude-code" | "pi" | "session-log"

/** Provider-reported usage of one assistant reply: the one `Policy.Usage` type, under its old name. @category models */
export type ProviderUsage = Usage

/** The usage the provider reported for `messages[messageIndex]` (an assistant reply). @category models */
export interface MessageUsage {
  readonly messageIndex: number
  readonly usage: ProviderUsage
}

/**
 * When a message was recorded and which model wrote it, read from the raw file beside the messages (never inside
 * them, so nothing of it is sent): `timestamp` is the time of its latest line in milliseconds since the epoch (a
 * message merged from several lines was complete at its last one); `model` is set on replies that name their model.
 * @category models
 */
export interface RecordedAt {
  readonly messageIndex: number
  readonly timestamp?: number
  readonly model?: string
}

/**
 * A compaction the original agent performed (pi `compaction` entries, or `meta.compactions` of a corpus file). The
 * messages are the full history; the compaction happened just before `messages[messageIndex]`.
 * @category models
 */
export interface CompactionRecord {
  /** The compaction happened just before `messages[messageIndex]`. */
  readonly messageIndex: number
  /** The first message the agent kept verbatim, when the entry says which one and it maps to a message. */
  readonly firstKeptMessageIndex?: number
  /** The context tokens before the compaction, as the agent recorded them, when it did. */
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
  /** The format the session was read as. */
  readonly format: SessionFormat
  /** The conversation, in the wire model. */
  readonly messages: ReadonlyArray<Message>
  /** The system prompt as one string (text blocks joined by a blank line), when the session has one. */
  readonly system?: string
  /** The usage the provider reported for each assistant reply that recorded one, in message order. */
  readonly usage: ReadonlyArray<MessageUsage>
  /** Per-message timestamps and reply models, in message order; empty when the format records none. */
  readonly recorded: ReadonlyArray<RecordedAt>
  /** Lines (or entries) that did not become part of a message, counted by reason. */
  readonly skipped: Skipped
  /** The compactions the original agent performed, in order. */
  readonly compactions: ReadonlyArray<CompactionRecord>
  /** The replies the provider ended abnormally (kept in `messages`). */
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

/** The schema fields of `ImportError`, written out so that its base class has an explicit type (JSR). */
type ImportErrorFields = {
  readonly reason: Schema.Literals<readonly ["empty", "binary", "unknown-format", "invalid-json", "invalid-message"]>
  readonly message: Schema.String
  readonly line: Schema.optionalKey<Schema.Int>
  readonly messageIndex: Schema.optionalKey<Schema.Int>
  readonly decodeError: Schema.optionalKey<typeof MessageDecodeError>
}

const ImportErrorBase: Schema.Class<
  ImportError,
  Schema.TaggedStruct<"ImportError", ImportErrorFields>,
  Cause.YieldableError
> = Schema.TaggedError<ImportError>()("ImportError", {
  reason: Schema.Literals(["empty", "binary", "unknown-format", "invalid-json", "invalid-message"]),
  message: Schema.String,
  line: Schema.optionalKey(Schema.Int),
  messageIndex: Schema.optionalKey(Schema.Int),
  decodeError: Schema.optionalKey(MessageDecodeError)
})

/**
 * Why an import failed. `message` is one line saying what was expected and what was found; `line` (1-based, JSONL)
 * or `messageIndex` says where; `decodeError` is set when a message failed `decodeMessages`.
 * @category errors
 */
export class ImportError extends ImportErrorBase {}

/** What the importer accepts, as every format error says it. */
export const EXPECTED = "expected a JSON message array, an Anthropic Messages request, Claude Code JSONL or pi JSONL"

/** The first 40 characters of `text`, JSON-quoted, for an error message. */
export const preview = (text: string): string => JSON.stringify(text.trimStart().slice(0, 40))
