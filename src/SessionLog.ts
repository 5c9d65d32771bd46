/**
 * The cold layer: an append-only session log, and a resume that rebuilds the same view.
 *
 * A session is a list of entries, one JSON object per line: `message` (one message, stored as it was given),
 * `eviction` (tool results replaced by their offload pointers) and `compaction` (a summary that replaces every view
 * message before the first kept entry; when the caller repaired the kept messages, it stores them too). The view an
 * agent sends to the model is *derived* from the entries by `rebuildView`, a pure fold; the live service keeps the
 * same fold up to date as entries are written, so the view a resumed session rebuilds is the view the live session
 * had, byte for byte. Every compaction entry stores the SHA-256 of the canonical JSON of the view it produced
 * (`viewHash`), and loading checks it.
 *
 * Layers: `SessionLog.layerMemory` (tests) and `SessionLog.layerJsonl({ directory, sessionId })`, one
 * `<sessionId>.jsonl` file per session written through Effect's `FileSystem` (mode 0600, whole-line appends, a torn
 * last line is reported and cut off, one writer per session guarded by a `<sessionId>.lock` file).
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Path from "effect/Path"
import type * as PlatformError from "effect/PlatformError"
import * as Predicate from "effect/Predicate"
import * as Result from "effect/Result"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"
import * as Semaphore from "effect/Semaphore"
import { createHash, randomUUID } from "node:crypto"
import process from "node:process"
import {
  blocksOf,
  type ContentBlock,
  isToolResult,
  type Message,
  type ToolResultBlock,
  validateMessage
} from "./Message.ts"
import { estimateTokens } from "./Tokens.ts"

// ============================================================================
// Entries
// ============================================================================

/** The entry format version this module writes. Entries with a higher `v` are refused, never guessed at. @category models */
export const CURRENT_VERSION = 1

const MessageSchema = Schema.declare(
  (u: unknown): u is Message => validateMessage(u, 0) === undefined,
  { expected: "a Messages API message" }
)

const ToolResultSchema = Schema.declare(
  (u: unknown): u is ToolResultBlock =>
    Predicate.hasProperty(u, "type") && u.type === "tool_result" &&
    validateMessage({ role: "user", content: [u] }, 0) === undefined,
  { expected: "a tool_result block" }
)

const Header = {
  v: Schema.Literal(CURRENT_VERSION),
  id: Schema.String.check(Schema.isMinLength(1)),
  parentId: Schema.NullOr(Schema.String),
  timestamp: Schema.Number
}

/** One message of the conversation, stored exactly as it was appended. @category schemas */
export const MessageEntry = Schema.Struct({ ...Header, type: Schema.Literal("message"), message: MessageSchema })
/** @category models */
export type MessageEntry = typeof MessageEntry.Type

/** One offloaded tool result: the `tool_result` with this `toolUseId` is replaced by `block` in the view. @category schemas */
export const Eviction = Schema.Struct({
  toolUseId: Schema.String.check(Schema.isMinLength(1)),
  block: ToolResultSchema
})
/** @category models */
export type Eviction = typeof Eviction.Type

/** Tool results offloaded from the view. Applies to every matching tool result still in the view. @category schemas */
export const EvictionEntry = Schema.Struct({
  ...Header,
  type: Schema.Literal("eviction"),
  evictions: Schema.Array(Eviction)
})
/** @category models */
export type EvictionEntry = typeof EvictionEntry.Type

/**
 * The kept part of a compaction, stored explicitly because the caller changed it (a `repair` of an aborted reply):
 * `messages` replace every view item up to and including the one from entry `through` (the last item of the snapshot
 * that was summarized; `null`: the snapshot was empty); the items after it (appended while the summarizer ran) follow.
 * @category schemas
 */
export const KeptMessages = Schema.Struct({
  through: Schema.NullOr(Schema.String),
  messages: Schema.Array(MessageSchema)
})
/** @category models */
export type KeptMessages = typeof KeptMessages.Type

/**
 * A compaction boundary: the view becomes `[summary, ...items from firstKeptEntryId on]` (`null`: nothing kept), or,
 * with `kept`, `[summary, ...kept.messages, ...items after kept.through]`. `summary` is the message heading the new
 * view. `viewHash` is `viewHash(view)` of that new view. `kept` is optional, so logs written without it read as before;
 * a reader that ignores it rebuilds another view and refuses it with `HashMismatch`, never silently.
 * @category schemas
 */
export const CompactionEntry = Schema.Struct({
  ...Header,
  type: Schema.Literal("compaction"),
  summary: MessageSchema,
  firstKeptEntryId: Schema.NullOr(Schema.String),
  tokensBefore: Schema.Number,
  tokensAfter: Schema.Number,
  summarizer: Schema.String,
  turnsSummarized: Schema.optionalKey(Schema.Int),
  kept: Schema.optionalKey(KeptMessages),
  viewHash: Schema.String.check(Schema.isPattern(/^[0-9a-f]{64}$/))
})
/** @category models */
export type CompactionEntry = typeof CompactionEntry.Type

/** Any log entry (version 1). @category schemas */
export const Entry = Schema.Union([MessageEntry, EvictionEntry, CompactionEntry])
/** @category models */
export type Entry = typeof Entry.Type

// ============================================================================
// Errors
// ============================================================================

/** Why a session log operation failed. @category errors */
export const SessionLogErrorReason = Schema.Literals([
  "Locked",
  "Io",
  "Corrupt",
  "HashMismatch",
  "InvalidId",
  "FutureVersion",
  "InvalidInput",
  "Conflict"
])
/** @category errors */
export type SessionLogErrorReason = typeof SessionLogErrorReason.Type

