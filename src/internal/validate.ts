/**
 * The rules of the Messages API as violations, the pairing scan, and `validate`: the first half of `Validate` (which
 * re-exports every public name here and holds the table of rules). The predicates exported for `internal/repair` are
 * the same ones `validate` judges by, so repair and validation cannot disagree on a rule.
 */
import * as Data from "effect/Data"
import {
  type CompactionBlock,
  type ContentBlock,
  type Message,
  type ThinkingBlock,
  validateMessage
} from "../Message.ts"
import { isHumanMessage } from "../Turns.ts"
import { prefixChanged } from "./thinkingBinding.ts"
import {
  blocksOf,
  hasContent,
  hasOutputConfig,
  isCompaction,
  isCompactionWithContent,
  isServerToolResult,
  isText,
  isThinking,
  isToolResult,
  isToolUse,
  systemFields
} from "./blocks.ts"
import { apiViewStart, compactionBlockIndex } from "./apiView.ts"

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
  ThinkingPrefixChanged: { readonly messageIndex: number; readonly blockIndex: number; readonly signature: string }
  EmptyConversation: { readonly messageIndex: 0 }
  DuplicateToolUseId: { readonly messageIndex: number; readonly blockIndex: number; readonly toolUseId: string }
  SystemMessageFirst: { readonly messageIndex: number }
  SystemMessageNotAfterTurn: { readonly messageIndex: number }
  SystemMessageNotBeforeAssistant: { readonly messageIndex: number }
  SystemMessageInToolCall: { readonly messageIndex: number }
  SystemMessageBlock: { readonly messageIndex: number; readonly blockIndex: number; readonly blockType: string }
  CompactionBlockAmbiguous: { readonly messageIndex: number; readonly blockIndex: number }
  CompactionBlockMisplaced: { readonly messageIndex: number; readonly blockIndex: number }
  ModifiedCompaction: { readonly messageIndex: number; readonly blockIndex: number }
  MalformedMessage: { readonly messageIndex: number; readonly reason: string }
}>

/** Constructors, guards (`Violation.$is("…")`) and matching (`Violation.$match`) for `Violation`. @category models */
export const Violation: Data.TaggedEnum.Constructor<Violation> = Data.taggedEnum<Violation>()

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
 * assistant turn are answered by the user turn right after it. System messages are skipped (they never pair). O(messages + blocks); one map and one set, reused.
 */
