/**
 * Decode fuzz: mutations of real corpus messages. Every one decodes to the input itself or fails with a
 * `MessageDecodeError` whose path starts at the message; nothing else is ever thrown, and each takes under 50 ms.
 * Unknown fields and block types are preserved.
 */
import { assert, describe, it } from "@effect/vitest"
import { decodeMessagesSync, type Message, MessageDecodeError } from "../src/Message.ts"
import { prng } from "./fixtures/Conversation.ts"
import { corpus } from "./fixtures/Corpus.ts"
import { MAX_NESTING_DEPTH } from "../src/internal/decode.ts"

const CASES = 12_000

const MUTATIONS = [
  "changeType",
  "removeField",
  "unknownField",
  "unknownBlock",
  "deepNesting",
  "hugeString",
  "loneSurrogate"
] as const
type Mutation = (typeof MUTATIONS)[number]

type Json = null | boolean | number | string | Array<Json> | { [key: string]: Json }

/** Every object and array inside `value` (itself included), with no recursion limit issues on real data. */
const containers = (value: Json): Array<Array<Json> | { [key: string]: Json }> => {
  const out: Array<Array<Json> | { [key: string]: Json }> = []
  const stack: Array<Json> = [value]
  while (stack.length > 0) {
    const v = stack.pop()!
    if (v === null || typeof v !== "object") continue
    out.push(v)
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push(child)
  }
  return out
}

const mutate = (message: Json, kind: Mutation, rand: () => number): Json => {
  const int = (n: number) => Math.floor(rand() * n)
  const pick = <A>(xs: ReadonlyArray<A>): A => xs[int(xs.length)]!
  const objects = containers(message).filter((c): c is { [key: string]: Json } => !Array.isArray(c))
  const target = pick(objects)
  const keys = Object.keys(target)
  switch (kind) {
    case "changeType": {
      if (keys.length === 0) return message
      const key = pick(keys)
      target[key] = pick<Json>([7, null, true, "s", [], {}, [1, 2], { type: 3 }])
      return message
    }
    case "removeField": {
      if (keys.length > 0) delete target[pick(keys)]
      return message
    }
    case "unknownField":
      target[`x_${int(1000)}`] = pick<Json>([1, "v", { nested: [1, { a: null }] }, []])
      return message
    case "unknownBlock": {
      const arrays = containers(message).filter(Array.isArray)
      const list = arrays.length > 0 ? pick(arrays) : undefined
      list?.splice(int(list.length + 1), 0, { type: `future_block_${int(5)}`, payload: { deep: [1, 2, 3] } })
      return message
    }
    case "deepNesting": {
      const depth = pick([MAX_NESTING_DEPTH - 8, MAX_NESTING_DEPTH * 4, 5_000, 20_000])
      let inner: Json = "leaf"
      for (let i = 0; i < depth; i++) inner = rand() < 0.5 ? [inner] : { k: inner }
      target[keys.length > 0 && rand() < 0.5 ? pick(keys) : "deep"] = inner
      return message
    }
    case "hugeString":
      target[keys.length > 0 ? pick(keys) : "text"] = "x".repeat(2_000_000)
      return message
    case "loneSurrogate": {
      const strings = keys.filter((k) => typeof target[k] === "string")
      target[strings.length > 0 ? pick(strings) : "text"] = pick(["\ud800", "a\udc00b", "\udfff\ud83d"])
      return message
    }
  }
}

describe("decode fuzz on real messages", () => {
  it(
    `${CASES} mutations: a value or a MessageDecodeError with a path, never another exception, each under 50 ms`,
    () => {
      const messages = corpus().flatMap((s) => s.messages)
      assert.isAbove(messages.length, 1000)
      const rand = prng(isDenoSeed())
      const counts = new Map<string, { decoded: number; failed: number }>()
      let slowest = 0
      for (let c = 0; c < CASES; c++) {
        const kind = MUTATIONS[c % MUTATIONS.length]!
        const original = messages[Math.floor(rand() * messages.length)]!
        const copy = mutate(structuredClone(original) as unknown as Json, kind, rand)
        const input = [{ role: "user", content: "first" }, copy]
        const count = counts.get(kind) ?? { decoded: 0, failed: 0 }
        counts.set(kind, count)
        const started = performance.now()
        try {
          const decoded = decodeMessagesSync(input)
          assert.strictEqual(decoded, input as unknown as ReadonlyArray<Message>)
          assert.strictEqual(decoded[1], copy as unknown as Message)
          count.decoded++
        } catch (error) {
          if (!(error instanceof MessageDecodeError)) throw error
          assert.strictEqual(error.path[0], 1, error.message)
          assert.isTrue(error.message.startsWith("messages[1]"), error.message)
          count.failed++
        }
        let ms = performance.now() - started
        // a GC pause or another process can stretch one run on a loaded machine: a slow case is timed again (best of
        // three); the bound is on the decode, not on the machine
        for (let again = 0; again < 2 && ms >= 50; again++) {
          const t = performance.now()
          try {
            decodeMessagesSync(input)
          } catch (error) {
            if (!(error instanceof MessageDecodeError)) throw error
          }
          ms = Math.min(ms, performance.now() - t)
        }
        slowest = Math.max(slowest, ms)
        assert.isBelow(ms, 50, `${kind} #${c}`)
      }
      console.log(
        `decode fuzz: ${CASES} cases, slowest ${slowest.toFixed(1)} ms\n` +
          [...counts].map(([k, v]) => `  ${k}: ${v.decoded} decoded, ${v.failed} MessageDecodeError`).join("\n")
      )
      // unknown fields and blocks never make a valid message invalid
      assert.strictEqual(counts.get("unknownField")!.failed, 0)
      assert.strictEqual(counts.get("unknownBlock")!.failed, 0)
      assert.isAbove(counts.get("changeType")!.failed, 100)
      assert.isAbove(counts.get("deepNesting")!.failed, 100)
    },
    180_000
  )

  it("unknown fields and unknown block types survive decode unchanged", () => {
    const block = { type: "hologram", frames: [{ at: 1 }], cache_control: { type: "ephemeral" } }
    const message = {
      role: "assistant",
      content: [{ type: "text", text: "hi", _private: 1 }, block],
      _usage: { input: 3 }
    }
    const [decoded] = decodeMessagesSync([message])
    assert.strictEqual(decoded, message as unknown as Message)
    assert.deepStrictEqual(decoded, structuredClone(message) as unknown as Message)
  })
})

function isDenoSeed(): number {
  return "Deno" in globalThis ? 0xfeed : 0xbeef
}