/** errno codes that are worth retrying: the same write can succeed a moment later. */
const RETRYABLE_CODES: ReadonlySet<string> = new Set(["EAGAIN", "EWOULDBLOCK", "EBUSY", "EINTR"])

/**
 * The one error of this module. `reason` says what happened; `entryId` / `line` / `lines` say where; `code` is the
 * errno code of an `Io` failure and `pid` the holder of a `Locked` session. Only `Io` failures with a transient code
 * (`EAGAIN`, `EBUSY`, `EINTR`) are `isRetryable`; `ENOSPC`, `EACCES` and every other reason are permanent.
 * @category errors
 */
export class SessionLogError extends Schema.TaggedError<SessionLogError>()("SessionLogError", {
  reason: SessionLogErrorReason,
  sessionId: Schema.optionalKey(Schema.String),
  detail: Schema.String,
  entryId: Schema.optionalKey(Schema.String),
  line: Schema.optionalKey(Schema.Int),
  lines: Schema.optionalKey(Schema.Array(Schema.Int)),
  code: Schema.optionalKey(Schema.String),
  pid: Schema.optionalKey(Schema.Int),
  cause: Schema.optionalKey(Schema.Defect())
}) {
  /** True for transient filesystem failures (`EAGAIN`, `EBUSY`, `EINTR`). */
  get isRetryable(): boolean {
    return this.reason === "Io" && this.code !== undefined && RETRYABLE_CODES.has(this.code)
  }
  override get message(): string {
    const where = [
      this.sessionId === undefined ? undefined : `session ${this.sessionId}`,
      this.entryId === undefined ? undefined : `entry ${this.entryId}`,
      this.line === undefined ? undefined : `line ${this.line}`,
      this.code
    ].filter((s) => s !== undefined).join(", ")
    return `${this.reason}${where === "" ? "" : ` (${where})`}: ${this.detail}`
  }
}

const errnoCode = (error: PlatformError.PlatformError): string | undefined => {
  const reason = error.reason
  const cause: unknown = reason.cause
  if (Predicate.hasProperty(cause, "code") && Predicate.isString(cause.code)) return cause.code
  if (reason._tag === "Busy") return "EBUSY"
  if (reason._tag === "WouldBlock") return "EAGAIN"
  if (reason._tag === "PermissionDenied") return "EACCES"
  return undefined
}

const ioError = (sessionId: string, what: string) => (error: PlatformError.PlatformError): SessionLogError => {
  const code = errnoCode(error)
  return new SessionLogError({
    reason: "Io",
    sessionId,
    detail: `${what}: ${error.message}`,
    ...(code === undefined ? {} : { code }),
    cause: error
  })
}

/**
 * How writes are retried: up to 5 retries, exponential from 10 ms, and only while the error `isRetryable`.
 * @category retry
 */
export const retryPolicy: Schedule.Schedule<unknown, SessionLogError> = Schedule.exponential("10 millis").pipe(
  Schedule.upTo({ times: 5 }),
  Schedule.setInputType<SessionLogError>(),
  Schedule.while(({ input }) => input.isRetryable)
)

// ============================================================================
// Hash
// ============================================================================

/**
 * Canonical JSON: object keys sorted, no whitespace, `undefined` members left out and non-finite numbers written as
 * `null` (what `JSON.stringify` does). Two values with the same JSON meaning get the same string.
 * @category hashing
 */
export const canonicalJson = (value: unknown): string => {
  const out: Array<string> = []
  writeCanonical(value, out)
  return out.join("")
}

const writeCanonical = (value: unknown, out: Array<string>): void => {
  if (typeof value === "string") {
    out.push(JSON.stringify(value))
  } else if (value === null || typeof value !== "object") {
    out.push(JSON.stringify(value) ?? "null")
  } else if (Array.isArray(value)) {
    out.push("[")
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out.push(",")
      const v: unknown = value[i]
      if (v === undefined || typeof v === "function" || typeof v === "symbol") out.push("null")
      else writeCanonical(v, out)
    }
    out.push("]")
  } else {
    const record = value as Record<string, unknown>
    const keys = Object.keys(record).sort()
    out.push("{")
    let first = true
    for (const key of keys) {
      const v = record[key]
      if (v === undefined || typeof v === "function" || typeof v === "symbol") continue
      out.push(first ? `${JSON.stringify(key)}:` : `,${JSON.stringify(key)}:`)
      first = false
      writeCanonical(v, out)
    }
    out.push("}")
  }
}

/**
 * The hash a compaction entry stores: SHA-256 of `canonicalJson(view)`, lowercase hex.
 * @category hashing
 */
export const viewHash = (view: ReadonlyArray<Message>): string => {
  // streamed: the same bytes as canonicalJson(view), with each message's canonical JSON cached by identity (kept
  // messages are hashed at every compaction, evicted ones are new objects)
  const hash = createHash("sha256").update("[")
  view.forEach((message, i) => {
    let json = canonicalCache.get(message)
    if (json === undefined) {
      json = canonicalJson(message)
      canonicalCache.set(message, json)
    }
    hash.update(i === 0 ? json : `,${json}`)
  })
  return hash.update("]").digest("hex")
}

const canonicalCache = new WeakMap<Message, string>()

// ============================================================================
// The view: a pure fold over the entries
// ============================================================================

interface Item {
  readonly entryId: string
  message: Message
}

