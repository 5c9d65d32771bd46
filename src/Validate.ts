/**
 * Structural validity of a conversation for the Messages API, and repair.
 *
 * The API merges consecutive same-role messages into one turn before it checks anything, so every rule here is
 * checked on the merged view: a tool-result message followed by a typed human message is valid (it merges into one
 * user turn whose tool results come first), while a human message followed by a tool-result message is not (after the
 * merge, text precedes the results).
 *
 * Rules, and what the API does when one is broken:
 *
 * | violation | rule | API |
 * | --- | --- | --- |
 * | `MissingToolResult` | every client `tool_use` has a `tool_result` in the very next (merged) user turn | 400 |
 * | `OrphanedToolResult` | every `tool_result` answers a `tool_use` of the (merged) assistant turn before it | 400 |
 * | `DuplicateToolResult` | one result per `tool_use` id | 400 |
 * | `ToolResultNotFirst` | in that user turn, the tool results come before any other block | 400 |
 * | `FirstMessageNotUser` | the first message has the user role | 400 |
 * | `EmptyMessage` | no empty or whitespace-only content, except in a final assistant message (a prefill) | 400 |
 * | `EmptyTextBlock` | no text block is empty or whitespace-only | 400 |
 * | `ModifiedThinking` | signed thinking blocks of the latest assistant turn are sent back unmodified | 400 |
 *
 * Only merely tolerated, never flagged: consecutive same-role messages (merged silently), and thinking blocks in
 * earlier assistant turns (the API strips them from the prompt, so changing or dropping them costs nothing).
 * Server tool blocks (`server_tool_use` and its `*_tool_result`) live in one assistant message and are not client
 * tool pairs.
 *
 * @since 0.1.0
 */
import * as Data from "effect/Data"
import type { ContentBlock, Message, Role, ThinkingBlock, ToolResultBlock } from "./Message.ts"
import { blocksOf, isText, isThinking, isToolResult, isToolUse, toolUseIds } from "./Message.ts"
import { isHumanMessage } from "./Turns.ts"

// ============================================================================
// Violations
// ============================================================================

/**
 * One broken rule. `messageIndex` and `blockIndex` point into the input list (for `MissingToolResult`, at the
 * `tool_use`; for the other tool rules, at the `tool_result`).
 * @category models
 */
export type Violation = Data.TaggedEnum<{
  OrphanedToolResult: { readonly messageIndex: number; readonly blockIndex: number; readonly toolUseId: string }
  DuplicateToolResult: { readonly messageIndex: number; readonly blockIndex: number; readonly toolUseId: string }
  ToolResultNotFirst: { readonly messageIndex: number; readonly blockIndex: number; readonly toolUseId: string }
  MissingToolResult: { readonly messageIndex: number; readonly blockIndex: number; readonly toolUseId: string }
  FirstMessageNotUser: { readonly messageIndex: number }
  EmptyMessage: { readonly messageIndex: number }
  EmptyTextBlock: { readonly messageIndex: number; readonly blockIndex: number }
  ModifiedThinking: { readonly messageIndex: number; readonly blockIndex: number; readonly signature: string }
}>

/** Constructors, guards (`Violation.$is("…")`) and matching (`Violation.$match`) for `Violation`. @category models */
export const Violation = Data.taggedEnum<Violation>()

/** A client tool call and the message that answers it, as the API pairs them. @category models */
export interface ToolPair {
  readonly toolUseId: string
  /** Index of the assistant message holding the `tool_use`. */
  readonly useIndex: number
  /** Index of the user message holding its (first) `tool_result`; always greater than `useIndex`. */
  readonly resultIndex: number
}

// ============================================================================
// Pairing scan
// ============================================================================

/**
 * A block's position packed into one number (`messageIndex * 2^20 + blockIndex`), so the scan allocates nothing per
 * block. Safe for up to 2^20 blocks per message and 2^33 messages.
 */
type Location = number
const BLOCK_BITS = 1_048_576
const locate = (messageIndex: number, blockIndex: number): Location => messageIndex * BLOCK_BITS + blockIndex
const messageOf = (at: Location): number => Math.floor(at / BLOCK_BITS)
const blockOf = (at: Location): number => at % BLOCK_BITS
const position = (at: Location) => ({ messageIndex: messageOf(at), blockIndex: blockOf(at) })

interface ScanSink {
  pair(toolUseId: string, use: Location, result: Location, notFirst: boolean): void
  orphan(toolUseId: string, result: Location): void
  duplicate(toolUseId: string, result: Location): void
  missing(toolUseId: string, use: Location): void
}

