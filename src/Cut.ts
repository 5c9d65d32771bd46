/**
 * Concept: the cut, the index that splits a conversation into a summarized head and a kept tail.
 *
 * Where to cut: the index that splits a conversation into a head (to summarize) and a tail (kept raw).
 *
 * Every cut here is tool-safe: no client tool pair (a `tool_use` and the `tool_result` that answers it, as the API
 * pairs them on the merged view, as `Validate.validate` does) lies across it, and no server tool pair (a `server_tool_use` or
 * `mcp_tool_use` and its result, split over two assistant messages by a `pause_turn`), so `messages.slice(cut)` never
 * holds a result whose call was cut off. Cuts only ever move earlier to stay safe: the library summarizes less rather than break a pair.
 * Token counts are estimates (`estimateMessageTokens`); they only place the cut.
 *
 * Costs. Tool pairs only ever join an assistant turn (a maximal run of assistant messages) to the user turn right
 * after it, so whether a cut is safe depends only on the messages around it: `safeCut` reads the assistant turn before
 * the request and the turns up to the next assistant turn, and `planForPolicy` walks back from the end only over the
 * tail it keeps (plus the assistant turn before the cut, the start of the turn the cut lies in, and the first human
 * message of the list), estimating tokens only for the messages it walks over. Pathological inputs (no assistant
 * turn, no human message, one turn spanning the whole list) degrade to O(messages + blocks), never worse.
 *
 * @since 0.1.0
 */
import * as Option from "effect/Option"
import type { Message } from "./Message.ts"
import type { CompactionPolicy } from "./Policy.ts"
import { estimateMessageTokens } from "./Tokens.ts"
import { isHumanMessage } from "./Turns.ts"
import { opensApiView } from "./internal/apiView.ts"
import { isServerToolCall, isServerToolResult } from "./internal/blocks.ts"
import { isTurnStart } from "./internal/turns.ts"
import { forEachToolPair } from "./internal/validate.ts"

// ============================================================================
// Safe cut
// ============================================================================

/** True when an assistant turn (a maximal run of assistant messages, as the API merges them) starts at `i`. */
const startsAssistantTurn = (messages: ReadonlyArray<Message>, i: number): boolean =>
  messages[i]!.role === "assistant" && (i === 0 || messages[i - 1]!.role !== "assistant")

/** Safe flags for the cuts `from..from + safe.length - 1`. */
interface SafeWindow {
  readonly from: number
  readonly safe: Uint8Array
}

/**
 * The safe cuts around a range: `safe[c - from]` is true when no tool pair lies across cut `c` (no pair has
 * `useIndex < c <= resultIndex`), for every `c` in `from..to`, where `from` is the greatest assistant-turn start
 * `<= lo` (or 0) and `to` the least assistant-turn start `> hi` (or `messages.length`).
 *
 * Exact because the pairing scan (`Validate`'s) restarts at every assistant turn: a pair joins an assistant turn
 * to the user turn right after it. So the pairs of `messages.slice(from, to)` are exactly the list's pairs whose call
 * lies in `from..to - 1`, every pair with a call before `from` is answered before `from`, and a cut at `from` is always
 * safe. A difference array over the pairs' spans makes this O(to - from + blocks read).
 */
const safeWindow = (messages: ReadonlyArray<Message>, lo: number, hi: number): SafeWindow => {
  const n = messages.length
  let from = Math.max(0, Math.min(lo, n - 1))
  while (from > 0 && !startsAssistantTurn(messages, from)) from--
  let to = Math.min(hi + 1, n)
  while (to < n && !startsAssistantTurn(messages, to)) to++
  const size = to - from
  const diff = new Int32Array(size + 2)
  forEachToolPair(messages.slice(from, to), (useIndex, resultIndex) => {
    diff[useIndex + 1]!++
    diff[resultIndex + 1]!--
  })
  // a server tool call (`server_tool_use`, `mcp_tool_use`) and its result live in one assistant turn, but a
  // `pause_turn` split puts them in two assistant messages: no cut goes between them (API-RULES 30)
  let calls: Map<string, number> | undefined
  for (let k = from; k < to; k++) {
    const message = messages[k]!
    if (message.role !== "assistant" || typeof message.content === "string") continue
    for (const block of message.content) {
      if (isServerToolCall(block)) (calls ??= new Map()).set(block.id, k - from)
      else if (calls !== undefined && isServerToolResult(block)) {
        const use = calls.get(block.tool_use_id)
        if (use !== undefined && use < k - from) {
          diff[use + 1]!++
          diff[k - from + 1]!--
        }
      }
    }
  }
  const safe = new Uint8Array(size + 1)
  let open = 0
  for (let c = 0; c <= size; c++) {
    open += diff[c]!
    safe[c] = open === 0 ? 1 : 0
  }
  return { from, safe }
}