const replaceToolResults = (message: Message, toolUseId: string, block: ToolResultBlock): Message => {
  if (typeof message.content === "string") return message
  let changed = false
  const content = message.content.map((b: ContentBlock) => {
    if (isToolResult(b) && b.tool_use_id === toolUseId && b !== block) {
      changed = true
      return block
    }
    return b
  })
  return changed ? { ...message, content } : message
}

/**
 * The fold behind `rebuildView` and the live service. Its items pair each view message with the id of the entry that
 * put it there (a message entry, or the compaction entry for the summary).
 */
class ViewState {
  items: Array<Item> = []
  /** tool_use_id → the view item holding that tool_result. */
  private byToolUse = new Map<string, Item>()
  head: string | null = null

  /** Applies one entry; returns a description of the problem when the entry cannot apply. */
  apply(entry: Entry): string | undefined {
    switch (entry.type) {
      case "message": {
        const item: Item = { entryId: entry.id, message: entry.message }
        this.items.push(item)
        this.index(item)
        break
      }
      case "eviction": {
        for (const { block, toolUseId } of entry.evictions) {
          const item = this.byToolUse.get(toolUseId)
          if (item !== undefined) item.message = replaceToolResults(item.message, toolUseId, block)
        }
        break
      }
      case "compaction": {
        const from = this.keptIndex(entry.firstKeptEntryId)
        if (from === -1) return `firstKeptEntryId ${entry.firstKeptEntryId} is not in the view`
        const summary: Item = { entryId: entry.id, message: entry.summary }
        if (entry.kept === undefined) {
          this.items = [summary, ...this.items.slice(from)]
        } else {
          const end = entry.kept.through === null ? 0 : this.indexOf(entry.kept.through) + 1
          if (end === 0 && entry.kept.through !== null) return `kept.through ${entry.kept.through} is not in the view`
          const kept = entry.kept.messages.map((message, i): Item => ({ entryId: keptEntryId(entry.id, i), message }))
          this.items = [summary, ...kept, ...this.items.slice(end)]
        }
        this.byToolUse = new Map()
        for (const item of this.items) this.index(item)
        break
      }
    }
    this.head = entry.id
    return undefined
  }

  /** The index of the first kept item, `items.length` for `null`, or -1 when the id is not in the view. */
  keptIndex(firstKeptEntryId: string | null): number {
    return firstKeptEntryId === null ? this.items.length : this.indexOf(firstKeptEntryId)
  }

  indexOf(entryId: string): number {
    return this.items.findIndex((i) => i.entryId === entryId)
  }

  view(): Array<Message> {
    return this.items.map((i) => i.message)
  }

  snapshot(): Snapshot {
    return { view: this.view(), entryIds: this.items.map((i) => i.entryId), head: this.head }
  }

  private index(item: Item): void {
    for (const block of blocksOf(item.message)) {
      if (isToolResult(block)) this.byToolUse.set(block.tool_use_id, item)
    }
  }
}

/** The id of the view item for `kept.messages[i]` of compaction entry `compactionId`. */
const keptEntryId = (compactionId: string, i: number): string => `${compactionId}#${i + 1}`

/**
 * A view with, for each message, the id of the entry it comes from (`entryIds[i]` for `view[i]`; a summary carries its
 * compaction entry's id `c`, and the i-th message of its `kept` part (from 1) `c#i`), and the id of the last entry
 * applied (`head`).
 * @category models
 */
export interface Snapshot {
  readonly view: ReadonlyArray<Message>
  readonly entryIds: ReadonlyArray<string>
  readonly head: string | null
}

/** A hash check that failed, or (with `repair`) was accepted and reported. @category models */
export interface HashMismatch {
  readonly entryId: string
  readonly expected: string
  readonly actual: string
}

const fold = (
  entries: ReadonlyArray<Entry>,
  onMismatch: (mismatch: HashMismatch) => SessionLogError | undefined
): Result.Result<ViewState, SessionLogError> => {
  const state = new ViewState()
  for (const entry of entries) {
    const problem = state.apply(entry)
    if (problem !== undefined) {
      return Result.fail(new SessionLogError({ reason: "Corrupt", entryId: entry.id, detail: problem }))
    }
    if (entry.type === "compaction") {
      const actual = viewHash(state.view())
      if (actual !== entry.viewHash) {
        const error = onMismatch({ entryId: entry.id, expected: entry.viewHash, actual })
        if (error !== undefined) return Result.fail(error)
      }
    }
  }
  return Result.succeed(state)
}

const mismatchError = (m: HashMismatch): SessionLogError =>
  new SessionLogError({
    reason: "HashMismatch",
    entryId: m.entryId,
    detail: `the rebuilt view hashes to ${m.actual}, the entry recorded ${m.expected}`
  })

/**
 * Rebuilds the view from the entries, purely. The definition, entry by entry, starting from an empty view:
 *
 * - `message`: its message is appended to the view (the same object, so its bytes are the ones stored).
 * - `eviction`: each `{ toolUseId, block }` replaces, in the view message that holds it, the `tool_result` block with
 *   that `tool_use_id` by `block`. Evictions whose result is no longer in the view do nothing.
 * - `compaction`: the view becomes `[summary, ...view from the message of entry firstKeptEntryId on]` (just `[summary]`
 *   when it is `null`). Evicted messages in the kept part stay evicted. With `kept`, it becomes
 *   `[summary, ...kept.messages, ...view after the message of entry kept.through]` instead (the stored messages
 *   replace the snapshot's kept part; messages appended after the snapshot follow, evicted ones evicted). Then
 *   `viewHash(view)` must equal the entry's `viewHash`.
 *
 * So the result is the latest summary plus the messages from its first kept entry on, with the evictions applied. It
 * fails with `HashMismatch` naming the first compaction whose hash does not match, or `Corrupt` when a compaction
 * keeps an entry that is not in the view.
 * @category view
 */
