/**
 * Cache diagnostics (API-RULES 33): a real pi session replayed through `Conversation` with `diagnostics: true`, each
 * request sent with the real SDK to the local Messages API server, which answers `diagnostics` from its own cache
 * model (`fixtures/IndependentCache.ts`, not the library's). On every request the library's prediction
 * (`Prepared.cachePrediction`, kept beside the reported reason in `state.reply.cacheDiagnosis`) agrees with the
 * reported reason, and its missed tokens are within 5% of the reported ones.
 *
 * Bounded to stay cheap: the first 60 replies of `pi__session-2025-12-17_thinking`, under one of two settings split
 * by runtime (each run of the suite covers both): on Node, a 100k window and `minSavings: 1000` with two results
 * kept, so offloads rewrite the middle of the view (misses with a reused prefix); on Deno, a 40k window, so
 * compactions rewrite it from the start.
 */
import Anthropic from "@anthropic-ai/sdk"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { readFileSync } from "node:fs"
import { buildReport } from "../src/cli/Report.ts"
import { renderHtml } from "../src/cli/Html.ts"
import { importSession } from "../src/Import.ts"
import { Conversation, type Prepared } from "../src/Conversation.ts"
import type { MessageParam, SdkReply } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { knownPrefixOf, predictCacheMiss } from "../src/internal/conversation/diagnostics.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { SessionLog } from "../src/SessionLog.ts"
import type { MemorySessions } from "../src/SessionStore.ts"
import { corpus, DATA_DIR } from "./fixtures/Corpus.ts"
import { usageOf } from "./fixtures/ConversationReplay.ts"
import { cacheUsage, diagnoseCache } from "./fixtures/IndependentCache.ts"
import * as MessagesApiServer from "./fixtures/MessagesApiServer.ts"
import { Reply } from "./fixtures/MessagesApiServer.ts"

/**
 * `DIAG_ALL=1` runs the check over every reply of every corpus session (the issue's measure, minutes long); CI runs
 * the first 60 replies of one.
 */
const ALL = process.env.DIAG_ALL === "1"
const SESSION = "pi__session-2025-12-17_thinking"
const SESSIONS = ALL ? corpus().map((s) => s.name) : [SESSION]
const REPLIES = ALL ? Infinity : 60
const MODEL = "claude-sonnet-5"
const isDeno = "Deno" in globalThis
const SETTINGS = isDeno
  ? { name: "a 40k window (compactions)", policy: CompactionPolicy.makeUnsafe({ contextWindow: 40_000 }) }
  : {
    name: "a 100k window, minSavings 1000 (offloads)",
    policy: CompactionPolicy.makeUnsafe({ contextWindow: 100_000 }),
    minSavings: 1_000,
    keepRecent: 2
  }

/** The recorded content without the corpus's private keys, as the server streams it back. */
const contentOf = (message: MessageParam): ReadonlyArray<Record<string, unknown>> =>
  typeof message.content === "string"
    ? [{ type: "text", text: message.content }]
    : message.content as unknown as ReadonlyArray<Record<string, unknown>>

interface Row {
  readonly n: number
  readonly predicted: Prepared["cachePrediction"]
  readonly reported: unknown
  readonly agrees: boolean | undefined
}

const replay = (name: string) =>
  Effect.scoped(Effect.gen(function* () {
    const session = corpus().find((s) => s.name === name)
    if (session === undefined) throw new Error(`the corpus has no ${name}`)
    const server = yield* MessagesApiServer.make
    const client = new Anthropic({ apiKey: "sk-test", baseURL: server.url, maxRetries: 0 })
    const usage = usageOf(session.messages)
    const conversation = yield* Conversation
    const rows: Array<Row> = []
    let n = 0
    for (const [i, message] of (session.messages as unknown as ReadonlyArray<MessageParam>).entries()) {
      if (message.role !== "assistant") {
        yield* conversation.append(message)
        continue
      }
      if (n === REPLIES) break
      const prepared = yield* conversation.prepare
      n++
      server.enqueue(Reply.message(contentOf(message)))
      const reply = yield* Effect.promise(() =>
        client.beta.messages.stream(
          { model: MODEL, max_tokens: 1024, ...(prepared.request as unknown as Record<string, unknown>) } as never
        ).finalMessage()
      )
      const state = yield* conversation.recordReply(reply as unknown as SdkReply, usage.get(i), {
        requestEpoch: prepared.epoch
      })
      const diagnosis = state.reply?.cacheDiagnosis
      rows.push({ n, predicted: prepared.cachePrediction, reported: diagnosis?.reported, agrees: diagnosis?.agrees })
    }
    return { rows, bodies: server.requests.map((r) => r.body) }
  })).pipe(
    Effect.provide(Conversation.layerMemory({
      diagnostics: true,
      model: MODEL,
      system: "You are a coding agent working in a git repository.",
      ...SETTINGS
    })),
    Effect.provide(ExtractiveSummarizer.layer)
  )

