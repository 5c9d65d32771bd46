/**
 * The memory store's index of entry ids (what makes its append O(1) amortized): it follows appends by another store
 * over the same map, a session array cut short, its last entry replaced, and a new array put in the map.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { type MemorySessions, SessionStore, type SessionStoreShape } from "../src/SessionStore.ts"

const entry = (id: string) => ({ entryId: id, line: `{"id":"${id}"}` })

const withStore = <A, E>(sessions: MemorySessions, f: (store: SessionStoreShape) => Effect.Effect<A, E>) =>
  Effect.flatMap(Effect.service(SessionStore), f).pipe(Effect.provide(SessionStore.layerMemory(sessions)))

describe("SessionStore.layerMemory's id index", () => {
  it.effect("sees the ids another store over the same map appended", () =>
    Effect.gen(function* () {
      const sessions: MemorySessions = new Map()
      yield* withStore(sessions, (a) =>
        withStore(sessions, (b) =>
          Effect.gen(function* () {
            yield* Effect.scoped(a.acquire("s"))
            assert.deepStrictEqual(yield* a.append("s", 0, [entry("e1")]), { _tag: "Appended", seq: 1 })
            assert.deepStrictEqual(yield* b.append("s", 1, [entry("e2"), entry("e3")]), { _tag: "Appended", seq: 3 })
            // a retry through the other store: recognised by the later of its ids
            assert.deepStrictEqual(yield* a.append("s", 0, [entry("e2"), entry("e3")]), {
              _tag: "AlreadyWritten",
              seq: 3
            })
            assert.deepStrictEqual(yield* a.append("s", 1, [entry("e4")]), { _tag: "Conflict", seq: 3 })
          })))
    }))

  it.effect("follows a session cut short, its last entry replaced, and a new array", () =>
    Effect.gen(function* () {
      const sessions: MemorySessions = new Map()
      yield* withStore(sessions, (store) =>
        Effect.gen(function* () {
          yield* Effect.scoped(store.acquire("s"))
          yield* store.append("s", 0, [entry("e1"), entry("e2"), entry("e3")])
          assert.strictEqual((yield* store.append("s", 3, [entry("e3")]))._tag, "AlreadyWritten")
          // cut: e3 is gone, so it may be appended again
          sessions.get("s")!.length = 2
          assert.deepStrictEqual(yield* store.append("s", 2, [entry("e3")]), { _tag: "Appended", seq: 3 })
          // the last entry replaced by one of another id
          sessions.get("s")![2] = { seq: 3, ...entry("x3") }
          assert.deepStrictEqual(yield* store.append("s", 3, [entry("e3")]), { _tag: "Appended", seq: 4 })
          assert.deepStrictEqual(yield* store.append("s", 0, [entry("x3")]), { _tag: "AlreadyWritten", seq: 3 })
          // a new array
          sessions.set("s", [{ seq: 1, ...entry("n1") }])
          assert.deepStrictEqual(yield* store.append("s", 0, [entry("e1")]), { _tag: "Conflict", seq: 1 })
          assert.deepStrictEqual(yield* store.append("s", 0, [entry("n1")]), { _tag: "AlreadyWritten", seq: 1 })
        }))
    }))
})
