/**
 * Session entries and their fold: the schemas of each kind of entry, the line each is stored as (with its checksum),
 * canonical JSON and the view hash, and the pure fold (`LiveView`) that derives a view from entries. `SessionEntry`
 * re-exports what a user reads; the log, the stores and the tail open use the rest.
 *
 * A stored line is `JSON.stringify(entry)` with `,"sum":"<32 hex>"` inserted before its closing brace: the first 128
 * bits of the SHA-256 of the line without that member. Any changed byte of a line is then a `Corrupt` error naming
 * the line (or, with `repair`, a reported issue), never a different entry.
 *
 * @internal
 */
import * as Predicate from "effect/Predicate"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"
import { createHash, hash as hashOnce } from "node:crypto"
import { type ContentBlock, type Message, type ToolResultBlock, validateMessage } from "../Message.ts"
import { SessionLogError as LogError } from "./sessionLogError.ts"
import { blocksOf, isToolResult } from "./blocks.ts"

// ============================================================================
// Entries
// ============================================================================

/**
 * The entry format version this module writes: 3. v2 is v1 plus a checksum at the end of every line; v3 is v2 plus
 * the optional step metadata of a message or compaction entry (`meta`). Entries with a higher `v` are refused, never
 * guessed at; v1 and v2 lines are still read (a v1 or v2 line carrying `meta` is corrupt: no writer of those versions
 * wrote it). A reader of v3 from before compaction or eviction entries carried `meta` ignores it, as it ignores any
 * unknown field.
 * A compaction's removal record (`removed`, optional on every version, and never part of the view) came later without
 * a new version: a reader that does not know it ignores it, and a malformed one is `Corrupt` like any bad field. So did
 * `more` (v3 only, on every kind of entry): on each entry but the last of a store append of several entries, how many
 * entries of that append follow it, so a reader tells a complete line whose append's later lines are missing (a write
 * cut short) and drops the whole append (`moreOfLine`). A reader that does not know it ignores it (Effect Schema drops
 * unknown fields; no version refuses it) and reads what it read before: every complete line.
 * @category models
 */
export const CURRENT_VERSION = 3 as const

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

/** The schema fields every entry starts with. */
type HeaderFields = {
  readonly v: Schema.Literals<readonly [1, 2, typeof CURRENT_VERSION]>
  readonly id: Schema.String
  readonly parentId: Schema.NullOr<Schema.String>
  readonly timestamp: Schema.Number
}

const Header: HeaderFields = {
  v: Schema.Literals([1, 2, CURRENT_VERSION]),
  id: Schema.String.check(Schema.isMinLength(1)),
  parentId: Schema.NullOr(Schema.String),
  timestamp: Schema.Number
}

/**
 * How many entries of the same store append follow an entry (`more`, v3): written on each entry but the last of an
 * append of several entries (the last of them has none, and so has the entry of a single append, byte for byte as
 * before), as the entry's last member, right before its checksum. The view never depends on it. @category schemas
 */
export const More: Schema.Int = Schema.Int.check(Schema.isGreaterThan(0))

/**
 * Step metadata: what the layer that appended a message or recorded a compaction keeps beside it (usage, the
 * request's epoch, renamed ids, a resume checkpoint…), a JSON object whose top-level keys name its owner
 * (`Conversation` writes `conversation`). It is covered by the line's checksum and never part of the view. @category schemas
 */
export const StepMeta: Schema.$Record<Schema.String, Schema.Codec<Schema.Json>> = Schema.JsonObject
/** The decoded type of `StepMeta`. */
export type StepMeta = typeof StepMeta.Type

/**
 * One message of the conversation, stored exactly as it was appended, with its step metadata (v3) when the writer
 * gave any. @category schemas
 */
export const MessageEntry: Schema.Struct<
  HeaderFields & {
    readonly type: Schema.Literal<"message">
    readonly message: Schema.declare<Message>
    readonly meta: Schema.optionalKey<typeof StepMeta>
    readonly more: Schema.optionalKey<typeof More>
  }
> = Schema.Struct({
  ...Header,
  type: Schema.Literal("message"),
  message: MessageSchema,
  meta: Schema.optionalKey(StepMeta),
  more: Schema.optionalKey(More)
})
/** The decoded type of `MessageEntry`. */
export type MessageEntry = typeof MessageEntry.Type

