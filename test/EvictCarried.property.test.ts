import { assert, describe, it } from "@effect/vitest"
import { isToolResult } from "../src/internal/blocks.ts"
import { type EvictOptions, evictStaleToolResults } from "../src/Evict.ts"
import { HotPaths } from "../src/HotPaths.ts"
import {
  applyOffloads,
  buildIndex,
  decide,
  evictionFrontier,
  extendIndex,
  indexedFrontier
} from "../src/internal/eviction.ts"
import { MAX_POINTER_TOKENS } from "../src/internal/evictionRules.ts"
import { formatOffloadRef, isOffloaded, parseOffloadRef } from "../src/Offload.ts"
import type { ContentBlock, Message } from "../src/Message.ts"
import { defaultToolClassifier } from "../src/Tools.ts"
import { generateSession, prng } from "./fixtures/Conversation.ts"
import { referenceEvict } from "./fixtures/EvictReference.ts"
import { apiViewStart } from "../src/internal/apiView.ts"
import { cachePrices } from "../src/internal/cacheTtl.ts"

const pathsOf = (messages: ReadonlyArray<Message>): Array<string> => {
  const paths = new Set<string>()
  for (const m of messages) {
    if (typeof m.content === "string") continue
    for (const b of m.content) {
      const input = b.type === "tool_use" ? (b as { input: { path?: unknown } }).input : undefined
      if (typeof input?.path === "string") paths.add(input.path)
    }
  }
  return [...paths]
}

/**
 * One agent loop over a generated session: messages arrive one to three at a time; after each arrival the carried
 * index is extended and decides, and its result must equal a fresh `evictStaleToolResults` and the reference
 * backward scan on the same list, byte for byte. When the result offloads, the loop continues from its output.
 */
const runLoop = (seed: number): { readonly compared: number; readonly printed: number } => {
  const rand = prng(seed * 7919)
  const generated = generateSession(seed, {
    messages: 30 + Math.floor(rand() * 150),
    maxOutput: 1 + Math.floor(rand() * 3) * 3000
  })
  const paths = pathsOf(generated)
  // a fraction keeps the results whose rank is below it (2.5 keeps 3): the reference is given the whole number
  const keep = [0, 1, 3, 5, 10, 2.5, Infinity][Math.floor(rand() * 7)]!
  const mode = Math.floor(rand() * 5)
  // with pointers that keep what an output printed, half the outputs end on a count
  const session = mode !== 3 ? generated : generated.map((m, i) =>
    typeof m.content === "string" ? m : {
      ...m,
      content: m.content.map((b) =>
        isToolResult(b) && typeof b.content === "string" && i % 2 === 0
          ? { ...b, content: `${b.content}\nTests: ${i} passed` }
          : b
      )
    }
  )
  let view: Array<Message> = []
  const index = buildIndex(view, defaultToolClassifier)
  let compared = 0
  let printed = 0
  let next = 0
  while (next < session.length) {
    const take = 1 + Math.floor(rand() * 3)
    view = [...view, ...session.slice(next, next + take)]
    next += take
    assert.isTrue(extendIndex(index, view))
    // pinned: the hot paths (they only grow) or a random set that changes every step
    const pinnedSet = mode === 4 ? new Set(paths.filter(() => rand() < 0.3)) : undefined
    const hot = HotPaths.fromMessages(view)
    const options: EvictOptions = {
      pinned: pinnedSet === undefined ? hot.pinned : (p) => pinnedSet.has(p),
      ...(mode === 0 ? { minSavings: 0 } : mode === 1 ? { minSavings: 400 } : {}),
      ...(mode === 2 && rand() < 0.3 ? { cacheCold: true } : {}),
      // pointers that keep what an output printed: the carried index and a fresh eviction agree on them too
      ...(mode === 3 ? { keepPrinted: true } : {})
    }
    const carried = decide(index, view, keep, { ...options, prices: cachePrices("5m") })
    const fresh = evictStaleToolResults(view, keep, options)
    const reference = referenceEvict(view, Math.ceil(keep), options)
    assert.deepStrictEqual(carried, fresh, `seed ${seed} at ${view.length}`)
    // the reference writes no printed values: it is held to the decisions of an eviction that keeps none
    if (mode !== 3) assert.deepStrictEqual(carried, reference, `seed ${seed} at ${view.length} (reference)`)
    assert.strictEqual(carried.messages === view, fresh.messages === view)
    compared++
    printed += carried.offloaded.filter((o) => o.ref._tag === "Output" && o.ref.printed !== undefined).length
    if (carried.offloaded.length > 0) {
      view = carried.messages
      applyOffloads(index, view, carried.offloaded)
    }
    assert.deepStrictEqual(indexedFrontier(index, view), evictionFrontier(view), `frontier, seed ${seed}`)
  }
  return { compared, printed }
}

