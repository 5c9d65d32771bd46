/**
 * The Done-when property of issue 27: generated agent sessions with today's Messages API blocks go through
 * `Conversation` (eviction, compaction, resume from its log), and every request it prepares passes the independent
 * checker (`fixtures/ApiRules.ts`, rules 1–35 with the request's tools and thinking binding): no call of an unloaded
 * deferred tool, and no thinking block sent after a rewrite the request does not announce (`block_binding:
 * drop_block`). The library's own record of the invalidated thinking (`unboundThinking`) is exactly what the checker
 * finds unbound.
 *
 * The sessions: tool search loading a deferred tool (a server `tool_search_tool_result` of `tool_reference`s), calls
 * of it once loaded, client calls with long results (parallel, interleaved thinking), MCP and advisor blocks,
 * web searches with `usage.iterations`, content-less `output_config` and `clear_at` system messages, and thinking
 * signed by `bindThinking` over the request it answers, as the API binds it; and the SDK agent toolset's shapes
 * (issue 42, API-RULES 41): `read { file_path, view_range }` ranged reads, `write`, `edit`, and `bash` whose long
 * output is saved to a temp file that a later ranged read opens, with MCP tool listings before MCP calls. No summary
 * lists a bash saved output among the files read. Some answers come back with empty content (a `MessageParam` with its
 * usage beside it, or the SDK's reply, some stopped by an overflow): no message, but the state's usage is the reported
 * one after every reply. Each session runs in segments: a segment opens `Conversation.layerLogged` on the session's
 * store, so every segment after the first resumes from the log, and the resumed state (its latest usage and reply
 * too) must equal the live one.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { Conversation } from "../src/Conversation.ts"
import type { ConversationState, MessageParam, SdkReply } from "../src/ConversationState.ts"
import type { Request } from "../src/Request.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import type { Message } from "../src/Message.ts"
import { SessionLog } from "../src/SessionLog.ts"
import type { MemorySessions } from "../src/SessionStore.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { splitSummary, summaryText } from "../src/Summary.ts"
import { type ApiTool, bindThinking, checkRequest, formatApiViolations, unboundThinking } from "./fixtures/ApiRules.ts"
import { prng } from "./fixtures/Conversation.ts"
import { resumedFrom } from "./fixtures/ConversationReplay.ts"

/** Sessions per runtime: Node runs seeds 1-20, Deno 21-40, so a CI run (both) covers 40 sessions, 20,000 steps. */
const SESSIONS = 20
const FIRST_SEED = "Deno" in globalThis ? SESSIONS + 1 : 1
const RESUME_EVERY = 4
const SEGMENTS = 5
const STEPS_PER_SEGMENT = 100

const TOOLS: ReadonlyArray<ApiTool & Record<string, unknown>> = [
  { name: "bash", input_schema: { type: "object" } },
  { name: "read", input_schema: { type: "object" } },
  { name: "write", input_schema: { type: "object" } },
  { name: "edit", input_schema: { type: "object" } },
  { name: "db_query", defer_loading: true, input_schema: { type: "object" } },
  { type: "tool_search_tool_regex_20251119", name: "tool_search_tool_regex" }
]

const THINKING = { type: "enabled", budget_tokens: 1024 } as const

const policy = CompactionPolicy.makeUnsafe({
  contextWindow: 30_000,
  minRemaining: 6_000,
  keepRecentTokens: 3_000,
  keepRecentTurns: 1
})

const appendOnly = { policy, tools: TOOLS as never, thinking: THINKING }
/** Rewrites in place, the kept thinking bound: the drop_block path (issue 39 made append-only the default). */
const inPlace = { ...appendOnly, appendOnly: false, staleThinking: "bind" } as const

/**
 * A conversation logged in `store` (opening it resumes from the log), or one in memory going on from `initial`; odd
 * seeds rewrite in place (`inPlace`), even ones stay append-only (the default).
 */
const layer = (store: MemorySessions | undefined, initial: ConversationState | undefined, seed: number) => {
  const options = seed % 2 === 1 ? inPlace : appendOnly
  return store === undefined
    ? Conversation.layerMemory({ ...options, ...(initial === undefined ? {} : { initial }) }).pipe(
      Layer.provide(ExtractiveSummarizer.layer)
    )
    : Conversation.layerLogged(options).pipe(
      Layer.provide(Layer.fresh(SessionLog.layerMemory({ store }))),
      Layer.provide(ExtractiveSummarizer.layer)
    )
}

type Block = Record<string, unknown>

const blocksOf = (m: MessageParam): ReadonlyArray<Block> =>
  typeof m.content === "string" ? [] : Array.isArray(m.content) ? m.content as unknown as ReadonlyArray<Block> : []

