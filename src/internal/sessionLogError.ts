/**
 * `SessionLogError`, the one error of the session log and its stores, and its reasons. Re-exported by `SessionEntry`
 * (and `SessionLog`); it lives here to keep `SessionEntry` small.
 */
import type * as Cause from "effect/Cause"
import * as Schema from "effect/Schema"

const REASONS = [
  "Locked",
  "Io",
  "Corrupt",
  "HashMismatch",
  "InvalidId",
  "FutureVersion",
  "InvalidInput",
  "Conflict",
  "NotFound",
  "Unavailable"
] as const

/** Why a session log operation failed. @category errors */
export const SessionLogErrorReason: Schema.Literals<typeof REASONS> = Schema.Literals(REASONS)
/** The decoded type of `SessionLogErrorReason`: one of its literal reasons. @category errors */
export type SessionLogErrorReason = typeof SessionLogErrorReason.Type

/** errno codes that are worth retrying: the same write can succeed a moment later. */
const RETRYABLE_CODES: ReadonlySet<string> = new Set([
  "EAGAIN",
  "EWOULDBLOCK",
  "EBUSY",
  "EINTR",
  // a database server that is restarting, or the network to it
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EAI_AGAIN",
  // PostgreSQL's admin_shutdown, crash_shutdown, cannot_connect_now (shutting down or starting up),
  // too_many_connections (08xxx, connection exceptions, are matched by their class)
  "57P01",
  "57P02",
  "57P03",
  "53300",
  // effect/sql reasons that are worth retrying (an append is idempotent by its entry ids)
  "ConnectionError",
  "DeadlockError",
  "SerializationError",
  "LockTimeoutError",
  "StatementTimeoutError"
])

/** The schema fields of `SessionLogError`, written out so that its base class has an explicit type (JSR). */
type SessionLogErrorFields = {
  readonly reason: typeof SessionLogErrorReason
  readonly sessionId: Schema.optionalKey<Schema.String>
  readonly detail: Schema.String
  readonly entryId: Schema.optionalKey<Schema.String>
  readonly entryIds: Schema.optionalKey<Schema.$Array<Schema.String>>
  readonly line: Schema.optionalKey<Schema.Int>
  readonly lines: Schema.optionalKey<Schema.$Array<Schema.Int>>
  readonly code: Schema.optionalKey<Schema.String>
  readonly pid: Schema.optionalKey<Schema.Int>
  readonly cause: Schema.optionalKey<Schema.Defect>
}

const SessionLogErrorBase: Schema.Class<
  SessionLogError,
  Schema.TaggedStruct<"SessionLogError", SessionLogErrorFields>,
  Cause.YieldableError
> = Schema.TaggedError<SessionLogError>()("SessionLogError", {
  reason: SessionLogErrorReason,
  sessionId: Schema.optionalKey(Schema.String),
  detail: Schema.String,
  entryId: Schema.optionalKey(Schema.String),
  entryIds: Schema.optionalKey(Schema.Array(Schema.String)),
  line: Schema.optionalKey(Schema.Int),
  lines: Schema.optionalKey(Schema.Array(Schema.Int)),
  code: Schema.optionalKey(Schema.String),
  pid: Schema.optionalKey(Schema.Int),
  cause: Schema.optionalKey(Schema.Defect())
})

/**
 * The one error of this module. `reason` says what happened; `entryId` / `line` / `lines` say where; `code` is the
 * errno code (or the `effect/sql` reason) of an `Io` failure and `pid` the holder of a `Locked` session. `line` is the
 * entry's line in a JSONL file and its `seq` in any other store (the same number: the n-th entry of the session).
 * Only `Io` failures with a transient code (`EAGAIN`, `EBUSY`, `EINTR`, a refused or lost connection, PostgreSQL
 * shutting down or starting up (`57P01`–`57P03`, `08xxx`), a deadlock or lock timeout) are `isRetryable`; `ENOSPC`,
 * `EACCES` and every other reason are permanent. `Unavailable`: the store kept failing transiently until the
 * operation's retry deadline passed (`cause` is the last failure, `code` its code).
 *
 * `entryIds`: the failure of a write whose outcome is unknown, because the store failed while or after it wrote (an
 * answer lost with its connection, then `Unavailable`; a line written whose fsync failed): the ids of the entries it
 * tried, which the store holds all or none of. `catchUp` tells which: the log's head is the last of them once they
 * landed. Absent when the write certainly stored nothing (`Conflict`, `InvalidInput`).
 * @category errors
 */
export class SessionLogError extends SessionLogErrorBase {
  /** True for transient storage failures (`EAGAIN`, `EBUSY`, `EINTR`, a lost or refused connection, a lock timeout). */
  get isRetryable(): boolean {
    return this.reason === "Io" && this.code !== undefined &&
      (RETRYABLE_CODES.has(this.code) || /^08[0-9A-Z]{3}$/.test(this.code))
  }
  /** The error as one line: the reason, where (session, entry, line, code) and the detail. */
  override get message(): string {
    const where = [
      this.sessionId === undefined ? undefined : `session ${this.sessionId}`,
      this.entryId === undefined ? undefined : `entry ${this.entryId}`,
      this.line === undefined ? undefined : `line ${this.line}`,
      this.code
    ].filter((s) => s !== undefined).join(", ")
    return `${this.reason}${where === "" ? "" : ` (${where})`}: ${this.detail}`
  }
}

/**
 * `error` with `fields` set: a copy that keeps its `cause`, which is not enumerable (a spread of the error drops it).
 */
export const withFields = (
  error: SessionLogError,
  fields: { readonly sessionId?: string; readonly entryIds?: ReadonlyArray<string> }
): SessionLogError =>
  new SessionLogError({ ...error, ...fields, ...(error.cause === undefined ? {} : { cause: error.cause }) })
