/**
 * The `compaction` commands over stored sessions, loaded by `Commands.ts` only when one runs: `replay` (a recorded
 * session through `Conversation`), `sessions` (the ids a store holds) and the session-log inputs of `inspect` (a JSONL
 * log file `DIR/S.jsonl`, or `--store URL --session-id S` for PostgreSQL). Every store error ends in one line: a
 * missing session is its own line (`NotFound`, exit 3), damage names its line, and a failed write exits 5.
 *
 * @since 0.1.0
 */
import { resumeState } from "../internal/conversation/resume.ts"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import type * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Path from "effect/Path"
import * as Result from "effect/Result"
import type { Message } from "../Message.ts"
import { CompactionPolicy } from "../Policy.ts"
import type { Loaded } from "../SessionEntry.ts"
import { readSession as readStored, type SessionLogError } from "../SessionLog.ts"
import { SessionStore } from "../SessionStore.ts"
import { layerSessionLog, readJsonl, SessionStoreJsonl } from "../SessionStoreJsonl.ts"
import { SessionStoreSql } from "../SessionStoreSql.ts"
import { formatRemoval, removalsOf } from "../internal/recall.ts"
import { CATEGORIES } from "../Retention.ts"
import { type CompactionRetentionRow, replaySession, retentionRowsOf, uploadBytes } from "./Replay.ts"
import { chosenPolicy, type ReplayJson, replayPolicyOptions, simulateOptionsFor } from "./Report.ts"
import {
  CliFailure,
  ExitCode,
  flagValueProblem,
  prettyJson,
  type ReadOptions,
  readSession,
  reportFailure,
  type SessionInput,
  status,
  STDIO_PATH,
  usageFailure,
  writeText
} from "./Run.ts"
import { convertJson } from "../internal/import/json.ts"
import type { RequestEvent, RetentionTally } from "../internal/simulate/model.ts"

type Env = FileSystem.FileSystem | Path.Path

/** A URL as it may be printed: the password, if any, replaced by `***`. @category io */
export const redactUrl = (url: string): string => url.replace(/^([a-z][a-z0-9+.-]*:\/\/[^/:@]*:)[^/@]*@/i, "$1***@")

/** Where a stored session is: a JSONL log file, or a session of the PostgreSQL store at `url`. @category models */
export type LogSource =
  | { readonly _tag: "Jsonl"; readonly file: string; readonly directory: string; readonly sessionId: string }
  | { readonly _tag: "Store"; readonly url: string; readonly sessionId: string }

const where = (source: LogSource): string =>
  source._tag === "Jsonl" ? source.file : `session ${source.sessionId} in --store ${redactUrl(source.url)}`

/**
 * The one line for a store error: `NotFound` says how to list what is there (exit 3), damage names the line (exit 3),
 * a storage failure names the store (exit 3 when reading, `Persist` when writing).
 * @category errors
 */
export const storeFailure = (source: LogSource, writing = false) => (e: SessionLogError): CliFailure => {
  if (e.reason === "NotFound") {
    const list = source._tag === "Jsonl"
      ? `compaction sessions ${source.directory}`
      : `compaction sessions --store ${redactUrl(source.url)}`
    return new CliFailure({
      code: ExitCode.Input,
      message: `no session ${JSON.stringify(source.sessionId)} ${
        source._tag === "Jsonl" ? `at ${source.file}` : `in --store ${redactUrl(source.url)}`
      }; "${list}" lists the stored sessions`
    })
  }
  const line = e.line === undefined ? "" : ` (line ${e.line})`
  return new CliFailure({
    code: writing ? ExitCode.Persist : ExitCode.Input,
    message: `${where(source)}: ${e.reason}${line}: ${e.detail}`
  })
}

/** The PostgreSQL store at `url`, read only: the migrations are not run (nothing is created by reading). */
const listFailure = (what: string) => (e: SessionLogError): CliFailure =>
  new CliFailure({ code: ExitCode.Input, message: `cannot list the sessions of ${what}: ${e.detail}` })

