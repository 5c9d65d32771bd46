/**
 * The Fenwick tree the eviction index ranks results with, against a plain array: prefix sums and k-th-one searches
 * after random appends and updates, from every starting capacity (the index sizes it by the session, so a capacity
 * is rarely a power of two and it grows from there).
 */
import { assert, describe, it } from "@effect/vitest"
import { Fenwick } from "../src/internal/fenwick.ts"
import { prng } from "./fixtures/Conversation.ts"

describe("Fenwick", () => {
  it("answers prefix and search like a plain array, whatever the capacity it starts and grows from", () => {
    const random = prng(4242)
    let checks = 0
    for (let run = 0; run < 2_000; run++) {
      const capacity = 1 + Math.floor(random() * 100)
      const tree = new Fenwick(capacity)
      const plain: Array<number> = []
      const operations = 1 + Math.floor(random() * 300)
      for (let op = 0; op < operations; op++) {
        const value = random() < 0.5 ? 1 : 0
        if (plain.length === 0 || random() < 0.6) {
          tree.push(value)
          plain.push(value)
        } else {
          const i = Math.floor(random() * plain.length)
          tree.set(i, value)
          plain[i] = value
        }
      }
      assert.strictEqual(tree.length, plain.length)
      let sum = 0
      for (let n = 0; n <= plain.length; n++) {
        assert.strictEqual(tree.prefix(n), sum, `run ${run}: prefix(${n})`)
        if (n < plain.length) sum += plain[n]!
      }
      for (let target = 1; target <= sum + 1; target++) {
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
})
