/**
 * Concept: a summarizer over any `effect/ai` `LanguageModel`.
 *
 * A `Summarizer` from any `effect/ai` `LanguageModel` in context, so an Effect app summarizes with the model it
 * already provides (OpenAI, Anthropic, a local model, a test double). The model's `AiError`s become `SummarizeError`
 * reasons and the retryable ones are retried with `makeRetrySchedule`. Loads no SDK.
 *
 * @since 0.1.0
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as AiError from "effect/ai/AiError"
import * as LanguageModel from "effect/ai/LanguageModel"
import type * as Response from "effect/ai/Response"
import { ExtractiveSummarizer } from "./ExtractiveSummarizer.ts"
import type { Usage } from "./Policy.ts"
import {
  BadRequest,
  Connection,
  EmptySummary,
  RateLimited,
  Server,
  StreamError,
  SummarizeError,
  type SummarizeErrorReason,
  Unauthorized
} from "./SummarizeError.ts"
import * as Summarizer from "./Summarizer.ts"
import { DEFAULT_SUMMARIZER_TIMEOUT } from "./internal/summarizerDefaults.ts"

/** Options of `LanguageModelSummarizer`. Every one may be left out. @category models */
export interface LanguageModelSummarizerOptions {
  /** The summarizer's `name` and each summary's `summarizer`. Default `"language-model"`. */
  readonly name?: string
  /** Each summary's `model` when the response names none (no `response-metadata` part). Default `"language-model"`. */
  readonly model?: string
  /** The system message. Default `DEFAULT_SYSTEM_PROMPT`. */
  readonly systemPrompt?: string
  /** Per-attempt timeout. Default 120 seconds. */
  readonly timeout?: Duration.Input
  /** How retryable failures are retried (`makeRetrySchedule`). Default 4 retries from 1 second. */
  readonly retry?: Summarizer.RetryOptions
}

/** The HTTP status the provider reported with the error, when it did. */
const statusOf = (reason: AiError.AiErrorReason): number | undefined =>
  "http" in reason ? reason.http?.response?.status : undefined

/**
 * The `SummarizeError` reason of an `AiError`: `RateLimitError` is `RateLimited` (with its `retryAfter`),
 * `InternalProviderError` is `Server`, a `NetworkError` in transport is `Connection` (all retryable);
 * `AuthenticationError` is `Unauthorized`; a refused request (`InvalidRequestError`, `QuotaExhaustedError`,
 * `ContentPolicyError`, `UnsupportedSchemaError`, `InvalidUserInputError`, a `NetworkError` that never left) is
 * `BadRequest`; anything else is `Server` when the `AiError` says it is retryable, `StreamError` when not. The
 * provider's HTTP status is kept when it reported one; the `AiError` is the `cause`.
 * @category errors
 */
export const reasonOfAiError = (error: AiError.AiError): SummarizeErrorReason => {
  const reason = error.reason
  const detail = reason.message
  const cause = error
  const status = statusOf(reason)
  const withStatus = status === undefined ? {} : { status }
  switch (reason._tag) {
    case "RateLimitError":
      return new RateLimited({
        detail,
        cause,
        ...withStatus,
        ...(reason.retryAfter === undefined ? {} : { retryAfterMillis: Duration.toMillis(reason.retryAfter) })
      })
    case "InternalProviderError":
      return new Server({ detail, cause, ...withStatus })
    case "NetworkError":
      return reason.isRetryable ? new Connection({ detail, cause }) : new BadRequest({ detail, cause })
    case "AuthenticationError":
      return new Unauthorized({ detail, cause, ...withStatus })
    case "InvalidRequestError":
    case "QuotaExhaustedError":
    case "ContentPolicyError":
    case "UnsupportedSchemaError":
    case "InvalidUserInputError":
      return new BadRequest({ detail, cause, ...withStatus })
    default:
      return reason.isRetryable
        ? new Server({ detail, cause, ...withStatus })
        : new StreamError({ detail, cause, errorType: reason._tag })
  }
}

