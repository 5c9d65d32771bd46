/**
 * `examples/recall.ts` runs as a real program against the local Messages API server: the SDK's tool runner gives the
 * model `recall` beside `bash`, the conversation compacts the long test run away, and the model's recalls (a line
 * range of that output by its reference, then a search) come back with the failure line, exactly. Every request
 * passes the independent checker of API-RULES.md, and the server refused nothing.
 */
import { assert, describe, it } from "@effect/vitest"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { runToolRunner } from "./fixtures/ToolRunnerScript.ts"

declare const Deno: { readonly execPath: () => string } | undefined

const root = fileURLToPath(new URL("../", import.meta.url))

/** The command that runs the example on the suite's runtime (Node 22, or Deno). */
const command = (): readonly [string, ReadonlyArray<string>] => {
  const major = Number(process.versions.node.split(".")[0])
  return typeof Deno !== "undefined"
    ? [Deno.execPath(), ["run", "-A", "-q", "examples/recall.ts"]]
    : [major >= 22 ? process.execPath : join(root, "node_modules/.bin/node"), ["examples/recall.ts"]]
}

const FAILURE = "FAIL src/parser.test.ts:42 expected 3 lines, got 4"

const call = (id: string, name: string, input: Record<string, unknown>) => [{ type: "tool_use", id, name, input }]

/**
 * The model's side: two long commands and an answer; after the follow-up (the conversation compacts the first turn
 * away), a third command, a recall of the test run's lines around the failure, a search, and the answer.
 */
const REPLIES = [
  call("toolu_1", "bash", { command: "npm test" }),
  call("toolu_2", "bash", { command: "cat src/parser.ts" }),
  [{ type: "text", text: "One parser test fails." }],
  call("toolu_3", "bash", { command: "git log" }),
  call("toolu_4", "recall", { ref: "toolu_1", lines: "210-220" }),
  call("toolu_5", "recall", { query: "^FAIL", regex: true }),
  [{ type: "text", text: "The parser test fails at src/parser.test.ts:42: it gets 4 lines, not 3." }]
]

type Block = { readonly type: string; readonly tool_use_id?: string; readonly content?: unknown }

/** The tool_result blocks of a request's messages. */
const resultsOf = (body: Record<string, unknown>): ReadonlyArray<Block> =>
  (body.messages as ReadonlyArray<{ readonly content: unknown }>).flatMap((m) =>
    Array.isArray(m.content) ? (m.content as ReadonlyArray<Block>).filter((b) => b.type === "tool_result") : []
  )

const textOf = (content: unknown): string =>
  typeof content === "string"
    ? content
    : Array.isArray(content)
    ? content.map((b) => (b as { text?: string }).text ?? "").join("\n")
    : ""

describe("examples/recall.ts", () => {
  it("the model recalls a compacted output through the SDK's tool runner; every request valid", async () => {
    const [runtime, args] = command()
    const run = await runToolRunner(runtime, args, root, process.env, REPLIES)
    assert.strictEqual(run.status, 0, run.stderr)
    assert.deepStrictEqual(run.rejections, [], "the local server refused nothing")
    assert.deepStrictEqual(run.violations, [], run.violations.join("\n"))
    assert.strictEqual(run.unused, 0, "every scripted reply was asked for, and nothing more")
    const counts = /(\d+) compactions, (\d+) offloaded outputs, 2 recall answers/.exec(run.stdout)
    assert.isNotNull(counts, run.stdout)
    assert.isAtLeast(Number(counts![1]) + Number(counts![2]), 1, "the conversation removed something")
    assert.match(run.stdout, /recall found the failure: true/)
    // when the model asked for it, the test run's output was no longer in the request as it was
    const asking = run.requests[4]!.body
    assert.notInclude(JSON.stringify(asking), FAILURE.replace(/"/g, '\\"'))
    // the next requests carry the recall answers: the line range with the failure, then the search hit with its ref
    const byRef = resultsOf(run.requests[5]!.body).find((b) => b.tool_use_id === "toolu_4")
    assert.isDefined(byRef)
    const lines = textOf(byRef!.content)
    assert.include(lines, `PASS test 209\nPASS test 210\n`)
    assert.include(lines, `\n${FAILURE}\n`)
    assert.match(lines, /^\[recall ref="toolu_1" kind=tool_result tool="bash" lines=210-220 of 400 page 1 of 1\]/)
    const search = resultsOf(run.requests[6]!.body).find((b) => b.tool_use_id === "toolu_5")
    assert.isDefined(search)
    assert.include(textOf(search!.content), `ref="toolu_1"`)
    assert.include(textOf(search!.content), FAILURE)
  }, 120_000)
})
