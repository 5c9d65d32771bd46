/**
 * Thinking binding, the pure part: which thinking blocks a rewrite of the view invalidates.
 *
 * A `thinking` (or `redacted_thinking`) block is bound to what precedes it when it was created: the messages before
 * its message and the blocks before it in that message. A rewrite at a position (an offloaded result, a summary head,
 * a renamed `tool_use` id, a dropped empty block) changes the prefix of every thinking block after that position that
 * already existed; the API then rejects the request (`prefix_mismatch_behavior: "error"`, its default) or, with
 * `thinking.block_binding: { prefix_mismatch_behavior: "drop_block" }`, drops those blocks (they count nothing) and
 * reports each in `input_transformations`. Blocks created after the rewrite are bound to the new prefix.
 *
 * Positions are `{ message, block }` pairs into a view, kept sorted and without duplicates. `cache_control` markers
 * are not part of a prefix (the library moves them every request), and a string content is its one text block.
 *
 * @internal
 */
import type { BlockPosition } from "../Cache.ts"
import type { ContentBlock, Message } from "../Message.ts"
import { estimateMessageTokens } from "../Tokens.ts"
import { blocksOf } from "./blocks.ts"
import { estimateContentTokensUncached } from "./estimate.ts"
import { partitionPoint } from "./partitionPoint.ts"

/** One entry of a reply's `input_transformations`: what the API did to a block of the request. */
export interface InputTransformation {
  readonly type: string
  /** `messages.{i}.content.{j}` of the request. */
  readonly path: string
  readonly reason?: string
}

/** The beta header that makes the API report dropped thinking blocks in `input_transformations`. */
export const THINKING_BINDING_BETA = "thinking-binding-controls-2026-08-01"

/** The block binding the library asks for once a rewrite invalidated thinking. */
export const DROP_BLOCK = { prefix_mismatch_behavior: "drop_block" } as const

/**
 * True for a thinking config that can carry `block_binding` (SDK 1.17: `enabled` and `adaptive`; `disabled` and
 * `between_tools` have no such field). A request without one cannot ask the API to drop thinking it would refuse.
 */
export const carriesBinding = (config: { readonly type: string } | undefined): boolean =>
  config !== undefined && (config.type === "enabled" || config.type === "adaptive")

/** True for a block the binding check applies to: `thinking` and `redacted_thinking`. */
export const isBoundBlock = (block: { readonly type: string }): boolean =>
  block.type === "thinking" || block.type === "redacted_thinking"

const before = (a: BlockPosition, b: BlockPosition): boolean =>
  a.message < b.message || (a.message === b.message && a.block < b.block)

/** The sorted union of two sorted position lists, without duplicates. */
export const mergePositions = (
  a: ReadonlyArray<BlockPosition>,
  b: ReadonlyArray<BlockPosition>
): ReadonlyArray<BlockPosition> => {
  if (b.length === 0) return a
  if (a.length === 0) return b
  const out: Array<BlockPosition> = []
  let i = 0
  let j = 0
  while (i < a.length || j < b.length) {
    const x = a[i]
    const y = b[j]
    if (y === undefined || (x !== undefined && before(x, y))) {
      out.push(x!)
      i++
    } else if (x === undefined || before(y, x)) {
      out.push(y)
      j++
    } else {
      out.push(x)
      i++
      j++
    }
  }
  return out
}

/**
 * The thinking blocks of `view` strictly after `from` (a block of message `from.message` at an index above
 * `from.block`, or any block of a later message): the blocks a rewrite at `from` invalidates, in order.
 * O(blocks after `from`).
 */
export const thinkingAfter = (view: ReadonlyArray<Message>, from: BlockPosition): ReadonlyArray<BlockPosition> => {
  const out: Array<BlockPosition> = []
  for (let m = Math.max(0, from.message); m < view.length; m++) {
    for (const p of thinkingIn(view[m]!, m, m === from.message ? from.block + 1 : 0)) out.push(p)
  }
  return out
}

/** The thinking blocks of `message` (at `index` of its view) from block `from` on. */
export const thinkingIn = (message: Message, index: number, from: number): ReadonlyArray<BlockPosition> => {
  if (message.role !== "assistant" || typeof message.content === "string") return []
  const out: Array<BlockPosition> = []
  const blocks = message.content
  for (let b = Math.max(0, from); b < blocks.length; b++) {
    if (isBoundBlock(blocks[b]!)) out.push({ message: index, block: b })
  }
  return out
}

/** Every thinking block of `view`: what a rewrite of its head (a summary) invalidates. */
export const allThinking = (view: ReadonlyArray<Message>): ReadonlyArray<BlockPosition> =>
  thinkingAfter(view, { message: 0, block: -1 })

/**
 * The first block of `stored` that differs from the block at the same index of `original` (a dropped block shifts
 * every later one; a renamed `tool_use` is a new object): where a rewrite of one message starts. `undefined` when
 * every block of `stored` is the original's.
 */
export const firstChangedBlock = (
  original: ReadonlyArray<unknown>,
  stored: ReadonlyArray<unknown>
): number | undefined => {
  for (let i = 0; i < stored.length; i++) if (stored[i] !== original[i]) return i
  return undefined
}

/** The estimated tokens of the blocks at `positions` (what the API stops counting once it drops them). */
export const tokensAt = (view: ReadonlyArray<Message>, positions: ReadonlyArray<BlockPosition>): number => {
  let total = 0
  for (const p of positions) {
    const block = blocksOf(view[p.message]!)[p.block]
    if (block !== undefined) total += estimateContentTokensUncached([block as ContentBlock])
  }
  return total
}

