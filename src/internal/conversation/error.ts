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

/** What a `Persist` error whose outcome is unknown adds to its message: what happens next, and what to do. */
const UNCERTAIN = "; the change may have been stored all the same: the conversation's next step catches up with the " +
  "log and adopts it if it landed, and the same step tried again (the same message or reply) stores it once"

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
 * take, whose `MessageDecodeError` names the path and the problem; nothing was changed or logged). `value` is what the
 * step returns on success, built from the state as it was before the failed change (nothing is lost):
 * `Effect.catchTag("ConversationError", (e) => Effect.succeed(e.value))` goes on. A `Persist` whose cause names
 * `entryIds` failed with its outcome unknown (the store failed while or after it wrote): the change may be in the log
 * although the state is the one before it. The conversation's next step first catches up with the log and adopts the
 * change if it landed; the same step tried again (the same message or reply) then stores it once.
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
    const uncertain = this.reason === "Persist" &&
      (this.cause as { readonly entryIds?: unknown }).entryIds !== undefined
    return `${what}: ${this.cause.message}` + (uncertain ? UNCERTAIN : "")
  }
}
