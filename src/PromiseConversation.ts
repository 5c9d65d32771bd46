/**
 * Concept: the agent loop for code without Effect, each step a Promise.
 *
 * The Promise door: the agent loop of `Conversation` for code that does not use Effect. `open` builds one
 * conversation (in memory, or logged to a JSONL file or to PostgreSQL) and hands back an object whose steps are
 * Promises: `append`, `prepare`, `recordReply`, `compact`, `recall`, `state`, then `close` (or `await using`). It is a thin shell
 * over `Conversation`: each step runs the Effect step on a runtime that owns the conversation's scope, so the log (and
 * a JSONL file's lock) is held from `open` until `close`, and a step rejects with the same typed error the Effect step
 * fails with.
 *
 * @since 0.2.0
 */
import * as Data from "effect/Data"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import * as Semaphore from "effect/Semaphore"
import {
  Conversation,
  type ConversationOptions,
  type ConversationShape,
  layerLogged,
  layerMemory
} from "./Conversation.ts"
import type { ConversationState } from "./ConversationState.ts"
import { ExtractiveSummarizer } from "./ExtractiveSummarizer.ts"
import type { SessionLog, SessionLogOptions } from "./SessionLog.ts"
import type { Summarizer } from "./Summarizer.ts"

/**
 * Where the conversation is recorded: nowhere (`memory`, the default: nothing survives the process), a JSONL file
 * `<directory>/<sessionId>.jsonl` (it needs `@effect/platform-node`, loaded only then), or PostgreSQL at `url` (it
 * needs `@effect/sql-pg`, loaded only then; the tables are created on first use; `idleTimeout`: how long an unused
 * connection stays open, see `SessionStoreSql.PgOptions`). A logged conversation resumes from its log when opened
 * again with the same `sessionId`.
 * @category models
 */
export type LogOptions =
  | { readonly type: "memory" }
  | ({ readonly type: "jsonl"; readonly directory: string } & SessionLogOptions)
  | (
    & { readonly type: "postgres"; readonly url: string; readonly idleTimeout?: Duration.Input }
    & SessionLogOptions
  )

/** Options of `open`: the conversation's own (see `Conversation.ConversationOptions`), its log and summarizer. @category models */
export interface OpenOptions extends ConversationOptions {
  /** Where the conversation is recorded. Default `{ type: "memory" }`. */
  readonly log?: LogOptions | undefined
  /**
   * The summarizer a compaction calls, as a layer (`AnthropicSummarizer.layer(...)`, `SummarizerAuto.layerAuto()`,
   * …). Default `ExtractiveSummarizer.layer`: offline, no API key.
   */
  readonly summarizer?: Layer.Layer<Summarizer, unknown> | undefined
}

const ConversationClosedErrorBase: ReturnType<typeof Data.TaggedError<"ConversationClosedError">> = Data.TaggedError(
  "ConversationClosedError"
)

/** A step asked of a conversation after `close`. @category errors */
export class ConversationClosedError extends ConversationClosedErrorBase<{
  readonly step: string
}> {
  /** The error as one line: the step asked and that the conversation is closed. */
  override get message(): string {
    return `the conversation is closed: ${this.step} needs an open one (open it again to resume from its log)`
  }
}

/**
 * One open conversation. Each step is a Promise that resolves with what the Effect step succeeds with and rejects
 * with the error it fails with (`ConversationError`, whose `value` is what the step returns on success, built from the
 * state as it was; `SessionLogError` from `open`; `ConversationClosedError` after `close`). Steps are serialized.
 * @category models
 */
export interface PromiseConversation extends AsyncDisposable {
  /** The current state (see `ConversationState.ConversationState`). */
  readonly state: () => Promise<ConversationState>
  /**
   * Appends a user or system message, or tool results (see `Conversation.ConversationShape.append`); a message it
   * cannot take rejects with `ConversationError` `Refused` (the path and the problem), in memory as when logged.
   */
  readonly append: (message: Parameters<ConversationShape["append"]>[0]) => Promise<ConversationState>
  /**
   * Records an assistant reply with its reported usage (see `Conversation.ConversationShape.recordReply`); anything
   * else (a Promise not awaited, `{ data, response }`, a user message) rejects with `ConversationError` `Refused`.
   */
  readonly recordReply: (...args: Parameters<ConversationShape["recordReply"]>) => Promise<ConversationState>
  /** Builds the next request: offloads stale output and compacts when the trigger fires (see `prepare`). */
  readonly prepare: () => Promise<Effect.Success<ConversationShape["prepare"]>>
  /** Compacts now, whatever the trigger says (see `Conversation.ConversationShape.compact`). */
  readonly compact: (
    ...args: Parameters<ConversationShape["compact"]>
  ) => Promise<Effect.Success<ReturnType<ConversationShape["compact"]>>>
  /**
   * Answers a call of the `recall` tool from the conversation's log: the text of its tool_result (see
   * `Conversation.ConversationShape.recall`). Rejects with `SessionLogError` `NotFound` for a conversation in memory.
   */
  readonly recall: (...args: Parameters<ConversationShape["recall"]>) => Promise<string>
  /** Ends the conversation: waits for the step under way, then releases the log (and a JSONL file's lock). Idempotent. */
  readonly close: () => Promise<void>
  /** True once `close` was called. */
  readonly closed: () => boolean
}

