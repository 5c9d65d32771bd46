import { assert, describe, it } from "@effect/vitest"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { render } from "../src/Render.ts"
import type { RequestEvent, SimPolicy, SimulateOptions } from "../src/Simulate.ts"
import {
  ANTHROPIC_PRICES,
  formatReport,
  OURS_TUNED_MIN_SAVINGS,
  requestCost,
  simulate,
  simulatePolicy,
  standardPolicies,
  summarizerCost
} from "../src/Simulate.ts"
import { estimateMessageTokens, estimateTokens } from "../src/Tokens.ts"
import { validate, Violation } from "../src/Validate.ts"
import { conversationArbitrary, generateSession } from "./fixtures/Conversation.ts"
import { corpus } from "./fixtures/Corpus.ts"

const chars = (n: number): string => "x".repeat(n)
const user = (text: string): Message => ({ role: "user", content: text })
const assistant = (text: string): Message => ({ role: "assistant", content: text })
const call = (...ids: ReadonlyArray<string>): Message => ({
  role: "assistant",
  content: ids.map((id) => ({ type: "tool_use", id, name: "bash", input: {} }))
})
const results = (...entries: ReadonlyArray<readonly [string, number]>): Message => ({
  role: "user",
  content: entries.map(([id, size]) => ({ type: "tool_result", tool_use_id: id, content: chars(size) }))
})
const read = (id: string, path: string): Message => ({
  role: "assistant",
  content: [{ type: "tool_use", id, name: "read", input: { path } }]
})

const none: SimPolicy = { name: "none", strategy: { _tag: "None" } }
const compactOnly: SimPolicy = { name: "compact", strategy: { _tag: "CompactOnly" } }
const masking = (window: number): SimPolicy => ({ name: "mask", strategy: { _tag: "Masking", window } })

/** The prompts of one policy's requests, in order. */
const prompts = (messages: ReadonlyArray<Message>, policy: SimPolicy, options: SimulateOptions = {}) => {
  const seen: Array<RequestEvent> = []
  const report = simulatePolicy(messages, policy, { ...options, onRequest: (e) => seen.push(e) })
  return { report, seen }
}

// u1 = 396 chars → 99 + 4 = 103 tokens; a = 96 chars → 24 + 4 = 28; u2 = 196 chars → 49 + 4 = 53
const u1 = user(chars(396))
const a1 = assistant(chars(96))
const u2 = user(chars(196))
const a2 = assistant(chars(96))
const tiny = [u1, a1, u2, a2]

