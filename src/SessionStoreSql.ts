/**
 * Concept: the SQL store.
 *
 * The SQL store, through `effect/sql`'s `SqlClient` (PostgreSQL; `@effect/sql-pg` for `layerPg`). Two tables hold the
 * sessions: `compaction_sessions (session_id, last_seq)` and `compaction_entries (session_id, seq, entry_id, line,
 * boundary)` keyed by `(session_id, seq)` with `(session_id, entry_id)` unique, and the boundary rows (compaction
 * entries, by their line's prefix) indexed, so a tail read finds the last one without reading the rows before it; a
 * third, `compaction_turns`, queues contended appends (below). A line is stored as `text`, byte for byte (`jsonb` would
 * reject `\u0000` and lone surrogates and reorder keys). An append is one short transaction: it locks the session's
 * row, answers `AlreadyWritten` when one of its entry ids is stored, `Conflict` when the session does not end at the
 * expected `seq`, and otherwise inserts every entry and moves `last_seq`; so a compaction boundary (one entry, one row)
 * lands whole or not at all, and many workers append to one session in one order.
 *
 * Contention is served in turn. An append that finds the session moved on (another worker was first), or another
 * append already waiting, takes a place in the session's queue (the unlogged table `compaction_turns`, one row per
 * waiting append, named by its first entry id, which its retries keep) and waits outside any transaction until it is
 * first in line; then it answers `Conflict` once, keeping its place while its writer catches up and derives its
 * entries again, and its next try appends and leaves the queue. Meanwhile every other append to that session waits
 * behind it, even one whose expected `seq` is current, so a writer that just appended cannot take the session again
 * before the ones that lost to it: under contention an append needs two tries (one `Conflict`) while no place lapses,
 * instead of losing again and again to whoever happens to be quicker. The optimistic check stays what decides: the
 * queue only orders the tries, so nothing is lost or stored twice whatever happens to it. An append its writer will not
 * try again (`AppendOptions.once`, a write conditional on the head its caller saw) leaves the queue with its
 * `Conflict`. A place lapses when its writer shows no sign of life for a few seconds (it died, or gave up), and a wait longer than the lock timeout fails
 * as a lock timeout, which the log retries. An uncontended append never waits. The price of the order is a hand-over
 * per append: a writer that could have appended many times in a row waits for the others in between.
 *
 * No transaction outlives an append (never one across a summarizer call), and each sets
 * `idle_in_transaction_session_timeout` and `lock_timeout`, so a worker whose connection silently died frees the
 * session's row within seconds. A failed statement's error carries
 * the most precise code found down its cause chain (SQLSTATE `57P01`–`57P03` while the server shuts down or starts,
 * `08xxx`, `ECONNREFUSED`, `ECONNRESET`…), which makes it `isRetryable`: `SessionLog` then retries every statement of
 * the operation on one schedule until its `retryDeadline` (default 30 s), so a restart of the server is ridden out.
 *
 * An idle store does not keep the process alive. `layerPg`'s pool closes a connection left unused for `idleTimeout`
 * (default 10 s, as node-postgres's pool), and its own timers do not hold the event loop, so a program that never closes the layer (a
 * `PromiseConversation` never closed, a runtime never disposed) ends within twice that after its last statement, as
 * on the JSONL store; closing it ends the pool at once. Nothing answered is lost: an append is acknowledged only
 * after its transaction committed, a statement in flight holds the process through its connection, and the log's
 * retries and the queue's waits through their timers.
 *
 * @since 0.1.0
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Migrator from "effect/sql/Migrator"
import * as SqlClient from "effect/sql/SqlClient"
import { isSqlError, type SqlError } from "effect/sql/SqlError"
import { clearTimeout, setTimeout } from "node:timers"
import { SessionLogError } from "./internal/sessionLogError.ts"
import { BOUNDARY_SQL_PATTERN, isBoundaryLine, keptAnchors, tailStartAt } from "./internal/sessionTail.ts"
import { SessionLog, type SessionLogOptions } from "./SessionLog.ts"
import {
  type AppendResult,
  type NewEntry,
  notFound,
  SessionStore,
  type SessionStoreShape,
  validateSessionId
} from "./SessionStore.ts"
import { spanAttributes } from "./internal/storeSupport.ts"

/** The table `effect/sql`'s `Migrator` records this store's migrations in. @category models */
const MIGRATIONS_TABLE = "compaction_migrations"

