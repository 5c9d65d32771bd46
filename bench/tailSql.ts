/**
 * Issue 29's resume session in the SQL store, for `bench/sessiontail.bench.ts` and `bench/ci.ts`: a schema of its own
 * on the PostgreSQL server at `url` (dropped by `close`), the session's lines inserted as `big` the way the store's
 * appends store them (boundary rows flagged), then `ANALYZE`; and its opens: from the tail (a read, the writer's, and
 * the writer's log for a conversation) and in full.
 */
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import * as SqlClient from "effect/sql/SqlClient"
import { isBoundaryLine } from "../src/internal/sessionTail.ts"
import type { Loaded } from "../src/SessionEntry.ts"
import { readSession, SessionLog } from "../src/SessionLog.ts"
import { SessionStore } from "../src/SessionStore.ts"
import { SessionStoreSql } from "../src/SessionStoreSql.ts"

/** The SQL session's opens, and `close` (the client closed, the schema dropped). */
export interface SqlTail {
  readonly tail: Effect.Effect<Loaded, unknown>
  readonly writer: Effect.Effect<Loaded, unknown>
  readonly full: Effect.Effect<Loaded, unknown>
  /** The writer's log from the tail (a fresh layer: each use opens it anew), for a conversation to resume on. */
  readonly log: Layer.Layer<SessionLog, unknown>
  readonly close: () => Promise<void>
}

/**
 * Stores `lines` as session `big` in a new schema at `url` (with `schema`, else the database's own tables, for a
 * server of its own such as the embedded PGlite) and returns its opens.
 */
export const sqlTailSession = async (
  url: string,
  lines: ReadonlyArray<string>,
  schema?: string
): Promise<SqlTail> => {
  const admin = (statement: string) =>
    Effect.runPromise(
      Effect.flatMap(Effect.service(SqlClient.SqlClient), (client) => client.unsafe(statement)).pipe(
        Effect.provide(SessionStoreSql.layerPg({ url, migrate: false }))
      )
    )
  if (schema !== undefined) await admin(`CREATE SCHEMA ${schema}`)
  const layer = SessionStoreSql.layerPg({
    url,
    ...(schema !== undefined ? { startupParameters: { search_path: schema } } : {})
  })
  // one store and client for every call, open until `close`
  const scope = await Effect.runPromise(Scope.make())
  const context = await Effect.runPromise(Layer.buildWithScope(layer, scope))
  await Effect.runPromise(
    Effect.gen(function* () {
      const client = yield* SqlClient.SqlClient
      const store = yield* SessionStore
      yield* Effect.scoped(store.acquire("big"))
      for (let i = 0; i < lines.length; i += 2000) {
        const rows = lines.slice(i, i + 2000).map((line, j) => ({
          session_id: "big",
          seq: i + j + 1,
          entry_id: JSON.parse(line).id as string,
          line,
          boundary: isBoundaryLine(line)
        }))
        yield* client`INSERT INTO compaction_entries ${client.insert(rows as [typeof rows[0], ...typeof rows])}`
      }
      yield* client`UPDATE compaction_sessions SET last_seq = ${lines.length} WHERE session_id = 'big'`
      yield* client.unsafe("ANALYZE compaction_entries")
    }).pipe(Effect.provide(context))
  )
  const log = SessionLog.layer({ sessionId: "big", tail: true, sync: "never" }).pipe(
    Layer.provide(Layer.succeedContext(context)),
    Layer.fresh
  )
  return {
    tail: readSession("big", { tail: true }).pipe(Effect.provide(context)),
    full: readSession("big").pipe(Effect.provide(context)),
    writer: Effect.flatMap(Effect.service(SessionLog), (l) => l.loaded).pipe(Effect.provide(log)),
    log,
    close: async () => {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      if (schema !== undefined) await admin(`DROP SCHEMA ${schema} CASCADE`)
    }
  }
}
