/**
 * What each `compaction` command does, loaded by `Commands.ts` only when the command runs. Every handler reads its
 * input with `readSession` (warning on corrupt lines, or failing with `--strict`), writes its result with `writeText`
 * and prints its success line only once the result is in place.
 *
 * @since 0.1.0
 */
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import type * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Path from "effect/Path"
import * as Result from "effect/Result"
import type { CompactOutcome } from "../Compact.ts"
import { readConfig } from "../internal/env.ts"
import { evictStaleToolResults } from "../Evict.ts"
import { HotPaths } from "../HotPaths.ts"
import type { Message } from "../Message.ts"
import { CompactionPolicy } from "../Policy.ts"
import { SessionLog } from "../SessionLog.ts"
import { layerSessionLog } from "../SessionStoreJsonl.ts"
import { formatReport, paretoFront, simulate as simulateSession, sweep } from "../Simulate.ts"
import type { Summarizer } from "../Summarizer.ts"
import { estimateTokens } from "../Tokens.ts"
import { repairResult, validate as validateMessages } from "../Validate.ts"
import { renderHtml } from "./Html.ts"
import { buildReport, simulateJson, simulateOptionsFor } from "./Report.ts"
import { analyze, formatInspect, groupViolations, type InspectReport, violationReport } from "./Inspect.ts"
import {
  CliFailure,
  configFailure,
  describeUnknown,
  ExitCode,
  flagValueProblem,
  prettyJson,
  progressLine,
  recordWritten,
  reportFailure,
  sessionDocument,
  type SessionInput,
  status,
  STDIO_PATH,
  usageFailure,
  useColor,
  writeText
} from "./Run.ts"
import { afterPrefix, readInput, readLogInput } from "./Sessions.ts"
import { canonicalJson } from "../internal/sessionEntry.ts"

const fmt = (n: number): string => n.toLocaleString("en-US")

type Env = FileSystem.FileSystem | Path.Path

const nonNegative = (command: string, flag: string, value: number): Effect.Effect<number, CliFailure> =>
  Number.isSafeInteger(value) && value >= 0
    ? Effect.succeed(value)
    : Effect.fail(usageFailure(command, flagValueProblem(`--${flag}`, String(value), "a non-negative integer")))

/** `--min-savings` when given (checked non-negative); `undefined` when absent, the library's rent-or-buy default. */
const minSavingsOf = (command: string, value: Option.Option<number>): Effect.Effect<number | undefined, CliFailure> =>
  Option.isSome(value) ? nonNegative(command, "min-savings", value.value) : Effect.succeed(undefined)

const outPath = (option: Option.Option<string>): string | undefined => Option.getOrUndefined(option)

/** The flags of every command that reads one session file: the file (`-` is stdin) and `--strict`. @category models */
export interface FileInput {
  readonly file: string
  readonly strict: boolean
}

/** The flags of every command that writes a session: `--out` (absent or `-`: stdout) and `--keep-private`. @category models */
export interface OutputInput {
  readonly out: Option.Option<string>
  readonly keepPrivate: boolean
}

/** Writes the session document, then (only once it is in place) the success line. */
const writeSession = (
  input: SessionInput,
  messages: ReadonlyArray<Message>,
  options: OutputInput,
  success: string
) =>
  writeText(outPath(options.out), prettyJson(sessionDocument(input, messages, options))).pipe(
    Effect.andThen(status(success))
  )

/**
 * The input of a command that rewrites a session (`evict`, `compact`), checked against the API's rules first: with
 * `--strict` an invalid input fails (`Violations`) before anything is written; without it, one warning on stderr
 * says what is wrong and that the output keeps it (`repair` mends it).
 */
const checkedInput = (command: string, read: SessionInput, strict: boolean): Effect.Effect<void, CliFailure> => {
  const violations = validateMessages(read.session.messages).map(violationReport)
  if (violations.length === 0) return Effect.void
  const lines = groupViolations(violations)
  const what = `${read.name}: the input breaks the API's rules in ${violations.length} place${
    violations.length === 1 ? "" : "s"
  } (${lines.length} distinct; first: ${lines[0]})`
  return strict
    ? Effect.fail(
      new CliFailure({
        code: ExitCode.Violations,
        message: `${what}; ${command} refuses it with --strict: mend it with compaction repair ${read.name}`
      })
    )
    : status(`warning: ${what}; the output keeps them (compaction repair mends them, --strict refuses the input)`)
}

// ============================================================================
// inspect
// ============================================================================

