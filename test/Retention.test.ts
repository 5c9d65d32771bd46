/**
 * `Retention`: the anchors of hand-made spans, category by category; the normalization; the tail counted apart; and
 * agreement with the independent extractor of `fixtures/Anchors.ts` on every corpus session (a missing corpus fails
 * loudly, naming the folder) and on generated sessions.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { readFileSync } from "node:fs"
import { replaySession } from "../src/cli/Replay.ts"
import { importSession } from "../src/Import.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { SessionLog } from "../src/SessionLog.ts"
import { type MemorySessions, SessionStore } from "../src/SessionStore.ts"
import type { CompactionRetention } from "../src/internal/simulate/model.ts"
import { retentionOf } from "../src/internal/simulate/replay.ts"
import type { Request } from "../src/Request.ts"
import { readEntries, recallSources, removedSources } from "../src/internal/recall.ts"
import type { Message } from "../src/Message.ts"
import { type Anchor, anchorsOf, CATEGORIES, type Category, measure, retention } from "../src/Retention.ts"
import { summaryMessage, summaryText } from "../src/Summary.ts"
import { type RefAnchor, referenceAnchors, tallyRetention } from "./fixtures/Anchors.ts"
import { agentLoopSession } from "./fixtures/AgentLoop.ts"
import { generateSession } from "./fixtures/Conversation.ts"
import { corpus, rawFile } from "./fixtures/Corpus.ts"
import { ANCHOR_LIMITS, anchorKey, normalize, presentIn, viewText } from "../src/internal/anchors.ts"
import { MISSING_RESULT_TEXT } from "../src/internal/repair.ts"
import { renderAppendix } from "../src/internal/summary.ts"

const user = (text: string): Message => ({ role: "user", content: [{ type: "text", text }] })
const assistant = (text: string): Message => ({ role: "assistant", content: [{ type: "text", text }] })
const call = (id: string, name: string, input: unknown): Message => ({
  role: "assistant",
  content: [{ type: "tool_use", id, name, input }]
})
const result = (id: string, content: string, isError = false): Message => ({
  role: "user",
  content: [{ type: "tool_result", tool_use_id: id, content, ...(isError ? { is_error: true } : {}) }]
})

const of = (anchors: ReadonlyArray<Anchor>, category: Category) => anchors.filter((a) => a.category === category)
const texts = (anchors: ReadonlyArray<Anchor>, category: Category) => of(anchors, category).map((a) => a.text)

describe("anchorsOf, by category", () => {
  it("paths: each file read or modified, once, modified when any call wrote it, with its last message", () => {
    const span = [
      user("fix it"),
      call("a", "read", { path: "src/a.ts" }),
      result("a", "…"),
      call("b", "Edit", { file_path: "src/b.ts", old_string: "x", new_string: "y" }),
      result("b", "ok"),
      call("c", "read", { path: "src/b.ts", offset: 1, limit: 5 }),
      result("c", "…"),
      call("d", "bash", { command: "cat src/c.ts" })
    ]
    const paths = of(anchorsOf(span), "path")
    assert.deepStrictEqual(paths.map((p) => [p.text, p.category === "path" ? p.access : "", p.messageIndex]), [
      ["src/a.ts", "read", 1],
      ["src/b.ts", "modified", 5]
    ])
  })

  it("commands: the first non-blank line, its last outcome, its runs and failures; editors and blanks are not commands", () => {
    const span = [
      user("run the tests"),
      call("1", "bash", { command: "\n  npm   test\necho done" }),
      result("1", "1 failed", true),
      call("2", "Bash", { command: "npm test", description: "again" }),
      result("2", "all passed"),
      call("3", "bash", { cmd: "git status" }),
      call("4", "str_replace_based_edit_tool", { command: "view", path: "a.ts" }),
      call("5", "bash", { command: "   " }),
      call("6", "bash", { command: "x".repeat(300) })
    ]
    const commands = of(anchorsOf(span), "command")
    assert.deepStrictEqual(
      commands.map((c) => c.category === "command" ? [c.text, c.outcome, c.runs, c.failures, c.messageIndex] : []),
      [
        ["npm test", "ok", 2, 1, 3],
        ["git status", "unanswered", 1, 0, 5],
        ["x".repeat(ANCHOR_LIMITS.command), "unanswered", 1, 0, 8]
      ]
    )
  })

  it("errors: the first line that reads as an error, else the last line; the library's interrupted result is not one", () => {
    const span = [
      call("1", "bash", { command: "npm run check" }),
      result("1", "\n> pkg@1.0.0 check\n> tsc\n\nsrc/a.ts(3,1): error TS2304: Cannot find name 'x'.\nmore\n", true),
      call("2", "bash", { command: "ls" }),
      result("2", "first\nlast line\n\n", true),
      call("3", "bash", { command: "ok" }),
      result("3", "error: but not failed"),
      call("4", "bash", { command: "slow" }),
      result("4", MISSING_RESULT_TEXT, true)
    ]
    assert.deepStrictEqual(texts(anchorsOf(span), "error"), [
      "src/a.ts(3,1): error TS2304: Cannot find name 'x'.",
      "last line"
    ])
  })

  it("errors: the line that states the error, never an exit-code line before it, never a line of code", () => {
    const minified = "!function(e){var t={};function n(r){if(t[r])return t[r].exports;}".repeat(50)
    const span = [
      call("1", "bash", { command: "git push" }),
      result("1", "Enumerating objects\nCommand exited with code 128\nfatal: unable to access 'https://x/'", true),
      call("2", "bash", { command: "node a.js" }),
      result("2", `${minified}\nError: Cannot find module './b.js'\n    at Module._resolveFilename`, true),
      call("3", "bash", { command: "curl localhost:1" }),
      result("3", "curl: (7) Failed to connect: Connection refused\n\nCommand exited with code 7", true),
      call("4", "bash", { command: "sleep 9" }),
      result("4", "started\noperation timed out after 120000 ms\nexit status 124", true),
      call("5", "bash", { command: "python t.py" }),
      result("5", 'Traceback (most recent call last):\n  File "t.py", line 1\nValueError: bad shard', true),
      call("6", "bash", { command: "make" }),
      result("6", "building\nmake: *** [all] exit code 2", true),
      call("7", "bash", { command: "cat min.js" }),
      result("7", minified, true)
    ]
    assert.deepStrictEqual(texts(anchorsOf(span), "error"), [
      "fatal: unable to access 'https://x/'",
      "Error: Cannot find module './b.js'",
      "curl: (7) Failed to connect: Connection refused",
      "operation timed out after 120000 ms",
      "ValueError: bad shard",
      "make: *** [all] exit code 2",
      minified.slice(0, ANCHOR_LIMITS.error)
    ])
    const reference = referenceAnchors(span).filter((a) => a.category === "error").map((a) => a.text)
    assert.deepStrictEqual(reference, texts(anchorsOf(span), "error"))
  })

  it("identifiers: URLs, UUIDs, hashes, digests, ARNs, paths with a line, versions, codes and ids, from the user's and the assistant's text and what tools printed; no number", () => {
    const span = [
      user(
        "See https://example.com/a?b=1. Commit 3f2a9c1 (not abc123), run 123e4567-E89B-12d3-a456-426614174000 on v1.2 and " +
          "pkg@2.0.1-rc.1; it took 12ms, then 3.5 MB and 40%. Ticket #482, call toolu_01AbC9x."
      ),
      assistant(
        "Upgraded to 1.10.0 (was 1.9.3): 2,048 tokens, 2x faster. Plain 8471 and abcdefgh and 3.14 are not. " +
          "TS2345 at src/a.ts:12:5, ERR_PNPM_OUTDATED_LOCKFILE; ERROR and EXIT are words, ENOENT is not."
      ),
      call("1", "bash", { command: "echo 9f9f9f9f1" }),
      result(
        "1",
        "deadbeef12 v9.9.9\nrequest-id=req_011CUv4x in 96ms\ndigest sha256:4f1c9a7be2d03c58 arn:aws:s3:::bucket"
      ),
      call("2", "read", { path: "src/b.ts" }),
      result("2", "cafe0123 is in the file, v7.7.7 too")
    ]
    const ids = of(anchorsOf(span), "identifier").map((a) => a.category === "identifier" ? `${a.kind} ${a.text}` : "")
    assert.deepStrictEqual(ids, [
      "url https://example.com/a?b=1",
      "hash 3f2a9c1",
      "uuid 123e4567-E89B-12d3-a456-426614174000",
      "version v1.2",
      "version 2.0.1-rc.1",
      "id #482",
      "id toolu_01AbC9x",
      "version 1.10.0",
      "version 1.9.3",
      "code TS2345",
      "path src/a.ts:12:5",
      "code ERR_PNPM_OUTDATED_LOCKFILE",
      "code ENOENT",
      "hash deadbeef12",
      "version v9.9.9",
      "id req_011CUv4x",
      "digest sha256:4f1c9a7be2d03c58",
      "arn arn:aws:s3:::bucket"
    ])
  })

  it("instructions: what the user wrote, folded and cut to its head; not tool results, summaries or the assistant", () => {
    const long = "word ".repeat(200)
    const span: Array<Message> = [
      summaryMessage("earlier work"),
      user("  Please   fix\nthe build  "),
      result("x", "output"),
      assistant("I will."),
      { role: "user", content: "use pnpm, not npm" },
      user(long),
      { role: "system", content: "be brief" }
    ]
    const instructions = of(anchorsOf(span), "instruction")
    assert.deepStrictEqual(instructions.map((a) => [a.text, a.messageIndex]), [
      ["Please fix the build", 1],
      ["use pnpm, not npm", 4],
      [normalize(long).slice(0, ANCHOR_LIMITS.instruction).trimEnd(), 5]
    ])
  })

  it("plan: the items of the latest todo list (a todo tool or a checklist), from its message", () => {
    const span = [
      call("1", "TodoWrite", { todos: [{ content: "old step", status: "pending" }] }),
      assistant("Plan:\n- [x] read the code\n- [ ] fix   the bug\n"),
      call("2", "bash", { command: "ls" }),
      assistant("One box is not a list:\n- [ ] alone")
    ]
    assert.deepStrictEqual(of(anchorsOf(span), "plan").map((a) => [a.text, a.messageIndex]), [
      ["read the code", 1],
      ["fix the bug", 1]
    ])
    const later = [...span, call("3", "update_plan", { plan: [{ step: "ship it" }, "and tell"] })]
    assert.deepStrictEqual(texts(anchorsOf(later), "plan"), ["ship it", "and tell"])
  })

  it("orders by category, then by first appearance", () => {
    const anchors = anchorsOf([
      user("go to https://a.example"),
      call("1", "bash", { command: "b" }),
      call("2", "read", { path: "z.ts" }),
      call("3", "bash", { command: "a" }),
      call("4", "bash", { command: "b" })
    ])
    assert.deepStrictEqual(anchors.map((a) => `${a.category}:${a.text}`), [
      "path:z.ts",
      "command:b",
      "command:a",
      "identifier:https://a.example",
      "instruction:go to https://a.example"
    ])
  })
})

describe("normalization and presence", () => {
  it("a message or block read again after its text changed is read as it is now, not as it was", () => {
    const block = { type: "text" as const, text: "deployed v1.2.3" }
    const message: Message = { role: "assistant", content: [block] }
    const texts = (messages: ReadonlyArray<Message>) =>
      anchorsOf(messages).filter((a) => a.category === "identifier").map((a) => a.text)
    assert.deepStrictEqual(texts([message]), ["v1.2.3"])
    assert.isTrue(presentIn(anchorsOf([message])[0]!, viewText([message])))
    block.text = "deployed v2.0.0"
    assert.deepStrictEqual(texts([message]), ["v2.0.0"])
    const [old] = anchorsOf([assistant("deployed v1.2.3")])
    assert.isFalse(presentIn(old!, viewText([message])))
    assert.isTrue(presentIn(anchorsOf([message])[0]!, viewText([message])))
  })

  it("folds white space, keeps case for paths, ignores it for hashes", () => {
    const [path, hash] = anchorsOf([
      call("1", "read", { path: "src/Foo.ts" }),
      assistant("at commit ABC1234F")
    ])
    assert.strictEqual(normalize("  a \n\t b  "), "a b")
    const view = viewText([user("read src/foo.ts\nand  abc1234f")])
    assert.isFalse(presentIn(path!, view))
    assert.isTrue(presentIn(path!, viewText([user("read  src/Foo.ts")])))
    assert.isTrue(presentIn(hash!, view))
    assert.strictEqual(anchorKey(hash!), anchorKey(anchorsOf([assistant("abc1234f")])[0]!))
  })

  it("an instruction split over lines in the view is present; one pasted across two pieces is not", () => {
    const [instruction] = of(anchorsOf([user("fix the build please")]), "instruction")
    assert.isTrue(presentIn(instruction!, viewText([assistant("The user said: fix the\n  build please.")])))
    assert.isFalse(presentIn(instruction!, viewText([assistant("fix the"), assistant("build please")])))
  })

  it("a JSON-escaped path (the files appendix's form) is present", () => {
    const [path] = anchorsOf([call("1", "read", { path: 'C:\\dir\\"q".ts' })])
    const view = [summaryMessage(`work\n\n${renderAppendix({ read: [path!.text], modified: [] })}`)]
    assert.isTrue(presentIn(path!, viewText(view)))
  })

  it("tool inputs and results, thinking and compaction content are searched", () => {
    const [command] = anchorsOf([call("1", "bash", { command: "make all" })])
    for (
      const view of [
        [call("9", "bash", { nested: { command: "make all" } })],
        [result("9", "ran make all")],
        [{ role: "assistant", content: [{ type: "thinking", thinking: "make all", signature: "s" }] }],
        [{ role: "assistant", content: [{ type: "compaction", content: "we ran make all" }] }]
      ] as ReadonlyArray<ReadonlyArray<Message>>
    ) assert.isTrue(presentIn(command!, viewText(view)))
    assert.isFalse(
      presentIn(
        command!,
        viewText([{ role: "user", content: [{ type: "image", source: { type: "url", url: "make all" } }] }])
      )
    )
  })
})

describe("retention", () => {
  const span = [
    user("rename the flag"),
    call("1", "read", { path: "src/flags.ts" }),
    result("1", "…"),
    call("2", "bash", { command: "npm test" }),
    result("2", "Error: flag not found", true)
  ]

  it("counts the tail's anchors apart, and shares the rest", () => {
    const tail = [user("now npm test again"), call("3", "bash", { command: "npm test" })]
    const view = [summaryMessage("We renamed the flag in src/flags.ts."), ...tail]
    const r = measure(span, view, { tail })
    assert.deepStrictEqual(
      CATEGORIES.map((c) => [c, r.categories[c].counted, r.categories[c].present, r.categories[c].inTail]),
      [["path", 1, 1, 0], ["command", 0, 0, 1], ["error", 1, 0, 0], ["identifier", 0, 0, 0], [
        "instruction",
        1,
        0,
        0
      ], ["plan", 0, 0, 0]]
    )
    assert.strictEqual(r.categories.path.share, 1)
    assert.strictEqual(r.categories.error.share, 0)
    assert.strictEqual(r.categories.plan.share, 1, "no anchors: nothing lost")
    assert.deepStrictEqual(r.categories.instruction.missing.map((a) => a.text), ["rename the flag"])
  })

  it("without a tail every anchor is counted; the same anchors against the span itself are all present", () => {
    const anchors = anchorsOf(span)
    const r = retention(anchors, span)
    for (const c of CATEGORIES) {
      assert.strictEqual(r.categories[c].inTail, 0)
      assert.strictEqual(r.categories[c].present, r.categories[c].counted)
    }
    assert.strictEqual(CATEGORIES.reduce((n, c) => n + r.categories[c].counted, 0), anchors.length)
  })
})

// ============================================================================
// Against the independent extractor
// ============================================================================

const refKey = (a: RefAnchor): string => `${a.category}\u0000${a.caseless ? a.text.toLowerCase() : a.text}`

/** The keys only the library found and only the reference found. */
const disagreement = (messages: ReadonlyArray<Message>) => {
  const lib = new Set(anchorsOf(messages).map(anchorKey))
  const ref = new Set(referenceAnchors(messages).map(refKey))
  return { onlyLibrary: [...lib].filter((k) => !ref.has(k)), onlyReference: [...ref].filter((k) => !lib.has(k)) }
}

