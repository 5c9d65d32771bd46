/**
 * The commands of the `compaction` CLI, built with `effect/cli`: `inspect`, `evict`, `compact`, `validate`, `repair`,
 * `simulate`, `replay`, `retention` and `sessions`. This module holds only the command tree (names, flags,
 * descriptions); each handler loads its work from `Handlers.ts` or `Sessions.ts` on demand, so `--help` and a parse
 * error do not load the library. Handlers read the session with `readInput` (a session log, or any format
 * `readSession` imports), write their result to stdout or `--out`, report on stderr, and fail with `CliFailure` and a
 * documented exit code (see `Run.ts`).
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import { Argument, CliConfig, Command, Flag, GlobalFlag } from "effect/cli"
import { DEFAULT_KEEP_RECENT } from "../Evict.ts"
import { defaultPolicy } from "../Policy.ts"

const fmt = (n: number): string => n.toLocaleString("en-US")

/** The handlers, loaded when a command runs. */
const handlers = Effect.promise(() => import("./Handlers.ts"))
/** The handlers over stored sessions (`replay`, `sessions`), loaded when one runs. */
const sessionHandlers = Effect.promise(() => import("./Sessions.ts"))

// ============================================================================
// Shared parameters
// ============================================================================

/** The session a command reads; of a session log, `reading` is what it reads: its view or its whole history. */
const sessionFile = (reading: "view" | "history") =>
  Argument.String("file").pipe(
    Argument.withDescription(
      "The session: a JSON message array, an Anthropic Messages request, Claude Code or pi JSONL, or a session log " +
        `DIR/S.jsonl (its ${reading}); - reads stdin`
    )
  )

const file = sessionFile("view")

const json = Flag.Boolean("json").pipe(Flag.withDescription("Print the result as JSON"), Flag.withDefault(false))

const strict = Flag.Boolean("strict").pipe(
  Flag.withDescription(
    "Fail instead of warning: exit 7 when the input has corrupt lines; exit 1 when evict or compact is given an input that breaks the API's rules"
  ),
  Flag.withDefault(false)
)

const out = Flag.String("out").pipe(
  Flag.withAlias("o"),
  Flag.withDescription(
    "Write the resulting session here instead of stdout (- is stdout). Messages hold only role and content; " +
      "other fields (the importer's _usage, _api_message_id, …) go to meta.messages"
  ),
  Flag.optional
)

const keepPrivate = Flag.Boolean("keep-private").pipe(
  Flag.withDescription("Keep the messages' private fields (_usage, …) inline; the Messages API rejects them"),
  Flag.withDefault(false)
)

const keepRecent = Flag.Int("keep-recent").pipe(
  Flag.withDescription(`Tool results kept verbatim, newest first (default ${DEFAULT_KEEP_RECENT})`),
  Flag.withDefault(DEFAULT_KEEP_RECENT)
)

/** `--context-window`: the model's window, for the commands that replay a session. */
const contextWindow = Flag.Int("context-window").pipe(
  Flag.withDescription(`The model's context window (default ${fmt(defaultPolicy.contextWindow)})`),
  Flag.withDefault(defaultPolicy.contextWindow)
)

const keepRecentTokens = Flag.Int("keep-recent-tokens").pipe(
  Flag.withDescription(`Recent context kept verbatim, in tokens (default ${fmt(defaultPolicy.keepRecentTokens)})`),
  Flag.withDefault(defaultPolicy.keepRecentTokens)
)

const keepRecentTurns = Flag.Int("keep-recent-turns").pipe(
  Flag.withDescription(`Whole turns always kept verbatim (default ${defaultPolicy.keepRecentTurns})`),
  Flag.withDefault(defaultPolicy.keepRecentTurns)
)

/** `--log DIR`: the directory of session logs a command persists to; what it persists is the command's own. */
const sessionLog = (description: string) => Flag.String("log").pipe(Flag.withDescription(description), Flag.optional)

/** Absent: the library's default, rent-or-buy (`evictStaleToolResults` and `Conversation` without `minSavings`). */
const minSavings = (whenAbsent: string) =>
  Flag.Int("min-savings").pipe(
    Flag.withDescription(
      "Fewest tokens worth an eviction; below it nothing changes (default: rent-or-buy (offload once the cache reads " +
        `already paid reach the cost of rewriting the prompt behind the change)${whenAbsent})`
    ),
    Flag.optional
  )

