/**
 * What `append` and `recordReply` take is checked before anything changes, on every layer alike (memory, and logged
 * before any log write): a malformed message, a block its role cannot hold, a system message placed where the API
 * refuses it (API-RULES 9, 10), or something that is not a reply, is refused with `ConversationError` `Refused`
 * whose `MessageDecodeError` names the path, and the state is the one before. So is blank content (rule 4), which
 * would otherwise be dropped, and a user message after a system message whose reply was empty says how to go on. What
 * the API refuses and the caller cannot see coming (blank text inside a tool result, a continued reply ending in
 * whitespace: rule 4) is cleaned. The Promise form refuses alike. A property drives generated call sequences and judges
 * every prepared request by the independent checker.
 */
import type Anthropic from "@anthropic-ai/sdk"
import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, Effect, Exit, Layer, Schema } from "effect"
import { Conversation, type ConversationError } from "../src/Conversation.ts"
import type { MessageParam, SdkReply } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import type { MessageDecodeError } from "../src/Message.ts"
import { open } from "../src/PromiseConversation.ts"
import type { Request } from "../src/Request.ts"
import { SessionLog } from "../src/SessionLog.ts"
import type { MemorySessions } from "../src/SessionStore.ts"
import { checkRequest, formatApiViolations } from "./fixtures/ApiRules.ts"

type Step<A> = Effect.Effect<A, ConversationError<unknown>>

const memory = () => Conversation.layerMemory().pipe(Layer.provide(ExtractiveSummarizer.layer))
const logged = (store: MemorySessions) =>
  Conversation.layerLogged().pipe(
    Layer.provide(Layer.fresh(SessionLog.layerMemory({ store }))),
    Layer.provide(ExtractiveSummarizer.layer)
  )

/** Runs `body` on a memory conversation and on a logged one; `store` is the logged one's (empty for memory). */
const onEveryLayer = (body: (store: MemorySessions) => Effect.Effect<void, unknown, Conversation>) =>
  Effect.gen(function* () {
    yield* body(new Map()).pipe(Effect.provide(memory()))
    const store: MemorySessions = new Map()
    yield* body(store).pipe(Effect.provide(logged(store)))
  })

const user = (text: string): MessageParam => ({ role: "user", content: text })
const call = (id: string): MessageParam => ({
  role: "assistant",
  content: [{ type: "tool_use", id, name: "read", input: { path: `/src/${id}.ts` } }]
})

/** A reply as `client.messages.create` returns it. */
const sdkReply = (content: Array<unknown>, stop: string, id = "msg_1"): SdkReply => ({
  id,
  type: "message",
  role: "assistant",
  content: content as SdkReply["content"],
  stop_reason: stop,
  usage: { input_tokens: 1_000, output_tokens: 20 }
})

/**
 * The step is refused: `Refused`, a `MessageDecodeError` whose message matches `why` (and whose path is `path` when
 * given), the error's value the state as it was, the state and the log unchanged.
 */
const refused = (
  store: MemorySessions,
  step: Step<unknown>,
  why: RegExp,
  path?: ReadonlyArray<string | number>
) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    const before = yield* conversation.state
    const lines = JSON.stringify([...store])
    const exit = yield* Effect.exit(step)
    assert.isTrue(Exit.isFailure(exit), `accepted, expected a refusal matching ${why}`)
    const error = Exit.isFailure(exit)
      ? (exit.cause.reasons.find((r) => r._tag === "Fail") as { readonly error: ConversationError<unknown> }).error
      : undefined
    assert.strictEqual(error?.reason, "Refused", String(error))
    const cause = error!.cause as MessageDecodeError
    assert.strictEqual(cause._tag, "MessageDecodeError")
    assert.match(cause.message, why)
    if (path !== undefined) assert.deepStrictEqual(cause.path, path)
    assert.strictEqual(error!.value, before, "the error carries the state as it was")
    assert.strictEqual(yield* conversation.state, before, "nothing changed")
    assert.strictEqual(JSON.stringify([...store]), lines, "nothing was logged")
  })

