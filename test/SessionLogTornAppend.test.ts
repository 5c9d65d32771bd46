/**
 * An append of several entries lands whole or not at all on the JSONL file, also when its write is cut short after
 * whole lines (a kill inside the write call, which Linux may stop at a page boundary): the file cut at every byte of
 * a compaction-with-offloads append (its eviction line, its compaction line) and of an append of several messages
 * loads read-only, from the tail and in full, to the log before the append or after it whole, never part of it, and
 * leaves the file as it was; a writer's open cuts it back to the last whole append and leaves a tail index that
 * matches the file, whichever index lay beside it (the one before the append, or a newer one). A conversation resumed
 * from such a cut (`Conversation.layerLogged`, a policy that compacts and offloads) is the live state before the
 * compaction or after it. A child process killed with SIGKILL while it writes such appends leaves a log that loads and
 * reopens to whole appends only. Only the entries of an append of several carry `more`, as their last member.
 */
import { NodeFileSystem, NodePath } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Logger, Result } from "effect"
import type { ChildProcess } from "node:child_process"
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { Conversation } from "../src/Conversation.ts"
import type { ConversationState, MessageParam } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { isBoundaryLine, PREFIX_CHARS } from "../src/internal/sessionTail.ts"
import type { Message, ToolResultBlock } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { decodeLine, encodeEntry, type Entry, type Loaded, type LoadIssue } from "../src/SessionEntry.ts"
import { SessionLog, type SessionLogError, type SessionLogShape } from "../src/SessionLog.ts"
import { SessionStore } from "../src/SessionStore.ts"
import { layerSessionLog, readJsonl, SessionStoreJsonl } from "../src/SessionStoreJsonl.ts"
import { kill, spawnWriter, waitFor } from "./fixtures/childWriter.ts"
import { generateSession, prng } from "./fixtures/Conversation.ts"
import { exactState } from "./fixtures/ResumeReference.ts"
import { scratch } from "./fixtures/Scratch.ts"

const platform = Layer.mergeAll(NodeFileSystem.layer, NodePath.layer)

const user = (text: string): Message => ({ role: "user", content: text })
const assistant = (text: string): Message => ({ role: "assistant", content: text })
const call = (id: string): Message => ({
  role: "assistant",
  content: [{ type: "tool_use", id, name: "bash", input: { command: `run ${id}` } }]
})
const result = (id: string, text: string): Message => ({
  role: "user",
  content: [{ type: "tool_result", tool_use_id: id, content: text }]
})
const offloaded = (id: string): ToolResultBlock => ({ type: "tool_result", tool_use_id: id, content: `[gone ${id}]` })

/** The JSONL log of session `s` in `directory`, opened for writing from its tail (the default open). */
const jsonlLog = (directory: string): Layer.Layer<SessionLog, SessionLogError> =>
  layerSessionLog({ directory, sessionId: "s", sync: "never" }).pipe(Layer.provide(platform), Layer.fresh)

/** The session in `directory` read without writing: from its tail, or every line. */
const readOnly = (directory: string, tail: boolean) =>
  readJsonl({ directory, sessionId: "s", tail }).pipe(Effect.provide(platform), Effect.orDie)

/** The parts of a loaded session that a resume reads. */
const state = (l: Loaded) => ({ view: JSON.stringify(l.view), entryIds: l.entryIds, head: l.head, seq: l.seq })

/** The log file and tail index of session `s` in `directory` (`undefined`: no index). */
const files = (directory: string) => ({
  bytes: readFileSync(join(directory, "s.jsonl")),
  index: existsSync(join(directory, "s.tail")) ? readFileSync(join(directory, "s.tail"), "utf8") : undefined
})

/** Session `s` in `directory` made of `bytes` and the tail index `index` (none when `undefined`), and no lock. */
const lay = (directory: string, bytes: Uint8Array, index: string | undefined) => {
  writeFileSync(join(directory, "s.jsonl"), bytes)
  rmSync(join(directory, "s.tail"), { force: true })
  rmSync(join(directory, "s.lock"), { force: true })
  if (index !== undefined) writeFileSync(join(directory, "s.tail"), index)
}

