/**
 * The server-compaction summarizer: the Messages API's on-demand compaction through the real `@anthropic-ai/sdk`
 * against the local Messages API server (which enforces API-RULES, signs its blocks and checks them on the way back).
 * Every compacted view is judged by the independent checker (`ApiRules.ts`) and sent back to the server.
 */
import Anthropic from "@anthropic-ai/sdk"
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Layer, Schedule } from "effect"
import { compactContext, finishCompaction, prepareCompaction } from "../src/Compact.ts"
import { Conversation } from "../src/Conversation.ts"
import type { MessageParam } from "../src/ConversationState.ts"
import { resumeState } from "../src/internal/conversation/resume.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import type { CompactionBlock, ContentBlock, Message } from "../src/Message.ts"
import { CompactionPolicy, zeroUsage } from "../src/Policy.ts"
import { compactionErrorOf, ServerCompactionSummarizer } from "../src/ServerCompactionSummarizer.ts"
import { summarizeErrorOf } from "../src/internal/anthropicFailure.ts"
import { SessionLog } from "../src/SessionLog.ts"
import type { MemorySessions } from "../src/SessionStore.ts"
import type { SummarizeError } from "../src/SummarizeError.ts"
import {
  makeRetrySchedule,
  Summarizer,
  summarizeRequest,
  type SummarizerShape,
  type Summary,
  withFallback
} from "../src/Summarizer.ts"
import { filesOfMessage, summaryText } from "../src/Summary.ts"
import { parseAppendix } from "../src/internal/summary.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { filesTouched } from "../src/Tools.ts"
import { checkApiRules } from "./fixtures/ApiRules.ts"
import { conversationArbitrary, generateSession } from "./fixtures/Conversation.ts"
import * as MessagesApiServer from "./fixtures/MessagesApiServer.ts"
import { hash, Reply, signCompaction } from "./fixtures/MessagesApiServer.ts"

const user = (text: string): Message => ({ role: "user", content: text })
const assistant = (text: string): Message => ({ role: "assistant", content: [{ type: "text", text }] })
const long = (tag: string) => `${tag} ${"detail ".repeat(1_500)}`
const policy = CompactionPolicy.makeUnsafe({ keepRecentTokens: 500, keepRecentTurns: 1 })
const SUMMARY = "Server summary: the parser in src/parse.ts was fixed; tests pass."

const client = (server: MessagesApiServer.MessagesApiServer) =>
  new Anthropic({ apiKey: "sk-test", baseURL: server.url, maxRetries: 0 })

const serverSummarizer = (server: MessagesApiServer.MessagesApiServer): SummarizerShape =>
  ServerCompactionSummarizer.make({
    client: client(server),
    model: "claude-sonnet-5",
    timeout: "5 seconds",
    retry: { base: "5 millis", maxDelay: "20 millis", retries: 3 }
  })

/** The block the server returns for `content` (no tool changes), as it signs it. */
const expectedBlock = (content: string) => ({
  type: "compaction",
  content,
  encrypted_content: `enc.${hash(content)}`,
  signature: signCompaction(content, []),
  tool_changes: []
})

/** Sends `messages` as a plain (beta) request; fails with the API error when the server rejects it. */
const sendFollowUp = (server: MessagesApiServer.MessagesApiServer, messages: ReadonlyArray<Message>) =>
  Effect.tryPromise(() =>
    client(server).beta.messages.stream({ model: "claude-sonnet-5", max_tokens: 1024, messages: messages as never })
      .finalMessage()
  )

/** The file lists of the files message a compaction put in `messages` (after the block, or after the kept turns). */
const filesIn = (messages: ReadonlyArray<Message>) => messages.map(filesOfMessage).find((files) => files !== undefined)

const blockOf = (message: Message | undefined): ContentBlock | undefined =>
  message === undefined || typeof message.content === "string" ? undefined : message.content[0]

const compactWith = (summarizer: SummarizerShape, messages: ReadonlyArray<Message>) =>
  compactContext(messages, policy, { minFreedTokens: 1 }).pipe(Effect.provide(Layer.succeed(Summarizer, summarizer)))

