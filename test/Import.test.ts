import { NodeFileSystem } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, Effect, FileSystem, Result, Schema } from "effect"
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { ImportError, importSession, importSessionFile } from "../src/Import.ts"
import { decodeMessagesSync, type Message, MessageDecodeError } from "../src/Message.ts"
import { generateSession } from "./fixtures/Conversation.ts"
import { corpus, rawFile } from "./fixtures/Corpus.ts"
import { normalizeUsage } from "../src/internal/import/builder.ts"
import { parseJsonLine } from "../src/internal/import/lines.ts"

const fixture = (name: string): string => fileURLToPath(new URL(`./fixtures/import/${name}`, import.meta.url))
const read = (path: string): string => readFileSync(path, "utf8")

/** A message without its `_`-prefixed extras (the corpus keeps them; the importers do not add them). */
const wire = (m: Message): Message => Object.fromEntries(Object.entries(m).filter(([k]) => !k.startsWith("_"))) as never

const corpusSession = (name: string) => {
  const found = corpus().find((s) => s.name === name)
  if (found === undefined) throw new Error(`corpus session ${name} is missing from the shared data folder`)
  return found
}

const importFailure = (text: string) => Effect.flip(importSession(text))

const withFile = <A, E>(
  name: string,
  content: string | Uint8Array,
  f: (path: string) => Effect.Effect<A, E, FileSystem.FileSystem>
) =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const dir = yield* fs.makeTempDirectoryScoped()
    const path = `${dir}/${name}`
    if (typeof content === "string") yield* fs.writeFileString(path, content)
    else yield* fs.writeFile(path, content)
    return yield* f(path)
  }).pipe(Effect.provide(NodeFileSystem.layer))

/** Cases per runtime of the 2,000-case properties: a CI run (Node, then Deno) still tries 2,000 of each. */
const RUNS_PER_RUNTIME = 1000

describe("Import: real sessions", () => {
  it.effect("pi JSONL converts to exactly the corpus conversion of the same file", () =>
    Effect.gen(function* () {
      const session = yield* importSession(read(rawFile("pi__large-session.jsonl")))
      const expected = corpusSession("pi__large-session")
      assert.strictEqual(session.format, "pi")
      assert.deepStrictEqual(session.messages, expected.messages.map(wire))
      // usage: every corpus `_usage`, at the same index, in the SDK's names
      assert.deepStrictEqual(
        session.usage,
        expected.messages.flatMap((m, messageIndex) =>
          m._usage === undefined ? [] : [{ messageIndex, usage: normalizeUsage(m._usage)! }]
        )
      )
      const stops = expected.messages.flatMap((m, messageIndex) => {
        const stop = (m as { _stop_reason?: string })._stop_reason
        return stop === undefined ? [] : [{ messageIndex, stopReason: stop }]
      })
      assert.deepStrictEqual(session.interrupted, stops)
      assert.deepStrictEqual(session.skipped.byReason, {
        "session-header": 1,
        "empty-assistant": 14,
        "type:model_change": 1,
        "type:thinking_level_change": 103
      })
      assert.strictEqual(session.lines, 1019)
      assert.deepStrictEqual(session.compactions, [])
    }))

  it.effect("Claude Code JSONL converts to exactly the corpus conversion of the same file", () =>
    Effect.gen(function* () {
      const session = yield* importSession(read(rawFile("claude-code__coverage-test-fix.jsonl")))
      const expected = corpusSession("claude-code__coverage-test-fix")
      assert.strictEqual(session.format, "claude-code")
      assert.deepStrictEqual(session.messages, expected.messages.map(wire))
      assert.deepStrictEqual(session.skipped, { total: 1, byReason: { "type:queue-operation": 1 } })
      assert.strictEqual(session.mergedLines, 7 + 2) // the corpus meta: merged_assistant_lines 7, tool results 2
      assert.deepStrictEqual(
        session.usage.map((u) => u.messageIndex),
        expected.messages.flatMap((m, i) => (m._usage === undefined ? [] : [i]))
      )
    }))

  it.effect("every corpus file imports as an Anthropic request: same messages, by reference, with usage", () =>
    Effect.gen(function* () {
      for (const expected of corpus()) {
        const session = yield* importSession(read(expected.file))
        assert.strictEqual(session.format, "anthropic-request", expected.name)
        assert.strictEqual(session.messages.length, expected.messages.length)
        session.messages.forEach((m, i) => assert.deepStrictEqual(m, expected.messages[i]))
        assert.strictEqual(session.usage.length, expected.messages.filter((m) => m._usage !== undefined).length)
        assert.deepStrictEqual(
          session.compactions.map((c) => [c.messageIndex, c.firstKeptMessageIndex]),
          (expected.meta.compactions ?? []).map((c) => [c.at_message_index, c.firstKept_message_index])
        )
      }
    }))

  it.effect("the file importer streams the raw files to the same result as the text importer", () =>
    Effect.gen(function* () {
      for (const name of ["pi__large-session.jsonl", "claude-code__coverage-test-fix.jsonl"]) {
        const fromText = yield* importSession(read(rawFile(name)))
        const fromFile = yield* importSessionFile(rawFile(name))
        assert.deepStrictEqual(fromFile, fromText)
      }
      const json = corpusSession("swe-agent__marshmallow-1867_function-calling").file
      assert.deepStrictEqual(yield* importSessionFile(json), yield* importSession(read(json)))
    }).pipe(Effect.provide(NodeFileSystem.layer)))
})

