/**
 * The SQL store through PostgreSQL outages, on a cluster of this file's own (`fixtures/PgCluster.ts`: never the shared
 * server): writers append to one session while the server is stopped (fast shutdown: `57P01` to every session, then
 * `ECONNREFUSED`, then `57P03` while it starts), while every backend is terminated (`57P01`), and while its postmaster
 * is SIGKILLed (lost connections, crash recovery); every append completes once the server is back, and the session
 * holds each message exactly once, in each writer's order. A server gone for longer than the deadline gives
 * `Unavailable`, naming the cause; the same log appends again once the server is back.
 */
import { type Duration, Effect, Layer } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import type { Message } from "../src/Message.ts"
import { readSession, SessionLog, type SessionLogError } from "../src/SessionLog.ts"
import { SessionStoreSql } from "../src/SessionStoreSql.ts"
import { createPgCluster, type PgCluster } from "./fixtures/PgCluster.ts"

const WRITERS = 4
const APPENDS = 60

let cluster: PgCluster
beforeAll(async () => {
  cluster = await createPgCluster()
  // the tables, once, as a deploy step would
  await Effect.runPromise(
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      yield* sql`SELECT 1`
    }).pipe(Effect.provide(SessionStoreSql.layerPg({ url: cluster.url })))
  )
})
afterAll(async () => {
  await cluster?.remove()
})

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** The log of `sessionId` on the cluster, each writer with its own connection pool (as separate workers have). */
const logLayer = (sessionId: string, retryDeadline: Duration.Input) =>
  SessionLog.layer({ sessionId, retryDeadline }).pipe(
    Layer.provide(SessionStoreSql.layerPg({ url: cluster.url, migrate: false })),
    Layer.fresh
  )

const stored = (sessionId: string) =>
  Effect.runPromise(
    readSession(sessionId).pipe(Effect.provide(SessionStoreSql.layerPg({ url: cluster.url, migrate: false })))
  )

const text = (m: Message) => typeof m.content === "string" ? m.content : JSON.stringify(m.content)

describe("SessionStoreSql through PostgreSQL outages (a cluster of the test's own)", () => {
  it("writers append through a fast shutdown, terminated backends and a killed postmaster: nothing lost or doubled", async () => {
    const sessionId = `outage-${process.pid}`
    let appended = 0
    const writer = (w: number) =>
      Effect.runPromise(
        Effect.gen(function* () {
          const log = yield* SessionLog
          for (let k = 0; k < APPENDS; k++) {
            yield* log.append([{ role: "user", content: `w${w} ${k}` }])
            appended++
          }
        }).pipe(Effect.provide(logLayer(sessionId, "20 seconds")))
      )
    const writers = Array.from({ length: WRITERS }, (_, w) => writer(w))
    let over = false
    const settled = Promise.allSettled(writers).finally(() => (over = true))
    const total = WRITERS * APPENDS
    /** Waits until `n` appends are acknowledged (or every writer stopped, done or failed). */
    const reached = async (n: number) => {
      while (appended < n && !over) await sleep(5)
      return appended
    }
    const faults: Array<{ readonly fault: string; readonly at: number }> = []
    faults.push({ fault: "fast shutdown", at: await reached(30) })
    await cluster.stopFast()
    await sleep(800)
    await cluster.start()
    faults.push({ fault: "backends terminated", at: await reached(appended + 30) })
    await Effect.runPromise(
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        yield* sql`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`
      }).pipe(Effect.provide(SessionStoreSql.layerPg({ url: cluster.url, migrate: false })))
    )
    faults.push({ fault: "postmaster killed", at: await reached(appended + 30) })
    cluster.killPostmaster()
    await sleep(500)
    await cluster.start()
    const results = await settled
    for (const r of results) {
      assert.strictEqual(r.status, "fulfilled", r.status === "rejected" ? String(r.reason) : "")
    }
    // every fault struck while appends were still to come: otherwise this test proves nothing
    for (const f of faults) assert.isBelow(f.at, total, `${f.fault} came after the last append`)
    const loaded = await stored(sessionId)
    assert.deepStrictEqual(loaded.issues, [])
    const texts = loaded.view.map(text)
    assert.strictEqual(texts.length, total, "one stored message per acknowledged append")
    assert.strictEqual(new Set(texts).size, total, "no message stored twice")
    for (let w = 0; w < WRITERS; w++) {
      const own = texts.filter((t) => t.startsWith(`w${w} `)).map((t) => Number(t.split(" ")[1]))
      assert.deepStrictEqual(own, Array.from({ length: APPENDS }, (_, k) => k), `writer ${w}'s messages in order`)
    }
  })

  it("a server gone longer than the deadline: Unavailable naming the cause; the log appends again once it is back", async () => {
    const sessionId = `outage-deadline-${process.pid}`
    const outcome = await Effect.runPromise(
      Effect.gen(function* () {
        const log = yield* SessionLog
        yield* log.append([{ role: "user", content: "before" }])
        yield* Effect.promise(() => cluster.stopFast())
        const failed = yield* Effect.flip(log.append([{ role: "user", content: "during" }]))
        yield* Effect.promise(() => cluster.start())
        yield* log.append([{ role: "user", content: "after" }])
        return { failed }
      }).pipe(Effect.provide(logLayer(sessionId, "1500 millis")))
    )
    const error: SessionLogError = outcome.failed
    assert.strictEqual(error.reason, "Unavailable")
    assert.isFalse(error.isRetryable)
    assert.isTrue((error.cause as SessionLogError).isRetryable, "its cause is the last transient failure")
    assert.match(error.message, /append: the store stayed unavailable for [0-9.]+ s \([0-9]+ tries, deadline 1.5 s\)/)
    assert.match(error.code ?? "", /^(ECONNREFUSED|ECONNRESET|57P0[123]|08[0-9A-Z]{3}|ConnectionError)$/)
    const tried = Number(/unavailable for ([0-9.]+) s/.exec(error.message)![1])
    assert.isAtLeast(tried, 1.5, "it tried until the deadline")
    const loaded = await stored(sessionId)
    assert.deepStrictEqual(loaded.view.map(text), ["before", "after"], "the failed append wrote nothing")
  })
})
