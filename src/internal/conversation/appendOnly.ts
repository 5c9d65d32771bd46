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
 * nearest place it allows, as `repair` moves it.
 */
export const withoutThinkingAt = <M extends Message>(
  view: ReadonlyArray<M>,
  positions: ReadonlyArray<BlockPosition>
): ReadonlyArray<M> => {
  if (positions.length === 0) return view
  // only the messages `positions` name are read: one copy of the list when any of them changes (a request is built
  // per step, and the view can hold tens of thousands of messages), each message's kept blocks remembered
  let out: Array<M> | undefined
  let emptied: Set<number> | undefined
  for (let next = 0; next < positions.length;) {
    const first = next
    const m = positions[first]!.message
    let key = ""
    while (next < positions.length && positions[next]!.message === m) key += `${positions[next++]!.block},`
    const message = view[m]
    if (message === undefined || typeof message.content === "string" || message.content === undefined) continue
    const known = strippedOf.get(message)
    const stripped = known !== undefined && known.key === key ? known.stripped : strip(message, positions, first, next)
    if (known === undefined || known.key !== key) strippedOf.set(message, { key, stripped })
    if (stripped === message) continue
    out ??= [...view]
    if (stripped !== null) out[m] = stripped as M
    else (emptied ??= new Set()).add(m)
  }
  if (out === undefined) return view
  if (emptied === undefined) return out
  return withSystemsPlaced(out.filter((_, m) => !emptied.has(m)))
}

/**
 * A message whose thinking blocks at `positions[first..end)` (one message's, by block) were left out, remembered by the
 * message (and which blocks, as a key): each request of a view with the same unbound thinking strips the same messages.
 */
const strippedOf = new WeakMap<object, { readonly key: string; readonly stripped: Message | null }>()

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
