import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, Schema } from "effect"
import { evictStaleToolResults, FIXED_MIN_SAVINGS as DEFAULT_MIN_SAVINGS } from "../src/Evict.ts"
import type { EvictOptions } from "../src/Evict.ts"
import { formatOffloadRef, isOffloaded, offloadRefOf, OMITTED_TOOL_RESULT, parseOffloadRef } from "../src/Offload.ts"
import type { OffloadRef } from "../src/Offload.ts"
import type { ContentBlock, Message, ToolResultBlock, ToolUseBlock } from "../src/Message.ts"
import { estimateMessageTokensUncached } from "../src/internal/estimate.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { defaultToolClassifier } from "../src/Tools.ts"
import type { ToolAction } from "../src/Tools.ts"
import { conversationArbitrary, generateSession, pngBase64 } from "./fixtures/Conversation.ts"
import { corpus } from "./fixtures/Corpus.ts"
import { isToolResult, isToolUse } from "../src/internal/blocks.ts"
import { covers } from "../src/internal/toolInput.ts"
import { cachePrices } from "../src/internal/cacheTtl.ts"

// ============================================================================
// Helpers
// ============================================================================

const big = (tag: string) => `${tag} ${"x".repeat(4000)}`
const user = (text: string): Message => ({ role: "user", content: text })
const call = (id: string, name: string, input: Record<string, unknown>): ToolUseBlock => ({
  type: "tool_use",
  id,
  name,
  input
})
const result = (
  id: string,
  content: string | ReadonlyArray<ContentBlock>,
  extra: { readonly is_error?: boolean; readonly cache_control?: unknown } = {}
): ToolResultBlock => ({ type: "tool_result", tool_use_id: id, content, ...extra })
/** One assistant step (calls) and its results. */
const step = (
  calls: ReadonlyArray<ToolUseBlock>,
  results: ReadonlyArray<ContentBlock>
): Array<Message> => [{ role: "assistant", content: calls }, { role: "user", content: results }]
const read = (id: string, path: string, extra: Record<string, unknown> = {}) => call(id, "read", { path, ...extra })

/** Every tool_result with its position, for checks. */
const resultsOf = (messages: ReadonlyArray<Message>) => {
  const out: Array<{ i: number; j: number; block: ToolResultBlock }> = []
  messages.forEach((m, i) => {
    if (typeof m.content !== "string") {
      m.content.forEach((b, j) => {
        if (isToolResult(b)) out.push({ i, j, block: b })
      })
    }
  })
  return out
}

const offloadedPositions = (messages: ReadonlyArray<Message>): Set<string> =>
  new Set(resultsOf(messages).filter((r) => isOffloaded(r.block)).map((r) => `${r.i}:${r.j}`))

/**
 * An independent, quadratic oracle of the eviction rule: for each tool_result (with a preceding tool_use) whether it
 * is eagerly offloadable (superseded, or modified and not a pinned latest read), and which results form the window.
 */
const oracle = (messages: ReadonlyArray<Message>, keepRecent: number, pinned: (p: string) => boolean) => {
  const all: Array<{ i: number; j: number; block: ToolResultBlock; action: ToolAction }> = []
  const uses = new Map<string, ToolUseBlock>()
  messages.forEach((m, i) => {
    if (typeof m.content === "string") return
    m.content.forEach((b, j) => {
      if (m.role === "assistant" && isToolUse(b)) uses.set(b.id, b)
      const use = isToolResult(b) && m.role === "user" ? uses.get(b.tool_use_id) : undefined
      if (use !== undefined) all.push({ i, j, block: b as ToolResultBlock, action: defaultToolClassifier(use) })
    })
  })
  const info = all.map((r, k) => {
    const later = all.slice(k + 1).filter((l) => l.block.is_error !== true)
    const a = r.action
    if (a._tag !== "Read") return { ...r, superseded: false, eager: false, pinnedLatest: false }
    const laterReads = later.filter((l) => l.action._tag === "Read" && l.action.path === a.path)
    const superseded = laterReads.some((l) => l.action._tag === "Read" && covers(l.action.range, a.range))
    const modified = later.some((l) => l.action._tag === "Write" && l.action.path === a.path)
    const pinnedLatest = laterReads.length === 0 && pinned(a.path)
    return { ...r, superseded, eager: superseded || (modified && !pinnedLatest), pinnedLatest }
  })
  const rest = info.filter((r) => !r.eager)
  const window = new Set(rest.slice(Math.max(0, rest.length - keepRecent)).map((r) => `${r.i}:${r.j}`))
  return { info, window }
}

