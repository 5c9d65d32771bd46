/**
 * The memory of logged conversations (issue 43), a measurement run by hand (minutes; not part of `npm run bench`):
 *
 *   node --expose-gc bench/loggedMemory.ts            # 100,000 messages, then 200 conversations of 2,000
 *   MESSAGES=5000 OPENS=20 node --expose-gc bench/loggedMemory.ts   # a quick look
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test STORES=pg OPENS=0 node --expose-gc bench/loggedMemory.ts
 *
 * `STORES` (default `jsonl`, and `pg` too when `DATABASE_URL` is set) names the stores part 1 runs on: `jsonl` (a
 * temporary directory) and `pg` (the PostgreSQL server at `DATABASE_URL`, in a schema of the run's own, dropped at the
 * end). `OPENS=0` skips part 2.
 *
 * 1. `MESSAGES` generated messages through `Conversation.layerLogged` on each store, as an agent loop sends them
 *    (append, prepare before each reply, record the reply with the request's estimated tokens as its usage; the
 *    policy compacts at a 40k-token window): the heap
 *    after full collections at 20% and at 100% of the messages, and its growth per message between them (the log
 *    should hold its view, not its history). Then the state a fresh open resumes equals the live one.
 * 2. `OPENS` conversations of 2,000 messages (one session written once, copied), opened at once with the defaults
 *    and held open: the heap each.
 */
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as NodePath from "@effect/platform-node/NodePath"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import * as SqlClient from "effect/sql/SqlClient"
import { copyFileSync, existsSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import process from "node:process"
import { Conversation, layerLogged } from "../src/Conversation.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { SessionLog } from "../src/SessionLog.ts"
import { layerSessionLog } from "../src/SessionStoreJsonl.ts"
import { SessionStoreSql } from "../src/SessionStoreSql.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { generateSession } from "../test/fixtures/Conversation.ts"
import { exactState } from "../test/fixtures/ResumeReference.ts"
import { mb, settledHeap } from "./util.ts"

const heap = settledHeap()
if (heap === undefined) throw new Error("run with --expose-gc")
const MESSAGES = Number(process.env["MESSAGES"] ?? 100_000)
const OPENS = Number(process.env["OPENS"] ?? 200)
const DATABASE_URL = process.env["DATABASE_URL"] ?? ""
const STORES = (process.env["STORES"] ?? (DATABASE_URL === "" ? "jsonl" : "jsonl,pg")).split(",")
const CHUNK = 5_000
const platform = Layer.mergeAll(NodeFileSystem.layer, NodePath.layer)
const policy = CompactionPolicy.makeUnsafe({ contextWindow: 40_000 })

/** The messages `from` to `to` of an endless generated session, in chunks of 5,000 (each chunk its own seed). */
const messagesOf = function* (count: number): Generator<Message> {
  let last: Message | undefined
  for (let chunk = 0; chunk * CHUNK < count; chunk++) {
    const messages = generateSession(4300 + chunk, { messages: CHUNK, maxOutput: 4000 })
    // chunks join where roles alternate: a chunk starting with the role the last one ended with drops that message
    const start = last !== undefined && messages[0]!.role === last.role ? 1 : 0
    for (let i = start; i < messages.length && chunk * CHUNK + i < count; i++) {
      last = messages[i]!
      yield last
    }
  }
}

/** Where a session log lives: a JSONL directory, or a schema of the PostgreSQL server at `DATABASE_URL`. */
type Place = { readonly _tag: "jsonl"; readonly directory: string } | { readonly _tag: "pg"; readonly schema: string }

const logOf = (place: Place, sessionId: string): Layer.Layer<SessionLog, unknown> =>
  place._tag === "jsonl"
    ? layerSessionLog({ directory: place.directory, sessionId, sync: "never" }).pipe(Layer.provide(platform))
    : SessionLog.layer({ sessionId }).pipe(
      Layer.provide(
        SessionStoreSql.layerPg({ url: DATABASE_URL, startupParameters: { search_path: place.schema } })
      )
    )

const conversationOf = (place: Place, sessionId: string) =>
  layerLogged({ policy }).pipe(Layer.provide(logOf(place, sessionId)), Layer.provide(ExtractiveSummarizer.layer))

/** Runs `statement` on the database at `DATABASE_URL` (its default schema). */
const admin = (statement: string) =>
  Effect.flatMap(Effect.service(SqlClient.SqlClient), (sql) => sql.unsafe(statement)).pipe(
    Effect.provide(SessionStoreSql.layerPg({ url: DATABASE_URL, migrate: false }))
  )

/** Drives `count` messages through a logged conversation, calling `at(n)` after the n-th for each n in `marks`. */
const drive = (
  place: Place,
  sessionId: string,
  count: number,
  marks: ReadonlyArray<number>,
  at: (n: number) => void
) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    let n = 0
    let compactions = 0
    for (const message of messagesOf(count)) {
      if (message.role === "assistant") {
        const prepared = yield* conversation.prepare
        if (prepared.compaction !== undefined && prepared.compaction._tag !== "Skipped") compactions++
        // the usage a provider would report: the request's estimated tokens
        const usage = { input_tokens: estimateTokens(prepared.request.messages as never), output_tokens: 200 }
        yield* conversation.recordReply(message as never, usage, { requestEpoch: prepared.epoch })
      } else {
        yield* conversation.append(message as never)
      }
      n++
      if (marks.includes(n)) at(n)
    }
    return { state: yield* conversation.state, compactions }
  }).pipe(Effect.provide(conversationOf(place, sessionId)))

