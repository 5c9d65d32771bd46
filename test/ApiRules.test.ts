/**
 * The independent checker of API-RULES (`fixtures/ApiRules.ts`) judged itself: for each of rules 22–35 it checks, a
 * list or request it must reject (with the rule and the API's error code where API-RULES gives one) and legal ones
 * it must accept, so a test that judges the library with it can trust its verdict both ways; and the local Messages
 * API server (`fixtures/MessagesApiServer.ts`), which answers with the API's error codes.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { type ApiRuleViolation, bindThinking, checkApiRules, checkRequest } from "./fixtures/ApiRules.ts"
import * as MessagesApiServer from "./fixtures/MessagesApiServer.ts"
import { Reply, THINKING_BINDING_BETA } from "./fixtures/MessagesApiServer.ts"

type Msg = { readonly role: string; readonly content?: unknown; readonly [key: string]: unknown }

const user = (text: string): Msg => ({ role: "user", content: text })
const assistant = (...content: ReadonlyArray<Record<string, unknown>>): Msg => ({ role: "assistant", content })
const text = (t: string) => ({ type: "text", text: t })
const rules = (violations: ReadonlyArray<ApiRuleViolation>): Array<number> => violations.map((v) => v.rule)
const details = (violations: ReadonlyArray<ApiRuleViolation>): string => violations.map((v) => v.detail).join("\n")

describe("the checker: rule 4 (no blank text anywhere)", () => {
  it("rejects a blank text block in the final assistant message, accepts an empty final assistant message", () => {
    assert.deepStrictEqual(rules(checkApiRules([user("a"), assistant(text(""))])), [4])
    assert.deepStrictEqual(rules(checkApiRules([user("a"), assistant(text("ok"), text("  "))])), [4])
    assert.deepStrictEqual(rules(checkApiRules([user("a"), { role: "assistant", content: "  " }])), [4])
    assert.deepStrictEqual(checkApiRules([user("a"), { role: "assistant", content: [] }]), [])
    assert.deepStrictEqual(checkApiRules([user("a"), { role: "assistant", content: "" }]), [])
    assert.deepStrictEqual(
      rules(checkApiRules([user("a"), assistant(text("x")), { role: "assistant", content: [] }, user("b")])),
      [4]
    )
  })
})

describe("the checker: rules 26 and 27 (system message fields)", () => {
  it("accepts a system message with output_config and no content; rejects one with neither", () => {
    const settings = { role: "system", output_config: { effort: "low" } }
    assert.deepStrictEqual(checkApiRules([user("a"), settings, assistant(text("b"))]), [])
    assert.deepStrictEqual(checkApiRules([user("a"), assistant(text("b")), user("c"), settings]), [])
    assert.deepStrictEqual(rules(checkApiRules([user("a"), { role: "system" }])), [26])
    assert.deepStrictEqual(rules(checkApiRules([user("a"), { role: "system", output_config: {} }])), [26])
  })

  it("accepts clear_at on a system message; rejects it, and output_config, on a user or assistant message", () => {
    const cleared = { role: "system", content: "only this turn", clear_at: "next_user_message" }
    assert.deepStrictEqual(checkApiRules([user("a"), cleared, assistant(text("b")), user("c")]), [])
    assert.deepStrictEqual(rules(checkApiRules([{ role: "user", content: "a", clear_at: "never" }])), [27])
    assert.deepStrictEqual(rules(checkApiRules([user("a"), { ...cleared, clear_at: "later" }])), [27])
    assert.deepStrictEqual(rules(checkApiRules([{ role: "user", content: "a", output_config: { effort: "low" } }])), [
      26
    ])
  })
})

describe("the checker: rule 28 (tool references and deferred tools)", () => {
  const tools = [{ name: "bash" }, { name: "tool_search", type: "tool_search_tool_bm25" }, {
    name: "db_query",
    defer_loading: true
  }]
  const search = assistant({ type: "tool_use", id: "s1", name: "tool_search", input: { query: "db" } })
  const found = {
    role: "user",
    content: [{ type: "tool_result", tool_use_id: "s1", content: [{ type: "tool_reference", tool_name: "db_query" }] }]
  }
  const callDb = assistant({ type: "tool_use", id: "d1", name: "db_query", input: {} })
  const dbResult = { role: "user", content: [{ type: "tool_result", tool_use_id: "d1", content: "rows" }] }

  it("accepts a call of a deferred tool after a tool_reference loaded it", () => {
    assert.deepStrictEqual(checkApiRules([user("a"), search, found, callDb, dbResult], { tools }), [])
  })

  it("rejects a call of a deferred tool that nothing loaded (tool_reference_unresolved)", () => {
    const offloaded = { role: "user", content: [{ type: "tool_result", tool_use_id: "s1", content: "[offloaded]" }] }
    const v = checkApiRules([user("a"), search, offloaded, callDb, dbResult], { tools })
    assert.deepStrictEqual(rules(v), [28])
    assert.include(details(v), "tool_reference_unresolved")
    // unchecked without the request's tools
    assert.deepStrictEqual(checkApiRules([user("a"), search, offloaded, callDb, dbResult]), [])
  })

  it("rejects a reference to a tool not defined at that position; a tool_removal unloads", () => {
    const ghost = {
      role: "user",
      content: [{ type: "tool_result", tool_use_id: "s1", content: [{ type: "tool_reference", tool_name: "nope" }] }]
    }
    assert.deepStrictEqual(rules(checkApiRules([user("a"), search, ghost], { tools })), [28])
    const removal = {
      role: "system",
      content: [{ type: "tool_removal", tool: { type: "tool_reference", name: "db_query" } }]
    }
    const v = checkApiRules([user("a"), search, found, removal, callDb, dbResult], { tools })
    assert.deepStrictEqual(rules(v), [28])
  })

  it("loads through a system tool_addition, a tool_search_tool_result, and the opening compaction's tool_changes", () => {
    const addition = {
      role: "system",
      content: [{ type: "tool_addition", tool: { type: "tool_reference", name: "db_query" } }]
    }
    assert.deepStrictEqual(checkApiRules([user("a"), addition, callDb, dbResult], { tools }), [])
    const serverSearch = assistant(
      { type: "server_tool_use", id: "srv1", name: "tool_search_tool_bm25", input: { query: "db" } },
      {
        type: "tool_search_tool_result",
        tool_use_id: "srv1",
        content: {
          type: "tool_search_tool_search_result",
          tool_references: [{ type: "tool_reference", tool_name: "db_query" }]
        }
      },
      { type: "tool_use", id: "d1", name: "db_query", input: {} }
    )
    assert.deepStrictEqual(checkApiRules([user("a"), serverSearch, dbResult], { tools }), [])
    const compaction = {
      type: "compaction",
      content: "summary",
      tool_changes: [{ type: "tool_addition", tool: { type: "tool_reference", name: "db_query" } }]
    }
    const opened = {
      role: "assistant",
      content: [compaction, { type: "tool_use", id: "d1", name: "db_query", input: {} }]
    }
    assert.deepStrictEqual(checkApiRules([opened, dbResult], { tools }), [])
    const bare = {
      role: "assistant",
      content: [{ ...compaction, tool_changes: [] }, { type: "tool_use", id: "d1", name: "db_query", input: {} }]
    }
    assert.deepStrictEqual(rules(checkApiRules([bare, dbResult], { tools })), [28])
  })

  it("checkRequest reads the request's tools", () => {
    const offloaded = { role: "user", content: [{ type: "tool_result", tool_use_id: "s1", content: "gone" }] }
    const v = checkRequest({ messages: [user("a"), search, offloaded, callDb, dbResult], tools })
    assert.deepStrictEqual(rules(v), [28])
  })
})

describe("the checker: rule 29 (thinking binding)", () => {
  const thought = (before: ReadonlyArray<Msg>): Msg =>
    assistant({ type: "thinking", thinking: "plan", signature: bindThinking(before, []) }, text("answer"))

  it("accepts a bound thinking block after its unchanged prefix, rejects it after a rewrite", () => {
    const prefix = [user("read a.ts"), assistant(text("reading")), user("now fix it")]
    assert.deepStrictEqual(checkApiRules([...prefix, thought(prefix), user("thanks")]), [])
    const rewritten = [user("[summary of earlier turns]"), prefix[2]!]
    const v = checkApiRules([...rewritten, thought(prefix), user("thanks")])
    assert.deepStrictEqual(rules(v), [29])
    assert.include(details(v), "thinking_prefix_mismatch")
    // with block_binding drop_block the server drops the block instead of rejecting the request
    assert.deepStrictEqual(
      checkApiRules([...rewritten, thought(prefix), user("thanks")], { binding: "drop_block" }),
      []
    )
    assert.deepStrictEqual(
      checkRequest({
        messages: [...rewritten, thought(prefix), user("thanks")],
        thinking: { type: "enabled", budget_tokens: 1024, block_binding: { prefix_mismatch_behavior: "drop_block" } }
      }),
      []
    )
  })
})

describe("the checker: rules 9, 15 and 30 (server tool blocks)", () => {
  const note = { role: "system", content: "answer in French" }
  it("accepts a system message after an advisor or MCP result", () => {
    const advisor = assistant(
      { type: "server_tool_use", id: "srv_a", name: "advisor", input: {} },
      { type: "advisor_tool_result", tool_use_id: "srv_a", content: { type: "advisor_result", text: "go" } }
    )
    const mcp = assistant(
      { type: "mcp_tool_use", id: "mcp_1", name: "q", server_name: "db", input: {} },
      { type: "mcp_tool_result", tool_use_id: "mcp_1", content: "rows" }
    )
    assert.deepStrictEqual(checkApiRules([user("a"), advisor, note, assistant(text("b"))]), [])
    assert.deepStrictEqual(checkApiRules([user("a"), mcp, note]), [])
  })

  it("rejects a server tool result whose call is not in its assistant turn (a cut between them)", () => {
    const orphan = assistant({ type: "advisor_tool_result", tool_use_id: "srv_a", content: {} }, text("done"))
    assert.deepStrictEqual(rules(checkApiRules([user("a"), orphan])), [30])
    // a pause_turn split over two assistant messages is one turn
    const paused = assistant(text("asking"), { type: "server_tool_use", id: "srv_a", name: "advisor", input: {} })
    assert.deepStrictEqual(checkApiRules([user("a"), paused, orphan]), [])
  })

  it("sees a trailing mcp_tool_use as an unfinished turn in on-demand mode (compaction_incomplete_turn)", () => {
    const open = assistant(text("querying"), {
      type: "mcp_tool_use",
      id: "mcp_1",
      name: "q",
      server_name: "db",
      input: {}
    })
    const v = checkApiRules([user("a"), open], { mode: "on-demand" })
    assert.deepStrictEqual(rules(v), [15])
    assert.include(details(v), "compaction_incomplete_turn")
    assert.deepStrictEqual(checkApiRules([user("a"), open]), [])
  })

  it("accepts mcp_tool_listing and fallback blocks in an assistant turn", () => {
    const turn = assistant(
      { type: "mcp_tool_listing", mcp_server_name: "db", tools: [] },
      text("before"),
      { type: "fallback", from: { model: "a" }, to: { model: "b" } },
      text("after")
    )
    assert.deepStrictEqual(checkApiRules([user("a"), turn, user("b")]), [])
  })
})

describe("the checker: rules 13 and 16 in threshold mode", () => {
  it("accepts a compaction block in the middle of a list in threshold mode, rejects it on demand", () => {
    const opened = assistant({ type: "compaction", content: "summary" }, text("go on"))
    const list = [user("a"), assistant(text("b")), user("c"), opened, user("d")]
    assert.deepStrictEqual(checkApiRules(list), [])
    const v = checkApiRules(list, { mode: "on-demand" })
    assert.deepStrictEqual(rules(v), [13])
    assert.include(details(v), "compaction_block_misplaced")
  })
})

describe("the checker: rules 17 and 32 (cache breakpoints)", () => {
  const marked = (n: number, ttl?: string): Msg => ({
    role: "user",
    content: Array.from({ length: n }, (_, i) => ({
      type: "text",
      text: `t${i}`,
      cache_control: ttl === undefined ? { type: "ephemeral" } : { type: "ephemeral", ttl }
    }))
  })
  it("accepts 4 breakpoints, rejects 5 and 4 beside a top-level marker, and an unknown TTL", () => {
    assert.deepStrictEqual(checkRequest({ messages: [marked(4, "1h")] }), [])
    assert.deepStrictEqual(checkRequest({ messages: [marked(3)], cache_control: { type: "ephemeral" } }), [])
    assert.deepStrictEqual(rules(checkRequest({ messages: [marked(5)] })), [17])
    assert.deepStrictEqual(
      rules(
        checkRequest({
          system: [{ type: "text", text: "s", cache_control: { type: "ephemeral" } }],
          messages: [marked(4)]
        })
      ),
      [17]
    )
    assert.deepStrictEqual(rules(checkRequest({ messages: [marked(4)], cache_control: { type: "ephemeral" } })), [32])
    assert.deepStrictEqual(rules(checkRequest({ messages: [marked(1, "10m")] })), [32])
  })
})

describe("the checker: rules 22 and 24 (threads)", () => {
  it("rejects system, tools or context_management on a thread continue; accepts them on create", () => {
    const messages = [user("next")]
    const thread = { type: "continue", previous_message_id: "msg_1" }
    assert.deepStrictEqual(checkRequest({ messages, thread }), [])
    assert.deepStrictEqual(checkRequest({ messages, system: "s", tools: [], thread: { type: "create" } }), [])
    const v = checkRequest({ messages, system: "s", tools: [], context_management: { edits: [] }, thread })
    assert.deepStrictEqual(rules(v), [22, 22, 24])
    assert.include(details(v), "thread_unsupported_request")
  })

  it("judges a continue as the held conversation followed by the messages it sends", () => {
    const call = assistant({ type: "tool_use", id: "c1", name: "read", input: {} })
    const result = { role: "user", content: [{ type: "tool_result", tool_use_id: "c1", content: "text" }] }
    const thread = { type: "continue", previous_message_id: "msg_1" }
    assert.deepStrictEqual(checkRequest({ messages: [result], thread }, { held: [user("go"), call] }), [])
    assert.deepStrictEqual(rules(checkRequest({ messages: [result], thread }, { held: [user("go")] })), [5])
    // held messages are ignored off a thread
    assert.include(rules(checkRequest({ messages: [result] }, { held: [user("go"), call] })), 5)
  })
})

describe("the local Messages API server judges rules 22–35 with the API's error codes", () => {
  const post = (url: string, body: unknown, path = "/v1/messages", beta?: string) =>
    Effect.promise(async () => {
      const response = await fetch(`${url}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json", ...(beta === undefined ? {} : { "anthropic-beta": beta }) },
        body: JSON.stringify(body)
      })
      return { status: response.status, text: await response.text() }
    })
  const codeOf = (text: string): unknown =>
    (JSON.parse(text) as { error?: { details?: { error_code?: string } } }).error?.details?.error_code
  const base = { model: "m", max_tokens: 16, stream: true }

  it.effect("rejects a call of an unloaded deferred tool with tool_reference_unresolved", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const tools = [{ name: "tool_search" }, { name: "db_query", defer_loading: true }]
      const messages = [
        user("a"),
        assistant({ type: "tool_use", id: "s1", name: "tool_search", input: {} }),
        { role: "user", content: [{ type: "tool_result", tool_use_id: "s1", content: "[offloaded]" }] },
        assistant({ type: "tool_use", id: "d1", name: "db_query", input: {} }),
        { role: "user", content: [{ type: "tool_result", tool_use_id: "d1", content: "rows" }] }
      ]
      const refused = yield* post(server.url, { ...base, tools, messages })
      assert.strictEqual(refused.status, 400)
      assert.strictEqual(codeOf(refused.text), "tool_reference_unresolved")
      // counting validates like a create, and counts without taking a reply
      const counted = yield* post(server.url, { model: "m", tools, messages }, "/v1/messages/count_tokens")
      assert.strictEqual(counted.status, 400)
      const legal = yield* post(server.url, { model: "m", messages: [user("hello")] }, "/v1/messages/count_tokens")
      assert.strictEqual(legal.status, 200)
      assert.isAbove((JSON.parse(legal.text) as { input_tokens: number }).input_tokens, 0)
    })))

  it.effect("holds threads: continue once, never an unknown or in-flight reply; nothing repeated on a thread", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(Reply.stream(["one"]), Reply.stream(["two"]))
      const first = yield* post(server.url, { ...base, messages: [user("a")], thread: { type: "create" } })
      assert.strictEqual(first.status, 200)
      assert.include(first.text, `"id":"msg_test_1"`)
      const next = { ...base, messages: [user("b")], thread: { type: "continue", previous_message_id: "msg_test_1" } }
      const repeated = yield* post(server.url, { ...next, system: "s" })
      assert.strictEqual(codeOf(repeated.text), "thread_unsupported_request")
      assert.strictEqual((yield* post(server.url, next)).status, 200)
      const again = yield* post(server.url, next)
      assert.strictEqual(codeOf(again.text), "thread_already_continued")
      const unknown = yield* post(server.url, { ...next, thread: { type: "continue", previous_message_id: "msg_x" } })
      assert.strictEqual(unknown.status, 404)
      assert.strictEqual(codeOf(unknown.text), "thread_not_found")
    })))

  it.effect("holds each thread's conversation: a continue's results must answer the held reply's calls", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const call = { type: "tool_use", id: "c1", name: "read", input: { path: "a.ts" } }
      server.enqueue(Reply.message([call], { stopReason: "tool_use" }), Reply.message([{ type: "text", text: "ok" }]))
      const first = yield* post(server.url, { ...base, messages: [user("read a.ts")], thread: { type: "create" } })
      assert.strictEqual(first.status, 200)
      assert.include(first.text, `"input_json_delta"`)
      const answer = (id: string) => ({
        role: "user",
        content: [{ type: "tool_result", tool_use_id: id, content: "x" }]
      })
      const thread = { type: "continue", previous_message_id: "msg_test_1" }
      const wrong = yield* post(server.url, { ...base, messages: [answer("c9")], thread })
      assert.strictEqual(wrong.status, 400, "a result for a call the thread never made")
      const right = yield* post(server.url, { ...base, messages: [answer("c1")], thread })
      assert.strictEqual(right.status, 200)
      assert.deepStrictEqual(server.thread("msg_test_2")?.messages, [
        user("read a.ts"),
        { role: "assistant", content: [call] },
        answer("c1"),
        { role: "assistant", content: [{ type: "text", text: "ok" }] }
      ])
    })))

  it.effect("a thread whose reply is still streaming cannot be continued (thread_continue_in_flight)", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(Reply.stall)
      const controller = new AbortController()
      const stalled = yield* Effect.promise(() =>
        fetch(`${server.url}/v1/messages`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ ...base, messages: [user("a")], thread: { type: "create" } }),
          signal: controller.signal
        })
      )
      assert.strictEqual(stalled.status, 200)
      const next = { ...base, messages: [user("b")], thread: { type: "continue", previous_message_id: "msg_test_1" } }
      const busy = yield* post(server.url, next)
      assert.strictEqual(busy.status, 409)
      assert.strictEqual(codeOf(busy.text), "thread_continue_in_flight")
      controller.abort()
    })))

  it.effect("a rewritten prefix fails a bound thinking block, or drops it with drop_block and says so", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      server.enqueue(Reply.stream(["ok"]))
      const prefix = [user("read a.ts"), assistant(text("reading")), user("fix it")]
      const thought = assistant(
        { type: "thinking", thinking: "plan", signature: bindThinking(prefix, []) },
        text("done")
      )
      const messages = [user("[summary]"), prefix[2]!, thought, user("thanks")]
      const refused = yield* post(server.url, { ...base, messages })
      assert.strictEqual(codeOf(refused.text), "thinking_prefix_mismatch")
      const thinking = {
        type: "enabled",
        budget_tokens: 1024,
        block_binding: { prefix_mismatch_behavior: "drop_block" }
      }
      const dropped = yield* post(server.url, { ...base, messages, thinking }, "/v1/messages", THINKING_BINDING_BETA)
      assert.strictEqual(dropped.status, 200)
      assert.include(dropped.text, `"input_transformations":[{"type":"thinking_dropped","path":"messages.2.content.0"`)
      // pre-warming takes no reply
      const warm = yield* post(server.url, { ...base, max_tokens: 0, messages: [user("warm")] })
      assert.include(warm.text, `"stop_reason":"max_tokens"`)
    })))
})

describe("the checker and the server: rules 39 and 42", () => {
  const urlImage = { type: "image", source: { type: "url", url: "https://example.com/a.png" } }
  const fetchCall = { type: "server_tool_use", id: "srvtoolu_1", name: "web_fetch", input: { url: "https://x.dev" } }
  const fetchResult = {
    type: "web_fetch_tool_result",
    tool_use_id: "srvtoolu_1",
    content: { type: "web_fetch_result", url: "https://x.dev", content: { type: "document", source: { type: "text" } } }
  }
  const withUrl: ReadonlyArray<Msg> = [
    { role: "user", content: [text("What is in it?"), urlImage] },
    assistant(text("Fetching."), fetchCall, fetchResult, text("A cat.")),
    user("Thanks.")
  ]

  it("rule 39: with URL fetching disabled, URL sources, web_fetch and mcp_servers are refused; otherwise accepted", () => {
    assert.deepStrictEqual(checkApiRules(withUrl), [])
    const refused = checkApiRules(withUrl, { urlFetchDisabled: true })
    assert.deepStrictEqual(rules(refused), [39, 39, 39])
    assert.include(details(refused), "organization_url_fetch_disabled")
    const inResult: ReadonlyArray<Msg> = [
      user("Look."),
      assistant({ type: "tool_use", id: "t1", name: "shot", input: {} }),
      { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: [urlImage] }] }
    ]
    assert.deepStrictEqual(rules(checkApiRules(inResult, { urlFetchDisabled: true })), [39])
    const mcp = { messages: [user("hi")], mcp_servers: [{ type: "url", url: "https://mcp.dev", name: "m" }] }
    assert.deepStrictEqual(checkRequest(mcp), [])
    assert.deepStrictEqual(rules(checkRequest(mcp, { urlFetchDisabled: true })), [39])
  })

  it.effect("the server refuses such a request with 400 organization_url_fetch_disabled, count_tokens too", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.makeWith({ urlFetchDisabled: true })
      const post = (path: string) =>
        Effect.promise(() =>
          fetch(`${server.url}${path}`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ model: "m", max_tokens: 10, messages: withUrl, stream: true })
          }).then(async (r) => ({ status: r.status, body: await r.json() as Record<string, never> }))
        )
      for (const path of ["/v1/messages", "/v1/messages/count_tokens"]) {
        const { status, body } = yield* post(path)
        assert.strictEqual(status, 400)
        assert.strictEqual(
          (body.error as { details?: { error_code?: string } }).details?.error_code,
          "organization_url_fetch_disabled"
        )
      }
    })))

  it.effect("rule 42: a server that keeps no thread answers every continue with thread_not_found", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.makeWith({ keepsThreads: false })
      server.enqueue(Reply.stream(["Hi."]))
      const post = (body: Record<string, unknown>) =>
        Effect.promise(() =>
          fetch(`${server.url}/v1/messages`, {
            method: "POST",
            headers: { "content-type": "application/json", "anthropic-beta": "message-threads-2026-08-12" },
            body: JSON.stringify({ model: "m", max_tokens: 10, stream: true, ...body })
          }).then(async (r) => ({ status: r.status, text: await r.text() }))
        )
      const created = yield* post({ messages: [user("hi")], thread: { type: "create" } })
      assert.strictEqual(created.status, 200)
      const id = /"id":"([^"]+)"/.exec(created.text)?.[1]
      assert.isDefined(id)
      const continued = yield* post({
        messages: [user("again")],
        thread: { type: "continue", previous_message_id: id }
      })
      assert.strictEqual(continued.status, 404)
      assert.include(continued.text, "thread_not_found")
    })))
})
