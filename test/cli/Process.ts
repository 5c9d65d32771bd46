/**
 * Running the `compaction` CLI as a real child process in tests: Node 22 type stripping, or `deno run` under Deno.
 */
import { spawn } from "node:child_process"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

declare const Deno: { readonly execPath: () => string } | undefined

/** The repository root. */
export const root = fileURLToPath(new URL("../../", import.meta.url))
/** The CLI entry point. */
export const main = join(root, "src/cli/main.ts")
/** The bundled example session (400 messages, an Anthropic request document). */
export const example = join(root, "examples/session.json")

/** The command that runs the CLI: the current Deno, or Node 22+ (the current one, or the npm-installed one). */
export const runner = (): { readonly command: string; readonly args: ReadonlyArray<string> } => {
  if (typeof Deno !== "undefined") return { command: Deno.execPath(), args: ["run", "-A", "-q", main] }
  const major = Number(process.versions.node.split(".")[0])
  return { command: major >= 22 ? process.execPath : join(root, "node_modules/.bin/node"), args: [main] }
}

/** What a finished run printed, and its exit code. */
export interface Run {
  readonly code: number | null
  /** The signal that ended the process, when one did (the shell then reports 128 + its number). */
  readonly signal: NodeJS.Signals | null
  readonly stdout: string
  readonly stderr: string
}

/** The environment of the test process without the API settings, and with colours off. */
export const baseEnv = (): Record<string, string> => {
  const env: Record<string, string> = {}
  for (const [k, v] of Object.entries(process.env)) {
    if (v !== undefined && k !== "ANTHROPIC_API_KEY" && k !== "ANTHROPIC_BASE_URL" && !k.startsWith("COMPACTION_")) {
      env[k] = v
    }
  }
  return { ...env, NO_COLOR: "1" }
}

/** Spawns the CLI with `args`. */
export const spawnCli = (args: ReadonlyArray<string>, env: Record<string, string> = {}) => {
  const { args: pre, command } = runner()
  return spawn(command, [...pre, ...args], { cwd: root, env: { ...baseEnv(), ...env } })
}

/** Collects a child's output until it exits. */
export const collect = (
  child: ReturnType<typeof spawn>,
  onStderr?: (soFar: string) => void
): Promise<Run> =>
  new Promise((resolve, reject) => {
    let stdout = ""
    let stderr = ""
    child.stdout?.setEncoding("utf8").on("data", (d: string) => (stdout += d))
    child.stderr?.setEncoding("utf8").on("data", (d: string) => {
      stderr += d
      onStderr?.(stderr)
    })
    child.on("error", reject)
    child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr }))
  })

/** Runs the CLI to completion. */
export const run = (args: ReadonlyArray<string>, env: Record<string, string> = {}): Promise<Run> =>
  collect(spawnCli(args, env))

/** Runs the jobs, at most `limit` at a time. */
export const pool = async <K extends string>(
  jobs: Readonly<Record<K, () => Promise<Run>>>,
  limit: number
): Promise<Record<K, Run>> => {
  const entries = Object.entries(jobs) as Array<[K, () => Promise<Run>]>
  const results = {} as Record<K, Run>
  let next = 0
  const worker = async () => {
    while (next < entries.length) {
      const [key, job] = entries[next++]!
      results[key] = await job()
    }
  }
  await Promise.all(Array.from({ length: limit }, worker))
  return results
}
