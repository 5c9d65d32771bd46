/**
 * Exact counts (issue 28, API-RULES 34): `TokenCounter.layer` counts through the real `@anthropic-ai/sdk` against the
 * local server, whose tokenizer (`MessagesApiServer.countTokens`) is exact by definition; a failed count is the
 * estimate calibrated by the exact counts before it, with its typed error, and never breaks a step. With an exact
 * counter, `Conversation`'s trigger fires on exactly the requests whose count passes the policy's thresholds (judged
 * on the bodies the server received, over a real session), and `minFreedTokens` is checked on the counts before and
 * after the compaction, where the estimate would decide otherwise.
 */
import Anthropic from "@anthropic-ai/sdk"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer } from "effect"
import { TestClock } from "effect/testing"
import { Conversation } from "../src/Conversation.ts"
import { asMessageParams, type MessageParam } from "../src/ConversationState.ts"
import type { Request } from "../src/Request.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { CompactionPolicy, contextTokens } from "../src/Policy.ts"
import { SUMMARY_HEADER } from "../src/Summary.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { TokenCounter } from "../src/TokenCounter.ts"
import { withoutCacheControl } from "./fixtures/ApiRules.ts"
import { corpus } from "./fixtures/Corpus.ts"
import { usageOf } from "./fixtures/ConversationReplay.ts"
import * as MessagesApiServer from "./fixtures/MessagesApiServer.ts"
import { countTokens } from "./fixtures/MessagesApiServer.ts"

const MODEL = "claude-test"
const clientOf = (server: MessagesApiServer.MessagesApiServer) =>
  new Anthropic({ apiKey: "sk-test-key", baseURL: server.url, maxRetries: 0 })
const user = (text: string): MessageParam => ({ role: "user", content: text })
const assistant = (text: string): MessageParam => ({ role: "assistant", content: [{ type: "text", text }] })
const countWith = (layer: Layer.Layer<TokenCounter>, request: TokenCounter.Request) =>
  TokenCounter.use((counter) => counter.count(request)).pipe(Effect.provide(layer))

describe("TokenCounter", () => {
  it.effect("counts exactly through the SDK: the server's count of the request, cache_control counting nothing", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const layer = TokenCounter.layer({ client: clientOf(server), model: MODEL })
      const messages = [user("Read src/a.ts"), assistant("It exports one function."), user("Now fix it.")]
      const request = { system: "You are a careful coding agent.", messages }
      const count = yield* countWith(layer, request)
      assert.strictEqual(count.exact, true)
      assert.isUndefined(count.error)
      assert.strictEqual(count.tokens, countTokens(request))
      assert.strictEqual(count.estimate, estimateTokens(messages as never) + Math.ceil(31 / 4))
      // the body the SDK posted is the request (and the model), to count_tokens, and counts the same with a breakpoint
      const posted = server.requests.at(-1)!
      assert.strictEqual(posted.path, "/v1/messages/count_tokens")
      assert.deepStrictEqual(posted.body, { model: MODEL, ...request })
      const marked = {
        ...request,
        messages: [...messages.slice(0, 2), {
          role: "user" as const,
          content: [{ type: "text" as const, text: "Now fix it.", cache_control: { type: "ephemeral" as const } }]
        }]
      }
      assert.strictEqual(
        countTokens(marked),
        countTokens({ ...request, messages: withoutCacheControl(marked.messages) as never })
      )
      // a request naming betas goes to the beta endpoint with its header
      yield* countWith(layer, { ...request, betas: ["thinking-binding-controls-2026-08-01"] })
      const beta = server.requests.at(-1)!
      assert.strictEqual(beta.path.split("?")[0], "/v1/messages/count_tokens")
      assert.include(String(beta.headers["anthropic-beta"]), "thinking-binding-controls-2026-08-01")
      assert.notProperty(beta.body, "betas", "the beta endpoint sends betas as its header")
    })))

  it.effect("a failed count is the estimate times the last exact ratio, with the API's typed error; the next count is exact again", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const counter = yield* TokenCounter.pipe(
        Effect.provide(TokenCounter.layer({ client: clientOf(server), model: MODEL }))
      )
      const good = { messages: [user("x".repeat(400)), assistant("y".repeat(200)), user("z")] }
      const exact = yield* counter.count(good)
      assert.isTrue(exact.exact)
      // a call answered by no result: the API (and count_tokens, rule 34) rejects it with a 400
      const broken: TokenCounter.Request = {
        messages: [
          user("w".repeat(800)),
          { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "read", input: {} }] },
          user("go on")
        ]
      }
      const failed = yield* counter.count(broken)
      assert.isFalse(failed.exact)
      assert.strictEqual(failed.error?._tag, "TokenCountError")
      assert.strictEqual(failed.error?.status, 400)
      assert.strictEqual(failed.tokens, Math.ceil(failed.estimate * (exact.tokens / exact.estimate)))
      assert.notStrictEqual(failed.tokens, failed.estimate, "the calibration learned from the exact count")
      assert.strictEqual((yield* counter.count(good)).tokens, exact.tokens)
    })))

  it.effect("a count that does not answer in time is the estimate, with a timeout error", () =>
    Effect.gen(function* () {
      const counter = yield* TokenCounter.pipe(
        Effect.provide(TokenCounter.layer({ count: () => new Promise(() => {}), model: MODEL, timeout: "2 seconds" }))
      )
      const request = { messages: [user("hello there")] }
      const fiber = yield* Effect.forkChild(counter.count(request))
      yield* TestClock.adjust("2 seconds")
      const count = yield* Fiber.join(fiber)
      assert.deepStrictEqual({ tokens: count.tokens, exact: count.exact }, { tokens: count.estimate, exact: false })
      assert.include(count.error?.message ?? "", "no answer in 2s")
    }))

  it.effect("the estimate counter is never exact and equals the estimate", () =>
    Effect.gen(function* () {
      const count = yield* countWith(TokenCounter.layerEstimate, { messages: [user("a".repeat(40))] })
      assert.deepStrictEqual(count, { tokens: 14, exact: false, estimate: 14 })
    }))
})