/** What the independent checker finds in the request, and the rule-4 cases it does not look at. */
const violations = (request: Request): Array<string> => {
  const found = checkRequest(request as unknown as Parameters<typeof checkRequest>[0])
  const out = found.length === 0 ? [] : [formatApiViolations(found)]
  request.messages.forEach((m, i) => {
    if (!Array.isArray(m.content)) return
    for (const block of m.content as ReadonlyArray<{ type: string; content?: unknown }>) {
      if (block.type !== "tool_result" || !Array.isArray(block.content)) continue
      for (const inner of block.content as ReadonlyArray<{ type: string; text?: string }>) {
        if (inner.type === "text" && inner.text!.trim() === "") out.push(`rule 4: blank text in a tool result (${i})`)
      }
    }
  })
  const last = request.messages.at(-1)
  if (last?.role === "assistant") {
    const content = last.content
    const text = typeof content === "string"
      ? content
      : (content.at(-1) as { type: string; text?: string } | undefined)?.type === "text"
      ? (content.at(-1) as { text: string }).text
      : undefined
    if (text !== undefined && text !== text.trimEnd()) {
      out.push("rule 4: the final assistant message ends in whitespace")
    }
  }
  return out
}

const prepared = Effect.gen(function* () {
  const { request } = yield* (yield* Conversation).prepare
  assert.strictEqual(violations(request).join("\n"), "")
  return request
})

