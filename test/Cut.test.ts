import { assert, describe, it } from "@effect/vitest"
import { Option, Schema } from "effect"
import { type CutPlan, type CutPolicy, planForPolicy, safeCut, type Split, splitKeepingTurns } from "../src/Cut.ts"
import type { ContentBlock, Message } from "../src/Message.ts"
import { CompactionPolicy, defaultPolicy } from "../src/Policy.ts"
import { estimateMessageTokens, estimateTokens } from "../src/Tokens.ts"
import { countTurns, isHumanMessage, turnStarts } from "../src/Turns.ts"
import { validate, type Violation } from "../src/Validate.ts"
import { conversationArbitrary, generateSession } from "./fixtures/Conversation.ts"
import { corpus } from "./fixtures/Corpus.ts"
import { apiViewStart } from "../src/internal/apiView.ts"
import { forEachToolPair, hasOrphans } from "../src/internal/validate.ts"

const user = (text: string): Message => ({ role: "user", content: text })
const assistant = (text: string): Message => ({ role: "assistant", content: [{ type: "text", text }] })
const call = (...ids: Array<string>): Message => ({
  role: "assistant",
  content: ids.map((id) => ({ type: "tool_use", id, name: "bash", input: {} }))
})
const result = (id: string, size = 2): ContentBlock => ({
  type: "tool_result",
  tool_use_id: id,
  content: "x".repeat(size)
})
const results = (...ids: Array<string>): Message => ({ role: "user", content: ids.map((id) => result(id)) })

/** Orphaned results as `messageIndex:blockIndex:id`, shifted by `offset` (so a slice can be compared to its source). */
const orphans = (messages: ReadonlyArray<Message>, offset = 0): Set<string> =>
  new Set(
    validate(messages)
      .filter((v): v is Extract<Violation, { _tag: "OrphanedToolResult" }> => v._tag === "OrphanedToolResult")
      .map((v) => `${v.messageIndex + offset}:${v.blockIndex}:${v.toolUseId}`)
  )

/** Deletes messages (by seed) so that some results lose their call: inputs with orphans of their own. */
const Deletions = Schema.Array(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 10_000 }))).check(
  Schema.isMaxLength(3)
)
const deleteAt = (messages: ReadonlyArray<Message>, seeds: ReadonlyArray<number>): Array<Message> => {
  const out = [...messages]
  for (const seed of seeds) if (out.length > 0) out.splice(seed % out.length, 1)
  return out
}

const PolicyScript = Schema.Struct({
  keepRecentTokens: Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 2000 })),
  keepRecentTurns: Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 5 })),
  extraTail: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 1500 }))
})
const policyOf = (script: typeof PolicyScript.Type): CompactionPolicy =>
  CompactionPolicy.makeUnsafe({
    keepRecentTokens: script.keepRecentTokens,
    keepRecentTurns: script.keepRecentTurns,
    maxTailTokens: script.keepRecentTokens + script.extraTail,
    contextWindow: 1_000_000
  })

// ============================================================================
// safeCut
// ============================================================================