// ============================================================================
// Pointers
// ============================================================================

describe("offload pointers", () => {
  const refs: ReadonlyArray<OffloadRef> = [
    { _tag: "Read", tool: "read", toolUseId: "toolu_1", path: '/a b/"q"].ts', reason: "stale", tokens: 12, images: 0 },
    {
      _tag: "Read",
      tool: "Read",
      toolUseId: "t2",
      path: "src/x.ts",
      range: { start: 10, end: 59 },
      reason: "superseded",
      tokens: 0,
      images: 2
    },
    {
      _tag: "Read",
      tool: "open",
      toolUseId: "t3",
      path: "x",
      range: { start: 5 },
      reason: "modified",
      tokens: 9,
      images: 0
    },
    {
      _tag: "Output",
      tool: "bash",
      toolUseId: "t4",
      input: "npm test ] tokens=5",
      reason: "stale",
      tokens: 7,
      images: 1
    }
  ]

  it("round-trips every ref through its text, and the text names tool, path, range, size and how to restore", () => {
    for (const ref of refs) assert.deepStrictEqual(parseOffloadRef(formatOffloadRef(ref)), ref)
    const text = formatOffloadRef(refs[1]!)
    assert.strictEqual(
      text,
      '[offloaded read tool="Read" path="src/x.ts" lines=10-59 id="t2" reason=superseded tokens=0 images=2] ' +
        "A later read of this file is further down. Re-read the file to restore this output."
    )
    assert.include(formatOffloadRef(refs[3]!), "Make the same call again")
  })

  it("rejects text that is not a canonical pointer", () => {
    const text = formatOffloadRef(refs[0]!)
    for (
      const bad of [
        "",
        OMITTED_TOOL_RESULT,
        text.slice(0, -1),
        `${text} `,
        text.replace("tokens=12", "tokens=-1"),
        text.replace("reason=stale", "reason=old"),
        text.replace(" id=", ' id="x" id='),
        '[offloaded read tool="r"] This file read was removed to save context. Re-read the file to restore it.'
      ]
    ) assert.isUndefined(parseOffloadRef(bad), bad)
  })

  it("recognises our pointers (string or single text block) and the legacy placeholder as offloaded", () => {
    const text = formatOffloadRef(refs[0]!)
    assert.isTrue(isOffloaded(result("a", text)))
    assert.isTrue(isOffloaded(result("a", [{ type: "text", text }])))
    assert.isTrue(isOffloaded(result("a", OMITTED_TOOL_RESULT)))
    assert.isFalse(isOffloaded(result("a", "ordinary output")))
    assert.isFalse(isOffloaded({ type: "text", text }))
    assert.deepStrictEqual(offloadRefOf(result("a", text)), refs[0])
  })

  it.prop(
    "parse ∘ format is the identity on generated refs",
    [
      Arbitrary.schema(Schema.Struct({
        path: Schema.String,
        input: Schema.String,
        tool: Schema.String,
        id: Schema.String,
        start: Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 10_000 })),
        len: Schema.Int.check(Schema.isBetween({ minimum: -1, maximum: 500 })),
        tokens: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 1e9 })),
        images: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 50 })),
        read: Schema.Boolean,
        reason: Schema.Literals(["superseded", "modified", "stale"])
      }))
    ],
    ([v]) => {
      const common = { tool: v.tool, toolUseId: v.id, reason: v.reason, tokens: v.tokens, images: v.images }
      const ref: OffloadRef = v.read
        ? v.len < 0
          ? { _tag: "Read", path: v.path, ...common }
          : { _tag: "Read", path: v.path, range: { start: v.start, end: v.start + v.len }, ...common }
        : { _tag: "Output", input: v.input, ...common }
      assert.deepStrictEqual(parseOffloadRef(formatOffloadRef(ref)), ref)
    },
    { arbitrary: { runs: 3000 } }
  )
})

// ============================================================================
// Examples
// ============================================================================

