/**
 * Where to cut: the index that splits a conversation into a head (to summarize) and a tail (kept raw).
 *
 * Every cut here is tool-safe: no client tool pair (a `tool_use` and the `tool_result` that answers it, as the API
 * pairs them on the merged view, see `toolPairs`) lies across it, so `messages.slice(cut)` never holds a result whose
 * call was cut off. Cuts only ever move earlier to stay safe: the library summarizes less rather than break a pair.
 * Token counts are estimates (`estimateMessageTokens`); they only place the cut.
 *
 * All functions are O(messages + blocks).
 *
 * @since 0.1.0
 */
import * as Option from "effect/Option"
import type { Message } from "./Message.ts"
import type { CompactionPolicy } from "./Policy.ts"
import { estimateMessageTokens } from "./Tokens.ts"
import { turnStarts } from "./Turns.ts"
import { forEachToolPair } from "./Validate.ts"

// ============================================================================
// Safe cut
// ============================================================================

/**
 * `safe[c]` is true when no tool pair lies across cut `c` (for `c` in `0..n`): no pair has
 * `useIndex < c <= resultIndex`. A difference array over the pairs' spans makes this O(n).
 */
const safeCuts = (messages: ReadonlyArray<Message>): Uint8Array => {
  const n = messages.length
  const diff = new Int32Array(n + 2)
  forEachToolPair(messages, (useIndex, resultIndex) => {
    diff[useIndex + 1]!++
    diff[resultIndex + 1]!--
  })
  const safe = new Uint8Array(n + 1)
  let open = 0
  for (let c = 0; c <= n; c++) {
    open += diff[c]!
    safe[c] = open === 0 ? 1 : 0
  }
  return safe
}

const clampCut = (n: number, requested: number): number =>
  Number.isNaN(requested) ? 0 : Math.max(0, Math.min(n, Math.floor(requested)))

const greatestSafe = (safe: Uint8Array, requested: number): number => {
  let c = requested
  while (c > 0 && safe[c] === 0) c--
  return c
}

/**
 * The greatest index `cut <= requested` at which `messages.slice(cut)` has no orphaned tool result that
 * `messages` itself does not have: it moves the cut earlier only as far as the pairing needs, and returns 0 when no
 * boundary pairs everything. `requested` is clamped to `0..messages.length`; `0` and `messages.length` are always
 * safe. Orphans already present in the input are left to `repair`.
 * @category cutting
 */
export const safeCut = (messages: ReadonlyArray<Message>, requested: number): number => {
  const n = messages.length
  const at = clampCut(n, requested)
  if (at === 0 || at === n) return at
  return greatestSafe(safeCuts(messages), at)
}

// ============================================================================
// Turn plan
// ============================================================================

/** A head to summarize and a tail to keep raw; `head.concat(tail)` is the input. @category models */
export interface Split<M extends Message> {
  readonly head: Array<M>
  readonly tail: Array<M>
}

/**
 * Cuts at a user-turn boundary so that the last `keepRecentTurns` turns (see `turnStarts`) stay raw and no tool pair
 * is divided: the tail holds exactly `keepRecentTurns` turns. Returns `Option.none()` when the conversation has no
 * more than `keepRecentTurns` turns, or when the tool-safe cut is 0 (nothing would be summarized).
 *
 * A turn start is normally safe. It is not when a human message also carries the results of the call right before
 * it; the cut then moves back to that call, which only adds assistant and tool-result messages (no turn) to the
 * tail. Only a list the API rejects anyway (a tool result after human text in one merged user turn, with a second
 * turn start in between) can make the tail hold one turn more.
 * @category cutting
 */
export const plan = <M extends Message>(
  messages: ReadonlyArray<M>,
  keepRecentTurns: number
): Option.Option<Split<M>> => {
  const starts = turnStarts(messages)
  const keep = Math.max(0, Math.floor(keepRecentTurns))
  if (starts.length <= keep) return Option.none()
  const requested = keep === 0 ? messages.length : starts[starts.length - keep]!
  const cut = safeCut(messages, requested)
  if (cut === 0) return Option.none()
  return Option.some({ head: messages.slice(0, cut), tail: messages.slice(cut) })
}

// ============================================================================
// Policy cut
// ============================================================================