describe("safeCut", () => {
  it("moves a cut that would orphan a result back to its call, and only that far", () => {
    const messages = [user("a"), call("t1"), results("t1"), assistant("done"), user("b")]
    assert.deepStrictEqual([0, 1, 2, 3, 4, 5].map((r) => safeCut(messages, r)), [0, 1, 1, 3, 4, 5])
  })

  it("keeps consecutive assistant messages with their shared result turn", () => {
    const messages = [user("a"), call("t1"), call("t2"), results("t1", "t2")]
    assert.strictEqual(safeCut(messages, 3), 1)
    assert.strictEqual(safeCut(messages, 2), 1, "cutting between the two calls would orphan t1")
  })

  it("treats a human message that carries results as part of the pair", () => {
    const mixed: Message = { role: "user", content: [result("t1"), { type: "text", text: "also" }] }
    assert.strictEqual(safeCut([user("a"), call("t1"), mixed], 2), 1)
  })

  it("returns 0 when no boundary pairs everything, and clamps the request", () => {
    const messages = [call("t1"), results("t1")]
    assert.strictEqual(safeCut(messages, 1), 0)
    assert.strictEqual(safeCut(messages, -4), 0)
    assert.strictEqual(safeCut(messages, 99), 2)
    assert.strictEqual(safeCut([], 3), 0)
  })

  it.prop(
    "for every request: at or before it, no orphan in the slice, and the greatest such index",
    [conversationArbitrary({ allowInvalid: true })],
    ([messages]) => {
      for (let requested = 0; requested <= messages.length; requested++) {
        const cut = safeCut(messages, requested)
        assert.isAtMost(cut, requested)
        assert.isFalse(hasOrphans(messages.slice(cut)), `requested ${requested}, cut ${cut}`)
        for (let c = cut + 1; c <= requested; c++) assert.isTrue(hasOrphans(messages.slice(c)))
      }
    },
    { arbitrary: { runs: 1000 } }
  )

  it.prop(
    "on inputs that already have orphans, a cut adds none",
    [conversationArbitrary({ allowInvalid: true }), Deletions],
    ([conversation, seeds]) => {
      const messages = deleteAt(conversation, seeds)
      const before = orphans(messages)
      for (let requested = 0; requested <= messages.length; requested++) {
        const cut = safeCut(messages, requested)
        for (const o of orphans(messages.slice(cut), cut)) assert.isTrue(before.has(o), o)
      }
    },
    { arbitrary: { runs: 1000 } }
  )
})

describe("safeCut with the API view's start", () => {
  /** A list of `n` messages (tool pairs, prose) whose API view starts at `viewAt` (an assistant compaction block). */
  const longList = (n: number, viewAt: number): Array<Message> =>
    Array.from({ length: n }, (_, i): Message => {
      if (i === viewAt) return { role: "assistant", content: [{ type: "compaction", content: "summary" } as never] }
      const k = i % 4
      return k === 0 ? user(`q${i}`) : k === 1 ? call(`t${i}`) : k === 2 ? results(`t${i - 1}`) : assistant("ok")
    })
  /** `messages` behind a proxy that records every index read. */
  const recording = (messages: ReadonlyArray<Message>) => {
    const read = new Set<number>()
    const proxy = new Proxy(messages, {
      get: (target, key, receiver) => {
        if (typeof key === "string" && /^\d+$/.test(key)) read.add(Number(key))
        return Reflect.get(target, key, receiver)
      }
    })
    return { proxy, read }
  }

  it("reads only the messages around the request, however long the tail, and agrees with safeCut without it", () => {
    const messages = longList(20_000, 8_000)
    const start = apiViewStart(messages)
    assert.strictEqual(start, 8_000)
    for (const requested of [0, 5_000, 7_999, 8_000, 8_001, 8_003, 12_002, 19_999, 20_000]) {
      const { proxy, read } = recording(messages)
      const cut = safeCut(proxy, requested, start)
      assert.strictEqual(cut, safeCut(messages, requested), `requested ${requested}`)
      assert.isAtMost(read.size, 8, `requested ${requested}: read ${read.size} messages`)
      for (const i of read) assert.isAtMost(Math.abs(i - requested), 4, `requested ${requested} read ${i}`)
    }
  })

  it.prop(
    "equals safeCut without it at every request, on lists with and without compaction blocks",
    [conversationArbitrary({ allowInvalid: true }), Schema.Array(Schema.Int)],
    ([conversation, at]) => {
      const messages = [...conversation]
      for (const a of at.slice(0, 2)) {
        const i = Math.abs(a) % (messages.length + 1)
        const content = Math.abs(a) % 5 === 0 ? null : `summary ${a}`
        messages.splice(i, 0, { role: "assistant", content: [{ type: "compaction", content } as never] })
      }
      const start = apiViewStart(messages)
      for (let requested = 0; requested <= messages.length; requested++) {
        assert.strictEqual(safeCut(messages, requested, start), safeCut(messages, requested), `requested ${requested}`)
      }
    },
    { arbitrary: { runs: 500 } }
  )
})

