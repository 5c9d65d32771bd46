/**
 * The shell of the `compaction` CLI: exit codes, the one-line error, reading the session, writing results, and the
 * top-level runner that maps every failure to its exit code.
 *
 * Results go to stdout (or `--out`), progress and errors to stderr. Every failure the user can cause ends in one line
 * `compaction: <what happened>; <what to try>` and a documented exit code (`ExitCode`).
 *
 * @since 0.1.0
 */
import type { ConversationState } from "../ConversationState.ts"
import * as Cause from "effect/Cause"
import type * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Console from "effect/Console"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Path from "effect/Path"
import type { PlatformError } from "effect/PlatformError"
import * as Predicate from "effect/Predicate"
import * as Runtime from "effect/Runtime"
import type * as SchemaIssue from "effect/SchemaIssue"
import { CliError, CliOutput } from "effect/cli"
import { type ImportError, importSession, importSessionFile, type Session } from "../Import.ts"
import type { Message } from "../Message.ts"
import { convertJson } from "../internal/import/json.ts"
import { parseJsonLine } from "../internal/import/lines.ts"

// ============================================================================
// Exit codes
// ============================================================================

/**
 * The exit codes of `compaction`. Interruption (Ctrl-C) exits with 130, as the Effect runtime does, after one line
 * saying what was left untouched (`interruptedLine`).
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
  /** `--strict`: the input had corrupt lines (without `--strict` they are skipped with a warning). */
  CorruptInput: 7,
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
 * What a number flag expects, in the words the CLI's own range checks use (`usageFailure`), so a value that does not
 * parse and a value out of range read the same way.
 */
const FLAG_EXPECTS: Readonly<Record<string, string>> = {
  "--keep-recent": "a non-negative integer",
  "--min-savings": "a non-negative integer",
  "--system-tokens": "a non-negative integer",
  "--keep-recent-tokens": "a positive integer",
  "--keep-recent-turns": "a positive integer"
}

/** One flag-value problem, worded one way everywhere: `--flag value: expected …`. @category errors */
export const flagValueProblem = (flag: string, value: string, expected: string): string =>
  `${flag} ${value}: expected ${expected}`

/** The see-also hint every usage error ends with. */
const seeHelp = (commandPath: ReadonlyArray<string>): string => `see "${commandPath.join(" ")} --help"`

/** A usage error of a command (exit `Usage`), ending with the pointer to its help. @category errors */
export const usageFailure = (command: string, problem: string): CliFailure =>
  new CliFailure({ code: ExitCode.Usage, message: `${problem}; ${seeHelp(["compaction", command])}` })

/**
 * A replay that failed while the report was built (only a failing summarizer or log can): exit `Internal`.
 * @category errors
 */
export const reportFailure = (e: { readonly message: string }): CliFailure =>
  new CliFailure({ code: ExitCode.Internal, message: `the report's replay failed: ${e.message}` })

const invocationProblem = (error: CliError.CliError): string => {
  if (error._tag === "InvalidValue") {
    const flag = error.option.startsWith("-") ? error.option : `--${error.option}`
    const expected = FLAG_EXPECTS[flag] ??
      (/^Expected: /.test(error.expected)
        ? `one of ${error.expected.replace(/^Expected: /, "").split(" | ").join(", ")}`
        : error.expected.replace(/^Expected /, ""))
    return flagValueProblem(flag, error.value, expected)
  }
  return firstLine(error.message)
}

/**
 * The presenter for `effect/cli` output: help and version on stdout; an invalid invocation as one stderr line
 * `compaction: <error>; see "compaction <command> --help"` (no help dump, so stdout stays clean). A flag value that
 * does not parse reads like the CLI's own range checks: `--keep-recent-tokens abc: expected a positive integer`.
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
        case "InvalidInvocation":
          return status(`${event.errors.map(invocationProblem).join("; ")}; ${seeHelp(event.commandPath)}`)
      }
    })
}

// ============================================================================
// What the run touched (for the Ctrl-C line)
// ============================================================================

const inputsRead: Array<string> = []
const outputsWritten: Array<string> = []

/** Records that `what` (an output file, a log directory) now holds something this run wrote. @category terminal */
export const recordWritten = (what: string): Effect.Effect<void> => Effect.sync(() => void outputsWritten.push(what))

