/**
 * A JSONL log cut back to a prefix while its tail index (`<id>.tail`) stays newer than it (sync "never" and a power
 * loss, or an older copy of the log restored beside a newer index): the default open (from the tail) never returns a
 * view that differs from the fold of every line of the same file. A cut at every line boundary between the index's
 * line and the last compaction line, where the index names a tail whose boundary the file no longer holds, opens to
 * the full fold for a `SessionLog` and for a `Conversation.layerLogged` resume, and the writer's open leaves an index
 * that matches the file again; a cut at any byte of generated sessions opens to the full fold and reports a torn last
 * line as the full read does. The fold of a tail checks that the tail holds its boundary, whatever the store.
 */
import { NodeFileSystem, NodePath } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Result, Schema } from "effect"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Conversation } from "../src/Conversation.ts"
import type { MessageParam } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { isBoundaryLine, loadTail, PREFIX_CHARS, tailOf } from "../src/internal/sessionTail.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import type { Loaded, StoredEntry } from "../src/SessionEntry.ts"
import { readSession, SessionLog, type SessionLogError } from "../src/SessionLog.ts"
import { type MemorySessions, SessionStore } from "../src/SessionStore.ts"
import { layerSessionLog, readJsonl } from "../src/SessionStoreJsonl.ts"
import { generateSession, prng } from "./fixtures/Conversation.ts"
import { exactState, foldedFromStart } from "./fixtures/ResumeReference.ts"

const platform = Layer.mergeAll(NodeFileSystem.layer, NodePath.layer)

/** A small window, so a generated session compacts several times. */
const options = {
  policy: CompactionPolicy.makeUnsafe({
    contextWindow: 12_000,
    minRemaining: 3_000,
    keepRecentTokens: 1_500,
    keepRecentTurns: 1
  }),
  keepRecent: 3,
  minSavings: 0,
  minFreedTokens: 300
}

/** The JSONL log of session `s` in `directory`, as an agent opens it (from its tail by default). */
const jsonlLog = (directory: string): Layer.Layer<SessionLog, SessionLogError> =>
  layerSessionLog({ directory, sessionId: "s", sync: "never" }).pipe(Layer.provide(platform), Layer.fresh)

const conversationOver = (directory: string) =>
  Conversation.layerLogged(options).pipe(
    Layer.provideMerge(jsonlLog(directory)),
    Layer.provide(ExtractiveSummarizer.layer)
  )

/** An agent's run of generated session `seed` (`messages` long) through `Conversation`, logged in `directory`. */
const runAgent = (directory: string, seed: number, messages: number) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    const skip = prng(seed * 31)
    for (const m of generateSession(seed, { messages, maxOutput: 6_000 }) as unknown as Array<MessageParam>) {
      if (m.role === "assistant") {
        const prepared = yield* conversation.prepare
        const size = JSON.stringify(prepared.request).length
        yield* conversation.recordReply(m, { input_tokens: Math.ceil(size / 2), output_tokens: 100 }, {
          requestEpoch: prepared.epoch
        })
      } else if (typeof m.content !== "string" && m.content[0]?.type === "tool_result" && skip() < 0.1) continue
      else yield* conversation.append(m)
    }
  }).pipe(Effect.provide(conversationOver(directory)))

/** The parts of a loaded session that a resume reads. */
const state = (l: Loaded) => ({ view: JSON.stringify(l.view), entryIds: l.entryIds, head: l.head, seq: l.seq })

/** Where each line of a file starts. */
const lineStarts = (bytes: Uint8Array): Array<number> => {
  const starts: Array<number> = []
  for (let at = 0; at < bytes.length; at = bytes.indexOf(0x0a, at) + 1) {
    starts.push(at)
    if (bytes.indexOf(0x0a, at) === -1) break
  }
  return starts
}

/** A written session: its directory, log bytes, tail index (as the writer left it) and the start of every line. */
interface Written {
  readonly directory: string
  readonly bytes: Uint8Array
  readonly index: string
  readonly offset: number
  readonly starts: ReadonlyArray<number>
}