// ============================================================================
// splitKeepingTurns
// ============================================================================

describe("splitKeepingTurns", () => {
  it("keeps the last turns raw and summarizes the rest", () => {
    const messages = [user("a"), call("t1"), results("t1"), assistant("x"), user("b"), assistant("y"), user("c")]
    const split = Option.getOrThrow(splitKeepingTurns(messages, 2))
    assert.deepStrictEqual(split.head, messages.slice(0, 4))
    assert.deepStrictEqual(split.tail, messages.slice(4))
    assert.isTrue(Option.isNone(splitKeepingTurns(messages, 3)))
    assert.isTrue(Option.isNone(splitKeepingTurns(messages, 5)))
  })

  it.prop(
    "keeps exactly keepRecentTurns turns when it returns some, and none only when there are no more turns",
    [conversationArbitrary({ allowInvalid: true }), Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 6 }))],
    ([messages, keep]) => {
      const result = splitKeepingTurns(messages, keep)
      if (Option.isNone(result)) {
        assert.isAtMost(countTurns(messages), keep)
        return
      }
      const { head, tail } = result.value
      assert.strictEqual(countTurns(tail), keep)
      assert.isAbove(head.length, 0)
      assert.deepStrictEqual([...head, ...tail], messages)
      assert.isFalse(hasOrphans(tail))
    },
    { arbitrary: { runs: 3000 } }
  )
})

// ============================================================================
// planForPolicy
// ============================================================================

