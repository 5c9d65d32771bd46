/**
 * Shorten before the first send (issue 39, API-RULES 43): with `CompactionPolicy.maxToolResultTokens` a tool result
 * larger than the limit is cut when it is appended, head and tail kept around an offload pointer (the one pointer
 * format, `Offload.parseOffloadRef` reads it back) that says how to get the middle back; what the model sees first is
 * what every later request sends.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Conversation } from "../src/Conversation.ts"
import type { MessageParam } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { parseOffloadRef } from "../src/Offload.ts"
import { CompactionPolicy, PolicyError } from "../src/Policy.ts"
import { Result } from "effect"

const file = Array.from({ length: 400 }, (_, i) => `${String(i + 1).padStart(4)}\tconst line${i + 1} = ${i + 1}`)
  .join("\n")

const call = (id: string, name: string, input: unknown): MessageParam => ({
  role: "assistant",
  content: [{ type: "tool_use", id, name, input }]
})
const result = (id: string, text: string): MessageParam => ({
  role: "user",
  content: [{ type: "tool_result", tool_use_id: id, content: text }]
})

const layer = (maxToolResultTokens: number | undefined) =>
  Conversation.layerMemory({
    policy: CompactionPolicy.makeUnsafe(maxToolResultTokens === undefined ? {} : { maxToolResultTokens })
  }).pipe(Layer.provide(ExtractiveSummarizer.layer))

/** The text of the one tool result of the view's last message. */
const lastResult = (view: ReadonlyArray<MessageParam>): string => {
  const content = view.at(-1)!.content as ReadonlyArray<{ type: string; content?: unknown }>
  return content[0]!.content as string
}

describe("shorten before the first send", () => {
  it.effect("a large read keeps its head and tail; the pointer names exactly the omitted lines of the file", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      yield* conversation.append({ role: "user", content: "read it" })
      yield* conversation.recordReply(call("r1", "Read", { file_path: "/src/a.ts", offset: 1, limit: 400 }))
      const state = yield* conversation.append(result("r1", file))
      const text = lastResult(state.view)
      assert.isBelow(text.length, 300 * 4 + 200)
      const [head, pointer, tail] = (() => {
        const lines = text.split("\n")
        const at = lines.findIndex((l) => l.startsWith("[offloaded "))
        return [lines.slice(0, at), lines[at]!, lines.slice(at + 1)]
      })()
      const ref = parseOffloadRef(pointer)
      assert.isDefined(ref)
      assert.strictEqual(ref!._tag, "Read")
      if (ref?._tag !== "Read") return
      assert.strictEqual(ref.path, "/src/a.ts")
      assert.strictEqual(ref.toolUseId, "r1")
      const all = file.split("\n")
      // head, the omitted range and tail are the whole file, in order
      assert.deepStrictEqual(head, all.slice(0, head.length))
      assert.deepStrictEqual(tail, all.slice(all.length - tail.length))
      assert.deepStrictEqual(ref.range, { start: head.length + 1, end: all.length - tail.length })
      // the next request sends the result as it was appended
      const prepared = yield* conversation.prepare
      const sent = prepared.request.messages.at(-1)!.content as ReadonlyArray<{ content?: unknown }>
      assert.strictEqual(sent[0]!.content, text)
    }).pipe(Effect.provide(layer(300))))

  it.effect("a large command output points to the call to make again; small results and no limit: unchanged", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      yield* conversation.append({ role: "user", content: "build" })
      yield* conversation.recordReply(call("b1", "bash", { command: "npm run build" }))
      const text = lastResult((yield* conversation.append(result("b1", "x".repeat(20_000)))).view)
      const pointer = text.split("\n").find((l) => l.startsWith("[offloaded "))!
      const ref = parseOffloadRef(pointer)
      assert.strictEqual(ref?._tag, "Output")
      if (ref?._tag !== "Output") return
      assert.strictEqual(ref.input, "npm run build")
      assert.isAbove(ref.tokens, 4_000)
      yield* conversation.recordReply(call("b2", "bash", { command: "ls" }))
      assert.strictEqual(lastResult((yield* conversation.append(result("b2", "a\nb"))).view), "a\nb")
    }).pipe(Effect.provide(layer(300))))

  it.effect("without the limit a result is appended whole", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      yield* conversation.append({ role: "user", content: "read it" })
      yield* conversation.recordReply(call("r1", "Read", { file_path: "/src/a.ts" }))
      assert.strictEqual(lastResult((yield* conversation.append(result("r1", file))).view), file)
    }).pipe(Effect.provide(layer(undefined))))

  it("the policy refuses a limit too small for a head, a tail and the pointer", () => {
    const made = CompactionPolicy.make({ maxToolResultTokens: 100 })
    assert.isTrue(Result.isFailure(made))
    if (Result.isFailure(made)) {
      assert.instanceOf(made.failure, PolicyError)
      assert.strictEqual(made.failure.field, "maxToolResultTokens")
    }
  })
})
