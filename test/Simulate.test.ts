import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { readFileSync } from "node:fs"
import { MAX_BREAKPOINTS } from "../src/Cache.ts"
import { replayMessages } from "../src/cli/Replay.ts"
import type { Request } from "../src/Request.ts"
import { importSession, type Session } from "../src/Import.ts"
import { PromptCache } from "../src/internal/simulate/cache.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy, zeroUsage } from "../src/Policy.ts"
import type { SimPolicy } from "../src/Simulate.ts"
import { formatReport, paretoFront, simulate, standardPolicies, sweep, type SweepPoint } from "../src/Simulate.ts"
import { Summarizer } from "../src/Summarizer.ts"
import { summaryText } from "../src/Summary.ts"
import { checkRequest, formatApiViolations } from "./fixtures/ApiRules.ts"
import { conversationArbitrary, generateSession } from "./fixtures/Conversation.ts"
import { rawFile } from "./fixtures/Corpus.ts"
import { modelPrice, type RequestEvent } from "../src/internal/simulate/model.ts"
import { checkAgainstRecord } from "../src/internal/simulate/record.ts"
import { simulatePolicy } from "../src/internal/simulate/replay.ts"

const raw = (name: string): Session => Effect.runSync(importSession(readFileSync(rawFile(`${name}.jsonl`), "utf8")))
const PI = ["pi__before-compaction", "pi__large-session", "pi__session-2025-12-17_thinking"] as const
const RECORDED = [...PI, "claude-code__coverage-test-fix"] as const

const none: SimPolicy = { name: "none", strategy: { _tag: "None" } }
const atWindow: SimPolicy = { name: "window", strategy: { _tag: "CompactOnly" } }
const ours: SimPolicy = { name: "ours", strategy: { _tag: "Library", options: {} } }

/** A prompt of `n` units of `tokens` each, keyed by position (`salt` changes every key from `from` on). */
const prompt = (n: number, tokens: number, breakpoints: ReadonlyArray<number>, salt = 0, from = n) => ({
  keys: Array.from({ length: n }, (_, i) => i < from ? i + 1 : (i + 1) * 1000 + salt),
  cumulative: Array.from({ length: n }, (_, i) => (i + 1) * tokens),
  breakpoints
})

describe("the cache model", () => {
  it("hits only at a breakpoint, looking back at most 20 blocks", () => {
    const cache = new PromptCache(0)
    assert.deepStrictEqual(cache.price(prompt(10, 100, [9]), 0), { read: 0, write: 1000, input: 0 })
    // 19 blocks later: the entry at block 9 is within the lookback of the breakpoint at 28
    assert.deepStrictEqual(cache.price(prompt(29, 100, [28]), 1000), { read: 1000, write: 1900, input: 0 })
    // 21 blocks past the last entry (28): a full miss however small the change
    const far = new PromptCache(0)
    far.price(prompt(10, 100, [9]), 0)
    assert.strictEqual(far.price(prompt(31, 100, [30]), 1000).read, 0)
    // a second breakpoint inside the lookback saves it
    const two = new PromptCache(0)
    two.price(prompt(10, 100, [9]), 0)
    assert.strictEqual(two.price(prompt(31, 100, [9, 30]), 1000).read, 1000)
  })

  it("never caches a prefix below the minimum, and bills what follows the last breakpoint as input", () => {
    const cache = new PromptCache(1024)
    assert.deepStrictEqual(cache.price(prompt(5, 100, [4]), 0), { read: 0, write: 0, input: 500 })
    assert.deepStrictEqual(cache.price(prompt(20, 100, [15]), 1), { read: 0, write: 1600, input: 400 })
    assert.strictEqual(cache.price(prompt(20, 100, [15]), 2).read, 1600)
  })

  it("expires after 5 minutes, and every hit refreshes the entry", () => {
    const cache = new PromptCache(0)
    cache.price(prompt(5, 100, [4]), 0)
    assert.strictEqual(cache.price(prompt(5, 100, [4]), 299_000).read, 500, "4:59 later: a hit")
    assert.strictEqual(cache.price(prompt(5, 100, [4]), 598_000).read, 500, "refreshed by the hit")
    assert.strictEqual(cache.price(prompt(5, 100, [4]), 898_000).read, 0, "5:00 after the last hit: gone")
  })

  it("a changed block misses everything behind it; only a breakpoint before it still reads", () => {
    const alone = new PromptCache(0)
    alone.price(prompt(10, 100, [9]), 0)
    assert.strictEqual(alone.price(prompt(10, 100, [4, 9], 7, 6), 1).read, 0, "nothing was written at block 4")
    const cache = new PromptCache(0)
    cache.price(prompt(10, 100, [4, 9]), 0)
    assert.deepStrictEqual(cache.price(prompt(10, 100, [4, 9], 7, 6), 1), { read: 500, write: 500, input: 0 })
  })
})

