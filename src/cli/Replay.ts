/**
 * The loops behind `compaction replay FILE` (the command's tree is in `Commands.ts`, its handler in `Sessions.ts`).
 *
 * `replaySession` is what the command runs: the simulator's replay engine (`Simulate`'s, the one `simulate` and the
 * HTML report run) over `Conversation`'s pure transitions, each reply recorded with the usage its own request is
 * predicted to be billed (never the recorded usage of the original, different, view: that only calibrates sizes).
 * With a log, every change is stored as `Conversation.layerLogged` stores it; with `resumeEvery` N, the conversation
 * is resumed from the log (`resumeState`) after every N-th request, so a resumed replay must send the same requests,
 * byte for byte, as an uninterrupted one.
 *
 * `replayMessages` drives the `Conversation` service itself with given usage (the tests use it to hold the service
 * and the engine to the same requests).
 *
 * @since 0.1.0
 */
import type { CacheBreakpointError } from "../Cache.ts"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { Conversation, type ConversationError, type ConversationOptions } from "../Conversation.ts"
import { asMessageParams, type ConversationState } from "../ConversationState.ts"
import type { Request } from "../Request.ts"
import { resumeState } from "../internal/conversation/resume.ts"
import type { Message } from "../Message.ts"
import type { ReportedUsage } from "../Policy.ts"
import { SessionLog, type SessionLogError, type SessionLogShape } from "../SessionLog.ts"
import type { MemorySessions } from "../SessionStore.ts"
import type { PolicyReport, RecordedSession, SimPolicy, SimulateOptions } from "../Simulate.ts"
import { requestBytes } from "../internal/requestBytes.ts"
import { recordChange } from "../internal/conversation/record.ts"
import { prepareSession, type ReplayChange, replaySteps, settingsOf } from "../internal/simulate/replay.ts"
import type { Summarizer } from "../Summarizer.ts"
import { validate } from "../Validate.ts"
import type { CompactionRetention, RemovalTally, RequestEvent } from "../internal/simulate/model.ts"

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
  /** The bytes of every request's JSON body, summed (`uploadBytes`): what the replay uploads. */
  readonly uploadedBytes?: number | undefined
  /** On threads: the requests that started a new thread after the first (`PolicyReport.threadRestarts`). */
  readonly threadRestarts?: number | undefined
  /**
   * The thinking blocks the requests sent after a rewrite invalidated them (`PolicyReport.thinkingDropped`: the API
   * drops or refuses each); absent when none (the default: append-only, compactions keep no stale thinking).
   */
  readonly thinkingDropped?: number | undefined
}

/**
 * The bytes a request uploads: its JSON body in UTF-8 (what `client.messages.create` sends, `model` and `max_tokens`
 * aside). Each message's bytes are counted once per message object. @category replay
 */
export const uploadBytes = (request: Request): number => requestBytes(request)

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
  E | SessionLogError | ConversationError<unknown> | CacheBreakpointError,
  R | Summarizer
> =>
  Effect.gen(function* () {
    const params = asMessageParams(messages)
    const every = options.resumeEvery
    const log: Layer.Layer<SessionLog, SessionLogError, R> | undefined = options.log ??
      (every === undefined ? undefined : SessionLog.layerMemory({ store: new Map() as MemorySessions }))
    let requests = 0
    let compactions = 0
    let evictions = 0
    let offloadedResults = 0
    let invalidRequests = 0
    let resumes = 0
    let uploadedBytes = 0
    const starts = segmentStarts(params, every)
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
          if (validate(prepared.fullRequest?.messages ?? prepared.request.messages).length > 0) invalidRequests++
          uploadedBytes += uploadBytes(prepared.request)
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
    return { requests, compactions, evictions, offloadedResults, invalidRequests, resumes, uploadedBytes }
  })

// ============================================================================
// The engine's replay (what `compaction replay` runs)
// ============================================================================

/** The tokens of one request, as the engine predicts the provider bills them. @category models */
export interface RequestTokens {
  /** Index of the recorded reply this request produced. */
  readonly message: number
  readonly cacheRead: number
  readonly cacheWrite: number
  /** Uncached input tokens. */
  readonly input: number
  readonly output: number
}

/** The per-request tokens of a policy's replay. @category models */
export const requestTokensOf = (report: PolicyReport): ReadonlyArray<RequestTokens> =>
  report.perRequest.map((r) => ({
    message: r.index,
    cacheRead: r.cacheRead,
    cacheWrite: r.cacheWrite,
    input: r.input,
    output: r.output
  }))

/** One compaction of a replay and what of its span the next request holds. @category models */
export interface CompactionRetentionRow extends CompactionRetention {
  /** The compaction's number, from 1. */
  readonly compaction: number
  /** The request sent right after it, numbered from 1 as `replay --out` numbers them. */
  readonly request: number
  /** Index of the recorded reply that request produced. */
  readonly message: number
  /** What the compaction removed (its outcome's records, tallied), with the first references `recall` answers. */
  readonly removed?: RemovalTally | undefined
}

