/**
 * The rewrite discipline between compactions, the pure part.
 *
 * A conversation stays *append-only* between compactions when it has a reason to: thinking is on (a `thinking`
 * config that is not `disabled`, or a reply that held a thinking block: from Fable 5.1 on a thinking block is valid
 * only while nothing before it changed), it sends on server-held threads (a rewrite restarts the thread and
 * uploads the whole view again), or the caller asked for it. Then every rewrite of what was already sent
 * waits for the next compaction: the offloads that come due are not applied in place, and the compaction applies
 * those its kept tail is due in the same rewrite. The reason, once decided, is kept in the state and in the log (each
 * reply's step metadata and each compaction's checkpoint), so a resumed conversation decides the same.
 *
 * At a compaction the kept turns' thinking is stale (the summary head changed its prefix): by default it is stripped
 * (`"strip"`, "a client compaction that keeps no stale thinking", as the docs allow); `"bind"` keeps it and lets the
 * request ask the API to drop it (`block_binding: drop_block`), which needs a `thinking` config on the requests.
 *
 * @internal
 */
import type { BlockPosition } from "../../Cache.ts"
import type { Message } from "../../Message.ts"
import { partitionPoint } from "../partitionPoint.ts"
import { placeSystemMessages } from "../repair.ts"
import { allThinking, carriesBinding } from "../thinkingBinding.ts"

/** Why a conversation stays append-only between compactions (see the module doc). */
export type AppendOnlyReason = "requested" | "thinking" | "threads"

const REASONS: ReadonlySet<string> = new Set(["requested", "thinking", "threads"])

/** True for a value that is an `AppendOnlyReason` (a log's step metadata is read with it). */
export const isAppendOnlyReason = (u: unknown): u is AppendOnlyReason => typeof u === "string" && REASONS.has(u)

/** What the decision reads of a conversation's options. */
export interface AppendOnlyOptions {
  /** `true`: append-only whatever else holds; `false`: never (rewrites in place); absent: whenever a reason holds. */
  readonly appendOnly?: boolean | undefined
  /** The thinking config the requests carry: any but `disabled` is a reason. */
  readonly thinking?: { readonly type: string } | undefined
  /** Threads on are a reason, unless `threadRestart` is `false` (a rewrite priced by the cache alone). */
  readonly threads?: boolean | undefined
  readonly threadRestart?: object | false | undefined
}

/**
 * The reason in force: none when the caller turned the discipline off; else the one already decided (`recorded`, the
 * state's), else the caller's request, a thinking config, or threads, in that order.
 */
export const appendOnlyReason = (
  options: AppendOnlyOptions,
  recorded: AppendOnlyReason | undefined
): AppendOnlyReason | undefined => {
  if (options.appendOnly === false) return undefined
  if (recorded !== undefined) return recorded
  if (options.appendOnly === true) return "requested"
  if (options.thinking !== undefined && options.thinking.type !== "disabled") return "thinking"
  if (options.threads === true && options.threadRestart !== false) return "threads"
  return undefined
}

/** True for a `thinking` or `redacted_thinking` block. */
const isThinking = (block: { readonly type: string }): boolean =>
  block.type === "thinking" || block.type === "redacted_thinking"

/** True when `message` is an assistant message holding a thinking block (an empty `thinking` field included). */
export const holdsThinking = (message: Message): boolean =>
  message.role === "assistant" && typeof message.content !== "string" && message.content.some(isThinking)

/** The reason after a reply is recorded: the one decided, else `"thinking"` when the reply holds thinking. */
export const reasonAfterReply = (
  recorded: AppendOnlyReason | undefined,
  reply: Message
): AppendOnlyReason | undefined => recorded ?? (holdsThinking(reply) ? "thinking" : undefined)

/** What a compaction does with the thinking of the turns it keeps (see the module doc). */
export type StaleThinking = "strip" | "bind"

/**
 * The handling in force: `"bind"` only when asked for and the requests carry a thinking config that can hold the
 * binding (`enabled` or `adaptive`); `"strip"` otherwise (without one a request cannot ask the API to drop anything, so
 * it would be a 400).
 */
export const staleThinkingOf = (
  option: StaleThinking | undefined,
  thinking: { readonly type: string } | undefined
): StaleThinking => option === "bind" && carriesBinding(thinking) ? "bind" : "strip"

/**
 * `view` with every thinking block of its assistant messages left out (see `withoutThinkingAt`), the same array when
 * it holds none.
 */
export const withoutThinking = <M extends Message>(view: ReadonlyArray<M>): ReadonlyArray<M> =>
  withoutThinkingAt(view, allThinking(view))

