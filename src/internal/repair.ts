/**
 * `repair` and `repairResult`: the closest list the Messages API accepts. The second half of `Validate`, which
 * re-exports every public name here; the rules it repairs are judged by the predicates of `internal/validate`.
 */
import * as Data from "effect/Data"
import * as Result from "effect/Result"
import type { ContentBlock, Message, Role, ToolResultBlock } from "../Message.ts"
import { endsInServerResult, hasToolUse, isBlankText, SYSTEM_BLOCK_TYPES, validate } from "./validate.ts"
import { blocksOf, hasContent, hasOutputConfig, isToolResult, isToolUse, systemFields, toolUseIds } from "./blocks.ts"
import type { SystemMessageFields } from "./wireTypes.ts"
import { apiViewStart, compactionBlockIndex } from "./apiView.ts"

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
  /** Messages removed because they repeat, block for block, the earlier message that first used their tool ids. */
  readonly droppedDuplicateMessages: number
  /** Ids of `tool_use` blocks removed because they repeat an earlier block of the same message exactly, in order. */
  readonly droppedDuplicateToolUses: ReadonlyArray<string>
  /**
   * A `tool_use` that reuses an earlier id without repeating it (a different call) gets a fresh id, and so does the
   * result that answers it in the next user turn: nothing is lost and no result is invented. In order.
   */
  readonly renamedToolUses: ReadonlyArray<{ readonly from: string; readonly to: string }>
  /** Messages removed because they lie before the last compaction block with content (the API drops them). */
  readonly droppedBeforeCompaction: number
  /**
   * Blocks removed because they cannot be where they are: before the opening compaction block in its message, a
   * compaction block in a system message, or a block a system message may not hold.
   */
  readonly droppedMisplacedBlocks: number
  /** System messages moved to the nearest place the rules allow. */
  readonly movedSystemMessages: number
  /** System messages folded into the system message before them (two in a row are not allowed). */
  readonly mergedSystemMessages: number
  /**
   * True when a user message (`LEADING_USER_TEXT`) was appended because a system message had no user turn to follow
   * (a list of only a compaction block and assistant replies); the system message then ends the list.
   */
  readonly appendedUserForSystem: boolean
}

/**
 * The outcome of `repair`. `messages` is the input array itself when it was valid (do not mutate it); otherwise a new
 * array in which unchanged messages are shared by reference, and changed ones are new `{ role, content }` objects
 * whose content holds the input's own blocks plus wire-format `tool_result` / `text` blocks `repair` made, so they are
 * valid SDK `MessageParam`s (extra keys of merged user and assistant messages, such as private `_` fields, are not
 * carried over; a merged system message keeps the first one's). `messages` is never empty.
 * @category models
 */
export interface Repaired<M extends Message> {
  /** The repaired list: the input array itself when it was valid; never empty. */
  readonly messages: Array<M>
  /** What `repair` changed: empty blocks and messages dropped, merges, tool results dropped or added, reorders. */
  readonly report: RepairReport
}

const NothingToSendBase: ReturnType<typeof Data.TaggedError<"NothingToSend">> = Data.TaggedError("NothingToSend")

/**
 * The input holds no user or assistant content at all (after dropping what the API would reject), so there is no
 * request to send: the API rejects an empty `messages` (also `compaction_nothing_to_summarize`).
 * @category errors
 */
export class NothingToSend extends NothingToSendBase<{ readonly report: RepairReport }> {
  /** The error as one line: the conversation holds no user or assistant content to send. */
  override get message(): string {
    return "The conversation holds no user or assistant content to send"
  }
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
  insertedLeadingUser: false,
  droppedDuplicateMessages: 0,
  droppedDuplicateToolUses: [],
  renamedToolUses: [],
  droppedBeforeCompaction: 0,
  droppedMisplacedBlocks: 0,
  movedSystemMessages: 0,
  mergedSystemMessages: 0,
  appendedUserForSystem: false
}

/** A canonical JSON form (object keys sorted), to tell an exact duplicate message. */
const canonical = (value: unknown): string =>
  JSON.stringify(
    value,
    (_key, v: unknown) =>
      v !== null && typeof v === "object" && !Array.isArray(v)
        ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, (v as Record<string, unknown>)[k]]))
        : v
  )