const written = (directory: string): Written => {
  const bytes = readFileSync(join(directory, "s.jsonl"))
  const index = readFileSync(join(directory, "s.tail"), "utf8")
  return { directory, bytes, index, offset: JSON.parse(index).offset, starts: lineStarts(bytes) }
}

/** A copy of the session with its log cut to its first `cut` bytes and the index the writer left beside it. */
const cutCopy = (session: Written, cut: number): string => {
  const copy = mkdtempSync(join(tmpdir(), "tail-cut-copy-"))
  writeFileSync(join(copy, "s.jsonl"), session.bytes.subarray(0, cut))
  writeFileSync(join(copy, "s.tail"), session.index)
  return copy
}

/** Every line of the log in `directory` read and checked (no index), and its lines as stored entries. */
const fullRead = (directory: string) =>
  Effect.map(readJsonl({ directory, sessionId: "s", tail: false }).pipe(Effect.provide(platform)), (loaded) => {
    const text = readFileSync(join(directory, "s.jsonl"), "utf8")
    const lines = text.slice(0, text.lastIndexOf("\n") + 1).split("\n").slice(0, -1)
    return { loaded, stored: lines.map((line, i): StoredEntry => ({ seq: i + 1, line })) }
  })

/** The whole lines of the log in `directory`, as stored entries. */
const linesOf = (directory: string): ReadonlyArray<StoredEntry> => {
  const text = readFileSync(join(directory, "s.jsonl"), "utf8")
  return text.slice(0, text.lastIndexOf("\n") + 1).split("\n").slice(0, -1).map((line, i) => ({ seq: i + 1, line }))
}

/** The conversation `Conversation.layerLogged` resumes over the log in `directory`, and what its log recovered. */
const resume = (directory: string) =>
  Effect.gen(function* () {
    const resumed = yield* (yield* Conversation).state
    return { resumed, recovered: (yield* SessionLog).recovered }
  }).pipe(Effect.provide(conversationOver(directory)))

/** The index the writer's open left: the full read's tail start, or none when the file's tail is all of it. */
const assertIndexMatches = (directory: string, stored: ReadonlyArray<StoredEntry>, label: string) => {
  const from = tailOf(stored)[0]?.seq ?? 1
  const index = join(directory, "s.tail")
  if (from === 1) assert.isFalse(existsSync(index), `${label}: the stale index is removed`)
  else assert.strictEqual(JSON.parse(readFileSync(index, "utf8")).seq, from, `${label}: the index is rewritten`)
}