/** `Command.withExamples` from pairs of a command line and what it shows. */
const examples = (...pairs: ReadonlyArray<readonly [command: string, description: string]>) =>
  Command.withExamples(pairs.map(([command, description]) => ({ command, description })))

// ============================================================================
// Commands
// ============================================================================

/** The recorded session `replay` and `retention` run through `Conversation`. */
const recorded = Argument.String("file").pipe(
  Argument.withDescription("The recorded session (any format `inspect` reads; of a session log, its whole history)")
)

/** `--compact-at-tokens`: the trigger of the replayed policy (absent: the library's default). */
const compactAtTokens = Flag.Int("compact-at-tokens").pipe(
  Flag.withDescription(
    `Compact once the reported context passes this many tokens (default ${fmt(defaultPolicy.compactAtTokens)})`
  ),
  Flag.optional
)

/**
 * `--keep-recent-tokens` and `--keep-recent-turns` of a replayed policy: absent, the policy sizes them from its trigger
 * (as `CompactionPolicy.make` does), so `--compact-at-tokens` alone gives a valid policy.
 */
const replayKeepRecentTokens = Flag.Int("keep-recent-tokens").pipe(
  Flag.withDescription(
    `Recent context kept verbatim, in tokens (default: sized from the trigger, ${
      fmt(defaultPolicy.keepRecentTokens)
    } at the default one)`
  ),
  Flag.optional
)
const replayKeepRecentTurns = Flag.Int("keep-recent-turns").pipe(
  Flag.withDescription(`Whole turns always kept verbatim (default ${defaultPolicy.keepRecentTurns})`),
  Flag.optional
)

/** The policy a replay runs under: the flags `replay` and `retention` share, so both replay a session alike. */
const replayPolicy = {
  keepRecent,
  minSavings: minSavings(""),
  keepRecentTokens: replayKeepRecentTokens,
  keepRecentTurns: replayKeepRecentTurns,
  contextWindow,
  compactAtTokens
}

const store = Flag.String("store").pipe(
  Flag.withDescription("A PostgreSQL session store (postgres://…), as SessionStoreSql.layerPg reads it"),
  Flag.optional
)

const inspect = Command.make(
  "inspect",
  {
    file: Argument.String("file").pipe(
      Argument.withDescription(
        "The session: a JSON message array, an Anthropic Messages request, Claude Code or pi JSONL, or a session " +
          "log DIR/S.jsonl (its view); - reads stdin. Omit it with --store"
      ),
      Argument.optional
    ),
    store,
    sessionId: Flag.String("session-id").pipe(
      Flag.withDescription("With --store: the session to read"),
      Flag.optional
    ),
    json,
    html: Flag.String("html").pipe(
      Flag.withDescription(
        "Also write a self-contained HTML report (tokens and cost per request under the default policy and under no " +
          "compaction, the policy comparison, the largest tool results, the message timeline) to this file"
      ),
      Flag.optional
    ),
    keepRecent,
    minSavings: minSavings(""),
    strict
  },
  (input) => Effect.flatMap(handlers, (h) => h.inspect(input))
).pipe(
  Command.withDescription(
    "Show what a session holds (messages, turns, tokens, system prompt and tools, composition), where the default " +
      "policy would cut, what eviction would free, superseded reads, hot paths and validation problems"
  ),
  examples(
    ["compaction inspect session.jsonl", "Summary for a person"],
    ["compaction inspect session.jsonl --json", "The same as JSON, for scripts"],
    ["compaction inspect session.jsonl --html report.html", "Also write the HTML report"],
    ["compaction inspect logs/demo.jsonl", "The view a session log holds"],
    [
      "compaction inspect --store postgres://postgres@127.0.0.1:5432/test --session-id shared",
      "A session stored in PostgreSQL"
    ]
  )
)

