/**
 * The compaction-block path end to end: the real `@anthropic-ai/sdk` client against the local Messages API server,
 * which enforces API-RULES (and the compaction beta's error codes). Lists the API rejects are rejected by the server;
 * after `repair` the server accepts them.
 */
import Anthropic from "@anthropic-ai/sdk"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { compactContext } from "../src/Compact.ts"
import { Conversation } from "../src/Conversation.ts"
import type { MessageParam } from "../src/ConversationState.ts"
import { resumeState } from "../src/internal/conversation/resume.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { SessionLog } from "../src/SessionLog.ts"
import type { MemorySessions } from "../src/SessionStore.ts"
import { summaryText } from "../src/Summary.ts"
import { type ContentBlock, decodeMessagesSync, type Message } from "../src/Message.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { repair, validate } from "../src/Validate.ts"
import { corpus } from "./fixtures/Corpus.ts"
import * as MessagesApiServer from "./fixtures/MessagesApiServer.ts"
import { Reply } from "./fixtures/MessagesApiServer.ts"
import { isCompaction } from "../src/internal/blocks.ts"
import { apiViewStart } from "../src/internal/apiView.ts"

const user = (text: string): Message => ({ role: "user", content: text })
const assistant = (text: string): Message => ({ role: "assistant", content: [{ type: "text", text }] })
const ON_DEMAND = ["compact-2026-09-04"] as const
const THRESHOLD = {
  context_management: { edits: [{ type: "compact_20260112" as const }] },
  betas: ["compact-2026-01-12"]
}
const SERVER_SUMMARY = "Server summary: the user fixed test coverage in src/lib.rs; tests now pass."
const RULE = "From now on, reply in one sentence."
const long = (tag: string) => `${tag} ${"detail ".repeat(1_500)}`

const client = (server: MessagesApiServer.MessagesApiServer) =>
  new Anthropic({ apiKey: "sk-test", baseURL: server.url, maxRetries: 0 })

/** Sends `messages` (plain or on-demand compaction); the final message, or the API error. */
const send = (
  server: MessagesApiServer.MessagesApiServer,
  messages: ReadonlyArray<Message>,
  onDemand = false
) =>
  Effect.tryPromise({
    try: () =>
      client(server).beta.messages.stream({
        model: "claude-sonnet-5",
        max_tokens: 1024,
        messages: messages as never,
        ...(onDemand
          ? { compaction: { type: "summarize", instructions: "Keep file paths." }, betas: [...ON_DEMAND] }
          : {})
      }).finalMessage(),
    catch: (e) => e as InstanceType<typeof Anthropic.APIError>
  })

/** Sends `messages` in threshold mode; the final message, or the API error. */
const sendThreshold = (server: MessagesApiServer.MessagesApiServer, messages: ReadonlyArray<unknown>) =>
  Effect.tryPromise({
    try: () =>
      client(server).beta.messages.stream({
        model: "claude-sonnet-5",
        max_tokens: 1024,
        messages: messages as never,
        ...THRESHOLD
      }).finalMessage(),
    catch: (e) => e as InstanceType<typeof Anthropic.APIError>
  })

const textOf = (m: { readonly content: unknown }): string =>
  typeof m.content === "string"
    ? m.content
    : (m.content as ReadonlyArray<{ readonly text?: unknown }>).map((b) => String(b.text ?? "")).join("\n")

/** A real conversation with a complete last turn, from the corpus. */
const realConversation = (): Array<Message> => {
  const session = corpus().find((s) => s.name.startsWith("claude-code"))!
  return repair(session.messages.map(({ content, role }) => ({ role, content }) as Message)).messages
}