describe("append: a malformed message or a block its role cannot hold is refused, on every layer", () => {
  it.effect("malformed messages: the cause names the path (its index is where the message would go)", () =>
    onEveryLayer((store) =>
      Effect.gen(function* () {
        const conversation = yield* Conversation
        yield* conversation.append(user("Fix the parser"))
        yield* conversation.recordReply(call("toolu_a"))
        const append = (message: unknown) => conversation.append(message as MessageParam)
        yield* refused(store, append({ role: "usr", content: "x" }), /role: Expected "user"/, [2, "role"])
        yield* refused(store, append({ role: "user", content: [{ text: "x" }] }), /Missing key/, [
          2,
          "content",
          0,
          "type"
        ])
        yield* refused(store, append({ role: "user", content: 42 }), /Expected string \| array/, [2, "content"])
        yield* refused(store, append({ role: "user" }), /Missing key/, [2, "content"])
        yield* refused(
          store,
          append({ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_a", content: { out: "A" } }] }),
          /\(tool_result\): Expected string \| array/,
          [2, "content", 0, "content"]
        )
        yield* refused(store, append({ role: "user", content: [{ type: "text", text: 5 }] }), /Expected string/, [
          2,
          "content",
          0,
          "text"
        ])
        yield* refused(store, append(null), /Expected object/, [2])
        yield* refused(store, append("Fix it"), /Expected object/, [2])
        // the call still waits: the refusals changed nothing, and its result is taken
        yield* conversation.append({
          role: "user",
          content: [{ type: "tool_result", tool_use_id: "toolu_a", content: "parser.ts" }]
        })
        assert.deepStrictEqual((yield* conversation.state).pending, [])
        yield* prepared
      })
    ))

  it.effect("blocks the role cannot hold: thinking or tool_use from a user, an image in a system message", () =>
    onEveryLayer((store) =>
      Effect.gen(function* () {
        const conversation = yield* Conversation
        yield* conversation.append(user("Fix the parser"))
        const append = (message: unknown) => conversation.append(message as MessageParam)
        yield* refused(
          store,
          append({
            role: "user",
            content: [{ type: "text", text: "and" }, { type: "tool_use", id: "toolu_x", name: "bash", input: {} }]
          }),
          /user message cannot hold a tool_use block.*recordReply/,
          [1, "content", 1, "type"]
        )
        yield* refused(
          store,
          append({ role: "user", content: [{ type: "thinking", thinking: "t", signature: "s" }] }),
          /user message cannot hold a thinking block/
        )
        yield* refused(
          store,
          append({
            role: "system",
            content: [{ type: "text", text: "see this" }, {
              type: "image",
              source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" }
            }]
          }),
          /system message holds only text and tool changes.*move the image block out of it/,
          [1, "content", 1, "type"]
        )
        // a tool change (not a block the library knows) passes through untouched
        const addition = {
          role: "system",
          content: [{ type: "tool_addition", tool: { type: "tool_reference", name: "grep" } }]
        }
        assert.deepStrictEqual((yield* append(addition)).view.at(-1), addition as unknown as MessageParam)
      })
    ))
})

describe("blank content is refused, never dropped (rule 4), on every layer", () => {
  it.effect("an empty or whitespace user message, empty content, a blank text block: refused, nothing dropped", () =>
    onEveryLayer((store) =>
      Effect.gen(function* () {
        const conversation = yield* Conversation
        yield* conversation.append(user("Fix the parser"))
        const append = (message: unknown) => conversation.append(message as MessageParam)
        yield* refused(store, append(user("")), /user message cannot be blank.*leave it out/, [1, "content"])
        yield* refused(store, append(user(" \n")), /user message cannot be blank/, [1, "content"])
        yield* refused(store, append({ role: "user", content: [] }), /user message cannot have empty content/, [
          1,
          "content"
        ])
        yield* refused(
          store,
          append({ role: "user", content: [{ type: "text", text: "  " }] }),
          /text block cannot be blank.*leave it out/,
          [1, "content", 0, "text"]
        )
        // beside other content the blank block is named, not dropped
        yield* refused(
          store,
          append({ role: "user", content: [{ type: "text", text: "see" }, { type: "text", text: "" }] }),
          /text block cannot be blank.*remove the block/,
          [1, "content", 1, "text"]
        )
        yield* conversation.recordReply(call("toolu_a"))
        const answer = { type: "tool_result", tool_use_id: "toolu_a", content: "parser.ts" }
        yield* refused(
          store,
          append({ role: "user", content: [answer, { type: "text", text: "\t" }] }),
          /text block cannot be blank/,
          [2, "content", 1, "text"]
        )
        // the call still waits; the result alone is taken
        yield* append({ role: "user", content: [answer] })
        assert.deepStrictEqual((yield* conversation.state).pending, [])
        yield* prepared
      })
    ))

  it.effect("a blank system message, blank content beside settings, empty settings: refused; settings alone taken", () =>
    onEveryLayer((store) =>
      Effect.gen(function* () {
        const conversation = yield* Conversation
        yield* conversation.append(user("Fix the parser"))
        const append = (message: unknown) => conversation.append(message as MessageParam)
        yield* refused(store, append({ role: "system", content: "" }), /system message cannot be blank/, [1, "content"])
        yield* refused(
          store,
          append({ role: "system", content: [{ type: "text", text: " " }] }),
          /text block cannot be blank/,
          [1, "content", 0, "text"]
        )
        // the settings were lost with the blank content before: now the caller hears to leave content out
        yield* refused(
          store,
          append({ role: "system", content: "", output_config: { effort: "low" } }),
          /system message cannot be blank.*leave content out/,
          [1, "content"]
        )
        yield* refused(
          store,
          append({ role: "system", content: [], output_config: { effort: "low" } }),
          /cannot have empty content.*leave content out/,
          [1, "content"]
        )
        yield* refused(store, append({ role: "system", output_config: {} }), /needs an output_config field/, [
          1,
          "output_config"
        ])
        const settings = { role: "system", output_config: { effort: "low" } }
        assert.deepStrictEqual((yield* append(settings)).view.at(-1), settings as unknown as MessageParam)
        yield* prepared
      })
    ))
})

describe("recordReply: what is not an assistant message or the SDK's reply is refused, on every layer", () => {
  it.effect("a Promise, { data, response }, a stream, a bare content array, a user message, a result in a reply", () =>
    onEveryLayer((store) =>
      Effect.gen(function* () {
        const conversation = yield* Conversation
        yield* conversation.append(user("Fix the parser"))
        // a prepared request awaits its reply: a refusal leaves that too as it was
        yield* conversation.prepare
        const reply = sdkReply([{ type: "text", text: "Done.", citations: null }], "end_turn")
        const record = (r: unknown) => conversation.recordReply(r as SdkReply)
        yield* refused(store, record(Promise.resolve(reply)), /got a Promise: await it/, [1])
        yield* refused(store, record({ data: reply, response: {} }), /withResponse\(\)\): pass its data/)
        yield* refused(store, record({ messages: [], finalMessage: () => reply }), /stream\.finalMessage\(\)/)
        yield* refused(store, record(reply.content), /got an array/)
        yield* refused(store, record(user("I am the user")), /a user message goes to append/, [1, "role"])
        yield* refused(store, record(undefined), /got undefined/)
        yield* refused(store, record({ role: "assistant", content: 42 }), /Expected string \| array/, [1, "content"])
        yield* refused(
          store,
          record({ ...reply, content: [{ text: "no type" }] }),
          /Missing key/,
          [1, "content", 0, "type"]
        )
        yield* refused(
          store,
          record({ role: "assistant", content: [{ type: "tool_result", tool_use_id: "toolu_a", content: "A" }] }),
          /assistant message cannot hold a tool_result block: append/
        )
        const state = yield* record(reply)
        assert.strictEqual(state.reply?.id, "msg_1")
        assert.deepStrictEqual(state.view.at(-1), { role: "assistant", content: reply.content } as MessageParam)
        // the same reply recorded again (a loop that records twice) would add the turn twice
        yield* refused(store, record(reply), /reply msg_1 is the one recorded last: record each reply once/, [2, "id"])
      })
    ))

  it.effect("an empty reply stays allowed: no message, its stop reason and usage kept; the same one again refused", () =>
    onEveryLayer((store) =>
      Effect.gen(function* () {
        const conversation = yield* Conversation
        yield* conversation.append(user("Anything to add?"))
        const before = (yield* conversation.state).view
        const state = yield* conversation.recordReply(sdkReply([], "end_turn", "msg_empty"))
        assert.deepStrictEqual(state.view, before)
        assert.strictEqual(state.reply?.stopReason, "end_turn")
        assert.strictEqual(state.reply?.empty, true)
        assert.strictEqual(state.usage?.usage.input_tokens, 1_000)
        // recorded again (its id), refused as a reply with content is; only blank text is empty content too
        for (const content of [[], [{ type: "text", text: " " }]]) {
          yield* refused(
            store,
            conversation.recordReply(sdkReply(content, "end_turn", "msg_empty")),
            /reply msg_empty is the one recorded last: record each reply once/,
            [1, "id"]
          )
        }
        // the same id with content: another reply (a recycled id), taken
        const recycled = yield* conversation.recordReply(
          sdkReply([{ type: "text", text: "Yes." }], "end_turn", "msg_empty")
        )
        assert.strictEqual(recycled.view.length, 2)
        yield* conversation.append(user("Anything else?"))
        // a MessageParam: the usage given beside it is kept; with none, the trigger goes back to the estimate
        const plain = yield* conversation.recordReply({ role: "assistant", content: [] }, {
          input_tokens: 3_000,
          output_tokens: 0
        })
        assert.strictEqual(plain.view.length, 3)
        assert.deepStrictEqual(plain.usage, { usage: { input_tokens: 3_000, output_tokens: 0 }, requestEpoch: 0 })
        assert.deepStrictEqual(plain.reply, { requestEpoch: 0, empty: true })
        const none = yield* conversation.recordReply({ role: "assistant", content: [{ type: "text", text: "\n" }] })
        assert.strictEqual(none.view.length, 3)
        assert.deepStrictEqual(none.reply, { requestEpoch: 0, noUsage: true, empty: true })
      })
    ))
})

describe("system messages: placed where the API takes them, or refused with what to do instead", () => {
  it.effect("after the assistant's reply, after another system message, or before a user message: refused", () =>
    onEveryLayer((store) =>
      Effect.gen(function* () {
        const conversation = yield* Conversation
        const system = (text: string) => conversation.append({ role: "system", content: text } as MessageParam)
        yield* conversation.append(user("hello"))
        yield* conversation.recordReply(sdkReply([{ type: "text", text: "hi" }], "end_turn"))
        yield* refused(store, system("be terse"), /cannot follow the assistant's reply.*after the next user message/, [
          2,
          "role"
        ])
        yield* conversation.append(user("more"))
        yield* system("be terse")
        yield* refused(store, system("and polite"), /cannot follow another system message.*one system message/)
        yield* refused(
          store,
          conversation.append(user("even more")),
          /user message cannot follow a system message.*record the reply first/
        )
        // results that answer nothing store nothing: taken (and dropped) as before
        yield* conversation.append({
          role: "user",
          content: [{ type: "tool_result", tool_use_id: "toolu_nobody", content: "late" }]
        })
        const request = yield* prepared
        assert.strictEqual(request.messages.at(-1)?.role, "system")
        yield* conversation.recordReply(sdkReply([{ type: "text", text: "Noted." }], "end_turn", "msg_2"))
        yield* conversation.append(user("even more"))
        yield* prepared
      })
    ))

  it.effect("a user message after a system message whose reply was empty: refused, saying how to go on", () =>
    onEveryLayer((store) =>
      Effect.gen(function* () {
        const conversation = yield* Conversation
        yield* conversation.append(user("Fix the parser"))
        yield* conversation.append({ role: "system", content: "The user stepped away: wrap up." } as MessageParam)
        const first = yield* prepared
        // the model had nothing to add: an empty end_turn reply stores no message
        yield* conversation.recordReply(sdkReply([], "end_turn", "msg_empty"))
        yield* refused(
          store,
          conversation.append(user("Please continue")),
          /reply with empty content adds no message.*send the request again, or record a reply with content first/,
          [2, "role"]
        )
        // sent again, the request is the one before, and valid
        assert.deepStrictEqual((yield* prepared).messages, first.messages)
        // a reply with content closes the system message's turn: the user message is taken, the request valid
        yield* conversation.recordReply({ role: "assistant", content: "Nothing more to do." })
        yield* conversation.append(user("Please continue"))
        const next = yield* prepared
        assert.deepStrictEqual(next.messages.map((m) => m.role), ["user", "system", "assistant", "user"])
      })
    ))

  it.effect("the documented shapes are taken: after a user turn, a server tool result, pending calls, settings", () =>
    onEveryLayer(() =>
      Effect.gen(function* () {
        const conversation = yield* Conversation
        const append = (message: unknown) => conversation.append(message as MessageParam)
        // the first message: a user turn is put before it
        yield* append({ role: "system", content: "Answer in English." })
        yield* prepared
        yield* conversation.recordReply(sdkReply([{ type: "text", text: "ok" }], "end_turn", "msg_1"))
        yield* append(user("look it up"))
        yield* append({ role: "system", output_config: { effort: "low" } })
        yield* prepared
        const advisor = [
          { type: "server_tool_use", id: "srvtoolu_1", name: "advisor", input: {} },
          { type: "advisor_tool_result", tool_use_id: "srvtoolu_1", content: { type: "advisor_result", text: "ok" } }
        ]
        yield* conversation.recordReply(sdkReply(advisor, "end_turn", "msg_2"))
        yield* append({ role: "system", content: "advice noted" })
        yield* prepared
        yield* conversation.recordReply(call("toolu_a"))
        // a system message while a call waits answers it as interrupted first
        const state = yield* append({ role: "system", content: "stop reading", clear_at: "next_user_message" })
        assert.strictEqual(state.view.at(-2)?.role, "user")
        yield* prepared
      })
    ))
})