describe("planForPolicy", () => {
  const policy = (keepRecentTokens: number, keepRecentTurns: number, maxTailTokens: number) =>
    CompactionPolicy.makeUnsafe({ keepRecentTokens, keepRecentTurns, maxTailTokens, contextWindow: 1_000_000 })

  it("reports cut 0 when everything fits", () => {
    const messages = [user("a"), assistant("b"), user("c"), assistant("d")]
    const p = planForPolicy(messages, policy(10_000, 1, 10_000))
    assert.deepInclude(p, { cut: 0, splitTurn: false, keptTurns: 2, oversizedTurn: false, overBudget: false })
    assert.deepInclude(planForPolicy([], policy(1, 1, 1)), { cut: 0, keptTurns: 0, keptTokens: 0 })
  })

  it("keeps the turn floor whole even when it is over the token budget", () => {
    const big = (id: string) => [call(id), { role: "user", content: [result(id, 4000)] } as Message]
    const messages = [user("a"), ...big("t1"), assistant("x"), user("b"), ...big("t2"), ...big("t3"), assistant("y")]
    const p = planForPolicy(messages, policy(100, 1, 100_000))
    assert.deepInclude(p, { cut: 4, turnStart: 4, splitTurn: false, keptTurns: 1, oversizedTurn: false })
    assert.strictEqual(planForPolicy(messages, policy(100, 1, 100_000)).cut, 4)
  })

  it("cuts inside the newest turn at an assistant message when the floor is over maxTailTokens", () => {
    const big = (id: string) => [call(id), { role: "user", content: [result(id, 4000)] } as Message]
    const messages = [user("a"), assistant("x"), user("b"), ...big("t1"), ...big("t2"), ...big("t3"), assistant("y")]
    const p = planForPolicy(messages, policy(100, 1, 1500))
    // the tail [call t3, result t3, y] is ~1,000 tokens; adding t2 would exceed 1,500
    assert.deepInclude(p, {
      cut: 7,
      turnStart: 2,
      splitTurn: true,
      keptTurns: 0,
      oversizedTurn: true,
      overBudget: false
    })
    assert.isAtMost(p.keptTokens, 1500)
  })

  it("keeps the newest step and says so when even that does not fit", () => {
    const huge: Message = { role: "user", content: [result("t1", 40_000)] }
    const messages = [user("a"), assistant("x"), user("b"), call("t1"), huge]
    const p = planForPolicy(messages, policy(100, 1, 1000))
    assert.deepInclude(p, { cut: 3, splitTurn: true, oversizedTurn: true, overBudget: true })
    assert.isAbove(p.keptTokens, 1000)
  })

  it("issue 27 finding 11: the oversized-turn cut never lands between a server tool call and its result", () => {
    // a pause_turn split: the advisor's call ends one assistant message, its result opens the next
    const paused: Message = {
      role: "assistant",
      content: [
        { type: "text", text: "x".repeat(8_000) },
        { type: "server_tool_use", id: "srvtoolu_adv", name: "advisor", input: {} }
      ]
    }
    const resumed: Message = {
      role: "assistant",
      content: [
        { type: "advisor_tool_result", tool_use_id: "srvtoolu_adv", content: { type: "advisor_result", text: "ok" } },
        { type: "text", text: "done" }
      ] as Array<ContentBlock>
    }
    const messages = [user("a"), assistant("x"), user("b"), paused, resumed]
    const p = planForPolicy(messages, policy(100, 1, 1000))
    assert.deepInclude(p, { cut: 3, oversizedTurn: true, overBudget: true })
    assert.strictEqual(safeCut(messages, 4), 3)
    const mcp: Message = {
      role: "assistant",
      content: [{ type: "mcp_tool_use", id: "mcptoolu_1", name: "q", server_name: "db", input: {} }]
    }
    const answered: Message = {
      role: "assistant",
      content: [{ type: "mcp_tool_result", tool_use_id: "mcptoolu_1", content: "rows" }, { type: "text", text: "ok" }]
    }
    assert.strictEqual(safeCut([user("a"), mcp, answered, user("c")], 2), 1)
  })

  const seen = { oversizedTurn: 0, overBudget: 0, splitTurn: 0, belowFloor: 0, nothingToCut: 0 }

  it.prop(
    "never keeps fewer than the floor unless the oversized-turn rule applies and says so; always tool-safe",
    [conversationArbitrary({ allowInvalid: true }), PolicyScript],
    ([messages, script]) => {
      const policy = policyOf(script)
      const p = planForPolicy(messages, policy)
      const total = countTurns(messages)
      const tail = messages.slice(p.cut)
      assert.strictEqual(planForPolicy(messages, policy).cut, p.cut)
      assert.isFalse(hasOrphans(tail))
      assert.strictEqual(p.keptTurns, turnStarts(messages).filter((s) => s >= p.cut).length)
      // a cut between two human messages of one turn makes the slice count the second as a turn of its own
      assert.oneOf(countTurns(tail) - p.keptTurns, [0, p.splitTurn ? 1 : 0])
      assert.strictEqual(p.keptTokens, estimateTokens(tail))
      assert.strictEqual(p.splitTurn, p.turnStart < p.cut)
      if (p.keptTurns < Math.min(policy.keepRecentTurns, total)) {
        assert.isTrue(p.oversizedTurn && p.splitTurn)
        seen.belowFloor++
      }
      if (p.oversizedTurn) seen.oversizedTurn++
      if (p.overBudget) seen.overBudget++
      if (p.splitTurn) seen.splitTurn++
      if (p.cut === 0) seen.nothingToCut++
      if (!p.overBudget) assert.isAtMost(p.keptTokens, policy.maxTailTokens)
      if (p.overBudget) assert.isTrue(p.oversizedTurn)
      if (p.oversizedTurn) {
        assert.isTrue(p.cut === 0 || messages[p.cut]!.role === "assistant" || p.overBudget)
      } else {
        // the token budget is honoured: the tail holds at least what fits keepRecentTokens
        const nextLarger = p.cut > 0 ? estimateTokens(messages.slice(p.cut - 1)) : Infinity
        assert.isTrue(p.keptTokens >= policy.keepRecentTokens || nextLarger > policy.keepRecentTokens || p.cut === 0)
      }
      if (messages.length > 0 && total > 0) assert.isBelow(p.cut, messages.length, "the tail is never empty")
    },
    { arbitrary: { runs: 3000 } }
  )

  it("the property above reached every outcome", () => {
    for (const [outcome, count] of Object.entries(seen)) assert.isAbove(count, 20, outcome)
  })

  it("is tool-safe and honours the floor on long generated sessions", () => {
    for (let seed = 1; seed <= 20; seed++) {
      const messages = generateSession(seed, { messages: 400 })
      const policy = CompactionPolicy.makeUnsafe({ keepRecentTokens: 2000 * seed })
      const p = planForPolicy(messages, policy)
      assert.isFalse(hasOrphans(messages.slice(p.cut)))
      assert.isTrue(p.keptTurns >= policy.keepRecentTurns || p.oversizedTurn)
    }
  })
})

