/**
 * The API's own keep-tail and background compaction procedures, as its docs describe them ("Compaction that keeps
 * recent turns", "Compaction in the background", "Compaction and preserved thinking"), with `ServerCompactionSummarizer`
 * (the real SDK) against the local Messages API server, which judges rule 43 across the compaction block on its own
 * (`fixtures/MessagesApiServer.ts`): a kept thinking block stays valid only when the turns after the block follow the
 * summarized messages verbatim, under the same system and tools, and (background) when the swap goes on the first
 * request after the block came back.
 *
 * First the judge, with hand-written requests: the documented shapes are accepted, and each broken one (a kept tail
 * before the block, a message added between the block and the kept turns, a kept turn altered, a compaction under
 * other tools, a background swap sent late) is refused. Then `Conversation` in a long tool loop with thinking on
 * (set on the `Conversation`, or only on the SDK call): the exact compaction request and the exact next request of
 * each compaction, 0 requests rejected, 0 thinking blocks dropped.
 */
import Anthropic from "@anthropic-ai/sdk"
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer } from "effect"
import { finishCompaction, prepareCompaction } from "../src/Compact.ts"
import { Conversation } from "../src/Conversation.ts"
import type { MessageParam } from "../src/ConversationState.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy, zeroUsage } from "../src/Policy.ts"
import { ServerCompactionSummarizer } from "../src/ServerCompactionSummarizer.ts"
import { META_KEY } from "../src/internal/conversation/record.ts"
import { resumeState } from "../src/internal/conversation/resume.ts"
import { SessionLog } from "../src/SessionLog.ts"
import type { Loaded } from "../src/SessionEntry.ts"
import type { MemorySessions } from "../src/SessionStore.ts"
import { Summarizer, type SummarizerShape, type Summary } from "../src/Summarizer.ts"
import { filesOfMessage } from "../src/Summary.ts"
import * as MessagesApiServer from "./fixtures/MessagesApiServer.ts"
import { countTokens, Reply } from "./fixtures/MessagesApiServer.ts"

const MODEL = "claude-fable-5-1"
const THINKING = { type: "enabled", budget_tokens: 2048 } as const
const TOOLS = [{
  name: "read",
  description: "Reads a file.",
  input_schema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] }
}] as const
const OTHER_TOOLS = [{ ...TOOLS[0], description: "Reads a file, a different description." }] as const

type Block = Record<string, unknown>
type Wire = { readonly role: string; readonly content: ReadonlyArray<Block> | string }

const clientOf = (server: MessagesApiServer.MessagesApiServer) =>
  new Anthropic({ apiKey: "sk-test", baseURL: server.url, maxRetries: 0 })

/** A copy without `cache_control` (the requests' breakpoints are not part of the conversation). */
const bare = (value: unknown): unknown =>
  JSON.parse(JSON.stringify(value, (k, v) => (k === "cache_control" ? undefined : v)))

/** The result of a request: the reply's content, or the API's `error_code` of a refusal. */
const send = (
  server: MessagesApiServer.MessagesApiServer,
  body: Record<string, unknown>
): Effect.Effect<{ readonly content: ReadonlyArray<Block> } | { readonly refused: string }> =>
  Effect.promise(() =>
    clientOf(server).beta.messages.stream({ model: MODEL, max_tokens: 4096, ...body } as never).finalMessage().then(
      (reply) => ({ content: reply.content as unknown as ReadonlyArray<Block> }),
      (e: unknown) => ({
        refused: String(
          (e as { error?: { error?: { details?: { error_code?: unknown } } } }).error?.error?.details?.error_code ??
            e
        )
      })
    )
  )

const toolStep = (k: number): ReadonlyArray<Block> => [
  { type: "thinking", thinking: k % 3 === 0 ? "" : `step ${k}: read the next file`, signature: "model" },
  { type: "text", text: `Reading file ${k}.` },
  { type: "tool_use", id: `toolu_${k}`, name: "read", input: { path: `src/file${k}.ts` } }
]

const resultOf = (k: number, size = 40): Wire => ({
  role: "user",
  content: [{
    type: "tool_result",
    tool_use_id: `toolu_${k}`,
    content: `// file ${k}\n${"const x = 1;\n".repeat(size)}`
  }]
})

