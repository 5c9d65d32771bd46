/**
 * Running the `compaction` CLI as a real child process in tests: Node 22 type stripping, or `deno run` under Deno.
 */
import type * as EffectConsole from "effect/Console"
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

/**
 * Runs the CLI inside this process, as `main.ts` does (the same command, presenter, CLI config and stderr logging;
 * the environment of `baseEnv` plus `env` as its configuration, `process.env` untouched), capturing what it prints and the exit code
 * `Run.exitWithCode` chose. For tests about what a command does, not about the process: it saves a child's start-up
 * (about a second each). Runs one at a time (it redirects `process.stdout.write` while it runs).
 */
export const runInProcess = async (args: ReadonlyArray<string>, env: Record<string, string> = {}): Promise<Run> => {
  const [{ Console, ConfigProvider, Effect, Exit, Layer, Logger, References }, { CliOutput, Command }, NodeServices] =
    await Promise.all([import("effect"), import("effect/cli"), import("@effect/platform-node/NodeServices")])
  const [commands, cliRun] = await Promise.all([import("../../src/cli/Commands.ts"), import("../../src/cli/Run.ts")])
  let stdout = ""
  let stderr = ""
  const line = (...parts: ReadonlyArray<unknown>) => `${parts.map(String).join(" ")}\n`
  const console: EffectConsole.Console = {
    ...globalThis.console,
    log: (...parts: ReadonlyArray<unknown>) => void (stdout += line(...parts)),
    info: (...parts: ReadonlyArray<unknown>) => void (stdout += line(...parts)),
    error: (...parts: ReadonlyArray<unknown>) => void (stderr += line(...parts)),
    warn: (...parts: ReadonlyArray<unknown>) => void (stderr += line(...parts))
  }
  const program = cliRun.exitWithCode(Command.runWith(commands.compaction, { version: "test" })(args)).pipe(
    Effect.provide(Layer.mergeAll(
      NodeServices.layer,
      CliOutput.layerPresenter(cliRun.presenter),
      commands.cliConfig,
      ConfigProvider.layer(ConfigProvider.fromEnv({ env: { ...baseEnv(), ...env } })),
      Layer.succeed(Console.Console, console),
      Layer.succeed(Logger.LogToStderr, true),
      Layer.succeed(References.MinimumLogLevel, "Error")
    ))
  )
  const write = process.stdout.write
  process.stdout.write = ((chunk: string | Uint8Array) => {
    stdout += typeof chunk === "string" ? chunk : new TextDecoder().decode(chunk)
    return true
  }) as typeof process.stdout.write
  try {
    const exit = await Effect.runPromiseExit(program)
    if (Exit.isSuccess(exit)) return { code: 0, signal: null, stdout, stderr }
    const failure = exit.cause.reasons.find((r) => r._tag === "Fail") as { readonly error?: unknown } | undefined
    const code = failure?.error as { readonly _tag?: unknown; readonly code?: unknown } | undefined
    if (code?._tag === "Exit" && typeof code.code === "number") return { code: code.code, signal: null, stdout, stderr }
    throw new Error(`the CLI ended without an exit code: ${String(exit.cause)}`)
  } finally {
    process.stdout.write = write
  }
}