describe("evictStaleToolResults", () => {
  it("offloads a superseded read even inside the recent window, and keeps the later read", () => {
    const messages = [
      user("go"),
      ...step([read("r1", "/a.ts")], [result("r1", big("a1"))]),
      ...step([read("r2", "/a.ts")], [result("r2", big("a2"))])
    ]
    const out = evictStaleToolResults(messages, 10, { minSavings: 0 })
    assert.deepStrictEqual(out.offloaded.map((o) => [o.toolUseId, o.reason]), [["r1", "superseded"]])
    const ref = out.offloaded[0]!.ref
    assert.deepStrictEqual(ref, {
      _tag: "Read",
      tool: "read",
      toolUseId: "r1",
      path: "/a.ts",
      reason: "superseded",
      tokens: 1001,
      images: 0
    })
    assert.strictEqual(out.messages[4], messages[4])
    assert.strictEqual(out.messages[0], messages[0])
    assert.strictEqual(estimateTokens(out.messages), estimateTokens(messages) - out.tokensFreed)
  })

  it("a ranged read of the SDK agent toolset supersedes nothing outside its range (API-RULES 41)", () => {
    const sdkRead = (id: string, viewRange: ReadonlyArray<number>) =>
      call(id, "read", { file_path: "/big.ts", view_range: viewRange })
    const messages = [
      user("go"),
      ...step([sdkRead("r1", [1, 500])], [result("r1", big("lines 1-500"))]),
      ...step([sdkRead("r2", [501, 1000])], [result("r2", big("lines 501-1000"))]),
      ...step([sdkRead("r3", [1, 0])], [result("r3", big("whole file"))])
    ]
    const partial = evictStaleToolResults(messages.slice(0, 5), 10, { minSavings: 0 })
    assert.deepStrictEqual(partial.offloaded.map((o) => o.toolUseId), [])
    // a read to the end from line 1 is the whole file: it supersedes both ranges
    const whole = evictStaleToolResults(messages, 10, { minSavings: 0 })
    assert.deepStrictEqual(whole.offloaded.map((o) => [o.toolUseId, o.reason]), [["r1", "superseded"], [
      "r2",
      "superseded"
    ]])
  })

  it("decides ranges by coverage: a later whole or wider read supersedes, a narrower one does not", () => {
    const messages = [
      user("go"),
      ...step([read("w", "/a.ts")], [result("w", big("whole"))]),
      ...step([read("n", "/a.ts", { offset: 10, limit: 20 })], [result("n", big("narrow"))]),
      ...step([read("m", "/a.ts", { offset: 5, limit: 50 })], [result("m", big("wider"))])
    ]
    const out = evictStaleToolResults(messages, 10, { minSavings: 0 })
    assert.deepStrictEqual(out.offloaded.map((o) => o.toolUseId), ["n"])
    assert.deepStrictEqual(out.offloaded[0]!.ref._tag === "Read" && out.offloaded[0]!.ref.range, { start: 10, end: 29 })
  })

  it("offloads a read made stale by a later successful write; a failed write or a failed re-read changes nothing", () => {
    const messages = [
      user("go"),
      ...step([read("r1", "/a.ts"), read("r2", "/b.ts")], [result("r1", big("a")), result("r2", big("b"))]),
      ...step([call("e1", "edit", { path: "/a.ts" }), call("e2", "edit", { path: "/b.ts" })], [
        result("e1", "ok"),
        result("e2", "no match", { is_error: true })
      ]),
      ...step([read("r3", "/b.ts")], [result("r3", "ENOENT", { is_error: true })])
    ]
    const out = evictStaleToolResults(messages, 10, { minSavings: 0 })
    assert.deepStrictEqual(out.offloaded.map((o) => [o.toolUseId, o.reason]), [["r1", "modified"]])
    assert.include(out.offloaded[0]!.block.content as string, "The file was changed after this read")
  })

  it("keeps the newest keepRecent results and errors, offloads older output with a pointer naming the command", () => {
    const messages = [
      user("go"),
      ...step([call("b1", "bash", { command: "npm test\n -- --watch" })], [result("b1", big("t1"))]),
      ...step([call("b2", "bash", { command: "ls" })], [result("b2", big("fail"), { is_error: true })]),
      ...step([call("b3", "bash", { command: "ls" })], [result("b3", big("t3"))]),
      ...step([call("b4", "bash", { command: "ls" })], [result("b4", big("t4"))])
    ]
    const out = evictStaleToolResults(messages, 2, { minSavings: 0 })
    assert.deepStrictEqual(out.offloaded.map((o) => [o.toolUseId, o.reason]), [["b1", "stale"]])
    assert.deepStrictEqual(out.offloaded[0]!.ref, {
      _tag: "Output",
      tool: "bash",
      toolUseId: "b1",
      input: "npm test -- --watch",
      reason: "stale",
      tokens: 1001,
      images: 0
    })
  })

  it("keeps every other field of the block, drops images and counts them, and never mutates the input", () => {
    const img: ContentBlock = {
      type: "image",
      source: { type: "base64", media_type: "image/png", data: pngBase64(800, 600) }
    }
    const block = result("s1", [{ type: "text", text: "shot" }, img, img], {
      is_error: false,
      cache_control: { type: "ephemeral" }
    })
    const messages: Array<Message> = [
      user("go"),
      ...step([call("s1", "screenshot", {})], [{ ...block, extra: 1 } as ContentBlock]),
      ...step([call("b", "bash", { command: "ls" })], [result("b", "x")])
    ]
    const snapshot = structuredClone(messages)
    const out = evictStaleToolResults(messages, 1, { minSavings: 0 })
    assert.deepStrictEqual(messages, snapshot)
    const replaced = out.offloaded[0]!.block as ToolResultBlock & { extra: number }
    assert.strictEqual(replaced.tool_use_id, "s1")
    assert.strictEqual(replaced.is_error, false)
    assert.deepStrictEqual(replaced.cache_control, { type: "ephemeral" })
    assert.strictEqual(replaced.extra, 1)
    assert.strictEqual(out.offloaded[0]!.ref.images, 2)
    assert.strictEqual((out.messages[2]!.content as ReadonlyArray<ContentBlock>)[0], replaced)
  })

  it("keeps a pinned path's latest read past the cutoff and past a write, but still drops its duplicates", () => {
    const messages = [
      user("go"),
      ...step([read("r1", "/hot.ts")], [result("r1", big("h1"))]),
      ...step([read("r2", "/hot.ts")], [result("r2", big("h2"))]),
      ...step([call("e", "edit", { path: "/hot.ts" })], [result("e", "ok")]),
      ...step([call("b", "bash", { command: "ls" })], [result("b", big("b"))])
    ]
    const pinned = (p: string) => p === "/hot.ts"
    assert.deepStrictEqual(
      evictStaleToolResults(messages, 0, { pinned, minSavings: 0 }).offloaded.map((o) => o.toolUseId),
      [
        "r1",
        "b"
      ]
    )
    assert.deepStrictEqual(evictStaleToolResults(messages, 0, { minSavings: 0 }).offloaded.map((o) => o.toolUseId), [
      "r1",
      "r2",
      "b"
    ])
  })

  it("a modified read that a later read of another part of its file follows is no latest read: not kept, not counted", () => {
    // r1 is modified by e, then r2 reads other lines: r1 goes (modified) and, pinned or not, is not one of the newest
    // keepRecent; the results after b are e, r2 and o, so keepRecent 4 keeps b and keepRecent 3 does not
    const messages = [
      user("go"),
      ...step([call("b", "bash", { command: "ls" })], [result("b", big("b"))]),
      ...step([read("r1", "/hot.ts", { offset: 1, limit: 10 })], [result("r1", big("r1"))]),
      ...step([call("e", "edit", { path: "/hot.ts" })], [result("e", "ok")]),
      ...step([read("r2", "/hot.ts", { offset: 20, limit: 10 })], [result("r2", big("r2"))]),
      ...step([call("o", "bash", { command: "pwd" })], [result("o", big("o"))])
    ]
    for (const options of [{ minSavings: 0 }, { pinned: (p: string) => p === "/hot.ts", minSavings: 0 }]) {
      const offloaded = (keep: number) =>
        evictStaleToolResults(messages, keep, options).offloaded.map((o) => o.toolUseId)
      assert.deepStrictEqual(offloaded(4), ["r1"])
      assert.deepStrictEqual(offloaded(3), ["b", "r1"])
    }
  })

  it("with minSavings, a smaller saving changes nothing (DEFAULT_MIN_SAVINGS, 2,000, as the fixed threshold)", () => {
    assert.strictEqual(DEFAULT_MIN_SAVINGS, 2_000)
    const messages = [
      user("go"),
      ...step([call("b1", "bash", { command: "ls" })], [result("b1", big("x"))]),
      ...step([call("b2", "bash", { command: "ls" })], [result("b2", "short")])
    ]
    const eager = evictStaleToolResults(messages, 0, { minSavings: 0 })
    assert.isAbove(eager.tokensFreed, 0)
    assert.isBelow(eager.tokensFreed, DEFAULT_MIN_SAVINGS)
    assert.strictEqual(evictStaleToolResults(messages, 0, { minSavings: DEFAULT_MIN_SAVINGS }).messages, messages)
  })

  it("without minSavings, rent-or-buy: offloads once the reads paid reach the cost of rewriting behind the change", () => {
    // one stale result, then `n` more requests (replies) each carrying it in the prompt, and a tail behind it
    const session = (n: number) => [
      user("go"),
      ...step([call("b0", "bash", { command: "ls" })], [result("b0", big("x"))]),
      ...Array.from({ length: n }, (_, i) => step([call(`t${i}`, "bash", { command: "pwd" })], [result(`t${i}`, "ok")]))
        .flat()
    ]
    const decide = (n: number) => {
      const messages = session(n)
      const eager = evictStaleToolResults(messages, 0, { minSavings: 0 })
      const firstChange = eager.offloaded[0]!.messageIndex
      const behind = estimateTokens(eager.messages.slice(firstChange))
      const replies = messages.slice(firstChange).filter((m) => m.role === "assistant").length
      const paid = eager.tokensFreed * replies * cachePrices("5m").cacheRead
      return { messages, eager, pays: paid >= behind * cachePrices("5m").cacheWrite }
    }
    let sawWait = false
    let sawBuy = false
    for (const n of [0, 1, 2, 5, 10, 20, 40]) {
      const { eager, messages, pays } = decide(n)
      const rented = evictStaleToolResults(messages, 0)
      if (pays) {
        sawBuy = true
        assert.deepStrictEqual(rented, eager, `n=${n}: the reads paid reach the rewrite: offload`)
      } else {
        sawWait = true
        assert.strictEqual(rented.messages, messages, `n=${n}: not yet`)
        assert.deepStrictEqual(evictStaleToolResults(messages, 0, { cacheCold: true }), eager, "cold: at once")
      }
    }
    assert.isTrue(sawWait && sawBuy, "both decisions are exercised")
  })

  it.prop(
    "the rent-or-buy default either changes nothing or offloads what minSavings 0 offloads; a cold cache offloads it",
    [conversationArbitrary(), Arbitrary.schema(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 6 })))],
    ([messages, keepRecent]) => {
      const eager = evictStaleToolResults(messages, keepRecent, { minSavings: 0 })
      const rented = evictStaleToolResults(messages, keepRecent)
      if (rented.messages !== messages) assert.deepStrictEqual(rented, eager)
      if (eager.tokensFreed > 0) {
        assert.deepStrictEqual(evictStaleToolResults(messages, keepRecent, { cacheCold: true }), eager)
      }
    },
    { arbitrary: { runs: 1000 } }
  )

  it("returns the same array when the saving is below minSavings or nothing changes", () => {
    const messages = [
      user("go"),
      ...step([call("b1", "bash", { command: "ls" })], [result("b1", big("x"))]),
      ...step([call("b2", "bash", { command: "ls" })], [result("b2", "short")])
    ]
    const full = evictStaleToolResults(messages, 0, { minSavings: 0 })
    assert.deepStrictEqual(full.offloaded.map((o) => o.toolUseId), ["b1"]) // "short" is smaller than any pointer
    assert.strictEqual(evictStaleToolResults(messages, 0, { minSavings: full.tokensFreed + 1 }).messages, messages)
    assert.notStrictEqual(evictStaleToolResults(messages, 0, { minSavings: full.tokensFreed }).messages, messages)
    assert.strictEqual(evictStaleToolResults(messages, 5, { minSavings: 0 }).messages, messages)
    assert.strictEqual(evictStaleToolResults(full.messages, 0, { minSavings: 0 }).messages, full.messages)
  })

  it("leaves results without a preceding tool_use and legacy placeholders alone", () => {
    const messages = [
      user("go"),
      { role: "user", content: [result("orphan", big("o"))] } as Message,
      ...step([call("b1", "bash", { command: "ls" })], [result("b1", OMITTED_TOOL_RESULT)]),
      ...step([call("b2", "bash", { command: "ls" })], [result("b2", big("x"))])
    ]
    assert.deepStrictEqual(evictStaleToolResults(messages, 0, { minSavings: 0 }).offloaded.map((o) => o.toolUseId), [
      "b2"
    ])
  })

  it("pairs results only from user messages: a tool_result block in a system message never shifts the pairing", () => {
    const messages = [
      user("go"),
      ...step([read("r1", "/a.ts")], [result("r1", big("a"))]),
      { role: "system", content: [result("b0", "stray")] } as Message,
      ...step([call("b1", "bash", { command: "ls" })], [result("b1", big("ls"))]),
      ...step([call("b2", "bash", { command: "pwd" })], [result("b2", "ok")])
    ]
    const refs = new Map(
      evictStaleToolResults(messages, 1, { minSavings: 0 }).offloaded.map((o) => [o.toolUseId, o.ref])
    )
    assert.strictEqual(refs.get("r1")?._tag, "Read")
    assert.strictEqual(refs.get("b1")?._tag, "Output")
    assert.isFalse(refs.has("b0"))
  })

  it("uses a custom classifier", () => {
    const messages = [
      user("go"),
      ...step([call("c1", "cat", { file: "/a" })], [result("c1", big("1"))]),
      ...step([call("c2", "cat", { file: "/a" })], [result("c2", big("2"))])
    ]
    const classifier: EvictOptions["classifier"] = (u) =>
      u.name === "cat" ? { _tag: "Read", path: String((u.input as { file: string }).file) } : { _tag: "Other" }
    assert.deepStrictEqual(
      evictStaleToolResults(messages, 5, { classifier, minSavings: 0 }).offloaded.map((o) => o.toolUseId),
      ["c1"]
    )
    assert.deepStrictEqual(evictStaleToolResults(messages, 5, { minSavings: 0 }).offloaded, [])
  })
})