/** PostgreSQL's message when a store error is its `undefined_table` (the store's tables are not there), else none. */
const missingTables = (e: SessionLogError): string | undefined => {
  const driver = (e.cause as { readonly reason?: { readonly cause?: { readonly code?: unknown; message?: unknown } } })
    ?.reason?.cause
  return driver?.code === "42P01" ? String(driver.message) : undefined
}

/** `sessions --store` on a database without the store's tables: one line saying so and how to create them. */
const storeListFailure = (url: string) => (e: SessionLogError): CliFailure => {
  const missing = missingTables(e)
  if (missing === undefined) return listFailure(`--store ${redactUrl(url)}`)(e)
  return new CliFailure({
    code: ExitCode.Input,
    message: `--store ${redactUrl(url)}: the store's tables are not in this database or schema (${missing}); ` +
      "create them once with SessionStoreSql.layerMigrations as a deploy step (from a checkout: " +
      `DATABASE_URL='${redactUrl(url)}' node examples/many-workers.ts migrate), or write a session first`
  })
}

const pgStore = (url: string): Layer.Layer<SessionStore, SessionLogError> =>
  SessionStoreSql.layerPg({ url, migrate: false })

/** The removals `inspect` lists of a session log: the latest ones. */
const SHOWN_REMOVALS = 10

const SESSION_LOG_LINE =
  /^\{"v":\d+,"id":"[^"]+","parentId":(null|"[^"]*"),"timestamp":[\d.e+-]+,"type":"(message|eviction|compaction)"/

/**
 * True when `file` is a session log this library wrote (`<id>.jsonl` whose first line is an entry), so `inspect`
 * reads it as a log rather than as a pi or Claude Code session.
 * @category io
 */
export const isSessionLogFile = (file: string): Effect.Effect<boolean, never, FileSystem.FileSystem> =>
  Effect.gen(function* () {
    if (!file.endsWith(".jsonl")) return false
    const fs = yield* FileSystem.FileSystem
    const text = yield* fs.readFileString(file).pipe(Effect.orElseSucceed(() => ""))
    return SESSION_LOG_LINE.test(text.slice(0, text.indexOf("\n") === -1 ? text.length : text.indexOf("\n")))
  })

/** The source of a JSONL log file: its directory and the session id its name gives. @category io */
export const jsonlSource = (path: Path.Path, file: string): LogSource => ({
  _tag: "Jsonl",
  file,
  directory: path.dirname(file),
  sessionId: path.basename(file, ".jsonl")
})

/**
 * What a command reads of a session log: its `view` (what the conversation's next request sends), or its `history`
 * (every message appended, in order, as recorded before any compaction or offload: what a replay prices).
 * @category io
 */
export type LogReading = "view" | "history"

/**
 * Reads a stored session (every line checked) as a CLI input, its view or its history (`LogReading`). A line on
 * stderr says what the log holds (entries, compactions, evictions, and anything opening reported) and which of the
 * two the command reads; with `showRemovals` (`inspect`), a line for each of the latest removals and its references.
 * @category io
 */
export const readLogInput = (
  source: LogSource,
  reading: LogReading = "view",
  showRemovals = false
): Effect.Effect<SessionInput, CliFailure, Env> =>
  Effect.gen(function* () {
    const loaded: Loaded = yield* (source._tag === "Jsonl"
      ? readJsonl({ directory: source.directory, sessionId: source.sessionId })
      : readStored(source.sessionId).pipe(Effect.provide(pgStore(source.url)))).pipe(
        Effect.mapError(storeFailure(source))
      )
    // an eviction entry with no evictions holds only a step's metadata (a reply with empty content)
    const count = (type: string) =>
      loaded.entries.filter((e) => e.type === type && (e.type !== "eviction" || e.evictions.length > 0)).length
    const issues = loaded.issues.length === 0
      ? ""
      : `; ${loaded.issues.length} issues (${
        loaded.issues.map((i) => `${i._tag} at line ${i.line}`).join(", ")
      })`
    const messages = reading === "view"
      ? loaded.view
      : loaded.entries.flatMap((e) => e.type === "message" ? [e.message] : [])
    yield* status(
      `${where(source)}: session log of ${loaded.entries.length} entries (${count("message")} messages, ` +
        `${count("compaction")} compactions, ${count("eviction")} evictions); read as its ${
          reading === "view" ? `view (${loaded.view.length} messages)` : `history (${messages.length} messages)`
        }${issues}`
    )
    // what each compaction and eviction removed, and the references `recall` answers (the latest few)
    if (showRemovals) {
      const removals = removalsOf(loaded.entries)
      if (removals.length > SHOWN_REMOVALS) yield* status(`(${removals.length - SHOWN_REMOVALS} earlier removals)`)
      for (const removal of removals.slice(-SHOWN_REMOVALS)) yield* status(formatRemoval(removal))
    }
    const session = convertJson({ messages })
    if (Result.isFailure(session)) {
      return yield* new CliFailure({ code: ExitCode.Input, message: `${where(source)}: ${session.failure.message}` })
    }
    return {
      name: source._tag === "Jsonl" ? source.file : `${source.sessionId} (sql)`,
      session: { ...session.success, format: "session-log" },
      ...(reading === "view" ? { state: resumeState(loaded) } : {})
    }
  })