describe("Import: Claude Code edge cases", () => {
  it.effect("merges one-line-per-block replies (also interleaved with their results) and skips sidechains", () =>
    Effect.gen(function* () {
      const s = yield* importSession(read(fixture("claude-code-edge.jsonl")))
      assert.strictEqual(s.format, "claude-code")
      assert.deepStrictEqual(s.messages, [
        { role: "user", content: [{ type: "text", text: "Run the tests" }] },
        {
          role: "assistant",
          content: [
            { type: "thinking", thinking: "plan", signature: "sig" },
            { type: "tool_use", id: "tu_1", name: "Bash", input: { command: "npm test" } },
            { type: "tool_use", id: "tu_2", name: "Read", input: { file_path: "a.ts" } }
          ]
        },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "tu_1", content: "ok" },
            { type: "tool_result", tool_use_id: "tu_2", content: "export {}" }
          ]
        },
        // the aborted reply keeps its orphan tool_use: repairing it is not the importer's job
        {
          role: "assistant",
          content: [{ type: "tool_use", id: "tu_3", name: "Bash", input: { command: "sleep 100" } }]
        },
        { role: "user", content: [{ type: "text", text: "[Request interrupted by user for tool use]" }] },
        { role: "user", content: [{ type: "text", text: "thanks" }] }
      ])
      assert.deepStrictEqual(s.skipped, {
        total: 7,
        byReason: {
          "type:summary": 1,
          "type:file-history-snapshot": 1,
          sidechain: 2,
          "empty-assistant": 1,
          "type:system": 1,
          "blank-line": 1
        }
      })
      assert.strictEqual(s.mergedLines, 3)
      assert.strictEqual(s.lines, 16)
      assert.deepStrictEqual(s.usage, [
        {
          messageIndex: 1,
          usage: { input_tokens: 5, output_tokens: 30, cache_read_input_tokens: 100, cache_creation_input_tokens: 10 }
        },
        {
          messageIndex: 3,
          usage: { input_tokens: 6, output_tokens: 5, cache_read_input_tokens: 120, cache_creation_input_tokens: 0 }
        }
      ])
    }))
})