/**
 * A hand-driven tool loop: `steps` replies of the server with preserved thinking, each answered by a tool result.
 * Returns the history (the replies as the server sent them).
 */
const handLoop = (
  server: MessagesApiServer.MessagesApiServer,
  steps: number,
  task = "Read every file of the project.",
  interjection?: { readonly after: number; readonly text: string }
) =>
  Effect.gen(function* () {
    const history: Array<Wire> = [{ role: "user", content: task }]
    for (let k = 1; k <= steps; k++) {
      if (interjection !== undefined && k === interjection.after + 1) {
        history.push({ role: "user", content: interjection.text })
      }
      server.enqueue(Reply.message(toolStep(k), { preservedThinking: true, stopReason: "tool_use" }))
      const reply = yield* send(server, { messages: history, tools: TOOLS, thinking: THINKING })
      assert.isTrue("content" in reply, JSON.stringify(reply))
      if (!("content" in reply)) return history
      history.push({ role: "assistant", content: reply.content }, resultOf(k))
    }
    return history
  })

/** The on-demand compaction of `messages` (its block, as the reply holds it), with `tools`. */
const compactOnServer = (
  server: MessagesApiServer.MessagesApiServer,
  messages: ReadonlyArray<Wire>,
  summary: string,
  tools: ReadonlyArray<unknown> = TOOLS
) =>
  Effect.gen(function* () {
    server.enqueueCompaction(Reply.compaction(summary))
    const reply = yield* send(server, {
      messages,
      tools,
      compaction: { type: "summarize" },
      betas: ["compact-2026-09-04"]
    })
    assert.isTrue("content" in reply, JSON.stringify(reply))
    return { role: "assistant", content: "content" in reply ? reply.content : [] } as Wire
  })

const next = (messages: ReadonlyArray<Wire>, tools: ReadonlyArray<unknown> = TOOLS) => ({
  messages,
  tools,
  thinking: THINKING
})