describe("SessionLog tail: a log cut back under a newer tail index", () => {
  it.effect(
    "cut at every line between the index's line and the last compaction: the default open is the full fold",
    () =>
      Effect.gen(function* () {
        const directory = mkdtempSync(join(tmpdir(), "tail-cut-"))
        try {
          yield* runAgent(directory, 5, 160)
          const session = written(directory)
          const { stored: all } = yield* fullRead(directory)
          const boundaries = all.filter((e) => isBoundaryLine(e.line.slice(0, PREFIX_CHARS)))
          assert.isAtLeast(boundaries.length, 3, "the session compacts several times")
          const last = boundaries.at(-1)!
          const lastStart = session.starts[last.seq - 1]!
          assert.isBelow(session.offset, lastStart, "the index names a line before the last compaction")
          const cuts = session.starts.filter((s) => s >= session.offset && s <= lastStart)
          assert.isAtLeast(cuts.length, 3)
          for (const cut of cuts) {
            const label = `cut at byte ${cut}`
            // a log opened by a SessionLog, as `tail: false` opens it
            const forLog = cutCopy(session, cut)
            const forConversation = cutCopy(session, cut)
            try {
              const { loaded: full } = yield* fullRead(forLog)
              assert.isBelow(full.seq, last.seq, label)
              const opened = yield* Effect.flatMap(Effect.service(SessionLog), (log) => log.loaded).pipe(
                Effect.provide(jsonlLog(forLog))
              )
              assert.deepStrictEqual(state(opened), state(full), label)
              assert.deepStrictEqual(opened.issues, full.issues, label)
              assertIndexMatches(forLog, linesOf(forLog), label)
              // a reader's open (no writer, nothing changed on disk) reads what the full read does
              const read = yield* readJsonl({ directory: forConversation, sessionId: "s" }).pipe(
                Effect.provide(platform)
              )
              assert.deepStrictEqual(state(read), state(full), `${label}: a reader`)
              assert.strictEqual(readFileSync(join(forConversation, "s.tail"), "utf8"), session.index, label)
              // the conversation resumed over it is the fold of every line from the start
              const { resumed } = yield* resume(forConversation)
              assert.deepStrictEqual(exactState(resumed), exactState(foldedFromStart(full)), `${label}: resume`)
              assertIndexMatches(forConversation, linesOf(forConversation), `${label}: resume`)
            } finally {
              rmSync(forLog, { recursive: true, force: true })
              rmSync(forConversation, { recursive: true, force: true })
            }
          }
        } finally {
          rmSync(directory, { recursive: true, force: true })
        }
      }),
    120_000
  )

  it.effect(
    "an agent goes on from the cut: it ends where it ends going on from the same log with no index",
    () =>
      Effect.gen(function* () {
        const directory = mkdtempSync(join(tmpdir(), "tail-cut-"))
        try {
          yield* runAgent(directory, 7, 120)
          const session = written(directory)
          const { stored: all } = yield* fullRead(directory)
          const last = all.filter((e) => isBoundaryLine(e.line.slice(0, PREFIX_CHARS))).at(-1)!
          // the log cut just before its last compaction line; the index names that compaction's tail
          const cut = session.starts[last.seq - 1]!
          const copy = cutCopy(session, cut)
          const reference = cutCopy(session, cut)
          rmSync(join(reference, "s.tail"))
          try {
            // the agent goes on over the cut log: another run of messages, with compactions
            const goOn = (dir: string) =>
              Effect.gen(function* () {
                yield* runAgent(dir, 8, 120)
                const { loaded: full } = yield* fullRead(dir)
                const tail = yield* readJsonl({ directory: dir, sessionId: "s", tail: true }).pipe(
                  Effect.provide(platform)
                )
                assert.deepStrictEqual(state(tail), state(full))
                return full
              })
            const full = yield* goOn(copy)
            const expected = yield* goOn(reference)
            const boundariesIn = (dir: string) =>
              readFileSync(join(dir, "s.jsonl"), "utf8").split("\n").filter((l) => isBoundaryLine(l)).length
            assert.isAbove(boundariesIn(copy), boundariesIn(directory) - 1, "the agent compacted after the cut")
            assert.strictEqual(JSON.stringify(full.view), JSON.stringify(expected.view))
            const { resumed } = yield* resume(copy)
            assert.deepStrictEqual(exactState(resumed), exactState(foldedFromStart(expected)))
          } finally {
            rmSync(copy, { recursive: true, force: true })
            rmSync(reference, { recursive: true, force: true })
          }
        } finally {
          rmSync(directory, { recursive: true, force: true })
        }
      }),
    120_000
  )

  const Seed = Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 1_000_000 }))
  const Fraction = Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 1_000_000 }))
  const Cuts = Schema.Array(Fraction).check(Schema.isMinLength(4), Schema.isMaxLength(8))

  it.effect.prop(
    "property: a random session cut at random bytes opens to the full fold and reports its torn line as it does",
    [Seed, Cuts],
    ([seed, fractions]) =>
      Effect.gen(function* () {
        const directory = mkdtempSync(join(tmpdir(), "tail-cut-"))
        try {
          yield* runAgent(directory, seed, 60 + (seed % 80))
          if (!existsSync(join(directory, "s.tail"))) return // no compaction moved the tail: nothing to cut under
          const session = written(directory)
          // any byte of the file, and as many after the index's line (where a newer index can mislead)
          const cuts = fractions.map((f, i) => {
            const from = i % 2 === 0 ? 0 : session.offset
            return from + Math.floor((f / 1_000_001) * (session.bytes.length + 1 - from))
          })
          for (const cut of cuts) {
            const label = `seed ${seed}, cut at byte ${cut} of ${session.bytes.length} (index at ${session.offset})`
            const copy = cutCopy(session, cut)
            try {
              const { loaded: full } = yield* fullRead(copy)
              const tail = yield* readJsonl({ directory: copy, sessionId: "s", tail: true }).pipe(
                Effect.provide(platform)
              )
              assert.deepStrictEqual(state(tail), state(full), label)
              assert.deepStrictEqual(tail.issues, full.issues, `${label}: the torn line`)
              const { recovered, resumed } = yield* resume(copy)
              assert.deepStrictEqual(exactState(resumed), exactState(foldedFromStart(full)), label)
              assert.deepStrictEqual(recovered, full.issues, `${label}: the writer's open`)
              // the file as the writer's open left it: a torn tail, or an append whose later lines are missing, cut
              assertIndexMatches(copy, linesOf(copy), label)
            } finally {
              rmSync(copy, { recursive: true, force: true })
            }
          }
        } finally {
          rmSync(directory, { recursive: true, force: true })
        }
      }),
    { timeout: 180_000, arbitrary: { runs: 12 } }
  )
})