export const rebuildView = (entries: ReadonlyArray<Entry>): Result.Result<Snapshot, SessionLogError> =>
  Result.map(fold(entries, mismatchError), (state) => state.snapshot())

// ============================================================================
// Parsing a JSONL log
// ============================================================================

/** Something `load` found and did not fail on: a torn last line, or (with `repair`) damage it skipped. @category models */
export type LoadIssue =
  | { readonly _tag: "TornTail"; readonly line: number; readonly offset: number; readonly bytes: number }
  | { readonly _tag: "CorruptLine"; readonly line: number; readonly detail: string }
  | { readonly _tag: "BrokenChain"; readonly line: number; readonly entryId: string; readonly detail: string }
  | {
    readonly _tag: "HashMismatch"
    readonly line: number
    readonly entryId: string
    readonly expected: string
    readonly actual: string
  }

/** A loaded session: the rebuilt view (a `Snapshot`), every entry in order, and what was found on the way. @category models */
export interface Loaded extends Snapshot {
  readonly entries: ReadonlyArray<Entry>
  readonly issues: ReadonlyArray<LoadIssue>
}

/** Options for loading. With `repair`, damage is reported in `issues` instead of failing (see `load`). @category models */
export interface LoadOptions {
  readonly repair?: boolean
}

const formatIssue = SchemaIssue.makeFormatterDefault()
const decodeEntry = Schema.decodeUnknownResult(Entry)
const NEWLINE = 0x0a

interface Parsed {
  readonly entries: ReadonlyArray<Entry>
  readonly lines: ReadonlyArray<number>
  readonly issues: ReadonlyArray<LoadIssue>
  /** Bytes up to and including the last newline: what a writer keeps when it cuts a torn tail. */
  readonly completeBytes: number
}

const describeLine = (value: unknown): string => {
  const result = decodeEntry(value)
  if (Result.isSuccess(result)) return ""
  const formatted = formatIssue(result.failure.issue).split("\n").slice(0, 2).join(" ")
  const message = Predicate.hasProperty(value, "message") ? value.message : undefined
  const summary = Predicate.hasProperty(value, "summary") ? value.summary : undefined
  const kept = Predicate.hasProperty(value, "kept") && Predicate.hasProperty(value.kept, "messages") &&
      Array.isArray(value.kept.messages)
    ? value.kept.messages as ReadonlyArray<unknown>
    : []
  const compaction = Predicate.hasProperty(value, "type") && value.type === "compaction"
  const detail = Predicate.hasProperty(value, "type") && value.type === "message"
    ? validateMessage(message, 0)
    : compaction
    ? (summary === undefined ? undefined : validateMessage(summary, 0)) ??
      kept.map((m, i) => validateMessage(m, i)).find((e) => e !== undefined)
    : undefined
  return detail === undefined ? formatted : `${formatted} (${detail.message})`
}

/**
 * Parses the bytes of a JSONL log. A last line without its newline is a torn write: reported, skipped, never fatal.
 * A line of a newer `v` fails with `FutureVersion` (there is no safe way to skip it). Lines that do not decode, and
 * entries whose `parentId` is not the entry before them, fail with `Corrupt` listing the line numbers, or with
 * `repair` are reported and skipped (a broken chain is reported and the entry kept).
 */
const parseLog = (bytes: Uint8Array, options: LoadOptions): Result.Result<Parsed, SessionLogError> => {
  const repair = options.repair === true
  const completeBytes = bytes.lastIndexOf(NEWLINE) + 1
  const text = new TextDecoder().decode(bytes.subarray(0, completeBytes))
  const lines = text.split("\n")
  lines.pop()
  const entries: Array<Entry> = []
  const entryLines: Array<number> = []
  const issues: Array<LoadIssue> = []
  const corrupt: Array<{ readonly line: number; readonly entryId?: string; readonly detail: string }> = []
  const reportCorrupt = (c: { readonly line: number; readonly detail: string }) => {
    if (repair) issues.push({ _tag: "CorruptLine", ...c })
    else corrupt.push(c)
  }
  let previousValid = true
  for (let i = 0; i < lines.length; i++) {
    const line = i + 1
    let value: unknown
    try {
      value = JSON.parse(lines[i]!)
    } catch (e) {
      reportCorrupt({ line, detail: `not JSON: ${e instanceof Error ? e.message : String(e)}` })
      previousValid = false
      continue
    }
    const v = Predicate.hasProperty(value, "v") ? value.v : undefined
    if (typeof v === "number" && v > CURRENT_VERSION) {
      const id = Predicate.hasProperty(value, "id") && Predicate.isString(value.id) ? value.id : undefined
      return Result.fail(
        new SessionLogError({
          reason: "FutureVersion",
          line,
          ...(id === undefined ? {} : { entryId: id }),
          detail: `entry format v${v} is newer than this reader (v${CURRENT_VERSION}); upgrade effect-compaction`
        })
      )
    }
    const decoded = decodeEntry(value)
    if (Result.isFailure(decoded)) {
      reportCorrupt({ line, detail: describeLine(value) })
      previousValid = false
      continue
    }
    const entry = decoded.success
    const expectedParent = entries.length === 0 ? null : entries[entries.length - 1]!.id
    if (entry.parentId !== expectedParent && previousValid) {
      const detail = `parentId ${entry.parentId} does not follow the previous entry ${expectedParent}`
      if (repair) issues.push({ _tag: "BrokenChain", line, entryId: entry.id, detail })
      else corrupt.push({ line, entryId: entry.id, detail })
    }
    previousValid = true
    entries.push(entry)
    entryLines.push(line)
  }
  if (completeBytes < bytes.length) {
    issues.push({
      _tag: "TornTail",
      line: lines.length + 1,
      offset: completeBytes,
      bytes: bytes.length - completeBytes
    })
  }
  if (corrupt.length > 0) {
    const first = corrupt[0]!
    return Result.fail(
      new SessionLogError({
        reason: "Corrupt",
        line: first.line,
        lines: corrupt.map((c) => c.line),
        ...(first.entryId === undefined ? {} : { entryId: first.entryId }),
        detail: corrupt.slice(0, 3).map((c) => `line ${c.line}: ${c.detail}`).join("; ") +
          (corrupt.length > 3 ? `; and ${corrupt.length - 3} more` : "")
      })
    )
  }
  return Result.succeed({ entries, lines: entryLines, issues, completeBytes })
}