describe("the judge: rule 43 across an on-demand compaction block (local server)", () => {
  it.live("keep-tail: the block, then the kept turns verbatim, is accepted; each broken shape is refused", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const history = yield* handLoop(server, 4)
      // compact exactly the messages of a request already sent (the second): the kept turns open with its reply
      const head = history.slice(0, 3)
      const kept = history.slice(3)
      const block = yield* compactOnServer(server, head, "Summary: files 1 and 2 were read.")
      assert.strictEqual((block.content[0] as Block | undefined)?.type, "compaction")
      // a refused request takes no reply from the queue
      const continued = (messages: ReadonlyArray<Wire>, tools?: ReadonlyArray<unknown>) =>
        send(server, next(messages, tools))

      // the kept tail before the block: the block goes first
      const before = yield* continued([...kept, block])
      assert.deepStrictEqual(before, { refused: "compaction_block_misplaced" })
      // a message added between the block and the kept turns (the files message where this library put it)
      const added = yield* continued([block, { role: "user", content: "Files read: src/file1.ts" }, ...kept])
      assert.deepStrictEqual(added, { refused: "thinking_prefix_mismatch" })
      // a kept turn altered (its tool result shortened after it was sent)
      const altered = yield* continued([block, kept[0]!, resultOf(2, 3), ...kept.slice(2)])
      assert.deepStrictEqual(altered, { refused: "thinking_prefix_mismatch" })
      // a kept turn skipped
      const skipped = yield* continued([block, ...kept.slice(2)])
      assert.deepStrictEqual(skipped, { refused: "thinking_prefix_mismatch" })
      // the request after the compaction under other tools than the thinking was made with
      const otherTools = yield* continued([block, ...kept], OTHER_TOOLS)
      assert.deepStrictEqual(otherTools, { refused: "thinking_prefix_mismatch" })
      // the documented shape
      server.enqueue(Reply.message([{ type: "text", text: "Go on." }]))
      const accepted = yield* continued([block, ...kept])
      assert.isTrue("content" in accepted, JSON.stringify(accepted))
      assert.strictEqual(server.droppedThinking.length, 0)
    })))

  it.live("keep-tail: a compaction under other tools, or whose first kept message has the last summarized role, keeps no thinking", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const history = yield* handLoop(server, 4)
      const kept = history.slice(3)
      const underOther = yield* compactOnServer(server, history.slice(0, 3), "Summary A.", OTHER_TOOLS)
      assert.deepStrictEqual(yield* send(server, next([underOther, ...kept])), { refused: "thinking_prefix_mismatch" })
      // a user message after the last tool result: kept turns that open with it have the role of the last summarized
      // message, and the API would merge the two
      const interjected = yield* handLoop(server, 3, "Read every file of the project, then the tests.", {
        after: 1,
        text: "Also read the tests."
      })
      const merged = yield* compactOnServer(server, interjected.slice(0, 3), "Summary B.")
      assert.deepStrictEqual(yield* send(server, next([merged, ...interjected.slice(3)])), {
        refused: "thinking_prefix_mismatch"
      })
      // and the same compaction as the documented one is accepted
      const good = yield* compactOnServer(server, history.slice(0, 3), "Summary C.")
      server.enqueue(Reply.message([{ type: "text", text: "Go on." }]))
      assert.isTrue("content" in (yield* send(server, next([good, ...kept]))))
    })))

  it.live("background: thinking made while the summary was written survives the swap on the next request, not later", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const history = yield* handLoop(server, 2)
      const sent = history.slice()
      // the compaction request runs (held back by the gate) while two more steps go on, on the full history
      const gate = yield* Deferred.make<void>()
      server.enqueueCompaction(
        Reply.compaction("Summary: files 1 and 2 were read.", { gate: Effect.runPromise(Deferred.await(gate)) })
      )
      const running = yield* Effect.forkChild(send(server, {
        messages: sent,
        tools: TOOLS,
        compaction: { type: "summarize" },
        betas: ["compact-2026-09-04"]
      }))
      yield* Effect.promise(() => server.waitForRequests(3))
      for (const k of [3, 4]) {
        server.enqueue(Reply.message(toolStep(k), { preservedThinking: true, stopReason: "tool_use" }))
        const reply = yield* send(server, next(history))
        assert.isTrue("content" in reply)
        if ("content" in reply) history.push({ role: "assistant", content: reply.content }, resultOf(k))
      }
      yield* Deferred.succeed(gate, undefined)
      const done = yield* Fiber.join(running)
      assert.isTrue("content" in done)
      const block = { role: "assistant", content: "content" in done ? done.content : [] } as Wire
      // drop exactly the messages sent, the block in their place, every turn appended since after it
      const swapped = [block, ...history.slice(sent.length)]
      server.enqueue(Reply.message([{ type: "text", text: "Go on." }]))
      assert.isTrue("content" in (yield* send(server, next(swapped))))

      // the same, but one more request goes on the full history after the block came back: its thinking was made
      // on a prefix the swap replaces, so a swap after it is refused
      const late = yield* handLoop(server, 2, "Read every test of the project.")
      const lateSent = late.slice()
      const lateBlock = yield* compactOnServer(server, lateSent, "Summary: late.")
      server.enqueue(Reply.message(toolStep(9), { preservedThinking: true, stopReason: "tool_use" }))
      const after = yield* send(server, next(late))
      assert.isTrue("content" in after)
      if ("content" in after) late.push({ role: "assistant", content: after.content }, resultOf(9))
      server.enqueue(Reply.message([{ type: "text", text: "Go on." }]))
      assert.deepStrictEqual(yield* send(server, next([lateBlock, ...late.slice(lateSent.length)])), {
        refused: "thinking_prefix_mismatch"
      })
    })))
})

/** What a conversation run saw. */
interface Run {
  readonly rejected: ReadonlyArray<string>
  readonly dropped: number
  readonly compactions: number
  /** On-demand compaction requests sent: one per compaction (each compaction's own, never a blocking one beside it). */
  readonly compactionRequests: number
  /** Requests after a compaction that sent back thinking made before it (kept verbatim after the block). */
  readonly keptThinkingSent: number
}