/**
 * The rule that tool_use ids are unique, for `repair`, from `start` on: which messages to drop (an exact repeat of the
 * message that first used one of its ids: a replayed log), and the new block lists of the messages that change (a
 * block repeating an earlier block of its own message exactly is dropped; any other reuse of an id gets a fresh id,
 * `<id>-<n>`, and the first result with the old id in the user turn after its assistant turn is renamed with it, past
 * the result of the call that kept the id when that call is in the same turn). Consecutive assistant messages are one
 * turn, as the API merges them.
 */
const dedupeToolUses = <M extends Message>(
  messages: ReadonlyArray<M>,
  start: number,
  droppedBlocks: Array<string>,
  renamed: Array<{ readonly from: string; readonly to: string }>
): { readonly dropped: ReadonlySet<number>; readonly renames: ReadonlyMap<number, Array<ContentBlock>> } => {
  const dropped = new Set<number>()
  const renames = new Map<number, Array<ContentBlock>>()
  const first = new Map<string, { readonly message: number; readonly block: ContentBlock }>()
  let taken: Set<string> | undefined
  const fresh = (id: string): string => {
    taken ??= new Set(messages.flatMap((m) => toolUseIds(m)))
    let k = 2
    while (taken.has(`${id}-${k}`)) k++
    taken.add(`${id}-${k}`)
    return `${id}-${k}`
  }
  const blocksAt = (i: number): Array<ContentBlock> => renames.get(i) ?? [...blocksOf(messages[i]!)]
  // the first message of the assistant turn `i` is in: consecutive assistant messages (system messages between
  // aside) are one turn, as the API merges them, and share the user turn after them
  let turnStart = start
  for (let i = start; i < messages.length; i++) {
    const message = messages[i]!
    if (message.role === "user") turnStart = i + 1
    if (message.role === "system" || typeof message.content === "string") continue
    if (message.role === "assistant" && messages[turnStart]?.role !== "assistant") turnStart = i
    const content = message.content
    const reused = content.filter((b) => isToolUse(b) && first.has(b.id))
    if (reused.length > 0) {
      const origin = first.get((reused[0] as { readonly id: string }).id)!.message
      if (
        origin !== i && reused.every((b) => first.get((b as { readonly id: string }).id)!.message === origin) &&
        canonical(messages[origin]) === canonical(message)
      ) {
        dropped.add(i)
        continue
      }
    }
    let next: Array<ContentBlock> | undefined
    for (let b = 0; b < content.length; b++) {
      const block = content[b]!
      if (!isToolUse(block)) continue
      const earlier = first.get(block.id)
      if (earlier === undefined) {
        first.set(block.id, { message: i, block })
        continue
      }
      next ??= blocksAt(i)
      if (earlier.message === i && canonical(earlier.block) === canonical(block)) {
        droppedBlocks.push(block.id)
        next[b] = undefined as unknown as ContentBlock
        continue
      }
      const to = fresh(block.id)
      renamed.push({ from: block.id, to })
      next[b] = { ...block, id: to }
      first.set(to, { message: i, block: next[b]! })
      // the answer: in the user turn after this assistant turn (system messages skipped), the first result that still
      // has the old id, past the one the call that kept the id answers when that call is in this turn (every other
      // call with the id took its own result when it was renamed)
      let skip = earlier.message >= turnStart ? 1 : 0
      let j = i + 1
      while (j < messages.length && messages[j]!.role !== "user") j++
      for (; j < messages.length && messages[j]!.role !== "assistant" && skip >= 0; j++) {
        if (messages[j]!.role !== "user") continue
        const results = blocksAt(j)
        for (let r = 0; r < results.length; r++) {
          const x = results[r]!
          if (!isToolResult(x) || x.tool_use_id !== block.id || skip-- > 0) continue
          results[r] = { ...x, tool_use_id: to }
          renames.set(j, results)
          break
        }
      }
    }
    if (next !== undefined) renames.set(i, next.filter((b) => b !== undefined))
  }
  return { dropped, renames }
}

