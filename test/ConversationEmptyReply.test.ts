/**
 * A reply with empty content (`content: []`: the API's `end_turn` with nothing to say, a refusal, a request that did
 * not fit the window) adds no message, but its usage and stop reason are what the compaction trigger reads next: the
 * SDK's reply, or a `MessageParam` with its usage passed beside it, taken alike. A logged conversation stores them, so
 * a conversation resumed from its log (memory, JSONL, PostgreSQL) holds the live state and sends the live request: the
 * compaction the empty reply's usage or stop reason calls for, and no empty assistant message. The SDK's empty reply
 * recorded again (its id) is refused, as a reply with content is: the log holds it once. With `backgroundAt`, an empty
 * reply records the cut of the summary pending in the background, as a reply with content does, so a conversation
 * resumed right after it starts that summary again and goes on as the live one.
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
import type { Message } from "../src/Message.ts"
import { CompactionPolicy, type ReportedUsage } from "../src/Policy.ts"
import { SessionLog, type SessionLogError } from "../src/SessionLog.ts"
import type { MemorySessions } from "../src/SessionStore.ts"
import { layerSessionLog } from "../src/SessionStoreJsonl.ts"
import { estimateTokens } from "../src/Tokens.ts"
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

/** Logs on the memory store, a new store at each `reset`. */
const memoryLog = (): LogLayer => {
  let store: MemorySessions = new Map()
  return Object.assign(() => SessionLog.layerMemory({ store }), {
    reset: () => Effect.sync(() => void (store = new Map()))
  })
}

/** `check` on logs of the JSONL store in a temporary directory (a new session at each `reset`), removed after. */
const onJsonlLog = <E>(check: (log: LogLayer) => Effect.Effect<void, E>) => {
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
  return check(log).pipe(Effect.ensuring(Effect.sync(() => rmSync(directory, { recursive: true, force: true }))))
}

describe("an empty reply's usage and stop reason are logged: the resumed conversation is the live one", () => {
  it.effect("memory store", () => checkOn(memoryLog()))

  it.effect("JSONL store", () => onJsonlLog(checkOn))

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

/**
 * With `backgroundAt`: the summary made in the background starts at the prepare right before an empty reply, so the
 * cut it is for is the empty reply's to record (the latest reply with content recorded none).
 */
const inBackground = CompactionPolicy.makeUnsafe({
  compactAtTokens: 20_000,
  keepRecentTokens: 2_000,
  keepRecentTurns: 1,
  backgroundAt: 0.5
})

/** The turn whose reply comes back empty: its prepare is the first past the pre-trigger (10,000 tokens). */
const EMPTY_AT = 7
/** The turns of the script: the trigger fires at the 14th, two more follow the compaction. */
const TURNS = 16

/** An empty reply to a request of `inputTokens`: the SDK's, or a `MessageParam` with the usage passed beside it. */
const EMPTY_IN_BACKGROUND: ReadonlyArray<{
  readonly name: string
  readonly reply: (inputTokens: number) => { readonly reply: SdkReply | MessageParam; readonly usage?: ReportedUsage }
}> = [
  { name: "the SDK's empty reply", reply: (input) => ({ reply: sdkReply("msg_empty", [], "end_turn", input) }) },
  {
    name: "a MessageParam with empty content, its usage beside it",
    reply: (input) => ({ reply: { role: "assistant", content: [] }, usage: { input_tokens: input, output_tokens: 0 } })
  }
]

/** What one turn did: the request it sent, its compaction, and the state after its reply. */
interface Turned {
  readonly request: string
  readonly compaction: string | undefined
  readonly state: ConversationState
}

/** Turns `from..to` of the script on the conversation: each a user message, a prepare and a reply with its usage. */
const turns = (from: number, to: number, empty: (typeof EMPTY_IN_BACKGROUND)[number]) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    const out: Array<Turned> = []
    for (let i = from; i <= to; i++) {
      yield* conversation.append(user(i))
      const prepared = yield* conversation.prepare
      const input = estimateTokens(prepared.request.messages as unknown as ReadonlyArray<Message>)
      const { reply, usage } = i === EMPTY_AT
        ? empty.reply(input)
        : { reply: sdkReply(`msg_${i}`, [{ type: "text", text: `answer ${i}` }], "end_turn", input), usage: undefined }
      const state = yield* conversation.recordReply(reply, usage, { requestEpoch: prepared.epoch })
      out.push({ request: JSON.stringify(prepared.request), compaction: prepared.compaction?._tag, state })
    }
    return out
  })

/** A conversation in the background policy reopened on the log (a fresh one per call: it resumes). */
const loggedInBackground = (log: LogLayer) =>
  Conversation.layerLogged({ policy: inBackground }).pipe(
    Layer.provideMerge(log()),
    Layer.provide(ExtractiveSummarizer.layer)
  )

/** The parts of two states a resume must restore, the background summary's cut among them. */
const assertSameState = (actual: ConversationState, expected: ConversationState, where: string) => {
  assert.deepStrictEqual(exactState(actual), exactState(expected), where)
  assert.strictEqual(actual.backgroundCut, expected.backgroundCut, `${where}: the background summary's cut`)
}

/**
 * The whole script in one conversation (the live one), then the same script on a new session, closed right after the
 * empty reply and resumed from its log for the rest: the resumed state is the live one, and every later turn sends
 * the live request (the compaction at the trigger applies the same background summary) and leaves the live state.
 */
const checkBackgroundOn = (log: LogLayer) =>
  Effect.gen(function* () {
    for (const empty of EMPTY_IN_BACKGROUND) {
      const { name } = empty
      const live = yield* Effect.provide(turns(1, TURNS, empty), loggedInBackground(log))
      yield* log.reset()
      assert.isUndefined(live[EMPTY_AT - 2]!.state.backgroundCut, `${name}: no summary before the pre-trigger`)
      assert.isTrue(
        live.slice(EMPTY_AT).some((t) => t.compaction === "Compacted"),
        `${name}: the trigger fires after the empty reply`
      )
      yield* Effect.provide(turns(1, EMPTY_AT, empty), loggedInBackground(log))
      const resumed = yield* Effect.provide(
        Effect.gen(function* () {
          const state = yield* Conversation.use((c) => c.state)
          return { state, rest: yield* turns(EMPTY_AT + 1, TURNS, empty) }
        }),
        loggedInBackground(log)
      )
      yield* log.reset()
      assertSameState(resumed.state, live[EMPTY_AT - 1]!.state, `${name}: resumed after the empty reply`)
      resumed.rest.forEach((t, k) => {
        const where = `${name}: turn ${EMPTY_AT + 1 + k}`
        const expected = live[EMPTY_AT + k]!
        assert.strictEqual(t.compaction, expected.compaction, where)
        assert.isTrue(t.request === expected.request, `${where}: the live request`)
        assertSameState(t.state, expected.state, where)
      })
      // the summary started at the empty reply's prepare: the cut the resume started again is the empty reply's
      assert.isDefined(live[EMPTY_AT - 1]!.state.backgroundCut, `${name}: the empty reply records the pending cut`)
    }
  })

describe("an empty reply records the background summary's cut: the resumed conversation applies the live one's", () => {
  it.effect("memory store", () => checkBackgroundOn(memoryLog()))

  it.effect("JSONL store", () => onJsonlLog(checkBackgroundOn))
})