/**
 * How long a transaction may sit idle, or wait for a session's row, before PostgreSQL ends it. @category models
 */
const DEFAULT_LOCK_SECONDS = 10

/** How long a pooled connection may sit unused before the pool closes it (`PgOptions.idleTimeout`). */
const DEFAULT_IDLE_TIMEOUT: Duration.Input = "10 seconds"

/** The longest delay a timer takes (a longer one fires at once, with a warning). */
const MAX_TIMER_MILLIS = 2 ** 31 - 1

/**
 * `clock`, but its sleeps do not keep the process alive (unref'd timers): the clock of the connection pool, whose
 * reaper of idle connections sleeps for ever while the pool is open and would hold the event loop of a process whose
 * pool is never closed. A statement in flight still holds it (through its socket), and so do the store's and the
 * log's own waits (retries, queue turns), which run on the caller's clock.
 */
const unrefClock = (clock: Clock.Clock): Clock.Clock => {
  const sleepMillis = (millis: number): Effect.Effect<void> =>
    millis <= 0 ? Effect.yieldNow : !Number.isFinite(millis) ? Effect.never : Effect.callback<void>((resume) => {
      const handle = setTimeout(
        () => resume(millis > MAX_TIMER_MILLIS ? sleepMillis(millis - MAX_TIMER_MILLIS) : Effect.void),
        Math.min(millis, MAX_TIMER_MILLIS)
      )
      handle.unref()
      return Effect.sync(() => clearTimeout(handle))
    })
  return {
    currentTimeMillisUnsafe: () => clock.currentTimeMillisUnsafe(),
    currentTimeMillis: clock.currentTimeMillis,
    currentTimeNanosUnsafe: () => clock.currentTimeNanosUnsafe(),
    currentTimeNanos: clock.currentTimeNanos,
    monotonicTimeNanosUnsafe: () => clock.monotonicTimeNanosUnsafe(),
    monotonicTimeNanos: clock.monotonicTimeNanos,
    sleep: (duration) => sleepMillis(Duration.toMillis(duration))
  }
}

/** The database driver's own error under an `effect/sql` one (its reason's cause): PostgreSQL's message and code. */
const driverError = (e: SqlError): { readonly message?: string; readonly code?: string } => {
  const cause: unknown = e.reason.cause
  if (typeof cause !== "object" || cause === null) return {}
  const { message, code } = cause as { readonly message?: unknown; readonly code?: unknown }
  return {
    ...(typeof message === "string" && message !== e.message ? { message } : {}),
    ...(typeof code === "string" ? { code } : {})
  }
}

/**
 * The first code found down `error`'s cause chain (its `cause`, and an `AggregateError`'s errors: Node reports a
 * refused connection to every address of a host as one): a SQLSTATE (`57P03`) or an errno code (`ECONNREFUSED`).
 */
const codeInChain = (error: unknown, depth = 0): string | undefined => {
  if (typeof error !== "object" || error === null || depth > 8) return undefined
  const { code, cause, errors } = error as {
    readonly code?: unknown
    readonly cause?: unknown
    readonly errors?: unknown
  }
  if (typeof code === "string" && code !== "") return code
  for (const inner of Array.isArray(errors) ? errors : []) {
    const found = codeInChain(inner, depth + 1)
    if (found !== undefined) return found
  }
  return codeInChain(cause, depth + 1)
}

/** PostgreSQL's `undefined_table`: the store's tables are not in this database (or not on its `search_path`). */
const UNDEFINED_TABLE = "42P01"

/**
 * The `SessionLogError` of a failed statement. Its `code` is the most precise one found: the SQLSTATE or errno code
 * down the cause chain (`57P01` the server was shut down, `57P03` it is starting up, `08006`, `ECONNREFUSED`…), else
 * the `effect/sql` reason (`ConnectionError`, `LockTimeoutError`…); `isRetryable` reads it.
 */
