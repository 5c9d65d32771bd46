/**
 * Concept: the failure of a summarization, one class per reason.
 *
 * Why a summarization failed: `SummarizeError`, with one reason class per cause (`RateLimited`, `Overloaded`,
 * `Server`, `Timeout`, `Connection`, `BadRequest`, `Unauthorized`, `EmptySummary`, `StreamError`,
 * `NothingToSummarize`, `CompactionRefused`, `CompactionFailed`, `SummaryRejected`), each with its own fields and `isRetryable`. How a provider's status codes
 * map onto these reasons is each summarizer's own business, not part of this module.
 *
 * @since 0.1.0
 */
import type * as Cause from "effect/Cause"
import * as Schema from "effect/Schema"

/** The fields of a failed HTTP exchange that a retry may fix: the status when there was one, the server's wait. */
type RetryableFields = {
  readonly status: Schema.optionalKey<Schema.Int>
  readonly retryAfterMillis: Schema.optionalKey<Schema.Number>
  readonly detail: Schema.String
  readonly cause: Schema.optionalKey<Schema.Defect>
}

const RetryableFields: RetryableFields = {
  status: Schema.optionalKey(Schema.Int),
  retryAfterMillis: Schema.optionalKey(Schema.Number),
  detail: Schema.String,
  cause: Schema.optionalKey(Schema.Defect())
}

/**
 * The fields of a request the API refused: its status (always present from the Messages API; absent when a
 * `LanguageModel`'s provider reported none).
 */
type RefusedFields = {
  readonly status: Schema.optionalKey<Schema.Int>
  readonly detail: Schema.String
  readonly cause: Schema.optionalKey<Schema.Defect>
}

const RefusedFields: RefusedFields = {
  status: Schema.optionalKey(Schema.Int),
  detail: Schema.String,
  cause: Schema.optionalKey(Schema.Defect())
}

/**
 * The schema class of a failure reason: tagged `Tag`, with the schema fields `Fields` (written out for JSR), and an
 * `isRetryable` that is the same for every instance of the class.
 */
type ReasonClass<Self, Tag extends string, Fields extends Schema.Struct.Fields, Retryable extends boolean> =
  Schema.Class<Self, Schema.TaggedStruct<Tag, Fields>, { readonly isRetryable: Retryable }>

/** The base of a reason class: `Schema.TaggedClass` with `isRetryable` fixed, so each reason states it once. */
const reasonClass =
  <Self>() =>
  <Tag extends string, const Fields extends Schema.Struct.Fields, Retryable extends boolean>(
    tag: Tag,
    fields: Fields,
    isRetryable: Retryable
  ): ReasonClass<Self, Tag, Fields, Retryable> => {
    const Tagged = Schema.TaggedClass<Self>()(tag, fields) as unknown as new (...args: Array<never>) => object
    class Reason extends Tagged {
      /** True when a new attempt may fix the failure; the same for every instance of a reason class. */
      readonly isRetryable: Retryable = isRetryable
    }
    return Reason as unknown as ReasonClass<Self, Tag, Fields, Retryable>
  }

const RateLimitedBase: ReasonClass<RateLimited, "RateLimited", RetryableFields, true> = reasonClass<RateLimited>()(
  "RateLimited",
  RetryableFields,
  true
)
const OverloadedBase: ReasonClass<Overloaded, "Overloaded", RetryableFields, true> = reasonClass<Overloaded>()(
  "Overloaded",
  RetryableFields,
  true
)
const ServerBase: ReasonClass<Server, "Server", RetryableFields, true> = reasonClass<Server>()(
  "Server",
  RetryableFields,
  true
)
const TimeoutBase: ReasonClass<Timeout, "Timeout", RetryableFields, true> = reasonClass<Timeout>()(
  "Timeout",
  RetryableFields,
  true
)
const ConnectionBase: ReasonClass<
  Connection,
  "Connection",
  { readonly detail: Schema.String; readonly cause: Schema.optionalKey<Schema.Defect> },
  true
> = reasonClass<Connection>()("Connection", {
  detail: Schema.String,
  cause: Schema.optionalKey(Schema.Defect())
}, true)
const BadRequestBase: ReasonClass<BadRequest, "BadRequest", RefusedFields, false> = reasonClass<BadRequest>()(
  "BadRequest",
  RefusedFields,
  false
)
const UnauthorizedBase: ReasonClass<Unauthorized, "Unauthorized", RefusedFields, false> = reasonClass<
  Unauthorized