// ============================================================================
// Corpus
// ============================================================================

describe("corpus", () => {
  it("safeCut leaves no orphan at any cut request in any real session", () => {
    for (const session of corpus()) {
      const messages = session.messages
      for (let requested = 0; requested <= messages.length; requested++) {
        const cut = safeCut(messages, requested)
        assert.isFalse(hasOrphans(messages.slice(cut)), `${session.name} at ${requested}`)
      }
    }
  })

  it("planForPolicy is tool-safe on every prefix view of every real session", () => {
    for (const session of corpus()) {
      for (let end = 1; end <= session.messages.length; end += 7) {
        const view = session.messages.slice(0, end)
        for (const keepRecentTokens of [2000, 20_000]) {
          const p = planForPolicy(view, CompactionPolicy.makeUnsafe({ keepRecentTokens, keepRecentTurns: 1 }))
          assert.isFalse(hasOrphans(view.slice(p.cut)), `${session.name} view ${end}`)
        }
      }
    }
  })

  it("comes close to pi's real cuts at 20,000 tokens", () => {
    const rows: Array<string> = []
    let compared = 0
    for (const session of corpus()) {
      for (const compaction of session.meta.compactions ?? []) {
        const view = session.messages.slice(0, compaction.at_message_index)
        const truth = compaction.firstKept_message_index
        const p = planForPolicy(view, CompactionPolicy.makeUnsafe({ keepRecentTokens: 20_000, keepRecentTurns: 1 }))
        const truthTokens = estimateTokens(view.slice(truth))
        rows.push(
          `${session.name}@${compaction.at_message_index}: ours ${p.cut} (${p.keptTokens} tok), ` +
            `pi ${truth} (${truthTokens} tok), ${p.cut - truth} messages`
        )
        // pi estimates sizes its own way; our tail stays within 25% of the budget of pi's, never past the budget
        assert.isAtMost(Math.abs(p.keptTokens - truthTokens), 5000, rows.at(-1))
        assert.isAtMost(Math.abs(p.cut - truth), 40, rows.at(-1))
        compared++
      }
    }
    assert.strictEqual(compared, 3)
    console.log(rows.join("\n"))
  })
})

// ============================================================================
// The walk-back cut against the full-scan reference
// ============================================================================

/**
 * The full-scan implementation the walk-back one replaced (suffix sums and safe flags over the whole list), kept as
 * the oracle: the new `safeCut`, `splitKeepingTurns` and `planForPolicy` must agree with it on every input, valid or not.
 */
const safeCutsReference = (messages: ReadonlyArray<Message>): Uint8Array => {
  const n = messages.length
  const diff = new Int32Array(n + 2)
  forEachToolPair(messages, (useIndex, resultIndex) => {
    diff[useIndex + 1]!++
    diff[resultIndex + 1]!--
  })
  const safe = new Uint8Array(n + 1)
  let open = 0
  for (let c = 0; c <= n; c++) {
    open += diff[c]!
    safe[c] = open === 0 ? 1 : 0
  }
  return safe
}

const greatestSafeReference = (safe: Uint8Array, requested: number): number => {
  let c = requested
  while (c > 0 && safe[c] === 0) c--
  return c
}

const safeCutReference = (messages: ReadonlyArray<Message>, requested: number): number => {
  const n = messages.length
  const at = Number.isNaN(requested) ? 0 : Math.max(0, Math.min(n, Math.floor(requested)))
  if (at === 0 || at === n) return at
  return greatestSafeReference(safeCutsReference(messages), at)
}