const isSafe = (window: SafeWindow, c: number): boolean => window.safe[c - window.from] === 1

const clampCut = (n: number, requested: number): number =>
  Number.isNaN(requested) ? 0 : Math.max(0, Math.min(n, Math.floor(requested)))

/**
 * The API view's start (where `ApiView.apiView` begins), found lazily from the end: `inView(i)` reads only the messages from
 * the end down to `i` that it has not read yet, so a walk back from the end costs no more than it did. `start()` is
 * the view's start itself (it reads back to the first compaction block with content, or to the first message).
 */
interface ViewBound {
  readonly inView: (i: number) => boolean
  readonly isStart: (i: number) => boolean
  readonly start: () => number
}

const viewBound = (messages: ReadonlyArray<Message>): ViewBound => {
  let checked = messages.length // no compaction block with content in messages[checked..] unless `found` says so
  let found = -1
  const inView = (i: number): boolean => {
    while (found < 0 && checked > i && checked > 0) {
      checked--
      if (checked > 0 && opensApiView(messages[checked]!)) found = checked
    }
    return i >= (found < 0 ? 0 : found)
  }
  return {
    inView,
    isStart: (i) => inView(i) && i === (found < 0 ? 0 : found),
    start: () => {
      inView(0)
      return found < 0 ? 0 : found
    }
  }
}

/** The greatest safe cut `<= requested`, for a `requested` inside the window (its `from` is always safe). */
const greatestSafe = (window: SafeWindow, requested: number): number => {
  let c = requested
  while (c > 0 && !isSafe(window, c)) c--
  return c
}

/**
 * The greatest index `cut <= requested` at which `messages.slice(cut)` has no orphaned tool result that
 * `messages` itself does not have: it moves the cut earlier only as far as the pairing needs, and returns 0 when no
 * boundary pairs everything. `requested` is clamped to `0..messages.length`; `0` and `messages.length` are always
 * safe. Orphans already present in the input are left to `repair`.
 *
 * A cut never lands before the API view's start (where `ApiView.apiView` begins, the message holding the last compaction block
 * with content): anything put before that block is dropped by the API. A request before it gives 0; otherwise the
 * cut is at least the view's start, which is always safe.
 *
 * `viewStart` is the API view's start (where `ApiView.apiView(messages)` begins) when the caller has it (a conversation
 * carries it; a caller cutting one list many times finds it once). With it, `safeCut` reads only the assistant turn at
 * or before `requested` and the messages up to the next assistant turn: O(1) turns on a well-formed list, whatever the
 * length of the tail. Without it, it also finds the view's start, reading whether each message after `requested` holds
 * a compaction block (a scan of its block types): linear in the messages after the cut.
 * @category cutting
 */
export const safeCut = (messages: ReadonlyArray<Message>, requested: number, viewStart?: number): number =>
  safeCutIn(messages, requested, viewStart === undefined ? viewBound(messages) : knownViewBound(viewStart))

/** The bound of an API view whose start is known: nothing is read. */
const knownViewBound = (start: number): ViewBound => ({
  inView: (i) => i >= start,
  isStart: (i) => i === start,
  start: () => start
})

/** `safeCut` with the API view's bound of `messages` already at hand (what it has read is not read again). */
const safeCutIn = (messages: ReadonlyArray<Message>, requested: number, view: ViewBound): number => {
  const n = messages.length
  const at = clampCut(n, requested)
  if (!view.inView(at)) return 0
  if (at === 0 || at === n || view.isStart(at)) return at
  const cut = greatestSafe(safeWindow(messages, at, at), at)
  return view.inView(cut) ? cut : view.start()
}

// ============================================================================
// Turn plan
// ============================================================================

/** True when a turn of the API view starts at `i` (the view's first message has no predecessor). */
const isViewTurnStart = (messages: ReadonlyArray<Message>, i: number, view: ViewBound): boolean =>
  view.isStart(i) ? isHumanMessage(messages[i]!) : isTurnStart(messages, i)

/**
 * The `k`-th turn start from the end in the API view, or -1 when there are fewer than `k`. Walks back only as far as
 * that start.
 */
const turnStartFromEnd = (messages: ReadonlyArray<Message>, k: number, view: ViewBound): number => {
  let count = 0
  for (let i = messages.length - 1; i >= 0 && view.inView(i) && count < k; i--) {
    if (isViewTurnStart(messages, i, view) && ++count === k) return i
  }
  return -1
}

/**
 * True when a turn of the API view starts before the turn start `start`. Any human message of the view before it
 * does: `start - 1` is not human, so that message's run of human messages ends earlier and begins a turn. Walks back
 * to the nearest human message (or the view's start).
 */
const turnStartsBefore = (messages: ReadonlyArray<Message>, start: number, view: ViewBound): boolean => {
  for (let i = start - 1; i >= 0 && view.inView(i); i--) if (isHumanMessage(messages[i]!)) return true
  return false
}

