/**
 * `Conversation` with today's Messages API (issue 27): content-less system messages go through as they are (rule 26),
 * the trigger reads the last message iteration (rule 25), `recordReply` takes the SDK's reply and keeps its id and stop
 * reason in the log (resume restores them), and each stop reason of rule 31 is a transition. Requests are judged by the
 * independent checker (`fixtures/ApiRules.ts`).
 */
import type Anthropic from "@anthropic-ai/sdk"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Conversation } from "../src/Conversation.ts"
import {
  appendMessage,
  type ConversationState,
  emptyState,
  type MessageParam,
  prepareStep,
  recordReply
} from "../src/ConversationState.ts"
import type { Request } from "../src/Request.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { SessionLog } from "../src/SessionLog.ts"
import type { MemorySessions } from "../src/SessionStore.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { filesOfMessage } from "../src/Summary.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { checkRequest, formatApiViolations } from "./fixtures/ApiRules.ts"
import { resumedFrom } from "./fixtures/ConversationReplay.ts"
import { FILES_HEADER } from "../src/internal/summary.ts"

const user = (text: string): MessageParam => ({ role: "user", content: text })
const assistant = (text: string): MessageParam => ({ role: "assistant", content: [{ type: "text", text }] })
const big = (label: string, n = 2_000) => `${label} `.repeat(n)

const assertValid = (request: Request, where: string) => {
  const violations = checkRequest(request)
  assert.strictEqual(violations.length, 0, `${where}: ${formatApiViolations(violations)}`)
}

const effortLow = { role: "system", output_config: { effort: "low" } } as unknown as MessageParam

/** A reply as `client.messages.create` returns it (SDK 1.14's `Message`, every field). */
const sdkReply = (
  id: string,
  content: Array<Anthropic.ContentBlock>,
  stop: Anthropic.StopReason,
  usage: Partial<Anthropic.Usage> = {}
): Anthropic.Message => ({
  id,
  type: "message",
  role: "assistant",
  model: "claude-sonnet-4-5",
  content,
  container: null,
  diagnostics: null,
  stop_details: null,
  stop_reason: stop,
  stop_sequence: null,
  usage: {
    input_tokens: 1_000,
    output_tokens: 50,
    cache_creation: { ephemeral_5m_input_tokens: 200, ephemeral_1h_input_tokens: 0 },
    cache_creation_input_tokens: 200,
    cache_read_input_tokens: 300,
    inference_geo: null,
    output_tokens_details: null,
    server_tool_use: null,
    service_tier: "standard",
    speed: null,
    ...usage
  }
})

const withoutCache = (block: object): object => {
  const { cache_control: _, ...rest } = block as { cache_control?: unknown }
  return rest
}

const textBlock = (text: string): Anthropic.TextBlock => ({ type: "text", text, citations: null })

/** Three web-search iterations over a 60k context: the top-level input adds them up to 180k (rule 25). */
const threeSearches = {
  input_tokens: 180_000,
  output_tokens: 500,
  iterations: [
    { type: "message", input_tokens: 60_000, output_tokens: 100 },
    { type: "message", input_tokens: 60_000, output_tokens: 200 },
    { type: "message", input_tokens: 60_000, output_tokens: 500 }
  ]
}

/** 200k window, 50k left, compacting only at the window: 180k compacts, 60k does not. */
const wide = CompactionPolicy.makeUnsafe({
  contextWindow: 200_000,
  minRemaining: 50_000,
  compactAtTokens: 150_000,
  keepRecentTokens: 1_500,
  keepRecentTurns: 1
})

/** Whether the trigger fires on `state` under `policy`: `prepareStep`'s verdict. */
const triggerFires = (state: ConversationState, policy: CompactionPolicy): boolean =>
  prepareStep(state, { policy }).compact

const small = CompactionPolicy.makeUnsafe({
  contextWindow: 60_000,
  minRemaining: 5_000,
  keepRecentTokens: 1_500,
  keepRecentTurns: 1
})

