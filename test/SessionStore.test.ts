/**
 * One conformance suite, run against every store (memory, the JSONL file, PostgreSQL: the embedded PGlite, and the
 * server at DATABASE_URL when set): live equals load after
 * restarts, conflict, idempotent retry, two compactions of one snapshot, many writers, incremental catch-up,
 * integrity (every byte of a small stored session flipped: the even bytes under Node, the odd ones under Deno), not-found, and byte-exact `\u0000` / lone surrogates / runs of ASCII and other lines.
 */
import { NodeFileSystem, NodePath } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { type Context, Effect, Exit, Layer } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll } from "vitest"
import type { Message } from "../src/Message.ts"
import { readSession, SessionLog, SessionLogError, type SessionLogShape } from "../src/SessionLog.ts"
import { BOUNDARY_SQL_PATTERN, isBoundaryLine, tailOf } from "../src/internal/sessionTail.ts"
import { type MemorySessions, SessionStore } from "../src/SessionStore.ts"
import { readJsonl, SessionStoreJsonl } from "../src/SessionStoreJsonl.ts"
import { generateSession, prng } from "./fixtures/Conversation.ts"
import { databases, makeSchema } from "./fixtures/Pg.ts"
import { interleave, modelSteps, performStep } from "./fixtures/SessionScript.ts"

/** 0 under Node, 1 under Deno: the half of the bytes a flip test takes in this runtime. */
const RUNTIME_PARITY = "Deno" in globalThis ? 1 : 0

const platform = Layer.mergeAll(NodeFileSystem.layer, NodePath.layer)
const user = (text: string): Message => ({ role: "user", content: text })
const encoder = new TextEncoder()
const decoder = new TextDecoder()

/** A store under test: its layer (each provide is a fresh process over the same data) and raw access to its bytes. */
interface Backend {
  readonly name: string
  /** Several writers on one session at once (the JSONL file allows one: the others get `Locked`). */
  readonly multiWriter: boolean
  readonly store: () => Layer.Layer<SessionStore, unknown>
  /** The stored bytes of a session, in units (one per entry, or the whole file), and a writer of one unit. */
  readonly raw: (sessionId: string) => Effect.Effect<{
    readonly units: ReadonlyArray<Uint8Array>
    readonly write: (i: number, bytes: Uint8Array) => Effect.Effect<void, unknown>
  }, unknown>
}

const memorySessions: MemorySessions = new Map()
const directory = mkdtempSync(join(tmpdir(), "session-store-"))
const pgs: Array<Awaited<ReturnType<typeof makeSchema>>> = []

const backends: ReadonlyArray<Backend> = [
  {
    name: "memory",
    multiWriter: true,
    store: () => SessionStore.layerMemory(memorySessions),
    raw: (sessionId) =>
      Effect.sync(() => {
        const entries = memorySessions.get(sessionId)!
        return {
          units: entries.map((e) => encoder.encode(e.line)),
          write: (i, bytes) => Effect.sync(() => void (entries[i] = { ...entries[i]!, line: decoder.decode(bytes) }))
        }
      })
  },
  {
    name: "jsonl",
    multiWriter: false,
    store: () => SessionStoreJsonl.layer({ directory }).pipe(Layer.provide(platform)),
    raw: (sessionId) =>
      Effect.sync(() => {
        const file = join(directory, `${sessionId}.jsonl`)
        return {
          units: [readFileSync(file)],
          write: (_: number, bytes: Uint8Array) => Effect.sync(() => writeFileSync(file, bytes))
        }
      })
  },
  ...databases.map((database, d): Backend => ({
    name: `postgres (${database.name})`,
    multiWriter: true,
    store: () => Layer.succeedContext(pgs[d]!.context as Context.Context<SessionStore>),
    raw: (sessionId) =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ readonly seq: number; readonly line: string }>`
          SELECT seq::int AS seq, line FROM compaction_entries WHERE session_id = ${sessionId} ORDER BY seq`
        return {
          units: rows.map((r) => encoder.encode(r.line)),
          write: (i: number, bytes: Uint8Array) =>
            sql`UPDATE compaction_entries SET line = ${decoder.decode(bytes)}
              WHERE session_id = ${sessionId} AND seq = ${rows[i]!.seq}`.pipe(Effect.asVoid)
        }
      }).pipe(Effect.provide(Layer.succeedContext(pgs[d]!.context)))
  }))
]

