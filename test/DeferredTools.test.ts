/**
 * Deferred tools survive eviction and compaction (issue 27 finding 2, API-RULES 28): a result holding a
 * `tool_reference` is never offloaded, a compaction that summarizes the head re-emits the tools its summarized part
 * loaded (a system `tool_addition` of their references) and carries an opening compaction block's `tool_changes`
 * forward. Judged by the independent checker with the request's tools (`fixtures/ApiRules.ts`), which rejects a call
 * of a deferred tool that is not loaded.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { compactContext } from "../src/Compact.ts"
import { Conversation } from "../src/Conversation.ts"
import type { MessageParam } from "../src/ConversationState.ts"
import { evictStaleToolResults } from "../src/Evict.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { type ApiTool, checkApiRules, checkRequest, formatApiViolations } from "./fixtures/ApiRules.ts"

const big = (label: string, n = 1_500) => `${label} `.repeat(n)
const user = (text: string): MessageParam => ({ role: "user", content: text })

const tools: ReadonlyArray<ApiTool & { readonly input_schema: object }> = [
  { name: "tool_search", input_schema: { type: "object" } },
  { name: "read", input_schema: { type: "object" } },
  { name: "db_query", defer_loading: true, input_schema: { type: "object" } }
]

const call = (id: string, name: string, input: object): MessageParam => ({
  role: "assistant",
  content: [{ type: "tool_use", id, name, input }]
})
const answer = (id: string, content: unknown): MessageParam =>
  ({ role: "user", content: [{ type: "tool_result", tool_use_id: id, content }] }) as MessageParam

/** The tool search that loads `db_query`: its reference and a long description beside it. */
const search = (id: string): ReadonlyArray<MessageParam> => [
  call(id, "tool_search", { query: "db" }),
  answer(id, [{ type: "tool_reference", tool_name: "db_query" }, { type: "text", text: big("db_query runs SQL") }])
]

/** A session: a tool search, then many reads and database queries with long results. */
const session = (queries: number): Array<MessageParam> => {
  const out: Array<MessageParam> = [user("find the slow rows"), ...search("s1")]
  for (let i = 0; i < queries; i++) {
    out.push(call(`q${i}`, "db_query", { sql: `select ${i}` }), answer(`q${i}`, big(`rows ${i}`)))
    out.push(call(`r${i}`, "read", { path: `/src/f${i}.ts` }), answer(`r${i}`, big(`file ${i}`)))
  }
  out.push({ role: "assistant", content: [{ type: "text", text: "Found them." }] })
  return out
}

const policy = CompactionPolicy.makeUnsafe({
  contextWindow: 40_000,
  minRemaining: 8_000,
  keepRecentTokens: 3_000,
  keepRecentTurns: 1
})

const asMessages = (messages: ReadonlyArray<MessageParam>) => messages as unknown as ReadonlyArray<Message>

describe("deferred tools: eviction (rule 28)", () => {
  it("a stale tool_search result holding a tool_reference is never offloaded; later ones of the same size are", () => {
    const messages = asMessages(session(12))
    assert.deepStrictEqual(checkApiRules(messages, { tools }), [])
    const evicted = evictStaleToolResults(messages, 2, { minSavings: 0 })
    const ids = evicted.offloaded.map((o) => o.toolUseId)
    assert.notInclude(ids, "s1")
    assert.include(ids, "q0")
    assert.deepStrictEqual(evicted.messages[2], messages[2])
    assert.deepStrictEqual(checkApiRules(evicted.messages, { tools }), [])
  })
})

describe("deferred tools: compaction (rule 28)", () => {
  it.effect("a summary of the head re-emits the tools its tool search loaded", () =>
    Effect.gen(function* () {
      const messages = [
        ...asMessages(session(6)),
        user("and now query them again"),
        ...asMessages([call("q_last", "db_query", { sql: "select 99" }), answer("q_last", "3 rows")])
      ]
      assert.deepStrictEqual(checkApiRules(messages, { tools }), [])
      const { messages: after, outcome } = yield* compactContext(messages, policy, { minFreedTokens: 300 })
      assert.strictEqual(outcome._tag, "Compacted")
      assert.notInclude(JSON.stringify(after), '"tool_search"')
      const additions = after.filter((m) => m.role === "system").flatMap((m) => m.content as ReadonlyArray<object>)
      assert.deepInclude(additions, { type: "tool_addition", tool: { type: "tool_reference", name: "db_query" } })
      assert.deepStrictEqual(checkApiRules(after, { tools }), [], formatApiViolations(checkApiRules(after, { tools })))
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))

  it.effect("an opening compaction block's tool_changes are carried forward when a summary replaces it", () =>
    Effect.gen(function* () {
      const changes = [{ type: "tool_addition", tool: { type: "tool_reference", name: "db_query" } }]
      const block = { type: "compaction", content: "Earlier: the user asked for slow rows.", tool_changes: changes }
      const messages = [
        { role: "assistant", content: [block] },
        ...asMessages(session(6).slice(3)),
        user("and now query them again"),
        ...asMessages([call("q_last", "db_query", { sql: "select 99" }), answer("q_last", "3 rows")])
      ] as unknown as ReadonlyArray<Message>
      assert.deepStrictEqual(checkApiRules(messages, { tools }), [])
      const { messages: after, outcome } = yield* compactContext(messages, policy, { minFreedTokens: 300 })
      assert.strictEqual(outcome._tag, "Compacted")
      assert.notInclude(JSON.stringify(after), '"compaction"')
      assert.deepStrictEqual(checkApiRules(after, { tools }), [], formatApiViolations(checkApiRules(after, { tools })))
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))
})

describe("deferred tools: through Conversation (eviction, compaction)", () => {
  it.effect("every request of a session with tool search passes the checker with its tools", () =>
    Effect.gen(function* () {
      const conversation = yield* Conversation
      let offloads = 0
      let compactions = 0
      const prepare = Effect.gen(function* () {
        const prepared = yield* conversation.prepare
        offloads += prepared.offloaded.length
        if (prepared.compaction?._tag === "Compacted") compactions++
        const violations = checkRequest(prepared.request)
        assert.deepStrictEqual(violations, [], formatApiViolations(violations))
      })
      yield* conversation.append(user("find the slow rows"))
      yield* prepare
      const [searchCall, searchResult] = search("s1")
      yield* conversation.recordReply(searchCall!, { input_tokens: 500, output_tokens: 20 })
      yield* conversation.append(searchResult!)
      for (let i = 0; i < 30; i++) {
        yield* prepare
        const state = yield* conversation.state
        const tokens = 1_000 + state.view.length * 700
        yield* conversation.recordReply(call(`q${i}`, "db_query", { sql: `select ${i}` }), {
          input_tokens: tokens,
          output_tokens: 20
        })
        yield* conversation.append(answer(`q${i}`, big(`rows ${i}`, 600)))
        if (i % 5 === 4) {
          yield* prepare
          yield* conversation.recordReply({ role: "assistant", content: [{ type: "text", text: `batch ${i}` }] })
          yield* conversation.append(user(`the next batch after ${i}`))
        }
      }
      yield* prepare
      assert.isAbove(offloads, 0, `offloads ${offloads}, compactions ${compactions}`)
      assert.isAbove(compactions, 0, `offloads ${offloads}, compactions ${compactions}`)
    }).pipe(
      Effect.provide(
        Conversation.layerMemory({
          policy,
          tools: tools as never,
          keepRecent: 3,
          minSavings: 0,
          minFreedTokens: 300
        }).pipe(Layer.provide(ExtractiveSummarizer.layer))
      )
    ))
})
