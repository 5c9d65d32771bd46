/**
 * The commands of the `compaction` CLI, built with `effect/cli`: `inspect`, `evict`, `compact`, `validate`, `repair`
 * and `simulate`. Each handler reads the session with `readSession`, writes its result to stdout or `--out`, reports
 * progress on stderr, and fails with `CliFailure` and a documented exit code (see `Run.ts`).
 *
 * @since 0.1.0
 */
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Path from "effect/Path"
import * as Result from "effect/Result"
import { Argument, Command, Flag } from "effect/cli"
import type { CompactOutcome } from "../Compact.ts"
import { DEFAULT_KEEP_RECENT, DEFAULT_MIN_SAVINGS, evictStaleToolResults } from "../Evict.ts"
import { HotPaths } from "../HotPaths.ts"
import type { Message } from "../Message.ts"
import { CompactionPolicy, DEFAULT_KEEP_RECENT_TOKENS, DEFAULT_KEEP_RECENT_TURNS } from "../Policy.ts"
import { canonicalJson, SessionLog } from "../SessionLog.ts"
import { formatReport, simulate as simulateSession } from "../Simulate.ts"
import type { Summarizer } from "../Summarizer.ts"
import { estimateContentTokens, estimateTokens } from "../Tokens.ts"
import { repair as repairMessages, validate as validateMessages } from "../Validate.ts"
import { renderHtml } from "./Html.ts"
import { replay } from "./Replay.ts"
import { analyze, formatInspect, violationReport } from "./Inspect.ts"
import {
  CliFailure,
  describeUnknown,
  ExitCode,
  prettyJson,
  progressLine,
  readSession,
  sessionOutput,
  status,
  useColor,
  writeText
} from "./Run.ts"

const fmt = (n: number): string => n.toLocaleString("en-US")

// ============================================================================
// Shared parameters
// ============================================================================

const file = Argument.String("file").pipe(
  Argument.withDescription("The session: a JSON message array, an Anthropic Messages request, Claude Code or pi JSONL")
)

const json = Flag.Boolean("json").pipe(Flag.withDescription("Print the result as JSON"), Flag.withDefault(false))

const out = Flag.String("out").pipe(
  Flag.withAlias("o"),
  Flag.withDescription("Write the resulting session ({ system?, messages } JSON) here instead of stdout"),
  Flag.optional
)

const keepRecent = Flag.Int("keep-recent").pipe(
  Flag.withDescription(`Tool results kept verbatim, newest first (default ${DEFAULT_KEEP_RECENT})`),
  Flag.withDefault(DEFAULT_KEEP_RECENT)
)

const minSavings = Flag.Int("min-savings").pipe(
  Flag.withDescription(
    `Fewest tokens worth an eviction; below it nothing changes (default ${DEFAULT_MIN_SAVINGS})`
  ),
  Flag.withDefault(DEFAULT_MIN_SAVINGS)
)

const nonNegative = (flag: string, value: number): Effect.Effect<number, CliFailure> =>
  Number.isSafeInteger(value) && value >= 0 ? Effect.succeed(value) : Effect.fail(
    new CliFailure({ code: ExitCode.Usage, message: `--${flag} must be a non-negative integer, got ${value}` })
  )

const outPath = (option: Option.Option<string>): string | undefined => Option.getOrUndefined(option)

// ============================================================================
// inspect
// ============================================================================

const inspect = Command.make(
  "inspect",
  {
    file,
    json,
    html: Flag.String("html").pipe(
      Flag.withDescription("Also write a self-contained HTML report (a timeline of the session) to this file"),
      Flag.optional
    ),
    keepRecent,
    minSavings
  },
  Effect.fnUntraced(function* (input) {
    const keep = yield* nonNegative("keep-recent", input.keepRecent)
    const savings = yield* nonNegative("min-savings", input.minSavings)
    const session = yield* readSession(input.file)
    const analysis = analyze(session, { file: input.file, keepRecent: keep, minSavings: savings })
    if (Option.isSome(input.html)) {
      yield* writeText(input.html.value, renderHtml(analysis))
      yield* status(`wrote ${input.html.value}`)
    }
    yield* writeText(
      undefined,
      input.json ? prettyJson(analysis.report) : formatInspect(analysis.report, { color: useColor() })
    )
  })
).pipe(
  Command.withDescription(
    "Show what a session holds (messages, turns, tokens, composition), where the default policy would cut, what " +
      "eviction would free, superseded reads, hot paths and validation problems"
  ),
  Command.withExamples([
    { command: "compaction inspect session.jsonl", description: "Summary for a person" },
    { command: "compaction inspect session.jsonl --json", description: "The same as JSON, for scripts" },
    { command: "compaction inspect session.jsonl --html report.html", description: "Also write an HTML timeline" }
  ])
)

