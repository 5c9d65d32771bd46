/**
 * `ConversationError`, the failure of a conversation step, which carries what the step returns on success.
 * Re-exported by `Conversation`; it lives here to keep `Conversation` small.
 *
 * @internal
 */
import * as Data from "effect/Data"
import type { SessionLogError } from "../../SessionLog.ts"
import type { SummarizeError } from "../../SummarizeError.ts"

const ConversationErrorBase: ReturnType<typeof Data.TaggedError<"ConversationError">> = Data.TaggedError(
  "ConversationError"
)

/**
 * A step that could not complete. `value` is what the step returns on success, built from the state as it was before
 * the failed change (nothing is lost): `Effect.catchTag("ConversationError", (e) => Effect.succeed(e.value))` goes on.
 * @category errors
 */
export class ConversationError<A> extends ConversationErrorBase<{
  readonly reason: "Summarize" | "Persist"
  readonly cause: SummarizeError | SessionLogError
  readonly value: A
}> {
  override get message(): string {
    return `${this.reason === "Summarize" ? "summarizing" : "persisting"} failed: ${this.cause.message}`
  }
}
