/**
 * The Promise door (`PromiseConversation`), as code without Effect uses it: the README's agent loop in both forms
 * against the local Messages API server (the same requests, byte for byte, every one accepted), a resume from the
 * JSONL log, the log's lock held from `open` to `close` across processes, and the typed rejections.
 */
import { assert, describe, it } from "@effect/vitest"
import { type ChildProcess, spawn } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import process from "node:process"
import { fileURLToPath } from "node:url"
import { PromiseConversation } from "../src/index.ts"
import type { SessionLogError } from "../src/SessionLog.ts"
import { AGENT_REPLIES, type AgentLoopRun, runAgentLoop } from "./fixtures/AgentLoopScript.ts"

declare const Deno: { readonly execPath: () => string } | undefined
const isDeno = typeof Deno !== "undefined"
const root = fileURLToPath(new URL("../", import.meta.url))

/**
 * The command that runs a script with its session directory on the suite's runtime; under Deno with the permissions the
 * README documents and no more: env, the network of the local server, and the session directory.
 */
const commandFor = (
  file: string,
  directory: string,
  ...args: ReadonlyArray<string>
): readonly [string, ReadonlyArray<string>] => {
  const major = Number(process.versions.node.split(".")[0])
  return isDeno
    ? [Deno!.execPath(), [
      "run",
      "--no-prompt",
      "--allow-env",
      "--allow-net=127.0.0.1",
      `--allow-read=${directory}`,
      `--allow-write=${directory}`,
      "-q",
      file,
      directory,
      ...args
    ]]
    : [major >= 22 ? process.execPath : join(root, "node_modules/.bin/node"), [file, directory, ...args]]
}

const tempDirectory = (): string => mkdtempSync(join(tmpdir(), "promise-conversation-"))

/** The example run twice on one session directory: stopped after `firstSteps` requests, then resumed to the end. */
const runInTwo = async (example: string, firstSteps: number) => {
  const directory = tempDirectory()
  try {
    const [command, args] = commandFor(example, directory)
    const first = await runAgentLoop(command, args, root, AGENT_REPLIES.slice(0, firstSteps), firstSteps)
    const second = await runAgentLoop(command, args, root, AGENT_REPLIES.slice(firstSteps))
    return [first, second] as const
  } finally {
    rmSync(directory, { recursive: true, force: true })
  }
}

const assertClean = (run: AgentLoopRun, replies: number) => {
  assert.strictEqual(run.status, 0, run.stderr)
  assert.deepStrictEqual(run.rejections, [], "the local server refused nothing")
  assert.deepStrictEqual(run.violations, [], run.violations.join("\n"))
  assert.strictEqual(run.requests.length, replies, "one request per scripted reply")
}

const counts = (run: AgentLoopRun) => {
  const found = /(\d+) requests, (\d+) compactions; view (\d+) messages, epoch (\d+)/.exec(run.stdout)
  assert.isNotNull(found, run.stdout)
  return { requests: Number(found![1]), compactions: Number(found![2]) }
}

const failureOf = async (promise: Promise<unknown>): Promise<unknown> => {
  try {
    await promise
  } catch (error) {
    return error
  }
  return assert.fail("expected a rejection")
}

const spawnHolder = (directory: string, sessionId: string, count: number): ChildProcess => {
  const [command, args] = commandFor(join(root, "test/fixtures/promise-holder.ts"), directory, sessionId, String(count))
  return spawn(command, [...args], { stdio: ["ignore", "pipe", "inherit"] })
}

const readyLine = (child: ChildProcess): Promise<string> =>
  new Promise((resolve, reject) => {
    let buffer = ""
    child.stdout!.on("data", (chunk: Buffer) => {
      buffer += chunk.toString()
      const line = buffer.split("\n").find((l) => l.startsWith("ready"))
      if (line !== undefined) resolve(line)
    })
    child.once("exit", (code) => reject(new Error(`the holder exited early with ${code}: ${buffer}`)))
  })

const killed = (child: ChildProcess): Promise<void> =>
  new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve()
    child.once("exit", () => resolve())
    child.kill("SIGKILL")
  })