/**
 * One pass over the merged view: each maximal run of same-role messages is one API turn, and the calls of an
 * assistant turn are answered by the user turn right after it. O(messages + blocks); one map and one set, reused.
 */
const scanPairs = (messages: ReadonlyArray<Message>, sink: ScanSink): void => {
  const n = messages.length
  const uses = new Map<string, Location>()
  const answered = new Set<string>()
  const flushMissing = () => {
    for (const [id, use] of uses) if (!answered.has(id)) sink.missing(id, use)
  }
  let i = 0
  while (i < n) {
    const role = messages[i]!.role
    let j = i
    while (j < n && messages[j]!.role === role) j++
    if (role === "assistant") {
      uses.clear()
      answered.clear()
      for (let k = i; k < j; k++) {
        const content = messages[k]!.content
        if (typeof content === "string") continue
        for (let b = 0; b < content.length; b++) {
          const block = content[b]!
          if (isToolUse(block) && !uses.has(block.id)) uses.set(block.id, locate(k, b))
        }
      }
    } else {
      let sawOther = false
      for (let k = i; k < j; k++) {
        const content = messages[k]!.content
        if (typeof content === "string") {
          if (content.length > 0) sawOther = true
          continue
        }
        for (let b = 0; b < content.length; b++) {
          const block = content[b]!
          if (!isToolResult(block)) {
            sawOther = true
            continue
          }
          const id = block.tool_use_id
          const use = uses.get(id)
          if (use === undefined) sink.orphan(id, locate(k, b))
          else if (answered.has(id)) sink.duplicate(id, locate(k, b))
          else {
            answered.add(id)
            sink.pair(id, use, locate(k, b), sawOther)
          }
        }
      }
      flushMissing()
      uses.clear()
      answered.clear()
    }
    i = j
  }
  flushMissing()
}

const ignore = (): void => {}

/**
 * Calls `f` for every client tool pair the API would accept, in order: a `tool_use` and the first `tool_result` for
 * its id in the next merged user turn. Cutting a conversation at `c` with `useIndex < c <= resultIndex` orphans that
 * result. O(messages + blocks), with no allocation per pair.
 * @category validation
 */
export const forEachToolPair = (
  messages: ReadonlyArray<Message>,
  f: (useIndex: number, resultIndex: number, toolUseId: string) => void
): void =>
  scanPairs(messages, {
    pair: (toolUseId, use, result) => f(messageOf(use), messageOf(result), toolUseId),
    orphan: ignore,
    duplicate: ignore,
    missing: ignore
  })

/** Every client tool pair, as `forEachToolPair` visits them. @category validation */
export const toolPairs = (messages: ReadonlyArray<Message>): ReadonlyArray<ToolPair> => {
  const pairs: Array<ToolPair> = []
  forEachToolPair(messages, (useIndex, resultIndex, toolUseId) => pairs.push({ toolUseId, useIndex, resultIndex }))
  return pairs
}

// ============================================================================
// Validation
// ============================================================================

/** Empty or whitespace-only text, which the API rejects. */
const isBlank = (text: string): boolean => text.trim().length === 0
const isBlankText = (block: ContentBlock): boolean => isText(block) && isBlank(block.text)

const thinkingKey = (block: ThinkingBlock): string => `${block.signature}\u0000${block.thinking}`

/**
 * Every structural rule of the Messages API that the list breaks (see the module doc for the table), grouped by rule:
 * the first message, empty content, tool pairing (in message order), thinking. An empty result means the API accepts
 * the list's structure.
 *
 * `reference` is the view the signed thinking blocks came from (for example the list before compaction). With it,
 * each signed thinking block in the latest assistant turn (the assistant messages after the last human message) must
 * appear in `reference` with the same signature and the same text; without it that rule is not checked, since only
 * the provider can verify a signature. O(messages + blocks).
 * @category validation
 */