const loadBytes = (
  bytes: Uint8Array,
  options: LoadOptions
): Result.Result<
  { readonly loaded: Loaded; readonly state: ViewState; readonly completeBytes: number },
  SessionLogError
> =>
  Result.flatMap(parseLog(bytes, options), (parsed) => {
    const issues = [...parsed.issues]
    const lineOf = (entryId: string) => parsed.lines[parsed.entries.findIndex((e) => e.id === entryId)] ?? 0
    const folded = fold(parsed.entries, (m) => {
      if (options.repair === true) {
        issues.push({ _tag: "HashMismatch", line: lineOf(m.entryId), ...m })
        return undefined
      }
      return new SessionLogError({ ...mismatchError(m), line: lineOf(m.entryId) })
    })
    return Result.map(folded, (state) => ({
      loaded: { ...state.snapshot(), entries: parsed.entries, issues },
      state,
      completeBytes: parsed.completeBytes
    }))
  })

// ============================================================================
// Session ids
// ============================================================================

const SESSION_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/

/**
 * Checks a session id: 1–128 characters of `[A-Za-z0-9._-]`, starting with a letter or digit. So it has no path
 * separator and cannot be `.` or `..`: it never escapes the directory. Fails with `InvalidId`.
 * @category sessions
 */
export const validateSessionId = (sessionId: string): Effect.Effect<string, SessionLogError> =>
  SESSION_ID.test(sessionId) ? Effect.succeed(sessionId) : Effect.fail(
    new SessionLogError({
      reason: "InvalidId",
      detail: `session id ${JSON.stringify(sessionId)} must match ${SESSION_ID.source} (no path separators, no "..")`
    })
  )

// ============================================================================
// The service
// ============================================================================

/** What `recordCompaction` needs. @category models */
export interface CompactionInput {
  /** The summary message that replaces `snapshot.view[0, cut)` (with `kept`: the message heading the new view). */
  readonly summary: Message
  /** The snapshot that was summarized (from `SessionLog.snapshot`). Entries appended since are kept. */
  readonly snapshot: Snapshot
  /** How many messages of `snapshot.view` the summary replaces (0 ≤ cut ≤ snapshot.view.length). */
  readonly cut: number
  /** The name of the summarizer that wrote `summary`. */
  readonly summarizer: string
  /** Default: `estimateTokens` of the view before the boundary. */
  readonly tokensBefore?: number
  /** Default: `estimateTokens` of the view after the boundary. */
  readonly tokensAfter?: number
  readonly turnsSummarized?: number
  /**
   * The messages that follow `summary` in place of `snapshot.view.slice(cut)`, when the caller changed them (a
   * `repair` that answered an aborted tool call or merged messages). They are stored in the entry, so a resume rebuilds
   * them; entries appended after the snapshot still follow them. Fails with `Conflict` when an eviction changed
   * `snapshot.view.slice(cut)` since the snapshot (it would be undone). Leave it out when the kept messages are the
   * snapshot's: the entry then stores only ids.
   */
  readonly kept?: ReadonlyArray<Message>
  /**
   * The view the caller goes on with, built from `snapshot` (`[summary, ...snapshot.view.slice(cut)]`, or
   * `[summary, ...kept]`). When given, the boundary is written only if the log rebuilds exactly that (same
   * `viewHash`); otherwise nothing is written and it fails with `HashMismatch`. A safety net: a caller that changed the
   * kept messages without passing them as `kept` would otherwise diverge on resume.
   */
  readonly expectedView?: ReadonlyArray<Message>
}