const evict = Command.make(
  "evict",
  {
    file,
    keepRecent,
    minSavings: minSavings(
      "; a file records no cache state, so the rule counts every recorded reply as a request that read the cache"
    ),
    out,
    keepPrivate,
    strict
  },
  (input) => Effect.flatMap(handlers, (h) => h.evict(input))
).pipe(
  Command.withDescription(
    "Replace stale tool output (superseded and modified reads, old results) with short pointers; every tool call " +
      "keeps its result"
  ),
  examples(
    ["compaction evict session.jsonl | compaction compact - -o out.json", "Evict, then compact"]
  )
)

/** The summarizers `compact --summarizer` accepts. @category constants */
export const SummarizerChoice = ["extractive", "anthropic"] as const

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
    keepRecentTokens,
    keepRecentTurns,
    out,
    keepPrivate,
    log: sessionLog(
      "Persist the session and the compaction boundary to <dir>/<session-id>.jsonl; an existing session goes on " +
        "when its view (or its stored messages) starts the input: the new messages are added"
    ),
    sessionId: Flag.String("session-id").pipe(
      Flag.withDescription("Session id for --log (default: the file name without .anthropic.json, .json or .jsonl)"),
      Flag.optional
    ),
    strict
  },
  (input) => Effect.flatMap(handlers, (h) => h.compact(input))
).pipe(
  Command.withDescription(
    "Summarize the older part of a session and keep the recent tail verbatim (tool-safe cut, default policy)"
  ),
  examples(
    ["compaction compact session.jsonl --out compacted.json", "Offline, extractive summary"],
    [
      'compaction compact session.jsonl --summarizer anthropic --focus "the auth refactor" -o out.json',
      "Summarize with the Messages API (needs ANTHROPIC_API_KEY)"
    ]
  )
)

const validate = Command.make(
  "validate",
  { file, json, strict },
  (input) => Effect.flatMap(handlers, (h) => h.validate(input))
).pipe(
  Command.withDescription(
    "Check the Messages API's structural rules (tool pairing, roles, empty content); exits 1 on violations"
  )
)

const repair = Command.make(
  "repair",
  { file, out, keepPrivate, strict },
  (input) => Effect.flatMap(handlers, (h) => h.repair(input))
).pipe(Command.withDescription("Fix what validate reports, with the smallest changes; the output always validates"))

const simulate = Command.make(
  "simulate",
  {
    file: sessionFile("history"),
    json,
    systemTokens: Flag.Int("system-tokens").pipe(
      Flag.withDescription(
        "Tokens of system prompt and tools in every request (default: the file's system prompt and tools)"
      ),
      Flag.optional
    ),
    sweep: Flag.Boolean("sweep").pipe(
      Flag.withDescription(
        "Sweep the library's settings: cost, misses and retention of each, and the Pareto front of cost and retention"
      ),
      Flag.withDefault(false)
    ),
    strict
  },
  (input) => Effect.flatMap(handlers, (h) => h.simulate(input))
).pipe(
  Command.withDescription(
    "Replay the session under several context policies and compare tokens sent, cache use and cost"
  )
)

