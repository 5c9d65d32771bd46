/**
 * Concept: the service that counts a request's input tokens.
 *
 * Counting a request's input tokens: the `TokenCounter` service. `layerEstimate` counts with the library's estimate
 * (`Tokens`, about 4 characters per token); `layer` asks the Messages API's `count_tokens` (exact, free,
 * and validated like a create) through an `@anthropic-ai/sdk` client or a function of one's own, and falls back to the
 * estimate, calibrated by the exact counts it got before, when a count fails: a count never fails and never breaks a
 * step, and says whether it is exact and why not. This module never loads the SDK: the client is the caller's.
 *
 * `Conversation` reads the counter when its layer has one: with an exact count of the next request, its trigger and
 * `minFreedTokens` go by that count instead of the last reported usage and the estimates (COMPACTION.md, "The
 * trigger").
 *
 * @since 0.1.0
 */
import type Anthropic from "@anthropic-ai/sdk"
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Predicate from "effect/Predicate"
import { describeCause } from "./internal/anthropicErrors.ts"
import { systemAndToolsTokens } from "./internal/estimate.ts"
import type { ContentBlock, Message } from "./Message.ts"
import { estimateTokens } from "./Tokens.ts"

const CountErrorBase: ReturnType<typeof Data.TaggedError<"TokenCountError">> = Data.TaggedError("TokenCountError")

/**
 * Why `count_tokens` gave no count: the API's answer (`status`, and its `error_code` when it has one: a 400 means the
 * API would reject the request itself, as `create` would), a timeout, or a connection failure. `detail` is the API's
 * message.
 */
class TokenCountError extends CountErrorBase<{
  readonly status?: number
  readonly errorCode?: string
  readonly detail: string
  readonly cause: unknown
}> {
  override get message(): string {
    return `count_tokens failed${this.status === undefined ? "" : ` (${this.status})`}: ${this.detail}`
  }

  /** Anything a count threw, as a `TokenCountError`: the SDK's `APIError`s by their `status` and body. */
  static fromUnknown(cause: unknown): TokenCountError {
    const status = Predicate.hasProperty(cause, "status") && Predicate.isNumber(cause.status) ? cause.status : undefined
    const body = Predicate.hasProperty(cause, "error") ? cause.error : undefined
    const inner = Predicate.hasProperty(body, "error") ? body.error : undefined
    const details = Predicate.hasProperty(inner, "details") ? inner.details : undefined
    const errorCode = Predicate.hasProperty(details, "error_code") && Predicate.isString(details.error_code)
      ? details.error_code
      : undefined
    return new TokenCountError({
      detail: describeCause(cause),
      cause,
      ...(status === undefined ? {} : { status }),
      ...(errorCode === undefined ? {} : { errorCode })
    })
  }
}

/** What a count is sent: `count_tokens`'s body (the SDK's `MessageCountTokensParams`, `betas` for the beta one). */
export type CountParams = Anthropic.MessageCountTokensParams & { readonly betas?: Array<string> }

/** `count_tokens` as the SDK answers it. */
export type CountAnswer = { readonly input_tokens: number }

/** The SDK's per-request options a count passes: the fiber's signal, no SDK retries. */
export type CountRequestOptions = { readonly signal: AbortSignal; readonly maxRetries: number }

/** The SDK's `count_tokens` over each option type it has (its beta body is a superset of ours). */
export type CountMethod = (params: never, options?: CountRequestOptions) => PromiseLike<CountAnswer>

/**
 * The default time a count may take before the estimate stands in: a count is a small request, and the step waits
 * for it.
 */
const DEFAULT_TIMEOUT: Duration.Duration = Duration.seconds(10)

const TokenCounterBase: Context.ServiceClass<TokenCounter, "effect-compaction/TokenCounter", TokenCounter.Shape> =
  Context.Service<TokenCounter, TokenCounter.Shape>()("effect-compaction/TokenCounter")

/**
 * The service that counts a request's input tokens. A count never fails: it is exact (`count_tokens` answered) or the
 * estimate (the estimate counter, or a failed count: `error` says why). Build it with `TokenCounter.layerEstimate`
 * or `TokenCounter.layer(options)`.
 * @category services
 */
export class TokenCounter extends TokenCounterBase {
  /**
   * The estimate, never exact: the library's estimate of the messages (`Tokens.estimateTokens`) plus the system prompt
   * and tools. A conversation with this counter decides as one without a counter.
   */
  static readonly layerEstimate: Layer.Layer<TokenCounter> = Layer.sync(TokenCounter, () => makeCounter(undefined))

  /**
   * `count_tokens` through `options.client` (`new Anthropic(...)`: `client.messages.countTokens`, or
   * `client.beta.messages.countTokens` when the request or `options.betas` name betas) or `options.count`, for
   * `options.model`. Each exact count calibrates the estimate (its ratio to the estimate of the same request); a count
   * that fails (an API error, a 400 for a request the API would reject, a timeout after `options.timeout`, default 10
   * seconds) is that calibrated estimate, with the error, and a warning in the log. The SDK's own retries are off.
   */
  static readonly layer = (options: TokenCounter.Options): Layer.Layer<TokenCounter> =>
    Layer.sync(TokenCounter, () => makeCounter(options))
}

/** The `TokenCounter` module's types: the service's shape, what it counts, what a count says, the layer's options. */
export declare namespace TokenCounter {
  /** The service. */
  export interface Shape {
    /** The input tokens of `request`: exact when `count_tokens` answered, the calibrated estimate otherwise. */
    readonly count: (request: Request) => Effect.Effect<Count>
  }

