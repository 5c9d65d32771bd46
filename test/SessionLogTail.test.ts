/**
 * Resume from the log's tail: on generated sessions with many compactions of every form (kept by id, kept messages
 * stored because the caller changed them, nothing kept, a cut at 0 that keeps the last summary, appends while the
 * summarizer ran), the fold of the tail equals the full fold (view, entry ids, head, seq, and the entries from
 * `verifiedFrom` on), for a session read and for the live log opened with `tail`; writes after a tail open land where
 * a full open's would. Logs whose boundaries the line scan cannot see (v1 lines, another key order) still open, from
 * the start. Damage inside the tail fails as a full read fails; damage before it is not read (`verifiedFrom` says so).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer } from "effect"
import { isToolResult, type Message, userText } from "../src/Message.ts"
import { tailOf, tailStart } from "../src/internal/sessionTail.ts"
import { decodeLine, encodeEntry, type Entry, type Loaded, loadStored } from "../src/SessionEntry.ts"
import { readSession, SessionLog, type SessionLogError, type SessionLogShape } from "../src/SessionLog.ts"
import { type MemorySessions, SessionStore } from "../src/SessionStore.ts"
import { generateSession, prng } from "./fixtures/Conversation.ts"

/** The parts of a loaded session that a resume reads. */
const state = (l: Loaded) => ({ view: JSON.stringify(l.view), entryIds: l.entryIds, head: l.head, seq: l.seq })

const edited = (m: Message): Message =>
  typeof m.content === "string" ? { ...m, content: `${m.content} (edited)` } : {
    ...m,
    content: [...m.content, { type: "text", text: "(edited)" }]
  }

/**
 * Writes a generated session to `log`: appends, evictions of a random tool result and compactions of every form,
 * chosen by `seed`. Returns how many compactions it recorded.
 */
const writeSession = (log: SessionLogShape, seed: number, messages: number) =>
  Effect.gen(function* () {
    const rand = prng(seed)
    const all = generateSession(seed, { messages, maxOutput: 200 })
    let compactions = 0
    for (let i = 0; i < all.length; i++) {
      yield* log.append([all[i]!])
      const r = rand()
      if (r < 0.12) {
        const view = (yield* log.snapshot).view
        const results = view.flatMap((m) =>
          typeof m.content === "string" ? [] : m.content.filter(isToolResult).map((b) => b.tool_use_id)
        )
        if (results.length > 0) {
          const toolUseId = results[Math.floor(rand() * results.length)]!
          yield* log.recordEviction([{
            toolUseId,
            block: { type: "tool_result", tool_use_id: toolUseId, content: `[evicted ${i}]` }
          }])
        }
      } else if (r < 0.3) {
        const snapshot = yield* log.snapshot
        const n = snapshot.view.length
        const form = Math.floor(rand() * 5)
        const cut = form === 0 ? 0 : form === 1 ? n : Math.floor(rand() * (n + 1))
        const summary = userText(`[summary ${compactions}] of ${cut}`)
        const kept = snapshot.view.slice(cut)
        const view = form === 2 ? [summary, ...kept.map(edited)] : [summary, ...kept]
        if (form === 3 && i + 1 < all.length) yield* log.append([all[++i]!]) // appended while summarizing
        yield* log.recordCompaction({ snapshot, cut, view, summarizer: "test" })
        compactions++
      }
    }
    return compactions
  })

const session = (sessions: MemorySessions, sessionId: string, seed: number, messages: number) =>
  Effect.gen(function* () {
    const log = yield* SessionLog
    return yield* writeSession(log, seed, messages)
  }).pipe(Effect.provide(
    SessionLog.layer({ sessionId, sync: "never" }).pipe(
      Layer.provide(SessionStore.layerMemory(sessions)),
      Layer.fresh
    )
  ))

const opened = (sessions: MemorySessions, sessionId: string, tail: boolean) =>
  Effect.flatMap(Effect.service(SessionLog), (log) => log.loaded).pipe(
    Effect.provide(
      SessionLog.layer({ sessionId, tail }).pipe(
        Layer.provide(SessionStore.layerMemory(sessions)),
        Layer.fresh
      )
    )
  )

const failure = <A>(exit: Exit.Exit<A, unknown>): SessionLogError => {
  assert.isTrue(Exit.isFailure(exit), "expected a failure")
  const error = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail") : undefined
  return (error as { readonly error: SessionLogError }).error
}