const sqlError = (sessionId: string | undefined, what: string) => (e: SqlError): SessionLogError => {
  const driver = driverError(e)
  const code = codeInChain(e.reason.cause) ?? e.reason._tag
  const detail = driver.code === UNDEFINED_TABLE
    ? `${what}: the store's tables are not in this database or schema (${driver.message}); ` +
      "they are created when a session is first opened for writing, or by SessionStoreSql.layerMigrations"
    : `${what}: ${e.message}${driver.message === undefined ? "" : `: ${driver.message}`}`
  const retryableByReason = [
    "ConnectionError",
    "DeadlockError",
    "SerializationError",
    "LockTimeoutError",
    "StatementTimeoutError"
  ]
    .includes(e.reason._tag)
  const session = sessionId === undefined ? {} : { sessionId }
  const error = new SessionLogError({ reason: "Io", ...session, detail, code, cause: e })
  // a reason effect/sql calls transient stays so under a code of the driver's we do not list
  return retryableByReason && !error.isRetryable
    ? new SessionLogError({ reason: "Io", ...session, detail: `${detail} (${code})`, code: e.reason._tag, cause: e })
    : error
}

const migration0001 = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS compaction_sessions (
    session_id text PRIMARY KEY,
    last_seq bigint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now()
  )`
  yield* sql`CREATE TABLE IF NOT EXISTS compaction_entries (
    session_id text NOT NULL REFERENCES compaction_sessions (session_id),
    seq bigint NOT NULL,
    entry_id text NOT NULL,
    line text NOT NULL,
    PRIMARY KEY (session_id, seq),
    UNIQUE (session_id, entry_id)
  )`
})

/**
 * Marks the boundary rows (the lines `isBoundaryLine` accepts, old rows included) and indexes them, so a tail read
 * finds the last boundary without reading the rows before it.
 */
const migration0002 = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE compaction_entries ADD COLUMN IF NOT EXISTS boundary boolean NOT NULL DEFAULT false`
  yield* sql`UPDATE compaction_entries SET boundary = true WHERE line ~ ${BOUNDARY_SQL_PATTERN}`
  yield* sql`CREATE INDEX IF NOT EXISTS compaction_entries_boundaries
    ON compaction_entries (session_id, seq) WHERE boundary`
})

/**
 * The queue of appends waiting for their turn on a session (see the module doc): one row per waiting append, named by
 * its first entry id (the same on each of its tries), in `ticket` order. Unlogged: it is a courtesy among live
 * writers, not data, and a crash may empty it.
 */