beforeAll(async () => {
  for (const database of databases) pgs.push(await makeSchema(database))
}, 180_000)
afterAll(async () => {
  rmSync(directory, { recursive: true, force: true })
  for (const pg of pgs) await pg.drop()
})

let counter = 0
const freshId = (name: string) => `${name}-${process.pid}-${++counter}`

const withLog = <A, E>(
  backend: Backend,
  sessionId: string,
  body: (log: SessionLogShape) => Effect.Effect<A, E>
): Effect.Effect<A, E | unknown> =>
  Effect.flatMap(Effect.service(SessionLog), body).pipe(
    Effect.provide(SessionLog.layer({ sessionId }).pipe(Layer.provide(backend.store()), Layer.fresh))
  )

const read = (backend: Backend, sessionId: string) => readSession(sessionId).pipe(Effect.provide(backend.store()))

const failure = (exit: Exit.Exit<unknown, unknown>): SessionLogError => {
  assert.isTrue(Exit.isFailure(exit), "expected a failure")
  const reason = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail") : undefined
  const error = (reason as { readonly error?: unknown } | undefined)?.error
  assert.instanceOf(error, SessionLogError)
  return error as SessionLogError
}

const script = (seed: number, messages: number) => {
  const rand = prng(seed)
  return modelSteps(interleave(generateSession(seed, { messages, maxOutput: 400 }), () => ({
    evict: rand() < 0.15,
    compact: rand() < 0.08,
    pick: Math.floor(rand() * 1000)
  })))
}

