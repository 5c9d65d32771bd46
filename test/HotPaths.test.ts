import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, Schema } from "effect"
import { evictStaleToolResults } from "../src/Evict.ts"
import { formatOffloadRef, isOffloaded, OMITTED_TOOL_RESULT } from "../src/Offload.ts"
import type { Offloaded, OffloadReason } from "../src/Offload.ts"
import { HotPaths } from "../src/HotPaths.ts"
import type { ContentBlock, Message, ToolResultBlock, ToolUseBlock } from "../src/Message.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { defaultToolClassifier } from "../src/Tools.ts"
import { conversationArbitrary, generateSession } from "./fixtures/Conversation.ts"
import { corpus } from "./fixtures/Corpus.ts"
import { CopyingHotPaths } from "./fixtures/HotPathsReference.ts"
import { isToolResult, isToolUse } from "../src/internal/blocks.ts"
import { covers, type LineRange } from "../src/internal/toolInput.ts"

const big = (tag: string) => `${tag} ${"x".repeat(4000)}`
const read = (id: string, path: string, extra: Record<string, unknown> = {}): ToolUseBlock => ({
  type: "tool_use",
  id,
  name: "read",
  input: { path, ...extra }
})
const bash = (id: string): ToolUseBlock => ({ type: "tool_use", id, name: "bash", input: { command: `run ${id}` } })
const result = (id: string, content: string, isError = false): ToolResultBlock =>
  isError
    ? { type: "tool_result", tool_use_id: id, content, is_error: true }
    : { type: "tool_result", tool_use_id: id, content }
const step = (call: ToolUseBlock, res: ToolResultBlock): Array<Message> => [
  { role: "assistant", content: [call] },
  { role: "user", content: [res] }
]
const pointer = (id: string, path: string, reason: OffloadReason) =>
  formatOffloadRef({ _tag: "Read", tool: "read", toolUseId: id, path, reason, tokens: 1000, images: 0 })

describe("HotPaths rule", () => {
  it("marks a path hot at a covering re-read whose previous read is a stale or modified pointer", () => {
    for (const reason of ["stale", "modified"] as const) {
      const messages = [
        ...step(read("r1", "/a.ts"), result("r1", pointer("r1", "/a.ts", reason))),
        ...step(read("r2", "/a.ts"), result("r2", "body"))
      ]
      const hot = HotPaths.fromMessages(messages)
      assert.deepStrictEqual(hot.paths, ["/a.ts"])
      assert.isTrue(hot.pinned("/a.ts"))
      assert.isFalse(hot.pinned("/b.ts"))
    }
    const legacy = [
      ...step(read("r1", "/a.ts"), result("r1", OMITTED_TOOL_RESULT)),
      ...step(read("r2", "/a.ts"), result("r2", "x"))
    ]
    assert.deepStrictEqual(HotPaths.fromMessages(legacy).paths, ["/a.ts"])
  })

  it("does not count a superseded pointer, a partial re-read, a failed re-read, or a live previous read", () => {
    const cases: ReadonlyArray<Array<Message>> = [
      [
        ...step(read("r1", "/a.ts"), result("r1", pointer("r1", "/a.ts", "superseded"))),
        ...step(read("r2", "/a.ts"), result("r2", "x"))
      ],
      [
        ...step(read("r1", "/a.ts"), result("r1", pointer("r1", "/a.ts", "stale"))),
        ...step(read("r2", "/a.ts", { offset: 5, limit: 10 }), result("r2", "x"))
      ],
      [
        ...step(read("r1", "/a.ts"), result("r1", pointer("r1", "/a.ts", "stale"))),
        ...step(read("r2", "/a.ts"), result("r2", "ENOENT", true))
      ],
      [...step(read("r1", "/a.ts"), result("r1", "live")), ...step(read("r2", "/a.ts"), result("r2", "x"))]
    ]
    for (const messages of cases) assert.deepStrictEqual(HotPaths.fromMessages(messages).paths, [])
  })

  it("is immutable: observe and observeOffloads return new values and leave the old one unchanged", () => {
    const first = step(read("r1", "/a.ts"), result("r1", big("a")))
    const empty = HotPaths.empty()
    const seen = empty.observe(first)
    assert.notStrictEqual(seen, empty)
    assert.strictEqual(seen.observe([]), seen)
    const out = evictStaleToolResults([{ role: "user", content: "go" }, ...first], 0, { minSavings: 0 })
    const offloaded = seen.observeOffloads(out.offloaded)
    assert.notStrictEqual(offloaded, seen)
    const reread = step(read("r2", "/a.ts"), result("r2", big("a")))
    assert.deepStrictEqual(offloaded.observe(reread).paths, ["/a.ts"])
    assert.deepStrictEqual(seen.observe(reread).paths, [])
    assert.deepStrictEqual(offloaded.paths, [])
  })
})

