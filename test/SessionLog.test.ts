import { NodeFileSystem, NodePath } from "@effect/platform-node"
import { TestClock } from "effect/testing"
import { assert, describe, it } from "@effect/vitest"
import {
  Arbitrary,
  Deferred,
  Effect,
  Exit,
  Fiber,
  FileSystem,
  Layer,
  Path,
  PlatformError,
  Result,
  Schema
} from "effect"
import { spawnSync } from "node:child_process"
import process from "node:process"
import type { Message } from "../src/Message.ts"
import { CURRENT_VERSION, encodeEntry, type Entry } from "../src/SessionEntry.ts"
import { SessionLog, type SessionLogError, type SessionLogShape } from "../src/SessionLog.ts"
import { type MemorySessions as MemoryStore, validateSessionId } from "../src/SessionStore.ts"
import { layerSessionLog as layerJsonl, listSessions, readJsonl } from "../src/SessionStoreJsonl.ts"
import { conversationArbitrary } from "./fixtures/Conversation.ts"
import { isDeno, kill, spawnWriter, waitFor } from "./fixtures/childWriter.ts"
import {
  applyStep,
  crashScript,
  interleave,
  modelSteps,
  performStep,
  prefixProblems
} from "./fixtures/SessionScript.ts"
import { scratch } from "./fixtures/Scratch.ts"
import { canonicalJson, rebuildView, viewHash } from "../src/internal/sessionEntry.ts"
import { SessionLogError as SessionLogErrorClass, withFields } from "../src/internal/sessionLogError.ts"

const platform = Layer.mergeAll(NodeFileSystem.layer, NodePath.layer)
const json = (view: ReadonlyArray<Message>) => JSON.stringify(view)

const user = (text: string): Message => ({ role: "user", content: text })
const call = (id: string): Message => ({
  role: "assistant",
  content: [{ type: "tool_use", id, name: "bash", input: {} }]
})
const result = (id: string, content: string): Message => ({
  role: "user",
  content: [{ type: "tool_result", tool_use_id: id, content }]
})

/** Opens a session on the real filesystem for the duration of `body`. */
const withJsonl = <A, E>(
  directory: string,
  sessionId: string,
  body: (log: SessionLogShape) => Effect.Effect<A, E>,
  options: { readonly tail?: boolean } = {}
): Effect.Effect<A, E | SessionLogError> =>
  Effect.flatMap(Effect.service(SessionLog), body).pipe(
    Effect.provide(layerJsonl({ directory, sessionId, ...options }).pipe(Layer.provide(platform), Layer.fresh))
  )

const withMemory = <A, E>(
  store: MemoryStore,
  body: (log: SessionLogShape) => Effect.Effect<A, E>
): Effect.Effect<A, E | SessionLogError> =>
  Effect.flatMap(Effect.service(SessionLog), body).pipe(
    Effect.provide(SessionLog.layerMemory({ store }), { local: true })
  )

const tempDir = Effect.flatMap(
  Effect.service(FileSystem.FileSystem),
  (fs) => fs.makeTempDirectoryScoped({ directory: scratch })
).pipe(
  Effect.provide(platform)
)

const failure = <A>(exit: Exit.Exit<A, SessionLogError>): SessionLogError => {
  assert.isTrue(Exit.isFailure(exit), "expected a failure")
  const error = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail") : undefined
  assert.isDefined(error)
  return (error as { readonly error: SessionLogError }).error
}

const readText = (file: string) =>
  Effect.flatMap(Effect.service(FileSystem.FileSystem), (fs) => fs.readFileString(file)).pipe(Effect.provide(platform))
const writeText = (file: string, text: string) =>
  Effect.flatMap(Effect.service(FileSystem.FileSystem), (fs) => fs.writeFileString(file, text)).pipe(
    Effect.provide(platform)
  )
const read = (directory: string, sessionId: string, repair = false) =>
  readJsonl({ directory, sessionId, repair }).pipe(Effect.provide(platform))

// ============================================================================
// Child processes (crash and lock tests), under the runtime running this test
// ============================================================================