const migration0003 = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE UNLOGGED TABLE IF NOT EXISTS compaction_turns (
    session_id text NOT NULL,
    entry_id text NOT NULL,
    ticket bigint GENERATED ALWAYS AS IDENTITY,
    seen timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, entry_id)
  )`
  yield* sql`CREATE INDEX IF NOT EXISTS compaction_turns_queue ON compaction_turns (session_id, ticket)`
})

/**
 * How long a waiting append's place in a session's queue lasts without a sign of life (each of its tries and polls
 * renews it): a writer that died in the queue holds the others up no longer than this. @category models
 */
const TURN_LEASE = "3 seconds"

/**
 * The pause before a waiting append looks at the queue again (jittered): from 1 ms, doubling with each look that finds
 * the queue no shorter ahead of it (`still` looks in a row), at most 4 ms for the next in line, which takes its turn
 * soon after it comes, and 50 ms for the others (well within the lease), so that waiting appends do not load the
 * server with looks while a slow turn goes on.
 */
const turnPause = (ahead: number, still: number, random: number): number =>
  Math.round(Math.min(2 ** Math.min(still, 6), ahead <= 1 ? 4 : 50) * (0.5 + random / 2))

/** What one try of an append found: its answer, or that another append is ahead of it in the session's queue. */
type AppendTry = AppendResult | { readonly _tag: "Wait" } | undefined

const makeSqlStore = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const name = "sql"

  const exists = (sessionId: string) =>
    Effect.map(
      sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM compaction_sessions WHERE session_id = ${sessionId}`,
      (rows) => (rows[0]?.n ?? 0) > 0
    )

  const acquire = (sessionId: string) =>
    validateSessionId(sessionId).pipe(
      Effect.andThen(
        sql`INSERT INTO compaction_sessions (session_id) VALUES (${sessionId}) ON CONFLICT DO NOTHING`.pipe(
          Effect.mapError(sqlError(sessionId, "create session"))
        )
      ),
      Effect.as([]),
      Effect.withSpan("SessionStore.acquire", { attributes: spanAttributes(name, sessionId) })
    )

  const read = (sessionId: string, afterSeq: number) =>
    Effect.gen(function* () {
      yield* validateSessionId(sessionId)
      const rows = yield* sql<{ readonly seq: number; readonly line: string }>`
        SELECT seq::int AS seq, line FROM compaction_entries
        WHERE session_id = ${sessionId} AND seq > ${afterSeq} ORDER BY compaction_entries.seq`
      if (rows.length === 0 && !(yield* exists(sessionId))) return yield* notFound(sessionId, name)
      yield* Effect.annotateCurrentSpan("session.entries", rows.length)
      return { entries: rows.map((r) => ({ seq: r.seq, line: r.line })), issues: [] }
    }).pipe(
      Effect.catchTag("SqlError", (e) => Effect.fail(sqlError(sessionId, "read")(e))),
      Effect.withSpan("SessionStore.read", { attributes: spanAttributes(name, sessionId, { afterSeq }) })
    )

  const readTail = (sessionId: string) =>
    Effect.gen(function* () {
      yield* validateSessionId(sessionId)
      /** The tail's start from the last `limit` boundary rows (every one when undefined), and whether it is found. */
      const startFrom = (limit: number | undefined) =>
        Effect.gen(function* () {
          // ordered by the column, not the `int` alias, so the partial index's backward scan stops after `limit` rows
          const boundaries = yield* sql<{ readonly seq: number; readonly line: string }>`
            SELECT seq::int AS seq, line FROM compaction_entries
            WHERE session_id = ${sessionId} AND boundary ORDER BY compaction_entries.seq DESC LIMIT ${limit ?? null}`
          // the last boundary's anchors first: they usually decide (each boundary line decoded costs a decode)
          const last = limit === undefined ? boundaries : boundaries.slice(0, 1)
          const anchors = last.flatMap((b) => keptAnchors(b.line) ?? [])
          const found = anchors.length === 0 ? [] : yield* sql<{ readonly seq: number; readonly entry_id: string }>`
            SELECT seq::int AS seq, entry_id FROM compaction_entries
            WHERE session_id = ${sessionId} AND ${sql.in("entry_id", anchors)}`
          const seqOf = new Map(found.map((r) => [r.entry_id, r.seq]))
          const from = tailStartAt(limit === undefined ? boundaries : boundaries.slice(0, 2), seqOf)
          // decided by the last boundary: it keeps nothing, or its kept entries all follow the one before
          const decided = limit === undefined || boundaries.length === 0 ||
            (from > 1 && (from === boundaries[0]!.seq || from > (boundaries[1]?.seq ?? 0)))
          return decided ? from : undefined
        })
      const from = (yield* startFrom(2)) ?? (yield* startFrom(undefined))!
      return yield* read(sessionId, from - 1)
    }).pipe(
      Effect.catchTag("SqlError", (e) => Effect.fail(sqlError(sessionId, "read")(e))),
      Effect.withSpan("SessionStore.readTail", { attributes: spanAttributes(name, sessionId) })
    )

  /**
   * One try of an append, in one transaction holding the session's row: `AlreadyWritten`; `Wait` while another append
   * is ahead of this one in the session's queue (which this one joins); else `Conflict` (keeping its place at the head
   * of the queue while its writer catches up) or `Appended` (leaving the queue).
   */
  const tryAppend = (sessionId: string, expectedSeq: number, entries: ReadonlyArray<NewEntry>) =>
    sql.withTransaction(Effect.gen(function* () {
      // the timeouts are set by the statement that may wait for the row: the CTE is read before a row is locked
      const session = yield* sql<{ readonly last: number }>`
          WITH timeouts AS MATERIALIZED (
            SELECT set_config('idle_in_transaction_session_timeout', ${`${DEFAULT_LOCK_SECONDS}s`}, true),
              set_config('lock_timeout', ${`${DEFAULT_LOCK_SECONDS}s`}, true))
          SELECT last_seq::int AS last FROM compaction_sessions, timeouts
          WHERE session_id = ${sessionId} FOR UPDATE OF compaction_sessions`
      if (session.length === 0) return undefined as AppendTry
      const turn = entries[0]?.entryId ?? null
      const found = yield* sql<{ readonly written: number | null; readonly head: string | null }>`
          SELECT (SELECT max(seq)::int FROM compaction_entries
              WHERE session_id = ${sessionId} AND ${sql.in("entry_id", entries.map((e) => e.entryId))}) AS written,
            (SELECT entry_id FROM compaction_turns
              WHERE session_id = ${sessionId} AND seen > now() - ${TURN_LEASE}::interval
              ORDER BY ticket LIMIT 1) AS head`
      const { written, head } = found[0]!
      if (written !== null) return { _tag: "AlreadyWritten", seq: written } satisfies AppendResult
      const last = session[0]!.last
      const ahead = head !== null && head !== turn
      if (turn !== null && (ahead || last !== expectedSeq)) {
        // into the queue (or a renewed place in it), and the places of writers gone quiet out of it
        yield* sql`WITH gone AS (DELETE FROM compaction_turns
            WHERE session_id = ${sessionId} AND seen <= now() - ${TURN_LEASE}::interval AND entry_id <> ${turn})
          INSERT INTO compaction_turns (session_id, entry_id) VALUES (${sessionId}, ${turn})
          ON CONFLICT (session_id, entry_id) DO UPDATE SET seen = now()`
      }
      if (ahead) return { _tag: "Wait" } as AppendTry
      if (last !== expectedSeq) return { _tag: "Conflict", seq: last } satisfies AppendResult
      if (entries.length === 0) return { _tag: "Appended", seq: last } satisfies AppendResult
      const rows = entries.map((e, i) => ({
        session_id: sessionId,
        seq: last + i + 1,
        entry_id: e.entryId,
        line: e.line,
        boundary: isBoundaryLine(e.line)
      }))
      yield* sql`WITH inserted AS (INSERT INTO compaction_entries ${
        sql.insert(rows as [typeof rows[0], ...typeof rows])
      }),
          left_queue AS (DELETE FROM compaction_turns WHERE session_id = ${sessionId} AND entry_id = ${turn})
        UPDATE compaction_sessions SET last_seq = ${last + entries.length} WHERE session_id = ${sessionId}`
      return { _tag: "Appended", seq: last + entries.length } satisfies AppendResult
    }))

  /**
   * Waits until the append whose first entry id is `turn` heads the session's queue (renewing its place at each look),
   * at most the lock timeout, then a lock timeout (which the log retries like any). Its answer: `Conflict` when the
   * session has moved on from `expectedSeq` meanwhile (as it has when an append ahead landed: the append keeps its
   * place while its writer catches up; its entries are not stored, which the try that queued it checked, and no other
   * append has its ids), else `undefined`: try again.
   */
  const awaitTurn = (sessionId: string, expectedSeq: number, turn: string) =>
    Effect.gen(function* () {
      const until = (yield* Clock.currentTimeMillis) + DEFAULT_LOCK_SECONDS * 1000
      for (let ahead = Number.MAX_SAFE_INTEGER, still = 0;; still++) {
        yield* Effect.sleep(turnPause(ahead, still, Math.random()))
        const rows = yield* sql<{ readonly ahead: number; readonly last: number | null }>`
          WITH renewed AS (INSERT INTO compaction_turns (session_id, entry_id) VALUES (${sessionId}, ${turn})
            ON CONFLICT (session_id, entry_id) DO UPDATE SET seen = now())
          SELECT (SELECT count(*)::int FROM compaction_turns
              WHERE session_id = ${sessionId} AND seen > now() - ${TURN_LEASE}::interval AND entry_id <> ${turn}
                AND ticket < coalesce((SELECT ticket FROM compaction_turns
                  WHERE session_id = ${sessionId} AND entry_id = ${turn}), ${Number.MAX_SAFE_INTEGER})) AS ahead,
            (SELECT last_seq::int FROM compaction_sessions WHERE session_id = ${sessionId}) AS last`
        if (rows[0]!.ahead < ahead) still = 0
        ahead = rows[0]!.ahead
        if (ahead === 0) {
          const last = rows[0]!.last
          // (a session gone meanwhile: the next try answers NotFound)
          return last === null || last === expectedSeq
            ? undefined
            : ({ _tag: "Conflict", seq: last } satisfies AppendResult)
        }
        if ((yield* Clock.currentTimeMillis) >= until) {
          return yield* new SessionLogError({
            reason: "Io",
            sessionId,
            code: "LockTimeoutError",
            detail: `append: other writers of the session stayed ahead of it for ${DEFAULT_LOCK_SECONDS} s`
          })
        }
      }
    })

  /**
   * `answer`, after taking the place of the append whose first entry id is `turn` out of the session's queue when it
   * is a `Conflict` its writer will not try again (`AppendOptions.once`).
   */
  const answerOnce = (sessionId: string, turn: string | undefined, answer: AppendResult) =>
    answer._tag !== "Conflict" || turn === undefined ? Effect.succeed(answer) : Effect.as(
      sql`DELETE FROM compaction_turns WHERE session_id = ${sessionId} AND entry_id = ${turn}`.pipe(
        Effect.mapError(sqlError(sessionId, "append"))
      ),
      answer
    )

  const append: SessionStoreShape["append"] = (sessionId, expectedSeq, entries, options) =>
    Effect.gen(function* () {
      yield* validateSessionId(sessionId)
      const once = options?.once === true ? entries[0]?.entryId : undefined
      for (;;) {
        const result = yield* tryAppend(sessionId, expectedSeq, entries).pipe(
          Effect.mapError(sqlError(sessionId, "append")),
          // a connection lost mid-transaction also fails its ROLLBACK, which effect/sql raises as a defect
          Effect.catchDefect((defect) =>
            isSqlError(defect) ? Effect.fail(sqlError(sessionId, "append")(defect)) : Effect.die(defect)
          )
        )
        if (result === undefined) return yield* notFound(sessionId, name)
        if (result._tag !== "Wait") return yield* answerOnce(sessionId, once, result)
        const answer = yield* awaitTurn(sessionId, expectedSeq, entries[0]!.entryId).pipe(
          Effect.mapError((e) => isSqlError(e) ? sqlError(sessionId, "append")(e) : e)
        )
        if (answer !== undefined) return yield* answerOnce(sessionId, once, answer)
      }
    }).pipe(Effect.withSpan("SessionStore.append", {
      attributes: spanAttributes(name, sessionId, { expectedSeq, "session.entries": entries.length })
    }))

  const store: SessionStoreShape = {
    name,
    acquire,
    read,
    readTail,
    append,
    list: sql<{ readonly session_id: string }>`SELECT session_id FROM compaction_sessions ORDER BY session_id`.pipe(
      Effect.map((rows) => rows.map((r) => r.session_id)),
      Effect.mapError(sqlError(undefined, "list sessions"))
    )
  }
  return store
})

