/**
 * A logged `Conversation` step whose write failed after the store may have written it (the error names the entries it
 * tried, `SessionLogError.entryIds`), on the real stores: a JSONL line written whose fsync then failed with EIO (through
 * the platform's FileSystem, whose file handle fails `sync` once), a write that failed and was cut back (nothing
 * landed), and on PostgreSQL (the embedded PGlite, and the server at DATABASE_URL when set) an append whose COMMIT
 * reached the server while its answer was lost and the server then stayed out of reach past `retryDeadline` (a
 * loopback proxy that cuts every connection). The next step catches up with the log: the same step taken again adopts a
 * change that landed without writing it again, and writes one that did not; another step adopts it first and goes on;
 * another writer's entries since then fail the step with `Conflict` until a reopen. The log holds every step once, the
 * state is the log's, and a resume equals the live state. Then a property over random agent loops (some replies with
 * empty content) on a JSONL log with such failures (landed or not) injected into random steps, each retried or followed
 * by another step.
 */
import { assert, describe, it } from "@effect/vitest"
import { NodeFileSystem, NodePath } from "@effect/platform-node"
import { Context, Effect, Exit, FileSystem, Layer, Logger, PlatformError, Schema, Scope } from "effect"
import * as net from "node:net"
import { afterAll, beforeAll } from "vitest"
import { Conversation, ConversationError } from "../src/Conversation.ts"
import type { ConversationState, MessageParam, SdkReply } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import type { Entry } from "../src/SessionEntry.ts"
import { readSession, SessionLog, SessionLogError } from "../src/SessionLog.ts"
import { SessionStoreSql } from "../src/SessionStoreSql.ts"
import { layerSessionLog as layerJsonl, readJsonl } from "../src/SessionStoreJsonl.ts"
import { databases, makeSchema } from "./fixtures/Pg.ts"

const policy = CompactionPolicy.makeUnsafe({
  contextWindow: 12_000,
  minRemaining: 3_000,
  keepRecentTokens: 300,
  keepRecentTurns: 1
})

const user = (text: string): MessageParam => ({ role: "user", content: text })
const reply = (text: string): MessageParam => ({ role: "assistant", content: [{ type: "text", text }] })
const words = (label: string, n: number) => `${label}: ${"the parser reads the config file ".repeat(n)}`
const usage = (input_tokens: number) => ({ input_tokens, output_tokens: 20 })
/** A reply with empty content as the SDK returns it (`end_turn` with nothing to say). */
const emptyReply = (id: string, input_tokens: number): SdkReply => ({
  id,
  type: "message",
  role: "assistant",
  content: [],
  stop_reason: "end_turn",
  usage: usage(input_tokens)
})
const json = (value: unknown) => JSON.stringify(value)
/** What a state holds that the log stores (the bookkeeping of the request in flight left out). */
const stored = (state: ConversationState) =>
  json({ view: state.view, epoch: state.epoch, pending: state.pending, usage: state.usage, reply: state.reply })

/**
 * The label of each stored message entry (its text up to the first colon) and each empty reply (its id, stored on an
 * eviction entry with no evictions), in order.
 */
const labels = (entries: ReadonlyArray<Entry>) =>
  entries.flatMap((e) => {
    if (e.type === "eviction") {
      const id = (e.meta?.["conversation"] as { readonly replyId?: string } | undefined)?.replyId
      return e.evictions.length === 0 && id !== undefined ? [id] : []
    }
    if (e.type !== "message") return []
    const content = e.message.content
    const text = typeof content === "string" ? content : (content[0] as { readonly text: string }).text
    return [text.split(":")[0]!]
  })

/** The step's failure, a `ConversationError`. */
const failureOf = <A>(exit: Exit.Exit<A, unknown>, label: string): ConversationError<unknown> => {
  assert.isTrue(Exit.isFailure(exit), `${label}: the step must fail`)
  const reason = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail") : undefined
  const error = reason?._tag === "Fail" ? reason.error : undefined
  assert.instanceOf(error, ConversationError, label)
  return error as ConversationError<unknown>
}