/** The service over one session. @category services */
export interface SessionLogShape {
  readonly sessionId: string
  /** Appends each message as one entry, in order, after every entry already written. Returns their entry ids. */
  readonly append: (messages: ReadonlyArray<Message>) => Effect.Effect<ReadonlyArray<string>, SessionLogError>
  /** Records offloaded tool results (`block` must be a tool_result for `toolUseId`). */
  readonly recordEviction: (evictions: ReadonlyArray<Eviction>) => Effect.Effect<EvictionEntry, SessionLogError>
  /**
   * Records a compaction boundary as one atomic entry. Fails with `Conflict` when another compaction was recorded
   * since `input.snapshot` was taken, and `InvalidInput` for a bad summary or cut.
   */
  readonly recordCompaction: (input: CompactionInput) => Effect.Effect<CompactionEntry, SessionLogError>
  /** The live view with its entry ids: the fold of every entry written so far. */
  readonly snapshot: Effect.Effect<Snapshot>
  /**
   * Reads the stored log again and rebuilds the view, checking every compaction's hash. Fails with `Corrupt`,
   * `HashMismatch` or `FutureVersion`; with `{ repair: true }` corrupt lines are skipped and mismatched hashes accepted,
   * each reported in `issues` (a future version still fails). A torn last line is always reported and skipped.
   */
  readonly load: (options?: LoadOptions) => Effect.Effect<Loaded, SessionLogError>
  /** What opening the session found and fixed (a torn last line, which the writer cuts off before appending). */
  readonly recovered: ReadonlyArray<LoadIssue>
}

/** Where a session's bytes live. Appends are whole lines; `append` either writes all of `bytes` or fails. */
interface Storage {
  readonly read: Effect.Effect<Uint8Array, SessionLogError>
  readonly append: (bytes: Uint8Array, sync: boolean) => Effect.Effect<void, SessionLogError>
}

/** When the JSONL writer calls fsync: after compaction entries (default), after every append, or never. @category models */
export type SyncMode = "compaction" | "always" | "never"

const encoder = new TextEncoder()

const invalid = (sessionId: string, detail: string) =>
  new SessionLogError({ reason: "InvalidInput", sessionId, detail })

const make = Effect.fnUntraced(function* (
  sessionId: string,
  storage: Storage,
  initial: { readonly state: ViewState; readonly recovered: ReadonlyArray<LoadIssue> },
  sync: SyncMode
) {
  const state = initial.state
  const lock = yield* Semaphore.make(1)
  const serialized = <A>(effect: Effect.Effect<A, SessionLogError>) => Semaphore.withPermits(lock, 1, effect)

  const header = Effect.map(Clock.currentTimeMillis, (timestamp) => ({
    v: CURRENT_VERSION as typeof CURRENT_VERSION,
    id: randomUUID() as string,
    parentId: state.head,
    timestamp
  }))

  /**
   * Writes the entries as one write of whole lines, then applies them to the live state. Uninterruptible, so the live
   * state never misses an entry that reached the file (the next entry's `parentId` depends on it).
   */
  const write = (entries: ReadonlyArray<Entry>, syncNow: boolean) =>
    Effect.uninterruptible(Effect.gen(function* () {
      const bytes = encoder.encode(entries.map((e) => `${JSON.stringify(e)}\n`).join(""))
      yield* storage.append(bytes, syncNow || sync === "always").pipe(
        Effect.retry(retryPolicy),
        Effect.mapError((e) => e.sessionId === undefined ? new SessionLogError({ ...e, sessionId }) : e)
      )
      for (const entry of entries) state.apply(entry)
    }))

  const append = (messages: ReadonlyArray<Message>) =>
    serialized(Effect.gen(function* () {
      for (let i = 0; i < messages.length; i++) {
        const error = validateMessage(messages[i], i)
        if (error !== undefined) return yield* invalid(sessionId, error.message)
      }
      const entries: Array<MessageEntry> = []
      for (const message of messages) {
        const h = yield* header
        entries.push({ ...h, parentId: entries.at(-1)?.id ?? h.parentId, type: "message", message })
      }
      yield* write(entries, false)
      return entries.map((e) => e.id)
    }))

  const recordEviction = (evictions: ReadonlyArray<Eviction>) =>
    serialized(Effect.gen(function* () {
      for (const e of evictions) {
        if (!Schema.is(Eviction)(e) || e.block.tool_use_id !== e.toolUseId) {
          return yield* invalid(sessionId, `eviction of ${e.toolUseId}: block must be a tool_result for that id`)
        }
      }
      const entry: EvictionEntry = { ...(yield* header), type: "eviction", evictions }
      yield* write([entry], false)
      return entry
    }))

  const recordCompaction = (input: CompactionInput) =>
    serialized(Effect.gen(function* () {
      const summaryError = validateMessage(input.summary, 0)
      if (summaryError !== undefined) return yield* invalid(sessionId, `summary: ${summaryError.message}`)
      const { cut, snapshot } = input
      if (!Number.isInteger(cut) || cut < 0 || cut > snapshot.view.length) {
        return yield* invalid(sessionId, `cut ${cut} is outside the snapshot's view (0..${snapshot.view.length})`)
      }
      // the snapshot must still be a prefix of the live view: only appends and evictions may have happened since
      const items = state.items
      const stale = snapshot.entryIds.length > items.length ||
        snapshot.entryIds.some((id, i) => items[i]!.entryId !== id)
      if (stale) {
        return yield* new SessionLogError({
          reason: "Conflict",
          sessionId,
          detail: "another compaction was recorded after this snapshot was taken; summarize the new view"
        })
      }
      const firstKept = items[cut]?.entryId ?? null
      const before = state.view()
      const end = snapshot.entryIds.length
      let kept: KeptMessages | undefined = undefined
      if (input.kept !== undefined) {
        for (let i = 0; i < input.kept.length; i++) {
          const error = validateMessage(input.kept[i], i)
          if (error !== undefined) return yield* invalid(sessionId, `kept: ${error.message}`)
        }
        if (viewHash(before.slice(cut, end)) !== viewHash(snapshot.view.slice(cut))) {
          return yield* new SessionLogError({
            reason: "Conflict",
            sessionId,
            detail: "an eviction changed the kept messages after this snapshot was taken; compact the new view"
          })
        }
        kept = { through: snapshot.entryIds.at(-1) ?? null, messages: [...input.kept] }
      }
      const after = kept === undefined
        ? [input.summary, ...before.slice(cut)]
        : [input.summary, ...kept.messages, ...before.slice(end)]
      if (input.expectedView !== undefined) {
        const expected = viewHash(input.expectedView)
        const actual = viewHash(after.slice(0, 1 + (kept === undefined ? end - cut : kept.messages.length)))
        if (expected !== actual) {
          return yield* new SessionLogError({
            reason: "HashMismatch",
            sessionId,
            detail: `the caller's view (${expected}) is not the view the log rebuilds (${actual}): ` +
              "the kept messages were changed, so the boundary was not written"
          })
        }
      }
      const entry: CompactionEntry = {
        ...(yield* header),
        type: "compaction",
        summary: input.summary,
        firstKeptEntryId: firstKept,
        tokensBefore: input.tokensBefore ?? estimateTokens(before),
        tokensAfter: input.tokensAfter ?? estimateTokens(after),
        summarizer: input.summarizer,
        ...(input.turnsSummarized === undefined ? {} : { turnsSummarized: input.turnsSummarized }),
        ...(kept === undefined ? {} : { kept }),
        viewHash: viewHash(after)
      }
      yield* write([entry], sync !== "never")
      return entry
    }))

  const load = (options: LoadOptions = {}) =>
    Effect.flatMap(storage.read, (bytes) =>
      Effect.fromResult(loadBytes(bytes, options)).pipe(
        Effect.map((r) => r.loaded),
        Effect.mapError((e) => new SessionLogError({ ...e, sessionId }))
      ))

  return SessionLog.of({
    sessionId,
    append,
    recordEviction,
    recordCompaction,
    snapshot: Effect.sync(() => state.snapshot()),
    load,
    recovered: initial.recovered
  })
})

