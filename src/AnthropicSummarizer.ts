/**
 * Concept: a summarizer that calls the Messages API through `@anthropic-ai/sdk`.
 *
 * The Messages API summarizer: streams a summary through `@anthropic-ai/sdk`, with a per-attempt timeout and bounded,
 * jittered, `retry-after`-aware retries of retryable failures only. This module loads the SDK; the barrel does not
 * (`SummarizerAuto.layerAuto` reaches it by dynamic import, only when `ANTHROPIC_API_KEY` is set).
 *
 * @since 0.1.0
 */
import Anthropic from "@anthropic-ai/sdk"
import type * as Config from "effect/Config"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import { ExtractiveSummarizer } from "./ExtractiveSummarizer.ts"
import {
  type AnthropicConfig,
  anthropicConfig,
  type AnthropicLayerOptions,
  type AnthropicSummarizerOptions,
  requestOptionsOf
} from "./internal/anthropicConfig.ts"
import * as AnthropicFailure from "./internal/anthropicFailure.ts"
import { readConfig } from "./internal/env.ts"
import { type Usage, zeroUsage } from "./Policy.ts"
import { EmptySummary, SummarizeError } from "./SummarizeError.ts"
import * as Summarizer from "./Summarizer.ts"
import { DEFAULT_SUMMARY_MAX_TOKENS } from "./Summary.ts"

/** The Anthropic summarizer's default model, options and config. */
export {
  ANTHROPIC_ENV_VARIABLES,
  type AnthropicClient,
  type AnthropicConfig,
  anthropicConfig,
  type AnthropicLayerOptions,
  type AnthropicSummarizerOptions,
  DEFAULT_SUMMARIZER_MODEL
} from "./internal/anthropicConfig.ts"
import { DEFAULT_SUMMARIZER_TIMEOUT } from "./internal/summarizerDefaults.ts"

interface Collected {
  readonly text: string
  readonly model: string
  readonly usage: Usage
  readonly stopReason: string | undefined
}

const num = (value: unknown): number => (typeof value === "number" && Number.isFinite(value) ? value : 0)

/** Reads one streamed response to the end, collecting text, usage, model and stop reason. */
const collect = async (
  stream: AsyncIterable<Anthropic.RawMessageStreamEvent>,
  onProgress: ((chars: number) => void) | undefined
): Promise<Collected> => {
  let text = ""
  let model = ""
  let stopReason: string | undefined
  let usage: Record<keyof Usage, number> = { ...zeroUsage }
  for await (const event of stream) {
    switch (event.type) {
      case "message_start": {
        model = event.message.model
        const u = event.message.usage
        usage = {
          input_tokens: num(u.input_tokens),
          output_tokens: num(u.output_tokens),
          cache_read_input_tokens: num(u.cache_read_input_tokens),
          cache_creation_input_tokens: num(u.cache_creation_input_tokens)
        }
        break
      }
      case "content_block_delta": {
        if (event.delta.type === "text_delta") {
          text += event.delta.text
          onProgress?.(text.length)
        }
        break
      }
      case "message_delta": {
        const u = event.usage as Partial<Record<keyof Usage, number | null>>
        // message_delta usage is cumulative; input counts appear here only on some backends
        usage = {
          input_tokens: u.input_tokens == null ? usage.input_tokens : num(u.input_tokens),
          output_tokens: u.output_tokens == null ? usage.output_tokens : num(u.output_tokens),
          cache_read_input_tokens: u.cache_read_input_tokens == null
            ? usage.cache_read_input_tokens
            : num(u.cache_read_input_tokens),
          cache_creation_input_tokens: u.cache_creation_input_tokens == null
            ? usage.cache_creation_input_tokens
            : num(u.cache_creation_input_tokens)
        }
        if (event.delta.stop_reason != null) stopReason = event.delta.stop_reason
        break
      }
    }
  }
  return { text, model, usage, stopReason }
}

const makeAnthropic = (options: AnthropicSummarizerOptions): Summarizer.SummarizerShape => {
  const timeout = Duration.fromInputUnsafe(options.timeout ?? DEFAULT_SUMMARIZER_TIMEOUT)
  const timeoutMillis = Duration.toMillis(timeout)
  const maxTokens = options.maxTokens ?? DEFAULT_SUMMARY_MAX_TOKENS
  const system = options.systemPrompt ?? Summarizer.DEFAULT_SYSTEM_PROMPT
  const schedule = Summarizer.makeRetrySchedule(options.retry)

  const attempt = (prompt: string): Effect.Effect<Collected, SummarizeError> =>
    Effect.tryPromise({
      try: async (signal) => {
        const stream = await options.client.messages.create(
          {
            model: options.model,
            max_tokens: maxTokens,
            system,
            messages: [{ role: "user", content: prompt }],
            stream: true
          },
          // our timeout wraps the whole attempt; the SDK's is only a backstop
          { signal, maxRetries: 0, timeout: timeoutMillis + 10_000 }
        )
        // `AnthropicClient` names only what is called; a client's stream yields the SDK's events
        return await collect(stream as AsyncIterable<Anthropic.RawMessageStreamEvent>, options.onProgress)
      },
      catch: AnthropicFailure.summarizeErrorOf
    }).pipe(
      Effect.flatMap((collected) =>
        collected.text.trim().length > 0 ? Effect.succeed(collected) : Effect.fail(
          new SummarizeError({
            reason: new EmptySummary({
              outputTokens: collected.usage.output_tokens,
              ...(collected.stopReason === undefined ? {} : { stopReason: collected.stopReason })
            }),
            attempts: 1
          })
        )
      ),
      Summarizer.withAttemptTimeout(timeout)
    )

  const summarize = Effect.fn("AnthropicSummarizer.summarize")(function* (request: Summarizer.SummarizeRequest) {
    yield* Effect.annotateCurrentSpan({
      "summarizer.model": options.model,
      "summarizer.transcript_chars": request.transcript.length
    })
    const collected = yield* Summarizer.retrySummarize(schedule)(attempt(Summarizer.summarizationPrompt(request))).pipe(
      Effect.mapError((error) => error.fromService("anthropic"))
    )
    return {
      text: collected.text,
      model: collected.model.length > 0 ? collected.model : options.model,
      usage: collected.usage,
      summarizer: "anthropic",
      ...(collected.stopReason === undefined ? {} : { stopReason: collected.stopReason })
    } satisfies Summarizer.Summary
  })
  return { name: "anthropic", summarize }
}

