/**
 * A reply with empty content (`content: []`: the API's `end_turn` with nothing to say, a refusal, a request that did
 * not fit the window) adds no message, but its usage and stop reason are what the compaction trigger reads next: the
 * SDK's reply, or a `MessageParam` with its usage passed beside it, taken alike. A logged conversation stores them, so
 * a conversation resumed from its log (memory, JSONL, PostgreSQL) holds the live state and sends the live request: the
 * compaction the empty reply's usage or stop reason calls for, and no empty assistant message. The SDK's empty reply
 * recorded again (its id) is refused, as a reply with content is: the log holds it once.
 */
import { NodeFileSystem, NodePath } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Conversation, ConversationError } from "../src/Conversation.ts"
import type { ConversationState, MessageParam, SdkReply } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { CompactionPolicy, type ReportedUsage } from "../src/Policy.ts"
import { SessionLog, type SessionLogError } from "../src/SessionLog.ts"
import type { MemorySessions } from "../src/SessionStore.ts"
import { layerSessionLog } from "../src/SessionStoreJsonl.ts"
import { checkRequest, formatApiViolations } from "./fixtures/ApiRules.ts"
import { makeSchema } from "./fixtures/Pg.ts"
import { exactState } from "./fixtures/ResumeReference.ts"

const policy = CompactionPolicy.makeUnsafe({ compactAtTokens: 20_000, keepRecentTokens: 2_000 })

const user = (i: number): MessageParam => ({
  role: "user",
  content: `step ${i}: ${"the parser reads the config file and reports what it found ".repeat(100)}`
})

/** A reply as `client.messages.create` returns it. */
const sdkReply = (
  id: string,
  content: ReadonlyArray<{ readonly type: string; readonly text?: string }>,
  stopReason: string,
  inputTokens: number
): SdkReply => ({
  id,
  type: "message",
  role: "assistant",
  content,
  stop_reason: stopReason,
  usage: { input_tokens: inputTokens, output_tokens: content.length === 0 ? 0 : 40 }
})

/** An empty reply, the usage passed beside it (if any), and the input tokens the state keeps after it. */
interface Empty {
  readonly name: string
  readonly reply: SdkReply | MessageParam
  readonly usage?: ReportedUsage
  readonly inputTokens: number
}

const over = { input_tokens: 25_000, output_tokens: 0 }

/**
 * The empty replies that decide the next request: by their usage (the SDK's, or passed beside a `MessageParam` or an
 * SDK reply), and by their stop reason.
 */
const EMPTY: ReadonlyArray<Empty> = [
  { name: "end_turn over the trigger", reply: sdkReply("msg_empty", [], "end_turn", 25_000), inputTokens: 25_000 },
  {
    name: "model_context_window_exceeded",
    reply: sdkReply("msg_empty", [], "model_context_window_exceeded", 11_000),
    inputTokens: 11_000
  },
  {
    name: "SDK reply, a usage over the trigger passed beside it",
    reply: sdkReply("msg_empty", [], "end_turn", 11_000),
    usage: over,
    inputTokens: 25_000
  },
  {
    name: "MessageParam with empty content, a usage over the trigger passed beside it",
    reply: { role: "assistant", content: [] },
    usage: over,
    inputTokens: 25_000
  },
  {
    name: "MessageParam with only blank text, a usage over the trigger passed beside it",
    reply: { role: "assistant", content: [{ type: "text", text: " \n " }] },
    usage: over,
    inputTokens: 25_000
  }
]

/** A log over one store: each call a fresh log over the current session; `reset` moves on to a new session. */
type LogLayer = (() => Layer.Layer<SessionLog, SessionLogError>) & { readonly reset: () => Effect.Effect<void> }

/** A conversation reopened on the log, and the log it writes. */
const logged = (log: LogLayer) =>
  Conversation.layerLogged({ policy }).pipe(Layer.provideMerge(log()), Layer.provide(ExtractiveSummarizer.layer))

/**
 * Six turns under the trigger, a seventh prepared, and `empty` recorded as its reply: the live state after it. The SDK's
 * empty reply recorded again is refused, nothing written.
 */