// ============================================================================
// Live replay
// ============================================================================

interface Replay {
  readonly view: ReadonlyArray<Message>
  readonly hot: HotPaths
  /** The model's reads of a path whose previous successful read was offloaded when it made the call. */
  readonly rereadsAfterOffload: number
  /** Estimated tokens of every request's prompt, summed. */
  readonly tokensSent: number
  /** Those of them whose range covers the offloaded read's range (the model re-reads what it lost). */
  readonly coveringRereads: number
  /** For each re-read after offload, the path. */
  readonly thrashed: ReadonlyArray<string>
  /**
   * Input cost in base-input-token units under Anthropic's prompt cache: each request reads the prefix it shares with
   * the previous request at 0.1× and writes the rest at 1.25×.
   */
  readonly cacheCost: number
  /** Requests whose prompt changed before its last appended message (an eviction rewrote the cached prefix). */
  readonly cacheBreaks: number
}

/**
 * Replays a recorded session as an agent loop would: before each assistant reply, evict (keeping earlier pointers,
 * as a session log does), then append the reply and the results. `keepRecent` undefined: never evict. Counts the model's reads that hit an offloaded copy.
 */
const replay = (
  messages: ReadonlyArray<Message>,
  keepRecent: number | undefined,
  pin: boolean,
  minSavings = 0
): Replay => {
  let view: Array<Message> = []
  let sent: ReadonlyArray<Message> = []
  let cacheCost = 0
  let cacheBreaks = 0
  let hot = HotPaths.empty()
  let rereads = 0
  let tokensSent = 0
  const thrashed: Array<string> = []
  let covering = 0
  const lastRead = new Map<string, { i: number; j: number; range: LineRange | undefined }>()
  const uses = new Map<string, ToolUseBlock>()
  for (const message of messages) {
    if (message.role === "assistant") {
      if (keepRecent !== undefined) {
        const out = evictStaleToolResults(view, keepRecent, pin ? { pinned: hot.pinned, minSavings } : { minSavings })
        view = out.messages
        hot = hot.observeOffloads(out.offloaded)
      }
      tokensSent += estimateTokens(view)
      let shared = 0
      while (shared < sent.length && view[shared] === sent[shared]) shared++
      if (shared < sent.length) cacheBreaks++
      const cached = estimateTokens(view.slice(0, shared))
      cacheCost += 0.1 * cached + 1.25 * (estimateTokens(view) - cached)
      sent = view
      if (typeof message.content !== "string") {
        for (const block of message.content) {
          if (!isToolUse(block)) continue
          const action = defaultToolClassifier(block)
          if (action._tag !== "Read") continue
          const at = lastRead.get(action.path)
          if (at === undefined) continue
          const previous = (view[at.i]!.content as ReadonlyArray<ContentBlock>)[at.j]!
          if (isOffloaded(previous)) {
            rereads++
            if (covers(action.range, at.range)) covering++
            thrashed.push(action.path)
          }
        }
      }
    }
    view = [...view, message]
    hot = hot.observe([message])
    if (typeof message.content === "string") continue
    if (message.role === "assistant") {
      for (const block of message.content) if (isToolUse(block)) uses.set(block.id, block)
    } else {
      message.content.forEach((block, j) => {
        if (!isToolResult(block) || block.is_error === true) return
        const use = uses.get(block.tool_use_id)
        const action = use === undefined ? undefined : defaultToolClassifier(use)
        if (action?._tag === "Read") lastRead.set(action.path, { i: view.length - 1, j, range: action.range })
      })
    }
  }
  return {
    view,
    hot,
    rereadsAfterOffload: rereads,
    coveringRereads: covering,
    tokensSent,
    thrashed,
    cacheCost,
    cacheBreaks
  }
}

