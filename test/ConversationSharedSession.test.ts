/**
 * Two `Conversation`s on one session (workers sharing it through PostgreSQL, or through one memory store): each
 * derives its state from the log up to the head it knows, so a step taken after the other wrote fails with
 * `ConversationError` `Persist` caused by `SessionLogError` `Conflict`, with nothing written and its state unchanged,
 * instead of interleaving its entries with the other's; reopening continues from the log with both workers' entries,
 * as a fresh open shows it. Workers that take turns (open, step, close) never meet a conflict. On the memory store, on
 * the embedded PGlite and on the PostgreSQL server at `DATABASE_URL` when set; and a property over random
 * interleavings of two conversations' steps on one memory log: after every step the log's resumed view is the view of
 * the conversation that wrote last. And the log's conditional write itself (`WriteCondition.ifHead`), as any caller
 * passes it; without it, appends go after whatever is stored, as before.
 */
import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, Context, Effect, Exit, Layer, Schema, Scope } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import { afterAll, beforeAll } from "vitest"
import { Conversation, ConversationError, type ConversationShape } from "../src/Conversation.ts"
import type { ConversationState, MessageParam } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import type { Entry } from "../src/SessionEntry.ts"
import { readSession, SessionLog, SessionLogError } from "../src/SessionLog.ts"
import { type MemorySessions, SessionStore } from "../src/SessionStore.ts"
import * as SessionStoreSql from "../src/SessionStoreSql.ts"
import { databases, makeSchema } from "./fixtures/Pg.ts"

const policy = CompactionPolicy.makeUnsafe({
  contextWindow: 12_000,
  minRemaining: 3_000,
  keepRecentTokens: 300,
  keepRecentTurns: 1
})

const user = (text: string): MessageParam => ({ role: "user", content: text })
const reply = (text: string): MessageParam => ({ role: "assistant", content: [{ type: "text", text }] })
const words = (label: string, n: number) => `${label}: ${"the parser reads the config file ".repeat(n)}`
const json = (state: ConversationState) => JSON.stringify(state.view)
/** What a step stores of a state, as comparable text (the bookkeeping of the request in flight left out). */
const stored = (state: ConversationState) =>
  JSON.stringify({ view: state.view, epoch: state.epoch, pending: state.pending, usage: state.usage })

/** How a test reaches one shared session: a fresh log over it (one worker's), and its stored entries. */
interface Shared {
  readonly log: () => Layer.Layer<SessionLog, SessionLogError>
  readonly entries: Effect.Effect<ReadonlyArray<Entry>, SessionLogError>
  /** The places the store keeps for the session's appends waiting their turn (PostgreSQL; none in memory). */
  readonly queued: Effect.Effect<number, unknown>
}

/** One worker's open conversation on the shared session, and how it closes (releasing its log). */
interface Worker {
  readonly conversation: ConversationShape
  readonly close: Effect.Effect<void>
}

/** Opens a conversation on a log of its own over the shared session: it resumes from what is stored. */
const openWorker = (shared: Shared) =>
  Effect.gen(function* () {
    const scope = yield* Scope.make()
    const layer = Conversation.layerLogged({ policy, minFreedTokens: 100 }).pipe(
      Layer.provide(shared.log()),
      Layer.provide(ExtractiveSummarizer.layer)
    )
    const context = yield* Layer.buildWithScope(layer, scope)
    return { conversation: Context.get(context, Conversation), close: Scope.close(scope, Exit.void) } satisfies Worker
  })

/** The state a conversation opened now on the shared session resumes to (a fresh open). */
const freshState = (shared: Shared) =>
  Effect.gen(function* () {
    const fresh = yield* openWorker(shared)
    const state = yield* fresh.conversation.state
    yield* fresh.close
    return state
  })

/** One whole turn: the user's message, the request, the reply. */
const turn = (worker: Worker, text: string, inputTokens = 500) =>
  Effect.gen(function* () {
    yield* worker.conversation.append(user(text))
    const prepared = yield* worker.conversation.prepare
    yield* worker.conversation.recordReply(reply(`answer to ${text.slice(0, 12)}`), {
      input_tokens: inputTokens,
      output_tokens: 20
    }, { requestEpoch: prepared.epoch })
  })

