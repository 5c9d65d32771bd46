/**
 * What a summary keeps of the identifiers of the span it replaces, and the way back to a text it shortened, judged by
 * this file's own reading (its regular expressions for each identifier form, its own parse of the summary's lines),
 * not by the library's anchor rules:
 *
 * - a 60k-token paste summarized once the agent goes on keeps its head and tail, and the line between
 *   names a reference that `recall` answers with the paste exactly (a long status board too); the identifiers buried
 *   in its middle are listed, and no duration and nothing the quoted head and tail already show is;
 * - the identifiers of the user's text, the assistant's prose and what tools printed (a path with a line number, an
 *   error code without digits, a TypeScript code, an ARN, a hash in the middle of an output, a `sha256:` digest on an
 *   output's last line) are in the summary, with the extractive summarizer and with the Anthropic one whose model
 *   keeps none of them;
 * - a tool result of text blocks and an image comes back from `recall` exactly (each block), in pages, and a search
 *   finds its text but not the image's data;
 * - over a few hundred generated spans, no identifier listed is a duration or a plain number, and each occurs
 *   verbatim in the text it was taken from.
 */
import Anthropic from "@anthropic-ai/sdk"
import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, Effect, Layer, Schema } from "effect"
import { AnthropicSummarizer } from "../src/AnthropicSummarizer.ts"
import { Conversation, layerLogged } from "../src/Conversation.ts"
import type { MessageParam } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { anchorsOf } from "../src/Retention.ts"
import { SessionLog } from "../src/SessionLog.ts"
import type { MemorySessions } from "../src/SessionStore.ts"
import { Summarizer } from "../src/Summarizer.ts"
import { nextManifest } from "../src/internal/summary.ts"
import { prng } from "./fixtures/Conversation.ts"
import * as MessagesApiServer from "./fixtures/MessagesApiServer.ts"

// ----------------------------------------------------------------------------
// The judge: this file's own identifier forms and its own reading of a summary
// ----------------------------------------------------------------------------