// ============================================================================
// evict
// ============================================================================

const evict = Command.make(
  "evict",
  { file, keepRecent, minSavings, out },
  Effect.fnUntraced(function* (input) {
    const keep = yield* nonNegative("keep-recent", input.keepRecent)
    const savings = yield* nonNegative("min-savings", input.minSavings)
    const session = yield* readSession(input.file)
    const messages = session.messages
    const result = evictStaleToolResults(messages, keep, {
      minSavings: savings,
      pinned: HotPaths.fromMessages(messages).pinned
    })
    const by = { superseded: 0, modified: 0, stale: 0 }
    for (const o of result.offloaded) by[o.reason]++
    const before = estimateTokens(messages)
    yield* result.offloaded.length === 0 ? status("nothing to offload; the output is the input unchanged") : status(
      `offloaded ${result.offloaded.length} tool results (${by.superseded} superseded, ${by.modified} modified, ` +
        `${by.stale} stale), freed ${fmt(result.tokensFreed)} tokens: ${fmt(before)} → ${
          fmt(before - result.tokensFreed)
        }`
    )
    yield* writeText(outPath(input.out), prettyJson(sessionOutput(session, result.messages)))
  })
).pipe(
  Command.withDescription(
    "Replace stale tool output (superseded and modified reads, old results) with short pointers; every tool call " +
      "keeps its result"
  )
)

// ============================================================================
// compact
// ============================================================================

const SummarizerChoice = ["extractive", "anthropic"] as const

const missingKey = "ANTHROPIC_API_KEY is not set; set it, or use --summarizer extractive (the default)"

/** The session id for `--log`, derived from the file name when `--session-id` is absent. */
const sessionIdFor = (path: Path.Path, filePath: string): string => {
  const base = path.basename(filePath).replace(/\.(jsonl?|txt)$/i, "")
  const id = base.replace(/[^A-Za-z0-9._-]/g, "-").replace(/^[^A-Za-z0-9]+/, "").slice(0, 128)
  return id.length > 0 ? id : "session"
}

const persistFailure = (directory: string, error: unknown) =>
  new CliFailure({
    code: ExitCode.Persist,
    message: `could not persist to --log ${directory}: ${describeUnknown(error)}`
  })

/**
 * Makes the log hold the session: appends the messages to an empty log, or the new ones when the log already holds
 * a prefix of them. A log holding a different conversation is an error (pick another `--session-id`).
 */