const scanPairs = (messages: ReadonlyArray<Message>, sink: ScanSink, start = 0): void => {
  const n = messages.length
  const uses = new Map<string, Location>()
  const answered = new Set<string>()
  const flushMissing = () => {
    for (const [id, use] of uses) if (!answered.has(id)) sink.missing(id, use)
  }
  let i = start
  while (i < n) {
    const role = messages[i]!.role
    if (role === "system") {
      // a turn of its own that pairs with nothing; a call before it stays open (SystemMessageInToolCall)
      i++
      continue
    }
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
export const isBlank = (text: string): boolean => text.trim().length === 0
export const isBlankText = (block: ContentBlock): boolean => isText(block) && isBlank(block.text)

const thinkingKey = (block: ThinkingBlock): string => `${block.signature}\u0000${block.thinking}`

/** The block types a system message may hold (the SDK's `BetaSystemMessageParam`). */
export const SYSTEM_BLOCK_TYPES: ReadonlySet<string> = new Set(["text", "tool_addition", "tool_removal"])

/** True when an assistant message ends in a server tool result (a system message may follow it). */
export const endsInServerResult = (message: Message): boolean => {
  if (typeof message.content === "string" || !hasContent(message)) return false
  const last = message.content.at(-1)
  return last !== undefined && isServerToolResult(last)
}

/** True when an assistant message holds a client `tool_use` (its results must come in the next user turn). */
export const hasToolUse = (message: Message): boolean =>
  typeof message.content !== "string" && hasContent(message) && message.content.some(isToolUse)

/**
 * Where a system message breaks the placement rules of system messages, judged by its neighbours in the API view that
 * starts at `viewStart` (the nearest non-system message before it, and the message after it), or undefined when it is
 * placed well.
 */
const systemPlacement = (
  messages: ReadonlyArray<Message>,
  i: number,
  viewStart: number
): "SystemMessageFirst" | "SystemMessageInToolCall" | "SystemMessageNotAfterTurn" | undefined => {
  if (i === viewStart) return "SystemMessageFirst"
  const prev = messages[i - 1]!
  let before = i - 1
  while (before >= viewStart && messages[before]!.role === "system") before--
  if (before >= viewStart && messages[before]!.role === "assistant" && hasToolUse(messages[before]!)) {
    return "SystemMessageInToolCall"
  }
  if (prev.role === "system" || (prev.role === "assistant" && !endsInServerResult(prev))) {
    return "SystemMessageNotAfterTurn"
  }
  return undefined
}

const compactionKey = (block: CompactionBlock): string =>
  JSON.stringify([block.content ?? null, block.encrypted_content ?? null, block.signature ?? null]) + "\u0000" +
  JSON.stringify(block.tool_changes ?? null)

/**
 * How the list is sent: `"threshold"` (an ordinary request, with or without `context_management`; the default) or
 * `"on-demand"` (a request with the `compaction` parameter). @category models
 */
export interface ValidateOptions {
  /** How the list is sent: `"threshold"` (the default) or `"on-demand"` (with the `compaction` parameter). */
  readonly mode?: "threshold" | "on-demand" | undefined
  /**
   * The request's `thinking.block_binding.prefix_mismatch_behavior`. `"error"` (the API's default):
   * a signed thinking block whose prefix differs from its prefix in `reference` is `ThinkingPrefixChanged`;
   * `"drop_block"`: the API drops such blocks and accepts the request, so nothing is reported.
   */
  readonly binding?: "error" | "drop_block" | undefined
}

const ROLES: ReadonlySet<unknown> = new Set(["user", "assistant", "system"])

/**
 * True when the message is not even shaped as one: not an object, an unknown role, content neither a string nor a
 * list, or a block that is not an object with a `type`. O(blocks); the decoder then says exactly what is wrong.
 */
const misshapen = (message: unknown): boolean => {
  if (message === null || typeof message !== "object") return true
  const { role, content } = message as { readonly role?: unknown; readonly content?: unknown }
  if (!ROLES.has(role)) return true
  if (content == null || typeof content === "string") return false
  if (!Array.isArray(content)) return true
  return content.some((block: unknown) =>
    block === null || typeof block !== "object" || typeof (block as { type?: unknown }).type !== "string" ||
    (block as { type: string }).type.length === 0
  )
}

/** `MalformedMessage` for each message that is not shaped as one, with the decoder's path and reason. */
const malformed = (messages: ReadonlyArray<unknown>): Array<Violation> => {
  const out: Array<Violation> = []
  for (let i = 0; i < messages.length; i++) {
    if (!misshapen(messages[i])) continue
    // a misshapen message never decodes, so the decoder has its reason
    out.push(Violation.MalformedMessage({ messageIndex: i, reason: validateMessage(messages[i], i)!.message }))
  }
  return out
}

/** True for a system message that has no content and carries `output_config` fields. */
const isSettingsOnly = (message: Message): boolean =>
  !hasContent(message) && hasOutputConfig(message) &&
  Object.keys(systemFields(message).output_config as object).length > 0

/**
 * Every rule of the Messages API (see the module doc for the table) that the list breaks,
 * grouped by rule: the list and its messages (in message order), tool pairing (in message order), thinking and
 * compaction fidelity. An empty result means the API accepts the list's structure; only what the API rejects is
 * reported. What precedes the last compaction block with content is dropped by the API, so the rules of the list, its
 * tool pairs and system messages are judged on the API view (`apiViewStart` on), and unique ids and compaction
 * placement on the whole list. In the default
 * `"threshold"` mode a compaction block with content may sit in any user or assistant message, as the first block of
 * it; `"on-demand"` adds that there is one (`CompactionBlockAmbiguous`) and that it opens the list
 * (`CompactionBlockMisplaced`).
 *
 * `reference` is the view the signed blocks came from (for example the list before compaction). With it, each signed
 * thinking block in the latest assistant turn (the assistant messages after the last human message) must appear in
 * `reference` with the same signature and the same text, each signed thinking block found in `reference` must sit
 * after the same messages and blocks there (`ThinkingPrefixChanged`; `cache_control` aside; not
 * reported with `binding: "drop_block"`), and each compaction block must appear there with the same
 * `content`, `encrypted_content`, `signature` and `tool_changes`; without it those rules are not checked, since only
 * the provider can verify a signature. Total on decoded input (a system message without content included); a list
 * holding a message that is not shaped as one (not an object, an unknown role such as `"usr"`, content neither a string
 * nor a list, a block with no `type`) is not judged by the rules: each such message is `MalformedMessage`, with the
 * decoder's path and reason (`Message.validateMessage`), and nothing else is reported. O(messages + blocks).
 * @category validation
 */
export const validate = (
  messages: ReadonlyArray<Message>,
  reference?: ReadonlyArray<Message>,
  options: ValidateOptions = {}
): ReadonlyArray<Violation> => {
  const n = messages.length
  if (n === 0) return [Violation.EmptyConversation({ messageIndex: 0 })]
  // a list that is not shaped as messages cannot be judged by the rules: only what is malformed is reported
  const out: Array<Violation> = malformed(messages)
  if (out.length > 0) return out
  const onDemand = options.mode === "on-demand"
  const viewStart = apiViewStart(messages)
  const first = messages[viewStart]!
  if (first.role === "assistant" && compactionBlockIndex(first) !== 0) {
    out.push(Violation.FirstMessageNotUser({ messageIndex: viewStart }))
  }
  const useIds = new Set<string>()
  let withContent = 0
  for (let i = 0; i < n; i++) {
    const message = messages[i]!
    const inView = i >= viewStart
    if (inView && message.role === "system") {
      const misplaced = systemPlacement(messages, i, viewStart)
      if (misplaced !== undefined) out.push(Violation[misplaced]({ messageIndex: i }))
      const next = messages[i + 1]
      if (next !== undefined && next.role === "user") {
        out.push(Violation.SystemMessageNotBeforeAssistant({ messageIndex: i }))
      }
    }
    if (!hasContent(message)) {
      if (inView && !isSettingsOnly(message)) out.push(Violation.EmptyMessage({ messageIndex: i }))
      continue
    }
    const content = message.content
    // only a final assistant message's whole content may be empty; no text is ever blank (rule 4)
    if (content.length === 0) {
      if (inView && !(i === n - 1 && message.role === "assistant")) {
        out.push(Violation.EmptyMessage({ messageIndex: i }))
      }
      continue
    }
    if (typeof content === "string") {
      if (inView && isBlank(content)) out.push(Violation.EmptyMessage({ messageIndex: i }))
      continue
    }
    for (let b = 0; b < content.length; b++) {
      const block = content[b]!
      if (isBlankText(block)) {
        if (inView) out.push(Violation.EmptyTextBlock({ messageIndex: i, blockIndex: b }))
      } else if (isToolUse(block)) {
        if (useIds.has(block.id)) {
          out.push(Violation.DuplicateToolUseId({ messageIndex: i, blockIndex: b, toolUseId: block.id }))
        } else useIds.add(block.id)
      } else if (isCompaction(block)) {
        if (message.role === "system") out.push(Violation.CompactionBlockMisplaced({ messageIndex: i, blockIndex: b }))
        else if (isCompactionWithContent(block)) {
          withContent++
          if (onDemand && withContent > 1) {
            out.push(Violation.CompactionBlockAmbiguous({ messageIndex: i, blockIndex: b }))
          } else if (b !== 0 || (onDemand && i !== 0)) {
            out.push(Violation.CompactionBlockMisplaced({ messageIndex: i, blockIndex: b }))
          }
        }
      }
      if (inView && message.role === "system" && !SYSTEM_BLOCK_TYPES.has(block.type) && !isCompaction(block)) {
        out.push(Violation.SystemMessageBlock({ messageIndex: i, blockIndex: b, blockType: block.type }))
      }
    }
  }
  scanPairs(messages, {
    pair: (toolUseId, _use, at, notFirst) => {
      if (notFirst) out.push(Violation.ToolResultNotFirst({ ...position(at), toolUseId }))
    },
    orphan: (toolUseId, at) => out.push(Violation.OrphanedToolResult({ ...position(at), toolUseId })),
    duplicate: (toolUseId, at) => out.push(Violation.DuplicateToolResult({ ...position(at), toolUseId })),
    missing: (toolUseId, at) => out.push(Violation.MissingToolResult({ ...position(at), toolUseId }))
  }, viewStart)
  if (reference !== undefined) {
    checkThinking(messages, reference, out)
    if (options.binding !== "drop_block") {
      for (const p of prefixChanged(messages, reference)) {
        const block = blocksOf(messages[p.message]!)[p.block] as ThinkingBlock
        out.push(
          Violation.ThinkingPrefixChanged({ messageIndex: p.message, blockIndex: p.block, signature: block.signature! })
        )
      }
    }
    checkCompaction(messages, reference, out)
  }
  return out
}

const checkCompaction = (
  messages: ReadonlyArray<Message>,
  reference: ReadonlyArray<Message>,
  out: Array<Violation>
): void => {
  let known: Set<string> | undefined
  for (let i = 0; i < messages.length; i++) {
    const content = blocksOf(messages[i]!)
    for (let b = 0; b < content.length; b++) {
      const block = content[b]!
      if (!isCompaction(block)) continue
      known ??= new Set(reference.flatMap((m) => blocksOf(m).filter(isCompaction).map(compactionKey)))
      if (!known.has(compactionKey(block))) out.push(Violation.ModifiedCompaction({ messageIndex: i, blockIndex: b }))
    }
  }
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
    if (message.role !== "assistant" || typeof message.content === "string" || !hasContent(message)) continue
    for (const block of message.content) {
      if (isThinking(block) && block.signature !== undefined) known.add(thinkingKey(block))
    }
  }
  for (let i = start; i < messages.length; i++) {
    const message = messages[i]!
    if (message.role !== "assistant" || typeof message.content === "string" || !hasContent(message)) continue
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