describe("ServerCompactionSummarizer (real SDK, local server)", () => {
  it.live("the head goes as it is; the signed block opens the new view, which the checker and the server accept", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const session = generateSession(7, { messages: 60 })
      const plan = prepareCompaction(session, policy, { minFreedTokens: 1, instructions: "Keep file paths." })
      assert.strictEqual(plan._tag, "Planned")
      if (plan._tag !== "Planned") return
      server.enqueue(
        Reply.compaction(SUMMARY, {
          compactionUsage: { input_tokens: 50_000, output_tokens: 900 },
          usage: { input_tokens: 3, output_tokens: 1 }
        })
      )
      const { messages, outcome } = yield* compactContext(session, policy, {
        minFreedTokens: 1,
        instructions: "Keep file paths."
      }).pipe(Effect.provide(ServerCompactionSummarizer.layerWith({ client: client(server), model: "m" })))
      assert.strictEqual(outcome._tag, "Compacted")
      if (outcome._tag !== "Compacted") return
      // rule 16: the usage is the sum of the iterations, not the top-level usage
      assert.deepStrictEqual(outcome.summary.usage, { ...zeroUsage, input_tokens: 50_000, output_tokens: 900 })
      assert.strictEqual(outcome.summary.summarizer, "server-compaction")
      assert.strictEqual(outcome.summary.text, SUMMARY)

      const sent = server.requests[0]!
      assert.strictEqual(server.requests.length, 1)
      assert.include(String(sent.headers["anthropic-beta"]), "compact-2026-09-04")
      const compaction = sent.body.compaction as { readonly type: string; readonly instructions: string }
      assert.strictEqual(compaction.type, "summarize")
      assert.include(compaction.instructions, "Keep file paths.")
      assert.strictEqual(JSON.stringify(sent.body.messages), JSON.stringify(session.slice(0, plan.cut)))

      // the API's keep-tail shape: the block, the kept turns as they were, then the files message
      assert.deepStrictEqual(messages[0], { role: "assistant", content: [expectedBlock(SUMMARY)] } as never)
      assert.deepStrictEqual(filesOfMessage(messages.at(-1)!), filesTouched(session.slice(0, plan.cut)))
      assert.isAbove(
        filesOfMessage(messages.at(-1)!)!.read.length + filesOfMessage(messages.at(-1)!)!.modified.length,
        0
      )
      assert.strictEqual(JSON.stringify(messages.slice(1, -1)), JSON.stringify(session.slice(plan.cut)))
      const reference = [{ role: "assistant", content: [expectedBlock(SUMMARY)] }]
      assert.deepStrictEqual(checkApiRules(messages, { reference }), [])
      assert.deepStrictEqual(checkApiRules(messages, { reference, mode: "on-demand" }), [])
      server.enqueue(Reply.stream(["Accepted."]))
      assert.strictEqual((yield* sendFollowUp(server, messages)).content[0]?.type, "text")
    }))

  it.live("compaction_unavailable (529) is retried on our schedule with the same request, then succeeds", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(Reply.compactionUnavailable, Reply.compactionUnavailable, Reply.compaction(SUMMARY))
      const { messages, outcome } = yield* compactWith(serverSummarizer(server), generateSession(3, { messages: 40 }))
      assert.strictEqual(outcome._tag, "Compacted")
      assert.strictEqual(server.requests.length, 3)
      const bodies = server.requests.map((r) => JSON.stringify(r.body))
      assert.strictEqual(new Set(bodies).size, 1)
      assert.deepStrictEqual(blockOf(messages[0]), expectedBlock(SUMMARY) as never)
    }))

  it.live("content: null is CompactionFailed, never retried; withFallback writes an extractive summary", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(Reply.compaction(null))
      const session = generateSession(5, { messages: 40 })
      const { messages, outcome } = yield* compactWith(
        withFallback(serverSummarizer(server), ExtractiveSummarizer.make()),
        session
      )
      assert.strictEqual(server.requests.length, 1)
      assert.strictEqual(outcome._tag, "FellBack")
      if (outcome._tag !== "FellBack") return
      assert.strictEqual(outcome.primary, "server-compaction")
      assert.strictEqual(outcome.summary.fellBackFrom?.error.reason._tag, "CompactionFailed")
      assert.isUndefined(outcome.summary.compaction)
      assert.isDefined(summaryText(messages[0]!))
      assert.deepStrictEqual(checkApiRules(messages), [])
    }))

  it.live("compaction_nothing_to_summarize is NothingToSummarize, not retried; an empty head is refused locally", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(Reply.compactionRefused("compaction_nothing_to_summarize"))
      const summarizer = serverSummarizer(server)
      const error: SummarizeError = yield* Effect.flip(
        summarizer.summarize(summarizeRequest([user("go"), assistant("ok")]))
      )
      assert.strictEqual(error.reason._tag, "NothingToSummarize")
      assert.strictEqual(error.status, 400)
      assert.isFalse(error.isRetryable)
      assert.strictEqual(error.attempts, 1)
      assert.strictEqual(server.requests.length, 1)
      const local = yield* Effect.flip(
        summarizer.summarize(summarizeRequest([], { head: [{ role: "system", content: "Rules." }] }))
      )
      assert.strictEqual(local.reason._tag, "NothingToSummarize")
      assert.strictEqual(server.requests.length, 1)
    }))

  for (const code of ["compaction_too_many_tool_references", "compaction_incomplete_turn"]) {
    it.live(`${code} is CompactionRefused: never retried, withFallback falls back at once (API-RULES 35)`, () =>
      Effect.gen(function* () {
        const server = yield* MessagesApiServer.make
        server.enqueue(Reply.compactionRefused(code))
        const error: SummarizeError = yield* Effect.flip(
          serverSummarizer(server).summarize(summarizeRequest([user("go"), assistant("ok")]))
        )
        assert.strictEqual(error.reason._tag, "CompactionRefused")
        assert.strictEqual(error.reason._tag === "CompactionRefused" ? error.reason.errorCode : "", code)
        assert.isFalse(error.isRetryable)
        assert.strictEqual(error.attempts, 1)
        assert.strictEqual(server.requests.length, 1)
        server.enqueue(Reply.compactionRefused(code))
        const { messages, outcome } = yield* compactWith(
          withFallback(serverSummarizer(server), ExtractiveSummarizer.make()),
          generateSession(5, { messages: 40 })
        )
        assert.strictEqual(server.requests.length, 2)
        assert.strictEqual(outcome._tag, "FellBack")
        if (outcome._tag !== "FellBack") return
        assert.strictEqual(outcome.summary.fellBackFrom?.error.reason._tag, "CompactionRefused")
        assert.deepStrictEqual(checkApiRules(messages), [])
      }))
  }

  it("a dropped stream, as SDK 1.14–1.16 throw it (AnthropicError with a TypeError cause), is retryable (API-RULES 37)", () => {
    const dropped = new Anthropic.AnthropicError("terminated", { cause: new TypeError("terminated") })
    for (const error of [compactionErrorOf(dropped), summarizeErrorOf(dropped)]) {
      assert.strictEqual(error.reason._tag, "Connection")
      assert.isTrue(error.isRetryable)
    }
    // deeper in the chain, and the 1.17 shape
    const deeper = new Anthropic.AnthropicError("stream ended", { cause: new Error("read", { cause: dropped }) })
    assert.strictEqual(compactionErrorOf(deeper).reason._tag, "Connection")
    const connection = new Anthropic.APIConnectionError({
      message: "Connection error.",
      cause: new TypeError("terminated")
    })
    assert.strictEqual(compactionErrorOf(connection).reason._tag, "Connection")
    // a plain AnthropicError with no network cause stays a StreamError, never retried
    assert.strictEqual(compactionErrorOf(new Anthropic.AnthropicError("bad event")).reason._tag, "StreamError")
  })

  it.live("a stream dropped mid-reply is retried with the same request, then succeeds", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(Reply.dropMidStream(["partial"]), Reply.compaction(SUMMARY))
      const summary = yield* serverSummarizer(server).summarize(summarizeRequest([user("go"), assistant("ok")]))
      assert.strictEqual(summary.text, SUMMARY)
      assert.strictEqual(server.requests.length, 2)
    }))

  it.live("organization_url_fetch_disabled is CompactionRefused: never retried, said plainly, falls back (API-RULES 39)", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(Reply.compactionRefused("organization_url_fetch_disabled"))
      const error: SummarizeError = yield* Effect.flip(
        serverSummarizer(server).summarize(summarizeRequest([user("go"), assistant("ok")]))
      )
      assert.strictEqual(error.reason._tag, "CompactionRefused")
      assert.isFalse(error.isRetryable)
      assert.strictEqual(error.attempts, 1)
      assert.strictEqual(server.requests.length, 1)
      assert.include(error.message, "disabled URL fetching")
      assert.include(error.message, "text summarizer")
      server.enqueue(Reply.compactionRefused("organization_url_fetch_disabled"))
      const { messages, outcome } = yield* compactWith(
        withFallback(serverSummarizer(server), ExtractiveSummarizer.make()),
        generateSession(5, { messages: 40 })
      )
      assert.strictEqual(server.requests.length, 2)
      assert.strictEqual(outcome._tag, "FellBack")
      assert.isUndefined(outcome._tag === "FellBack" ? outcome.summary.compaction : undefined)
      assert.deepStrictEqual(checkApiRules(messages), [])
    }))

  it.live("a server that disabled URL fetching refuses a head with a URL source: CompactionRefused, never retried", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.makeWith({ urlFetchDisabled: true })
      server.enqueue(Reply.compaction(SUMMARY))
      const head: ReadonlyArray<Message> = [
        {
          role: "user",
          content: [{ type: "text", text: "What is it?" }, {
            type: "image",
            source: { type: "url", url: "https://example.com/a.png" }
          }]
        } as Message,
        assistant("A cat.")
      ]
      const error: SummarizeError = yield* Effect.flip(serverSummarizer(server).summarize(summarizeRequest(head)))
      assert.strictEqual(error.reason._tag, "CompactionRefused")
      assert.strictEqual(
        error.reason._tag === "CompactionRefused" ? error.reason.errorCode : "",
        "organization_url_fetch_disabled"
      )
      assert.strictEqual(server.requests.length, 1)
      assert.deepStrictEqual(server.rejections.length, 1)
    }))

  it.live("storage_not_ready (503) is retryable after about a minute, not on our seconds-long backoff (API-RULES 39)", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(Reply.status(503, "api_error", undefined, "storage_not_ready"))
      const once = ServerCompactionSummarizer.make({ client: client(server), model: "m", retry: { retries: 0 } })
      const error: SummarizeError = yield* Effect.flip(once.summarize(summarizeRequest([user("go"), assistant("ok")])))
      assert.strictEqual(error.reason._tag, "Server")
      assert.isTrue(error.isRetryable)
      assert.strictEqual(error.status, 503)
      assert.isAtLeast(error.retryAfterMillis ?? 0, 60_000)
      // the retry schedule waits that minute rather than giving up after its own backoff
      const delay = yield* Schedule.toStep(makeRetrySchedule()).pipe(
        Effect.flatMap((step) => step(0, error)),
        Effect.map(([, duration]) => Duration.toMillis(duration))
      )
      assert.isAtLeast(delay, 60_000)
    }))

  it.live("a head ending on an unfinished assistant turn is sent up to its last finished turn; the rest is kept", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const paused: Message = {
        role: "assistant",
        content: [
          { type: "text", text: "Searching the docs." },
          { type: "server_tool_use", id: "srvtoolu_1", name: "web_search", input: { query: "effect" } }
        ]
      }
      const list = [
        user(long("Start.")),
        assistant(long("Started.")),
        user(long("Search the docs.")),
        paused,
        user(long("Go on.")),
        assistant("Done.")
      ]
      assert.deepStrictEqual(checkApiRules(list), [])
      const plan = prepareCompaction(list, policy, { minFreedTokens: 1 })
      assert.strictEqual(plan._tag, "Planned")
      if (plan._tag !== "Planned") return
      assert.strictEqual(plan.cut, 4)
      // as planned, the head would be refused (rule 15); the one sent ends before the unfinished turn
      assert.deepInclude(checkApiRules(list.slice(0, 4), { mode: "on-demand" }).map((v) => v.rule), 15)
      assert.strictEqual(plan.compactionCut, 3)
      server.enqueue(Reply.compaction(SUMMARY))
      const { messages, outcome } = yield* compactWith(serverSummarizer(server), list)
      assert.strictEqual(outcome._tag, "Compacted")
      assert.strictEqual(JSON.stringify(server.requests[0]!.body.messages), JSON.stringify(list.slice(0, 3)))
      assert.deepStrictEqual(messages.slice(1, -1), list.slice(3))
      assert.deepStrictEqual(checkApiRules(messages), [])
      server.enqueue(Reply.stream(["Accepted."]))
      yield* sendFollowUp(server, messages)
    }))

  it("a head ending on a paused MCP call (mcp_tool_use) is unfinished too: the head sent ends before it", () => {
    const paused: Message = {
      role: "assistant",
      content: [
        { type: "text", text: "Asking the MCP server." },
        { type: "mcp_tool_use", id: "mcptoolu_1", name: "query", server_name: "db", input: { q: "rows" } }
      ]
    } as unknown as Message
    const list = [
      user(long("Start.")),
      assistant(long("Started.")),
      user(long("Query the database.")),
      paused,
      user(long("Go on.")),
      assistant("Done.")
    ]
    assert.deepStrictEqual(checkApiRules(list), [])
    const plan = prepareCompaction(list, policy, { minFreedTokens: 1 })
    assert.strictEqual(plan._tag, "Planned")
    if (plan._tag !== "Planned") return
    assert.strictEqual(plan.cut, 4)
    assert.deepInclude(checkApiRules(list.slice(0, 4), { mode: "on-demand" }).map((v) => v.rule), 15)
    assert.strictEqual(plan.compactionCut, 3)
    assert.deepStrictEqual(checkApiRules(list.slice(0, plan.compactionCut), { mode: "on-demand" }), [])
  })

  it.live("two successive server compactions: the block goes first in the next request, the file lists carry on", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const summarizer = serverSummarizer(server)
      server.enqueue(Reply.compaction(SUMMARY))
      const first = yield* compactWith(summarizer, generateSession(11, { messages: 50 }))
      const firstFiles = filesIn(first.messages)!
      const grown: Array<Message> = [...first.messages]
      for (const k of [1, 2, 3]) grown.push(user(long(`Step ${k}.`)), assistant(`Done with step ${k}.`))
      // a text summarizer over this view takes the block's content as the earlier summary
      const textPlan = prepareCompaction(grown, policy, { minFreedTokens: 1 })
      assert.strictEqual(textPlan._tag === "Planned" ? textPlan.request.previousSummary : undefined, SUMMARY)

      const SECOND = "Second server summary: steps 1 and 2 done."
      server.enqueue(Reply.compaction(SECOND))
      const second = yield* compactWith(summarizer, grown)
      assert.strictEqual(second.outcome._tag, "Compacted")
      // the server checked the second request in on-demand mode (one block with content, first) and accepted it
      const sent = server.requests[1]!.body.messages as ReadonlyArray<Message>
      assert.deepStrictEqual(sent[0], first.messages[0])
      assert.deepStrictEqual(sent[1], first.messages[1])
      assert.deepStrictEqual(blockOf(second.messages[0]), expectedBlock(SECOND) as never)
      const secondFiles = filesIn(second.messages)!
      for (const path of firstFiles.modified) assert.include(secondFiles.modified, path)
      for (const path of firstFiles.read) assert.include([...secondFiles.read, ...secondFiles.modified], path)
      assert.deepStrictEqual(checkApiRules(second.messages, { mode: "on-demand" }), [])
      server.enqueue(Reply.stream(["Accepted."]))
      yield* sendFollowUp(server, second.messages)

      // and a text summary on top keeps the server's summary and the file lists
      const third: Array<Message> = [...second.messages]
      for (const k of [4, 5]) third.push(user(long(`Step ${k}.`)), assistant(`Done with step ${k}.`))
      const text = yield* compactWith(ExtractiveSummarizer.make(), third)
      const written = summaryText(text.messages[0]!)!
      assert.include(written, SECOND)
      assert.deepStrictEqual(parseAppendix(written)?.modified.slice(0, firstFiles.modified.length), firstFiles.modified)
      assert.deepStrictEqual(checkApiRules(text.messages), [])
    }))

  it.live("through Conversation with a session log: compact with the server, the request is accepted, resume equal", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const store: MemorySessions = new Map()
      const layer = Conversation.layerLogged({ minFreedTokens: 1, policy }).pipe(
        Layer.provide(Layer.fresh(SessionLog.layerMemory({ store }))),
        Layer.provide(Layer.succeed(Summarizer, serverSummarizer(server)))
      )
      const live = yield* Effect.gen(function* () {
        const conversation = yield* Conversation
        const round = (text: string, reply: string) =>
          Effect.gen(function* () {
            yield* conversation.append(user(text) as MessageParam)
            const { epoch, request } = yield* conversation.prepare
            server.enqueue(Reply.stream([reply]))
            const response = yield* sendFollowUp(server, request.messages as ReadonlyArray<Message>)
            yield* conversation.recordReply({ role: "assistant", content: response.content } as MessageParam, {
              input_tokens: 1_000,
              output_tokens: 10
            }, { requestEpoch: epoch })
          })
        for (const k of [1, 2, 3, 4]) yield* round(long(`Step ${k}.`), `Done with step ${k}.`)
        server.enqueue(Reply.compaction(SUMMARY))
        const { outcome, request } = yield* conversation.compact()
        assert.strictEqual(outcome._tag, "Compacted")
        assert.deepStrictEqual(blockOf(request.messages[0] as Message), expectedBlock(SUMMARY) as never)
        assert.deepStrictEqual(checkApiRules(request.messages as ReadonlyArray<Message>), [])
        server.enqueue(Reply.stream(["Accepted."]))
        yield* sendFollowUp(server, request.messages as ReadonlyArray<Message>)
        yield* round(long("Step 5."), "Done with step 5.")
        return yield* conversation.state
      }).pipe(Effect.provide(layer))
      const resumed = yield* Effect.gen(function* () {
        return resumeState(yield* (yield* SessionLog).load())
      }).pipe(Effect.provide(Layer.fresh(SessionLog.layerMemory({ store }))))
      assert.strictEqual(JSON.stringify(resumed.view), JSON.stringify(live.view))
      assert.deepStrictEqual(blockOf(resumed.view[0] as Message), expectedBlock(SUMMARY) as never)
    }))
})

