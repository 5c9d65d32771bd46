/**
 * Deno permissions, checked with real `deno run` child processes (test/fixtures/DenoPermissions.ts): the extractive
 * summarizer needs none; `layerAuto` without a key needs only `--allow-env=ANTHROPIC_API_KEY`; with a key it needs
 * exactly `ANTHROPIC_ENV_VARIABLES` (each one of them, left out in turn: half under Node, the other half under Deno;
 * and no bare `--allow-env`); the `compaction` CLI needs only `--allow-read`, `--allow-write` of its outputs,
 * `--allow-env` of those names and `--allow-net` of the API, never `-A`.
 */
import { assert, describe, it } from "@effect/vitest"
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { ANTHROPIC_ENV_VARIABLES } from "../src/AnthropicSummarizer.ts"

/** 0 under Node, 1 under Deno: the half of the names the "each of them" test leaves out in this runtime. */
const RUNTIME_PARITY = "Deno" in globalThis ? 1 : 0

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const deno = path.join(root, "node_modules", ".bin", "deno")

/** What the runtime itself needs to start (never gated by `--allow-env`). */
const baseEnv = Object.fromEntries(
  ["PATH", "HOME", "DENO_DIR", "TMPDIR"].flatMap((name) => {
    const value = process.env[name]
    return value === undefined ? [] : [[name, value]]
  })
)

/** A key, and a base URL where nothing listens, so the Anthropic summarizer fails at once and falls back. */
const keyEnv = {
  ANTHROPIC_API_KEY: "sk-test",
  ANTHROPIC_BASE_URL: "http://127.0.0.1:9",
  COMPACTION_SUMMARIZER_RETRIES: "0"
}

const run = (mode: "auto" | "extractive", permissions: ReadonlyArray<string>, env: Record<string, string> = {}) => {
  const child = spawnSync(
    deno,
    ["run", "--no-prompt", "--quiet", ...permissions, "test/fixtures/DenoPermissions.ts", mode],
    { cwd: root, encoding: "utf8", env: { ...baseEnv, ...env } }
  )
  assert.strictEqual(child.status, 0, child.stderr)
  return JSON.parse(child.stdout.trim().split("\n").at(-1)!) as {
    readonly name?: string
    readonly summarizer?: string
    readonly fellBackFrom?: string | null
    readonly failure?: string
  }
}

describe("Deno permissions", () => {
  it("the extractive summarizer needs no permission at all", () => {
    assert.deepStrictEqual(run("extractive", []), { name: "extractive", summarizer: "extractive", fellBackFrom: null })
  }, 180_000)

  it("layerAuto without a key needs only --allow-env=ANTHROPIC_API_KEY, and names it when that is missing", () => {
    assert.deepStrictEqual(run("auto", ["--allow-env=ANTHROPIC_API_KEY"]), {
      name: "extractive",
      summarizer: "extractive",
      fellBackFrom: null
    })
    assert.include(run("auto", []).failure, "--allow-env=ANTHROPIC_API_KEY")
  }, 180_000)

  it("layerAuto with a key runs the Anthropic summarizer with exactly ANTHROPIC_ENV_VARIABLES", () => {
    const net = "--allow-net=127.0.0.1:9"
    const summary = run("auto", [`--allow-env=${ANTHROPIC_ENV_VARIABLES.join(",")}`, net], keyEnv)
    assert.deepStrictEqual(summary, { name: "anthropic", summarizer: "extractive", fellBackFrom: "Connection" })
    // each name left out in turn: every other name, the others under the other runtime (a CI run, Node then Deno,
    // leaves out each of them)
    for (const name of ANTHROPIC_ENV_VARIABLES.filter((_, i) => i % 2 === RUNTIME_PARITY)) {
      const fewer = ANTHROPIC_ENV_VARIABLES.filter((other) => other !== name).join(",")
      const failure = run("auto", [`--allow-env=${fewer}`, net], keyEnv).failure
      assert.include(failure, `"${name}"`, `without ${name}`)
    }
  }, 180_000)

  it(
    "the CLI: inspect needs --allow-read; compact with the Anthropic summarizer adds its output, the names, the API",
    () => {
      const cli = (permissions: ReadonlyArray<string>, args: ReadonlyArray<string>, env: Record<string, string> = {}) =>
        spawnSync(deno, ["run", "--no-prompt", "--quiet", ...permissions, "src/cli/main.ts", ...args], {
          cwd: root,
          encoding: "utf8",
          env: { ...baseEnv, ...env }
        })
      const inspected = cli(["--allow-read"], ["inspect", "examples/session.json", "--json"])
      assert.strictEqual(inspected.status, 0, inspected.stderr)
      assert.strictEqual(JSON.parse(inspected.stdout).messages, 400)
      const out = fs.mkdtempSync(path.join(os.tmpdir(), "deno-cli-"))
      try {
        const args = ["compact", "examples/session.json", "--summarizer", "anthropic", "--fallback", "extractive"]
        const write = `--allow-write=${out}`
        const env = `--allow-env=${ANTHROPIC_ENV_VARIABLES.join(",")}`
        const net = "--allow-net=127.0.0.1:9"
        const compacted = cli(["--allow-read", write, env, net], [...args, "--out", path.join(out, "c.json")], keyEnv)
        assert.strictEqual(compacted.status, 0, compacted.stderr)
        assert.include(compacted.stderr, "compacted with the extractive summarizer instead (--fallback)")
        // the fallback's result is the extractive summarizer's own: the same compaction by the CLI run directly
        const direct = cli(
          ["--allow-read", write],
          ["compact", "examples/session.json", "--summarizer", "extractive", "--out", path.join(out, "d.json")]
        )
        assert.strictEqual(direct.status, 0, direct.stderr)
        const messages = (file: string) => JSON.parse(fs.readFileSync(path.join(out, file), "utf8")).messages.length
        assert.isBelow(messages("c.json"), 400, "it compacted")
        assert.strictEqual(messages("c.json"), messages("d.json"))
        // each permission is needed, and its absence is one line that says what failed
        const without = (missing: string) =>
          cli(
            ["--allow-read", ...[write, env, net].filter((p) => p !== missing)],
            [...args, "--out", path.join(out, "d.json")],
            keyEnv
          )
        const noWrite = without(write)
        assert.strictEqual(noWrite.status, 6, noWrite.stderr)
        assert.include(noWrite.stderr, `cannot write ${path.join(out, "d.json")}`)
        const noEnv = without(env)
        assert.strictEqual(noEnv.status, 2, noEnv.stderr)
        assert.include(noEnv.stderr, "--allow-env=ANTHROPIC_API_KEY")
        const noNet = without(net)
        assert.strictEqual(noNet.status, 0, noNet.stderr)
        assert.include(noNet.stderr, "The anthropic summarizer failed: Could not reach the Messages API")
      } finally {
        fs.rmSync(out, { recursive: true, force: true })
      }
    },
    180_000
  )

  it("the guide lists every variable of ANTHROPIC_ENV_VARIABLES", () => {
    const readme = fs.readFileSync(path.join(root, "GUIDE.md"), "utf8")
    for (const name of ANTHROPIC_ENV_VARIABLES) assert.include(readme, `\`${name}\``, name)
  })
})
