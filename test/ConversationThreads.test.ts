/**
 * Server-held threads in `Conversation` (API-RULES 22–24): with `threads: true` a request continues the latest reply
 * with only the messages after it while the view only grew, and starts a new thread with the whole view after any
 * rewrite, a refusal, a fallback reply, a cut stream or a message appended in flight. Judged independently: each
 * request's full conversation is rebuilt by the thread rules (what the server holds under the reply it continues,
 * plus the messages it sends) and must equal the request a conversation without threads sends; the real SDK runs
 * against the local server, which holds threads and enforces the rules.
 */
import Anthropic from "@anthropic-ai/sdk"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Conversation, type Prepared, threadReplay } from "../src/Conversation.ts"
import type { MessageParam, SdkReply } from "../src/ConversationState.ts"
import type { Request } from "../src/Request.ts"
import { resumeState } from "../src/internal/conversation/resume.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy, type ReportedUsage } from "../src/Policy.ts"
import { SessionLog } from "../src/SessionLog.ts"
import type { MemorySessions } from "../src/SessionStore.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { checkRequest, formatApiViolations, withoutCacheControl } from "./fixtures/ApiRules.ts"
import { generateSession, prng } from "./fixtures/Conversation.ts"
import { comparableState } from "./fixtures/ResumeReference.ts"
import * as MessagesApiServer from "./fixtures/MessagesApiServer.ts"
import { Reply } from "./fixtures/MessagesApiServer.ts"

const SYSTEM = "You are a careful coding agent."
const TOOLS: ReadonlyArray<Anthropic.ToolUnion> = [
  { name: "read", description: "Read a file", input_schema: { type: "object", properties: {} } }
]
const usage = (input: number): ReportedUsage => ({ input_tokens: input, output_tokens: 50 })

let replyCount = 0
/** An SDK reply of `content` with a fresh id. */
const sdkReply = (
  content: ReadonlyArray<Record<string, unknown>>,
  options: { readonly stop?: string | null; readonly fallback?: boolean; readonly input?: number } = {}
): SdkReply => ({
  id: `msg_${++replyCount}`,
  type: "message",
  role: "assistant",
  content: content as never,
  stop_reason: options.stop === undefined
    ? (content.some((b) => b.type === "tool_use") ? "tool_use" : "end_turn")
    : options.stop,
  usage: {
    ...usage(options.input ?? 1_000),
    ...(options.fallback === true
      ? { iterations: [{ type: "fallback_message", input_tokens: 1, output_tokens: 1 }] }
      : {})
  }
})
const text = (t: string) => ({ type: "text", text: t })
const call = (id: string) => ({ type: "tool_use", id, name: "read", input: { path: `src/${id}.ts` } })
const results = (...ids: ReadonlyArray<string>): MessageParam => ({
  role: "user",
  content: ids.map((id) => ({ type: "tool_result" as const, tool_use_id: id, content: `contents of ${id}` }))
})
const user = (t: string): MessageParam => ({ role: "user", content: t })

/**
 * The thread rules, written from API-RULES 22–24 alone: what the server holds under each reply id (the conversation
 * up to and including the reply, and the thread's `system` and `tools`), each reply continued at most once.
 */
class ThreadModel {
  private readonly held = new Map<string, { messages: Array<unknown>; system: unknown; tools: unknown }>()
  private readonly continued = new Set<string>()

  /** The full conversation `request` stands for: its messages, or on `continue` the held ones plus those sent. */
  conversation(
    request: Request
  ): {
    readonly messages: Array<unknown>
    readonly system: unknown
    readonly tools: unknown
    readonly held?: Array<unknown>
  } {
    const thread = request.thread
    assert.isDefined(thread, "every request on threads carries `thread`")
    if (thread!.type === "create") {
      return {
        messages: withoutCacheControl(request.messages) as Array<unknown>,
        system: request.system,
        tools: request.tools
      }
    }
    const id = thread!.previous_message_id
    const held = this.held.get(id)
    assert.isDefined(held, `continue of ${id}, which the server does not hold`)
    assert.isFalse(this.continued.has(id), `${id} is continued twice (thread_already_continued)`)
    this.continued.add(id)
    assert.isUndefined(request.system, "a continue repeats no system")
    assert.isUndefined(request.tools, "a continue repeats no tools")
    return {
      messages: [...held!.messages, ...withoutCacheControl(request.messages) as Array<unknown>],
      system: held!.system,
      tools: held!.tools,
      held: held!.messages
    }
  }

