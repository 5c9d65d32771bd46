/**
 * What a Messages API summarization attempt threw, as a `SummarizeError`: the SDK's error classes matched here, the
 * status and error-type mapping in `anthropicErrors.ts`. Loads the SDK (only the two summarizers that call the API
 * import it).
 *
 * @internal
 */
import Anthropic from "@anthropic-ai/sdk"
import { SummarizeError, Timeout } from "../SummarizeError.ts"
import {
  connectionReason,
  describeCause,
  errorTypeOf,
  isNetworkError,
  reasonOfErrorCode,
  reasonOfErrorType,
  reasonOfStatus,
  retryAfterOf
} from "./anthropicErrors.ts"

/**
 * Classifies anything a summarization attempt can throw as a `SummarizeError` of one attempt: the SDK's status errors
 * (by status, with `retry-after`), its connection and timeout errors, an SSE `error` event (by its error type:
 * `overloaded_error`, `rate_limit_error` and `api_error` are retryable, any other type is a `StreamError`), and network
 * failures while reading the body (`Connection`), found along the `cause` chain (SDK 1.14–1.16 throw a plain
 * `AnthropicError("terminated")` whose cause is the runtime's `TypeError`). The refusals that a retry will not fix are
 * classified by their `error_code` first: `organization_url_fetch_disabled` never retried, `storage_not_ready` retried
 * after a minute. A `SummarizeError` is returned as it is.
 * @category errors
 */
export const summarizeErrorOf = (cause: unknown): SummarizeError => {
  if (cause instanceof SummarizeError) return cause
  return new SummarizeError({ reason: reasonOf(cause), attempts: 1 })
}

const reasonOf = (cause: unknown) => {
  const detail = describeCause(cause)
  if (cause instanceof Anthropic.APIConnectionTimeoutError) return new Timeout({ detail, cause })
  if (cause instanceof Anthropic.APIConnectionError) return connectionReason(cause)
  if (cause instanceof Anthropic.APIError) {
    const status: number | undefined = cause.status
    if (status === undefined && isNetworkError(cause.cause)) return connectionReason(cause)
    const byCode = reasonOfErrorCode(cause.errorCode, status, retryAfterOf(cause.headers), detail, cause)
    if (byCode !== undefined) return byCode
    return status === undefined
      ? reasonOfErrorType(cause.type ?? errorTypeOf(cause.error), detail, cause)
      : reasonOfStatus(status, retryAfterOf(cause.headers), detail, cause)
  }
  if (isNetworkError(cause)) return connectionReason(cause)
  return reasonOfErrorType(undefined, detail, cause)
}
