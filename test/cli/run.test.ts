/**
 * The command line's runner (`cli/Run.ts`) end to end: honest input handling, outputs the Messages API accepts, clear
 * failures with their exit codes, fast start-up, context in view and the HTML strip. Every run happens once in
 * `beforeAll`: a real child process (a few at a time) where the process itself is checked (stdout to a pipe, the
 * environment, the pre-rendered help, exit codes through `main.ts`, a pipe between two processes, Ctrl-C), and the
 * other runs, checks of a command's output, exit code and files, as the same command in this process
 * (`runInProcess`) meanwhile; each test asserts on the results.
 */
import { NodeServices } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll } from "vitest"
import { renderHelpPages } from "../../src/cli/Help.ts"
import { HELP_PAGES } from "../../src/cli/HelpPages.ts"
import { numberEvery, renderHtml } from "../../src/cli/Html.ts"
import { buildReport } from "../../src/cli/Report.ts"
import { analyze, InspectReport } from "../../src/cli/Inspect.ts"
import { ExitCode } from "../../src/cli/Run.ts"
import { packageVersion } from "../../src/cli/Version.ts"
import { importSession, importSessionFile } from "../../src/Import.ts"
import type { Message } from "../../src/Message.ts"
import { validate } from "../../src/Validate.ts"
import { DATA_DIR, rawFile } from "../fixtures/Corpus.ts"
import { collect, example, pool, type Run, run, runInProcess, spawnCli } from "./Process.ts"
import { summaryText } from "../../src/Summary.ts"

let dir = ""
let server: Server | undefined
let base = ""
const r: Record<string, Run> = {}
const path = (name: string) => join(dir, name)
const GARBAGE_LINE = 15
const piSession = `${DATA_DIR}sessions/pi__large-session.anthropic.json`
const COMMANDS_READING = ["inspect", "evict", "compact", "validate", "repair", "simulate"] as const

/** An assistant message with 16 tool calls none of which is answered. */
const sixteenUnanswered: ReadonlyArray<Message> = [
  { role: "user", content: "go" },
  {
    role: "assistant",
    content: Array.from({ length: 16 }, (_, i) => ({
      type: "tool_use" as const,
      id: `toolu_${i}`,
      name: "bash",
      input: { command: `echo ${i}` }
    }))
  },
  { role: "user", content: "next" }
]

/** Runs `evict <input> | compact - -o <out>` with a real pipe between two CLI processes. */
const pipeline = (input: string, out: string): Promise<{ evict: Run; compact: Run }> => {
  const first = spawnCli(["evict", input])
  const second = spawnCli(["compact", "-", "-o", out])
  first.stdout!.pipe(second.stdin!)
  const evict = collect(first)
  return Promise.all([evict, collect(second)]).then(([e, c]) => ({ evict: e, compact: c }))
}

/** Starts `compact` against a server that never answers, and sends SIGINT once it is summarizing. */
const interrupted = (out: string): Promise<Run> => {
  const child = spawnCli(["compact", example, "--summarizer", "anthropic", "--out", out], {
    ANTHROPIC_API_KEY: "sk-test",
    ANTHROPIC_BASE_URL: `${base}/hang`
  })
  let sent = false
  return collect(child, (stderr) => {
    if (!sent && stderr.includes("summarizing")) {
      sent = true
      setTimeout(() => child.kill("SIGINT"), 300)
    }
  })
}

const decodeReport = Schema.decodeUnknownSync(Schema.fromJsonString(InspectReport))