/** The step failed with `Persist` whose cause names the entries its write tried: its outcome is unknown. */
const assertUncertain = <A>(exit: Exit.Exit<A, unknown>, label: string, reason: "Io" | "Unavailable") => {
  const error = failureOf(exit, label)
  assert.strictEqual(error.reason, "Persist", label)
  assert.instanceOf(error.cause, SessionLogError, label)
  const cause = error.cause as SessionLogError
  assert.strictEqual(cause.reason, reason, label)
  assert.isAbove(cause.entryIds?.length ?? 0, 0, `${label}: the error names the entries the write tried`)
  assert.include(error.message, "the change may have been stored all the same", label)
  return cause
}

/** A conversation open on `log` (its own scope), and how it closes. */
const openConversation = (log: Layer.Layer<SessionLog, SessionLogError>) =>
  Effect.gen(function* () {
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(
      Conversation.layerLogged({ policy, minFreedTokens: 100 }).pipe(
        Layer.provide(log),
        Layer.provide(ExtractiveSummarizer.layer)
      ),
      scope
    )
    return { conversation: Context.get(context, Conversation), close: Scope.close(scope, Exit.void) }
  })

// ============================================================================
// JSONL: the platform's FileSystem, failing a session file's fsync or write once when asked
// ============================================================================

/** The faults the next write to a session file meets: its fsync fails after the line was written, or its write. */
interface Faults {
  sync: number
  write: number
}

const eio = (method: string) =>
  PlatformError.systemError({
    _tag: "Unknown",
    module: "FileSystem",
    method,
    cause: Object.assign(new Error(`EIO: i/o error, ${method}`), { code: "EIO" })
  })

/**
 * Node's FileSystem whose `.jsonl` files fail their next `sync` with EIO while `faults.sync` is set (the line was
 * written: it lands) or their next write with EIO after half of it while `faults.write` is (the store cuts it back:
 * nothing lands). Every write goes through the file's `writeAll` (a file whose `writeAll` is its own is never written
 * on its descriptor directly).
 */
const faultyPlatform = (faults: Faults) =>
  Layer.mergeAll(
    Layer.effect(
      FileSystem.FileSystem,
      Effect.map(FileSystem.FileSystem, (fs) => ({
        ...fs,
        open: (path: string, options?: Parameters<FileSystem.FileSystem["open"]>[1]) =>
          Effect.map(fs.open(path, options), (file) => {
            if (!path.endsWith(".jsonl")) return file
            const faulty = Object.create(file) as FileSystem.File
            Object.defineProperty(faulty, "sync", {
              value: Effect.suspend(() => {
                if (faults.sync === 0) return file.sync
                faults.sync--
                return Effect.fail(eio("fsync"))
              })
            })
            Object.defineProperty(faulty, "writeAll", {
              value: (buffer: Uint8Array) =>
                Effect.suspend(() => {
                  if (faults.write === 0) return file.writeAll(buffer)
                  faults.write--
                  return Effect.andThen(
                    file.writeAll(buffer.subarray(0, Math.floor(buffer.length / 2))),
                    Effect.fail(eio("write"))
                  )
                })
            })
            return faulty
          })
      } satisfies FileSystem.FileSystem))
    ).pipe(Layer.provide(NodeFileSystem.layer)),
    NodePath.layer
  )

/** A temporary directory (removed with the test's scope) and a JSONL session in it, every entry fsynced. */
const jsonlSession = Effect.gen(function* () {
  const faults: Faults = { sync: 0, write: 0 }
  const platform = faultyPlatform(faults)
  const directory = yield* Effect.flatMap(FileSystem.FileSystem, (fs) => fs.makeTempDirectoryScoped()).pipe(
    Effect.provide(NodeFileSystem.layer)
  )
  const sessionId = "uncertain"
  return {
    faults,
    log: () => layerJsonl({ directory, sessionId, sync: "always" }).pipe(Layer.provide(platform), Layer.fresh),
    loaded: readJsonl({ directory, sessionId, tail: false }).pipe(Effect.provide(platform))
  }
})