/**
 * Reads a command's input file: a session log this library wrote (`DIR/S.jsonl`) through `readLogInput` as its
 * `reading`, any other format through `readSession`.
 * @category io
 */
export const readInput = (
  file: string,
  options: ReadOptions & { readonly reading: LogReading; readonly showRemovals?: boolean }
): Effect.Effect<SessionInput, CliFailure, Env> =>
  Effect.gen(function* () {
    if (file !== STDIO_PATH && (yield* isSessionLogFile(file))) {
      return yield* readLogInput(jsonlSource(yield* Path.Path, file), options.reading, options.showRemovals)
    }
    return yield* readSession(file, options)
  })

// ============================================================================
// sessions
// ============================================================================

/** The parsed flags of `sessions`. @category models */
export interface SessionsInput {
  readonly directory: Option.Option<string>
  readonly store: Option.Option<string>
  readonly json: boolean
}

/** `sessions`: the ids of the sessions a directory of JSONL logs or a PostgreSQL store holds, one a line (or JSON). */
export const sessions = (input: SessionsInput): Effect.Effect<void, CliFailure, Env> =>
  Effect.gen(function* () {
    if (Option.isSome(input.directory) === Option.isSome(input.store)) {
      return yield* usageFailure("sessions", "give a directory of session logs, or --store URL (one of them)")
    }
    let ids: ReadonlyArray<string>
    if (Option.isSome(input.directory)) {
      const directory = input.directory.value
      const fs = yield* FileSystem.FileSystem
      const info = yield* fs.stat(directory).pipe(Effect.option)
      if (Option.isNone(info) || info.value.type !== "Directory") {
        return yield* new CliFailure({
          code: ExitCode.Input,
          message: `${directory}: ${Option.isNone(info) ? "no such directory" : "not a directory"}`
        })
      }
      ids = yield* Effect.flatMap(SessionStore, (s) => s.list).pipe(
        Effect.provide(SessionStoreJsonl.layer({ directory })),
        Effect.mapError(listFailure(directory))
      )
    } else {
      const url = Option.getOrElse(input.store, () => "")
      ids = yield* Effect.flatMap(SessionStore, (s) => s.list).pipe(
        Effect.provide(pgStore(url)),
        Effect.mapError(storeListFailure(url))
      )
    }
    yield* writeText(undefined, input.json ? prettyJson(ids) : ids.map((id) => `${id}\n`).join(""))
    if (!input.json && ids.length === 0) yield* status("no sessions stored there")
  })

// ============================================================================
// replay
// ============================================================================

