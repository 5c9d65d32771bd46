/**
 * Server-held threads for `Conversation`: which reply the next request may continue from, and the
 * errors a replay of the whole conversation answers (the request that continues a thread or starts a new one is
 * `Request.requestOf` with `thread`).
 *
 * The server holds, under each reply's id, the whole conversation up to and including that reply. A request may
 * continue it (`thread: { type: "continue", previous_message_id }`) with only the messages after that reply, and
 * without `system` and `tools` (the server keeps those the thread was created with), as long as the view only grew
 * since. Everything else starts a new thread with the whole view (`thread: { type: "create" }`): a rewrite of what the
 * server holds (an offload, a compaction, a renamed `tool_use` id, a dropped block), a reply a fallback model wrote,
 * a refusal, a stream that ended before its stop reason, and a reply to a request that did not send the whole view
 * (a message appended while it was in flight). `context_management` never goes on a thread: a thread
 * request carries only `thread`, `messages` and, on `create`, `system` and `tools`.
 *
 * @internal
 */

/** The `thread` field of a request (the SDK's `BetaMessageThreadParam`). */
export type ThreadParam =
  | { readonly type: "create" }
  | { readonly type: "continue"; readonly previous_message_id: string }

/**
 * The reply the next request may continue from: its id, and how many messages of the view the server holds under it
 * (the view up to and including the reply).
 */
export interface ThreadAnchor {
  /** The reply's id, the next `continue`'s `previous_message_id`. */
  readonly previousMessageId: string
  /** How many messages of the view the server holds under it. */
  readonly held: number
  /**
   * The reply answered the `create` that replayed the whole view after `thread_not_found`: if the first `continue`
   * from it meets `thread_not_found` again, the server is not keeping this conversation's threads.
   */
  readonly replacesLost?: true
}

/**
 * What recording a reply tells about threads (threads on): `sent`, the length of the view its request sent on a
 * thread, with `replacesLost` when that request was the `create` replaying a lost thread (`thread_not_found`); or
 * `unthreaded`, the request went without `thread` because the API refused threads for this conversation.
 */
export type ThreadRecord =
  | { readonly sent: number; readonly replacesLost?: true }
  | { readonly unthreaded: true }

/**
 * The `ThreadRecord` of a reply (threads on): `unthreaded` once the conversation stopped threading, else the view
 * length its request sent (none when no request was handed out), `replacesLost` when `replayedAfter`, the error the
 * caller's replay answered, is `thread_not_found`.
 */
export const threadRecordOf = (
  threading: boolean,
  sent: number | undefined,
  replayedAfter: unknown
): ThreadRecord | undefined =>
  !threading
    ? { unthreaded: true }
    : sent === undefined
    ? undefined
    : errorCodeOf(replayedAfter) === "thread_not_found"
    ? { sent, replacesLost: true }
    : { sent }

/** What a reply tells about the thread: its id, stop reason and sampling steps. */
export interface ThreadReply {
  readonly id: string
  readonly stop_reason: string | null
  readonly usage?: { readonly iterations?: ReadonlyArray<{ readonly type: string }> | null | undefined } | undefined
}

/**
 * The anchor a reply leaves (`held`: the view's length once it is appended), or `undefined` when the next request
 * must start a new thread: a refusal, a stream cut before its stop reason (`stop_reason: null`), or a reply a
 * fallback model wrote (a `fallback_message` sampling step; the server does not hold it). `stored` says the view
 * holds the reply exactly as the server does (no id renamed, no block dropped) after exactly the messages its request
 * sent.
 */
export const anchorAfterReply = (
  reply: ThreadReply,
  stored: boolean,
  held: number,
  replacesLost?: true | undefined
): ThreadAnchor | undefined => {
  if (!stored || reply.stop_reason === null || reply.stop_reason === "refusal") return undefined
  if (reply.usage?.iterations?.some((step) => step.type === "fallback_message") === true) return undefined
  return replacesLost === true
    ? { previousMessageId: reply.id, held, replacesLost }
    : { previousMessageId: reply.id, held }
}

/**
 * The `error_code`s a replay of the whole conversation under a new thread answers, and the SDK 1.14's
 * `thread_fingerprint_mismatch` (`ThreadFingerprintMismatchError`: a field that must stay the same across a thread's
 * turns differs from the one the thread was created with; "replay the full conversation with `create`").
 */
const THREAD_REPLAY_CODES: ReadonlyArray<string> = [
  "thread_not_found",
  "thread_already_continued",
  "thread_continue_in_flight",
  "thread_fingerprint_mismatch"
]

const field = (value: unknown, key: string): unknown =>
  typeof value === "object" && value !== null ? (value as Record<string, unknown>)[key] : undefined

/**
 * The `error_code` of an API error, read as the SDK carries it: its `errorCode` (the typed `Thread*Error`s of 1.14),
 * or the body's `error.details.error_code` (an `APIError`'s `error`, or the parsed body itself).
 */
const errorCodeOf = (error: unknown): string | undefined => {
  const candidates = [
    field(error, "errorCode"),
    field(field(error, "details"), "error_code"),
    field(field(field(field(error, "error"), "error"), "details"), "error_code"),
    field(field(field(error, "error"), "details"), "error_code")
  ]
  const code = candidates.find((c) => typeof c === "string")
  return code as string | undefined
}

/** Whether the API answered with one of the thread errors a full replay under `create` recovers from. */
export const isThreadReplayError = (error: unknown): boolean => {
  const code = errorCodeOf(error)
  return code !== undefined && THREAD_REPLAY_CODES.includes(code)
}

/**
 * Whether the API's answer to a `continue` from a reply that replaced a lost thread (`ThreadAnchor.replacesLost`) is
 * `thread_not_found` again: the thread was lost twice in a row, so the conversation goes on without `thread` (as
 * the SDK's `continue_unthreaded`) instead of uploading the whole view every turn.
 */
export const isThreadLostAgain = (replacesLost: boolean, error: unknown): boolean =>
  replacesLost && errorCodeOf(error) === "thread_not_found"

/**
 * The SDK request options for a `continue`: from SDK 1.17 a non-streamed request whose response body is
 * cut is sent again by the client, and a repeated `continue` meets `thread_already_continued`, whose replay bills the
 * lost reply and uploads the whole view again. With `maxRetries: 0` the caller retries on its own schedule, knowing.
 */
export const CONTINUE_REQUEST_OPTIONS: { readonly maxRetries: 0 } = { maxRetries: 0 }

/**
 * Whether the API answered `thread_unsupported_request` (the SDK's `ThreadUnsupportedRequestError`): the
 * request holds a field or the organization a setting that threads refuse, so it goes again without `thread`.
 */
export const isThreadUnsupportedError = (error: unknown): boolean => errorCodeOf(error) === "thread_unsupported_request"