const memory = (policy: CompactionPolicy) =>
  Conversation.layerMemory({ policy, minSavings: 0, minFreedTokens: 300 }).pipe(
    Layer.provide(ExtractiveSummarizer.layer)
  )

const logged = (store: MemorySessions, policy: CompactionPolicy) =>
  Conversation.layerLogged({ policy, minSavings: 0, minFreedTokens: 300 }).pipe(
    Layer.provide(Layer.fresh(SessionLog.layerMemory({ store }))),
    Layer.provide(ExtractiveSummarizer.layer)
  )

/** A few long turns, so a compaction has a head to summarize. */
const longTurns = (conversation: Conversation["Service"], n = 6) =>
  Effect.gen(function* () {
    for (let i = 0; i < n; i++) {
      yield* conversation.append(user(`question ${i} ${big(`q${i}`)}`))
      yield* conversation.recordReply(assistant(`answer ${i} ${big(`a${i}`)}`), {
        input_tokens: 1_000,
        output_tokens: 10
      })
    }
  })

describe("Conversation: content-less system messages (rule 26)", () => {
  it("a system message with output_config and no content is stored as it is, its private keys dropped", () => {
    const stored = (message: MessageParam) =>
      appendMessage(appendMessage(emptyState(), user("hi")).state, message).state
    assert.strictEqual(stored(effortLow).view.at(-1), effortLow)
    const withPrivate = { ...effortLow, _note: "mine" } as unknown as MessageParam
    assert.deepStrictEqual(stored(withPrivate).view.at(-1), effortLow)
  })

  it.effect("appended through Conversation, it reaches the request and the request passes the checker", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      yield* conversation.append(user("hello"))
      yield* conversation.append(effortLow)
      const prepared = yield* conversation.prepare
      assert.deepStrictEqual(prepared.request.messages.at(-1), effortLow)
      assertValid(prepared.request, "a request ending on an output_config system message")
    }).pipe(Effect.provide(memory(small))))
})

describe("Conversation: usage as the API reports it (rule 25)", () => {
  it("the state keeps usage.iterations and cache_creation; three 60k searches do not trigger a 200k window", () => {
    const s0 = appendMessage(emptyState(), user("search the web")).state
    const s1 = recordReply(s0, assistant("found it"), {
      ...threeSearches,
      cache_creation: { ephemeral_5m_input_tokens: 10, ephemeral_1h_input_tokens: 20 }
    }).state
    assert.deepStrictEqual(s1.usage?.usage.iterations, threeSearches.iterations)
    assert.deepStrictEqual(s1.usage?.usage.cache_creation, {
      ephemeral_5m_input_tokens: 10,
      ephemeral_1h_input_tokens: 20
    })
    assert.isFalse(triggerFires(s1, wide))
    // the same report without its iterations reads 180k and fires
    assert.isTrue(
      triggerFires(recordReply(s0, assistant("found it"), { input_tokens: 180_000, output_tokens: 500 }).state, wide)
    )
  })

  it.effect("end to end: prepare does not compact a 60k context after three 60k search iterations", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      yield* longTurns(conversation)
      yield* conversation.append(user("search the web"))
      yield* conversation.recordReply(assistant("found it"), threeSearches)
      const prepared = yield* conversation.prepare
      assert.isUndefined(prepared.compaction)
      assert.strictEqual(prepared.epoch, 0)
    }).pipe(Effect.provide(memory(wide))))
})

