/**
 * The SQL store on each database of `fixtures/Pg.ts` (the embedded PGlite always, the server at DATABASE_URL when
 * set; a schema of its own per run): 8 worker processes × 50
 * appends to one session plus a compactor, a worker SIGKILLed inside a transaction, and the connection cut before
 * and after an INSERT reaches the server (through a loopback TCP proxy), retried with the same entry ids; and 12
 * workers booting at once on an empty schema, each running the migrations.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Metric } from "effect"
import * as SqlClient from "effect/sql/SqlClient"
import { type ChildProcess, spawn } from "node:child_process"
import * as net from "node:net"
import process from "node:process"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll, test } from "vitest"
import { alreadyWrittenCounter, readSession, SessionLog } from "../src/SessionLog.ts"
import { SessionStoreSql } from "../src/SessionStoreSql.ts"
import { databases, makeSchema } from "./fixtures/Pg.ts"

const writerScript = fileURLToPath(new URL("./fixtures/session-writer.ts", import.meta.url))
const isDeno = typeof (globalThis as { readonly Deno?: unknown }).Deno !== "undefined"
const spawnWriter = (args: ReadonlyArray<string>): ChildProcess =>
  isDeno
    ? spawn(process.execPath, ["run", "-A", writerScript, ...args], { stdio: ["ignore", "pipe", "inherit"] })
    : spawn(process.execPath, [writerScript, ...args], { stdio: ["ignore", "pipe", "inherit"] })

/** The child's stdout lines once it exits, and its exit code. */
const finished = (child: ChildProcess): Promise<{ readonly code: number | null; readonly lines: Array<string> }> =>
  new Promise((resolve) => {
    let out = ""
    child.stdout!.on("data", (chunk: Buffer) => (out += chunk.toString()))
    child.once("exit", (code) => resolve({ code, lines: out.split("\n").filter((l) => l !== "") }))
  })

const firstLine = (child: ChildProcess, wanted: string): Promise<void> =>
  new Promise((resolve, reject) => {
    let out = ""
    const onData = (chunk: Buffer) => {
      out += chunk.toString()
      if (out.includes(wanted)) {
        child.stdout!.off("data", onData)
        resolve()
      }
    }
    child.stdout!.on("data", onData)
    child.once("exit", (code) => reject(new Error(`child exited with ${code} before "${wanted}": ${out}`)))
  })

/**
 * A loopback proxy to PostgreSQL that, once, cuts the connection on the first client packet containing `pattern`:
 * before forwarding it (`after: false`) or right after (`after: true`, so the server gets it but the reply is lost).
 */
const cuttingProxy = (databaseUrl: string, pattern: string, after: boolean) =>
  Effect.acquireRelease(
    Effect.callback<{ readonly port: number; readonly server: net.Server; readonly cut: () => boolean }>((resume) => {
      const target = new URL(databaseUrl)
      let cut = false
      const server = net.createServer((client) => {
        const upstream = net.connect(Number(target.port || 5432), target.hostname)
        let severed = false
        upstream.on("data", (d) => {
          if (!severed) client.write(d)
        })
        upstream.on("error", () => client.destroy())
        client.on("error", () => upstream.destroy())
        client.on("close", () => upstream.destroy())
        upstream.on("close", () => client.destroy())
        client.on("data", (d: Buffer) => {
          if (!cut && d.includes(pattern)) {
            cut = true
            severed = true // the reply never reaches the client
            if (after) upstream.write(d, () => client.destroy())
            else client.destroy()
            return
          }
          upstream.write(d)
        })
      })
      server.listen(0, "127.0.0.1", () => {
        const port = (server.address() as net.AddressInfo).port
        resume(Effect.succeed({ port, server, cut: () => cut }))
      })
    }),
    ({ server }) => Effect.sync(() => server.close())
  )

/**
 * 8 worker processes × 50 appends to one session and a compactor of 6 compactions, on the database `database` (its
 * schema `pg`), with a worker SIGKILLed inside a transaction: every append lands once and in its worker's order.
 */
