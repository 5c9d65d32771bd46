/**
 * The shell of the `compaction` CLI: exit codes, the one-line error, reading the session, writing results, and the
 * top-level runner that maps every failure to its exit code.
 *
 * Results go to stdout (or `--out`), progress and errors to stderr. Every failure the user can cause ends in one line
 * `compaction: <what happened>; <what to try>` and a documented exit code (`ExitCode`).
 *
 * @since 0.1.0
 */
import * as Console from "effect/Console"
import * as Cause from "effect/Cause"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Predicate from "effect/Predicate"
import * as Runtime from "effect/Runtime"
import { CliError, CliOutput } from "effect/cli"
import { importSessionFile, type Session } from "../Import.ts"
import type { Message } from "../Message.ts"

// ============================================================================
// Exit codes
// ============================================================================

/**
 * The exit codes of `compaction`. Interruption (Ctrl-C) exits with 130, as the Effect runtime does.
 * @category constants
 */
export const ExitCode = {
  /** Success. */
  Ok: 0,
  /** `validate` found violations. */
  Violations: 1,
  /** Usage error: unknown command or flag, missing argument, a flag value out of range. */
  Usage: 2,
  /** Input error: the file is missing or unreadable, or not a known session format. */
  Input: 3,
  /** The summarizer failed: no API key, or the model failed (after retries for a retryable error). */
  Summarizer: 4,
  /** Persisting to `--log DIR` failed. */
  Persist: 5,
  /** The output file (`--out`, `--html`) could not be written. */
  Output: 6,
  /** An unexpected internal error (a bug: please report it). */
  Internal: 70
} as const

/** @category models */
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode]

/**
 * A failure of a command: `message` is printed as `compaction: <message>` on stderr, and the process exits with
 * `code`. An empty message prints nothing (the command already reported, e.g. `validate`'s violations).
 * @category errors
 */
export class CliFailure extends Data.TaggedError("CliFailure")<{
  readonly code: ExitCode
  readonly message: string
}> {}

/** The error the runner ends with: it carries the exit code and is never logged again by the runtime. */
class Exit extends Data.TaggedError("Exit")<{ readonly code: number }> {
  override get [Runtime.errorExitCode](): number {
    return this.code
  }
  override get [Runtime.errorReported](): boolean {
    return false
  }
}

const firstLine = (text: string): string => text.split("\n").find((l) => l.trim().length > 0)?.trim() ?? text

// ============================================================================
// Terminal
// ============================================================================

/** True when stdout is a terminal and `NO_COLOR` is unset (or empty): only then is output coloured. @category terminal */
export const useColor = (): boolean =>
  process.stdout.isTTY === true && (process.env["NO_COLOR"] === undefined || process.env["NO_COLOR"] === "")

/** Writes one status line to stderr. @category terminal */
export const status = (line: string): Effect.Effect<void> => Console.error(`compaction: ${line}`)

/**
 * A progress callback for streamed summaries: on a terminal it rewrites one stderr line (at most every 100 ms);
 * elsewhere it prints nothing, so logs stay clean. `done` ends the line.
 * @category terminal
 */
export const progressLine = (
  label: string
): { readonly update: (chars: number) => void; readonly done: () => void } => {
  const tty = process.stderr.isTTY === true
  let last = 0
  let shown = false
  return {
    update: (chars) => {
      if (!tty) return
      const now = Date.now()
      if (now - last < 100) return
      last = now
      shown = true
      process.stderr.write(`\rcompaction: ${label}… ${chars.toLocaleString("en-US")} characters\u001b[K`)
    },
    done: () => {
      if (shown) process.stderr.write("\r\u001b[K")
    }
  }
}

/**
 * The presenter for `effect/cli` output: help and version on stdout; an invalid invocation as one stderr line
 * `compaction: <error>; see "compaction <command> --help"` (no help dump, so stdout stays clean).
 * @category terminal
 */
export const presenter: CliOutput.Presenter = {
  present: (event) =>
    Effect.suspend(() => {
      switch (event._tag) {
        case "Help":
          return Console.log(CliOutput.defaultFormatter({ colors: useColor() }).formatHelpDoc(event.helpDoc))
        case "Version":
          return Console.log(`${event.name} ${event.version}`)
        case "InvalidInvocation": {
          const what = event.errors.map((e) => firstLine(e.message)).join("; ")
          return status(`${what}; see "${event.commandPath.join(" ")} --help"`)
        }
      }
    })
}