describe("carried-forward eviction", () => {
  it("equals a fresh eviction and the reference backward scan after every step of 150 generated agent loops", () => {
    let compared = 0
    let printed = 0
    for (let seed = 1; seed <= 150; seed++) {
      const run = runLoop(seed)
      compared += run.compared
      printed += run.printed
    }
    assert.isAbove(compared, 5_000)
    // some of the pointers compared kept what their output printed
    assert.isAbove(printed, 0)
  })

  it("reads a pointer only from at most MAX_POINTER_TOKENS of payload, as Offload does", () => {
    const pointerOfLength = (length: number) => {
      const ref = {
        _tag: "Read" as const,
        tool: "read",
        toolUseId: "t",
        reason: "stale" as const,
        tokens: 9,
        images: 0
      }
      const base = formatOffloadRef({ ...ref, path: "" }).length
      return formatOffloadRef({ ...ref, path: "p".repeat(length - base) })
    }
    const at = (text: string) => isOffloaded({ type: "tool_result", tool_use_id: "t", content: text })
    const longest = pointerOfLength(MAX_POINTER_TOKENS * 4)
    assert.strictEqual(longest.length, MAX_POINTER_TOKENS * 4)
    assert.isTrue(at(longest))
    assert.isFalse(at(pointerOfLength(MAX_POINTER_TOKENS * 4 + 1)))
  })

  it("built over compaction blocks anywhere, decides on the view from the last one with content, as the reference", () => {
    let opened = 0
    for (let seed = 1; seed <= 300; seed++) {
      const rand = prng(seed * 104_729)
      const messages: Array<Message> = generateSession(seed, { messages: 10 + Math.floor(rand() * 80) })
      // 0-3 compaction blocks, some without content (no-ops), at any block of any message, the first one too
      for (let k = Math.floor(rand() * 4); k > 0; k--) {
        const i = Math.floor(rand() * messages.length)
        const m = messages[i]!
        const content = typeof m.content === "string" ? [{ type: "text" as const, text: m.content }] : [...m.content]
        const block = { type: "compaction", content: rand() < 0.2 ? null : `summary ${k}` } as never
        // into a message, or as a user message of its own (between a call and its result at times)
        if (rand() < 0.3) {
          messages.splice(i, 0, { role: "user", content: [block] })
          continue
        }
        content.splice(Math.floor(rand() * (content.length + 1)), 0, block)
        messages[i] = { ...m, content } as Message
      }
      if (apiViewStart(messages) > 0) opened++
      const keep = [0, 1, 3, 10][Math.floor(rand() * 4)]!
      const options: EvictOptions = rand() < 0.5 ? { minSavings: 0 } : { cacheCold: rand() < 0.3 }
      const reference = referenceEvict(messages, keep, options)
      assert.deepStrictEqual(evictStaleToolResults(messages, keep, options), reference, `seed ${seed}`)
      const carried = buildIndex(messages, defaultToolClassifier)
      assert.strictEqual(carried.viewStart, apiViewStart(messages), `seed ${seed}: view start`)
      assert.deepStrictEqual(decide(carried, messages, keep, { ...options, prices: cachePrices("5m") }), reference)
    }
    assert.isAbove(opened, 100)
  })

  it("prices tool output held as lists of text blocks as the estimator does, as the reference", () => {
    let split = 0
    for (let seed = 1; seed <= 200; seed++) {
      const rand = prng(seed * 7_727)
      // every string tool output as 1-3 text blocks (an empty one at times), some with an image after them
      const messages = generateSession(seed, { messages: 20 + Math.floor(rand() * 80) }).map((m): Message => {
        if (typeof m.content === "string") return m
        const content = m.content.map((b) => {
          if (b.type !== "tool_result" || typeof (b as { content?: unknown }).content !== "string") return b
          const text = (b as { content: string }).content
          const cut = Math.floor(rand() * (text.length + 1))
          const parts = rand() < 0.5 ? [text] : [text.slice(0, cut), text.slice(cut)]
          const blocks: Array<ContentBlock> = parts.map((part) => ({ type: "text", text: part }))
          if (rand() < 0.1) blocks.push({ type: "text", text: "" })
          if (rand() < 0.05) {
            blocks.push({ type: "image", source: { type: "base64", media_type: "image/png", data: "" } })
          }
          split++
          return { ...b, content: blocks } as ContentBlock
        })
        return { ...m, content } as Message
      })
      const keep = [0, 1, 3, 10][Math.floor(rand() * 4)]!
      const options: EvictOptions = rand() < 0.5 ? { minSavings: 0 } : { cacheCold: true }
      assert.deepStrictEqual(evictStaleToolResults(messages, keep, options), referenceEvict(messages, keep, options))
    }
    assert.isAbove(split, 1_000)
  })

  it("finds each result's call as the nearest preceding tool_use with its id: reused ids, late results, wide replies, text replies and results split over user messages", () => {
    let late = 0
    for (let seed = 1; seed <= 300; seed++) {
      const rand = prng(seed * 15_485_863)
      const int = (n: number) => Math.floor(rand() * n)
      const paths = ["/a.ts", "/b.ts", "/c.ts"]
      const messages: Array<Message> = [{ role: "user", content: "go" }]
      const pending: Array<string> = []
      for (let turn = 0; turn < 5 + int(30); turn++) {
        // a reply of 1-3 calls, or a wide one of up to 40; ids drawn from a small pool, so they are reused
        const calls = Array.from({ length: rand() < 0.15 ? 17 + int(24) : 1 + int(3) }, () => {
          const id = `t${int(12)}`
          const kind = int(3)
          const input = kind === 2 ? { command: `ls ${int(5)}` } : { path: paths[int(3)]! }
          return { type: "tool_use" as const, id, name: ["read", "edit", "bash"][kind]!, input }
        })
        messages.push({ role: "assistant", content: calls })
        for (const c of calls) pending.push(c.id)
        // the results of some pending calls, in any order, some of them turns later (none at times: two replies in a row)
        const results: Array<ContentBlock> = []
        for (let k = rand() < 0.2 ? -1 : pending.length - 1; k >= 0; k--) {
          if (rand() < 0.7) {
            if (pending.length - k > calls.length) late++
            results.push({ type: "tool_result", tool_use_id: pending[k]!, content: "x".repeat(int(3000)) })
            pending.splice(k, 1)
          }
        }
        results.reverse()
        // at times a text-only reply comes between a call and its result, or the results come as two user messages
        if (rand() < 0.1) messages.push({ role: "assistant", content: "thinking it over" })
        const split = rand() < 0.2 ? int(results.length + 1) : 0
        if (split > 0) messages.push({ role: "user", content: results.slice(0, split) })
        if (results.length > split) messages.push({ role: "user", content: results.slice(split) })
      }
      const keep = [0, 1, 3][int(3)]!
      const options: EvictOptions = { minSavings: 0 }
      assert.deepStrictEqual(evictStaleToolResults(messages, keep, options), referenceEvict(messages, keep, options))
    }
    assert.isAbove(late, 300)
  })

  it("writes paths and commands that need escapes, clipped or not, as the reference does; every pointer parses back", () => {
    let escapedPaths = 0
    let clippedEscaped = 0
    for (let seed = 1; seed <= 200; seed++) {
      const rand = prng(seed * 7_919)
      const int = (n: number) => Math.floor(rand() * n)
      // each file read several times, so a file's escaped path is reused; commands with quotes and backslashes
      const paths = [
        '/src/"quoted".ts',
        "C:\\repo\\b.ts",
        "/tab\there.ts",
        "/plain.ts",
        "/emoji\ud83d\ude00.ts",
        "/lone\ud800.ts"
      ]
      // short and long commands: quotes, backslashes, lines to fold, surrogate pairs where the 120-character clip falls
      const commands = [
        () => `grep -n "x${int(9)}" src\\*.ts`,
        () => `cd /work && ${'echo "step" && '.repeat(5 + int(20))}grep -rn "needle" .`,
        () => `python3 - <<'EOF'\nprint("${"a".repeat(int(300))}")\n  \tEOF`,
        () => `echo${"x".repeat(int(2))} ${"\ud83d\ude00".repeat(50 + int(40))}`,
        () => `printf '%s\\n' ${"x\\y ".repeat(20 + int(30))}`
      ]
      const messages: Array<Message> = [{ role: "user", content: "go" }]
      for (let turn = 0; turn < 10 + int(30); turn++) {
        const id = `t${turn}`
        const kind = int(3)
        const input = kind === 2 ? { command: commands[int(commands.length)]!() } : { path: paths[int(paths.length)]! }
        messages.push({
          role: "assistant",
          content: [{ type: "tool_use", id, name: ["read", "edit", "bash"][kind]!, input }]
        })
        messages.push({
          role: "user",
          content: [{ type: "tool_result", tool_use_id: id, content: "y".repeat(400 + int(3000)) }]
        })
      }
      const keep = [0, 1, 3][int(3)]!
      const options: EvictOptions = { minSavings: 0 }
      const evicted = evictStaleToolResults(messages, keep, options)
      assert.deepStrictEqual(evicted, referenceEvict(messages, keep, options), `seed ${seed}`)
      for (const o of evicted.offloaded) {
        assert.deepStrictEqual(parseOffloadRef(o.block.content as string), o.ref, `seed ${seed}`)
        if (o.ref._tag === "Read" && JSON.stringify(o.ref.path) !== `"${o.ref.path}"`) escapedPaths++
        if (o.ref._tag === "Output" && o.ref.input.endsWith("…") && /["\\]/.test(o.ref.input)) clippedEscaped++
      }
    }
    assert.isAbove(escapedPaths, 200)
    assert.isAbove(clippedEscaped, 100)
  })

  it("refuses to extend past a message that opens a new API view", () => {
    const session = generateSession(3, { messages: 20 })
    const index = buildIndex(session, defaultToolClassifier)
    const compacted: Message = {
      role: "assistant",
      content: [{ type: "compaction", content: "summary of the work so far" } as never]
    }
    assert.isFalse(extendIndex(index, [...session, compacted]))
  })
})
