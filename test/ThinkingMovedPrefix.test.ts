/**
 * Thinking whose prefix the library itself changed, judged by the local Messages API server (rule 43: each thinking
 * block it returns is signed over its whole prefix, and a request that sends one whose prefix changed is a 400 unless
 * it asks for `drop_block`) and by the independent checker (`fixtures/ApiRules.ts`), never by the library's own
 * `validate`. Driven through `Conversation` and the real SDK, as an agent loop drives them:
 * - a reply recorded after the view changed under its request (the user typed while it was in flight, or a
 *   `/compact` ran) lands after messages its thinking was not made on;
 * - a reply whose blank text block is dropped, or whose reused `tool_use` id is renamed, changes the prefix of the
 *   interleaved thinking after it, with or without a `thinking` config on the conversation;
 * - a compaction that strips a kept thinking-only reply leaves the head's system message where the API allows it.
 */
import Anthropic from "@anthropic-ai/sdk"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Conversation } from "../src/Conversation.ts"
import type { MessageParam } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import type { Request } from "../src/Request.ts"
import { SessionLog } from "../src/SessionLog.ts"
import type { MemorySessions } from "../src/SessionStore.ts"
import { checkRequest, formatApiViolations } from "./fixtures/ApiRules.ts"
import { resumedFrom } from "./fixtures/ConversationReplay.ts"
import * as MessagesApiServer from "./fixtures/MessagesApiServer.ts"
import { Reply } from "./fixtures/MessagesApiServer.ts"

const THINKING = { type: "enabled", budget_tokens: 1024 } as const

/** Where the thinking config is set: on the `Conversation`, or only on the SDK call (the README loop). */
type ThinkingOn = "conversation" | "caller"

const words = (label: string, n: number) => Array.from({ length: n }, (_, i) => `${label}${i % 97}`).join(" ")

const layer = (store: MemorySessions, on: ThinkingOn, policy?: CompactionPolicy) =>
  Conversation.layerLogged({
    ...(on === "conversation" ? { thinking: THINKING } : {}),
    ...(policy === undefined ? {} : { policy, minFreedTokens: 1 })
  }).pipe(
    Layer.provide(Layer.fresh(SessionLog.layerMemory({ store }))),
    Layer.provide(ExtractiveSummarizer.layer)
  )

/**
 * Sends `request` to the server through the SDK, the thinking config on the call when the caller sets it: the reply,
 * or the server's refusal.
 */
const send = (client: Anthropic, request: Request, on: ThinkingOn) =>
  Effect.promise(() =>
    client.beta.messages.stream({
      ...request,
      model: "claude-fable-5-1",
      max_tokens: 4096,
      ...(on === "caller" ? { thinking: THINKING } : {})
    } as never).finalMessage().then(
      (reply) => ({ ok: true as const, reply }),
      (e: unknown) => ({ ok: false as const, error: String(e) })
    )
  )

/** The server's reply content to the next request, its thinking signed over the request's prefix (rule 43). */
const scripted = (server: MessagesApiServer.MessagesApiServer, content: ReadonlyArray<Record<string, unknown>>) =>
  server.enqueue(Reply.message(content, { preservedThinking: true, stopReason: "tool_use" }))

const call = (id: string) => ({ type: "tool_use", id, name: "bash", input: { command: `run ${id}` } })
const results = (...ids: ReadonlyArray<string>): MessageParam => ({
  role: "user",
  content: ids.map((id) => ({ type: "tool_result" as const, tool_use_id: id, content: `output of ${id}` }))
})

/** `send`, its answer asserted to be a reply (not an error): the reply. */
const sendAccepted = (client: Anthropic, request: Request, on: ThinkingOn) =>
  Effect.map(send(client, request, on), (sent) => {
    assert.isTrue(sent.ok, sent.ok ? "" : sent.error)
    return sent.ok ? sent.reply : undefined
  })

/** The last request the server got is accepted and judged valid by the checker; returns how many blocks it dropped. */
const assertAccepted = (server: MessagesApiServer.MessagesApiServer, request: Request, where: string) => {
  assert.deepStrictEqual(server.rejections, [], where)
  const violations = checkRequest(request)
  assert.strictEqual(violations.length, 0, `${where}: ${formatApiViolations(violations)}`)
}