/**
 * One offloaded tool result: the `tool_result` with this `toolUseId` is replaced by `block` in the view. @category schemas
 */
export const Eviction: Schema.Struct<{
  readonly toolUseId: Schema.String
  readonly block: Schema.declare<ToolResultBlock>
}> = Schema.Struct({
  toolUseId: Schema.String.check(Schema.isMinLength(1)),
  block: ToolResultSchema
})
/** The decoded type of `Eviction`. */
export type Eviction = typeof Eviction.Type

/**
 * Tool results offloaded from the view. Applies to every matching tool result still in the view. `meta` (v3) is the
 * recording layer's step metadata, as on the other kinds; an entry with no evictions changes nothing in the view and
 * holds only that: a step of the writer that added no message (`Conversation`: a reply with empty content, its usage
 * and stop reason). A reader that does not know `meta` on an eviction ignores it and reads the same view. @category schemas
 */
export const EvictionEntry: Schema.Struct<
  HeaderFields & {
    readonly type: Schema.Literal<"eviction">
    readonly evictions: Schema.$Array<typeof Eviction>
    readonly meta: Schema.optionalKey<typeof StepMeta>
    readonly more: Schema.optionalKey<typeof More>
  }
> = Schema.Struct({
  ...Header,
  type: Schema.Literal("eviction"),
  evictions: Schema.Array(Eviction),
  meta: Schema.optionalKey(StepMeta),
  more: Schema.optionalKey(More)
})
/** The decoded type of `EvictionEntry`. */
export type EvictionEntry = typeof EvictionEntry.Type

/**
 * The kept part of a compaction, stored explicitly because the caller changed it (a `repair` of an aborted reply):
 * `messages` replace every view item up to and including the one from entry `through` (the last item of the snapshot
 * that was summarized; `null`: the snapshot was empty); the items after it (appended while the summarizer ran) follow.
 * @category schemas
 */
export const KeptMessages: Schema.Struct<{
  readonly through: Schema.NullOr<Schema.String>
  readonly messages: Schema.$Array<Schema.declare<Message>>
}> = Schema.Struct({
  through: Schema.NullOr(Schema.String),
  messages: Schema.Array(MessageSchema)
})
/** The decoded type of `KeptMessages`. */
export type KeptMessages = typeof KeptMessages.Type

/**
 * One message or tool result a compaction removed from the view (`CompactionEntry.removed`): its reference (a message's
 * or summary's entry id, a tool result's `tool_use_id`), kind, role, the tool a result answers (when its call was in
 * the span), estimated tokens (a message's include its tool results') and, for a tool result, `entry`, the id of the
 * entry that stores it: `<tool_use_id>@<entry>` names that copy when a session reuses the id. @category schemas
 */
export const RemovedItem: Schema.Struct<{
  readonly ref: Schema.String
  readonly kind: Schema.Literals<readonly ["message", "summary", "tool_result"]>
  readonly role: Schema.optionalKey<Schema.Literals<readonly ["user", "assistant", "system"]>>
  readonly tool: Schema.optionalKey<Schema.String>
  readonly tokens: Schema.Int
  readonly entry: Schema.optionalKey<Schema.String>
}> = Schema.Struct({
  ref: Schema.String.check(Schema.isMinLength(1)),
  kind: Schema.Literals(["message", "summary", "tool_result"]),
  role: Schema.optionalKey(Schema.Literals(["user", "assistant", "system"])),
  tool: Schema.optionalKey(Schema.String),
  tokens: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  entry: Schema.optionalKey(Schema.String.check(Schema.isMinLength(1)))
})
/** The decoded type of `RemovedItem`: one removed message or tool result of a compaction's record. @category schemas */
export type RemovedItem = typeof RemovedItem.Type

/**
 * A compaction boundary: the view becomes `[summary, ...items from firstKeptEntryId on]` (`null`: nothing kept), or,
 * with `kept`, `[summary, ...kept.messages, ...items after kept.through]`. `summary` is the message heading the new
 * view. `viewHash` is `viewHash(view)` of that new view. `kept` is optional, so logs written without it read as before;
 * a reader that ignores it rebuilds another view and refuses it with `HashMismatch`, never silently. `meta` (v3) is the
 * recording layer's step metadata (`Conversation` keeps its resume checkpoint there); the view never depends on it.
 * `removed` is the record of what the boundary removed (`RemovedItem`): each message the summary replaced, in order,
 * each followed by the tool results it held, then the messages a stored `kept` part replaced; the log writes it, and
 * `recall` and `compaction inspect` read it.
 * It is optional (a log written before it reads as before; the record is then derived from the entries) and, like
 * `meta`, ignored by the view and by a reader that does not know it.
 * @category schemas
 */