// ============================================================================
// Conversation with a counter
// ============================================================================

/** `count_tokens` through a tokenizer of one's own (`TokenCounter.layer({ count })`), over the messages' JSON. */
const tokenizer = (tokens: (json: string) => number) =>
  TokenCounter.layer({
    count: (params) => Promise.resolve({ input_tokens: tokens(JSON.stringify(withoutCacheControl(params.messages))) }),
    model: MODEL
  })
/** A quarter of a token per character, and 20,000 for each summary: exactly, a summary frees nothing. */
const costlySummaries = tokenizer((json) =>
  Math.ceil(json.length / 4) + 20_000 * (json.split(SUMMARY_HEADER).length - 1)
)
/** A token per `x`, a quarter of one per other character: an `x` is 4 times what the estimate says. */
const denseX = tokenizer((json) => {
  const xs = json.split("x").length - 1
  return xs + Math.ceil((json.length - xs) / 4)
})

/** Six turns of `head` text, then two short ones: a compaction summarizes the six and keeps the two. */
const turns = (head: string): ReadonlyArray<MessageParam> => [
  ...Array.from({ length: 6 }, (_, i) => [user(`${i}: ${head}`), assistant(`done ${i}: ${head}`)]).flat(),
  ...Array.from({ length: 2 }, (_, i) => [user(`${i}: tail`), assistant(`ok ${i}`)]).flat()
]

/** The outcome of `/compact` over `view`, with `counter` in the conversation's layer (none: the estimate). */
const compactOnce = (
  view: ReadonlyArray<MessageParam>,
  counter: Layer.Layer<TokenCounter> | undefined,
  minFreedTokens: number
) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    for (const message of view) {
      // replies are recorded, everything else appended (append refuses an assistant message)
      if (message.role === "assistant") yield* conversation.recordReply(message)
      else yield* conversation.append(message)
    }
    return (yield* conversation.compact()).outcome
  }).pipe(
    Effect.provide(
      Conversation.layerMemory({
        minFreedTokens,
        policy: CompactionPolicy.makeUnsafe({ keepRecentTokens: 100, compactAtTokens: 1_000, summaryBudgetTokens: 400 })
      }).pipe(
        Layer.provide(
          counter === undefined ? ExtractiveSummarizer.layer : Layer.merge(ExtractiveSummarizer.layer, counter)
        )
      )
    )
  )

describe("minFreedTokens with an exact count", () => {
  const plain = turns("y".repeat(4_800))

  it.effect("the count after the compaction decides: freed too little exactly, it is skipped", () =>
    Effect.gen(function* () {
      const byEstimate = yield* compactOnce(plain, undefined, 3_000)
      const byCount = yield* compactOnce(plain, costlySummaries, 3_000)
      assert.strictEqual(byEstimate._tag, "Compacted")
      assert.strictEqual(byCount._tag, "Skipped")
      if (byCount._tag === "Skipped") assert.strictEqual(byCount.reason, "TooLittleFreed")
    }))

  it.effect("the calibrated plan and the exact counts compact what the estimate would skip", () =>
    Effect.gen(function* () {
      const dense = turns("x".repeat(1_200))
      // twice what the estimate says the head holds: the estimate skips before summarizing; exactly it is 4 times that
      const minimum = 2 * (estimateTokens(dense as never) - estimateTokens(dense.slice(-4) as never))
      const byEstimate = yield* compactOnce(dense, undefined, minimum)
      const byCount = yield* compactOnce(dense, denseX, minimum)
      assert.strictEqual(byEstimate._tag, "Skipped")
      assert.strictEqual(byCount._tag, "Compacted")
    }))

  it.effect("the estimate decides when the count fails, and the step goes on", () =>
    Effect.gen(function* () {
      const failing = TokenCounter.layer({ count: () => Promise.reject(new Error("connection reset")), model: MODEL })
      const byEstimate = yield* compactOnce(plain, undefined, 2_000)
      const byFailing = yield* compactOnce(plain, failing, 2_000)
      const figures = (outcome: typeof byEstimate) =>
        outcome._tag === "Skipped"
          ? outcome
          : { cut: outcome.cut, tokensBefore: outcome.tokensBefore, tokensAfter: outcome.tokensAfter }
      assert.strictEqual(byEstimate._tag, "Compacted")
      assert.deepStrictEqual(figures(byFailing), figures(byEstimate))
    }))

  it.effect("prepare says which count it used; a failed count falls back to the trigger without a count", () =>
    Effect.gen(function* () {
      const failing = TokenCounter.layer({ count: () => Promise.reject(new Error("connection reset")), model: MODEL })
      const prepared = yield* Effect.gen(function* () {
        const conversation = yield* Conversation
        yield* conversation.append(user("x".repeat(8_000)))
        return yield* conversation.prepare
      }).pipe(
        Effect.provide(
          Conversation.layerMemory({
            policy: CompactionPolicy.makeUnsafe({ keepRecentTokens: 100, compactAtTokens: 1_000 })
          })
            .pipe(Layer.provide(Layer.merge(ExtractiveSummarizer.layer, failing)))
        )
      )
      assert.isFalse(prepared.count?.exact)
      assert.include(prepared.count?.error?.message ?? "", "connection reset")
      assert.strictEqual(prepared.count?.tokens, prepared.count?.estimate)
      // no usage reported yet: the trigger runs on the estimate of the request, over the trigger; one message leaves
      // nothing to cut, and the compaction says so
      assert.strictEqual(prepared.compaction?._tag, "Skipped")
    }))
})

