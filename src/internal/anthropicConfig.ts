/**
 * What the Anthropic summarizers need that does not load `@anthropic-ai/sdk`: the default model, the options and the
 * config they read. Kept apart so the barrel's `Summarizer` namespace can re-export them and `layerAuto` can import
 * them without the SDK; nothing here names an SDK type, so a consumer without the SDK installed type-checks with
 * `skipLibCheck: false`. `AnthropicSummarizer` re-exports this file; nothing here imports it back.
 *
 * @internal
 */
import * as Config from "effect/Config"
import type * as Duration from "effect/Duration"
import type * as Option from "effect/Option"
import type * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import type * as Summarizer from "../Summarizer.ts"
import { DEFAULT_SUMMARIZER_TIMEOUT } from "./summarizerDefaults.ts"
import { DEFAULT_SUMMARY_MAX_TOKENS } from "../Summary.ts"

/**
 * The default summarizer model, used when `COMPACTION_SUMMARIZER_MODEL` is not set (so the CLI works out of the box).
 * A current Sonnet: it writes faithful structured summaries at a fraction of Opus's cost. Override it in config.
 * @category constants
 */
export const DEFAULT_SUMMARIZER_MODEL = "claude-sonnet-5-5"

/**
 * The part of an `@anthropic-ai/sdk` client the Anthropic summarizer calls; every `Anthropic` instance is one. Named
 * here, not imported, so the types the barrel re-exports need no SDK installed.
 * @category models
 */
export interface AnthropicClient {
  /**
   * The client's `messages.create`, called with `stream: true`, the abort signal, `maxRetries: 0` and the timeout in
   * milliseconds.
   */
  readonly messages: {
    create(
      body: {
        readonly model: string
        readonly max_tokens: number
        readonly system: string
        readonly messages: Array<{ readonly role: "user"; readonly content: string }>
        readonly stream: true
      },
      options: { readonly signal: AbortSignal; readonly maxRetries: number; readonly timeout: number }
    ): PromiseLike<AsyncIterable<unknown>>
  }
}

/** Options of `AnthropicSummarizer.make`. @category models */
export interface AnthropicSummarizerOptions {
  /** The SDK client (`new Anthropic(...)`). Its own retries are not used (every request sets `maxRetries: 0`). */
  readonly client: AnthropicClient
  /** The model that writes the summary (e.g. `DEFAULT_SUMMARIZER_MODEL`). */
  readonly model: string
  /** `max_tokens` of the summary. Default `DEFAULT_SUMMARY_MAX_TOKENS` (8,192). */
  readonly maxTokens?: number
  /** Per-attempt timeout covering the request and the whole stream. Default 120 seconds. */
  readonly timeout?: Duration.Input
  /** The system prompt of the request. Default `Summarizer.DEFAULT_SYSTEM_PROMPT`. */
  readonly systemPrompt?: string
  /** How failed attempts are retried (`Summarizer.makeRetrySchedule`). Default 4 retries from a 1 s base. */
  readonly retry?: Summarizer.RetryOptions
  /**
   * Called with the summary's length so far after each streamed text chunk (for a progress display). A retry starts
   * a fresh stream, so the count starts again from zero.
   */
  readonly onProgress?: (charsSoFar: number) => void
}

/** Options of the config-reading layers that cannot come from config. @category models */
export interface AnthropicLayerOptions {
  /**
   * Called with the summary's length so far after each streamed text chunk (see
   * `AnthropicSummarizerOptions.onProgress`).
   */
  readonly onProgress?: (charsSoFar: number) => void
}

/** The settings `anthropicConfig` reads, with their defaults applied. @category config */
export interface AnthropicConfig {
  /** `ANTHROPIC_API_KEY` (required). */
  readonly apiKey: Redacted.Redacted<string>
  /** `ANTHROPIC_BASE_URL`, if set; the SDK's default otherwise. */
  readonly baseURL: Option.Option<string>
  /** `COMPACTION_SUMMARIZER_MODEL`. Default `DEFAULT_SUMMARIZER_MODEL`. */
  readonly model: string
  /** `COMPACTION_SUMMARY_MAX_TOKENS`, at least 1. Default 8,192. */
  readonly maxTokens: number
  /** `COMPACTION_SUMMARIZER_TIMEOUT`, per attempt. Default 120 seconds. */
  readonly timeout: Duration.Duration
  /** `COMPACTION_SUMMARIZER_RETRIES`, at least 0. Default 4. */
  readonly retries: number
  /** `COMPACTION_SUMMARIZER_PROMPT`, if set: a system prompt of one's own. */
  readonly systemPrompt: Option.Option<string>
}

/** The configuration `AnthropicSummarizer.layer` reads. @category config */
export const anthropicConfig: Config.Config<AnthropicConfig> = Config.all({
  apiKey: Config.Redacted("ANTHROPIC_API_KEY"),
  baseURL: Config.option(Config.String("ANTHROPIC_BASE_URL")),
  model: Config.String("COMPACTION_SUMMARIZER_MODEL").pipe(Config.withDefault(DEFAULT_SUMMARIZER_MODEL)),
  maxTokens: Config.schema(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)), "COMPACTION_SUMMARY_MAX_TOKENS").pipe(
    Config.withDefault(DEFAULT_SUMMARY_MAX_TOKENS)
  ),
  timeout: Config.Duration("COMPACTION_SUMMARIZER_TIMEOUT").pipe(
    Config.withDefault(DEFAULT_SUMMARIZER_TIMEOUT)
  ),
  retries: Config.schema(Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)), "COMPACTION_SUMMARIZER_RETRIES").pipe(
    Config.withDefault(4)
  ),
  systemPrompt: Config.option(Config.String("COMPACTION_SUMMARIZER_PROMPT"))
})

/**
 * Every environment variable the config-reading Anthropic layers read (`AnthropicSummarizer.layerConfig`, and
 * `layerAuto` once `ANTHROPIC_API_KEY` is set): `anthropicConfig`'s, then those the SDK client (1.14) reads when it is
 * built: its log level, custom headers and OpenTelemetry switches. Without an app `ConfigProvider` nothing else is
 * read, so under Deno `--allow-env=<these, comma-separated>` is enough.
 * @category config
 */
export const ANTHROPIC_ENV_VARIABLES: ReadonlyArray<string> = [
  "ANTHROPIC_API_KEY",
  "ANTHROPIC_BASE_URL",
  "COMPACTION_SUMMARIZER_MODEL",
  "COMPACTION_SUMMARY_MAX_TOKENS",
  "COMPACTION_SUMMARIZER_TIMEOUT",
  "COMPACTION_SUMMARIZER_RETRIES",
  "COMPACTION_SUMMARIZER_PROMPT",
  "ANTHROPIC_LOG",
  "ANTHROPIC_CUSTOM_HEADERS",
  "ANTHROPIC_OPEN_TELEMETRY",
  "ANTHROPIC_OPEN_TELEMETRY_PROPAGATION",
  "ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE",
  "ANTHROPIC_OPEN_TELEMETRY_TRACES_MAX_CONTENT_BYTES"
]

/**
 * The options a config-reading Anthropic layer passes on to its summarizer as they are: the model, `max_tokens`, the
 * per-attempt timeout and the retries (the client and the prompt are each summarizer's own).
 */
export const requestOptionsOf = (config: AnthropicConfig): {
  readonly model: string
  readonly maxTokens: number
  readonly timeout: Duration.Duration
  readonly retry: Summarizer.RetryOptions
} => ({ model: config.model, maxTokens: config.maxTokens, timeout: config.timeout, retry: { retries: config.retries } })
