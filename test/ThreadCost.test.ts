/**
 * Thread-aware eviction and compaction (issue 28): on a server-held thread a rewrite also restarts the thread (the
 * whole view uploaded again, the first request's latency), so the rent-or-buy rule adds that restart to the
 * rewrite's price, an offload near the compaction trigger waits for the compaction, and a compaction applies its kept
 * tail's offloads in the same rewrite. Judged on a real session replayed on threads: fewer restarts than the same
 * replay with a rewrite priced by the cache alone, fewer bytes uploaded, every request valid by the independent
 * checker with the conversation it stands for rebuilt by the thread rules, and no request over the window.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { readFileSync } from "node:fs"
import { renderHtml } from "../src/cli/Html.ts"
import { buildReport } from "../src/cli/Report.ts"
import { Conversation } from "../src/Conversation.ts"
import type { MessageParam, SdkReply } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { importSession } from "../src/Import.ts"
import { DEFAULT_KEEP_RECENT, evictStaleToolResults } from "../src/Evict.ts"
import { worthIt } from "../src/internal/evictionRules.ts"
import { defersToCompaction, restartCost, threadRestartOf } from "../src/internal/threadCost.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import type { PolicyReport } from "../src/Simulate.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { checkRequest, formatApiViolations, withoutCacheControl } from "./fixtures/ApiRules.ts"
import { generateSession } from "./fixtures/Conversation.ts"
import { corpus } from "./fixtures/Corpus.ts"
import { simulatePolicy } from "../src/internal/simulate/replay.ts"

const utf8 = new TextEncoder()
const PRICES = { cacheRead: 0.1, cacheWrite: 1.25 }

describe("the restart model", () => {
  it("the rent-or-buy rule adds the restart to the rewrite's price", () => {
    const behind = () => 1_000 // a rewrite behind the change: 1,250 at the write price
    // reads paid 1,300 (13,000 freed-token requests at 0.1): worth it on the cache alone
    assert.isTrue(worthIt({ prices: PRICES }, 100, 13_000, behind))
    // a restart of 500 more: not yet, until the reads reach 1,750
    assert.isFalse(worthIt({ prices: PRICES, restart: () => 500 }, 100, 13_000, behind))
    assert.isTrue(worthIt({ prices: PRICES, restart: () => 500 }, 100, 17_500, behind))
    // a cold cache rewrites everything anyway, and a fixed threshold ignores prices
    assert.isTrue(worthIt({ prices: PRICES, restart: () => 1e9, cacheCold: true }, 100, 0, behind))
    assert.isTrue(worthIt({ prices: PRICES, restart: () => 1e9, minSavings: 50 }, 100, 0, behind))
  })

  it("defaults, overrides and false; the margin below the trigger", () => {
    const price = threadRestartOf(undefined)!
    assert.deepStrictEqual(price, { perViewToken: 0.1, perRestart: 1_000, margin: 0.2 })
    assert.strictEqual(restartCost(price, 50_000), 6_000)
    assert.deepStrictEqual(threadRestartOf({ perRestart: 0 }), { perViewToken: 0.1, perRestart: 0, margin: 0.2 })
    assert.isUndefined(threadRestartOf(false))
    assert.isTrue(defersToCompaction(price, 48_000, 60_000))
    assert.isFalse(defersToCompaction(price, 47_999, 60_000))
    assert.isFalse(defersToCompaction({ ...price, margin: 0 }, 59_999, 60_000))
  })

  it("evictStaleToolResults: a restart cost holds back an offload the cache alone would take", () => {
    const session = generateSession(7, { messages: 400 })
    // find a prefix where the rent-or-buy rule just offloads, then price a large restart on it
    let found = 0
    for (let n = 40; n <= session.length && found < 3; n += 7) {
      const messages = session.slice(0, n)
      const plain = evictStaleToolResults(messages, 10)
      if (plain.offloaded.length === 0) continue
      found++
      const restarted = evictStaleToolResults(messages, 10, { restartCost: 1e9 })
      assert.strictEqual(restarted.messages, messages, `${n} messages: a costly restart keeps the input`)
      assert.deepStrictEqual(evictStaleToolResults(messages, 10, { restartCost: 0 }).offloaded, plain.offloaded)
    }
    assert.isAbove(found, 0, "some prefix offloads on the cache alone")
  })
})

/** The replay's requests as the thread rules rebuild them: every violation and mismatch, by request. */
const judged = (
  session: ReadonlyArray<Message>,
  threadRestart: false | undefined,
  compaction: CompactionPolicy,
  check = true
) => {
  const problems: Array<string> = []
  const held = new Map<string, ReadonlyArray<unknown>>()
  let n = 0
  const report: PolicyReport = simulatePolicy(
    session,
    {
      name: "ours",
      // priced by the cache alone: rewrites in place, as before the append-only discipline (issue 39)
      strategy: {
        _tag: "Library",
        options: { threadRestart, ...(threadRestart === false ? { appendOnly: false } : {}) }
      }
    },
    {
      compaction,
      threads: true,
      onRequest: (event) => {
        if (!check) return
        n++
        const request = event.request
        const whole = withoutCacheControl(event.prompt) as ReadonlyArray<unknown>
        const thread = request.thread
        let before: ReadonlyArray<unknown> | undefined
        if (thread?.type === "continue") {
          before = held.get(thread.previous_message_id)
          if (before === undefined) problems.push(`request ${n}: continues an unknown reply`)
          const rebuilt = [...before ?? [], ...withoutCacheControl(request.messages) as ReadonlyArray<unknown>]
          if (JSON.stringify(rebuilt) !== JSON.stringify(whole)) problems.push(`request ${n}: rebuilt view differs`)
        } else if (thread?.type !== "create") problems.push(`request ${n}: no thread`)
        const violations = checkRequest(request as never, before === undefined ? {} : { held: before as never })
        if (violations.length > 0) problems.push(`request ${n}: ${formatApiViolations(violations)}`)
        // the bytes counted per message object are the body's exact UTF-8 length
        if (utf8.encode(JSON.stringify(request)).length !== event.figures.uploadedBytes) {
          problems.push(`request ${n}: uploadedBytes differs from the body's length`)
        }
        if (event.figures.promptTokens + event.figures.output > compaction.contextWindow) {
          problems.push(`request ${n}: over the window`)
        }
        const reply = session[event.index]!
        held.set(`msg_replay_${event.index}`, [
          ...whole,
          withoutCacheControl({ role: "assistant", content: reply.content })
        ])
      }
    }
  )
  return { report, problems }
}