describe("SessionLog", () => {
  it("runs under the runtime the suite expects", () => {
    if (process.env["EXPECT_DENO"] === "1") assert.isTrue(isDeno)
  })

  // ==========================================================================
  // The pure view
  // ==========================================================================

  describe("rebuildView", () => {
    const header = (id: string, parentId: string | null) => ({ v: 1 as const, id, parentId, timestamp: 0 })
    const evicted = { type: "tool_result" as const, tool_use_id: "t1", content: "[evicted t1]" }

    it("is the latest summary plus the messages from the first kept entry, with earlier evictions applied", () => {
      const messages = [user("a"), call("t1"), result("t1", "big output"), user("b"), call("t2"), result("t2", "x")]
      const entries: Array<Entry> = messages.map((message, i) => ({
        ...header(`m${i}`, i === 0 ? null : `m${i - 1}`),
        type: "message",
        message
      }))
      entries.push({ ...header("e1", "m5"), type: "eviction", evictions: [{ toolUseId: "t1", block: evicted }] })
      const summary = user("summary of a")
      const expected = [
        summary,
        call("t1"),
        { role: "user", content: [evicted] },
        user("b"),
        call("t2"),
        result("t2", "x")
      ]
      entries.push({
        ...header("c1", "e1"),
        type: "compaction",
        summary,
        firstKeptEntryId: "m1",
        tokensBefore: 100,
        tokensAfter: 50,
        summarizer: "test",
        viewHash: viewHash(expected as Array<Message>)
      })
      const rebuilt = rebuildView(entries)
      assert.isTrue(Result.isSuccess(rebuilt))
      if (Result.isSuccess(rebuilt)) {
        assert.strictEqual(json(rebuilt.success.view), json(expected as Array<Message>))
        assert.deepStrictEqual(rebuilt.success.entryIds, ["c1", "m1", "m2", "m3", "m4", "m5"])
        assert.strictEqual(rebuilt.success.view[4], messages[4], "unchanged messages are shared, not copied")
      }
      const tampered = entries.map((e) => e.type === "compaction" ? { ...e, viewHash: "0".repeat(64) } : e)
      const failed = rebuildView(tampered)
      assert.isTrue(
        Result.isFailure(failed) && failed.failure.reason === "HashMismatch" && failed.failure.entryId === "c1"
      )
    })

    it("a compaction with kept messages replaces the snapshot up to kept.through; later messages follow", () => {
      const messages = [user("a"), call("t1"), result("t1", "x"), user("b"), call("t2"), user("late")]
      const entries: Array<Entry> = messages.map((message, i) => ({
        ...header(`m${i}`, i === 0 ? null : `m${i - 1}`),
        type: "message",
        message
      }))
      const summary = user("summary of a")
      const kept = [user("b"), call("t2"), result("t2", "aborted")]
      const expected = [summary, ...kept, user("late")]
      const compaction = {
        ...header("c1", "m5"),
        type: "compaction" as const,
        summary,
        firstKeptEntryId: "m3",
        tokensBefore: 100,
        tokensAfter: 50,
        summarizer: "test",
        kept: { through: "m4", messages: kept },
        viewHash: viewHash(expected)
      }
      const evict = { type: "tool_result" as const, tool_use_id: "t2", content: "[evicted t2]" }
      const eviction: Entry = {
        ...header("e1", "c1"),
        type: "eviction",
        evictions: [{ toolUseId: "t2", block: evict }]
      }
      const rebuilt = rebuildView([...entries, compaction, eviction])
      assert.isTrue(Result.isSuccess(rebuilt))
      if (Result.isSuccess(rebuilt)) {
        const evicted = [summary, kept[0]!, kept[1]!, { role: "user", content: [evict] }, user("late")]
        assert.strictEqual(json(rebuilt.success.view), json(evicted as Array<Message>))
        assert.deepStrictEqual(rebuilt.success.entryIds, ["c1", "c1#1", "c1#2", "c1#3", "m5"])
      }
      // a later compaction may keep from inside the kept part
      const second = {
        ...header("c2", "e1"),
        type: "compaction" as const,
        summary: user("summary of b"),
        firstKeptEntryId: "c1#2",
        tokensBefore: 50,
        tokensAfter: 40,
        summarizer: "test",
        viewHash: viewHash([user("summary of b"), kept[1]!, { role: "user", content: [evict] }, user("late")])
      }
      const again = rebuildView([...entries, compaction, eviction, second])
      assert.isTrue(Result.isSuccess(again))
      if (Result.isSuccess(again)) assert.deepStrictEqual(again.success.entryIds, ["c2", "c1#2", "c1#3", "m5"])
      const third = {
        ...header("c3", "e1"),
        type: "compaction" as const,
        summary: user("summary of all"),
        firstKeptEntryId: null,
        tokensBefore: 50,
        tokensAfter: 40,
        summarizer: "test",
        kept: { through: "c1#3", messages: [user("b, repaired")] },
        viewHash: viewHash([user("summary of all"), user("b, repaired"), user("late")])
      }
      const through = rebuildView([...entries, compaction, eviction, third])
      assert.isTrue(Result.isSuccess(through))
      if (Result.isSuccess(through)) assert.deepStrictEqual(through.success.entryIds, ["c3", "c3#1", "m5"])
      const unknown = rebuildView([...entries, { ...compaction, kept: { through: "nope", messages: kept } }])
      assert.isTrue(
        Result.isFailure(unknown) && unknown.failure.reason === "Corrupt" && unknown.failure.entryId === "c1"
      )
      const ignored = rebuildView([...entries, { ...compaction, kept: undefined }] as Array<Entry>)
      assert.isTrue(Result.isFailure(ignored) && ignored.failure.reason === "HashMismatch", "kept is not optional here")
    })

    it("hashes the canonical JSON (sorted keys), so key order does not change the hash", () => {
      assert.strictEqual(canonicalJson({ b: 1, a: [1, { d: undefined, c: "x" }] }), `{"a":[1,{"c":"x"}],"b":1}`)
      const a: Message = { role: "user", content: [{ type: "text", text: "x" }] }
      const b = { content: [{ text: "x", type: "text" }], role: "user" } as Message
      assert.strictEqual(viewHash([a]), viewHash([b]))
      assert.match(viewHash([a]), /^[0-9a-f]{64}$/)
    })
  })

  // ==========================================================================
  // Property tests: live view == model == load after a restart, at every step
  // ==========================================================================

  const Controls = Schema.Array(
    Schema.Struct({
      evict: Schema.Boolean,
      compact: Schema.Boolean,
      pick: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 1000 }))
    })
  ).check(Schema.isMinLength(1), Schema.isMaxLength(8))

  const scriptArbitrary = Arbitrary.all([conversationArbitrary(), Arbitrary.schema(Controls)]).pipe(
    Arbitrary.map(([messages, controls]) => modelSteps(interleave(messages, (i) => controls[i % controls.length]!)))
  )

  const checkView = (label: string, actual: ReadonlyArray<Message>, expected: ReadonlyArray<Message>) =>
    assert.strictEqual(json(actual), json(expected), label)

  it.effect.prop(
    "memory: after every step, the live view, the reopened view and load() all equal the model",
    [scriptArbitrary],
    ([{ steps, views }]) =>
      Effect.gen(function* () {
        const store = new Map() as MemoryStore
        yield* withMemory(store, (log) =>
          Effect.gen(function* () {
            for (let i = 0; i < steps.length; i++) {
              yield* performStep(log, steps[i]!)
              checkView(`live after step ${i + 1}`, (yield* log.snapshot).view, views[i + 1]!)
              assert.deepStrictEqual(prefixProblems(views[i + 1]!), [])
            }
          }))
        // restart at every step: replay the stored text cut after each entry
        const stored = store.get("memory") ?? []
        assert.strictEqual(stored.length, steps.length, "one entry per step")
        for (let k = 0; k <= steps.length; k++) {
          const prefix: MemoryStore = new Map([["memory", stored.slice(0, k)]])
          yield* withMemory(prefix, (log) =>
            Effect.gen(function* () {
              checkView(`reopened after step ${k}`, (yield* log.snapshot).view, views[k]!)
              const loaded = yield* log.load()
              checkView(`load after step ${k}`, loaded.view, views[k]!)
              assert.deepStrictEqual(loaded.issues, [])
            }))
        }
      }),
    { timeout: 180_000, arbitrary: { runs: 500 } } // per runtime: fast-check draws new cases in each, 1,000 per CI run
  )

  it.live("real filesystem: restart after every step of seeded scripts, views equal the model", () =>
    Effect.gen(function* () {
      const directory = yield* tempDir
      for (let seed = 0; seed < 3; seed++) {
        const { steps, views } = crashScript(100 + seed)
        const n = Math.min(steps.length, 60)
        for (let i = 0; i < n; i++) {
          yield* withJsonl(directory, `s${seed}`, (log) =>
            Effect.gen(function* () {
              checkView(`reopened before step ${i + 1}`, (yield* log.snapshot).view, views[i]!)
              yield* performStep(log, steps[i]!)
              checkView(`live after step ${i + 1}`, (yield* log.snapshot).view, views[i + 1]!)
            }))
          const loaded = yield* read(directory, `s${seed}`)
          checkView(`load after step ${i + 1}`, loaded.view, views[i + 1]!)
        }
      }
    }))

  // ==========================================================================
  // Crash tests
  // ==========================================================================

  it.live(
    "SIGKILL while appending and compacting: the view is a valid prefix of the history (deferred writes too)",
    () =>
      Effect.gen(function* () {
        const directory = yield* tempDir
        for (let round = 0; round < 3; round++) {
          const seed = 7 + round
          const sessionId = `crash${round}`
          // the last round defers its appends' writes: what a kill loses is the end, never a line in the middle
          const sync = round === 2 ? ["deferred"] : []
          const child = spawnWriter(["loop", directory, sessionId, String(seed), ...sync])
          // every compaction reported was acknowledged durable, so it survives
          const compactions = round === 2 ? 4 : 2 + round * 4
          let seen = 0
          yield* waitFor(child, (line) => line.startsWith("compacted") && ++seen >= compactions)
          yield* kill(child)
          const { views } = crashScript(seed)
          // read-only load: nothing before the torn line (if any) is lost
          const loaded = yield* read(directory, sessionId)
          assert.isAtLeast(loaded.entries.filter((e) => e.type === "compaction").length, compactions)
          checkView(
            `round ${round}: load is the model after ${loaded.entries.length} steps`,
            loaded.view,
            views[loaded.entries.length]!
          )
          assert.deepStrictEqual(prefixProblems(loaded.view), [])
          assert.isTrue(loaded.issues.every((i) => i._tag === "TornTail"))
          // reopening takes over the dead child's lock, cuts a torn tail and goes on appending
          yield* withJsonl(directory, sessionId, (log) =>
            Effect.gen(function* () {
              checkView("reopened", (yield* log.snapshot).view, views[loaded.entries.length]!)
              assert.deepStrictEqual(log.recovered, loaded.issues)
              yield* log.append([user("after the crash")])
            }))
          const again = yield* read(directory, sessionId)
          assert.deepStrictEqual(again.issues, [])
          checkView("after appending", again.view, [...views[loaded.entries.length]!, user("after the crash")])
        }
      }),
    180_000
  )

  const truncationCase = (lastStep: "compact" | "append" | "evict") =>
    it.live(
      `truncating the file at every byte of its last entry (a ${lastStep}) loses nothing before it`,
      () =>
        Effect.gen(function* () {
          const directory = yield* tempDir
          const { steps, views } = crashScript(3)
          const last = steps.findIndex((s, i) => i > 20 && s._tag === lastStep)
          const n = last + 1
          yield* withJsonl(directory, "t", (log) => Effect.forEach(steps.slice(0, n), (s) => performStep(log, s)))
          const path = yield* Effect.service(Path.Path).pipe(Effect.provide(platform))
          const file = path.join(directory, "t.jsonl")
          const full = yield* readText(file)
          const bytes = new TextEncoder().encode(full)
          const start = bytes.lastIndexOf(0x0a, bytes.length - 2) + 1
          const decoder = new TextDecoder()
          for (let offset = start; offset <= bytes.length; offset++) {
            yield* writeText(file, decoder.decode(bytes.subarray(0, offset)))
            const loaded = yield* read(directory, "t")
            const complete = offset === bytes.length
            assert.strictEqual(loaded.entries.length, complete ? n : n - 1, `offset ${offset}`)
            checkView(`offset ${offset}`, loaded.view, views[complete ? n : n - 1]!)
            assert.deepStrictEqual(
              loaded.issues.map((i) => i._tag),
              offset === start || complete ? [] : ["TornTail"],
              `offset ${offset}`
            )
          }
          // the writer cuts the torn tail before appending, so the next line never glues onto it
          yield* writeText(file, decoder.decode(bytes.subarray(0, start + 5)))
          yield* withJsonl(directory, "t", (log) => log.append([user("next")]))
          const loaded = yield* read(directory, "t")
          assert.deepStrictEqual(loaded.issues, [])
          checkView("after the cut", loaded.view, applyStep(views[n - 1]!, { _tag: "append", message: user("next") }))
        }),
      180_000
    )
  truncationCase("compact")
  truncationCase("append")
  truncationCase("evict")

  // ==========================================================================
  // Concurrency
  // ==========================================================================

  it.live("two fibers append while a compaction is summarizing: nothing lost, order kept, all after the summary", () =>
    Effect.gen(function* () {
      const directory = yield* tempDir
      const base = [user("first"), call("t1"), result("t1", "out"), user("second"), call("t2"), result("t2", "out2")]
      const summary = user("summary of the first turn")
      const final = yield* withJsonl(directory, "c", (log) =>
        Effect.gen(function* () {
          yield* log.append(base)
          const halfway = yield* Deferred.make<void>()
          const snapshot = yield* log.snapshot
          const compaction = yield* Effect.forkChild(
            Effect.gen(function* () {
              yield* Deferred.await(halfway) // "summarizing" while the fibers append
              return yield* log.recordCompaction({
                view: [summary, ...snapshot.view.slice(3)],
                snapshot,
                cut: 3,
                summarizer: "test"
              })
            })
          )
          const writer = (name: string) =>
            Effect.forEach(Array.from({ length: 20 }, (_, i) => i), (i) =>
              Effect.gen(function* () {
                yield* log.append([user(`${name}${i}`)])
                if (name === "a" && i === 10) yield* Deferred.succeed(halfway, undefined)
                yield* Effect.yieldNow
              }))
          yield* Effect.all([writer("a"), writer("b")], { concurrency: 2 })
          yield* Fiber.join(compaction)
          return yield* log.snapshot
        }))
      const texts = final.view.map((m) => typeof m.content === "string" ? m.content : "")
      assert.strictEqual(final.view[0], summary)
      checkView("kept part", final.view.slice(1, 4), base.slice(3))
      const appended = texts.slice(4)
      assert.strictEqual(appended.length, 40, "every appended message is in the view")
      for (const name of ["a", "b"]) {
        assert.deepStrictEqual(
          appended.filter((t) => t.startsWith(name)),
          Array.from({ length: 20 }, (_, i) => `${name}${i}`)
        )
      }
      const loaded = yield* read(directory, "c")
      checkView("load", loaded.view, final.view)
      const compactionLine = loaded.entries.findIndex((e) => e.type === "compaction")
      assert.isAbove(compactionLine, 6, "the boundary was written after some of the concurrent appends")
      assert.isBelow(compactionLine, loaded.entries.length - 1, "and before others")
    }))

  it.live("a compaction recorded from a stale snapshot fails with Conflict, and the log is unchanged", () =>
    Effect.gen(function* () {
      const store = new Map() as MemoryStore
      const exit = yield* withMemory(store, (log) =>
        Effect.gen(function* () {
          yield* log.append([user("a"), user("b"), call("t"), result("t", "x"), user("c")])
          const snapshot = yield* log.snapshot
          yield* log.recordCompaction({
            view: [user("s1"), ...snapshot.view.slice(2)],
            snapshot,
            cut: 2,
            summarizer: "x"
          })
          return yield* Effect.exit(
            log.recordCompaction({ view: [user("s2"), ...snapshot.view.slice(4)], snapshot, cut: 4, summarizer: "x" })
          )
        }))
      assert.strictEqual(failure(exit).reason, "Conflict")
      assert.strictEqual((store.get("memory") ?? []).length, 6)
    }))

  it.live("kept: a repaired tail is stored, appends made while summarizing follow it, and a resume rebuilds it", () =>
    Effect.gen(function* () {
      const store = new Map() as MemoryStore
      const base = [user("a"), call("t1"), result("t1", "x"), user("b"), call("t2")]
      const late = user("arrived while summarizing")
      const reopened = () => withMemory(new Map(store), (log) => Effect.map(log.load(), (l) => l.view))
      const live = yield* withMemory(store, (log) =>
        Effect.gen(function* () {
          yield* log.append(base)
          const snapshot = yield* log.snapshot
          yield* log.append([late])
          const summary = user("s")
          const kept = [base[3]!, base[4]!, result("t2", "aborted")]
          const entry = yield* log.recordCompaction({
            view: [summary, ...kept],
            snapshot,
            cut: 3,
            summarizer: "x"
          })
          assert.deepStrictEqual(entry.kept?.through, snapshot.entryIds.at(-1))
          assert.strictEqual(entry.firstKeptEntryId, snapshot.entryIds[3])
          const after = yield* log.snapshot
          checkView("live", after.view, [summary, ...kept, late])
          checkView("reopened", yield* reopened(), after.view)
          // an eviction finds the tool_result inside the kept messages, live and after a resume
          const pointer = { type: "tool_result" as const, tool_use_id: "t2", content: "[evicted]" }
          yield* log.recordEviction([{ toolUseId: "t2", block: pointer }])
          checkView("evicted", (yield* log.snapshot).view, [
            summary,
            kept[0]!,
            kept[1]!,
            result("t2", "[evicted]"),
            late
          ])
          checkView("evicted, reopened", yield* reopened(), (yield* log.snapshot).view)
          // a second compaction from inside the first one's kept part, while another message arrives
          const next = yield* log.snapshot
          const later = user("arrived during the second summary")
          yield* log.append([later])
          const second = yield* log.recordCompaction({
            view: [user("s2"), ...next.view.slice(2)],
            snapshot: next,
            cut: 2,
            summarizer: "x"
          })
          assert.strictEqual(second.firstKeptEntryId, `${entry.id}#2`)
          // the kept messages are the snapshot's own: no copy, ids only
          assert.strictEqual(second.kept, undefined)
          return (yield* log.snapshot).view
        }))
      checkView("final, reopened", yield* reopened(), live)
      checkView("final", live, [
        user("s2"),
        call("t2"),
        result("t2", "[evicted]"),
        late,
        user("arrived during the second summary")
      ])
    }))

  it.live("kept: an eviction of a kept message after the snapshot is a Conflict, and nothing is written", () =>
    Effect.gen(function* () {
      const store = new Map() as MemoryStore
      yield* withMemory(store, (log) =>
        Effect.gen(function* () {
          yield* log.append([user("a"), call("t1"), result("t1", "x"), user("b"), call("t2")])
          const snapshot = yield* log.snapshot
          const pointer = { type: "tool_result" as const, tool_use_id: "t1", content: "[evicted]" }
          yield* log.recordEviction([{ toolUseId: "t1", block: pointer }])
          const kept = [...snapshot.view.slice(1), result("t2", "aborted")]
          const exit = yield* Effect.exit(
            log.recordCompaction({ view: [user("s"), ...kept], snapshot, cut: 1, summarizer: "x" })
          )
          assert.strictEqual(failure(exit).reason, "Conflict")
          // the evicted message was summarized, not kept: no conflict
          yield* log.recordCompaction({ view: [user("s"), ...kept.slice(2)], snapshot, cut: 3, summarizer: "x" })
        }))
      assert.strictEqual((store.get("memory") ?? []).length, 7)
    }))

  it.live("a second process opening the session gets Locked with the holder's pid", () =>
    Effect.gen(function* () {
      const directory = yield* tempDir
      const child = spawnWriter(["hold", directory, "shared", "0"])
      yield* Effect.ensuring(
        Effect.gen(function* () {
          const ready = yield* waitFor(child, (line) => line.startsWith("ready"))
          const exit = yield* Effect.exit(withJsonl(directory, "shared", () => Effect.void))
          const error = failure(exit)
          assert.strictEqual(error.reason, "Locked")
          assert.strictEqual(error.pid, Number(ready.split(" ")[1]))
          assert.strictEqual(ready.split(" ")[2], isDeno ? "deno" : "node", "the child runs under the test's runtime")
          assert.isFalse(error.isRetryable)
          assert.match(error.message, /Locked \(session shared\): process \d+ holds/)
        }),
        kill(child)
      )
      // the other way round: this process holds it, the child is refused and says why
      yield* withJsonl(directory, "shared", () =>
        Effect.gen(function* () {
          const refused = spawnWriter(["hold", directory, "shared", "0"])
          const line = yield* Effect.ensuring(waitFor(refused, (l) => l.startsWith("error")), kill(refused))
          assert.deepStrictEqual(JSON.parse(line.slice("error ".length)), {
            tag: "SessionLogError",
            reason: "Locked",
            pid: process.pid
          })
          const twice = yield* Effect.exit(withJsonl(directory, "shared", () => Effect.void))
          assert.strictEqual(failure(twice).reason, "Locked", "a second open in the same process is refused too")
        }))
    }), 180_000)

  it.live(
    "two openers taking over one stale lock at once: one opens, the other is Locked, the log stays whole",
    () =>
      Effect.gen(function* () {
        const directory = yield* tempDir
        yield* withJsonl(directory, "stale", (log) => log.append([user("u0"), user("u1")]))
        const path = yield* Effect.service(Path.Path).pipe(Effect.provide(platform))
        // a lock left by a process that has exited
        const dead = spawnSync(process.execPath, ["-e", ""]).pid
        yield* writeText(path.join(directory, "stale.lock"), `${dead}\n`)
        // the late opener is descheduled between judging the lock stale and acting on it: its moves and removals of
        // the lock wait 50 ms, while the other takes the lock over and starts writing
        const late = Layer.effect(
          FileSystem.FileSystem,
          Effect.map(Effect.service(FileSystem.FileSystem), (fs) => {
            const slow = (p: string) => p.endsWith(".lock") ? Effect.sleep("50 millis") : Effect.void
            return {
              ...fs,
              remove: (p: string, o?: Parameters<typeof fs.remove>[1]) => Effect.andThen(slow(p), fs.remove(p, o)),
              rename: (from: string, to: string) => Effect.andThen(slow(from), fs.rename(from, to))
            }
          })
        ).pipe(Layer.provide(NodeFileSystem.layer))
        const writer = (tag: string, fileSystem: Layer.Layer<FileSystem.FileSystem>) =>
          Effect.flatMap(Effect.service(SessionLog), (log) =>
            Effect.gen(function* () {
              yield* log.append([user(`${tag} a`)])
              yield* Effect.sleep("100 millis")
              yield* log.append([user(`${tag} b`)])
              return tag
            })).pipe(
              Effect.provide(
                layerJsonl({ directory, sessionId: "stale" }).pipe(
                  Layer.provide(Layer.merge(fileSystem, NodePath.layer)),
                  Layer.fresh
                )
              ),
              Effect.exit
            )
        const exits = yield* Effect.all([writer("first", NodeFileSystem.layer), writer("late", late)], {
          concurrency: "unbounded"
        })
        // which one wins depends on the scheduler (a loaded machine can delay the first more than the late one's 50 ms);
        // never both
        const won = exits.flatMap((exit) => Exit.isSuccess(exit) ? [exit.value] : [])
        assert.strictEqual(won.length, 1, `exactly one writer: ${exits.map(String).join(", ")}`)
        const lost = exits.find(Exit.isFailure)!
        assert.strictEqual(failure(lost).reason, "Locked", "the other opener is refused, not a second writer")
        // one writer wrote after the takeover: the whole log reads back, every line in its chain
        const loaded = yield* readJsonl({ directory, sessionId: "stale", tail: false }).pipe(Effect.provide(platform))
        assert.deepStrictEqual(loaded.issues, [])
        assert.deepStrictEqual(loaded.view.map((m) => m.content), ["u0", "u1", `${won[0]} a`, `${won[0]} b`])
        const released = yield* Effect.flatMap(
          Effect.service(FileSystem.FileSystem),
          (f) => f.exists(path.join(directory, "stale.lock"))
        ).pipe(Effect.provide(platform))
        assert.isFalse(released, "the lock is released when its writer closes")
      }),
    60_000
  )

  // ==========================================================================
  // Bad input
  // ==========================================================================

  const fileWithSteps = (sessionId: string, count: number) =>
    Effect.gen(function* () {
      const directory = yield* tempDir
      const { steps, views } = crashScript(5)
      const n = steps.findIndex((s, i) => i >= count && s._tag === "compact") + 1
      yield* withJsonl(directory, sessionId, (log) => Effect.forEach(steps.slice(0, n), (s) => performStep(log, s)))
      const path = yield* Effect.service(Path.Path).pipe(Effect.provide(platform))
      const file = path.join(directory, `${sessionId}.jsonl`)
      const lines = (yield* readText(file)).split("\n").slice(0, -1)
      return { directory, file, lines, steps: steps.slice(0, n), views: views.slice(0, n + 1) }
    })

  it.live("a corrupted line in the middle fails with Corrupt naming its line; repair skips it and reports it", () =>
    Effect.gen(function* () {
      const { directory, file, lines, steps } = yield* fileWithSteps("bad", 10)
      const broken = [...lines]
      broken[4] = `{${broken[4]!}`
      broken[6] = JSON.stringify({
        ...JSON.parse(broken[6]!),
        type: "message",
        message: { role: "robot", content: "x" }
      })
      yield* writeText(file, broken.map((l) => `${l}\n`).join(""))
      const error = failure(yield* Effect.exit(read(directory, "bad")))
      assert.strictEqual(error.reason, "Corrupt")
      assert.deepStrictEqual(error.lines, [5, 7])
      assert.match(error.message, /line 5: not JSON/)
      assert.match(error.message, /line 7: .*role/)
      // the default open reads and checks the tail only (these lines are before it); a full verification is asked for
      const opened = failure(yield* Effect.exit(withJsonl(directory, "bad", () => Effect.void, { tail: false })))
      assert.strictEqual(opened.reason, "Corrupt", "the writer refuses to open a damaged log when it verifies it all")
      const repaired = yield* read(directory, "bad", true)
      assert.deepStrictEqual(repaired.issues.slice(0, 2).map((i) => [i._tag, i.line]), [["CorruptLine", 5], [
        "CorruptLine",
        7
      ]])
      // the compaction's hash covers the view: it mismatches only if a skipped message was in the kept part
      assert.isTrue(repaired.issues.slice(2).every((i) => i._tag === "HashMismatch" && i.line === steps.length))
      assert.strictEqual(repaired.entries.length, steps.length - 2)
    }))

  it.live("an entry of a future version fails with FutureVersion naming the entry and line, even with repair", () =>
    Effect.gen(function* () {
      const { directory, file, lines } = yield* fileWithSteps("future", 5)
      const future = { ...JSON.parse(lines[2]!), v: CURRENT_VERSION + 1, newField: true }
      yield* writeText(
        file,
        [...lines.slice(0, 2), JSON.stringify(future), ...lines.slice(3)].map((l) => `${l}\n`).join("")
      )
      for (const repair of [false, true]) {
        const error = failure(yield* Effect.exit(read(directory, "future", repair)))
        assert.strictEqual(error.reason, "FutureVersion")
        assert.strictEqual(error.line, 3)
        assert.strictEqual(error.entryId, future.id)
        assert.include(error.message, `v${CURRENT_VERSION + 1} is newer than this reader (v${CURRENT_VERSION})`)
      }
    }))

  it.live("a hash mismatch fails with HashMismatch naming the compaction; repair accepts the rebuilt view", () =>
    Effect.gen(function* () {
      const { directory, file, lines, views } = yield* fileWithSteps("hash", 8)
      const at = lines.findIndex((l) => l.includes(`"type":"compaction"`))
      const entry = JSON.parse(lines[at]!)
      const edited = lines.map((l, i) => {
        if (i !== at) return l
        // re-encoded with a valid checksum: the line is intact, the view it records is not
        const { sum: _sum, ...fields } = entry
        return encodeEntry({ ...fields, viewHash: "f".repeat(64) })
      })
      yield* writeText(file, edited.map((l) => `${l}\n`).join(""))
      const error = failure(yield* Effect.exit(read(directory, "hash")))
      assert.strictEqual(error.reason, "HashMismatch")
      assert.strictEqual(error.entryId, entry.id)
      assert.strictEqual(error.line, at + 1)
      const repaired = yield* read(directory, "hash", true)
      assert.deepStrictEqual(repaired.issues.map((i) => i._tag), ["HashMismatch"])
      checkView("repaired view", repaired.view, views.at(-1)!)
    }))

  it.live("a session id that would escape the directory is rejected with InvalidId before any file is touched", () =>
    Effect.gen(function* () {
      const directory = yield* tempDir
      for (const id of ["../escape", "a/b", "..", ".", "", "x\\y", ".hidden", "a\u0000b", "x".repeat(129)]) {
        const error = failure(yield* Effect.exit(withJsonl(directory, id, () => Effect.void)))
        assert.strictEqual(error.reason, "InvalidId", JSON.stringify(id))
        assert.strictEqual(failure(yield* Effect.exit(read(directory, id))).reason, "InvalidId")
      }
      assert.deepStrictEqual(yield* listSessions(directory).pipe(Effect.provide(platform)), [])
      assert.strictEqual(yield* validateSessionId("2026-11-30_abc.1"), "2026-11-30_abc.1")
    }))

  it.live("invalid appends, evictions and cuts fail with InvalidInput and write nothing", () =>
    Effect.gen(function* () {
      const store = new Map() as MemoryStore
      yield* withMemory(store, (log) =>
        Effect.gen(function* () {
          yield* log.append([user("a"), call("t"), result("t", "x")])
          const bad: ReadonlyArray<Effect.Effect<unknown, SessionLogError>> = [
            log.append([{ role: "robot", content: "x" } as unknown as Message]),
            log.recordEviction([{
              toolUseId: "t",
              block: { type: "tool_result", tool_use_id: "other", content: "p" }
            }]),
            Effect.flatMap(
              log.snapshot,
              (snapshot) =>
                log.recordCompaction({
                  view: [user("s"), ...snapshot.view.slice(9)],
                  snapshot,
                  cut: 9,
                  summarizer: "x"
                })
            ),
            Effect.flatMap(log.snapshot, (snapshot) =>
              log.recordCompaction({
                view: [{ role: "user", content: [{ type: "text" }] } as unknown as Message, ...snapshot.view.slice(1)],
                snapshot,
                cut: 1,
                summarizer: "x"
              })),
            Effect.flatMap(log.snapshot, (snapshot) =>
              log.recordCompaction({
                view: [user("s"), ...[user("fine"), { role: "robot", content: "x" }] as unknown as Array<Message>],
                snapshot,
                cut: 1,
                summarizer: "x"
              }))
          ]
          for (const effect of bad) assert.strictEqual(failure(yield* Effect.exit(effect)).reason, "InvalidInput")
        }))
      assert.strictEqual((store.get("memory") ?? []).length, 3)
    }))

  // ==========================================================================
  // Files, listing and retries
  // ==========================================================================

  it.live("files are created with mode 0600, sessions are listed by id, and the lock is released on close", () =>
    Effect.gen(function* () {
      const base = yield* tempDir
      const path = yield* Effect.service(Path.Path).pipe(Effect.provide(platform))
      const directory = path.join(base, "nested", "sessions")
      yield* withJsonl(directory, "b-session", (log) => log.append([user("x")]))
      yield* withJsonl(directory, "a-session", (log) => log.append([user("y")]))
      const fs = yield* Effect.service(FileSystem.FileSystem).pipe(Effect.provide(platform))
      const info = yield* fs.stat(path.join(directory, "a-session.jsonl"))
      if (process.platform !== "win32") assert.strictEqual(info.mode & 0o777, 0o600)
      assert.isFalse(yield* fs.exists(path.join(directory, "a-session.lock")))
      yield* fs.writeFileString(path.join(directory, "notes.txt"), "")
      assert.deepStrictEqual(yield* listSessions(directory).pipe(Effect.provide(platform)), ["a-session", "b-session"])
    }).pipe(Effect.provide(platform)))

  /** A FileSystem whose append handles fail as scripted (after writing part of the line). */
  const flakyPlatform = (codes: Array<string | undefined>, attempts: { count: number }) =>
    Layer.effect(
      FileSystem.FileSystem,
      Effect.gen(function* () {
        const fs = yield* FileSystem.FileSystem
        return {
          ...fs,
          open: (path: string, options?: Parameters<FileSystem.FileSystem["open"]>[1]) =>
            Effect.map(fs.open(path, options), (file) => {
              const flaky = Object.create(file) as FileSystem.File & { writeAll: FileSystem.File["writeAll"] }
              flaky.writeAll = (buffer: Uint8Array) =>
                Effect.gen(function* () {
                  attempts.count++
                  const code = codes.shift()
                  if (code === undefined) return yield* file.writeAll(buffer)
                  yield* file.writeAll(buffer.subarray(0, Math.floor(buffer.length / 2)))
                  return yield* Effect.fail(
                    PlatformError.systemError({
                      _tag: "Unknown",
                      module: "FileSystem",
                      method: "writeAll",
                      cause: Object.assign(new Error(code), { code })
                    })
                  )
                })
              return flaky
            })
        } satisfies FileSystem.FileSystem
      })
    ).pipe(Layer.provide(NodeFileSystem.layer))

  const withFlaky = (
    directory: string,
    codes: Array<string | undefined>,
    attempts: { count: number },
    messages: Array<Message>
  ) =>
    Effect.flatMap(Effect.service(SessionLog), (log) => Effect.exit(log.append(messages))).pipe(
      Effect.provide(
        layerJsonl({ directory, sessionId: "flaky", retryDeadline: "300 millis" }).pipe(
          Layer.provide(Layer.mergeAll(flakyPlatform(codes, attempts), NodePath.layer)),
          Layer.fresh
        )
      )
    )

  it.live("transient EAGAIN/EBUSY are retried (partial lines cut first); ENOSPC/EACCES fail once, typed", () =>
    Effect.gen(function* () {
      const directory = yield* tempDir
      const attempts = { count: 0 }
      const ok = yield* withFlaky(directory, ["EAGAIN", "EBUSY"], attempts, [user("one"), user("two")])
      assert.isTrue(Exit.isSuccess(ok))
      assert.strictEqual(attempts.count, 3)
      for (const code of ["ENOSPC", "EACCES"]) {
        attempts.count = 0
        const error = failure(yield* withFlaky(directory, [code], attempts, [user(`lost ${code}`)]))
        assert.strictEqual(error.reason, "Io")
        assert.strictEqual(error.code, code)
        assert.isFalse(error.isRetryable)
        assert.strictEqual(attempts.count, 1)
      }
      attempts.count = 0
      // retried until the deadline (300 ms here), then Unavailable naming the last cause
      const exhausted = failure(yield* withFlaky(directory, Array(1000).fill("EAGAIN"), attempts, [user("never")]))
      assert.strictEqual(exhausted.reason, "Unavailable")
      assert.strictEqual(exhausted.code, "EAGAIN")
      assert.isFalse(exhausted.isRetryable)
      assert.isTrue((exhausted.cause as SessionLogError).isRetryable)
      assert.match(exhausted.message, /unavailable for [0-9.]+ s \([0-9]+ tries, deadline 0.3 s\)/)
      assert.isAbove(attempts.count, 2)
      // every half-written line was cut: the file holds exactly the two acknowledged messages
      const loaded = yield* read(directory, "flaky")
      assert.deepStrictEqual(loaded.issues, [])
      checkView("after failures", loaded.view, [user("one"), user("two")])
      const fresh = yield* withJsonl(directory, "flaky", (log) => Effect.map(log.append([user("three")]), () => "ok"))
      assert.strictEqual(fresh, "ok")
    }))

  /**
   * The platform's FileSystem, whose session files open for appending on `/dev/full` (the file itself is created,
   * empty): every write to them fails with the kernel's ENOSPC.
   */
  const fullDisk = Layer.effect(
    FileSystem.FileSystem,
    Effect.map(FileSystem.FileSystem, (fs) => ({
      ...fs,
      open: (path: string, options?: Parameters<FileSystem.FileSystem["open"]>[1]) =>
        path.endsWith(".jsonl") && options?.flag === "a"
          ? Effect.andThen(fs.writeFile(path, new Uint8Array(0), { flag: "a" }), fs.open("/dev/full", options))
          : fs.open(path, options)
    } satisfies FileSystem.FileSystem))
  ).pipe(Layer.provide(NodeFileSystem.layer))

  it.live("a full disk (a real ENOSPC from /dev/full): the error names the file and says the disk is full", () =>
    Effect.gen(function* () {
      const directory = yield* tempDir
      const error = yield* Effect.flip(
        Effect.flatMap(Effect.service(SessionLog), (log) => log.append([user("lost")])).pipe(
          Effect.provide(
            layerJsonl({ directory, sessionId: "full" }).pipe(
              Layer.provide(Layer.mergeAll(fullDisk, NodePath.layer)),
              Layer.fresh
            )
          )
        )
      )
      const path = yield* Effect.service(Path.Path).pipe(Effect.provide(NodePath.layer))
      assert.strictEqual(error.reason, "Io")
      assert.strictEqual(error.code, "ENOSPC")
      assert.isFalse(error.isRetryable)
      assert.include(error.detail, `append ${path.join(directory, "full.jsonl")}: no space left on the device`)
      assert.include(error.message, "the disk is full")
      assert.notInclude(error.message, "Unknown")
      assert.notInclude(error.message, "FileSystem.writeAll")
      // nothing reached the real file
      assert.deepStrictEqual((yield* read(directory, "full")).view, [])
    }))

  it.live("a failed write leaves the live view unchanged and the next append cuts the partial line", () =>
    Effect.gen(function* () {
      const directory = yield* tempDir
      const attempts = { count: 0 }
      const codes = [undefined, "ENOSPC"]
      const views = yield* Effect.flatMap(Effect.service(SessionLog), (log) =>
        Effect.gen(function* () {
          yield* log.append([user("kept")])
          const failed = yield* Effect.exit(log.append([user("failed")]))
          assert.isTrue(Exit.isFailure(failed))
          const afterFailure = (yield* log.snapshot).view
          yield* log.append([user("next")])
          return { afterFailure, end: (yield* log.snapshot).view }
        })).pipe(
          Effect.provide(
            layerJsonl({ directory, sessionId: "partial" }).pipe(
              Layer.provide(Layer.mergeAll(flakyPlatform(codes, attempts), NodePath.layer)),
              Layer.fresh
            )
          )
        )
      checkView("after the failure", views.afterFailure, [user("kept")])
      const loaded = yield* read(directory, "partial")
      assert.deepStrictEqual(loaded.issues, [])
      checkView("stored", loaded.view, [user("kept"), user("next")])
      checkView("live", views.end, loaded.view)
    }))

  // ==========================================================================
  // Deferred writes (sync: "deferred")
  // ==========================================================================

  const lineCount = (file: string) => Effect.map(readText(file), (text) => text.split("\n").length - 1)
  /** Polls `check` on real time (not the test clock), for at most 5 s. */
  const eventually = <E>(check: Effect.Effect<boolean, E>) =>
    Effect.gen(function* () {
      for (let i = 0; i < 500 && !(yield* check); i++) {
        yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 10)))
      }
    })
  const withDeferred = <A, E>(
    directory: string,
    sessionId: string,
    attempts: { count: number },
    codes: Array<string | undefined>,
    body: (log: SessionLogShape) => Effect.Effect<A, E>
  ) =>
    Effect.flatMap(Effect.service(SessionLog), body).pipe(
      Effect.provide(
        layerJsonl({ directory, sessionId, sync: "deferred" }).pipe(
          Layer.provide(Layer.mergeAll(flakyPlatform(codes, attempts), NodePath.layer)),
          Layer.fresh
        )
      )
    )

  it.effect("deferred: appends are acknowledged at once and written together by one write, in order", () =>
    Effect.gen(function* () {
      const directory = yield* tempDir
      const file = `${directory}/deferred.jsonl`
      const attempts = { count: 0 }
      const messages = ["one", "two", "three", "four", "five"].map(user)
      yield* withDeferred(directory, "deferred", attempts, [], (log) =>
        Effect.gen(function* () {
          for (const m of messages.slice(0, 3)) yield* log.append([m])
          // acknowledged, not written: the write waits for the test clock
          assert.strictEqual(yield* lineCount(file), 0)
          assert.strictEqual(attempts.count, 0)
          checkView("live", (yield* log.snapshot).view, messages.slice(0, 3))
          yield* TestClock.adjust("5 millis")
          yield* eventually(Effect.map(lineCount(file), (n) => n === 3))
          assert.strictEqual(yield* lineCount(file), 3)
          assert.strictEqual(attempts.count, 1, "one write for the three appends")
          yield* log.append([messages[3]!])
          // a read writes what is queued before it reads
          checkView("load", (yield* log.load()).view, messages.slice(0, 4))
          assert.strictEqual(attempts.count, 2)
          yield* log.append([messages[4]!])
        }))
      // closing the log wrote the last one
      assert.strictEqual(attempts.count, 3)
      const loaded = yield* read(directory, "deferred")
      assert.deepStrictEqual(loaded.issues, [])
      checkView("after close", loaded.view, messages)
    }))

  it.effect("deferred: a write that fails keeps no part of a line and fails every later call, naming the lines lost", () =>
    Effect.gen(function* () {
      const directory = yield* tempDir
      const attempts = { count: 0 }
      const errors = yield* withDeferred(
        directory,
        "lost",
        attempts,
        [undefined, "ENOSPC"],
        (log) =>
          Effect.gen(function* () {
            yield* log.append([user("kept")])
            yield* log.load()
            yield* log.append([user("lost one")])
            yield* log.append([user("lost two")])
            yield* TestClock.adjust("5 millis")
            const onRead = failure(yield* Effect.exit(log.load()))
            const onAppend = failure(yield* Effect.exit(log.append([user("refused")])))
            return { onRead, onAppend }
          })
      )
      assert.strictEqual(attempts.count, 2)
      for (const error of [errors.onRead, errors.onAppend]) {
        assert.strictEqual(error.reason, "Io")
        assert.strictEqual(error.code, "ENOSPC")
        assert.include(error.detail, "lines 2 to 3 were acknowledged (deferred) and not written; reopen the session")
        assert.include(error.detail, "no space left on the device")
      }
      // the half line the failed write left was cut: the file is a prefix of what was acknowledged
      const loaded = yield* read(directory, "lost")
      assert.deepStrictEqual(loaded.issues, [])
      checkView("stored", loaded.view, [user("kept")])
      // reopened, the session goes on from what the file holds
      yield* withJsonl(directory, "lost", (log) => log.append([user("again")]))
      checkView("reopened", (yield* read(directory, "lost")).view, [user("kept"), user("again")])
    }))
})

describe("SessionLogError copies", () => {
  it("a copy naming the session or the entries a write tried keeps the error's cause", () => {
    const cause = new Error("ECONNRESET")
    const error = new SessionLogErrorClass({ reason: "Io", detail: "append", code: "ECONNRESET", cause })
    const named = withFields(error, { sessionId: "s1" })
    assert.strictEqual(named.sessionId, "s1")
    assert.strictEqual(named.cause, cause)
    assert.strictEqual(named.code, "ECONNRESET")
    const tried = withFields(named, { entryIds: ["a", "b"] })
    assert.deepStrictEqual(tried.entryIds, ["a", "b"])
    assert.strictEqual(tried.cause, cause)
    assert.strictEqual(tried.sessionId, "s1")
    // a spread alone loses it: the reason a copy goes through `withFields`
    assert.strictEqual(new SessionLogErrorClass({ ...error, sessionId: "s1" }).cause, undefined)
  })
})
