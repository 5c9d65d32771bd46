/**
 * The building blocks of `ConversationState`'s transitions, over any state with a view, hot paths, a carry and the
 * pending calls: the change a transition records (`Change`), a transition that changes nothing, appending one message,
 * and answering the calls still pending (a `prepare`, a new reply, a system message). Generic in the state, so the
 * state module re-exports `Change` without a public name for the rest.
 *
 * @internal
 */
import * as Data from "effect/Data"
import type { CompactionRecord } from "../../Compact.ts"
import type { HotPaths } from "../../HotPaths.ts"
import type { Offloaded } from "../../Offload.ts"
import { CarriedIndex } from "./carried.ts"
import type { ReplyMeta } from "./record.ts"
import { asMessages, interrupted, type MessageParam } from "./wire.ts"

/**
 * One change a transition made; the service records each in the log. `EmptyReply`: a reply with empty content, which
 * adds no message; its step metadata (its usage, id and stop reason) is the change.
 */
export type Change = Data.TaggedEnum<{
  Appended: { readonly message: MessageParam; readonly meta: ReplyMeta | undefined }
  EmptyReply: { readonly meta: ReplyMeta }
  Offloaded: { readonly offloaded: ReadonlyArray<Offloaded> }
  CompactionApplied: { readonly record: CompactionRecord<MessageParam> }
}>

const tagged = Data.taggedEnum<Change>()

/**
 * Constructors for `Change`: `Data.taggedEnum`'s, each read once (every read of the proxy makes its constructor
 * again, and a step makes one or two changes).
 */
export const Change: Data.TaggedEnum.Constructor<Change> = {
  Appended: tagged.Appended,
  EmptyReply: tagged.EmptyReply,
  Offloaded: tagged.Offloaded,
  CompactionApplied: tagged.CompactionApplied,
  $is: tagged.$is,
  $match: tagged.$match
}

/** What a transition did to a state of type `S` (`ConversationState.Transition` for `ConversationState`). */
export interface TransitionOf<S> {
  readonly steps: ReadonlyArray<{ readonly change: Change; readonly state: S }>
  readonly state: S
}

/** The fields of a state the building blocks read and write. */
export interface SteppedState {
  readonly view: ReadonlyArray<MessageParam>
  readonly hot: HotPaths
  readonly pending: ReadonlyArray<{ readonly id: string; readonly originalId: string }>
  readonly carried?: CarriedIndex | undefined
}

/** No change: the state as it is. */
export const none = <S>(state: S): TransitionOf<S> => ({ steps: [], state })

/**
 * Appends `message` (with a reply's step metadata), the hot paths observing it and the carry handed on; `fields` are
 * set in the same copy of the state (after those three).
 */
export const appendStep = <S extends SteppedState>(
  state: S,
  message: MessageParam,
  meta?: ReplyMeta,
  fields?: Partial<S>
): TransitionOf<S> => {
  const view = state.view.concat([message]) // concat copies the outer array fastest (a large spread is ~2x slower)
  const carried = CarriedIndex.appended(asMessages(state.view), state.carried, asMessages(view))
  const next: S = { ...state, view, hot: state.hot.observe([message]), carried, ...fields }
  return { steps: [{ change: Change.Appended({ message, meta }), state: next }], state: next }
}

/**
 * Answers every call still pending with an interrupted error result (one user message), so nothing but results ever
 * follows a `tool_use`. No change when nothing is pending. `prepareStep` does this first (the calls a crash or the
 * caller left unanswered), as do a new reply and a system message; `Conversation#compact` does not: it leaves the
 * calls waiting, in its kept tail.
 */
export const closePending = <S extends SteppedState>(state: S): TransitionOf<S> => {
  if (state.pending.length === 0) return none(state)
  const t = appendStep(state, { role: "user", content: state.pending.map((p) => interrupted(p.id)) })
  const closed: S = { ...t.state, pending: [] }
  return { steps: [{ ...t.steps[0]!, state: closed }], state: closed }
}