describe("Import: pi edge cases", () => {
  it.effect("v1: two objects on one line, aborted replies, bash, compaction, thinking, images, a truncated line", () =>
    Effect.gen(function* () {
      const s = yield* importSession(read(fixture("pi-v1-edge.jsonl")))
      assert.strictEqual(s.format, "pi")
      assert.deepStrictEqual(s.messages, [
        { role: "user", content: [{ type: "text", text: "hi" }] },
        { role: "user", content: [{ type: "text", text: 'look at {this} "}{" file' }] },
        {
          role: "assistant",
          content: [
            { type: "thinking", thinking: "hmm", signature: "SIG" },
            { type: "redacted_thinking", data: "OPAQUE" },
            { type: "text", text: "reading" },
            { type: "tool_use", id: "c1", name: "read", input: { path: "a.png" } },
            { type: "tool_use", id: "c2", name: "bash", input: { command: "false" } }
          ]
        },
        {
          role: "user",
          content: [
            {
              type: "tool_result",
              tool_use_id: "c1",
              content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } }]
            },
            {
              type: "tool_result",
              tool_use_id: "c2",
              content: [{ type: "text", text: "Command exited with code 1" }],
              is_error: true
            }
          ]
        },
        { role: "user", content: [{ type: "text", text: "$ ls\na.png\n" }] },
        { role: "user", content: [{ type: "text", text: "$ make\nboom\n(exit code 2)" }] },
        {
          role: "assistant",
          content: [{ type: "text", text: "partial" }, {
            type: "tool_use",
            id: "c3",
            name: "edit",
            input: { path: "b" }
          }]
        }
      ])
      assert.strictEqual(s.recoveredLines, 1)
      assert.strictEqual(s.lines, 15)
      assert.deepStrictEqual(s.skipped.byReason, {
        "session-header": 1,
        "empty-assistant": 1,
        "type:model_change": 1,
        "type:thinking_level_change": 1,
        compaction: 1,
        "bash-excluded": 1,
        "blank-line": 1,
        "invalid-json": 1
      })
      assert.deepStrictEqual(s.compactions, [
        { messageIndex: 4, line: 9, tokensBefore: 1234, summaryChars: 17, firstKeptMessageIndex: 1 }
      ])
      assert.deepStrictEqual(s.interrupted, [{ messageIndex: 6, stopReason: "error" }])
      assert.deepStrictEqual(s.usage.map((u) => u.messageIndex), [2, 6])
      assert.strictEqual(s.warnings.length, 2) // the split line and the truncated line
      assert.match(s.warnings.join("\n"), /line 15/)
    }))

  it.effect("v3: follows the active branch, maps firstKeptEntryId, keeps custom messages", () =>
    Effect.gen(function* () {
      const s = yield* importSession(read(fixture("pi-v3-tree.jsonl")))
      assert.deepStrictEqual(s.messages, [
        { role: "user", content: [{ type: "text", text: "first question" }] },
        { role: "assistant", content: [{ type: "text", text: "kept answer" }] },
        { role: "user", content: [{ type: "text", text: "extension context" }] },
        { role: "user", content: [{ type: "text", text: "next" }] }
      ])
      assert.deepStrictEqual(s.skipped.byReason, {
        "session-header": 1,
        "off-branch": 1,
        "type:label": 1,
        compaction: 1
      })
      assert.deepStrictEqual(s.compactions, [
        { messageIndex: 3, line: 7, tokensBefore: 999, summaryChars: 12, firstKeptMessageIndex: 1 }
      ])
    }))

  const poolOf = (name: string) => read(fixture(name)).split("\n").filter((l) => l !== "")
  const piPool = poolOf("pi-v1-edge.jsonl")
  const ccPool = poolOf("claude-code-edge.jsonl")
  const LINE_LEVEL = ["blank-line", "invalid-json", "not-an-object"]
  it.effect.prop(
    "every JSON object of a JSONL file is part of exactly one message or counted as skipped",
    [
      Schema.Boolean,
      Arbitrary.array(Arbitrary.schema(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 15 }))), {
        maxLength: 40
      })
    ],
    ([pi, picks]) =>
      Effect.gen(function* () {
        const pool = pi ? piPool : ccPool
        const lines = pi ? [pool[0]!, ...picks.map((i) => pool[1 + (i % (pool.length - 1))]!)] : [
          ccPool[2]!,
          ...picks.map((i) => pool[i % pool.length]!)
        ]
        const s = yield* importSession(lines.join("\n") + "\n")
        decodeMessagesSync(s.messages)
        const objects = lines.reduce((n, l) => n + (parseJsonLine(l)?.length ?? 0), 0)
        const lineLevel = LINE_LEVEL.reduce((n, r) => n + (s.skipped.byReason[r] ?? 0), 0)
        assert.strictEqual(objects, s.messages.length + s.mergedLines + s.skipped.total - lineLevel)
        assert.strictEqual(s.lines, lines.length)
      }),
    { arbitrary: { runs: 500 } }
  )
})