describe("prices", () => {
  it("prices by model family", () => {
    assert.deepInclude(modelPrice("claude-opus-4-5"), { input: 5, output: 25 })
    assert.deepInclude(modelPrice("claude-opus-4-5-20251101"), { input: 5, output: 25 })
    assert.deepInclude(modelPrice("claude-opus-4-1"), { input: 15, output: 75 })
    assert.deepInclude(modelPrice("claude-sonnet-4-5"), { input: 3, output: 15 })
    assert.deepInclude(modelPrice("claude-haiku-4-5"), { input: 1, output: 5 })
    assert.deepInclude(modelPrice(undefined), { input: 3 })
  })

  it("bills each request at its model's price: read 0.1×, write 1.25×, input 1×, output per model", () => {
    const report = simulatePolicy(raw("pi__session-2025-12-17_thinking"), none)
    for (const r of report.perRequest) {
      const p = modelPrice(r.model)
      const dollars = (r.cacheRead * 0.1 * p.input + r.cacheWrite * 1.25 * p.input + r.input * p.input +
        r.output * p.output) / 1e6
      assert.approximately(r.dollars, dollars, 1e-9)
      assert.approximately(r.cacheRead + r.cacheWrite + r.input, r.promptTokens, 1e-6)
    }
  })
})

describe("checked against the bills", () => {
  for (const name of RECORDED) {
    it(`${name}: the recorded requests through the cache model reproduce the billed tokens within 3%`, () => {
      const check = checkAgainstRecord(raw(name))
      assert.isAbove(check.requests, 10)
      assert.isAtMost(Math.abs(check.error), 0.03, JSON.stringify(check))
      for (const k of ["read", "write"] as const) {
        assert.isAtMost(Math.abs(check.modelled[k] - check.billed[k]), 0.1 * check.billed[k] + 1000, k)
      }
    })
  }
})