describe("HotPaths against thrash", () => {
  it("after one re-read of an offloaded file, the file is not offloaded again", () => {
    const session: Array<Message> = [{ role: "user", content: "fix it" }]
    session.push(...step(read("r1", "/hot.ts"), result("r1", big("v1"))))
    for (let k = 0; k < 4; k++) session.push(...step(bash(`a${k}`), result(`a${k}`, big("log"))))
    session.push(...step(read("r2", "/hot.ts"), result("r2", big("v1")))) // thrash: r1 was offloaded
    for (let k = 0; k < 4; k++) session.push(...step(bash(`b${k}`), result(`b${k}`, big("log"))))
    session.push(...step(read("r3", "/hot.ts"), result("r3", big("v1"))))
    session.push({ role: "assistant", content: "done" })
    const plain = replay(session, 2, false)
    const pinned = replay(session, 2, true)
    assert.deepStrictEqual(plain.thrashed, ["/hot.ts", "/hot.ts"])
    assert.deepStrictEqual(pinned.thrashed, ["/hot.ts"])
    assert.strictEqual(pinned.coveringRereads, 1)
    assert.deepStrictEqual(pinned.hot.paths, ["/hot.ts"])
    // r2 stayed live until r3 superseded it; then it was deduplicated
    const r2 = pinned.view.flatMap((m) => typeof m.content === "string" ? [] : m.content).find((b) =>
      isToolResult(b) && b.tool_use_id === "r2"
    )!
    assert.include((r2 as ToolResultBlock).content as string, "reason=superseded")
  })

  it.prop(
    "fromMessages on the live view equals the tracker fed live, on generated conversations",
    [
      conversationArbitrary(),
      Arbitrary.schema(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 4 }))),
      Arbitrary.schema(Schema.Boolean)
    ],
    ([messages, keepRecent, pin]) => {
      const live = replay(messages, keepRecent, pin)
      assert.deepStrictEqual([...HotPaths.fromMessages(live.view).paths].sort(), [...live.hot.paths].sort())
    },
    { arbitrary: { runs: 400 } }
  )

  it("fromMessages on the live view equals the tracker fed live, on realistic sessions", () => {
    for (const seed of [1, 2, 3]) {
      const live = replay(generateSession(seed, { messages: 300 }), 3, true)
      assert.isAbove(live.hot.paths.length, 0)
      assert.deepStrictEqual([...HotPaths.fromMessages(live.view).paths].sort(), [...live.hot.paths].sort())
    }
  })

  it("pi__before-compaction: pinning hot paths cuts the re-reads that hit an offloaded copy", () => {
    const session = corpus().find((s) => s.name === "pi__before-compaction")
    assert.isDefined(session)
    const rows: Array<string> = []
    const original = replay(session!.messages, undefined, false)
    for (const keep of [3, 5, 10]) {
      const plain = replay(session!.messages, keep, false)
      const pinned = replay(session!.messages, keep, true)
      assert.isBelow(pinned.rereadsAfterOffload, plain.rereadsAfterOffload)
      // once hot, a path's latest read is never offloaded: only the re-read that made it hot hits an offloaded copy
      assert.strictEqual(pinned.coveringRereads, pinned.hot.paths.length)
      assert.deepStrictEqual([...HotPaths.fromMessages(pinned.view).paths].sort(), [...pinned.hot.paths].sort())
      rows.push(
        `keepRecent ${keep}: re-reads after offload ${plain.rereadsAfterOffload} → ${pinned.rereadsAfterOffload} ` +
          `with HotPaths, of which covering ${plain.coveringRereads} → ${pinned.coveringRereads} ` +
          `(${pinned.hot.paths.length} hot paths); prompt tokens summed over requests ` +
          `${original.tokensSent} unevicted, ${plain.tokensSent} evicted, ${pinned.tokensSent} evicted+pinned`
      )
    }
    console.log(`thrash replay, pi__before-compaction:\n${rows.join("\n")}`)
  })

  it("pi__before-compaction: minSavings trades cache breaks against tokens sent", () => {
    const session = corpus().find((s) => s.name === "pi__before-compaction")!
    const original = replay(session.messages, undefined, false)
    const rows = [`no eviction: cache cost ${Math.round(original.cacheCost)}, ${original.cacheBreaks} cache breaks`]
    const costs: Array<number> = []
    for (const minSavings of [0, 2_000, 10_000, 30_000]) {
      const r = replay(session.messages, 5, true, minSavings)
      costs.push(r.cacheCost)
      rows.push(
        `keepRecent 5 + HotPaths, minSavings ${minSavings}: cache cost ${Math.round(r.cacheCost)} ` +
          `(${(r.cacheCost / original.cacheCost).toFixed(3)}× of no eviction), ${r.cacheBreaks} cache breaks, ` +
          `${r.tokensSent} tokens sent`
      )
    }
    const unpinned = replay(session.messages, 5, false, 2_000)
    rows.push(
      `keepRecent 5 without HotPaths, minSavings 2000: cache cost ${Math.round(unpinned.cacheCost)} ` +
        `(${(unpinned.cacheCost / original.cacheCost).toFixed(3)}×), ${unpinned.cacheBreaks} cache breaks, ` +
        `${unpinned.tokensSent} tokens sent, ${unpinned.rereadsAfterOffload} re-reads after offload`
    )
    console.log(`cache-aware replay, pi__before-compaction:\n${rows.join("\n")}`)
    assert.strictEqual(original.cacheBreaks, 0)
    assert.isBelow(Math.min(...costs.slice(1)), costs[0]!)
  })
})

