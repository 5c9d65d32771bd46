/**
 * The SQL store under contention, on each database of `fixtures/Pg.ts` (the embedded PGlite always, the server at
 * DATABASE_URL when set; a schema of its own per run): 8 writers, each with a connection pool of its own as separate
 * workers have, append 50 messages each to one session as fast as they can. Every append completes, none needs more
 * than three tries of the store (two while no place in the queue lapses: one `Conflict`, then its turn; a place lapses
 * when its writer is stalled for seconds, as on a starved machine), and the session holds each message once, in each
 * writer's order. (Its timing is `bench/contention.ts`'s.)
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { afterAll, beforeAll } from "vitest"
import { readSession, SessionLog } from "../src/SessionLog.ts"
import { SessionStore, type SessionStoreShape } from "../src/SessionStore.ts"
import { databases, makeSchema, pgStore } from "./fixtures/Pg.ts"

const WRITERS = 8
const APPENDS = 50

for (const database of databases) {
  describe(`SessionStoreSql under contention on ${database.name}`, () => {
    let pg: Awaited<ReturnType<typeof makeSchema>> | undefined
    beforeAll(async () => {
      pg = await makeSchema(database)
    }, 180_000)
    afterAll(async () => {
      await pg?.drop()
    })

    it.live(
      `${WRITERS} writers × ${APPENDS} appends to one session: each append in at most three tries`,
      () =>
        Effect.gen(function* () {
          const sessionId = "contended"
          // the store's tries per append, by the append's first entry id (the same on each of its tries)
          const tries = new Map<string, number>()
          const results = new Map<string, Array<string>>()
          /** A writer's store: its own pool, each append counted. */
          const countingStore = Layer.effect(
            SessionStore,
            Effect.map(Effect.service(SessionStore), (store): SessionStoreShape => ({
              ...store,
              append: (id, expectedSeq, entries, options) =>
                Effect.suspend(() => {
                  tries.set(entries[0]!.entryId, (tries.get(entries[0]!.entryId) ?? 0) + 1)
                  return store.append(id, expectedSeq, entries, options)
                })
            }))
          ).pipe(Layer.provide(pgStore(pg!.schema, pg!.url)), Layer.fresh)
          const writer = (w: number) =>
            Effect.gen(function* () {
              const log = yield* SessionLog
              for (let k = 0; k < APPENDS; k++) {
                const [id] = yield* log.append([{ role: "user", content: `w${w} ${k}` }])
                results.set(`w${w} ${k}`, [id!])
              }
            }).pipe(Effect.provide(SessionLog.layer({ sessionId }).pipe(Layer.provide(countingStore), Layer.fresh)))
          yield* Effect.all(Array.from({ length: WRITERS }, (_, w) => writer(w)), { concurrency: "unbounded" })

          assert.strictEqual(results.size, WRITERS * APPENDS, "every append completed")
          const counts = [...tries.values()]
          assert.strictEqual(counts.length, WRITERS * APPENDS, "one counted append per message")
          const most = Math.max(...counts)
          assert.isAtMost(most, 3, `an append took ${most} tries`)
          const loaded = yield* readSession(sessionId).pipe(
            Effect.provide(Layer.succeedContext(pg!.context))
          )
          const messages = loaded.entries.flatMap((e) => e.type === "message" ? [e.message.content as string] : [])
          assert.strictEqual(messages.length, WRITERS * APPENDS, "nothing lost or doubled")
          assert.strictEqual(new Set(messages).size, WRITERS * APPENDS)
          for (let w = 0; w < WRITERS; w++) {
            const mine = messages.filter((t) => t.startsWith(`w${w} `)).map((t) => Number(t.split(" ")[1]))
            assert.deepStrictEqual(mine, Array.from({ length: APPENDS }, (_, k) => k), `writer ${w} in order`)
          }
          // the ids each writer was acknowledged are the stored ones
          const stored = new Map(loaded.entries.flatMap((e) => e.type === "message" ? [[e.message.content, e.id]] : []))
          for (const [text, [id]] of results) assert.strictEqual(stored.get(text), id, text)
          const byTries = [1, 2, 3].map((n) => counts.filter((c) => c === n).length).join("/")
          console.log(`contention on ${database.name}: ${WRITERS} × ${APPENDS} appends in 1/2/3 tries: ${byTries}`)
        }),
      300_000
    )
  })
}