describe("whitespace the API refuses (rule 4) is cleaned where the message is stored", () => {
  it.effect("a continued reply ending in whitespace, blank text inside a tool result", () =>
    onEveryLayer(() =>
      Effect.gen(function* () {
        const conversation = yield* Conversation
        yield* conversation.append(user("hello"))
        yield* conversation.recordReply(sdkReply([{ type: "text", text: "ok " }], "max_tokens"))
        const continued = yield* prepared
        assert.deepStrictEqual(continued.messages.at(-1), {
          role: "assistant",
          content: [{ type: "text", text: "ok" }]
        })
        yield* conversation.append(user("go on"))
        yield* conversation.recordReply(sdkReply(
          [{ type: "tool_use", id: "toolu_1", name: "bash", input: {} }, {
            type: "tool_use",
            id: "toolu_2",
            name: "bash",
            input: {}
          }],
          "tool_use",
          "msg_2"
        ))
        const state = yield* conversation.append({
          role: "user",
          content: [
            {
              type: "tool_result",
              tool_use_id: "toolu_1",
              content: [{ type: "text", text: "output" }, { type: "text", text: "" }]
            },
            { type: "tool_result", tool_use_id: "toolu_2", content: [{ type: "text", text: " \n" }] }
          ]
        } as Anthropic.MessageParam)
        assert.deepStrictEqual(state.view.at(-1)?.content, [
          { type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: "output" }] },
          { type: "tool_result", tool_use_id: "toolu_2" }
        ])
        yield* prepared
      })
    ))
})

