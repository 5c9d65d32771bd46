/**
 * Thinking binding (API-RULES 29, issue 27 finding 4): a thinking block is bound to what precedes it, and every
 * rewrite the library makes (an offloaded result, a summary head, a renamed id, a dropped empty block) invalidates the
 * thinking after it. The library tracks those blocks (`ConversationState.unboundThinking`, restored on resume), asks
 * for `block_binding: drop_block` with its beta once there are any, stops counting them, prices them in eviction's
 * rent-or-buy, keeps the reply's `input_transformations`, and `validate` reports a changed prefix. Requests are judged
 * by the independent checker (`fixtures/ApiRules.ts`, whose `bindThinking` signs like the API binds) and the local
 * server.
 */
import Anthropic from "@anthropic-ai/sdk"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Conversation } from "../src/Conversation.ts"
import {
  applyCompaction,
  type ConversationState,
  emptyState,
  type MessageParam,
  recordReply
} from "../src/ConversationState.ts"
import { type Request, requestOf } from "../src/Request.ts"
import { finishCompaction, prepareCompaction } from "../src/Compact.ts"
import { evictStaleToolResults } from "../src/Evict.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { SessionLog } from "../src/SessionLog.ts"
import type { MemorySessions } from "../src/SessionStore.ts"
import { mergePositions, prefixChanged, thinkingAfter } from "../src/internal/thinkingBinding.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { estimateContentTokens, estimateTokens } from "../src/Tokens.ts"
import { validate } from "../src/Validate.ts"
import { bindThinking, checkRequest, formatApiViolations } from "./fixtures/ApiRules.ts"
import * as MessagesApiServer from "./fixtures/MessagesApiServer.ts"
import { Reply, THINKING_BINDING_BETA } from "./fixtures/MessagesApiServer.ts"
import { resumedFrom } from "./fixtures/ConversationReplay.ts"

const user = (text: string): MessageParam => ({ role: "user", content: text })

/** A message without its `cache_control` markers (they move every request and are not part of any prefix). */
const withoutMarks = (m: unknown): unknown =>
  JSON.parse(JSON.stringify(m, (k, v) => (k === "cache_control" ? undefined : v)))
const big = (label: string, n = 600) => `${label} `.repeat(n)
const THINKING = { type: "enabled", budget_tokens: 1024 } as const

/** The model: a reply whose thinking is bound to the request's messages, as the API signs it, then a call. */
const replyTo = (request: Request, n: number): MessageParam => ({
  role: "assistant",
  content: [
    { type: "thinking", thinking: `plan ${n}`, signature: bindThinking(request.messages, []) },
    { type: "tool_use", id: `call_${n}`, name: "bash", input: { command: `cat file${n}.txt` } }
  ]
})

const result = (n: number): MessageParam => ({
  role: "user",
  content: [{ type: "tool_result", tool_use_id: `call_${n}`, content: big(`output${n}`) }]
})

const layer = (
  store: MemorySessions,
  thinking?: typeof THINKING | {
    readonly type: "enabled"
    readonly budget_tokens: number
    readonly block_binding: { readonly prefix_mismatch_behavior: "error" }
  },
  appendOnly?: boolean
) =>
  Conversation.layerLogged({
    ...(appendOnly === undefined ? {} : { appendOnly }),
    keepRecent: 1,
    minSavings: 0,
    policy: CompactionPolicy.makeUnsafe({
      contextWindow: 1_000_000,
      minRemaining: 1_000,
      keepRecentTokens: 1_000,
      keepRecentTurns: 1
    }),
    ...(thinking === undefined ? {} : { thinking })
  }).pipe(
    Layer.provide(Layer.fresh(SessionLog.layerMemory({ store }))),
    Layer.provide(ExtractiveSummarizer.layer)
  )

/** Runs `turns` agent turns through the service; returns every prepared request. */
const session = (turns: number) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    yield* conversation.append(user("go through the files"))
    const requests: Array<Request> = []
    for (let n = 0; n < turns; n++) {
      const prepared = yield* conversation.prepare
      requests.push(prepared.request)
      yield* conversation.recordReply(replyTo(prepared.request, n), { input_tokens: 1_000, output_tokens: 10 })
      yield* conversation.append(result(n))
    }
    requests.push((yield* conversation.prepare).request)
    return { requests, state: yield* conversation.state }
  })

