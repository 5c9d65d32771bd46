/**
 * What the server-compaction summarizer needs that does not load `@anthropic-ai/sdk`: its beta header, its options
 * and the client shape it calls. Kept apart so the barrel's `Summarizer` namespace can re-export them without the
 * SDK; nothing here names an SDK type, so a consumer without the SDK installed type-checks with
 * `skipLibCheck: false`. `ServerCompactionSummarizer` re-exports this file; nothing here imports it back.
 *
 * @internal
 */
import type * as Duration from "effect/Duration"
import type { Message } from "../Message.ts"
import type { RetryOptions } from "../Summarizer.ts"

/** The beta header of the Messages API's on-demand compaction (the API's docs, "Compaction"). @category constants */
export const ON_DEMAND_COMPACTION_BETA = "compact-2026-09-04"

/**
 * The instructions sent when the caller gives a focus (`/compact <focus>`) but no instructions of its own: the
 * `compaction.instructions` parameter replaces the server's prompt, so a focus alone would be the whole prompt.
 * @category constants
 */
export const DEFAULT_COMPACTION_INSTRUCTIONS: string =
  "Summarize the conversation so far so that the work can continue from the summary alone: the goal, the " +
  "constraints, what is done and in progress, the decisions and their reasons, the next steps, and the file paths, " +
  "identifiers, commands and error messages exactly as they appear."

/** The body of an on-demand compaction request, as the summarizer sends it. @category models */
export interface ServerCompactionBody {
  /** The model that compacts (`ServerCompactionSummarizerOptions.model`). */
  readonly model: string
  /** The most tokens the reply may take. Default `DEFAULT_SUMMARY_MAX_TOKENS` (8,192). */
  readonly max_tokens: number
  /** The head to compact, as the API reads it (`SummarizeRequest.head`, else its `messages`). */
  readonly messages: ReadonlyArray<Message>
  /** The on-demand compaction parameter: `summarize`, with the instructions when there are any. */
  readonly compaction: { readonly type: "summarize"; readonly instructions?: string }
  /** The on-demand compaction beta, `ON_DEMAND_COMPACTION_BETA`. */
  readonly betas: ReadonlyArray<string>
  /** The agent's system prompt, when the options give one. */
  readonly system?: unknown
  /** The agent's tools, when the options give them. */
  readonly tools?: unknown
}

/**
 * The part of an `@anthropic-ai/sdk` client the server-compaction summarizer calls (`client.beta.messages.stream`,
 * then `finalMessage()`); every `Anthropic` instance is one. Named here, not imported, so the types the barrel
 * re-exports need no SDK installed. The body is typed loosely so that the SDK's own parameter type satisfies it.
 * @category models
 */
export interface ServerCompactionClient {
  /** The client's `beta.messages.stream`, whose `finalMessage()` holds the compaction block. */
  readonly beta: {
    readonly messages: {
      stream(
        body: {
          readonly model: string
          readonly max_tokens: number
          readonly messages: ReadonlyArray<unknown>
          readonly compaction?: unknown
          readonly betas?: ReadonlyArray<string>
          readonly system?: unknown
          readonly tools?: unknown
        },
        options: { readonly signal: AbortSignal; readonly maxRetries: number; readonly timeout: number }
      ): { finalMessage(): PromiseLike<unknown> }
    }
  }
}

/** Options of `ServerCompactionSummarizer.make`. @category models */
export interface ServerCompactionSummarizerOptions {
  /** The SDK client (`new Anthropic(...)`). Its own retries are not used (every request sets `maxRetries: 0`). */
  readonly client: ServerCompactionClient
  /**
   * The model that writes the summary. The conversation's own for the thinking of the kept turns to stay valid (the
   * API accepts the block in place of what it summarized only from a model with preserved thinking).
   */
  readonly model: string
  /** `max_tokens` of the request. Default `DEFAULT_SUMMARY_MAX_TOKENS` (8,192). */
  readonly maxTokens?: number
  /** Per-attempt timeout covering the request and the whole stream. Default 120 seconds. */
  readonly timeout?: Duration.Input
  /**
   * `compaction.instructions`: replaces the server's summarization prompt. Absent, the server's own prompt is used
   * (or `DEFAULT_COMPACTION_INSTRUCTIONS` when the request carries a focus). A request's focus is appended.
   */
  readonly instructions?: string
  /**
   * The agent's top-level `system` prompt, sent as it is (the server summarizes under the same system; another one
   * invalidates the thinking of the kept turns).
   */
  readonly system?: string | ReadonlyArray<unknown>
  /**
   * The agent's `tools`, sent as they are (the block's `tool_changes` are relative to them; other tools invalidate the
   * thinking of the kept turns).
   */
  readonly tools?: ReadonlyArray<unknown>
  /** How failed attempts are retried (`Summarizer.makeRetrySchedule`). Default 4 retries from a 1 s base. */
  readonly retry?: RetryOptions
}