describe("the Promise form refuses alike", () => {
  /** The rejection of `promise` as `reason message`. */
  const rejection = (promise: Promise<unknown>) =>
    promise.then(
      () => assert.fail("accepted"),
      (error: ConversationError<unknown>) => `${error.reason} ${error.message}`
    )

  it("blank content: an empty user message, a blank text block, blank content beside settings", async () => {
    const conversation = await open()
    try {
      await conversation.append(user("Fix the parser"))
      const before = await conversation.state()
      assert.match(
        await rejection(conversation.append(user(""))),
        /^Refused refused: messages\[1\]\.content: a user message cannot be blank/
      )
      assert.match(
        await rejection(conversation.append({ role: "user", content: [{ type: "text", text: " " }] })),
        /^Refused refused: messages\[1\]\.content\[0\]\.text \(text\): a text block cannot be blank/
      )
      assert.match(
        await rejection(
          conversation.append({ role: "system", content: "", output_config: { effort: "low" } } as never)
        ),
        /^Refused .*leave content out/
      )
      assert.strictEqual(await conversation.state(), before)
    } finally {
      await conversation.close()
    }
  })

  it("a user message after a system message whose reply was empty", async () => {
    const conversation = await open()
    try {
      await conversation.append(user("Fix the parser"))
      await conversation.append({ role: "system", content: "The user stepped away: wrap up." } as MessageParam)
      await conversation.prepare()
      await conversation.recordReply(sdkReply([], "end_turn", "msg_empty"))
      const before = await conversation.state()
      assert.match(
        await rejection(conversation.append(user("Please continue"))),
        /^Refused .*reply with empty content adds no message.*send the request again/
      )
      assert.strictEqual(await conversation.state(), before)
      const { request } = await conversation.prepare()
      assert.strictEqual(violations(request).join("\n"), "")
    } finally {
      await conversation.close()
    }
  })
})