describe("a logged conversation whose JSONL write failed after the line was written (EIO on fsync)", () => {
  it.live("the same append taken again adopts the landed line and writes nothing; a lost one is written once", () =>
    Effect.gen(function* () {
      const session = yield* jsonlSession
      const { conversation: c, close } = yield* openConversation(session.log())
      yield* c.append(user("u1: hello"))
      yield* c.recordReply(reply("r1: hi"), usage(500))
      const before = yield* c.state

      session.faults.sync = 1
      assertUncertain(yield* Effect.exit(c.append(user("u2: landed"))), "append u2", "Io")
      assert.strictEqual(stored(yield* c.state), stored(before), "the state is the one before the change")
      assert.deepStrictEqual(labels((yield* session.loaded).entries), ["u1", "r1", "u2"], "the line landed")

      const after = yield* c.append(user("u2: landed"))
      assert.deepStrictEqual(labels((yield* session.loaded).entries), ["u1", "r1", "u2"], "nothing written again")
      assert.strictEqual(json(after.view), json((yield* session.loaded).view), "the state is the log's")

      // a write that failed and was cut back: nothing landed, so the same reply taken again writes it once
      const prepared = yield* c.prepare
      assert.strictEqual(json(prepared.request.messages.at(-1)), json(user("u2: landed")))
      session.faults.write = 1
      assertUncertain(
        yield* Effect.exit(c.recordReply(reply("r2: lost"), usage(600), { requestEpoch: prepared.epoch })),
        "reply r2",
        "Io"
      )
      assert.deepStrictEqual(labels((yield* session.loaded).entries), ["u1", "r1", "u2"], "nothing landed")
      yield* c.recordReply(reply("r2: lost"), usage(600), { requestEpoch: prepared.epoch })
      assert.deepStrictEqual(labels((yield* session.loaded).entries), ["u1", "r1", "u2", "r2"])
      const live = yield* c.state
      assert.strictEqual(json(live.view), json((yield* session.loaded).view))
      yield* close

      const reopened = yield* openConversation(session.log())
      assert.strictEqual(stored(yield* reopened.conversation.state), stored(live), "a resume equals the live state")
      yield* reopened.close
    }).pipe(Effect.scoped))

  it.live("an empty reply taken again after its entry landed stores it once; another one after it is taken", () =>
    Effect.gen(function* () {
      const session = yield* jsonlSession
      const { conversation: c, close } = yield* openConversation(session.log())
      /** The input tokens of each empty reply the log holds (an eviction entry with no evictions), in order. */
      const empties = Effect.map(
        session.loaded,
        ({ entries }) =>
          entries.flatMap((e) =>
            e.type === "eviction" && e.evictions.length === 0
              ? [(e.meta?.["conversation"] as { readonly usage: { readonly input_tokens: number } }).usage.input_tokens]
              : []
          )
      )
      yield* c.append(user("u1: hello"))
      const prepared = yield* c.prepare
      // the SDK's empty reply: the same one taken again (its id) adopts the entry that landed
      session.faults.sync = 1
      assertUncertain(
        yield* Effect.exit(c.recordReply(emptyReply("e1", 900), undefined, { requestEpoch: prepared.epoch })),
        "empty reply e1",
        "Io"
      )
      assert.deepStrictEqual(yield* empties, [900], "the entry landed")
      const adopted = yield* c.recordReply(emptyReply("e1", 900), undefined, { requestEpoch: prepared.epoch })
      assert.deepStrictEqual(yield* empties, [900], "nothing written again")
      assert.strictEqual(adopted.reply?.id, "e1")
      // a MessageParam with empty content and the usage beside it: the same one taken again stores it once too
      const plain: MessageParam = { role: "assistant", content: [] }
      session.faults.sync = 1
      assertUncertain(
        yield* Effect.exit(c.recordReply(plain, usage(1_000), { requestEpoch: prepared.epoch })),
        "empty reply (usage 1,000)",
        "Io"
      )
      yield* c.recordReply(plain, usage(1_000), { requestEpoch: prepared.epoch })
      assert.deepStrictEqual(yield* empties, [900, 1_000], "stored once")
      // one with another usage after a landed one is another reply: adopted first, then taken
      session.faults.sync = 1
      assertUncertain(
        yield* Effect.exit(c.recordReply(plain, usage(2_000), { requestEpoch: prepared.epoch })),
        "empty reply (usage 2,000)",
        "Io"
      )
      const live = yield* c.recordReply(plain, usage(20_000), { requestEpoch: prepared.epoch })
      assert.deepStrictEqual(yield* empties, [900, 1_000, 2_000, 20_000])
      assert.strictEqual(live.usage?.usage.input_tokens, 20_000, "the latest usage is the state's")
      assert.strictEqual(json(live.view), json([user("u1: hello")]), "no message added")
      yield* close
      const reopened = yield* openConversation(session.log())
      assert.strictEqual(stored(yield* reopened.conversation.state), stored(live), "a resume equals the live state")
      yield* reopened.close
    }).pipe(Effect.scoped))

  it.live("another step after a landed reply adopts it first: the request holds it, the next append follows it", () =>
    Effect.gen(function* () {
      const session = yield* jsonlSession
      const { conversation: c, close } = yield* openConversation(session.log())
      yield* c.append(user("u1: hello"))
      const prepared = yield* c.prepare
      session.faults.sync = 1
      assertUncertain(
        yield* Effect.exit(c.recordReply(reply("r1: landed"), usage(500), { requestEpoch: prepared.epoch })),
        "reply r1",
        "Io"
      )
      // a different step: it catches up, adopts the reply, and goes on after it
      yield* c.append(user("u2: next"))
      const next = yield* c.prepare
      assert.deepStrictEqual(next.request.messages.map((m) => json(m)), [
        json(user("u1: hello")),
        json(reply("r1: landed")),
        json(user("u2: next"))
      ])
      const live = yield* c.state
      assert.strictEqual(live.reply?.requestEpoch, prepared.epoch, "the adopted reply's report is the state's")
      assert.deepStrictEqual(labels((yield* session.loaded).entries), ["u1", "r1", "u2"])
      yield* close
      const reopened = yield* openConversation(session.log())
      assert.strictEqual(stored(yield* reopened.conversation.state), stored(live), "a resume equals the live state")
      yield* reopened.close
    }).pipe(Effect.scoped))

  it.live("the same compact taken again after its boundary landed returns its outcome: one compaction", () =>
    Effect.gen(function* () {
      const session = yield* jsonlSession
      const { conversation: c, close } = yield* openConversation(session.log())
      for (let k = 1; k <= 4; k++) {
        yield* c.append(user(words(`u${k}`, 150)))
        yield* c.recordReply(reply(`r${k}: done`), usage(2_000 * k))
      }
      session.faults.sync = 1
      const failed = yield* Effect.exit(c.compact())
      assertUncertain(failed, "compact", "Io")
      assert.strictEqual((yield* c.state).epoch, 0)
      const boundaries = (entries: ReadonlyArray<Entry>) => entries.filter((e) => e.type === "compaction").length
      assert.strictEqual(boundaries((yield* session.loaded).entries), 1, "the boundary landed")
      const again = yield* c.compact()
      assert.strictEqual(again.outcome._tag, "Compacted")
      assert.strictEqual(boundaries((yield* session.loaded).entries), 1, "nothing compacted twice")
      const live = yield* c.state
      assert.strictEqual(live.epoch, 1)
      assert.strictEqual(json(again.request.messages), json(live.view))
      assert.strictEqual(json(live.view), json((yield* session.loaded).view))
      yield* close
      const reopened = yield* openConversation(session.log())
      assert.strictEqual(stored(yield* reopened.conversation.state), stored(live), "a resume equals the live state")
      yield* reopened.close
    }).pipe(Effect.scoped))

  it.live("SessionLog: a failed write names the entries it tried; catchUp shows whether they landed", () =>
    Effect.gen(function* () {
      const session = yield* jsonlSession
      yield* Effect.gen(function* () {
        const log = yield* SessionLog
        yield* log.append([user("first")])
        session.faults.sync = 1
        const landed = yield* Effect.flip(log.append([user("landed")]))
        assert.strictEqual(landed.entryIds?.length, 1)
        assert.strictEqual((yield* log.catchUp).head, landed.entryIds![0], "the log's head is the entry it tried")
        const head = (yield* log.snapshot).head
        session.faults.write = 1
        const lost = yield* Effect.flip(log.append([user("lost")]))
        assert.strictEqual(lost.entryIds?.length, 1)
        assert.strictEqual((yield* log.catchUp).head, head, "nothing landed: the head is unchanged")
      }).pipe(Effect.provide(session.log()))
      assert.deepStrictEqual(labels((yield* session.loaded).entries), ["first", "landed"])
    }).pipe(Effect.scoped))
})

