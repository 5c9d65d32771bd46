/**
 * A caller's mistakes are loud: an assistant message given to `append` is refused with a typed error and changes
 * nothing; a tool result that answers no pending call is dropped, pending calls left unanswered are answered as
 * interrupted, and both are logged as warnings; a `prepare` that answers forgotten calls says which. The Promise form
 * (`PromiseConversation.open()`, in memory) refuses a malformed message and a reply that is not one alike.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import { Conversation, type ConversationError } from "../src/Conversation.ts"
import type { ConversationState } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { open } from "../src/PromiseConversation.ts"

/** The warnings the service logs, as `level message`. */
const logged = (lines: Array<string>) =>
  Logger.layer([Logger.make((options) => void lines.push(`${options.logLevel} ${String(options.message)}`))])

const call = (id: string) => ({
  role: "assistant" as const,
  content: [{ type: "tool_use" as const, id, name: "read", input: { path: `/src/${id}.ts` } }]
})
const result = (id: string) => ({
  role: "user" as const,
  content: [{ type: "tool_result" as const, tool_use_id: id, content: `contents of ${id}` }]
})

const run = <A, E>(lines: Array<string>, body: Effect.Effect<A, E, Conversation>) =>
  body.pipe(
    Effect.provide(Conversation.layerMemory().pipe(Layer.provide(ExtractiveSummarizer.layer))),
    Effect.provide(logged(lines))
  )

describe("Conversation: a caller's mistakes are loud", () => {
  it.effect("an assistant message to append is refused (Refused) and the state is the same", () => {
    const lines: Array<string> = []
    return run(
      lines,
      Effect.gen(function* () {
        const conversation = yield* Conversation
        yield* conversation.append({ role: "user", content: "Fix the parser" })
        const before = yield* conversation.state
        const exit = yield* Effect.exit(conversation.append({ role: "assistant", content: "I will." }))
        assert.isTrue(Exit.isFailure(exit))
        const error = Exit.isFailure(exit)
          ? (exit.cause.reasons.find((r) => r._tag === "Fail") as {
            readonly error: ConversationError<ConversationState>
          })
            .error
          : undefined
        assert.strictEqual(error?.reason, "Refused")
        assert.match(error!.message, /record an assistant reply with recordReply/)
        assert.strictEqual(error!.value, before, "the error carries the state as it was")
        assert.strictEqual(yield* conversation.state, before, "nothing changed")
      })
    )
  })

  it.effect("an orphan result is dropped and a call left unanswered is answered as interrupted: both logged", () => {
    const lines: Array<string> = []
    return run(
      lines,
      Effect.gen(function* () {
        const conversation = yield* Conversation
        yield* conversation.append({ role: "user", content: "Fix the parser" })
        yield* conversation.recordReply(call("toolu_a"))
        // a result for a call that was never made: dropped, said
        yield* conversation.append(result("toolu_nobody"))
        assert.isTrue(lines.some((l) => /Warn.*dropped 1 tool result/.test(l)), lines.join("\n"))
        assert.deepStrictEqual((yield* conversation.state).pending.map((p) => p.originalId), ["toolu_a"])
        // a user message while toolu_a waits: it is answered as interrupted, said
        yield* conversation.append({ role: "user", content: "never mind, do something else" })
        assert.isTrue(lines.some((l) => /Warn.*answered 1 tool call/.test(l)), lines.join("\n"))
        assert.deepStrictEqual((yield* conversation.state).pending, [])
      })
    )
  })

  it.effect("a prepare that answers a forgotten call names it in its outcome and logs it", () => {
    const lines: Array<string> = []
    return run(
      lines,
      Effect.gen(function* () {
        const conversation = yield* Conversation
        yield* conversation.append({ role: "user", content: "Fix the parser" })
        yield* conversation.recordReply(call("toolu_b"))
        const prepared = yield* conversation.prepare
        assert.deepStrictEqual(prepared.interrupted, ["toolu_b"])
        assert.isTrue(lines.some((l) => /Warn.*answered 1 tool call/.test(l)), lines.join("\n"))
        // the next prepare has nothing to answer, and says nothing
        assert.isUndefined((yield* conversation.prepare).interrupted)
      })
    )
  })

  it("the Promise form in memory refuses a malformed message and a reply that is not one, naming the path", async () => {
    const conversation = await open()
    try {
      await conversation.append({ role: "user", content: "Fix the parser" })
      const before = await conversation.state()
      const reason = (promise: Promise<unknown>) =>
        promise.then(
          () => assert.fail("accepted"),
          (error: ConversationError<unknown>) => `${error.reason} ${error.message}`
        )
      assert.strictEqual(
        await reason(conversation.append({ role: "usr", content: "x" } as never)),
        'Refused refused: messages[1].role: Expected "user" | "assistant" | "system"'
      )
      assert.match(
        await reason(conversation.append({ role: "user", content: [{ type: "text", text: 5 }] } as never)),
        /^Refused refused: messages\[1\]\.content\[0\]\.text \(text\): Expected string$/
      )
      const reply = { id: "msg_1", type: "message", role: "assistant", content: [], stop_reason: "end_turn" }
      assert.match(await reason(conversation.recordReply(Promise.resolve(reply) as never)), /^Refused .*await it/)
      assert.strictEqual(await conversation.state(), before)
    } finally {
      await conversation.close()
    }
  })
})
