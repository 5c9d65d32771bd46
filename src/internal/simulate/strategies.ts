/**
 * The peer strategies the simulator compares ours with, as view rewrites: observation masking, opencode pruning and
 * `clear_tool_uses`. Each replaces a result's content with a placeholder only when that shrinks it.
 *
 * @internal
 */
import type { ContentBlock, Message, ToolResultBlock } from "../../Message.ts"
import { estimateContentTokens, estimateMessageTokens } from "../../Tokens.ts"
import { isToolResult, isToolUse } from "../blocks.ts"
import { payloadTokens } from "../pointer.ts"

/** The placeholder observation masking leaves. */
const MASKED_TEXT = "[Old tool output omitted.]"
/** opencode's placeholder for a pruned tool output. */
const PRUNED_TEXT = "[Old tool result content cleared]"
/** The placeholder of a result cleared by `clear_tool_uses`. */
const CLEARED_TEXT = "[Tool result cleared.]"

/** Blocks this module wrote: never rewritten again. */
const placeholders = new WeakSet<ContentBlock>()

const replacementOf = (block: ToolResultBlock, text: string): ToolResultBlock => {
  const replaced: ToolResultBlock = { ...block, content: text }
  placeholders.add(replaced)
  return replaced
}

/**
 * Rewrites the tool_result blocks at `targets` (message and block index) to `text`. Returns the view itself when
 * nothing changed, and the tokens removed.
 */
const rewriteResults = (
  view: ReadonlyArray<Message>,
  targets: ReadonlyArray<{ readonly message: number; readonly block: number }>,
  text: string
): { readonly view: ReadonlyArray<Message>; readonly freed: number } => {
  if (targets.length === 0) return { view, freed: 0 }
  const byMessage = new Map<number, Array<number>>()
  for (const t of targets) {
    const list = byMessage.get(t.message)
    if (list === undefined) byMessage.set(t.message, [t.block])
    else list.push(t.block)
  }
  const out = view.slice()
  let freed = 0
  for (const [i, blocks] of byMessage) {
    const message = view[i]!
    const content = (message.content as ReadonlyArray<ContentBlock>).slice()
    for (const j of blocks) content[j] = replacementOf(content[j] as ToolResultBlock, text)
    const replaced: Message = { ...message, content }
    freed += estimateMessageTokens(message) - estimateMessageTokens(replaced)
    out[i] = replaced
  }
  return { view: out, freed }
}

interface ResultRef {
  readonly message: number
  readonly block: number
  readonly result: ToolResultBlock
}

/** The tool_result blocks of user messages, newest first. */
const resultsNewestFirst = (view: ReadonlyArray<Message>): Array<ResultRef> => {
  const out: Array<ResultRef> = []
  for (let i = view.length - 1; i >= 0; i--) {
    const message = view[i]!
    if (message.role !== "user" || typeof message.content === "string") continue
    for (let j = message.content.length - 1; j >= 0; j--) {
      const block = message.content[j]!
      if (isToolResult(block)) out.push({ message: i, block: j, result: block })
    }
  }
  return out
}

/** A placeholder only replaces a payload larger than itself (masking a two-word output would grow the prompt). */
const shrinks = (block: ToolResultBlock, text: string): boolean =>
  !placeholders.has(block) && payloadTokens(block) > estimateContentTokens(text)

/** Observation masking: every tool_result but the newest `window` gets a placeholder (when that shrinks it). */
export const mask = (view: ReadonlyArray<Message>, window: number) => {
  const targets = resultsNewestFirst(view).filter((r, rank) => rank >= window && shrinks(r.result, MASKED_TEXT))
  return rewriteResults(view, targets, MASKED_TEXT)
}

/** opencode pruning: past the newest `protectTokens` of tool output, prune when it frees at least `minimumTokens`. */
export const prune = (view: ReadonlyArray<Message>, protectTokens: number, minimumTokens: number) => {
  let total = 0
  let pruned = 0
  const targets: Array<ResultRef> = []
  for (const r of resultsNewestFirst(view)) {
    if (placeholders.has(r.result)) break
    const tokens = payloadTokens(r.result)
    total += tokens
    if (total > protectTokens && shrinks(r.result, PRUNED_TEXT)) {
      pruned += tokens
      targets.push(r)
    }
  }
  return pruned >= minimumTokens ? rewriteResults(view, targets, PRUNED_TEXT) : { view, freed: 0 }
}

/** Fully cleared forms of messages, so consecutive prompts share them by identity. */
const clearedMessages = new WeakMap<Message, Message>()

/** The prompt `clear_tool_uses` sends (the view is left as it is): every result but those of the newest `keep` tool uses cleared. */
export const clearToolUses = (
  view: ReadonlyArray<Message>,
  keep: number,
  cleared: Set<string>
): { readonly prompt: ReadonlyArray<Message>; readonly freed: number } => {
  const kept = new Set<string>()
  for (let i = view.length - 1; i >= 0 && kept.size < keep; i--) {
    const message = view[i]!
    if (message.role !== "assistant" || typeof message.content === "string") continue
    for (let j = message.content.length - 1; j >= 0 && kept.size < keep; j--) {
      const block = message.content[j]!
      if (isToolUse(block)) kept.add(block.id)
    }
  }
  let out: Array<Message> | undefined
  let freed = 0
  for (let i = 0; i < view.length; i++) {
    const message = view[i]!
    if (message.role !== "user" || typeof message.content === "string") continue
    let all = true
    let any = false
    for (const block of message.content) {
      if (!isToolResult(block)) continue
      if (kept.has(block.tool_use_id) || !shrinks(block, CLEARED_TEXT)) all = false
      else any = true
    }
    if (!any) continue
    let replaced = all ? clearedMessages.get(message) : undefined
    if (replaced === undefined) {
      const content = message.content.map((block) =>
        isToolResult(block) && !kept.has(block.tool_use_id) && shrinks(block, CLEARED_TEXT)
          ? replacementOf(block, CLEARED_TEXT)
          : block
      )
      replaced = { ...message, content }
      if (all) clearedMessages.set(message, replaced)
    }
    for (const block of message.content) {
      if (
        isToolResult(block) && !kept.has(block.tool_use_id) && shrinks(block, CLEARED_TEXT) &&
        !cleared.has(block.tool_use_id)
      ) {
        cleared.add(block.tool_use_id)
        freed += payloadTokens(block) - estimateContentTokens(CLEARED_TEXT)
      }
    }
    out ??= view.slice()
    out[i] = replaced
  }
  return { prompt: out ?? view, freed }
}