  /** The server holds the conversation of the request and its reply under the reply's id. */
  hold(conversation: ReturnType<ThreadModel["conversation"]>, reply: SdkReply): void {
    this.held.set(reply.id, {
      system: conversation.system,
      tools: conversation.tools,
      messages: [...conversation.messages, { role: "assistant", content: reply.content }]
    })
  }
}

/** Asserts that `threaded` stands for exactly the request `plain` sends, and returns the conversation it stands for. */
const sameConversation = (model: ThreadModel, threaded: Request, plain: Request, label: string) => {
  const conversation = model.conversation(threaded)
  const expected = withoutCacheControl(plain.messages)
  if (JSON.stringify(conversation.messages) !== JSON.stringify(expected)) {
    assert.deepStrictEqual(conversation.messages, expected, `${label}: the thread's conversation`)
  }
  assert.deepStrictEqual(
    withoutCacheControl(conversation.system),
    withoutCacheControl(plain.system),
    `${label}: system`
  )
  assert.deepStrictEqual(withoutCacheControl(conversation.tools), withoutCacheControl(plain.tools), `${label}: tools`)
  const violations = checkRequest(threaded as never, {
    ...(conversation.held === undefined ? {} : { held: conversation.held as never }),
    ...(Array.isArray(conversation.tools) ? { tools: conversation.tools } : {})
  })
  assert.strictEqual(violations.length, 0, `${label}: ${formatApiViolations(violations)}`)
  return conversation
}

/**
 * The conversation service with or without threads. `cacheOnly`: a rewrite priced by the cache alone
 * (`threadRestart: false`), so the threaded conversation makes the decisions the plain one makes and the two can be
 * compared request by request (test/ThreadCost.test.ts judges the thread-aware decisions).
 */
const layers = (threads: boolean, policy?: CompactionPolicy, cacheOnly = false) =>
  Conversation.layerMemory({
    threads,
    system: SYSTEM,
    tools: TOOLS,
    ...(policy === undefined ? {} : { policy }),
    ...(cacheOnly ? { threadRestart: false } : {})
  }).pipe(Layer.provide(ExtractiveSummarizer.layer))