// ============================================================================
// Properties
// ============================================================================

const pinnedFile = (p: string) => p === "/repo/file1.ts" || p === "/home/dev/project/src/the_0.ts"

const checkInvariants = (messages: ReadonlyArray<Message>, keepRecent: number, minSavings: number) => {
  const options: EvictOptions = { pinned: pinnedFile, minSavings }
  const out = evictStaleToolResults(messages, keepRecent, options)
  // shape: same messages, same blocks, same ids; only tool_result content changes
  assert.strictEqual(out.messages.length, messages.length)
  for (let i = 0; i < messages.length; i++) {
    const a = messages[i]!
    const b = out.messages[i]!
    if (a === b) continue
    assert.strictEqual(a.role, b.role)
    const ac = a.content as ReadonlyArray<ContentBlock>
    const bc = b.content as ReadonlyArray<ContentBlock>
    assert.strictEqual(bc.length, ac.length)
    for (let j = 0; j < ac.length; j++) {
      if (ac[j] === bc[j]) continue
      const x = ac[j] as ToolResultBlock
      const y = bc[j] as ToolResultBlock
      assert.deepStrictEqual({ ...y, content: x.content } as ToolResultBlock, x)
      assert.isTrue(isOffloaded(y))
    }
  }
  // the entries describe exactly the changed blocks
  for (const o of out.offloaded) {
    assert.strictEqual((out.messages[o.messageIndex]!.content as ReadonlyArray<ContentBlock>)[o.blockIndex], o.block)
    assert.strictEqual(o.block.tool_use_id, o.toolUseId)
    assert.isAbove(o.tokensFreed, 0)
  }
  const before = offloadedPositions(messages)
  const after = offloadedPositions(out.messages)
  assert.strictEqual(after.size, before.size + out.offloaded.length)
  // the window, errors and pinned latest reads survive; eager ones are the only recent losses
  const { info, window } = oracle(messages, keepRecent, pinnedFile)
  const gone = new Set(out.offloaded.map((o) => `${o.messageIndex}:${o.blockIndex}`))
  for (const r of info) {
    const at = `${r.i}:${r.j}`
    if (!gone.has(at)) {
      // an error goes only when a later read or write made it stale (issue 11, case 6)
      const shouldGo = !before.has(at) &&
        (r.eager || (r.block.is_error !== true && !window.has(at) && !r.pinnedLatest))
      // kept despite the rule only when the pointer would not be smaller (or minSavings vetoed all)
      if (shouldGo && out.messages !== messages) {
        assert.isAtMost(estimateMessageTokensUncached({ role: "user", content: [r.block] }), 220)
      }
      continue
    }
    assert.isTrue(r.eager || !window.has(at), "a window result was offloaded")
    assert.isTrue(r.eager || r.block.is_error !== true, "an error no later read or write made stale was offloaded")
    assert.isFalse(r.pinnedLatest && !r.superseded, "a pinned latest read was offloaded")
  }
  // savings
  assert.strictEqual(estimateTokens(out.messages), estimateTokens(messages) - out.tokensFreed)
  assert.isAtLeast(out.tokensFreed, 0)
  if (out.messages !== messages) assert.isAtLeast(out.tokensFreed, minSavings)
  else assert.strictEqual(out.offloaded.length, 0)
  // idempotent and deterministic
  const again = evictStaleToolResults(out.messages, keepRecent, options)
  assert.strictEqual(again.messages, out.messages)
  assert.deepStrictEqual(evictStaleToolResults(messages, keepRecent, options), out)
  return out
}

