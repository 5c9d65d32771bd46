/**
 * `ConversationError`, the failure of a conversation step, which carries what the step returns on success.
 * Re-exported by `Conversation`; it lives here to keep `Conversation` small.
 *
 * @internal
 */
import * as Data from "effect/Data"
import type { MessageDecodeError } from "../../Message.ts"
import type { SessionLogError } from "../../SessionLog.ts"
import type { SummarizeError } from "../../SummarizeError.ts"

const ConversationErrorBase: ReturnType<typeof Data.TaggedError<"ConversationError">> = Data.TaggedError(
  "ConversationError"
)

/**
 * A message a step refuses because the caller gave it to the wrong step (an assistant message to `append`, whose
 * place is `recordReply`): nothing was changed or logged.
 * @category errors
 */
export interface RefusedMessage {
  readonly _tag: "AssistantToAppend"
  readonly message: string
}

/**
 * A step that could not complete: the summary or the log failed (`Summarize`, `Persist`), or the step refused a
 * caller's mistake (`Refused`: an assistant message given to `append`, or a message `append` or `recordReply` cannot
 * take, whose `MessageDecodeError` names the path and the problem; nothing was changed or logged). `value` is what the step returns on success, built from the state as it was before
 * the failed change (nothing is lost): `Effect.catchTag("ConversationError", (e) => Effect.succeed(e.value))` goes on.
 * @category errors
 */
export class ConversationError<A> extends ConversationErrorBase<{
  readonly reason: "Summarize" | "Persist" | "Refused"
  readonly cause: SummarizeError | SessionLogError | RefusedMessage | MessageDecodeError
  readonly value: A
}> {
  /** The error as one line: the failed step (or `refused`) and the cause's message. */
  override get message(): string {
    const what = this.reason === "Summarize"
      ? "summarizing failed"
      : this.reason === "Persist"
      ? "persisting failed"
      : "refused"
    return `${what}: ${this.cause.message}`
  }
}