/** The parsed flags of `inspect`. @category models */
export interface InspectInput {
  readonly file: Option.Option<string>
  readonly store: Option.Option<string>
  readonly sessionId: Option.Option<string>
  readonly json: boolean
  readonly html: Option.Option<string>
  readonly keepRecent: number
  /** Absent: the rent-or-buy rule, as `evictStaleToolResults` without `minSavings`. */
  readonly minSavings: Option.Option<number>
  readonly strict: boolean
}

/** What `inspect` reads: a session file, a session log file (`DIR/S.jsonl`), or `--store URL --session-id S`. */
const inspectedSession = (input: InspectInput): Effect.Effect<SessionInput, CliFailure, Env> =>
  Effect.gen(function* () {
    if (Option.isSome(input.store)) {
      if (Option.isSome(input.file)) return yield* usageFailure("inspect", "give a FILE or --store URL, not both")
      if (Option.isNone(input.sessionId)) {
        return yield* usageFailure(
          "inspect",
          '--store needs --session-id ("compaction sessions --store URL" lists them)'
        )
      }
      return yield* readLogInput({ _tag: "Store", url: input.store.value, sessionId: input.sessionId.value })
    }
    if (Option.isNone(input.file)) return yield* usageFailure("inspect", "give a FILE, or --store URL --session-id S")
    if (Option.isSome(input.sessionId)) return yield* usageFailure("inspect", "--session-id only applies with --store")
    return yield* readInput(input.file.value, { strict: input.strict, reading: "view", showRemovals: true })
  })

/** `inspect`: the report on stdout (text or `--json`), and with `--html` the HTML report (`--html -`: on stdout). */
export const inspect = (input: InspectInput): Effect.Effect<void, CliFailure, Env> =>
  Effect.gen(function* () {
    const keep = yield* nonNegative("inspect", "keep-recent", input.keepRecent)
    const savings = yield* minSavingsOf("inspect", input.minSavings)
    const read = yield* inspectedSession(input)
    let inspected: InspectReport
    if (Option.isSome(input.html)) {
      // the page's report holds the same analysis: it is not run a second time
      const report = yield* buildReport(read.session, {
        file: read.name,
        keepRecent: keep,
        minSavings: savings,
        tools: read.tools,
        state: read.state
      }).pipe(Effect.mapError(reportFailure))
      yield* writeText(input.html.value, renderHtml(report))
      if (input.html.value === STDIO_PATH) return
      yield* status(`wrote the HTML report to ${input.html.value}`)
      inspected = report.data.inspect
    } else {
      inspected = analyze(read.session, {
        file: read.name,
        keepRecent: keep,
        minSavings: savings,
        ...(read.tools === undefined ? {} : { tools: read.tools }),
        state: read.state
      }).report
    }
    yield* writeText(undefined, input.json ? prettyJson(inspected) : formatInspect(inspected, { color: useColor() }))
  })

// ============================================================================
// evict
// ============================================================================

/** The parsed flags of `evict`. @category models */
export interface EvictInput extends FileInput, OutputInput {
  readonly keepRecent: number
  /**
   * Absent: the rent-or-buy rule, as `evictStaleToolResults` without `minSavings`; the file records no cache state,
   * so every recorded reply counts as a request that read the cache (`cacheCold` is not set).
   */
  readonly minSavings: Option.Option<number>
}

/** `evict`: the session with stale tool output offloaded, to stdout or `--out`; the savings on stderr. */
export const evict = (input: EvictInput): Effect.Effect<void, CliFailure, Env> =>
  Effect.gen(function* () {
    const keep = yield* nonNegative("evict", "keep-recent", input.keepRecent)
    const savings = yield* minSavingsOf("evict", input.minSavings)
    const read = yield* readInput(input.file, { strict: input.strict, reading: "view" })
    yield* checkedInput("evict", read, input.strict)
    const messages = read.session.messages
    const result = evictStaleToolResults(messages, keep, {
      minSavings: savings,
      pinned: HotPaths.fromMessages(messages).pinned
    })
    const by = { superseded: 0, modified: 0, stale: 0 }
    for (const o of result.offloaded) by[o.reason]++
    const before = estimateTokens(messages)
    yield* writeSession(
      read,
      result.messages,
      input,
      result.offloaded.length === 0
        ? "nothing to offload; the output is the input unchanged"
        : `offloaded ${result.offloaded.length} tool results (${by.superseded} superseded, ${by.modified} modified, ` +
          `${by.stale} stale), freed ${fmt(result.tokensFreed)} tokens: ${fmt(before)} → ${
            fmt(before - result.tokensFreed)
          }`
    )
  })

// ============================================================================
// compact
// ============================================================================