/** Whether the request loads `db_query` anywhere (tool search results and tool additions; nothing removes it). */
const loadsDb = (request: Request): boolean =>
  request.messages.some((m) =>
    blocksOf(m).some((b) => {
      if (b.type === "tool_search_tool_result") return JSON.stringify(b.content).includes('"db_query"')
      if (b.type === "tool_result") return JSON.stringify(b.content ?? "").includes('"tool_reference"')
      if (b.type === "tool_addition") return JSON.stringify(b.tool).includes('"db_query"')
      if (b.type === "compaction") return JSON.stringify(b.tool_changes ?? []).includes('"db_query"')
      return false
    })
  )

const WORDS = "the file test error type value config path module cache build run fix check import export".split(" ")

/** The model and the user: scripted from a seed, answering each request as the API would. */
const agent = (seed: number) => {
  const random = prng(seed)
  const pick = <A>(xs: ReadonlyArray<A>): A => xs[Math.floor(random() * xs.length)]!
  const words = (n: number) => Array.from({ length: n }, () => pick(WORDS)).join(" ")
  let n = 0
  const id = (prefix: string) => `${prefix}${seed}_${n++}`
  const hex = (k: number) => Array.from({ length: k }, () => "0123456789abcdef"[Math.floor(random() * 16)]).join("")
  // the temp file the SDK's bash saved its latest long output to (API-RULES 41), which a later ranged read opens
  let savedOutput: string | undefined
  /** A call of the agent toolset or the plain tools, and the text of its result. */
  const clientCall = (useDb: boolean): { readonly name: string; readonly input: Block; readonly output: string } => {
    const file = `/src/${pick(WORDS)}_${Math.floor(random() * 30)}.ts`
    if (useDb) return { name: "db_query", input: { sql: `select ${words(3)}` }, output: words(30) }
    const t = random()
    if (t < 0.25) {
      // a ranged read (the toolset refuses a whole read of a big file), sometimes of bash's saved output
      const start = 1 + 100 * Math.floor(random() * 10)
      const path = savedOutput !== undefined && random() < 0.3 ? savedOutput : file
      return { name: "read", input: { file_path: path, view_range: [start, start + 99] }, output: words(120) }
    }
    if (t < 0.35) return { name: "read", input: { path: file }, output: words(random() < 0.3 ? 300 : 30) }
    if (t < 0.45) return { name: "write", input: { file_path: file, content: words(40) }, output: "ok" }
    if (t < 0.55) {
      return {
        name: "edit",
        input: { file_path: file, old_string: pick(WORDS), new_string: pick(WORDS), replace_all: random() < 0.3 },
        output: "edited"
      }
    }
    if (random() < 0.3) {
      savedOutput = `/tmp/bash-output-${hex(6)}/${hex(8)}-${hex(4)}-${hex(4)}-${hex(4)}-${hex(12)}.txt`
      return {
        name: "bash",
        input: { command: `npm test -- ${pick(WORDS)}` },
        output: `${words(300)}\n\n... [${100 + Math.floor(random() * 900)} lines truncated] Full output saved to: ` +
          `${savedOutput} — use read with view_range to read specific portions. ...`
      }
    }
    return { name: "bash", input: { command: `grep -r ${pick(WORDS)} .` }, output: words(random() < 0.3 ? 300 : 30) }
  }

  /** A thinking block bound to the request's messages and the blocks before it in the reply. */
  const think = (request: Request, content: ReadonlyArray<Block>): Block => ({
    type: "thinking",
    thinking: `thinking ${words(8)}`,
    signature: bindThinking(request.messages, content)
  })

  const usage = (request: Request, iterations: number) => {
    const input = Math.ceil(JSON.stringify(request.messages.at(-1) ?? "").length / 4) + 200 * request.messages.length
    if (iterations === 1) return { input_tokens: input, output_tokens: 50 }
    const steps = Array.from({ length: iterations }, (_, i) => ({
      type: "message",
      input_tokens: input + 300 * i,
      output_tokens: 40
    }))
    return {
      input_tokens: steps.reduce((s, x) => s + x.input_tokens, 0),
      output_tokens: 40 * iterations,
      iterations: steps
    }
  }

  /**
   * The reply to `request` and what follows it (tool results, a user message, a system message); one in twenty has
   * empty content and nothing follows it (the request goes again): a `MessageParam` with its usage given beside it, or
   * the SDK's reply carrying its own (some stopped because the request did not fit the window).
   */
  const answer = (request: Request): {
    readonly reply: MessageParam | SdkReply
    readonly usage: Record<string, unknown> | undefined
    readonly then: ReadonlyArray<MessageParam>
  } => {
    if (random() < 0.05) {
      const reported = { ...usage(request, 1), output_tokens: 0 }
      if (random() < 0.5) return { reply: { role: "assistant", content: [] }, usage: reported, then: [] }
      const sdk: SdkReply = {
        id: id("msg_"),
        type: "message",
        role: "assistant",
        content: [],
        stop_reason: random() < 0.2 ? "model_context_window_exceeded" : "end_turn",
        usage: reported
      }
      return { reply: sdk, usage: undefined, then: [] }
    }
    const content: Array<Block> = []
    const r = random()
    if (random() < 0.8) content.push(think(request, content))
    let iterations = 1
    let then: Array<MessageParam> = []
    const userTurn = (): Array<MessageParam> => {
      const out: Array<MessageParam> = [{ role: "user", content: `next: ${words(12)}` }]
      const s = random()
      if (s < 0.1) out.push({ role: "system", output_config: { effort: pick(["low", "high"]) } } as never)
      else if (s < 0.2) {
        out.push({ role: "system", content: `for this turn: ${words(5)}`, clear_at: "next_user_message" } as never)
      }
      return out
    }
    if (r < 0.5) {
      // client calls, some parallel, thinking between them
      const calls = random() < 0.3 ? 2 : 1
      const results: Array<Block> = []
      for (let c = 0; c < calls; c++) {
        if (c > 0 && random() < 0.5) content.push(think(request, content))
        const useDb = random() < 0.25 && loadsDb(request)
        const callId = id("toolu_")
        const { name, input, output } = clientCall(useDb)
        content.push({ type: "tool_use", id: callId, name, input })
        results.push({ type: "tool_result", tool_use_id: callId, content: `${name} output: ${output}` })
      }
      then = [{ role: "user", content: results as never }]
    } else if (r < 0.6) {
      // tool search loads the deferred tool
      const s = id("srvtoolu_")
      content.push(
        { type: "server_tool_use", id: s, name: "tool_search_tool_regex", input: { query: "db" } },
        {
          type: "tool_search_tool_result",
          tool_use_id: s,
          content: {
            type: "tool_search_tool_search_result",
            tool_references: [{ type: "tool_reference", tool_name: "db_query" }]
          }
        },
        { type: "text", text: `found db_query: ${words(6)}` }
      )
      iterations = 2
      then = userTurn()
    } else if (r < 0.7) {
      const s = id("mcptoolu_")
      // the server's listing of the MCP server's tools, sent back in place with the reply (API-RULES 30)
      if (random() < 0.5) {
        content.push({
          type: "mcp_tool_listing",
          mcp_server_name: "docs",
          tools: [{ name: "fetch_doc", description: words(6), input_schema: { type: "object" } }]
        })
      }
      content.push(
        { type: "mcp_tool_use", id: s, name: "fetch_doc", server_name: "docs", input: { topic: pick(WORDS) } },
        { type: "mcp_tool_result", tool_use_id: s, is_error: false, content: [{ type: "text", text: words(80) }] },
        { type: "text", text: `the docs say ${words(10)}` }
      )
      iterations = 2
      then = userTurn()
    } else if (r < 0.8) {
      // the advisor's result ends the turn; a system message may follow it directly (rule 9)
      const s = id("srvtoolu_")
      content.push(
        { type: "server_tool_use", id: s, name: "advisor", input: {} },
        { type: "advisor_tool_result", tool_use_id: s, content: { type: "advisor_result", text: words(30) } }
      )
      iterations = 2
      then = random() < 0.5 ? [{ role: "system", content: `advice noted: ${words(4)}` } as never] : userTurn()
    } else if (r < 0.87) {
      const s = id("srvtoolu_")
      content.push(
        { type: "server_tool_use", id: s, name: "web_search", input: { query: words(3) } },
        {
          type: "web_search_tool_result",
          tool_use_id: s,
          content: [{
            type: "web_search_result",
            url: `https://example.com/${pick(WORDS)}`,
            title: words(3),
            encrypted_content: "enc",
            page_age: null
          }]
        },
        { type: "text", text: `searched: ${words(10)}` }
      )
      iterations = 3
      then = userTurn()
    } else {
      content.push({ type: "text", text: `done: ${words(20)}` })
      then = userTurn()
    }
    return {
      reply: { role: "assistant", content: content as never },
      usage: usage(request, iterations),
      then
    }
  }
  return { answer }
}

