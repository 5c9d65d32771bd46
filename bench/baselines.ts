/**
 * The loops the benchmarks share, so every run measures the same thing: the floors they compare against, and the
 * estimator's cold path.
 */
import type { ContentBlock, Message } from "../src/Message.ts"
import { estimateMessageTokensUncached } from "../src/Tokens.ts"

/** The whole-conversation estimate with no cache at all: every message estimated from scratch. */
export const coldEstimate = (messages: ReadonlyArray<Message>): number => {
  let n = 0
  for (const m of messages) n += estimateMessageTokensUncached(m)
  return n
}

const blockChars = (blocks: ReadonlyArray<ContentBlock>): number => {
  let n = 0
  for (const b of blocks) {
    const r = b as { text?: string; thinking?: string; content?: string | ReadonlyArray<ContentBlock> }
    if (typeof r.text === "string") n += r.text.length
    if (typeof r.thinking === "string") n += r.thinking.length
    if (typeof r.content === "string") n += r.content.length
    else if (Array.isArray(r.content)) n += blockChars(r.content)
  }
  return n
}

/** The estimator's floor: sum the string lengths of every text field, nothing else. */
export const sumStringLengths = (messages: ReadonlyArray<Message>): number => {
  let n = 0
  for (const m of messages) n += typeof m.content === "string" ? m.content.length : blockChars(m.content)
  return n
}

/** Eviction's floor: visit every block once and look at its type. */
export const visitBlocks = (messages: ReadonlyArray<Message>): number => {
  let n = 0
  for (let i = 0; i < messages.length; i++) {
    const content = messages[i]!.content
    if (typeof content === "string") continue
    for (let j = 0; j < content.length; j++) if (content[j]!.type === "tool_result") n++
  }
  return n
}