describe("Import: line recovery", () => {
  it("splits two objects on one line, respecting braces and escapes inside strings", () => {
    assert.deepStrictEqual(parseJsonLine(`{"a":"}{\\"x"}{"b":[1,{"c":2}]}`), [{ a: '}{"x' }, { b: [1, { c: 2 }] }])
    assert.deepStrictEqual(parseJsonLine(`{"a":1} {"b":2}`), [{ a: 1 }, { b: 2 }])
    assert.strictEqual(parseJsonLine(`{"a":1}garbage`), undefined)
    assert.strictEqual(parseJsonLine(`{"a":1`), undefined)
    assert.strictEqual(parseJsonLine(`{"a":1}}`), undefined)
  })

  const Value = Schema.Record(
    Schema.String,
    Schema.Union([Schema.String, Schema.Finite, Schema.Boolean, Schema.Array(Schema.String)])
  )
  it.prop(
    "any run of JSON objects written with no newline between them is recovered exactly",
    [Arbitrary.array(Arbitrary.schema(Value), { minLength: 1, maxLength: 5 })],
    ([values]) => {
      const text = values.map((v) => JSON.stringify(v)).join("")
      assert.deepStrictEqual(parseJsonLine(text), values.map((v) => JSON.parse(JSON.stringify(v)))) // -0 → 0
    },
    { arbitrary: { runs: RUNS_PER_RUNTIME } }
  )
})

describe("Import: JSON formats", () => {
  it.effect("a request body: system blocks joined into one string, messages validated, usage read from _usage", () =>
    Effect.gen(function* () {
      const s = yield* importSession(read(fixture("request-system-blocks.json")))
      assert.strictEqual(s.format, "anthropic-request")
      assert.strictEqual(s.system, "You are helpful.\n\nBe brief.")
      assert.strictEqual(s.messages.length, 2)
      assert.deepStrictEqual(s.usage, [{
        messageIndex: 1,
        usage: { input_tokens: 1, output_tokens: 2, cache_read_input_tokens: 3, cache_creation_input_tokens: 4 }
      }])
    }))

  it.effect("a bare message array round-trips generated sessions unchanged", () =>
    Effect.gen(function* () {
      for (let seed = 1; seed <= 20; seed++) {
        const messages = generateSession(seed, { messages: 40 })
        const s = yield* importSession(JSON.stringify(messages, null, seed % 2 === 0 ? 2 : undefined))
        assert.strictEqual(s.format, "messages")
        assert.deepStrictEqual(s.messages, messages)
        assert.isUndefined(s.system)
      }
    }))

  it.effect("an invalid message fails with its position, wrapping MessageDecodeError", () =>
    Effect.gen(function* () {
      const error = yield* importFailure(read(fixture("request-invalid-message.json")))
      assert.strictEqual(error.reason, "invalid-message")
      assert.strictEqual(error.messageIndex, 1)
      assert.instanceOf(error.decodeError, MessageDecodeError)
      assert.deepStrictEqual(error.decodeError?.path, [1, "content", 0, "input"])
      assert.match(error.message, /^invalid message 1: messages\[1\]\.content\[0\]\.input \(tool_use\)/)
    }))

  it.effect("an invalid message from JSONL names the line it came from", () =>
    Effect.gen(function* () {
      const text = `{"type":"session","id":"x"}\n` +
        `{"type":"message","message":{"role":"assistant","content":[{"type":"toolCall","id":"","name":"ls","arguments":{}}]}}\n`
      const error = yield* importFailure(text)
      assert.strictEqual(error.reason, "invalid-message")
      assert.strictEqual(error.line, 2)
    }))
})