export const CompactionEntry: Schema.Struct<
  HeaderFields & {
    readonly type: Schema.Literal<"compaction">
    readonly summary: Schema.declare<Message>
    readonly firstKeptEntryId: Schema.NullOr<Schema.String>
    readonly tokensBefore: Schema.Number
    readonly tokensAfter: Schema.Number
    readonly summarizer: Schema.String
    readonly turnsSummarized: Schema.optionalKey<Schema.Int>
    readonly kept: Schema.optionalKey<typeof KeptMessages>
    readonly viewHash: Schema.String
    readonly meta: Schema.optionalKey<typeof StepMeta>
    readonly removed: Schema.optionalKey<Schema.$Array<typeof RemovedItem>>
    readonly more: Schema.optionalKey<typeof More>
  }
> = Schema.Struct({
  ...Header,
  type: Schema.Literal("compaction"),
  summary: MessageSchema,
  firstKeptEntryId: Schema.NullOr(Schema.String),
  tokensBefore: Schema.Number,
  tokensAfter: Schema.Number,
  summarizer: Schema.String,
  turnsSummarized: Schema.optionalKey(Schema.Int),
  kept: Schema.optionalKey(KeptMessages),
  viewHash: Schema.String.check(Schema.isPattern(/^[0-9a-f]{64}$/)),
  meta: Schema.optionalKey(StepMeta),
  removed: Schema.optionalKey(Schema.Array(RemovedItem)),
  more: Schema.optionalKey(More)
})
/** The decoded type of `CompactionEntry`. */
export type CompactionEntry = typeof CompactionEntry.Type

/** Any log entry (versions 1 to 3). @category schemas */
export const Entry: Schema.Union<readonly [typeof MessageEntry, typeof EvictionEntry, typeof CompactionEntry]> = Schema
  .Union([MessageEntry, EvictionEntry, CompactionEntry])
/** The decoded type of `Entry`: a message, eviction or compaction entry. @category models */
export type Entry = typeof Entry.Type

// ============================================================================
// Errors
// ============================================================================

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
    const json = canonicalOf(message)
    hash.update(i === 0 ? json : `,${json}`)
  })
  return hash.update("]").digest("hex")
}

const canonicalCache = new WeakMap<Message, string>()

// ============================================================================
// The view: a pure fold over the entries
// ============================================================================

/**
 * One view message and the id of the entry that put it there. @category models
 */
export interface ViewItem {
  readonly entryId: string
  readonly message: Message
}

/** A view item as the fold holds it: an eviction replaces its message in place. */
interface FoldItem {
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

/** The canonical JSON of a message, remembered by identity (the same cache `viewHash` reads). */
const canonicalOf = (message: Message): string => {
  let json = canonicalCache.get(message)
  if (json === undefined) {
    json = canonicalJson(message)
    canonicalCache.set(message, json)
  }
  return json
}

/**
 * True when two messages hash alike in a view: the same object, or the same canonical JSON. A message kept by entry
 * id instead of stored again must be one of these, so the fold rebuilds the same view hash.
 * @category hashing
 */
export const sameMessage = (a: Message, b: Message): boolean => a === b || canonicalOf(a) === canonicalOf(b)

/**
 * The fold behind `rebuildView` and the live service, applied entry by entry, so a worker keeps it and catches up
 * with only the entries written since (`seq` is the last one applied). Its items pair each view message with the id of
 * the entry that put it there (a message entry, or the compaction entry for the summary). Its state changes only
 * through `apply`, `applyCompaction` and `advance`; what it returns is never changed afterwards.
 * @category view
 */
export class LiveView {
  private items: Array<FoldItem> = []
  /**
   * The entries applied, in order: every one, or (after `forgetHistory`) those from the last compaction boundary on,
   * so the fold's memory follows its view and not the session's history.
   */
  private applied: Array<Entry> = []
  /** The `seq` of `applied[0]`: 1, or the first entry of a tail fold, or the last boundary (`forgetHistory`). */
  private appliedFrom = 1
  /** The `seq` of the first entry a tail fold read and checked (1: it started at the first one). */
  private readFrom = 1
  /** Whether a compaction drops the entries applied before it (`forgetHistory`). */
  private bounded = false
  /** tool_use_id → the view item holding that tool_result. */
  private byToolUse = new Map<string, FoldItem>()
  /** The view's messages as last returned, or the view a writer built (`applyCompaction`); `view` checks it. */
  private messages: ReadonlyArray<Message> | undefined = undefined
  private lastId: string | null = null
  private lastSeq = 0