/** The tallies of both on one span, view and tail. */
const bothTallies = (span: ReadonlyArray<Message>, view: ReadonlyArray<Message>, tail: ReadonlyArray<Message>) => {
  const lib = measure(span, view, { tail })
  const ref = tallyRetention(referenceAnchors(span), view, tail)
  return CATEGORIES.map((c) => ({
    category: c,
    library: [lib.categories[c].counted, lib.categories[c].present, lib.categories[c].inTail],
    reference: [ref[c].counted, ref[c].present, ref[c].inTail]
  }))
}

describe("Retention agrees with the independent extractor (tolerance: none; every anchor the same)", () => {
  for (const session of corpus()) {
    it(`${session.name}: the same anchors, and the same retention of its first half in its second`, () => {
      const messages = session.messages
      const { onlyLibrary, onlyReference } = disagreement(messages)
      assert.deepStrictEqual({ onlyLibrary, onlyReference }, { onlyLibrary: [], onlyReference: [] })
      assert.isAbove(anchorsOf(messages).length, 0)
      // the span is the first half; the view is its last quarter and the rest; the tail is the second half
      const half = Math.floor(messages.length / 2)
      const span = messages.slice(0, half)
      const view = messages.slice(Math.floor(half / 2))
      const tail = messages.slice(half)
      for (const row of bothTallies(span, view, tail)) assert.deepStrictEqual(row.library, row.reference, row.category)
    }, 180_000)
  }

  it("on agent-loop sessions (the common error forms, status boards, merged follow-ups)", () => {
    for (const seed of [1, 2]) {
      const messages = agentLoopSession(seed, { steps: 120 })
      assert.deepStrictEqual(disagreement(messages), { onlyLibrary: [], onlyReference: [] }, `seed ${seed}`)
    }
  })

  it("on generated sessions too", () => {
    for (let seed = 1; seed <= 20; seed++) {
      const messages = generateSession(seed, { messages: 80 })
      assert.deepStrictEqual(disagreement(messages), { onlyLibrary: [], onlyReference: [] }, `seed ${seed}`)
      const cut = Math.floor(messages.length / 3)
      for (const row of bothTallies(messages.slice(0, 2 * cut), messages.slice(cut), messages.slice(2 * cut))) {
        assert.deepStrictEqual(row.library, row.reference, `seed ${seed} ${row.category}`)
      }
    }
  })
})