/** The parsed flags of `replay`. @category models */
export interface ReplayInput {
  readonly file: string
  readonly out: Option.Option<string>
  readonly log: Option.Option<string>
  readonly sessionId: string
  readonly resumeEvery: Option.Option<number>
  readonly json: boolean
  /** Send on server-held threads (`SimulateOptions.threads`). */
  readonly threads: boolean
  /** With `threads`: price a rewrite by the cache alone (`LibraryOptions.threadRestart: false`). */
  readonly cacheOnlyRewrites: boolean
  readonly keepRecent: number
  /** Absent: the rent-or-buy rule, as `Conversation` without `minSavings`. */
  readonly minSavings: Option.Option<number>
  /** Absent: sized from the trigger, as `CompactionPolicy.make` does. */
  readonly keepRecentTokens: Option.Option<number>
  /** Absent: the library's default. */
  readonly keepRecentTurns: Option.Option<number>
  readonly contextWindow: number
  /** Absent: the library's default trigger. */
  readonly compactAtTokens: Option.Option<number>
  readonly html: Option.Option<string>
}

const checked = (
  flag: string,
  value: number,
  positive: boolean,
  command = "replay"
): Effect.Effect<number, CliFailure> =>
  Number.isSafeInteger(value) && (positive ? value > 0 : value >= 0) ? Effect.succeed(value) : Effect.fail(
    usageFailure(
      command,
      flagValueProblem(`--${flag}`, String(value), positive ? "a positive integer" : "a non-negative integer")
    )
  )

const FLAG_OF_FIELD: Readonly<Record<string, string>> = {
  keepRecentTokens: "--keep-recent-tokens",
  keepRecentTurns: "--keep-recent-turns",
  contextWindow: "--context-window",
  compactAtTokens: "--compact-at-tokens"
}

/** The policy flags `replay` and `retention` share, checked. */
type PolicyFlags = Pick<
  ReplayInput,
  "keepRecent" | "minSavings" | "keepRecentTokens" | "keepRecentTurns" | "contextWindow" | "compactAtTokens"
>

/** The eviction settings and compaction policy of `command`'s flags, or the usage failure of the first bad one. */
const replayPolicy = (command: string, input: PolicyFlags) =>
  Effect.gen(function* () {
    const keepRecent = yield* checked("keep-recent", input.keepRecent, false, command)
    const minSavings = Option.isSome(input.minSavings)
      ? yield* checked("min-savings", input.minSavings.value, false, command)
      : undefined
    const policy = CompactionPolicy.make(
      replayPolicyOptions({
        keepRecentTokens: Option.getOrUndefined(input.keepRecentTokens),
        keepRecentTurns: Option.getOrUndefined(input.keepRecentTurns),
        contextWindow: input.contextWindow,
        compactAtTokens: Option.getOrUndefined(input.compactAtTokens)
      })
    )
    if (Result.isFailure(policy)) {
      const e = policy.failure
      const flag = FLAG_OF_FIELD[e.field]
      if (flag !== undefined) {
        return yield* usageFailure(command, flagValueProblem(flag, String(e.value), e.reason.replace(/^expected /, "")))
      }
      // a field no flag sets (derived from the trigger and the kept tail): the flags given make no valid policy
      return yield* usageFailure(command, `these policy flags make no valid policy: ${e.message}`)
    }
    return { keepRecent, minSavings, policy: policy.success }
  })

const requestFile = (path: Path.Path, directory: string, n: number): string =>
  path.join(directory, `request-${String(n).padStart(4, "0")}.json`)

const usageFile = (path: Path.Path, directory: string, n: number): string =>
  path.join(directory, `request-${String(n).padStart(4, "0")}.usage.json`)

/** Beside the request right after a compaction: the messages that compaction summarized, as sent to the summarizer. */
const summarizedFile = (path: Path.Path, directory: string, n: number): string =>
  path.join(directory, `summarized-${String(n).padStart(4, "0")}.json`)

/**
 * What `replay --out` writes beside request N: the usage the engine predicts it is billed (the reply is recorded
 * with it), when it was sent (ms since the epoch, from the record), its model, and whether the record shows the
 * provider lost the cache before it, so it can be priced independently.
 */
const predictedUsage = (n: number, event: RequestEvent) => ({
  request: n,
  message: event.index,
  time: event.figures.time,
  model: event.figures.model ?? null,
  cacheLost: event.cacheLost,
  usage: event.usage,
  dollars: event.figures.dollars,
  uploadBytes: uploadBytes(event.request),
  ...(event.figures.retention === undefined ? {} : { retention: event.figures.retention })
})

