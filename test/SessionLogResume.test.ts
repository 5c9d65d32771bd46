/**
 * Resume without a second read: `SessionLog.loaded` is the live fold (equal to a fresh `load`), a closed session's
 * fold is reused by the next open through the same `ClosedFolds` only while the stored lines are the ones it folded,
 * and step
 * metadata (v3 `meta` of a message, compaction or eviction entry) is stored under the line's checksum, returned in `entries` and never in the
 * view; v2 logs still read.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer } from "effect"
import type { Message } from "../src/Message.ts"
import { CURRENT_VERSION, encodeEntry, type Entry, type Loaded } from "../src/SessionEntry.ts"
import { ClosedFolds, SessionLog, type SessionLogError, type SessionLogShape } from "../src/SessionLog.ts"
import { type MemorySessions as MemoryStore, SessionStore } from "../src/SessionStore.ts"
import { isToolResult } from "../src/internal/blocks.ts"

const user = (text: string): Message => ({ role: "user", content: text })
const reply = (text: string): Message => ({ role: "assistant", content: text })

/** A store layer and the closed folds kept for it. */
interface Backend {
  readonly store: Layer.Layer<SessionStore>
  readonly closedFolds: ClosedFolds | undefined
}

/** The memory store over `sessions`, keeping closed folds (or not). */
const backend = (sessions: MemoryStore, keepFolds = true): Backend => ({
  store: SessionStore.layerMemory(sessions),
  closedFolds: keepFolds ? new ClosedFolds() : undefined
})

/** A log layer over one store, opened afresh at every use (a resume). */
const logOver = (over: Backend, sessionId = "s") =>
  Layer.fresh(
    SessionLog.layer({
      sessionId,
      sync: "never",
      ...(over.closedFolds === undefined ? {} : { closedFolds: over.closedFolds })
    }).pipe(Layer.provide(over.store))
  )

const withLog = <A, E>(
  layer: Layer.Layer<SessionLog, SessionLogError>,
  body: (log: SessionLogShape) => Effect.Effect<A, E>
) => Effect.flatMap(Effect.service(SessionLog), body).pipe(Effect.provide(layer, { local: true }))

const failure = <A>(exit: Exit.Exit<A, unknown>): SessionLogError => {
  assert.isTrue(Exit.isFailure(exit), "expected a failure")
  const error = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail") : undefined
  assert.isDefined(error)
  return (error as { readonly error: SessionLogError }).error
}

/** Why `load()` of the sessions in `sessions` fails. */
const loadFailure = (sessions: MemoryStore) =>
  Effect.map(Effect.exit(withLog(logOver(backend(sessions)), (l) => l.load())), failure)

/** The parts of a loaded session a resume reads. */
const comparable = (l: Loaded) => ({
  view: JSON.stringify(l.view),
  entryIds: l.entryIds,
  head: l.head,
  seq: l.seq,
  entries: JSON.stringify(l.entries)
})