/** A summary as the server's compaction writes it, without a server: the block signed as the fixture signs it. */
const serverSummary = (content: string, toolChanges: ReadonlyArray<unknown> = []): Summary => {
  const compaction: CompactionBlock & { readonly content: string } = {
    type: "compaction",
    content,
    encrypted_content: null,
    signature: signCompaction(content, toolChanges),
    tool_changes: toolChanges
  }
  return { text: content, model: "m", usage: zeroUsage, summarizer: "server-compaction", compaction }
}

describe("finishCompaction with a server compaction block (pure)", () => {
  it("the files message after the block keeps within what the summary budget leaves it; the paths left out are counted", () => {
    // a head that read 400 files and wrote 400 more, under long absolute paths
    const path = (kind: string, i: number) =>
      `/home/dev/projects/acme-platform/packages/service-${i % 40}/src/modules/${kind}-${i}/index.ts`
    const list: Array<Message> = [user("Audit every module, then fix each.")]
    for (let i = 0; i < 800; i++) {
      const write = i % 2 === 1
      list.push({
        role: "assistant",
        content: [{
          type: "tool_use",
          id: `toolu_f${i}`,
          name: write ? "write" : "read",
          input: write ? { path: path("fixed", i), content: "x" } : { path: path("feature", i) }
        }]
      })
      list.push({ role: "user", content: [{ type: "tool_result", tool_use_id: `toolu_f${i}`, content: "ok" }] })
    }
    list.push(assistant("Done."), user("Now run the tests."), assistant("Running."))
    const p = CompactionPolicy.makeUnsafe({ compactAtTokens: 40_000, keepRecentTokens: 300, keepRecentTurns: 1 })
    const plan = prepareCompaction(list, p, { minFreedTokens: 1 })
    assert.strictEqual(plan._tag, "Planned")
    if (plan._tag !== "Planned") return
    const summary = serverSummary(`Server summary: audited and fixed the modules. ${"Details. ".repeat(800)}`)
    const { messages } = finishCompaction(plan, summary)
    const at = messages.findIndex((m) => filesOfMessage(m) !== undefined)
    assert.isAbove(at, 0)
    const block = estimateTokens([messages[0]!])
    assert.isAtMost(block + estimateTokens([messages[at]!]), p.summaryBudgetTokens, "the block and the files message")
    // nothing silently dropped: each list's paths are listed or counted, the newest listed, modified ones first
    const files = filesOfMessage(messages[at]!)!
    const omitted = (files as { readonly omitted?: { readonly read: number; readonly modified: number } }).omitted
    assert.isAbove(plan.files.read.length, 350)
    assert.strictEqual(files.read.length + (omitted?.read ?? 0), plan.files.read.length)
    assert.strictEqual(files.modified.length + (omitted?.modified ?? 0), plan.files.modified.length)
    assert.isAbove(files.modified.length, 0)
    assert.strictEqual(files.modified.at(-1), plan.files.modified.at(-1))
    assert.deepStrictEqual(checkApiRules(messages, { mode: "on-demand" }), [])
  })

  it("the head's system messages are re-emitted as text only: the block's tool_changes carry their tool changes", () => {
    const removal = { type: "tool_removal", tool: { name: "web" } }
    const list: Array<Message> = [
      user(long("Start.")),
      { role: "system", content: [{ type: "text", text: "Reply in one sentence." }, removal] },
      assistant(long("Started.")),
      { role: "system", content: [removal] },
      assistant("More."),
      user(long("Go on.")),
      assistant("Done.")
    ]
    const plan = prepareCompaction(list, policy, { minFreedTokens: 1 })
    assert.strictEqual(plan._tag, "Planned")
    if (plan._tag !== "Planned") return
    const { messages } = finishCompaction(plan, serverSummary("S.", [removal]))
    const systems = messages.filter((m) => m.role === "system")
    assert.deepStrictEqual(systems, [{ role: "system", content: [{ type: "text", text: "Reply in one sentence." }] }])
    assert.deepStrictEqual(checkApiRules(messages, { mode: "on-demand" }), [])
  })

  it.prop(
    "generated sessions: the sent head ends on a finished turn, and two server compactions give views the API accepts",
    [conversationArbitrary()],
    ([session]) => {
      const p = CompactionPolicy.makeUnsafe({ keepRecentTokens: 300, keepRecentTurns: 1 })
      const plan = prepareCompaction(session, p, { minFreedTokens: 1 })
      if (plan._tag !== "Planned") return
      const head = plan.request.head!
      assert.deepStrictEqual(checkApiRules(head, { mode: "on-demand" }), [])
      const opened = serverSummary("First.")
      const first = finishCompaction(plan, opened)
      if (first.record === undefined) return
      assert.strictEqual(blockOf(first.messages[0]), opened.compaction)
      assert.deepStrictEqual(checkApiRules(first.messages, { mode: "on-demand" }), [])
      const grown = [
        ...first.messages,
        user(long("More work.")),
        assistant("ok"),
        user(long("Again.")),
        assistant("done")
      ]
      const again = prepareCompaction(grown, p, { minFreedTokens: 1 })
      if (again._tag !== "Planned") return
      assert.deepStrictEqual(checkApiRules(again.request.head!, { mode: "on-demand" }), [])
      assert.strictEqual(blockOf(again.request.head![0]), opened.compaction)
      const second = finishCompaction(again, serverSummary("Second."))
      if (second.record !== undefined) {
        assert.deepStrictEqual(checkApiRules(second.messages, { mode: "on-demand" }), [])
      }
    },
    // 1,000 sessions in each runtime: a CI run (Node, then Deno) tries 2,000
    { timeout: 180_000, arbitrary: { runs: 1000 } }
  )
})
