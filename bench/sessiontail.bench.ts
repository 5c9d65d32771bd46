/**
 * Resume from the log's tail (issue 29): opening a 50,000-entry session with 20 compactions, on the JSONL store and
 * on the SQL store (the embedded PGlite of the tests, through its loopback server and `@effect/sql-pg`), against
 * parsing the entries after its last boundary (`decodeLine` of each line: checksum, JSON.parse, schema and message
 * validation) and against today's full fold (every line read and folded), in one mitata run.
 *
 * - jsonl: `readJsonl({ tail: true })` (read the file, walk back from its end, decode and fold the tail, check the
 *   boundary's view hash) vs `readJsonl({})`.
 * - sql: `readSession(id, { tail: true })` (boundary rows by their index, the tail's rows, the same fold) vs
 *   `readSession(id)`.
 *
 * Run: `npx node --expose-gc bench/sessiontail.bench.ts`
 */
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as NodePath from "@effect/platform-node/NodePath"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import * as SqlClient from "effect/sql/SqlClient"
import { bench, do_not_optimize, group, run, summary } from "mitata"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import process from "node:process"
import { isBoundaryLine, tailOf } from "../src/internal/sessionTail.ts"
import { decodeLine } from "../src/SessionEntry.ts"
import { readSession } from "../src/SessionLog.ts"
import { SessionStore } from "../src/SessionStore.ts"
import { readJsonl } from "../src/SessionStoreJsonl.ts"
import { SessionStoreSql } from "../src/SessionStoreSql.ts"
import { startEmbeddedPg } from "../test/fixtures/EmbeddedPg.ts"
import { tailSession } from "./tailSession.ts"

const lines = tailSession()
const stored = lines.map((line, i) => ({ seq: i + 1, line }))
const boundaries = stored.filter((e) => isBoundaryLine(e.line))
const lastBoundary = boundaries.at(-1)!.seq
const afterBoundary = lines.slice(lastBoundary)
const tailFrom = tailOf(stored)[0]!.seq

const directory = mkdtempSync(join(tmpdir(), "sessiontail-bench-"))
writeFileSync(join(directory, "big.jsonl"), lines.map((l) => `${l}\n`).join(""))
const platform = Layer.mergeAll(NodeFileSystem.layer, NodePath.layer)
const jsonlTail = readJsonl({ directory, sessionId: "big", tail: true }).pipe(Effect.provide(platform))
const jsonlFull = readJsonl({ directory, sessionId: "big" }).pipe(Effect.provide(platform))

if (process.env.BENCH_TAIL_FILE !== undefined) {
  // only write the session (for a closer look at one side)
  writeFileSync(process.env.BENCH_TAIL_FILE, lines.map((l) => `${l}\n`).join(""))
  process.exit(0)
}
const pg = await startEmbeddedPg()
const sqlLayer = SessionStoreSql.layerPg({ url: pg.url })
// one store and client for every call, open until the process exits
const sql = await Effect.runPromise(Effect.flatMap(Scope.make(), (scope) => Layer.buildWithScope(sqlLayer, scope)))
await Effect.runPromise(
  Effect.gen(function* () {
    const client = yield* SqlClient.SqlClient
    const store = yield* SessionStore
    yield* Effect.scoped(store.acquire("big"))
    for (let i = 0; i < stored.length; i += 2000) {
      const rows = stored.slice(i, i + 2000).map((e) => ({
        session_id: "big",
        seq: e.seq,
        entry_id: JSON.parse(e.line).id as string,
        line: e.line,
        boundary: isBoundaryLine(e.line)
      }))
      yield* client`INSERT INTO compaction_entries ${client.insert(rows as [typeof rows[0], ...typeof rows])}`
    }
    yield* client`UPDATE compaction_sessions SET last_seq = ${stored.length} WHERE session_id = 'big'`
  }).pipe(Effect.provide(sql))
)
const sqlTail = readSession("big", { tail: true }).pipe(Effect.provide(sql))
const sqlFull = readSession("big").pipe(Effect.provide(sql))

const check = await Effect.runPromise(jsonlTail)
const checkSql = await Effect.runPromise(sqlTail)
const full = await Effect.runPromise(jsonlFull)
if (JSON.stringify([check.view, check.entryIds, check.seq]) !== JSON.stringify([full.view, full.entryIds, full.seq])) {
  throw new Error("the tail's fold is not the full fold")
}
if (JSON.stringify(checkSql.view) !== JSON.stringify(full.view) || checkSql.verifiedFrom !== tailFrom) {
  throw new Error("the SQL tail's fold is not the full fold")
}
console.log(
  `session: ${lines.length} entries, ${(readFileSync(join(directory, "big.jsonl")).length / 1e6).toFixed(1)} MB, ` +
    `${boundaries.length} compactions, last boundary at ${lastBoundary}, tail from ${tailFrom} ` +
    `(${lines.length - lastBoundary} entries after the boundary, ${lines.length - tailFrom + 1} read), ` +
    `view ${full.view.length} messages`
)

group("open a 50k-entry session with 20 compactions", () => {
  summary(() => {
    bench("decodeLine of each entry after the last boundary (baseline)", () => {
      do_not_optimize(afterBoundary.map(decodeLine))
    }).baseline(true)
    bench("jsonl: readJsonl tail", function* () {
      yield async () => do_not_optimize(await Effect.runPromise(jsonlTail))
    })
    bench("sql: readSession tail", function* () {
      yield async () => do_not_optimize(await Effect.runPromise(sqlTail))
    })
    bench("jsonl: readJsonl full fold (today)", function* () {
      yield async () => do_not_optimize(await Effect.runPromise(jsonlFull))
    })
    bench("sql: readSession full fold (today)", function* () {
      yield async () => do_not_optimize(await Effect.runPromise(sqlFull))
    })
  })
})

await run()
rmSync(directory, { recursive: true, force: true })
await pg.stop()
process.exit(0)
