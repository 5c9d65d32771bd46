import { assert, describe, it } from "@effect/vitest"
import { Schema } from "effect"
import type { Message } from "../src/Message.ts"
import { estimateMessageTokensUncached, jsonSize } from "../src/internal/estimate.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { apiViewStart } from "../src/internal/apiView.ts"

/** The estimate recomputed from scratch: every message of the API view, no cache at all. */
const recomputed = (messages: ReadonlyArray<Message>): number => {
  let total = 0
  for (let i = apiViewStart(messages); i < messages.length; i++) total += estimateMessageTokensUncached(messages[i]!)
  return total
}

/** A fresh message of one of the shapes that matter: prose, tool call/result, compaction (with and without content). */
const makeMessage = (kind: number, size: number): Message => {
  const text = "w".repeat(size)
  switch (kind % 7) {
    case 0:
      return { role: "user", content: text }
    case 1:
      return {
        role: "assistant",
        content: [{ type: "text", text }, { type: "tool_use", id: `t${size}`, name: "read", input: { path: text } }]
      }
    case 2:
      return { role: "user", content: [{ type: "tool_result", tool_use_id: `t${size}`, content: text }] }
    case 3: // opens the API view
      return {
        role: "assistant",
        content: [{ type: "compaction", content: `summary ${text}` }, { type: "text", text }]
      }
    case 4: // a failed compaction: never opens the view
      return { role: "assistant", content: [{ type: "compaction", content: null }, { type: "text", text }] }
    case 5: // misplaced in a system message: never opens the view
      return { role: "system", content: [{ type: "compaction", content: "summary" }] as never }
    default:
      return { role: "assistant", content: [{ type: "thinking", thinking: text, signature: "s" }] }
  }
}

/** One change an agent loop, an eviction, a compaction or a careless caller makes to its list. */
const Op = Schema.Struct({
  /** 0-1 append, 2 replace one, 3 evict many, 4 truncate, 5 drop a prefix, 6 mutate in place, 7 re-ask an older list */
  op: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 7 })),
  kind: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 6 })),
  at: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 10_000 })),
  count: Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 5 }))
})
const Script = Schema.Array(Op).check(Schema.isMaxLength(40))

/** Applies one op; returns the list to estimate next (a new array, except for in-place mutation). */
const apply = (
  list: Array<Message>,
  history: ReadonlyArray<Array<Message>>,
  { at, count, kind, op }: typeof Op.Type
): Array<Message> => {
  const pos = list.length === 0 ? 0 : at % list.length
  switch (op) {
    case 0:
    case 1:
      return [...list, ...Array.from({ length: count }, (_, i) => makeMessage(kind + i, at % 50 + i))]
    case 2:
      return list.map((m, i) => i === pos ? makeMessage(kind, at % 31) : m)
    case 3:
      return list.map((m, i) => i >= pos && (i - pos) % (count + 1) === 0 ? makeMessage(kind, i % 13) : m)
    case 4:
      return list.slice(0, pos)
    case 5:
      return list.slice(Math.min(list.length, count))
    case 6: // the owner mutates its array in place (against the contract): the estimate must still be right
      if (list.length > 0) list[pos] = makeMessage(kind, at % 17)
      else list.push(makeMessage(kind, at % 17))
      return list
    default:
      return history.length === 0 ? list : history[at % history.length]!
  }
}

describe("estimateTokens carried forward", () => {
  it.prop(
    "always equals the full recomputation over append, replace, evict, truncate, compaction and re-ask sequences",
    [Script, Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 30 }))],
    ([script, initial]) => {
      let list: Array<Message> = Array.from({ length: initial }, (_, i) => makeMessage(i, i))
      const history: Array<Array<Message>> = []
      assert.strictEqual(estimateTokens(list), recomputed(list))
      for (const op of script) {
        history.push(list)
        list = apply(list, history, op)
        assert.strictEqual(estimateTokens(list), recomputed(list), JSON.stringify(op))
      }
    },
    { arbitrary: { runs: 3000 } }
  )

  it("a list that starts with another list's first message is compared, never trusted", () => {
    const shared = makeMessage(0, 5)
    const a = [shared, makeMessage(1, 10), makeMessage(2, 20), makeMessage(0, 30)]
    const b = [shared, makeMessage(6, 99), a[2]!, a[3]!] // the middle replaced, the ends the same
    assert.strictEqual(estimateTokens(a), recomputed(a))
    assert.strictEqual(estimateTokens([...b, makeMessage(0, 1)]), recomputed([...b, makeMessage(0, 1)]))
    assert.strictEqual(estimateTokens(a), recomputed(a))
    assert.notStrictEqual(recomputed(a), recomputed(b))
  })

  it("a compaction block appended in a step moves the view, and a later prefix query moves it back", () => {
    const base = Array.from({ length: 20 }, (_, i) => makeMessage(i % 3, i + 1))
    const compacted = [...base, makeMessage(3, 4), makeMessage(0, 8)]
    assert.strictEqual(estimateTokens(base), recomputed(base))
    assert.strictEqual(estimateTokens(compacted), recomputed(compacted))
    assert.isBelow(estimateTokens(compacted), estimateTokens(base))
    assert.strictEqual(estimateTokens(compacted.slice(0, 20)), recomputed(base))
  })
})

describe("jsonSize", () => {
  it("is the JSON length past the recursion depth, and for wide values", () => {
    let deep: unknown = { leaf: "x" }
    for (let i = 0; i < 200; i++) deep = i % 2 === 0 ? { k: deep, n: i } : [deep, i, true, null]
    assert.strictEqual(jsonSize(deep), JSON.stringify(deep).length)
    const wide = { items: Array.from({ length: 5000 }, (_, i) => ({ i, s: "ab", b: i % 2 === 0 })) }
    assert.strictEqual(jsonSize(wide), JSON.stringify(wide).length)
  })

  it("counts a cycle as null, even when every key points back", () => {
    const loop: Record<string, unknown> = { a: 1 }
    for (const k of ["b", "c", "d", "e", "f", "g", "h", "i"]) loop[k] = loop
    const expected = JSON.stringify({ a: 1, b: null, c: null, d: null, e: null, f: null, g: null, h: null, i: null })
    assert.strictEqual(jsonSize(loop), expected.length)
  })
})