describe("thinkingBinding: which blocks a rewrite invalidates", () => {
  const view: ReadonlyArray<Message> = [
    { role: "user", content: "a" },
    {
      role: "assistant",
      content: [{ type: "thinking", thinking: "t", signature: "s1" }, { type: "text", text: "x" }, {
        type: "redacted_thinking",
        data: "d"
      }]
    },
    { role: "user", content: "b" },
    { role: "assistant", content: [{ type: "thinking", thinking: "u", signature: "s2" }] }
  ]

  it("thinkingAfter lists the thinking and redacted thinking blocks strictly after a position", () => {
    assert.deepStrictEqual(thinkingAfter(view, { message: 0, block: 0 }), [
      { message: 1, block: 0 },
      { message: 1, block: 2 },
      { message: 3, block: 0 }
    ])
    assert.deepStrictEqual(thinkingAfter(view, { message: 1, block: 0 }), [
      { message: 1, block: 2 },
      { message: 3, block: 0 }
    ])
    assert.deepStrictEqual(thinkingAfter(view, { message: 2, block: 0 }), [{ message: 3, block: 0 }])
  })

  it("mergePositions is a sorted union", () => {
    assert.deepStrictEqual(
      mergePositions([{ message: 1, block: 0 }, { message: 3, block: 0 }], [{ message: 1, block: 0 }, {
        message: 2,
        block: 1
      }]),
      [{ message: 1, block: 0 }, { message: 2, block: 1 }, { message: 3, block: 0 }]
    )
  })

  it("prefixChanged finds the signed blocks whose prefix differs from the reference, cache_control aside", () => {
    assert.deepStrictEqual(prefixChanged(view, view), [])
    const marked = view.map((m, i) =>
      i === 0 ? { role: "user", content: [{ type: "text", text: "a", cache_control: { type: "ephemeral" } }] } : m
    ) as ReadonlyArray<Message>
    // a string content is its one text block (a breakpoint turns one into the other)
    assert.deepStrictEqual(prefixChanged(marked, view), [])
    const same = [{ role: "user", content: [{ type: "text", text: "a" }] }, ...view.slice(1)] as ReadonlyArray<Message>
    const sameMarked = [
      { role: "user", content: [{ type: "text", text: "a", cache_control: { type: "ephemeral" } }] },
      ...view.slice(1)
    ] as ReadonlyArray<Message>
    assert.deepStrictEqual(prefixChanged(sameMarked, same), [])
    const rewritten = [view[0]!, view[1]!, { role: "user", content: "B" }, view[3]!] as ReadonlyArray<Message>
    assert.deepStrictEqual(prefixChanged(rewritten, view), [{ message: 3, block: 0 }])
  })
})

/** A compaction policy that keeps one small turn, for the four-turn states below. */
const policy = CompactionPolicy.makeUnsafe({
  contextWindow: 100_000,
  minRemaining: 1_000,
  keepRecentTokens: 500,
  keepRecentTurns: 1
})

/**
 * Four turns through the pure transitions: a question, a reply whose thinking is bound to its request (its text
 * `thinking(n)` when given), and the call's result.
 */
const fourTurns = (thinking?: (n: number) => string): ConversationState => {
  let state: ConversationState = emptyState()
  for (let n = 0; n < 4; n++) {
    state = { ...state, view: [...state.view, user(`question ${n} ${big(`q${n}`, 300)}`)] }
    const reply = replyTo(requestOf(state), n)
    if (thinking !== undefined) (reply.content as Array<{ thinking?: string }>)[0]!.thinking = thinking(n)
    state = recordReply(state, reply).state
    state = { ...state, view: [...state.view, result(n)], pending: [] }
  }
  return state
}

