/**
 * A reply with empty content (`content: []`: the API's `end_turn` with nothing to say, a refusal, a request that did
 * not fit the window) adds no message, but its usage and stop reason are what the compaction trigger reads next. A
 * logged conversation stores them, so a conversation resumed from its log (memory, JSONL, PostgreSQL) holds the live
 * state and sends the live request: the compaction the empty reply's usage or stop reason calls for, and no empty
 * assistant message.
 */
import { NodeFileSystem, NodePath } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Conversation } from "../src/Conversation.ts"
import type { ConversationState, MessageParam, SdkReply } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { CompactionPolicy } from "../src/Policy.ts"
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

/** The empty replies that decide the next request: by their usage, and by their stop reason. */
const EMPTY: ReadonlyArray<{ readonly name: string; readonly reply: SdkReply }> = [
  { name: "end_turn over the trigger", reply: sdkReply("msg_empty", [], "end_turn", 25_000) },
  {
    name: "model_context_window_exceeded",
    reply: sdkReply("msg_empty", [], "model_context_window_exceeded", 11_000)
  }
]

/** A log over one store: each call a fresh log over the current session; `reset` moves on to a new session. */
type LogLayer = (() => Layer.Layer<SessionLog, SessionLogError>) & { readonly reset: () => Effect.Effect<void> }

const logged = (log: LogLayer) =>
  Conversation.layerLogged({ policy }).pipe(Layer.provide(log()), Layer.provide(ExtractiveSummarizer.layer))

/** Six turns under the trigger, a seventh prepared, and `empty` recorded as its reply: the live state after it. */
const live = (log: LogLayer, empty: SdkReply) =>
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
    const after = yield* conversation.recordReply(empty, undefined, { requestEpoch: prepared.epoch })
    // no message: the view is the one the request sent
    assert.strictEqual(JSON.stringify(after.view), JSON.stringify(before.view))
    assert.strictEqual(after.reply?.id, "msg_empty")
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
    for (const { name, reply } of EMPTY) {
      const state = yield* live(log, reply)
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
