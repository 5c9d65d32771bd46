/**
 * A growable Fenwick (binary indexed) tree over non-negative numbers: point updates, prefix sums and, for 0/1 values,
 * the position of the k-th one, each in O(log n). Positions are appended at the end (amortized O(1)).
 *
 * @internal
 */

/** A Fenwick tree of `length` positions, each holding a number (0 when appended without a value). */
export class Fenwick {
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

  /** Appends a position holding `value`. */
  push(value: number): void {
    if (this.#length === this.#values.length) this.#grow()
    this.#length++
    this.add(this.#length - 1, value)
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
    for (let k = i + 1; k < tree.length; k += k & -k) tree[k] = tree[k]! + delta
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
    let pos = 0
    let rest = target
    let step = 1
    while (step * 2 < tree.length) step *= 2
    for (; step > 0; step >>= 1) {
      const next = pos + step
      if (next < tree.length && tree[next]! < rest) {
        pos = next
        rest -= tree[next]!
      }
    }
    return Math.min(pos, this.#length)
  }

  #grow(): void {
    const capacity = this.#values.length * 2
    const values = new Float64Array(capacity)
    values.set(this.#values)
    // the linear build: every node, in order, adds its finished sum to its parent (past `length` too, whatever the
    // capacity: a node there still holds the sums of its children below `length`)
    const tree = new Float64Array(capacity + 1)
    for (let k = 1; k <= capacity; k++) {
      tree[k] = tree[k]! + values[k - 1]!
      const parent = k + (k & -k)
      if (parent <= capacity) tree[parent] = tree[parent]! + tree[k]!
    }
    this.#values = values
    this.#tree = tree
  }
}