describe("SessionLog tail: the fold of a tail holds its boundary", () => {
  /** A session in memory: 12 messages, compacted (keeping the last 4), then 6 more messages. */
  const compacted = (sessions: MemorySessions) =>
    Effect.gen(function* () {
      const log = yield* SessionLog
      for (let i = 1; i <= 12; i++) yield* log.append([{ role: "user", content: `m${i}` }])
      const snapshot = yield* log.snapshot
      const view = [{ role: "user" as const, content: "summary of m1..m8" }, ...snapshot.view.slice(8)]
      yield* log.recordCompaction({ snapshot, cut: 8, view, summarizer: "test" })
      for (let i = 13; i <= 18; i++) yield* log.append([{ role: "user", content: `m${i}` }])
    }).pipe(Effect.provide(
      SessionLog.layer({ sessionId: "s" }).pipe(
        Layer.provide(SessionStore.layerMemory(sessions)),
        Layer.fresh
      )
    ))

  it.effect("the lines after the last boundary do not fold as a tail; a store handing them back is read in full", () =>
    Effect.gen(function* () {
      const sessions: MemorySessions = new Map()
      yield* compacted(sessions)
      const stored = sessions.get("s")!
      const boundary = stored.findIndex((e) => isBoundaryLine(e.line))
      assert.strictEqual(boundary, 12)
      assert.strictEqual(tailOf(stored)[0]!.seq, 9, "the tail starts at the first kept message")
      assert.isTrue(Result.isSuccess(loadTail(tailOf(stored))))
      const after = stored.slice(boundary + 1)
      const folded = loadTail(after)
      assert.isTrue(Result.isFailure(folded), "the lines after the boundary are not a tail")
      // a store whose tail read hands back those lines (as a stale index did): the open folds every line instead
      const misleading = Layer.effect(
        SessionStore,
        Effect.map(Effect.service(SessionStore), (store) => ({
          ...store,
          readTail: (sessionId: string) =>
            Effect.map(store.read(sessionId, 0), (r) => ({ entries: r.entries.slice(boundary + 1), issues: r.issues }))
        }))
      ).pipe(Layer.provide(SessionStore.layerMemory(sessions)))
      const full = yield* readSession("s", { tail: false }).pipe(Effect.provide(SessionStore.layerMemory(sessions)))
      const tail = yield* readSession("s", { tail: true }).pipe(Effect.provide(misleading))
      assert.deepStrictEqual(state(tail), state(full))
      assert.strictEqual(full.view[0]!.content, "summary of m1..m8", "the open keeps the summary")
    }))
})