describe("Conversation with cache diagnostics, against the local server's own cache model", () => {
  it.effect.each(SESSIONS)(
    `%s, ${ALL ? "every reply" : `${REPLIES} replies`}, ${SETTINGS.name}: every prediction agrees with the report`,
    (name) =>
      Effect.gen(function* () {
        const { bodies, rows } = yield* replay(name)
        if (!ALL) assert.strictEqual(rows.length, REPLIES)
        // the first request opts in with nothing to compare; every later one names the reply before it
        assert.deepStrictEqual(bodies[0]!.diagnostics, { previous_message_id: null })
        bodies.slice(1).forEach((body, k) =>
          assert.deepStrictEqual(body.diagnostics, { previous_message_id: `msg_test_${k + 1}` }, `request ${k + 2}`)
        )
        const compared = rows.slice(1)
        const disagreements = compared.filter((r) => r.agrees !== true)
        assert.deepStrictEqual(
          disagreements.map((r) =>
            `request ${r.n}: predicted ${JSON.stringify(r.predicted)}, reported ${JSON.stringify(r.reported)}`
          ),
          []
        )
        const misses = compared.filter((r) => r.predicted !== null)
        const hits = compared.length - misses.length
        // the replay rewrote its view (offloads, compactions) and also only grew it: both kinds are checked
        if (!ALL) assert.isAbove(misses.filter((r) => r.predicted!.missedInputTokens > 0).length, 2)
        if (!ALL) assert.isAbove(hits, compared.length / 2)
        const worst = Math.max(...misses.map((r) => {
          const reported = (r.reported as { readonly cache_missed_input_tokens: number }).cache_missed_input_tokens
          return reported === 0 ? 0 : Math.abs(r.predicted!.missedInputTokens - reported) / reported
        }))
        console.log(
          `${name}: ${compared.length} requests diagnosed, ${hits} no divergence, ${misses.length} misses ` +
            `(${
              misses.map((r) => `#${r.n} ${r.predicted!.missedInputTokens}@${r.predicted!.divergedAt.message}`).join(
                ", "
              )
            }); worst token gap ` +
            `${(worst * 100).toFixed(2)}%`
        )
        assert.isAtMost(worst, 0.05, "the predicted missed tokens are within 5% of the reported ones")
      }),
    180_000
  )
})

describe("the two cache models on crafted pairs: the library's prediction and the local server's diagnosis", () => {
  const mark = { type: "ephemeral" } as const
  const text = (i: number, marked = false) => ({
    type: "text",
    text: `block ${i} `.repeat(80),
    ...(marked ? { cache_control: mark } : {})
  })
  /** A system prompt (its breakpoint when `systemMarked`) and one user message of `n` blocks, breakpoints at `marks`. */
  const prompt = (
    n: number,
    marks: ReadonlyArray<number>,
    options: { readonly change?: number; readonly systemMarked?: boolean } = {}
  ): Record<string, unknown> => ({
    model: MODEL,
    system: [{
      type: "text",
      text: "S".repeat(6000),
      ...(options.systemMarked === false ? {} : { cache_control: mark })
    }],
    messages: [{
      role: "user",
      content: Array.from({ length: n }, (_, i) => ({
        ...text(i, marks.includes(i)),
        ...(i === options.change ? { text: "x" } : {})
      }))
    }]
  })
  const both = (previous: Record<string, unknown>, next: Record<string, unknown>) => ({
    library: predictCacheMiss(previous as never, next as never, { headTokens: 1500, minTokens: 1024 }),
    server: diagnoseCache(previous as never, next as never)
  })
  const previous = prompt(30, [10, 29])
  const everything = (p: Record<string, unknown>) => both(p, { ...p, model: "claude-opus-5" })

  it("no divergence, and each part that changes first: the same reason from both", () => {
    const grown = {
      ...previous,
      messages: [...(previous.messages as Array<unknown>), { role: "assistant", content: "ok" }]
    }
    assert.deepStrictEqual(both(previous, grown), { library: null, server: null })
    const cases: ReadonlyArray<readonly [string, Record<string, unknown>]> = [
      ["model_changed", { ...previous, model: "claude-opus-5" }],
      ["system_changed", { ...previous, system: [{ type: "text", text: "T".repeat(6000), cache_control: mark }] }],
      ["tools_changed", { ...previous, tools: [{ name: "read", input_schema: { type: "object" } }] }],
      ["messages_changed", prompt(30, [10, 29], { change: 25 })]
    ]
    for (const [reason, next] of cases) {
      const { library, server } = both(previous, next)
      assert.strictEqual(library?.reason, reason)
      assert.strictEqual(server?.type, reason)
    }
  })

  it("a changed output_config.format misses the whole cache, a changed speed is model_changed (API-RULES 40)", () => {
    const format = (name: string) => ({
      format: { type: "json_schema", schema: { type: "object", properties: { [name]: { type: "string" } } } }
    })
    const withFormat = { ...previous, output_config: format("answer") }
    const cases: ReadonlyArray<readonly [string, Record<string, unknown>, Record<string, unknown>]> = [
      ["system_changed", withFormat, { ...previous, output_config: format("verdict") }],
      ["system_changed", previous, withFormat],
      ["model_changed", { ...previous, speed: "standard" }, { ...previous, speed: "fast" }]
    ]
    for (const [reason, before, next] of cases) {
      const { library, server } = both(before, next)
      assert.strictEqual(library?.reason, reason)
      assert.strictEqual(server?.type, reason)
      // nothing is reused: the whole cached prefix is missed
      assert.strictEqual(library!.missedInputTokens, everything(before).library!.missedInputTokens)
      assert.deepStrictEqual(library!.divergedAt, { message: -1, block: 0 })
    }
    // the same format, an effort change elsewhere in output_config: no divergence
    const grown = {
      ...withFormat,
      messages: [...(previous.messages as Array<unknown>), { role: "assistant", content: "ok" }]
    }
    assert.deepStrictEqual(both(withFormat, { ...grown, output_config: { ...format("answer"), effort: "low" } }), {
      library: null,
      server: null
    })
  })

  it("the reused prefix: a written breakpoint before the divergence, within 20 blocks of one of the new request", () => {
    const all = everything(previous)
    // a change at block 25 keeps the prefix written at block 10: the new request reads it from its breakpoint at 29
    const near = both(previous, prompt(30, [10, 29], { change: 25 }))
    assert.deepStrictEqual(near.library!.divergedAt, { message: 0, block: 25 })
    assert.isBelow(near.library!.missedInputTokens, all.library!.missedInputTokens)
    assert.isBelow(near.server!.cache_missed_input_tokens, all.server!.cache_missed_input_tokens)
    // with no breakpoint on the system prompt and the new request's first one 20 blocks after block 10: none reused
    const before = prompt(30, [10, 29], { systemMarked: false })
    const far = both(before, prompt(40, [30, 39], { change: 25, systemMarked: false }))
    assert.strictEqual(far.library!.missedInputTokens, everything(before).library!.missedInputTokens)
    assert.strictEqual(far.server!.cache_missed_input_tokens, everything(before).server!.cache_missed_input_tokens)
  })

  it("the prefixes the usage tells: with them the library's missed tokens are the server's, to the token", () => {
    // the server's cache after a request whose last breakpoint is block 10, then the previous one (10 and 29)
    const cache = new Set<string>()
    const earlier = prompt(11, [10])
    const known = [earlier, previous].map((p) => knownPrefixOf(p as never, cacheUsage(cache, p as never))!)
    assert.deepStrictEqual(known.map((k) => k.at), [{ message: 0, block: 10 }, { message: 0, block: 29 }])
    const next = prompt(30, [10, 29], { change: 25 })
    const server = diagnoseCache(previous as never, next as never)!.cache_missed_input_tokens
    const exact = predictCacheMiss(previous as never, next as never, { headTokens: 1500, minTokens: 1024, known })!
    assert.isAtMost(Math.abs(exact.missedInputTokens - server), 1)
    // without them, the raw estimate is off by more than a token (a quarter of each block's JSON is not its text)
    assert.isAbove(Math.abs(both(previous, next).library!.missedInputTokens - server), 1)
    // a request that writes nothing (no breakpoint reaches the minimum) tells nothing
    const short = { model: MODEL, messages: [{ role: "user", content: [{ ...text(0), cache_control: mark }] }] }
    assert.isUndefined(knownPrefixOf(short as never, cacheUsage(cache, short as never)))
  })

  it.effect("the server: previous_message_not_found for an id it never returned, null for the first turn's opt-in", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const client = new Anthropic({ apiKey: "sk-test", baseURL: server.url, maxRetries: 0 })
      const send = (previous_message_id: string | null) => {
        server.enqueue(Reply.message([{ type: "text", text: "ok" }]))
        return Effect.promise(() =>
          client.beta.messages.stream({
            model: MODEL,
            max_tokens: 16,
            messages: [{ role: "user", content: "hi" }],
            diagnostics: { previous_message_id }
          } as never).finalMessage()
        )
      }
      const first = yield* send(null)
      assert.isNull((first as { diagnostics?: unknown }).diagnostics)
      const lost = yield* send("msg_unknown")
      assert.deepStrictEqual((lost as { diagnostics?: unknown }).diagnostics, {
        cache_miss_reason: { type: "previous_message_not_found" }
      })
      const same = yield* send(first.id)
      assert.isNull((same as { diagnostics?: unknown }).diagnostics)
    })))
})

describe("the HTML report's cache diagnostics", () => {
  it.effect(
    `${SESSION}, first 200 messages, 40k window: the predicted misses agree with the replay's cache model on every request`,
    () =>
      Effect.gen(function* () {
        const session = yield* importSession(readFileSync(`${DATA_DIR}sessions/${SESSION}.anthropic.json`, "utf8"))
        // its first 200 messages under a 40k window, which compacts within them (cheaper than the whole session)
        const report = yield* buildReport({ ...session, messages: session.messages.slice(0, 200) }, {
          file: SESSION,
          policy: CompactionPolicy.makeUnsafe({ contextWindow: 40_000 })
        })
        const { disagreements, predictedMisses } = report.data.diagnostics
        // each compaction of the replay is a predicted miss, and the cache model shows each one lost
        assert.isAtLeast(predictedMisses, report.data.replay.compactions)
        assert.isAbove(predictedMisses, 0)
        assert.deepStrictEqual(disagreements, [])
        const html = renderHtml(report)
        assert.include(html, 'data-figure="diagnostics.disagreements.length" data-format="int" data-value="0"')
      }),
    60_000
  )
})