describe("Conversation: the SDK's reply (recordReply)", () => {
  it.effect("takes a Message, keeps its usage, and logs its id and stop reason; resume restores them", () =>
    Effect.gen(function* () {
      const store: MemorySessions = new Map()
      const reply = sdkReply("msg_01", [textBlock("hi there")], "end_turn", {
        iterations: undefined as never
      } as Partial<Anthropic.Usage>)
      const live = yield* Effect.gen(function* () {
        const conversation = yield* Conversation
        yield* conversation.append(user("hello"))
        return yield* conversation.recordReply(reply)
      }).pipe(Effect.provide(logged(store, small)))
      assert.deepStrictEqual(live.view.at(-1), { role: "assistant", content: [textBlock("hi there")] })
      assert.deepStrictEqual(live.reply, { id: "msg_01", stopReason: "end_turn", requestEpoch: 0 })
      assert.deepStrictEqual(live.usage?.usage, {
        input_tokens: 1_000,
        output_tokens: 50,
        cache_read_input_tokens: 300,
        cache_creation_input_tokens: 200,
        cache_creation: { ephemeral_5m_input_tokens: 200, ephemeral_1h_input_tokens: 0 }
      })
      const lines = store.get("memory")!.map((e) => JSON.parse(e.line))
      assert.strictEqual(lines.at(-1).meta.conversation.replyId, "msg_01")
      assert.strictEqual(lines.at(-1).meta.conversation.stopReason, "end_turn")
      assert.notInclude(JSON.stringify(lines.at(-1).message), "msg_01")
      const resumed = yield* resumedFrom(store)
      assert.deepStrictEqual(resumed.reply, live.reply)
      assert.deepStrictEqual(resumed.usage, live.usage)
    }))

  it("takes a BetaMessage with usage.iterations: the trigger reads its last message iteration", () => {
    const s0 = appendMessage(emptyState(), user("search the web")).state
    const beta = {
      ...sdkReply("msg_02", [textBlock("found it")], "end_turn"),
      context_management: null,
      usage: { ...sdkReply("m", [], "end_turn").usage, ...threeSearches, fallback_credit: null }
    } as unknown as Anthropic.Beta.Messages.BetaMessage
    const s1 = recordReply(s0, beta).state
    assert.deepStrictEqual(s1.usage?.usage.iterations, threeSearches.iterations)
    assert.deepStrictEqual(s1.reply, { id: "msg_02", stopReason: "end_turn", requestEpoch: 0 })
    assert.isFalse(triggerFires(s1, wide))
  })

  it("a MessageParam reply has no id or stop reason, and says it came with no usage", () => {
    const s0 = appendMessage(emptyState(), user("hello")).state
    const s1 = recordReply(s0, assistant("hi")).state
    assert.deepStrictEqual(s1.reply, { requestEpoch: 0, noUsage: true })
    const s2 = recordReply(s1, assistant("hi again"), { input_tokens: 10, output_tokens: 2 }).state
    assert.deepStrictEqual(s2.reply, { requestEpoch: 0 })
  })
})

