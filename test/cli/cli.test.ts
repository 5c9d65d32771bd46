/**
 * The `compaction` CLI, run as a real child process (Node 22 type stripping, or `deno run` under Deno).
 *
 * To stay fast on a small machine, every run happens once in `beforeAll`: each command as a real child (a few at a
 * time), and, for checks of a command's output and exit code alone, the same command in this process
 * (`runInProcess`); each test asserts on the results. A local HTTP server stands in for the Messages API
 * (`ANTHROPIC_BASE_URL`), so the model paths (streamed success, 401, 400 with `--fallback`, 529 with retries) run
 * offline.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Schema } from "effect"
import { CliOutput, Command } from "effect/cli"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll } from "vitest"
import { compaction } from "../../src/cli/Commands.ts"
import { renderHtml } from "../../src/cli/Html.ts"
import { buildReport } from "../../src/cli/Report.ts"
import { analyze, InspectReport, ViolationReport } from "../../src/cli/Inspect.ts"
import { ExitCode } from "../../src/cli/Run.ts"
import { importSession, importSessionFile } from "../../src/Import.ts"
import type { Message } from "../../src/Message.ts"
import { readJsonl } from "../../src/SessionStoreJsonl.ts"
import { validate } from "../../src/Validate.ts"
import { rawFile } from "../fixtures/Corpus.ts"
import { example, pool, type Run, run, runInProcess } from "./Process.ts"
import { summaryText } from "../../src/Summary.ts"

// ============================================================================
// A fake Messages API
// ============================================================================

const sse = (events: ReadonlyArray<Record<string, unknown>>): string =>
  events.map((e) => `event: ${String(e["type"])}\ndata: ${JSON.stringify(e)}\n\n`).join("")

const FAKE_SUMMARY = "## Goal\nFAKE-MODEL-SUMMARY of the earlier work."

const okStream = sse([
  {
    type: "message_start",
    message: {
      id: "msg_1",
      type: "message",
      role: "assistant",
      model: "fake-model",
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: 1000, output_tokens: 1 }
    }
  },
  { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
  { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: FAKE_SUMMARY.slice(0, 10) } },
  { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: FAKE_SUMMARY.slice(10) } },
  { type: "content_block_stop", index: 0 },
  { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 12 } },
  { type: "message_stop" }
])

const apiError = (type: string, message: string) => JSON.stringify({ type: "error", error: { type, message } })

const requests = new Map<string, number>()

const handle = (req: IncomingMessage, res: ServerResponse): void => {
  req.resume()
  req.on("end", () => {
    const mode = (req.url ?? "").split("/")[1] ?? ""
    requests.set(mode, (requests.get(mode) ?? 0) + 1)
    const json = (status: number, body: string) => {
      res.writeHead(status, { "content-type": "application/json", "request-id": "req_test" })
      res.end(body)
    }
    switch (mode) {
      case "ok":
        res.writeHead(200, { "content-type": "text/event-stream" })
        res.end(okStream)
        return
      case "unauthorized":
        return json(401, apiError("authentication_error", "invalid x-api-key"))
      case "bad":
        return json(400, apiError("invalid_request_error", "model: unknown model"))
      default:
        return json(529, apiError("overloaded_error", "Overloaded"))
    }
  })
}

// ============================================================================
// Fixtures and the runs
// ============================================================================

let dir = ""
let server: Server | undefined
let r: Record<string, Run> = {}
const path = (name: string) => join(dir, name)

/** Starts with an assistant message, has an orphaned tool_result and an unanswered tool_use. */
const broken: ReadonlyArray<Message> = [
  { role: "assistant", content: [{ type: "text", text: "hello" }] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_orphan", content: "x" }] },
  { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "bash", input: { command: "ls" } }] },
  { role: "user", content: "next" }
]

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "compaction-cli-"))
  writeFileSync(path("broken.json"), JSON.stringify({ messages: broken }))
  writeFileSync(path("notes.txt"), "these are notes, not a session\n")
  server = createServer(handle)
  await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve))
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const model = (mode: string) => ({ ANTHROPIC_API_KEY: "sk-test", ANTHROPIC_BASE_URL: `${base}/${mode}` })
  const anthropic = ["compact", example, "--summarizer", "anthropic"]
  r = await pool({
    inspectJson: () => run(["inspect", example, "--json", "--html", path("report.html")]),
    inspectText: () => run(["inspect", example]),
    compact: () =>
      run(["compact", example, "--out", path("compacted.json"), "--log", path("log"), "--session-id", "demo"]),
    evict: () => run(["evict", example, "--keep-recent", "5"]),
    validateBroken: () => run(["validate", path("broken.json"), "--json"]),
    repair: () => run(["repair", path("broken.json"), "--out", path("fixed.json")]),
    simulate: () => run(["simulate", example, "--json"]),
    missingArg: () => run(["evict"]),
    modelOk: () => run([...anthropic, "--out", path("model.json")], model("ok"))
  }, 4)
  // the same command in this process (`runInProcess`): what these check is the command's output and exit code, which
  // each command also shows as a real child above; a child's start-up each saved
  const inProcess: Record<string, () => Promise<Run>> = {
    evictBroken: () => runInProcess(["evict", path("broken.json"), "--out", path("evicted-broken.json")]),
    evictBrokenStrict: () =>
      runInProcess(["evict", path("broken.json"), "--strict", "--out", path("evicted-strict.json")]),
    compactBrokenStrict: () =>
      runInProcess(["compact", path("broken.json"), "--strict", "--out", path("compact-strict.json")]),
    missingFile: () => runInProcess(["inspect", path("nope.json")]),
    badFormat: () => runInProcess(["validate", path("notes.txt")]),
    missingKey: () => runInProcess([...anthropic, "--out", path("nokey.json")]),
    unknownFlag: () => runInProcess(["inspect", example, "--bogus"]),
    model401: () => runInProcess([...anthropic, "--out", path("401.json")], model("unauthorized")),
    model400Fallback: () =>
      runInProcess([...anthropic, "--fallback", "extractive", "--out", path("fb.json")], model("bad")),
    model529: () =>
      runInProcess([...anthropic, "--out", path("529.json")], {
        ...model("overloaded"),
        COMPACTION_SUMMARIZER_RETRIES: "1"
      }),
    validateFixed: () => runInProcess(["validate", path("fixed.json")])
  }
  for (const [key, job] of Object.entries(inProcess)) r[key] = await job()
}, 240_000)