// ============================================================================
// The persistent implementation against the copying one (test/fixtures/HotPathsReference.ts)
// ============================================================================

const Small = (max: number) => Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: max }))
/** One call of a step: a read (or another tool) and, usually, its result under its own id. */
const CallScript = Schema.Struct({
  id: Small(4),
  tool: Schema.Literals(["read", "read", "Read", "bash"]), // a literal repeated weighs more
  path: Small(2),
  range: Small(3),
  content: Schema.Literals(["body", "legacy", "stale", "modified", "superseded"]),
  /** 0: an error result. */
  error: Small(3),
  /** 0: no result, 1: a result for another id, else a result for this call. */
  answer: Small(4)
})
/** Off-pattern input: tool blocks in the wrong role, plain text, results that answer nothing. */
const NoiseScript = Schema.Struct({
  role: Schema.Literals(["assistant", "user"]),
  text: Schema.Boolean,
  call: CallScript
})
const OffloadScript = Schema.Struct({
  /** Above 0: names the path's previous read (when it has one), else a random id. */
  previous: Small(3),
  id: Small(4),
  path: Small(2),
  /** 0: an `Output` ref. */
  read: Small(3),
  reason: Schema.Literals(["stale", "modified", "superseded"])
})
const OpScript = Schema.Struct({
  /** Which value of the pool to derive from, counted back from the newest: 0 extends the newest, others branch. */
  from: Small(5),
  kind: Schema.Literals(["step", "step", "step", "offloads", "noise"]),
  /** A step's reply and results observed in one call, or one call each. */
  split: Schema.Boolean,
  calls: Schema.Array(CallScript).check(Schema.isMinLength(1), Schema.isMaxLength(3)),
  noise: Schema.Array(NoiseScript).check(Schema.isMaxLength(2)),
  entries: Schema.Array(OffloadScript).check(Schema.isMaxLength(3))
})