/** The retention of each compaction of a policy's replay, in order (the engine's, from its per-request figures). @category models */
export const retentionRowsOf = (report: PolicyReport): ReadonlyArray<CompactionRetentionRow> => {
  const rows: Array<CompactionRetentionRow> = []
  report.perRequest.forEach((r, i) => {
    if (r.retention !== undefined) {
      rows.push({
        compaction: rows.length + 1,
        request: i + 1,
        message: r.index,
        ...r.retention,
        ...(r.removed === undefined ? {} : { removed: r.removed })
      })
    }
  })
  return rows
}

/** What `replaySession` did: the summary, the per-request tokens, and the engine's full report. @category models */
export interface SessionReplay {
  readonly summary: ReplaySummary
  readonly tokens: ReadonlyArray<RequestTokens>
  readonly report: PolicyReport
}

/**
 * The summary of an engine replay: its counts from the report, `invalidRequests` and `resumes` as the driver saw them.
 * @category replay
 */
export const replaySummaryOf = (report: PolicyReport, invalidRequests: number, resumes: number): ReplaySummary => ({
  requests: report.requests,
  compactions: report.compactions,
  evictions: report.evictions,
  offloadedResults: report.offloadedResults,
  invalidRequests,
  resumes
})

/** Options of `replaySession`. @category models */
export interface SessionReplayOptions<E, R> {
  /** The simulator's options (the compaction policy, prices…), as `simulate` takes them. */
  readonly simulate?: SimulateOptions | undefined
  /** Resume the conversation from the log after every this many-th request (absent: never). */
  readonly resumeEvery?: number | undefined
  /** The log every change is stored in; default a fresh in-memory one when `resumeEvery` is set, none otherwise. */
  readonly log?: Layer.Layer<SessionLog, SessionLogError, R> | undefined
  /** Called with each request (numbered from 1) and its predicted usage, in order. */
  readonly onRequest?: ((n: number, event: RequestEvent) => Effect.Effect<void, E, R>) | undefined
}

/**
 * Replays a recorded session under `policy` with the replay engine (see the module doc): the same requests, usage
 * and counts as `simulatePolicy(session, policy, options.simulate)`, every request checked with `validate`.
 * @category replay
 */
export const replaySession = <E = never, R = never>(
  session: RecordedSession,
  policy: SimPolicy,
  options: SessionReplayOptions<E, R> = {}
): Effect.Effect<SessionReplay, E | SessionLogError, R> =>
  Effect.gen(function* () {
    const simulateOptions = options.simulate ?? {}
    const every = options.resumeEvery
    const logLayer: Layer.Layer<SessionLog, SessionLogError, R> | undefined = options.log ??
      (every === undefined ? undefined : SessionLog.layerMemory({ store: new Map() as MemorySessions }))
    const steps = replaySteps(prepareSession(session, simulateOptions), policy, settingsOf(simulateOptions))
    const total = session.messages.filter((m) => m.role === "assistant").length
    let invalid = 0
    let resumes = 0
    let uploaded = 0
    let n = 0
    const persist = (log: SessionLogShape | undefined, changes: ReadonlyArray<ReplayChange>) =>
      log === undefined
        ? Effect.void
        : Effect.forEach(changes, (c) => recordChange(log, c.change, c.before, c.after), { discard: true })
    // one segment per log opening: it runs until the engine ends or a resume point
    const segment = (log: SessionLogShape | undefined, resumed: ConversationState | undefined) =>
      Effect.gen(function* () {
        let next = steps.next(resumed)
        while (next.done !== true) {
          const { changes, event } = next.value
          n++
          yield* persist(log, changes)
          if (validate(event.prompt).length > 0) invalid++
          uploaded += event.figures.uploadedBytes
          if (options.onRequest !== undefined) yield* options.onRequest(n, event)
          if (every !== undefined && n % every === 0 && n < total) return undefined
          next = steps.next()
        }
        yield* persist(log, next.value.changes)
        return next.value.report
      })
    let report: PolicyReport | undefined
    let first = true
    while (report === undefined) {
      if (logLayer === undefined) report = yield* segment(undefined, undefined)
      else {
        const opened = Effect.gen(function* () {
          const log = yield* SessionLog
          const state = first ? undefined : resumeState(yield* log.loaded)
          return yield* segment(log, state)
        })
        report = yield* opened.pipe(Effect.provide(Layer.fresh(logLayer), { local: true }))
        if (!first) resumes++
        first = false
      }
    }
    return {
      summary: {
        ...replaySummaryOf(report, invalid, resumes),
        uploadedBytes: uploaded,
        ...(simulateOptions.threads === true ? { threadRestarts: report.threadRestarts } : {}),
        ...(report.thinkingDropped > 0 ? { thinkingDropped: report.thinkingDropped } : {})
      },
      tokens: requestTokensOf(report),
      report
    }
  })

/**
 * Where a replay resumed every `every` requests starts its segments: 0, then the index of every `every`-th reply (the
 * session is closed and resumed right before that request's prepare). `[0]` without `every`.
 */
export const segmentStarts = (
  messages: ReadonlyArray<{ readonly role: string }>,
  every: number | undefined
): Array<number> => {
  const starts = [0]
  let replies = 0
  messages.forEach((m, i) => {
    if (m.role !== "assistant") return
    if (every !== undefined && replies > 0 && replies % every === 0) starts.push(i)
    replies++
  })
  return starts
}
