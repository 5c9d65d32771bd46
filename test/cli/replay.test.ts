/**
 * `compaction replay`, run as a real child process (Node 22, or `deno run` under Deno): the JSON summary, the
 * request files, the log, and a resumed replay whose request files equal an uninterrupted one's byte for byte (on the
 * first 150 messages of a pi session with thinking, which still compact, evict and offload).
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { spawnSync } from "node:child_process"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll } from "vitest"
import { replaySession, retentionRowsOf } from "../../src/cli/Replay.ts"
import { chosenPolicy, replayPolicyOptions, simulateOptionsFor } from "../../src/cli/Report.ts"
import { DEFAULT_KEEP_RECENT, FIXED_MIN_SAVINGS } from "../../src/Evict.ts"
import { importSession } from "../../src/Import.ts"
import { CompactionPolicy, defaultPolicy } from "../../src/Policy.ts"
import { checkRequest, formatApiViolations } from "../fixtures/ApiRules.ts"
import { DATA_DIR, sessionPrefixFile } from "../fixtures/Corpus.ts"
import { example } from "./Process.ts"

declare const Deno: { readonly execPath: () => string } | undefined

const root = fileURLToPath(new URL("../../", import.meta.url))
const main = join(root, "src/cli/main.ts")
const session = `${DATA_DIR}sessions/pi__session-2025-12-17_thinking.anthropic.json`
const work = mkdtempSync(join(tmpdir(), "replay-test-"))
afterAll(() => rmSync(work, { recursive: true, force: true }))

const cli = (args: ReadonlyArray<string>) => {
  const major = Number(process.versions.node.split(".")[0])
  const [command, pre] = typeof Deno !== "undefined"
    ? [Deno.execPath(), ["run", "-A", "-q", main]]
    : [major >= 22 ? process.execPath : join(root, "node_modules/.bin/node"), [main]]
  const env: Record<string, string> = {}
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith("ANTHROPIC_")) env[k] = v
  return spawnSync(command, [...pre, ...args], { cwd: root, env, encoding: "utf8", timeout: 180_000 })
}

/**
 * The session's first 150 messages (to the end of that turn): at a 60,000-token window they still compact, evict and
 * offload (74 requests, a quarter of the bytes of the whole session), so two CLI replays and their byte comparison
 * stay cheap.
 */
const shortSession = (): string => sessionPrefixFile(session, 150, join(work, "short.json"))

const requestFiles = (dir: string): Array<string> => readdirSync(dir).filter((f) => f.startsWith("request-")).sort()

