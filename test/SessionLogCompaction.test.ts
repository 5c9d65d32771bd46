/**
 * One way to record a compaction: the view is built once, by `finishCompaction`, and the log stores, hashes and goes
 * on with that same array (through `compactContext` and through `Conversation`); the log's fold checks a writer's
 * view against the entry rather than trusting it. And what the log's layers load: `Compact` and `Simulate` reach
 * neither the stores nor `effect/sql`, and no module-level `WeakMap` keyed by a store holds the folds.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { compactContext } from "../src/Compact.ts"
import { Conversation } from "../src/Conversation.ts"
import type { MessageParam } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import * as Lib from "../src/index.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { CURRENT_VERSION } from "../src/SessionEntry.ts"
import { SessionLog } from "../src/SessionLog.ts"
import type { MemorySessions } from "../src/SessionStore.ts"
import { readGraph, SRC, staticClosure, stripComments } from "./fixtures/ImportGraph.ts"
import { type CompactionEntry, LiveView, type MessageEntry, viewHash } from "../src/internal/sessionEntry.ts"

const user = (text: string): Message => ({ role: "user", content: text })
const reply = (text: string): Message => ({ role: "assistant", content: text })
const long = (label: string) => `${label}: ${"a long paragraph of work that the summary replaces. ".repeat(40)}`

/** `turns` user/assistant turns of long text. */
const turns = (count: number): Array<Message> =>
  Array.from({ length: count }, (_, i) => [user(long(`question ${i}`)), reply(long(`answer ${i}`))]).flat()

const policy = CompactionPolicy.makeUnsafe({ keepRecentTurns: 2, keepRecentTokens: 200 })

const lastCompaction = (entries: ReadonlyArray<{ readonly type: string }>): CompactionEntry =>
  entries.filter((e) => e.type === "compaction").at(-1) as CompactionEntry

