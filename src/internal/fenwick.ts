/**
 * A growable Fenwick (binary indexed) tree over non-negative numbers: point updates, prefix sums and, for 0/1 values,
 * the position of the k-th one, each in O(log n). Positions are appended at the end in amortized O(1): a new node's
 * sum is its value plus its children's, and only nodes up to `length` are ever kept (the rest stay 0), so an update
 * stops at `length` and growing is a copy. A `FenwickCursor` answers questions asked in order by walking on.
 *
 * @internal
 */

/** A Fenwick tree of `length` positions, each holding a number (0 when appended without a value). */
export class Fenwick {
  /** 1-based: node k, for k up to `length`, holds the sum of positions `[k - (k & -k), k)`; the rest hold 0. */
  #tree: Float64Array
  #values: Float64Array
  #length = 0

  constructor(capacity = 64) {
    this.#tree = new Float64Array(capacity + 1)
    this.#values = new Float64Array(capacity)
  }

  /** The number of positions. */
  get length(): number {
    return this.#length
  }

  /** The value at `i`. */
  get(i: number): number {
    return this.#values[i]!
  }

  /** Appends a position holding `value`: its node is its value plus its children (the nodes `k - 1`, `k - 2`, `k - 4`, …). */
  push(value: number): void {
    if (this.#length === this.#values.length) this.#grow()
    const k = ++this.#length
    this.#values[k - 1] = value
    const tree = this.#tree
    const low = k & -k
    let sum = value
    for (let j = 1; j < low; j <<= 1) sum += tree[k - j]!
    tree[k] = sum
  }

  /** Sets position `i` to `value`. */
  set(i: number, value: number): void {
    const delta = value - this.#values[i]!
    if (delta !== 0) this.add(i, delta)
  }

  /** Adds `delta` at position `i`. */
  add(i: number, delta: number): void {
    this.#values[i] = this.#values[i]! + delta
    const tree = this.#tree
    const length = this.#length
    for (let k = i + 1; k <= length; k += k & -k) tree[k] = tree[k]! + delta
  }

  /** The sum of positions `[0, n)`. */
  prefix(n: number): number {
    let sum = 0
    const tree = this.#tree
    for (let k = n; k > 0; k -= k & -k) sum += tree[k]!
    return sum
  }

  /**
   * The smallest position `p` with `prefix(p + 1) >= target` (values must be non-negative), or `length` when the
   * total is below `target`.
   */
  search(target: number): number {
    const tree = this.#tree
    const length = this.#length
    let pos = 0
    let rest = target
    let step = 1
    while (step * 2 <= length) step *= 2
    for (; step > 0; step >>= 1) {
      const next = pos + step
      if (next <= length && tree[next]! < rest) {
        pos = next
        rest -= tree[next]!
      }
    }
    return pos
  }

  #grow(): void {
    const capacity = this.#values.length * 2
    const values = new Float64Array(capacity)
    values.set(this.#values)
    const tree = new Float64Array(capacity + 1)
    tree.set(this.#tree)
    this.#values = values
    this.#tree = tree
  }
}

/** How far a `FenwickCursor` walks from its last answer before it asks the tree instead. */
const NEAR = 32

/**
 * Prefix sums, or searches, of a Fenwick tree asked mostly in increasing order (open results are visited in order):
 * each is answered by walking on from the last answer when that is at most `NEAR` positions away, else by the tree.
 * Any order gives the tree's answers; the tree must not change while a cursor is in use. Use one cursor per kind of
 * question.
 */
export class FenwickCursor {
  readonly #tree: Fenwick
  /** `#sum` is `prefix(#at)`. */
  #at = 0
  #sum = 0

  constructor(tree: Fenwick) {
    this.#tree = tree
  }

  /** `tree.prefix(n)`. */
  prefix(n: number): number {
    const tree = this.#tree
    if (n < this.#at || n - this.#at > NEAR) {
      this.#at = n
      this.#sum = tree.prefix(n)
      return this.#sum
    }
    while (this.#at < n) this.#sum += tree.get(this.#at++)
    return this.#sum
  }

  /** `tree.search(target)`. */
  search(target: number): number {
    const tree = this.#tree
    // the answer is at or after `#at` when `prefix(#at) < target`: walk, else ask the tree
    if (this.#sum < target) {
      const end = Math.min(tree.length, this.#at + NEAR)
      while (this.#at < end) {
        const next = this.#sum + tree.get(this.#at)
        if (next >= target) return this.#at
        this.#sum = next
        this.#at++
      }
      if (this.#at === tree.length) return this.#at
    }
    const p = tree.search(target)
    this.#at = p
    this.#sum = tree.prefix(p)
    return p
  }
}