describe("simulate", () => {
  it.effect("its requests are the Conversation service's, fed the usage and the summaries it predicts", () =>
    Effect.gen(function* () {
      const messages = generateSession(5, { messages: 240 })
      const policy = CompactionPolicy.makeUnsafe({
        contextWindow: 20_000,
        minRemaining: 2_000,
        keepRecentTokens: 2_000
      })
      const simulated: Array<RequestEvent> = []
      const report = simulatePolicy(messages, {
        name: "ours",
        strategy: { _tag: "Library", options: {} }
      }, { onRequest: (e) => simulated.push(e), compaction: policy })
      assert.isAbove(report.tokensOffloaded, 0, "the session evicts")
      assert.isAbove(report.compactions, 0, "the session compacts")
      // the service gets, for each reply, the usage the engine predicted, and for each compaction the engine's summary
      // (its stand-in text is one line: the rest of the summary message is the appendix the compaction adds)
      const usage = new Map(simulated.map((e) => [e.index, e.usage]))
      const summaries = simulated.flatMap((e, i) =>
        report.perRequest[i]!.compacted ? [summaryText(e.prompt[0]!)!.split("\n")[0]!] : []
      )
      const summarizer = Layer.succeed(Summarizer, {
        name: "simulated",
        summarize: () =>
          Effect.sync(() => ({
            text: summaries.shift()!,
            model: "simulated",
            usage: zeroUsage,
            summarizer: "simulated"
          }))
      })
      const sent: Array<Request> = []
      const replayed = yield* replayMessages(messages, usage, {
        policy,
        onRequest: (_, request) => Effect.sync(() => void sent.push(request))
      }).pipe(Effect.provide(summarizer))
      assert.strictEqual(replayed.compactions, report.compactions)
      assert.strictEqual(replayed.evictions, report.evictions)
      assert.strictEqual(sent.length, simulated.length)
      simulated.forEach((e, i) => assert.deepStrictEqual(sent[i], e.request, `request ${i + 1}`))
    }))

  it.prop(
    "every request it prices passes the API rules, with at most 4 breakpoints; read + write + input = sent",
    [conversationArbitrary({ allowInvalid: true })],
    ([messages]) => {
      const prompts: Array<ReadonlyArray<Message>> = []
      const report = simulate(messages, {
        policies: [ours, atWindow, none],
        compaction: CompactionPolicy.makeUnsafe({
          contextWindow: 20_000,
          minRemaining: 2_000,
          keepRecentTokens: 2_000
        }),
        onRequest: (e) => prompts.push(e.prompt)
      })
      for (const p of prompts) {
        const violations = checkRequest({ messages: p })
        assert.deepStrictEqual(violations, [], formatApiViolations(violations))
      }
      for (const policy of report.policies) {
        for (const r of policy.perRequest) {
          assert.isAtMost(r.breakpoints, MAX_BREAKPOINTS)
          assert.approximately(r.cacheRead + r.cacheWrite + r.input, r.promptTokens, 1e-6)
        }
      }
      assert.strictEqual(report.policies[2]!.compactions, 0, "none never compacts")
      assert.strictEqual(report.policies[2]!.misses.policy, 0, "an append-only session never rewrites its cache")
    },
    { timeout: 180_000, arbitrary: { runs: 300 } }
  )

  it("never mutates its input and is deterministic", () => {
    const session = raw("pi__session-2025-12-17_thinking")
    const before = JSON.stringify(session.messages)
    const a = simulate(session, { policies: [ours, atWindow] })
    const b = simulate(session, { policies: [ours, atWindow] })
    assert.strictEqual(JSON.stringify(session.messages), before)
    assert.deepStrictEqual(a, b)
    assert.strictEqual(formatReport(a), formatReport(b))
    assert.include(formatReport(a), "| ours |")
  })

  it("the goal: the three pi sessions cost ≤ 0.40× none and ≤ 0.55× compaction at the window, ≤ 1 miss per 10", () => {
    let oursDollars = 0
    let noneDollars = 0
    let windowDollars = 0
    let misses = 0
    let requests = 0
    for (const name of PI) {
      const report = simulate(raw(name), { policies: [none, atWindow, ours] })
      const [n, w, o] = report.policies
      noneDollars += n!.dollars
      windowDollars += w!.dollars
      oursDollars += o!.dollars
      misses += o!.misses.policy + o!.misses.external
      requests += o!.requests
      assert.strictEqual(o!.overWindow, 0, `${name}: ours stays in the window`)
      assert.strictEqual(w!.overWindow, 0, `${name}: the baseline is feasible`)
    }
    assert.isAtMost(oursDollars / noneDollars, 0.40)
    assert.isAtMost(oursDollars / windowDollars, 0.55)
    assert.isAtMost(misses * 10, requests)
  }, 180_000)

  it("the standard policies name none and the window baseline first", () => {
    const names = standardPolicies().map((p) => p.name)
    assert.deepStrictEqual(names.slice(0, 2), ["none", "compaction at the window"])
    assert.include(names, "ours (defaults)")
  })

  it("the Pareto front keeps exactly the points no other is cheaper and retains no less than", () => {
    const tally = (share: number) => ({ counted: 100, present: Math.round(100 * share), inTail: 0, share })
    const retention = (share: number): SweepPoint["retention"] => ({
      categories: {
        path: tally(share),
        command: tally(share),
        error: tally(share),
        identifier: tally(share),
        instruction: tally(share),
        plan: tally(share)
      },
      total: tally(share)
    })
    const point = (name: string, dollars: number, next: number, atEnd: number): SweepPoint => ({
      name,
      options: {},
      dollars,
      peakContext: 1,
      misses: 0,
      requests: 1,
      compactions: 1,
      retention: retention(next),
      retentionAtEnd: retention(atEnd)
    })
    const points = [
      point("a", 1, 0.9, 0.8),
      point("b", 2, 0.95, 0.8), // dearer, retains more next
      point("c", 2, 0.9, 0.8), // dearer than a, no better: dominated
      point("d", 3, 0.9, 0.9), // dearest, retains more at the end
      point("e", 3, 0.9, 0.85), // d retains more at the same cost: dominated
      point("f", 1, 0.9, 0.8) // a's twin: neither beats the other
    ]
    assert.deepStrictEqual(paretoFront(points).map((p) => p.name), ["a", "b", "d", "f"])
  })

  it("the sweep's retention pools what the compactions of its point kept", () => {
    const messages = generateSession(7, { messages: 240 })
    const compaction = CompactionPolicy.makeUnsafe({
      contextWindow: 20_000,
      minRemaining: 2_000,
      keepRecentTokens: 2_000
    })
    const [point] = sweep([messages], { compactAtTokens: [8_000], keepRecent: [5], minSavings: [undefined] }, {
      compaction
    })
    const report = simulatePolicy(messages, {
      name: "same",
      strategy: { _tag: "Library", options: { keepRecent: 5, policy: { compactAtTokens: 8_000 } } }
    }, { compaction })
    assert.isAbove(report.compactions, 1, "the session compacts more than once")
    assert.strictEqual(point!.compactions, report.compactions)
    assert.strictEqual(point!.dollars, report.dollars)
    const measured = report.perRequest.flatMap((r) => r.retention === undefined ? [] : [r.retention.total])
    assert.strictEqual(point!.retention.total.counted, measured.reduce((a, t) => a + t.counted, 0))
    assert.strictEqual(point!.retention.total.present, measured.reduce((a, t) => a + t.present, 0))
    assert.isAtMost(point!.retentionAtEnd.total.present, point!.retentionAtEnd.total.counted)
    assert.isAtLeast(point!.retentionAtEnd.total.counted, 1, "the spans' anchors are looked for at the end")
  })
})