// ============================================================================
// Input and output
// ============================================================================

/**
 * Reads and imports a session file. A missing or unreadable file, and an unknown format, fail with
 * `CliFailure(Input)` and a line naming the file.
 * @category io
 */
export const readSession = (file: string): Effect.Effect<Session, CliFailure, FileSystem.FileSystem> =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const info = yield* fs.stat(file).pipe(
      Effect.mapError((e) =>
        new CliFailure({
          code: ExitCode.Input,
          message: e.reason._tag === "NotFound"
            ? `${file}: no such file`
            : `cannot read ${file}: ${firstLine(e.message)}`
        })
      )
    )
    if (info.type !== "File") {
      return yield* new CliFailure({ code: ExitCode.Input, message: `${file}: not a file` })
    }
    return yield* importSessionFile(file).pipe(
      Effect.mapError((e) =>
        new CliFailure({
          code: ExitCode.Input,
          message: e._tag === "ImportError"
            ? `${file}: ${firstLine(e.message)}`
            : `cannot read ${file}: ${firstLine(e.message)}`
        })
      )
    )
  })

/** The JSON a command writes: `{ system?, messages }`, which `compaction inspect` imports again. @category io */
export interface SessionOutput {
  readonly system?: string
  readonly messages: ReadonlyArray<Message>
}

/** The output document for a session's messages, keeping its system prompt. @category io */
export const sessionOutput = (session: Session, messages: ReadonlyArray<Message>): SessionOutput =>
  session.system === undefined ? { messages } : { system: session.system, messages }

/**
 * Writes text to `out` (through a temporary file and a rename, so a failed write never leaves half a file), or to
 * stdout when `out` is undefined. A failed write fails with `CliFailure(Output)`.
 * @category io
 */
export const writeText = (
  out: string | undefined,
  text: string
): Effect.Effect<void, CliFailure, FileSystem.FileSystem> =>
  Effect.gen(function* () {
    if (out === undefined) {
      yield* Effect.sync(() => process.stdout.write(text))
      return
    }
    const fs = yield* FileSystem.FileSystem
    const tmp = `${out}.${process.pid}.tmp`
    yield* fs.writeFileString(tmp, text).pipe(
      Effect.andThen(fs.rename(tmp, out)),
      Effect.tapError(() => fs.remove(tmp).pipe(Effect.ignore)),
      Effect.mapError((e) =>
        new CliFailure({ code: ExitCode.Output, message: `cannot write ${out}: ${firstLine(e.message)}` })
      )
    )
  })

/** `JSON.stringify(value, null, 2)` plus a newline. @category io */
export const prettyJson = (value: unknown): string => `${JSON.stringify(value, null, 2)}\n`

// ============================================================================
// Runner
// ============================================================================

/** The first line of an error's `message`, or the value as a string. @category errors */
export const describeUnknown = (error: unknown): string =>
  Predicate.hasProperty(error, "message") && Predicate.isString(error.message)
    ? firstLine(error.message)
    : String(error)

/**
 * Runs the CLI program and turns its outcome into an exit code: `CliFailure` prints its line and exits with its code;
 * an invalid invocation (already reported by `presenter`) exits with `Usage`; anything else is an internal error.
 * The returned effect fails only with an error that carries the exit code for `NodeRuntime.runMain`.
 * @category running
 */
export const exitWithCode = <R>(program: Effect.Effect<void, unknown, R>): Effect.Effect<void, Exit, R> =>
  program.pipe(
    Effect.catchCause((cause): Effect.Effect<void, Exit> => {
      if (Cause.hasInterruptsOnly(cause)) return Effect.interrupt
      const error = Cause.squash(cause)
      if (error instanceof CliFailure) {
        return (error.message.length > 0 ? status(error.message) : Effect.void).pipe(
          Effect.andThen(Effect.fail(new Exit({ code: error.code })))
        )
      }
      if (CliError.isCliError(error)) {
        const usage = !(error._tag === "ShowHelp" && error.errors.length === 0)
        return usage ? Effect.fail(new Exit({ code: ExitCode.Usage })) : Effect.void
      }
      return status(`internal error: ${describeUnknown(error)}; please report this with the command you ran`).pipe(
        Effect.andThen(Effect.fail(new Exit({ code: ExitCode.Internal })))
      )
    })
  )