/** The identifier forms the summary must keep, each a global regular expression of its own. */
const FORMS: ReadonlyArray<readonly [string, RegExp]> = [
  ["uuid", /\b[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b/gi],
  ["url", /https?:\/\/[^\s"'`<>()]+/g],
  ["path with a line", /(?:[\w.-]+)?(?:\/[\w.@-]+)+\.[a-z]{1,5}:\d+\b/g],
  ["node code", /\bERR_[A-Z][A-Z0-9_]*\b/g],
  ["errno", /\bE(?:CONNREFUSED|CONNRESET|NOENT|ACCES|ADDRINUSE|TIMEDOUT|PIPE)\b/g],
  ["typescript code", /\bTS\d{4,5}\b/g],
  ["arn", /\barn:aws:[a-z0-9-]+:[a-z0-9-]*:\d*:[\w./-]+/g],
  ["digest", /\bsha256:[0-9a-f]{7,64}\b/g],
  ["hash", /(?<![\w-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{12,64}(?![\w-])/g]
]

/** Every identifier of the judge's forms in `text`, without repeats. */
const judgedIdentifiers = (text: string): ReadonlyArray<string> => {
  const found = new Set<string>()
  for (const [, form] of FORMS) for (const match of text.matchAll(form)) found.add(match[0].replace(/[.,:]+$/, ""))
  return [...found]
}

/** A duration (`4ms`, `1.5 s`, `96ms`) or a plain number (`8471`, `2,048`, `3.14`). */
const DURATION = /^\d+(?:\.\d+)?\s?(?:ns|µs|us|ms|s|sec|secs|seconds?|m|min|mins|minutes?|h|hrs?|hours?)$/
const PLAIN_NUMBER = /^[+-]?\d+(?:,\d{3})*(?:\.\d+)?$/
const isNoise = (text: string): boolean => DURATION.test(text) || PLAIN_NUMBER.test(text)

/** The text of a summary message (the first message of a view that starts with one), else undefined. */
const summaryOf = (view: ReadonlyArray<Message>): string | undefined => {
  const first = view[0]
  if (first === undefined || first.role !== "user" || typeof first.content === "string") return undefined
  const block = first.content[0] as { readonly type: string; readonly text?: string } | undefined
  return block?.type === "text" && block.text?.startsWith("[Summary of the earlier conversation]") === true
    ? block.text
    : undefined
}

/** The identifier lines of a summary's manifest (`identifier <age> "<json>"`), their texts. */
const listedIdentifiers = (summary: string): ReadonlyArray<string> =>
  [...summary.matchAll(/^identifier \d+ ("(?:[^"\\]|\\.)*")$/gm)].map((m) => JSON.parse(m[1]!) as string)

/** The quoted blocks of a manifest (`instruction|status <age> <n> chars:` then n code units), by kind. */
const quotedBlocks = (summary: string, kind: "instruction" | "status"): ReadonlyArray<string> => {
  const out: Array<string> = []
  // the header may carry a task mark and a reference before its colon
  const header = new RegExp(`^${kind} \\d+ (\\d+) chars[^:\\n]*:$`, "gm")
  for (const match of summary.matchAll(header)) {
    const start = match.index + match[0].length + 1
    out.push(summary.slice(start, start + Number(match[1])))
  }
  return out
}

/** The omission lines of a summary that name a reference: the reference each names. */
const omissionRefs = (summary: string): ReadonlyArray<string> =>
  summary.split("\n").filter((line) => /^\[… \d+ characters of .* left out here/.test(line)).map((line) => {
    const ref = /\bref[ =]"?([^\s"\]…]+)/.exec(line)
    assert.isNotNull(ref, `an omission line names no reference: ${line}`)
    return ref![1]!
  })

/** Every page of `ref` from a `recall` answer text (header line, text, a `[more: …]` line when there are more). */
const recallWhole = (ref: string, maxTokens?: number) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    let text = ""
    for (let page = 1; page < 500; page++) {
      const answer = yield* conversation.recall({ ref, page }, maxTokens === undefined ? undefined : { maxTokens })
      const lines = answer.split("\n")
      assert.match(lines[0]!, /^\[recall ref=/, answer.slice(0, 300))
      const more = lines.at(-1)!.startsWith("[more:")
      text += lines.slice(1, more ? -1 : undefined).join("\n")
      if (!more) return text
    }
    return assert.fail("too many pages")
  })

const logged = (summarizer: Layer.Layer<Summarizer>, policy: CompactionPolicy, sessionId: string) =>
  layerLogged({ policy, recall: true }).pipe(
    Layer.provide(SessionLog.layerMemory({ store: new Map() as MemorySessions, sessionId })),
    Layer.provide(summarizer)
  )

/** A reply recorded with no request before it (no trigger fires: the test compacts when it means to). */
const reply = (content: ReadonlyArray<Record<string, unknown>>) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    yield* conversation.recordReply({ role: "assistant", content } as unknown as MessageParam)
  })

/** A reply recorded after a prepare, as an agent loop records it. */
const step = (content: ReadonlyArray<Record<string, unknown>>) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    const prepared = yield* conversation.prepare
    yield* conversation.recordReply({ role: "assistant", content } as unknown as MessageParam, undefined, {
      requestEpoch: prepared.epoch
    })
    return prepared
  })

/** The result of call `id`, appended. */
const answer = (id: string, content: unknown, isError = false) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    yield* conversation.append({
      role: "user",
      content: [{ type: "tool_result", tool_use_id: id, content, ...(isError ? { is_error: true } : {}) }]
    } as MessageParam)
  })

// ----------------------------------------------------------------------------
// A long paste
// ----------------------------------------------------------------------------

const BURIED = "request-id=3f9a1c2e-7b4d-4e8f-9a0b-1c2d3e4f5a6b ERR_SOCKET_TIMEOUT at /srv/app/src/net/socket.ts:142"

/** The audit's paste: a night of log lines (each with a duration), one buried error, a closing request. */
const paste = (tokens: number): string => {
  const lines: Array<string> = []
  let chars = 0
  for (let i = 0; chars < tokens * 4; i++) {
    const line = `2025-01-01T00:00:${String(i % 60).padStart(2, "0")}Z INFO worker-${i % 7} handled job ${i} in ${
      i % 97
    }ms`
    lines.push(line)
    chars += line.length + 1
    if (i === 1500) lines.push(BURIED)
  }
  return `Here is the production log from last night:\n${lines.join("\n")}\n` +
    "Why does the worker time out? Fix it, and do NOT touch the public API."
}

/** A status board (checklist lines) longer than a manifest keeps whole. */
const BOARD = [
  "Status:",
  ...Array.from(
    { length: 120 },
    (_, i) => `- [${i % 3 === 0 ? "x" : " "}] step ${i}: rework module ${i} of the worker`
  ),
  "Next action: read the production log"
].join("\n")