afterAll(() => {
  server?.close()
  if (dir !== "") rmSync(dir, { recursive: true, force: true })
})

const ok = (result: Run | undefined): Run => {
  assert.isDefined(result)
  return result!
}

const oneLine = (stderr: string): string => {
  const lines = stderr.trim().split("\n")
  assert.strictEqual(lines.length, 1, `expected one stderr line, got: ${stderr}`)
  return lines[0]!
}

const decodeReport = Schema.decodeUnknownSync(Schema.fromJsonString(InspectReport))
const ValidateJson = Schema.Struct({
  file: Schema.String,
  messages: Schema.Int,
  valid: Schema.Boolean,
  violations: Schema.Array(ViolationReport)
})
const SessionJson = Schema.Struct({ system: Schema.optionalKey(Schema.String), messages: Schema.Array(Schema.Unknown) })
const SimulateJson = Schema.Struct({
  messages: Schema.Int,
  policies: Schema.Array(Schema.Struct({ name: Schema.String, cost: Schema.Number, tokensSent: Schema.Number }))
})

const importFile = (file: string) => importSession(readFileSync(file, "utf8"))

// ============================================================================
// HTML checks
// ============================================================================

const VOID = new Set(["meta"])
const TAG = /^<(\/?)([a-z][a-z0-9]*)((?:\s+[a-z][a-z0-9-]*="[^"<>]*")*)\s*(\/?)>$/
const ENTITY = /&(?!(?:amp|lt|gt|quot|#39);)/

/** A strict check: every tag is well-formed and balanced, void tags self-close, text has no raw `<`, `>` or `&`. */
const checkWellFormed = (html: string): ReadonlyArray<string> => {
  assert.isTrue(html.startsWith("<!DOCTYPE html>\n"))
  const tags: Array<string> = []
  const stack: Array<string> = []
  let inStyle = false
  for (const token of html.slice("<!DOCTYPE html>\n".length).match(/<[^>]*>|[^<]+/g) ?? []) {
    if (!token.startsWith("<")) {
      if (!inStyle) assert.isFalse(token.includes(">") || ENTITY.test(token), `raw text: ${token.slice(0, 80)}`)
      continue
    }
    const m = TAG.exec(token)
    assert.isNotNull(m, `malformed tag: ${token.slice(0, 80)}`)
    const [, close, name, attrs, selfClose] = m!
    assert.isFalse(ENTITY.test(attrs!), `unescaped & in ${token.slice(0, 80)}`)
    tags.push(token)
    if (close === "/") {
      assert.strictEqual(stack.pop(), name, `unbalanced </${name}>`)
      if (name === "style") inStyle = false
    } else if (selfClose === "/") assert.isTrue(VOID.has(name!), `self-closed <${name}>`)
    else {
      assert.isFalse(VOID.has(name!), `<${name}> must self-close`)
      stack.push(name!)
      if (name === "style") inStyle = true
    }
  }
  assert.deepStrictEqual(stack, [])
  assert.strictEqual(tags[0], '<html lang="en">')
  return tags
}

/** The report's only scripts: the embedded data and the inline tooltip, neither with a source. */
const ALLOWED_SCRIPTS = new Set(['<script type="application/json" id="report-data">', "<script>"])

/** No markup or CSS that would make the browser fetch anything. */
const checkNoRequests = (html: string, tags: ReadonlyArray<string>): void => {
  for (const tag of tags) {
    if (tag.startsWith("<script")) assert.isTrue(ALLOWED_SCRIPTS.has(tag), tag)
    assert.notMatch(tag, /^<(link|img|iframe|object|embed|source|video|audio|base|form)\b/i, tag)
    const names = tag.replace(/="[^"]*"/g, '=""')
    assert.notMatch(names, /\s(src|href|srcset|action|poster|data|background)=/i, tag)
    const style = /\sstyle="([^"]*)"/.exec(tag)?.[1] ?? ""
    assert.notMatch(style, /url\(|@import/i, tag)
  }
  const style = /<style>([^<]*)<\/style>/.exec(html)
  assert.isNotNull(style)
  assert.notMatch(style![1]!, /url\(|@import|https?:/i)
}

// ============================================================================
// Tests
// ============================================================================

describe("compaction CLI (child process)", () => {
  it("inspect --json prints a report that decodes, and --html writes the timeline", () => {
    const res = ok(r["inspectJson"])
    assert.strictEqual(res.code, 0, res.stderr)
    const report = decodeReport(res.stdout)
    assert.strictEqual(report.messages, 400)
    assert.strictEqual(report.format, "anthropic-request")
    assert.isTrue(report.turns > 10 && report.estimatedTokens > 50_000)
    const composed = Object.values(report.composition).reduce((a, b) => a + b, 0)
    assert.isTrue(composed > 0.9 * report.estimatedTokens && composed <= report.estimatedTokens)
    assert.isTrue(report.composition["tool-output"] > report.composition.prose)
    assert.isTrue(report.cut.cut > 0 && report.cut.cut < report.messages)
    assert.strictEqual(report.cut.summarizedMessages + report.cut.keptMessages, report.messages)
    assert.isTrue(report.eviction.tokensFreed > 0)
    assert.strictEqual(
      report.eviction.superseded + report.eviction.modified + report.eviction.stale,
      report.eviction.offloaded
    )
    assert.isTrue(report.supersededReads.length > 0)
    assert.deepStrictEqual(report.violations, [])
    assert.match(res.stderr, /wrote .*report\.html/)

    const html = readFileSync(path("report.html"), "utf8")
    const tags = checkWellFormed(html)
    checkNoRequests(html, tags)
    const msgs = tags.filter((t) => t.startsWith('<div class="msg '))
    assert.strictEqual(msgs.length, report.messages)
    assert.deepStrictEqual(
      msgs.map((t) => Number(/data-index="(\d+)"/.exec(t)![1])),
      Array.from({ length: report.messages }, (_, i) => i)
    )
    for (const [i, t] of msgs.entries()) {
      const fate = i < report.cut.cut ? "f-summarized" : /f-(hot|offloaded)\b/
      if (typeof fate === "string") assert.include(t, fate)
      else assert.match(t, fate)
      assert.match(t, /\sk-(prose|tool-call|tool-output|thinking|image|other)\s/)
    }
    const cutAt = tags.findIndex((t) => t.startsWith('<div class="cut"'))
    assert.isTrue(
      cutAt > 0 && tags[cutAt + 4] === msgs[report.cut.cut],
      "the cut marker precedes the first kept message"
    )
  })

  it("inspect prints a readable report with a plain bar when stdout is not a terminal", () => {
    const res = ok(r["inspectText"])
    assert.strictEqual(res.code, 0, res.stderr)
    assert.strictEqual(res.stderr, "")
    assert.notInclude(res.stdout, "\u001b[")
    for (const heading of ["Composition", "Cut", "Eviction", "Superseded reads", "Hot paths", "Validation"]) {
      assert.include(res.stdout, heading)
    }
    const bar = res.stdout.split("\n").find((l) => /^ {2}[█▓▒░▚·]+$/.test(l))
    assert.isDefined(bar)
    assert.strictEqual([...bar!.trim()].length, 60)
    assert.match(res.stdout, /tool output\s+\d/)
  })

  it.live("compact writes a re-importable, valid session and persists it to --log", () =>
    Effect.gen(function* () {
      const res = ok(r["compact"])
      assert.strictEqual(res.code, 0, res.stderr)
      assert.strictEqual(res.stdout, "")
      assert.match(res.stderr, /compacted with the extractive summarizer: 400 → \d+ messages/)
      const text = readFileSync(path("compacted.json"), "utf8")
      Schema.decodeUnknownSync(Schema.fromJsonString(SessionJson))(text)
      const session = yield* importFile(path("compacted.json"))
      assert.isTrue(session.messages.length < 400)
      assert.isString(session.system)
      assert.deepStrictEqual(validate(session.messages), [])
      assert.isDefined(summaryText(session.messages[0]!))
      const loaded = yield* readJsonl({ directory: path("log"), sessionId: "demo" }).pipe(
        Effect.provide(NodeServices.layer)
      )
      assert.deepStrictEqual(JSON.parse(JSON.stringify(loaded.view)), JSON.parse(text).messages)
    }))

  it.live("evict prints the session to stdout and the savings to stderr", () =>
    Effect.gen(function* () {
      const res = ok(r["evict"])
      assert.strictEqual(res.code, 0, res.stderr)
      assert.match(oneLine(res.stderr), /^compaction: offloaded \d+ tool results .* freed [\d,]+ tokens/)
      const session = yield* importSession(res.stdout)
      assert.strictEqual(session.messages.length, 400)
      assert.deepStrictEqual(validate(session.messages), [])
    }))

  it.live("validate exits 1 on violations (--json decodes); repair fixes them and validate then exits 0", () =>
    Effect.gen(function* () {
      const bad = ok(r["validateBroken"])
      assert.strictEqual(bad.code, ExitCode.Violations)
      assert.strictEqual(bad.stderr, "")
      const report = Schema.decodeUnknownSync(Schema.fromJsonString(ValidateJson))(bad.stdout)
      assert.isFalse(report.valid)
      const tags = report.violations.map((v) => v._tag)
      for (const tag of ["FirstMessageNotUser", "OrphanedToolResult", "MissingToolResult"]) assert.include(tags, tag)

      const fixed = ok(r["repair"])
      assert.strictEqual(fixed.code, 0, fixed.stderr)
      assert.match(oneLine(fixed.stderr), /^compaction: repaired: /)
      const session = yield* importFile(path("fixed.json"))
      assert.deepStrictEqual(validate(session.messages), [])
      const good = ok(r["validateFixed"])
      assert.strictEqual(good.code, 0, good.stderr)
      assert.match(good.stdout, /valid/)
    }))

  it("simulate --json compares the policies", () => {
    const res = ok(r["simulate"])
    assert.strictEqual(res.code, 0, res.stderr)
    const report = Schema.decodeUnknownSync(Schema.fromJsonString(SimulateJson))(res.stdout)
    assert.strictEqual(report.messages, 400)
    assert.isTrue(report.policies.length >= 2)
    assert.notInclude(res.stdout, "perRequest")
  })

  it("input errors exit 3 with one line naming the file", () => {
    const missing = ok(r["missingFile"])
    assert.strictEqual(missing.code, ExitCode.Input)
    assert.strictEqual(missing.stdout, "")
    assert.strictEqual(oneLine(missing.stderr), `compaction: ${path("nope.json")}: no such file`)
    const bad = ok(r["badFormat"])
    assert.strictEqual(bad.code, ExitCode.Input)
    assert.match(oneLine(bad.stderr), /^compaction: .*notes\.txt: not a known session format: expected /)
  })

  it("usage errors exit 2 with one line and a pointer to --help", () => {
    const missing = ok(r["missingArg"])
    assert.strictEqual(missing.code, ExitCode.Usage)
    assert.strictEqual(missing.stdout, "")
    assert.match(oneLine(missing.stderr), /^compaction: .*file.*; see "compaction evict --help"$/)
    const unknown = ok(r["unknownFlag"])
    assert.strictEqual(unknown.code, ExitCode.Usage)
    assert.match(oneLine(unknown.stderr), /--bogus/)
  })

  it("--summarizer anthropic without ANTHROPIC_API_KEY fails fast with exit 4 and writes nothing", () => {
    const res = ok(r["missingKey"])
    assert.strictEqual(res.code, ExitCode.Summarizer)
    assert.strictEqual(res.stdout, "")
    assert.strictEqual(
      oneLine(res.stderr),
      "compaction: ANTHROPIC_API_KEY is not set; set it, or use --summarizer extractive (the default)"
    )
    assert.isFalse(existsSync(path("nokey.json")))
  })

  it("streams the summary from the Messages API (ANTHROPIC_BASE_URL)", () => {
    const res = ok(r["modelOk"])
    assert.strictEqual(res.code, 0, res.stderr)
    assert.strictEqual(res.stdout, "")
    assert.match(res.stderr, /compacted with the anthropic summarizer/)
    const out = JSON.parse(readFileSync(path("model.json"), "utf8")) as { messages: Array<Message> }
    assert.include(summaryText(out.messages[0]!) ?? "", "FAKE-MODEL-SUMMARY")
  })

  it("a 401 fails at once with exit 4, the status and a hint, and writes nothing", () => {
    const res = ok(r["model401"])
    assert.strictEqual(res.code, ExitCode.Summarizer)
    const line = res.stderr.trim().split("\n").at(-1)!
    assert.match(line, /^compaction: summarizer failed: .*401.*ANTHROPIC_API_KEY/)
    assert.strictEqual(requests.get("unauthorized"), 1)
    assert.isFalse(existsSync(path("401.json")))
  })

  it("a retryable error is retried, then exits 4; --fallback extractive compacts anyway and says so", () => {
    const overloaded = ok(r["model529"])
    assert.strictEqual(overloaded.code, ExitCode.Summarizer)
    assert.match(overloaded.stderr.trim().split("\n").at(-1)!, /overloaded \(529\) after 2 attempts/)
    assert.strictEqual(requests.get("overloaded"), 2)
    assert.isFalse(existsSync(path("529.json")))

    const fell = ok(r["model400Fallback"])
    assert.strictEqual(fell.code, 0, fell.stderr)
    assert.strictEqual(fell.stdout, "")
    assert.match(
      fell.stderr.trim().split("\n").at(-1)!,
      /^compaction: compacted with the extractive summarizer instead \(--fallback\): .*The anthropic summarizer failed: .*400/
    )
    assert.strictEqual(requests.get("bad"), 1)
    assert.isTrue(existsSync(path("fb.json")))
  })

  it("evict and compact warn on an input that breaks the API's rules, and refuse it with --strict, writing nothing", () => {
    const warned = ok(r["evictBroken"])
    assert.strictEqual(warned.code, 0, warned.stderr)
    assert.match(warned.stderr, /warning: .*broken\.json: the input breaks the API's rules in \d+ places/)
    assert.match(warned.stderr, /the output keeps them \(compaction repair mends them, --strict refuses the input\)/)
    assert.isTrue(existsSync(path("evicted-broken.json")))
    for (
      const [name, file] of [["evictBrokenStrict", "evicted-strict.json"], [
        "compactBrokenStrict",
        "compact-strict.json"
      ]]
    ) {
      const refused = ok(r[name])
      assert.strictEqual(refused.code, 1, `${name}: ${refused.stderr}`)
      assert.match(refused.stderr, /refuses it with --strict: mend it with compaction repair/)
      assert.isFalse(existsSync(path(file)), `${name} wrote nothing`)
    }
  })
})

// ============================================================================
// In process: help on every command, hostile text in the HTML
// ============================================================================

describe("compaction CLI (in process)", () => {
  it.live("--help works on every command and lists its flags", () =>
    Effect.gen(function* () {
      const helps: Array<string> = []
      const capture = CliOutput.layerPresenter({
        present: (event) =>
          Effect.sync(() => {
            if (event._tag === "Help") {
              helps.push(CliOutput.defaultFormatter({ colors: false }).formatHelpDoc(event.helpDoc))
            }
          })
      })
      const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
        [[], "inspect"],
        [["inspect"], "--html"],
        [["evict"], "--keep-recent"],
        [["compact"], "--summarizer"],
        [["validate"], "--json"],
        [["repair"], "--out"],
        [["simulate"], "--system-tokens"]
      ]
      for (const [path, expected] of cases) {
        yield* Command.runWith(compaction, { version: "test" })([...path, "--help"]).pipe(
          Effect.provide(Layer.merge(NodeServices.layer, capture))
        )
        assert.include(helps.at(-1) ?? "", expected, `help of ${path.join(" ") || "compaction"}`)
      }
      assert.strictEqual(helps.length, cases.length)
    }))

  it.live("the HTML report escapes hostile text and stays well-formed", () =>
    Effect.gen(function* () {
      const hostile = '<script src="https://evil.example/x.js"></script> & "quotes" \'single\' <img src=x>'
      const session = yield* importSession(JSON.stringify({
        messages: [
          { role: "user", content: hostile },
          { role: "assistant", content: [{ type: "text", text: hostile }] }
        ]
      }))
      const html = renderHtml(yield* buildReport(session, { file: `x${hostile}.json` }))
      const tags = checkWellFormed(html)
      checkNoRequests(html, tags)
      assert.notInclude(html, "<script src")
      assert.notInclude(html, "<img")
      assert.include(html, "&lt;script src=&quot;https://evil.example/x.js&quot;&gt;")
      assert.strictEqual(tags.filter((t) => t.startsWith('<div class="msg ')).length, 2)
      assert.notInclude(html, 'class="cut"')
    }))

  it.live("real sessions: provider-reported usage, violations and the timeline match the session", () =>
    Effect.gen(function* () {
      for (const name of ["pi__large-session.jsonl", "claude-code__coverage-test-fix.jsonl"]) {
        const session = yield* importSessionFile(rawFile(name)).pipe(Effect.provide(NodeServices.layer))
        const analysis = analyze(session, { file: name })
        const { report, timeline } = analysis
        assert.isNotNull(report.provider, name)
        const last = session.usage.at(-1)!
        assert.strictEqual(report.provider!.messageIndex, last.messageIndex)
        assert.isTrue(report.provider!.contextTokens >= last.usage.input_tokens + last.usage.output_tokens)
        assert.strictEqual(report.violations.length, validate(session.messages).length)
        assert.strictEqual(timeline.length, session.messages.length)
        assert.strictEqual(timeline.reduce((a, e) => a + e.tokens, 0), report.estimatedTokens)
        const tags = checkWellFormed(renderHtml(yield* buildReport(session, { file: name })))
        assert.strictEqual(tags.filter((t) => t.startsWith('<div class="msg ')).length, session.messages.length)
      }
    }))
})
