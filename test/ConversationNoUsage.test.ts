/**
 * A conversation whose replies are recorded without usage (`recordReply({ role, content })`, as many agents call it)
 * compacts at its trigger: the trigger then runs on the library's estimate of the whole request (the view as the API
 * counts it, the system prompt and tools), a usage given later takes over again, and the conversation says once, in a
 * warning, why its trigger runs on an estimate.
 *
 * The agent loops go through `Conversation` (the four generated shapes, with no usage and with usage on some replies
 * only) and through `PromiseConversation` (hundreds of steps, resumed from its JSONL log half-way). Every request is
 * measured independently of the library's estimator: a quarter of the characters of its JSON, and its UTF-8 bytes.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Logger, Schema } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import {
  appendMessage,
  type ConversationState,
  emptyState,
  type MessageParam,
  prepareStep,
  recordReply
} from "../src/ConversationState.ts"
import { CompactionPolicy, defaultPolicy } from "../src/Policy.ts"
import { PromiseConversation } from "../src/index.ts"
import type { Request } from "../src/Request.ts"
import type { Message } from "../src/Message.ts"
import { checkRequest, formatApiViolations } from "./fixtures/ApiRules.ts"
import { replayTimed, scriptedSummarizer } from "./fixtures/BackgroundReplay.ts"
import { requestSize, runShape, type Shape, SHAPES } from "./fixtures/AgentLoopShapes.ts"

const SMALL = CompactionPolicy.makeUnsafe({ compactAtTokens: 20_000, keepRecentTokens: 4_000 })
const MIDDLE = CompactionPolicy.makeUnsafe({ compactAtTokens: 40_000, keepRecentTokens: 8_000 })
const POLICIES: ReadonlyArray<readonly [string, CompactionPolicy]> = [["40k/8k", MIDDLE], ["20k/4k", SMALL]]

/** The warning a conversation logs once when its replies carry no usage. */
const NO_USAGE = /recorded with no usage/

const Seed = Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 1_000_000 }))

/** About a third of the requests, picked by the seed: their replies carry usage, the others none. */
const someReported = (seed: number) => (request: number): boolean => ((request * 2_654_435_761 + seed) >>> 0) % 3 === 0

describe("replies recorded without usage: the loop compacts at its trigger", () => {
  for (const shape of Object.keys(SHAPES) as ReadonlyArray<Shape>) {
    for (const [label, policy] of POLICIES) {
      for (const mode of ["no usage", "usage on some replies"] as const) {
        it.effect.prop(
          `${shape}, ${label}, ${mode}: compactions, no request over the trigger plus a step, one warning`,
          [Seed],
          ([seed]) =>
            Effect.gen(function* () {
              const reported = mode === "no usage" ? () => false : someReported(seed)
              const o = yield* runShape(shape, policy, false, seed, Number.POSITIVE_INFINITY, reported)
              assert.isDefined(o.firstOver, `${shape} seed ${seed} never passed the trigger`)
              assert.isAbove(o.compactions, 0, `${shape} ${label} ${mode} seed ${seed}: no compaction`)
              // measured on the request itself (a quarter of its JSON's characters), not by the library's estimate,
              // which leaves out the JSON's structure (quotes, keys, braces): 15% over the trigger and a step covers it
              const bound = (o.trigger + o.largestStep) * 1.15
              assert.isAtMost(o.peak, bound, `${shape} ${label} ${mode} seed ${seed}: peak ${o.peak} over ${bound}`)
              assert.isBelow(o.peak, policy.contextWindow - policy.minRemaining)
              assert.strictEqual(o.warnings.filter((w) => NO_USAGE.test(w)).length, 1, o.warnings.join("\n"))
            }),
          { timeout: 60_000, arbitrary: { runs: 1, maxShrinks: 0 } }
        )
      }
    }
  }

  it.effect("every reply with its usage: no warning, as before", () =>
    Effect.gen(function* () {
      const o = yield* runShape("5 requests", SMALL, false, 7)
      assert.isAbove(o.compactions, 0)
      assert.deepStrictEqual(o.warnings.filter((w) => NO_USAGE.test(w)), [])
    }))
})