  /** The id of the last entry applied (`null`: none). */
  get head(): string | null {
    return this.lastId
  }

  /** The `seq` of the last stored entry folded (0: none). */
  get seq(): number {
    return this.lastSeq
  }

  /** How many messages the view holds. */
  get size(): number {
    return this.items.length
  }

  /** The entries applied, in order: every one, or (a tail fold, `forgetHistory`) those from a later one on. */
  get entries(): ReadonlyArray<Entry> {
    return this.applied
  }

  /**
   * Drops the entries applied before the last compaction boundary, now and at every compaction from now on:
   * `entries` (and `loaded().entries`) then start at the last boundary (`firstApplied`), which holds what a resume
   * needs (a `Conversation`'s checkpoint). What is older stays in the store, read on demand.
   */
  forgetHistory(): void {
    this.bounded = true
    let last = this.applied.length - 1
    while (last > 0 && this.applied[last]!.type !== "compaction") last--
    if (last > 0) {
      this.appliedFrom += last
      this.applied = this.applied.slice(last)
    }
  }

  /** The view item at `index` (from 0), or `undefined`. */
  itemAt(index: number): ViewItem | undefined {
    return this.items[index]
  }

  /**
   * Starts this empty fold after stored entry `seq`, whose id is `head`, without applying the entries up to it: a
   * fold of the log's tail (its first entry must then name `head` as its parent). Nothing else changes.
   */
  startAfter(head: string | null, seq: number): void {
    this.lastId = head
    this.lastSeq = seq
    this.appliedFrom = seq + 1
    this.readFrom = seq + 1
  }

  /** Records that the stored entries up to `seq` are folded. */
  advance(seq: number): void {
    this.lastSeq = seq
  }

  /** An independent copy: applying entries to one never changes the other. */
  clone(): LiveView {
    const copy = new LiveView()
    copy.items = this.items.map((i) => ({ entryId: i.entryId, message: i.message }))
    for (const item of copy.items) copy.index(item)
    copy.applied = [...this.applied]
    copy.appliedFrom = this.appliedFrom
    copy.readFrom = this.readFrom
    copy.bounded = this.bounded
    copy.messages = this.messages
    copy.lastId = this.lastId
    copy.lastSeq = this.lastSeq
    return copy
  }

  /** Applies one entry; returns a description of the problem when the entry cannot apply (nothing applied then). */
  apply(entry: Entry): string | undefined {
    switch (entry.type) {
      case "message": {
        const item: FoldItem = { entryId: entry.id, message: entry.message }
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
        const summary: FoldItem = { entryId: entry.id, message: entry.summary }
        if (entry.kept === undefined) {
          this.items = [summary, ...this.items.slice(from)]
        } else {
          const end = entry.kept.through === null ? 0 : this.indexOf(entry.kept.through) + 1
          if (end === 0 && entry.kept.through !== null) return `kept.through ${entry.kept.through} is not in the view`
          const kept = entry.kept.messages.map((message, i): FoldItem => ({
            entryId: keptEntryId(entry.id, i),
            message
          }))
          this.items = [summary, ...kept, ...this.items.slice(end)]
        }
        this.reindex()
        break
      }
    }
    this.messages = undefined
    this.appended(entry)
    return undefined
  }

  /**
   * Applies a compaction entry that a writer derived from `view`, the new view it built (the caller's view, then the
   * items appended after its snapshot), without building that view again: it checks that `view` is what `apply`
   * rebuilds from the entry (the summary first, then the kept messages and the rest, each the same object or the same
   * canonical JSON) and then holds `view` itself, so `snapshot().view` is that array. A `view` that does not match is
   * not trusted: the entry is applied as a resume applies it. Returns the problem when the entry cannot apply.
   */
  applyCompaction(entry: CompactionEntry, view: ReadonlyArray<Message>): string | undefined {
    const ids = this.entryIdsAfter(entry, view)
    if (ids === undefined) return this.apply(entry)
    this.items = view.map((message, i): FoldItem => ({ entryId: ids[i]!, message }))
    this.reindex()
    this.messages = view
    this.appended(entry)
    return undefined
  }