/** The log around one append: the file and index before it and after it, the `seq` of its first entry. */
interface Around {
  readonly before: ReturnType<typeof files>
  readonly after: ReturnType<typeof files>
  readonly firstSeq: number
}

/** The warnings logged while `effect` runs, and its value. */
const logged = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.suspend(() => {
    const warnings: Array<string> = []
    return effect.pipe(
      Effect.map((value) => ({ value, warnings })),
      Effect.provide(Logger.layer([Logger.make((o) => void warnings.push(String(o.message)))]))
    )
  })

/**
 * Checks the session in `directory`, laid as the append of `around` cut at byte `cut` of the file after it with the
 * tail index `index`: read-only loads (from the tail and in full) give the log before the append (`reference`), or
 * after it when the cut is its end, report what was cut as a torn tail and change nothing; the writer's open gives the
 * same log and says what it cut, leaves the file of that log and an index that names a line of it, and a tail read
 * that is the full read.
 */
const checkCut = (
  directory: string,
  around: Around,
  references: { readonly before: Loaded; readonly after: Loaded },
  cut: number,
  index: string | undefined,
  label: string
) =>
  Effect.gen(function* () {
    const start = around.before.bytes.length
    const end = around.after.bytes.length
    const whole = cut === end
    const expected = whole ? around.after.bytes : around.before.bytes
    const reference = state(whole ? references.after : references.before)
    const torn: ReadonlyArray<LoadIssue> = cut > start && cut < end
      ? [{ _tag: "TornTail", line: around.firstSeq, offset: start, bytes: cut - start }]
      : []
    const laid = around.after.bytes.subarray(0, cut)
    lay(directory, laid, index)
    for (const tail of [false, true]) {
      const loaded = yield* readOnly(directory, tail)
      assert.deepStrictEqual(state(loaded), reference, `${label}: read-only (tail ${tail})`)
      assert.deepStrictEqual(loaded.issues, torn, `${label}: read-only (tail ${tail}) issues`)
    }
    assert.isTrue(Buffer.compare(readFileSync(join(directory, "s.jsonl")), laid) === 0, `${label}: nothing changed`)
    const { value: opened, warnings } = yield* logged(
      Effect.flatMap(Effect.service(SessionLog), (log) =>
        Effect.map(log.loaded, (loaded) => ({ loaded, recovered: log.recovered }))).pipe(
          Effect.provide(jsonlLog(directory)),
          Effect.orDie
        )
    )
    assert.deepStrictEqual(state(opened.loaded), reference, `${label}: the writer's open`)
    assert.deepStrictEqual(opened.recovered, torn, `${label}: what the writer's open recovered`)
    assert.strictEqual(
      warnings.some((w) =>
        w.includes(`(${cut - start} bytes)`)
      ),
      torn.length > 0,
      `${label}: the writer's open says how much it cut`
    )
    const now = files(directory)
    assert.isTrue(Buffer.compare(now.bytes, expected) === 0, `${label}: the file is cut back to the whole appends`)
    if (now.index !== undefined) {
      const named = JSON.parse(now.index) as { readonly offset: number; readonly id: string }
      assert.strictEqual(now.bytes[named.offset - 1], 0x0a, `${label}: the index names a line`)
      const line = now.bytes.subarray(named.offset, now.bytes.indexOf(0x0a, named.offset)).toString("utf8")
      assert.strictEqual(Result.getOrThrow(decodeLine(line)).id, named.id, `${label}: the index names its entry`)
    }
    const again = yield* readOnly(directory, true)
    assert.deepStrictEqual(state(again), reference, `${label}: a tail read after the writer's open`)
    assert.deepStrictEqual(again.issues, [], `${label}: nothing torn is left`)
  })

/** How many cuts are checked at once, each in a directory of its own. */
const LANES = 4

/**
 * Checks every cut of the append of `around`, from its first byte to its end, beside the index before it (and, with
 * `newerIndexToo`, beside the newer index the append left).
 */