/** A small random session: appends (some with metadata), evictions and compactions, on `log`. */
const randomSteps = (log: SessionLogShape, seed: number, steps: number) =>
  Effect.gen(function* () {
    let x = seed
    const next = () => (x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31
    for (let i = 0; i < steps; i++) {
      const r = next()
      if (r < 0.6) {
        const id = `t${seed}_${i}`
        yield* log.append([{ role: "assistant", content: [{ type: "tool_use", id, name: "read", input: {} }] }, {
          role: "user",
          content: [{ type: "tool_result", tool_use_id: id, content: `output ${i} `.repeat(20) }]
        }], r < 0.3 ? { meta: [{ step: { i, seed } }] } : {})
      } else if (r < 0.8) {
        const { view } = yield* log.snapshot
        const ids = view.flatMap((m) =>
          typeof m.content === "string" ? [] : m.content.flatMap((b) => isToolResult(b) ? [b.tool_use_id] : [])
        )
        const id = ids[Math.floor(next() * ids.length)]
        if (id !== undefined) {
          yield* log.recordEviction([{
            toolUseId: id,
            block: { type: "tool_result", tool_use_id: id, content: `[offloaded ${id}]` }
          }])
        }
      } else {
        const snapshot = yield* log.snapshot
        yield* log.recordCompaction({
          view: [user(`summary ${i}`), ...snapshot.view.slice(Math.floor(next() * snapshot.view.length / 2) * 2)],
          snapshot,
          cut: Math.floor(next() * snapshot.view.length / 2) * 2,
          summarizer: "test"
        })
      }
    }
  })

describe("SessionLog: resume from the live fold", () => {
  it.effect("loaded equals a fresh load after every kind of entry, on a resumed and a fresh store", () =>
    Effect.gen(function* () {
      for (let seed = 1; seed <= 40; seed++) {
        const sessions: MemoryStore = new Map()
        const store = backend(sessions)
        for (let round = 0; round < 4; round++) {
          yield* withLog(logOver(store), (log) =>
            Effect.gen(function* () {
              const opened = yield* log.loaded
              assert.deepStrictEqual(comparable(opened), comparable(yield* log.load()), `seed ${seed} open ${round}`)
              yield* randomSteps(log, seed * 31 + round, 12)
              assert.deepStrictEqual(comparable(yield* log.loaded), comparable(yield* log.load()), `seed ${seed}`)
            }))
        }
        // a store object that never saw the session folds it from scratch to the same result
        const fresh = yield* withLog(logOver(backend(sessions)), (log) => log.loaded)
        const resumed = yield* withLog(logOver(store), (log) => log.loaded)
        assert.deepStrictEqual(comparable(resumed), comparable(fresh))
      }
    }))

  it.effect("a reused fold catches up with entries another worker wrote after it closed", () =>
    Effect.gen(function* () {
      const sessions: MemoryStore = new Map()
      const store = backend(sessions)
      yield* withLog(logOver(store), (log) => log.append([user("one"), reply("two")]))
      // another worker, on another store object over the same sessions
      yield* withLog(logOver(backend(sessions)), (log) => log.append([user("three")]))
      const loaded = yield* withLog(logOver(store), (log) => log.loaded)
      assert.deepStrictEqual(loaded.view, [user("one"), reply("two"), user("three")])
      assert.strictEqual(loaded.seq, 3)
    }))

  it.effect("a fold is reused only through the ClosedFolds the logs were given, and resumes equal to a fresh fold", () =>
    Effect.gen(function* () {
      const sessions: MemoryStore = new Map()
      const kept = backend(sessions)
      const none = { store: kept.store, closedFolds: undefined }
      const first = yield* withLog(
        logOver(kept),
        (log) => Effect.andThen(log.append([user("one"), reply("two")]), log.loaded)
      )
      assert.isDefined(kept.closedFolds!.get("s"))
      // the reused fold hands back the entries it decoded; a fresh fold decodes new ones
      const reused = yield* withLog(logOver(kept), (log) => log.loaded)
      const fresh = yield* withLog(logOver(none), (log) => log.loaded)
      assert.strictEqual(reused.entries[0], first.entries[0])
      assert.notStrictEqual(fresh.entries[0], first.entries[0])
      assert.deepStrictEqual(comparable(reused), comparable(fresh))
      // another ClosedFolds knows nothing of this session
      assert.isUndefined(new ClosedFolds().get("s"))
    }))

  it.effect("a changed byte of a line the closed fold had read fails the next open, naming the line", () =>
    Effect.gen(function* () {
      const sessions: MemoryStore = new Map()
      const store = backend(sessions)
      yield* withLog(logOver(store), (log) => log.append([user("alpha"), reply("beta"), user("gamma")]))
      const entries = sessions.get("s")!
      const second = entries[1]!
      entries[1] = { ...second, line: second.line.replace("beta", "betA") }
      const error = failure(yield* Effect.exit(withLog(logOver(store), (log) => log.loaded)))
      assert.strictEqual(error.reason, "Corrupt")
      assert.strictEqual(error.line, 2)
      // a log cut back below what the fold had read also folds from scratch
      entries[1] = second
      entries.pop()
      const cut = yield* withLog(logOver(store), (log) => log.loaded)
      assert.deepStrictEqual(cut.view, [user("alpha"), reply("beta")])
    }))
})

describe("SessionLog: step metadata", () => {
  it.effect("is stored in its entry (v3, under the checksum), returned in entries, never in the view", () =>
    Effect.gen(function* () {
      const sessions: MemoryStore = new Map()
      const meta = { conversation: { requestEpoch: 2, usage: { input_tokens: 10, output_tokens: 3 } } }
      const loaded = yield* withLog(
        logOver(backend(sessions)),
        (log) => Effect.andThen(log.append([user("q"), reply("a")], { meta: [undefined, meta] }), log.load())
      )
      assert.deepStrictEqual(loaded.view, [user("q"), reply("a")])
      const [first, second] = loaded.entries as ReadonlyArray<Entry & { readonly meta?: unknown }>
      assert.isUndefined(first!.meta)
      assert.deepStrictEqual(second!.meta, meta)
      const lines = sessions.get("s")!.map((e) => e.line)
      assert.isTrue(lines.every((l) => l.startsWith(`{"v":${CURRENT_VERSION},`)))
      assert.notInclude(lines[0]!, "meta")
      // a changed byte of the metadata is a corrupt line, never different metadata
      const stored = sessions.get("s")!
      stored[1] = { ...stored[1]!, line: stored[1]!.line.replace('"requestEpoch":2', '"requestEpoch":3') }
      const error = yield* loadFailure(sessions)
      assert.strictEqual(error.reason, "Corrupt")
      assert.strictEqual(error.line, 2)
    }))

  it.effect("must be one JSON object per message at most", () =>
    Effect.gen(function* () {
      const store = backend(new Map())
      const bad: ReadonlyArray<ReadonlyArray<unknown>> = [
        [{ a: 1 }, { b: 2 }],
        [[1, 2]],
        [{ n: Number.NaN }],
        [{ u: undefined }],
        ["text"]
      ]
      for (const meta of bad) {
        const error = failure(
          yield* Effect.exit(withLog(logOver(store), (log) => log.append([user("x")], { meta: meta as never })))
        )
        assert.strictEqual(error.reason, "InvalidInput", JSON.stringify(meta))
      }
      const empty = yield* withLog(logOver(store), (log) => log.load())
      assert.deepStrictEqual(empty.entries, [])
    }))

  it.effect("v2 logs still read; a v2 line carrying meta is corrupt", () =>
    Effect.gen(function* () {
      const v2 = (id: string, parentId: string | null, message: Message, extra: object = {}) =>
        ({ v: 2, id, parentId, timestamp: 1, type: "message", message, ...extra }) as unknown as Entry
      const sessions: MemoryStore = new Map([["s", [
        { seq: 1, entryId: "a", line: encodeEntry(v2("a", null, user("old"))) },
        { seq: 2, entryId: "b", line: encodeEntry(v2("b", "a", reply("log"))) }
      ]]])
      const loaded = yield* withLog(logOver(backend(sessions)), (log) => log.loaded)
      assert.deepStrictEqual(loaded.view, [user("old"), reply("log")])
      sessions.get("s")!.push({ seq: 3, entryId: "c", line: encodeEntry(v2("c", "b", user("x"), { meta: { k: 1 } })) })
      const error = yield* loadFailure(sessions)
      assert.strictEqual(error.reason, "Corrupt")
      assert.strictEqual(error.line, 3)
      assert.include(error.message, "cannot carry meta")
    }))

  it.effect("a compaction's meta is stored in its boundary, unknown keys and all; a bad one writes nothing", () =>
    Effect.gen(function* () {
      const sessions: MemoryStore = new Map()
      const meta = { conversation: { checkpoint: { v: 1, epoch: 1 } }, other: { future: [1, "two", null] } }
      const compactWith = (m: unknown) => (log: SessionLogShape) =>
        Effect.flatMap(log.snapshot, (snapshot) =>
          log.recordCompaction({
            snapshot,
            cut: 2,
            view: [user("[summary]"), ...snapshot.view.slice(2)],
            summarizer: "test",
            meta: m as never
          }))
      yield* withLog(logOver(backend(sessions)), (log) => log.append([user("q"), reply("a"), user("next")]))
      for (const bad of [[1], { n: Number.POSITIVE_INFINITY }, { u: undefined }, "text"]) {
        const error = failure(yield* Effect.exit(withLog(logOver(backend(sessions)), compactWith(bad))))
        assert.strictEqual(error.reason, "InvalidInput", JSON.stringify(bad))
      }
      assert.strictEqual(sessions.get("s")!.length, 3, "a refused boundary writes nothing")
      const entry = yield* withLog(logOver(backend(sessions)), compactWith(meta))
      assert.deepStrictEqual(entry.meta, meta)
      const loaded = yield* withLog(logOver(backend(sessions)), (log) => log.load())
      assert.deepStrictEqual(loaded.view, [user("[summary]"), user("next")])
      const boundary = (loaded.entries as ReadonlyArray<Entry>).at(-1)!
      assert.strictEqual(boundary.type, "compaction")
      assert.deepStrictEqual((boundary as Entry & { readonly meta?: unknown }).meta, meta)
      // under the checksum: a changed byte of it is a corrupt line
      const stored = sessions.get("s")!
      stored[3] = { ...stored[3]!, line: stored[3]!.line.replace('"epoch":1', '"epoch":2') }
      const error = yield* loadFailure(sessions)
      assert.strictEqual(error.reason, "Corrupt")
      assert.strictEqual(error.line, 4)
    }))

  it.effect("an eviction's meta is stored under its checksum; one with no evictions changes nothing in the view", () =>
    Effect.gen(function* () {
      const sessions: MemoryStore = new Map()
      const meta = { conversation: { requestEpoch: 0, stopReason: "end_turn" }, other: { future: [1, null] } }
      yield* withLog(logOver(backend(sessions)), (log) => log.append([user("q"), reply("a"), user("next")]))
      for (const bad of [[1], { n: Number.NaN }, { u: undefined }, "text"]) {
        const error = failure(
          yield* Effect.exit(
            withLog(logOver(backend(sessions)), (log) => log.recordEviction([], { meta: bad as never }))
          )
        )
        assert.strictEqual(error.reason, "InvalidInput", JSON.stringify(bad))
      }
      assert.strictEqual(sessions.get("s")!.length, 3, "a refused eviction writes nothing")
      const entry = yield* withLog(logOver(backend(sessions)), (log) => log.recordEviction([], { meta }))
      assert.deepStrictEqual(entry.meta, meta)
      const loaded = yield* withLog(logOver(backend(sessions)), (log) => log.load())
      assert.deepStrictEqual(loaded.view, [user("q"), reply("a"), user("next")])
      assert.deepStrictEqual((loaded.entries.at(-1) as Entry & { readonly meta?: unknown }).meta, meta)
      // under the checksum: a changed byte of it is a corrupt line
      const stored = sessions.get("s")!
      stored[3] = { ...stored[3]!, line: stored[3]!.line.replace('"end_turn"', '"max_tokens"') }
      const error = yield* loadFailure(sessions)
      assert.strictEqual(error.reason, "Corrupt")
      assert.strictEqual(error.line, 4)
    }))

  it.effect("a v2 eviction line carrying meta is corrupt", () =>
    Effect.gen(function* () {
      const sessions: MemoryStore = new Map()
      yield* withLog(logOver(backend(sessions)), (log) =>
        Effect.andThen(log.append([user("q"), reply("a")]), log.recordEviction([])))
      const stored = sessions.get("s")!
      const eviction = JSON.parse(stored[2]!.line.replace(/,"sum":"[0-9a-f]+"\}$/, "}")) as Record<string, unknown>
      stored[2] = { ...stored[2]!, line: encodeEntry({ ...eviction, v: 2, meta: { k: 1 } } as unknown as Entry) }
      const error = yield* loadFailure(sessions)
      assert.strictEqual(error.reason, "Corrupt")
      assert.strictEqual(error.line, 3)
      assert.include(error.message, "cannot carry meta")
      // without meta, the same v2 eviction reads
      stored[2] = { ...stored[2]!, line: encodeEntry({ ...eviction, v: 2 } as unknown as Entry) }
      const loaded = yield* withLog(logOver(backend(sessions)), (l) =>
        l.load())
      assert.deepStrictEqual(loaded.view, [user("q"), reply("a")])
    }))

  it.effect("a v2 compaction line carrying meta is corrupt", () =>
    Effect.gen(function* () {
      const sessions: MemoryStore = new Map()
      yield* withLog(logOver(backend(sessions)), (log) =>
        Effect.andThen(
          log.append([user("q"), reply("a")]),
          Effect.flatMap(
            log.snapshot,
            (snapshot) => log.recordCompaction({ snapshot, cut: 2, view: [user("[summary]")], summarizer: "test" })
          )
        ))
      const stored = sessions.get("s")!
      const boundary = JSON.parse(stored[2]!.line.replace(/,"sum":"[0-9a-f]+"\}$/, "}")) as Record<string, unknown>
      stored[2] = { ...stored[2]!, line: encodeEntry({ ...boundary, v: 2, meta: { k: 1 } } as unknown as Entry) }
      const error = yield* loadFailure(sessions)
      assert.strictEqual(error.reason, "Corrupt")
      assert.strictEqual(error.line, 3)
      assert.include(error.message, "cannot carry meta")
      // without meta, the same v2 boundary reads
      stored[2] = { ...stored[2]!, line: encodeEntry({ ...boundary, v: 2 } as unknown as Entry) }
      const loaded = yield* withLog(logOver(backend(sessions)), (l) => l.load())
      assert.deepStrictEqual(loaded.view, [user("[summary]")])
    }))
})
