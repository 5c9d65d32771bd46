/**
 * Concept: a summarizer that is the Messages API's own compaction.
 *
 * The Messages API's own on-demand compaction as a summarizer: the head is sent as it is, with
 * `compaction: { type: "summarize", instructions }` and the beta header `compact-2026-09-04`, through
 * `@anthropic-ai/sdk`'s `client.beta.messages.stream`; the server answers with one signed `compaction` block, which the
 * summary carries (`Summary.compaction`) so that `Compact.finishCompaction` opens the new view with it, verbatim.
 *
 * **The API's keep-tail and background procedures.** The head sent is the view's first messages as they are, ending
 * where no tool call is open; the new view is the block, then the kept turns exactly as they were (thinking included),
 * then the files message (`Compact.finishCompaction`, `FinishedCompaction.keptVerbatim`). On models with preserved
 * thinking the kept thinking stays valid when the compaction runs on the conversation's model under its `system` and
 * `tools` (pass the same ones here). With `CompactionPolicy.backgroundAt`, `Conversation` sends the compaction request
 * while it goes on appending, and swaps the block in on the first `prepare` after it came back: the summarized
 * messages dropped from the front, every message appended since kept after the block, so the thinking produced while
 * the summary was being written stays valid.
 *
 * Failures are typed like every summarizer's: `compaction_unavailable` (a 529) is `Overloaded` and retried on our
 * schedule, as are the other transient failures; `compaction_nothing_to_summarize` is `NothingToSummarize` and a
 * block with `content: null` (or a reply with no block) is `CompactionFailed`, both never retried, so
 * `withFallback(server, ExtractiveSummarizer.make())` writes a text summary instead. The usage is the sum of
 * `usage.iterations` (the top-level usage leaves the compaction step out).
 *
 * This module loads the SDK; the barrel does not.
 *
 * **Gotchas**: the view it produces opens with a beta block: send it with `client.beta.messages` (the non-beta
 * `MessageParam` has no compaction block). The server must accept the head: it ends on a finished turn (`Compact`
 * sees to that) and holds at most one compaction block with content, first (any view `Compact` returns does).
 *
 * @since 0.1.0
 */
import Anthropic from "@anthropic-ai/sdk"
import type * as Config from "effect/Config"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Predicate from "effect/Predicate"
import { clientFromConfig } from "./AnthropicSummarizer.ts"
import { summarizeErrorOf } from "./internal/anthropicFailure.ts"
import { ExtractiveSummarizer } from "./ExtractiveSummarizer.ts"
import { anthropicConfig, requestOptionsOf } from "./internal/anthropicConfig.ts"
import { describeCause } from "./internal/anthropicErrors.ts"
import { readConfig } from "./internal/env.ts"
import {
  DEFAULT_COMPACTION_INSTRUCTIONS,
  ON_DEMAND_COMPACTION_BETA,
  type ServerCompactionBody,
  type ServerCompactionSummarizerOptions
} from "./internal/serverCompactionConfig.ts"
import type { CompactionBlock } from "./Message.ts"
import { type Usage, zeroUsage } from "./Policy.ts"
import { CompactionFailed, CompactionRefused, NothingToSummarize, SummarizeError } from "./SummarizeError.ts"
import * as Summarizer from "./Summarizer.ts"
import { DEFAULT_SUMMARIZER_TIMEOUT } from "./internal/summarizerDefaults.ts"
import { DEFAULT_SUMMARY_MAX_TOKENS } from "./Summary.ts"

/** The server-compaction summarizer's beta header, default instructions and options. */
export * from "./internal/serverCompactionConfig.ts"

/** The name a server-compaction summary carries in `Summary.summarizer`. @category constants */
export const SERVER_COMPACTION_SUMMARIZER = "server-compaction"

/**
 * Classifies anything an on-demand compaction attempt can throw, as the Anthropic summarizer's classifier does, with
 * the compaction beta's own code: `compaction_nothing_to_summarize` is `NothingToSummarize`, and
 * `compaction_too_many_tool_references`, `compaction_incomplete_turn` and `organization_url_fetch_disabled` are
 * `CompactionRefused` (none is ever retried, whatever the status, since a retry sends the same view);
 * `compaction_unavailable` is a 529 and so `Overloaded` (retried); `storage_not_ready` is retried after a minute.
 * @category errors
 */