describe("a reply recorded after the view changed under its request (rules 29, 43)", () => {
  for (const on of ["conversation", "caller"] as const) {
    it.effect(`the user typed while the request was in flight (thinking on the ${on})`, () =>
      Effect.scoped(Effect.gen(function* () {
        const server = yield* MessagesApiServer.make
        const client = new Anthropic({ apiKey: "test", baseURL: server.url, maxRetries: 0 })
        const store: MemorySessions = new Map()
        const state = yield* Effect.gen(function* () {
          const conversation = yield* Conversation
          yield* conversation.append({ role: "user", content: "fix the parser" })
          const first = yield* conversation.prepare
          scripted(server, [{ type: "thinking", thinking: "read it first", signature: "s" }, call("call_1")])
          const sent = yield* sendAccepted(client, first.request, on)
          // typed while the request was in flight: the reply lands after it
          yield* conversation.append({ role: "user", content: "and the lexer too" })
          yield* conversation.recordReply(sent as never, undefined, {
            requestEpoch: first.epoch
          })
          yield* conversation.append(results("call_1"))
          const next = yield* conversation.prepare
          server.enqueue(Reply.message([{ type: "text", text: "done" }]))
          yield* sendAccepted(client, next.request, on)
          assertAccepted(server, next.request, "the request after the reply")
          return yield* conversation.state
        }).pipe(Effect.provide(layer(store, on)))
        // the reply's thinking is known to be unbound, and a resumed conversation knows it too
        assert.deepStrictEqual(state.unboundThinking, [{ message: 2, block: 0 }])
        assert.deepStrictEqual((yield* resumedFrom(store)).unboundThinking, state.unboundThinking)
      })))

    it.effect(`a compaction ran while the request was in flight (thinking on the ${on})`, () =>
      Effect.scoped(Effect.gen(function* () {
        const server = yield* MessagesApiServer.make
        const client = new Anthropic({ apiKey: "test", baseURL: server.url, maxRetries: 0 })
        const store: MemorySessions = new Map()
        const policy = CompactionPolicy.makeUnsafe({ keepRecentTokens: 200, keepRecentTurns: 1 })
        const state = yield* Effect.gen(function* () {
          const conversation = yield* Conversation
          yield* conversation.append({ role: "user", content: `task ${words("a", 500)}` })
          for (let i = 0; i < 3; i++) {
            yield* conversation.recordReply({ role: "assistant", content: [{ type: "text", text: words("b", 300) }] })
            yield* conversation.append({ role: "user", content: `more ${words(`c${i}`, 300)}` })
          }
          const first = yield* conversation.prepare
          scripted(server, [{ type: "thinking", thinking: "", signature: "s" }, call("call_9")])
          const sent = yield* sendAccepted(client, first.request, on)
          // `/compact` while the request was in flight
          const { outcome } = yield* conversation.compact()
          assert.strictEqual(outcome._tag, "Compacted")
          yield* conversation.recordReply(sent as never, undefined, {
            requestEpoch: first.epoch
          })
          yield* conversation.append(results("call_9"))
          const next = yield* conversation.prepare
          server.enqueue(Reply.message([{ type: "text", text: "done" }]))
          yield* sendAccepted(client, next.request, on)
          assertAccepted(server, next.request, "the request after the reply")
          return yield* conversation.state
        }).pipe(Effect.provide(layer(store, on, policy)))
        assert.strictEqual((state.unboundThinking ?? []).length, 1)
        assert.deepStrictEqual((yield* resumedFrom(store)).unboundThinking, state.unboundThinking)
      })))
  }

  it.effect("a reply to the request it answers, with nothing in between, keeps its thinking bound", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const client = new Anthropic({ apiKey: "test", baseURL: server.url, maxRetries: 0 })
      const store: MemorySessions = new Map()
      yield* Effect.gen(function* () {
        const conversation = yield* Conversation
        yield* conversation.append({ role: "user", content: "fix the parser" })
        for (let n = 0; n < 3; n++) {
          const prepared = yield* conversation.prepare
          assertAccepted(server, prepared.request, `request ${n}`)
          assert.isUndefined(prepared.request.betas, "nothing to drop")
          scripted(server, [{ type: "thinking", thinking: `step ${n}`, signature: "s" }, call(`call_${n}`)])
          const sent = yield* sendAccepted(client, prepared.request, "conversation")
          yield* conversation.recordReply(sent as never, undefined, {
            requestEpoch: prepared.epoch
          })
          yield* conversation.append(results(`call_${n}`))
        }
        assert.deepStrictEqual((yield* conversation.state).unboundThinking ?? [], [])
        assert.deepStrictEqual(server.droppedThinking, [])
      }).pipe(Effect.provide(layer(store, "conversation")))
    })))
})