describe("Simulate: hand-computed sessions", () => {
  it("prices a request and a summarizer call with Anthropic's ratios", () => {
    assert.strictEqual(requestCost(ANTHROPIC_PRICES, { cacheRead: 1000, cacheWrite: 100, output: 10 }), 275)
    assert.strictEqual(summarizerCost(ANTHROPIC_PRICES, { input: 1000, output: 100 }), 1500)
    assert.deepStrictEqual(ANTHROPIC_PRICES, { input: 1, cacheWrite: 1.25, cacheRead: 0.1, output: 5 })
  })

  it("counts the cached prefix, the writes and the cost of the raw baseline", () => {
    const r = simulatePolicy(tiny, none)
    assert.deepStrictEqual(
      r.perRequest.map((q) => [q.index, q.promptTokens, q.cacheRead, q.cacheWrite, q.output, q.invalidated]),
      [[1, 103, 0, 103, 28, false], [3, 184, 103, 81, 28, false]]
    )
    assert.strictEqual(r.requests, 2)
    assert.strictEqual(r.tokensSent, 287)
    assert.strictEqual(r.cacheRead, 103)
    assert.strictEqual(r.cacheWrite, 184)
    assert.strictEqual(r.outputTokens, 56)
    assert.closeTo(r.cost, 0.1 * 103 + 1.25 * 184 + 5 * 56, 1e-9)
    assert.closeTo(r.dollars, r.cost * 3 / 1e6, 1e-12)
    assert.strictEqual(r.peakContext, 212)
    assert.strictEqual(r.overWindow, 0)
  })

  it("sends the system prompt with every request and caches it from the second on", () => {
    const r = simulatePolicy(tiny, none, { systemTokens: 1000 })
    assert.deepStrictEqual(r.perRequest.map((q) => [q.promptTokens, q.cacheRead, q.cacheWrite]), [
      [1103, 0, 1103],
      [1184, 1103, 81]
    ])
  })

  it("takes configurable prices and dollars per MTok", () => {
    const r = simulatePolicy(tiny, none, { prices: { output: 4 }, dollarsPerMTok: 15 })
    assert.closeTo(r.cost, 0.1 * 103 + 1.25 * 184 + 4 * 56, 1e-9)
    assert.closeTo(r.dollars, r.cost * 15 / 1e6, 1e-12)
  })

  it("flags the raw baseline's requests over the window, and the report says so", () => {
    const compaction = CompactionPolicy.makeUnsafe({
      contextWindow: 200,
      minRemaining: 10,
      keepRecentTokens: 20,
      keepRecentTurns: 1
    })
    const report = simulate(tiny, { compaction, policies: [none] })
    const r = report.policies[0]!
    assert.deepStrictEqual(r.perRequest.map((q) => q.overWindow), [false, true]) // 184 + 28 = 212 > 200
    assert.strictEqual(r.overWindow, 1)
    assert.strictEqual(r.peakContext, 212)
    assert.include(formatReport(report), "Note: none exceeds the 200-token window on 1 of 2 requests (peak 212)")
  })

  it("compacts the head into one summary and charges the summarizer call", () => {
    const compaction = CompactionPolicy.makeUnsafe({
      contextWindow: 200,
      minRemaining: 100,
      keepRecentTokens: 20,
      keepRecentTurns: 1
    })
    const { report: r, seen } = prompts(tiny, compactOnly, { compaction })
    // request 1: [u1] = 103 > 100, but one turn has nothing to cut; request 2: [u1, a1, u2] cuts before u2
    assert.strictEqual(r.failedCompactions, 1)
    assert.strictEqual(r.summarizerCalls, 1)
    const transcript = Math.ceil(render([u1, a1]).length / 4)
    const summary = Math.ceil(transcript * 0.1)
    assert.strictEqual(r.summarizerInput, transcript + 1000)
    assert.strictEqual(r.summarizerOutput, summary)
    const prompt = seen[1]!.prompt
    assert.strictEqual(prompt.length, 2)
    assert.strictEqual(prompt[1], u2)
    assert.strictEqual(estimateMessageTokens(prompt[0]!), summary + 4)
    const second = r.perRequest[1]!
    assert.isTrue(second.compacted)
    assert.isTrue(second.invalidated)
    assert.strictEqual(second.cacheRead, 0)
    assert.closeTo(
      r.cost,
      requestCost(ANTHROPIC_PRICES, r.perRequest[0]!) + requestCost(ANTHROPIC_PRICES, second) +
        (transcript + 1000) + 5 * summary,
      1e-9
    )
  })

  // u = 6 tokens; call = 4 + ceil((4 + 2) / 4) = 6; a 4,000-char result = 1,004 tokens
  const session = [user("go"), call("t1"), results(["t1", 4000]), call("t2"), results(["t2", 4000]), assistant("ok")]

  it("counts a cache invalidation when a mask rewrites the cached prefix", () => {
    const r = simulatePolicy(session, masking(1))
    assert.deepStrictEqual(r.perRequest.map((q) => q.invalidated), [false, false, true])
    assert.strictEqual(r.cacheInvalidations, 1)
    const third = r.perRequest[2]!
    assert.strictEqual(third.cacheRead, estimateMessageTokens(session[0]!) + estimateMessageTokens(session[1]!))
    // the placeholder "[Old tool output omitted.]" is 26 chars: 7 + 4 tokens instead of 1,004
    assert.strictEqual(r.tokensOffloaded, 1004 - 11)
    assert.strictEqual(simulatePolicy(session, masking(2)).cacheInvalidations, 0)
  })

  it("never invalidates the raw baseline's cache", () => {
    assert.strictEqual(simulatePolicy(session, none).cacheInvalidations, 0)
  })

  it("prunes opencode-style only when the pruned outputs reach the minimum", () => {
    // three 400-token outputs: the newest is protected (400 <= 500), the two older ones free 800
    const s = [
      user("go"),
      call("t1"),
      results(["t1", 1600]),
      call("t2"),
      results(["t2", 1600]),
      call("t3"),
      results(["t3", 1600]),
      assistant("ok")
    ]
    const pruned = simulatePolicy(s, {
      name: "prune",
      strategy: { _tag: "Prune", protectTokens: 500, minimumTokens: 800 }
    })
    // "[Old tool result content cleared]" is 33 chars = 9 tokens
    assert.strictEqual(pruned.tokensOffloaded, 2 * (400 - 9))
    assert.strictEqual(pruned.cacheInvalidations, 1)
    const kept = simulatePolicy(s, {
      name: "prune",
      strategy: { _tag: "Prune", protectTokens: 500, minimumTokens: 801 }
    })
    assert.strictEqual(kept.tokensOffloaded, 0)
    assert.strictEqual(kept.cacheInvalidations, 0)
  })

  it("clears tool results above the trigger in the prompt only, and the cleared prefix stays cached", () => {
    const s = [...session, user("next"), assistant("done")]
    const { report: r, seen } = prompts(s, {
      name: "clear",
      strategy: { _tag: "ClearToolUses", triggerTokens: 1500, keep: 1 }
    })
    // request 2 holds ~1,016 tokens (under the trigger); request 3 ~2,026: t1's result is cleared
    assert.deepStrictEqual(r.perRequest.map((q) => q.invalidated), [false, false, true, false])
    assert.strictEqual(r.tokensOffloaded, 1000 - 6) // "[Tool result cleared.]" is 22 chars = 6 tokens
    assert.strictEqual(seen[3]!.prompt[4], session[4]) // the kept result is the recorded object
    assert.strictEqual(seen[2]!.prompt[2], seen[3]!.prompt[2]) // the cleared one is shared between prompts
  })

  it("compares rebuilt messages by content, so a rebuilt but equal message keeps the cache", () => {
    // t1 and t2 answer in one message; keeping only the newest two tool uses (t2, t3) rebuilds it every request
    const s = [
      user("go"),
      call("t1", "t2"),
      results(["t1", 4000], ["t2", 4000]),
      call("t3"),
      results(["t3", 400]),
      assistant("ok"),
      user("next"),
      assistant("done")
    ]
    const { report: r, seen } = prompts(s, {
      name: "clear",
      strategy: { _tag: "ClearToolUses", triggerTokens: 1000, keep: 2 }
    })
    // request 2 (before t3 exists) keeps t1 and t2; request 3 clears t1; request 4 rebuilds the same message
    assert.notStrictEqual(seen[2]!.prompt[2], seen[3]!.prompt[2])
    assert.deepStrictEqual(r.perRequest.map((q) => q.invalidated), [false, false, true, false])
  })

  it("evicts a superseded read with our eviction, and minSavings holds small evictions back", () => {
    const s = [
      user("go"),
      read("r1", "/a.ts"),
      results(["r1", 4000]),
      read("r2", "/a.ts"),
      results(["r2", 4000]),
      assistant("ok")
    ]
    const ours = (minSavings: number): SimPolicy => ({
      name: "ours",
      strategy: { _tag: "Evict", keepRecent: 10, minSavings, pinning: true }
    })
    const evicted = simulatePolicy(s, ours(0))
    assert.strictEqual(evicted.cacheInvalidations, 1)
    assert.isAbove(evicted.tokensOffloaded, 900)
    const held = simulatePolicy(s, ours(5000))
    assert.strictEqual(held.cacheInvalidations, 0)
    assert.strictEqual(held.tokensOffloaded, 0)
    assert.strictEqual(held.cost, simulatePolicy(s, compactOnly).cost)
  })

  it("names the seven standard policies in report order", () => {
    assert.deepStrictEqual(standardPolicies().map((p) => p.name), [
      "none",
      "compaction only",
      "masking (10)",
      "opencode prune (40k/20k)",
      "clear_tool_uses (100k, keep 3)",
      "ours (defaults)",
      `ours (minSavings ${OURS_TUNED_MIN_SAVINGS.toLocaleString("en-US")})`
    ])
  })

  it("formats one table row per policy", () => {
    const text = formatReport(simulate(tiny), { title: "tiny" })
    const rows = text.split("\n").filter((line) => line.startsWith("| "))
    assert.strictEqual(rows.length, 2 + 7)
    assert.isTrue(text.startsWith("### tiny"))
    assert.include(rows[2]!, "| none | 520 | $0.00 | 2 | 287 | 103 | 184 | 56 | 0 | 0 / 0 | 212 | 0 | 0 | 0 |")
  })

  it("does not modify the recorded messages", () => {
    const s = structuredClone(session)
    const snapshot = JSON.stringify(s)
    simulate(s, {
      compaction: CompactionPolicy.makeUnsafe({ contextWindow: 2000, minRemaining: 500, keepRecentTokens: 100 })
    })
    assert.strictEqual(JSON.stringify(s), snapshot)
  })
})