// ============================================================================
// PostgreSQL: the COMMIT's answer lost, then the server out of reach past the deadline
// ============================================================================

/**
 * A loopback proxy to the database at `databaseUrl`. `cut(landed)` arms it: at the client's next COMMIT (its text, or
 * a prepared statement that is one) it forwards it and drops the answer (`landed: true`), or drops it unsent, and cuts
 * every connection; from then on it refuses every connection until `restore()`. `landed` resolves once the server
 * answered the forwarded COMMIT (the transaction is committed).
 */
const cuttingProxy = (databaseUrl: string) =>
  Effect.acquireRelease(
    Effect.callback<{
      readonly url: string
      readonly cut: (landed: boolean) => Promise<void>
      readonly restore: () => void
      readonly server: net.Server
    }>((resume) => {
      const target = new URL(databaseUrl)
      const sockets = new Set<net.Socket>()
      const commits = new Set<string>()
      let armed: { readonly forward: boolean; readonly done: () => void } | undefined
      let down = false
      const server = net.createServer((client) => {
        if (down) return void client.destroy()
        const upstream = net.connect(Number(target.port || 5432), target.hostname)
        let severed = false
        sockets.add(client)
        sockets.add(upstream)
        upstream.on("data", (d: Buffer) => {
          if (severed) upstream.destroy() // the server answered the COMMIT, which nobody hears
          else client.write(d)
        })
        upstream.on("error", () => client.destroy())
        client.on("error", () => upstream.destroy())
        client.on("close", () => {
          sockets.delete(client)
          if (!severed) upstream.destroy()
        })
        upstream.on("close", () => {
          sockets.delete(upstream)
          client.destroy()
        })
        client.on("data", (d: Buffer) => {
          if (down) return
          const text = d.toString("latin1")
          // the names of the prepared statements that are a COMMIT (a Parse message: name, then the query)
          for (const m of text.matchAll(/([A-Za-z0-9_]+)\0COMMIT\0/g)) commits.add(m[1]!)
          const isCommit = text.includes("COMMIT") || [...commits].some((name) => text.includes(`\0${name}\0`))
          if (armed !== undefined && isCommit) {
            const { forward, done } = armed
            armed = undefined
            down = true
            for (const s of sockets) if (s !== upstream) s.destroy()
            if (forward) {
              severed = true
              upstream.once("close", done)
              upstream.write(d)
            } else {
              upstream.destroy()
              done()
            }
            return
          }
          upstream.write(d)
        })
      })
      server.listen(0, "127.0.0.1", () => {
        const { port } = server.address() as net.AddressInfo
        resume(Effect.succeed({
          url: `postgres://postgres@127.0.0.1:${port}${target.pathname}`,
          cut: (landed) => new Promise<void>((done) => (armed = { forward: landed, done })),
          restore: () => void (down = false),
          server
        }))
      })
    }),
    ({ server }) => Effect.sync(() => server.close())
  )

