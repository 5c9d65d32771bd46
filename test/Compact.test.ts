import Anthropic from "@anthropic-ai/sdk"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Tracer } from "effect"
import { compactContext, CompactError, type CompactOutcome } from "../src/Compact.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy, defaultPolicy } from "../src/Policy.ts"
import { SessionLog } from "../src/SessionLog.ts"
import type { MemorySessions } from "../src/SessionStore.ts"
import { AnthropicSummarizer } from "../src/AnthropicSummarizer.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { Summarizer, withFallback } from "../src/Summarizer.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { filesTouched } from "../src/Tools.ts"
import { countTurns, turnStarts } from "../src/Turns.ts"
import { validate } from "../src/Validate.ts"
import { conversationArbitrary, generateSession, thinkingTokens } from "./fixtures/Conversation.ts"
import { checkApiRules } from "./fixtures/ApiRules.ts"
import { corpus } from "./fixtures/Corpus.ts"
import * as MessagesApiServer from "./fixtures/MessagesApiServer.ts"
import { SUMMARY_HEADER, summaryMessage, summaryText } from "../src/Summary.ts"
import { parseAppendix } from "../src/internal/summary.ts"

const policy = (fields: Parameters<typeof CompactionPolicy.makeUnsafe>[0]) => CompactionPolicy.makeUnsafe(fields)
const small = policy({ keepRecentTokens: 2_000, keepRecentTurns: 2, contextWindow: 50_000, minRemaining: 5_000 })

const compactedInfo = (outcome: CompactOutcome) => {
  assert.isTrue(
    outcome._tag === "Compacted" || outcome._tag === "FellBack",
    `expected a compaction, got ${outcome._tag}`
  )
  return outcome as Extract<CompactOutcome, { _tag: "Compacted" | "FellBack" }>
}

const anthropic = (url: string) =>
  AnthropicSummarizer.make({
    client: new Anthropic({ apiKey: "sk-test-key", baseURL: url, maxRetries: 0 }),
    model: "test-summarizer",
    timeout: "2 seconds",
    retry: { base: "5 millis", maxDelay: "10 millis", retries: 1 }
  })

/** The positions of every thinking block of `messages`, in order. */
const thinkingPositions = (messages: ReadonlyArray<Message>) =>
  messages.flatMap((m, message) =>
    typeof m.content === "string" ?
      [] :
      m.content.flatMap((b, block) =>
        b.type === "thinking" || b.type === "redacted_thinking" ? [{ message, block }] : []
      )
  )