describe("on a thread, over a real session", () => {
  it("batching offloads with compactions restarts the thread less, and every request stays valid", () => {
    const session = corpus().find((s) => s.name === "pi__session-2025-12-17_thinking")
    assert.isDefined(session, "pi__session-2025-12-17_thinking in ../shared/data/sessions")
    const compaction = CompactionPolicy.makeUnsafe({ contextWindow: 60_000 })
    const batched = judged(session!.messages, undefined, compaction)
    // the replay it is compared with: the same transitions, judged by test/ConversationThreads.test.ts
    const cacheOnly = judged(session!.messages, false, compaction, false)
    assert.deepStrictEqual(batched.problems, [])
    const b = batched.report
    const c = cacheOnly.report
    assert.strictEqual(b.requests, c.requests)
    assert.isAbove(c.threadRestarts, 0)
    assert.isBelow(b.threadRestarts, c.threadRestarts, `restarts ${b.threadRestarts} against ${c.threadRestarts}`)
    assert.isBelow(b.uploadedBytes, c.uploadedBytes)
    assert.strictEqual(b.overWindow, 0)
    // each restart is a request that created a thread after the first; the bytes add up per request
    assert.strictEqual(b.perRequest.filter((r) => r.thread === "create").length, b.threadRestarts + 1)
    assert.strictEqual(b.perRequest.reduce((a, r) => a + r.uploadedBytes, 0), b.uploadedBytes)
    for (const r of b.perRequest) {
      if (r.thread === "continue") assert.isBelow(r.uploadedBytes, r.fullBytes)
    }
  }, 180_000)
})

describe("the report counts the bytes each request uploads", () => {
  it.effect("on threads and off: per request, in total, and drawn one bar a request", () =>
    Effect.gen(function* () {
      const file = corpus().find((s) => s.name === "claude-code__coverage-test-fix")!.file
      const session = yield* importSession(readFileSync(file, "utf8"))
      const threaded = (yield* buildReport(session, { file: "cc", threads: true })).data
      const plain = (yield* buildReport(session, { file: "cc" })).data
      for (const data of [threaded, plain]) {
        assert.strictEqual(data.requests.reduce((a, r) => a + r.uploadedBytes, 0), data.chosen.uploadedBytes)
        assert.strictEqual(data.requests.reduce((a, r) => a + r.fullBytes, 0), data.chosen.fullBytes)
      }
      // off threads every request uploads itself whole; on them a continue uploads less than its whole request
      assert.isTrue(plain.requests.every((r) => r.thread === null && r.uploadedBytes === r.fullBytes))
      const continues = threaded.requests.filter((r) => r.thread === "continue")
      assert.isAbove(continues.length, threaded.requests.length / 2)
      assert.isTrue(continues.every((r) => r.uploadedBytes < r.fullBytes))
      assert.isBelow(threaded.chosen.uploadedBytes, plain.chosen.uploadedBytes / 2)
      const html = renderHtml(yield* buildReport(session, { file: "cc", threads: true }))
      const chart = /<svg id="upload-chart"[\s\S]*?<\/svg>/.exec(html)?.[0] ?? ""
      assert.strictEqual(chart.match(/class="s-uploaded"/g)?.length, threaded.requests.length)
      assert.include(html, "Bytes uploaded per request")
      assert.include(html, `${threaded.chosen.threadRestarts} restarts after the first request`)
    }))
})