/** The response's usage in the Messages API's terms: `input_tokens` counts neither cache reads nor cache writes. */
const usageOf = (usage: Response.Usage): Usage => {
  const cacheRead = usage.inputTokens.cacheRead ?? 0
  const cacheWrite = usage.inputTokens.cacheWrite ?? 0
  return {
    input_tokens: usage.inputTokens.uncached ?? Math.max(0, (usage.inputTokens.total ?? 0) - cacheRead - cacheWrite),
    output_tokens: usage.outputTokens.total ?? 0,
    cache_read_input_tokens: cacheRead,
    cache_creation_input_tokens: cacheWrite
  }
}

const failWith = (reason: SummarizeErrorReason) => Effect.fail(new SummarizeError({ reason, attempts: 1 }))

/**
 * The summarizer on the `LanguageModel` in context: one `generateText` per attempt (the system prompt, then the
 * `summarizationPrompt` as the user message), within the timeout, retried while the failure is retryable. A reply
 * with no text fails with `EmptySummary`.
 */
const make = (
  options: LanguageModelSummarizerOptions = {}
): Effect.Effect<Summarizer.SummarizerShape, never, LanguageModel.LanguageModel> =>
  Effect.map(Effect.service(LanguageModel.LanguageModel), (model): Summarizer.SummarizerShape => {
    const name = options.name ?? "language-model"
    const timeout = Duration.fromInputUnsafe(options.timeout ?? DEFAULT_SUMMARIZER_TIMEOUT)
    const schedule = Summarizer.makeRetrySchedule(options.retry)
    const system = options.systemPrompt ?? Summarizer.DEFAULT_SYSTEM_PROMPT

    const attempt = (prompt: string) =>
      model.generateText({
        prompt: [{ role: "system", content: system }, { role: "user", content: prompt }],
        toolChoice: "none"
      }).pipe(
        Effect.catchTag("AiError", (error) => failWith(reasonOfAiError(error))),
        Effect.flatMap((response) => {
          const usage = usageOf(response.usage)
          const text = response.text.trim()
          if (text.length === 0) {
            return failWith(new EmptySummary({ stopReason: response.finishReason, outputTokens: usage.output_tokens }))
          }
          const metadata = response.content.find((part) => part.type === "response-metadata")
          return Effect.succeed({ text, usage, stopReason: response.finishReason, modelId: metadata?.modelId })
        }),
        Summarizer.withAttemptTimeout(timeout)
      )

    const summarize = Effect.fn("LanguageModelSummarizer.summarize")(function* (request: Summarizer.SummarizeRequest) {
      yield* Effect.annotateCurrentSpan({
        "summarizer.name": name,
        "summarizer.transcript_chars": request.transcript.length
      })
      const reply = yield* Summarizer.retrySummarize(schedule)(attempt(Summarizer.summarizationPrompt(request)))
      return {
        text: reply.text,
        model: reply.modelId ?? options.model ?? "language-model",
        usage: reply.usage,
        summarizer: name,
        stopReason: reply.stopReason
      } satisfies Summarizer.Summary
    })
    return { name, summarize }
  })

/**
 * Summarizers on the `LanguageModel` in context. `layer` fails the compaction when the model fails (after the
 * retries); `layerWithFallback` gates the summary (`Summarizer.withQualityGate`) and falls back to the extractive
 * summarizer instead, and the summary says `fellBackFrom`.
 * @category layers
 */
export const LanguageModelSummarizer = {
  /** The summarizer as a value, from the `LanguageModel` in context. */
  make,
  /** A `Summarizer` layer that needs a `LanguageModel`. */
  layer: (
    options: LanguageModelSummarizerOptions = {}
  ): Layer.Layer<Summarizer.Summarizer, never, LanguageModel.LanguageModel> =>
    Layer.effect(Summarizer.Summarizer, make(options)),
  /**
   * `layer` behind `Summarizer.withQualityGate`: a summary not smaller than what it replaces, or lacking the default
   * prompt's sections (none are required with a `systemPrompt` of one's own), is retried once with what was wrong;
   * that and a failing model (after its retries) fall back to `ExtractiveSummarizer`.
   */
  layerWithFallback: (
    options: LanguageModelSummarizerOptions = {}
  ): Layer.Layer<Summarizer.Summarizer, never, LanguageModel.LanguageModel> =>
    Layer.effect(
      Summarizer.Summarizer,
      Effect.map(make(options), (primary) =>
        Summarizer.withQualityGate(
          primary,
          ExtractiveSummarizer.make(),
          options.systemPrompt === undefined ? {} : { sections: [] }
        ))
    )
} as const