describe("a long user message", () => {
  it.effect(
    "a 60k-token paste summarized once the agent goes on: its omitted middle names a reference recall answers with it exactly; its buried identifiers are listed, no duration and nothing its head and tail show",
    () =>
      Effect.gen(function* () {
        const conversation = yield* Conversation
        const pasted = paste(60_000)
        yield* conversation.append({ role: "user", content: "Fix the flaky worker in /srv/app/src/worker.ts." })
        for (let i = 0; i < 6; i++) {
          yield* step([{ type: "tool_use", id: `toolu_read${i}`, name: "read", input: { path: `/srv/m${i}.ts` } }])
          yield* answer(`toolu_read${i}`, `export const m${i} = 1\n`.repeat(400))
        }
        yield* step([{ type: "text", text: BOARD }, { type: "text", text: "Can you share the logs?" }])
        yield* conversation.append({ role: "user", content: pasted })
        let summary: string | undefined
        for (let i = 0; i < 12 && summary === undefined; i++) {
          yield* step([{ type: "tool_use", id: `toolu_grep${i}`, name: "bash", input: { command: `grep -n x ${i}` } }])
          yield* answer(`toolu_grep${i}`, `142: socket.setTimeout(${i})\n`.repeat(200))
          const view = (yield* conversation.state).view
          if (!JSON.stringify(view).includes(pasted.slice(100_000, 100_200))) summary = summaryOf(view)
        }
        assert.isDefined(summary, "the paste was summarized")
        const text = summary!

        // the way back: each omission line names a reference whose recall is the text exactly
        const refs = omissionRefs(text)
        assert.lengthOf(refs, 2, "the paste's middle and the status board's")
        const back = yield* Effect.forEach(refs, (ref) => recallWhole(ref, 2_000))
        assert.include(back, pasted)
        assert.include(back, BOARD)

        // the buried identifiers are listed; none is a duration or a number; none is in the quoted head and tail
        const quoted = quotedBlocks(text, "instruction").join("\n")
        assert.include(quoted, "do NOT touch the public API")
        assert.notInclude(quoted, "ERR_SOCKET_TIMEOUT")
        const listed = listedIdentifiers(text)
        for (const id of judgedIdentifiers(BURIED)) assert.include(listed, id)
        assert.deepStrictEqual(listed.filter(isNoise), [])
        assert.deepStrictEqual(listed.filter((id) => quoted.includes(id)), [])
      }).pipe(
        Effect.provide(logged(ExtractiveSummarizer.layer, CompactionPolicy.makeUnsafe({}), "paste"))
      ),
    120_000
  )
})

// ----------------------------------------------------------------------------
// Identifiers in prose and in what tools printed
// ----------------------------------------------------------------------------

const TASK = "Ticket PROJ-4821: customer 9b2f4c1e-55aa-4d0b-8c3e-0f1e2d3c4b5a is double-billed. " +
  "Start in packages/billing/src/ledger/reconcile.ts."
const PROSE = "The last commit is a1b2c3d4e5f60718293a4b5c6d7e8f9012345678; CI run " +
  "https://ci.acme.dev/builds/88231/logs?step=lint failed with ERR_PNPM_OUTDATED_LOCKFILE and TS2345 at " +
  "src/server/routes/invoice.ts:212. The bucket is arn:aws:s3:::acme-prod-invoices."
const FSCK = Array.from(
  { length: 400 },
  (_, i) => i === 200 ? "object deadbeefcafe1234feedface5678abcd90ef1234 is the bad ledger blob" : `line ${i}: nothing`
).join("\n") + "\ndigest sha256:4f1c9a7be2d03c58"
const REFUSED = 'psql: error: connection to server at "10.0.3.17", port 5432 failed: ECONNREFUSED 10.0.3.17:5432\n'