const checkEveryCut = (around: Around, label: string, newerIndexToo: boolean) =>
  Effect.gen(function* () {
    // the cuts are independent: LANES directories take turns, so one cut's file I/O overlaps another's work
    const directories = Array.from({ length: LANES }, () => mkdtempSync(join(scratch, "torn-append-")))
    try {
      const reference = (bytes: Uint8Array) =>
        Effect.suspend(() => {
          lay(directories[0]!, bytes, undefined)
          return readOnly(directories[0]!, false)
        })
      const references = { before: yield* reference(around.before.bytes), after: yield* reference(around.after.bytes) }
      assert.strictEqual(references.before.seq, around.firstSeq - 1)
      const checks: Array<{ readonly cut: number; readonly index: string | undefined; readonly label: string }> = []
      for (let cut = around.before.bytes.length; cut <= around.after.bytes.length; cut++) {
        checks.push({ cut, index: around.before.index, label: `${label}, cut at byte ${cut}` })
        // a newer index than the file (sync "never" and a power loss): passed over, then written again (every few
        // bytes, and around each line's end)
        const edge = [-1, 0, 1].some((d) => around.after.bytes[cut + d] === 0x0a)
        if (newerIndexToo && (edge || cut % 7 === 0)) {
          checks.push({ cut, index: around.after.index, label: `${label}, cut at byte ${cut}, newer index` })
        }
      }
      yield* Effect.forEach(
        directories,
        (directory, lane) =>
          Effect.forEach(
            checks.filter((_, k) => k % LANES === lane),
            (c) => checkCut(directory, around, references, c.cut, c.index, c.label),
            { discard: true }
          ),
        { concurrency: "unbounded", discard: true }
      )
    } finally {
      for (const directory of directories) rmSync(directory, { recursive: true, force: true })
    }
  })

/** Writes `write` on session `s` in `directory` after `setUp`: the log around its append. */
const around = <A>(
  directory: string,
  setUp: (log: SessionLogShape) => Effect.Effect<void, SessionLogError>,
  write: (log: SessionLogShape) => Effect.Effect<A, SessionLogError>
) =>
  Effect.gen(function* () {
    const log = yield* SessionLog
    yield* setUp(log)
    const before = files(directory)
    const firstSeq = (yield* log.loaded).seq + 1
    yield* write(log)
    return { before, after: files(directory), firstSeq } satisfies Around
  }).pipe(Effect.provide(jsonlLog(directory)), Effect.orDie)

/** A session: a first exchange and a tool pair, a first compaction with its offload, and another tool pair. */
const setUpSession = (log: SessionLogShape) =>
  Effect.gen(function* () {
    yield* log.append([user("first task"), assistant("on it")])
    yield* log.append([call("t1"), result("t1", "output of t1")])
    yield* compactWithOffloads(log, 2, ["t1"])
    yield* log.append([call("t2"), result("t2", "output of t2")])
  })

/** Records a compaction of the live view's first `cut` messages, offloading the results `ids` it keeps. */
const compactWithOffloads = (log: SessionLogShape, cut: number, ids: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const snapshot = yield* log.snapshot
    return yield* log.recordCompaction({
      snapshot,
      cut,
      view: [user(`summary of ${cut} messages`), ...snapshot.view.slice(cut)],
      summarizer: "test",
      evictions: ids.map((id) => ({ toolUseId: id, block: offloaded(id) }))
    })
  })

