/**
 * The names the `Summarizer` module held before the failure moved to its own module, kept there until 0.2.0 as
 * deprecated aliases of their homes: `SummarizeError` and its reasons, `Policy.zeroUsage` and
 * `Summary.DEFAULT_SUMMARY_MAX_TOKENS`. `Summarizer` re-exports this file; nothing here imports it back.
 *
 * @internal
 */
import * as Policy from "../Policy.ts"
import * as Errors from "../SummarizeError.ts"
import * as Summary from "../Summary.ts"

/** @deprecated Use `SummarizeError.SummarizeError`. */
export const SummarizeError: typeof Errors.SummarizeError = Errors.SummarizeError
/** @deprecated Use `SummarizeError.SummarizeError`. */
export type SummarizeError = Errors.SummarizeError

/** @deprecated Use `SummarizeError.SummarizeErrorReason`. */
export const SummarizeErrorReason: typeof Errors.SummarizeErrorReason = Errors.SummarizeErrorReason
/** @deprecated Use `SummarizeError.SummarizeErrorReason`. */
export type SummarizeErrorReason = Errors.SummarizeErrorReason

/** @deprecated Use `SummarizeError.RateLimited`. */
export const RateLimited: typeof Errors.RateLimited = Errors.RateLimited
/** @deprecated Use `SummarizeError.RateLimited`. */
export type RateLimited = Errors.RateLimited

/** @deprecated Use `SummarizeError.Overloaded`. */
export const Overloaded: typeof Errors.Overloaded = Errors.Overloaded
/** @deprecated Use `SummarizeError.Overloaded`. */
export type Overloaded = Errors.Overloaded

/** @deprecated Use `SummarizeError.Server`. */
export const Server: typeof Errors.Server = Errors.Server
/** @deprecated Use `SummarizeError.Server`. */
export type Server = Errors.Server

/** @deprecated Use `SummarizeError.Timeout`. */
export const Timeout: typeof Errors.Timeout = Errors.Timeout
/** @deprecated Use `SummarizeError.Timeout`. */
export type Timeout = Errors.Timeout

/** @deprecated Use `SummarizeError.Connection`. */
export const Connection: typeof Errors.Connection = Errors.Connection
/** @deprecated Use `SummarizeError.Connection`. */
export type Connection = Errors.Connection

/** @deprecated Use `SummarizeError.BadRequest`. */
export const BadRequest: typeof Errors.BadRequest = Errors.BadRequest
/** @deprecated Use `SummarizeError.BadRequest`. */
export type BadRequest = Errors.BadRequest

/** @deprecated Use `SummarizeError.Unauthorized`. */
export const Unauthorized: typeof Errors.Unauthorized = Errors.Unauthorized
/** @deprecated Use `SummarizeError.Unauthorized`. */
export type Unauthorized = Errors.Unauthorized

/** @deprecated Use `SummarizeError.EmptySummary`. */
export const EmptySummary: typeof Errors.EmptySummary = Errors.EmptySummary
/** @deprecated Use `SummarizeError.EmptySummary`. */
export type EmptySummary = Errors.EmptySummary

/** @deprecated Use `SummarizeError.StreamError`. */
export const StreamError: typeof Errors.StreamError = Errors.StreamError
/** @deprecated Use `SummarizeError.StreamError`. */
export type StreamError = Errors.StreamError

/** @deprecated Use `SummarizeError.NothingToSummarize`. */
export const NothingToSummarize: typeof Errors.NothingToSummarize = Errors.NothingToSummarize
/** @deprecated Use `SummarizeError.NothingToSummarize`. */
export type NothingToSummarize = Errors.NothingToSummarize

/** @deprecated Use `SummarizeError.CompactionFailed`. */
export const CompactionFailed: typeof Errors.CompactionFailed = Errors.CompactionFailed
/** @deprecated Use `SummarizeError.CompactionFailed`. */
export type CompactionFailed = Errors.CompactionFailed

/** @deprecated Use `Policy.zeroUsage`. */
export const zeroUsage: Policy.Usage = Policy.zeroUsage

/** @deprecated Use `Summary.DEFAULT_SUMMARY_MAX_TOKENS`. */
export const DEFAULT_SUMMARY_MAX_TOKENS: typeof Summary.DEFAULT_SUMMARY_MAX_TOKENS = Summary.DEFAULT_SUMMARY_MAX_TOKENS
