/**
 * The trigger reads the latest reply's reported usage plus what the view gained after that reply: a large tool result
 * (or several parallel ones, or a long human turn) appended after a reply whose usage sits just under the trigger
 * makes the next `prepare` compact, so the request it hands out fits the window.
 *
 * The loops run as an agent runs them, through `Conversation.layerMemory` (Effect) and `PromiseConversation` (no
 * Effect), each reply recorded with the usage the provider would report. The provider and the window are judged
 * independently of the library's estimator: a request holds a quarter of the characters of its JSON (system prompt,
 * tools and messages) in tokens, times the provider's own ratio in the property.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { Conversation, type Prepared } from "../src/Conversation.ts"
import type { MessageParam } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { CompactionPolicy, type ReportedUsage } from "../src/Policy.ts"
import { PromiseConversation } from "../src/index.ts"
import type { Request } from "../src/Request.ts"
import { checkRequest, formatApiViolations } from "./fixtures/ApiRules.ts"

const SYSTEM = "You are a coding agent. Use the tools to finish the task."
const TOOLS = [{ name: "bash", description: "run a command", input_schema: { type: "object" as const } }]

/** Tokens as the provider of these tests counts them: a quarter of the characters of the JSON. */
const sizeOf = (value: unknown): number => Math.ceil(JSON.stringify(value).length / 4)

/** A request's tokens by that count: its system prompt, tools and messages. */
const requestTokens = (request: Request): number => sizeOf([request.system, request.tools, request.messages])

const WORDS = "the file test error type value config path module cache build run fix check import export".split(" ")

/** Text of about `tokens` tokens (four characters each), different for each `seed`. */
const text = (tokens: number, seed: number): string => {
  const parts: Array<string> = [`#${seed}`]
  let length = parts[0]!.length
  for (let k = 0; length < tokens * 4; k++) {
    const word = WORDS[(k * 7 + seed * 13 + (k >> 3)) % WORDS.length]!
    parts.push(word)
    length += word.length + 1
  }
  return parts.join(" ").slice(0, Math.max(1, tokens * 4))
}

/** The steps of an agent loop, whichever door it goes through. */
interface Loop {
  readonly append: (message: MessageParam) => Effect.Effect<unknown>
  readonly prepare: Effect.Effect<Prepared>
  readonly recordReply: (message: MessageParam, usage: ReportedUsage, requestEpoch: number) => Effect.Effect<unknown>
}

/** The loop over the `Conversation` service in the context (`layerMemory`). */
const serviceLoop = Effect.map(Conversation, (conversation): Loop => ({
  append: (message) => Effect.orDie(conversation.append(message)),
  prepare: Effect.orDie(conversation.prepare),
  recordReply: (message, usage, requestEpoch) =>
    Effect.orDie(conversation.recordReply(message, usage, { requestEpoch }))
}))

/** The loop over a `PromiseConversation`: every step is its Promise. */
const promiseLoop = (conversation: PromiseConversation.PromiseConversation): Loop => ({
  append: (message) => Effect.promise(() => conversation.append(message)),
  prepare: Effect.promise(() => conversation.prepare()),
  recordReply: (message, usage, requestEpoch) =>
    Effect.promise(() => conversation.recordReply(message, usage, { requestEpoch }))
})

const memoryLayer = (policy: CompactionPolicy) =>
  Conversation.layerMemory({ policy, system: SYSTEM, tools: TOOLS as never }).pipe(
    Layer.provide(ExtractiveSummarizer.layer),
    Layer.orDie
  )

/** The two doors an agent loop goes through. */
const DOORS = ["layerMemory", "PromiseConversation"] as const

/** Runs `body` on a conversation under `policy` behind `door`: the `layerMemory` service, or a `PromiseConversation`. */
const onDoor = (
  door: typeof DOORS[number],
  policy: CompactionPolicy,
  body: (loop: Loop) => Effect.Effect<void>
): Effect.Effect<void> =>
  door === "layerMemory"
    ? Effect.flatMap(serviceLoop, body).pipe(Effect.provide(memoryLayer(policy)))
    : Effect.acquireUseRelease(
      Effect.promise(() => PromiseConversation.open({ policy, system: SYSTEM, tools: TOOLS as never })),
      (conversation) => body(promiseLoop(conversation)),
      (conversation) => Effect.promise(() => conversation.close())
    )

