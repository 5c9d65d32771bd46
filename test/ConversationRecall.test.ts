/**
 * `Conversation.recall` and `PromiseConversation.recall`: a recall call answered from the conversation's own log, after
 * a compaction removed what it asks for; a conversation with no log refuses with a typed error.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Conversation, layerLogged, layerMemory } from "../src/Conversation.ts"
import type { MessageParam } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import * as PromiseConversation from "../src/PromiseConversation.ts"
import { SessionLog, SessionLogError } from "../src/SessionLog.ts"
import type { MemorySessions } from "../src/SessionStore.ts"

/** A long output, line by line distinct, so a line range names exactly one part of it. */
const output = Array.from({ length: 300 }, (_, i) => `line ${i + 1}: value ${(i * 7919) % 1000}`).join("\n")

const policy = CompactionPolicy.makeUnsafe({ keepRecentTokens: 300, keepRecentTurns: 1, compactAtTokens: 2_000 })

/** The task, then `steps` tool calls each answered (the first with `output`), then a compaction. */
const session = (steps: number) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    yield* conversation.append({ role: "user", content: "Find the value on line 120 of the report." })
    for (let i = 0; i < steps; i++) {
      yield* conversation.prepare
      const id = `toolu_recall_${i}`
      yield* conversation.recordReply({
        role: "assistant",
        content: [{ type: "tool_use", id, name: "bash", input: { command: `report ${i}` } }]
      } as MessageParam)
      yield* conversation.append({
        role: "user",
        content: [{ type: "tool_result", tool_use_id: id, content: i === 0 ? output : `report ${i}: ok` }]
      } as MessageParam)
    }
    return yield* conversation.compact()
  })

describe("Conversation.recall", () => {
  it.effect("answers from the log what a compaction removed: by reference and line range, and by search", () =>
    Effect.gen(function* () {
      const store: MemorySessions = new Map()
      const layer = layerLogged({ policy, recall: true, minFreedTokens: 200 }).pipe(
        Layer.provide(SessionLog.layerMemory({ store, sessionId: "recall" })),
        Layer.provide(ExtractiveSummarizer.layer)
      )
      const answers = yield* Effect.gen(function* () {
        const { outcome } = yield* session(4)
        assert.strictEqual(outcome._tag, "Compacted", JSON.stringify(outcome))
        const conversation = yield* Conversation
        const view = JSON.stringify((yield* conversation.state).view)
        assert.notInclude(view, "line 120: value", "the compaction removed the output")
        return {
          byRef: yield* conversation.recall({ ref: "toolu_recall_0", lines: "120-121" }),
          bySearch: yield* conversation.recall({ query: "line 120:" }),
          invalid: yield* conversation.recall({ nothing: 1 })
        }
      }).pipe(Effect.provide(layer))
      assert.include(answers.byRef, '[recall ref="toolu_recall_0"')
      assert.include(answers.byRef, `line 120: value ${(119 * 7919) % 1000}\nline 121: value ${(120 * 7919) % 1000}`)
      assert.notInclude(answers.byRef, "line 119:")
      assert.include(answers.bySearch, "line 120: value")
      assert.match(answers.invalid, /^\[recall\] unknown field "nothing"/)
    }))

  it.effect("a conversation with no log refuses with SessionLogError NotFound", () =>
    Effect.gen(function* () {
      const error = yield* Effect.gen(function* () {
        return yield* Effect.flip((yield* Conversation).recall({ ref: "toolu_1" }))
      }).pipe(Effect.provide(layerMemory({ policy }).pipe(Layer.provide(ExtractiveSummarizer.layer))))
      assert.instanceOf(error, SessionLogError)
      assert.strictEqual(error.reason, "NotFound")
    }))

  it("the Promise door in memory rejects with the same typed error (its logged answers: the agent loop test)", async () => {
    const memory = await PromiseConversation.open({ policy })
    try {
      const refused = await memory.recall({ ref: "toolu_1" }).then(() => undefined, (e: unknown) => e)
      assert.strictEqual((refused as SessionLogError).reason, "NotFound")
    } finally {
      await memory.close()
    }
  })
})
