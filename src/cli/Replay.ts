/**
 * `compaction replay FILE`: a recorded session replayed through `Conversation` exactly as an agent would run it.
 *
 * Open; for each recorded message, append it; before each recorded assistant reply, prepare the request; then record
 * that reply with its recorded usage. With `resumeEvery` N, the session is closed and resumed from its log before
 * every N-th request (a step is one request and the messages appended before it), so a resumed replay must produce the same requests, byte for byte, as an uninterrupted one.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Path from "effect/Path"
import * as FileSystem from "effect/FileSystem"
import { Argument, Command, Flag } from "effect/cli"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import {
  asMessageParams,
  Conversation,
  type ConversationError,
  type ConversationOptions,
  type Request
} from "../Conversation.ts"
import { DEFAULT_KEEP_RECENT, DEFAULT_MIN_SAVINGS } from "../Evict.ts"
import type { Message } from "../Message.ts"
import {
  CompactionPolicy,
  DEFAULT_CONTEXT_WINDOW,
  DEFAULT_KEEP_RECENT_TOKENS,
  DEFAULT_KEEP_RECENT_TURNS,
  type ReportedUsage
} from "../Policy.ts"
import { type MemoryStore, SessionLog, type SessionLogError } from "../SessionLog.ts"
import { ExtractiveSummarizer, type Summarizer } from "../Summarizer.ts"
import { validate } from "../Validate.ts"
import { CliFailure, ExitCode, prettyJson, readSession, status, writeText } from "./Run.ts"

/** What a replay did. @category models */
export interface ReplaySummary {
  readonly requests: number
  readonly compactions: number
  /** Offload passes that changed the view. */
  readonly evictions: number
  readonly offloadedResults: number
  /** Requests `validate` rejects. */
  readonly invalidRequests: number
  readonly resumes: number
}

/** Options of `replayMessages`. @category models */
export interface ReplayOptions<E, R> extends ConversationOptions {
  /** Close the session and resume it from the log before every this many-th request (absent: never). */
  readonly resumeEvery?: number | undefined
  /** The log; default a fresh in-memory one when `resumeEvery` is set, none otherwise. */
  readonly log?: Layer.Layer<SessionLog, SessionLogError, R> | undefined
  /** Called with each prepared request, numbered from 1. */
  readonly onRequest?: ((n: number, request: Request) => Effect.Effect<void, E, R>) | undefined
}

/**
 * Replays `messages` (each assistant reply with the usage at its index in `usage`) through `Conversation`. With a
 * log (or `resumeEvery`) the conversation is `Conversation.layerLogged`; otherwise `layerMemory`.
 * @category replay
 */
export const replayMessages = <E = never, R = never>(
  messages: ReadonlyArray<Message>,
  usage: ReadonlyMap<number, ReportedUsage>,
  options: ReplayOptions<E, R> = {}
): Effect.Effect<
  ReplaySummary,
  E | SessionLogError | ConversationError<unknown>,
  R | Summarizer
> =>
  Effect.gen(function* () {
    const params = asMessageParams(messages)
    const every = options.resumeEvery
    const log: Layer.Layer<SessionLog, SessionLogError, R> | undefined = options.log ??
      (every === undefined ? undefined : SessionLog.layerMemory({ store: new Map() as MemoryStore }))
    let requests = 0
    let compactions = 0
    let evictions = 0
    let offloadedResults = 0
    let invalidRequests = 0
    let resumes = 0
    // a segment ends before every `every`-th request: the session is closed and resumed right before that prepare
    const starts = [0]
    let replies = 0
    params.forEach((m, i) => {
      if (m.role !== "assistant") return
      if (every !== undefined && replies > 0 && replies % every === 0) starts.push(i)
      replies++
    })
    for (let s = 0; s < starts.length; s++) {
      const start = starts[s]!
      const end = starts[s + 1] ?? params.length
      const segment = Effect.gen(function* () {
        const conversation = yield* Conversation
        for (let i = start; i < end; i++) {
          const message = params[i]!
          if (message.role !== "assistant") {
            yield* conversation.append(message)
            continue
          }
          const prepared = yield* conversation.prepare
          requests++
          if (prepared.offloaded.length > 0) {
            evictions++
            offloadedResults += prepared.offloaded.length
          }
          if (prepared.compaction !== undefined && prepared.compaction._tag !== "Skipped") compactions++
          if (validate(prepared.request.messages).length > 0) invalidRequests++
          if (options.onRequest !== undefined) yield* options.onRequest(requests, prepared.request)
          yield* conversation.recordReply(message, usage.get(i), { requestEpoch: prepared.epoch })
        }
      })
      const conversation = log === undefined
        ? Conversation.layerMemory(options)
        : Conversation.layerLogged(options).pipe(Layer.provide(Layer.fresh(log)))
      yield* segment.pipe(Effect.provide(conversation, { local: true }))
      if (s > 0) resumes++
    }
    return { requests, compactions, evictions, offloadedResults, invalidRequests, resumes }
  })

