/**
 * The Claude Code JSONL converter.
 *
 * @internal
 */
import { Builder, contentBlocks, isToolResultBlock, normalizeUsage } from "./builder.ts"
import { isRecord, type JsonlLines } from "./lines.ts"
import type { ImportError, Session } from "./model.ts"
import type * as Result from "effect/Result"

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
      b.note(index, value["timestamp"], message["model"])
    } else if (blocks.every(isToolResultBlock)) {
      if (b.kinds[last] === "tool-results") {
        b.messages[last]!.content.push(...blocks)
        b.mergedLines++
        b.note(last, value["timestamp"])
      } else b.note(b.add("user", [...blocks], "tool-results", line), value["timestamp"])
    } else {
      b.note(b.add("user", [...blocks], "other", line), value["timestamp"])
    }
  }
  return b.finish("claude-code", read)
}