const openState = (sessionId: string, bytes: Uint8Array, options: LoadOptions) =>
  Effect.fromResult(loadBytes(bytes, options)).pipe(
    Effect.mapError((e) => new SessionLogError({ ...e, sessionId }))
  )

/** Options of `SessionLog.layerJsonl`. @category models */
export interface JsonlOptions {
  /** The directory holding `<sessionId>.jsonl` (created with mode 0700 if missing). */
  readonly directory: string
  readonly sessionId: string
  /** Open a damaged log anyway, from what decodes (see `load`). Default false: damage fails the layer. */
  readonly repair?: boolean
  /** When to fsync. Default `"compaction"`. */
  readonly sync?: SyncMode
}

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return Predicate.hasProperty(e, "code") && e.code === "EPERM"
  }
}

/**
 * Takes `<id>.lock`; takes over a lock whose pid is dead; released when the scope closes. The lock is created with
 * its pid already in it (written to a private temporary file, then hard-linked into place, which fails if the lock
 * exists), so another process never sees an empty lock and mistakes a live holder for a dead one.
 */
const acquireLock = (fs: FileSystem.FileSystem, lockPath: string, sessionId: string) => {
  const io = ioError(sessionId, `lock ${lockPath}`)
  const staging = `${lockPath}.${process.pid}.${Math.random().toString(36).slice(2)}`
  const create = fs.writeFileString(staging, `${process.pid}\n`, { flag: "wx", mode: 0o600 }).pipe(
    Effect.andThen(fs.link(staging, lockPath)),
    Effect.ensuring(fs.remove(staging).pipe(Effect.ignore))
  )
  const take: Effect.Effect<void, SessionLogError> = create.pipe(
    Effect.catchTag("PlatformError", (error) => {
      if (error.reason._tag !== "AlreadyExists") return Effect.fail(io(error))
      return Effect.gen(function* () {
        const text = yield* fs.readFileString(lockPath).pipe(Effect.orElseSucceed(() => ""))
        const pid = Number.parseInt(text.trim(), 10)
        if (Number.isInteger(pid) && pid > 0 && isAlive(pid)) {
          return yield* new SessionLogError({
            reason: "Locked",
            sessionId,
            pid,
            detail: `process ${pid} holds ${lockPath}; close that session first`
          })
        }
        // stale: the holder died without releasing (or wrote nothing). Take over.
        yield* Effect.logWarning(`effect-compaction: taking over stale lock ${lockPath} (pid ${text.trim() || "?"})`)
        yield* fs.remove(lockPath).pipe(Effect.catchTag("PlatformError", () => Effect.void))
        return yield* create.pipe(
          Effect.mapError((e) =>
            e.reason._tag === "AlreadyExists"
              ? new SessionLogError({ reason: "Locked", sessionId, detail: `another process took ${lockPath} first` })
              : io(e)
          )
        )
      })
    })
  )
  return Effect.acquireRelease(take, () => fs.remove(lockPath).pipe(Effect.ignore))
}

const readIfExists = (fs: FileSystem.FileSystem, file: string, sessionId: string) =>
  fs.readFile(file).pipe(
    Effect.catchTag("PlatformError", (e) =>
      e.reason._tag === "NotFound" ? Effect.succeed(new Uint8Array(0)) : Effect.fail(ioError(sessionId, "read")(e)))
  )

/** The path of a session's log file, after checking the id. */
const sessionFile = Effect.fnUntraced(function* (directory: string, sessionId: string) {
  const path = yield* Path.Path
  yield* validateSessionId(sessionId)
  return { file: path.join(directory, `${sessionId}.jsonl`), lock: path.join(directory, `${sessionId}.lock`) }
})