describe("a store append of several entries on the JSONL file is whole or absent", () => {
  it.effect(
    "a compaction with its offloads, cut at every byte of its append: the log before it, or after it",
    () =>
      Effect.gen(function* () {
        const directory = mkdtempSync(join(scratch, "torn-append-"))
        try {
          const written = yield* around(directory, setUpSession, (log) => compactWithOffloads(log, 3, ["t2"]))
          const lines = written.after.bytes.subarray(written.before.bytes.length).toString("utf8").split("\n")
          assert.deepStrictEqual(lines.map((l) => l === "" ? "" : Result.getOrThrow(decodeLine(l)).type), [
            "compaction",
            "eviction",
            ""
          ])
          assert.notStrictEqual(written.after.index, written.before.index, "the compaction moves the log's tail")
          yield* checkEveryCut(written, "compaction and offloads", true)
        } finally {
          rmSync(directory, { recursive: true, force: true })
        }
      }),
    120_000
  )

  it.effect(
    "an append of three messages, cut at every byte: the log before it, or after it",
    () =>
      Effect.gen(function* () {
        const directory = mkdtempSync(join(scratch, "torn-append-"))
        try {
          const written = yield* around(
            directory,
            setUpSession,
            (log) => log.append([call("t3"), result("t3", "output of t3"), assistant("done")])
          )
          yield* checkEveryCut(written, "three messages", false)
        } finally {
          rmSync(directory, { recursive: true, force: true })
        }
      }),
    120_000
  )

  it.effect("only the entries of an append of several carry more, last before the checksum", () =>
    Effect.gen(function* () {
      const directory = mkdtempSync(join(scratch, "torn-append-"))
      try {
        yield* around(directory, setUpSession, (log) => log.append([user("alone")]))
        const lines = readFileSync(join(directory, "s.jsonl"), "utf8").split("\n").slice(0, -1)
        const entries = lines.map((line) => Result.getOrThrow(decodeLine(line)))
        // set up: two messages, a pair, a compaction and its eviction, a pair; then one message alone
        assert.deepStrictEqual(entries.map((e) => e.more), [
          1,
          undefined,
          1,
          undefined,
          1,
          undefined,
          1,
          undefined,
          undefined
        ])
        lines.forEach((line, i) => {
          const entry = entries[i]!
          // a single append's line, or the last of an append, is what it was before `more` existed
          if (entry.more === undefined) assert.notInclude(line, `"more"`)
          else assert.match(line, /,"more":[0-9]+,"sum":"[0-9a-f]{32}"\}$/)
          assert.strictEqual(encodeEntry(entry), line, "the decoded entry encodes to its line")
        })
        // the compaction line still starts as a boundary line
        const boundary = lines[entries.findIndex((e) => e.type === "compaction")]!
        assert.isTrue(isBoundaryLine(boundary.slice(0, PREFIX_CHARS)))
        // no writer of v1 or v2 wrote it
        const v2 = encodeEntry({ ...entries[0]!, v: 2 } as Entry)
        const decoded = decodeLine(v2)
        assert.isTrue(Result.isFailure(decoded) && decoded.failure.reason === "Corrupt")
      } finally {
        rmSync(directory, { recursive: true, force: true })
      }
    }))
})

// ============================================================================
// A conversation resumed from a cut inside its compaction's append
// ============================================================================

