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

/** How long `storage_not_ready` asks to wait ("retry after about a minute"). */
export const STORAGE_NOT_READY_WAIT_MILLIS = 60_000

/**
 * The reason of an API error by its `error_code`, whatever its status, or `undefined` for a code this
 * does not know: `organization_url_fetch_disabled` is a `BadRequest` (never retried: the organization refuses URL
 * sources, `web_fetch` and `mcp_servers` for the whole view); `storage_not_ready` is a `Server` failure that waits at
 * least a minute before its retry.
 */
export const reasonOfErrorCode = (
  errorCode: string | null | undefined,
  status: number | undefined,
  retryAfterMillis: number | undefined,
  detail: string,
  cause: unknown
): SummarizeErrorReason | undefined => {
  switch (errorCode) {
    case "organization_url_fetch_disabled":
      return new BadRequest({ status: status ?? 400, detail, cause })
    case "storage_not_ready":
      return new Server({
        status: status ?? 503,
        detail,
        cause,
        retryAfterMillis: Math.max(retryAfterMillis ?? 0, STORAGE_NOT_READY_WAIT_MILLIS)
      })
    default:
      return undefined
  }
}

/**
 * A network failure while the body or the stream is read, found anywhere along the `cause` chain:
 * undici's `TypeError: terminated`, a reset socket, or the plain `AnthropicError("terminated")` that SDK 1.14–1.16
 * throws with such a `TypeError` as its cause.
 */
export const isNetworkError = (cause: unknown): boolean => {
  const seen = new Set<unknown>()
  for (let error = cause; error instanceof Error && !seen.has(error); error = error.cause) {
    if (isNetworkFailure(error)) return true
    seen.add(error)
  }
  return false
}

const NETWORK_CODES: ReadonlyArray<string> = ["ECONNRESET", "ECONNREFUSED", "EPIPE", "ETIMEDOUT", "UND_ERR_SOCKET"]

/** One error of the chain, on its own: a network `TypeError`, a network error code, or a network message. */
const isNetworkFailure = (error: Error): boolean => {
  const code = Predicate.hasProperty(error, "code") ? error.code : undefined
  return (error.name === "TypeError" && /terminated|fetch failed|network|connection/i.test(error.message)) ||
    NETWORK_CODES.includes(String(code)) ||
    /connection (reset|closed|error)|error reading a body|body stream|socket/i.test(error.message)
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