/** The pi session as the importer reads it, and its report: each built once, for the tests that read them. */
const piImported = Effect.runSync(Effect.cached(importSessionFile(piSession).pipe(Effect.provide(NodeServices.layer))))
const piReport = Effect.runSync(Effect.cached(Effect.flatMap(piImported, (s) => buildReport(s, { file: "pi" }))))

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "compaction-cli-run-"))
  const lines = readFileSync(rawFile("claude-code__coverage-test-fix.jsonl"), "utf8").split("\n")
  lines.splice(GARBAGE_LINE - 1, 0, "garbage {not json")
  writeFileSync(path("garbage.jsonl"), lines.join("\n"))
  writeFileSync(path("sixteen.json"), JSON.stringify({ messages: sixteenUnanswered }))
  writeFileSync(
    path("with-tools.json"),
    JSON.stringify({
      system: "You are a careful coding agent. ".repeat(50),
      tools: [
        { name: "bash", description: "Run a shell command", input_schema: { type: "object", properties: {} } },
        { name: "read", description: "Read a file", input_schema: { type: "object", properties: {} } }
      ],
      messages: [{ role: "user", content: "hello" }, { role: "assistant", content: [{ type: "text", text: "hi" }] }]
    })
  )
  copyFileSync(example, path("demo.anthropic.json"))
  mkdirSync(path("a-directory"))
  server = createServer((req, res) => {
    req.resume()
    if ((req.url ?? "").startsWith("/hang")) return // never answers
    res.writeHead(500)
    res.end()
  })
  await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve))
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const garbage = path("garbage.jsonl")
  const anthropic = (out: string) => ["compact", example, "--summarizer", "anthropic", "--out", path(out)]
  // real children, only where the process itself is what is checked: the session written to stdout and a text report
  // to a pipe (non-terminal output), a bad environment variable (exit 2), the pre-rendered help answered without
  // loading Effect, --strict's exit 7 (for validate and simulate, this file's only children of those), a real pipe
  // between two CLI processes and Ctrl-C; every command this file covers runs at least once among them
  const children: Record<string, () => Promise<Run>> = {
    // the longest first: a pipe between two processes, then an inspect of what it wrote
    inspectPipedText: async () => {
      const piped = await pipeline(example, path("piped.json"))
      r["pipeEvict"] = piped.evict
      r["pipeCompact"] = piped.compact
      return run(["inspect", path("piped.json")])
    },
    interrupted: () => interrupted(path("interrupted.json")),
    stdoutDash: () => run(["repair", example, "--out", "-"]),
    timeoutSoon: () =>
      run(anthropic("soon.json"), {
        ANTHROPIC_API_KEY: "sk-test",
        ANTHROPIC_BASE_URL: `${base}/never`,
        COMPACTION_SUMMARIZER_TIMEOUT: "soon"
      }),
    validateStrict: () => run(["validate", garbage, "--strict"]),
    simulateStrict: () => run(["simulate", garbage, "--strict"]),
    helpInspect: () => run(["inspect", "--help"])
  }
  // the same command in this process (`runInProcess`): what these check is the command's output, exit code and what
  // it wrote, which each command also shows as a real child above; a child's start-up each saved. In order: a run
  // reads what the one before it wrote
  const inProcess: Record<string, () => Promise<Run>> = {
    evictPrivate: () => runInProcess(["evict", piSession, "--out", path("evicted.json")]),
    evictKeepPrivate: () => runInProcess(["evict", piSession, "--keep-private", "--out", path("evicted-inline.json")]),
    evictedAgain: () =>
      runInProcess([
        "evict",
        path("evicted.json"),
        "--min-savings",
        "1000000000",
        "--keep-private",
        "--out",
        path("evicted-roundtrip.json")
      ]),
    compactPi: () => runInProcess(["compact", piSession, "-o", path("pi-compacted.json")]),
    inspectPiCompacted: () => runInProcess(["inspect", path("pi-compacted.json"), "--json"]),
    inspectPiCompactedText: () => runInProcess(["inspect", path("pi-compacted.json")]),
    retriesNegative: () =>
      runInProcess(anthropic("retries.json"), {
        ANTHROPIC_API_KEY: "sk-test",
        ANTHROPIC_BASE_URL: `${base}/never`,
        COMPACTION_SUMMARIZER_RETRIES: "-1"
      }),
    completions: () => runInProcess(["--completions", "bash"]),
    missingDir: () => runInProcess(["compact", example, "--out", path("missing/dir/x.json")]),
    intoDirectory: () => runInProcess(["compact", example, "--out", path("a-directory")]),
    sixteen: () => runInProcess(["validate", path("sixteen.json")]),
    tokensAbc: () => runInProcess(["compact", example, "--keep-recent-tokens", "abc"]),
    tokensNegative: () => runInProcess(["compact", example, "--keep-recent-tokens", "-5"]),
    recentFraction: () => runInProcess(["evict", example, "--keep-recent", "1.5"]),
    recentNegative: () => runInProcess(["evict", example, "--keep-recent", "-1"]),
    defaultSessionId: () =>
      runInProcess(["compact", path("demo.anthropic.json"), "-o", path("demo-out.json"), "--log", path("log")]),
    inspectTools: () => runInProcess(["inspect", path("with-tools.json"), "--json", "--html", path("tools.html")])
  }
  for (const command of COMMANDS_READING) {
    const out = command === "evict" || command === "compact" || command === "repair"
    inProcess[`${command}Garbage`] = () =>
      runInProcess([command, garbage, ...(out ? ["--out", path(`${command}.json`)] : [])])
    if (children[`${command}Strict`] === undefined) {
      inProcess[`${command}Strict`] = () =>
        runInProcess([command, garbage, "--strict", ...(out ? ["--out", path(`${command}-strict.json`)] : [])])
    }
  }
  // the children run while this process runs its own
  const inOrder = async () => {
    for (const [key, job] of Object.entries(inProcess)) r[key] = await job()
  }
  const [real] = await Promise.all([pool(children, 3), inOrder()])
  Object.assign(r, real)
}, 300_000)