  /** The entry ids of `view` if `entry` rebuilds it from this fold, else `undefined`. */
  private entryIdsAfter(entry: CompactionEntry, view: ReadonlyArray<Message>): Array<string> | undefined {
    if (view.length === 0 || !sameMessage(view[0]!, entry.summary)) return undefined
    const ids = [entry.id]
    let from: number
    if (entry.kept === undefined) {
      from = this.keptIndex(entry.firstKeptEntryId)
    } else {
      from = entry.kept.through === null ? 0 : this.indexOf(entry.kept.through) + 1
      if (from === 0 && entry.kept.through !== null) return undefined
      const kept = entry.kept.messages
      for (let i = 0; i < kept.length; i++) {
        if (view[1 + i] === undefined || !sameMessage(view[1 + i]!, kept[i]!)) return undefined
        ids.push(keptEntryId(entry.id, i))
      }
    }
    if (from === -1 || view.length - ids.length !== this.items.length - from) return undefined
    for (let i = from; i < this.items.length; i++) {
      const item = this.items[i]!
      if (!sameMessage(view[ids.length]!, item.message)) return undefined
      ids.push(item.entryId)
    }
    return ids
  }

  /** The index of the first kept item, `items.length` for `null`, or -1 when the id is not in the view. */
  keptIndex(firstKeptEntryId: string | null): number {
    return firstKeptEntryId === null ? this.items.length : this.indexOf(firstKeptEntryId)
  }

  /** The index of the view item from entry `entryId`, or -1. */
  indexOf(entryId: string): number {
    return this.items.findIndex((i) => i.entryId === entryId)
  }

  /**
   * The view's messages: the same array from one call to the next (the one a writer built, after `applyCompaction`)
   * while it holds exactly the fold's messages, checked at every call, so an array a caller changed is never
   * returned.
   */
  view(): ReadonlyArray<Message> {
    const held = this.messages
    const items = this.items
    if (held !== undefined && held.length === items.length && held.every((m, i) => m === items[i]!.message)) return held
    return this.messages = items.map((i) => i.message)
  }

  /** The view with its entry ids and head. */
  snapshot(): Snapshot {
    return { view: this.view(), entryIds: this.items.map((i) => i.entryId), head: this.lastId }
  }

  /**
   * The fold as a loaded session: the snapshot, the entries it holds, the last `seq`, and `issues`; `verifiedFrom`
   * (given, or where a tail fold started reading, or where the held entries start) when they do not start at the
   * first one.
   */
  loaded(issues: ReadonlyArray<LoadIssue>, verifiedFrom?: number): Loaded {
    const loaded = { ...this.snapshot(), entries: [...this.applied], seq: this.lastSeq, issues }
    const from = verifiedFrom ??
      (this.readFrom > 1 ? this.readFrom : this.appliedFrom > 1 ? this.appliedFrom : undefined)
    return from === undefined ? loaded : { ...loaded, verifiedFrom: from }
  }

  private appended(entry: Entry): void {
    this.lastId = entry.id
    if (this.bounded && entry.type === "compaction") {
      this.appliedFrom += this.applied.length
      this.applied = []
    }
    this.applied.push(entry)
  }

  private reindex(): void {
    this.byToolUse = new Map()
    for (const item of this.items) this.index(item)
  }