/** True when the API allows a system message before `list[q]`, on a list whose tool pairs are whole. */
const isSystemSlot = (list: ReadonlyArray<Message>, q: number): boolean => {
  if (q === 0) return false
  const prev = list[q - 1]!
  const afterTurn = prev.role === "user" || (prev.role === "assistant" && endsInServerResult(prev) && !hasToolUse(prev))
  return afterTurn && (q === list.length || list[q]!.role === "assistant")
}

/** A system message to put into a list, and the index (before `list[wanted]`) it asks for. */
export interface SystemPlacement<M extends Message> {
  readonly wanted: number
  readonly message: M
}

/**
 * System messages that land in one place, as one: their blocks in order, their `output_config` fields merged (a later
 * one's field wins: they govern the same turn now), and `clear_at: "next_user_message"` only when every one had it
 * (text that was to stay must not be cleared). The first message's other keys are kept.
 */
const mergeSystemMessages = <M extends Message>(group: ReadonlyArray<M>): M => {
  const configs = group.filter(hasOutputConfig).map((m) => systemFields(m).output_config as object)
  const { clear_at: _clearAt, output_config: _outputConfig, ...rest } = group[0]! as Message & SystemMessageFields
  const { content: _content, ...fields } = rest
  return {
    ...fields,
    ...(group.some(hasContent) ? { content: group.flatMap((m) => [...blocksOf(m)]) } : {}),
    ...(configs.length === 0 ? {} : { output_config: Object.assign({}, ...configs) }),
    ...(group.every((m) => systemFields(m).clear_at === "next_user_message") ? { clear_at: "next_user_message" } : {})
  } as unknown as M
}

/**
 * Puts system messages into `list` (which holds none, and whose tool pairs are whole), each at the nearest place at
 * or after `wanted` that the API allows (after a user turn, before an assistant turn or at the end), or the nearest
 * earlier one when there is no later one; system messages that land together become one (blocks in the order given).
 * When the list has no user turn to follow at all (a compaction block and assistant replies), a short user message
 * (`LEADING_USER_TEXT`) is appended and the system messages end the list. `list` itself is not changed.
 */
export const placeSystemMessages = <M extends Message>(
  list: ReadonlyArray<M>,
  systems: ReadonlyArray<SystemPlacement<M>>
): { readonly messages: Array<M>; readonly moved: number; readonly merged: number; readonly appendedUser: boolean } => {
  const out = [...list]
  let moved = 0
  let merged = 0
  let appendedUser = false
  const slots = new Map<number, Array<M>>()
  for (const { wanted, message } of systems) {
    let q = wanted
    while (q <= out.length && !isSystemSlot(out, q)) q++
    if (q > out.length) {
      q = wanted - 1
      while (q > 0 && !isSystemSlot(out, q)) q--
    }
    if (q === 0) {
      out.push(built<M>("user", [{ type: "text", text: LEADING_USER_TEXT }]))
      appendedUser = true
      q = out.length
    }
    if (q !== wanted) moved++
    const group = slots.get(q)
    if (group === undefined) slots.set(q, [message])
    else group.push(message)
  }
  const messages: Array<M> = []
  for (let q = 0; q <= out.length; q++) {
    const group = slots.get(q)
    if (group !== undefined) {
      if (group.length === 1) messages.push(group[0]!)
      else {
        merged += group.length - 1
        messages.push(mergeSystemMessages(group))
      }
    }
    if (q < out.length) messages.push(out[q]!)
  }
  return { messages, moved, merged, appendedUser }
}