// ============================================================================
// Properties
// ============================================================================

/** A small window, so generated conversations compact, evict, mask, prune and clear. */
const small: SimulateOptions = {
  compaction: CompactionPolicy.makeUnsafe({
    contextWindow: 8000,
    minRemaining: 1000,
    keepRecentTokens: 1000,
    keepRecentTurns: 1
  }),
  systemTokens: 300,
  summaryMaxTokens: 400
}

const smallPolicies: ReadonlyArray<SimPolicy> = [
  none,
  compactOnly,
  masking(2),
  { name: "prune", strategy: { _tag: "Prune", protectTokens: 1000, minimumTokens: 500 } },
  { name: "clear", strategy: { _tag: "ClearToolUses", triggerTokens: 3000, keep: 1 } },
  { name: "ours", strategy: { _tag: "Evict", keepRecent: 2, minSavings: 0, pinning: true } },
  { name: "ours tuned", strategy: { _tag: "Evict", keepRecent: 2, minSavings: 1000, pinning: false } }
]

const orphans = (messages: ReadonlyArray<Message>): number =>
  validate(messages).filter(Violation.$is("OrphanedToolResult")).length

/** Checks every invariant of one simulation of `messages`; returns an error message or undefined. */
const checkInvariants = (messages: ReadonlyArray<Message>): string | undefined => {
  const events: Array<RequestEvent> = []
  const report = simulate(messages, { ...small, policies: smallPolicies, onRequest: (e) => events.push(e) })
  const replies = messages.filter((m) => m.role === "assistant").length
  for (const p of report.policies) {
    if (p.requests !== replies) return `${p.name}: ${p.requests} requests for ${replies} replies`
    let cost = summarizerCost(report.prices, { input: p.summarizerInput, output: p.summarizerOutput })
    for (const q of p.perRequest) {
      if (q.cacheRead + q.cacheWrite !== q.promptTokens) return `${p.name}: read + write != sent at ${q.index}`
      if (q.cacheRead < 0 || q.cacheWrite < 0) return `${p.name}: negative cache figure at ${q.index}`
      cost += requestCost(report.prices, q)
    }
    if (Math.abs(cost - p.cost) > 1e-6 * Math.max(1, cost)) return `${p.name}: cost ${p.cost} != ${cost}`
    if (p.tokensOffloaded < 0) return `${p.name}: negative offload`
  }
  const raw = report.policies[0]!
  if (raw.cacheInvalidations !== 0) return "none invalidated the cache"
  if (raw.summarizerCalls !== 0 || raw.tokensOffloaded !== 0) return "none compacted or offloaded"
  for (const q of raw.perRequest) {
    if (q.promptTokens !== 300 + estimateTokens(messages.slice(0, q.index))) return `none's prompt at ${q.index}`
  }
  for (const e of events) {
    const prefix = messages.slice(0, e.index)
    if (validate(prefix).length === 0 && validate(e.prompt).length > 0) {
      return `${e.policy}: invalid prompt at ${e.index}: ${validate(e.prompt).map((v) => v._tag).join(", ")}`
    }
    if (orphans(e.prompt) > orphans(prefix)) return `${e.policy}: orphaned tool result at ${e.index}`
  }
  return undefined
}