/** A head to summarize and a tail to keep raw; `head.concat(tail)` is the input. @category models */
export interface Split<M extends Message> {
  /** The older messages, to summarize. */
  readonly head: Array<M>
  /** The recent messages, kept raw. */
  readonly tail: Array<M>
}

/**
 * Cuts at a user-turn boundary so that the last `keepRecentTurns` turns (see `turnStarts`) stay raw and no tool pair
 * is divided: the tail holds exactly `keepRecentTurns` turns. Returns `Option.none()` when the API view has no
 * more than `keepRecentTurns` turns, or when the tool-safe cut is at or before the API view's start (nothing the API
 * still reads would be summarized).
 *
 * A turn start is normally safe. It is not when a human message also carries the results of the call right before
 * it; the cut then moves back to that call, which only adds assistant and tool-result messages (no turn) to the
 * tail. Only a list the API rejects anyway (a tool result after human text in one merged user turn, with a second
 * turn start in between) can make the tail hold one turn more.
 *
 * Finds the turn walking back from the end and checks safety around it only; the returned slices copy the list, so
 * the call is O(messages) for the copies and O(kept turns + blocks) for everything else.
 * @category cutting
 */
export const splitKeepingTurns = <M extends Message>(
  messages: ReadonlyArray<M>,
  keepRecentTurns: number
): Option.Option<Split<M>> => {
  const keep = Math.max(0, Math.floor(keepRecentTurns))
  const view = viewBound(messages)
  const requested = keep === 0 ? messages.length : turnStartFromEnd(messages, keep, view)
  if (requested < 0 || !turnStartsBefore(messages, requested, view)) return Option.none()
  const cut = safeCutIn(messages, requested, view)
  if (cut === 0 || view.isStart(cut)) return Option.none()
  return Option.some({ head: messages.slice(0, cut), tail: messages.slice(cut) })
}

// ============================================================================
// Policy cut
// ============================================================================

/** Where `planForPolicy` cuts, and why. @category models */
export interface CutPlan {
  /**
   * The first kept index. **`cut === 0` means there is nothing to compact**: keep everything. A cut is never at or
   * before the API view's start (where `ApiView.apiView` begins) unless it is 0: what lies before the last compaction
   * block with content is already dropped by the API, and a summary placed there would be too.
   */
  readonly cut: number
  /** The start of the turn the cut lies in (the greatest turn start `<= cut`), or `cut` when none starts before. */
  readonly turnStart: number
  /**
   * `turnStart < cut`. The cut lies inside a turn, so `messages.slice(turnStart, cut)` is that turn's prefix, which the
   * summarizer should summarize with the head's turns.
   */
  readonly splitTurn: boolean
  /** Whole turns in the tail's API view (turn starts at or after `cut`). */
  readonly keptTurns: number
  /** Estimated tokens of the tail's API view (what the API would process of it). */
  readonly keptTokens: number
  /**
   * The tool-safe tail that the token budget and the turn floor asked for was larger than `maxTailTokens`, so the
   * floor yielded and the cut moved later, to a step start inside the kept turns (see `planForPolicy`). `keptTurns`
   * may then be below the floor.
   */
  readonly oversizedTurn: boolean
  /**
   * Even after that the tail exceeds `maxTailTokens`, because the newest step alone does not fit. The caller must
   * shrink the tail by other means (evicting tool output) or give up.
   */
  readonly overBudget: boolean
}

/** The policy fields the cut reads. @category models */
export type CutPolicy = Pick<CompactionPolicy, "keepRecentTokens" | "keepRecentTurns" | "maxTailTokens">

/**
 * Estimated tokens of `messages.slice(i)`, estimating each message only when the walk back first reaches it. The sums
 * run from the end in the order a full pass would add them, so they are the same numbers.
 */
const tailTokens = (messages: ReadonlyArray<Message>): (i: number) => number => {
  const n = messages.length
  const sums = [0] // sums[k]: the last k messages
  return (i) => {
    for (let k = sums.length; k <= n - i; k++) sums.push(sums[k - 1]! + estimateMessageTokens(messages[n - k]!))
    return sums[n - i]!
  }
}

/**
 * True when a step starts at `c`: an assistant turn (a maximal run of assistant messages: a `pause_turn` split stays
 * with its continuation) begins there, and no tool pair lies across it. A step is that assistant turn with its
 * thinking, its parallel calls and the results that answer them, so a cut here never lands inside one.
 */
const startsStep = (messages: ReadonlyArray<Message>, window: SafeWindow, c: number): boolean =>
  startsAssistantTurn(messages, c) && isSafe(window, c)

