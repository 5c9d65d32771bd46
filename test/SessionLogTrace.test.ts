/**
 * What a logged step leaves in a trace: each logged message is one `SessionStore.append` span, a leaf under the
 * caller's span, carrying the session, the store, the position it expected and its entry count (the JSONL store; the
 * memory store makes the same span). A step that only reads (a `prepare` with nothing to record) writes nothing and
 * makes no span. Spans are recorded by a tracer built for the test over Effect's native one.
 */
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as NodePath from "@effect/platform-node/NodePath"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Option, Tracer } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Conversation, layerLogged } from "../src/Conversation.ts"
import type { MessageParam } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { SessionLog } from "../src/SessionLog.ts"
import { layerSessionLog } from "../src/SessionStoreJsonl.ts"

/** A tracer that keeps every span it starts (Effect's native spans). */
const recording = () => {
  const spans: Array<Tracer.Span> = []
  const tracer = Tracer.make({
    span(options) {
      const span = Tracer.nativeTracer.span(options) as Tracer.Span
      spans.push(span)
      return span
    }
  })
  return { spans, tracer }
}

const reply: MessageParam = {
  role: "assistant",
  content: [{ type: "tool_use", id: "toolu_trace_1", name: "read", input: { path: "/a.ts" } }]
}
const result: MessageParam = {
  role: "user",
  content: [{ type: "tool_result", tool_use_id: "toolu_trace_1", content: "export const a = 1\n" }]
}

/** One agent step under a `step` span: prepare, record the reply, append its result. */
const step = Effect.gen(function* () {
  const conversation = yield* Conversation
  const prepared = yield* conversation.prepare
  yield* conversation.recordReply(reply, { input_tokens: 100, output_tokens: 20 }, { requestEpoch: prepared.epoch })
  yield* conversation.append(result)
}).pipe(Effect.withSpan("step"))

const names = (spans: ReadonlyArray<Tracer.Span>) => spans.map((s) => s.name)

const checkStep = (spans: ReadonlyArray<Tracer.Span>, store: RegExp, firstSeq: number) => {
  const stepSpan = spans.find((s) => s.name === "step")!
  const appends = spans.filter((s) => s.name === "SessionStore.append")
  // the reply and the result: one span each, nothing nested around or under them
  assert.deepStrictEqual(names(spans), ["step", "SessionStore.append", "SessionStore.append"])
  appends.forEach((span, i) => {
    assert.strictEqual(Option.getOrUndefined(span.parent), stepSpan, "a child of the caller's span")
    assert.strictEqual(span.status._tag, "Ended")
    assert.strictEqual(span.attributes.get("session.id"), "traced")
    assert.match(String(span.attributes.get("session.store")), store)
    assert.strictEqual(span.attributes.get("expectedSeq"), firstSeq + i)
    assert.strictEqual(span.attributes.get("session.entries"), 1)
  })
}

describe("a logged step's trace", () => {
  it.effect("the JSONL store: one leaf SessionStore.append span per logged message", () =>
    Effect.gen(function* () {
      const directory = mkdtempSync(join(tmpdir(), "session-log-trace-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(directory, { recursive: true, force: true })))
      const { spans, tracer } = recording()
      const conversation = layerLogged({}).pipe(
        Layer.provide(layerSessionLog({ directory, sessionId: "traced" })),
        Layer.provide(Layer.mergeAll(NodeFileSystem.layer, NodePath.layer, ExtractiveSummarizer.layer))
      )
      yield* Effect.gen(function* () {
        yield* (yield* Conversation).append({ role: "user", content: "read /a.ts" })
        spans.length = 0
        yield* Effect.withTracer(step, tracer)
      }).pipe(Effect.provide(conversation))
      checkStep(spans, /^jsonl:/, 1)
    }))

  it.effect("the memory store: the same spans", () =>
    Effect.gen(function* () {
      const { spans, tracer } = recording()
      const conversation = layerLogged({}).pipe(
        Layer.provide(SessionLog.layerMemory({ sessionId: "traced" })),
        Layer.provide(ExtractiveSummarizer.layer)
      )
      yield* Effect.gen(function* () {
        yield* (yield* Conversation).append({ role: "user", content: "read /a.ts" })
        spans.length = 0
        yield* Effect.withTracer(step, tracer)
      }).pipe(Effect.provide(conversation))
      checkStep(spans, /^memory$/, 1)
    }))
})
