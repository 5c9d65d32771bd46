/**
 * Issue 38: compaction in the loops agents actually run. Generated sessions of four shapes go through `Conversation`
 * (offline extractive summarizer), each reply's usage being the size of the request it answered, at the default
 * policy and at a small one a user would set (compact at 20k, keep 4k), with thinking on and off:
 *
 * - one long request of ~300 tool steps;
 * - 5 requests of 60 tool steps each;
 * - 200 chatty exchanges (no tools);
 * - steps of 3–5 parallel calls.
 *
 * Every request must pass the independent checker (`fixtures/ApiRules.ts`), and after the first request whose
 * reported usage passed the trigger no request may be larger than the trigger plus the largest single step plus 10%.
 * The size of a request and of a step is measured here, independently of the library's estimate: a quarter of the
 * characters of their JSON.
 *
 * Also the regression of the issue: a 20-step loop under one request at `compactAtTokens: 5_000` compacts, and a
 * skip names its reason and the field that would change it.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import type { CompactOutcome } from "../src/Compact.ts"
import { Conversation, type MessageParam, type Request } from "../src/Conversation.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { CompactionPolicy, defaultPolicy } from "../src/Policy.ts"
import { bindThinking, checkRequest, formatApiViolations } from "./fixtures/ApiRules.ts"
import { prng } from "./fixtures/Conversation.ts"

type Shape = "long request" | "5 requests" | "chatty" | "parallel calls"

/** The requests and steps of each shape: [requests, steps per request, calls per step (min, max)]. */
const SHAPES: Record<Shape, { readonly requests: number; readonly steps: number; readonly calls: [number, number] }> = {
  "long request": { requests: 1, steps: 300, calls: [1, 1] },
  "5 requests": { requests: 5, steps: 60, calls: [1, 1] },
  chatty: { requests: 200, steps: 0, calls: [0, 0] },
  "parallel calls": { requests: 2, steps: 40, calls: [3, 5] }
}

const SMALL = CompactionPolicy.makeUnsafe({ compactAtTokens: 20_000, keepRecentTokens: 4_000 })
const POLICIES: ReadonlyArray<readonly [string, CompactionPolicy]> = [["defaults", defaultPolicy], ["20k/4k", SMALL]]
const THINKING = { type: "enabled", budget_tokens: 1024 } as const
const SYSTEM = "You are a coding agent. Use the tools to finish the task."
const TOOLS = [{ name: "bash", description: "run a command", input_schema: { type: "object" as const } }]

/** Tokens as this test counts them: a quarter of the characters of the JSON, independent of the library. */
const sizeOf = (value: unknown): number => Math.ceil(JSON.stringify(value).length / 4)

/** The size of a request: its system prompt, tools and messages. */
const requestSize = (request: Request): number => sizeOf([request.system, request.tools, request.messages])

const WORDS = "the file test error type value config path module cache build run fix check import export".split(" ")

interface Outcome {
  readonly requests: number
  readonly compactions: number
  readonly trigger: number
  readonly largestStep: number
  readonly firstOver: number | undefined
  readonly peakAfter: number
  readonly skips: ReadonlyArray<Extract<CompactOutcome, { _tag: "Skipped" }>>
}

/**
 * Runs one generated session of `shape` through a fresh in-memory `Conversation` under `policy`, checking every
 * request with the independent checker, and returns the figures the bound is judged on.
 */
const runShape = (shape: Shape, policy: CompactionPolicy, thinking: boolean, seed: number) =>
  Effect.gen(function* () {
    const { calls, requests, steps } = SHAPES[shape]
    const random = prng(seed)
    const words = (tokens: number) =>
      Array.from({ length: Math.ceil(tokens * 4 / 6) }, () => WORDS[Math.floor(random() * WORDS.length)]!).join(" ")
    const between = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1))
    // most tool results are small, a few are file dumps
    const resultTokens = () => random() < 0.1 ? between(2_000, 5_000) : between(100, 1_200)
    const conversation = yield* Conversation
    const trigger = policy.compactAtTokens
    let id = 0
    let count = 0
    let compactions = 0
    let largestStep = 0
    let firstOver: number | undefined
    let peakAfter = 0
    const skips: Array<Extract<CompactOutcome, { _tag: "Skipped" }>> = []

    /** Prepares and checks the next request; returns it with its size. */
    const prepare = Effect.gen(function* () {
      const prepared = yield* conversation.prepare
      const request = prepared.request
      const v = checkRequest(request)
      if (v.length > 0) assert.fail(`${shape} seed ${seed} request ${count}: ${formatApiViolations(v)}`)
      if (prepared.compaction?._tag === "Compacted" || prepared.compaction?._tag === "FellBack") compactions++
      if (prepared.compaction?._tag === "Skipped") skips.push(prepared.compaction)
      const size = requestSize(request)
      if (firstOver !== undefined) peakAfter = Math.max(peakAfter, size)
      count++
      return { request, size }
    })

    /** The reply to `request`: thinking (bound to the request, when on), then text or `n` parallel calls. */
    const reply = (request: Request, n: number, text: string): MessageParam => {
      const content: Array<Record<string, unknown>> = []
      if (thinking) {
        content.push({ type: "thinking", thinking: `thinking ${words(30)}`, signature: "" })
        content[0]!.signature = bindThinking(request.messages, [])
      }
      content.push({ type: "text", text })
      for (let k = 0; k < n; k++) {
        content.push({ type: "tool_use", id: `toolu_${seed}_${id++}`, name: "bash", input: { command: words(12) } })
      }
      return { role: "assistant", content } as unknown as MessageParam
    }

    /** Records the reply with the request's size as its usage; notes the first request over the trigger. */
    const answer = (size: number, message: MessageParam) =>
      Effect.gen(function* () {
        const output = sizeOf(message.content)
        yield* conversation.recordReply(message, { input_tokens: size, output_tokens: output })
        if (firstOver === undefined && size + output > trigger) firstOver = count
      })

    for (let r = 0; r < requests; r++) {
      yield* conversation.append({
        role: "user",
        content: `request ${r}: ${words(between(20, shape === "chatty" ? 400 : 80))}`
      })
      for (let s = 0; s < steps; s++) {
        const { request, size } = yield* prepare
        const message = reply(request, between(calls[0], calls[1]), words(between(10, 120)))
        yield* answer(size, message)
        const uses = (message.content as ReadonlyArray<{ type: string; id?: string }>).filter((b) =>
          b.type === "tool_use"
        )
        const results: MessageParam = {
          role: "user",
          content: uses.map((b) => ({ type: "tool_result", tool_use_id: b.id!, content: words(resultTokens()) }))
        }
        yield* conversation.append(results)
        largestStep = Math.max(largestStep, sizeOf(message) + sizeOf(results))
      }
      const { request, size } = yield* prepare
      const final = reply(request, 0, words(between(20, shape === "chatty" ? 600 : 150)))
      yield* answer(size, final)
      largestStep = Math.max(largestStep, sizeOf(final))
    }
    return { requests: count, compactions, trigger, largestStep, firstOver, peakAfter, skips } satisfies Outcome
  }).pipe(
    Effect.provide(
      Conversation.layerMemory({
        policy,
        system: SYSTEM,
        tools: TOOLS as never,
        ...(thinking ? { thinking: THINKING } : {})
      }).pipe(Layer.provide(ExtractiveSummarizer.layer))
    )
  )

