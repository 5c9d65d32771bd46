/**
 * Prefix sums of per-message estimates, carried forward from one call of `estimateTokens` to the next.
 *
 * A *lineage* belongs to one first message (the key of a `WeakMap`) and remembers the last list estimated that
 * starts with it: a private copy of its message references, the running sum of their estimates, and the positions of
 * the messages that open an API view. A list is compared with it by reference, element by element, from the start;
 * the first difference `d` decides what is recomputed:
 * - `d` reaches the list's end: the list is (a prefix of) the remembered one, read from the sums;
 * - `d` reaches the lineage's end: the list extends it, only its new messages are estimated and appended;
 * - otherwise (a message replaced, removed or inserted at `d`): positions from `d` on are rewritten, reusing the old
 *   estimate wherever the same message object is still at the same position.
 * The comparison is one reference check per shared message (no hashing, no estimate); everything else is in
 * proportion to what changed. Because the references are a private copy, a list mutated in place by its owner is
 * still compared correctly.
 *
 * A lineage keeps the messages of the last list estimated through it alive until a later call rewrites them or its
 * first message is collected.
 */
import type { Message } from "../Message.ts"

/** The remembered list of one first message, and its running sums. */
interface Lineage {
  /** Message references of the last list estimated, `refs[0]` being the key. */
  readonly refs: Array<Message>
  /** `sums[i]` is the sum of the estimates of `refs[0..i)`; `sums[0] = 0`. Grown by doubling. */
  sums: Float64Array
  /** Positions `i >= 1` of `refs` whose message opens an API view, ascending. */
  readonly opens: Array<number>
}

/** What the tally needs to know about one message: its estimate and whether it opens an API view. */
export interface MessageMeasure {
  /** The estimate of a message never seen (computed without touching any per-message cache). */
  readonly fresh: (message: Message) => number
  /**
   * The estimate of a message that may have been seen before: the per-message cache's, else computed (without adding
   * it to the cache: a message replaced into a list is usually a request's copy, never estimated again).
   */
  readonly cached: (message: Message) => number
  /** True when the API view starts at this message if it is the last such one (position >= 1). */
  readonly opensView: (message: Message) => boolean
}

const MIN_CAPACITY = 64

const ensureCapacity = (lineage: Lineage, length: number): void => {
  if (lineage.sums.length > length) return
  let capacity = Math.max(MIN_CAPACITY, lineage.sums.length)
  while (capacity <= length) capacity *= 2
  const sums = new Float64Array(capacity)
  sums.set(lineage.sums)
  lineage.sums = sums
}

/** The estimate of `refs[0..n)`'s API view: the sum from the last view-opening position below `n`. */
const viewTotal = (lineage: Lineage, n: number): number => {
  const opens = lineage.opens
  let k = opens.length - 1
  while (k >= 0 && opens[k]! >= n) k--
  const start = k < 0 ? 0 : opens[k]!
  return lineage.sums[n]! - lineage.sums[start]!
}

/** A lineage holding exactly `messages`, sized to fit them (it grows when a later list extends them). */
const build = (messages: ReadonlyArray<Message>, measure: MessageMeasure): Lineage => {
  const n = messages.length
  const sums = new Float64Array(n + 1)
  const opens: Array<number> = []
  let sum = 0
  for (let i = 0; i < n; i++) {
    const message = messages[i]!
    sum += measure.fresh(message)
    sums[i + 1] = sum
    if (i > 0 && measure.opensView(message)) opens.push(i)
  }
  return { refs: messages.slice(), sums, opens }
}

/** Appends `messages[from..)` to a lineage that holds exactly `messages[0..from)`. */
const append = (lineage: Lineage, messages: ReadonlyArray<Message>, from: number, measure: MessageMeasure): void => {
  const n = messages.length
  ensureCapacity(lineage, n)
  const { opens, refs, sums } = lineage
  let sum = sums[from]!
  for (let i = from; i < n; i++) {
    const message = messages[i]!
    sum += measure.fresh(message)
    sums[i + 1] = sum
    refs.push(message)
    if (i > 0 && measure.opensView(message)) opens.push(i)
  }
}

/** Rewrites positions `from..` of a lineage to `messages`, reusing the estimate of every message left in place. */
const rewrite = (lineage: Lineage, messages: ReadonlyArray<Message>, from: number, measure: MessageMeasure): void => {
  const n = messages.length
  ensureCapacity(lineage, n)
  const { opens, refs, sums } = lineage
  const oldLength = refs.length
  let firstOldOpen = opens.length
  while (firstOldOpen > 0 && opens[firstOldOpen - 1]! >= from) firstOldOpen--
  const oldOpens = opens.splice(firstOldOpen)
  let nextOldOpen = 0
  let oldSum = sums[from]!
  let sum = oldSum
  for (let i = from; i < n; i++) {
    const message = messages[i]!
    let opensView: boolean
    if (i < oldLength && message === refs[i]) {
      const oldNext = sums[i + 1]!
      sum += oldNext - oldSum
      oldSum = oldNext
      while (nextOldOpen < oldOpens.length && oldOpens[nextOldOpen]! < i) nextOldOpen++
      opensView = oldOpens[nextOldOpen] === i
    } else {
      if (i < oldLength) oldSum = sums[i + 1]!
      sum += measure.cached(message)
      opensView = measure.opensView(message)
      refs[i] = message
    }
    sums[i + 1] = sum
    if (opensView) opens.push(i)
  }
  refs.length = n
}

/**
 * A carried-forward estimator: `estimate(messages)` is the sum of `measure`'s estimates over the API view of
 * `messages` (from the last view-opening message at position >= 1, else from 0), always equal to recomputing it, at
 * the cost described in this module's doc.
 */
export const makeTally = (measure: MessageMeasure): (messages: ReadonlyArray<Message>) => number => {
  const lineages = new WeakMap<Message, Lineage>()
  return (messages) => {
    const n = messages.length
    if (n === 0) return 0
    const first = messages[0]!
    let lineage = lineages.get(first)
    if (lineage === undefined) {
      lineage = build(messages, measure)
      lineages.set(first, lineage)
      return viewTotal(lineage, n)
    }
    const refs = lineage.refs
    const shared = Math.min(n, refs.length)
    let d = 1 // refs[0] is the key: the same object as messages[0]
    while (d < shared && messages[d] === refs[d]) d++
    if (d === n) return viewTotal(lineage, n)
    if (d === refs.length) append(lineage, messages, d, measure)
    else rewrite(lineage, messages, d, measure)
    return viewTotal(lineage, n)
  }
}