// ============================================================================
// Property: no sequence of accepted calls prepares a request the API refuses
// ============================================================================

/** A caller's mistakes the property appends now and then: each must be refused and change nothing. */
const MALFORMED: ReadonlyArray<unknown> = [
  { role: "usr", content: "x" },
  { role: "user", content: [{ text: "x" }] },
  { role: "user", content: 42 },
  null,
  { role: "user", content: [{ type: "tool_use", id: "toolu_bad", name: "x", input: {} }] },
  { role: "system", content: [{ type: "image", source: { type: "url", url: "https://example.com/a.png" } }] }
]

/** One call of an agent loop, picked by `code`; `n` varies it. */
const act = (code: number, n: number): Effect.Effect<Request | undefined, ConversationError<unknown>, Conversation> =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    const pending = (yield* conversation.state).pending.map((p) => p.originalId)
    const result = (id: string) => ({ type: "tool_result" as const, tool_use_id: id, content: `out ${id}` })
    const append = (message: unknown) => conversation.append(message as MessageParam)
    const reply = (content: Array<unknown>, stop: string) =>
      conversation.recordReply(sdkReply(content, stop, `msg_${n}`))
    switch (code) {
      case 0:
        return void (yield* append(user(`question ${n}`)))
      case 1:
        return void (yield* append(user(n % 2 === 0 ? "   " : "")))
      case 2:
        return void (yield* append({ role: "system", content: `rule ${n}` }))
      case 3:
        return void (yield* append({ role: "system", output_config: { effort: n % 2 === 0 ? "low" : "high" } }))
      case 4:
        return void (yield* append({ role: "system", content: `for now ${n}`, clear_at: "next_user_message" }))
      case 5:
        return void (yield* append({ role: "user", content: pending.map(result) }))
      case 6:
        return void (yield* append({ role: "user", content: [result(pending[0] ?? `toolu_orphan_${n}`)] }))
      case 7:
        return void (yield* append({ role: "user", content: [...pending.map(result), { type: "text", text: "and" }] }))
      case 8:
        return void (yield* reply([{ type: "text", text: n % 2 === 0 ? `done ${n}` : `cut ${n} \n` }], "end_turn"))
      case 9:
        return void (yield* reply(
          Array.from(
            { length: 1 + n % 2 },
            (_, k) => ({ type: "tool_use", id: `toolu_${n}_${k}`, name: "read", input: { path: `/f${k}` } })
          ),
          "tool_use"
        ))
      case 10:
        return void (yield* reply([
          { type: "server_tool_use", id: `srvtoolu_${n}`, name: "advisor", input: {} },
          { type: "advisor_tool_result", tool_use_id: `srvtoolu_${n}`, content: { type: "advisor_result", text: "x" } }
        ], "end_turn"))
      case 11:
        return void (yield* reply(
          n % 2 === 0 ? [] : [{ type: "text", text: " " }],
          n % 3 === 0 ? "max_tokens" : "end_turn"
        ))
      case 12:
        return void (yield* append(MALFORMED[n % MALFORMED.length]))
      default:
        return (yield* conversation.prepare).request
    }
  })