/** The step's failure: `Persist` caused by `Conflict`, with the state it was given unchanged. */
const assertConflict = <A>(exit: Exit.Exit<A, unknown>, label: string) => {
  assert.isTrue(Exit.isFailure(exit), `${label}: the step must fail`)
  const error = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail") : undefined
  const failure = error?._tag === "Fail" ? error.error : undefined
  assert.instanceOf(failure, ConversationError, label)
  const conversationError = failure as ConversationError<unknown>
  assert.strictEqual(conversationError.reason, "Persist", label)
  assert.instanceOf(conversationError.cause, SessionLogError, label)
  assert.strictEqual((conversationError.cause as SessionLogError).reason, "Conflict", label)
  assert.match(conversationError.message, /another writer appended to the session.*reopening continues from the log/)
}

/** The user and assistant texts of the stored message entries, in order. */
const storedTexts = (entries: ReadonlyArray<Entry>) =>
  entries.flatMap((e) => {
    if (e.type !== "message") return []
    const content = e.message.content
    return [(typeof content === "string" ? content : (content[0] as { text: string }).text).slice(0, 12)]
  })

const scenario = (shared: Shared) =>
  Effect.gen(function* () {
    // taking turns: each worker opens the session for its turn and closes it after; nothing conflicts
    const a0 = yield* openWorker(shared)
    yield* turn(a0, words("A0", 300))
    yield* a0.close
    const b0 = yield* openWorker(shared)
    yield* turn(b0, words("B0", 300))
    const afterTurns = yield* b0.conversation.state
    yield* b0.close
    assert.strictEqual(json(yield* freshState(shared)), json(afterTurns))
    assert.strictEqual(afterTurns.view.length, 4)

    // interleaving: both open; A writes first, so B's steps fail and write nothing, its state unchanged
    const a = yield* openWorker(shared)
    const b = yield* openWorker(shared)
    yield* a.conversation.append(user(words("A1", 300)))
    const entriesSoFar = (yield* shared.entries).length
    const bBefore = yield* b.conversation.state
    assertConflict(yield* Effect.exit(b.conversation.append(user(words("B1", 300)))), "B's append after A's")
    assert.strictEqual(yield* shared.queued, 0, "the refused write keeps no place for a try it will not make")
    assert.strictEqual(yield* b.conversation.state, bBefore, "B's state is unchanged")
    const prepared = yield* a.conversation.prepare
    // a usage over the trigger: A's next `prepare` compacts
    yield* a.conversation.recordReply(reply("A1 answered"), { input_tokens: 20_000, output_tokens: 20 }, {
      requestEpoch: prepared.epoch
    })
    assertConflict(yield* Effect.exit(b.conversation.append(user(words("B1", 300)))), "B's append after A's turn")
    assert.strictEqual(yield* b.conversation.state, bBefore, "B's state is still unchanged")
    assert.strictEqual((yield* shared.entries).length, entriesSoFar + 1, "only A's reply was written since")
    const aState = yield* a.conversation.state
    assert.strictEqual(json(yield* freshState(shared)), json(aState), "the log resumes to A's view")

    // B reopens: it continues from the log, with A's entries, as a fresh open shows it
    yield* b.close
    const b1 = yield* openWorker(shared)
    assert.strictEqual(json(yield* b1.conversation.state), json(aState))
    yield* turn(b1, words("B1", 300))
    // now A is the one behind: its steps fail, and after B's turn compacted, so does a compaction of A's (a Conflict,
    // not a cut outside the log's view)
    assertConflict(yield* Effect.exit(a.conversation.append(user(words("A2", 300)))), "A's append after B's turn")
    assert.strictEqual((yield* b1.conversation.state).epoch, 1, "B's turn compacted (A's reply was over the trigger)")
    assertConflict(yield* Effect.exit(a.conversation.compact()), "A's compaction after B's")
    assertConflict(yield* Effect.exit(turn(a, words("A2", 300))), "A's turn after B's compaction")
    const bState = yield* b1.conversation.state
    yield* a.close
    yield* b1.close

    // nothing doubled or lost: every written turn once, in order; the resumed view is the last writer's
    assert.deepStrictEqual(storedTexts(yield* shared.entries), [
      "A0: the pars",
      "answer to A0",
      "B0: the pars",
      "answer to B0",
      "A1: the pars",
      "A1 answered",
      "B1: the pars",
      "answer to B1"
    ])
    const reopened = yield* openWorker(shared)
    assert.strictEqual(json(yield* reopened.conversation.state), json(bState))
    assert.strictEqual(json(yield* freshState(shared)), json(bState))
    yield* reopened.close
  })