/**
 * The running sums of the estimated tokens of `unbound`'s blocks (`[0, t0, t0 + t1, …]`), kept per `unbound` array:
 * a state keeps its array until a rewrite merges new positions in, and the library never rewrites a thinking block,
 * so one state's requests sum them once. A kept sum is checked against the message object at the last position.
 */
const sumsOf = new WeakMap<ReadonlyArray<BlockPosition>, { readonly last: Message; readonly sums: Array<number> }>()
const droppedSums = (view: ReadonlyArray<Message>, unbound: ReadonlyArray<BlockPosition>): Array<number> => {
  const last = view[unbound[unbound.length - 1]!.message]
  const kept = sumsOf.get(unbound)
  if (kept !== undefined && kept.last === last) return kept.sums
  const sums: Array<number> = [0]
  for (const p of unbound) sums.push(sums[sums.length - 1]! + tokensAt(view, [p]))
  if (last !== undefined) sumsOf.set(unbound, { last, sums })
  return sums
}

/**
 * The estimated tokens of `view[0..m)` as the API counts them, for a message index `m`: `before(m)` (absent, the sum
 * of `estimateMessageTokens`) less the blocks of `unbound` (sorted) in those messages, which the API drops. `before`
 * itself when nothing is unbound. O(messages + unbound) to build when `before` is absent, O(unbound) otherwise, then
 * O(log unbound) per call.
 */
export const boundTokensBefore = (
  view: ReadonlyArray<Message>,
  unbound: ReadonlyArray<BlockPosition>,
  before?: ((message: number) => number) | undefined
): ((message: number) => number) | undefined => {
  if (unbound.length === 0) return before
  let base = before
  if (base === undefined) {
    const sums: Array<number> = [0]
    for (let i = 0; i < view.length; i++) sums.push(sums[i]! + estimateMessageTokens(view[i]!))
    base = (message) => sums[message]!
  }
  const dropped = droppedSums(view, unbound)
  const of = base
  return (message) => {
    // the number of unbound blocks in messages before `message`: the first index whose message is at or after it
    return of(message) - dropped[partitionPoint(unbound.length, (i) => unbound[i]!.message < message)]!
  }
}

/**
 * The estimated tokens of the thinking blocks after `from` that are not yet in `unbound` (sorted): what a rewrite at
 * `from` would newly make the API drop. O(log unbound) plus the blocks after `from`: the unbound positions before it
 * are skipped by a binary search, the rest walked beside the thinking blocks after it.
 */
export const newlyUnboundTokens = (
  view: ReadonlyArray<Message>,
  from: BlockPosition,
  unbound: ReadonlyArray<BlockPosition>
): number => {
  // the first unbound position strictly after `from`
  let lo = partitionPoint(unbound.length, (i) => !before(from, unbound[i]!))
  let total = 0
  for (const p of thinkingAfter(view, from)) {
    while (lo < unbound.length && before(unbound[lo]!, p)) lo++
    const known = lo < unbound.length && unbound[lo]!.message === p.message && unbound[lo]!.block === p.block
    if (!known) total += tokensAt(view, [p])
  }
  return total
}

/** A value with every `cache_control` key removed, as the binding reads it. */
const withoutMarkers = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(withoutMarkers)
  if (value === null || typeof value !== "object") return value
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(value)) if (k !== "cache_control") out[k] = withoutMarkers(v)
  return out
}

/** A message as the API reads it: string content is one text block. */
const normalized = (value: unknown): unknown => {
  const m = value as { readonly role?: unknown; readonly content?: unknown } | null
  return m !== null && typeof m === "object" && typeof m.role === "string" && typeof m.content === "string"
    ? { ...m, content: [{ type: "text", text: m.content }] }
    : value
}

const sameValue = (a: unknown, b: unknown): boolean =>
  a === b ||
  JSON.stringify(withoutMarkers(normalized(a))) === JSON.stringify(withoutMarkers(normalized(b)))

/**
 * The signed thinking blocks of `messages` whose prefix differs from the prefix the same block (same signature) has
 * in `reference`, the list it came from: the blocks the binding check fails. O(messages + blocks) plus
 * the comparison of the common prefix.
 */
export const prefixChanged = (
  messages: ReadonlyArray<Message>,
  reference: ReadonlyArray<Message>
): ReadonlyArray<BlockPosition> => {
  const origin = new Map<string, BlockPosition>()
  reference.forEach((message, m) =>
    blocksOf(message).forEach((block, b) => {
      const signature = (block as { readonly signature?: unknown }).signature
      if (block.type === "thinking" && typeof signature === "string") origin.set(signature, { message: m, block: b })
    })
  )
  if (origin.size === 0) return []
  // the common prefix: messages[0, same) equal reference[0, same)
  let same = 0
  while (same < messages.length && same < reference.length && sameValue(messages[same], reference[same])) same++
  const out: Array<BlockPosition> = []
  messages.forEach((message, m) =>
    blocksOf(message).forEach((block, b) => {
      const signature = (block as { readonly signature?: unknown }).signature
      if (block.type !== "thinking" || typeof signature !== "string") return
      const at = origin.get(signature)
      if (at === undefined) return
      const kept = at.message === m && at.block === b &&
        (m < same ||
          (m === same &&
            blocksOf(message).slice(0, b).every((x, k) => sameValue(x, blocksOf(reference[m]!)[k]))))
      if (!kept) out.push({ message: m, block: b })
    })
  )
  return out
}