>()("Unauthorized", RefusedFields, false)
const EmptySummaryBase: ReasonClass<
  EmptySummary,
  "EmptySummary",
  { readonly stopReason: Schema.optionalKey<Schema.String>; readonly outputTokens: Schema.Int },
  false
> = reasonClass<EmptySummary>()("EmptySummary", {
  stopReason: Schema.optionalKey(Schema.String),
  outputTokens: Schema.Int
}, false)
const StreamErrorBase: ReasonClass<
  StreamError,
  "StreamError",
  {
    readonly errorType: Schema.optionalKey<Schema.String>
    readonly detail: Schema.String
    readonly cause: Schema.optionalKey<Schema.Defect>
  },
  false
> = reasonClass<StreamError>()("StreamError", {
  errorType: Schema.optionalKey(Schema.String),
  detail: Schema.String,
  cause: Schema.optionalKey(Schema.Defect())
}, false)
const NothingToSummarizeBase: ReasonClass<NothingToSummarize, "NothingToSummarize", RefusedFields, false> = reasonClass<
  NothingToSummarize
>()("NothingToSummarize", RefusedFields, false)
const CompactionRefusedBase: ReasonClass<
  CompactionRefused,
  "CompactionRefused",
  RefusedFields & { readonly errorCode: Schema.String },
  false
> = reasonClass<CompactionRefused>()("CompactionRefused", { ...RefusedFields, errorCode: Schema.String }, false)
const CompactionFailedBase: ReasonClass<
  CompactionFailed,
  "CompactionFailed",
  { readonly stopReason: Schema.optionalKey<Schema.String>; readonly detail: Schema.String },
  false
> = reasonClass<CompactionFailed>()("CompactionFailed", {
  stopReason: Schema.optionalKey(Schema.String),
  detail: Schema.String
}, false)
const SummaryRejectedBase: ReasonClass<
  SummaryRejected,
  "SummaryRejected",
  {
    readonly problem: Schema.Literals<readonly ["NotSmaller", "MissingSections"]>
    readonly detail: Schema.String
    readonly missingSections: Schema.$Array<Schema.String>
  },
  false
> = reasonClass<SummaryRejected>()("SummaryRejected", {
  problem: Schema.Literals(["NotSmaller", "MissingSections"]),
  detail: Schema.String,
  missingSections: Schema.Array(Schema.String)
}, false)

/** 429, or an SSE `rate_limit_error`. Retryable. @category errors */
export class RateLimited extends RateLimitedBase {}

/** 529, or an SSE `overloaded_error`. Retryable. @category errors */
export class Overloaded extends OverloadedBase {}

/** Another 5xx, or an SSE `api_error`. Retryable. @category errors */
export class Server extends ServerBase {}

/** No complete reply in time (our per-attempt timeout, the SDK's, a 408, an SSE `timeout_error`). Retryable. @category errors */
export class Timeout extends TimeoutBase {}

/** The API could not be reached, or the connection dropped mid-stream. Retryable. @category errors */
export class Connection extends ConnectionBase {}

/** The API rejected the request (a 4xx other than 401, 403, 408 and 429). Never retried. @category errors */
export class BadRequest extends BadRequestBase {}

/** The API refused the credentials (401, 403). Never retried. @category errors */
export class Unauthorized extends UnauthorizedBase {}

/** The reply held no summary text. Never retried. @category errors */
export class EmptySummary extends EmptySummaryBase {
  /** The stop reason and the output tokens, as one line. */
  get detail(): string {
    return `stop reason ${this.stopReason ?? "unknown"}, ${this.outputTokens} output tokens`
  }
}

/** The stream failed in a way no other reason covers (an SSE error event of another type). Never retried. @category errors */
export class StreamError extends StreamErrorBase {}

/**
 * The Messages API's compaction had nothing to summarize (`compaction_nothing_to_summarize`: the head holds no user
 * or assistant content). Never retried. @category errors
 */
export class NothingToSummarize extends NothingToSummarizeBase {}

/**
 * The Messages API's compaction refused this view for good: `compaction_too_many_tool_references`,
 * `compaction_incomplete_turn` or `organization_url_fetch_disabled` (the view holds a URL source, `web_fetch` or
 * `mcp_servers`, which the organization refuses), with its `errorCode`. A retry sends the same view and cannot succeed,
 * so it is never retried, whatever the status; `withFallback` hands the request to the fallback at once. @category
 * errors
 */