describe("Conversation: thinking after a rewrite (rule 29)", () => {
  it.effect("appendOnly false: an offload invalidates the thinking after it; the request asks for drop_block", () =>
    Effect.gen(function* () {
      const store: MemorySessions = new Map()
      const { requests, state } = yield* session(4).pipe(Effect.provide(layer(store, THINKING, false)))
      assert.isAbove((state.unboundThinking ?? []).length, 0, "the offloads invalidated thinking")
      const last = requests.at(-1)!
      assert.deepStrictEqual(last.thinking, { ...THINKING, block_binding: { prefix_mismatch_behavior: "drop_block" } })
      assert.deepStrictEqual(last.betas, [THINKING_BINDING_BETA])
      for (const [i, request] of requests.entries()) {
        const v = checkRequest(request)
        assert.strictEqual(v.length, 0, `request ${i}: ${formatApiViolations(v)}`)
      }
      // the first request precedes every rewrite: the caller's config as it is
      assert.deepStrictEqual(requests[0]!.thinking, THINKING)
      assert.isUndefined(requests[0]!.betas)
      // a resumed conversation knows the same blocks
      assert.deepStrictEqual((yield* resumedFrom(store)).unboundThinking, state.unboundThinking)
    }))

  it.effect("appendOnly false, no thinking config: the request leaves the invalidated thinking out", () =>
    Effect.gen(function* () {
      const store: MemorySessions = new Map()
      const { requests, state } = yield* session(4).pipe(Effect.provide(layer(store, undefined, false)))
      const unbound = state.unboundThinking ?? []
      assert.isAbove(unbound.length, 0, "the offloads invalidated thinking")
      const last = requests.at(-1)!
      assert.isUndefined(last.thinking)
      assert.isUndefined(last.betas)
      for (const [i, request] of requests.entries()) {
        const v = checkRequest(request)
        assert.strictEqual(v.length, 0, `request ${i}: ${formatApiViolations(v)}`)
      }
      // every thinking block of the view but the invalidated ones is sent
      const thinkingOf = (messages: ReadonlyArray<MessageParam>) =>
        messages.flatMap((m) => typeof m.content === "string" ? [] : m.content.filter((b) => b.type === "thinking"))
      assert.strictEqual(thinkingOf(last.messages).length, thinkingOf(state.view).length - unbound.length)
    }))

  it.effect("by default, thinking seen in a reply keeps the conversation append-only: every request is accepted", () =>
    Effect.gen(function* () {
      for (const thinking of [undefined, THINKING]) {
        const store: MemorySessions = new Map()
        const { requests, state } = yield* session(6).pipe(Effect.provide(layer(store, thinking)))
        assert.strictEqual(state.appendOnly, "thinking")
        assert.deepStrictEqual(state.unboundThinking ?? [], [])
        for (const [i, request] of requests.entries()) {
          const v = checkRequest(request)
          assert.strictEqual(v.length, 0, `request ${i}: ${formatApiViolations(v)}`)
          // nothing was rewritten: each request extends the one before it
          if (i > 0) {
            const before = requests[i - 1]!.messages.map((m) => JSON.stringify(withoutMarks(m)))
            const now = request.messages.map((m) => JSON.stringify(withoutMarks(m)))
            assert.deepStrictEqual(now.slice(0, before.length), before, `request ${i} rewrote an earlier message`)
          }
        }
        if (thinking !== undefined) assert.deepStrictEqual(requests.at(-1)!.thinking, THINKING)
        // the reason is in the log: a resumed conversation decides the same
        assert.strictEqual((yield* resumedFrom(store)).appendOnly, "thinking")
      }
    }))

  it.effect("a config with its own block_binding opts out", () =>
    Effect.gen(function* () {
      const store: MemorySessions = new Map()
      const own = { ...THINKING, block_binding: { prefix_mismatch_behavior: "error" } } as const
      const { requests } = yield* session(4).pipe(Effect.provide(layer(store, own)))
      assert.deepStrictEqual(requests.at(-1)!.thinking, own)
      assert.isUndefined(requests.at(-1)!.betas)
    }))

  it.effect("the reason survives a compaction: its checkpoint holds it, and the kept turns carry no thinking", () =>
    Effect.gen(function* () {
      const store: MemorySessions = new Map()
      const compacted = yield* Effect.gen(function* () {
        yield* session(6)
        const conversation = yield* Conversation
        // the session is one request of many steps: summarize up to a safe cut inside it
        const { outcome } = yield* conversation.compact({ upTo: (yield* conversation.state).view.length - 4 })
        assert.strictEqual(outcome._tag, "Compacted")
        return yield* conversation.state
      }).pipe(Effect.provide(layer(store)))
      assert.strictEqual(compacted.appendOnly, "thinking")
      assert.isFalse(
        compacted.view.some((m) => typeof m.content !== "string" && m.content.some((b) => b.type === "thinking"))
      )
      // resumed from the compaction's checkpoint alone (no reply after it)
      const resumed = yield* resumedFrom(store)
      assert.strictEqual(resumed.appendOnly, "thinking")
      assert.deepStrictEqual(resumed.view, compacted.view)
    }))

  it("a compaction invalidates every thinking block it keeps; blocks created after it are bound", () => {
    const state = fourTurns()
    const plan = prepareCompaction(state.view, policy, { minFreedTokens: 1 })
    assert.strictEqual(plan._tag, "Planned")
    if (plan._tag !== "Planned") return
    const finished = finishCompaction(plan, {
      text: "[summary] files were read",
      model: "test",
      usage: { input_tokens: 0, output_tokens: 0 },
      summarizer: "test"
    } as never)
    // by default the kept turns' stale thinking is stripped: nothing left to bind
    const stripped = applyCompaction(state, finished).state
    assert.isFalse(
      stripped.view.some((m) => typeof m.content !== "string" && m.content.some((b) => b.type === "thinking"))
    )
    assert.deepStrictEqual(stripped.unboundThinking, undefined)
    assert.deepStrictEqual(checkRequest(requestOf(stripped)), [])
    // with "bind" (and a thinking config) it is kept, and the requests ask the API to drop it
    const compacted = applyCompaction(state, finished, { staleThinking: "bind", thinking: THINKING }).state
    // "bind" without a thinking config cannot carry the binding: stripped
    assert.deepStrictEqual(applyCompaction(state, finished, { staleThinking: "bind" }).state.view, stripped.view)
    const kept = compacted.view.flatMap((m, i) =>
      typeof m.content === "string"
        ? []
        : m.content.flatMap((b, j) => b.type === "thinking" ? [{ message: i, block: j }] : [])
    )
    assert.isAbove(kept.length, 0)
    assert.deepStrictEqual(compacted.unboundThinking, kept)
    // the blocks the state marks are exactly the ones the checker finds unbound
    const request = requestOf(compacted, undefined, { thinking: THINKING })
    assert.deepStrictEqual(checkRequest(request), [])
    assert.deepStrictEqual(
      checkRequest({ messages: request.messages }).filter((v) => v.rule === 29).map((v) => ({
        message: v.message,
        block: v.block
      })),
      kept
    )
    const next = recordReply(compacted, replyTo(requestOf(compacted), 9)).state
    assert.deepStrictEqual(next.unboundThinking, kept, "the new reply's thinking is bound to the compacted view")
  })

  it("the estimates count nothing for the thinking the API drops: compaction's before and after, and breakpoints", () => {
    const state = fourTurns((n) => big(`reasoning${n}`, 400))
    // the blocks the independent checker finds unbound in a request of `s`, and their estimated tokens
    // (a config that keeps the API's 400 sends them, so the checker finds them)
    const keeps = { thinking: { ...THINKING, block_binding: { prefix_mismatch_behavior: "error" as const } } }
    const droppedTokens = (s: ConversationState): number =>
      checkRequest({ messages: requestOf(s, undefined, keeps).messages }).filter((v) => v.rule === 29).reduce(
        (sum, v) => {
          const block = (s.view[v.message!]!.content as Array<unknown>)[v.block!]
          return sum + estimateContentTokens([block as never])
        },
        0
      )
    // a rewrite of the first result (as an offload makes it) invalidates the thinking of every later reply
    const view0 = state.view.map((m, i) =>
      i === 2
        ? { role: "user" as const, content: [{ type: "tool_result" as const, tool_use_id: "call_0", content: "gone" }] }
        : m
    )
    const rewritten: ConversationState = {
      ...state,
      view: view0,
      unboundThinking: thinkingAfter(view0 as Array<Message>, { message: 2, block: -1 })
    }
    const dropped = droppedTokens(rewritten)
    assert.isAbove(dropped, 1_000)
    const plan = prepareCompaction(rewritten.view, policy, {
      minFreedTokens: 1,
      unboundThinking: rewritten.unboundThinking
    })
    assert.strictEqual(plan._tag, "Planned")
    if (plan._tag !== "Planned") return
    assert.strictEqual(plan.tokensBefore, estimateTokens(rewritten.view as Array<Message>) - dropped)
    const finished = finishCompaction(plan, {
      text: "[summary] files were read",
      model: "test",
      usage: { input_tokens: 0, output_tokens: 0 },
      summarizer: "test"
    } as never)
    const compacted = applyCompaction(rewritten, finished).state
    assert.strictEqual(finished.outcome._tag, "Compacted")
    if (finished.outcome._tag !== "Compacted") return
    assert.strictEqual(
      finished.outcome.tokensAfter,
      estimateTokens(compacted.view as Array<Message>) - droppedTokens(compacted)
    )
    // the newest block's breakpoint needs a cacheable prefix: the thinking the API drops does not make one
    const view: Array<MessageParam> = [
      user("start"),
      {
        role: "assistant",
        content: [
          { type: "thinking", thinking: big("reasoning", 2_000), signature: "sig" },
          { type: "tool_use", id: "c0", name: "bash", input: { command: "ls" } }
        ]
      },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "c0", content: "a" }] }
    ]
    const bound: ConversationState = { ...emptyState(), view }
    const marked = (s: ConversationState) =>
      JSON.stringify(requestOf(s, undefined, { minCacheTokens: 1_024 }).messages).includes("cache_control")
    assert.isTrue(marked(bound), "the bound thinking makes the prefix cacheable")
    assert.isFalse(marked({ ...bound, unboundThinking: [{ message: 1, block: 0 }] }), "the dropped one does not")
  })

  it("a config that cannot carry block_binding (none, disabled, between_tools) leaves unbound thinking out", () => {
    const view: Array<MessageParam> = [
      user("start"),
      {
        role: "assistant",
        content: [
          { type: "thinking", thinking: "bound", signature: "s0" },
          { type: "tool_use", id: "c0", name: "bash", input: { command: "ls" } },
          { type: "thinking", thinking: "unbound", signature: "s1" },
          { type: "tool_use", id: "c1", name: "bash", input: { command: "pwd" } }
        ]
      },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "c0", content: "a" },
          { type: "tool_result", tool_use_id: "c1", content: "b" }
        ]
      }
    ]
    const state: ConversationState = { ...emptyState(), view, unboundThinking: [{ message: 1, block: 2 }] }
    const signatures = (request: Request) =>
      (request.messages[1]!.content as ReadonlyArray<{ readonly signature?: string }>).flatMap((b) =>
        b.signature === undefined ? [] : [b.signature]
      )
    for (const thinking of [undefined, { type: "disabled" }, { type: "between_tools" }] as const) {
      const request = requestOf(state, undefined, thinking === undefined ? {} : { thinking })
      assert.deepStrictEqual(signatures(request), ["s0"], JSON.stringify(thinking))
      assert.isUndefined(request.betas)
    }
    for (const thinking of [THINKING, { type: "adaptive" }] as const) {
      const request = requestOf(state, undefined, { thinking })
      assert.deepStrictEqual(signatures(request), ["s0", "s1"])
      assert.deepStrictEqual(request.thinking, {
        ...thinking,
        block_binding: { prefix_mismatch_behavior: "drop_block" }
      })
    }
    // the state is never changed: the view keeps the block
    assert.strictEqual(state.view, view)
  })

  it("a renamed tool_use id before interleaved thinking invalidates that thinking", () => {
    let state: ConversationState = emptyState()
    state = { ...state, view: [user("start")] }
    state = recordReply(state, {
      role: "assistant",
      content: [{ type: "tool_use", id: "dup", name: "bash", input: { command: "ls" } }]
    }).state
    state = {
      ...state,
      view: [...state.view, { role: "user", content: [{ type: "tool_result", tool_use_id: "dup", content: "a" }] }],
      pending: []
    }
    const reply: MessageParam = {
      role: "assistant",
      content: [
        { type: "thinking", thinking: "first", signature: bindThinking(state.view, []) },
        { type: "tool_use", id: "dup", name: "bash", input: { command: "pwd" } },
        { type: "thinking", thinking: "after the call", signature: "sig-after" },
        { type: "text", text: "" },
        { type: "text", text: "done" }
      ]
    }
    const after = recordReply(state, reply).state
    // the reused id is renamed (block 1): the first thinking block keeps its prefix, the one after the call does not
    assert.deepStrictEqual(after.unboundThinking, [{ message: 3, block: 2 }])
  })

  it("an SDK reply's input_transformations go in the state's reply", () => {
    const state = { ...emptyState(), view: [user("hi")] }
    const transformations = [{
      type: "thinking_dropped",
      path: "messages.1.content.0",
      reason: "prefix_binding_mismatch"
    }]
    const next = recordReply(state, {
      id: "msg_1",
      type: "message",
      role: "assistant",
      content: [{ type: "text", text: "ok" }],
      stop_reason: "end_turn",
      usage: { input_tokens: 10, output_tokens: 2 },
      input_transformations: transformations
    } as never).state
    assert.deepStrictEqual(next.reply?.inputTransformations, transformations)
  })
})