  private index(item: FoldItem): void {
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

/**
 * A hash check that failed, or (with `repair`) was accepted and reported. @category models
 */
export interface HashMismatch {
  readonly entryId: string
  readonly expected: string
  readonly actual: string
}

// ============================================================================
// Lines: one entry, stored with its checksum
// ============================================================================

/** One stored entry: its line (the entry's JSON with its checksum) at position `seq` (from 1) of its session. @category models */
export interface StoredEntry {
  /** The entry's position in its session, from 1. */
  readonly seq: number
  /** The entry's JSON with its checksum, as `encodeEntry` wrote it. */
  readonly line: string
}

const SUM = /,"sum":"([0-9a-f]{32})"\}$/

// one-shot SHA-256 (the same digest as `createHash("sha256")`, without a Hash object per line)
const checksum = (body: string): string => hashOnce("sha256", body, "hex").slice(0, 32)

/**
 * The line an entry is stored as: `JSON.stringify(entry)` with `,"sum":"<checksum>"` before its closing brace. JSON
 * escapes `\u0000` and lone surrogates, so a line is plain, valid Unicode text that round-trips byte for byte through
 * a file, a `text` column or memory.
 * @category lines
 */
export const encodeEntry = (entry: Entry): string => {
  const body = JSON.stringify(entry)
  return `${body.slice(0, -1)},"sum":"${checksum(body)}"}`
}

/**
 * What is wrong with one line: `FutureVersion` when its `v` is newer than this reader, else `Corrupt`. @category models
 */
export interface LineProblem {
  readonly reason: "Corrupt" | "FutureVersion"
  readonly detail: string
  readonly entryId?: string
}

const formatIssue = SchemaIssue.makeFormatterDefault()
const decodeEntryValue = Schema.decodeUnknownResult(Entry)

const describeInvalid = (value: unknown, issue: SchemaIssue.Issue): string => {
  const formatted = formatIssue(issue).split("\n").slice(0, 2).join(" ")
  const message = Predicate.hasProperty(value, "message") ? value.message : undefined
  const summary = Predicate.hasProperty(value, "summary") ? value.summary : undefined
  const kept = Predicate.hasProperty(value, "kept") && Predicate.hasProperty(value.kept, "messages") &&
      Array.isArray(value.kept.messages)
    ? value.kept.messages as ReadonlyArray<unknown>
    : []
  const type = Predicate.hasProperty(value, "type") ? value.type : undefined
  const detail = type === "message"
    ? validateMessage(message, 0)
    : type === "compaction"
    ? (summary === undefined ? undefined : validateMessage(summary, 0)) ??
      kept.map((m, i) => validateMessage(m, i)).find((e) => e !== undefined)
    : undefined
  return detail === undefined ? formatted : `${formatted} (${detail.message})`
}

/**
 * Decodes one stored line. The checksum is checked first (a line of v2 or later must carry one; v1 lines have
 * none), then the version (a newer `v` is a `FutureVersion`), then the entry's schema and messages.
 * @category lines
 */
export const decodeLine = (line: string): Result.Result<Entry, LineProblem> => {
  const sum = SUM.exec(line)
  const body = sum === null ? line : `${line.slice(0, sum.index)}}`
  let value: unknown
  try {
    value = JSON.parse(body)
  } catch (e) {
    return Result.fail({ reason: "Corrupt", detail: `not JSON: ${e instanceof Error ? e.message : String(e)}` })
  }
  const v = Predicate.hasProperty(value, "v") ? value.v : undefined
  const id = Predicate.hasProperty(value, "id") && Predicate.isString(value.id) ? value.id : undefined
  const named = id === undefined ? {} : { entryId: id }
  const decoded = decodeEntryValue(value)
  const invalid = Result.isFailure(decoded) ? describeInvalid(value, decoded.failure.issue) : undefined
  if (sum !== null && checksum(body) !== sum[1]) {
    const also = invalid === undefined ? "" : `; and ${invalid}`
    return Result.fail({
      reason: "Corrupt",
      ...named,
      detail: `checksum mismatch: the line changed after it was written${also}`
    })
  }
  if (typeof v === "number" && v > CURRENT_VERSION) {
    return Result.fail({
      reason: "FutureVersion",
      ...named,
      detail: `entry format v${v} is newer than this reader (v${CURRENT_VERSION}); upgrade effect-compaction`
    })
  }
  if (sum === null && v !== 1) {
    const also = invalid === undefined ? "" : `; and ${invalid}`
    return Result.fail({ reason: "Corrupt", ...named, detail: `no checksum at the end of the line${also}` })
  }
  if (Result.isFailure(decoded)) return Result.fail({ reason: "Corrupt", detail: invalid ?? "" })
  const entry = decoded.success
  if (entry.meta !== undefined && entry.v < 3) {
    return Result.fail({ reason: "Corrupt", ...named, detail: `a v${entry.v} entry cannot carry meta (v3 added it)` })
  }
  if (entry.more !== undefined && entry.v < 3) {
    return Result.fail({ reason: "Corrupt", ...named, detail: `a v${entry.v} entry cannot carry more (v3 added it)` })
  }
  return Result.succeed(entry)
}

/** The end of a line whose entry carries `more`, where the log writes it: right before the checksum. */
const MORE_AT_END = /,"more":[1-9][0-9]*,"sum":"[0-9a-f]{32}"\}$/

/** How many characters of a line's end `moreOfLine` looks at first (a longer `more` goes unseen). */
export const MORE_SUFFIX_CHARS = 72

/**
 * True when a line's end (its last `MORE_SUFFIX_CHARS` characters, or more) shows `more` where the log writes it: the
 * line may belong to an append whose later lines follow it (`moreOfLine` decides).
 * @category lines
 */
export const mayHaveMore = (end: string): boolean => MORE_AT_END.test(end)

/**
 * How many entries of its store append follow the entry stored as `line` (its `more`): 0 for the last entry of an
 * append (every single one), and for a line that does not decode (loading reports it). A line is decoded in full only
 * when its end shows `more` (`mayHaveMore`), so the check costs a look at the line's end.
 * @category lines
 */
export const moreOfLine = (line: string): number => {
  if (!mayHaveMore(line.slice(-MORE_SUFFIX_CHARS))) return 0
  const decoded = decodeLine(line)
  return Result.isSuccess(decoded) ? decoded.success.more ?? 0 : 0
}

// ============================================================================
// Loading: lines → entries → the view
// ============================================================================

/**
 * Something loading found and did not fail on: a torn tail, or (with `repair`) damage it skipped. A `TornTail` is the
 * end of a file that a write cut short, never acknowledged and not loaded: from line `line` (at byte `offset`, `bytes`
 * long) on, a torn last line, or the lines of an append whose later lines are missing (`more`), whole or torn.
 * @category models
 */
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

/**
 * A loaded session: the rebuilt view (a `Snapshot`), every entry in order, the `seq` of the last stored entry, and
 * what was found on the way.
 * @category models
 */
export interface Loaded extends Snapshot {
  /** The entries in order: every one, or after a tail read those from `verifiedFrom` (or a later boundary) on. */
  readonly entries: ReadonlyArray<Entry>
  /** The `seq` of the last stored entry (0 for an empty session). */
  readonly seq: number
  /** What loading found and did not fail on (a torn tail, or damage `repair` skipped). */
  readonly issues: ReadonlyArray<LoadIssue>
  /**
   * Set by a read of the log's tail (`tail: true`) that did not start at the first line: the `seq` of the first line
   * it read. Every line from there on was checked (checksum, version, schema, the chain from the first one's parent
   * on, every compaction's view hash, the last boundary's included); the lines before it were neither read nor
   * checked, and `entries` starts there, or (a log that keeps its memory bounded, see `SessionLogOptions.tail`) at
   * its last compaction boundary after it. Absent: every line was read and checked, and `entries` holds them all.
   */
  readonly verifiedFrom?: number
}

/**
 * Options for loading. With `repair`, damage is reported in `issues` instead of failing (see `load`). With `tail`,
 * only the log's tail is read and checked: from the last compaction boundary back to the first entry whose message
 * that boundary keeps (see `Loaded.verifiedFrom`); the view, entry ids, head and `seq` are the full fold's. A tail
 * that does not fold (damage, or a log that does not let it start late) is read again in full, so damage fails as a
 * full read fails. `repair` always reads in full. @category models
 */
export interface LoadOptions {
  /** Report damage in `issues` and load what decodes, instead of failing. Default false. */
  readonly repair?: boolean
  /** Read and check only the log's tail (ignored with `repair`). Default false. */
  readonly tail?: boolean
}

const corruptError = (
  corrupt: ReadonlyArray<{ readonly line: number; readonly entryId?: string; readonly detail: string }>
) => {
  const first = corrupt[0]!
  return new LogError({
    reason: "Corrupt",
    line: first.line,
    lines: corrupt.map((c) => c.line),
    ...(first.entryId === undefined ? {} : { entryId: first.entryId }),
    detail: corrupt.slice(0, 3).map((c) => `line ${c.line}: ${c.detail}`).join("; ") +
      (corrupt.length > 3 ? `; and ${corrupt.length - 3} more` : "")
  })
}

/**
 * Applies stored entries (those after `live.seq`, in order) to `live`: checks each line (checksum, version, schema),
 * that each entry's `parentId` is the entry before it, and each compaction's view hash. Fails with `Corrupt` listing
 * every damaged line, `FutureVersion` or `HashMismatch`, each naming its line; with `repair`, corrupt lines are
 * skipped, broken chains and hash mismatches accepted, and all reported in the returned issues (a future version
 * still fails). On failure `live` holds the entries before the first problem.
 * @category view
 */
export const applyStored = (
  live: LiveView,
  stored: ReadonlyArray<StoredEntry>,
  options: LoadOptions = {}
): Result.Result<
  { readonly entries: ReadonlyArray<Entry>; readonly issues: ReadonlyArray<LoadIssue> },
  LogError
> => {
  const repair = options.repair === true
  const entries: Array<Entry> = []
  const issues: Array<LoadIssue> = []
  const corrupt: Array<{ readonly line: number; readonly entryId?: string; readonly detail: string }> = []
  let previousValid = true
  let previousId = live.head
  for (const { line: text, seq: line } of stored) {
    const decoded = decodeLine(text)
    if (Result.isFailure(decoded)) {
      const problem = decoded.failure
      if (problem.reason === "FutureVersion") {
        return Result.fail(new LogError({ ...problem, line }))
      }
      if (repair) issues.push({ _tag: "CorruptLine", line, detail: problem.detail })
      else corrupt.push({ line, ...problem })
      previousValid = false
      continue
    }
    const entry = decoded.success
    if (entry.parentId !== previousId && previousValid) {
      const detail = `parentId ${entry.parentId} does not follow the previous entry ${previousId}`
      if (repair) issues.push({ _tag: "BrokenChain", line, entryId: entry.id, detail })
      else corrupt.push({ line, entryId: entry.id, detail })
    }
    previousValid = true
    previousId = entry.id
    if (corrupt.length > 0) continue // keep looking for more damaged lines, apply nothing more
    const problem = live.apply(entry)
    if (problem !== undefined) {
      return Result.fail(new LogError({ reason: "Corrupt", entryId: entry.id, line, detail: problem }))
    }
    if (entry.type === "compaction") {
      const actual = viewHash(live.view())
      if (actual !== entry.viewHash) {
        const mismatch = { entryId: entry.id, expected: entry.viewHash, actual }
        if (!repair) return Result.fail(new LogError({ ...mismatchError(mismatch), line }))
        issues.push({ _tag: "HashMismatch", line, ...mismatch })
      }
    }
    live.advance(line)
    entries.push(entry)
  }
  if (corrupt.length > 0) return Result.fail(corruptError(corrupt))
  const last = stored.at(-1)
  if (last !== undefined) live.advance(last.seq)
  return Result.succeed({ entries, issues })
}

const mismatchError = (m: HashMismatch): LogError =>
  new LogError({
    reason: "HashMismatch",
    entryId: m.entryId,
    detail: `the rebuilt view hashes to ${m.actual}, the entry recorded ${m.expected}`
  })

/**
 * Loads a whole stored session: `applyStored` from an empty view. `issues` come first (a store's own findings, such
 * as a torn tail).
 * @category view
 */
export const loadStored = (
  stored: ReadonlyArray<StoredEntry>,
  options: LoadOptions = {},
  storeIssues: ReadonlyArray<LoadIssue> = []
): Result.Result<{ readonly loaded: Loaded; readonly live: LiveView }, LogError> => {
  const live = new LiveView()
  return Result.map(applyStored(live, stored, options), ({ issues }) => ({
    loaded: live.loaded([...storeIssues, ...issues]),
    live
  }))
}

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
 * keeps an entry that is not in the view; both name the entry's position (`line`, from 1).
 * @category view
 */
export const rebuildView = (entries: ReadonlyArray<Entry>): Result.Result<Snapshot, LogError> => {
  const live = new LiveView()
  for (let i = 0; i < entries.length; i++) {
    const entry = entries[i]!
    const problem = live.apply(entry)
    if (problem !== undefined) {
      return Result.fail(new LogError({ reason: "Corrupt", entryId: entry.id, line: i + 1, detail: problem }))
    }
    if (entry.type === "compaction") {
      const actual = viewHash(live.view())
      if (actual !== entry.viewHash) {
        return Result.fail(
          new LogError({
            ...mismatchError({ entryId: entry.id, expected: entry.viewHash, actual }),
            line: i + 1
          })
        )
      }
    }
  }
  return Result.succeed(live.snapshot())
}