describe("Compact", () => {
  it.effect("replaces the head with a summary message and keeps the tail verbatim", () =>
    Effect.gen(function* () {
      const session = generateSession(11, { messages: 300 })
      const { messages, outcome } = yield* compactContext(session, small)
      const info = compactedInfo(outcome)
      assert.strictEqual(info.summarizer, "extractive")
      assert.isBelow(info.tokensAfter, info.tokensBefore)
      assert.strictEqual(info.tokensBefore, estimateTokens(session))
      // the summary invalidates the thinking the tail keeps (API-RULES 29): the API drops it, so it counts nothing
      assert.strictEqual(info.tokensAfter, estimateTokens(messages) - thinkingTokens(messages))
      const first = messages[0]!
      assert.isDefined(summaryText(first))
      const text = (first.content[0] as { text: string }).text
      assert.isTrue(text.startsWith(SUMMARY_HEADER))
      assert.match(text, /not a new instruction/)
      // the tail is the input's own objects, in order
      const tail = messages.slice(1)
      const cut = session.length - tail.length
      tail.forEach((m, i) => assert.strictEqual(m, session[cut + i]))
      assert.deepStrictEqual(validate(messages), [])
      assert.isAtLeast(countTurns(tail), 2)
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))

  it.effect("skips a conversation no longer than the turn floor, returning the same array", () =>
    Effect.gen(function* () {
      const short: ReadonlyArray<Message> = [
        { role: "user", content: "hello" },
        { role: "assistant", content: "hi" },
        { role: "user", content: "again" }
      ]
      const result = yield* compactContext(short, defaultPolicy)
      assert.strictEqual(result.messages, short)
      assert.deepInclude(result.outcome, { _tag: "Skipped", reason: "TooShort", tokens: estimateTokens(short) })
      // issue 38: the skip names the setting that would change it, with the figures
      assert.deepInclude(result.outcome, { field: "maxTailTokens" })
      assert.match((result.outcome as Extract<CompactOutcome, { _tag: "Skipped" }>).detail, /keepRecentTurns \(2\)/)
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))

  it.effect("a second compaction with no new turns is skipped and never grows the context", () =>
    Effect.gen(function* () {
      const session = generateSession(12, { messages: 400 })
      const first = yield* compactContext(session, small)
      compactedInfo(first.outcome)
      const second = yield* compactContext(first.messages, small)
      assert.strictEqual(second.outcome._tag, "Skipped")
      assert.strictEqual(second.messages, first.messages)
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))

  it.effect("a pass that cannot free enough is skipped before the summarizer is called", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const session = generateSession(22, { messages: 300 })
      const result = yield* compactContext(session, small, { minFreedTokens: estimateTokens(session) }).pipe(
        Effect.provideService(Summarizer, anthropic(server.url))
      )
      assert.strictEqual(result.outcome._tag, "Skipped")
      assert.deepInclude(result.outcome, { reason: "TooLittleFreed", field: "minFreedTokens" })
      assert.strictEqual(result.messages, session)
      assert.strictEqual(server.requests.length, 0)
    }))

  it.effect("at the trigger, minGrowthTokens is checked on the trigger's scale (tokensPerEstimate)", () =>
    Effect.gen(function* () {
      const atTrigger = policy({ compactAtTokens: 40_000, keepRecentTokens: 2_000 })
      const session = generateSession(77, { messages: 60, maxOutput: 2_000 })
      const estimate = estimateTokens(session)
      const fired = 24_000
      // estimates taken for the API's tokens: of its ~10k estimated tokens the pass cannot free minGrowthTokens (8,000)
      const plain = yield* compactContext(session, atTrigger, { trigger: fired, minFreedTokens: 100 })
      assert.deepInclude(plain.outcome, { _tag: "Skipped", reason: "TooLittleFreed", field: "minGrowthTokens" })
      // the trigger fired on 24,000 of the API's tokens for this view: each estimated token weighs fired / estimate
      const ratio = fired / estimate
      const scaled = yield* compactContext(session, atTrigger, {
        trigger: fired,
        tokensPerEstimate: ratio,
        minFreedTokens: 100
      })
      const info = compactedInfo(scaled.outcome)
      // what it frees, on the trigger's scale, is minGrowthTokens at least: the bound holds, on the right scale
      assert.isAtLeast((info.tokensBefore - info.tokensAfter) * ratio, atTrigger.minGrowthTokens)
      // an estimate that overcounts (fewer of the API's tokens than estimated ones) raises the bound in estimates
      const over = yield* compactContext(session, atTrigger, {
        trigger: fired,
        tokensPerEstimate: 0.5,
        minFreedTokens: 100
      })
      assert.deepInclude(over.outcome, { _tag: "Skipped", reason: "TooLittleFreed", field: "minGrowthTokens" })
      assert.include(
        (over.outcome as Extract<CompactOutcome, { _tag: "Skipped" }>).detail,
        "minGrowthTokens (8,000, about 16,000 estimated)"
      )
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))

  it.effect("updates an earlier summary and carries its file lists forward", () =>
    Effect.gen(function* () {
      const session = generateSession(13, { messages: 600 })
      const half = turnStarts(session)[Math.floor(turnStarts(session).length / 2)]!
      const first = yield* compactContext(session.slice(0, half), small)
      compactedInfo(first.outcome)
      const firstFiles = parseAppendix(summaryText(first.messages[0]!)!)!
      const grown = [...first.messages, ...session.slice(half)]
      const second = yield* compactContext(grown, small)
      compactedInfo(second.outcome)
      const secondFiles = parseAppendix(summaryText(second.messages[0]!)!)!
      for (const path of firstFiles.modified) assert.include(secondFiles.modified, path)
      for (const path of firstFiles.read) {
        assert.isTrue(secondFiles.read.includes(path) || secondFiles.modified.includes(path), path)
      }
      assert.strictEqual(second.messages.filter((m) => summaryText(m) !== undefined).length, 1)
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))

  it.effect("text that repair merged into an earlier summary message is summarized, not dropped", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(MessagesApiServer.Reply.stream(["## Goal\nUpdated."]))
      const session = generateSession(21, { messages: 200 })
      const summary = summaryMessage("## Goal\nAn earlier goal.")
      // what repair makes of [summary, user text]: one user message, the summary block first
      const merged: Message = {
        role: "user",
        content: [...summary.content, { type: "text", text: "please also rename parseConfig to loadConfig" }]
      }
      const rest = session[0]!.role === "user" ? session.slice(1) : session
      yield* compactContext([merged, ...rest], small).pipe(Effect.provideService(Summarizer, anthropic(server.url)))
      const body = JSON.stringify(server.requests[0]!.body)
      assert.include(body, "An earlier goal.")
      assert.include(body, "rename parseConfig to loadConfig")
    }))

  it.effect("sends the rendered head, the focus instructions and the earlier summary through the real SDK", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(MessagesApiServer.Reply.stream(["## Goal\nShip it.", "\n## Next steps\nRun the tests."]))
      const session = generateSession(14, { messages: 200 })
      const withEarlier = [summaryMessage("## Goal\nAn earlier goal."), ...session]
      const { messages, outcome } = yield* compactContext(withEarlier, small, { instructions: "focus on the parser" })
        .pipe(Effect.provideService(Summarizer, anthropic(server.url)))
      const info = compactedInfo(outcome)
      assert.strictEqual(outcome._tag, "Compacted")
      assert.strictEqual(info.summarizer, "anthropic")
      assert.strictEqual(server.requests.length, 1)
      const body = JSON.stringify(server.requests[0]!.body)
      assert.include(body, "focus on the parser")
      assert.include(body, "An earlier goal.")
      assert.include(body, "test-summarizer")
      const text = summaryText(messages[0]!)!
      assert.include(text, "Ship it.")
      assert.deepStrictEqual(validate(messages), [])
    }))

  it.effect("a failed summary returns the caller's messages unchanged inside the error", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(MessagesApiServer.Reply.status(400, "invalid_request_error"))
      const session = generateSession(15, { messages: 200 })
      const snapshot = JSON.stringify(session)
      const error = yield* Effect.flip(
        compactContext(session, small).pipe(Effect.provideService(Summarizer, anthropic(server.url)))
      )
      assert.instanceOf(error, CompactError)
      assert.strictEqual(error.reason, "Summarize")
      assert.strictEqual(error.messages, session)
      assert.strictEqual(JSON.stringify(session), snapshot)
      assert.match(error.message, /compaction not applied/)
    }))

  it.effect("falls back to the extractive summarizer and says so", () =>
    Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(MessagesApiServer.Reply.status(401, "authentication_error"))
      const session = generateSession(16, { messages: 200 })
      const summarizer = withFallback(anthropic(server.url), ExtractiveSummarizer.make())
      const { messages, outcome } = yield* compactContext(session, small).pipe(
        Effect.provideService(Summarizer, summarizer)
      )
      assert.strictEqual(outcome._tag, "FellBack")
      const info = outcome as Extract<CompactOutcome, { _tag: "FellBack" }>
      assert.strictEqual(info.primary, "anthropic")
      assert.strictEqual(info.summarizer, "extractive")
      assert.deepStrictEqual(validate(messages), [])
    }))

  it.effect("wraps the pass in a span with token and turn attributes", () =>
    Effect.gen(function* () {
      const spans: Array<{ name: string; attributes: Map<string, unknown> }> = []
      const tracer = Tracer.make({
        span: (options) => {
          const span = Tracer.nativeTracer.span(options)
          const attributes = new Map<string, unknown>()
          spans.push({ name: options.name, attributes })
          const attribute = span.attribute.bind(span)
          span.attribute = (key, value) => {
            attributes.set(key, value)
            attribute(key, value)
          }
          return span
        }
      })
      const session = generateSession(17, { messages: 300 })
      yield* compactContext(session, small).pipe(Effect.withTracer(tracer))
      const span = spans.find((s) => s.name === "compactContext")
      assert.isDefined(span)
      assert.strictEqual(span!.attributes.get("compaction.tokens_before"), estimateTokens(session))
      assert.isNumber(span!.attributes.get("compaction.tokens_after"))
      assert.isNumber(span!.attributes.get("compaction.turns_summarized"))
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))

  it.effect("persists the boundary to the session log, and a resume rebuilds the same view", () =>
    Effect.gen(function* () {
      const store = new Map() as MemorySessions
      const session = generateSession(18, { messages: 300 })
      const live = yield* Effect.gen(function* () {
        const log = yield* SessionLog
        yield* log.append(session)
        const { messages } = yield* compactContext(session, small)
        const more: ReadonlyArray<Message> = [{ role: "user", content: "next question" }]
        yield* log.append(more)
        return [...messages, ...more]
      }).pipe(Effect.provide(SessionLog.layerMemory({ sessionId: "s1", store })))
      const loaded = yield* Effect.gen(function* () {
        const log = yield* SessionLog
        return yield* log.load()
      }).pipe(Effect.provide(SessionLog.layerMemory({ sessionId: "s1", store })))
      assert.strictEqual(JSON.stringify(loaded.view), JSON.stringify(live))
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))

  /** `session` with an aborted reply (a tool_use that never got its result) just before its last message. */
  const withAbortedReply = (seed: number): Array<Message> => {
    const session: Array<Message> = [...generateSession(seed, { messages: 300 })]
    session.splice(session.length - 1, 0, {
      role: "assistant",
      content: [{ type: "tool_use", id: "toolu_aborted", name: "bash", input: { command: "sleep 100" } }]
    })
    return session
  }

  const loadView = (store: MemorySessions, sessionId: string) =>
    Effect.flatMap(SessionLog, (log) => log.load()).pipe(
      Effect.provide(SessionLog.layerMemory({ sessionId, store }))
    )

  it.effect("persists a compaction whose kept tail needed repair, and a resume rebuilds the repaired view", () =>
    Effect.gen(function* () {
      const store = new Map() as MemorySessions
      const session = withAbortedReply(20)
      const before = JSON.stringify(session)
      const { live, outcome } = yield* Effect.gen(function* () {
        const log = yield* SessionLog
        yield* log.append(session)
        const { messages, outcome } = yield* compactContext(session, small)
        assert.strictEqual(JSON.stringify((yield* log.snapshot).view), JSON.stringify(messages))
        return { live: messages, outcome }
      }).pipe(Effect.provide(SessionLog.layerMemory({ sessionId: "s3", store })))
      assert.strictEqual(JSON.stringify(session), before, "the input is not mutated")
      assert.include(compactedInfo(outcome).repairs.addedErrorResults, "toolu_aborted")
      assert.deepStrictEqual(validate(live), [])
      assert.isDefined(summaryText(live[0]!))
      const loaded = yield* loadView(store, "s3")
      assert.deepStrictEqual(loaded.issues, [])
      assert.strictEqual(JSON.stringify(loaded.view), JSON.stringify(live))
      const entry = loaded.entries.at(-1)!
      assert.isTrue(entry.type === "compaction" && entry.kept !== undefined, "the repaired tail is stored")
      // without a log the same pass returns the same view
      const alone = yield* compactContext(session, small)
      assert.strictEqual(JSON.stringify(alone.messages), JSON.stringify(live))
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))

  it.effect("a turn appended while the summarizer runs lands after the repaired tail, live and after a resume", () =>
    Effect.gen(function* () {
      const store = new Map() as MemorySessions
      const session = withAbortedReply(21)
      const arrived: Message = { role: "user", content: "arrived while summarizing" }
      const extractive = ExtractiveSummarizer.make()
      const { live, returned } = yield* Effect.gen(function* () {
        const log = yield* SessionLog
        yield* log.append(session)
        const slow = Summarizer.of({
          name: extractive.name,
          summarize: (request) => Effect.andThen(Effect.orDie(log.append([arrived])), extractive.summarize(request))
        })
        const { messages } = yield* compactContext(session, small).pipe(Effect.provideService(Summarizer, slow))
        return { live: (yield* log.snapshot).view, returned: messages }
      }).pipe(Effect.provide(SessionLog.layerMemory({ sessionId: "s4", store })))
      assert.strictEqual(JSON.stringify(live), JSON.stringify([...returned, arrived]))
      const loaded = yield* loadView(store, "s4")
      assert.strictEqual(JSON.stringify(loaded.view), JSON.stringify(live))
    }))

  it.effect("compacting a repaired view again, after more turns, persists and resumes byte for byte", () =>
    Effect.gen(function* () {
      const store = new Map() as MemorySessions
      const session = withAbortedReply(22)
      const more = generateSession(23, { messages: 200 })
      const live = yield* Effect.gen(function* () {
        const log = yield* SessionLog
        yield* log.append(session)
        compactedInfo((yield* compactContext(session, small)).outcome)
        yield* log.append(more)
        const second = yield* compactContext((yield* log.snapshot).view, small)
        compactedInfo(second.outcome)
        assert.deepStrictEqual(
          validate(second.messages).map((v) => v._tag),
          second.messages.length === 0 ? ["EmptyConversation"] : []
        )
        return second.messages
      }).pipe(Effect.provide(SessionLog.layerMemory({ sessionId: "s5", store })))
      const loaded = yield* loadView(store, "s5")
      assert.strictEqual(JSON.stringify(loaded.view), JSON.stringify(live))
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))

  it.effect("a compaction that cannot be persisted is not reported as applied", () =>
    Effect.gen(function* () {
      const session = generateSession(19, { messages: 300 })
      const error = yield* Effect.gen(function* () {
        const log = yield* SessionLog
        yield* log.append(session.slice(0, 10)) // the log's view is not the caller's view
        return yield* Effect.flip(compactContext(session, small))
      }).pipe(Effect.provide(SessionLog.layerMemory({ sessionId: "s2" })))
      assert.strictEqual(error.reason, "Persist")
      assert.strictEqual(error.messages, session)
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))

  it.effect("head system messages: a cleared clear_at message and a summarized turn's settings are not carried on", () =>
    Effect.gen(function* () {
      const long = (tag: string) => `${tag} ${"words of the turn ".repeat(400)}`
      const cleared = { role: "system", content: "For this turn only: be brief.", clear_at: "next_user_message" }
      const effort = { role: "system", output_config: { effort: "low" } }
      const standing = { role: "system", content: "Always answer in English." }
      const session = [
        { role: "user", content: long("u1") },
        cleared,
        { role: "assistant", content: [{ type: "text", text: long("a1") }] },
        { role: "user", content: long("u2") },
        effort,
        { role: "assistant", content: [{ type: "text", text: long("a2") }] },
        { role: "user", content: long("u3") },
        standing,
        { role: "assistant", content: [{ type: "text", text: long("a3") }] },
        { role: "user", content: "u4: and now?" },
        { role: "assistant", content: [{ type: "text", text: "a4: done." }] }
      ] as unknown as Array<Message>
      assert.deepStrictEqual(validate(session), [])
      const p = policy({ keepRecentTokens: 50, keepRecentTurns: 1, contextWindow: 50_000, minRemaining: 5_000 })
      const { messages, outcome } = yield* compactContext(session, p, { minFreedTokens: 1 })
      assert.strictEqual(outcome._tag, "Compacted")
      assert.deepStrictEqual(messages.filter((m) => m.role !== "system").slice(1), session.slice(-2))
      const systems = messages.filter((m) => m.role === "system")
      // rule 27: the cleared message is dead (u2 followed it); rule 26: the effort governed a2, which is summarized, so
      // it must not govern a4 now; the standing instruction stays live
      assert.deepStrictEqual(systems, [standing] as unknown as Array<Message>)
      assert.deepStrictEqual(validate(messages), [])
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))

  it.effect("the newest MCP tool listing of a server the kept tail still calls goes with the tail (API-RULES 30)", () =>
    Effect.gen(function* () {
      const long = (tag: string) => `${tag} ${"words of the turn ".repeat(400)}`
      const listing = (version: string) => ({
        type: "mcp_tool_listing",
        mcp_server_name: "docs",
        tools: [{ name: "fetch_doc", description: version, input_schema: { type: "object" } }]
      })
      const mcpTurn = (id: string, listed: ReadonlyArray<unknown>) => ({
        role: "assistant",
        content: [
          ...listed,
          { type: "mcp_tool_use", id, name: "fetch_doc", server_name: "docs", input: { topic: id } },
          { type: "mcp_tool_result", tool_use_id: id, is_error: false, content: [{ type: "text", text: long(id) }] },
          { type: "text", text: `read ${id}` }
        ]
      })
      const session = [
        { role: "user", content: long("u1") },
        mcpTurn("mcptoolu_1", [listing("v1")]),
        { role: "user", content: long("u2") },
        mcpTurn("mcptoolu_2", [listing("v2")]),
        { role: "user", content: long("u3") },
        { role: "assistant", content: [{ type: "text", text: long("a3") }] },
        { role: "user", content: "u4: once more" },
        mcpTurn("mcptoolu_3", [])
      ] as unknown as Array<Message>
      assert.deepStrictEqual(validate(session), [])
      const p = policy({ keepRecentTokens: 50, keepRecentTurns: 1, contextWindow: 50_000, minRemaining: 5_000 })
      const { messages, outcome } = yield* compactContext(session, p, { minFreedTokens: 1 })
      assert.strictEqual(outcome._tag, "Compacted")
      const last = messages.at(-1)!
      assert.deepStrictEqual((last.content as ReadonlyArray<unknown>)[0], listing("v2"), "the newest listing, first")
      assert.deepStrictEqual((last.content as ReadonlyArray<unknown>).slice(1), session.at(-1)!.content as never)
      assert.deepStrictEqual(validate(messages), [])
      assert.deepStrictEqual(checkApiRules(messages), [])
      // a tail that lists the server itself before its call, or calls no MCP server, is kept as it is
      const listedAgain = [...session.slice(0, -1), mcpTurn("mcptoolu_3", [listing("v3")])] as unknown as Array<Message>
      const again = yield* compactContext(listedAgain, p, { minFreedTokens: 1 })
      assert.strictEqual(again.messages.at(-1), listedAgain.at(-1))
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))

  it.effect(
    "a compaction is a fixed point on real session prefixes: again with the same policy is Skipped, same array",
    () =>
      Effect.gen(function* () {
        // issue 42: the summary message merged with the kept tail's first user message into one turn, and the tail
        // measured with it on top no longer fitted maxTailTokens, so a second pass cut again (15 → 14 messages here)
        const p = policy({ keepRecentTokens: 2_000, keepRecentTurns: 3, maxTailTokens: 6_000 })
        const sessions = new Map(corpus().map((s) => [s.name, s.messages]))
        const known: ReadonlyArray<readonly [string, ReadonlyArray<number>]> = [
          ["pi__session-2025-12-17_thinking", [101, 105, 172, 180, 278, 400, 437]],
          ["pi__before-compaction", [521, 610, 919]],
          ["pi__large-session", [755, 853]]
        ]
        let checked = 0
        const fixedPoint = (view: ReadonlyArray<Message>, label: string) =>
          Effect.gen(function* () {
            const first = yield* compactContext(view, p)
            if (first.outcome._tag === "Skipped") return
            checked++
            const second = yield* compactContext(first.messages, p)
            assert.strictEqual(second.outcome._tag, "Skipped", label)
            assert.strictEqual(second.messages, first.messages, label)
          })
        for (const [name, ends] of known) {
          for (const end of ends) yield* fixedPoint(sessions.get(name)!.slice(0, end), `${name} at ${end}`)
        }
        assert.strictEqual(checked, 12)
        // and a sample of every session's prefixes, at every eleventh turn
        for (const [name, messages] of sessions) {
          const starts = turnStarts(messages)
          for (let k = 3; k < starts.length; k += 11) {
            yield* fixedPoint(messages.slice(0, starts[k]), `${name} at ${starts[k]}`)
          }
        }
      }).pipe(Effect.provide(ExtractiveSummarizer.layer)),
    120_000
  )

  it.effect.prop(
    "generated sessions: a compaction is a fixed point (the same policy again, nothing new: Skipped, the same array)",
    [conversationArbitrary()],
    ([session]) =>
      Effect.gen(function* () {
        for (
          const p of [
            policy({ keepRecentTokens: 300, keepRecentTurns: 1, contextWindow: 20_000, minRemaining: 1_000 }),
            policy({ keepRecentTokens: 500, keepRecentTurns: 3, maxTailTokens: 1_500 })
          ]
        ) {
          const first = yield* compactContext(session, p, { minFreedTokens: 1 })
          if (first.outcome._tag === "Skipped") continue
          const second = yield* compactContext(first.messages, p, { minFreedTokens: 1 })
          assert.strictEqual(second.outcome._tag, "Skipped")
          assert.strictEqual(second.messages, first.messages)
        }
      }).pipe(Effect.provide(ExtractiveSummarizer.layer)),
    { timeout: 180_000, arbitrary: { runs: 300 } }
  )

  it.effect.prop(
    "generated sessions: the output validates, keeps the floor, and never grows on a second pass",
    [conversationArbitrary()],
    ([session]) =>
      Effect.gen(function* () {
        const p = policy({ keepRecentTokens: 300, keepRecentTurns: 1, contextWindow: 20_000, minRemaining: 1_000 })
        const first = yield* compactContext(session, p, { minFreedTokens: 1 })
        // an empty session stays empty (Skipped), which the API rejects (rule 1): nothing to compact, nothing to send
        assert.deepStrictEqual(
          validate(first.messages).map((v) => v._tag),
          session.length === 0 ? ["EmptyConversation"] : []
        )
        if (first.outcome._tag !== "Skipped") {
          const info = compactedInfo(first.outcome)
          const tail = first.messages.slice(1)
          assert.isTrue(info.splitTurn || countTurns(tail) >= 1)
          assert.isBelow(info.tokensAfter, info.tokensBefore)
        } else assert.strictEqual(first.messages, session)
        // after a compaction every thinking block of the view is invalidated (API-RULES 29): a caller says so, as
        // `Conversation` does, and the API counts none of it, so "never grows" is of what the API counts
        const unbound = first.outcome._tag === "Skipped" ? [] : thinkingPositions(first.messages)
        const second = yield* compactContext(first.messages, p, { minFreedTokens: 1, unboundThinking: unbound })
        const apiCount = (messages: ReadonlyArray<Message>, dropped: boolean) =>
          estimateTokens(messages) - (dropped ? thinkingTokens(messages) : 0)
        assert.isAtMost(
          apiCount(second.messages, second.outcome._tag !== "Skipped" || unbound.length > 0),
          apiCount(first.messages, unbound.length > 0)
        )
        assert.deepStrictEqual(
          validate(second.messages).map((v) => v._tag),
          second.messages.length === 0 ? ["EmptyConversation"] : []
        )
      }).pipe(Effect.provide(ExtractiveSummarizer.layer)),
    { timeout: 180_000, arbitrary: { runs: 2000 } }
  )

  it.effect.prop(
    "generated sessions with aborted replies: compacted through the log twice, a resume rebuilds the live view",
    [conversationArbitrary({ allowInvalid: true })],
    ([session]) =>
      Effect.gen(function* () {
        const p = policy({ keepRecentTokens: 300, keepRecentTurns: 1, contextWindow: 20_000, minRemaining: 1_000 })
        const store = new Map() as MemorySessions
        const half = turnStarts(session)[Math.floor(turnStarts(session).length / 2)] ?? session.length
        const live = yield* Effect.gen(function* () {
          const log = yield* SessionLog
          for (const part of [session.slice(0, half), session.slice(half)]) {
            yield* log.append(part)
            const view = (yield* log.snapshot).view
            const { messages, outcome } = yield* compactContext(view, p, { minFreedTokens: 1 })
            if (outcome._tag === "Skipped") assert.strictEqual(messages, view)
            else assert.deepStrictEqual(validate(messages), [])
            assert.strictEqual(JSON.stringify((yield* log.snapshot).view), JSON.stringify(messages))
          }
          return (yield* log.snapshot).view
        }).pipe(Effect.provide(SessionLog.layerMemory({ sessionId: "prop", store })))
        const loaded = yield* loadView(store, "prop")
        assert.deepStrictEqual(loaded.issues, [])
        assert.strictEqual(JSON.stringify(loaded.view), JSON.stringify(live))
      }).pipe(Effect.provide(ExtractiveSummarizer.layer)),
    { timeout: 180_000, arbitrary: { runs: 500 } } // per runtime: fast-check draws new cases in each, 1,000 per CI run
  )

  it.effect("real sessions compacted through the session log as they grow resume byte for byte", () =>
    Effect.gen(function* () {
      let compactions = 0
      let repaired = 0
      for (const session of corpus()) {
        const store = new Map() as MemorySessions
        const starts = turnStarts(session.messages)
        // eight even points, and just after every aborted reply (so it lands in a kept tail)
        const aborted = validate(session.messages).filter((v) => v._tag === "MissingToolResult")
          .map((v) => v.messageIndex + 2)
        const points = [...[1, 2, 3, 4, 5, 6, 7].map((k) => starts[Math.floor(starts.length * k / 8)] ?? 0), ...aborted]
          .sort((a, b) => a - b)
        const live = yield* Effect.gen(function* () {
          const log = yield* SessionLog
          let appended = 0
          for (const end of [...points, session.messages.length]) {
            const upTo = Math.min(Math.max(end, appended), session.messages.length)
            yield* log.append(session.messages.slice(appended, upTo))
            appended = upTo
            const { messages, outcome } = yield* compactContext((yield* log.snapshot).view, small)
            if (outcome._tag === "Skipped") continue
            compactions++
            assert.deepStrictEqual(validate(messages), [], session.name)
          }
          return (yield* log.snapshot).view
        }).pipe(Effect.provide(SessionLog.layerMemory({ sessionId: "corpus", store })))
        const loaded = yield* loadView(store, "corpus")
        assert.strictEqual(JSON.stringify(loaded.view), JSON.stringify(live), session.name)
        repaired += loaded.entries.filter((e) => e.type === "compaction" && e.kept !== undefined).length
      }
      assert.isAtLeast(compactions, 10)
      assert.isAtLeast(repaired, 1, "some real compaction needed a repaired tail")
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))

  it.effect("callsWaiting: the cut stays before the reply whose calls wait, and the tail leaves them open", () =>
    Effect.gen(function* () {
      const session = generateSession(5, { messages: 120, maxOutput: 3_000 })
      const waiting: ReadonlyArray<Message> = [
        {
          role: "assistant",
          content: [
            { type: "tool_use", id: "toolu_wait", name: "bash", input: { command: "npm run migrate" } },
            { type: "tool_use", id: "toolu_done", name: "bash", input: { command: "ls" } }
          ]
        },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_done", content: "src" }] }
      ]
      const messages = [...session, ...waiting]
      const answers = (view: ReadonlyArray<Message>) =>
        view.flatMap((m) =>
          typeof m.content === "string"
            ? []
            : m.content.filter((b) =>
              b.type === "tool_result" && (b as { readonly tool_use_id: string }).tool_use_id === "toolu_wait"
            )
        )
      const open = yield* compactContext(messages, small, { upTo: messages.length, callsWaiting: true })
      const info = compactedInfo(open.outcome)
      assert.isAtMost(info.cut.kept.from, session.length, "the cut lies before the waiting reply")
      assert.deepStrictEqual(open.messages.slice(-waiting.length), [...waiting], "the waiting turn is kept as it was")
      assert.deepStrictEqual(answers(open.messages), [], "the waiting call is not answered")
      // the request after the result comes is valid, judged by the independent checker
      const answered = [...open.messages, {
        role: "user" as const,
        content: [{ type: "tool_result" as const, tool_use_id: "toolu_wait", content: "migrated" }]
      }]
      assert.deepStrictEqual(checkApiRules(answered as never), [])
      // without it, a call with no result in the kept tail is answered as interrupted (the list is all there is)
      const closed = yield* compactContext(messages, small)
      assert.strictEqual(answers(closed.messages).length, 1)
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))

  it.effect("a second compaction of a small span keeps what the earlier summary carried: it replaces that summary too", () =>
    Effect.gen(function* () {
      const budget = policy({ compactAtTokens: 20_000 })
      const rule = (r: number) =>
        `RULE-${r}: ${"keep the API stable and run the linter before each commit. ".repeat(10)}`
      let id = 0
      const turn = (text: string, calls: number, size: number): Array<Message> => [
        { role: "user", content: text },
        ...Array.from({ length: calls }, (): Array<Message> => {
          const call = `toolu_${++id}`
          return [
            {
              role: "assistant",
              content: [{ type: "tool_use", id: call, name: "bash", input: { command: `make ${id}` } }]
            },
            { role: "user", content: [{ type: "tool_result", tool_use_id: call, content: "o\n".repeat(size) }] }
          ]
        }).flat(),
        { role: "assistant", content: "ok" }
      ]
      const rules = Array.from({ length: 16 }, (_, r) => rule(r + 1))
      const session = [
        ...rules.flatMap((text) => turn(text, 1, 1_500)),
        ...[0, 1, 2].flatMap((t) => turn(`filler ${t}`, 4, 1_500))
      ]
      // a rule is carried when its whole text is in the summary, judged here
      const carried = (summary: string) => rules.filter((text) => summary.includes(text.trim()))
      const first = yield* compactContext(session, budget)
      compactedInfo(first.outcome)
      const earlier = summaryText(first.messages[0]!)!
      assert.deepStrictEqual(carried(earlier), rules, "the first summary carries every rule")
      // a small new turn, and /compact again: its fresh span is smaller than the earlier summary it replaces too
      const grown = [...first.messages, ...turn("filler b", 1, 2_500)]
      const second = yield* compactContext(grown, budget)
      const info = compactedInfo(second.outcome)
      const fresh = grown.slice(1, info.cut.removed.to).filter((m) => m.role !== "system")
      assert.isBelow(estimateTokens(fresh), estimateTokens([grown[0]!]), "the fresh span is the smaller")
      const summary = summaryText(second.messages[0]!)!
      assert.deepStrictEqual(carried(summary), carried(earlier), "every rule the earlier summary carried is kept")
      assert.isAtMost(estimateTokens([second.messages[0]!]), budget.summaryBudgetTokens)
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))

  it.effect("real sessions compacted at several points validate, and the appendix lists the files the head touched", () =>
    Effect.gen(function* () {
      let compactions = 0
      for (const session of corpus()) {
        const starts = turnStarts(session.messages)
        const points = [0.25, 0.5, 0.75, 1].map((f) =>
          f === 1 ? session.messages.length : starts[Math.floor(starts.length * f)] ?? session.messages.length
        )
        for (const end of points) {
          const view = session.messages.slice(0, end)
          const { messages, outcome } = yield* compactContext(view, small)
          // a skipped compaction hands the input back as it is (the SWE-agent trajectory reuses call ids: rule 7)
          const expected = outcome._tag === "Skipped" ? validate(view).map((v) => v._tag) : []
          assert.deepStrictEqual(validate(messages).map((v) => v._tag), expected, `${session.name} at ${end}`)
          if (outcome._tag === "Skipped") continue
          compactions++
          const head = view.slice(0, view.length - (messages.length - 1))
          const files = parseAppendix(summaryText(messages[0]!)!)!
          const touched = filesTouched(head)
          assert.deepStrictEqual([...files.modified].sort(), [...touched.modified].sort(), session.name)
          assert.deepStrictEqual([...files.read].sort(), [...touched.read].sort(), session.name)
        }
      }
      assert.isAtLeast(compactions, 10)
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))
})