/** The parsed flags of `compact`. @category models */
export interface CompactInput extends FileInput, OutputInput {
  readonly summarizer: "extractive" | "anthropic"
  readonly fallback: Option.Option<"extractive">
  readonly focus: Option.Option<string>
  readonly keepRecentTokens: number
  readonly keepRecentTurns: number
  readonly log: Option.Option<string>
  readonly sessionId: Option.Option<string>
}

const missingKey = "ANTHROPIC_API_KEY is not set; set it, or use --summarizer extractive (the default)"

/**
 * The session id for `--log`, derived from the file name when `--session-id` is absent: the base name without
 * `.anthropic.json`, `.json`, `.jsonl` or `.txt`, reduced to the characters an id allows (`stdin` for `-`).
 * @category models
 */
export const sessionIdFor = (path: Path.Path, filePath: string): string => {
  if (filePath === STDIO_PATH) return "stdin"
  const base = path.basename(filePath).replace(/(\.anthropic)?\.(jsonl?|txt)$/i, "")
  const id = base.replace(/[^A-Za-z0-9._-]/g, "-").replace(/^[^A-Za-z0-9]+/, "").slice(0, 128)
  return id.length > 0 ? id : "session"
}

const persistFailure = (directory: string, error: unknown) =>
  new CliFailure({
    code: ExitCode.Persist,
    message: `could not persist to --log ${directory}: ${describeUnknown(error)}`
  })

const sameMessage = (a: Message, b: Message): boolean => a === b || canonicalJson(a) === canonicalJson(b)

/**
 * Makes the log hold the session and returns the view to compact. The input goes on from the stored session when the
 * stored view is a prefix of it (the output of an earlier `compact` and new messages), or the stored messages as
 * appended are (the agent's full history, grown): the new messages are appended and the log's view is compacted.
 * Anything else is a different conversation: exit `Persist`, nothing written.
 */
const seedLog = (directory: string, messages: ReadonlyArray<Message>) =>
  Effect.gen(function* () {
    const log = yield* SessionLog
    const stored = yield* log.loaded
    const history = stored.entries.flatMap((e) => e.type === "message" ? [e.message] : [])
    const added = afterPrefix(stored.view, messages, sameMessage) ?? afterPrefix(history, messages, sameMessage)
    if (added === undefined) {
      return yield* new CliFailure({
        code: ExitCode.Persist,
        message: `--log ${directory}: session ${JSON.stringify(log.sessionId)} holds another conversation (neither ` +
          `its view of ${stored.view.length} messages nor its ${history.length} stored messages start the input); ` +
          "pass another --session-id or another directory"
      })
    }
    if (added.length > 0) {
      yield* log.append(added).pipe(Effect.mapError((e) => persistFailure(directory, e)))
      yield* recordWritten(`--log ${directory} (${added.length} new messages)`)
      yield* status(`--log ${directory}: added ${added.length} new messages to session ${log.sessionId}`)
    }
    const { view } = yield* log.snapshot
    if (added.length === 0 && view.length !== messages.length) {
      yield* status(`--log ${directory}: session ${log.sessionId} already holds these messages; compacting its view`)
    }
    return view
  })

const outcomeLine = (outcome: CompactOutcome): string => {
  switch (outcome._tag) {
    case "Skipped":
      return `nothing to compact (${outcome.reason}); the output is the input unchanged`
    case "Compacted":
    case "FellBack": {
      const figures = `${fmt(outcome.messagesBefore)} → ${fmt(outcome.messagesAfter)} messages, ` +
        `${fmt(outcome.tokensBefore)} → ${fmt(outcome.tokensAfter)} tokens, ` +
        `${outcome.turnsSummarized} turns summarized`
      if (outcome._tag === "Compacted") return `compacted with the ${outcome.summarizer} summarizer: ${figures}`
      return `compacted with the ${outcome.summarizer} summarizer instead (--fallback): ${figures}. ` +
        `The ${outcome.primary} summarizer failed: ${outcome.primaryError}`
    }
  }
}