const live = (log: LogLayer, { inputTokens, name, reply, usage }: Empty) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    for (let i = 1; i <= 6; i++) {
      yield* conversation.append(user(i))
      const prepared = yield* conversation.prepare
      assert.isUndefined(prepared.compaction, `turn ${i} stays under the trigger`)
      yield* conversation.recordReply(
        sdkReply(`msg_${i}`, [{ type: "text", text: `answer ${i}` }], "end_turn", 1_600 * i),
        undefined,
        { requestEpoch: prepared.epoch }
      )
    }
    yield* conversation.append(user(7))
    const prepared = yield* conversation.prepare
    assert.isUndefined(prepared.compaction)
    const before = yield* conversation.state
    const after = yield* conversation.recordReply(reply, usage, { requestEpoch: prepared.epoch })
    // no message: the view is the one the request sent; the reply's usage is the state's
    assert.strictEqual(JSON.stringify(after.view), JSON.stringify(before.view), name)
    assert.strictEqual(after.usage?.usage.input_tokens, inputTokens, `${name}: the usage is kept`)
    assert.strictEqual(after.reply?.requestEpoch, prepared.epoch, name)
    if ("id" in reply) {
      assert.strictEqual(after.reply?.id, "msg_empty")
      const log = yield* SessionLog
      const entries = (yield* log.loaded).entries.length
      const again = yield* Effect.exit(conversation.recordReply(reply, usage, { requestEpoch: prepared.epoch }))
      assert.isTrue(Exit.isFailure(again), `${name}: recorded again, the reply is refused`)
      const error = Exit.isFailure(again) ? again.cause.reasons.find((r) => r._tag === "Fail") : undefined
      assert.instanceOf(error?._tag === "Fail" ? error.error : undefined, ConversationError, name)
      assert.include(String(error?._tag === "Fail" ? error.error.message : ""), "record each reply once", name)
      assert.strictEqual((yield* log.loaded).entries.length, entries, `${name}: nothing written again`)
      assert.strictEqual(yield* conversation.state, after, `${name}: nothing changed`)
    }
    return after
  }).pipe(Effect.provide(logged(log)))

/** The request the state sends next and the compaction it ran: `state` going on in memory, as the live one would. */
const nextOf = (state: ConversationState) =>
  Conversation.use((c) => c.prepare).pipe(
    Effect.provide(
      Conversation.layerMemory({ policy, initial: state }).pipe(Layer.provide(ExtractiveSummarizer.layer))
    )
  )

/** The live state after the empty reply, the state a conversation reopened on the log resumes, and what each sends. */
const checkOn = (log: LogLayer) =>
  Effect.gen(function* () {
    for (const empty of EMPTY) {
      const { name } = empty
      const state = yield* live(log, empty)
      const resumed = yield* Effect.provide(Conversation.use((c) => c.state), logged(log))
      const { view, ...rest } = exactState(resumed)
      const { view: liveView, ...liveRest } = exactState(state)
      assert.isTrue(view === liveView, `${name}: the resumed view is the live one`)
      assert.deepStrictEqual(rest, liveRest, `${name}: the resumed state is the live one`)
      const expected = yield* nextOf(state)
      // the resumed conversation itself, on the log
      const next = yield* Effect.provide(Conversation.use((c) => c.prepare), logged(log))
      assert.strictEqual(expected.compaction?._tag, "Compacted", `${name}: the empty reply calls for a compaction`)
      assert.strictEqual(next.compaction?._tag, "Compacted", `${name}: so does the resumed conversation`)
      assert.isTrue(JSON.stringify(next.request) === JSON.stringify(expected.request), `${name}: the same request`)
      for (const request of [expected.request, next.request]) {
        const violations = checkRequest(request)
        assert.strictEqual(violations.length, 0, `${name}: ${formatApiViolations(violations)}`)
        assert.isFalse(
          request.messages.some((m) => Array.isArray(m.content) && m.content.length === 0),
          `${name}: no empty message is sent`
        )
      }
      yield* log.reset()
    }
  })

const platform = Layer.mergeAll(NodeFileSystem.layer, NodePath.layer)

describe("an empty reply's usage and stop reason are logged: the resumed conversation is the live one", () => {
  it.effect("memory store", () => {
    let store: MemorySessions = new Map()
    const log = Object.assign(() => SessionLog.layerMemory({ store }), {
      reset: () => Effect.sync(() => void (store = new Map()))
    })
    return checkOn(log)
  })

  it.effect("JSONL store", () => {
    const directory = mkdtempSync(join(tmpdir(), "conversation-empty-reply-"))
    let session = 0
    const log = Object.assign(
      () =>
        layerSessionLog({ directory, sessionId: `s${session}`, sync: "never" }).pipe(
          Layer.provide(platform),
          Layer.fresh
        ),
      { reset: () => Effect.sync(() => void session++) }
    )
    return checkOn(log).pipe(Effect.ensuring(Effect.sync(() => rmSync(directory, { recursive: true, force: true }))))
  })

  it.effect("SQL store (PostgreSQL)", () =>
    Effect.gen(function* () {
      const db = yield* Effect.promise(() => makeSchema())
      let session = 0
      const log = Object.assign(
        () =>
          SessionLog.layer({ sessionId: `s${session}`, sync: "never" }).pipe(
            Layer.provide(Layer.succeedContext(db.context)),
            Layer.fresh
          ),
        { reset: () => Effect.sync(() => void session++) }
      )
      yield* checkOn(log).pipe(Effect.ensuring(Effect.promise(() => db.drop())))
    }), 60_000)
})