const PATHS = ["/a.ts", "/b.ts", "/c.ts"]
const RANGES: ReadonlyArray<Record<string, unknown>> = [{}, { offset: 1, limit: 10 }, { offset: 5, limit: 3 }, {
  offset: 1,
  limit: 100
}]

const useOf = (c: typeof CallScript.Type): ToolUseBlock => {
  const path = PATHS[c.path]!
  const input = c.tool === "bash"
    ? { command: "ls" }
    : c.tool === "Read"
    ? { file_path: path, ...RANGES[c.range] }
    : { path, ...RANGES[c.range] }
  return { type: "tool_use", id: `t${c.id}`, name: c.tool, input }
}

const resultOf = (c: typeof CallScript.Type): ToolResultBlock => {
  const id = c.answer === 1 ? `t${(c.id + 1) % 5}` : `t${c.id}`
  const content = c.content === "body"
    ? "text"
    : c.content === "legacy"
    ? OMITTED_TOOL_RESULT
    : pointer(id, PATHS[c.path]!, c.content)
  return result(id, content, c.error === 0)
}

/** The messages of an op, as one or more `observe` calls. */
const batchesOf = (op: typeof OpScript.Type): ReadonlyArray<ReadonlyArray<Message>> => {
  if (op.kind === "noise") {
    return [
      op.noise.map((n): Message =>
        n.text
          ? { role: n.role, content: "plain" }
          : { role: n.role, content: [{ type: "text", text: "note" }, useOf(n.call), resultOf(n.call)] }
      )
    ]
  }
  const reply: Message = { role: "assistant", content: op.calls.map(useOf) }
  const results: Message = { role: "user", content: op.calls.filter((c) => c.answer > 0).map(resultOf) }
  return op.split ? [[reply], [results]] : [[reply, results]]
}

const offloadsOf = (
  op: typeof OpScript.Type,
  reference: CopyingHotPaths
): ReadonlyArray<Pick<Offloaded, "toolUseId" | "reason" | "ref">> =>
  op.entries.map((e) => {
    const path = PATHS[e.path]!
    const toolUseId = e.previous > 0 ? reference.previousReadId(path) ?? `t${e.id}` : `t${e.id}`
    return {
      toolUseId,
      reason: e.reason,
      ref: e.read > 0
        ? { _tag: "Read", tool: "read", toolUseId, path, reason: e.reason, tokens: 1, images: 0 }
        : { _tag: "Output", tool: "bash", toolUseId, input: "ls", reason: e.reason, tokens: 1, images: 0 }
    }
  })