/** The span the audit plants identifiers in, then filler turns so that a compaction summarizes it. */
const plantedSession = Effect.gen(function* () {
  const conversation = yield* Conversation
  yield* conversation.append({ role: "user", content: TASK })
  yield* reply([
    { type: "text", text: PROSE },
    { type: "tool_use", id: "toolu_fsck", name: "bash", input: { command: "git fsck --full" } }
  ])
  yield* answer("toolu_fsck", FSCK)
  yield* reply([{ type: "tool_use", id: "toolu_psql", name: "bash", input: { command: "psql -h 10.0.3.17" } }])
  yield* answer("toolu_psql", REFUSED, true)
  yield* reply([{ type: "text", text: "I will look at the replay next." }])
  for (let t = 0; t < 4; t++) {
    yield* conversation.append({ role: "user", content: `go on ${t}` })
    for (let k = 0; k < 6; k++) {
      yield* reply([{ type: "tool_use", id: `toolu_r${t}${k}`, name: "read", input: { path: `/srv/m${t}${k}.py` } }])
      yield* answer(`toolu_r${t}${k}`, "x = 1\n".repeat(700))
    }
    yield* reply([{ type: "text", text: `Done ${t}.` }])
  }
  const { outcome } = yield* conversation.compact()
  assert.strictEqual(outcome._tag, "Compacted", JSON.stringify(outcome))
  const summary = summaryOf((yield* conversation.state).view)
  assert.isDefined(summary)
  return summary!
})

/** The identifiers the judge reads in the planted span: what the summary must hold. */
const planted = judgedIdentifiers([TASK, PROSE, FSCK, REFUSED].join("\n"))

const assertKeeps = (summary: string) => {
  // the audit's misses, by name, besides every form the judge reads
  for (
    const id of [
      "src/server/routes/invoice.ts:212",
      "ERR_PNPM_OUTDATED_LOCKFILE",
      "TS2345",
      "arn:aws:s3:::acme-prod-invoices",
      "deadbeefcafe1234feedface5678abcd90ef1234",
      "sha256:4f1c9a7be2d03c58"
    ]
  ) assert.include(planted, id)
  assert.deepStrictEqual(planted.filter((id) => !summary.includes(id)), [])
  assert.deepStrictEqual(listedIdentifiers(summary).filter(isNoise), [])
}

const TERSE = [
  "## Goal\nFix the double billing.\n## Constraints and rules\nNone.\n## Progress\nLooked at the ledger.\n",
  "## Decisions\nNone yet.\n## Open todos\nFix it.\n## Pending user asks\nNone.\n## Exact identifiers\nNone.\n"
]

describe("identifiers of prose and of what tools printed", () => {
  const policy = CompactionPolicy.makeUnsafe({ compactAtTokens: 20_000 })

  it.effect("the extractive summary keeps each of them", () =>
    Effect.map(plantedSession, assertKeeps).pipe(
      Effect.provide(logged(ExtractiveSummarizer.layer, policy, "extractive"))
    ))

  it.live("the Anthropic summary whose model keeps none of them keeps each of them", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(MessagesApiServer.Reply.stream(TERSE))
      const summarizer = Layer.succeed(
        Summarizer,
        AnthropicSummarizer.make({
          client: new Anthropic({ apiKey: "sk-test-key", baseURL: server.url, maxRetries: 0 }),
          model: "test-summarizer",
          timeout: "5 seconds",
          retry: { base: "5 millis", maxDelay: "10 millis", retries: 1 }
        })
      )
      const summary = yield* plantedSession.pipe(Effect.provide(logged(summarizer, policy, "anthropic")))
      assert.include(summary, "Fix the double billing.", "the model's own text")
      assertKeeps(summary)
    }))
})

// ----------------------------------------------------------------------------
// Many identifiers: their room follows the summary's budget
// ----------------------------------------------------------------------------

/** The release hash of service `i`: 40 hex digits, each its own. */
const releaseHash = (i: number): string =>
  Array.from({ length: 5 }, (_, k) => ((i + 1) * 2654435761 * (k + 3) >>> 0).toString(16).padStart(8, "a")).join("")

/**
 * A span where the assistant names the release of 120 services, one a step (its prose, beside a call whose output holds
 * no identifier, so no command's printed values keep the hash); then short turns, and one compaction.
 */
const manyHashes = Effect.gen(function* () {
  const conversation = yield* Conversation
  yield* conversation.append({ role: "user", content: "Find the release of every service." })
  for (let i = 0; i < 120; i++) {
    yield* reply([
      { type: "text", text: `svc-${i} runs release ${releaseHash(i)}; next one.` },
      { type: "tool_use", id: `toolu_rel${i}`, name: "bash", input: { command: `releases next --after ${i}` } }
    ])
    yield* answer(`toolu_rel${i}`, "built from the main branch\n".repeat(40))
  }
  yield* reply([{ type: "text", text: "Listed." }])
  for (let t = 0; t < 3; t++) {
    yield* conversation.append({ role: "user", content: `next ${t}` })
    yield* reply([{ type: "text", text: `Ok ${t}.` }])
  }
  const { outcome } = yield* conversation.compact()
  assert.strictEqual(outcome._tag, "Compacted", JSON.stringify(outcome))
  return summaryOf((yield* conversation.state).view) ?? assert.fail("no summary")
})