/** A user message of about `tokens` estimated tokens. */
const said = (i: number, tokens: number): MessageParam => ({
  role: "user",
  content: `step ${i}: ` + "lorem ipsum dolor sit amet ".repeat(Math.ceil(tokens * 4 / 27))
})
const answered = (i: number): MessageParam => ({ role: "assistant", content: `answer ${i}` })

/** A state of `steps` exchanges of about `tokens` each, every reply recorded with no usage. */
const exchanges = (steps: number, tokens: number): ConversationState => {
  let state = emptyState()
  for (let i = 0; i < steps; i++) {
    state = appendMessage(state, said(i, tokens)).state
    state = recordReply(state, answered(i)).state
  }
  return appendMessage(state, said(steps, tokens)).state
}

describe("prepareStep: the trigger without usage", () => {
  const policy = CompactionPolicy.makeUnsafe({ compactAtTokens: 4_000, keepRecentTokens: 1_000, keepRecentTurns: 1 })

  it("fires on the estimate once the request passes the trigger; a usage given later takes over", () => {
    const small = exchanges(2, 500)
    assert.isFalse(prepareStep(small, { policy }).compact, "well under the trigger")
    const large = exchanges(10, 500)
    assert.isTrue(large.reply?.noUsage)
    assert.isTrue(prepareStep(large, { policy }).compact, "over the trigger by the estimate")
    // a reply with usage: its count is read, not the estimate (here the provider says the context is small)
    const reported = recordReply(large, answered(11), { input_tokens: 1_000, output_tokens: 10 }).state
    assert.isUndefined(reported.reply?.noUsage)
    assert.isFalse(prepareStep(reported, { policy }).compact, "the reported usage takes over")
    const over = recordReply(large, answered(11), { input_tokens: 4_500, output_tokens: 10 }).state
    assert.isTrue(prepareStep(over, { policy }).compact, "and fires on its own count")
    // the next reply without usage: the estimate again, never below the report of the same epoch
    const again = recordReply(appendMessage(over, said(12, 10)).state, answered(12)).state
    assert.isTrue(prepareStep(again, { policy }).compact)
  })

  it("the estimate counts the system prompt and tools the requests carry (headTokens)", () => {
    const state = exchanges(6, 500)
    const estimate = prepareStep(state, { policy: defaultPolicy }).compact
    assert.isFalse(estimate, "a few thousand tokens are under the default trigger")
    assert.isTrue(prepareStep(state, { policy: defaultPolicy, headTokens: 60_000 }).compact)
  })

  it("no reply yet: the first request is judged by its estimate", () => {
    const first = appendMessage(emptyState(), said(0, 6_000)).state
    assert.isUndefined(first.reply)
    assert.isTrue(prepareStep(first, { policy }).compact)
  })
})

/** The size of a request in UTF-8 bytes: no tokenizer makes more tokens than the request has bytes. */
const bytesOf = (request: Request): number =>
  new TextEncoder().encode(JSON.stringify([request.system, request.tools, request.messages])).length