/**
 * The line printed when the run is interrupted (Ctrl-C): inputs are never modified, and it says which outputs were
 * already in place, so the user knows what is left untouched.
 * @category terminal
 */
export const interruptedLine = (): string => {
  const inputs = inputsRead.length === 0 ? "" : `; ${inputsRead.join(", ")} left untouched`
  const outputs = outputsWritten.length === 0
    ? "; nothing was written"
    : `; already written before the interruption: ${outputsWritten.join(", ")}`
  return `interrupted${inputs}${outputs}`
}

// ============================================================================
// Input
// ============================================================================

/** The path that means stdin (for an input) or stdout (for an output). @category io */
export const STDIO_PATH = "-"

/**
 * A session as the CLI read it: the import, the request's `tools` when the document held them, and how to name the
 * input in messages (`stdin` for `-`).
 * @category io
 */
export interface SessionInput {
  readonly name: string
  readonly session: Session
  readonly tools?: ReadonlyArray<unknown>
  /**
   * A session log read as its view: the conversation state it holds (`resumeState`), what the live loop decides from
   * (`inspect` reports its next `prepare`'s eviction with it).
   */
  readonly state?: ConversationState | undefined
}

/** Options of `readSession`. @category io */
export interface ReadOptions {
  /** Fail (exit `CorruptInput`) instead of warning when lines were skipped as corrupt. */
  readonly strict: boolean
}

/** Skip reasons that mean a line was damaged (not a kind of entry the format defines): its content is lost. */
const isCorruptReason = (reason: string): boolean =>
  reason === "invalid-json" || reason === "not-an-object" || reason === "type:untyped" || reason.startsWith("role:")

/** Lines skipped as corrupt, by the importer's count. @category io */
export const corruptLineCount = (session: Session): number =>
  Object.entries(session.skipped.byReason).reduce((n, [reason, count]) => n + (isCorruptReason(reason) ? count : 0), 0)

/**
 * The 1-based number of the first corrupt line of a JSONL text: a non-blank line that is not JSON, holds a value that
 * is not an object, or an object with no `type`. Undefined when there is none.
 * @category io
 */
export const firstCorruptLine = (text: string): number | undefined => {
  const lines = text.split(/\r\n|\r|\n/)
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!
    if (line.trim() === "") continue
    const values = parseJsonLine(line)
    if (
      values === undefined ||
      values.some((v) =>
        !Predicate.isObject(v) || Array.isArray(v) || !Predicate.isString((v as { type?: unknown }).type)
      )
    ) return i + 1
  }
  return undefined
}

const inputFailure = (name: string, what: string) =>
  new CliFailure({ code: ExitCode.Input, message: `${name}: ${what}` })

const readStdin: Effect.Effect<string, CliFailure> = Effect.tryPromise({
  try: async () => {
    const decoder = new TextDecoder()
    let text = ""
    for await (const chunk of process.stdin) text += decoder.decode(chunk as Uint8Array, { stream: true })
    return text + decoder.decode()
  },
  catch: (e) => inputFailure("stdin", `cannot read: ${describeUnknown(e)}`)
})

const importFailure = (name: string) => (e: ImportError | PlatformError): CliFailure =>
  inputFailure(name, e._tag === "ImportError" ? firstLine(e.message) : `cannot read: ${firstLine(e.message)}`)

/**
 * Re-reads a JSON request document for what the importer does not keep: the `tools`, and the private message fields
 * the CLI moved to `meta.messages` (see `sessionDocument`), which are put back on their messages and imported again,
 * so a file the CLI wrote reads back as the session it came from.
 */
