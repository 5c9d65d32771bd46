#!/usr/bin/env node
/**
 * The `compaction` executable: runs the `compaction` command with the Node platform services (which also work under
 * Deno), and exits with the code `Run.exitWithCode` chose.
 *
 * @since 0.1.0
 */
import { readFileSync } from "node:fs"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as NodeServices from "@effect/platform-node/NodeServices"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as References from "effect/References"
import { CliOutput, Command } from "effect/cli"
import { compaction } from "./Commands.ts"
import { exitWithCode, presenter } from "./Run.ts"

/** The package version, read from package.json (two levels up from both src/cli and dist/cli). */
const version = (): string => {
  try {
    const pkg: unknown = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"))
    return typeof pkg === "object" && pkg !== null && "version" in pkg && typeof pkg.version === "string"
      ? pkg.version
      : "unknown"
  } catch {
    return "unknown"
  }
}

exitWithCode(Command.run(compaction, { version: version() })).pipe(
  Effect.provide(Layer.mergeAll(
    NodeServices.layer,
    CliOutput.layerPresenter(presenter),
    // logs never mix with results: stderr, errors only unless --log-level asks for more
    Layer.succeed(Logger.LogToStderr, true),
    Layer.succeed(References.MinimumLogLevel, "Error")
  )),
  NodeRuntime.runMain
)