/** A reply of some text and one `bash` call per id. */
const replyWith = (ids: ReadonlyArray<string>, words: number, seed: number): MessageParam => ({
  role: "assistant",
  content: [
    { type: "text", text: text(words, seed) },
    ...ids.map((id) => ({ type: "tool_use" as const, id, name: "bash", input: { command: `run step ${id}` } }))
  ]
})

/** The result of the call `id`, of about `tokens` tokens. */
const resultOf = (id: string, tokens: number, seed: number) => ({
  type: "tool_result" as const,
  tool_use_id: id,
  content: text(tokens, seed)
})

/** The checks every prepared request passes: the API's rules, by the independent checker. */
const checked = (prepared: Prepared, label: string): Prepared => {
  const violations = checkRequest(prepared.request)
  assert.deepStrictEqual(violations, [], `${label}: ${formatApiViolations(violations)}`)
  return prepared
}

const WINDOW = 60_000
const TRIGGER = 40_000
const POLICY = CompactionPolicy.makeUnsafe({
  contextWindow: WINDOW,
  minRemaining: 20_000,
  compactAtTokens: TRIGGER,
  keepRecentTokens: 4_000,
  keepRecentTurns: 1
})

/** What the large step appends after the reply that reports a usage just under the trigger. */
interface LargeStep {
  readonly name: string
  /** The calls of that reply (none: it ends the turn). */
  readonly calls: number
  /** What is appended after it, given the ids of its calls: each message appended in turn. */
  readonly appended: (ids: ReadonlyArray<string>) => ReadonlyArray<MessageParam>
}

const LARGE_STEPS: ReadonlyArray<LargeStep> = [
  {
    name: "one large tool result",
    calls: 1,
    appended: (ids) => [{ role: "user", content: ids.map((id) => resultOf(id, 25_000, 1)) }]
  },
  {
    name: "four parallel results in one message",
    calls: 4,
    appended: (ids) => [{ role: "user", content: ids.map((id, k) => resultOf(id, 6_500, 10 + k)) }]
  },
  {
    name: "four parallel results appended one by one",
    calls: 4,
    appended: (ids) => ids.map((id, k): MessageParam => ({ role: "user", content: [resultOf(id, 6_500, 20 + k)] }))
  },
  {
    name: "a long human turn after a reply that ends the turn",
    calls: 0,
    appended: () => [{ role: "user", content: `here is the log:\n${text(25_000, 3)}` }]
  }
]

/**
 * Drives `loop` to a reply whose reported usage is just under the trigger (every request before it under the trigger,
 * none compacting), then appends the large step and prepares: returns that reply's usage and the prepared request.
 */
const acrossTheTrigger = (loop: Loop, large: LargeStep, label: string) =>
  Effect.gen(function* () {
    yield* loop.append({ role: "user", content: "task: fix the failing build and run the tests" })
    let step = 0
    for (;;) {
      const prepared = checked(yield* loop.prepare, `${label} request ${step}`)
      assert.isUndefined(prepared.compaction, `${label}: request ${step} compacted before the trigger`)
      const size = requestTokens(prepared.request)
      assert.isBelow(size, TRIGGER, `${label}: request ${step} passed the trigger`)
      // the request that brings the context just under the trigger gets the large step's reply
      if (size >= TRIGGER - 600) {
        const ids = Array.from({ length: large.calls }, (_, k) => `toolu_large_${k}`)
        const reply = replyWith(ids, 20, 99)
        const usage = { input_tokens: size, output_tokens: sizeOf(reply.content) }
        yield* loop.recordReply(reply, usage, prepared.epoch)
        for (const message of large.appended(ids)) yield* loop.append(message)
        return { reported: usage.input_tokens + usage.output_tokens, prepared: yield* loop.prepare }
      }
      const id = `toolu_${step}`
      const reply = replyWith([id], 20, step)
      const output = sizeOf(reply.content)
      yield* loop.recordReply(reply, { input_tokens: size, output_tokens: output }, prepared.epoch)
      // results of up to 8,000 tokens, the last one sized to land the next request just under the trigger
      const padding = Math.max(50, Math.min(8_000, TRIGGER - 400 - (size + output) - 40))
      yield* loop.append({ role: "user", content: [resultOf(id, padding, step)] })
      step++
    }
  })