const withDocumentExtras = (name: string, session: Session, text: string): Effect.Effect<SessionInput, CliFailure> =>
  Effect.gen(function* () {
    if (session.format !== "anthropic-request") return { name, session }
    const doc = JSON.parse(text) as Record<string, unknown>
    const tools = Array.isArray(doc["tools"]) ? doc["tools"] as ReadonlyArray<unknown> : undefined
    const sidecar = privateSidecar(doc["meta"])
    const restored = sidecar.length === 0 ? session : yield* Effect.fromResult(
      convertJson({ ...doc, messages: restorePrivateFields(doc["messages"] as ReadonlyArray<Message>, sidecar) })
    ).pipe(Effect.mapError(importFailure(name)))
    return tools === undefined ? { name, session: restored } : { name, session: restored, tools }
  })

/**
 * Reads and imports a session: a file, or stdin when `file` is `-`. A missing or unreadable file, and an unknown
 * format, fail with `CliFailure(Input)` and a line naming the file. Lines skipped as corrupt are one warning on stderr
 * (their count and the first line number), or with `strict` a `CliFailure(CorruptInput)`.
 * @category io
 */
export const readSession = (
  file: string,
  options: ReadOptions
): Effect.Effect<SessionInput, CliFailure, FileSystem.FileSystem> =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const name = file === STDIO_PATH ? "stdin" : file
    let text: string | undefined
    let session: Session
    if (file === STDIO_PATH) {
      text = yield* readStdin
      session = yield* importSession(text).pipe(Effect.mapError(importFailure(name)))
    } else {
      const info = yield* fs.stat(file).pipe(
        Effect.mapError((e) =>
          e.reason._tag === "NotFound"
            ? inputFailure(file, "no such file")
            : inputFailure(file, `cannot read: ${firstLine(e.message)}`)
        )
      )
      if (info.type !== "File") return yield* inputFailure(file, "not a file")
      session = yield* importSessionFile(file).pipe(Effect.mapError(importFailure(name)))
    }
    yield* Effect.sync(() => void inputsRead.push(name))
    const readText = text !== undefined
      ? Effect.succeed(text)
      : fs.readFileString(file).pipe(Effect.mapError(importFailure(name)))

    const corrupt = corruptLineCount(session)
    if (corrupt > 0) {
      const first = firstCorruptLine(yield* readText)
      const where = `${corrupt} corrupt line${corrupt === 1 ? "" : "s"} (not JSON, or not a session entry)${
        first === undefined ? "" : `, the first at line ${first}`
      }`
      if (options.strict) {
        return yield* new CliFailure({
          code: ExitCode.CorruptInput,
          message: `${name}: ${where}; fix or remove ${corrupt === 1 ? "it" : "them"}, or drop --strict to skip ${
            corrupt === 1 ? "it" : "them"
          }`
        })
      }
      yield* status(
        `warning: ${name}: skipped ${where}; what ${corrupt === 1 ? "it" : "they"} held is missing ` +
          "from the result (--strict makes this an error)"
      )
    }
    if (session.recoveredLines > 0) {
      yield* status(
        `warning: ${name}: ${session.recoveredLines} line(s) held several JSON objects with no newline ` +
          "between them; each was read"
      )
    }
    return session.format === "anthropic-request"
      ? yield* withDocumentExtras(name, session, yield* readText)
      : { name, session }
  })

// ============================================================================
// Output document
// ============================================================================

/** The only message fields the Messages API accepts. @category io */
export const API_MESSAGE_FIELDS: ReadonlySet<string> = new Set(["role", "content"])

/**
 * The private fields of one message (everything but `role` and `content`, e.g. the importer's `_usage`,
 * `_api_message_id`, `_stop_reason`, `_kind`), and the index of its message in `messages`.
 * @category io
 */
export interface PrivateFields {
  readonly index: number
  readonly [field: string]: unknown
}