describe("Conversation on threads: the requests", () => {
  it.effect("create first, then continue with only the new messages, no system or tools", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      yield* conversation.append(user("Fix the build."))
      const first = yield* conversation.prepare
      assert.deepStrictEqual(first.request.thread, { type: "create" })
      assert.isDefined(first.request.system)
      assert.isDefined(first.request.tools)
      assert.isUndefined(first.fullRequest)
      const reply = sdkReply([text("Reading."), call("t1")])
      yield* conversation.recordReply(reply, undefined, { requestEpoch: first.epoch })
      assert.deepStrictEqual((yield* conversation.state).thread, { previousMessageId: reply.id, held: 2 })
      yield* conversation.append(results("t1"))
      const second = yield* conversation.prepare
      assert.deepStrictEqual(second.request.thread, { type: "continue", previous_message_id: reply.id })
      assert.isUndefined(second.request.system)
      assert.isUndefined(second.request.tools)
      assert.deepStrictEqual(withoutCacheControl(second.request.messages), [withoutCacheControl(results("t1"))])
      assert.isDefined(second.fullRequest)
      assert.deepStrictEqual(second.fullRequest!.thread, { type: "create" })
      assert.strictEqual(second.fullRequest!.messages.length, 3)
      assert.isDefined(second.fullRequest!.system)
      const notFound = { status: 404, error: { type: "error", error: { details: { error_code: "thread_not_found" } } } }
      assert.strictEqual(threadReplay(second, notFound), second.fullRequest)
      assert.strictEqual(threadReplay(second, { errorCode: "thread_already_continued" }), second.fullRequest)
      assert.strictEqual(
        threadReplay(second, { error: { details: { error_code: "thread_continue_in_flight" } } }),
        second.fullRequest
      )
      assert.isUndefined(threadReplay(second, { errorCode: "rate_limit_error" }))
      assert.isUndefined(threadReplay(first, notFound), "a create has nothing to fall back to")
      assert.strictEqual(checkRequest(first.request as never).length, 0)
      const held = [...first.request.messages, { role: "assistant", content: reply.content }]
      assert.strictEqual(checkRequest(second.request as never, { held: withoutCacheControl(held) as never }).length, 0)
      assert.isAbove(checkRequest(second.request as never).length, 0, "judged alone, the results answer nothing")
      for (const prepared of [first, second]) assert.notProperty(prepared.request, "context_management")
    }).pipe(Effect.provide(layers(true))))

  it.effect("a refusal, a fallback reply, a cut stream, a renamed id or a message appended in flight starts over", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      yield* conversation.append(user("Go."))
      const step = (reply: SdkReply, after: ReadonlyArray<MessageParam>, midFlight?: MessageParam) =>
        Effect.gen(function* () {
          const prepared = yield* conversation.prepare
          if (midFlight !== undefined) yield* conversation.append(midFlight)
          yield* conversation.recordReply(reply, undefined, { requestEpoch: prepared.epoch })
          for (const m of after) yield* conversation.append(m)
          return (yield* conversation.prepare).request.thread
        })
      // a clean reply: the next request continues it
      assert.strictEqual((yield* step(sdkReply([text("ok")]), [user("a")]))?.type, "continue")
      yield* conversation.recordReply(sdkReply([text("ok")]))
      yield* conversation.append(user("b"))
      assert.strictEqual((yield* step(sdkReply([text("no")], { stop: "refusal" }), [user("c")]))?.type, "create")
      yield* conversation.recordReply(sdkReply([text("ok")]))
      yield* conversation.append(user("d"))
      assert.strictEqual((yield* step(sdkReply([text("fb")], { fallback: true }), [user("e")]))?.type, "create")
      yield* conversation.recordReply(sdkReply([text("ok")]))
      yield* conversation.append(user("f"))
      assert.strictEqual((yield* step(sdkReply([text("cut")], { stop: null }), [user("g")]))?.type, "create")
      yield* conversation.recordReply(sdkReply([text("ok")]))
      yield* conversation.append(user("h"))
      assert.strictEqual(
        (yield* step(sdkReply([text("ok")]), [user("i")], user("typed while the request was in flight")))?.type,
        "create"
      )
      yield* conversation.recordReply(sdkReply([text("ok")]))
      // a reply that reuses a tool_use id already in the view is renamed: the server holds the original id
      yield* conversation.append(user("j"))
      yield* step(sdkReply([call("dup")]), [results("dup")])
      yield* conversation.recordReply(sdkReply([text("done")]))
      yield* conversation.append(user("k"))
      assert.strictEqual((yield* step(sdkReply([call("dup")]), [results("dup")]))?.type, "create")
    }).pipe(Effect.provide(layers(true))))

  it.effect("after pause_turn the same turn continues on the thread with no new message", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      yield* conversation.append(user("Search the web."))
      const first = yield* conversation.prepare
      const paused = sdkReply([text("Searching")], { stop: "pause_turn" })
      yield* conversation.recordReply(paused, undefined, { requestEpoch: first.epoch })
      const next = yield* conversation.prepare
      assert.deepStrictEqual(next.request.thread, { type: "continue", previous_message_id: paused.id })
      assert.deepStrictEqual(next.request.messages, [])
      assert.strictEqual(next.fullRequest?.messages.length, 2)
    }).pipe(Effect.provide(layers(true))))

  it.effect("a compaction starts a new thread with the whole view", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      for (let i = 0; i < 40; i++) {
        yield* conversation.append(user(`step ${i}: ${"context ".repeat(200)}`))
        const prepared = yield* conversation.prepare
        yield* conversation.recordReply(sdkReply([text(`done ${i} ${"detail ".repeat(200)}`)]), undefined, {
          requestEpoch: prepared.epoch
        })
      }
      yield* conversation.append(user("next"))
      const compacted = yield* conversation.compact()
      assert.strictEqual(compacted.outcome._tag, "Compacted")
      assert.deepStrictEqual(compacted.request.thread, { type: "create" })
      const prepared = yield* conversation.prepare
      assert.deepStrictEqual(prepared.request.thread, { type: "create" })
      assert.deepStrictEqual(prepared.request.messages.length, (yield* conversation.state).view.length)
    }).pipe(Effect.provide(layers(true))))

  it.effect("without threads nothing changes: no thread field, no anchor", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      yield* conversation.append(user("Go."))
      yield* conversation.recordReply(sdkReply([text("ok")]))
      yield* conversation.append(user("more"))
      const prepared = yield* conversation.prepare
      assert.notProperty(prepared.request, "thread")
      assert.notProperty(prepared, "fullRequest")
      assert.notProperty(yield* conversation.state, "thread")
    }).pipe(Effect.provide(layers(false))))

  it.effect("a resume restores the thread anchor: the resumed state and its next request equal the live ones", () =>
    Effect.gen(function* () {
      const store: MemorySessions = new Map()
      const logged = Conversation.layerLogged({ threads: true, system: SYSTEM, tools: TOOLS }).pipe(
        Layer.provide(Layer.fresh(SessionLog.layerMemory({ store }))),
        Layer.provide(ExtractiveSummarizer.layer)
      )
      const live = yield* Effect.gen(function* () {
        const conversation = yield* Conversation
        yield* conversation.append(user("Fix it."))
        const p = yield* conversation.prepare
        yield* conversation.recordReply(sdkReply([call("r1")]), undefined, { requestEpoch: p.epoch })
        yield* conversation.append(results("r1"))
        return yield* conversation.state
      }).pipe(Effect.provide(logged))
      assert.isDefined(live.thread)
      const resumed = yield* Effect.gen(function* () {
        const conversation = yield* Conversation
        const state = yield* conversation.state
        return { state, prepared: yield* conversation.prepare }
      }).pipe(Effect.provide(logged))
      assert.deepStrictEqual(comparableState(resumed.state), comparableState(live))
      const loaded = yield* Effect.gen(function* () {
        return resumeState(yield* (yield* SessionLog).loaded)
      }).pipe(Effect.provide(Layer.fresh(SessionLog.layerMemory({ store }))))
      assert.deepStrictEqual(loaded.thread, live.thread)
      assert.deepStrictEqual(resumed.prepared.request.thread, {
        type: "continue",
        previous_message_id: live.thread!.previousMessageId
      })
    }))
})

