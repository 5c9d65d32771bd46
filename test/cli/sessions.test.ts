/**
 * The CLI over stored sessions, as real child processes on the real filesystem and PostgreSQL (the server at
 * DATABASE_URL when set, else the embedded PGlite; a schema of its own per run; unreachable fails, never skips): `compact --log` going on with an existing session,
 * `inspect` of a JSONL log and of `--store URL --session-id S`, `sessions`, the NotFound line, and the README's
 * "Many workers" commands run in a fresh copy of the repository. Each command runs once as a real child (its exit
 * code and output as the shell sees them); the other runs of it go through the same command in this process
 * (`runInProcess`), which saves a child's start-up each.
 */
import { assert, describe, it } from "@effect/vitest"
import { execFileSync, spawnSync } from "node:child_process"
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll } from "vitest"
import { execute, primary } from "../fixtures/Pg.ts"
import { CompactionPolicy } from "../../src/Policy.ts"
import { PromiseConversation } from "../../src/index.ts"
import { runInProcess } from "./Process.ts"

declare const Deno: { readonly execPath: () => string } | undefined

const root = fileURLToPath(new URL("../../", import.meta.url))
const main = join(root, "src/cli/main.ts")
const work = mkdtempSync(join(tmpdir(), "sessions-test-"))
const schema = `cli_sessions_${process.pid}_${Math.random().toString(36).slice(2, 8)}`
const databaseUrl = primary.url
const sqlOn = (sql: string) => execute(databaseUrl, sql)
/** The database URL with this run's schema as the search path (libpq's `options`). */
const storeUrl = `${databaseUrl}${databaseUrl.includes("?") ? "&" : "?"}options=-c%20search_path%3D${schema}`

beforeAll(async () => {
  try {
    await sqlOn(`CREATE SCHEMA ${schema}`)
  } catch (e) {
    throw new Error(`${primary.name} is unreachable at ${databaseUrl}: ${String(e)}`)
  }
})
afterAll(async () => {
  rmSync(work, { recursive: true, force: true })
  await sqlOn(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
})

/** Node 22+ for the CLI and the examples: this one, or the npm-installed one. */
const nodeBin = (): string => {
  const major = Number(process.versions.node.split(".")[0])
  return typeof Deno === "undefined" && major >= 22 ? process.execPath : join(root, "node_modules/.bin/node")
}

const cli = (args: ReadonlyArray<string>) => {
  const [command, pre] = typeof Deno !== "undefined"
    ? [Deno.execPath(), ["run", "-A", "-q", main]]
    : [nodeBin(), [main]]
  const env: Record<string, string> = {}
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith("ANTHROPIC_")) env[k] = v
  return spawnSync(command, [...pre, ...args], { cwd: root, env, encoding: "utf8", timeout: 180_000 })
}

/** The CLI run in this process, with the child's result shape (`status`, `stdout`, `stderr`). */
const inProcess = async (args: ReadonlyArray<string>) => {
  const r = await runInProcess(args)
  return { status: r.code, stdout: r.stdout, stderr: r.stderr }
}

const example = JSON.parse(readFileSync(join(root, "examples/session.json"), "utf8")) as {
  readonly messages: ReadonlyArray<unknown>
}
const sessionFile = (name: string, messages: ReadonlyArray<unknown>): string => {
  const file = join(work, name)
  writeFileSync(file, JSON.stringify({ messages }))
  return file
}
const lines = (text: string) => text.split("\n").filter((l) => l.length > 0)