/** `compaction replay FILE`. @category commands */
export const replay = Command.make(
  "replay",
  {
    file: recorded,
    out: Flag.String("out").pipe(
      Flag.withDescription(
        "Write every request to DIR/request-0001.json, … ({ system?, messages }) and its predicted usage beside it " +
          "(request-0001.usage.json, …); after a compaction, the messages it summarized (summarized-NNNN.json)"
      ),
      Flag.optional
    ),
    log: sessionLog("Persist the conversation to DIR/<session-id>.jsonl, a new session (resumes use it)"),
    sessionId: Flag.String("session-id").pipe(
      Flag.withDescription("Session id for --log (default: replay)"),
      Flag.withDefault("replay")
    ),
    resumeEvery: Flag.Int("resume-every").pipe(
      Flag.withDescription("Close the session and resume it from the log every N steps (requests)"),
      Flag.optional
    ),
    json: Flag.Boolean("json").pipe(Flag.withDescription("Print the summary as JSON"), Flag.withDefault(false)),
    threads: Flag.Boolean("threads").pipe(
      Flag.withDescription(
        "Send on server-held threads (API-RULES 22-24): each request continues the previous reply with only the new " +
          "messages while the view only grew, and starts a new thread with the whole view after any rewrite"
      ),
      Flag.withDefault(false)
    ),
    cacheOnlyRewrites: Flag.Boolean("cache-only-rewrites").pipe(
      Flag.withDescription(
        "With --threads, price a rewrite by the cache alone: no thread restart cost and no offloads batched with " +
          "compactions, so the replay makes the decisions it makes without threads"
      ),
      Flag.withDefault(false)
    ),
    html: Flag.String("html").pipe(
      Flag.withDescription(
        "Also write the HTML report: tokens and cost per request (cache read, cache write, uncached) under this " +
          "policy and under no compaction, compactions, evictions, the policy comparison (- is stdout)"
      ),
      Flag.optional
    ),
    ...replayPolicy
  },
  (input) => Effect.flatMap(sessionHandlers, (h) => h.replay(input))
).pipe(
  Command.withDescription(
    "Replay a recorded session through Conversation as an agent would (prepare before each reply, then record it " +
      "with the usage its request is predicted to be billed, as simulate does)"
  ),
  examples(
    ["compaction replay session.jsonl --json", "Requests, compactions, evictions, invalid"],
    ["compaction replay session.jsonl --html report.html", "The report, request by request"],
    [
      "compaction replay session.jsonl --out requests --log logs --resume-every 7",
      "Write every request, persist, and resume from the log every 7 requests"
    ],
    [
      "compaction replay session.jsonl --threads --out requests --json",
      "Write every request as it goes on a thread; the summary counts the bytes uploaded"
    ]
  )
)

/** `compaction retention FILE`. @category commands */
export const retention = Command.make(
  "retention",
  {
    file: recorded,
    json: Flag.Boolean("json").pipe(Flag.withDescription("Print the retention as JSON"), Flag.withDefault(false)),
    ...replayPolicy
  },
  (input) => Effect.flatMap(sessionHandlers, (h) => h.retention(input))
).pipe(
  Command.withDescription(
    "Replay a recorded session as replay does and print, per compaction, the share of the removed span's anchors " +
      "(paths, commands, errors, identifiers, instructions, plan) present in the next request, the kept tail apart"
  ),
  examples(
    ["compaction retention session.jsonl", "One table per compaction"],
    ["compaction retention session.jsonl --keep-recent-tokens 4000 --json", "The same as JSON, keeping less"]
  )
)

const sessions = Command.make(
  "sessions",
  {
    directory: Argument.String("dir").pipe(
      Argument.withDescription("A directory of session logs (<session-id>.jsonl). Omit it with --store"),
      Argument.optional
    ),
    store,
    json: Flag.Boolean("json").pipe(Flag.withDescription("Print the ids as a JSON array"), Flag.withDefault(false))
  },
  (input) => Effect.flatMap(sessionHandlers, (h) => h.sessions(input))
).pipe(
  Command.withDescription("List the sessions a store holds, one id a line: a directory of JSONL logs, or PostgreSQL"),
  examples(
    ["compaction sessions logs", "The sessions in logs/*.jsonl"],
    ["compaction sessions --store postgres://postgres@127.0.0.1:5432/test", "The sessions stored in PostgreSQL"]
  )
)

/** The `compaction` command with all its subcommands. @category commands */
export const compaction = Command.make("compaction").pipe(
  Command.withDescription("Inspect, evict, compact, validate and repair LLM agent sessions (Anthropic Messages API)"),
  Command.withSubcommands([inspect, evict, compact, validate, repair, simulate, replay, retention, sessions])
)

/** The subcommand names, in help order. @category constants */
export const COMMAND_NAMES = [
  "inspect",
  "evict",
  "compact",
  "validate",
  "repair",
  "simulate",
  "replay",
  "retention",
  "sessions"
] as const

/**
 * The global flags every page lists: `--help`, `--version` and `--log-level`. `--completions` still works but is
 * hidden, and the interactive `--wizard` is left out: neither applies to running a command.
 * @category commands
 */
export const cliConfig = CliConfig.layer({
  builtIns: [
    GlobalFlag.Help,
    GlobalFlag.Version,
    GlobalFlag.Action({ flag: Flag.withHidden(GlobalFlag.Completions.flag), run: GlobalFlag.Completions.run }),
    GlobalFlag.LogLevel
  ]
})