/** Options of `SessionStoreSql.layerPg`. @category models */
export interface PgOptions {
  /** A `postgres://` URL. */
  readonly url: string | Redacted.Redacted
  /** Extra startup parameters of every connection (`search_path`, …). */
  readonly startupParameters?: Readonly<Record<string, string>>
  /** Run the migrations when the layer is built (default true). */
  readonly migrate?: boolean
  /**
   * How long a pooled connection may sit unused before the pool closes it (default 10 seconds, as node-postgres's pool). An idle connection
   * keeps the process alive: a process whose layer (or Promise conversation) is never closed exits within twice this
   * after its last statement; a longer one spares a reconnect to a worker whose steps are further apart.
   */
  readonly idleTimeout?: Duration.Input
}

/** The SQL store (PostgreSQL through `effect/sql`). @category services */
export const SessionStoreSql: {
  /** The store over the `SqlClient` in the context. The tables must exist (see `layerMigrations`). */
  readonly layer: Layer.Layer<SessionStore, never, SqlClient.SqlClient>
  /**
   * Creates or updates the tables, with `effect/sql`'s `Migrator` (recorded in `compaction_migrations`). A layer of
   * its own, for a deploy step; safe to run from many workers at once (PostgreSQL locks the migrations table; the
   * others skip).
   */
  readonly layerMigrations: Layer.Layer<never, SessionLogError, SqlClient.SqlClient>
  /**
   * The store and its `SqlClient` for the PostgreSQL database at `url` (`@effect/sql-pg`, loaded only when this
   * layer is built), with `idle_in_transaction_session_timeout` set on every connection and, by default, the
   * migrations run.
   */
  readonly layerPg: (options: PgOptions) => Layer.Layer<SessionStore | SqlClient.SqlClient, SessionLogError>
} = {
  layer: Layer.effect(SessionStore, makeSqlStore),
  layerMigrations: Layer.effectDiscard(
    Migrator.make({})({
      loader: Migrator.fromRecord({
        "0001_session_entries": migration0001,
        "0002_boundary_index": migration0002,
        "0003_append_turns": migration0003
      }),
      table: MIGRATIONS_TABLE
    })
      .pipe(
        // a statement's failure names the driver's own message (a missing database, a refused connection)
        Effect.mapError((e) =>
          isSqlError(e)
            ? sqlError(undefined, "migrations")(e)
            : new SessionLogError({ reason: "Io", detail: `migrations: ${e.message}`, cause: e })
        )
      )
  ),
  layerPg: (options) => {
    const client: Layer.Layer<SqlClient.SqlClient, SessionLogError> = Layer.unwrap(
      Effect.map(Effect.promise(() => import("@effect/sql-pg/PgClient")), (Pg) =>
        Pg.layer({
          url: Redacted.isRedacted(options.url) ? options.url : Redacted.make(options.url),
          startupParameters: {
            idle_in_transaction_session_timeout: `${DEFAULT_LOCK_SECONDS}s`,
            ...options.startupParameters
          },
          idleTimeout: options.idleTimeout ?? DEFAULT_IDLE_TIMEOUT
        }).pipe(
          Layer.provide(Layer.effect(Clock.Clock, Clock.clockWith((clock) => Effect.succeed(unrefClock(clock))))),
          Layer.catchTag("SqlError", (e) =>
            Layer.effect(
              SqlClient.SqlClient,
              Effect.fail(
                new SessionLogError({ reason: "Io", detail: `connect: ${e.message}`, code: e.reason._tag, cause: e })
              )
            ))
        ))
    )
    const store = options.migrate === false
      ? SessionStoreSql.layer
      : Layer.merge(SessionStoreSql.layer, SessionStoreSql.layerMigrations)
    return Layer.provideMerge(store, client)
  }
}

/**
 * The session log in a SQL database through `effect/sql`'s `SqlClient` (PostgreSQL): `SessionLog.layer` over
 * `SessionStoreSql.layer`. The tables must exist: run `SessionStoreSql.layerMigrations` once (a deploy step), or use
 * `layerSessionLogPg`.
 * @category layers
 */
export const layerSessionLog = (
  options: SessionLogOptions
): Layer.Layer<SessionLog, SessionLogError, SqlClient.SqlClient> =>
  SessionLog.layer(options).pipe(Layer.provide(SessionStoreSql.layer))

/**
 * The session log in PostgreSQL at `url`, with the migrations run first: `SessionLog.layer` over
 * `SessionStoreSql.layerPg` (`idleTimeout` is its pool's, see `PgOptions.idleTimeout`).
 * @category layers
 */
export const layerSessionLogPg = (
  options: SessionLogOptions & { readonly url: string; readonly idleTimeout?: Duration.Input }
): Layer.Layer<SessionLog, SessionLogError> => {
  const { url, idleTimeout, ...log } = options
  return SessionLog.layer(log).pipe(
    Layer.provide(SessionStoreSql.layerPg(idleTimeout === undefined ? { url } : { url, idleTimeout }))
  )
}