for (const backend of backends) {
  describe(`SessionStore conformance: ${backend.name}`, () => {
    it.live("live equals load, and equals the model, after a restart every few steps", () =>
      Effect.gen(function* () {
        const sessionId = freshId("restart")
        const { steps, views } = script(7, 60)
        for (let from = 0; from < steps.length; from += 9) {
          const chunk = steps.slice(from, from + 9)
          const live = yield* withLog(backend, sessionId, (log) =>
            Effect.gen(function* () {
              assert.strictEqual(JSON.stringify((yield* log.snapshot).view), JSON.stringify(views[from]))
              for (const step of chunk) yield* performStep(log, step)
              return yield* log.snapshot
            }))
          const loaded = yield* read(backend, sessionId)
          assert.strictEqual(JSON.stringify(loaded.view), JSON.stringify(live.view))
          assert.strictEqual(JSON.stringify(loaded.view), JSON.stringify(views[from + chunk.length]))
          assert.deepStrictEqual(loaded.entryIds, live.entryIds)
        }
      }), 180_000)

    it.live("the contract: Conflict at a stale sequence number, AlreadyWritten for the same ids, nothing doubled", () =>
      Effect.gen(function* () {
        const sessionId = freshId("contract")
        const ids = yield* withLog(backend, sessionId, (log) => log.append([user("a"), user("b")]))
        const store = yield* Effect.provide(Effect.service(SessionStore), backend.store())
        const before = yield* store.read(sessionId, 0)
        assert.deepStrictEqual(before.entries.map((e) => e.seq), [1, 2])
        const line = before.entries[1]!.line
        const stale = yield* store.append(sessionId, 1, [{ entryId: "new-entry", line }])
        assert.deepStrictEqual(stale, { _tag: "Conflict", seq: 2 })
        const retry = yield* store.append(sessionId, 1, [{ entryId: ids[1]!, line }])
        assert.deepStrictEqual(retry, { _tag: "AlreadyWritten", seq: 2 })
        assert.strictEqual((yield* store.read(sessionId, 0)).entries.length, 2)
        assert.deepStrictEqual((yield* store.read(sessionId, 1)).entries.map((e) => e.seq), [2])
        assert.include(yield* store.list, sessionId)
      }).pipe(Effect.scoped))

    it.live("a session that does not exist is NotFound on every read path; an empty one is empty", () =>
      Effect.gen(function* () {
        const store = yield* Effect.provide(Effect.service(SessionStore), backend.store())
        const missing = freshId("missing")
        assert.strictEqual(failure(yield* Effect.exit(store.read(missing, 0))).reason, "NotFound")
        assert.strictEqual(failure(yield* Effect.exit(read(backend, missing))).reason, "NotFound")
        assert.strictEqual(
          failure(yield* Effect.exit(store.append(missing, 0, [{ entryId: "x", line: "{}" }]))).reason,
          "NotFound"
        )
        if (backend.name === "jsonl") {
          const viaFile = readJsonl({ directory, sessionId: missing }).pipe(Effect.provide(platform))
          assert.strictEqual(failure(yield* Effect.exit(viaFile)).reason, "NotFound")
        }
        const empty = freshId("empty")
        yield* withLog(backend, empty, () => Effect.void)
        const loaded = yield* read(backend, empty)
        assert.deepStrictEqual([loaded.entries.length, loaded.view.length, loaded.seq], [0, 0, 0])
      }))

    it.live("\\u0000, lone surrogates and odd key orders round-trip byte for byte", () =>
      Effect.gen(function* () {
        const sessionId = freshId("bytes")
        const odd: Message = { content: "nul \u0000 lone \ud800 and \udfff, pair \ud83d\ude00", role: "user" }
        const blocks: Message = {
          role: "assistant",
          content: [{ type: "text", text: "\u0000\udbff\u2028" }, {
            type: "tool_use",
            id: "t",
            name: "x",
            input: { "\u0000": "\ud800" }
          }]
        }
        yield* withLog(backend, sessionId, (log) => log.append([odd, blocks]))
        const loaded = yield* read(backend, sessionId)
        assert.strictEqual(JSON.stringify(loaded.view), JSON.stringify([odd, blocks]))
        assert.strictEqual(loaded.view[0]!.content as string, odd.content)
        const reopened = yield* withLog(backend, sessionId, (log) => log.snapshot)
        assert.strictEqual(JSON.stringify(reopened.view), JSON.stringify([odd, blocks]))
        // runs of ASCII lines between lines of other characters (a JSONL read copies the ASCII runs, decodes the rest)
        const mixed = ["plain", "é", "plain too", "and", "日本 😀 — …", "ascii", "ascii", "ü", "ö"].map(user)
        const mixedId = freshId("mixed")
        yield* withLog(backend, mixedId, (log) => log.append(mixed))
        assert.strictEqual(JSON.stringify((yield* read(backend, mixedId)).view), JSON.stringify(mixed))
        const tail = yield* readSession(mixedId, { tail: true }).pipe(Effect.provide(backend.store()))
        assert.strictEqual(JSON.stringify(tail.view), JSON.stringify(mixed))
      }))

    it.live(
      "a tail read: the store finds the tail a scan of every line finds, and its fold is the full fold",
      () =>
        Effect.gen(function* () {
          const sessionId = freshId("tail")
          const { steps } = script(23, 400)
          yield* withLog(backend, sessionId, (log) => Effect.forEach(steps, (step) => performStep(log, step)))
          const store = yield* Effect.provide(Effect.service(SessionStore), backend.store())
          const all = (yield* store.read(sessionId, 0)).entries
          const tail = (yield* store.readTail!(sessionId)).entries
          assert.isAbove(tail[0]!.seq, 1)
          assert.deepStrictEqual(tail, tailOf(all), "the store's tail is the scan's")
          assert.isAtLeast(all.filter((e) => isBoundaryLine(e.line)).length, 10)
          const full = yield* read(backend, sessionId)
          const fromTail = yield* readSession(sessionId, { tail: true }).pipe(Effect.provide(backend.store()))
          const state = (l: typeof full) => [JSON.stringify(l.view), l.entryIds, l.head, l.seq]
          assert.deepStrictEqual(state(fromTail), state(full))
          assert.strictEqual(fromTail.verifiedFrom, tail[0]!.seq)
          assert.strictEqual(JSON.stringify(fromTail.entries), JSON.stringify(full.entries.slice(tail[0]!.seq - 1)))
          const opened = yield* Effect.flatMap(Effect.service(SessionLog), (log) => log.loaded).pipe(
            Effect.provide(
              SessionLog.layer({ sessionId, tail: true }).pipe(Layer.provide(backend.store()), Layer.fresh)
            )
          )
          assert.deepStrictEqual(state(opened), state(full))
          if (backend.name === "jsonl") {
            const viaFile = yield* readJsonl({ directory, sessionId, tail: true }).pipe(Effect.provide(platform))
            assert.deepStrictEqual(state(viaFile), state(full))
            assert.strictEqual(viaFile.verifiedFrom, tail[0]!.seq)
          }
          if (backend.name.startsWith("postgres")) {
            // rows written before migration 0002 carry no boundary mark: the tail read then starts at the first line;
            // the migration's backfill marks them again
            const pg = pgs[databases.findIndex((database) => backend.name === `postgres (${database.name})`)]!
            const sql = yield* Effect.provide(Effect.service(SqlClient.SqlClient), Layer.succeedContext(pg.context))
            yield* sql`UPDATE compaction_entries SET boundary = false WHERE session_id = ${sessionId}`
            assert.strictEqual((yield* store.readTail!(sessionId)).entries[0]!.seq, 1)
            const unmarked = yield* readSession(sessionId, { tail: true }).pipe(Effect.provide(backend.store()))
            assert.deepStrictEqual(state(unmarked), state(full))
            assert.isUndefined(unmarked.verifiedFrom)
            yield* sql`UPDATE compaction_entries SET boundary = true
            WHERE session_id = ${sessionId} AND line ~ ${BOUNDARY_SQL_PATTERN}`
            assert.deepStrictEqual((yield* store.readTail!(sessionId)).entries, tail)
          }
        }),
      180_000
    )

    it.live(
      "a tail read of a small session with one byte of its tail flipped fails as the full read does",
      () =>
        Effect.gen(function* () {
          const sessionId = freshId("tailflip")
          const original = yield* withLog(backend, sessionId, (log) =>
            Effect.gen(function* () {
              yield* log.append([user("hi"), {
                role: "assistant",
                content: [{ type: "tool_use", id: "t1", name: "bash", input: {} }]
              }])
              yield* log.append([{
                role: "user",
                content: [{ type: "tool_result", tool_use_id: "t1", content: "out" }]
              }])
              const snapshot = yield* log.snapshot
              yield* log.recordCompaction({
                view: [user("sum"), ...snapshot.view.slice(1)],
                snapshot,
                cut: 1,
                summarizer: "t"
              })
              yield* log.append([user("more")])
              return JSON.stringify((yield* log.snapshot).view)
            }))
          const tailRead = readSession(sessionId, { tail: true }).pipe(Effect.provide(backend.store()))
          const clean = yield* tailRead
          assert.strictEqual(clean.verifiedFrom, 2)
          const { units, write } = yield* backend.raw(sessionId)
          // the bytes of the tail: lines 2 to 5 (in the file: everything after the first newline)
          const firstLineBytes = backend.name === "jsonl" ? units[0]!.indexOf(0x0a) + 1 : 0
          let failed = 0
          let torn = 0
          for (let u = backend.name === "jsonl" ? 0 : 1; u < units.length; u++) {
            // every other byte, the other half under the other runtime: a CI run (Node and Deno) flips every byte
            for (
              let j = (backend.name === "jsonl" ? firstLineBytes : 0) + RUNTIME_PARITY;
              j < units[u]!.length;
              j += 2
            ) {
              const flipped = Uint8Array.from(units[u]!)
              flipped[j] = flipped[j]! ^ 0x01
              yield* write(u, flipped)
              const tail = yield* Effect.exit(tailRead)
              const full = yield* Effect.exit(read(backend, sessionId))
              if (Exit.isFailure(tail)) {
                assert.isTrue(Exit.isFailure(full))
                assert.strictEqual(failure(tail).reason, failure(full).reason)
                assert.strictEqual(failure(tail).line, failure(full).line)
                failed++
              } else {
                // only the last newline of a file: a torn tail, reported by both
                assert.isTrue(Exit.isSuccess(full))
                assert.deepStrictEqual(tail.value.issues.map((i) => i._tag), ["TornTail"])
                assert.notStrictEqual(JSON.stringify(tail.value.view), original)
                torn++
              }
            }
            yield* write(u, units[u]!)
          }
          assert.isAbove(failed, 100)
          assert.isAtMost(torn, 1)
          assert.strictEqual(JSON.stringify((yield* tailRead).view), original)
        }),
      180_000
    )

    it.live(
      "integrity: every byte of a small stored session flipped is a typed error or a reported repair",
      () =>
        Effect.gen(function* () {
          const sessionId = freshId("flip")
          const original = yield* withLog(backend, sessionId, (log) =>
            Effect.gen(function* () {
              yield* log.append([user("hi"), {
                role: "assistant",
                content: [{ type: "tool_use", id: "t1", name: "bash", input: {} }]
              }])
              yield* log.append([{
                role: "user",
                content: [{ type: "tool_result", tool_use_id: "t1", content: "out" }]
              }])
              yield* log.recordEviction([{
                toolUseId: "t1",
                block: { type: "tool_result", tool_use_id: "t1", content: "[gone]" }
              }])
              const snapshot = yield* log.snapshot
              yield* log.recordCompaction({
                view: [user("sum"), ...snapshot.view.slice(1)],
                snapshot,
                cut: 1,
                summarizer: "t"
              })
              return JSON.stringify((yield* log.snapshot).view)
            }))
          const { units, write } = yield* backend.raw(sessionId)
          let errors = 0
          let reported = 0
          let same = 0
          let flips = 0
          for (let u = 0; u < units.length; u++) {
            // every other byte, the other half under the other runtime: a CI run (Node and Deno) flips every byte
            for (let j = RUNTIME_PARITY; j < units[u]!.length; j += 2) {
              const flipped = Uint8Array.from(units[u]!)
              flipped[j] = flipped[j]! ^ 0x01
              yield* write(u, flipped)
              flips++
              const exit = yield* Effect.exit(read(backend, sessionId))
              if (Exit.isFailure(exit)) {
                const error = failure(exit)
                assert.include(["Corrupt", "HashMismatch", "FutureVersion"], error.reason, error.message)
                assert.isDefined(error.line, `the error names the line: ${error.message}`)
                errors++
              } else if (exit.value.issues.length > 0) {
                reported++
              } else {
                assert.strictEqual(JSON.stringify(exit.value.view), original, `unit ${u}, byte ${j}: a different view`)
                same++
              }
            }
            yield* write(u, units[u]!)
          }
          assert.strictEqual(JSON.stringify((yield* read(backend, sessionId)).view), original)
          assert.isAbove(errors, 0)
          assert.strictEqual(errors + reported + same, flips)
          assert.isAtMost(same, 0, "no flip goes unnoticed")
          assert.isAtMost(reported, 1, "only a flipped last newline is a reported torn tail")
        }),
      180_000
    )

    it.live(
      backend.multiWriter
        ? "two compactions of one snapshot: exactly one lands, the other is a typed Conflict"
        : "a second writer of one session is refused with Locked",
      () =>
        Effect.gen(function* () {
          const sessionId = freshId("two")
          yield* withLog(backend, sessionId, (log) => log.append([user("a"), user("b"), user("c")]))
          const second = withLog(backend, sessionId, (log) => log.snapshot)
          if (!backend.multiWriter) {
            const locked = yield* withLog(backend, sessionId, () => Effect.exit(second))
            assert.strictEqual(failure(locked).reason, "Locked")
            return
          }
          const outcome = yield* withLog(backend, sessionId, (a) =>
            withLog(backend, sessionId, (b) =>
              Effect.gen(function* () {
                const snapA = yield* a.snapshot
                const snapB = yield* b.snapshot
                yield* a.recordCompaction({
                  view: [user("A"), ...snapA.view.slice(2)],
                  snapshot: snapA,
                  cut: 2,
                  summarizer: "a"
                })
                const lost = yield* Effect.exit(
                  b.recordCompaction({
                    view: [user("B"), ...snapB.view.slice(1)],
                    snapshot: snapB,
                    cut: 1,
                    summarizer: "b"
                  })
                )
                return { lost, snapB, after: yield* b.snapshot }
              })))
          assert.strictEqual(failure(outcome.lost).reason, "Conflict")
          assert.deepStrictEqual(outcome.snapB.entryIds.length, 3, "the caller's snapshot is untouched")
          const loaded = yield* read(backend, sessionId)
          assert.strictEqual(
            loaded.entries.filter((e) =>
              e.type === "compaction"
            ).length,
            1
          )
          assert.strictEqual(JSON.stringify(loaded.view), JSON.stringify([user("A"), user("c")]))
          assert.strictEqual(JSON.stringify(outcome.after.view), JSON.stringify(loaded.view), "b caught up")
        })
    )

    if (backend.multiWriter) {
      it.live(
        "many writers: concurrent appends all land once, each writer's order kept; catch-up is incremental",
        () =>
          Effect.gen(function* () {
            const sessionId = freshId("many")
            yield* withLog(backend, sessionId, () => Effect.void)
            const writer = (w: number) =>
              withLog(backend, sessionId, (log) =>
                Effect.forEach(
                  Array.from({ length: 15 }, (_, k) => k),
                  (k) => log.append([user(`w${w} ${k}`)]),
                  {
                    discard: true
                  }
                ))
            yield* Effect.forEach([0, 1, 2, 3], writer, { concurrency: "unbounded", discard: true })
            const loaded = yield* read(backend, sessionId)
            const texts = loaded.view.map((m) => m.content as string)
            assert.strictEqual(texts.length, 60)
            assert.strictEqual(new Set(texts).size, 60)
            for (let w = 0; w < 4; w++) {
              const mine = texts.filter((t) => t.startsWith(`w${w} `)).map((t) => Number(t.split(" ")[1]))
              assert.deepStrictEqual(mine, Array.from({ length: 15 }, (_, k) => k))
            }
            // a worker that keeps its state reads only what others wrote since
            const reads: Array<number> = []
            const spy = Layer.effect(
              SessionStore,
              Effect.map(Effect.service(SessionStore), (s) =>
                SessionStore.of({
                  ...s,
                  read: (id, after) => Effect.tap(s.read(id, after), () => Effect.sync(() => reads.push(after)))
                }))
            ).pipe(Layer.provide(backend.store()))
            yield* Effect.flatMap(Effect.service(SessionLog), (log) =>
              Effect.gen(function* () {
                yield* withLog(backend, sessionId, (other) => other.append([user("late")]))
                const caught = yield* log.catchUp
                assert.strictEqual(caught.view.at(-1)!.content, "late")
              })).pipe(
                Effect.provide(SessionLog.layer({ sessionId, tail: false }).pipe(Layer.provide(spy), Layer.fresh))
              )
            assert.deepStrictEqual(reads, [0, 60], "opened with a full read, caught up after seq 60")
          }),
        180_000
      )
    }
  })
}