const splitKeepingTurnsReference = <M extends Message>(
  messages: ReadonlyArray<M>,
  keepRecentTurns: number
): Option.Option<Split<M>> => {
  const starts = turnStarts(messages)
  const keep = Math.max(0, Math.floor(keepRecentTurns))
  if (starts.length <= keep) return Option.none()
  const requested = keep === 0 ? messages.length : starts[starts.length - keep]!
  const cut = safeCutReference(messages, requested)
  if (cut === 0) return Option.none()
  return Option.some({ head: messages.slice(0, cut), tail: messages.slice(cut) })
}

const planForPolicyReference = (messages: ReadonlyArray<Message>, policy: CutPolicy): CutPlan => {
  const n = messages.length
  const suffix = new Float64Array(n + 1)
  for (let i = n - 1; i >= 0; i--) suffix[i] = suffix[i + 1]! + estimateMessageTokens(messages[i]!)
  const starts = turnStarts(messages)
  const floor = Math.max(1, Math.floor(policy.keepRecentTurns))
  const floorCut = starts.length > floor ? starts[starts.length - floor]! : 0
  let tokenCut = n
  while (tokenCut > 0 && suffix[tokenCut - 1]! <= policy.keepRecentTokens) tokenCut--
  const safe = safeCutsReference(messages)
  let cut = greatestSafeReference(safe, Math.min(tokenCut, floorCut))
  let oversizedTurn = false
  if (suffix[cut]! > policy.maxTailTokens) {
    // issue 38: the floor yields to the latest whole step that keeps keepRecentTokens (the next one if it is too big)
    oversizedTurn = true
    const isStep = (c: number) =>
      messages[c]!.role === "assistant" && messages[c - 1]!.role !== "assistant" && safe[c] === 1
    const atMost = suffix[tokenCut]! >= policy.keepRecentTokens ? tokenCut : tokenCut - 1
    let kept = -1
    for (let c = cut + 1; c <= atMost && c < n; c++) if (isStep(c)) kept = c
    let after = -1
    for (let c = Math.max(atMost + 1, cut + 1); c < n && after < 0; c++) if (isStep(c)) after = c
    if (kept >= 0 && suffix[kept]! <= policy.maxTailTokens) cut = kept
    else if (after >= 0) cut = after
    else if (kept >= 0) cut = kept
  }
  const overBudget = suffix[cut]! > policy.maxTailTokens
  let turnStart = cut
  let keptTurns = 0
  for (const start of starts) {
    if (start <= cut) turnStart = start
    if (start >= cut) keptTurns++
  }
  return {
    cut,
    turnStart,
    splitTurn: turnStart < cut,
    keptTurns,
    keptTokens: suffix[cut]!,
    oversizedTurn,
    overBudget
  }
}

/**
 * Raw message lists with every pairing defect: calls and results drawn from a few ids (so duplicates of both, orphans,
 * results many messages after their call), consecutive same-role messages, mixed human text and results, empty
 * content, assistant first.
 */
const RawMessage = Schema.Struct({
  role: Schema.Literals(["user", "assistant"]),
  form: Schema.Literals(["string", "text", "tools", "mixed", "empty"]),
  ids: Schema.Array(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 5 }))).check(Schema.isMaxLength(3)),
  size: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 3000 }))
})
const RawConversation = Schema.Array(RawMessage).check(Schema.isMaxLength(40))

const buildRaw = (script: typeof RawConversation.Type): Array<Message> =>
  script.map(({ form, ids, role, size }): Message => {
    const body = "w ".repeat(size >> 1)
    if (form === "string") return { role, content: body }
    if (form === "empty") return { role, content: [] }
    const tools: Array<ContentBlock> = ids.map((id) =>
      role === "assistant"
        ? { type: "tool_use", id: `t${id}`, name: "bash", input: { body } }
        : { type: "tool_result", tool_use_id: `t${id}`, content: body }
    )
    if (form === "tools" && tools.length > 0) return { role, content: tools }
    const text: ContentBlock = { type: "text", text: `x ${body}` }
    return { role, content: form === "mixed" ? [text, ...tools] : [text] }
  })

