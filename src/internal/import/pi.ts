/**
 * The pi session JSONL converter (the active branch of the entry tree, compactions, bash and custom messages).
 *
 * @internal
 */
import type { ContentBlock } from "../../Message.ts"
import { Builder, normalizeUsage } from "./builder.ts"
import { isRecord, type JsonlEntry, type JsonlLines } from "./lines.ts"
import type { CompactionRecord, ImportError, Session } from "./model.ts"
import type * as Result from "effect/Result"

// ============================================================================
// pi
// ============================================================================

const str = (u: unknown): string => (typeof u === "string" ? u : "")

/** A pi content block as a wire block: `toolCall` → `tool_use`, `thinking` → (redacted_)thinking, images → base64. */
const piBlock = (block: unknown): ContentBlock => {
  if (!isRecord(block)) return { type: "text", text: String(block) }
  switch (block["type"]) {
    case "text":
      return { type: "text", text: str(block["text"]) }
    case "thinking":
      if (block["redacted"] === true) return { type: "redacted_thinking", data: str(block["thinkingSignature"]) }
      return typeof block["thinkingSignature"] === "string" && block["thinkingSignature"] !== ""
        ? { type: "thinking", thinking: str(block["thinking"]), signature: block["thinkingSignature"] }
        : { type: "thinking", thinking: str(block["thinking"]) }
    case "toolCall":
      return { type: "tool_use", id: str(block["id"]), name: str(block["name"]), input: block["arguments"] ?? {} }
    case "image":
      return {
        type: "image",
        source: { type: "base64", media_type: str(block["mimeType"]), data: str(block["data"]) }
      }
    default:
      return block as unknown as ContentBlock
  }
}

const piBlocks = (content: unknown): Array<ContentBlock> =>
  typeof content === "string" ? [{ type: "text", text: content }] : Array.isArray(content) ? content.map(piBlock) : []

/** pi's `bashExecution` (a command the user ran with `!`) as the text the model sees. */
const bashText = (m: Readonly<Record<string, unknown>>): string => {
  let text = `$ ${str(m["command"])}\n${str(m["output"])}`
  if (m["cancelled"] === true) text += "\n(command cancelled)"
  else if (typeof m["exitCode"] === "number" && m["exitCode"] !== 0) text += `\n(exit code ${m["exitCode"]})`
  return text
}

/** Ids of the entries on the active branch (from the last entry up its `parentId` chain); undefined for v1 files. */
const activeBranch = (entries: ReadonlyArray<JsonlEntry>): ReadonlySet<string> | undefined => {
  const byId = new Map<string, Readonly<Record<string, unknown>>>()
  let leaf: string | undefined
  for (const { value } of entries) {
    if (value["type"] !== "session" && typeof value["id"] === "string") {
      byId.set(value["id"], value)
      leaf = value["id"]
    }
  }
  if (leaf === undefined || ![...byId.values()].some((v) => "parentId" in v)) return undefined
  const path = new Set<string>()
  for (let id: unknown = leaf; typeof id === "string" && !path.has(id);) {
    path.add(id)
    id = byId.get(id)?.["parentId"]
  }
  return path
}

/**
 * Converts pi session JSONL entries (version 1 and later). `message` entries become messages: `toolResult` → a user
 * `tool_result` block (consecutive results share one user message), `bashExecution` → user text `$ cmd\noutput`
 * (unless `excludeFromContext`); `custom`/`hookMessage` messages, `custom_message` and `branch_summary` entries → user
 * text (pi puts them in the model's context); empty assistant replies are dropped and counted.
 * `compaction` entries are reported in `compactions`; on v2+ tree sessions, entries off the active branch are counted
 * as `off-branch`. All other entry types are counted in `skipped` as `type:<name>`.
 * @category converters
 */
export const convertPi = (read: JsonlLines): Result.Result<Session, ImportError> => {
  const b = new Builder()
  const branch = activeBranch(read.entries)
  const messageIndexOfEntry = new Map<number | string, number>()
  const pendingKept: Array<{ record: CompactionRecord; key: number | string }> = []
  read.entries.forEach(({ line, value }, entryIndex) => {
    messageIndexOfEntry.set(entryIndex, b.messages.length)
    if (typeof value["id"] === "string") messageIndexOfEntry.set(value["id"], b.messages.length)
    const type = typeof value["type"] === "string" ? value["type"] : "untyped"
    if (type === "session") return b.skipped.add("session-header")
    if (branch !== undefined && typeof value["id"] === "string" && !branch.has(value["id"])) {
      return b.skipped.add("off-branch")
    }
    if (type === "compaction") {
      b.barrier()
      const record: CompactionRecord = {
        messageIndex: b.messages.length,
        line,
        ...(typeof value["tokensBefore"] === "number" ? { tokensBefore: value["tokensBefore"] } : {}),
        ...(typeof value["summary"] === "string" ? { summaryChars: value["summary"].length } : {})
      }
      b.compactions.push(record)
      const key = typeof value["firstKeptEntryId"] === "string"
        ? value["firstKeptEntryId"]
        : typeof value["firstKeptEntryIndex"] === "number"
        ? value["firstKeptEntryIndex"]
        : undefined
      if (key !== undefined) pendingKept.push({ record, key })
      return b.skipped.add("compaction")
    }
    const at = value["timestamp"]
    if (type === "custom_message") {
      b.note(b.add("user", piBlocks(value["content"]), "other", line), at)
      return
    }
    if (type === "branch_summary") {
      b.note(b.add("user", [{ type: "text", text: str(value["summary"]) }], "other", line), at)
      return
    }
    const message = value["message"]
    if (type !== "message" || !isRecord(message)) return b.skipped.add(`type:${type}`)
    const role = message["role"]
    const last = b.messages.length - 1
    switch (role) {
      case "user":
        b.note(b.add("user", piBlocks(message["content"]), "other", line), at)
        return
      case "assistant": {
        const blocks = piBlocks(message["content"])
        if (blocks.length === 0) return b.skipped.add("empty-assistant")
        const index = b.add("assistant", blocks, "assistant", line)
        b.note(index, at, message["model"])
        const usage = normalizeUsage(message["usage"])
        if (usage !== undefined) b.usage.set(index, usage)
        const stop = message["stopReason"]
        if (stop === "aborted" || stop === "error") b.interrupted.push({ messageIndex: index, stopReason: stop })
        return
      }
      case "toolResult": {
        const result: ContentBlock = {
          type: "tool_result",
          tool_use_id: str(message["toolCallId"]),
          content: piBlocks(message["content"]),
          ...(message["isError"] === true ? { is_error: true } : {})
        }
        if (b.kinds[last] === "tool-results") {
          b.messages[last]!.content.push(result)
          b.mergedLines++
          b.note(last, at)
        } else b.note(b.add("user", [result], "tool-results", line), at)
        return
      }
      case "bashExecution":
        if (message["excludeFromContext"] === true) return b.skipped.add("bash-excluded")
        b.note(b.add("user", [{ type: "text", text: bashText(message) }], "other", line), at)
        return
      case "custom":
      case "hookMessage":
        b.note(b.add("user", piBlocks(message["content"]), "other", line), at)
        return
      default:
        return b.skipped.add(`role:${String(role)}`)
    }
  })
  for (const { record, key } of pendingKept) {
    const index = messageIndexOfEntry.get(key)
    if (index !== undefined) (record as { firstKeptMessageIndex?: number }).firstKeptMessageIndex = index
  }
  return b.finish("pi", read)
}