describe("Import: not a session", () => {
  const cases: ReadonlyArray<readonly [string, string, ImportError["reason"], RegExp]> = [
    ["empty", "", "empty", /^empty input: expected a JSON message array/],
    ["blank lines", "\n \n\n", "empty", /^empty input/],
    ["plain text", "hello world\n", "unknown-format", /line 1 starts with "hello world"/],
    ["a JSON object", `{"foo":1}`, "unknown-format", /JSONL, but line 1 is not a pi "session" header/],
    ["a JSON number", "42", "unknown-format", /line 1 starts with "42"/],
    ["a JSON string", `"x"`, "unknown-format", /line 1 starts with/],
    ["broken JSON", `[{"role":"user"`, "invalid-json", /^invalid JSON/],
    ["unknown JSONL", `{"event":"a"}\n{"event":"b"}\n`, "unknown-format", /keys \["event"\]/]
  ]
  for (const [name, text, reason, message] of cases) {
    it.effect(`${name} fails with a message saying what was expected`, () =>
      Effect.gen(function* () {
        const error = yield* importFailure(text)
        assert.instanceOf(error, ImportError)
        assert.strictEqual(error.reason, reason)
        assert.match(error.message, message)
        assert.include(error.message, "expected a JSON message array, an Anthropic Messages request, Claude Code JSONL")
      }))
  }

  it.effect("a binary file fails as binary, from text and from a file", () =>
    Effect.gen(function* () {
      const bytes = new Uint8Array(4096).map((_, i) => (i * 7919) % 256)
      const fromText = yield* importFailure(new TextDecoder().decode(bytes))
      assert.strictEqual(fromText.reason, "binary")
      const fromFile = yield* withFile("x.bin", bytes, (p) => Effect.flip(importSessionFile(p)))
      assert.strictEqual(fromFile._tag, "ImportError")
      assert.strictEqual((fromFile as ImportError).reason, "binary")
    }))

  it.effect("an empty file fails as empty", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(importSessionFile(fixture("empty.jsonl")))
      assert.strictEqual((error as ImportError).reason, "empty")
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.effect.prop(
    "any text either imports to valid messages or fails with ImportError (never a defect)",
    [Schema.String],
    ([text]) =>
      Effect.gen(function* () {
        const result = yield* Effect.result(importSession(text))
        if (Result.isSuccess(result)) decodeMessagesSync(result.success.messages)
        else assert.instanceOf(result.failure, ImportError)
      }),
    { arbitrary: { runs: 2000 } }
  )

  const samples = ["pi-v1-edge.jsonl", "claude-code-edge.jsonl", "pi-v3-tree.jsonl", "request-system-blocks.json"]
    .map((name) => read(fixture(name)))
  it.effect.prop(
    "any damaged session file (a slice cut out) imports to valid messages or fails with ImportError",
    [
      Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 3 })),
      Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 2800 })),
      Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 200 }))
    ],
    ([which, at, length]) =>
      Effect.gen(function* () {
        const text = samples[which]!
        const result = yield* Effect.result(importSession(text.slice(0, at) + text.slice(at + length)))
        if (Result.isSuccess(result)) decodeMessagesSync(result.success.messages)
        else assert.instanceOf(result.failure, ImportError)
      }),
    { arbitrary: { runs: RUNS_PER_RUNTIME } }
  )
})