/** The content a scripted reply of a generated session carries, and the reply's SDK form. */
const replyOf = (message: Message, rand: () => number, input: number): SdkReply => {
  const content =
    (typeof message.content === "string" ? [text(message.content)] : message.content) as unknown as ReadonlyArray<
      Record<string, unknown>
    >
  const roll = rand()
  return sdkReply(content, {
    input,
    ...(roll < 0.03 ? { stop: "refusal" } : roll < 0.05 ? { fallback: true } : roll < 0.07 ? { stop: null } : {})
  })
}

describe("Conversation on threads: the property", () => {
  it.effect(
    "over generated sessions, every request's rebuilt conversation equals the request without threads",
    () =>
      Effect.gen(function* () {
        const policy = CompactionPolicy.makeUnsafe({ contextWindow: 40_000 })
        let steps = 0
        let continues = 0
        let creates = 0
        let rewrites = 0
        for (let seed = 1; steps < 2_500; seed++) {
          const session = generateSession(seed, { messages: 120, maxOutput: 4_000 })
          const rand = prng(seed * 7919)
          const model = new ThreadModel()
          const service = Effect.gen(function* () {
            return yield* Conversation
          })
          const threaded = yield* Effect.provide(service, layers(true, policy, true))
          const plain = yield* Effect.provide(service, layers(false, policy))
          let previous: { readonly plain: Request; readonly reply: SdkReply; readonly held: boolean } | undefined
          for (const message of session as unknown as ReadonlyArray<MessageParam>) {
            if (message.role !== "assistant") {
              yield* threaded.append(message)
              yield* plain.append(message)
              continue
            }
            const t: Prepared = yield* threaded.prepare
            const p: Prepared = yield* plain.prepare
            steps++
            const label = `seed ${seed}, request ${steps}`
            const conversation = sameConversation(model, t.request, p.request, label)
            // an append-only step continues with only what is new; anything else starts a new thread
            const grew = previous !== undefined && (() => {
              const before = withoutCacheControl([...previous.plain.messages, {
                role: "assistant",
                content: previous.reply.content
              }])
              const now = withoutCacheControl(p.request.messages) as Array<unknown>
              return JSON.stringify(now.slice(0, (before as Array<unknown>).length)) === JSON.stringify(before)
            })()
            if (t.request.thread?.type === "continue") {
              continues++
              assert.isTrue(grew, `${label}: a continue after a rewrite`)
              assert.deepStrictEqual(
                t.request.messages,
                p.request.messages.slice(p.request.messages.length - t.request.messages.length),
                `${label}: the body holds only the new messages, as the plain request has them`
              )
              assert.strictEqual(
                t.request.messages.length,
                p.request.messages.length - previous!.plain.messages.length - 1,
                `${label}: exactly the messages after the reply`
              )
            } else {
              creates++
              if (!grew) rewrites++
              // the rules say when the server holds the reply as the view does: then an append-only step continues
              assert.isFalse(grew && previous!.held, `${label}: an append-only step after a held reply creates`)
            }
            const reply = replyOf(message as unknown as Message, rand, estimateTokens(p.request.messages as never))
            if (rand() < 0.03) {
              // a message typed while the request is in flight lands before the reply, on both
              yield* threaded.append(user("typed in flight"))
              yield* plain.append(user("typed in flight"))
            }
            yield* threaded.recordReply(reply, undefined, { requestEpoch: t.epoch })
            yield* plain.recordReply(reply, undefined, { requestEpoch: p.epoch })
            model.hold(conversation, reply)
            const stored = (yield* plain.state).view.at(-1)
            const held = reply.stop_reason !== null && reply.stop_reason !== "refusal" &&
              !(reply.usage.iterations ?? []).some((i) => i.type === "fallback_message") &&
              JSON.stringify(stored?.content) === JSON.stringify(reply.content)
            previous = { plain: p.request, reply, held }
          }
        }
        assert.isAtLeast(steps, 2_500)
        assert.isAbove(continues, steps / 2, `continues ${continues} of ${steps}`)
        assert.isAbove(rewrites, 10, `rewrites ${rewrites} (offloads, compactions) each started a new thread`)
        assert.isAbove(creates, rewrites)
      }),
    180_000
  )
})