for (const database of databases) {
  describe(`a logged conversation whose append committed while its answer was lost: PostgreSQL (${database.name})`, () => {
    let pg: Awaited<ReturnType<typeof makeSchema>> | undefined
    beforeAll(async () => {
      pg = await makeSchema(database)
    }, 120_000)
    afterAll(async () => {
      await pg?.drop()
    })

    it.live(
      "Unavailable past the deadline: the same step taken again stores it once; another writer since fails with Conflict",
      () =>
        Effect.gen(function* () {
          const proxy = yield* cuttingProxy(pg!.url)
          const sessionId = `uncertain-${Math.random().toString(36).slice(2, 8)}`
          const direct = Layer.succeedContext(pg!.context)
          const viaProxy = () =>
            SessionLog.layer({ sessionId, retryDeadline: "400 millis" }).pipe(
              Layer.provide(
                SessionStoreSql.layerPg({
                  url: proxy.url,
                  startupParameters: { search_path: pg!.schema },
                  migrate: false
                })
              ),
              Layer.fresh
            )
          const loaded = readSession(sessionId, { tail: false }).pipe(Effect.provide(direct))
          /** Runs `step` while the proxy cuts at its COMMIT; brings the server back once the step failed. */
          const cutDuring = <A, E>(step: Effect.Effect<A, E>, landed: boolean) =>
            Effect.gen(function* () {
              const cut = proxy.cut(landed)
              const exit = yield* Effect.exit(step)
              yield* Effect.promise(() => cut)
              proxy.restore()
              return exit
            })

          const { conversation: c, close } = yield* openConversation(viaProxy())
          yield* c.append(user("u1: hello"))
          yield* c.recordReply(reply("r1: hi"), usage(500))
          const before = yield* c.state

          // the COMMIT reached the server; its answer did not, and the server stayed out of reach past the deadline
          const landed = yield* cutDuring(c.append(user("u2: landed")), true)
          assertUncertain(landed, "append u2", "Unavailable")
          assert.strictEqual(stored(yield* c.state), stored(before), "the state is the one before the change")
          assert.deepStrictEqual(labels((yield* loaded).entries), ["u1", "r1", "u2"], "the row was committed")
          yield* c.append(user("u2: landed"))
          assert.deepStrictEqual(labels((yield* loaded).entries), ["u1", "r1", "u2"], "nothing written again")
          assert.strictEqual(json((yield* c.state).view), json((yield* loaded).view), "the state is the log's")

          // the COMMIT never reached the server: nothing landed, and the same reply taken again writes it once
          const prepared = yield* c.prepare
          const lost = yield* cutDuring(
            c.recordReply(reply("r2: lost"), usage(600), { requestEpoch: prepared.epoch }),
            false
          )
          assertUncertain(lost, "reply r2", "Unavailable")
          assert.deepStrictEqual(labels((yield* loaded).entries), ["u1", "r1", "u2"], "nothing landed")
          yield* c.recordReply(reply("r2: lost"), usage(600), { requestEpoch: prepared.epoch })
          assert.deepStrictEqual(labels((yield* loaded).entries), ["u1", "r1", "u2", "r2"])

          // landed, and another writer appended after it before this conversation's next step: Conflict, nothing
          // written, the state unchanged; a reopen continues from the log with both
          assertUncertain(yield* cutDuring(c.append(user("u3: landed")), true), "append u3", "Unavailable")
          yield* Effect.flatMap(Effect.service(SessionLog), (other) => other.append([user("o1: another writer")])).pipe(
            Effect.provide(SessionLog.layer({ sessionId }).pipe(Layer.provide(direct), Layer.fresh))
          )
          const stale = yield* c.state
          const conflict = failureOf(yield* Effect.exit(c.append(user("u3: landed"))), "append u3 again")
          assert.strictEqual(conflict.reason, "Persist")
          assert.strictEqual((conflict.cause as SessionLogError).reason, "Conflict")
          assert.match(conflict.message, /another writer appended to the session.*reopening continues from the log/)
          assert.strictEqual(yield* c.state, stale, "the state is unchanged")
          yield* close
          assert.deepStrictEqual(labels((yield* loaded).entries), ["u1", "r1", "u2", "r2", "u3", "o1"])

          const reopened = yield* openConversation(viaProxy())
          const resumed = yield* reopened.conversation.state
          assert.strictEqual(json(resumed.view), json((yield* loaded).view))
          yield* reopened.conversation.recordReply(reply("r3: after both"), usage(700))
          yield* reopened.close
          assert.deepStrictEqual(labels((yield* loaded).entries), ["u1", "r1", "u2", "r2", "u3", "o1", "r3"])
        }).pipe(Effect.scoped),
      120_000
    )
  })
}

