/**
 * The Fenwick tree the eviction index ranks results with, against a plain array: prefix sums and k-th-one searches
 * after random appends and updates, from every starting capacity (the index sizes it by the session, so a capacity
 * is rarely a power of two and it grows from there), over 0/1 values and over token counts. An append computes its
 * node from its children and an update stops at the length, so appends after updates are what this exercises. A
 * cursor (which walks on from its last answer) must give the tree's answers whatever the order of the questions.
 */
import { assert, describe, it } from "@effect/vitest"
import { Fenwick, FenwickCursor } from "../src/internal/fenwick.ts"
import { prng } from "./fixtures/Conversation.ts"

describe("Fenwick", () => {
  it("answers get, prefix and search like a plain array, whatever the capacity it starts and grows from", () => {
    const random = prng(4242)
    let checks = 0
    for (let run = 0; run < 2_000; run++) {
      const capacity = 1 + Math.floor(random() * 100)
      const tree = new Fenwick(capacity)
      const plain: Array<number> = []
      const operations = 1 + Math.floor(random() * 300)
      // 0/1 values (the counted results) or token counts (the messages' estimates)
      const counts = random() < 0.3
      for (let op = 0; op < operations; op++) {
        const value = counts ? Math.floor(random() * 1_000) : random() < 0.5 ? 1 : 0
        if (plain.length === 0 || random() < 0.6) {
          tree.push(value)
          plain.push(value)
        } else {
          const i = Math.floor(random() * plain.length)
          tree.set(i, value)
          plain[i] = value
        }
        if (random() < 0.1) {
          const n = Math.floor(random() * (plain.length + 1))
          assert.strictEqual(tree.prefix(n), plain.slice(0, n).reduce((a, b) => a + b, 0), `run ${run}, op ${op}`)
        }
      }
      assert.strictEqual(tree.length, plain.length)
      let sum = 0
      for (let n = 0; n <= plain.length; n++) {
        assert.strictEqual(tree.prefix(n), sum, `run ${run}: prefix(${n})`)
        if (n < plain.length) {
          assert.strictEqual(tree.get(n), plain[n], `run ${run}: get(${n})`)
          sum += plain[n]!
        }
      }
      const targets = counts
        ? Array.from({ length: 60 }, () => Math.floor(random() * (sum + 2)))
        : Array.from({ length: sum + 1 }, (_, t) => t + 1)
      for (const target of targets) {
        let expected = plain.length
        let running = 0
        for (let p = 0; p < plain.length; p++) {
          running += plain[p]!
          if (running >= target) {
            expected = p
            break
          }
        }
        assert.strictEqual(tree.search(target), expected, `run ${run}: search(${target})`)
        checks++
      }
    }
    assert.isAbove(checks, 10_000)
  })

  it("a cursor answers prefix and search as the tree does, in increasing order, with jumps and with steps back", () => {
    const random = prng(2424)
    let walked = 0
    for (let run = 0; run < 1_000; run++) {
      const tree = new Fenwick(1 + Math.floor(random() * 50))
      const length = Math.floor(random() * 400)
      const counts = random() < 0.3
      for (let i = 0; i < length; i++) tree.push(counts ? Math.floor(random() * 50) : random() < 0.5 ? 1 : 0)
      const total = tree.prefix(length)
      const ranks = new FenwickCursor(tree)
      const places = new FenwickCursor(tree)
      let n = 0
      let target = 0
      for (let q = 0; q < 200; q++) {
        // mostly small steps forward (what decide asks), at times a jump past the walk or a step back
        const move = random()
        const step = move < 0.8
          ? Math.floor(random() * 4)
          : move < 0.9
          ? Math.floor(random() * 100)
          : -Math.floor(random() * 50)
        n = Math.max(0, Math.min(length, n + step))
        target = Math.max(0, Math.min(total + 1, target + (counts ? step * 25 : step)))
        assert.strictEqual(ranks.prefix(n), tree.prefix(n), `run ${run}: prefix(${n})`)
        assert.strictEqual(places.search(target), tree.search(target), `run ${run}: search(${target})`)
        walked += step >= 0 && step < 4 ? 1 : 0
      }
    }
    assert.isAbove(walked, 100_000)
  })
})