export const compactionErrorOf = (cause: unknown): SummarizeError => {
  if (!(cause instanceof Anthropic.APIError)) return summarizeErrorOf(cause)
  const errorCode = cause.errorCode
  const status: number | undefined = cause.status
  const refused = { detail: describeCause(cause), cause, ...(status === undefined ? {} : { status }) }
  if (errorCode === "compaction_nothing_to_summarize") {
    return new SummarizeError({ reason: new NothingToSummarize(refused), attempts: 1 })
  }
  if (errorCode !== null && PERMANENT_REFUSALS.has(errorCode)) {
    return new SummarizeError({ reason: new CompactionRefused({ ...refused, errorCode }), attempts: 1 })
  }
  return summarizeErrorOf(cause)
}

/**
 * The on-demand compaction's error codes that no retry fixes, apart from `compaction_nothing_to_summarize`; with
 * `organization_url_fetch_disabled` the server cannot compact a view that holds a URL source,
 * `web_fetch` or `mcp_servers`: only a text summary of that span makes it sendable.
 */
const PERMANENT_REFUSALS: ReadonlySet<string> = new Set([
  "compaction_too_many_tool_references",
  "compaction_incomplete_turn",
  "organization_url_fetch_disabled"
])

const count = (value: unknown): number => (typeof value === "number" && Number.isFinite(value) ? value : 0)

const usageOf = (value: unknown): Usage => ({
  input_tokens: count(Predicate.hasProperty(value, "input_tokens") ? value.input_tokens : 0),
  output_tokens: count(Predicate.hasProperty(value, "output_tokens") ? value.output_tokens : 0),
  cache_read_input_tokens: count(
    Predicate.hasProperty(value, "cache_read_input_tokens") ? value.cache_read_input_tokens : 0
  ),
  cache_creation_input_tokens: count(
    Predicate.hasProperty(value, "cache_creation_input_tokens") ? value.cache_creation_input_tokens : 0
  )
})

/**
 * What a compacting response cost: the sum of `usage.iterations` when the response lists them (the
 * top-level usage leaves the compaction step out), the top-level usage otherwise.
 * @category usage
 */
export const compactionUsage = (usage: unknown): Usage => {
  const iterations = Predicate.hasProperty(usage, "iterations") ? usage.iterations : undefined
  if (!Array.isArray(iterations) || iterations.length === 0) return usageOf(usage)
  return iterations.map(usageOf).reduce((a, b) => ({
    input_tokens: a.input_tokens + b.input_tokens,
    output_tokens: a.output_tokens + b.output_tokens,
    cache_read_input_tokens: a.cache_read_input_tokens + b.cache_read_input_tokens,
    cache_creation_input_tokens: a.cache_creation_input_tokens + b.cache_creation_input_tokens
  }), zeroUsage)
}

/** The signed block of a compacting response, or the failure it is. */
const blockOf = (
  response: unknown,
  stopReason: string | undefined
): Effect.Effect<CompactionBlock & { readonly content: string }, SummarizeError> => {
  const content = Predicate.hasProperty(response, "content") ? response.content : undefined
  const block = Array.isArray(content)
    ? (content as ReadonlyArray<unknown>).find((b) => Predicate.hasProperty(b, "type") && b.type === "compaction")
    : undefined
  const text = Predicate.hasProperty(block, "content") ? block.content : undefined
  if (typeof text === "string" && text.trim().length > 0) {
    return Effect.succeed(block as CompactionBlock & { readonly content: string })
  }
  const detail = block === undefined
    ? "the response holds no compaction block"
    : "the compaction block has no content (a failed compaction)"
  return Effect.fail(
    new SummarizeError({
      reason: new CompactionFailed({ detail, ...(stopReason === undefined ? {} : { stopReason }) }),
      attempts: 1
    })
  )
}

const instructionsOf = (base: string | undefined, focus: string | undefined): string | undefined => {
  const trimmed = focus?.trim() ?? ""
  if (trimmed.length === 0) return base
  return `${base ?? DEFAULT_COMPACTION_INSTRUCTIONS}\n\nGive particular attention to: ${trimmed}`
}

