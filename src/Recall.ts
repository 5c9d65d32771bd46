/**
 * Concept: the way back, a tool that reads from the log what a compaction or an eviction removed.
 *
 * The way back: `recall`, a tool the agent calls to read exactly what a compaction or an eviction removed from its
 * context, answered from the session log without a model call.
 *
 * Every removal names its way back by a **reference**: an offloaded tool result by its `tool_use_id` (the `id` of its
 * offload pointer), a summarized message by the id of the log entry that stored it (`entryId`, a kept message
 * `compactionId#i`, a replaced summary its compaction entry's id), and a user's message a summary's manifest quotes or
 * leaves out for room by its words (`msg_` and a digest of them, the same in every log and every resume). A
 * tool_use_id the session reused names each of its results as `<tool_use_id>@<entry id>`; the bare id then answers
 * with that list (`Ambiguous`). `recall` answers
 *
 * - **by reference** (`ref`, with an optional `lines` range and a `page`): the removed text exactly as it was stored,
 *   cut into pages of at most `maxTokens` each, so a large output comes back in pages that join to the original;
 * - **by search** (`query`, plain text or a regular expression): the removed texts that match, newest first, each hit
 *   with its reference and a few lines of context. A regular expression is tried on each line's first
 *   `MAX_REGEX_LINE` code units, and one with a repeated group holding a repeat (`(a+)+`) is refused.
 *
 * `recall` reads one session's entries through the `SessionStore` (memory, JSONL or SQL, after a resume or from
 * another worker) and never any other session's; its pure parts (sources, removal records, pages, search, the answer's
 * text) live in `internal/recall`. `recallTool` is the definition a caller adds to its `tools`, in the Messages API's
 * own shape, and `recallRunnableTool` the same for the SDK's tool runner; `recallClassifier` makes a recall's result
 * evictable like a file read (a later recall of the same reference supersedes it). A compaction's outcome lists what
 * it removed (`Compact.CompactedInfo.removed`), its log entry stores the same record with the references `recall`
 * answers (`removed`), and `compaction inspect` of a session log and the HTML report show what each compaction and
 * eviction removed.
 *
 * @since 0.2.0
 */
import * as Effect from "effect/Effect"
import type * as Layer from "effect/Layer"
import type { SessionStore } from "./SessionStore.ts"
import { defaultToolClassifier, type ToolClassifier } from "./Tools.ts"
import * as Internal from "./internal/recall.ts"
import type { SessionLogError } from "./internal/sessionLogError.ts"

/**
 * The recall tool's definition in the Messages API's tool shape (`name: "recall"`, `description`, JSON
 * `input_schema`): add it to a request's `tools` as it is. Its input is either `ref` (with `lines` like `"120-240"`
 * and `page`) or `query` (with `regex`).
 * @category tool
 */
export const recallTool: Internal.RecallToolDefinition = Internal.recallTool

/**
 * What a recall answers: `Found` (a page of the referenced text, with where it is stored and how many pages there
 * are), `Hits` (a page of search hits, newest first, each with its reference), `Missing` (no source of this session
 * has the reference), `Ambiguous` (a tool_use_id the session reused: the reference of each of its results) or
 * `Invalid` (the input could not be read or is refused; `error.detail` says why).
 * @category models
 */
export type RecallAnswer = Internal.RecallAnswer

/**
 * Answers a recall tool call's input from session `sessionId`'s log: reads its entries through the `SessionStore`
 * (so it sees what any worker wrote, after any resume; never another session's), and answers by reference (the text
 * exactly, in pages of at most `maxTokens`, default 4000) or by search over what was removed (`context` lines either
 * side of a hit, default 2). Bad input is an `Invalid` answer the model can read; a store failure fails the effect.
 * @category answers
 */
export const recall = (
  sessionId: string,
  input: unknown,
  options: { readonly maxTokens?: number | undefined; readonly context?: number | undefined } = {}
): Effect.Effect<RecallAnswer, SessionLogError, SessionStore> => {
  return Internal.answerFrom(Internal.readEntries(sessionId), input, options)
    .pipe(Effect.withSpan("Recall.recall", { attributes: { "session.id": sessionId } }))
}

/**
 * The tool_result text of an answer: a one-line header in brackets (reference, kind, tool, lines, page), then the
 * text, and a line saying how to get the next page when there is one; a search lists its hits, each under its
 * reference and line. `Missing` and `Invalid` say what to do instead.
 * @category answers
 */
export const renderAnswer: (answer: RecallAnswer) => string = Internal.renderAnswer

/**
 * `classifier` (default `Tools.defaultToolClassifier`) with the recall tool added: a recall by reference reads the
 * "file" `recall:<ref>` (with its `lines` as the range), so a later recall of the same reference supersedes it as a
 * later read of a file does, and the eviction treats recall results like any other tool result. Pass it as the
 * conversation's (or the eviction's) `classifier`.
 * @category eviction
 */
export const recallClassifier = (classifier: ToolClassifier = defaultToolClassifier): ToolClassifier => (toolUse) =>
  toolUse.name === Internal.RECALL_TOOL_NAME ? Internal.recallAction(toolUse) : classifier(toolUse)

/**
 * The recall tool for the SDK's tool runner (`client.beta.messages.toolRunner({ tools })`), in the shape `betaTool`
 * builds (`type: "custom"`, the definition, `run`, `parse`) without loading the SDK, answering from session
 * `sessionId` of the `SessionStore` that `store` provides: each call reads the log as it is then. An unknown
 * reference or a bad input throws, so the runner sends an error result the model can read; a store failure too. An
 * ambiguous reference is answered with the references to choose from.
 * @category tool
 */
export const recallRunnableTool = <E>(
  sessionId: string,
  store: Layer.Layer<SessionStore, E>,
  options: { readonly maxTokens?: number | undefined; readonly context?: number | undefined } = {}
): Internal.RecallRunnableTool => ({
  type: "custom",
  name: recallTool.name,
  description: recallTool.description,
  input_schema: recallTool.input_schema,
  parse: (content) => content,
  run: (args) =>
    Effect.runPromise(Effect.provide(recall(sessionId, args, options), store)).then((answer) => {
      if (answer._tag === "Invalid") throw answer.error
      if (answer._tag === "Missing") {
        throw new Internal.RecallInputError({
          detail: `no removed output or message has ref ${JSON.stringify(answer.ref)}`
        })
      }
      return renderAnswer(answer)
    })
})