/**
 * The JSON a command writes. `messages` hold only `role` and `content`, so the document can be sent to the Messages
 * API as it is; the other fields of a message travel in `meta.messages`, one `{ index, ...fields }` entry per message
 * that had any (`compaction` reads them back onto their messages). With `--keep-private` they stay inline instead.
 * @category io
 */
export interface SessionDocument {
  readonly system?: string
  readonly tools?: ReadonlyArray<unknown>
  readonly messages: ReadonlyArray<Message>
  readonly meta?: { readonly messages: ReadonlyArray<PrivateFields> }
}

/** The `meta.messages` entries of a document (malformed entries are ignored). */
const privateSidecar = (meta: unknown): ReadonlyArray<PrivateFields> => {
  if (!Predicate.isObject(meta) || !("messages" in meta) || !Array.isArray(meta.messages)) return []
  return meta.messages.filter((e): e is PrivateFields =>
    Predicate.isObject(e) && Number.isSafeInteger((e as { index?: unknown }).index)
  )
}

/** Puts the sidecar's fields back on their messages (API fields are never overwritten). @category io */
export const restorePrivateFields = (
  messages: ReadonlyArray<Message>,
  sidecar: ReadonlyArray<PrivateFields>
): ReadonlyArray<Message> => {
  const copy = [...messages]
  for (const { index, ...fields } of sidecar) {
    const message = copy[index]
    if (message === undefined) continue
    const extra = Object.fromEntries(Object.entries(fields).filter(([k]) => !API_MESSAGE_FIELDS.has(k)))
    copy[index] = { ...extra, ...message }
  }
  return copy
}

/**
 * The output document for a session's messages: the input's system prompt and tools, the messages with only the
 * fields the API accepts, and their private fields in `meta.messages` (inline instead with `keepPrivate`).
 * @category io
 */
export const sessionDocument = (
  input: SessionInput,
  messages: ReadonlyArray<Message>,
  options: { readonly keepPrivate: boolean }
): SessionDocument => {
  const sidecar: Array<PrivateFields> = []
  const clean = options.keepPrivate ? messages : messages.map((message, index) => {
    const fields = Object.entries(message).filter(([k]) => !API_MESSAGE_FIELDS.has(k))
    if (fields.length === 0) return message
    sidecar.push({ index, ...Object.fromEntries(fields) })
    return { role: message.role, content: message.content } as Message
  })
  const system = input.session.system
  return {
    ...(system === undefined ? {} : { system }),
    ...(input.tools === undefined ? {} : { tools: input.tools }),
    messages: clean,
    ...(sidecar.length === 0 ? {} : { meta: { messages: sidecar } })
  }
}

// ============================================================================
// Writing
// ============================================================================

const outputFailure = (out: string, what: string) =>
  new CliFailure({ code: ExitCode.Output, message: `cannot write ${out}: ${what}` })

const writeProblem = (out: string, error: PlatformError): CliFailure => {
  switch (error.reason._tag) {
    case "PermissionDenied":
      return outputFailure(out, "permission denied; choose a location you can write to")
    case "NotFound":
      return outputFailure(out, "its directory disappeared while writing; create it and run again")
    default:
      return outputFailure(out, `${firstLine(error.message)}; check the path and the free disk space`)
  }
}

/**
 * Writes text to `out` (through a temporary file and a rename, so a failed write never leaves half a file), or to
 * stdout when `out` is undefined or `-`. A failed write fails with `CliFailure(Output)` and one line naming the path
 * and what to do (the directory is missing, the path is a directory, permission denied…); it is checked before
 * anything is written. The path is recorded for `interruptedLine`.
 * @category io
 */