describe("the compaction beta through the real SDK", () => {
  it.live("on-demand: a streamed, signed compaction block that the next request sends back first", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const conversation = realConversation()
      server.enqueue(Reply.compaction("The user fixed test coverage in src/lib.rs; tests now pass."))
      const response = yield* send(server, conversation, true)
      assert.strictEqual(response.stop_reason, "compaction")
      assert.strictEqual(response.content.length, 1)
      const iterations = (response.usage as { readonly iterations?: ReadonlyArray<{ readonly type: string }> })
        .iterations
      assert.deepStrictEqual(iterations?.map((i) => i.type), ["compaction"])
      const sent = server.requests[0]!
      assert.deepStrictEqual(sent.body.compaction, { type: "summarize", instructions: "Keep file paths." })
      assert.include(String(sent.headers["anthropic-beta"]), "compact-2026-09-04")

      // the block decodes as a first-class block and goes back verbatim, first, in place of what it summarized
      const [opened] = decodeMessagesSync([{ role: "assistant", content: response.content }])
      const block = (opened!.content as ReadonlyArray<ContentBlock>)[0]!
      assert.isTrue(isCompaction(block))
      const next: Array<Message> = [opened!, user("Now add a changelog entry.")]
      assert.deepStrictEqual(validate(next, [opened!]), [])
      server.enqueue(Reply.stream(["Done."]))
      const answer = yield* send(server, next)
      assert.strictEqual(answer.content[0]?.type, "text")
      assert.isBelow(estimateTokens(next), estimateTokens(conversation))

      // kept together with the history it replaced (threshold style), the API view is the same as without it
      const kept = [...conversation, opened!, user("Now add a changelog entry.")]
      assert.strictEqual(apiViewStart(kept), conversation.length)
      assert.strictEqual(estimateTokens(kept), estimateTokens(next))
    }))

  it.live("a changed summary or tool changes are rejected (rule 14), and validate sees it with a reference", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(Reply.compaction("Summary A.", { toolChanges: [{ type: "tool_removal", tool: { name: "x" } }] }))
      const response = yield* send(server, [user("go"), assistant("ok")], true)
      const original: Message = {
        role: "assistant",
        content: response.content as unknown as ReadonlyArray<ContentBlock>
      }
      const block = (original.content as unknown as ReadonlyArray<Record<string, unknown>>)[0]!
      for (
        const [edited, code] of [
          [{ ...block, content: "Summary B." }, "compaction_content_mismatch"],
          [{ ...block, tool_changes: [] }, "compaction_tool_changes_mismatch"]
        ] as const
      ) {
        const list: Array<Message> = [{ role: "assistant", content: [edited as ContentBlock] }, user("next")]
        assert.deepStrictEqual(validate(list, [original]).map((v) => v._tag), ["ModifiedCompaction"])
        const error = yield* Effect.flip(send(server, list))
        assert.strictEqual(error.status, 400)
        assert.strictEqual((error as { readonly errorCode?: string }).errorCode, code)
      }
    }))

  it.live("misplaced and ambiguous compaction blocks are rejected by code; repaired lists are accepted", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(Reply.compaction("First."), Reply.compaction("Second."))
      const a = (yield* send(server, [user("one"), assistant("1")], true)).content as unknown as Array<ContentBlock>
      const b = (yield* send(server, [user("two"), assistant("2")], true)).content as unknown as Array<ContentBlock>
      const cases: ReadonlyArray<readonly [string, Array<Message>]> = [
        ["compaction_block_misplaced", [user("before"), { role: "assistant", content: a }, user("after")]],
        ["compaction_block_ambiguous", [
          { role: "assistant", content: a },
          user("x"),
          { role: "assistant", content: b },
          user("y")
        ]]
      ]
      for (const [code, list] of cases) {
        const error = yield* Effect.flip(send(server, list, true))
        assert.strictEqual(error.status, 400, code)
        assert.strictEqual((error as { readonly errorCode?: string }).errorCode, code)
        const repaired = repair(list).messages
        server.enqueue(Reply.compaction("Merged."))
        const ok = yield* send(server, repaired, true)
        assert.strictEqual(ok.stop_reason, "compaction", code)
        // the server's newest summary survives the repair
        assert.strictEqual((repaired[0]!.content as ReadonlyArray<ContentBlock>)[0], list.at(-2)!.content[0])
      }
    }))

  it.live("misplaced system messages, duplicate ids, orphans and an empty list are rejected; repaired lists accepted", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const call: Message = { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "bash", input: {} }] }
      const result: Message = { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: "ok" }] }
      const broken: ReadonlyArray<Array<Message>> = [
        [user("go"), call, { role: "system", content: "New rule." }, result, assistant("done")],
        [{ role: "system", content: "First." }, user("go"), assistant("ok")],
        [user("go"), call, result, call, result],
        [user("go"), call, user("no result")],
        [result, user("go")]
      ]
      for (const list of broken) {
        const error = yield* Effect.flip(send(server, list))
        assert.strictEqual(error.status, 400, JSON.stringify(list))
        server.enqueue(Reply.stream(["fine"]))
        const ok = yield* send(server, repair(list).messages)
        assert.strictEqual(ok.content[0]?.type, "text")
      }
      const empty = yield* Effect.flip(send(server, []))
      assert.strictEqual(empty.status, 400)
    }))

  it.live("compaction_unavailable is a transient 529 with its code; content: null is a no-op block", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(Reply.compactionUnavailable, Reply.compaction(null))
      const error = yield* Effect.flip(send(server, [user("go"), assistant("ok")], true))
      assert.strictEqual(error.status, 529)
      assert.strictEqual((error as { readonly errorCode?: string }).errorCode, "compaction_unavailable")
      const failed = yield* send(server, [user("go"), assistant("ok")], true)
      const block = failed.content[0] as unknown as { readonly content: unknown }
      assert.isNull(block.content)
      const list: Array<Message> = [user("go"), { role: "assistant", content: failed.content as never }, user("again")]
      assert.strictEqual(apiViewStart(list), 0)
      assert.deepStrictEqual(validate(list), [])
    }))

  it.live("threshold mode: a compaction block, then the answer, with usage.iterations", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(Reply.compaction("Earlier work summarized.", { then: ["Continuing ", "the task."] }))
      const response = yield* Effect.tryPromise(() =>
        client(server).beta.messages.stream({
          model: "claude-sonnet-5",
          max_tokens: 1024,
          messages: [{ role: "user", content: "go" }],
          context_management: { edits: [{ type: "compact_20260112" }] },
          betas: ["compact-2026-01-12"]
        }).finalMessage()
      )
      assert.strictEqual(response.stop_reason, "end_turn")
      assert.deepStrictEqual(response.content.map((b) => b.type), ["compaction", "text"])
      const iterations = (response.usage as { readonly iterations?: ReadonlyArray<{ readonly type: string }> })
        .iterations
      assert.deepStrictEqual(iterations?.map((i) => i.type), ["compaction", "message"])
      const list: Array<Message> = [user("go"), { role: "assistant", content: response.content as never }, user("next")]
      assert.strictEqual(apiViewStart(list), 1)
      server.enqueue(Reply.stream(["ok"]))
      yield* Effect.tryPromise(() =>
        client(server).beta.messages.stream({
          model: "claude-sonnet-5",
          max_tokens: 1024,
          messages: list as never,
          context_management: { edits: [{ type: "compact_20260112" }] },
          betas: ["compact-2026-01-12"]
        }).finalMessage()
      )
    }))

  it.live("threshold: a streamed compaction block in the conversation, then our compactContext on top", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const list: Array<Message> = [...realConversation(), user(long("Refactor the parser."))]
      server.enqueue(Reply.compaction(SERVER_SUMMARY, { then: ["Continuing ", "the refactor."] }))
      const compacting = yield* sendThreshold(server, list)
      list.push({ role: "assistant", content: compacting.content as never })
      const opened = apiViewStart(list)
      assert.strictEqual(opened, list.length - 1)
      for (const [k, extra] of [[1, true], [2, false], [3, true]] as const) {
        list.push(user(long(`Step ${k}.`)))
        if (extra) list.push({ role: "system", content: `${RULE} (${k})` })
        server.enqueue(Reply.stream([`Done with step ${k}.`]))
        const reply = yield* sendThreshold(server, list)
        list.push({ role: "assistant", content: reply.content as never })
      }
      assert.strictEqual(apiViewStart(list), opened)

      const policy = CompactionPolicy.makeUnsafe({ keepRecentTokens: 500, keepRecentTurns: 1 })
      const { messages, outcome } = yield* compactContext(list, policy, { minFreedTokens: 1 }).pipe(
        Effect.provide(ExtractiveSummarizer.layer)
      )
      assert.strictEqual(outcome._tag, "Compacted")
      if (outcome._tag === "Compacted") assert.strictEqual(outcome.tokensBefore, estimateTokens(list.slice(opened)))
      assert.include(summaryText(messages[0]!), SERVER_SUMMARY)
      assert.strictEqual(apiViewStart(messages), 0)
      const systems = messages.filter((m) => m.role === "system").map(textOf).join("\n")
      for (const k of [1, 3]) assert.include(systems, `${RULE} (${k})`)
      // the server accepts the compacted list in both modes
      server.enqueue(Reply.stream(["Accepted."]))
      assert.strictEqual((yield* sendThreshold(server, messages)).content[0]?.type, "text")
      server.enqueue(Reply.compaction("Second server summary."))
      assert.strictEqual((yield* send(server, messages, true)).stop_reason, "compaction")
    }))

  it.live("Conversation over the server's compaction: compact, request accepted, resume equal to live", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const store: MemorySessions = new Map()
      const layer = Conversation.layerLogged({
        minFreedTokens: 1,
        policy: CompactionPolicy.makeUnsafe({
          keepRecentTokens: 500,
          keepRecentTurns: 1
        })
      }).pipe(
        Layer.provide(Layer.fresh(SessionLog.layerMemory({ store }))),
        Layer.provide(ExtractiveSummarizer.layer)
      )
      const live = yield* Effect.gen(function* () {
        const conversation = yield* Conversation
        const round = (text: string, reply: MessagesApiServer.Reply, system?: string) =>
          Effect.gen(function* () {
            yield* conversation.append(user(text) as MessageParam)
            if (system !== undefined) yield* conversation.append({ role: "system", content: system } as MessageParam)
            const { request, epoch } = yield* conversation.prepare
            server.enqueue(reply)
            const response = yield* sendThreshold(server, request.messages)
            yield* conversation.recordReply({ role: "assistant", content: response.content } as MessageParam, {
              input_tokens: 1_000,
              output_tokens: 10
            }, { requestEpoch: epoch })
          })
        yield* round(long("Start the work."), Reply.stream(["Started."]))
        yield* round(long("Go on."), Reply.compaction(SERVER_SUMMARY, { then: ["Continuing."] }))
        yield* round(long("Next step."), Reply.stream(["Next done."]), `${RULE} (1)`)
        yield* round(long("Last step."), Reply.stream(["All done."]))
        const { request, outcome } = yield* conversation.compact()
        assert.strictEqual(outcome._tag, "Compacted")
        assert.include(summaryText(request.messages[0] as Message), SERVER_SUMMARY)
        assert.include(request.messages.filter((m) => m.role === "system").map(textOf).join("\n"), `${RULE} (1)`)
        server.enqueue(Reply.stream(["Accepted."]))
        assert.strictEqual((yield* sendThreshold(server, request.messages)).content[0]?.type, "text")
        return yield* conversation.state
      }).pipe(Effect.provide(layer))
      const resumed = yield* Effect.gen(function* () {
        return resumeState(yield* (yield* SessionLog).load())
      }).pipe(Effect.provide(Layer.fresh(SessionLog.layerMemory({ store }))))
      assert.strictEqual(JSON.stringify(resumed.view), JSON.stringify(live.view))
    }))
})