/** A JSONL session log written by `Conversation.layerLogged` (through the Promise door): calls, results, a compaction. */
const writeConversationLog = async (directory: string, sessionId: string): Promise<string> => {
  const conversation = await PromiseConversation.open({
    log: { type: "jsonl", directory, sessionId },
    policy: CompactionPolicy.makeUnsafe({ keepRecentTokens: 500, keepRecentTurns: 1, compactAtTokens: 2_000 }),
    minFreedTokens: 200
  })
  try {
    await conversation.append({ role: "user", content: "Fix the parser in src/parser.ts" })
    for (let k = 0; k < 6; k++) {
      if (k === 3) await conversation.append({ role: "user", content: "Read them both again" })
      const path = k % 2 === 0 ? "src/parser.ts" : "src/lexer.ts"
      await conversation.recordReply({
        role: "assistant",
        content: [{ type: "tool_use", id: `toolu_${k}`, name: "read", input: { path } }]
      }, { input_tokens: 1_000 * (k + 1), output_tokens: 10 })
      await conversation.append({
        role: "user",
        content: [{ type: "tool_result", tool_use_id: `toolu_${k}`, content: `line ${k}\n`.repeat(400) }]
      })
    }
    await conversation.recordReply({ role: "assistant", content: "The parser is fixed." })
    const { outcome } = await conversation.compact()
    assert.strictEqual(outcome._tag, "Compacted", JSON.stringify(outcome))
    await conversation.append({ role: "user", content: "Now explain the fix" })
  } finally {
    await conversation.close()
  }
  return join(directory, `${sessionId}.jsonl`)
}

describe("compact --log goes on with an existing session", () => {
  it("adds the new messages when the stored messages or the stored view start the input; else exits 5", async () => {
    const logs = join(work, "logs")
    const growArgs = (input: string, messages: ReadonlyArray<unknown>, output: string) => [
      "compact",
      sessionFile(input, messages),
      "-o",
      join(work, output),
      "--log",
      logs,
      "--session-id",
      "grow"
    ]
    /** `compact` of `messages` (written to `input`) into `output`, logged as session "grow" under `logs`. */
    const compactGrow = (input: string, messages: ReadonlyArray<unknown>, output: string) =>
      inProcess(growArgs(input, messages, output))
    // the first and the refused run as real children, the others in this process
    const first = cli(growArgs("first.json", example.messages.slice(0, 300), "a.json"))
    assert.strictEqual(first.status, 0, first.stderr)
    assert.include(first.stderr, "added 300 new messages to session grow")
    // the agent's full history, grown: its first 300 messages are the stored ones
    const grown = await compactGrow("grown.json", example.messages, "b.json")
    assert.strictEqual(grown.status, 0, grown.stderr)
    assert.include(grown.stderr, "added 100 new messages to session grow")
    // the compacted output and two new messages: the stored view starts it
    const compacted = JSON.parse(readFileSync(join(work, "b.json"), "utf8")).messages as Array<unknown>
    const next = [...compacted, { role: "user", content: "and now?" }, { role: "assistant", content: "done" }]
    const more = await compactGrow("more.json", next, "c.json")
    assert.strictEqual(more.status, 0, more.stderr)
    assert.include(more.stderr, "added 2 new messages to session grow")
    const stored = await inProcess(["inspect", join(logs, "grow.jsonl"), "--json"])
    assert.strictEqual(stored.status, 0, stored.stderr)
    assert.match(
      stored.stderr,
      /grow\.jsonl: session log of \d+ entries \(402 messages, \d+ compactions, 0 evictions\)/
    )
    // each compaction's removal record, with the references recall answers
    assert.match(
      stored.stderr,
      /compaction [0-9a-f-]+: removed [1-9]\d* messages \([^)]*user \d+[^)]*\), \d+ tool results.*, ~\d+ tokens; recall refs: \S+/
    )
    // another conversation: exit 5, one line, nothing written
    const before = readFileSync(join(logs, "grow.jsonl"), "utf8")
    const other = cli(growArgs("other.json", [{ role: "user", content: "hello" }], "d.json"))
    assert.strictEqual(other.status, 5, other.stderr)
    assert.deepStrictEqual(lines(other.stderr), [
      `compaction: --log ${logs}: session "grow" holds another conversation (neither its view of ${
        JSON.parse(readFileSync(join(work, "c.json"), "utf8")).messages.length
      } messages nor its 402 stored messages start the input); pass another --session-id or another directory`
    ])
    assert.strictEqual(readFileSync(join(logs, "grow.jsonl"), "utf8"), before)
  })
})