export const validate = (
  messages: ReadonlyArray<Message>,
  reference?: ReadonlyArray<Message>
): ReadonlyArray<Violation> => {
  const out: Array<Violation> = []
  const n = messages.length
  if (n > 0 && messages[0]!.role !== "user") out.push(Violation.FirstMessageNotUser({ messageIndex: 0 }))
  for (let i = 0; i < n; i++) {
    const message = messages[i]!
    const content = message.content
    if (content.length === 0 || (typeof content === "string" && isBlank(content))) {
      if (!(i === n - 1 && message.role === "assistant")) out.push(Violation.EmptyMessage({ messageIndex: i }))
      continue
    }
    if (typeof content === "string") continue
    for (let b = 0; b < content.length; b++) {
      if (isBlankText(content[b]!)) out.push(Violation.EmptyTextBlock({ messageIndex: i, blockIndex: b }))
    }
  }
  scanPairs(messages, {
    pair: (toolUseId, _use, at, notFirst) => {
      if (notFirst) out.push(Violation.ToolResultNotFirst({ ...position(at), toolUseId }))
    },
    orphan: (toolUseId, at) => out.push(Violation.OrphanedToolResult({ ...position(at), toolUseId })),
    duplicate: (toolUseId, at) => out.push(Violation.DuplicateToolResult({ ...position(at), toolUseId })),
    missing: (toolUseId, at) => out.push(Violation.MissingToolResult({ ...position(at), toolUseId }))
  })
  if (reference !== undefined) checkThinking(messages, reference, out)
  return out
}

const checkThinking = (
  messages: ReadonlyArray<Message>,
  reference: ReadonlyArray<Message>,
  out: Array<Violation>
): void => {
  let start = messages.length
  while (start > 0 && !isHumanMessage(messages[start - 1]!)) start--
  const known = new Set<string>()
  for (const message of reference) {
    if (message.role !== "assistant" || typeof message.content === "string") continue
    for (const block of message.content) {
      if (isThinking(block) && block.signature !== undefined) known.add(thinkingKey(block))
    }
  }
  for (let i = start; i < messages.length; i++) {
    const message = messages[i]!
    if (message.role !== "assistant" || typeof message.content === "string") continue
    for (let b = 0; b < message.content.length; b++) {
      const block = message.content[b]!
      if (isThinking(block) && block.signature !== undefined && !known.has(thinkingKey(block))) {
        out.push(Violation.ModifiedThinking({ messageIndex: i, blockIndex: b, signature: block.signature }))
      }
    }
  }
}

/** True when the list has an orphaned tool_result (one whose tool_use is not right before it). @category validation */
export const hasOrphans = (messages: ReadonlyArray<Message>): boolean =>
  validate(messages).some(Violation.$is("OrphanedToolResult"))

/** True when `validate(messages)` (without a reference) finds nothing. @category validation */
export const isValid = (messages: ReadonlyArray<Message>): boolean => validate(messages).length === 0

// ============================================================================
// Repair
// ============================================================================

/** The text of the error result `repair` gives a `tool_use` that had none. @category constants */
export const MISSING_RESULT_TEXT = "This tool call has no result: the reply was interrupted before the tool ran."

/** The text of the user message `repair` puts first when a list starts with an assistant. @category constants */
export const LEADING_USER_TEXT = "[The conversation continues from an earlier point.]"

/** What `repair` changed: all zero and empty exactly when the input was returned as is. @category models */
export interface RepairReport {
  /** Empty or whitespace-only text blocks removed. */
  readonly droppedEmptyBlocks: number
  /** Messages removed because their content was (or became) empty. */
  readonly droppedEmptyMessages: number
  /** Messages folded into the message before them because both had the same role. */
  readonly mergedMessages: number
  /** `tool_use_id`s of orphaned or duplicate tool results removed, in order. */
  readonly droppedToolResults: ReadonlyArray<string>
  /** Ids of tool calls that got a synthetic `is_error` result, in order. */
  readonly addedErrorResults: ReadonlyArray<string>
  /** User messages whose tool results were moved before their other blocks. */
  readonly reorderedMessages: number
  /** True when a user message was put first because the list started with an assistant message. */
  readonly insertedLeadingUser: boolean
}

/**
 * The outcome of `repair`. `messages` is the input array itself when it was valid (do not mutate it); otherwise a new
 * array in which unchanged messages are shared by reference, and changed ones are new `{ role, content }` objects
 * whose content holds the input's own blocks plus wire-format `tool_result` / `text` blocks `repair` made, so they are
 * valid SDK `MessageParam`s (extra keys of merged messages, such as private `_` fields, are not carried over).
 * @category models
 */
export interface Repaired<M extends Message> {
  readonly messages: Array<M>
  readonly report: RepairReport
}

interface Built {
  readonly role: Role
  readonly content: Array<ContentBlock>
}

/** A message repair builds, typed as the caller's message type (see `Repaired`). */
const built = <M extends Message>(role: Role, content: Array<ContentBlock>): M & Built =>
  ({ role, content }) as M & Built

const EMPTY_REPORT: RepairReport = {
  droppedEmptyBlocks: 0,
  droppedEmptyMessages: 0,
  mergedMessages: 0,
  droppedToolResults: [],
  addedErrorResults: [],
  reorderedMessages: 0,
  insertedLeadingUser: false
}