const client = (server: MessagesApiServer.MessagesApiServer) =>
  new Anthropic({ apiKey: "sk-test", baseURL: server.url, maxRetries: 0 })

/** Sends a prepared request with the real SDK (the beta, which has `thread`); the final message or the API error. */
const send = (server: MessagesApiServer.MessagesApiServer, request: Request) =>
  Effect.tryPromise({
    try: () =>
      client(server).beta.messages.stream({
        model: "claude-sonnet-5",
        max_tokens: 1024,
        ...(request as unknown as Record<string, unknown>),
        betas: ["message-threads-2026-08-12"]
      } as never).finalMessage(),
    catch: (e) => e as InstanceType<typeof Anthropic.APIError>
  })

describe("Conversation on threads: the real SDK against the local server", () => {
  it.effect("a tool loop continues its thread; a lost thread is answered by the full request", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const server = yield* MessagesApiServer.make
        const conversation = yield* Conversation
        yield* conversation.append(user("Read the two files."))
        const replies = [
          Reply.message([text("Reading both."), call("a1"), call("a2")], { stopReason: "tool_use" }),
          Reply.message([call("a3")], { stopReason: "tool_use" }),
          Reply.message([text("Done.")])
        ]
        const answers = [results("a1", "a2"), results("a3")]
        for (let i = 0; i < replies.length; i++) {
          server.enqueue(replies[i]!)
          const prepared = yield* conversation.prepare
          assert.strictEqual(prepared.request.thread?.type, i === 0 ? "create" : "continue")
          const reply = yield* send(server, prepared.request)
          yield* conversation.recordReply(reply as never, undefined, { requestEpoch: prepared.epoch })
          if (i < answers.length) yield* conversation.append(answers[i]!)
        }
        const last = (yield* conversation.state).thread
        assert.isDefined(last)
        // the server holds exactly the view under the last reply
        assert.deepStrictEqual(
          withoutCacheControl(server.thread(last!.previousMessageId)?.messages),
          withoutCacheControl((yield* conversation.state).view)
        )
        // a server that lost the thread: 404 thread_not_found, and the full request replays it under `create`
        const fresh = yield* MessagesApiServer.make
        yield* conversation.append(user("And now?"))
        const prepared = yield* conversation.prepare
        const error = yield* Effect.flip(send(fresh, prepared.request))
        assert.strictEqual(error.status, 404)
        const replay = threadReplay(prepared, error)
        assert.isDefined(replay)
        fresh.enqueue(Reply.message([text("Here.")]))
        const reply = yield* send(fresh, replay!)
        yield* conversation.recordReply(reply as never, undefined, { requestEpoch: prepared.epoch })
        assert.strictEqual((yield* conversation.state).thread?.previousMessageId, reply.id)
        // continuing the same reply twice: the second is thread_already_continued, answered the same way
        yield* conversation.append(user("Once more."))
        const twice = yield* conversation.prepare
        fresh.enqueue(Reply.message([text("One.")]))
        yield* send(fresh, twice.request)
        const again = yield* Effect.flip(send(fresh, twice.request))
        assert.strictEqual(threadReplay(twice, again), twice.fullRequest)
      }).pipe(Effect.provide(layers(true)))
    ))

  it.effect("a non-streamed continue whose body is cut: SDK 1.17 sends it again and meets thread_already_continued", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const conversation = yield* Conversation
      yield* conversation.append(user("Read it."))
      server.enqueue(Reply.message([text("Read.")]))
      const first = yield* conversation.prepare
      yield* conversation.recordReply((yield* send(server, first.request)) as never, undefined, {
        requestEpoch: first.epoch
      })
      yield* conversation.append(user("Again."))
      const second = yield* conversation.prepare
      assert.strictEqual(second.request.thread?.type, "continue")
      /** The request sent as a non-streamed `create`, with the SDK's own retries unless `options` say otherwise. */
      const create = (options: { readonly maxRetries?: number }) =>
        Effect.tryPromise({
          try: () =>
            new Anthropic({ apiKey: "sk-test", baseURL: server.url, maxRetries: 2 }).beta.messages.create({
              model: "claude-sonnet-5",
              max_tokens: 1024,
              ...(second.request as unknown as Record<string, unknown>),
              betas: ["message-threads-2026-08-12"]
            } as never, { ...options, timeout: 5_000 }),
          catch: (e) => e
        })
      // by default the SDK resends it: the repeat of the continue is refused, and its replay would cost the whole view
      server.enqueue(Reply.cutBody([text("Lost.")]))
      const resent = yield* Effect.flip(create({}))
      assert.strictEqual(server.requests.length, 3, "the SDK sent the continue twice")
      assert.instanceOf(resent, Anthropic.APIError)
      assert.strictEqual(threadReplay(second, resent), second.fullRequest)
      assert.include(server.rejections.at(-1)!, "thread_already_continued")
      // the replay under create, then a continue from its reply: with the prepared request options the cut surfaces
      // at once, and the caller decides
      server.enqueue(Reply.message([text("Replayed.")]))
      yield* conversation.recordReply((yield* send(server, second.fullRequest!)) as never, undefined, {
        requestEpoch: second.epoch,
        replayedAfter: resent
      })
      yield* conversation.append(user("And now?"))
      const again = yield* conversation.prepare
      assert.strictEqual(again.request.thread?.type, "continue")
      server.enqueue(Reply.cutBody([text("Lost too.")]))
      const sent = server.requests.length
      const cut = yield* Effect.flip(Effect.tryPromise({
        try: () =>
          new Anthropic({ apiKey: "sk-test", baseURL: server.url, maxRetries: 2 }).beta.messages.create({
            model: "claude-sonnet-5",
            max_tokens: 1024,
            ...(again.request as unknown as Record<string, unknown>),
            betas: ["message-threads-2026-08-12"]
          } as never, { ...again.requestOptions, timeout: 5_000 }),
        catch: (e) => e
      }))
      assert.strictEqual(server.requests.length, sent + 1, "sent once")
      assert.instanceOf(cut, Anthropic.APIConnectionError)
    })).pipe(Effect.provide(layers(true))))

  it.effect("a thread lost twice in a row goes on unthreaded, kept in the log: a resume does not thread again", () =>
    Effect.gen(function* () {
      const store: MemorySessions = new Map()
      const logged = Conversation.layerLogged({ threads: true, system: SYSTEM, tools: TOOLS }).pipe(
        Layer.provide(Layer.fresh(SessionLog.layerMemory({ store }))),
        Layer.provide(ExtractiveSummarizer.layer)
      )
      yield* Effect.scoped(Effect.gen(function* () {
        const conversation = yield* Conversation
        const server = yield* MessagesApiServer.make
        yield* conversation.append(user("Read it."))
        server.enqueue(Reply.message([text("Read.")]))
        const first = yield* conversation.prepare
        yield* conversation.recordReply((yield* send(server, first.request)) as never, undefined, {
          requestEpoch: first.epoch
        })
        // the server loses the thread: 404 thread_not_found, replayed under create
        const lost = yield* MessagesApiServer.make
        yield* conversation.append(user("Again."))
        const second = yield* conversation.prepare
        assert.strictEqual(second.request.thread?.type, "continue")
        assert.deepStrictEqual(second.requestOptions, { maxRetries: 0 }, "a continue must not be resent by the SDK")
        assert.isUndefined(second.replacesLostThread)
        const notFound = yield* Effect.flip(send(lost, second.request))
        const replay = threadReplay(second, notFound)
        assert.strictEqual(replay, second.fullRequest)
        lost.enqueue(Reply.message([text("Here.")]))
        yield* conversation.recordReply((yield* send(lost, replay!)) as never, undefined, {
          requestEpoch: second.epoch,
          replayedAfter: notFound
        })
        // the first continue after it meets thread_not_found again: the server keeps no threads for us
        const lostAgain = yield* MessagesApiServer.make
        yield* conversation.append(user("And again."))
        const third = yield* conversation.prepare
        assert.strictEqual(third.request.thread?.type, "continue")
        assert.isTrue(third.replacesLostThread)
        const again = yield* Effect.flip(send(lostAgain, third.request))
        const unthreaded = threadReplay(third, again)
        assert.isDefined(unthreaded)
        assert.notProperty(unthreaded!, "thread")
        lostAgain.enqueue(Reply.message([text("Fine.")]), Reply.message([text("Still fine.")]))
        yield* conversation.recordReply((yield* send(lostAgain, unthreaded!)) as never, undefined, {
          requestEpoch: third.epoch,
          unthreaded: true,
          replayedAfter: again
        })
        assert.isTrue((yield* conversation.state).reply?.unthreaded)
        yield* conversation.append(user("One more."))
        const fourth = yield* conversation.prepare
        assert.notProperty(fourth.request, "thread")
        yield* conversation.recordReply((yield* send(lostAgain, fourth.request)) as never, undefined, {
          requestEpoch: fourth.epoch
        })
        yield* conversation.append(user("After the resume?"))
      })).pipe(Effect.provide(logged))
      // a conversation resumed from the log goes on without thread: no refused thread, no whole-view upload again
      const resumed = yield* Effect.gen(function* () {
        const conversation = yield* Conversation
        return yield* conversation.prepare
      }).pipe(Effect.provide(logged))
      assert.notProperty(resumed.request, "thread")
      assert.notProperty(resumed, "fullRequest")
    }))

  it.effect(
    "thread_fingerprint_mismatch replays under create; after thread_unsupported_request every request goes unthreaded",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const server = yield* MessagesApiServer.make
          const conversation = yield* Conversation
          /** Sends `request`, records the reply, and returns it. */
          const answer = (prepared: Prepared, request: Request, unthreaded?: boolean) =>
            Effect.flatMap(send(server, request), (reply) =>
              Effect.as(
                conversation.recordReply(reply as never, undefined, {
                  requestEpoch: prepared.epoch,
                  ...(unthreaded === undefined ? {} : { unthreaded })
                }),
                reply
              ))
          yield* conversation.append(user("Read f1."))
          server.enqueue(Reply.message([call("f1")], { stopReason: "tool_use" }))
          const first = yield* conversation.prepare
          yield* answer(first, first.request)
          yield* conversation.append(results("f1"))
          // a continue whose thread holds other create-only fields: the SDK's typed error, replayed under create
          server.enqueue(Reply.threadRefused("thread_fingerprint_mismatch"), Reply.message([text("Read.")]))
          const second = yield* conversation.prepare
          assert.strictEqual(second.request.thread?.type, "continue")
          const mismatch = yield* Effect.flip(send(server, second.request))
          assert.instanceOf(mismatch, Anthropic.Messages.ThreadFingerprintMismatchError)
          assert.strictEqual(threadReplay(second, mismatch), second.fullRequest)
          const replayed = yield* answer(second, second.fullRequest!)
          assert.strictEqual((yield* conversation.state).thread?.previousMessageId, replayed.id)
          // a thread refused for an organization setting: the same view without `thread`, and no thread after it
          yield* conversation.append(user("Now f2."))
          server.enqueue(
            Reply.threadRefused("thread_unsupported_request", ["hipaa"]),
            Reply.message([text("Two.")]),
            Reply.message([text("Three.")])
          )
          const third = yield* conversation.prepare
          assert.strictEqual(third.request.thread?.type, "continue")
          const unsupported = yield* Effect.flip(send(server, third.request))
          assert.instanceOf(unsupported, Anthropic.Messages.ThreadUnsupportedRequestError)
          const unthreaded = threadReplay(third, unsupported)
          const { thread: _thread, ...whole } = third.fullRequest!
          assert.deepStrictEqual(unthreaded, whole)
          yield* answer(third, unthreaded!, true)
          assert.isUndefined((yield* conversation.state).thread)
          yield* conversation.append(user("And f3."))
          const fourth = yield* conversation.prepare
          assert.isUndefined(fourth.request.thread)
          assert.isUndefined(fourth.fullRequest)
          yield* answer(fourth, fourth.request)
          // a create refused the same way goes without `thread` too; any other error has no replay
          const { thread: _created, ...createdWhole } = first.request
          assert.isUndefined(first.fullRequest)
          assert.deepStrictEqual(threadReplay(first, unsupported), createdWhole)
          assert.isUndefined(threadReplay(fourth, unsupported))
          assert.isUndefined(threadReplay(second, new Error("overloaded")))
          // what went out: the server (which judges each request by the checker) refused only the scripted two
          const sent = server.requests.map((r) => (r.body.thread as { readonly type?: string } | undefined)?.type)
          assert.deepStrictEqual(sent, ["create", "continue", "create", "continue", undefined, undefined])
          assert.deepStrictEqual(server.rejections, [
            "400 thread_fingerprint_mismatch (scripted)",
            "400 thread_unsupported_request (scripted)"
          ])
          for (const r of server.requests) {
            assert.deepStrictEqual(
              ["cache_control", "context_management", "fallbacks"].filter((k) => r.body[k] !== undefined),
              [],
              "nothing a thread refuses"
            )
          }
          assert.deepStrictEqual(
            withoutCacheControl(server.requests.at(-1)!.body.messages),
            withoutCacheControl((yield* conversation.state).view.slice(0, -1)),
            "the unthreaded request holds the whole view"
          )
        }).pipe(Effect.provide(layers(true)))
      )
  )
})