describe("inspect and sessions over stores", () => {
  it("lists a directory's sessions and inspects a JSONL log's view; a missing directory or session is one line", async () => {
    const logs = join(work, "listed")
    for (const id of ["beta", "alpha"]) {
      const r = await inProcess([
        "compact",
        sessionFile(`${id}.json`, example.messages.slice(0, 120)),
        "-o",
        join(work, `${id}.out.json`),
        "--log",
        logs,
        "--session-id",
        id
      ])
      assert.strictEqual(r.status, 0, r.stderr)
    }
    const listed = cli(["sessions", logs])
    assert.strictEqual(listed.status, 0, listed.stderr)
    assert.strictEqual(listed.stdout, "alpha\nbeta\n")
    assert.deepStrictEqual(JSON.parse((await inProcess(["sessions", logs, "--json"])).stdout), ["alpha", "beta"])
    const view = JSON.parse(readFileSync(join(work, "alpha.out.json"), "utf8")).messages as Array<unknown>
    const inspected = await inProcess(["inspect", join(logs, "alpha.jsonl"), "--json"])
    assert.strictEqual(inspected.status, 0, inspected.stderr)
    assert.strictEqual(JSON.parse(inspected.stdout).messages, view.length)
    const missing = await inProcess(["sessions", join(work, "nowhere")])
    assert.strictEqual(missing.status, 3)
    assert.deepStrictEqual(lines(missing.stderr), [`compaction: ${join(work, "nowhere")}: no such directory`])
    const neither = await inProcess(["sessions"])
    assert.strictEqual(neither.status, 2)
    assert.match(neither.stderr, /give a directory of session logs, or --store URL/)
  })

  it("PostgreSQL: sessions --store lists, inspect --store reads the view, an unknown session is a NotFound line", async () => {
    const writer = spawnSync(nodeBin(), [join(root, "examples/many-workers.ts"), "append", "solo", "7"], {
      cwd: root,
      env: { ...process.env, DATABASE_URL: storeUrl, SESSION_ID: "pg-one" },
      encoding: "utf8",
      timeout: 180_000
    })
    assert.strictEqual(writer.status, 0, writer.stderr)
    const listed = await inProcess(["sessions", "--store", storeUrl])
    assert.strictEqual(listed.status, 0, listed.stderr)
    assert.strictEqual(listed.stdout, "pg-one\n")
    const inspected = cli(["inspect", "--store", storeUrl, "--session-id", "pg-one", "--json"])
    assert.strictEqual(inspected.status, 0, inspected.stderr)
    assert.strictEqual(JSON.parse(inspected.stdout).messages, 7)
    assert.include(inspected.stderr, "session log of 7 entries (7 messages, 0 compactions, 0 evictions)")
    const unknown = await inProcess(["inspect", "--store", storeUrl, "--session-id", "nope"])
    assert.strictEqual(unknown.status, 3)
    assert.deepStrictEqual(lines(unknown.stderr), [
      `compaction: no session "nope" in --store ${storeUrl}; "compaction sessions --store ${storeUrl}" lists the ` +
      "stored sessions"
    ])
    const noId = await inProcess(["inspect", "--store", storeUrl])
    assert.strictEqual(noId.status, 2)
    assert.match(noId.stderr, /--store needs --session-id/)
  })

  it("PostgreSQL without the store's tables: one line that says so and how they are made", async () => {
    const empty = `${schema}_empty`
    await sqlOn(`CREATE SCHEMA ${empty}`)
    try {
      const url = storeUrl.replace(`search_path%3D${schema}`, `search_path%3D${empty}`)
      const listed = await inProcess(["sessions", "--store", url])
      assert.strictEqual(listed.status, 3)
      const inspected = await inProcess(["inspect", "--store", url, "--session-id", "any"])
      assert.strictEqual(inspected.status, 3)
      for (const r of [listed, inspected]) {
        assert.lengthOf(lines(r.stderr), 1, r.stderr)
        assert.match(r.stderr, /the store's tables are not in this database or schema \(relation "compaction_\w+"/)
        assert.include(r.stderr, "SessionStoreSql.layerMigrations")
      }
      assert.include(listed.stderr, "as a deploy step (from a checkout: DATABASE_URL='")
      assert.include(listed.stderr, "node examples/many-workers.ts migrate)")
    } finally {
      await sqlOn(`DROP SCHEMA ${empty} CASCADE`)
    }
  })

  it("a password in --store is never printed", async () => {
    const url = databaseUrl.replace("://", "://postgres:s3cret@").replace("postgres@", "")
    const r = await inProcess([
      "inspect",
      "--store",
      `${url}${url.includes("?") ? "&" : "?"}options=-c%20search_path%3D${schema}`,
      "--session-id",
      "nope"
    ])
    assert.strictEqual(r.status, 3, r.stderr)
    assert.notInclude(r.stderr, "s3cret")
    assert.include(r.stderr, "postgres:***@")
  })
})

describe("GUIDE: Many workers", () => {
  it("its commands, in a fresh copy of the repository, end in one shared session that inspect reads", () => {
    const readme = readFileSync(join(root, "GUIDE.md"), "utf8")
    const section = readme.slice(
      readme.indexOf("## Many workers"),
      readme.indexOf("\n## ", readme.indexOf("## Many workers") + 3)
    )
    const block = /```sh\n([\s\S]*?)```/.exec(section)
    assert.isNotNull(block, "the Many workers section has a sh block")
    const commands = lines(block![1]!).map((l) => l.replace(/\s+#.*$/, ""))
    assert.strictEqual(commands.length, 4)
    assert.strictEqual(commands[0], "npm ci")
    assert.strictEqual(
      commands[1],
      "npx node examples/many-workers.ts migrate",
      "the migration is a deploy step of its own"
    )
    // a fresh clone: the tracked files only; `npm ci` stands in as the installed node_modules
    const clone = join(work, "clone")
    mkdirSync(clone)
    const tracked = execFileSync("git", ["ls-files", "-co", "--exclude-standard"], { cwd: root, encoding: "utf8" })
    for (const file of lines(tracked)) {
      if (file === "node_modules") continue
      mkdirSync(dirname(join(clone, file)), { recursive: true })
      cpSync(join(root, file), join(clone, file))
    }
    symlinkSync(join(root, "node_modules"), join(clone, "node_modules"))
    const env = {
      ...process.env,
      DATABASE_URL: storeUrl,
      PATH: `${dirname(nodeBin())}:${join(clone, "node_modules/.bin")}:${process.env["PATH"]}`
    }
    const outputs = commands.slice(1).map((command) => {
      const r = spawnSync("sh", ["-c", command], { cwd: clone, env, encoding: "utf8", timeout: 180_000 })
      assert.strictEqual(r.status, 0, `${command}\n${r.stderr}`)
      return r
    })
    const report = outputs.at(-1)!
    assert.match(report.stderr, /session shared in --store .*: session log of 60 entries \(60 messages/, report.stderr)
    assert.match(report.stdout, /messages\s+60/)
  })
})

describe("the CLI over a conversation's own log", () => {
  it("every file command reads a log Conversation.layerLogged wrote: its view, or its history for the replays", async () => {
    const directory = join(work, "conversation-logs")
    mkdirSync(directory, { recursive: true })
    const file = await writeConversationLog(directory, "agent")
    const out = join(work, "conversation-out")
    mkdirSync(out, { recursive: true })
    const commands: ReadonlyArray<readonly [ReadonlyArray<string>, "view" | "history"]> = [
      [["inspect", file], "view"],
      [["validate", file], "view"],
      [["evict", file], "view"],
      [["compact", file, "--out", join(out, "compacted.json")], "view"],
      [["repair", file], "view"],
      [["simulate", file], "history"],
      [["replay", file], "history"],
      [["retention", file], "history"]
    ]
    for (const [args, reading] of commands) {
      const run = await inProcess(args)
      assert.strictEqual(run.status, 0, `${args.join(" ")}: ${run.stderr}`)
      assert.notMatch(run.stderr, /not a known session format/, args.join(" "))
      const said =
        /session log of (\d+) entries \((\d+) messages, (\d+) compactions, \d+ evictions\); read as its (view|history) \((\d+) messages\)/
          .exec(run.stderr)
      assert.isNotNull(said, `${args.join(" ")}: ${run.stderr}`)
      assert.strictEqual(said![3], "1", "the log holds the compaction")
      assert.strictEqual(said![4], reading, args.join(" "))
      // the history is every message appended (16); the view is the summary, the kept tail and the follow-up
      if (reading === "history") assert.strictEqual(Number(said![5]), 16)
      else assert.isBelow(Number(said![5]), 16)
    }
    const inspected = await inProcess(["inspect", file])
    assert.match(inspected.stdout, /\(session-log\)/, "inspect names the format it read")
  })
})