describe("compaction replay", () => {
  it("fails loudly when the corpus is missing", () => {
    assert.isTrue(existsSync(session), `the corpus session ${session} is missing (see test/fixtures/Corpus.ts)`)
  })

  it("writes every request, persists, and a replay resumed every 7 requests writes the same bytes (first 150 messages)", () => {
    const session = shortSession()
    const policy = ["--context-window", "60000"]
    const plain = join(work, "plain")
    const resumed = join(work, "resumed")
    const logs = join(work, "logs")
    const first = cli(["replay", session, "--json", "--out", plain, ...policy])
    assert.strictEqual(first.status, 0, first.stderr)
    const summary = JSON.parse(first.stdout)
    assert.strictEqual(summary.invalidRequests, 0)
    assert.isAbove(summary.compactions, 0)
    assert.isAbove(summary.evictions, 0)
    const files = requestFiles(plain).filter((f) => !f.endsWith(".usage.json"))
    assert.strictEqual(files.length, summary.requests)
    assert.strictEqual(files[0], "request-0001.json")
    assert.strictEqual(requestFiles(plain).length, 2 * summary.requests, "a usage file beside every request")
    for (const file of files) {
      const request = JSON.parse(readFileSync(join(plain, file), "utf8"))
      assert.isArray(request.messages)
      const violations = checkRequest(request)
      assert.strictEqual(violations.length, 0, `${file}: ${formatApiViolations(violations)}`)
    }

    const second = cli([
      "replay",
      session,
      "--json",
      "--out",
      resumed,
      "--log",
      logs,
      "--resume-every",
      "7",
      ...policy
    ])
    assert.strictEqual(second.status, 0, second.stderr)
    const again = JSON.parse(second.stdout)
    assert.strictEqual(again.resumes, Math.ceil(summary.requests / 7) - 1)
    assert.deepStrictEqual({ ...again, resumes: 0 }, { ...summary, resumes: 0 })
    assert.deepStrictEqual(requestFiles(resumed), requestFiles(plain))
    for (const file of requestFiles(plain)) {
      if (readFileSync(join(resumed, file), "utf8") !== readFileSync(join(plain, file), "utf8")) {
        assert.fail(`${file} differs between the resumed and the uninterrupted replay`)
      }
    }
    assert.isTrue(existsSync(join(logs, "replay.jsonl")))
    // each boundary carries the conversation's checkpoint, as `Conversation.layerLogged` stores it
    const boundaries = readFileSync(join(logs, "replay.jsonl"), "utf8").split("\n").filter((l) => l !== "")
      .map((l) => JSON.parse(l)).filter((e) => e.type === "compaction")
    assert.strictEqual(boundaries.length, summary.compactions)
    boundaries.forEach((b, i) => assert.strictEqual(b.meta?.conversation?.checkpoint?.epoch, i + 1))
    const reuse = cli(["replay", session, "--log", logs])
    assert.strictEqual(reuse.status, 5, reuse.stderr)
    assert.match(
      reuse.stderr,
      /^compaction: --log .*: session "replay" already holds \d+ entries, and a replay records a new/
    )
  })

  it("without --min-savings it replays with the library's default (rent-or-buy), not the fixed 2,000", () => {
    // the example without its thinking: replies that hold thinking keep a conversation append-only, and then both
    // rules offload only at its compactions (issue 39), where they agree
    const document = JSON.parse(readFileSync(example, "utf8"))
    const file = join(work, "example-without-thinking.json")
    writeFileSync(
      file,
      JSON.stringify({
        ...document,
        messages: document.messages.map((m: { role: string; content: unknown }) =>
          m.role === "assistant" && Array.isArray(m.content)
            ? { ...m, content: m.content.filter((b: { type: string }) => b.type !== "thinking") }
            : m
        )
      })
    )
    const replayJson = (args: ReadonlyArray<string>) => {
      const result = cli(["replay", file, "--json", ...args])
      assert.strictEqual(result.status, 0, result.stderr)
      return JSON.parse(result.stdout)
    }
    const session = Effect.runSync(importSession(readFileSync(file, "utf8")))
    const policy = CompactionPolicy.makeUnsafe(replayPolicyOptions({
      keepRecentTokens: defaultPolicy.keepRecentTokens,
      keepRecentTurns: defaultPolicy.keepRecentTurns,
      contextWindow: defaultPolicy.contextWindow
    }))
    const library = (minSavings: number | undefined) => {
      const r = Effect.runSync(
        replaySession(session, chosenPolicy({ keepRecent: DEFAULT_KEEP_RECENT, minSavings, policy }), {
          simulate: { ...simulateOptionsFor(session, undefined), compaction: policy }
        })
      )
      return { file, ...r.summary, requestTokens: r.tokens, retention: retentionRowsOf(r.report) }
    }
    const byDefault = replayJson([])
    const fixed = replayJson(["--min-savings", String(FIXED_MIN_SAVINGS)])
    assert.deepStrictEqual(byDefault, library(undefined))
    assert.deepStrictEqual(fixed, library(FIXED_MIN_SAVINGS))
    // on this session the two rules evict at different requests, so the test tells them apart
    assert.notStrictEqual(byDefault.evictions, fixed.evictions)
  }, 180_000)

  it(
    "--compact-at-tokens alone replays under the policy the library makes for that trigger (kept tail sized from it)",
    () => {
      const result = cli(["replay", example, "--compact-at-tokens", "20000", "--json"])
      assert.strictEqual(result.status, 0, result.stderr)
      const session = Effect.runSync(importSession(readFileSync(example, "utf8")))
      // what a library user gets from the trigger alone: the kept tail sized from it, not the default trigger's 15,000
      const policy = CompactionPolicy.makeUnsafe({ compactAtTokens: 20_000 })
      assert.isBelow(policy.keepRecentTokens, defaultPolicy.keepRecentTokens)
      const r = Effect.runSync(
        replaySession(session, chosenPolicy({ keepRecent: DEFAULT_KEEP_RECENT, policy }), {
          simulate: { ...simulateOptionsFor(session, undefined), compaction: policy }
        })
      )
      const replayed = JSON.parse(result.stdout)
      assert.isAbove(replayed.compactions, 0)
      assert.deepStrictEqual(replayed, {
        file: example,
        ...r.summary,
        requestTokens: r.tokens,
        retention: retentionRowsOf(r.report)
      })
    },
    180_000
  )

  it("flags that make no valid policy together are a usage error naming the policy's problem", () => {
    const result = cli([
      "replay",
      "examples/session.json",
      "--compact-at-tokens",
      "20000",
      "--keep-recent-tokens",
      "19000"
    ])
    assert.strictEqual(result.status, 2, result.stderr)
    assert.match(
      result.stderr,
      /^compaction: these policy flags make no valid policy: Invalid compaction policy: \w+ = /
    )
  })

  it("rejects a bad --resume-every with the usage exit code", () => {
    const result = cli(["replay", session, "--resume-every", "0"])
    assert.strictEqual(result.status, 2, result.stderr)
    assert.strictEqual(
      result.stderr,
      'compaction: --resume-every 0: expected a positive integer; see "compaction replay --help"\n'
    )
  })
})