const POLICY_FIELDS = {
  contextWindow: 40_000,
  compactAtTokens: 9_000,
  keepRecentTokens: 2_500,
  keepRecentTurns: 1,
  summaryBudgetTokens: 1_000,
  minGrowthTokens: 1_000
} as const

/** `ServerCompactionSummarizer` against `server`, with the conversation's model and tools; `done` after each summary. */
const serverSummarizer = (
  server: MessagesApiServer.MessagesApiServer,
  done: (n: number) => Effect.Effect<void>
): SummarizerShape => {
  const inner = ServerCompactionSummarizer.make({
    client: clientOf(server),
    model: MODEL,
    tools: TOOLS as never,
    timeout: "10 seconds",
    retry: { base: "5 millis", maxDelay: "20 millis", retries: 1 }
  })
  let n = 0
  return { name: inner.name, summarize: (request) => Effect.tap(inner.summarize(request), () => done(++n)) }
}

const isCompactionRequest = (r: MessagesApiServer.RecordedRequest) => r.body.compaction !== undefined

/**
 * A tool loop of `steps` through `Conversation` (thinking set on the conversation or only on the SDK call), each
 * compaction checked against the documented shapes: the compaction request sends the view's first messages as they
 * are (and nothing else), and the next request is the block, then every later message of that view verbatim, then
 * the files message. `background`: the compaction runs while the loop goes on (its reply held back for two steps).
 */