const memoryShared = (sessionId: string): Shared => {
  const store = new Map() as MemorySessions
  return {
    log: () => Layer.fresh(SessionLog.layerMemory({ store, sessionId })),
    entries: Effect.map(
      readSession(sessionId, { tail: false }).pipe(Effect.provide(SessionStore.layerMemory(store))),
      (l) => l.entries
    ),
    queued: Effect.succeed(0)
  }
}

describe("two conversations on one session: memory store", () => {
  it.effect("taking turns works; interleaving fails the later step with Conflict; a reopen continues from the log", () =>
    scenario(memoryShared("shared")))
})

for (const database of databases) {
  describe(`two conversations on one session: PostgreSQL (${database.name})`, () => {
    let pg: Awaited<ReturnType<typeof makeSchema>> | undefined
    beforeAll(async () => {
      pg = await makeSchema(database)
    }, 120_000)
    afterAll(async () => {
      await pg?.drop()
    })

    // live: the store's queue waits on the real clock
    it.live(
      "taking turns works; interleaving fails the later step with Conflict; a reopen continues from the log",
      () =>
        Effect.suspend(() => {
          const store = Layer.succeedContext(pg!.context)
          const sessionId = `shared-${Math.random().toString(36).slice(2, 8)}`
          return scenario({
            log: () => Layer.fresh(SessionStoreSql.layerSessionLog({ sessionId })).pipe(Layer.provide(store)),
            entries: Effect.map(
              readSession(sessionId, { tail: false }).pipe(Effect.provide(store)),
              (l) => l.entries
            ),
            queued: Effect.flatMap(SqlClient.SqlClient, (sql) =>
              sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM compaction_turns
                WHERE session_id = ${sessionId}`).pipe(
                Effect.map((rows) =>
                  rows[0]!.n
                ),
                Effect.provide(store)
              )
          })
        }),
      180_000
    )
  })
}

// ============================================================================
// Property: random interleavings of two conversations' steps on one log
// ============================================================================

const Steps = Schema.Array(
  Schema.Struct({
    worker: Schema.Literals([0, 1]),
    compact: Schema.Boolean,
    big: Schema.Boolean
  })
).check(Schema.isMinLength(8), Schema.isMaxLength(30))

describe("two conversations on one session: random interleavings", () => {
  it.effect.prop(
    "after every step the log's resumed view is the view of the conversation that wrote last",
    [Arbitrary.schema(Steps)],
    ([steps]) =>
      Effect.gen(function* () {
        const shared = memoryShared("interleaved")
        const workers: Array<Worker> = [yield* openWorker(shared), yield* openWorker(shared)]
        // per worker: the epoch of the request it prepared and has not recorded the reply to yet
        const preparedEpoch: Array<number | undefined> = [undefined, undefined]
        let lastWriter: number | undefined
        let n = 0
        for (const step of steps) {
          n++
          const w = step.worker
          const worker = workers[w]!
          const before = yield* worker.conversation.state
          const entriesBefore = (yield* shared.entries).length
          const last = before.view.at(-1) as MessageParam | undefined
          const kind = step.compact
            ? "compact"
            : last === undefined || last.role === "assistant"
            ? "append"
            : preparedEpoch[w] === undefined
            ? "prepare"
            : "reply"
          const exit = yield* Effect.exit<void, ConversationError<unknown>, never>(
            kind === "compact"
              ? Effect.asVoid(worker.conversation.compact())
              : kind === "append"
              ? Effect.asVoid(worker.conversation.append(user(words(`w${w} step ${n}`, step.big ? 600 : 200))))
              : kind === "prepare"
              ? Effect.map(worker.conversation.prepare, (p) => {
                preparedEpoch[w] = p.epoch
              })
              : Effect.asVoid(
                worker.conversation.recordReply(
                  reply(`w${w} answers ${n}`),
                  { input_tokens: step.big ? 20_000 : 800, output_tokens: 20 },
                  { requestEpoch: preparedEpoch[w]! }
                )
              )
          )
          const label = `step ${n} (worker ${w}, ${kind})`
          const entriesAfter = (yield* shared.entries).length
          if (Exit.isFailure(exit)) {
            // a step on a state that misses the other's entries: Conflict, nothing written, nothing changed
            assertConflict(exit, label)
            assert.strictEqual(entriesAfter, entriesBefore, `${label}: nothing written`)
            assert.strictEqual(stored(yield* worker.conversation.state), stored(before), `${label}: state unchanged`)
            yield* worker.close
            workers[w] = yield* openWorker(shared)
            preparedEpoch[w] = undefined
            assert.strictEqual(
              json(yield* workers[w]!.conversation.state),
              json(yield* freshState(shared)),
              `${label}: the reopened conversation is a fresh open`
            )
          } else {
            if (entriesAfter !== entriesBefore) lastWriter = w
            if (kind === "append" || kind === "reply") preparedEpoch[w] = undefined
          }
          const resumed = yield* freshState(shared)
          if (lastWriter === undefined) assert.strictEqual(resumed.view.length, 0, label)
          else {
            assert.strictEqual(
              json(resumed),
              json(yield* workers[lastWriter]!.conversation.state),
              `${label}: the resumed view is worker ${lastWriter}'s`
            )
          }
        }
        for (const worker of workers) yield* worker.close
      }),
    { timeout: 180_000, arbitrary: { runs: 200 } }
  )
})

// ============================================================================
// The log's conditional write, as any caller passes it
// ============================================================================

describe("SessionLog: a write conditional on the head its caller saw", () => {
  const two = (store: MemorySessions) => ({
    first: Layer.fresh(SessionLog.layerMemory({ store, sessionId: "heads" })),
    second: Layer.fresh(SessionLog.layerMemory({ store, sessionId: "heads" }))
  })
  const conflictOf = <A>(exit: Exit.Exit<A, SessionLogError>) => {
    assert.isTrue(Exit.isFailure(exit), "the write must fail")
    const reason = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail") : undefined
    return reason?._tag === "Fail" ? reason.error.reason : undefined
  }
  const result = (id: string) => ({
    toolUseId: id,
    block: { type: "tool_result" as const, tool_use_id: id, content: "[offloaded]" }
  })

  it.effect("appends, evictions and compactions after another writer's entry fail with Conflict, writing nothing", () =>
    Effect.gen(function* () {
      const store = new Map() as MemorySessions
      const { first, second } = two(store)
      const lengthNow = () => store.get("heads")?.length ?? 0
      yield* Effect.gen(function* () {
        const a = yield* SessionLog
        const seen = (yield* a.snapshot).head
        assert.strictEqual(seen, null)
        // the other writer appends (a log of its own over the same store)
        yield* Effect.provide(
          Effect.flatMap(SessionLog, (b) => b.append([{ role: "user", content: "from B" }])),
          second
        )
        // the store is past the head `a` saw: caught up, and refused
        assert.strictEqual(conflictOf(yield* Effect.exit(a.append([user("from A")], { ifHead: seen }))), "Conflict")
        assert.strictEqual(lengthNow(), 1)
        assert.strictEqual((yield* a.snapshot).view.length, 1, "the log caught up with B's entry")
        // the live view is past it: refused at once, eviction and compaction alike
        assert.strictEqual(
          conflictOf(yield* Effect.exit(a.recordEviction([result("t1")], { ifHead: seen }))),
          "Conflict"
        )
        const snapshot = yield* a.snapshot
        const compaction = { snapshot, cut: 1, view: [user("summary")], summarizer: "test" }
        assert.strictEqual(conflictOf(yield* Effect.exit(a.recordCompaction(compaction, { ifHead: seen }))), "Conflict")
        // a cut outside the caller's stale view is still a Conflict: the head is checked first
        assert.strictEqual(
          conflictOf(yield* Effect.exit(a.recordCompaction({ ...compaction, cut: 9 }, { ifHead: seen }))),
          "Conflict"
        )
        assert.strictEqual(lengthNow(), 1, "nothing written")
        // on the head it now knows, the write lands; without the condition, it lands after whatever is stored
        const [id] = yield* a.append([user("from A")], { ifHead: snapshot.head })
        assert.strictEqual((yield* a.snapshot).head, id)
        yield* Effect.provide(Effect.flatMap(SessionLog, (b) => b.append([user("from B again")])), second)
        yield* a.append([user("from A again")])
        assert.strictEqual(lengthNow(), 4)
      }).pipe(Effect.provide(first))
    }))
})