const makeJsonl = Effect.fnUntraced(function* (options: JsonlOptions) {
  const fs = yield* FileSystem.FileSystem
  const { sessionId } = options
  const { file, lock } = yield* sessionFile(options.directory, sessionId)
  yield* fs.makeDirectory(options.directory, { recursive: true, mode: 0o700 }).pipe(
    Effect.mapError(ioError(sessionId, "create directory"))
  )
  yield* acquireLock(fs, lock, sessionId)
  const bytes = yield* readIfExists(fs, file, sessionId)
  const opened = yield* openState(sessionId, bytes, options.repair === true ? { repair: true } : {})
  const recovered = opened.loaded.issues
  const io = ioError(sessionId, `append ${file}`)
  if (opened.completeBytes < bytes.length) {
    // a torn write was never acknowledged: cut it off so the next line does not glue onto it
    yield* Effect.logWarning(
      `effect-compaction: ${file}: cut a torn last line (${bytes.length - opened.completeBytes} bytes)`
    )
    yield* fs.truncate(file, opened.completeBytes).pipe(Effect.mapError(io))
  }
  const handle = yield* fs.open(file, { flag: "a", mode: 0o600 }).pipe(Effect.mapError(io))
  let size = opened.completeBytes
  let dirty = false
  const rollback = Effect.suspend(() => handle.truncate(size)).pipe(
    Effect.tap(() => Effect.sync(() => (dirty = false)))
  )
  const storage: Storage = {
    read: readIfExists(fs, file, sessionId),
    append: (chunk, syncNow) =>
      Effect.gen(function* () {
        // a failed write may have left part of a line: cut it now, or before the next write if that fails too
        if (dirty) yield* rollback.pipe(Effect.mapError(io))
        yield* handle.writeAll(chunk).pipe(
          Effect.tapError(() => Effect.sync(() => (dirty = true)).pipe(Effect.andThen(Effect.ignore(rollback)))),
          Effect.mapError(io)
        )
        size += chunk.length
        if (syncNow) yield* handle.sync.pipe(Effect.mapError(io))
      })
  }
  return yield* make(sessionId, storage, { state: opened.state, recovered }, options.sync ?? "compaction")
})

/** In-memory storage for `layerMemory`: session id → the log's text. Share one across layers to simulate a restart. @category models */
export type MemoryStore = Map<string, string>

/** The service over one session. @category services */
export class SessionLog extends Context.Service<SessionLog, SessionLogShape>()("effect-compaction/SessionLog") {
  /**
   * An in-memory log (tests). It stores the same JSONL text the file layer writes, so loading exercises the same
   * parser. Pass a shared `store` to reopen a session after a simulated restart.
   */
  static readonly layerMemory = (
    options: { readonly sessionId?: string; readonly store?: MemoryStore; readonly repair?: boolean } = {}
  ): Layer.Layer<SessionLog, SessionLogError> =>
    Layer.effect(
      SessionLog,
      Effect.gen(function* () {
        const sessionId = yield* validateSessionId(options.sessionId ?? "memory")
        const store = options.store ?? new Map<string, string>()
        const read = Effect.sync(() => encoder.encode(store.get(sessionId) ?? ""))
        const opened = yield* Effect.flatMap(read, (b) => openState(sessionId, b, options))
        const decoder = new TextDecoder()
        const storage: Storage = {
          read,
          append: (bytes) =>
            Effect.sync(() => void store.set(sessionId, (store.get(sessionId) ?? "") + decoder.decode(bytes)))
        }
        return yield* make(sessionId, storage, { state: opened.state, recovered: opened.loaded.issues }, "never")
      })
    )

  /**
   * The embedded default: `<directory>/<sessionId>.jsonl`, created with mode 0600. Opening takes the session's lock
   * (`Locked` if a live process holds it), rebuilds the live view (failing on damage unless `repair`), and cuts off a
   * torn last line; closing the scope closes the file and releases the lock.
   */
  static readonly layerJsonl = (
    options: JsonlOptions
  ): Layer.Layer<SessionLog, SessionLogError, FileSystem.FileSystem | Path.Path> =>
    Layer.effect(SessionLog, makeJsonl(options))
}

/**
 * The ids of the sessions stored in a directory (every `<id>.jsonl` with a valid id), sorted. A missing directory
 * has none.
 * @category sessions
 */
export const listSessions = (
  directory: string
): Effect.Effect<ReadonlyArray<string>, SessionLogError, FileSystem.FileSystem> =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const names = yield* fs.readDirectory(directory).pipe(
      Effect.catchTag("PlatformError", (e) =>
        e.reason._tag === "NotFound"
          ? Effect.succeed([] as ReadonlyArray<string>)
          : Effect.fail(ioError(directory, "list sessions")(e)))
    )
    return names.filter((n) =>
      n.endsWith(".jsonl")
    ).map((n) => n.slice(0, -".jsonl".length))
      .filter((id) => SESSION_ID.test(id)).sort()
  })

/**
 * Reads a stored session without opening it for writing: no lock, nothing changed on disk (a torn last line is only
 * reported). The same checks as `SessionLog.load`.
 * @category sessions
 */
export const readJsonl = (
  options: { readonly directory: string; readonly sessionId: string } & LoadOptions
): Effect.Effect<Loaded, SessionLogError, FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const { file } = yield* sessionFile(options.directory, options.sessionId)
    const bytes = yield* readIfExists(fs, file, options.sessionId)
    const opened = yield* openState(options.sessionId, bytes, options)
    return opened.loaded
  })
