/**
 * Resume from the log's tail (issue 29): opening a 50,000-entry session with 20 compactions, on the JSONL store and
 * on the SQL store (the PostgreSQL server at `DATABASE_URL` when it is set, in a schema of its own, else the embedded
 * PGlite of the tests through its loopback server; `@effect/sql-pg` either way), against parsing the entries after
 * its last boundary (`decodeLine` of each line: checksum, JSON.parse, schema and message validation) and against
 * today's full fold (every line read and folded), in one mitata run.
 *
 * - jsonl: `readJsonl({ tail: true })` (the tail index `big.tail` its writer left, checked against the file, then the
 *   file from the tail's first line on, decoded and folded, the boundary's view hash checked) vs `readJsonl({})`; and
 *   the writer's open (`layerSessionLog({ tail: true })`: the lock, the store's acquire from the index, the tail read
 *   and fold, the lock released).
 * - sql: `readSession(id, { tail: true })` (boundary rows by their index, the tail's rows, the same fold) vs
 *   `readSession(id)`; and the writer's open (`SessionLog.layer({ tail: true })`).
 * - conversation: a worker's whole open, `Conversation.layerLogged` over the writer's tail open on each store (the
 *   state from the last boundary's checkpoint and the entries after it), vs the same over a log opened in full (today:
 *   every line read, folded, and every entry replayed into the state).
 *
 * Run: `npx node --expose-gc bench/sessiontail.bench.ts` (`DATABASE_URL=postgres://127.0.0.1:5432/test` for the
 * server)
 */
import * as Effect from "effect/Effect"
import { bench, do_not_optimize, group, run, summary } from "mitata"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import process from "node:process"
import { isBoundaryLine, tailOf } from "../src/internal/sessionTail.ts"
import { decodeLine } from "../src/SessionEntry.ts"
import { startEmbeddedPg } from "../test/fixtures/EmbeddedPg.ts"
import { checkConversationResume, checkTailFold, conversationOpen, jsonlOpens, tailSession } from "./tailSession.ts"
import { sqlTailSession } from "./tailSql.ts"

const directory = mkdtempSync(join(tmpdir(), "sessiontail-bench-"))
const lines = await tailSession(directory)
const stored = lines.map((line, i) => ({ seq: i + 1, line }))
const boundaries = stored.filter((e) => isBoundaryLine(e.line))
const lastBoundary = boundaries.at(-1)!.seq
const afterBoundary = lines.slice(lastBoundary)
const tailFrom = tailOf(stored)[0]!.seq

const jsonl = jsonlOpens(directory)
const jsonlTail = jsonl.tail
const jsonlFull = jsonl.full
/** The writer's open from the tail: what a worker does before its first step. */
const jsonlWriter = jsonl.writer

const serverUrl = process.env.DATABASE_URL
const schema = `bench_tail_${process.pid}`
const pg = serverUrl === undefined || serverUrl === "" ? await startEmbeddedPg() : undefined
const sql = await sqlTailSession(pg?.url ?? serverUrl!, lines, pg === undefined ? schema : undefined)
const sqlTail = sql.tail
const sqlFull = sql.full
const sqlWriter = sql.writer

/** A worker's whole open: the conversation resumed on the writer's log, from the tail or in full. */
const conversationJsonl = conversationOpen(jsonl.log(true))
const conversationJsonlFull = conversationOpen(jsonl.log(false))
const conversationSql = conversationOpen(sql.log)

const full = await Effect.runPromise(jsonlFull)
const tailLoaded = await Effect.runPromise(jsonlTail)
for (
  const [what, open] of [["jsonl", conversationJsonl], ["sql", conversationSql], [
    "jsonl full",
    conversationJsonlFull
  ]] as const
) checkConversationResume(what, await Effect.runPromise(open), tailLoaded, full)
for (
  const [what, open] of [["jsonl", jsonlTail], ["sql", sqlTail], ["jsonl writer", jsonlWriter], [
    "sql writer",
    sqlWriter
  ]] as const
) {
  const l = await Effect.runPromise(open)
  checkTailFold(what, l, full)
  if (l.verifiedFrom !== tailFrom) throw new Error(`the ${what} tail starts at ${l.verifiedFrom}, not ${tailFrom}`)
}
console.log(
  `session: ${lines.length} entries, ${(readFileSync(join(directory, "big.jsonl")).length / 1e6).toFixed(1)} MB, ` +
    `${boundaries.length} compactions, last boundary at ${lastBoundary}, tail from ${tailFrom} ` +
    `(${lines.length - lastBoundary} entries after the boundary, ${lines.length - tailFrom + 1} read), ` +
    `view ${full.view.length} messages; sql on ${
      pg === undefined ? `the server at DATABASE_URL (schema ${schema})` : "the embedded PGlite"
    }`
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
    bench("jsonl: the writer's open from the tail (lock, acquire, fold)", function* () {
      yield async () => do_not_optimize(await Effect.runPromise(jsonlWriter))
    })
    bench("sql: the writer's open from the tail", function* () {
      yield async () => do_not_optimize(await Effect.runPromise(sqlWriter))
    })
    bench("jsonl: Conversation.layerLogged open from the tail (state resumed)", function* () {
      yield async () => do_not_optimize(await Effect.runPromise(conversationJsonl))
    })
    bench("sql: Conversation.layerLogged open from the tail", function* () {
      yield async () => do_not_optimize(await Effect.runPromise(conversationSql))
    })
    bench("jsonl: Conversation.layerLogged open in full (today)", function* () {
      yield async () => do_not_optimize(await Effect.runPromise(conversationJsonlFull))
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
await sql.close()
await pg?.stop()
process.exit(0)