describe("Simulate: properties", () => {
  it.prop(
    "read + write = sent, cost adds up, none keeps the cache, and every prompt stays valid",
    [conversationArbitrary()],
    ([messages]) => {
      assert.isUndefined(checkInvariants(messages))
    },
    { arbitrary: { runs: 500 } }
  )

  it.prop(
    "the same holds on conversations with aborted replies and consecutive assistants",
    [conversationArbitrary({ allowInvalid: true })],
    ([messages]) => {
      assert.isUndefined(checkInvariants(messages))
    },
    { arbitrary: { runs: 300 } }
  )

  it("holds on long generated sessions, and compaction keeps them in the window", () => {
    for (let seed = 1; seed <= 12; seed++) {
      const messages = generateSession(seed, { messages: 120 })
      assert.isUndefined(checkInvariants(messages), `seed ${seed}`)
      const report = simulate(messages, { ...small, policies: smallPolicies })
      assert.isAbove(report.policies[0]!.overWindow, 0, `seed ${seed}: the raw baseline should overflow`)
      assert.isAbove(report.policies[1]!.summarizerCalls, 0, `seed ${seed}: compaction should run`)
      for (const p of report.policies.slice(1)) assert.strictEqual(p.overWindow, 0, `seed ${seed}: ${p.name}`)
    }
  })
})