/**
 * `replay`: the session through the replay engine `simulate` runs (`Conversation`'s transitions, each reply recorded
 * with the usage its own request is predicted to be billed), every request to `--out DIR` (`request-NNNN.json`, and
 * its predicted usage in `request-NNNN.usage.json`; after a compaction, the span it summarized in
 * `summarized-NNNN.json`), the conversation to `--log DIR/<session-id>.jsonl` (a new
 * session: a log that already holds entries exits `Persist`), the summary and per-request tokens on stdout; exit
 * `Violations` when a request is invalid.
 */
export const replay = (input: ReplayInput): Effect.Effect<void, CliFailure, Env> =>
  Effect.gen(function* () {
    const { keepRecent, minSavings, policy } = yield* replayPolicy("replay", input)
    const resumeEvery = Option.isSome(input.resumeEvery)
      ? yield* checked("resume-every", input.resumeEvery.value, true)
      : undefined
    const read = yield* readInput(input.file, { strict: false, reading: "history" })
    const session = read.session
    const path = yield* Path.Path
    if (Option.isSome(input.log)) {
      const source = jsonlSource(path, path.join(input.log.value, `${input.sessionId}.jsonl`))
      const existing = yield* readJsonl({ directory: input.log.value, sessionId: input.sessionId }).pipe(
        Effect.map((l) => l.entries.length),
        Effect.catchIf((e) => e.reason === "NotFound", () => Effect.succeed(0)),
        Effect.mapError(storeFailure(source, true))
      )
      if (existing > 0) {
        return yield* new CliFailure({
          code: ExitCode.Persist,
          message:
            `--log ${input.log.value}: session ${
              JSON.stringify(input.sessionId)
            } already holds ${existing} entries, and a replay records a new conversation; pass another --session-id ` +
            `or another --log directory`
        })
      }
    }
    const log = Option.isSome(input.log)
      ? layerSessionLog({ directory: input.log.value, sessionId: input.sessionId })
      : undefined
    const out = Option.getOrUndefined(input.out)
    if (out !== undefined) {
      const fs = yield* FileSystem.FileSystem
      yield* fs.makeDirectory(out, { recursive: true }).pipe(
        Effect.mapError((e) => new CliFailure({ code: ExitCode.Output, message: `cannot create ${out}: ${e.message}` }))
      )
    }
    const replayed = yield* replaySession<CliFailure, Env>(
      session,
      chosenPolicy({ keepRecent, minSavings, policy, ...(input.cacheOnlyRewrites ? { threadRestart: false } : {}) }),
      {
        simulate: { ...simulateOptionsFor(session, read.tools), compaction: policy, threads: input.threads },
        resumeEvery,
        log,
        onRequest: out === undefined ?
          undefined :
          (n, event) =>
            writeText(requestFile(path, out, n), prettyJson(event.request)).pipe(
              Effect.andThen(writeText(usageFile(path, out, n), prettyJson(predictedUsage(n, event)))),
              Effect.andThen(
                event.summarized === undefined
                  ? Effect.void
                  : writeText(summarizedFile(path, out, n), prettyJson(event.summarized))
              )
            )
      }
    ).pipe(
      Effect.mapError((e) =>
        e._tag === "CliFailure" ? e : new CliFailure({ code: ExitCode.Persist, message: `replay failed: ${e.message}` })
      )
    )
    const summary = replayed.summary
    if (input.json) {
      const document: ReplayJson = {
        file: input.file,
        ...summary,
        requestTokens: replayed.tokens,
        retention: retentionRowsOf(replayed.report)
      }
      yield* writeText(undefined, prettyJson(document))
    } else {
      yield* writeText(
        undefined,
        `${input.file}: ${summary.requests} requests, ${summary.compactions} compactions, ${summary.evictions} ` +
          `evictions (${summary.offloadedResults} results offloaded), ${summary.invalidRequests} invalid requests, ` +
          `${summary.resumes} resumes, ${summary.uploadedBytes ?? 0} bytes uploaded\n`
      )
    }
    if (out !== undefined) yield* status(`wrote ${summary.requests} requests to ${out}`)
    if (Option.isSome(input.html)) {
      // loaded on demand: only the report needs the simulator and the page
      const [{ buildReport }, { renderHtml }] = yield* Effect.promise(() =>
        Promise.all([import("./Report.ts"), import("./Html.ts")])
      )
      const report = yield* buildReport(session, {
        file: read.name,
        replayFile: input.file,
        keepRecent,
        minSavings,
        policy,
        tools: read.tools,
        replay: summary,
        threads: input.threads,
        ...(input.cacheOnlyRewrites ? { threadRestart: false } : {})
      }).pipe(Effect.mapError(reportFailure))
      yield* writeText(input.html.value, renderHtml(report))
      if (input.html.value !== STDIO_PATH) yield* status(`wrote the HTML report to ${input.html.value}`)
    }
    if (summary.invalidRequests > 0) return yield* new CliFailure({ code: ExitCode.Violations, message: "" })
  })