const Script = Schema.Array(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 13 }))).check(
  Schema.isMinLength(1),
  Schema.isMaxLength(40)
)

describe("property: generated call sequences", () => {
  it.effect.prop(
    "every accepted sequence prepares requests the API accepts; a refused call changes nothing",
    [Arbitrary.schema(Script)],
    ([script]) =>
      Effect.gen(function* () {
        const conversation = yield* Conversation
        for (let n = 0; n < script.length; n++) {
          const code = script[n]!
          const before = yield* conversation.state
          const exit = yield* Effect.exit(act(code, n))
          if (Exit.isFailure(exit)) {
            const error = (exit.cause.reasons.find((r) => r._tag === "Fail") as
              | { readonly error: ConversationError<unknown> }
              | undefined)?.error
            assert.strictEqual(error?.reason, "Refused", `step ${n} (${code}) failed: ${String(exit.cause)}`)
            assert.strictEqual(yield* conversation.state, before, `step ${n} (${code}): a refusal changed the state`)
            continue
          }
          assert.isFalse(code === 1 || code === 12, `step ${n} (${code}): a malformed or blank message was taken`)
          const request = exit.value
          // a request before any message has nothing to send (not judged here)
          if (request !== undefined && request.messages.length > 0) {
            assert.strictEqual(violations(request).join("\n"), "", `step ${n}`)
          }
        }
        const { request } = yield* conversation.prepare
        if (request.messages.length > 0) assert.strictEqual(violations(request).join("\n"), "", "the last request")
      }).pipe(Effect.provide(memory())),
    { timeout: 120_000, arbitrary: { runs: 300 } }
  )
})