/** The greatest step start in `after + 1..atMost` (`atMost` clamped to the list), or `undefined`. */
const latestStep = (
  messages: ReadonlyArray<Message>,
  window: SafeWindow,
  after: number,
  atMost: number
): number | undefined => {
  for (let c = Math.min(atMost, messages.length - 1); c > after; c--) if (startsStep(messages, window, c)) return c
  return undefined
}

/** The least step start after `after` (at or after the window's start), or `undefined`. */
const earliestStep = (messages: ReadonlyArray<Message>, window: SafeWindow, after: number): number | undefined => {
  for (let c = after + 1; c < messages.length; c++) if (startsStep(messages, window, c)) return c
  return undefined
}

/**
 * Chooses the cut for a policy:
 *
 * 1. keep the newest messages whose estimated tokens add up to at most `keepRecentTokens`,
 * 2. but never fewer than the last `keepRecentTurns` whole turns (all of them when there are fewer),
 * 3. made tool-safe with `safeCut` (moved earlier, never later).
 * 4. **The floor yields.** When that tail is larger than `maxTailTokens` (whose default is half the trigger,
 *    `CompactionPolicy.maxTailTokens`: keeping whole turns would leave the context over the trigger, as in one long
 *    agent turn of hundreds of tool steps), the cut moves to the latest step start (an assistant turn with nothing
 *    of a tool pair across it) whose tail holds at least `keepRecentTokens`, as pi and Claude Code cut inside a
 *    turn. A step's thinking, its parallel calls and their results, its server tool pairs and its `pause_turn`
 *    continuation stay whole. `oversizedTurn` is set (and `splitTurn`, unless the step starts a turn). When that
 *    tail is still over `maxTailTokens` (the step holding the `keepRecentTokens` point is large) or there is no such
 *    step, the cut goes to the next step start after that point, which keeps less.
 * 5. **Nothing fits.** When even that tail exceeds `maxTailTokens` (the newest step alone is larger), `overBudget` is
 *    set: the latest reply and the results that answer it stay raw, because the agent loop needs them to continue.
 *
 * The tail is never empty for a non-empty list whose last turn the floor keeps.
 *
 * Cost: it walks back from the end, so it reads and estimates only the kept tail (and the turns the floor keeps, when
 * they reach further), plus a few messages around the cut: the assistant turn before it, the start of the turn it lies
 * in, and the list's first human message. That is O(tail + blocks in it), independent of the conversation's length,
 * with tokens estimated only for the walked messages. Lists without an assistant turn or a human message before the
 * cut degrade to O(messages + blocks).
 * @category cutting
 */
export const planForPolicy = (messages: ReadonlyArray<Message>, policy: CutPolicy): CutPlan => {
  const n = messages.length
  const view = viewBound(messages)
  const tokens = tailTokens(messages)
  const floor = Math.max(1, Math.floor(policy.keepRecentTurns))
  const floorStart = turnStartFromEnd(messages, floor, view)
  const floorCut = floorStart > 0 && !view.isStart(floorStart) && turnStartsBefore(messages, floorStart, view)
    ? floorStart
    : view.start()
  let tokenCut = n
  while (tokenCut > 0 && view.inView(tokenCut - 1) && tokens(tokenCut - 1) <= policy.keepRecentTokens) tokenCut--
  const requested = Math.min(tokenCut, floorCut)
  const window = safeWindow(messages, requested, n)
  let cut = greatestSafe(window, requested)
  if (!view.inView(cut)) cut = view.start()
  let oversizedTurn = false
  if (tokens(cut) > policy.maxTailTokens) {
    // the turn floor yields: the latest step whose tail keeps `keepRecentTokens`; when that step alone is over
    // `maxTailTokens`, the next step after it (which keeps less and fits)
    oversizedTurn = true
    const atMost = tokens(tokenCut) >= policy.keepRecentTokens ? tokenCut : tokenCut - 1
    const kept = latestStep(messages, window, cut, atMost)
    const step = kept !== undefined && tokens(kept) <= policy.maxTailTokens
      ? kept
      : earliestStep(messages, window, Math.max(atMost, cut)) ?? kept
    if (step !== undefined) cut = step
  }
  const overBudget = tokens(cut) > policy.maxTailTokens
  let keptTurns = 0
  for (let i = cut; i < n; i++) if (isViewTurnStart(messages, i, view)) keptTurns++
  let turnStart = cut
  for (let i = Math.min(cut, n - 1); i >= 0 && view.inView(i); i--) {
    if (isViewTurnStart(messages, i, view)) {
      turnStart = i
      break
    }
  }
  if (view.isStart(cut)) {
    return { cut: 0, turnStart: 0, splitTurn: false, keptTurns, keptTokens: tokens(cut), oversizedTurn, overBudget }
  }
  return {
    cut,
    turnStart,
    splitTurn: turnStart < cut,
    keptTurns,
    keptTokens: tokens(cut),
    oversizedTurn,
    overBudget
  }
}
