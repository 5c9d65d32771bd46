import { assert, describe, it } from "@effect/vitest"
import {
  appendMessage,
  asMessageParams,
  type ConversationState,
  emptyState,
  prepareStep,
  recordReply
} from "../src/ConversationState.ts"
import { type Request, requestOf } from "../src/Request.ts"
import { DEFAULT_KEEP_RECENT, evictStaleToolResults } from "../src/Evict.ts"
import { closePending } from "../src/internal/conversation/steps.ts"
import { newlyUnboundTokens } from "../src/internal/thinkingBinding.ts"
import type { Message } from "../src/Message.ts"
import { generateSession } from "./fixtures/Conversation.ts"

/**
 * Offloads in place between compactions (the generated sessions hold thinking, which keeps a conversation
 * append-only by default since issue 39): the carried index is what these tests judge.
 */
const IN_PLACE = { appendOnly: false } as const

/** The same state with a view array no index has seen: everything is decided and placed from scratch. */
const uncarried = (state: ConversationState): ConversationState => ({ ...state, view: [...state.view] })

describe("Conversation with carried decisions", () => {
  it("prepares exactly what a fresh eviction and a fresh request placement give, at every step of 12 sessions", () => {
    let prepared = 0
    let offloads = 0
    for (let seed = 1; seed <= 12; seed++) {
      const session = asMessageParams(generateSession(seed, { messages: 120 + seed * 20 }))
      let state = emptyState()
      for (const message of session) {
        state = message.role === "assistant"
          ? recordReply(state, message, { input_tokens: 1_000, output_tokens: 10 }).state
          : appendMessage(state, message).state
        if (message.role !== "user" || typeof message.content === "string") continue
        const before = state
        const closed = closePending(state).state
        const view = closed.view as unknown as ReadonlyArray<Message>
        const expected = evictStaleToolResults(view, DEFAULT_KEEP_RECENT, {
          pinned: closed.hot.pinned,
          // the thinking an offload would make the API drop (API-RULES 29), as the conversation prices it
          droppedThinking: (m) => newlyUnboundTokens(view, { message: m, block: -1 }, closed.unboundThinking ?? [])
        })
        const step = prepareStep(state, IN_PLACE)
        state = step.transition.state
        assert.deepStrictEqual(
          state.view as unknown as ReadonlyArray<Message>,
          expected.messages,
          `seed ${seed} at ${state.view.length}`
        )
        const request = requestOf(state, "You are a coding agent.", { before })
        const fresh = requestOf(uncarried(state), "You are a coding agent.", { before: uncarried(before) })
        assert.deepStrictEqual(request, fresh, `request, seed ${seed} at ${state.view.length}`)
        prepared++
        offloads += expected.offloaded.length
      }
    }
    assert.isAbove(prepared, 500)
    assert.isAbove(offloads, 0)
  })

  it("decides a branch from an older state as a fresh eviction does (the index belongs to the newest view)", () => {
    const session = asMessageParams(generateSession(5, { messages: 300 }))
    let state = emptyState()
    const kept: Array<ConversationState> = []
    for (const message of session) {
      state = message.role === "assistant" ? recordReply(state, message).state : appendMessage(state, message).state
      if (message.role === "user") {
        state = prepareStep(state, { minSavings: 0, ...IN_PLACE }).transition.state
        kept.push(state)
      }
    }
    // step again from every tenth kept state, after the index moved on to the newest view
    for (const old of kept.filter((_, i) => i % 10 === 0)) {
      const next = appendMessage(old, { role: "user", content: "and now?" }).state
      const branched = prepareStep(next, { minSavings: 0, ...IN_PLACE }).transition.state
      const fresh = evictStaleToolResults(next.view as unknown as ReadonlyArray<Message>, DEFAULT_KEEP_RECENT, {
        minSavings: 0,
        pinned: next.hot.pinned
      })
      assert.deepStrictEqual(branched.view as unknown as ReadonlyArray<Message>, fresh.messages)
    }
  })

  it("a caller that copies the view (or builds a state around a copy) gets the same requests at every later step", () => {
    /** One agent loop over a session; `copy` rewrites the state before the k-th prepare. */
    const run = (
      seed: number,
      copy: (state: ConversationState, k: number) => ConversationState
    ): Array<Request> => {
      const session = asMessageParams(generateSession(seed, { messages: 400 }))
      let state = emptyState()
      const requests: Array<Request> = []
      for (const message of session) {
        state = message.role === "assistant"
          ? recordReply(state, message, { input_tokens: 1_000, output_tokens: 10 }).state
          : appendMessage(state, message).state
        // every append carries for its own view again, whatever the state before it carried
        assert.strictEqual(state.carried?.view, state.view as unknown)
        if (message.role !== "user" || typeof message.content === "string") continue
        state = copy(state, requests.length)
        const before = state
        state = prepareStep(state, { minSavings: 0, ...IN_PLACE }).transition.state
        requests.push(requestOf(state, "You are a coding agent.", { before }))
      }
      return requests
    }
    for (const seed of [3, 8, 13]) {
      const plain = run(seed, (state) => state)
      // every third step: the same state with a copied view (its carry now belongs to another array)
      const copied = run(seed, (state, k) => k % 3 === 0 ? { ...state, view: [...state.view] } : state)
      // every fourth step: a state built by hand from a copy, with no carry at all
      const rebuilt = run(
        seed,
        (state, k) =>
          k % 4 === 1
            ? {
              view: state.view.slice(),
              hot: state.hot,
              epoch: state.epoch,
              pending: state.pending,
              usage: state.usage,
              // which thinking the API drops is the state's knowledge, not the view's: a hand-built state keeps it
              ...(state.unboundThinking === undefined ? {} : { unboundThinking: state.unboundThinking })
            }
            : state
      )
      assert.isAbove(plain.length, 50)
      assert.deepStrictEqual(copied, plain, `seed ${seed}: copied views`)
      assert.deepStrictEqual(rebuilt, plain, `seed ${seed}: states built around a copy`)
    }
  })

  it("the carry is in the state, never in its JSON", () => {
    let state = emptyState()
    for (const message of asMessageParams(generateSession(2, { messages: 60 }))) {
      state = message.role === "assistant" ? recordReply(state, message).state : appendMessage(state, message).state
    }
    state = prepareStep(state, { minSavings: 0, ...IN_PLACE }).transition.state
    assert.isDefined(state.carried)
    assert.notInclude(JSON.stringify(state), "carried")
    assert.deepStrictEqual(JSON.parse(JSON.stringify(state)).view, JSON.parse(JSON.stringify(state.view)))
    // a carry spread into a plain object is not one: the next steps decide from scratch and send the same requests
    const next = (s: ConversationState) =>
      prepareStep(appendMessage(s, { role: "user", content: "and now?" }).state, { minSavings: 0, ...IN_PLACE })
        .transition.state
    const spread = { ...state, carried: { ...state.carried } as typeof state.carried }
    assert.deepStrictEqual(requestOf(next(spread), "s"), requestOf(next(state), "s"))
  })
})
