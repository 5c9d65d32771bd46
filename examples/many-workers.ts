/**
 * Many workers on one session, in PostgreSQL. Each run is one stateless worker process:
 *
 *   npx node examples/many-workers.ts migrate                 creates or updates the tables (a deploy step, run once)
 *   npx node examples/many-workers.ts append <worker> [count] appends `count` messages (default 20) to session "shared"
 *   npx node examples/many-workers.ts compact                 records a compaction of the first half of the view
 *   npx node examples/many-workers.ts show                    loads the session (checking every entry) and prints it
 *
 * (`npx node` runs the checkout's pinned Node 22; a Node before 22.18 does not run .ts files.) The database is
 * DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test); `migrate` builds SessionStoreSql.layerPg({ url }),
 * which runs SessionStoreSql.layerMigrations, and the workers create the tables the same way on first use (layerPg runs
 * the migrations unless `migrate: false`). SESSION_ID picks another session.
 */
import { Config, Effect, Layer } from "effect"
import process from "node:process"
import { readSession, SessionLog } from "../src/SessionLog.ts"
import { SessionStoreSql } from "../src/SessionStoreSql.ts"

const [mode, worker = "worker", count = "20"] = process.argv.slice(2)

const program = Effect.gen(function* () {
  const url = yield* Config.String("DATABASE_URL").pipe(
    Config.withDefault("postgres://postgres@127.0.0.1:5432/test")
  )
  const sessionId = yield* Config.String("SESSION_ID").pipe(Config.withDefault("shared"))
  if (mode === "migrate") {
    yield* Layer.build(SessionStoreSql.layerPg({ url })).pipe(Effect.scoped)
    console.log("the store's tables are in place")
    return
  }
  const store = SessionStoreSql.layerPg({ url })
  if (mode === "show") {
    const loaded = yield* readSession(sessionId).pipe(Effect.provide(store))
    for (const message of loaded.view) console.log(`${message.role}: ${JSON.stringify(message.content)}`)
    const compactions = loaded.entries.filter((e) => e.type === "compaction").length
    console.log(
      `${sessionId}: ${loaded.entries.length} entries, ${compactions} compactions, view ${loaded.view.length}`
    )
    return
  }
  yield* Effect.gen(function* () {
    const log = yield* SessionLog
    if (mode === "append") {
      for (let k = 0; k < Number(count); k++) yield* log.append([{ role: "user", content: `${worker} says ${k}` }])
      console.log(`${worker}: appended ${count}`)
    } else if (mode === "compact") {
      const snapshot = yield* log.catchUp
      const cut = Math.floor(snapshot.view.length / 2)
      const summary = { role: "user" as const, content: `summary of ${cut} messages` }
      yield* log.recordCompaction({
        view: [summary, ...snapshot.view.slice(cut)],
        snapshot,
        cut,
        summarizer: "example"
      })
      console.log(`compacted ${cut} of ${snapshot.view.length} messages`)
    } else {
      return yield* Effect.fail(new Error(`usage: many-workers.ts migrate | append <worker> [count] | compact | show`))
    }
  }).pipe(Effect.provide(SessionLog.layer({ sessionId }).pipe(Layer.provide(store))))
})

Effect.runPromise(program).catch((error) => {
  console.error(String(error?.message ?? error))
  process.exit(1)
})