// ============================================================================
// Done when (issue 28): the trigger fires on the same requests as the exact count would
// ============================================================================

describe("the trigger with count_tokens over a real session", () => {
  it.effect(
    "fires on exactly the requests whose exact count passes the thresholds, not on the reported usage",
    () =>
      Effect.scoped(Effect.gen(function* () {
        const session = corpus().find((s) => s.name === "pi__large-session")
        assert.isDefined(session, "the shared session pi__large-session")
        const messages = asMessageParams(session!.messages.slice(0, 130))
        const usage = usageOf(session!.messages)
        const policy = CompactionPolicy.makeUnsafe({ keepRecentTokens: 3_000, compactAtTokens: 15_000 })
        const server = yield* MessagesApiServer.make
        const layer = Conversation.layerMemory({ policy, system: "You are a coding agent." }).pipe(
          Layer.provide(
            Layer.merge(ExtractiveSummarizer.layer, TokenCounter.layer({ client: clientOf(server), model: MODEL }))
          )
        )
        const steps: Array<
          {
            readonly counted: number
            readonly fired: boolean
            readonly compacted: boolean
            readonly usageFires: boolean
          }
        > = []
        yield* Effect.gen(function* () {
          const conversation = yield* Conversation
          for (let i = 0; i < messages.length; i++) {
            const message = messages[i]!
            if (message.role !== "assistant") {
              yield* conversation.append(message)
              continue
            }
            const stateBefore = yield* conversation.state
            const from = server.requests.length
            const prepared = yield* conversation.prepare
            const counts = server.requests.slice(from)
            assert.isAbove(counts.length, 0, `request ${i} was counted`)
            for (const r of counts) assert.strictEqual(r.path, "/v1/messages/count_tokens")
            // the trigger's count is the first of the step: the whole request as it would go out without a compaction
            const counted = countTokens(counts[0]!.body)
            assert.strictEqual(prepared.count?.exact, true, `request ${i}: ${prepared.count?.error?.message}`)
            assert.strictEqual(prepared.count?.tokens, counted, `request ${i}: the counter returns the server's count`)
            const fired = prepared.compaction !== undefined
            if (!fired) assertSameRequest(counts[0]!.body, prepared.request, i)
            const reported = usage.get(i)
            steps.push({
              counted,
              fired,
              compacted: fired && prepared.compaction!._tag !== "Skipped",
              usageFires: stateBefore.usage !== undefined &&
                contextTokens(stateBefore.usage.usage) > policy.compactAtTokens
            })
            yield* conversation.recordReply(message, reported, { requestEpoch: prepared.epoch })
          }
        }).pipe(Effect.provide(layer))
        const byCount = steps.map((s) =>
          s.counted > policy.compactAtTokens || policy.contextWindow - s.counted < policy.minRemaining
        )
        assert.deepStrictEqual(
          steps.map((s) => s.fired),
          byCount,
          "the trigger fires exactly where the exact count passes"
        )
        assert.isAtLeast(steps.filter((s) => s.compacted).length, 2, "compactions ran")
        assert.isAtLeast(byCount.filter((fires) => !fires).length, steps.length / 4, "and the trigger held back")
        assert.notDeepEqual(steps.map((s) => s.usageFires), byCount, "the reported usage would fire elsewhere")
      })),
    180_000
  )
})

/** The counted body is the request the step sent (without a compaction), `cache_control` aside. */
const assertSameRequest = (counted: Record<string, unknown>, request: Request, i: number): void => {
  assert.deepStrictEqual(
    withoutCacheControl(counted.messages),
    withoutCacheControl(request.messages),
    `request ${i}: the counted messages are the sent ones`
  )
  assert.deepStrictEqual(withoutCacheControl(counted.system), withoutCacheControl(request.system))
}