describe("Conversation: stop reasons (rule 31)", () => {
  it.effect("model_context_window_exceeded makes the next prepare compact, once", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      yield* longTurns(conversation)
      yield* conversation.append(user("one more"))
      yield* conversation.recordReply(
        sdkReply("msg_03", [textBlock("partial answer")], "model_context_window_exceeded", { input_tokens: 2_000 })
      )
      const prepared = yield* conversation.prepare
      assert.strictEqual(prepared.compaction?._tag, "Compacted")
      assert.strictEqual(prepared.epoch, 1)
      assertValid(prepared.request, "the request after an overflow")
      const again = yield* conversation.prepare
      assert.isUndefined(again.compaction)
    }).pipe(Effect.provide(memory(wide))))

  it.effect("pause_turn: the paused message is sent back as it is, with no offload or compaction before it", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      yield* longTurns(conversation)
      yield* conversation.append(user("search the web"))
      const paused: Array<Anthropic.ContentBlock> = [
        textBlock("searching"),
        { type: "server_tool_use", id: "srv_1", name: "web_search", input: { query: "effect" } } as never
      ]
      // the usage alone would compact: a paused turn is continued first
      const reply = sdkReply("msg_04", paused, "pause_turn", { input_tokens: 190_000 })
      yield* conversation.recordReply(reply, reply.usage)
      const prepared = yield* conversation.prepare
      assert.isUndefined(prepared.compaction)
      assert.deepStrictEqual(prepared.offloaded, [])
      const last = prepared.request.messages.at(-1)!
      assert.deepStrictEqual({ ...last, content: (last.content as Array<object>).map(withoutCache) }, {
        role: "assistant",
        content: paused
      })
      assert.deepStrictEqual(
        (last.content as Array<{ type: string }>).map((b) => b.type),
        ["text", "server_tool_use"]
      )
      assertValid(prepared.request, "the request that continues a paused turn")
      // the continuation is recorded after it; the turn is one to the API
      yield* conversation.recordReply(
        sdkReply(
          "msg_05",
          [
            { type: "web_search_tool_result", tool_use_id: "srv_1", content: [] } as never,
            textBlock("done")
          ],
          "end_turn",
          { input_tokens: 3_000 }
        )
      )
      yield* conversation.append(user("thanks"))
      assertValid((yield* conversation.prepare).request, "the request after the continued turn")
    }).pipe(Effect.provide(memory(wide))))

  it.effect("compaction (threshold mode, paused): the next prepare adds the files message after the block", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      yield* conversation.append(user("fix /src/a.ts"))
      yield* conversation.recordReply({
        role: "assistant",
        content: [{ type: "tool_use", id: "r1", name: "read", input: { path: "/src/a.ts" } }]
      })
      yield* conversation.append({
        role: "user",
        content: [{ type: "tool_result", tool_use_id: "r1", content: big("alpha") }]
      })
      const block = {
        type: "compaction",
        content: "The user asked to fix /src/a.ts; it was read.",
        encrypted_content: null
      }
      yield* conversation.recordReply(sdkReply("msg_06", [block as never], "compaction" as never))
      const prepared = yield* conversation.prepare
      const messages = prepared.request.messages
      const files = messages.at(-1)!
      assert.strictEqual(files.role, "user")
      assert.include(JSON.stringify(files), FILES_HEADER)
      assert.deepStrictEqual(filesOfMessage(files as never)?.read, ["/src/a.ts"])
      assert.deepStrictEqual((messages.at(-2)!.content as Array<unknown>)[0], block)
      assertValid(prepared.request, "the request that resumes after a paused compaction")
      // once: the next prepare adds nothing
      const again = yield* conversation.prepare
      assert.strictEqual(again.request.messages.length, messages.length)
    }).pipe(Effect.provide(memory(wide))))

  it.effect("compaction (threshold mode): the files message keeps within what the summary budget leaves the block", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      yield* conversation.append(user("audit every module"))
      const path = (i: number) =>
        `/home/dev/projects/acme-platform/packages/service-${i % 40}/src/feature-${i}/index.ts`
      for (let i = 0; i < 600; i++) {
        yield* conversation.recordReply({
          role: "assistant",
          content: [{ type: "tool_use", id: `r${i}`, name: "read", input: { path: path(i) } }]
        })
        yield* conversation.append({
          role: "user",
          content: [{ type: "tool_result", tool_use_id: `r${i}`, content: "ok" }]
        })
      }
      const block = {
        type: "compaction",
        content: `Audited the modules. ${"Notes. ".repeat(2_000)}`,
        encrypted_content: null
      }
      yield* conversation.recordReply(sdkReply("msg_07", [block as never], "compaction" as never))
      const prepared = yield* conversation.prepare
      const messages = prepared.request.messages
      const files = filesOfMessage(messages.at(-1)! as never)
      assert.isDefined(files)
      const sent = estimateTokens(messages.slice(-2) as never)
      assert.isAtMost(sent, wide.summaryBudgetTokens, "the block and the files message")
      const omitted = (files as { readonly omitted?: { readonly read: number } }).omitted
      assert.strictEqual(files!.read.length + (omitted?.read ?? 0), 600, "every path listed or counted")
      assert.strictEqual(files!.read.at(-1), path(599))
      assertValid(prepared.request, "the request that resumes after the compaction")
    }).pipe(Effect.provide(memory(wide))))
})