/**
 * The SDK client the configuration describes: its key and base URL, the SDK's own retries off (ours run instead), and
 * webhook verification off, so `ANTHROPIC_WEBHOOK_SIGNING_KEY` is never read.
 * @category constructors
 */
export const clientFromConfig = (config: AnthropicConfig): Anthropic =>
  new Anthropic({
    apiKey: Redacted.value(config.apiKey),
    maxRetries: 0,
    webhookKey: null,
    ...(Option.isSome(config.baseURL) ? { baseURL: config.baseURL.value } : {})
  })

const fromConfigOf = (config: AnthropicConfig, extra: AnthropicLayerOptions): Summarizer.SummarizerShape =>
  makeAnthropic({
    client: clientFromConfig(config),
    ...requestOptionsOf(config),
    ...(Option.isSome(config.systemPrompt) ? { systemPrompt: config.systemPrompt.value } : {}),
    ...(extra.onProgress === undefined ? {} : { onProgress: extra.onProgress })
  })

const fromConfig = (extra: AnthropicLayerOptions) =>
  Effect.map(readConfig(anthropicConfig), (config) => fromConfigOf(config, extra))

/** The gated summarizer from config: a prompt of one's own (`COMPACTION_SUMMARIZER_PROMPT`) requires no sections. */
const gatedFromConfig = (extra: AnthropicLayerOptions) =>
  Effect.map(readConfig(anthropicConfig), (config) =>
    Summarizer.withQualityGate(
      fromConfigOf(config, extra),
      ExtractiveSummarizer.make(),
      Option.isSome(config.systemPrompt) ? { sections: [] } : {}
    ))

/**
 * The Messages API summarizer. It sends one request (system prompt + the `summarizationPrompt`), streams the reply
 * and collects its text. Each attempt has a timeout covering the request and the whole stream; a failed attempt is
 * retried with `makeRetrySchedule` only when it is retryable, each time with a fresh request. A stream `error` event,
 * a reply with no text, or a timeout fails with a typed `SummarizeError`.
 * @category layers
 */
export const AnthropicSummarizer = {
  /** The summarizer from explicit options (tests pass a client whose `baseURL` is a local server). */
  make: makeAnthropic,
  /** A layer from explicit options. */
  layerWith: (options: AnthropicSummarizerOptions): Layer.Layer<Summarizer.Summarizer> =>
    Layer.succeed(Summarizer.Summarizer, makeAnthropic(options)),
  /**
   * A layer from config: `ANTHROPIC_API_KEY` (required, redacted), `ANTHROPIC_BASE_URL`, `COMPACTION_SUMMARIZER_MODEL`
   * (default `DEFAULT_SUMMARIZER_MODEL`), `COMPACTION_SUMMARY_MAX_TOKENS` (8192), `COMPACTION_SUMMARIZER_TIMEOUT`
   * (120 seconds), `COMPACTION_SUMMARIZER_RETRIES` (4) and `COMPACTION_SUMMARIZER_PROMPT` (the system prompt).
   */
  layerConfig: (extra: AnthropicLayerOptions = {}): Layer.Layer<Summarizer.Summarizer, Config.ConfigError> =>
    Layer.effect(Summarizer.Summarizer, fromConfig(extra)),
  /**
   * `layerConfig` behind `Summarizer.withQualityGate`: a summary not smaller than what it replaces, or lacking the
   * default prompt's sections (none are required with `COMPACTION_SUMMARIZER_PROMPT`), is retried once with what was
   * wrong; that and any failure (after retries) fall back to the extractive summarizer, and the summary says
   * `fellBackFrom`.
   */
  layerWithFallback: (extra: AnthropicLayerOptions = {}): Layer.Layer<Summarizer.Summarizer, Config.ConfigError> =>
    Layer.effect(Summarizer.Summarizer, gatedFromConfig(extra)),
  /** `layerConfig()`. */
  layer: Layer.effect(Summarizer.Summarizer, fromConfig({})) as Layer.Layer<Summarizer.Summarizer, Config.ConfigError>
} as const
