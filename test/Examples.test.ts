/**
 * The README's examples run as real programs, on the runtime the suite runs on (Node 22, or Deno), with no API key.
 */
import { assert, describe, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { runToolRunner, TOOL_CALLS } from "./fixtures/ToolRunnerScript.ts"

declare const Deno: { readonly execPath: () => string } | undefined

const root = fileURLToPath(new URL("../", import.meta.url))

/** The command that runs an example file on the suite's runtime. */
const commandFor = (file: string): readonly [string, ReadonlyArray<string>] => {
  const major = Number(process.versions.node.split(".")[0])
  return typeof Deno !== "undefined"
    ? [Deno.execPath(), ["run", "-A", "-q", file]]
    : [major >= 22 ? process.execPath : join(root, "node_modules/.bin/node"), [file]]
}

const runExample = (file: string, extra: ReadonlyArray<string> = []) => {
  const env: Record<string, string> = {}
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith("ANTHROPIC_")) env[k] = v
  const [command, args] = commandFor(file)
  return spawnSync(command, [...args, ...extra], { cwd: root, env, encoding: "utf8", timeout: 180_000 })
}

describe("Examples", () => {
  it("runs on the runtime the suite claims to run on", () => {
    const isDeno = typeof Deno !== "undefined"
    assert.strictEqual(
      isDeno,
      process.env.EXPECT_DENO === "1",
      `EXPECT_DENO=${process.env.EXPECT_DENO}, Deno: ${isDeno}`
    )
  })

  it("the quick start runs the bundled session through a Conversation offline: it compacts, every request valid", () => {
    const result = runExample("examples/quickstart.ts")
    assert.strictEqual(result.status, 0, result.stderr)
    const loop = /(\d+) requests, (\d+) compactions/.exec(result.stdout)
    assert.isNotNull(loop, result.stdout)
    assert.strictEqual(Number(loop![1]), 200, "one request per recorded assistant reply")
    assert.isAtLeast(Number(loop![2]), 1)
    const next = /next request: (\d+) of 400 messages, (\d+) of (\d+) estimated tokens, valid: true/.exec(result.stdout)
    assert.isNotNull(next, result.stdout)
    assert.isBelow(Number(next![1]), 400)
    assert.isBelow(Number(next![2]), Number(next![3]) / 2)
    assert.match(result.stdout, /offloaded [1-9]\d* stale tool results; the policy would cut at message \d+/)
    assert.match(result.stdout, /violations: 0/)
  })

  it("the guide's quick start is examples/quickstart.ts, from its first import on", () => {
    const readme = readFileSync(join(root, "GUIDE.md"), "utf8")
    const section = readme.slice(readme.indexOf("## Library quick start"))
    const block = /```ts\n([\s\S]*?)```/.exec(section)?.[1]
    const example = readFileSync(join(root, "examples/quickstart.ts"), "utf8")
    const code = example.slice(example.indexOf("import ")).replace(`"../src/index.ts"`, `"effect-compaction"`)
    assert.strictEqual(block, code)
  })

  it("the Conversation loop runs offline, compacts on /compact and resumes to the live state", () => {
    const result = runExample("examples/conversation.ts")
    assert.strictEqual(result.status, 0, result.stderr)
    assert.match(result.stdout, /request 3: \d+ messages/)
    assert.match(result.stdout, /compact: Compacted/)
    assert.match(result.stdout, /resumed equals live: true/)
  })

  it("the SDK's tool runner on a thread, runToolsEagerly on, with the Conversation deciding each request", async () => {
    const [command, args] = commandFor("examples/tool-runner.ts")
    const run = await runToolRunner(command, args, root)
    assert.strictEqual(run.status, 0, run.stderr)
    assert.deepStrictEqual(run.rejections, [], "the local server refused nothing")
    assert.deepStrictEqual(run.violations, [], run.violations.join("\n"))
    assert.strictEqual(run.unused, 0, "every scripted reply was asked for, and nothing more")
    const summary = /(\d+) requests, (\d+) compactions, (\d+) tool calls run/.exec(run.stdout)
    assert.isNotNull(summary, run.stdout)
    assert.strictEqual(Number(summary![1]), run.requests.length)
    assert.isAtLeast(Number(summary![2]), 1)
    assert.strictEqual(Number(summary![3]), TOOL_CALLS, "each call ran once: the eager start and the results agree")
    // the runner sent each request on the thread the conversation chose: continue while the view only grew
    const chosen = /threads: ([a-z ]+)/.exec(run.stdout)?.[1]?.split(" ")
    const sent = run.requests.map((r) => (r.body.thread as { readonly type?: string } | undefined)?.type)
    assert.deepStrictEqual(sent, chosen)
    assert.include(sent, "continue")
    assert.strictEqual(sent.at(-1), "create", "the compaction restarted the thread with the whole view")
  }, 180_000)

  it("the guide's tool-runner loop is the loop of examples/tool-runner.ts, verbatim", () => {
    const readme = readFileSync(join(root, "GUIDE.md"), "utf8")
    const block = /```ts\n([\s\S]*?)```/.exec(readme.slice(readme.indexOf("## The SDK's tool runner")))?.[1]
    assert.isDefined(block)
    assert.match(block!, /^for await \(const stream of runner\)/)
    assert.include(readFileSync(join(root, "examples/tool-runner.ts"), "utf8"), block!)
  })

  it("the README is at most 250 lines and its agent loop is the examples', verbatim", () => {
    const readme = readFileSync(join(root, "README.md"), "utf8")
    assert.isAtMost(readme.split("\n").length, 250)
    const section = readme.slice(readme.indexOf("## The agent loop"), readme.indexOf("## What it does"))
    const blocks = [...section.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!)
    assert.strictEqual(blocks.length, 2, "the Promise form, then the Effect form")
    const promise = readFileSync(join(root, "examples/agent-loop-promise.ts"), "utf8")
    assert.strictEqual(
      blocks[0],
      promise.slice(promise.indexOf("import ")).replace(`"../src/index.ts"`, `"effect-compaction"`)
    )
    const effect = readFileSync(join(root, "examples/agent-loop.ts"), "utf8")
    assert.isTrue(effect.endsWith(blocks[1]!), "the Effect block is the end of examples/agent-loop.ts")
    assert.match(blocks[1]!, /^const agent = /)
  })

  it("the demo's replay compacts, so its report shows the main feature", () => {
    const demo = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).scripts.demo as string
    const replay = demo.split(" && ").find((command) => command.includes(" replay "))
    assert.isDefined(replay, demo)
    const args = replay!.replace(/^node src\/cli\/main\.ts /, "").replace(/ --html \S+/, "").split(" ")
    const result = runExample("src/cli/main.ts", args)
    assert.strictEqual(result.status, 0, result.stderr)
    const summary = /(\d+) requests, (\d+) compactions/.exec(result.stdout + result.stderr)
    assert.isNotNull(summary, result.stdout)
    assert.isAtLeast(Number(summary![2]), 1)
  })
})