/** The comparable part of a state: what a resume must restore (the latest usage and reply: the trigger reads them). */
const restored = (s: ConversationState) => ({
  view: s.view,
  epoch: s.epoch,
  pending: s.pending,
  unboundThinking: s.unboundThinking ?? [],
  usage: s.usage,
  reply: s.reply
})

describe("agent sessions through Conversation (issue 27's property)", () => {
  it.effect(
    `${SESSIONS} sessions of ${SEGMENTS * STEPS_PER_SEGMENT} steps per runtime: every request passes the checker`,
    () =>
      Effect.gen(function* () {
        const t0 = Date.now()
        const counts = {
          steps: 0,
          offloads: 0,
          compactions: 0,
          dropBlock: 0,
          dbCalls: 0,
          resumes: 0,
          appendOnlyDropBlock: 0,
          appendOnlyOffloadsBetween: 0,
          rangedReads: 0,
          savedOutputReads: 0,
          summaries: 0,
          emptyReplies: 0
        }
        for (let seed = FIRST_SEED; seed < FIRST_SEED + SESSIONS; seed++) {
          // every RESUME_EVERY-th session is logged and resumed at each segment; the others run in memory
          const store: MemorySessions | undefined = seed % RESUME_EVERY === 0 ? new Map() : undefined
          const { answer } = agent(seed)
          let live: ConversationState | undefined
          for (let segment = 0; segment < SEGMENTS; segment++) {
            if (live !== undefined && store !== undefined) {
              assert.deepStrictEqual(
                restored(yield* resumedFrom(store)),
                restored(live),
                `seed ${seed} segment ${segment}`
              )
              counts.resumes++
            }
            live = yield* Effect.gen(function* () {
              const conversation = yield* Conversation
              if (segment === 0) yield* conversation.append({ role: "user", content: "start the task" })
              for (let k = 0; k < STEPS_PER_SEGMENT; k++) {
                const prepared = yield* conversation.prepare
                const request = prepared.request
                const state = yield* conversation.state
                const where = `seed ${seed} step ${counts.steps}`
                const v = checkRequest(request)
                if (v.length > 0) assert.fail(`${where}: ${formatApiViolations(v)}`)
                // the library knows exactly the blocks the rewrites invalidated, and announces them
                assert.deepStrictEqual(unboundThinking(request.messages), [...(state.unboundThinking ?? [])], where)
                const unbound = (state.unboundThinking ?? []).length > 0
                assert.strictEqual(
                  (request.thinking as { block_binding?: unknown } | undefined)?.block_binding !== undefined,
                  unbound,
                  where
                )
                // a bash saved output is never listed among the files a summary says were read (API-RULES 41)
                const first = request.messages[0] as Message | undefined
                const summary = first === undefined ? undefined : summaryText(first)
                const files = summary === undefined ? undefined : splitSummary(summary).files
                if (summary !== undefined) counts.summaries++
                if (files !== undefined) {
                  assert.isFalse(files.read.some((f) => f.includes("/bash-output-")), `${where}: ${files.read}`)
                }
                counts.steps++
                counts.offloads += prepared.offloaded.length
                if (prepared.compaction?._tag === "Compacted") counts.compactions++
                if (unbound) counts.dropBlock++
                if (seed % 2 === 0 && unbound) counts.appendOnlyDropBlock++
                if (seed % 2 === 0 && prepared.compaction?._tag !== "Compacted") {
                  counts.appendOnlyOffloadsBetween += prepared.offloaded.length
                }
                const { reply, then, usage } = answer(request)
                for (const b of blocksOf(reply as MessageParam)) {
                  if (b.type !== "tool_use") continue
                  if (b.name === "db_query") counts.dbCalls++
                  const range = (b.input as { readonly view_range?: unknown }).view_range
                  if (b.name === "read" && range !== undefined) counts.rangedReads++
                  if (JSON.stringify(b.input).includes("/bash-output-")) counts.savedOutputReads++
                }
                const after = yield* conversation.recordReply(reply, usage as never)
                // every reply's usage is the state's, an empty reply's too (it adds no message)
                assert.deepStrictEqual(after.usage, {
                  usage: usage ?? (reply as SdkReply).usage,
                  requestEpoch: prepared.epoch
                }, where)
                if (then.length === 0) {
                  counts.emptyReplies++
                  assert.strictEqual(after.view, state.view, `${where}: an empty reply adds no message`)
                }
                for (const message of then) yield* conversation.append(message)
              }
              return yield* conversation.state
            }).pipe(Effect.provide(layer(store, live, seed)))
          }
        }
        const seconds = (Date.now() - t0) / 1000
        console.log({ ...counts, seconds })
        assert.isAtLeast(counts.steps, 10_000) // per runtime: 20,000 per CI run
        // the sessions exercise what they claim to
        assert.isAbove(counts.offloads, 0)
        assert.isAbove(counts.compactions, 0)
        assert.isAbove(counts.dropBlock, 0)
        assert.isAbove(counts.dbCalls, 0)
        // append-only (the default): no rewrite between compactions, no stale thinking kept, so nothing to drop
        assert.strictEqual(counts.appendOnlyDropBlock, 0)
        assert.strictEqual(counts.appendOnlyOffloadsBetween, 0)
        assert.isAbove(counts.rangedReads, 0)
        assert.isAbove(counts.savedOutputReads, 0)
        assert.isAbove(counts.summaries, 0)
        assert.isAbove(counts.emptyReplies, 0)
      }),
    240_000
  )
})