const runLoop = (thinkingOn: "conversation" | "caller", background: boolean) =>
  Effect.scoped(Effect.gen(function* () {
    const server = yield* MessagesApiServer.make
    const summaries: Array<Deferred.Deferred<void>> = []
    const summaryDone = (n: number) =>
      Effect.suspend(() => {
        while (summaries.length < n) summaries.push(Deferred.makeUnsafe<void>())
        return Deferred.succeed(summaries[n - 1]!, undefined).pipe(Effect.asVoid)
      })
    const waitSummary = (n: number) =>
      Effect.suspend(() => {
        while (summaries.length < n) summaries.push(Deferred.makeUnsafe<void>())
        return Deferred.await(summaries[n - 1]!)
      })
    const policy = CompactionPolicy.makeUnsafe(background ? { ...POLICY_FIELDS, backgroundAt: 0.6 } : POLICY_FIELDS)
    const gates: Array<Deferred.Deferred<void>> = []
    for (let n = 1; n <= 12; n++) {
      const gate = Deferred.makeUnsafe<void>()
      gates.push(gate)
      server.enqueueCompaction(
        Reply.compaction(`Summary ${n}: files up to this point were read.`, {
          ...(background ? { gate: Effect.runPromise(Deferred.await(gate)) } : {})
        })
      )
    }
    let compactions = 0
    let keptThinkingSent = 0
    const errors: Array<string> = []
    const run = Effect.gen(function* () {
      const conversation = yield* Conversation
      yield* conversation.append({ role: "user", content: "Read every file of the project." } as MessageParam)
      let released = 0
      let stepsSinceStart = 0
      let swapDue = false
      for (let k = 1; k <= 60; k++) {
        const viewBefore = (yield* conversation.state).view as ReadonlyArray<unknown>
        const compactionRequestsBefore = server.requests.filter(isCompactionRequest).length
        const prepared = yield* conversation.prepare
        const compactionRequests = server.requests.filter(isCompactionRequest)
        // background: the block that came back is swapped in on the very next request
        if (swapDue) assert.strictEqual(prepared.compaction?._tag, "Compacted", `step ${k}`)
        swapDue = false
        if (prepared.compaction?._tag === "Compacted") {
          compactions++
          const compactionRequest = compactionRequests.at(-1)!
          const head = compactionRequest.body.messages as ReadonlyArray<unknown>
          // the compaction request: the view's first messages as they are, the conversation's model and tools
          assert.strictEqual(compactionRequest.body.model, MODEL)
          assert.deepStrictEqual(compactionRequest.body.compaction, { type: "summarize" })
          assert.include(String(compactionRequest.headers["anthropic-beta"]), "compact-2026-09-04")
          assert.deepStrictEqual(bare(compactionRequest.body.tools), bare(TOOLS))
          assert.deepStrictEqual(bare(head), bare(viewBefore.slice(0, head.length)))
          // the next request: the block, the rest of that view verbatim, then the files message
          const messages = bare(prepared.request.messages) as ReadonlyArray<Message>
          const block = (messages[0]!.content as unknown as ReadonlyArray<Block>)[0]!
          assert.strictEqual(messages[0]!.role, "assistant")
          assert.strictEqual(block.type, "compaction")
          assert.strictEqual(block.content, `Summary ${compactions}: files up to this point were read.`)
          assert.deepStrictEqual(messages.slice(1, -1), bare(viewBefore.slice(head.length)) as never)
          assert.isDefined(filesOfMessage(messages.at(-1)!))
          if (
            messages.slice(1).some((m) =>
              m.role === "assistant" && typeof m.content !== "string" && m.content.some((b) => b.type === "thinking")
            )
          ) keptThinkingSent++
          stepsSinceStart = 0
        } else if (background && compactionRequests.length > compactionRequestsBefore) {
          stepsSinceStart = 0
        }
        server.enqueue(Reply.message(toolStep(k), { preservedThinking: true, stopReason: "tool_use" }))
        const body = {
          ...prepared.request,
          model: MODEL,
          max_tokens: 4096,
          ...(thinkingOn === "caller" ? { thinking: THINKING } : {})
        }
        const sent = yield* Effect.promise(() =>
          clientOf(server).beta.messages.stream(body as never).finalMessage().then(
            (reply) => ({ reply }),
            (e: unknown) => ({ error: String(e) })
          )
        )
        if ("error" in sent) {
          errors.push(sent.error)
          return
        }
        const received = server.requests.at(-1)!.body
        yield* conversation.recordReply(sent.reply as never, {
          input_tokens: countTokens(received),
          output_tokens: 200
        })
        yield* conversation.append(resultOf(k, 60) as MessageParam)
        // background: the compaction's reply comes back two steps after its request; the next prepare swaps it in
        const started = server.requests.filter(isCompactionRequest).length
        if (background && started > released) {
          stepsSinceStart++
          if (stepsSinceStart >= 2) {
            yield* Deferred.succeed(gates[released]!, undefined)
            released++
            yield* waitSummary(released)
            // the summarizer has its block; its fiber ends a moment later (its timeout's timer is interrupted): then
            // the block has arrived for the conversation, and the next request must carry the swap
            yield* Effect.sleep("50 millis")
            swapDue = true
          }
        }
      }
    })
    const store: MemorySessions = new Map()
    const live = yield* Effect.andThen(
      run,
      Effect.gen(function* () {
        return yield* (yield* Conversation).state
      })
    ).pipe(
      Effect.provide(
        Conversation.layerLogged({
          policy,
          tools: TOOLS as never,
          ...(thinkingOn === "conversation" ? { thinking: THINKING } : {})
        }).pipe(
          Layer.provide(Layer.fresh(SessionLog.layerMemory({ store }))),
          Layer.provide(Layer.succeed(Summarizer, serverSummarizer(server, summaryDone)))
        )
      )
    )
    // a resumed conversation decides the same: the kept turns' thinking is bound, none marked for the API to drop
    const resumed = yield* Effect.gen(function* () {
      return resumeState(yield* (yield* SessionLog).load())
    }).pipe(
      Effect.provide(Layer.fresh(SessionLog.layerMemory({ store })))
    )
    assert.strictEqual(JSON.stringify(resumed.view), JSON.stringify(live.view))
    assert.deepStrictEqual(resumed.unboundThinking, live.unboundThinking)
    assert.isUndefined(live.unboundThinking)
    return {
      rejected: [...server.rejections, ...errors],
      dropped: server.droppedThinking.length,
      compactions,
      compactionRequests: server.requests.filter(isCompactionRequest).length,
      keptThinkingSent
    } satisfies Run
  }))