describe("eviction's rent-or-buy counts the thinking a rewrite drops", () => {
  it("an offload that pays on its cache reads alone is held back by the thinking it would drop", () => {
    const messages: Array<Message> = [{ role: "user", content: "start" }]
    for (let n = 0; n < 60; n++) {
      messages.push({
        role: "assistant",
        content: [
          { type: "thinking", thinking: `reasoning ${n}`, signature: `s${n}` },
          { type: "tool_use", id: `c${n}`, name: "bash", input: { command: `cat f${n}` } }
        ]
      })
      messages.push({
        role: "user",
        content: [{ type: "tool_result", tool_use_id: `c${n}`, content: big(`out${n}`, 400) }]
      })
    }
    const thinkingFrom = (perBlock: number) => (from: number) =>
      messages.slice(from).filter((m) => m.role === "assistant").length * perBlock
    const without = evictStaleToolResults(messages, 1, { cacheCold: false })
    assert.isAbove(without.offloaded.length, 0, "the cache reads paid alone buy the rewrite")
    // a little thinking lost does not change that; 500 tokens of reasoning per turn, thought again at 5x, does
    assert.isAbove(evictStaleToolResults(messages, 1, { droppedThinking: thinkingFrom(10) }).offloaded.length, 0)
    const held = evictStaleToolResults(messages, 1, { droppedThinking: thinkingFrom(500) })
    assert.strictEqual(held.offloaded.length, 0)
    assert.strictEqual(held.messages, messages)
    // a cold cache rewrites everything anyway
    assert.isAbove(
      evictStaleToolResults(messages, 1, { cacheCold: true, droppedThinking: thinkingFrom(500) }).offloaded.length,
      0
    )
  })
})

