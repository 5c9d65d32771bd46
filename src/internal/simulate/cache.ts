/**
 * The simulator's cache model: how many leading messages a prompt shares with the previous one (same object, or the
 * same role and content), and the tokens of a slice of messages.
 *
 * @internal
 */
import type { Message } from "../../Message.ts"
import { estimateMessageTokens } from "../../Tokens.ts"

const deepEqual = (a: unknown, b: unknown): boolean => {
  if (a === b) return true
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false
    for (let i = 0; i < a.length; i++) if (!deepEqual(a[i], b[i])) return false
    return true
  }
  if (Array.isArray(b)) return false
  const ka = Object.keys(a)
  if (ka.length !== Object.keys(b).length) return false
  for (const key of ka) {
    if (!Object.hasOwn(b, key)) return false
    if (!deepEqual((a as Record<string, unknown>)[key], (b as Record<string, unknown>)[key])) return false
  }
  return true
}

/** Same object, or the same role and content (what the provider sees). */
const sameMessage = (a: Message, b: Message): boolean =>
  a === b || (a.role === b.role && deepEqual(a.content, b.content))

/** Number of leading messages `prompt` shares with `previous`. */
export const sharedPrefix = (previous: ReadonlyArray<Message>, prompt: ReadonlyArray<Message>): number => {
  const n = Math.min(previous.length, prompt.length)
  let i = 0
  while (i < n && sameMessage(previous[i]!, prompt[i]!)) i++
  return i
}

/** The estimated tokens of `messages[from..to)`. */
export const sumTokens = (messages: ReadonlyArray<Message>, from: number, to: number): number => {
  let total = 0
  for (let i = from; i < to; i++) total += estimateMessageTokens(messages[i]!)
  return total
}