describe("HotPaths persistent state", () => {
  it.prop(
    "equals the copying tracker over random observe/observeOffloads sequences, branches included",
    [Arbitrary.schema(Schema.Array(OpScript).check(Schema.isMinLength(8), Schema.isMaxLength(20)))],
    ([ops]) => {
      const pool: Array<readonly [HotPaths, CopyingHotPaths]> = [[HotPaths.empty(), CopyingHotPaths.empty()]]
      for (const op of ops) {
        let [hot, ref] = pool[pool.length - 1 - (op.from % pool.length)]!
        for (const batch of op.kind === "offloads" ? [] : batchesOf(op)) {
          const [h, r] = [hot.observe(batch), ref.observe(batch)]
          assert.strictEqual(h === hot, r === ref, "observe returns this exactly when the reference does")
          ;[hot, ref] = [h, r]
        }
        if (op.kind === "offloads") {
          const entries = offloadsOf(op, ref)
          const [h, r] = [hot.observeOffloads(entries), ref.observeOffloads(entries)]
          assert.strictEqual(h === hot, r === ref, "observeOffloads returns this exactly when the reference does")
          ;[hot, ref] = [h, r]
        }
        pool.push([hot, ref])
        // every value, the older ones and the other branches included, answers as its reference does
        for (const [h, r] of pool) {
          assert.deepStrictEqual(h.paths, r.paths)
          for (const path of [...PATHS, "/none.ts"]) assert.strictEqual(h.pinned(path), r.pinned(path))
        }
      }
    },
    { arbitrary: { runs: 2500 } } // per runtime: fast-check draws new cases in each, 5,000 per CI run
  )

  /** A snapshot as a log stores and reads it: through JSON text. */
  const throughJson = (hot: HotPaths) => HotPaths.fromSnapshot(JSON.parse(JSON.stringify(hot.toSnapshot())))
  /** A snapshot's content, independent of the order its maps iterate in. */
  const sortedSnapshot = (hot: HotPaths) => {
    const { hot: paths, pending, previous } = hot.toSnapshot()
    return { paths, previous: [...previous].map(String).sort(), pending: [...pending].map(String).sort() }
  }

  it.prop(
    "a tracker restored from its JSON snapshot at any step goes on exactly as the reference",
    [Arbitrary.schema(Schema.Array(OpScript).check(Schema.isMinLength(8), Schema.isMaxLength(20)))],
    ([ops]) => {
      let hot = HotPaths.empty()
      let ref = CopyingHotPaths.empty()
      for (const op of ops) {
        // every step goes on from a restored copy, so each later answer depends on what the snapshot kept
        const restored = throughJson(hot)
        assert.isDefined(restored)
        assert.deepStrictEqual(sortedSnapshot(restored!), sortedSnapshot(hot))
        hot = restored!
        for (const batch of op.kind === "offloads" ? [] : batchesOf(op)) {
          hot = hot.observe(batch)
          ref = ref.observe(batch)
        }
        if (op.kind === "offloads") {
          const entries = offloadsOf(op, ref)
          hot = hot.observeOffloads(entries)
          ref = ref.observeOffloads(entries)
        }
        assert.deepStrictEqual(hot.paths, ref.paths)
        for (const path of [...PATHS, "/none.ts"]) assert.strictEqual(hot.pinned(path), ref.pinned(path))
      }
    },
    { arbitrary: { runs: 2500 } }
  )

  it("fromSnapshot refuses what is not a snapshot, and keeps the classifier it is given", () => {
    const bad: ReadonlyArray<unknown> = [
      undefined,
      null,
      [],
      "x",
      { hot: [], previous: [] },
      { hot: [1], previous: [], pending: [] },
      { hot: [], previous: [["/a.ts", "t1", 2]], pending: [] },
      { hot: [], previous: [["/a.ts", "t1", 1, "5"]], pending: [] },
      { hot: [], previous: [["/a.ts", "t1", 1, 1, 2, 3]], pending: [] },
      { hot: [], previous: [], pending: [["t1"]] },
      { hot: [], previous: [], pending: [["t1", "/a.ts", Infinity]] }
    ]
    for (const u of bad) assert.isUndefined(HotPaths.fromSnapshot(u), JSON.stringify(u))
    const snapshot: ReturnType<HotPaths["toSnapshot"]> = {
      hot: ["/a.ts"],
      previous: [["/b.ts", "t1", 1, 1, 10]],
      pending: [["t2", "/b.ts"]]
    }
    const restored = HotPaths.fromSnapshot(snapshot)!
    assert.deepStrictEqual(restored.paths, ["/a.ts"])
    assert.deepStrictEqual(restored.toSnapshot(), snapshot)
    // the open call t2 (a whole-file read of /b.ts) answered: it covers lines 1-10, offloaded, so /b.ts becomes hot
    assert.deepStrictEqual(
      restored.observe([result("t2", "body")].map((b) => ({ role: "user", content: [b] }))).paths,
      [
        "/a.ts",
        "/b.ts"
      ]
    )
    // a classifier that reads nothing: no call of a restored tracker is a read
    const blind = HotPaths.fromSnapshot(snapshot, () => ({ _tag: "Other" }) as never)!
    const call: Message = { role: "assistant", content: [read("t3", "/b.ts")] }
    assert.deepStrictEqual(blind.observe([call, { role: "user", content: [result("t3", "x")] }]).paths, ["/a.ts"])
  })
})