const seedLog = (directory: string, messages: ReadonlyArray<Message>) =>
  Effect.gen(function* () {
    const log = yield* SessionLog
    const { view } = yield* log.snapshot
    const prefix = view.length <= messages.length &&
      view.every((m, i) => m === messages[i] || canonicalJson(m) === canonicalJson(messages[i]))
    if (!prefix) {
      return yield* new CliFailure({
        code: ExitCode.Persist,
        message:
          `--log ${directory}: session ${JSON.stringify(log.sessionId)} already holds a different conversation; ` +
          "pass another --session-id or another directory"
      })
    }
    if (view.length < messages.length) {
      yield* log.append(messages.slice(view.length)).pipe(Effect.mapError((e) => persistFailure(directory, e)))
    }
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

const compact = Command.make(
  "compact",
  {
    file,
    summarizer: Flag.Literals("summarizer", SummarizerChoice).pipe(
      Flag.withDescription("extractive: offline, no model (default); anthropic: the Messages API (ANTHROPIC_API_KEY)"),
      Flag.withDefault("extractive" as const)
    ),
    fallback: Flag.Literals("fallback", ["extractive"] as const).pipe(
      Flag.withDescription("When the anthropic summarizer fails, compact with the extractive one instead of failing"),
      Flag.optional
    ),
    focus: Flag.String("focus").pipe(
      Flag.withDescription("What the summary should focus on (like /compact <focus>)"),
      Flag.optional
    ),
    keepRecentTokens: Flag.Int("keep-recent-tokens").pipe(
      Flag.withDescription(`Recent context kept verbatim, in tokens (default ${fmt(DEFAULT_KEEP_RECENT_TOKENS)})`),
      Flag.withDefault(DEFAULT_KEEP_RECENT_TOKENS)
    ),
    keepRecentTurns: Flag.Int("keep-recent-turns").pipe(
      Flag.withDescription(`Whole turns always kept verbatim (default ${DEFAULT_KEEP_RECENT_TURNS})`),
      Flag.withDefault(DEFAULT_KEEP_RECENT_TURNS)
    ),
    out,
    log: Flag.String("log").pipe(
      Flag.withDescription("Persist the session and the compaction boundary to <dir>/<session-id>.jsonl"),
      Flag.optional
    ),
    sessionId: Flag.String("session-id").pipe(
      Flag.withDescription("Session id for --log (default: the file name without extension)"),
      Flag.optional
    )
  },
  Effect.fnUntraced(function* (input) {
    const policy = CompactionPolicy.make({
      keepRecentTokens: input.keepRecentTokens,
      keepRecentTurns: input.keepRecentTurns
    })
    if (Result.isFailure(policy)) {
      const e = policy.failure
      const flag = e.field === "keepRecentTurns" ? "--keep-recent-turns" : "--keep-recent-tokens"
      return yield* new CliFailure({ code: ExitCode.Usage, message: `${flag} ${String(e.value)}: ${e.reason}` })
    }
    const fallback = Option.isSome(input.fallback)
    if (fallback && input.summarizer !== "anthropic") {
      return yield* new CliFailure({
        code: ExitCode.Usage,
        message: "--fallback only applies to --summarizer anthropic"
      })
    }

    // the API key is checked before anything is read or sent
    let kind: "extractive" | "anthropic" = input.summarizer
    if (kind === "anthropic") {
      const key = yield* Config.option(Config.String("ANTHROPIC_API_KEY")).pipe(
        Effect.orElseSucceed(() => Option.none<string>())
      )
      if (Option.isNone(key) || key.value.trim().length === 0) {
        if (!fallback) return yield* new CliFailure({ code: ExitCode.Summarizer, message: missingKey })
        yield* status("ANTHROPIC_API_KEY is not set; compacting with the extractive summarizer (--fallback extractive)")
        kind = "extractive"
      }
    }

    const session = yield* readSession(input.file)
    // loaded on demand: the Anthropic SDK takes a while to load and only this command needs it
    const { compactContext } = yield* Effect.promise(() => import("../Compact.ts"))
    const { AnthropicSummarizer, ExtractiveSummarizer, Summarizer } = yield* Effect.promise(() =>
      import("../Summarizer.ts")
    )
    const progress = progressLine("summarizing")
    const summarizerLayer: Layer.Layer<Summarizer, CliFailure> = kind === "extractive"
      ? ExtractiveSummarizer.layer
      : (fallback ? AnthropicSummarizer.layerWithFallback : AnthropicSummarizer.layerConfig)({
        onProgress: progress.update
      }).pipe(
        Layer.catchTag("ConfigError", (e) =>
          Layer.effect(
            Summarizer,
            Effect.fail(
              new CliFailure({ code: ExitCode.Summarizer, message: `summarizer configuration: ${describeUnknown(e)}` })
            )
          ))
      )
    if (kind === "anthropic") yield* status(`summarizing with the anthropic summarizer…`)

    const run = compactContext(
      session.messages,
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
      onNone: () => run.pipe(Effect.provide(summarizerLayer)),
      onSome: (directory) =>
        Effect.gen(function* () {
          const path = yield* Path.Path
          const sessionId = Option.getOrElse(input.sessionId, () => sessionIdFor(path, input.file))
          const logLayer = SessionLog.layerJsonl({ directory, sessionId }).pipe(
            Layer.catchTag(
              "SessionLogError",
              (e) => Layer.effect(SessionLog, Effect.fail(persistFailure(directory, e)))
            )
          )
          return yield* seedLog(directory, session.messages).pipe(
            Effect.andThen(run),
            Effect.provide(Layer.merge(summarizerLayer, logLayer))
          )
        })
    })
    yield* status(outcomeLine(result.outcome))
    if (Option.isSome(input.log) && result.outcome._tag !== "Skipped") {
      yield* status(`recorded the compaction in ${input.log.value}`)
    }
    yield* writeText(outPath(input.out), prettyJson(sessionOutput(session, result.messages)))
  })
).pipe(
  Command.withDescription(
    "Summarize the older part of a session and keep the recent tail verbatim (tool-safe cut, default policy)"
  ),
  Command.withExamples([
    { command: "compaction compact session.jsonl --out compacted.json", description: "Offline, extractive summary" },
    {
      command: 'compaction compact session.jsonl --summarizer anthropic --focus "the auth refactor" -o out.json',
      description: "Summarize with the Messages API (needs ANTHROPIC_API_KEY)"
    }
  ])
)

// ============================================================================
// validate / repair
// ============================================================================

const validate = Command.make(
  "validate",
  { file, json },
  Effect.fnUntraced(function* (input) {
    const session = yield* readSession(input.file)
    const violations = validateMessages(session.messages).map(violationReport)
    if (input.json) {
      yield* writeText(
        undefined,
        prettyJson({ file: input.file, messages: session.messages.length, valid: violations.length === 0, violations })
      )
    } else if (violations.length === 0) {
      yield* writeText(undefined, `${input.file}: valid (${fmt(session.messages.length)} messages)\n`)
    } else {
      yield* writeText(
        undefined,
        `${input.file}: ${violations.length} violations\n${
          violations.map((v) => `${v._tag}: ${v.description}\n`).join("")
        }`
      )
    }
    if (violations.length > 0) return yield* new CliFailure({ code: ExitCode.Violations, message: "" })
  })
).pipe(
  Command.withDescription(
    "Check the Messages API's structural rules (tool pairing, roles, empty content); exits 1 on violations"
  )
)

const repair = Command.make(
  "repair",
  { file, out },
  Effect.fnUntraced(function* (input) {
    const session = yield* readSession(input.file)
    const { messages, report } = repairMessages(session.messages)
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
    yield* status(
      done.length === 0 ? "already valid; the output is the input unchanged" : `repaired: ${done.join(", ")}`
    )
    yield* writeText(outPath(input.out), prettyJson(sessionOutput(session, messages)))
  })
).pipe(Command.withDescription("Fix what validate reports, with the smallest changes; the output always validates"))

// ============================================================================
// simulate
// ============================================================================

const simulate = Command.make(
  "simulate",
  {
    file,
    json,
    systemTokens: Flag.Int("system-tokens").pipe(
      Flag.withDescription("Tokens of system prompt and tools in every request (default: the file's system prompt)"),
      Flag.optional
    )
  },
  Effect.fnUntraced(function* (input) {
    const session = yield* readSession(input.file)
    const systemTokens = Option.isSome(input.systemTokens)
      ? yield* nonNegative("system-tokens", input.systemTokens.value)
      : estimateContentTokens(session.system ?? "")
    const report = simulateSession(session.messages, { systemTokens })
    if (input.json) {
      const policies = report.policies.map(({ perRequest: _, ...rest }) => rest)
      yield* writeText(undefined, prettyJson({ file: input.file, ...report, policies }))
    } else yield* writeText(undefined, `${formatReport(report, { title: input.file })}\n`)
  })
).pipe(
  Command.withDescription(
    "Replay the session under several context policies and compare tokens sent, cache use and cost"
  )
)

// ============================================================================
// Root
// ============================================================================

/** The `compaction` command with all its subcommands. @category commands */
export const compaction = Command.make("compaction").pipe(
  Command.withDescription("Inspect, evict, compact, validate and repair LLM agent sessions (Anthropic Messages API)"),
  Command.withSubcommands([inspect, evict, compact, validate, repair, simulate, replay])
)