// ============================================================================
// Corpus
// ============================================================================

describe("Simulate: real sessions", () => {
  const sessions = corpus()
  const reports = new Map(sessions.map((s) => [s.name, simulate(s.messages)]))
  const byName = (name: string) => (report: ReturnType<typeof simulate>) =>
    report.policies.find((p) => p.name === name)!
  const tuned = `ours (minSavings ${OURS_TUNED_MIN_SAVINGS.toLocaleString("en-US")})`

  it("runs every policy on every session with consistent figures", () => {
    for (const s of sessions) {
      const report = reports.get(s.name)!
      const replies = s.messages.filter((m) => m.role === "assistant").length
      let lastReply = s.messages.length - 1
      while (s.messages[lastReply]!.role !== "assistant") lastReply--
      const raw = byName("none")(report)
      assert.strictEqual(raw.cacheInvalidations, 0, s.name)
      // the raw baseline writes every message before the last reply exactly once
      assert.strictEqual(raw.cacheWrite, estimateTokens(s.messages.slice(0, lastReply)), s.name)
      for (const p of report.policies) {
        assert.strictEqual(p.requests, replies, `${s.name} ${p.name}`)
        assert.strictEqual(p.cacheRead + p.cacheWrite, p.tokensSent, `${s.name} ${p.name}`)
        if (p.name !== "none") assert.strictEqual(p.overWindow, 0, `${s.name} ${p.name} went over the window`)
        assert.isAtMost(p.peakContext, raw.peakContext, `${s.name} ${p.name}`)
      }
    }
  })

  it("shows the raw baseline of the longest session going over the window", () => {
    const report = reports.get("pi__before-compaction")!
    assert.isAbove(byName("none")(report).overWindow, 0)
    assert.include(formatReport(report), "Note: none exceeds the 200,000-token window")
  })

  it("ours never costs more than no compaction on the long pi sessions, and minSavings batches evictions", () => {
    const long = sessions.filter((s) => s.name.startsWith("pi__"))
    assert.strictEqual(long.length, 3)
    for (const s of long) {
      const report = reports.get(s.name)!
      const raw = byName("none")(report)
      const ours = byName("ours (defaults)")(report)
      const oursTuned = byName(tuned)(report)
      assert.isBelow(ours.cost, raw.cost, s.name)
      assert.isBelow(oursTuned.cost, raw.cost, s.name)
      assert.isAtMost(oursTuned.cacheInvalidations, ours.cacheInvalidations, s.name)
      const eager = simulatePolicy(s.messages, {
        name: "ours (minSavings 0)",
        strategy: { _tag: "Evict", keepRecent: 10, minSavings: 0, pinning: true }
      })
      assert.isAbove(eager.cacheInvalidations, 2 * ours.cacheInvalidations, s.name)
      assert.isAbove(eager.cost, ours.cost, s.name)
    }
  })
})