export class CompactionRefused extends CompactionRefusedBase {}

/**
 * The Messages API's compaction failed: it returned a block with `content: null` (a no-op block), or no compaction
 * block at all. Never retried; `withFallback` hands the request to the fallback. @category errors
 */
export class CompactionFailed extends CompactionFailedBase {}

/**
 * The quality gate (`Summarizer.withQualityGate`) rejected a model's summary after its one corrective retry:
 * `NotSmaller` (the summary is not smaller than the transcript and earlier summary it replaces) or `MissingSections`
 * (it lacks sections the prompt asks for, named in `missingSections`). Never retried by the transport schedule (the
 * gate does its own single retry); the gate's fallback writes the summary instead. @category errors
 */
export class SummaryRejected extends SummaryRejectedBase {}

/** Why a summarization failed: one class per reason, each with its own fields and `isRetryable`. @category errors */
export const SummarizeErrorReason: Schema.Union<
  readonly [
    typeof RateLimited,
    typeof Overloaded,
    typeof Server,
    typeof Timeout,
    typeof Connection,
    typeof BadRequest,
    typeof Unauthorized,
    typeof EmptySummary,
    typeof StreamError,
    typeof NothingToSummarize,
    typeof CompactionRefused,
    typeof CompactionFailed,
    typeof SummaryRejected
  ]
> = Schema.Union([
  RateLimited,
  Overloaded,
  Server,
  Timeout,
  Connection,
  BadRequest,
  Unauthorized,
  EmptySummary,
  StreamError,
  NothingToSummarize,
  CompactionRefused,
  CompactionFailed,
  SummaryRejected
])
/** Why a summarization failed (the `reason` of `SummarizeError`). @category errors */
export type SummarizeErrorReason = typeof SummarizeErrorReason.Type

const SummarizeErrorBase: Schema.Class<
  SummarizeError,
  Schema.TaggedStruct<
    "SummarizeError",
    {
      readonly reason: typeof SummarizeErrorReason
      readonly attempts: Schema.Int
      readonly service: Schema.optionalKey<Schema.Literal<"anthropic">>
    }
  >,
  Cause.YieldableError
> = Schema.TaggedError<SummarizeError>()("SummarizeError", {
  reason: SummarizeErrorReason,
  attempts: Schema.Int,
  service: Schema.optionalKey(Schema.Literal("anthropic"))
})

/**
 * A summarization failure. `reason` says why (match on `reason._tag`); `attempts` is how many requests were made in
 * all; `service` is `"anthropic"` when one of the library's Anthropic summarizers failed (its `message` then names the
 * Messages API and the settings to check; any other summarizer's failure is described without them). `isRetryable`, `status`, `retryAfterMillis` and `detail` read the reason. Only `RateLimited`, `Overloaded`,
 * `Server`, `Connection` and `Timeout` are retryable; a 400, a 401 and an empty summary never are. `message` is one
 * line that says why and what to try.
 * @category errors
 */
export class SummarizeError extends SummarizeErrorBase {
  /** True for failures that a new attempt may fix: 429, 529, other 5xx, connection errors and timeouts. */
  get isRetryable(): boolean {
    return this.reason.isRetryable
  }

  /** The HTTP status, when the failure had one. */
  get status(): number | undefined {
    return "status" in this.reason ? this.reason.status : undefined
  }

  /** The server's `retry-after` (or `retry-after-ms`) in milliseconds, when it sent one. */
  get retryAfterMillis(): number | undefined {
    return "retryAfterMillis" in this.reason ? this.reason.retryAfterMillis : undefined
  }

  /** What went wrong, in the API's or the runtime's words. */
  get detail(): string {
    return this.reason.detail
  }

  /** The failure in one or two sentences: what failed, the HTTP status and attempts, the detail, and what to do. */
  override get message(): string {
    return describeFailure(this)
  }

  /** The same error with `attempts` set. */
  withAttempts(attempts: number): SummarizeError {
    return new SummarizeError({
      reason: this.reason,
      attempts,
      ...(this.service === undefined ? {} : { service: this.service })
    })
  }

  /** The same error, from `service` (the library's Anthropic summarizers mark their failures so). */
  fromService(service: "anthropic"): SummarizeError {
    return new SummarizeError({ reason: this.reason, attempts: this.attempts, service })
  }
}