describe("validate: ThinkingPrefixChanged", () => {
  it("reports a signed thinking block whose prefix changed, unless the request drops such blocks", () => {
    const before: ReadonlyArray<Message> = [
      { role: "user", content: "read a" },
      { role: "assistant", content: [{ type: "tool_use", id: "r", name: "read", input: { path: "a" } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "r", content: "long file" }] },
      {
        role: "assistant",
        content: [{ type: "thinking", thinking: "t", signature: "sig" }, { type: "text", text: "ok" }]
      },
      { role: "user", content: "thanks" }
    ]
    assert.deepStrictEqual(validate(before, before), [])
    const offloaded = before.map((m, i) =>
      i === 2 ? { role: "user", content: [{ type: "tool_result", tool_use_id: "r", content: "[offloaded]" }] } : m
    ) as ReadonlyArray<Message>
    const v = validate(offloaded, before)
    assert.deepStrictEqual(v.map((x) => x._tag), ["ThinkingPrefixChanged"])
    assert.deepStrictEqual(validate(offloaded, before, { binding: "drop_block" }), [])
  })
})

describe("the local server: rule 29 in both modes", () => {
  const post = (url: string, body: unknown, beta?: string) =>
    Effect.promise(async () => {
      const response = await fetch(`${url}/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", ...(beta === undefined ? {} : { "anthropic-beta": beta }) },
        body: JSON.stringify(body)
      })
      return { status: response.status, text: await response.text() }
    })
  const base = { model: "m", max_tokens: 16, stream: true }
  const prefix = [user("read a.ts"), { role: "assistant", content: [{ type: "text", text: "reading" }] }, user("fix")]
  const thought = {
    role: "assistant",
    content: [{ type: "thinking", thinking: "plan", signature: bindThinking(prefix, []) }, {
      type: "thinking",
      thinking: "more",
      signature: bindThinking(prefix, [{ type: "thinking", thinking: "plan", signature: bindThinking(prefix, []) }])
    }, { type: "text", text: "done" }]
  }
  const rewritten = [user("[summary]"), prefix[2]!, thought, user("thanks")]
  const drop = { ...THINKING, block_binding: { prefix_mismatch_behavior: "drop_block" } }

  it.effect("on demand: a 400 without drop_block; with it, the turn's consecutive thinking blocks are dropped", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(Reply.compaction("summary"), Reply.stream(["ok"]))
      const onDemand = { ...base, compaction: { type: "summarize" } }
      const refused = yield* post(server.url, { ...onDemand, messages: rewritten }, "compact-2026-09-04")
      assert.strictEqual(refused.status, 400)
      assert.include(refused.text, "thinking_prefix_mismatch")
      const ok = yield* post(
        server.url,
        { ...onDemand, messages: rewritten, thinking: drop },
        `compact-2026-09-04,${THINKING_BINDING_BETA}`
      )
      assert.strictEqual(ok.status, 200)
      assert.include(ok.text, `"path":"messages.2.content.0"`)
      assert.include(ok.text, `"path":"messages.2.content.1"`)
      // without the beta the blocks are dropped all the same, and nothing is reported
      const quiet = yield* post(server.url, { ...base, messages: rewritten, thinking: drop })
      assert.strictEqual(quiet.status, 200)
      assert.notInclude(quiet.text, "input_transformations")
    })))

  it.effect("appendOnly false, through the SDK: a request after an offload is accepted, the drops recorded", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const client = new Anthropic({ apiKey: "test", baseURL: server.url, maxRetries: 0 })
      const store: MemorySessions = new Map()
      const program = Effect.gen(function* () {
        const conversation = yield* Conversation
        yield* conversation.append(user("go through the files"))
        for (let n = 0; n < 4; n++) {
          const prepared = yield* conversation.prepare
          yield* conversation.recordReply(replyTo(prepared.request, n), { input_tokens: 1_000, output_tokens: 10 })
          yield* conversation.append(result(n))
        }
        const prepared = yield* conversation.prepare
        server.enqueue(Reply.stream(["all read"]))
        const reply = yield* Effect.promise(() =>
          client.beta.messages.stream({ ...prepared.request, model: "claude-sonnet-4-5", max_tokens: 2048 } as never)
            .finalMessage()
        )
        yield* conversation.recordReply(reply as never)
        return yield* conversation.state
      })
      const state = yield* program.pipe(Effect.provide(layer(store, THINKING, false)))
      const body = server.requests.at(-1)!.body
      assert.deepStrictEqual((body.thinking as { block_binding?: unknown }).block_binding, {
        prefix_mismatch_behavior: "drop_block"
      })
      const dropped = state.reply?.inputTransformations ?? []
      assert.deepStrictEqual(
        dropped.map((t) => t.path),
        (state.unboundThinking ?? []).map((p) => `messages.${p.message}.content.${p.block}`)
      )
      assert.isAbove(dropped.length, 0)
    })))
})