// ============================================================================
// Property: random agent loops on a JSONL log, with uncertain failures injected and retried or not
// ============================================================================

const Steps = Schema.Array(
  Schema.Struct({
    /** 0: compact now; else the loop's next step. */
    action: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 5 })),
    /** 0: the step's first write lands and its fsync fails; 1: its write fails (nothing lands); else no fault. */
    fault: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 4 })),
    /** After a failure: the same call again (else the loop goes on with its next step). */
    retry: Schema.Boolean,
    big: Schema.Boolean
  })
).check(Schema.isMinLength(6), Schema.isMaxLength(24))

describe("random agent loops with writes failing after they may have landed (JSONL)", () => {
  it.live.prop(
    "every step is in the log once, the state is the log's after each step, and a resume equals the live state",
    [Steps],
    ([steps]) =>
      Effect.gen(function* () {
        const session = yield* jsonlSession
        let { conversation: c, close } = yield* openConversation(session.log())
        /** The labels the log must hold, in order. */
        const expected: Array<string> = []
        let preparedEpoch: number | undefined
        let n = 0
        const logHoldsState = (label: string) =>
          Effect.gen(function* () {
            const loaded = yield* session.loaded
            assert.deepStrictEqual(labels(loaded.entries), expected, `${label}: every step once`)
            assert.strictEqual(json((yield* c.state).view), json(loaded.view), `${label}: the state is the log's`)
          })
        for (const step of steps) {
          n++
          const last = (yield* c.state).view.at(-1) as MessageParam | undefined
          const kind = step.action === 0
            ? "compact"
            : last === undefined || last.role === "assistant"
            ? "append"
            : preparedEpoch === undefined
            ? "prepare"
            : "reply"
          // one reply in six comes back with empty content: no message, its usage and id logged all the same
          const empty = kind === "reply" && step.action === 1
          const label = `step ${n} (${empty ? "empty reply" : kind})`
          const text = kind === "append" ? words(`u${n}`, step.big ? 300 : 80) : empty ? `e${n}` : `r${n}: answered`
          const call: () => Effect.Effect<void, ConversationError<unknown>> = kind === "compact"
            ? () => Effect.asVoid(c.compact())
            : kind === "append"
            ? () => Effect.asVoid(c.append(user(text)))
            : kind === "prepare"
            ? () => Effect.map(c.prepare, (p) => void (preparedEpoch = p.epoch))
            : () =>
              Effect.asVoid(
                empty
                  ? c.recordReply(emptyReply(text, step.big ? 20_000 : 900), undefined, { requestEpoch: preparedEpoch })
                  : c.recordReply(reply(text), usage(step.big ? 20_000 : 800), { requestEpoch: preparedEpoch })
              )
          session.faults.sync = step.fault === 0 ? 1 : 0
          session.faults.write = step.fault === 1 ? 1 : 0
          const entriesBefore = (yield* session.loaded).entries.length
          const exit = yield* Effect.exit(call())
          // a fault the step did not meet (it wrote nothing) is not left for the next
          const met = session.faults.sync === 0 && session.faults.write === 0
          session.faults.sync = 0
          session.faults.write = 0
          const stores = kind === "append" || kind === "reply"
          if (Exit.isSuccess(exit)) {
            if (stores) expected.push(text.split(":")[0]!)
            if (kind !== "prepare" && kind !== "compact") preparedEpoch = undefined
            yield* logHoldsState(label)
            continue
          }
          assert.isTrue(met && step.fault <= 1, `${label}: only an injected fault fails a step`)
          assertUncertain(exit, label, "Io")
          const landed = (yield* session.loaded).entries.length > entriesBefore
          assert.strictEqual(landed, step.fault === 0, `${label}: the write landed when only its fsync failed`)
          if (step.retry) {
            yield* call()
            if (stores) expected.push(text.split(":")[0]!)
            if (kind !== "prepare" && kind !== "compact") preparedEpoch = undefined
            yield* logHoldsState(`${label}, taken again`)
          } else {
            // the loop goes on with another step, which adopts a change that landed
            if (stores && landed) expected.push(text.split(":")[0]!)
            if (kind === "reply") preparedEpoch = undefined
          }
        }
        // one more step settles a change the last step left uncertain
        yield* c.prepare
        yield* logHoldsState("the final prepare")
        const live = yield* c.state
        yield* close
        ;({ conversation: c, close } = yield* openConversation(session.log()))
        assert.strictEqual(stored(yield* c.state), stored(live), "a resume equals the live state")
        yield* close
      }).pipe(Effect.scoped, Effect.provide(Logger.layer([]))),
    { timeout: 600_000, arbitrary: { runs: 250 } }
  )
})