/**
 * The closest valid list, and what was changed to get it, or `NothingToSend` when the input holds no user or assistant
 * content (never an empty list). A valid list (`validate(messages)` is empty) is returned as is, the same array, unless
 * the API ignores part of it: what precedes the last compaction block with content is dropped, and reported
 * (`droppedBeforeCompaction`), so the output holds in on-demand mode too. Otherwise, rule by rule, losing as little as
 * possible:
 *
 * 1. **Compaction.** Everything before the last compaction block with content is dropped (the API drops it
 *    anyway), and so are the blocks before that block in its message; a compaction block in a system message is
 *    dropped. Blocks with `content: null` (no-ops) stay.
 * 2. **Duplicate ids.** A message that repeats, block for block, the message that first used its tool ids (a
 *    replayed log) is dropped; otherwise a `tool_use` reusing an id is dropped (its results then go as duplicates).
 *    No result is invented for a duplicate.
 * 3. **Empty content.** Empty or whitespace-only text blocks, and messages left empty, are dropped.
 * 4. **Turns.** Consecutive same-role messages are merged into one, the way the API merges them (string content
 *    becomes a text block; a message without a same-role neighbour is kept by reference).
 * 5. **Tool pairs.** In each user message, tool results that answer no `tool_use` of the assistant message
 *    right before it, and second results for the same id, are dropped; the remaining results are moved first; each
 *    `tool_use` left without a result gets `{ type: "tool_result", tool_use_id, content: MISSING_RESULT_TEXT,
 *    is_error: true }` (in a new user message when none follows).
 * 6. **First message.** A list that starts with an assistant message, unless a compaction block opens it, gets a
 *    short user message (`LEADING_USER_TEXT`) in front.
 * 7. **System messages (8–11).** They stay system messages, never become user text and never displace a tool result.
 *    Each is put back after the message it followed; when that place breaks a rule it moves to the nearest later
 *    place the rules allow (after a user turn, before an assistant turn or at the end), or the nearest earlier one
 *    when there is no later one. System messages that land together are merged into one. Blocks a system message
 *    may not hold are dropped.
 *
 * A system message without content that carries `output_config` is kept as it is; when system
 * messages merge, their `output_config` fields merge and `clear_at: "next_user_message"` stays only if all had it.
 * Thinking, compaction, server tool, `mcp_tool_listing` and `fallback` blocks are never changed or moved within
 * their message. The output always validates, so `repair` is idempotent.
 * O(messages + blocks).
 * @category repair
 */