const describeFailure = (error: SummarizeError): string => {
  const after = error.attempts > 1 ? ` after ${error.attempts} attempts` : ""
  const status = error.status === undefined ? "" : ` (${error.status})`
  const detail = error.detail.replace(/\s+/g, " ").trim()
  const because = detail.length > 0 ? `: ${detail.length > 300 ? `${detail.slice(0, 299)}…` : detail}` : ""
  return error.service === "anthropic"
    ? describeAnthropic(error, status, after, because)
    : describeAny(error, status, after, because)
}

/** A failure of one of the library's Anthropic summarizers: the Messages API named, and its settings. */
const describeAnthropic = (error: SummarizeError, status: string, after: string, because: string): string => {
  switch (error.reason._tag) {
    case "RateLimited":
      return `The Messages API rate-limited the summarizer${status}${after}${because}. Wait a minute and retry.`
    case "Overloaded":
      return `The summarizer model is overloaded${status}${after}${because}. Retry later, or set COMPACTION_SUMMARIZER_MODEL to another model.`
    case "Server":
      return `The Messages API failed${status}${after}${because}. Retry later.`
    case "Connection":
      return `Could not reach the Messages API${after}${because}. Check the network and ANTHROPIC_BASE_URL.`
    case "Timeout":
      return `The summarization request timed out${after}${because}. Raise COMPACTION_SUMMARIZER_TIMEOUT or compact a shorter head.`
    case "BadRequest":
      return `The Messages API rejected the summarization request${status}${because}. Check COMPACTION_SUMMARIZER_MODEL and COMPACTION_SUMMARY_MAX_TOKENS.`
    case "Unauthorized":
      return `The Messages API refused the credentials${status}${because}. Check ANTHROPIC_API_KEY.`
    case "EmptySummary":
      return `The model returned no summary text${because}. Retry, or set COMPACTION_SUMMARIZER_MODEL to another model.`
    case "NothingToSummarize":
      return `The Messages API found nothing to compact${status}${because}. Compact a head with user or assistant content.`
    case "CompactionRefused":
      return error.reason.errorCode === "organization_url_fetch_disabled"
        ? `The Messages API cannot compact this view: the organization disabled URL fetching, and the view holds a URL source, web_fetch or an MCP server${status}${because}. Use a text summarizer (withFallback) for this span.`
        : `The Messages API refused to compact this view (${error.reason.errorCode})${status}${because}. Use a text summarizer (withFallback).`
    case "CompactionFailed":
      return `The Messages API's compaction produced no summary${because}. Retry, or use a text summarizer.`
    case "SummaryRejected":
      return `The model's summary failed the quality gate${after}${because}. The fallback wrote the summary; set COMPACTION_SUMMARIZER_MODEL to another model.`
    default:
      return `The summary stream failed${because}. Retry.`
  }
}

/** A failure of any other summarizer (an `effect/ai` model, the caller's own): no provider's names or settings. */
const describeAny = (error: SummarizeError, status: string, after: string, because: string): string => {
  switch (error.reason._tag) {
    case "RateLimited":
      return `The summarizer's model service rate-limited it${status}${after}${because}. Wait and retry.`
    case "Overloaded":
      return `The summarizer's model is overloaded${status}${after}${because}. Retry later, or use another model.`
    case "Server":
      return `The summarizer's model service failed${status}${after}${because}. Retry later.`
    case "Connection":
      return `Could not reach the summarizer's model service${after}${because}. Check the network.`
    case "Timeout":
      return `The summarization request timed out${after}${because}. Raise the summarizer's timeout or compact a shorter head.`
    case "BadRequest":
      return `The summarizer's model service rejected the request${status}${because}. Check the summarizer's model and settings.`
    case "Unauthorized":
      return `The summarizer's model service refused the credentials${status}${because}. Check its API key.`
    case "EmptySummary":
      return `The model returned no summary text${because}. Retry, or use another model.`
    case "NothingToSummarize":
      return `The summarizer found nothing to compact${status}${because}. Compact a head with user or assistant content.`
    case "CompactionRefused":
      return `The summarizer refused to compact this view (${error.reason.errorCode})${status}${because}. Use a text summarizer (withFallback).`
    case "CompactionFailed":
      return `The summarizer's compaction produced no summary${because}. Retry, or use a text summarizer.`
    case "SummaryRejected":
      return `The model's summary failed the quality gate${after}${because}. The fallback wrote the summary; use another model.`
    default:
      return `The summary stream failed${because}. Retry.`
  }
}
