/**
 * The cache lifetime as a policy field (issue 28: "TTL"): `cacheTtl: "5m"` (default) or `"1h"` is written on every
 * breakpoint, and the cold timer, the rent-or-buy rule and the simulator's prices and expiries follow it. Requests are
 * judged by the independent checker of API-RULES (rule 32: a TTL is "5m" or "1h").
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { TestClock } from "effect/testing"
import * as Result from "effect/Result"
import * as ConversationNs from "../src/Conversation.ts"
import * as ConversationStateNs from "../src/ConversationState.ts"
import type { Request } from "../src/Request.ts"
import { evictStaleToolResults } from "../src/Evict.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy, defaultPolicy } from "../src/Policy.ts"
import { simulate } from "../src/Simulate.ts"
import { newlyUnboundTokens } from "../src/internal/thinkingBinding.ts"
import { checkRequest, formatApiViolations } from "./fixtures/ApiRules.ts"
import { generateSession } from "./fixtures/Conversation.ts"

const { Conversation } = ConversationNs

/** Every `cache_control` marker of a request: system, tools and message blocks. */
const markers = (request: Request): Array<Record<string, unknown>> => {
  const out: Array<Record<string, unknown>> = []
  const visit = (blocks: unknown) => {
    if (!Array.isArray(blocks)) return
    for (const b of blocks as Array<Record<string, unknown>>) {
      if (b["cache_control"] !== undefined) out.push(b["cache_control"] as Record<string, unknown>)
    }
  }
  visit(request.system)
  visit(request.tools)
  for (const m of request.messages) visit(m.content)
  return out
}

/** `session` through a `Conversation` in memory under `policy`: every prepared request, in order. */
const requestsOf = (session: ReadonlyArray<Message>, policy: CompactionPolicy) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    const requests: Array<Request> = []
    for (const message of ConversationStateNs.asMessageParams(session)) {
      if (message.role === "assistant") {
        const { epoch, request } = yield* conversation.prepare
        requests.push(request)
        yield* conversation.recordReply(message, { input_tokens: 2_000, output_tokens: 50 }, { requestEpoch: epoch })
      } else yield* conversation.append(message)
    }
    return requests
  }).pipe(
    Effect.provide(
      ConversationNs.layerMemory({ policy, system: "You are a coding agent.", minSavings: 0 }).pipe(
        Layer.provide(ExtractiveSummarizer.layer)
      )
    )
  )

const oneHour = CompactionPolicy.makeUnsafe({ cacheTtl: "1h" })