describe("Conversation with the API's on-demand compaction: the documented procedures (local server)", () => {
  for (const thinkingOn of ["conversation", "caller"] as const) {
    it.live(`keep-tail, thinking on the ${thinkingOn}: exact shapes, 0 rejected, 0 thinking dropped`, () =>
      Effect.gen(function* () {
        const run = yield* runLoop(thinkingOn, false)
        assert.deepStrictEqual(run.rejected, [])
        assert.strictEqual(run.dropped, 0)
        assert.isAtLeast(run.compactions, 2)
        assert.isAtLeast(run.keptThinkingSent, 2)
      }))

    it.live(`background, thinking on the ${thinkingOn}: swapped on the next request, 0 rejected, 0 dropped`, () =>
      Effect.gen(function* () {
        const run = yield* runLoop(thinkingOn, true)
        assert.deepStrictEqual(run.rejected, [])
        assert.strictEqual(run.dropped, 0)
        assert.isAtLeast(run.compactions, 2)
        assert.strictEqual(run.compactionRequests, run.compactions)
        assert.isAtLeast(run.keptThinkingSent, 2)
      }))
  }
})

describe("finishCompaction with a server block: verbatim only when the API would keep the thinking (pure)", () => {
  const policy = CompactionPolicy.makeUnsafe({ keepRecentTokens: 500, keepRecentTurns: 1 })
  const long = (tag: string) => `${tag} ${"detail ".repeat(1_500)}`
  const block = {
    type: "compaction",
    content: "S.",
    encrypted_content: null,
    signature: "srv1.test",
    tool_changes: []
  }
  const summary = {
    text: "S.",
    model: "m",
    usage: zeroUsage,
    summarizer: "server-compaction",
    compaction: block
  } as unknown as Summary
  const thought = (text: string): Message => ({
    role: "assistant",
    content: [{ type: "thinking", thinking: "why", signature: "sig" }, { type: "text", text }]
  } as unknown as Message)

  it("kept turns that open on the reply to the head: the block, them as they were, then the files message", () => {
    const list: Array<Message> = [
      { role: "user", content: long("Start.") },
      thought(long("Started.")),
      { role: "user", content: long("Go on.") },
      thought("Done.")
    ]
    const plan = prepareCompaction(list, policy, { minFreedTokens: 1 })
    assert.strictEqual(plan._tag, "Planned")
    if (plan._tag !== "Planned") return
    const finished = finishCompaction(plan, summary)
    assert.isTrue(finished.keptVerbatim)
    assert.deepStrictEqual(finished.messages.slice(1, -1), list.slice(plan.compactionCut))
    assert.isDefined(filesOfMessage(finished.messages.at(-1)!))
  })

  it("a first kept message of the last summarized role (the API would merge them): files after the block", () => {
    const list: Array<Message> = [
      { role: "user", content: long("Start.") },
      thought(long("Started.")),
      { role: "user", content: long("Go on.") },
      { role: "user", content: "And the tests." },
      thought("Done.")
    ]
    const plan = prepareCompaction(list, policy, { minFreedTokens: 1, upTo: 3 })
    assert.strictEqual(plan._tag, "Planned")
    if (plan._tag !== "Planned") return
    assert.strictEqual(plan.compactionCut, 3)
    const finished = finishCompaction(plan, summary)
    assert.isUndefined(finished.keptVerbatim)
    assert.isDefined(filesOfMessage(finished.messages[1]!))
  })
})

/**
 * A summarizer that writes a text summary (a client compaction) first, then the server's block: `Summary.compaction`,
 * as `ServerCompactionSummarizer` returns it.
 */
const clientThenServer = (): SummarizerShape => {
  let n = 0
  return {
    name: "client-then-server",
    summarize: () =>
      Effect.sync((): Summary => {
        n++
        const text = `Summary ${n}: files up to this point were read.`
        return n === 1 ? { text, model: "extractive", usage: zeroUsage, summarizer: "extractive" } : {
          text,
          model: MODEL,
          usage: zeroUsage,
          summarizer: "anthropic-compaction",
          compaction: { type: "compaction", content: text, encrypted_content: `sealed ${n}` }
        }
      })
  }
}