/** The messages of `messages` after `prefix` when `prefix` is a prefix of them (by `same`), else `undefined`. @category io */
export const afterPrefix = (
  prefix: ReadonlyArray<Message>,
  messages: ReadonlyArray<Message>,
  same: (a: Message, b: Message) => boolean
): ReadonlyArray<Message> | undefined =>
  prefix.length <= messages.length && prefix.every((m, i) => same(m, messages[i]!))
    ? messages.slice(prefix.length)
    : undefined

// ============================================================================
// retention
// ============================================================================

/** The parsed flags of `retention`. @category models */
export interface RetentionInput extends PolicyFlags {
  readonly file: string
  readonly json: boolean
}

const cell = (t: RetentionTally): string =>
  `${t.counted === 0 ? " n/a" : t.share.toFixed(2)}  ${`${t.present}/${t.counted}`.padStart(9)}  ${
    String(t.inTail).padStart(7)
  }  ${String(t.recoverable ?? "-").padStart(11)}`

/** The text of one compaction's retention: a row per category and a total row. */
const retentionTable = (row: CompactionRetentionRow): string =>
  [
    `compaction ${row.compaction} (request ${row.request}, reply at message ${row.message})`,
    `  ${"category".padEnd(12)}share    present  in tail  recoverable`,
    ...CATEGORIES.map((c) => `  ${c.padEnd(12)}${cell(row.categories[c])}`),
    `  ${"total".padEnd(12)}${cell(row.total)}`
  ].join("\n") + "\n"

/**
 * `retention`: the session through the replay engine `replay` runs (same defaults and policy flags), and per
 * compaction the share of the span it removed whose anchors (`Retention.anchorsOf`) are present in the next request,
 * per category and in total, the anchors still in the kept tail counted apart; and of those absent from it, how many
 * one `recall` search over what was removed so far finds (`recoverable`).
 */
export const retention = (input: RetentionInput): Effect.Effect<void, CliFailure, Env> =>
  Effect.gen(function* () {
    const { keepRecent, minSavings, policy } = yield* replayPolicy("retention", input)
    const read = yield* readInput(input.file, { strict: false, reading: "history" })
    const replayed = yield* replaySession(read.session, chosenPolicy({ keepRecent, minSavings, policy }), {
      simulate: { ...simulateOptionsFor(read.session, read.tools), compaction: policy }
    }).pipe(Effect.mapError((e) => new CliFailure({ code: ExitCode.Persist, message: `replay failed: ${e.message}` })))
    const rows = retentionRowsOf(replayed.report)
    const mean = replayed.report.retention ?? null
    if (input.json) {
      yield* writeText(undefined, prettyJson({ file: input.file, compactions: rows, meanShare: mean }))
      return
    }
    const head = `${input.file}: ${rows.length} compactions over ${replayed.summary.requests} requests` +
      (mean === null ? "" : `; mean share of the removed spans' anchors in the next request ${mean.toFixed(2)}`)
    yield* writeText(undefined, [head, ...rows.map(retentionTable)].join("\n\n") + (rows.length === 0 ? "\n" : ""))
  })