describe("identifiers' room follows the summary's budget", () => {
  it.effect("a large budget keeps every identifier of a span that holds many; the default keeps its 2,400 characters", () =>
    Effect.gen(function* () {
      const hashes = Array.from({ length: 120 }, (_, i) => releaseHash(i))
      assert.deepStrictEqual(hashes.filter((h) => judgedIdentifiers(h).length !== 1), [], "the judge reads each")
      const large = CompactionPolicy.makeUnsafe({
        compactAtTokens: 160_000,
        summaryBudgetTokens: 30_000,
        keepRecentTokens: 200
      })
      const summary = yield* manyHashes.pipe(Effect.provide(logged(ExtractiveSummarizer.layer, large, "large")))
      assert.deepStrictEqual(hashes.filter((h) => !summary.includes(h)), [], "identifiers lost with room to spare")
      assert.isBelow(summary.length / 4, 30_000)
      // the default budget: the identifier lines keep to the room they had
      const fallback = CompactionPolicy.makeUnsafe({ compactAtTokens: 60_000, keepRecentTokens: 200 })
      const small = yield* manyHashes.pipe(Effect.provide(logged(ExtractiveSummarizer.layer, fallback, "default")))
      const lines = small.split("\n").filter((line) => line.startsWith("identifier "))
      assert.isAbove(lines.length, 20)
      assert.isAtMost(lines.reduce((n, line) => n + line.length + 1, 0), 2_400)
    }))
})

// ----------------------------------------------------------------------------
// A tool result of several blocks, by recall
// ----------------------------------------------------------------------------

/** The blocks of a recalled tool result, read back by this test: header lines, a text's length, a block's JSON. */
const readBlocks = (text: string): ReadonlyArray<unknown> => {
  const blocks: Array<unknown> = []
  let at = 0
  while (at < text.length) {
    const end = text.indexOf("\n", at)
    const header = /^\[block (\d+) of (\d+): (\w+)(?:, (\d+) chars)?\]$/.exec(text.slice(at, end))
    assert.isNotNull(header, `a header line at ${at}: ${text.slice(at, at + 80)}`)
    assert.strictEqual(Number(header![1]), blocks.length + 1)
    if (header![3] === "text") {
      const length = Number(header![4])
      blocks.push({ type: "text", text: text.slice(end + 1, end + 1 + length) })
      at = end + 1 + length + 1
    } else {
      const close = text.indexOf("\n", end + 1)
      blocks.push(JSON.parse(text.slice(end + 1, close === -1 ? text.length : close)))
      at = close === -1 ? text.length : close + 1
    }
  }
  return blocks
}

describe("recall of a tool result with several blocks", () => {
  it.effect("each block comes back exactly, in pages; a search finds the text and not the image's data", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      const data = btoa(String.fromCharCode(...Array.from({ length: 9_000 }, (_, i) => (i * 7919) % 251)))
      const content = [
        { type: "text", text: "screenshot of the failing page\n\n  (indented, trailing newline)\n" },
        { type: "image", source: { type: "base64", media_type: "image/png", data } },
        { type: "text", text: Array.from({ length: 300 }, (_, i) => `console line ${i}: ok`).join("\n") }
      ]
      yield* conversation.append({ role: "user", content: "Look at the page." })
      yield* step([{ type: "tool_use", id: "toolu_shot", name: "screenshot", input: { url: "http://x" } }])
      yield* answer("toolu_shot", content)
      for (let i = 0; i < 8; i++) {
        yield* conversation.append({ role: "user", content: `next ${i}` })
        yield* step([{ type: "tool_use", id: `toolu_ls${i}`, name: "bash", input: { command: `ls ${i}` } }])
        yield* answer(`toolu_ls${i}`, `file ${i}\n`.repeat(400))
        yield* step([{ type: "text", text: `Listed ${i}.` }])
      }
      const { outcome } = yield* conversation.compact()
      assert.strictEqual(outcome._tag, "Compacted", JSON.stringify(outcome))
      assert.notInclude(JSON.stringify((yield* conversation.state).view), "console line 150")
      assert.match(yield* conversation.recall({ ref: "toolu_shot" }, { maxTokens: 1_000 }), /page 1 of [2-9]/)
      const whole = yield* recallWhole("toolu_shot", 1_000)
      assert.deepStrictEqual(readBlocks(whole), content)
      assert.include(yield* conversation.recall({ query: "console line 150:" }), 'ref="toolu_shot"')
      assert.include(yield* conversation.recall({ query: data.slice(3_000, 3_012) }), "Nothing removed matches")
    }).pipe(
      Effect.provide(
        logged(
          ExtractiveSummarizer.layer,
          CompactionPolicy.makeUnsafe({ keepRecentTokens: 1_000, keepRecentTurns: 1, compactAtTokens: 40_000 }),
          "blocks"
        )
      )
    ))
})