const makeServerCompaction = (options: ServerCompactionSummarizerOptions): Summarizer.SummarizerShape => {
  const timeout = Duration.fromInputUnsafe(options.timeout ?? DEFAULT_SUMMARIZER_TIMEOUT)
  const timeoutMillis = Duration.toMillis(timeout)
  const schedule = Summarizer.makeRetrySchedule(options.retry)

  const attempt = (body: ServerCompactionBody): Effect.Effect<Summarizer.Summary, SummarizeError> =>
    Effect.tryPromise({
      // our timeout wraps the whole attempt; the SDK's is only a backstop
      try: (signal) =>
        options.client.beta.messages.stream(body, { signal, maxRetries: 0, timeout: timeoutMillis + 10_000 })
          .finalMessage(),
      catch: compactionErrorOf
    }).pipe(
      Effect.flatMap((response) => {
        const stop = Predicate.hasProperty(response, "stop_reason") ? response.stop_reason : undefined
        const stopReason = typeof stop === "string" ? stop : undefined
        const model = Predicate.hasProperty(response, "model") && typeof response.model === "string"
          ? response.model
          : ""
        return Effect.map(blockOf(response, stopReason), (compaction): Summarizer.Summary => ({
          text: compaction.content,
          model: model.length > 0 ? model : options.model,
          usage: compactionUsage(Predicate.hasProperty(response, "usage") ? response.usage : undefined),
          summarizer: SERVER_COMPACTION_SUMMARIZER,
          compaction,
          ...(stopReason === undefined ? {} : { stopReason })
        }))
      }),
      Summarizer.withAttemptTimeout(timeout)
    )

  const summarize = Effect.fn("ServerCompactionSummarizer.summarize")(function* (request: Summarizer.SummarizeRequest) {
    return yield* summarizeOnce(request).pipe(Effect.mapError((error) => error.fromService("anthropic")))
  })
  const summarizeOnce = Effect.fnUntraced(function* (request: Summarizer.SummarizeRequest) {
    const messages = request.head ?? request.messages
    yield* Effect.annotateCurrentSpan({ "summarizer.model": options.model, "summarizer.messages": messages.length })
    if (!messages.some((m) => m.role !== "system")) {
      return yield* new SummarizeError({
        reason: new NothingToSummarize({ detail: "the head holds no user or assistant message" }),
        attempts: 1
      })
    }
    const instructions = instructionsOf(options.instructions, request.instructions)
    const body: ServerCompactionBody = {
      model: options.model,
      max_tokens: options.maxTokens ?? DEFAULT_SUMMARY_MAX_TOKENS,
      messages,
      compaction: instructions === undefined ? { type: "summarize" } : { type: "summarize", instructions },
      betas: [ON_DEMAND_COMPACTION_BETA],
      ...(options.system === undefined ? {} : { system: options.system }),
      ...(options.tools === undefined ? {} : { tools: options.tools })
    }
    return yield* Summarizer.retrySummarize(schedule)(attempt(body))
  })
  return { name: SERVER_COMPACTION_SUMMARIZER, summarize }
}

const fromConfig = Effect.map(readConfig(anthropicConfig), (config) =>
  makeServerCompaction({
    client: clientFromConfig(config),
    ...requestOptionsOf(config),
    ...(Option.isSome(config.systemPrompt) ? { instructions: config.systemPrompt.value } : {})
  }))

/**
 * The on-demand compaction summarizer. Each attempt is one streamed request with a timeout covering it and the whole
 * stream; a retryable failure is retried with `makeRetrySchedule`, each time with a fresh request.
 * @category layers
 */
export const ServerCompactionSummarizer = {
  /** The summarizer from explicit options (tests pass a client whose `baseURL` is a local server). */
  make: makeServerCompaction,
  /** A layer from explicit options. */
  layerWith: (options: ServerCompactionSummarizerOptions): Layer.Layer<Summarizer.Summarizer> =>
    Layer.succeed(Summarizer.Summarizer, makeServerCompaction(options)),
  /**
   * A layer from config: the Anthropic summarizer's variables (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`,
   * `COMPACTION_SUMMARIZER_MODEL`, `COMPACTION_SUMMARY_MAX_TOKENS`, `COMPACTION_SUMMARIZER_TIMEOUT`,
   * `COMPACTION_SUMMARIZER_RETRIES`), with `COMPACTION_SUMMARIZER_PROMPT` as the `instructions`.
   */
  layerConfig: (): Layer.Layer<Summarizer.Summarizer, Config.ConfigError> =>
    Layer.effect(Summarizer.Summarizer, fromConfig),
  /**
   * `layerConfig` behind `Summarizer.withQualityGate` (a compaction block is held to the size rule only: the server
   * writes it with its own prompt): a block not smaller than what it replaces is asked for once more, and that and any
   * failure (after retries, `content: null` included) fall back to the extractive summarizer.
   */
  layerWithFallback: (): Layer.Layer<Summarizer.Summarizer, Config.ConfigError> =>
    Layer.effect(
      Summarizer.Summarizer,
      Effect.map(fromConfig, (primary) => Summarizer.withQualityGate(primary, ExtractiveSummarizer.make()))
    )
} as const