/** `compact`: the compacted session to stdout or `--out`, optionally recorded in `--log`; the outcome on stderr. */
export const compact = (input: CompactInput): Effect.Effect<void, CliFailure, Env> =>
  Effect.gen(function* () {
    const policy = CompactionPolicy.make({
      keepRecentTokens: input.keepRecentTokens,
      keepRecentTurns: input.keepRecentTurns
    })
    if (Result.isFailure(policy)) {
      const e = policy.failure
      const flag = e.field === "keepRecentTurns" ? "--keep-recent-turns" : "--keep-recent-tokens"
      return yield* usageFailure("compact", flagValueProblem(flag, String(e.value), e.reason.replace(/^expected /, "")))
    }
    const fallback = Option.isSome(input.fallback)
    if (fallback && input.summarizer !== "anthropic") {
      return yield* usageFailure("compact", "--fallback only applies to --summarizer anthropic")
    }

    // the API key is checked before anything is read or sent
    let kind: "extractive" | "anthropic" = input.summarizer
    if (kind === "anthropic") {
      // by name, never the whole environment: under Deno the CLI needs only --allow-env of the variables it reads,
      // and a variable it may not read is a failure that names the flag, not an unset key
      const key = yield* readConfig(Config.option(Config.String("ANTHROPIC_API_KEY"))).pipe(Effect.catch(configFailure))
      if (Option.isNone(key) || key.value.trim().length === 0) {
        if (!fallback) return yield* new CliFailure({ code: ExitCode.Summarizer, message: missingKey })
        yield* status("ANTHROPIC_API_KEY is not set; compacting with the extractive summarizer (--fallback extractive)")
        kind = "extractive"
      }
    }

    // loaded on demand: the Anthropic SDK takes a while to load and only this command needs it
    const { compactContext } = yield* Effect.promise(() => import("../Compact.ts"))
    const { Summarizer } = yield* Effect.promise(() => import("../Summarizer.ts"))
    const { ExtractiveSummarizer } = yield* Effect.promise(() => import("../ExtractiveSummarizer.ts"))
    const { anthropicConfig } = yield* Effect.promise(() => import("../internal/anthropicConfig.ts"))
    // a configuration error is reported before anything is read or sent
    if (kind === "anthropic") yield* readConfig(anthropicConfig).pipe(Effect.catch(configFailure))
    const read = yield* readInput(input.file, { strict: input.strict, reading: "view" })
    yield* checkedInput("compact", read, input.strict)
    const session = read.session
    const progress = progressLine("summarizing")
    const summarizerLayer: Layer.Layer<Summarizer, CliFailure> = kind === "extractive"
      ? ExtractiveSummarizer.layer
      // the Anthropic module (and the SDK) loads only when this layer is built
      : Layer.unwrap(Effect.map(
        Effect.promise(() => import("../AnthropicSummarizer.ts")),
        ({ AnthropicSummarizer }) =>
          (fallback ? AnthropicSummarizer.layerWithFallback : AnthropicSummarizer.layerConfig)({
            onProgress: progress.update
          })
      )).pipe(Layer.catchTag("ConfigError", (e) => Layer.effect(Summarizer, configFailure(e))))
    if (kind === "anthropic") yield* status(`summarizing with the anthropic summarizer…`)

    const run = (messages: ReadonlyArray<Message>) =>
      compactContext(
        messages,
        policy.success,
        Option.isSome(input.focus) ? { instructions: input.focus.value } : {}
      ).pipe(
        Effect.ensuring(Effect.sync(progress.done)),
        Effect.mapError((e) =>
          e.reason === "Summarize"
            ? new CliFailure({ code: ExitCode.Summarizer, message: `summarizer failed: ${e.cause.message}` })
            : persistFailure(Option.getOrElse(input.log, () => ""), e.cause)
        )
      )

    const result = yield* Option.match(input.log, {
      onNone: () => run(session.messages).pipe(Effect.provide(summarizerLayer)),
      onSome: (directory) =>
        Effect.gen(function* () {
          const path = yield* Path.Path
          const sessionId = Option.getOrElse(input.sessionId, () => sessionIdFor(path, input.file))
          // every stored entry, not the tail: `seedLog` compares the stored messages with the input
          const logLayer = layerSessionLog({ directory, sessionId, tail: false }).pipe(
            Layer.catchTag(
              "SessionLogError",
              (e) => Layer.effect(SessionLog, Effect.fail(persistFailure(directory, e)))
            )
          )
          return yield* seedLog(directory, session.messages).pipe(
            Effect.flatMap(run),
            Effect.tap((r) =>
              r.outcome._tag === "Skipped" ? Effect.void : recordWritten(`--log ${directory} (the compaction)`)
            ),
            Effect.provide(Layer.merge(summarizerLayer, logLayer))
          )
        })
    })
    yield* writeSession(read, result.messages, input, outcomeLine(result.outcome))
    if (Option.isSome(input.log) && result.outcome._tag !== "Skipped") {
      yield* status(`recorded the compaction in ${input.log.value}`)
    }
  })

// ============================================================================
// validate / repair
// ============================================================================

/** The parsed flags of `validate`. @category models */
export interface ValidateInput extends FileInput {
  readonly json: boolean
}