// ============================================================================
// The command
// ============================================================================

const positive = (flag: string, value: number): Effect.Effect<number, CliFailure> =>
  Number.isSafeInteger(value) && value > 0 ? Effect.succeed(value) : Effect.fail(
    new CliFailure({ code: ExitCode.Usage, message: `--${flag} must be a positive integer, got ${value}` })
  )

const nonNegative = (flag: string, value: number): Effect.Effect<number, CliFailure> =>
  Number.isSafeInteger(value) && value >= 0 ? Effect.succeed(value) : Effect.fail(
    new CliFailure({ code: ExitCode.Usage, message: `--${flag} must be a non-negative integer, got ${value}` })
  )

const requestFile = (path: Path.Path, directory: string, n: number): string =>
  path.join(directory, `request-${String(n).padStart(4, "0")}.json`)

/** `compaction replay FILE`. @category commands */
export const replay = Command.make(
  "replay",
  {
    file: Argument.String("file").pipe(Argument.withDescription("The recorded session (any format `inspect` reads)")),
    out: Flag.String("out").pipe(
      Flag.withDescription("Write every prepared request to DIR/request-0001.json, … ({ system?, messages })"),
      Flag.optional
    ),
    log: Flag.String("log").pipe(
      Flag.withDescription("Persist the conversation to DIR/<session-id>.jsonl (resumes use it)"),
      Flag.optional
    ),
    sessionId: Flag.String("session-id").pipe(
      Flag.withDescription("Session id for --log (default: replay)"),
      Flag.withDefault("replay")
    ),
    resumeEvery: Flag.Int("resume-every").pipe(
      Flag.withDescription("Close the session and resume it from the log every N steps (requests)"),
      Flag.optional
    ),
    json: Flag.Boolean("json").pipe(Flag.withDescription("Print the summary as JSON"), Flag.withDefault(false)),
    keepRecent: Flag.Int("keep-recent").pipe(
      Flag.withDescription(`Tool results kept verbatim, newest first (default ${DEFAULT_KEEP_RECENT})`),
      Flag.withDefault(DEFAULT_KEEP_RECENT)
    ),
    minSavings: Flag.Int("min-savings").pipe(
      Flag.withDescription(`Fewest tokens worth an eviction (default ${DEFAULT_MIN_SAVINGS})`),
      Flag.withDefault(DEFAULT_MIN_SAVINGS)
    ),
    keepRecentTokens: Flag.Int("keep-recent-tokens").pipe(
      Flag.withDescription(`Recent context kept verbatim, in tokens (default ${DEFAULT_KEEP_RECENT_TOKENS})`),
      Flag.withDefault(DEFAULT_KEEP_RECENT_TOKENS)
    ),
    keepRecentTurns: Flag.Int("keep-recent-turns").pipe(
      Flag.withDescription(`Whole turns always kept verbatim (default ${DEFAULT_KEEP_RECENT_TURNS})`),
      Flag.withDefault(DEFAULT_KEEP_RECENT_TURNS)
    ),
    contextWindow: Flag.Int("context-window").pipe(
      Flag.withDescription(`The model's context window (default ${DEFAULT_CONTEXT_WINDOW})`),
      Flag.withDefault(DEFAULT_CONTEXT_WINDOW)
    )
  },
  Effect.fnUntraced(function* (input) {
    const keepRecent = yield* nonNegative("keep-recent", input.keepRecent)
    const minSavings = yield* nonNegative("min-savings", input.minSavings)
    const resumeEvery = Option.isSome(input.resumeEvery)
      ? yield* positive("resume-every", input.resumeEvery.value)
      : undefined
    const policy = CompactionPolicy.make({
      keepRecentTokens: input.keepRecentTokens,
      keepRecentTurns: input.keepRecentTurns,
      contextWindow: input.contextWindow,
      minRemaining: Math.min(20_000, Math.floor(input.contextWindow / 10))
    })
    if (Result.isFailure(policy)) {
      const e = policy.failure
      return yield* new CliFailure({ code: ExitCode.Usage, message: `${e.field} ${String(e.value)}: ${e.reason}` })
    }
    const { session } = yield* readSession(input.file, { strict: false })
    const path = yield* Path.Path
    const usage = new Map(session.usage.map((u) => [u.messageIndex, u.usage]))
    if (Option.isSome(input.log)) {
      const fs = yield* FileSystem.FileSystem
      const existing = path.join(input.log.value, `${input.sessionId}.jsonl`)
      if (yield* fs.exists(existing).pipe(Effect.orElseSucceed(() => false))) {
        return yield* new CliFailure({
          code: ExitCode.Usage,
          message: `${existing} already exists: a replay starts a new session (pass another --session-id or --log)`
        })
      }
    }
    const log = Option.isSome(input.log)
      ? SessionLog.layerJsonl({ directory: input.log.value, sessionId: input.sessionId })
      : undefined
    const out = Option.getOrUndefined(input.out)
    if (out !== undefined) yield* makeDirectory(out)
    const summary = yield* replayMessages<CliFailure, FileSystem.FileSystem | Path.Path>(session.messages, usage, {
      policy: policy.success,
      keepRecent,
      minSavings,
      system: session.system,
      resumeEvery,
      log,
      onRequest: out === undefined
        ? undefined
        : (n, request) => writeText(requestFile(path, out, n), prettyJson(request))
    }).pipe(
      Effect.provide(ExtractiveSummarizer.layer),
      Effect.mapError((e) =>
        e._tag === "CliFailure" ? e : new CliFailure({
          code: ExitCode.Persist,
          message: `replay failed: ${e.message}`
        })
      )
    )
    if (input.json) yield* writeText(undefined, prettyJson({ file: input.file, ...summary }))
    else {
      yield* writeText(
        undefined,
        `${input.file}: ${summary.requests} requests, ${summary.compactions} compactions, ${summary.evictions} ` +
          `evictions (${summary.offloadedResults} results offloaded), ${summary.invalidRequests} invalid requests, ` +
          `${summary.resumes} resumes\n`
      )
    }
    if (out !== undefined) yield* status(`wrote ${summary.requests} requests to ${out}`)
    if (summary.invalidRequests > 0) return yield* new CliFailure({ code: ExitCode.Violations, message: "" })
  })
).pipe(
  Command.withDescription(
    "Replay a recorded session through Conversation as an agent would (prepare before each reply, then record it)"
  ),
  Command.withExamples([
    { command: "compaction replay session.jsonl --json", description: "Requests, compactions, evictions, invalid" },
    {
      command: "compaction replay session.jsonl --out requests --log logs --resume-every 7",
      description: "Write every request, persist, and resume from the log every 7 messages"
    }
  ])
)

const makeDirectory = (directory: string) =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    yield* fs.makeDirectory(directory, { recursive: true }).pipe(
      Effect.mapError((e) =>
        new CliFailure({ code: ExitCode.Output, message: `cannot create ${directory}: ${e.message}` })
      )
    )
  })