describe("recordReply's own edits before interleaved thinking (rule 29: a dropped empty block, a renamed id)", () => {
  for (const on of ["conversation", "caller"] as const) {
    it.effect(`a blank text block dropped (thinking on the ${on})`, () =>
      Effect.scoped(Effect.gen(function* () {
        const server = yield* MessagesApiServer.make
        const client = new Anthropic({ apiKey: "test", baseURL: server.url, maxRetries: 0 })
        const store: MemorySessions = new Map()
        yield* Effect.gen(function* () {
          const conversation = yield* Conversation
          yield* conversation.append({ role: "user", content: "hello" })
          const first = yield* conversation.prepare
          scripted(server, [
            { type: "thinking", thinking: "plan", signature: "s" },
            { type: "text", text: "\n\n" },
            call("call_1"),
            { type: "thinking", thinking: "more", signature: "s" },
            call("call_2")
          ])
          const sent = yield* sendAccepted(client, first.request, on)
          yield* conversation.recordReply(sent as never)
          yield* conversation.append(results("call_1", "call_2"))
          const next = yield* conversation.prepare
          server.enqueue(Reply.message([{ type: "text", text: "done" }]))
          yield* sendAccepted(client, next.request, on)
          assertAccepted(server, next.request, "the request after the reply")
          // the first thinking block is still bound, and still sent
          const reply = next.request.messages[1]!.content as ReadonlyArray<{ readonly type: string }>
          assert.strictEqual(reply[0]!.type, "thinking")
        }).pipe(Effect.provide(layer(store, on)))
      })))

    it.effect(`a reused tool_use id renamed (thinking on the ${on})`, () =>
      Effect.scoped(Effect.gen(function* () {
        const server = yield* MessagesApiServer.make
        const client = new Anthropic({ apiKey: "test", baseURL: server.url, maxRetries: 0 })
        const store: MemorySessions = new Map()
        yield* Effect.gen(function* () {
          const conversation = yield* Conversation
          yield* conversation.append({ role: "user", content: "hello" })
          const first = yield* conversation.prepare
          scripted(server, [{ type: "thinking", thinking: "p", signature: "s" }, call("call_1")])
          const sent = yield* sendAccepted(client, first.request, on)
          yield* conversation.recordReply(sent as never)
          yield* conversation.append(results("call_1"))
          const second = yield* conversation.prepare
          scripted(server, [
            { type: "thinking", thinking: "again", signature: "s" },
            call("call_1"),
            { type: "thinking", thinking: "and more", signature: "s" },
            call("call_2")
          ])
          const again = yield* sendAccepted(client, second.request, on)
          yield* conversation.recordReply(again as never)
          yield* conversation.append(results("call_1", "call_2"))
          const next = yield* conversation.prepare
          server.enqueue(Reply.message([{ type: "text", text: "done" }]))
          yield* sendAccepted(client, next.request, on)
          assertAccepted(server, next.request, "the request after the reply")
        }).pipe(Effect.provide(layer(store, on)))
      })))
  }
})

describe("a compaction that strips a kept thinking-only reply (rules 9, 10)", () => {
  for (const on of ["conversation", "caller"] as const) {
    it.effect(`the head's system message stays where the API allows it (thinking on the ${on})`, () =>
      Effect.gen(function* () {
        const store: MemorySessions = new Map()
        const policy = CompactionPolicy.makeUnsafe({ keepRecentTokens: 200, keepRecentTurns: 1 })
        const state = yield* Effect.gen(function* () {
          const conversation = yield* Conversation
          yield* conversation.append({ role: "user", content: `first task ${words("a", 400)}` })
          yield* conversation.append({ role: "system", content: "Always answer in French." } as never)
          yield* conversation.recordReply({ role: "assistant", content: [{ type: "text", text: words("b", 400) }] })
          yield* conversation.append({ role: "user", content: `second ${words("c", 400)}` })
          yield* conversation.recordReply({ role: "assistant", content: [call("call_1")] } as MessageParam)
          yield* conversation.append({
            role: "user",
            content: [{ type: "tool_result", tool_use_id: "call_1", content: words("d", 800) }]
          })
          // a reply cut by max_tokens while it was thinking
          yield* conversation.recordReply({
            role: "assistant",
            content: [{ type: "thinking", thinking: "", signature: "sig" }]
          } as MessageParam)
          yield* conversation.append({ role: "user", content: "go on" })
          const { outcome, request } = yield* conversation.compact()
          assert.strictEqual(outcome._tag, "Compacted")
          const violations = checkRequest(request)
          assert.strictEqual(violations.length, 0, formatApiViolations(violations))
          assert.isTrue(request.messages.some((m) => (m.role as string) === "system"), "the system message is kept")
          return yield* conversation.state
        }).pipe(Effect.provide(layer(store, on, policy)))
        // a resumed conversation sends the same view
        assert.deepStrictEqual((yield* resumedFrom(store)).view, state.view)
      }))
  }
})
