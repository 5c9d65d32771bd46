#!/usr/bin/env node
/**
 * The `compaction` executable. `--version` and `compaction [command] --help` answer from `Version.ts` and the
 * pre-rendered `HelpPages.ts` without loading Effect; everything else runs the `compaction` command with the Node
 * platform services (which also work under Deno), loaded on demand, and exits with the code `Run.exitWithCode` chose.
 * Node's compile cache is enabled when available, so later runs load the modules faster.
 *
 * @since 0.1.0
 */
import * as NodeModule from "node:module"
import { HELP_PAGES } from "./HelpPages.ts"
import { packageVersion } from "./Version.ts"

const args = process.argv.slice(2)
const isHelp = (arg: string | undefined) => arg === "--help" || arg === "-h"
const colors = () =>
  process.stdout.isTTY === true && (process.env["NO_COLOR"] === undefined || process.env["NO_COLOR"] === "")

/** The page for `[--help]` or `[command, --help]`, when the arguments are exactly that. */
const fastHelp = (): string | undefined => {
  const page = args.length === 1 && isHelp(args[0])
    ? HELP_PAGES[""]
    : args.length === 2 && isHelp(args[1]) && args[0] !== "" && Object.hasOwn(HELP_PAGES, args[0]!)
    ? HELP_PAGES[args[0]!]
    : undefined
  return page === undefined ? undefined : colors() ? page.color : page.plain
}

/**
 * `@effect/platform-node` is an optional peer dependency: when it is not installed, say how to install it (exit 70)
 * instead of a stack trace. Any other failure to load it is rethrown.
 */
const missingPlatform = (error: unknown): never => {
  const code = (error as { code?: unknown } | null)?.code
  if (code !== "ERR_MODULE_NOT_FOUND" || !String(error).includes("@effect/platform-node")) throw error
  process.stderr.write(
    "compaction: the command line needs @effect/platform-node, which is not installed; install it with the CLI: " +
      "npm i -g effect-compaction effect @effect/platform-node\n"
  )
  process.exit(70)
}

const help = fastHelp()
if (args.length === 1 && (args[0] === "--version" || args[0] === "-v")) {
  process.stdout.write(`compaction ${packageVersion()}\n`)
} else if (help !== undefined) {
  process.stdout.write(`${help}\n`)
} else {
  ;(NodeModule as { enableCompileCache?: () => unknown }).enableCompileCache?.()
  const [NodeRuntime, NodeServices, Effect, Layer, Logger, References, { CliOutput, Command }, commands, run] =
    await Promise.all([
      import("@effect/platform-node/NodeRuntime").catch(missingPlatform),
      import("@effect/platform-node/NodeServices").catch(missingPlatform),
      import("effect/Effect"),
      import("effect/Layer"),
      import("effect/Logger"),
      import("effect/References"),
      import("effect/cli"),
      import("./Commands.ts"),
      import("./Run.ts")
    ])
  run.exitWithCode(Command.run(commands.compaction, { version: packageVersion() })).pipe(
    Effect.provide(Layer.mergeAll(
      NodeServices.layer,
      CliOutput.layerPresenter(run.presenter),
      commands.cliConfig,
      // logs never mix with results: stderr, errors only unless --log-level asks for more
      Layer.succeed(Logger.LogToStderr, true),
      Layer.succeed(References.MinimumLogLevel, "Error")
    )),
    NodeRuntime.runMain
  )
}
