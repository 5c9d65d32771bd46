/**
 * The loop behind `compaction replay FILE` (the command's tree is in `Commands.ts`, its handler in `Sessions.ts`): a
 * recorded session replayed through `Conversation` exactly as an agent would run it.
 *
 * Open; for each recorded message, append it; before each recorded assistant reply, prepare the request; then record
 * that reply with its recorded usage. With `resumeEvery` N, the session is closed and resumed from its log before
 * every N-th request (a step is one request and the messages appended before it), so a resumed replay must produce the same requests, byte for byte, as an uninterrupted one.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import {
  asMessageParams,
  Conversation,
  type ConversationError,
  type ConversationOptions,
  type Request
} from "../Conversation.ts"
import type { Message } from "../Message.ts"
import type { ReportedUsage } from "../Policy.ts"
import { type MemoryStore, SessionLog, type SessionLogError } from "../SessionLog.ts"
import type { Summarizer } from "../Summarizer.ts"
import { validate } from "../Validate.ts"

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