const OPTIONS = {
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

const conversationOver = (directory: string) =>
  Conversation.layerLogged(OPTIONS).pipe(
    Layer.provideMerge(
      SessionLog.layer({ sessionId: "s", sync: "never" }).pipe(
        Layer.provide(SessionStoreJsonl.layer({ directory }).pipe(Layer.provide(platform)))
      )
    ),
    Layer.provide(ExtractiveSummarizer.layer),
    Layer.fresh
  )

/** The store of `directory`, recording the file's size after each append that landed. */
const recordingOver = (directory: string, sizes: Array<{ readonly seq: number; readonly bytes: number }>) =>
  Layer.effect(
    SessionStore,
    Effect.map(Effect.service(SessionStore), (store) =>
      SessionStore.of({
        ...store,
        append: (id, expectedSeq, entries, options) =>
          Effect.tap(store.append(id, expectedSeq, entries, options), (r) =>
            Effect.sync(() => {
              if (r._tag === "Appended") sizes.push({ seq: r.seq, bytes: statSync(join(directory, "s.jsonl")).size })
            }))
      }))
  ).pipe(Layer.provide(SessionStoreJsonl.layer({ directory }).pipe(Layer.provide(platform))))

const comparable = (s: ConversationState) => JSON.stringify(exactState(s))

/**
 * A seeded agent run (replies with thinking now and then, so offloads wait for a compaction) until a step whose one
 * store append is a compaction with its offloads, right after the step before: the file and the states around it.
 */
const runUntilCompactionWithOffloads = (directory: string, seed: number) =>
  Effect.gen(function* () {
    const sizes: Array<{ readonly seq: number; readonly bytes: number }> = []
    const layer = Conversation.layerLogged(OPTIONS).pipe(
      Layer.provideMerge(
        SessionLog.layer({ sessionId: "s", sync: "never" }).pipe(Layer.provide(recordingOver(directory, sizes)))
      ),
      Layer.provide(ExtractiveSummarizer.layer),
      Layer.fresh
    )
    return yield* Effect.gen(function* () {
      const c = yield* Conversation
      const skip = prng(seed * 31)
      let previous = { state: comparable(yield* c.state), bytes: 0, writes: 0 }
      for (const m of generateSession(seed, { messages: 200, maxOutput: 6_000 }) as unknown as Array<MessageParam>) {
        if (m.role === "assistant") {
          const prepared = yield* c.prepare
          const writes = sizes.slice(previous.writes)
          const appended = writes.length === 1 && prepared.compaction?._tag === "Compacted" &&
            prepared.offloaded.length > 0
          const now = { state: comparable(yield* c.state), bytes: sizes.at(-1)?.bytes ?? 0, writes: sizes.length }
          if (appended) return { before: previous, after: now }
          previous = now
          const size = JSON.stringify(prepared.request).length
          yield* c.recordReply(m, { input_tokens: Math.ceil(size / 2), output_tokens: 100 }, {
            requestEpoch: prepared.epoch
          })
        } else if (typeof m.content !== "string" && m.content[0]?.type === "tool_result" && skip() < 0.1) continue
        else yield* c.append(m)
        previous = { state: comparable(yield* c.state), bytes: sizes.at(-1)?.bytes ?? 0, writes: sizes.length }
      }
      return assert.fail("no step compacted with offloads in one append")
    }).pipe(Effect.provide(layer), Effect.orDie)
  })

describe("a conversation resumed from a cut inside its compaction's append", () => {
  it.effect("is the live state before the compaction, or after it", () =>
    Effect.gen(function* () {
      const directory = mkdtempSync(join(scratch, "torn-append-live-"))
      const copies = Array.from({ length: LANES }, () => mkdtempSync(join(scratch, "torn-append-resume-")))
      try {
        const { after, before } = yield* runUntilCompactionWithOffloads(directory, 32)
        const bytes = readFileSync(join(directory, "s.jsonl")).subarray(0, after.bytes)
        const second = bytes.lastIndexOf(0x0a, after.bytes - 2) + 1
        const lines = bytes.subarray(before.bytes).toString("utf8").split("\n").slice(0, -1)
        assert.deepStrictEqual(lines.map((l) => Result.getOrThrow(decodeLine(l)).type), ["compaction", "eviction"])
        assert.notStrictEqual(after.state, before.state)
        const resumeAt = (copy: string, cut: number) =>
          Effect.suspend(() => {
            lay(copy, bytes.subarray(0, cut), undefined)
            return Effect.flatMap(Effect.service(Conversation), (c) => Effect.map(c.state, comparable)).pipe(
              Effect.provide(conversationOver(copy)),
              Effect.provide(Logger.layer([])),
              Effect.orDie
            )
          })
        // in each of its two lines: every byte of its first and last bytes, and every few bytes between
        const cuts: Array<number> = []
        for (const [from, to] of [[before.bytes, second], [second, after.bytes]] as const) {
          for (let cut = from; cut < to; cut += cut - from < 24 || to - cut <= 24 ? 1 : 29) cuts.push(cut)
        }
        cuts.push(after.bytes)
        // the cuts are independent: LANES copies take turns
        yield* Effect.forEach(
          copies,
          (copy, lane) =>
            Effect.forEach(cuts.filter((_, k) => k % LANES === lane), (cut) =>
              Effect.map(resumeAt(copy, cut), (resumed) => {
                assert.strictEqual(resumed, cut === after.bytes ? after.state : before.state, `cut at byte ${cut}`)
              }), { discard: true }),
          { concurrency: "unbounded", discard: true }
        )
      } finally {
        rmSync(directory, { recursive: true, force: true })
        for (const copy of copies) {
          rmSync(copy, { recursive: true, force: true })
        }
      }
    }), 120_000)
})

// ============================================================================
// SIGKILL while appending compactions with their offloads
// ============================================================================

/** The compactions of `entries` each followed by the eviction entry of its append, as `recordCompaction` wrote them. */
const halfAppends = (entries: ReadonlyArray<Entry>): ReadonlyArray<string> =>
  entries.flatMap((e, i) =>
    e.type === "compaction" && entries[i + 1]?.type !== "eviction" ? [`compaction ${e.id} without its offloads`] : []
  )

/**
 * Sends SIGKILL to `child` once its log `file` has grown by `growth` bytes (watched as fast as `stat` answers, so the
 * kill mostly lands while a write is under way), or after two seconds.
 */
const killWhenGrown = (child: ChildProcess, file: string, growth: number) =>
  Effect.andThen(
    Effect.sync(() => {
      const start = statSync(file).size
      const deadline = Date.now() + 2_000
      while (statSync(file).size < start + growth && Date.now() < deadline) {
        // watching the file
      }
    }),
    kill(child)
  )

/** True when the log `bytes` end with a whole compaction line and a torn line after it (a write cut between them). */
const cutBetweenLines = (bytes: Uint8Array): boolean => {
  const end = bytes.lastIndexOf(0x0a) + 1
  if (end === 0 || end === bytes.length) return false
  const line = Buffer.from(bytes.subarray(bytes.lastIndexOf(0x0a, end - 2) + 1, end - 1)).toString("utf8")
  const decoded = decodeLine(line)
  return Result.isSuccess(decoded) && decoded.success.type === "compaction"
}

describe("SIGKILL while a child writes compactions with their offloads", () => {
  it.live(
    "every kill leaves whole appends: a read-only load and a reopen hold no compaction without its offloads",
    () =>
      Effect.gen(function* () {
        const directory = mkdtempSync(join(scratch, "torn-append-kill-"))
        const random = prng(11)
        try {
          const problems: Array<string> = []
          let between = 0
          // six rounds, and more (up to sixteen) until a kill cut a write between its two lines
          for (let round = 0; round < 16 && (round < 6 || between === 0); round++) {
            const sessionId = `k${round}`
            const file = join(directory, `${sessionId}.jsonl`)
            const child = spawnWriter(["torn-append", directory, sessionId, "0", "never"])
            yield* waitFor(child, (line) => line === "writing")
            // somewhere in the first few compactions' appends (each over 2 MiB)
            yield* killWhenGrown(child, file, Math.floor(random() * 8 * 1024 * 1024))
            if (cutBetweenLines(readFileSync(file))) between++
            const loaded = yield* readJsonl({ directory, sessionId, tail: false }).pipe(
              Effect.provide(platform),
              Effect.orDie
            )
            problems.push(...halfAppends(loaded.entries).map((p) => `round ${round}, read-only: ${p}`))
            const { value: reopened } = yield* logged(
              Effect.flatMap(Effect.service(SessionLog), (log) => log.loaded).pipe(
                Effect.provide(
                  layerSessionLog({ directory, sessionId, sync: "never", tail: false }).pipe(
                    Layer.provide(platform),
                    Layer.fresh
                  )
                ),
                Effect.orDie
              )
            )
            assert.deepStrictEqual(state(reopened), state(loaded), `round ${round}: the writer's open reads the same`)
            problems.push(...halfAppends(reopened.entries).map((p) => `round ${round}, reopened: ${p}`))
            rmSync(file, { force: true })
          }
          assert.deepStrictEqual(problems, [])
          assert.isAbove(between, 0, "some kill cut a write between a compaction line and its eviction line")
        } finally {
          rmSync(directory, { recursive: true, force: true })
        }
      }),
    60_000
  )
})