  /**
   * What is counted: a request body as `Request.requestOf` builds it (its `thread`, if any, is not sent:
   * `count_tokens` counts the whole view). `cache_control` markers count nothing.
   */
  export interface Request {
    /** The system prompt, if any. */
    readonly system?: string | Array<Anthropic.TextBlockParam> | undefined
    /** The tool definitions, if any. */
    readonly tools?: Array<Anthropic.ToolUnion> | undefined
    /** The messages to count. */
    readonly messages: ReadonlyArray<Anthropic.MessageParam>
    /** The thinking config, if any. */
    readonly thinking?: Anthropic.ThinkingConfigParam | undefined
    /** The betas the request names; with any, the count goes to the client's beta `count_tokens`. */
    readonly betas?: ReadonlyArray<string> | undefined
  }

  /** A count. */
  export interface Count {
    /** The input tokens: `count_tokens`'s answer, or the estimate times the calibration. */
    readonly tokens: number
    /** True when `count_tokens` counted them. */
    readonly exact: boolean
    /** The library's estimate of the same request, uncalibrated (the calibration learns `tokens / estimate`). */
    readonly estimate: number
    /** Why `count_tokens` gave no count, when it failed. */
    readonly error?: CountError | undefined
  }

  /** Why `count_tokens` failed: `status` and `errorCode` as the API answered, `detail` its message. */
  export type CountError = TokenCountError

  /** The part of an `@anthropic-ai/sdk` client a count calls; every `Anthropic` instance is one. */
  export interface Client {
    /** The client's `messages.countTokens`. */
    readonly messages: { readonly countTokens: CountMethod }
    /** The client's `beta.messages.countTokens`, used when a request names betas. */
    readonly beta?: { readonly messages: { readonly countTokens: CountMethod } }
  }

  /** Options of `TokenCounter.layer`: a client or a function, and the model to count for. */
  export type Options =
    & {
      /** The model whose tokenizer counts. */
      readonly model: string
      /** Betas every count names (a view with compaction blocks needs the compaction beta, as its create does). */
      readonly betas?: ReadonlyArray<string> | undefined
      /** How long a count may take before the estimate stands in; default 10 seconds. */
      readonly timeout?: Duration.Input | undefined
    }
    & (
      | { readonly client: Client }
      | {
        /** Counts a `count_tokens` body (`betas` set when the request names some); `input_tokens` is the count. */
        readonly count: (params: CountParams, options: CountRequestOptions) => PromiseLike<CountAnswer>
      }
    )
}

/** The estimate of a request: its messages (`Tokens.estimateTokens`), system prompt and tools. */
const estimateOf = (request: TokenCounter.Request): number =>
  estimateTokens(request.messages as unknown as ReadonlyArray<Message>) +
  systemAndToolsTokens(request.system as string | ReadonlyArray<ContentBlock> | undefined, request.tools)

/** The `count_tokens` call of the options: the client's beta endpoint when the body names betas (and it has one). */
const countOf = (
  options: TokenCounter.Options
): (params: CountParams, requestOptions: CountRequestOptions) => PromiseLike<CountAnswer> => {
  if ("count" in options) return options.count
  const client = options.client
  return (params, requestOptions) =>
    (params.betas !== undefined && client.beta !== undefined ? client.beta.messages : client.messages)
      .countTokens(params as never, requestOptions)
}

const makeCounter = (options: TokenCounter.Options | undefined): TokenCounter.Shape => {
  if (options === undefined) {
    return {
      count: (request) =>
        Effect.sync(() => {
          const estimate = estimateOf(request)
          return { tokens: estimate, exact: false, estimate }
        })
    }
  }
  const call = countOf(options)
  const timeout = options.timeout === undefined ? DEFAULT_TIMEOUT : Duration.fromInputUnsafe(options.timeout)
  // the ratio of the latest exact count to the estimate of the same request: what a failed count multiplies by
  let calibration = 1
  const count = Effect.fn("TokenCounter.count")(function* (request: TokenCounter.Request) {
    const estimate = estimateOf(request)
    const betas = [...(options.betas ?? []), ...(request.betas ?? [])]
    const params: CountParams = {
      model: options.model,
      messages: request.messages as Array<Anthropic.MessageParam>,
      ...(request.system === undefined ? {} : { system: request.system }),
      ...(request.tools === undefined ? {} : { tools: request.tools as NonNullable<CountParams["tools"]> }),
      ...(request.thinking === undefined ? {} : { thinking: request.thinking }),
      ...(betas.length === 0 ? {} : { betas: [...new Set(betas)] })
    }
    const answer = yield* Effect.tryPromise({
      try: (signal) => call(params, { signal, maxRetries: 0 }),
      catch: TokenCountError.fromUnknown
    }).pipe(
      Effect.flatMap((answer) =>
        Predicate.isNumber(answer?.input_tokens) && Number.isFinite(answer.input_tokens) && answer.input_tokens >= 0
          ? Effect.succeed(answer.input_tokens)
          : Effect.fail(TokenCountError.fromUnknown(new Error(`count_tokens answered no input_tokens`)))
      ),
      Effect.timeoutOrElse({
        duration: timeout,
        orElse: () => Effect.fail(TokenCountError.fromUnknown(new Error(`no answer in ${Duration.format(timeout)}`)))
      }),
      Effect.result
    )
    if (answer._tag === "Success") {
      if (estimate > 0) calibration = answer.success / estimate
      yield* Effect.annotateCurrentSpan({ "tokens.count": answer.success, "tokens.estimate": estimate })
      return { tokens: answer.success, exact: true, estimate } satisfies TokenCounter.Count
    }
    const error = answer.failure
    yield* Effect.logWarning(`${error.message}; counting by the estimate`)
    return { tokens: Math.ceil(estimate * calibration), exact: false, estimate, error } satisfies TokenCounter.Count
  })
  return { count }
}
