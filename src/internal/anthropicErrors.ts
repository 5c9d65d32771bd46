/**
 * The Messages API's failures as `SummarizeError` reasons: HTTP status and SSE error type to reason, the server's
 * `retry-after`, network failures, and the API's own error message. Plain values in; the SDK's error classes are
 * matched by `AnthropicSummarizer`, which calls these.
 *
 * @internal
 */
import * as Predicate from "effect/Predicate"
import {
  BadRequest,
  Connection,
  Overloaded,
  RateLimited,
  Server,
  StreamError,
  type SummarizeErrorReason,
  Timeout,
  Unauthorized
} from "../SummarizeError.ts"

/** The API's own error message when the body has one (not the SDK's "401 {json}"), without a trailing period. */
export const describeCause = (cause: unknown): string => {
  const body = Predicate.hasProperty(cause, "error") ? cause.error : undefined
  const inner = Predicate.hasProperty(body, "error") ? body.error : undefined
  const text = Predicate.hasProperty(inner, "message") && Predicate.isString(inner.message)
    ? inner.message
    : Predicate.hasProperty(cause, "message") && Predicate.isString(cause.message)
    ? cause.message
    : String(cause)
  return text.trim().replace(/\.+$/, "")
}

/** The `error.type` of an API error body (`{ error: { type } }`), if it has one. */
export const errorTypeOf = (body: unknown): string | undefined => {
  if (!Predicate.hasProperty(body, "error")) return undefined
  const error = body.error
  return Predicate.hasProperty(error, "type") && Predicate.isString(error.type) ? error.type : undefined
}

/**
 * The reason of an SSE `error` event or a status-less API error, by its error type: `overloaded_error`,
 * `rate_limit_error`, `api_error` and `timeout_error` are retryable reasons; any other type is a `StreamError`.
 */
export const reasonOfErrorType = (type: string | undefined, detail: string, cause: unknown): SummarizeErrorReason => {
  switch (type) {
    case "overloaded_error":
      return new Overloaded({ detail, cause })
    case "rate_limit_error":
      return new RateLimited({ detail, cause })
    case "api_error":
      return new Server({ detail, cause })
    case "timeout_error":
      return new Timeout({ detail, cause })
    default:
      return new StreamError({ detail, cause, ...(type === undefined ? {} : { errorType: type }) })
  }
}

/**
 * The reason of an HTTP error status: 429 `RateLimited`, 529 `Overloaded`, 408 `Timeout`, other 5xx `Server` (all
 * retryable, with the server's `retry-after`), 401 and 403 `Unauthorized`, anything else `BadRequest`.
 */
export const reasonOfStatus = (
  status: number,
  retryAfterMillis: number | undefined,
  detail: string,
  cause: unknown
): SummarizeErrorReason => {
  const retryable = { status, detail, cause, ...(retryAfterMillis === undefined ? {} : { retryAfterMillis }) }
  if (status === 429) return new RateLimited(retryable)
  if (status === 529) return new Overloaded(retryable)
  if (status === 408) return new Timeout(retryable)
  if (status >= 500) return new Server(retryable)
  if (status === 401 || status === 403) return new Unauthorized({ status, detail, cause })
  return new BadRequest({ status, detail, cause })
}

/** A network failure while the body streams in (undici's `TypeError: terminated`, a reset socket, …). */
export const isNetworkError = (cause: unknown): boolean => {
  if (!(cause instanceof Error)) return false
  const code = Predicate.hasProperty(cause, "code") ? cause.code : undefined
  const inner = cause.cause
  const innerCode = Predicate.hasProperty(inner, "code") ? inner.code : undefined
  const codes = ["ECONNRESET", "ECONNREFUSED", "EPIPE", "ETIMEDOUT", "UND_ERR_SOCKET"]
  return (cause.name === "TypeError" && /terminated|fetch failed|network|connection/i.test(cause.message)) ||
    codes.includes(String(code)) || codes.includes(String(innerCode)) ||
    /connection (reset|closed|error)|error reading a body|body stream|socket/i.test(cause.message)
}

/** A connection failure as a reason. */
export const connectionReason = (cause: unknown): SummarizeErrorReason =>
  new Connection({ detail: describeCause(cause), cause })

/** The server's requested wait in milliseconds, from `retry-after-ms` or `retry-after` (seconds or an HTTP date). */
export const retryAfterOf = (headers: unknown): number | undefined => {
  if (!(typeof Headers !== "undefined" && headers instanceof Headers)) return undefined
  const ms = Number.parseFloat(headers.get("retry-after-ms") ?? "")
  if (Number.isFinite(ms) && ms >= 0) return ms
  const value = headers.get("retry-after")
  if (value === null) return undefined
  const seconds = Number.parseFloat(value)
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000
  const date = Date.parse(value)
  return Number.isFinite(date) ? Math.max(0, date - Date.now()) : undefined
}