describe("a large step after a reply whose usage is just under the trigger", () => {
  for (const large of LARGE_STEPS) {
    for (const door of DOORS) {
      it.effect(
        `${large.name} (${door}): the next prepare compacts, and its request fits the window`,
        () =>
          onDoor(door, POLICY, (loop) =>
            Effect.gen(function* () {
              const label = `${large.name} (${door})`
              const { prepared, reported } = yield* acrossTheTrigger(loop, large, label)
              assert.isAbove(reported, TRIGGER - 1_000, `${label}: the reply's usage is just under the trigger`)
              assert.isAtMost(reported, TRIGGER, `${label}: the reply's usage is under the trigger`)
              checked(prepared, label)
              const size = requestTokens(prepared.request)
              assert.isAtMost(size, WINDOW, `${label}: the request holds ${size} tokens, over the window`)
              assert.strictEqual(prepared.compaction?._tag, "Compacted", `${label}: the trigger did not fire`)
            })),
        { timeout: 60_000 }
      )
    }
  }
})

// ============================================================================
// The property: generated loops, random result sizes and reported usages
// ============================================================================

const SMALL_WINDOW = 30_000
const SMALL_POLICY = CompactionPolicy.makeUnsafe({
  contextWindow: SMALL_WINDOW,
  minRemaining: 10_000,
  compactAtTokens: 20_000,
  keepRecentTokens: 2_000,
  keepRecentTurns: 1
})
/** The most a step appends after its reply: the tail a compaction keeps must still fit with a summary. */
const STEP_CAP = 14_000

const Between = (minimum: number, maximum: number) => Schema.Int.check(Schema.isBetween({ minimum, maximum }))

/** One output of a step: a tool result (or the human turn, for a reply with no call), small or a dump. */
const Output = Schema.Struct({ size: Between(10, 900), dump: Schema.Boolean })

/** One step of the loop: the reply's calls and what answers them, or, with none, a human turn. */
const Step = Schema.Struct({
  outputs: Schema.Array(Output).check(Schema.isMinLength(1), Schema.isMaxLength(4)),
  /** The reply ends the turn (its step is the human turn that follows, of the first output's size). */
  endsTurn: Schema.Boolean,
  /** The results are appended one message each (else all in one message). */
  separate: Schema.Boolean,
  words: Between(5, 300)
})

const Session = Schema.Struct({
  /** The provider's tokens per token of this test's count, in percent: its tokenizer is not the library's. */
  ratio: Between(100, 120),
  steps: Schema.Array(Step).check(Schema.isMinLength(4), Schema.isMaxLength(40))
})

/** The tokens of each output of a step: a dump holds 2,000 to about 11,000, all of them at most `STEP_CAP`. */
const sizesOf = (outputs: ReadonlyArray<typeof Output.Type>): ReadonlyArray<number> => {
  let left = STEP_CAP
  return outputs.map((o) => {
    const tokens = Math.max(10, Math.min(left, o.dump ? 2_000 + o.size * 10 : o.size))
    left = Math.max(0, left - tokens)
    return tokens
  })
}

describe("generated loops: no prepared request exceeds the window", () => {
  it.effect.prop(
    "random result sizes, parallel results, human turns and the provider's own token ratio",
    [Session],
    ([session]) =>
      Effect.gen(function* () {
        const loop = yield* serviceLoop
        const ratio = session.ratio / 100
        /** The provider's count: its ratio over this test's quarter of the characters. */
        const provider = (tokens: number) => Math.ceil(tokens * ratio)
        yield* loop.append({ role: "user", content: "task: fix the failing build and run the tests" })
        for (let s = 0; s <= session.steps.length; s++) {
          const prepared = checked(yield* loop.prepare, `step ${s}`)
          const size = provider(requestTokens(prepared.request))
          assert.isAtMost(size, SMALL_WINDOW, `step ${s}: a request of ${size} tokens, over the window`)
          const step = session.steps[s]
          if (step === undefined) break
          const sizes = sizesOf(step.outputs)
          const ids = step.endsTurn ? [] : sizes.map((_, k) => `toolu_${s}_${k}`)
          const reply = replyWith(ids, step.words, s)
          yield* loop.recordReply(reply, {
            input_tokens: size,
            output_tokens: provider(sizeOf(reply.content))
          }, prepared.epoch)
          if (step.endsTurn) {
            yield* loop.append({ role: "user", content: `next: ${text(sizes[0]!, s)}` })
          } else if (step.separate) {
            for (let k = 0; k < ids.length; k++) {
              yield* loop.append({ role: "user", content: [resultOf(ids[k]!, sizes[k]!, s * 10 + k)] })
            }
          } else {
            yield* loop.append({ role: "user", content: ids.map((id, k) => resultOf(id, sizes[k]!, s * 10 + k)) })
          }
        }
      }).pipe(Effect.provide(memoryLayer(SMALL_POLICY))),
    { timeout: 300_000, arbitrary: { runs: 300 } }
  )
})