// ============================================================================
// Recoverable by one recall
// ============================================================================

/** The kept tail of a request: after its summary (the blocks merged into the summary's message kept). */
const tailOf = (messages: ReadonlyArray<Message>): ReadonlyArray<Message> => {
  const first = messages[0]
  if (first === undefined || summaryText(first) === undefined || typeof first.content === "string") return messages
  const merged = first.content.slice(1)
  return merged.length === 0 ? messages.slice(1) : [{ role: first.role, content: merged }, ...messages.slice(1)]
}

describe("recoverable: an anchor absent from the request, found by one recall search over what was removed", () => {
  it("a path and a command found in a removed message, an error in a removed tool result; nothing without removed", () => {
    const span: ReadonlyArray<Message> = [
      user("fix the build"),
      {
        role: "assistant",
        content: [{ type: "tool_use", id: "toolu_run1", name: "bash", input: { command: 'grep -n "x" src/a.ts' } }]
      },
      {
        role: "user",
        content: [{ type: "tool_result", tool_use_id: "toolu_run1", content: "Error: cannot  read x", is_error: true }]
      }
    ]
    const view = [user("summary: nothing kept")]
    const without = retention(anchorsOf(span), view)
    const withRemoved = retention(anchorsOf(span), view, { removed: removedSources(span) })
    for (const c of CATEGORIES) {
      assert.strictEqual(without.categories[c].recoverable, 0, c)
      assert.deepStrictEqual(without.categories[c].unrecoverable, without.categories[c].missing, c)
      assert.strictEqual(withRemoved.categories[c].recoverable, withRemoved.categories[c].missing.length, c)
      assert.deepStrictEqual(withRemoved.categories[c].unrecoverable, [], c)
    }
    // the command holds quotes (stored as JSON in the tool call), the error two spaces (folded in the anchor)
    assert.strictEqual(withRemoved.categories.command.recoverable, 1)
    assert.strictEqual(withRemoved.categories.error.recoverable, 1)
    // removed text that lacks an anchor does not recover it
    const other = retention(anchorsOf(span), view, { removed: removedSources([user("something else")]) })
    assert.strictEqual(other.categories.command.recoverable, 0)
  })

  it.effect(
    "on a real session replayed with compaction (and its log): every anchor of every compacted span absent from the next request is found by one recall search in the log",
    () =>
      Effect.gen(function* () {
        const session = yield* importSession(readFileSync(rawFile("pi__large-session.jsonl"), "utf8"))
        const policy = CompactionPolicy.makeUnsafe({ compactAtTokens: 40_000, keepRecentTokens: 4_000 })
        const sessions: MemorySessions = new Map()
        const compacted: Array<{ span: ReadonlyArray<Message>; prompt: ReadonlyArray<Message> }> = []
        const rows: Array<CompactionRetention> = []
        yield* replaySession(session, {
          name: "ours",
          strategy: { _tag: "Library", options: { keepRecent: 10, policy } }
        }, {
          simulate: { compaction: policy },
          log: SessionLog.layerMemory({ sessionId: "real", store: sessions }),
          onRequest: (_, event) =>
            Effect.sync(() => {
              if (event.summarized === undefined) return
              compacted.push({ span: event.summarized, prompt: event.prompt })
              if (event.figures.retention !== undefined) rows.push(event.figures.retention)
            })
        })
        assert.isAtLeast(compacted.length, 3)
        // the engine's figures: whatever is absent from the next request, one search over what it removed finds
        for (const row of rows) {
          for (const c of CATEGORIES) {
            const t = row.categories[c]
            assert.strictEqual(t.present + t.recoverable!, t.counted, c)
          }
          assert.strictEqual(row.total.recoverableShare, 1)
        }
        // the log's own sources, as `recall` reads them; the summaries taken away (the request's kept tail only), so
        // every counted anchor is absent and must be recovered by a search alone
        const removed = recallSources(
          yield* readEntries("real").pipe(Effect.provide(SessionStore.layerMemory(sessions)))
        )
        let absent = 0
        let absentInEngine = 0
        const spans: Array<Message> = []
        for (const { prompt, span } of compacted) {
          const tail = tailOf(prompt)
          // the engine's measure on the same request without its summary, given the spans removed so far
          spans.push(...span)
          const engine = retentionOf(span, { messages: tail } as unknown as Request, () => removedSources(spans))
          absentInEngine += engine.total.counted - engine.total.present
          assert.strictEqual(engine.total.recoverable, engine.total.counted - engine.total.present)
          const measured = measure(span, tail, { tail, removed })
          for (const c of CATEGORIES) {
            absent += measured.categories[c].missing.length
            assert.deepStrictEqual(measured.categories[c].unrecoverable.map((a) => a.text), [], c)
          }
        }
        assert.isAbove(absent, 100, "the spans have anchors the tail lacks")
        assert.isAbove(absentInEngine, 100)
      }),
    180_000
  )
})