describe("the policy's cacheTtl", () => {
  it("defaults to 5 minutes, takes 1 hour, and rejects anything else with the field named", () => {
    assert.strictEqual(defaultPolicy.cacheTtl, "5m")
    assert.strictEqual(oneHour.cacheTtl, "1h")
    const bad = CompactionPolicy.make({ cacheTtl: "2h" as never })
    assert.isTrue(Result.isFailure(bad))
    if (Result.isFailure(bad)) {
      assert.strictEqual(bad.failure.field, "cacheTtl")
      assert.include(bad.failure.message, "5m, 1h")
    }
  })

  it.effect("every breakpoint carries it: 1h on each marker, and the 5-minute marker unchanged by default", () =>
    Effect.gen(function* () {
      for (let s = 0; s < 6; s++) {
        const session = generateSession(9_100 + s, { messages: 80, maxOutput: 3_000 })
        const hour = yield* requestsOf(session, oneHour)
        const five = yield* requestsOf(session, defaultPolicy)
        assert.strictEqual(hour.length, five.length)
        let marked = 0
        for (const [i, request] of hour.entries()) {
          const violations = checkRequest(request)
          assert.strictEqual(violations.length, 0, `session ${s} request ${i}: ${formatApiViolations(violations)}`)
          for (const m of markers(request)) assert.deepStrictEqual(m, { type: "ephemeral", ttl: "1h" })
          for (const m of markers(five[i]!)) assert.deepStrictEqual(m, { type: "ephemeral" })
          // the same breakpoints, only the lifetime differs
          assert.strictEqual(markers(request).length, markers(five[i]!).length)
          assert.strictEqual(
            JSON.stringify(request).replaceAll(`,"ttl":"1h"`, ""),
            JSON.stringify(five[i]!),
            `session ${s} request ${i}`
          )
          marked += markers(request).length
        }
        assert.isAbove(marked, 0)
      }
    }))

  it.effect("the cold timer follows it: a 10-minute pause is cold under 5m (compaction brought forward), warm under 1h", () =>
    Effect.gen(function* () {
      // a human turn after a pause, with the context at 0.6 of the cost target: compaction only when the cache is cold
      const policy = (cacheTtl: "5m" | "1h") =>
        CompactionPolicy.makeUnsafe({ compactAtTokens: 40_000, keepRecentTokens: 2_000, cacheTtl })
      const session = ConversationStateNs.asMessageParams(generateSession(77, { messages: 60, maxOutput: 2_000 }))
      const compactsAfterPause = (cacheTtl: "5m" | "1h") =>
        Effect.gen(function* () {
          const conversation = yield* Conversation
          for (const message of session) {
            if (message.role === "assistant") {
              const { epoch } = yield* conversation.prepare
              yield* conversation.recordReply(message, { input_tokens: 24_000, output_tokens: 50 }, {
                requestEpoch: epoch
              })
            } else yield* conversation.append(message)
          }
          if (session.at(-1)?.role !== "assistant") {
            const { epoch } = yield* conversation.prepare
            yield* conversation.recordReply({ role: "assistant", content: "Done." }, {
              input_tokens: 24_000,
              output_tokens: 50
            }, { requestEpoch: epoch })
          }
          yield* TestClock.adjust("10 minutes")
          yield* conversation.append({ role: "user", content: "Next, please tidy the tests." })
          const prepared = yield* conversation.prepare
          return prepared.compaction?._tag
        }).pipe(
          Effect.provide(
            ConversationNs.layerMemory({ policy: policy(cacheTtl), minFreedTokens: 100 }).pipe(
              Layer.provide(ExtractiveSummarizer.layer)
            )
          )
        )
      assert.strictEqual(yield* compactsAfterPause("5m"), "Compacted")
      assert.isUndefined(yield* compactsAfterPause("1h"))
    }))

  it("the rent-or-buy rule prices a rewrite at the lifetime's write price (1h offloads later, never earlier)", () => {
    let differs = 0
    for (let s = 0; s < 300; s++) {
      const session = generateSession(4_200 + s, { messages: 40 + (s % 60), maxOutput: 6_000 })
      const state: ConversationStateNs.ConversationState = {
        ...ConversationStateNs.emptyState(),
        view: ConversationStateNs.asMessageParams(session)
      }
      const offloaded = (cacheTtl: "5m" | "1h") =>
        ConversationStateNs.prepareStep(state, { policy: CompactionPolicy.makeUnsafe({ cacheTtl }), keepRecent: 3 })
          .transition.steps.flatMap((st) => st.change._tag === "Offloaded" ? st.change.offloaded : []).length
      const five = offloaded("5m")
      const hour = offloaded("1h")
      // the same decisions as the eviction given the prices outright (and the thinking an offload would unbind)
      const byPrice = (cacheWrite: number) =>
        evictStaleToolResults(session, 3, {
          prices: { cacheRead: 0.1, cacheWrite },
          droppedThinking: (m) => newlyUnboundTokens(session, { message: m, block: -1 }, [])
        }).offloaded.length
      assert.strictEqual(five, byPrice(1.25), `session ${s}, 5m`)
      assert.strictEqual(hour, byPrice(2), `session ${s}, 1h`)
      assert.isAtMost(hour, five, `session ${s}`)
      if (hour !== five) differs++
    }
    assert.isAbove(differs, 0, "no generated session where the dearer write changes the decision")
  })

  it("the simulator expires and prices the cache by it: a 10-minute gap misses under 5m only; 1h writes cost 2x", () => {
    const session = generateSession(31, { messages: 120, maxOutput: 2_000 })
    const t0 = Date.parse("2026-11-01T10:00:00Z")
    // a reply every 10 minutes: each request after the first finds a 5-minute cache expired
    const recorded = session.flatMap((m, messageIndex) =>
      m.role === "assistant" ? [{ messageIndex, timestamp: t0 + 600_000 * messageIndex }] : []
    )
    const policies = (["5m", "1h"] as const).map((cacheTtl) => ({
      name: cacheTtl,
      strategy: { _tag: "Library" as const, options: { policy: { cacheTtl } } }
    }))
    const report = simulate({ messages: session, recorded }, { policies })
    const [five, hour] = report.policies
    assert.isAbove(five!.misses.ttl, 0, "5m: the pauses expire the cache")
    assert.strictEqual(hour!.misses.ttl, 0, "1h: nothing expires within an hour")
    assert.isBelow(hour!.cacheWrite, five!.cacheWrite, "1h: less is written again")
  })
})