/** How many skips of each reason and field. */
const skipCounts = (skips: Outcome["skips"]): Record<string, number> => {
  const counts: Record<string, number> = {}
  for (const s of skips) counts[`${s.reason} (${s.field})`] = (counts[`${s.reason} (${s.field})`] ?? 0) + 1
  return counts
}

const Seed = Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 1_000_000 }))

describe("issue 38: the cut obeys the trigger in the loops agents run", () => {
  for (const shape of Object.keys(SHAPES) as ReadonlyArray<Shape>) {
    for (const [label, policy] of POLICIES) {
      for (const thinking of [false, true]) {
        it.effect.prop(
          `${shape}, ${label}, thinking ${thinking ? "on" : "off"}: valid requests, none over the bound`,
          [Seed],
          ([seed]) =>
            Effect.gen(function* () {
              const o = yield* runShape(shape, policy, thinking, seed)
              // the session reaches the trigger (or it proves nothing), and then compacts
              assert.isDefined(o.firstOver, `${shape} seed ${seed} never passed the trigger`)
              assert.isAbove(o.compactions, 0)
              const bound = (o.trigger + o.largestStep) * 1.1
              assert.isAtMost(
                o.peakAfter,
                bound,
                `${shape} ${label} seed ${seed}: peak ${o.peakAfter} over trigger ${o.trigger} + step ${o.largestStep}` +
                  ` + 10%; skips: ${JSON.stringify(skipCounts(o.skips))}`
              )
              // every skip names its reason and the setting that would change it
              for (const skip of o.skips) {
                assert.isString(skip.field)
                assert.isAbove(skip.detail.length, 0)
              }
            }),
          { timeout: 60_000, arbitrary: { runs: 1, maxShrinks: 0 } }
        )
      }
    }
  }
})

describe("issue 38: the regression", () => {
  it.effect("a 20-step loop under one request at compactAtTokens 5,000 compacts; a skip names its reason and field", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      yield* conversation.append({ role: "user", content: "fix the failing build" })
      const outcomes: Array<CompactOutcome> = []
      for (let step = 0; step < 20; step++) {
        const prepared = yield* conversation.prepare
        if (prepared.compaction !== undefined) outcomes.push(prepared.compaction)
        const size = requestSize(prepared.request)
        const call = `toolu_${step}`
        yield* conversation.recordReply(
          {
            role: "assistant",
            content: [{ type: "tool_use", id: call, name: "bash", input: { command: `step ${step}` } }]
          },
          { input_tokens: size, output_tokens: 20 }
        )
        yield* conversation.append({
          role: "user",
          content: [{ type: "tool_result", tool_use_id: call, content: `output ${step} `.repeat(200) }]
        })
      }
      assert.isTrue(outcomes.some((o) => o._tag === "Compacted"), outcomes.map((o) => o._tag).join(", "))
      // a compaction asked for right after one finds too little to free: it says why and what would change it
      const skip = (yield* conversation.compact()).outcome
      assert.strictEqual(skip._tag, "Skipped")
      if (skip._tag === "Skipped") {
        assert.oneOf(skip.reason, ["TooShort", "NothingToCut", "TooLittleFreed"])
        assert.oneOf(skip.field, ["maxTailTokens", "keepRecentTokens", "minFreedTokens", "minGrowthTokens"])
        assert.include(skip.detail, skip.field)
      }
    }).pipe(
      Effect.provide(
        Conversation.layerMemory({ policy: CompactionPolicy.makeUnsafe({ compactAtTokens: 5_000 }) }).pipe(
          Layer.provide(ExtractiveSummarizer.layer)
        )
      )
    ))
})
