/**
 * A conversation resumed from a log opened at its tail (`SessionLogOptions.tail`) is the live one: a real session of
 * `../shared/data` (the first 400 messages of `pi__before-compaction`) replayed with compactions through the JSONL and the SQL store, closed and resumed from the
 * tail every 40 requests, sends every request the uninterrupted run sends, byte for byte; and the state a tail-opened log resumes to
 * equals the fold of every entry from the start with no checkpoint (view, hot paths with their previous reads and open
 * calls, epoch, pending calls, usage). The tail alone does not hold the hot paths or the epoch (the entries before
 * it): the checkpoint of its last boundary does, so the resume reads no line before the tail, which the test proves by
 * overwriting every such line with garbage. A log whose boundaries hold no checkpoint is read in full, to the same
 * state.
 */
import { NodeFileSystem, NodePath } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { replayMessages } from "../src/cli/Replay.ts"
import { Conversation } from "../src/Conversation.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { encodeEntry, type Entry } from "../src/SessionEntry.ts"
import { SessionLog, type SessionLogError } from "../src/SessionLog.ts"
import { layerSessionLog } from "../src/SessionStoreJsonl.ts"
import { corpus } from "./fixtures/Corpus.ts"
import { corpusPolicy, replayCorpus, usageOf } from "./fixtures/ConversationReplay.ts"
import { execute, makeSchema } from "./fixtures/Pg.ts"
import { exactState, foldedFromStart, withoutCheckpoints } from "./fixtures/ResumeReference.ts"

const platform = Layer.mergeAll(NodeFileSystem.layer, NodePath.layer)

/** A log of the session on one store: opened from its tail, read in full, or (undefined) as it opens by default. */
type LogOf = (tail?: boolean) => Layer.Layer<SessionLog, SessionLogError>

/**
 * The first 400 messages of `pi__before-compaction` (15 compactions under the corpus policy, a few seconds a replay)
 * replayed into `log`, resumed from its tail every 40 requests: every request must be the uninterrupted run's, byte
 * for byte. Returns the replay's summary and the log read in full.
 */
const replayResumed = (log: LogOf) =>
  Effect.gen(function* () {
    const whole = corpus().find((s) => s.name === "pi__before-compaction")!
    const session = { ...whole, messages: whole.messages.slice(0, 400) }
    const live = yield* replayCorpus(session, undefined, corpusPolicy)
    const requests: Array<string> = []
    const summary = yield* replayMessages(session.messages, usageOf(session.messages), {
      policy: corpusPolicy,
      resumeEvery: 40,
      log: log(true),
      onRequest: (_, request) => Effect.sync(() => void requests.push(JSON.stringify(request)))
    }).pipe(Effect.provide(ExtractiveSummarizer.layer))
    assert.isAtLeast(summary.compactions, 2)
    assert.isAtLeast(summary.resumes, 3)
    assert.strictEqual(requests.length, live.requests.length)
    requests.forEach((r, i) => assert.isTrue(r === live.requests[i], `request ${i + 1} differs from the live run`))
    const full = yield* Effect.flatMap(Effect.service(SessionLog), (l) => l.load()).pipe(Effect.provide(log(false)))
    const reference = foldedFromStart(full)
    assert.strictEqual(reference.epoch, summary.compactions)
    return { summary, full, reference }
  })

/** The conversation `Conversation.layerLogged` resumes over `log`, and what the log folded. */
const openConversation = (log: Layer.Layer<SessionLog, SessionLogError>) =>
  Effect.gen(function* () {
    const state = yield* (yield* Conversation).state
    return { state, loaded: yield* (yield* SessionLog).loaded }
  }).pipe(
    Effect.provide(Conversation.layerLogged({ policy: corpusPolicy }).pipe(Layer.provideMerge(log))),
    Effect.provide(ExtractiveSummarizer.layer)
  )

describe("Conversation resumed from the log's tail", () => {
  it.effect(
    "a real session with compactions: every request equals the live run's; the tail alone resumes the full fold's state",
    () =>
      Effect.gen(function* () {
        const directory = mkdtempSync(join(tmpdir(), "conversation-tail-"))
        const logIn = (dir: string): LogOf => (tail) =>
          layerSessionLog({ directory: dir, sessionId: "s", ...(tail === undefined ? {} : { tail }), sync: "never" })
            .pipe(Layer.provide(platform))
        try {
          const { summary, full, reference } = yield* replayResumed(logIn(directory))
          const entries = full.entries as ReadonlyArray<Entry>
          const boundaries = entries.filter((e) => e.type === "compaction")
          assert.strictEqual(boundaries.length, summary.compactions)
          assert.isTrue(boundaries.every((b) => b.meta !== undefined), "every boundary carries a checkpoint")
          assert.isAbove(reference.hot.paths.length, 0, "the session has hot paths to restore")

          // the lines before the tail overwritten byte for byte: a resume that read one would fail
          const from = (yield* openConversation(logIn(directory)(true))).loaded.verifiedFrom ?? 1
          assert.isAbove(from, 1, "the log opens from its tail")
          const file = join(directory, "s.jsonl")
          const bytes = readFileSync(file)
          let offset = 0
          for (let line = 1; line < from; line++) offset = bytes.indexOf(0x0a, offset) + 1
          for (let i = 0; i < offset; i++) if (bytes[i] !== 0x0a) bytes[i] = 0x78
          writeFileSync(file, bytes)
          // the default open is the tail's
          const opened = yield* openConversation(logIn(directory)())
          assert.strictEqual(opened.loaded.verifiedFrom, from)
          assert.deepStrictEqual(exactState(opened.state), exactState(reference))
          // the log of a writer before checkpoints: the same state, from a full read
          const old = join(directory, "old")
          mkdirSync(old)
          writeFileSync(join(old, "s.jsonl"), withoutCheckpoints(entries).map((e) => `${encodeEntry(e)}\n`).join(""))
          const reread = yield* openConversation(logIn(old)(true))
          assert.deepStrictEqual(exactState(reread.state), exactState(reference))
        } finally {
          rmSync(directory, { recursive: true, force: true })
        }
      }),
    180_000
  )

  it.effect(
    "on the SQL store: every request equals the live run's, and with the rows before the tail deleted the state is the full fold's",
    () =>
      Effect.gen(function* () {
        const db = yield* Effect.promise(() => makeSchema())
        const log: LogOf = (tail) =>
          SessionLog.layer({ sessionId: "s", ...(tail === undefined ? {} : { tail }), sync: "never" }).pipe(
            Layer.provide(Layer.succeedContext(db.context))
          )
        try {
          const { reference } = yield* replayResumed(log)
          const from = (yield* openConversation(log(true))).loaded.verifiedFrom ?? 1
          assert.isAbove(from, 1, "the log opens from its tail")
          // the rows before the tail gone: a resume that read one would not find it
          yield* Effect.promise(() =>
            execute(db.url, `DELETE FROM ${db.schema}.compaction_entries WHERE seq < ${from}`)
          )
          // the default open is the tail's
          const opened = yield* openConversation(log())
          assert.strictEqual(opened.loaded.verifiedFrom, from)
          assert.deepStrictEqual(exactState(opened.state), exactState(reference))
        } finally {
          yield* Effect.promise(() => db.drop())
        }
      }),
    180_000
  )
})
