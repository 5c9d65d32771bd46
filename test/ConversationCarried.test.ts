import { assert, describe, it } from "@effect/vitest"
import {
  appendMessage,
  asMessageParams,
  closePending,
  type ConversationState,
  emptyState,
  prepareStep,
  recordReply,
  requestOf
} from "../src/Conversation.ts"
import { DEFAULT_KEEP_RECENT, evictStaleToolResults } from "../src/Evict.ts"
import type { Message } from "../src/Message.ts"
import { generateSession } from "./fixtures/Conversation.ts"

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
        const expected = evictStaleToolResults(closed.view as unknown as ReadonlyArray<Message>, DEFAULT_KEEP_RECENT, {
          pinned: closed.hot.pinned
        })
        const step = prepareStep(state)
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
        state = prepareStep(state, { minSavings: 0 }).transition.state
        kept.push(state)
      }
    }
    // step again from every tenth kept state, after the index moved on to the newest view
    for (const old of kept.filter((_, i) => i % 10 === 0)) {
      const next = appendMessage(old, { role: "user", content: "and now?" }).state
      const branched = prepareStep(next, { minSavings: 0 }).transition.state
      const fresh = evictStaleToolResults(next.view as unknown as ReadonlyArray<Message>, DEFAULT_KEEP_RECENT, {
        minSavings: 0,
        pinned: next.hot.pinned
      })
      assert.deepStrictEqual(branched.view as unknown as ReadonlyArray<Message>, fresh.messages)
    }
  })
})
