/**
 * The README's examples run as real programs, on the runtime the suite runs on (Node 22, or Deno), with no API key.
 */
import { assert, describe, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

declare const Deno: { readonly execPath: () => string } | undefined

const root = fileURLToPath(new URL("../", import.meta.url))

const runExample = (file: string) => {
  const env: Record<string, string> = {}
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith("ANTHROPIC_")) env[k] = v
  const major = Number(process.versions.node.split(".")[0])
  const [command, args] = typeof Deno !== "undefined"
    ? [Deno.execPath(), ["run", "-A", "-q", file]]
    : [major >= 22 ? process.execPath : join(root, "node_modules/.bin/node"), [file]]
  return spawnSync(command, args, { cwd: root, env, encoding: "utf8", timeout: 60_000 })
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

  it("the quick start runs offline and compacts the bundled session into a valid view", () => {
    const result = runExample("examples/quickstart.ts")
    assert.strictEqual(result.status, 0, result.stderr)
    assert.match(result.stdout, /estimated tokens: \d+ -> \d+/)
    assert.match(result.stdout, /violations: 0/)
    assert.match(result.stdout, /Compacted: 400 -> \d+ messages, valid: true/)
  })

  it("the Conversation loop runs offline, compacts on /compact and resumes to the live state", () => {
    const result = runExample("examples/conversation.ts")
    assert.strictEqual(result.status, 0, result.stderr)
    assert.match(result.stdout, /request 3: \d+ messages/)
    assert.match(result.stdout, /compact: Compacted/)
    assert.match(result.stdout, /resumed equals live: true/)
  })
})