describe("Import: streaming", () => {
  it.effect("a multi-byte character split across read chunks survives", () => {
    // the file importer reads 1 MiB chunks: put a 4-byte emoji across the first boundary
    const header = `{"type":"session","id":"s"}\n`
    const prefix = `{"type":"message","message":{"role":"user","content":"`
    const pad = "x".repeat((1 << 20) - header.length - prefix.length - 2)
    const text = `${header}${prefix}${pad}😀"}}\n`
    return withFile("split.jsonl", text, (p) =>
      Effect.gen(function* () {
        const s = yield* importSessionFile(p)
        assert.strictEqual(s.messages.length, 1)
        assert.isTrue((s.messages[0]!.content as ReadonlyArray<{ text: string }>)[0]!.text.endsWith("x😀"))
      }))
  })

  // 50 MB is 50 of the importer's 1 MiB read chunks and ~34k messages: enough to show line-by-line streaming across
  // chunks at scale; the 200 MB figures in COMPACTION.md (time, peak RSS) were measured once, not on every CI run
  const BIG_MB = 50
  it.live(`a ${BIG_MB} MB pi session is streamed from disk, line by line`, () =>
    Effect.gen(function* () {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const path = `${dir}/big.jsonl`
      const output = "line of tool output ".repeat(200) // 4 KB per tool result
      const turn = (i: number) =>
        `{"type":"message","message":{"role":"user","content":[{"type":"text","text":"turn ${i}"}]}}\n` +
        `{"type":"message","message":{"role":"assistant","content":[{"type":"toolCall","id":"c${i}","name":"read","arguments":{"path":"f${i}"}}],"usage":{"input":${i},"output":1,"cacheRead":0,"cacheWrite":0},"stopReason":"toolUse"}}\n` +
        `{"type":"message","message":{"role":"toolResult","toolCallId":"c${i}","toolName":"read","content":[{"type":"text","text":"${output}"}],"isError":false}}\n`
      const perTurn = new TextEncoder().encode(turn(0)).length
      const turns = Math.ceil((BIG_MB * 1e6) / perTurn)
      const file = yield* fs.open(path, { flag: "w" })
      const encoder = new TextEncoder()
      yield* file.write(encoder.encode(`{"type":"session","id":"big"}\n`))
      for (let start = 0; start < turns; start += 2000) {
        let chunk = ""
        for (let i = start; i < Math.min(turns, start + 2000); i++) chunk += turn(i)
        yield* file.write(encoder.encode(chunk))
      }
      const size = (yield* fs.stat(path)).size
      assert.isTrue(Number(size) >= BIG_MB * 1e6)
      const started = Date.now()
      const s = yield* importSessionFile(path)
      const seconds = (Date.now() - started) / 1000
      assert.strictEqual(s.messages.length, turns * 3)
      assert.strictEqual(s.usage.length, turns)
      assert.strictEqual(s.skipped.total, 1)
      console.log(`imported ${Number(size) / 1e6} MB (${turns * 3} messages) in ${seconds.toFixed(1)} s`)
    }).pipe(Effect.provide(NodeFileSystem.layer)))

  it.live("a large file that is not JSONL fails at its first line without reading the rest", () =>
    Effect.gen(function* () {
      const fs = yield* FileSystem.FileSystem
      const dir = yield* fs.makeTempDirectoryScoped()
      const path = `${dir}/big.txt`
      const file = yield* fs.open(path, { flag: "w" })
      const block = new TextEncoder().encode("plain text, not a session\n".repeat(40_000)) // ~1 MB
      for (let i = 0; i < 100; i++) yield* file.write(block)
      const started = Date.now()
      const error = yield* Effect.flip(importSessionFile(path))
      assert.strictEqual((error as ImportError).reason, "unknown-format")
      assert.isBelow(Date.now() - started, 1000)
    }).pipe(Effect.provide(NodeFileSystem.layer)))
})