describe("SessionLog: a compaction's view is built once", () => {
  it.effect("compactContext: the log's view is the very array finishCompaction built, and its hash is stored", () =>
    Effect.gen(function* () {
      const store: MemorySessions = new Map()
      const live = yield* Effect.gen(function* () {
        const log = yield* SessionLog
        yield* log.append(turns(12))
        const { messages, outcome } = yield* compactContext((yield* log.snapshot).view, policy, { minFreedTokens: 1 })
        assert.strictEqual(outcome._tag, "Compacted")
        const after = yield* log.snapshot
        // the same array: nothing built the view again between finishCompaction and the log's fold
        assert.strictEqual(after.view, messages)
        const loaded = yield* log.loaded
        assert.strictEqual(lastCompaction(loaded.entries).viewHash, viewHash(messages))
        return JSON.stringify(messages)
      }).pipe(Effect.provide(Layer.fresh(SessionLog.layerMemory({ store }))))
      // the fold a resume runs rebuilds it and checks the hash
      const resumed = yield* Effect.flatMap(Effect.service(SessionLog), (log) => log.load()).pipe(
        Effect.provide(Layer.fresh(SessionLog.layerMemory({ store })))
      )
      assert.strictEqual(JSON.stringify(resumed.view), live)
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))

  it.effect("a caller that changes the returned array does not change the log's view", () =>
    Effect.gen(function* () {
      const log = yield* SessionLog
      yield* log.append(turns(12))
      const { messages } = yield* compactContext((yield* log.snapshot).view, policy, { minFreedTokens: 1 })
      const held = JSON.stringify(messages)
      messages.push(user("pushed by the caller, never appended"))
      messages[1] = user("replaced by the caller")
      const after = yield* log.snapshot
      assert.notStrictEqual(after.view, messages)
      assert.strictEqual(JSON.stringify(after.view), held)
      assert.strictEqual(after.view.length, after.entryIds.length)
    }).pipe(Effect.provide(Layer.mergeAll(SessionLog.layerMemory(), ExtractiveSummarizer.layer))))

  it.effect("messages appended while summarizing follow the very messages of the compacted view", () =>
    Effect.gen(function* () {
      const log = yield* SessionLog
      yield* log.append(turns(12))
      const snapshot = yield* log.snapshot
      const late = user("arrived while summarizing")
      yield* log.append([late])
      const view = [user("the summary"), ...snapshot.view.slice(20)]
      yield* log.recordCompaction({ snapshot, view, cut: 20, summarizer: "test" })
      const after = (yield* log.snapshot).view
      assert.strictEqual(after.length, view.length + 1)
      view.forEach((m, i) => assert.strictEqual(after[i], m))
      assert.strictEqual(after.at(-1), late)
      assert.strictEqual(lastCompaction((yield* log.loaded).entries).viewHash, viewHash(after))
    }).pipe(Effect.provide(SessionLog.layerMemory())))

  it.effect("Conversation: after a compaction the log's view is the state's view, the same array", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      const log = yield* SessionLog
      for (const message of turns(12)) {
        const param = message as unknown as MessageParam
        if (message.role === "user") yield* conversation.append(param)
        else yield* conversation.recordReply(param)
      }
      const { outcome } = yield* conversation.compact()
      assert.strictEqual(outcome._tag, "Compacted")
      const state = yield* conversation.state
      assert.strictEqual(state.epoch, 1)
      assert.strictEqual((yield* log.snapshot).view, state.view as ReadonlyArray<unknown>)
      assert.strictEqual(lastCompaction((yield* log.loaded).entries).viewHash, viewHash(state.view as never))
    }).pipe(
      Effect.provide(
        Conversation.layerLogged({ policy, minFreedTokens: 1 }).pipe(
          Layer.provideMerge(SessionLog.layerMemory()),
          Layer.provide(ExtractiveSummarizer.layer)
        )
      )
    ))

  it("the fold checks a writer's view against the entry: a view the entry does not rebuild is not taken", () => {
    const header = (id: string, parentId: string | null) => ({ v: CURRENT_VERSION, id, parentId, timestamp: 1 })
    const messages: Array<MessageEntry> = ["a", "b", "c"].map((id, i, ids) => ({
      ...header(id, i === 0 ? null : ids[i - 1]!),
      type: "message",
      message: user(`message ${id}`)
    }))
    const summary = user("summary")
    const right = [summary, messages[1]!.message, messages[2]!.message]
    const entry: CompactionEntry = {
      ...header("c1", "c"),
      type: "compaction",
      summary,
      firstKeptEntryId: "b",
      tokensBefore: 0,
      tokensAfter: 0,
      summarizer: "test",
      viewHash: viewHash(right)
    }
    const fold = () => {
      const live = new LiveView()
      for (const m of messages) live.apply(m)
      return live
    }
    const taken = fold()
    taken.applyCompaction(entry, right)
    assert.strictEqual(taken.view(), right)
    assert.deepStrictEqual(taken.snapshot().entryIds, ["c1", "b", "c"])
    // a view that drops a kept message, or changes one, is not what the entry rebuilds: the fold rebuilds it itself
    for (const wrong of [[summary, messages[2]!.message], [summary, messages[1]!.message, user("changed")]]) {
      const live = fold()
      live.applyCompaction(entry, wrong)
      assert.notStrictEqual(live.view(), wrong)
      assert.deepStrictEqual(live.view(), right)
      assert.strictEqual(viewHash(live.view()), entry.viewHash)
    }
  })
})

describe("SessionLog: what its modules load", () => {
  const graph = readGraph()
  const sql = (closure: Set<string>) => [...closure].filter((m) => m.startsWith("effect/sql") || m.includes("sql-pg"))

  it("Compact and Simulate reach no store module and no effect/sql; Compact does not import SessionLog", () => {
    for (const entry of ["Compact.ts", "Simulate.ts"]) {
      const closure = staticClosure(entry, graph)
      assert.deepStrictEqual(sql(closure), [], `${entry} loads effect/sql`)
      assert.isFalse(closure.has("SessionStoreSql.ts"), `${entry} loads SessionStoreSql.ts`)
      assert.isFalse(closure.has("SessionStoreJsonl.ts"), `${entry} loads SessionStoreJsonl.ts`)
    }
    assert.isFalse(staticClosure("Compact.ts", graph).has("SessionLog.ts"))
    // the check can fail: the SQL store itself reaches effect/sql
    assert.isNotEmpty(sql(staticClosure("SessionStoreSql.ts", graph)))
  })

  it("no module-level WeakMap in the log or its stores (the folds between openings are a ClosedFolds value)", () => {
    for (const file of ["SessionLog.ts", "SessionStore.ts", "SessionStoreJsonl.ts", "SessionStoreSql.ts"]) {
      const code = stripComments(fs.readFileSync(path.join(SRC, file), "utf8"))
      assert.notMatch(code, /new WeakMap/, file)
    }
  })

  it("the barrel's SessionLog is the module itself: the same service, no store's layers", () => {
    assert.strictEqual(Lib.SessionLog.SessionLog, SessionLog)
    assert.isFalse("layerJsonl" in Lib.SessionLog.SessionLog)
  })
})