export const writeText = (
  out: string | undefined,
  text: string
): Effect.Effect<void, CliFailure, FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function* () {
    if (out === undefined || out === STDIO_PATH) {
      yield* Effect.sync(() => process.stdout.write(text))
      return
    }
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const target = yield* fs.stat(out).pipe(Effect.option)
    if (target._tag === "Some" && target.value.type === "Directory") {
      return yield* outputFailure(out, `it is a directory; give a file path, such as ${path.join(out, "session.json")}`)
    }
    const directory = path.dirname(out)
    const parent = yield* fs.stat(directory).pipe(Effect.option)
    if (parent._tag === "None") {
      return yield* outputFailure(
        out,
        `the directory ${directory} does not exist; create it first, or choose another path`
      )
    }
    if (parent.value.type !== "Directory") {
      return yield* outputFailure(out, `${directory} is not a directory; choose another path`)
    }
    const tmp = `${out}.${process.pid}.tmp`
    yield* fs.writeFileString(tmp, text).pipe(
      Effect.andThen(fs.rename(tmp, out)),
      Effect.tapError(() => fs.remove(tmp).pipe(Effect.ignore)),
      Effect.mapError((e) => writeProblem(out, e))
    )
    yield* recordWritten(out)
  })

/** `JSON.stringify(value, null, 2)` plus a newline. @category io */
export const prettyJson = (value: unknown): string => `${JSON.stringify(value, null, 2)}\n`

// ============================================================================
// Configuration errors
// ============================================================================

/** The form each environment variable the CLI reads expects, for the configuration error line. */
const EXPECTED_FORMS: Readonly<Record<string, string>> = {
  COMPACTION_SUMMARIZER_TIMEOUT: 'a duration, such as "90 seconds" or "2 minutes"',
  COMPACTION_SUMMARIZER_RETRIES: "a non-negative integer, such as 4",
  COMPACTION_SUMMARY_MAX_TOKENS: "a positive integer, such as 4096",
  ANTHROPIC_BASE_URL: "a URL, such as https://api.anthropic.com"
}

/**
 * A configuration error as one line naming the environment variable, its value (read from the current
 * `ConfigProvider`, the one the configuration was read from) and the expected form; exit `Usage` (the user set
 * something wrong, as with a bad flag). The effect fails with that `CliFailure`.
 * @category errors
 */
export const configFailure = (error: Config.ConfigError): Effect.Effect<never, CliFailure> => {
  const cause = error.cause
  if (cause._tag !== "SchemaError") {
    return Effect.fail(
      new CliFailure({ code: ExitCode.Usage, message: `cannot read the configuration: ${firstLine(cause.message)}` })
    )
  }
  const path: Array<string> = []
  let issue: SchemaIssue.Issue = cause.issue
  while (issue._tag === "Pointer") {
    path.push(...issue.path.map(String))
    issue = issue.issue
  }
  const variable = path.join("_")
  const expected = EXPECTED_FORMS[variable] ??
    firstLine(cause.message).replace(/^Expected /, "").replace(/\s+at \[.*$/, "")
  const failure = (value: string | undefined) =>
    new CliFailure({
      code: ExitCode.Usage,
      message: `${
        value === undefined ? `${variable} is missing` : `${variable}=${JSON.stringify(value)} is not valid`
      }: expected ${expected}; fix it or unset it to use the default`
    })
  if (variable === "") return Effect.fail(failure(undefined))
  return Effect.flatMap(ConfigProvider.ConfigProvider, (provider) => provider.load(path)).pipe(
    Effect.map((node) => node?.value),
    Effect.orElseSucceed(() => undefined),
    Effect.flatMap((value) => Effect.fail(failure(value)))
  )
}

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
 * an invalid invocation (already reported by `presenter`) exits with `Usage`; an interruption prints `interruptedLine`
 * (the runtime then exits 130); anything else is an internal error.
 * The returned effect fails only with an error that carries the exit code for `NodeRuntime.runMain`.
 * @category running
 */
export const exitWithCode = <R>(program: Effect.Effect<void, unknown, R>): Effect.Effect<void, Exit, R> =>
  program.pipe(
    Effect.onInterrupt(() => status(interruptedLine())),
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