/**
 * `validate`: `--json` lists every violation; the text form prints one line per distinct problem, with its count.
 * Exits `Violations` when there is any.
 */
export const validate = (input: ValidateInput): Effect.Effect<void, CliFailure, Env> =>
  Effect.gen(function* () {
    const read = yield* readInput(input.file, { strict: input.strict, reading: "view" })
    const messages = read.session.messages
    const violations = validateMessages(messages).map(violationReport)
    if (input.json) {
      yield* writeText(
        undefined,
        prettyJson({ file: read.name, messages: messages.length, valid: violations.length === 0, violations })
      )
    } else if (violations.length === 0) {
      yield* writeText(undefined, `${read.name}: valid (${fmt(messages.length)} messages)\n`)
    } else {
      const lines = groupViolations(violations)
      yield* writeText(
        undefined,
        `${read.name}: ${violations.length} violation${
          violations.length === 1 ? "" : "s"
        } (${lines.length} distinct)\n${lines.map((l) => `${l}\n`).join("")}`
      )
    }
    if (violations.length > 0) return yield* new CliFailure({ code: ExitCode.Violations, message: "" })
  })

/** The parsed flags of `repair`. @category models */
export interface RepairInput extends FileInput, OutputInput {}

/** `repair`: the repaired session to stdout or `--out`; what changed on stderr. */
export const repair = (input: RepairInput): Effect.Effect<void, CliFailure, Env> =>
  Effect.gen(function* () {
    const read = yield* readInput(input.file, { strict: input.strict, reading: "view" })
    const repaired = repairResult(read.session.messages)
    if (Result.isFailure(repaired)) {
      return yield* new CliFailure({ code: ExitCode.Violations, message: `${read.name}: ${repaired.failure.message}` })
    }
    const { messages, report } = repaired.success
    const changes = [
      [report.droppedEmptyBlocks, "empty text blocks dropped"],
      [report.droppedEmptyMessages, "empty messages dropped"],
      [report.mergedMessages, "same-role messages merged"],
      [report.droppedToolResults.length, "orphaned or duplicate tool results dropped"],
      [report.addedErrorResults.length, "missing tool results added"],
      [report.reorderedMessages, "messages with tool results moved first"],
      [report.insertedLeadingUser ? 1 : 0, "leading user message inserted"]
    ] as const
    const done = changes.filter(([n]) => n > 0).map(([n, what]) => `${n} ${what}`)
    yield* writeSession(
      read,
      messages,
      input,
      done.length === 0 ? "already valid; the output is the input unchanged" : `repaired: ${done.join(", ")}`
    )
  })

// ============================================================================
// simulate
// ============================================================================

/** The parsed flags of `simulate`. @category models */
export interface SimulateInput extends FileInput {
  readonly json: boolean
  readonly systemTokens: Option.Option<number>
  readonly sweep: boolean
}

/** `simulate`: the policy comparison, as text or `--json`. */
export const simulate = (input: SimulateInput): Effect.Effect<void, CliFailure, Env> =>
  Effect.gen(function* () {
    const read = yield* readInput(input.file, { strict: input.strict, reading: "history" })
    const options = simulateOptionsFor(
      read.session,
      read.tools,
      Option.isSome(input.systemTokens)
        ? yield* nonNegative("simulate", "system-tokens", input.systemTokens.value)
        : undefined
    )
    if (input.sweep) {
      const points = sweep([read.session], {}, options)
      const front = new Set(paretoFront(points))
      if (input.json) {
        return yield* writeText(
          undefined,
          prettyJson({ file: read.name, points: points.map((p) => ({ ...p, front: front.has(p) })) })
        )
      }
      const share = (t: { readonly share: number; readonly present: number; readonly counted: number }) =>
        `${t.share.toFixed(3)} (${t.present}/${t.counted})`
      const rows = points.map((p) =>
        `| ${p.name} | ${front.has(p) ? "yes" : ""} | $${p.dollars.toFixed(2)} | ${Math.round(p.peakContext)} | ` +
        `${p.misses} | ${p.compactions} | ${share(p.retention.total)} | ${share(p.retentionAtEnd.total)} |`
      )
      return yield* writeText(
        undefined,
        "| setting | front | $ | peak context | misses | compactions | retention next | retention at the end |\n" +
          `| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n${rows.join("\n")}\n`
      )
    }
    const report = simulateSession(read.session, options)
    if (input.json) yield* writeText(undefined, prettyJson(simulateJson(read.name, report)))
    else yield* writeText(undefined, `${formatReport(report, { title: read.name })}\n`)
  })