const multiWorker = (pg: Awaited<ReturnType<typeof makeSchema>>, databaseUrl: string) => {
  const withPg = <A, E>(
    effect: Effect.Effect<A, E, SqlClient.SqlClient | import("../src/SessionStore.ts").SessionStore>
  ) => Effect.provide(effect, Layer.succeedContext(pg.context))
  return Effect.gen(function* () {
    const { schema } = pg
    const sessionId = "shared"
    yield* withPg(
      Effect.flatMap(Effect.service(SessionLog), () => Effect.void).pipe(
        Effect.provide(SessionLog.layer({ sessionId }))
      )
    )
    const started = Date.now()
    const holder = spawnWriter(["sql-hold", databaseUrl, schema, sessionId])
    yield* Effect.promise(() => firstLine(holder, "in-transaction"))
    const workers = Array.from(
      { length: 8 },
      (_, w) => spawnWriter(["sql-append", databaseUrl, schema, sessionId, "50", `w${w}`])
    )
    const compactor = spawnWriter(["sql-compact", databaseUrl, schema, sessionId, "6"])
    const done = [...workers, compactor].map(finished)
    // the workers wait on the held row lock; the kill releases it, and the held row vanishes
    yield* Effect.sleep("300 millis")
    holder.kill("SIGKILL")
    const results = yield* Effect.promise(() => Promise.all(done))
    const elapsed = Date.now() - started
    for (const r of results) assert.strictEqual(r.code, 0, r.lines.join("\n"))
    const stats = results.map((r) => JSON.parse(r.lines.find((l) => l.startsWith("stats "))!.slice(6)))
    const loaded = yield* withPg(readSession(sessionId))
    const messages = loaded.entries.flatMap((e) => e.type === "message" ? [e.message.content as string] : [])
    assert.strictEqual(messages.length, 400, "every append landed once")
    assert.strictEqual(new Set(messages).size, 400)
    for (let w = 0; w < 8; w++) {
      const mine = messages.filter((t) => t.startsWith(`w${w} `)).map((t) => Number(t.split(" ")[1]))
      assert.deepStrictEqual(mine, Array.from({ length: 50 }, (_, k) => k), `worker ${w} in order`)
    }
    assert.strictEqual(loaded.entries.filter((e) => e.type === "compaction").length, 6)
    const rows = yield* withPg(
      Effect.flatMap(
        Effect.service(SqlClient.SqlClient),
        (sql) =>
          sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM compaction_entries
      WHERE entry_id = 'held-by-a-killed-worker'`
      )
    )
    assert.strictEqual(rows[0]!.n, 0, "the killed worker's row vanished")
    const conflicts = stats.reduce((n, s) => n + s.conflicts, 0)
    const retried = stats.reduce((n, s) => n + s.alreadyWritten, 0)
    console.log(
      `multi-worker: 8 workers × 50 appends + 6 compactions in ${elapsed} ms (workers' own time ` +
        `${stats.map((s) => s.ms).join("/")} ms), ${conflicts} conflicts (each a catch-up and a retry), ` +
        `${retried} already-written retries, ${loaded.entries.length} entries; the worst append took ` +
        `${Math.max(...stats.map((s) => s.maxTries))} tries, ${Math.max(...stats.map((s) => s.maxMs))} ms`
    )
  })
}

// The workers of this test mostly wait their turn (on PGlite behind others' looks): the databases' runs overlap.
describe("SessionStoreSql: 8 worker processes × 50 appends on each database at once", () => {
  const schemas: Array<Awaited<ReturnType<typeof makeSchema>>> = []
  beforeAll(async () => {
    schemas.push(...await Promise.all(databases.map((database) => makeSchema(database))))
  }, 180_000)
  afterAll(async () => {
    await Promise.all(schemas.map((pg) => pg.drop()))
  })
  databases.forEach((database, d) => {
    test.concurrent(
      `on ${database.name}: 8 worker processes × 50 appends and a compactor, with a worker SIGKILLed inside a transaction`,
      () => Effect.runPromise(multiWorker(schemas[d]!, database.url)),
      180_000 // PGlite serializes the 400 appends; each append waits its turn (on PGlite behind others' looks)
    )
  })
})

for (const database of databases) {
  describe(`SessionStoreSql on ${database.name}`, () => {
    const databaseUrl = database.url
    let pg: Awaited<ReturnType<typeof makeSchema>> | undefined
    beforeAll(async () => {
      pg = await makeSchema(database)
    }, 180_000)
    afterAll(async () => {
      await pg?.drop()
    })

    const withPg = <A, E>(
      effect: Effect.Effect<A, E, SqlClient.SqlClient | import("../src/SessionStore.ts").SessionStore>
    ) => Effect.provide(effect, Layer.succeedContext(pg!.context))

    for (const after of [false, true]) {
      it.live(
        `the connection cut ${after ? "after" : "before"} the INSERT reaches the server: exactly one row`,
        () =>
          Effect.gen(function* () {
            const proxy = yield* cuttingProxy(databaseUrl, after ? "COMMIT" : "INSERT INTO compaction_entries", after)
            const url = `postgres://postgres@127.0.0.1:${proxy.port}/${new URL(databaseUrl).pathname.slice(1)}`
            const sessionId = `cut-${after ? "after" : "before"}`
            const before = (yield* Metric.value(alreadyWrittenCounter)).count
            const ids = yield* Effect.flatMap(
              Effect.service(SessionLog),
              (log) => log.append([{ role: "user", content: "once" }])
            ).pipe(
              Effect.provide(
                SessionLog.layer({ sessionId }).pipe(
                  Layer.provide(
                    SessionStoreSql.layerPg({ url, startupParameters: { search_path: pg!.schema }, migrate: false })
                  )
                )
              )
            )
            assert.isTrue(proxy.cut(), "the proxy cut the connection")
            const rows = yield* withPg(
              Effect.flatMap(Effect.service(SqlClient.SqlClient), (sql) =>
                sql<
                  { readonly entry_id: string }
                >`SELECT entry_id FROM compaction_entries WHERE session_id = ${sessionId}`)
            )
            assert.deepStrictEqual(rows.map((r) => r.entry_id), [...ids])
            const retried = (yield* Metric.value(alreadyWrittenCounter)).count - before
            assert.strictEqual(retried, after ? 1 : 0, after ? "the retry found its row" : "the retry wrote the row")
          }).pipe(Effect.scoped),
        180_000
      )
    }

    it.live(
      "12 workers booting at once on an empty schema: every layer builds, each migration runs once, all can append",
      () =>
        Effect.gen(function* () {
          const schema = `${pg!.schema}_boot`
          yield* withPg(
            Effect.flatMap(Effect.service(SqlClient.SqlClient), (sql) => sql.unsafe(`CREATE SCHEMA ${schema}`))
          )
          const worker = (w: number) =>
            Effect.flatMap(Effect.service(SessionLog), (log) => log.append([{ role: "user", content: `boot ${w}` }]))
              .pipe(
                Effect.provide(
                  SessionLog.layer({ sessionId: `boot-${w}` }).pipe(
                    Layer.provide(
                      SessionStoreSql.layerPg({ url: databaseUrl, startupParameters: { search_path: schema } })
                    )
                  )
                ),
                Effect.exit
              )
          const exits = yield* Effect.all(Array.from({ length: 12 }, (_, w) => worker(w)), { concurrency: "unbounded" })
          const counts = yield* withPg(Effect.flatMap(Effect.service(SqlClient.SqlClient), (sql) =>
            Effect.all([
              sql.unsafe<{ readonly n: number; readonly ids: number }>(
                `SELECT count(*)::int AS n, count(DISTINCT migration_id)::int AS ids FROM ${schema}.compaction_migrations`
              ),
              sql.unsafe<{ readonly n: number }>(`SELECT count(*)::int AS n FROM ${schema}.compaction_entries`)
            ])))
          yield* withPg(
            Effect.flatMap(Effect.service(SqlClient.SqlClient), (sql) => sql.unsafe(`DROP SCHEMA ${schema} CASCADE`))
          )
          for (const exit of exits) assert.isTrue(exit._tag === "Success", String(exit))
          // three migrations (0001 the tables, 0002 the boundary index, 0003 the queue of appends), each recorded once
          assert.deepStrictEqual([counts[0][0]!.n, counts[0][0]!.ids], [3, 3], "each migration is recorded once")
          assert.isAtLeast(counts[1][0]!.n, 12, "every worker appended")
        }),
      180_000
    )
  })
}

describe("SessionStoreSql.layerPg on a server that is not there", () => {
  it.live(
    "the open fails with Io naming the driver's own cause (ECONNREFUSED and the address), not only the pool's",
    () =>
      Effect.gen(function* () {
        // a port nothing listens on: taken from the OS, then closed
        const port = yield* Effect.promise(() =>
          new Promise<number>((resolve) => {
            const server = net.createServer().listen(0, "127.0.0.1", () => {
              const { port } = server.address() as net.AddressInfo
              server.close(() => resolve(port))
            })
          })
        )
        const error = yield* Effect.flip(
          Effect.flatMap(Effect.service(SessionLog), (log) => log.append([{ role: "user", content: "never" }])).pipe(
            Effect.provide(
              SessionLog.layer({ sessionId: "absent" }).pipe(
                Layer.provide(SessionStoreSql.layerPg({ url: `postgres://postgres@127.0.0.1:${port}/test` }))
              )
            )
          )
        )
        assert.strictEqual(error._tag, "SessionLogError")
        assert.strictEqual(error.reason, "Io")
        assert.strictEqual(error.code, "ECONNREFUSED")
        assert.include(error.detail, `migrations: `)
        assert.include(error.detail, `ECONNREFUSED 127.0.0.1:${port}`)
        assert.notInclude(error.message, "session ", "no session is named where none was asked for")
      }),
    60_000
  )
})