export const repairResult = <M extends Message>(
  messages: ReadonlyArray<M>
): Result.Result<Repaired<M>, NothingToSend> => {
  // a valid list comes back as is, unless the API ignores part of it (what precedes the last compaction block)
  const viewStart = apiViewStart(messages)
  if (viewStart === 0 && messages.length > 0 && validate(messages).length === 0) {
    return Result.succeed({ messages: messages as Array<M>, report: EMPTY_REPORT })
  }
  let droppedEmptyBlocks = 0
  let droppedEmptyMessages = 0
  let mergedMessages = 0
  let reorderedMessages = 0
  let droppedDuplicateMessages = 0
  let droppedMisplacedBlocks = 0
  let movedSystemMessages = 0
  let mergedSystemMessages = 0
  const droppedToolResults: Array<string> = []
  const addedErrorResults: Array<string> = []
  const droppedDuplicateToolUses: Array<string> = []
  const renamedToolUses: Array<{ readonly from: string; readonly to: string }> = []

  // 1–3: the API view, duplicate ids and empty content; system messages are set aside with their place
  const base: Array<M> = []
  const systems: Array<{ readonly after: number; readonly message: M }> = []
  const { dropped, renames } = dedupeToolUses(messages, viewStart, droppedDuplicateToolUses, renamedToolUses)
  for (let i = viewStart; i < messages.length; i++) {
    const message = messages[i]!
    let blocks = blocksOf(message)
    let changed = false
    if (i === viewStart && message.role !== "system") {
      const opening = compactionBlockIndex(message)
      if (opening > 0) {
        droppedMisplacedBlocks += opening
        blocks = blocks.slice(opening)
        changed = true
      }
    }
    if (message.role === "system" && !hasContent(message)) {
      // per-turn settings alone (API-RULES 26): kept as they are, or dropped when they carry nothing
      if (hasOutputConfig(message)) systems.push({ after: base.length, message })
      else droppedEmptyMessages++
      continue
    }
    if (message.role === "system") {
      const allowed = blocks.filter((b) => SYSTEM_BLOCK_TYPES.has(b.type))
      droppedMisplacedBlocks += blocks.length - allowed.length
      const kept = allowed.filter((b) => !isBlankText(b))
      droppedEmptyBlocks += allowed.length - kept.length
      if (kept.length === 0) droppedEmptyMessages++
      else {
        systems.push({
          after: base.length,
          message: kept.length === blocks.length && !changed ? message : ({ ...message, content: kept } as M)
        })
      }
      continue
    }
    if (dropped.has(i)) {
      droppedDuplicateMessages++
      continue
    }
    const renamed = renames.get(i)
    if (renamed !== undefined) {
      blocks = renamed
      changed = true
    }
    const kept = blocks.filter((b) => !isBlankText(b))
    droppedEmptyBlocks += blocks.length - kept.length
    if (kept.length === 0) droppedEmptyMessages++
    else base.push(kept.length === blocks.length && !changed ? message : built<M>(message.role, kept))
  }

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

  // 4: merge same-role runs; mergedAt[j] is the index in `merged` holding base[j]
  const merged: Array<M> = []
  const mergedAt = new Int32Array(base.length)
  const pushMerged = appender(merged)
  for (let j = 0; j < base.length; j++) {
    pushMerged(base[j]!)
    mergedAt[j] = merged.length - 1
  }

  // 5: pair tool results with the assistant message right before them; outAt[m] is where merged[m] went
  const out: Array<M> = []
  const outAt = new Int32Array(merged.length)
  const emit = appender(out)
  const missingResults = (ids: ReadonlyArray<string>): Array<ToolResultBlock> =>
    ids.map((id) => {
      addedErrorResults.push(id)
      return { type: "tool_result", tool_use_id: id, content: MISSING_RESULT_TEXT, is_error: true }
    })
  let expected: ReadonlyArray<string> = []
  for (let m = 0; m < merged.length; m++) {
    const message = merged[m]!
    if (message.role === "assistant") {
      emit(message)
      outAt[m] = out.length - 1
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
    outAt[m] = out.length - 1
  }
  if (expected.length > 0) emit(built<M>("user", missingResults(expected)))

  // 6: the first message is a user message, unless a compaction block opens the list
  const insertedLeadingUser = out.length > 0 && out[0]!.role !== "user" && compactionBlockIndex(out[0]!) !== 0
  if (insertedLeadingUser) out.unshift(built<M>("user", [{ type: "text", text: LEADING_USER_TEXT }]))

  const report = (): RepairReport => ({
    droppedEmptyBlocks,
    droppedEmptyMessages,
    mergedMessages,
    droppedToolResults,
    addedErrorResults,
    reorderedMessages,
    insertedLeadingUser,
    droppedDuplicateMessages,
    droppedDuplicateToolUses,
    renamedToolUses,
    droppedBeforeCompaction: viewStart,
    droppedMisplacedBlocks,
    movedSystemMessages,
    mergedSystemMessages,
    appendedUserForSystem: false
  })
  if (out.length === 0) return Result.fail(new NothingToSend({ report: report() }))
  if (systems.length === 0) return Result.succeed({ messages: out, report: report() })

  // 7: system messages back in, each at the nearest allowed place at or after the one it had
  const shift = insertedLeadingUser ? 1 : 0
  const placed = placeSystemMessages(
    out,
    systems.map(({ after, message }) => ({
      wanted: after === 0 ? 0 : outAt[mergedAt[after - 1]!]! + shift + 1,
      message
    }))
  )
  movedSystemMessages += placed.moved
  mergedSystemMessages += placed.merged
  const final = placed.messages
  const appendedUserForSystem = placed.appendedUser
  return Result.succeed({ messages: final, report: { ...report(), appendedUserForSystem } })
}

/**
 * `repairResult` for input known to hold user or assistant content: the closest valid list (see `repairResult` for
 * the rules), and what was changed. A valid list comes back as the same array.
 *
 * **Gotchas**: on input with no user or assistant content at all (an empty list, only empty messages, only system
 * messages) there is nothing to send, and it throws `NothingToSend` rather than return an empty list; use
 * `repairResult` where such input can reach it.
 * @category repair
 */
export const repair = <M extends Message>(messages: ReadonlyArray<M>): Repaired<M> => {
  const result = repairResult(messages)
  if (Result.isFailure(result)) throw result.failure
  return result.success
}