describe("PromiseConversation", () => {
  it("the README's agent loop, Effect and Promise forms: the same requests, all accepted, resumed from the log", async () => {
    const effect = await runInTwo("examples/agent-loop.ts", 3)
    const promise = await runInTwo("examples/agent-loop-promise.ts", 3)
    for (const [first, second] of [effect, promise]) {
      assertClean(first, 3)
      assertClean(second, AGENT_REPLIES.length - 3)
      // the resumed run's first request carries what the first run recorded: its last call and that call's result,
      // and the task and the steps before them as they were or, when that request compacts, in the summary
      const resumed = second.requests[0]!.body["messages"] as ReadonlyArray<{ readonly role: string }>
      const sent = JSON.stringify(resumed)
      assert.include(
        sent,
        `"tool_use_id":"toolu_03"`,
        "the resumed request starts from the log, not from the task alone"
      )
      assert.isTrue(resumed.length >= 7 || sent.includes("[Summary of the earlier conversation]"), sent.slice(0, 500))
      assert.isAtLeast(counts(first).compactions + counts(second).compactions, 1, "the small policy compacts")
    }
    // the model's recall of its first read of the parser is answered from the log: the read's first two lines
    const last = effect[1].requests.at(-1)!.body["messages"] as ReadonlyArray<{ readonly content: unknown }>
    const recalled = JSON.stringify(last.at(-1)!.content)
    assert.include(recalled, "toolu_07")
    assert.include(recalled, "[recall ref=")
    assert.include(recalled, 'export const parse = (input: string) => input.split(\\" \\")')
    const bodies = (runs: typeof effect) => runs.flatMap((run) => run.requests.map((r) => JSON.stringify(r.body)))
    assert.deepStrictEqual(bodies(promise), bodies(effect), "the Promise door sends what the Effect service sends")
    assert.strictEqual(promise[0].stdout + promise[1].stdout, effect[0].stdout + effect[1].stdout)
  })

  it("holds the log's lock from open to close: another process, or a second open, is refused with Locked", async () => {
    const directory = tempDirectory()
    const holder = spawnHolder(directory, "shared", 3)
    try {
      const ready = await readyLine(holder)
      const refused = await failureOf(
        PromiseConversation.open({ log: { type: "jsonl", directory, sessionId: "shared" } })
      )
      assert.strictEqual((refused as SessionLogError)._tag, "SessionLogError")
      assert.strictEqual((refused as SessionLogError).reason, "Locked")
      assert.strictEqual((refused as SessionLogError).pid, Number(ready.split(" ")[1]))
      await killed(holder)
      // the holder died: its lock is stale, and its three appends are all in the log, nothing interleaved
      const conversation = await PromiseConversation.open({ log: { type: "jsonl", directory, sessionId: "shared" } })
      try {
        assert.deepStrictEqual((await conversation.state()).view.map((m) => m.content), [
          "holder 0",
          "holder 1",
          "holder 2"
        ])
        const twice = await failureOf(
          PromiseConversation.open({ log: { type: "jsonl", directory, sessionId: "shared" } })
        )
        assert.strictEqual((twice as SessionLogError).reason, "Locked", "a second open in this process is refused too")
      } finally {
        await conversation.close()
      }
      // closed: the lock is released, and the next open resumes the same state
      await using reopened = await PromiseConversation.open({ log: { type: "jsonl", directory, sessionId: "shared" } })
      assert.strictEqual((await reopened.state()).view.length, 3)
    } finally {
      await killed(holder)
      rmSync(directory, { recursive: true, force: true })
    }
  })

  it("a closed conversation refuses every step with ConversationClosedError; close is idempotent", async () => {
    const conversation = await PromiseConversation.open()
    await conversation.append({ role: "user", content: "hello" })
    await conversation.close()
    await conversation.close()
    assert.isTrue(conversation.closed())
    for (
      const [step, attempt] of [
        ["state", () => conversation.state()],
        ["append", () => conversation.append({ role: "user", content: "again" })],
        ["prepare", () => conversation.prepare()],
        ["compact", () => conversation.compact()]
      ] as const
    ) {
      const error = await failureOf(attempt())
      assert.instanceOf(error, PromiseConversation.ConversationClosedError)
      assert.strictEqual((error as PromiseConversation.ConversationClosedError).step, step)
      assert.match((error as Error).message, /the conversation is closed/)
    }
  })

  it("a damaged log is refused at open with the typed error, and the file is left as it was", async () => {
    const directory = tempDirectory()
    try {
      const file = join(directory, "broken.jsonl")
      writeFileSync(file, '{"not":"a session log"}\n{"still":"not"}\n')
      const error = await failureOf(
        PromiseConversation.open({ log: { type: "jsonl", directory, sessionId: "broken" } })
      )
      assert.strictEqual((error as SessionLogError)._tag, "SessionLogError")
      assert.strictEqual((error as SessionLogError).reason, "Corrupt")
    } finally {
      rmSync(directory, { recursive: true, force: true })
    }
  })
})