describe("evictStaleToolResults properties", () => {
  it.prop(
    "generated conversations: structure, window, errors, pins, savings, idempotence, minSavings",
    [
      conversationArbitrary({ allowInvalid: true }),
      Arbitrary.schema(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 8 }))),
      Arbitrary.schema(Schema.Literals([0, 50, 2000]))
    ],
    ([messages, keepRecent, minSavings]) => {
      const snapshot = JSON.stringify(messages)
      checkInvariants(messages, keepRecent, minSavings)
      assert.strictEqual(JSON.stringify(messages), snapshot)
    },
    { arbitrary: { runs: 1500 } }
  )

  it.prop(
    "pointers and superseded decisions survive a prefix cut and a prepended summary",
    [
      conversationArbitrary(),
      Arbitrary.schema(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 6 }))),
      Arbitrary.schema(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 1000 })))
    ],
    ([messages, keepRecent, cutSeed]) => {
      const full = evictStaleToolResults(messages, keepRecent, { minSavings: 0 })
      const summarized = evictStaleToolResults([user("summary"), ...messages], keepRecent, { minSavings: 0 })
      assert.deepStrictEqual(summarized.offloaded.map((o) => o.block), full.offloaded.map((o) => o.block))
      // cut at a user message that is not a tool_result message, so no pair is split
      const cuts = messages.flatMap((m, i) => m.role === "user" && typeof m.content === "string" ? [i] : [])
      if (cuts.length === 0) return
      const cut = cuts[cutSeed % cuts.length]!
      const tail = evictStaleToolResults(messages.slice(cut), keepRecent, { minSavings: 0 })
      const supersededIn = (o: typeof full.offloaded) =>
        o.filter((x) => x.reason === "superseded").map((x) => x.toolUseId)
      const tailIds = new Set(resultsOf(messages.slice(cut)).map((r) => r.block.tool_use_id))
      assert.deepStrictEqual(
        supersededIn(tail.offloaded),
        supersededIn(full.offloaded).filter((id) => tailIds.has(id))
      )
    },
    { arbitrary: { runs: 1000 } }
  )

  it("realistic generated sessions of 50 to 2,000 messages keep every invariant at keepRecent 0, 3, 5, 10", () => {
    for (const [seed, size] of [[1, 50], [2, 200], [3, 600], [4, 2000]] as const) {
      const messages = generateSession(seed, { messages: size })
      for (const keep of [0, 3, 5, 10]) {
        const out = checkInvariants(messages, keep, 0)
        assert.isAbove(out.offloaded.length, 0)
      }
    }
  })
})

// ============================================================================
// Corpus
// ============================================================================

describe("evictStaleToolResults on the real sessions", () => {
  it("frees tokens, keeps every pair, and finds the redundant reads", () => {
    const rows: Array<string> = []
    for (const session of corpus()) {
      const before = estimateTokens(session.messages)
      const cells: Array<string> = []
      for (const keep of [3, 5, 10]) {
        const out = checkInvariants(session.messages, keep, 0)
        const superseded = out.offloaded.filter((o) => o.reason === "superseded").length
        const modified = out.offloaded.filter((o) => o.reason === "modified").length
        cells.push(`k=${keep}: ${before}→${before - out.tokensFreed} (${superseded} superseded, ${modified} modified)`)
        if (session.name === "pi__before-compaction") {
          assert.isAbove(superseded, 40)
          assert.isBelow(before - out.tokensFreed, before * 0.6)
        }
      }
      rows.push(`${session.name}: ${cells.join("; ")}`)
    }
    console.log(`eviction on the corpus (estimated tokens before→after):\n${rows.join("\n")}`)
  })
})