describe("diagnostics across a resume", () => {
  it.effect("the reply id comes back from the log; no prediction, as the request before it is unknown", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const client = new Anthropic({ apiKey: "sk-test", baseURL: server.url, maxRetries: 0 })
      const store: MemorySessions = new Map()
      const opened = () =>
        Layer.fresh(
          Conversation.layerLogged({ diagnostics: true, model: MODEL }).pipe(
            Layer.provide(SessionLog.layerMemory({ store })),
            Layer.provide(ExtractiveSummarizer.layer)
          )
        )
      const turn = (text: string) =>
        Effect.gen(function* () {
          const conversation = yield* Conversation
          yield* conversation.append({ role: "user", content: text })
          const prepared = yield* conversation.prepare
          server.enqueue(Reply.message([{ type: "text", text: `re: ${text}` }]))
          const reply = yield* Effect.promise(() =>
            client.beta.messages.stream(
              { model: MODEL, max_tokens: 16, ...(prepared.request as unknown as Record<string, unknown>) } as never
            ).finalMessage()
          )
          const state = yield* conversation.recordReply(reply as unknown as SdkReply)
          return { prepared, reply, state }
        })
      const first = yield* turn("hello").pipe(Effect.provide(opened()))
      assert.deepStrictEqual(first.prepared.request.diagnostics, { previous_message_id: null })
      assert.notProperty(first.prepared, "cachePrediction")
      // the first reply's report: nothing predicted, no divergence reported
      assert.deepStrictEqual(first.state.reply?.cacheDiagnosis, { reported: null })
      const resumed = yield* Effect.gen(function* () {
        const conversation = yield* Conversation
        const restored = yield* conversation.state
        return { restored, next: yield* turn("again") }
      }).pipe(Effect.provide(opened()))
      assert.deepStrictEqual(resumed.restored.reply, first.state.reply)
      assert.deepStrictEqual(resumed.next.prepared.request.diagnostics, { previous_message_id: first.reply.id })
      assert.isUndefined(resumed.next.prepared.cachePrediction)
      assert.deepStrictEqual(resumed.next.state.reply?.cacheDiagnosis, { reported: null })
    })))
})