/**
 * `view` with the thinking blocks at `positions` (sorted, as `allThinking` and `ConversationState.unboundThinking`
 * list them) left out; the same array when there are none. Only those blocks go: every other block, empty ones
 * included, stays as it is. A message left with no block is left out (only a final assistant message may be empty),
 * and a system message that this leaves where the API refuses it (before a user turn, API-RULES 10) moves to the
 * nearest place it allows, as `repair` moves it. `owned`: `view` is the caller's own fresh array (a request's
 * messages), changed in place instead of copied.
 */
export const withoutThinkingAt = <M extends Message>(
  view: ReadonlyArray<M>,
  positions: ReadonlyArray<BlockPosition>,
  owned = false
): ReadonlyArray<M> => {
  if (positions.length === 0) return view
  // only the messages `positions` name are read, through the plan remembered for this list of positions (a request is
  // built per step from the same unbound thinking, over a view that can hold tens of thousands of messages): one copy
  // of the list when any of them changes
  const plan = planOf(positions)
  let out: Array<M> | undefined
  let emptied: Set<number> | undefined
  for (const group of plan) {
    const message = view[group.message]
    if (message === undefined || typeof message.content === "string" || message.content === undefined) continue
    if (message !== group.original) {
      group.original = message
      group.stripped = strip(message, positions, group.first, group.end)
    }
    const stripped = group.stripped
    if (stripped === message) continue
    out ??= owned ? view as Array<M> : [...view]
    if (stripped !== null) out[group.message] = stripped as M
    else (emptied ??= new Set()).add(group.message)
  }
  if (out === undefined) return view
  if (emptied === undefined) return out
  return withSystemsPlaced(out.filter((_, m) => !emptied.has(m)))
}

/**
 * The message `withoutThinkingAt(view, positions)` holds in place of `message`, the view's message at `index`: itself
 * when `positions` name none of its thinking, `null` when leaving that thinking out empties it (the list then closes
 * up). Found through the plan `withoutThinkingAt` remembers for `positions` (a binary search), so a caller that keeps
 * such a list up to date reads only the messages that changed.
 */
export const strippedMessage = <M extends Message>(
  positions: ReadonlyArray<BlockPosition>,
  index: number,
  message: M
): M | null => {
  if (positions.length === 0 || typeof message.content === "string" || message.content === undefined) return message
  const plan = planOf(positions)
  const group = plan[partitionPoint(plan.length, (i) => plan[i]!.message < index)]
  if (group === undefined || group.message !== index) return message
  if (message !== group.original) {
    group.original = message
    group.stripped = strip(message, positions, group.first, group.end)
  }
  return group.stripped as M | null
}

/**
 * One message's share of a list of positions (`positions[first..end)`), and the message last stripped by it: a view
 * that holds the same message object there gets the same stripped message.
 */
interface StripGroup {
  readonly message: number
  readonly first: number
  readonly end: number
  original: Message | undefined
  stripped: Message | null | undefined
}

/** The groups of each list of positions, remembered by the list (a state's unbound thinking is one list per change). */
const plans = new WeakMap<ReadonlyArray<BlockPosition>, ReadonlyArray<StripGroup>>()

/** The groups of `positions` (sorted by message, then block), one per message. */
const planOf = (positions: ReadonlyArray<BlockPosition>): ReadonlyArray<StripGroup> => {
  const known = plans.get(positions)
  if (known !== undefined) return known
  const groups: Array<StripGroup> = []
  for (let next = 0; next < positions.length;) {
    const first = next
    const message = positions[first]!.message
    while (next < positions.length && positions[next]!.message === message) next++
    groups.push({ message, first, end: next, original: undefined, stripped: undefined })
  }
  plans.set(positions, groups)
  return groups
}

/**
 * `message` without its thinking blocks at `positions[first..end)` (sorted by block): the same message when none is
 * thinking, `null` when nothing is left.
 */
const strip = (
  message: Message,
  positions: ReadonlyArray<BlockPosition>,
  first: number,
  end: number
): Message | null => {
  const blocks = message.content as ReadonlyArray<{ readonly type: string }>
  let kept: Array<{ readonly type: string }> | undefined
  for (let i = 0, p = first; i < blocks.length; i++) {
    while (p < end && positions[p]!.block < i) p++
    const drop = p < end && positions[p]!.block === i && isThinking(blocks[i]!)
    if (drop) kept ??= blocks.slice(0, i)
    else if (kept !== undefined) kept.push(blocks[i]!)
  }
  if (kept === undefined) return message
  return kept.length === 0 ? null : { ...message, content: kept } as Message
}

/** `list` with its system messages at places the API allows: each stays where it is when that place is allowed. */
const withSystemsPlaced = <M extends Message>(list: ReadonlyArray<M>): Array<M> => {
  if (!list.some((m) => m.role === "system")) return [...list]
  const turns: Array<M> = []
  const systems: Array<{ readonly wanted: number; readonly message: M }> = []
  for (const message of list) {
    if (message.role === "system") systems.push({ wanted: turns.length, message })
    else turns.push(message)
  }
  return placeSystemMessages(turns, systems).messages
}