afterAll(() => {
  server?.closeAllConnections?.()
  server?.close()
  if (dir !== "") rmSync(dir, { recursive: true, force: true })
})

const got = (key: string): Run => {
  const res = r[key]
  assert.isDefined(res, key)
  return res!
}

const oneLine = (stderr: string): string => {
  const lines = stderr.trim().split("\n")
  assert.strictEqual(lines.length, 1, `expected one stderr line, got: ${stderr}`)
  return lines[0]!
}

const readJson = (file: string) =>
  JSON.parse(readFileSync(file, "utf8")) as {
    system?: string
    tools?: Array<unknown>
    messages: Array<Record<string, unknown>>
    meta?: { messages: Array<{ index: number } & Record<string, unknown>> }
  }

describe("compaction CLI: input, failures, start-up and the context in view", () => {
  it("every command warns on stderr about a corrupt input line, with the count and its line number", () => {
    for (const command of COMMANDS_READING) {
      const res = got(`${command}Garbage`)
      assert.notStrictEqual(res.code, ExitCode.CorruptInput, `${command}: ${res.stderr}`)
      assert.include([0, ExitCode.Violations], res.code, `${command}: ${res.stderr}`)
      const warning = res.stderr.split("\n").find((l) => l.startsWith("compaction: warning: "))
      assert.isDefined(warning, `${command} printed no warning: ${res.stderr}`)
      assert.match(warning!, new RegExp(`1 corrupt line .*line ${GARBAGE_LINE}\\b.*--strict`), command)
    }
  })

  it("--strict makes a corrupt line an error: exit 7, one line, nothing written", () => {
    for (const command of COMMANDS_READING) {
      const res = got(`${command}Strict`)
      assert.strictEqual(res.code, ExitCode.CorruptInput, `${command}: ${res.stderr}`)
      assert.strictEqual(res.stdout, "", command)
      assert.match(oneLine(res.stderr), new RegExp(`garbage\\.jsonl: 1 corrupt line .*line ${GARBAGE_LINE}\\b`))
      assert.isFalse(existsSync(path(`${command}-strict.json`)), command)
    }
  })

  it.live("written messages hold only role and content; private fields go to meta.messages and read back", () =>
    Effect.gen(function* () {
      assert.strictEqual(got("evictPrivate").code, 0, got("evictPrivate").stderr)
      const input = JSON.parse(readFileSync(piSession, "utf8")) as { messages: Array<Record<string, unknown>> }
      const doc = readJson(path("evicted.json"))
      for (const m of doc.messages) assert.deepStrictEqual(Object.keys(m).sort(), ["content", "role"])
      const expected = input.messages.flatMap((m, index) => {
        const fields = Object.entries(m).filter(([k]) => k !== "role" && k !== "content")
        return fields.length === 0 ? [] : [{ index, ...Object.fromEntries(fields) }]
      })
      assert.isTrue(expected.length > 100)
      assert.deepStrictEqual(doc.meta?.messages, expected)

      // --keep-private keeps them inline, exactly as the input had them
      const inline = readJson(path("evicted-inline.json"))
      assert.isUndefined(inline.meta)
      inline.messages.forEach((m, i) => {
        for (const [k, v] of Object.entries(input.messages[i]!)) if (k.startsWith("_")) assert.deepStrictEqual(m[k], v)
      })
      // the CLI reads the sidecar back: evicting the sidecar file again with --keep-private gives the inline form
      assert.strictEqual(got("evictedAgain").code, 0, got("evictedAgain").stderr)
      assert.deepStrictEqual(readJson(path("evicted-roundtrip.json")).messages, inline.messages)
      // and what the importer takes from private fields survives the round trip
      const session = yield* importSessionFile(path("evicted-roundtrip.json")).pipe(Effect.provide(NodeServices.layer))
      const original = yield* piImported
      assert.deepStrictEqual(session.usage, original.usage)
      assert.deepStrictEqual(session.interrupted, original.interrupted)
    }))

  it("a write error is one line naming the path and what to do, with no success line before it", () => {
    const missing = got("missingDir")
    assert.strictEqual(missing.code, ExitCode.Output)
    assert.strictEqual(missing.stdout, "")
    assert.strictEqual(
      oneLine(missing.stderr),
      `compaction: cannot write ${path("missing/dir/x.json")}: the directory ${
        path("missing/dir")
      } does not exist; create it first, or choose another path`
    )
    const directory = got("intoDirectory")
    assert.strictEqual(directory.code, ExitCode.Output)
    assert.match(
      oneLine(directory.stderr),
      /^compaction: cannot write .*a-directory: it is a directory; give a file path, such as .*a-directory.session\.json$/
    )
  })

  it.live("--out - writes the session to stdout", () =>
    Effect.gen(function* () {
      const res = got("stdoutDash")
      assert.strictEqual(res.code, 0, res.stderr)
      assert.isFalse(existsSync(join(dir, "-")))
      assert.strictEqual((yield* importSession(res.stdout)).messages.length, 400)
    }))

  it("a bad COMPACTION_SUMMARIZER_TIMEOUT names the variable and the expected form, and exits 2", () => {
    const res = got("timeoutSoon")
    assert.strictEqual(res.code, ExitCode.Usage, res.stderr)
    assert.strictEqual(
      oneLine(res.stderr),
      'compaction: COMPACTION_SUMMARIZER_TIMEOUT="soon" is not valid: expected a duration, such as "90 seconds" or ' +
        '"2 minutes"; fix it or unset it to use the default'
    )
    assert.isFalse(existsSync(path("soon.json")))
  })

  it("COMPACTION_SUMMARIZER_RETRIES=-1 is rejected with the variable named, exit 2", () => {
    const res = got("retriesNegative")
    assert.strictEqual(res.code, ExitCode.Usage, res.stderr)
    assert.match(
      oneLine(res.stderr),
      /^compaction: COMPACTION_SUMMARIZER_RETRIES="-1" is not valid: expected a non-negative integer/
    )
  })

  it.live("evict - | compact - works through a real pipe between two CLI processes", () =>
    Effect.gen(function* () {
      const evict = got("pipeEvict")
      const compact = got("pipeCompact")
      assert.strictEqual(evict.code, 0, evict.stderr)
      assert.match(oneLine(evict.stderr), /^compaction: offloaded \d+ tool results/)
      assert.strictEqual(compact.code, 0, compact.stderr)
      assert.match(oneLine(compact.stderr), /^compaction: compacted with the extractive summarizer: 400 → \d+ messages/)
      const session = yield* importSessionFile(path("piped.json")).pipe(Effect.provide(NodeServices.layer))
      assert.isTrue(session.messages.length < 400)
      assert.isDefined(summaryText(session.messages[0]!))
      assert.deepStrictEqual(validate(session.messages), [])
      assert.isString(session.system)
    }))

  it("Ctrl-C says what was left untouched and exits 130", () => {
    const res = got("interrupted")
    // Node exits with 130; Deno ends itself with the signal, which a shell reports as the same 130
    assert.isTrue(res.code === 130 || (res.code === null && res.signal === "SIGINT"), `${res.code} ${res.signal}`)
    const last = res.stderr.trim().split("\n").at(-1)!
    assert.match(last, /^compaction: interrupted; .*session\.json left untouched; nothing was written$/)
    assert.isFalse(existsSync(path("interrupted.json")))
  })

  it("one violation line per distinct problem, with its count", () => {
    const res = got("sixteen")
    assert.strictEqual(res.code, ExitCode.Violations)
    const lines = res.stdout.trim().split("\n")
    assert.match(lines[0]!, /16 violations \(1 distinct\)/)
    assert.strictEqual(lines.length, 2, res.stdout)
    assert.match(lines[1]!, /^MissingToolResult ×16: message 1 block 0: .* \(and 15 more like it in message 1\)$/)
  })

  it("number flag errors are worded one way: --flag value: expected …", () => {
    const line = (key: string, code: number = ExitCode.Usage) => {
      const res = got(key)
      assert.strictEqual(res.code, code, res.stderr)
      return oneLine(res.stderr)
    }
    const help = (command: string) => `; see "compaction ${command} --help"`
    assert.strictEqual(
      line("tokensAbc"),
      `compaction: --keep-recent-tokens abc: expected a positive integer${help("compact")}`
    )
    assert.strictEqual(
      line("tokensNegative"),
      `compaction: --keep-recent-tokens -5: expected a positive integer${help("compact")}`
    )
    assert.strictEqual(
      line("recentFraction"),
      `compaction: --keep-recent 1.5: expected a non-negative integer${help("evict")}`
    )
    assert.strictEqual(
      line("recentNegative"),
      `compaction: --keep-recent -1: expected a non-negative integer${help("evict")}`
    )
  })

  it("the default --log session id drops .anthropic", () => {
    const res = got("defaultSessionId")
    assert.strictEqual(res.code, 0, res.stderr)
    assert.isTrue(existsSync(path("log/demo.jsonl")), res.stderr)
    assert.isFalse(existsSync(path("log/demo.anthropic.jsonl")))
  })

  it.live("help pages are the pre-rendered ones, show no --wizard or --completions, and --completions still works", () =>
    Effect.gen(function* () {
      const pages = yield* renderHelpPages(packageVersion())
      assert.deepStrictEqual(pages, HELP_PAGES, "HelpPages.ts is stale: run node src/cli/WriteHelpPages.ts")
      for (const [key, page] of Object.entries(pages)) {
        assert.notInclude(page.plain, "--wizard", key)
        assert.notInclude(page.plain, "--completions", key)
      }
      assert.include(pages.inspect.plain, "--strict")
      assert.include(pages.evict.plain, "--keep-private")
      assert.strictEqual(got("helpInspect").stdout, `${pages.inspect.plain}\n`)
      assert.strictEqual(got("completions").code, 0, got("completions").stderr)
      assert.include(got("completions").stdout, "compaction")
    }))

  it("inspect shows the system prompt and tools, in text, JSON and HTML", () => {
    const res = got("inspectTools")
    assert.strictEqual(res.code, 0, res.stderr)
    const report = decodeReport(res.stdout)
    assert.strictEqual(report.context.systemTokens, Math.ceil("You are a careful coding agent. ".repeat(50).length / 4))
    assert.strictEqual(report.context.tools, 2)
    assert.isTrue(report.context.toolsTokens > 20)
    const html = readFileSync(path("tools.html"), "utf8")
    assert.include(html, `system prompt<b>${report.context.systemTokens.toLocaleString("en-US")}</b>`)
    assert.include(html, `tools<b>${report.context.toolsTokens}</b>`)
    const text = got("inspectPipedText").stdout
    assert.match(text, /context {3}system prompt [\d,]+ tokens · tools not in this file/)
  })

  it.live("inspect reports provider usage only when it belongs to the view inspected", () =>
    Effect.gen(function* () {
      // the raw session: the last usage describes its messages
      const raw = yield* piImported
      assert.isNotNull(analyze(raw, { file: "raw" }).report.provider)
      // the compacted file keeps the replies' usage in meta.messages, but it no longer describes the view
      assert.strictEqual(got("compactPi").code, 0, got("compactPi").stderr)
      assert.isDefined(readJson(path("pi-compacted.json")).meta?.messages.find((m) => "_usage" in m))
      const res = got("inspectPiCompacted")
      assert.strictEqual(res.code, 0, res.stderr)
      const report = decodeReport(res.stdout)
      assert.isNull(report.provider)
      assert.match(report.providerNote ?? "", /before message 0 was rewritten/)
      const text = got("inspectPiCompactedText").stdout
      assert.notInclude(text, "reported by the provider")
      assert.include(text, "not reporting provider usage")
      // a pi session whose agent compacted: its usage describes the agent's compacted context, not this history
      const compacted = yield* importSessionFile(rawFile("pi__before-compaction.jsonl")).pipe(
        Effect.provide(NodeServices.layer)
      )
      const agent = analyze(compacted, { file: "pi" }).report
      assert.isNull(agent.provider)
      assert.match(agent.providerNote ?? "", /agent's own compacted context/)
    }))

  it.live("the HTML strip draws offloads everywhere, at full colour, with message numbers", () =>
    Effect.gen(function* () {
      const session = yield* piImported
      const analysis = analyze(session, { file: "pi" })
      const html = renderHtml(yield* piReport)
      const blocks = [...html.matchAll(/<div class="msg ([^"]*)" data-index="(\d+)"[^>]*>(.*?)<\/div>/g)]
      assert.strictEqual(blocks.length, session.messages.length)
      const offloadedMessages = new Set(
        analysis.timeline.filter((e) => e.offloadedTokens > 0).map((e) => e.index)
      )
      const drawn = blocks.filter((b) => b[1]!.split(" ").includes("off")).map((b) => Number(b[2]))
      assert.deepStrictEqual(drawn, [...offloadedMessages])
      assert.isTrue(drawn.some((i) => i < analysis.report.cut.cut), "offloads inside the summarized part are drawn")
      assert.notMatch(html, /opacity/)
      const every = numberEvery(session.messages.length)
      const numbered = blocks.filter((b) => b[3] !== "").map((b) => Number(b[2]))
      assert.deepStrictEqual(numbered, blocks.map((b) => Number(b[2])).filter((i) => i % every === 0))
      for (const b of blocks.filter((x) => x[3] !== "")) assert.strictEqual(b[3], `<span class="num">${b[2]}</span>`)
    }))

  it.live("the report's total is its cumulative chart's end: the summaries' cost counts with the request after them", () =>
    Effect.gen(function* () {
      const { data } = yield* piReport
      assert.isAbove(data.chosen.compactions, 0, "the replay compacts, so summaries are priced")
      const chart = data.requests.reduce((sum, r) => sum + r.dollars, 0)
      assert.approximately(chart, data.chosen.dollars, 1e-9)
      const none = data.requests.reduce((sum, r) => sum + r.noneDollars, 0)
      assert.approximately(none, data.none.dollars, 1e-9)
    }))
})
