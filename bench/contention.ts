/**
 * Appends under contention on the SQL store, a measurement run by hand (not part of `npm run bench`: it needs a
 * PostgreSQL server):
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test node bench/contention.ts
 *   WORKERS=4 APPENDS=100 DATABASE_URL=… node bench/contention.ts
 *
 * `WORKERS` (default 8) worker processes (`test/fixtures/session-writer.ts sql-append`, each with its own connection
 * pool) append `APPENDS` (default 50) messages each, one at a time and as fast as they can, to one session in a schema
 * of the run's own (dropped at the end). Prints the wall time, each worker's own time, the appends answered `Conflict`
 * (each one a catch-up and another try), the workers that failed, and whether the session holds each message once.
 * Then the same in this one process (`WORKERS` logs, each with a pool of its own), where each append is timed: the
 * median, 99th percentile and longest append, and the most store tries one append took.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as SqlClient from "effect/sql/SqlClient"
import { spawn } from "node:child_process"
import process from "node:process"
import { fileURLToPath } from "node:url"
import { readSession, SessionLog } from "../src/SessionLog.ts"
import { SessionStore, type SessionStoreShape } from "../src/SessionStore.ts"
import { SessionStoreSql } from "../src/SessionStoreSql.ts"

const url = process.env["DATABASE_URL"] ?? ""
if (url === "") throw new Error("set DATABASE_URL to a PostgreSQL server")
const WORKERS = Number(process.env["WORKERS"] ?? 8)
const APPENDS = Number(process.env["APPENDS"] ?? 50)
const writer = fileURLToPath(new URL("../test/fixtures/session-writer.ts", import.meta.url))
const schema = `contention_${process.pid}`
const sessionId = "contended"

const admin = (statement: string) =>
  Effect.runPromise(
    Effect.flatMap(Effect.service(SqlClient.SqlClient), (sql) => sql.unsafe(statement)).pipe(
      Effect.provide(SessionStoreSql.layerPg({ url, migrate: false }))
    )
  )
const store = SessionStoreSql.layerPg({ url, startupParameters: { search_path: schema } })

/** One worker process: its exit code and its stats line. */
const work = (w: number) =>
  new Promise<{ readonly code: number | null; readonly out: string }>((resolve) => {
    const child = spawn(
      process.execPath,
      [writer, "sql-append", url, schema, sessionId, String(APPENDS), `w${w}`],
      { stdio: ["ignore", "pipe", "inherit"] }
    )
    let out = ""
    child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()))
    child.once("exit", (code) => resolve({ code, out }))
  })

await admin(`CREATE SCHEMA ${schema}`)
try {
  // the tables (the migrations) and the session, before the workers start
  await Effect.runPromise(
    Effect.flatMap(Effect.service(SessionLog), () => Effect.void).pipe(
      Effect.provide(SessionLog.layer({ sessionId }).pipe(Layer.provide(store)))
    )
  )
  const started = Date.now()
  const results = await Promise.all(Array.from({ length: WORKERS }, (_, w) => work(w)))
  const wall = Date.now() - started
  const failed = results.filter((r) => r.code !== 0).map((r) => r.out.trim())
  const stats = results.flatMap((r) => {
    const line = r.out.split("\n").find((l) => l.startsWith("stats "))
    return line === undefined ? [] : [JSON.parse(line.slice(6)) as { readonly conflicts: number; readonly ms: number }]
  })
  const loaded = await Effect.runPromise(readSession(sessionId).pipe(Effect.provide(store)))
  const messages = loaded.entries.flatMap((e) => e.type === "message" ? [e.message.content as string] : [])
  const once = new Set(messages).size === messages.length
  const ms = stats.map((s) => s.ms).sort((a, b) => a - b)
  console.log(
    `${WORKERS} workers × ${APPENDS} appends to one session: ${(wall / 1000).toFixed(1)} s wall; ` +
      `${stats.length} workers done in ${(ms[0]! / 1000).toFixed(1)}–${(ms.at(-1)! / 1000).toFixed(1)} s of their ` +
      `own, with ${stats.reduce((n, s) => n + s.conflicts, 0)} conflicts; ${failed.length} failed` +
      `${failed.length === 0 ? "" : ` (${failed[0]})`}; ${messages.length} messages stored, each once: ${once}`
  )
  if (failed.length > 0 || !once) process.exitCode = 1

  // in this process: each append timed, the store's tries per append counted (by its first entry id)
  const tries = new Map<string, number>()
  const counted = Layer.effect(
    SessionStore,
    Effect.map(Effect.service(SessionStore), (inner): SessionStoreShape => ({
      ...inner,
      append: (id, expectedSeq, entries, options) =>
        Effect.suspend(() => {
          tries.set(entries[0]!.entryId, (tries.get(entries[0]!.entryId) ?? 0) + 1)
          return inner.append(id, expectedSeq, entries, options)
        })
    }))
  ).pipe(Layer.provide(store), Layer.fresh)
  const latencies: Array<number> = []
  const inProcess = (w: number) =>
    Effect.gen(function* () {
      const log = yield* SessionLog
      for (let k = 0; k < APPENDS; k++) {
        const t = performance.now()
        yield* log.append([{ role: "user", content: `p${w} ${k}` }])
        latencies.push(performance.now() - t)
      }
    }).pipe(Effect.provide(SessionLog.layer({ sessionId: "in-process" }).pipe(Layer.provide(counted), Layer.fresh)))
  const inStarted = Date.now()
  await Effect.runPromise(
    Effect.all(Array.from({ length: WORKERS }, (_, w) => inProcess(w)), { concurrency: "unbounded" })
  )
  const inWall = Date.now() - inStarted
  latencies.sort((a, b) => a - b)
  const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))]!.toFixed(0)
  console.log(
    `in one process: ${WORKERS} logs × ${APPENDS} appends in ${(inWall / 1000).toFixed(1)} s; an append took ` +
      `${at(0.5)} ms (median), ${at(0.99)} ms (p99), ${latencies.at(-1)!.toFixed(0)} ms (longest); ` +
      `the most store tries for one append: ${Math.max(...tries.values())}`
  )
  if (!once) process.exitCode = 1
} finally {
  await admin(`DROP SCHEMA ${schema} CASCADE`)
}