describe('staleThinking "bind": a server compaction keeping turns verbatim after a client one (resume)', () => {
  it.effect("the resumed state marks the kept turns' stale thinking as the live one does, and sends the same request", () =>
    Effect.gen(function* () {
      const store: MemorySessions = new Map()
      const options = {
        policy: CompactionPolicy.makeUnsafe({ ...POLICY_FIELDS, contextWindow: 100_000, compactAtTokens: 60_000 }),
        tools: TOOLS as never,
        thinking: THINKING,
        staleThinking: "bind"
      } as const
      const logged = (summarizer: SummarizerShape) =>
        Conversation.layerLogged(options).pipe(
          Layer.provide(Layer.fresh(SessionLog.layerMemory({ store }))),
          Layer.provide(Layer.succeed(Summarizer, summarizer))
        )
      const step = (k: number) =>
        Effect.gen(function* () {
          const conversation = yield* Conversation
          yield* conversation.recordReply({ role: "assistant", content: toolStep(k) } as unknown as MessageParam)
          yield* conversation.append(resultOf(k, 800) as MessageParam)
        })
      const live = yield* Effect.gen(function* () {
        const conversation = yield* Conversation
        yield* conversation.append({ role: "user", content: "Read every file of the project." } as MessageParam)
        for (let k = 1; k <= 6; k++) yield* step(k)
        // a client compaction: the kept turns' thinking is bound to the head it replaced, kept and marked
        const first = yield* conversation.compact({ upTo: 5 })
        assert.strictEqual(first.outcome._tag, "Compacted", JSON.stringify(first.outcome).slice(0, 600))
        const afterFirst = yield* conversation.state
        assert.isAbove(afterFirst.unboundThinking?.length ?? 0, 0)
        yield* step(7)
        // the server's compaction keeps the turns after what it read verbatim: those marked stay marked
        const second = yield* conversation.compact({ upTo: 3 })
        assert.strictEqual(second.outcome._tag, "Compacted")
        const state = yield* conversation.state
        const opening = state.view[0]!.content as unknown as ReadonlyArray<Block>
        assert.strictEqual(opening[0]!.type, "compaction")
        assert.isAbove(state.unboundThinking?.length ?? 0, 0)
        return { state, request: (yield* conversation.prepare).request }
      }).pipe(Effect.provide(logged(clientThenServer())))
      const loaded = yield* Effect.gen(function* () {
        return yield* (yield* SessionLog).load()
      }).pipe(Effect.provide(Layer.fresh(SessionLog.layerMemory({ store }))))
      const resumed = resumeState(loaded)
      assert.strictEqual(JSON.stringify(resumed.view), JSON.stringify(live.state.view))
      assert.deepStrictEqual(resumed.unboundThinking, live.state.unboundThinking)
      // a log written before the checkpoint kept them still resumes (its kept copies read as bound, as they did);
      // a checkpoint whose positions are not well formed is no checkpoint: the whole log is read
      const boundary = [...loaded.entries].reverse().find((e) => e.type === "compaction")!
      const checkpoint = (boundary.meta?.[META_KEY] as { readonly checkpoint: Record<string, unknown> }).checkpoint
      const withCheckpoint = (next: Record<string, unknown>): Loaded =>
        ({
          ...loaded,
          entries: loaded.entries.map((e) => e === boundary ? { ...e, meta: { [META_KEY]: { checkpoint: next } } } : e)
        }) as Loaded
      const { unbound: _, ...older } = checkpoint
      const fromOlder = resumeState(withCheckpoint(older))
      assert.strictEqual(JSON.stringify(fromOlder.view), JSON.stringify(live.state.view))
      assert.isUndefined(fromOlder.unboundThinking)
      assert.strictEqual(fromOlder.epoch, live.state.epoch)
      const fromBad = resumeState(withCheckpoint({ ...checkpoint, unbound: [{ message: -1, block: 0 }] }))
      assert.strictEqual(JSON.stringify(fromBad.view), JSON.stringify(live.state.view))
      assert.strictEqual(fromBad.epoch, live.state.epoch)
      // a conversation opened on the log sends the bytes the live one sends
      const request = yield* Effect.gen(function* () {
        return (yield* (yield* Conversation).prepare).request
      }).pipe(Effect.provide(logged(clientThenServer())))
      assert.strictEqual(JSON.stringify(request), JSON.stringify(live.request))
    }))
})
