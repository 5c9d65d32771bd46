import { assert, describe, it } from "@effect/vitest"
import { Option, Schema } from "effect"
import { cutForPolicy, plan, planForPolicy, safeCut } from "../src/Cut.ts"
import type { ContentBlock, Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { countTurns, turnStarts } from "../src/Turns.ts"
import { hasOrphans, validate, type Violation } from "../src/Validate.ts"
import { conversationArbitrary, generateSession } from "./fixtures/Conversation.ts"
import { corpus } from "./fixtures/Corpus.ts"

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

// ============================================================================
// plan
// ============================================================================

describe("plan", () => {
  it("keeps the last turns raw and summarizes the rest", () => {
    const messages = [user("a"), call("t1"), results("t1"), assistant("x"), user("b"), assistant("y"), user("c")]
    const split = Option.getOrThrow(plan(messages, 2))
    assert.deepStrictEqual(split.head, messages.slice(0, 4))
    assert.deepStrictEqual(split.tail, messages.slice(4))
    assert.isTrue(Option.isNone(plan(messages, 3)))
    assert.isTrue(Option.isNone(plan(messages, 5)))
  })

  it.prop(
    "keeps exactly keepRecentTurns turns when it returns some, and none only when there are no more turns",
    [conversationArbitrary({ allowInvalid: true }), Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 6 }))],
    ([messages, keep]) => {
      const result = plan(messages, keep)
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
// planForPolicy / cutForPolicy
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
    assert.strictEqual(cutForPolicy(messages, policy(100, 1, 100_000)), 4)
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

  const seen = { oversizedTurn: 0, overBudget: 0, splitTurn: 0, belowFloor: 0, nothingToCut: 0 }

  it.prop(
    "never keeps fewer than the floor unless the oversized-turn rule applies and says so; always tool-safe",
    [conversationArbitrary({ allowInvalid: true }), PolicyScript],
    ([messages, script]) => {
      const policy = policyOf(script)
      const p = planForPolicy(messages, policy)
      const total = countTurns(messages)
      const tail = messages.slice(p.cut)
      assert.strictEqual(cutForPolicy(messages, policy), p.cut)
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