describe("the Conversation service on threads, with the thread-aware decisions", () => {
  it.effect(
    "every continue rebuilds its whole request; a compaction's offloads share its restart",
    () =>
      Effect.gen(function* () {
        const policy = CompactionPolicy.makeUnsafe({
          contextWindow: 24_000,
          minRemaining: 4_000,
          keepRecentTokens: 3_000,
          compactAtTokens: 8_000
        })
        const layer = Conversation.layerMemory({ threads: true, system: "You are a coding agent.", policy }).pipe(
          Layer.provide(ExtractiveSummarizer.layer)
        )
        let steps = 0
        let continues = 0
        let batched = 0
        let compactions = 0
        let replies = 0
        for (let seed = 1; steps < 400; seed++) {
          const conversation = yield* Effect.provide(
            Effect.gen(function* () {
              return yield* Conversation
            }),
            layer
          )
          const held = new Map<string, ReadonlyArray<unknown>>()
          for (
            const message of generateSession(seed, { messages: 120, maxOutput: 4_000 }) as unknown as ReadonlyArray<
              MessageParam
            >
          ) {
            if (message.role !== "assistant") {
              yield* conversation.append(message)
              continue
            }
            const prepared = yield* conversation.prepare
            steps++
            const request = prepared.request
            const label = `seed ${seed}, request ${steps}`
            let conversationOf: ReadonlyArray<unknown>
            let before: ReadonlyArray<unknown> | undefined
            if (request.thread?.type === "continue") {
              continues++
              before = held.get(request.thread.previous_message_id)
              assert.isDefined(before, `${label}: continues a reply the server holds`)
              conversationOf = [...before!, ...withoutCacheControl(request.messages) as ReadonlyArray<unknown>]
              // the whole request beside it, built only when read, is the conversation the continue stands for
              assert.strictEqual(
                JSON.stringify(conversationOf),
                JSON.stringify(withoutCacheControl(prepared.fullRequest!.messages)),
                `${label}: the rebuilt conversation`
              )
              assert.strictEqual(prepared.fullRequest, prepared.fullRequest, "built once")
            } else {
              assert.deepStrictEqual(request.thread, { type: "create" }, label)
              conversationOf = withoutCacheControl(request.messages) as ReadonlyArray<unknown>
              if (prepared.compaction?._tag === "Compacted") {
                compactions++
                // the compaction left nothing its kept tail was due: a cold eviction of the view offloads nothing more
                const state = yield* conversation.state
                const left = evictStaleToolResults(state.view as never, DEFAULT_KEEP_RECENT, {
                  cacheCold: true,
                  pinned: state.hot.pinned
                })
                assert.strictEqual(left.offloaded.length, 0, `${label}: offloads left after the compaction`)
              }
              if (prepared.compaction?._tag === "Compacted" && prepared.offloaded.length > 0) batched++
            }
            const violations = checkRequest(request as never, before === undefined ? {} : { held: before as never })
            assert.strictEqual(violations.length, 0, `${label}: ${formatApiViolations(violations)}`)
            const view = (yield* conversation.state).view
            const context = estimateTokens(view as never)
            assert.isAtMost(context, policy.contextWindow, `${label}: the view fits the window`)
            const reply: SdkReply = {
              id: `msg_cost_${++replies}`,
              type: "message",
              role: "assistant",
              content: (typeof message.content === "string"
                ? [{ type: "text", text: message.content }]
                : message.content) as SdkReply["content"],
              stop_reason: "end_turn",
              usage: { input_tokens: context, output_tokens: 50 }
            }
            yield* conversation.recordReply(reply, undefined, { requestEpoch: prepared.epoch })
            held.set(reply.id, [...conversationOf, { role: "assistant", content: reply.content }])
          }
        }
        assert.isAbove(continues, steps / 2, `continues ${continues} of ${steps}`)
        assert.isAbove(batched, 0, `some of the ${compactions} compactions applied offloads in its own rewrite`)
      }),
    180_000
  )
})
