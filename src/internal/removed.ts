/**
 * What a compaction removed, as its outcome records it (`Compact.CompactedInfo.removed`): each message of the removed
 * span and each tool result in it, with its kind, role, tool and size. A tool result carries its reference, the
 * `tool_use_id` `Recall.recall` answers; a message's reference is its log entry's id, which only the log knows: the
 * log stores the same records with those ids in the compaction's entry (`removalRecord`, `CompactionEntry.removed`).
 * Pure.
 *
 * @internal
 */
import type { Message } from "../Message.ts"
import type { RemovedItem } from "./sessionEntry.ts"
import { isToolResult, isToolUse } from "./blocks.ts"
import { estimateContentTokens, estimateMessageTokens } from "../Tokens.ts"

/** One removed message or tool result (`Compact.CompactedInfo.removed`). */
export interface RemovedRecord {
  readonly kind: "message" | "tool_result"
  readonly role: Message["role"]
  /** The tool_use_id of a tool result: the reference `Recall.recall` answers. Absent for a message. */
  readonly ref?: string
  /** The tool a tool result answers, when its call is in the span. */
  readonly tool?: string
  /** Estimated tokens (a message's include its tool results'). */
  readonly tokens: number
}

/** The records of a removed span, in order: each message, then each tool result it holds. */
export const removedRecords = (span: ReadonlyArray<Message>): ReadonlyArray<RemovedRecord> => {
  const tools = new Map<string, string>()
  const out: Array<RemovedRecord> = []
  for (const message of span) {
    out.push({ kind: "message", role: message.role, tokens: estimateMessageTokens(message) })
    if (!Array.isArray(message.content)) continue
    for (const block of message.content) {
      if (isToolUse(block)) tools.set(block.id, block.name)
      if (!isToolResult(block)) continue
      const tool = tools.get(block.tool_use_id)
      out.push({
        kind: "tool_result",
        role: message.role,
        ref: block.tool_use_id,
        ...(tool === undefined ? {} : { tool }),
        tokens: block.content === undefined ? 0 : estimateContentTokens(block.content)
      })
    }
  }
  return out
}

/**
 * The record a compaction's log entry stores (`CompactionEntry.removed`): `removedRecords(span)` with each message's
 * reference, its entry id (`entryIds[i]` for `span[i]`; kind `summary` for `summaryId`, the summary the span starts
 * with), and each tool result's `entry`, the id of the entry that stores it; then each message of `replaced` (the
 * messages after the span whose copies the entry stores in their place, a repaired tail: `entryIds` goes on with
 * theirs), whose tool results live on in the copies.
 */
export const removalRecord = (
  span: ReadonlyArray<Message>,
  entryIds: ReadonlyArray<string>,
  summaryId: string | undefined,
  replaced: ReadonlyArray<Message> = []
): ReadonlyArray<RemovedItem> => {
  let message = -1
  const own = removedRecords(span).map((r): RemovedItem => {
    if (r.kind === "message") {
      message++
      const ref = entryIds[message]!
      return { ref, kind: ref === summaryId ? "summary" : "message", role: r.role, tokens: r.tokens }
    }
    // in the schema's key order, so the entry as written and as read back print alike
    return {
      ref: r.ref!,
      kind: "tool_result",
      role: r.role,
      ...(r.tool === undefined ? {} : { tool: r.tool }),
      tokens: r.tokens,
      entry: entryIds[message]!
    }
  })
  const copied = replaced.map((m, i): RemovedItem => ({
    ref: entryIds[span.length + i]!,
    kind: "message",
    role: m.role,
    tokens: estimateMessageTokens(m)
  }))
  return [...own, ...copied]
}