/** The session log layer for `log`, loading the store's platform package only for the store that needs it. */
const logLayer = (log: Exclude<LogOptions, { readonly type: "memory" }>): Layer.Layer<SessionLog, unknown> => {
  if (log.type === "postgres") {
    const { type: _type, url, ...options } = log
    return Layer.unwrap(
      Effect.map(
        Effect.promise(() => import("./SessionStoreSql.ts")),
        (Sql) => Sql.layerSessionLogPg({ ...options, url })
      )
    )
  }
  const { type: _type, ...options } = log
  return Layer.unwrap(
    Effect.map(
      Effect.promise(() =>
        Promise.all([
          import("./SessionStoreJsonl.ts"),
          import("@effect/platform-node/NodeFileSystem"),
          import("@effect/platform-node/NodePath")
        ])
      ),
      ([Jsonl, NodeFileSystem, NodePath]) =>
        Jsonl.layerSessionLog(options).pipe(Layer.provide(Layer.merge(NodeFileSystem.layer, NodePath.layer)))
    )
  )
}

/** The conversation layer `open` builds: the service over the log, with the summarizer. */
const conversationLayer = (options: OpenOptions): Layer.Layer<Conversation, unknown> => {
  const { log, summarizer, ...conversation } = options
  const service = log === undefined || log.type === "memory"
    ? layerMemory(conversation)
    : layerLogged(conversation).pipe(Layer.provide(logLayer(log)))
  return service.pipe(Layer.provide(summarizer ?? ExtractiveSummarizer.layer))
}

/**
 * Opens a conversation: resumes it from its log when one is configured and holds the log (and, for a JSONL file, its
 * lock) until `close`. Rejects with the layer's error (`SessionLogError`: `Locked` when another live process holds the
 * JSONL session, `Corrupt` for a damaged log, …) and then holds nothing. PostgreSQL takes no lock: a step taken after
 * another writer appended to the session rejects with `ConversationError` `Persist` (its cause `SessionLogError`
 * `Conflict`), nothing written; open the conversation again to continue from the log. A PostgreSQL conversation never
 * closed does not keep the process alive: once no step is under way, its idle connections close (within twice
 * `idleTimeout`) and the process can end, with every step that resolved stored. A step that rejects with
 * `Persist` after its entry may have reached the store (its cause names `entryIds`) is settled by the next step, which
 * reads the log first: taking the same step again stores it once.
 * @category constructors
 */
export const open = async (options: OpenOptions = {}): Promise<PromiseConversation> => {
  const runtime = ManagedRuntime.make(conversationLayer(options))
  const service = await runtime.runPromise(Effect.service(Conversation)).catch(async (error: unknown) => {
    await runtime.dispose()
    throw error
  })
  // a step in flight finishes before `close` releases the log; a step asked after `close` is refused
  const inFlight = Semaphore.makeUnsafe(1)
  let closed = false
  const run = <A, E>(step: string, effect: Effect.Effect<A, E>): Promise<A> =>
    closed
      ? Promise.reject(new ConversationClosedError({ step }))
      : runtime.runPromise(Semaphore.withPermits(inFlight, 1, effect))
  const close = async (): Promise<void> => {
    if (closed) return
    closed = true
    await Effect.runPromise(Semaphore.withPermits(inFlight, 1, Effect.void))
    await runtime.dispose()
  }
  return {
    state: () => run("state", service.state),
    append: (message) => run("append", service.append(message)),
    recordReply: (...args) => run("recordReply", service.recordReply(...args)),
    prepare: () => run("prepare", service.prepare),
    compact: (...args) => run("compact", service.compact(...args)),
    recall: (...args) => run("recall", service.recall(...args)),
    close,
    closed: () => closed,
    [Symbol.asyncDispose]: close
  }
}
