/**
 * Steps that overlap: a `Conversation` serializes its steps, with or without a log. A `prepare` that compacts waits
 * for its summarizer (here an `effect/ai` `LanguageModel` built for the test whose answer waits on a gate); an
 * `append` and a `recordReply` called meanwhile must wait for it and land after the compaction, in call order, on
 * `layerMemory` (whose steps may run at once when no other step holds or waits) and on a JSONL log alike.
 */
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as NodePath from "@effect/platform-node/NodePath"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Stream } from "effect"
import { LanguageModel, type Response } from "effect/ai"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Conversation, layerLogged, layerMemory } from "../src/Conversation.ts"
import type { MessageParam } from "../src/ConversationState.ts"
import { LanguageModelSummarizer } from "../src/LanguageModelSummarizer.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { layerSessionLog } from "../src/SessionStoreJsonl.ts"

const answer = (text: string): ReadonlyArray<Response.PartEncoded> => [
  { type: "text", text },
  { type: "finish", reason: "stop", usage: { inputTokens: { total: 1_000 }, outputTokens: { total: 100 } } }
]

/** A LanguageModel whose answers wait for `gate`, and a count of the calls that reached it. */
const gatedModel = (gate: Deferred.Deferred<void>, reached: { calls: number }) =>
  Layer.effect(
    LanguageModel.LanguageModel,
    LanguageModel.make({
      generateText: () =>
        Effect.suspend(() => {
          reached.calls++
          return Effect.as(Deferred.await(gate), [...answer("## Summary\nThe earlier turns read files a to f.")])
        }),
      streamText: () => Stream.empty
    })
  )

const policy = CompactionPolicy.makeUnsafe({ contextWindow: 40_000 })
const user = (text: string): MessageParam => ({ role: "user", content: text })
const reply = (text: string): MessageParam => ({ role: "assistant", content: [{ type: "text", text }] })
const textOf = (m: MessageParam) => typeof m.content === "string" ? m.content : JSON.stringify(m.content)

/** Twelve turns of ~2,000 tokens each, the last reply reported over the trigger: the next `prepare` compacts. */
const fill = Effect.gen(function* () {
  const conversation = yield* Conversation
  for (let i = 0; i < 12; i++) {
    yield* conversation.append(user(`question ${i}: ${"the parser's notes on file a ".repeat(300)}`))
    const prepared = yield* conversation.prepare
    const usage = { input_tokens: i === 11 ? 30_000 : 1_000 + i * 100, output_tokens: 50 }
    yield* conversation.recordReply(reply(`answer ${i}`), usage, { requestEpoch: prepared.epoch })
  }
})

/** A compaction held in its summarizer while an append and a reply are called: both wait, then land in order. */
const overlapping = (gate: Deferred.Deferred<void>, reached: { calls: number }) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    yield* fill
    yield* conversation.append(user("question 12"))
    const compacting = yield* Effect.forkChild(conversation.prepare)
    for (let i = 0; i < 1000 && reached.calls === 0; i++) yield* Effect.yieldNow
    assert.strictEqual(reached.calls, 1, "the prepare is summarizing")
    const appending = yield* Effect.forkChild(conversation.append(user("said while compacting")))
    for (let i = 0; i < 20; i++) yield* Effect.yieldNow
    assert.isUndefined(appending.pollUnsafe(), "the append waits for the compacting prepare")
    assert.isFalse(
      (yield* conversation.state).view.some((m) => textOf(m as MessageParam).includes("said while compacting")),
      "nothing of the waiting append is in the state yet"
    )
    yield* Deferred.succeed(gate, undefined)
    const prepared = yield* Fiber.join(compacting)
    yield* Fiber.join(appending)
    assert.isDefined(prepared.compaction, "the prepare compacted")
    const sent = prepared.request.messages.map((m) => textOf(m as MessageParam))
    assert.isFalse(sent.some((t) => t.includes("said while compacting")), "the request was built before the append")
    const view = (yield* conversation.state).view.map((m) => textOf(m as MessageParam))
    assert.isTrue(view.at(-1)!.includes("said while compacting"), "the append landed after the compaction")
    assert.isTrue(view.at(-2)!.includes("question 12"))
    assert.isBelow(view.length, 26, "the compaction replaced the older turns")
    return view
  })

describe("Conversation: overlapping steps", () => {
  it.live("on layerMemory, an append called during a compacting prepare waits for it and lands after it", () =>
    Effect.gen(function* () {
      const gate = yield* Deferred.make<void>()
      const reached = { calls: 0 }
      const summarizer = LanguageModelSummarizer.layer({}).pipe(Layer.provide(gatedModel(gate, reached)))
      yield* overlapping(gate, reached).pipe(Effect.provide(layerMemory({ policy }).pipe(Layer.provide(summarizer))))
    }))

  it.live("on a JSONL log, the same, and a resume reads the same view", () =>
    Effect.gen(function* () {
      const directory = mkdtempSync(join(tmpdir(), "conversation-overlap-"))
      const gate = yield* Deferred.make<void>()
      const reached = { calls: 0 }
      const summarizer = LanguageModelSummarizer.layer({}).pipe(Layer.provide(gatedModel(gate, reached)))
      const log = () =>
        layerSessionLog({ directory, sessionId: "overlap" }).pipe(
          Layer.provide(Layer.mergeAll(NodeFileSystem.layer, NodePath.layer))
        )
      const live = yield* overlapping(gate, reached).pipe(
        Effect.provide(layerLogged({ policy }).pipe(Layer.provide(log()), Layer.provide(summarizer)))
      )
      const resumed = yield* Effect.flatMap(Effect.service(Conversation), (c) => c.state).pipe(
        Effect.provide(layerLogged({ policy }).pipe(Layer.provide(log()), Layer.provide(summarizer)))
      )
      assert.deepStrictEqual(resumed.view.map((m) => textOf(m as MessageParam)), live)
      rmSync(directory, { recursive: true, force: true })
    }))
})