describe("SessionLog tail", () => {
  it.effect(
    "property: the tail's fold equals the full fold on 500 generated sessions per runtime (1,000 per CI run)",
    () =>
      Effect.gen(function* () {
        const sessions: MemorySessions = new Map()
        let fromTail = 0
        let maxCompactions = 0
        // Node takes seeds 1-500, Deno 1001-1500
        const first = "Deno" in globalThis ? 1001 : 1
        for (let seed = first; seed < first + 500; seed++) {
          const id = `p${seed}`
          const compactions = yield* session(sessions, id, seed, 10 + (seed % 50))
          maxCompactions = Math.max(maxCompactions, compactions)
          const stored = sessions.get(id)!
          const full = loadStored(stored)
          assert.isTrue(full._tag === "Success")
          const whole = full._tag === "Success" ? full.success.loaded : undefined
          const tail = yield* readSession(id, { tail: true }).pipe(Effect.provide(SessionStore.layerMemory(sessions)))
          assert.deepStrictEqual(state(tail), state(whole!), `seed ${seed}`)
          const from = tail.verifiedFrom ?? 1
          assert.strictEqual(JSON.stringify(tail.entries), JSON.stringify(whole!.entries.slice(from - 1)))
          assert.strictEqual(from, tailOf(stored)[0]?.seq ?? 1)
          if (from > 1) fromTail++
          // the tail starts at or before the last boundary
          const boundaries = stored.filter((e) => e.line.includes(`"type":"compaction","summary"`))
          if (boundaries.length > 0) assert.isAtMost(from, boundaries.at(-1)!.seq)
        }
        assert.isAbove(fromTail, 375, "most sessions (three in four) start late")
        assert.isAtLeast(maxCompactions, 10)
      }),
    180_000
  )

  it.effect(
    "a log opened from its tail is the live log: equal state, and writes after it land as a full open's",
    () =>
      Effect.gen(function* () {
        for (let seed = 1; seed <= 40; seed++) {
          const sessions: MemorySessions = new Map()
          yield* session(sessions, "s", seed, 80)
          const full = yield* opened(sessions, "s", false)
          const tail = yield* opened(sessions, "s", true)
          assert.deepStrictEqual(state(tail), state(full))
          assert.isDefined(tail.verifiedFrom)
          // more writes through a tail-opened log, then a full read: equal to the live fold
          const live = yield* Effect.flatMap(Effect.service(SessionLog), (log) =>
            Effect.gen(function* () {
              yield* writeSession(log, seed + 10_000, 20)
              return yield* log.loaded
            })).pipe(Effect.provide(
              SessionLog.layer({ sessionId: "s", tail: true }).pipe(
                Layer.provide(SessionStore.layerMemory(sessions)),
                Layer.fresh
              )
            ))
          const reread = yield* readSession("s").pipe(Effect.provide(SessionStore.layerMemory(sessions)))
          assert.deepStrictEqual(state(live), state(reread))
          assert.deepStrictEqual(reread.issues, [])
        }
      }),
    180_000
  )

  it.effect("old logs: v1 lines and boundaries in another key order are not seen by the scan and open from the start", () =>
    Effect.gen(function* () {
      const sessions: MemorySessions = new Map()
      yield* session(sessions, "new", 7, 60)
      const stored = sessions.get("new")!
      const entries = stored.map((e) => decodeLine(e.line)).map((r) => r._tag === "Success" ? r.success : undefined)
      // rewrite every entry: v1 (no checksum, no meta) with the keys reversed, as another writer might have
      const old = entries.map((entry, i) => {
        const { meta: _, ...rest } = entry as Entry & { meta?: unknown }
        const v1 = { ...rest, v: 1 }
        const reversed = Object.fromEntries(Object.entries(v1).reverse())
        return { seq: i + 1, entryId: entry!.id, line: JSON.stringify(reversed) }
      })
      sessions.set("old", old)
      const at = (seq: number) => old[seq - 1]!.line
      assert.strictEqual(tailStart(old.length, at, at), 1, "no boundary is seen")
      const tail = yield* readSession("old", { tail: true }).pipe(Effect.provide(SessionStore.layerMemory(sessions)))
      const full = yield* readSession("new").pipe(Effect.provide(SessionStore.layerMemory(sessions)))
      assert.deepStrictEqual(state(tail), state(full))
      assert.isUndefined(tail.verifiedFrom, "read and checked from the first line")
      // the same log in today's format starts late
      const now = yield* readSession("new", { tail: true }).pipe(Effect.provide(SessionStore.layerMemory(sessions)))
      assert.isAbove(now.verifiedFrom ?? 1, 1)
    }))

  it.effect("damage: every line of the tail changed fails as the full read does; lines before it are not read", () =>
    Effect.gen(function* () {
      const sessions: MemorySessions = new Map()
      yield* session(sessions, "d", 11, 60)
      const stored = sessions.get("d")!
      const clean = yield* readSession("d", { tail: true }).pipe(Effect.provide(SessionStore.layerMemory(sessions)))
      const from = clean.verifiedFrom!
      assert.isAbove(from, 2)
      const read = (tail: boolean) =>
        Effect.exit(readSession("d", { tail }).pipe(Effect.provide(SessionStore.layerMemory(sessions))))
      for (let i = 0; i < stored.length; i++) {
        const original = stored[i]!
        const line = original.line
        // one changed byte in the middle of the line (a digit of its checksum or a character of its body)
        const j = Math.floor(line.length / 2)
        const changed = line.slice(0, j) + String.fromCharCode(line.charCodeAt(j) ^ 0x01) + line.slice(j + 1)
        stored[i] = { ...original, line: changed }
        const full = yield* read(false)
        const tail = yield* read(true)
        assert.isTrue(Exit.isFailure(full), `line ${i + 1}: the full read fails`)
        if (i + 1 >= from) {
          assert.isTrue(Exit.isFailure(tail), `line ${i + 1} is in the tail: the tail read fails`)
          assert.deepStrictEqual(failure(tail).line, failure(full).line)
          assert.strictEqual(failure(tail).reason, failure(full).reason)
        } else if (Exit.isSuccess(tail)) {
          // before the tail: not read, and said so
          assert.isAbove(tail.value.verifiedFrom ?? 1, i + 1)
          assert.deepStrictEqual(state(tail.value), state(clean))
        }
        stored[i] = original
      }
      // a cut tail: the last entry gone is a shorter log, read the same both ways
      sessions.set("d", stored.slice(0, -1))
      const shortTail = yield* readSession("d", { tail: true }).pipe(Effect.provide(SessionStore.layerMemory(sessions)))
      const shortFull = yield* readSession("d").pipe(Effect.provide(SessionStore.layerMemory(sessions)))
      assert.deepStrictEqual(state(shortTail), state(shortFull))
      assert.strictEqual(encodeEntry(shortFull.entries.at(-1)!), stored.at(-2)!.line)
    }))
})