/** Part 1 on `place`: one long session, the heap at 20% and at 100% of it, and its resume against the live state. */
const longSession = (place: Place, label: string) =>
  Effect.gen(function* () {
    const first = Math.floor(MESSAGES / 5)
    const heaps = new Map<number, number>()
    const times = new Map<number, number>()
    const started = Date.now()
    const live = yield* drive(place, "long", MESSAGES, [first, MESSAGES], (n) => {
      times.set(n, Date.now())
      heaps.set(n, heap())
    })
    const growth = (heaps.get(MESSAGES)! - heaps.get(first)!) / (MESSAGES - first)
    const seconds = (Date.now() - started) / 1000
    const perMessage = (times.get(MESSAGES)! - times.get(first)!) * 1000 / (MESSAGES - first)
    console.log(
      `${MESSAGES} messages through layerLogged on ${label} (${live.compactions} compactions, ` +
        `${seconds.toFixed(0)} s; ${perMessage.toFixed(0)} µs per message from ${first} on): heap ` +
        `${mb(heaps.get(first)!)} at ${first}, ${mb(heaps.get(MESSAGES)!)} at ${MESSAGES}; ${
          growth.toFixed(0)
        } bytes per message from ${first} to ${MESSAGES}`
    )
    const resumed = yield* Effect.flatMap(Conversation, (c) => c.state).pipe(
      Effect.provide(conversationOf(place, "long"))
    )
    const same = JSON.stringify(exactState(resumed)) === JSON.stringify(exactState(live.state))
    console.log(`resume equals the live state (${label}): ${same}`)
    if (!same) process.exitCode = 1
  })

const main = Effect.gen(function* () {
  const directory = mkdtempSync(join(tmpdir(), "logged-memory-"))
  const jsonl: Place = { _tag: "jsonl", directory }
  try {
    // 1. one long session on each store
    if (STORES.includes("jsonl")) yield* longSession(jsonl, "JSONL")
    if (STORES.includes("pg")) {
      if (DATABASE_URL === "") throw new Error("STORES=pg needs DATABASE_URL")
      const schema = `logged_memory_${process.pid}`
      yield* admin(`CREATE SCHEMA ${schema}`)
      yield* longSession({ _tag: "pg", schema }, "PostgreSQL").pipe(
        Effect.ensuring(Effect.ignore(admin(`DROP SCHEMA ${schema} CASCADE`)))
      )
    }
    if (OPENS === 0) return

    // 2. many open conversations of 2,000 messages
    yield* drive(jsonl, "model", 2_000, [], () => undefined)
    for (let i = 0; i < OPENS; i++) {
      copyFileSync(join(directory, "model.jsonl"), join(directory, `open${i}.jsonl`))
      if (existsSync(join(directory, "model.tail"))) {
        copyFileSync(join(directory, "model.tail"), join(directory, `open${i}.tail`))
      }
    }
    const scope = yield* Scope.make()
    const before = heap()
    const openStarted = Date.now()
    for (let i = 0; i < OPENS; i++) {
      yield* Layer.buildWithScope(conversationOf(jsonl, `open${i}`), scope)
    }
    const opened = heap()
    console.log(
      `${OPENS} conversations of 2,000 messages opened with the defaults: ${mb((opened - before) / OPENS)} heap each ` +
        `(${((Date.now() - openStarted) / OPENS).toFixed(1)} ms each)`
    )
    yield* Scope.close(scope, Exit.void)
  } finally {
    rmSync(directory, { recursive: true, force: true })
  }
})

Effect.runPromise(main).catch((error) => {
  console.error(error)
  process.exit(1)
})