describe("PromiseConversation: hundreds of steps without usage, resumed half-way", () => {
  it("compacts at the trigger and never prepares a request over the window", { timeout: 120_000 }, async () => {
    const directory = mkdtempSync(join(tmpdir(), "no-usage-"))
    const policy = CompactionPolicy.makeUnsafe({
      contextWindow: 60_000,
      minRemaining: 10_000,
      compactAtTokens: 8_000,
      keepRecentTokens: 1_000,
      keepRecentTurns: 1
    })
    const options = {
      policy,
      system: "You are a helpful assistant.",
      log: { type: "jsonl" as const, directory, sessionId: "no-usage" }
    }
    const steps = 300
    let compactions = 0
    let largest = 0
    const step = async (conversation: PromiseConversation.PromiseConversation, i: number) => {
      await conversation.append(said(i, 400 + (i * 37) % 900))
      const prepared = await conversation.prepare()
      const violations = checkRequest(prepared.request)
      assert.deepStrictEqual(violations, [], formatApiViolations(violations))
      if (prepared.compaction?._tag === "Compacted" || prepared.compaction?._tag === "FellBack") compactions++
      largest = Math.max(largest, requestSize(prepared.request))
      assert.isBelow(bytesOf(prepared.request), policy.contextWindow, `request ${i}: over the window`)
      // the reply as many agents record it: its role and content, no usage
      await conversation.recordReply({ role: "assistant", content: `answer ${i}: done` })
    }
    try {
      const first = await PromiseConversation.open(options)
      for (let i = 0; i < steps / 2; i++) await step(first, i)
      await first.close()
      const firstHalf = compactions
      const second = await PromiseConversation.open(options)
      assert.isTrue((await second.state()).reply?.noUsage, "the resumed state knows the reply came without usage")
      for (let i = steps / 2; i < steps; i++) await step(second, i)
      await second.close()
      assert.isAbove(firstHalf, 0)
      assert.isAbove(compactions, firstHalf, "the resumed conversation compacts too")
      // a quarter of the request's characters: under the trigger plus the largest step (~1,300 tokens) and 10%
      assert.isAtMost(largest, (policy.compactAtTokens + 1_300) * 1.1)
      assert.isBelow(largest, policy.contextWindow - policy.minRemaining)
    } finally {
      rmSync(directory, { recursive: true, force: true })
    }
  })
})

/** A coding session of `turns` human turns, each of `steps` file reads of about `size` repetitions of a line. */
const readingSession = (turns: number, steps: number, size: number): ReadonlyArray<Message> =>
  Array.from({ length: turns }, (_, k): ReadonlyArray<Message> => [
    { role: "user", content: `task ${k}: fix module m${k}` },
    ...Array.from({ length: steps }, (_, j): ReadonlyArray<Message> => {
      const id = `toolu_${k}_${j}`
      return [
        {
          role: "assistant",
          content: [{ type: "text", text: `step ${j}` }, {
            type: "tool_use",
            id,
            name: "read",
            input: { path: `/src/m${k}_${j}.ts` }
          }]
        } as Message,
        {
          role: "user",
          content: [{ type: "tool_result", tool_use_id: id, content: `line of m${k}_${j} `.repeat(size) }]
        } as Message
      ]
    }).flat(),
    { role: "assistant", content: `done ${k}` }
  ]).flat()

describe("background compaction (backgroundAt) without usage", () => {
  it.effect("the summary is made before the trigger, applied without waiting; a resume sends the live requests", () =>
    Effect.gen(function* () {
      const policy = CompactionPolicy.makeUnsafe({
        contextWindow: 20_000,
        minRemaining: 4_000,
        keepRecentTokens: 1_200,
        keepRecentTurns: 1,
        compactAtTokens: 5_000,
        backgroundAt: 0.6
      })
      const messages = readingSession(10, 4, 60)
      const options = { policy, minFreedTokens: 300, stepMs: 2_000, noUsage: true }
      const warnings: Array<string> = []
      const live = yield* replayTimed(messages, { ...options, summarizer: scriptedSummarizer(5_000).layer }).pipe(
        Effect.provide(Logger.layer([Logger.make((o) => void warnings.push(String(o.message)))]))
      )
      assert.isAbove(live.compactions.length, 1)
      assert.strictEqual(live.compactions[0]!.blockedMs, 0, "the first compaction waited for no summary")
      assert.strictEqual(warnings.filter((w) => NO_USAGE.test(w)).length, 1)
      const resumed = yield* replayTimed(messages, {
        ...options,
        resumeEvery: 3,
        summarizer: scriptedSummarizer(5_000).layer
      }).pipe(Effect.provide(Logger.layer([])))
      assert.isAbove(resumed.resumes, 0)
      assert.deepStrictEqual(resumed.requests, live.requests)
    }))
})