// ----------------------------------------------------------------------------
// Property: never noise, always verbatim
// ----------------------------------------------------------------------------

/** Words a generated text is made of: identifiers of every form, durations, numbers, near misses and prose. */
const WORDS: ReadonlyArray<string> = [
  "4ms",
  "96ms",
  "1.5s",
  "12 ms",
  "3 min",
  "250us",
  "8471",
  "2,048",
  "3.14",
  "0",
  "40%",
  "3.5 MB",
  "2x",
  "job",
  "ERROR",
  "EXIT",
  "EVENT",
  "ENOENT",
  "ECONNREFUSED",
  "ERR_SOCKET_TIMEOUT",
  "ERR_",
  "TS2345",
  "E0308",
  "src/a.ts:12",
  "/srv/x.js:10:5",
  "a/b.py:7:text",
  "host:8080",
  "example.com:443",
  "arn:aws:s3:::bucket",
  "arn:aws:iam::123456789012:role/x",
  "sha256:4f1c9a7be2d03c58",
  "SHA256:ABCDEF1234",
  "request-id=3f9a1c2e-7b4d-4e8f-9a0b-1c2d3e4f5a6b",
  "x=42",
  "deadbeef12",
  "abcdefgh",
  "v1.2.3",
  "pkg@2.0.1",
  "10.0.3.17",
  "#482",
  "toolu_01AbC9",
  "https://a.example/x?y=1",
  "2025-01-01T00:00:00Z"
]
const JOINERS: ReadonlyArray<string> = [
  " ",
  "  ",
  "\n",
  ", ",
  ". ",
  ": ",
  " (",
  ") ",
  '"',
  "'",
  "`",
  "=",
  "@",
  ":",
  "/"
]

/** A text of `n` words and joiners drawn by `random`. */
const generatedText = (random: () => number, n: number): string => {
  let text = ""
  for (let i = 0; i < n; i++) {
    text += WORDS[Math.floor(random() * WORDS.length)]! + JOINERS[Math.floor(random() * JOINERS.length)]!
  }
  return text
}

describe("identifier extraction, on generated spans", () => {
  it.prop(
    "no identifier listed is a duration or a plain number, and each occurs verbatim in the text it came from",
    [Arbitrary.schema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 1_000_000_000 })))],
    ([seed]) => {
      const random = prng(seed)
      const [userText, prose, output, read] = [0, 1, 2, 3].map(() => generatedText(random, 4 + (seed % 40)))
      const span: ReadonlyArray<Message> = [
        { role: "user", content: userText! },
        {
          role: "assistant",
          content: [
            { type: "text", text: prose! },
            { type: "tool_use", id: "toolu_run", name: "bash", input: { command: "run" } },
            { type: "tool_use", id: "toolu_read", name: "read", input: { path: "/a.ts" } }
          ]
        },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "toolu_run", content: output! },
            { type: "tool_result", tool_use_id: "toolu_read", content: read! }
          ]
        }
      ]
      const sources = [userText!, prose!, output!]
      const fromAnchors = anchorsOf(span).flatMap((a) => a.category === "identifier" ? [a.text] : [])
      const fromManifest = nextManifest({}, span).entries.flatMap((e) => e.kind === "identifier" ? [e.text] : [])
      for (const id of [...fromAnchors, ...fromManifest]) {
        assert.isFalse(isNoise(id), `${id} is a duration or a number`)
        assert.isTrue(sources.some((source) => source.includes(id)), `${id} occurs in no source`)
      }
    },
    { arbitrary: { runs: 300 } }
  )
})