/** Policies from tiny to huge, including `maxTailTokens` below `keepRecentTokens` (not a valid policy, still defined). */
const Budget = Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 8000 }))
const Policies = Schema.Array(
  Schema.Struct({
    keepRecentTokens: Budget,
    keepRecentTurns: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 5 })),
    maxTailTokens: Budget
  })
).check(Schema.isMinLength(1), Schema.isMaxLength(6))

/** Fixed policies that reach the other branches on every input: huge budgets, a turn floor of 1..4, tiny tails. */
const fixedPolicies: ReadonlyArray<CutPolicy> = [1, 2, 3, 4].flatMap((keepRecentTurns) => [
  { keepRecentTokens: 1_000_000, keepRecentTurns, maxTailTokens: 1_000_000 },
  { keepRecentTokens: 50, keepRecentTurns, maxTailTokens: 1_000_000 },
  { keepRecentTokens: 50, keepRecentTurns, maxTailTokens: 300 },
  { keepRecentTokens: 2000, keepRecentTurns, maxTailTokens: 2500 }
])

const compared = { cases: 0, oversizedTurn: 0, overBudget: 0, splitTurn: 0, nothingToCut: 0, movedBySafety: 0 }

const assertSameAsReference = (messages: ReadonlyArray<Message>, policy: CutPolicy, label = ""): void => {
  const expected = planForPolicyReference(messages, policy)
  assert.deepStrictEqual(planForPolicy(messages, policy), expected, `${label} ${JSON.stringify(policy)}`)
  compared.cases++
  if (expected.oversizedTurn) compared.oversizedTurn++
  if (expected.overBudget) compared.overBudget++
  if (expected.splitTurn) compared.splitTurn++
  if (expected.cut === 0) compared.nothingToCut++
}

const assertCutsSameAsReference = (messages: ReadonlyArray<Message>): void => {
  for (let requested = 0; requested <= messages.length; requested++) {
    const cut = safeCut(messages, requested)
    assert.strictEqual(cut, safeCutReference(messages, requested), `safeCut ${requested}`)
    if (cut < requested) compared.movedBySafety++
  }
  for (const keep of [0, 1, 2, 3, 4, 6]) {
    assert.deepStrictEqual(splitKeepingTurns(messages, keep), splitKeepingTurnsReference(messages, keep))
  }
}