/**
 * Where `planForPolicy` cuts, and why.
 *
 * - `cut`: the first kept index. **`cut === 0` means there is nothing to compact**: keep everything.
 * - `turnStart`: the start of the turn the cut lies in (the greatest turn start `<= cut`), or `cut` when no turn
 *   starts at or before it.
 * - `splitTurn`: `turnStart < cut`. The cut lies inside a turn, so `messages.slice(turnStart, cut)` is that turn's
 *   prefix, which the summarizer should summarize with the head's turns.
 * - `keptTurns`: whole turns in the tail (turn starts at or after `cut`).
 * - `keptTokens`: estimated tokens of the tail.
 * - `oversizedTurn`: the tool-safe tail that the token budget and the turn floor asked for was larger than
 *   `maxTailTokens`, so the cut moved later, to an assistant message inside the kept turns (see `planForPolicy`).
 *   `keptTurns` may then be below the floor.
 * - `overBudget`: even after that the tail exceeds `maxTailTokens`, because the newest step alone does not fit. The
 *   caller must shrink the tail by other means (evicting tool output) or give up.
 * @category models
 */
export interface CutPlan {
  readonly cut: number
  readonly turnStart: number
  readonly splitTurn: boolean
  readonly keptTurns: number
  readonly keptTokens: number
  readonly oversizedTurn: boolean
  readonly overBudget: boolean
}

/** The policy fields the cut reads. @category models */
export type CutPolicy = Pick<CompactionPolicy, "keepRecentTokens" | "keepRecentTurns" | "maxTailTokens">

/**
 * Chooses the cut for a policy:
 *
 * 1. keep the newest messages whose estimated tokens add up to at most `keepRecentTokens`,
 * 2. but never fewer than the last `keepRecentTurns` whole turns (all of them when there are fewer),
 * 3. made tool-safe with `safeCut` (moved earlier, never later).
 * 4. **Oversized turn.** When that tail is larger than `maxTailTokens`, the cut moves to the earliest assistant
 *    message after it at which the tail fits `maxTailTokens` and no tool pair is divided. It lies inside a kept turn
 *    (normally the oldest), so `splitTurn` and `oversizedTurn` are set.
 * 5. **Nothing fits.** When no such assistant message exists, the cut goes to the newest tool-safe assistant message
 *    (the newest step: the latest reply and the results that answer it stay raw, because the agent loop needs them
 *    to continue), or stays put when there is none after it; `overBudget` is set.
 *
 * The tail is never empty for a non-empty list whose last turn the floor keeps. O(messages + blocks).
 * @category cutting
 */
export const planForPolicy = (messages: ReadonlyArray<Message>, policy: CutPolicy): CutPlan => {
  const n = messages.length
  const suffix = new Float64Array(n + 1)
  for (let i = n - 1; i >= 0; i--) suffix[i] = suffix[i + 1]! + estimateMessageTokens(messages[i]!)
  const starts = turnStarts(messages)
  const floor = Math.max(1, Math.floor(policy.keepRecentTurns))
  const floorCut = starts.length > floor ? starts[starts.length - floor]! : 0
  let tokenCut = n
  while (tokenCut > 0 && suffix[tokenCut - 1]! <= policy.keepRecentTokens) tokenCut--
  const safe = safeCuts(messages)
  let cut = greatestSafe(safe, Math.min(tokenCut, floorCut))
  let oversizedTurn = false
  let overBudget = false
  if (suffix[cut]! > policy.maxTailTokens) {
    oversizedTurn = true
    let fit = -1
    let newest = -1
    for (let c = cut + 1; c < n; c++) {
      if (messages[c]!.role !== "assistant" || safe[c] === 0) continue
      if (fit < 0 && suffix[c]! <= policy.maxTailTokens) fit = c
      newest = c
    }
    if (fit >= 0) cut = fit
    else {
      overBudget = true
      if (newest >= 0) cut = newest
    }
  }
  let turnStart = cut
  let keptTurns = 0
  for (const start of starts) {
    if (start <= cut) turnStart = start
    if (start >= cut) keptTurns++
  }
  return {
    cut,
    turnStart,
    splitTurn: turnStart < cut,
    keptTurns,
    keptTokens: suffix[cut]!,
    oversizedTurn,
    overBudget
  }
}

/**
 * The cut of `planForPolicy`: keep the newest messages up to `policy.keepRecentTokens`, never fewer than
 * `policy.keepRecentTurns` whole turns unless the oversized-turn rule applies, tool-safe. 0 means nothing to compact.
 * @category cutting
 */
export const cutForPolicy = (messages: ReadonlyArray<Message>, policy: CutPolicy): number =>
  planForPolicy(messages, policy).cut