/**
 * The closest valid list, and what was changed to get it. A valid list (`validate(messages)` is empty) is returned
 * as is, the same array. Otherwise, in this order:
 *
 * 1. empty or whitespace-only text blocks, and messages left empty, are dropped;
 * 2. consecutive same-role messages are merged into one, the way the API merges them (string content becomes a text
 *    block; a message without a same-role neighbour is kept by reference);
 * 3. in each user message, tool results that answer no `tool_use` of the assistant message right before it, and
 *    second results for the same id, are dropped; the remaining results are moved first; each `tool_use` left without
 *    a result gets `{ type: "tool_result", tool_use_id, content: MISSING_RESULT_TEXT, is_error: true }` (in a new user
 *    message when none follows). A user message emptied this way is dropped and its neighbours merged;
 * 4. a list that starts with an assistant message gets a short user message (`LEADING_USER_TEXT`) in front.
 *
 * Thinking blocks are never touched. The output always validates, so `repair` is idempotent.
 * O(messages + blocks).
 * @category repair
 */
export const repair = <M extends Message>(messages: ReadonlyArray<M>): Repaired<M> => {
  if (validate(messages).length === 0) return { messages: messages as Array<M>, report: EMPTY_REPORT }
  let droppedEmptyBlocks = 0
  let droppedEmptyMessages = 0
  let mergedMessages = 0
  let reorderedMessages = 0
  const droppedToolResults: Array<string> = []
  const addedErrorResults: Array<string> = []

  /** Appends to `list`, merging into the last message when the roles match (a merged message is built once). */
  const appender = (list: Array<M>) => {
    const owned = new WeakSet<M>()
    return (message: M): void => {
      const last = list.at(-1)
      if (last === undefined || last.role !== message.role) {
        list.push(message)
        return
      }
      mergedMessages++
      if (owned.has(last)) {
        ;(last as M & Built).content.push(...blocksOf(message))
        return
      }
      const next = built<M>(last.role, [...blocksOf(last), ...blocksOf(message)])
      owned.add(next)
      list[list.length - 1] = next
    }
  }

  // 1 + 2: drop empties, merge same-role runs
  const merged: Array<M> = []
  const pushMerged = appender(merged)
  for (const message of messages) {
    if (typeof message.content === "string") {
      if (isBlank(message.content)) droppedEmptyMessages++
      else pushMerged(message)
      continue
    }
    const kept = message.content.filter((b) => !isBlankText(b))
    droppedEmptyBlocks += message.content.length - kept.length
    if (kept.length === 0) droppedEmptyMessages++
    else pushMerged(kept.length === message.content.length ? message : built<M>(message.role, kept))
  }

  // 3: pair tool results with the assistant message right before them
  const out: Array<M> = []
  const emit = appender(out)
  const missingResults = (ids: ReadonlyArray<string>): Array<ToolResultBlock> =>
    ids.map((id) => {
      addedErrorResults.push(id)
      return { type: "tool_result", tool_use_id: id, content: MISSING_RESULT_TEXT, is_error: true }
    })
  let expected: ReadonlyArray<string> = []
  for (const message of merged) {
    if (message.role === "assistant") {
      emit(message)
      expected = toolUseIds(out.at(-1)!)
      continue
    }
    const want = new Set(expected)
    const results: Array<ContentBlock> = []
    const others: Array<ContentBlock> = []
    let changed = false
    let moved = false
    for (const block of blocksOf(message)) {
      if (!isToolResult(block)) others.push(block)
      else if (want.delete(block.tool_use_id)) {
        if (others.length > 0) moved = true
        results.push(block)
      } else {
        droppedToolResults.push(block.tool_use_id)
        changed = true
      }
    }
    if (moved) {
      reorderedMessages++
      changed = true
    }
    const added = missingResults(expected.filter((id) => want.has(id)))
    expected = []
    const content = [...results, ...added, ...others]
    if (content.length === 0) droppedEmptyMessages++
    else emit(changed || added.length > 0 ? built<M>("user", content) : message)
  }
  if (expected.length > 0) emit(built<M>("user", missingResults(expected)))

  // 4: the first message is a user message
  const insertedLeadingUser = out.length > 0 && out[0]!.role !== "user"
  if (insertedLeadingUser) out.unshift(built<M>("user", [{ type: "text", text: LEADING_USER_TEXT }]))
  return {
    messages: out,
    report: {
      droppedEmptyBlocks,
      droppedEmptyMessages,
      mergedMessages,
      droppedToolResults,
      addedErrorResults,
      reorderedMessages,
      insertedLeadingUser
    }
  }
}