describe("walk-back cut equals the full-scan reference", () => {
  it.prop(
    "on generated conversations (aborted calls, consecutive assistant messages)",
    [conversationArbitrary({ allowInvalid: true }), Policies],
    ([messages, policies]) => {
      for (const policy of [...policies, ...fixedPolicies]) assertSameAsReference(messages, policy)
      assertCutsSameAsReference(messages)
    },
    { arbitrary: { runs: 3000 } }
  )

  it.prop(
    "on raw lists with orphans, duplicates, far results and same-role runs",
    [RawConversation, Policies],
    ([script, policies]) => {
      const messages = buildRaw(script)
      for (const policy of [...policies, ...fixedPolicies]) assertSameAsReference(messages, policy)
      assertCutsSameAsReference(messages)
    },
    { arbitrary: { runs: 3000 } }
  )

  it.prop(
    "on generated conversations with messages deleted (orphaned results of their own)",
    [conversationArbitrary({ allowInvalid: true }), Deletions, Policies],
    ([conversation, seeds, policies]) => {
      const messages = deleteAt(conversation, seeds)
      for (const policy of [...policies, ...fixedPolicies]) assertSameAsReference(messages, policy)
      assertCutsSameAsReference(messages)
    },
    { arbitrary: { runs: 2000 } }
  )

  it("on the edge policies: NaN, infinite and fractional fields", () => {
    const messages = buildRaw([
      { role: "user", form: "string", ids: [], size: 10 },
      { role: "assistant", form: "tools", ids: [1], size: 400 },
      { role: "user", form: "tools", ids: [1], size: 400 },
      { role: "user", form: "text", ids: [], size: 10 },
      { role: "assistant", form: "text", ids: [], size: 10 }
    ])
    for (const odd of [NaN, Infinity, -Infinity, 0, -1, 1.5, 2.7]) {
      for (const list of [messages, [], messages.slice(1)]) {
        assertSameAsReference(list, { keepRecentTokens: odd, keepRecentTurns: 1, maxTailTokens: 1000 })
        assertSameAsReference(list, { keepRecentTokens: 100, keepRecentTurns: odd, maxTailTokens: 1000 })
        assertSameAsReference(list, { keepRecentTokens: 100, keepRecentTurns: 1, maxTailTokens: odd })
        assert.strictEqual(safeCut(list, odd), safeCutReference(list, odd))
      }
    }
  })

  it("on every prefix of every real session, at the default policy and at 20,000 tokens", () => {
    const policies: ReadonlyArray<CutPolicy> = [
      defaultPolicy,
      CompactionPolicy.makeUnsafe({ keepRecentTokens: 20_000, keepRecentTurns: 1 })
    ]
    let prefixes = 0
    for (const session of corpus()) {
      for (let end = 0; end <= session.messages.length; end++) {
        const view = session.messages.slice(0, end)
        for (const policy of policies) assertSameAsReference(view, policy, `${session.name} view ${end}`)
        prefixes++
      }
    }
    assert.isAbove(prefixes, 2000)
  })

  it("the comparisons above reached every outcome", () => {
    console.log(`planForPolicy compared with the reference: ${JSON.stringify(compared)}`)
    for (const [outcome, count] of Object.entries(compared)) assert.isAbove(count, 100, outcome)
  })
})

// ============================================================================
// Cost: only the tail is read
// ============================================================================

/** A view of `messages` that records every index read through it. */
const tracked = (messages: ReadonlyArray<Message>): { view: ReadonlyArray<Message>; read: Set<number> } => {
  const read = new Set<number>()
  const view = new Proxy(messages, {
    get(target, key, receiver) {
      if (typeof key === "string" && /^\d+$/.test(key)) read.add(Number(key))
      return Reflect.get(target, key, receiver)
    }
  })
  return { view, read }
}

describe("cost", () => {
  it("planForPolicy reads only the kept tail, the turn before it and a few messages before that", () => {
    for (let seed = 1; seed <= 12; seed++) {
      const messages = generateSession(seed, { messages: 4000 }).slice(0, 4000)
      for (
        const policy of [defaultPolicy, CompactionPolicy.makeUnsafe({ keepRecentTokens: 5000, keepRecentTurns: 2 })]
      ) {
        const { read, view } = tracked(messages)
        const p = planForPolicy(view, policy)
        assert.deepStrictEqual(p, planForPolicyReference(messages, policy))
        assert.isAbove(p.cut, 0)
        // the walk back to the human message before the kept turns (is there a turn of the API view before them?)
        let previousHuman = Math.min(p.cut, p.turnStart) - 1
        while (previousHuman > 0 && !isHumanMessage(messages[previousHuman]!)) previousHuman--
        const before = [...read].filter((i) => i < previousHuman)
        // the assistant turn before the cut and the message before a turn start: a handful, on any length
        assert.isAtMost(
          before.length,
          4,
          `seed ${seed}: read ${before.length} messages before cut ${p.cut}, from ${Math.min(...before)}`
        )
        assert.isAtMost(read.size, messages.length - previousHuman + 6)
      }
    }
  })

  it("safeCut reads only the turns around the request, and the messages after it (for the API view's start)", () => {
    const messages = generateSession(3, { messages: 4000 }).slice(0, 4000)
    for (const requested of [1, 1000, 2001, 3999]) {
      const { read, view } = tracked(messages)
      assert.strictEqual(safeCut(view, requested), safeCutReference(messages, requested))
      const around = [...read].filter((i) => i < requested)
      assert.isAtMost(around.length, 12, `requested ${requested}`)
    }
  })
})
