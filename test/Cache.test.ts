import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { applyBreakpoints, MAX_BREAKPOINTS, minCacheableTokens, planBreakpoints } from "../src/Cache.ts"
import {
  appendMessage,
  asMessageParams,
  type ConversationState,
  emptyState,
  prepareStep,
  recordReply
} from "../src/ConversationState.ts"
import { requestOf } from "../src/Request.ts"
import type { ContentBlock, Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { estimateContentTokens, estimateMessageTokens } from "../src/Tokens.ts"
import { checkRequest, formatApiViolations } from "./fixtures/ApiRules.ts"
import { conversationArbitrary, generateSession } from "./fixtures/Conversation.ts"
import { corpus } from "./fixtures/Corpus.ts"
import { evictionFrontier } from "../src/internal/eviction.ts"
import { acceptsBreakpoint, breakpointBefore, countBreakpoints } from "../src/internal/breakpoints.ts"

const SYSTEM = "You are a coding agent. ".repeat(400)

type AnyBlock = { readonly type: string; readonly cache_control?: unknown; readonly text?: unknown }

/** Every block of a request carrying `cache_control`, with where it is. */
const marked = (request: { readonly system?: unknown; readonly messages: ReadonlyArray<Message> }) => {
  const out: Array<{ readonly message: number; readonly block: number; readonly type: string; readonly b: AnyBlock }> =
    []
  if (Array.isArray(request.system)) {
    request.system.forEach((b: AnyBlock, i: number) =>
      b.cache_control != null && out.push({ message: -1, block: i, type: b.type, b })
    )
  }
  request.messages.forEach((m, i) => {
    if (typeof m.content === "string") return
    m.content.forEach((b, j) => {
      if ((b as AnyBlock).cache_control != null) out.push({ message: i, block: j, type: b.type, b: b as AnyBlock })
    })
  })
  return out
}

const noBreakpoints = (state: ConversationState): boolean => countBreakpoints(state.view as never) === 0

/** The checks every prepared request must pass; returns the number of breakpoints on message blocks. */
const checkPrepared = (
  state: ConversationState,
  request: ReturnType<typeof requestOf>,
  minTokens: number,
  label: string,
  deep: boolean
): number => {
  const messages = request.messages as unknown as ReadonlyArray<Message>
  const marks = marked({ system: request.system, messages })
  assert.isAtMost(marks.length, MAX_BREAKPOINTS, `${label}: at most 4 breakpoints`)
  for (const mark of marks) {
    if (mark.message < 0) continue
    assert.notInclude(["thinking", "redacted_thinking"], mark.type, `${label}: no breakpoint on ${mark.type}`)
    if (mark.type === "text") assert.isTrue(String(mark.b.text).trim().length > 0, `${label}: not on empty text`)
    // the prefix up to and including the marked block is at least the minimum (estimated, system included)
    let prefix = typeof request.system === "string" ? estimateContentTokens(request.system) : 0
    if (Array.isArray(request.system)) prefix = estimateContentTokens(request.system as never)
    for (let i = 0; i < mark.message; i++) prefix += estimateMessageTokens(state.view[i] as never)
    const content = messages[mark.message]!.content as ReadonlyArray<ContentBlock>
    const viewed = state.view[mark.message]!.content
    prefix += typeof viewed === "string"
      ? estimateContentTokens(viewed)
      : estimateContentTokens((viewed as ReadonlyArray<ContentBlock>).slice(0, mark.block + 1))
    assert.isAtLeast(prefix, minTokens, `${label}: breakpoint at ${mark.message}.${mark.block} below the minimum`)
    const original = state.view[mark.message]!.content
    assert.strictEqual(content.length, typeof original === "string" ? 1 : original.length)
  }
  const violations = checkRequest(request as never)
  assert.deepStrictEqual(violations, [], `${label}:\n${formatApiViolations(violations)}`)
  assert.isTrue(noBreakpoints(state), `${label}: the state carries no breakpoint`)
  if (!deep) return marks.filter((m) => m.message >= 0).length
  // the request is the view plus breakpoints: strip them and it equals the view
  // (a string content that got a breakpoint is sent as its one text block)
  const normal = (list: ReadonlyArray<unknown>) =>
    JSON.parse(JSON.stringify(
      (list as ReadonlyArray<Message>).map((m) =>
        typeof m.content === "string" ? { ...m, content: [{ type: "text", text: m.content }] } : m
      ),
      (k, v) => k === "cache_control" ? undefined : v
    ))
  assert.deepStrictEqual(normal(request.messages), normal(state.view), `${label}: the request is the view`)
  return marks.filter((m) => m.message >= 0).length
}

/** Replays `messages` through the pure transitions, checking every request; returns how many had a frontier mark. */
const replayChecked = (
  messages: ReadonlyArray<Message>,
  options: { readonly system?: string; readonly minTokens: number; readonly label: string; readonly deep?: boolean }
): { requests: number; withThree: number } => {
  let state = emptyState()
  let requests = 0
  let withThree = 0
  const policy = CompactionPolicy.makeUnsafe({ contextWindow: 60_000, minRemaining: 5_000, keepRecentTokens: 8_000 })
  for (const message of asMessageParams(messages)) {
    if (message.role !== "assistant") {
      state = appendMessage(state, message).state
      continue
    }
    const before = state
    const step = prepareStep(state, { policy })
    state = step.transition.state
    const request = requestOf(state, options.system, { minCacheTokens: options.minTokens, before })
    const n = checkPrepared(
      state,
      request,
      options.minTokens,
      `${options.label} request ${requests}`,
      options.deep ?? true
    )
    if (n >= 2) withThree++
    requests++
    state = recordReply(state, message).state
  }
  return { requests, withThree }
}

describe("Cache", () => {
  it("accepts breakpoints on every block type but thinking, redacted thinking and empty text", () => {
    assert.isTrue(acceptsBreakpoint({ type: "text", text: "hi" }))
    assert.isFalse(acceptsBreakpoint({ type: "text", text: "  " }))
    assert.isFalse(acceptsBreakpoint({ type: "thinking", thinking: "x", signature: "s" }))
    assert.isFalse(acceptsBreakpoint({ type: "redacted_thinking", data: "x" }))
    assert.isTrue(acceptsBreakpoint({ type: "tool_use", id: "a", name: "bash", input: {} }))
    assert.isTrue(acceptsBreakpoint({ type: "tool_result", tool_use_id: "a", content: "x" }))
  })

  it("knows the minimum cacheable length by model family", () => {
    assert.strictEqual(minCacheableTokens("claude-sonnet-4-5"), 1024)
    assert.strictEqual(minCacheableTokens("claude-opus-4-5"), 4096)
    assert.strictEqual(minCacheableTokens("claude-haiku-4-5"), 4096)
    assert.strictEqual(minCacheableTokens(undefined), 4096)
  })

  it("puts the frontier breakpoint on the last allowed block before the result, skipping thinking", () => {
    const messages: Array<Message> = [
      { role: "user", content: "go" },
      {
        role: "assistant",
        content: [{ type: "text", text: "reading" }, { type: "tool_use", id: "a", name: "read", input: { path: "x" } }]
      },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "a", content: "y".repeat(4000) }] },
      { role: "assistant", content: [{ type: "thinking", thinking: "hm", signature: "s" }] }
    ]
    assert.deepStrictEqual(breakpointBefore(messages, { message: 2, block: 0 }), { message: 1, block: 1 })
    assert.deepStrictEqual(breakpointBefore(messages, { message: 3, block: 1 }), { message: 2, block: 0 })
    assert.deepStrictEqual(evictionFrontier(messages), { message: 2, block: 0 })
    assert.strictEqual(breakpointBefore(messages, { message: 0, block: 0 }), undefined)
  })

  it("never places more than 4, drops those below the minimum, and removes foreign cache_control", () => {
    const messages: Array<Message> = generateSession(7, { messages: 60 })
    const plan = planBreakpoints(messages, {
      systemTokens: 5_000,
      hasSystem: true,
      frontier: { message: 2, block: 0 },
      previousFrontier: { message: 1, block: 0 },
      minTokens: 1
    })
    assert.isAtMost(plan.blocks.length + (plan.system ? 1 : 0), MAX_BREAKPOINTS)
    const high = planBreakpoints(messages, { minTokens: Number.MAX_SAFE_INTEGER })
    assert.deepStrictEqual(high, { system: false, blocks: [] })
    const foreign = messages.map((m) =>
      typeof m.content === "string"
        ? m
        : { ...m, content: m.content.map((b) => ({ ...b, cache_control: { type: "ephemeral" } }) as ContentBlock) }
    )
    const applied = applyBreakpoints(foreign, plan.blocks)
    assert.strictEqual(countBreakpoints(applied), plan.blocks.length)
    assert.strictEqual(
      countBreakpoints(foreign),
      foreign.reduce((n, m) => n + (typeof m.content === "string" ? 0 : m.content.length), 0)
    )
  })

  it.prop(
    "on generated conversations every request has at most 4 breakpoints on allowed blocks and passes the API rules",
    [conversationArbitrary({ allowInvalid: true })],
    ([messages]) => {
      replayChecked(messages, { system: SYSTEM, minTokens: 1, label: "generated" })
      replayChecked(messages, { minTokens: 200, label: "generated, no system" })
    },
    { timeout: 180_000, arbitrary: { runs: 500 } } // per runtime: fast-check draws new cases in each, 1,000 per CI run
  )

  it("on generated long sessions the frontier and the newest message both carry a breakpoint", () => {
    for (const seed of [1, 2, 3]) {
      const result = replayChecked(generateSession(seed, { messages: 300 }), {
        system: SYSTEM,
        minTokens: 1024,
        label: `seed ${seed}`
      })
      assert.isAbove(result.withThree, result.requests / 2, `seed ${seed}: frontier marks on most requests`)
    }
  })

  it.effect("on every corpus session every request passes the placement rules", () =>
    Effect.sync(() => {
      for (const session of corpus()) {
        replayChecked(session.messages, { system: SYSTEM, minTokens: 1024, label: session.name, deep: false })
      }
    }), 180_000)

  it("the state stays free of breakpoints and the request is rebuilt the same from the same state", () => {
    let state = emptyState()
    for (const message of asMessageParams(generateSession(11, { messages: 80 }))) {
      state = message.role === "assistant" ? recordReply(state, message).state : appendMessage(state, message).state
    }
    const a = requestOf(state, SYSTEM, { minCacheTokens: 1 })
    const b = requestOf(state, SYSTEM, { minCacheTokens: 1 })
    assert.deepStrictEqual(a, b)
    assert.isTrue(noBreakpoints(state))
    assert.isTrue(Array.isArray(a.system) && a.system.at(-1)?.cache_control !== undefined)
  })
})
