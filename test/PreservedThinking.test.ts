/**
 * Rule 43 (preserved thinking, issue 39): the local server, for a `Reply.message` with `preservedThinking`, signs
 * every thinking block it returns over its whole prefix (system, tools, every earlier message) and judges what comes back: a prefix
 * rewritten in place before a thinking block is a 400 by default, and with `drop_block` the block is dropped and
 * reported. Driven through the real SDK.
 */
import Anthropic from "@anthropic-ai/sdk"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as MessagesApiServer from "./fixtures/MessagesApiServer.ts"
import { Reply, THINKING_BINDING_BETA } from "./fixtures/MessagesApiServer.ts"

type Wire = { readonly role: "user" | "assistant"; readonly content: unknown }

const THINKING = { type: "enabled", budget_tokens: 1024 } as const
const DROP = { ...THINKING, block_binding: { prefix_mismatch_behavior: "drop_block" } } as const

/** A model turn: a (Fable 5.1: empty) thinking field, then a call. */
const turn = (n: number, thinking = "") => [
  { type: "thinking", thinking, signature: "unsigned" },
  { type: "tool_use", id: `call_${n}`, name: "bash", input: { command: `cat f${n}` } }
]

const result = (n: number, text: string): Wire => ({
  role: "user",
  content: [{ type: "tool_result", tool_use_id: `call_${n}`, content: text }]
})

/** Sends `messages` through the SDK; the reply, or the API error's status and message. */
const send = (
  client: Anthropic,
  messages: ReadonlyArray<Wire>,
  extra: Record<string, unknown> = {}
) =>
  Effect.promise(() =>
    client.beta.messages.stream({
      model: "claude-fable-5-1",
      max_tokens: 2048,
      system: "You are a coding agent.",
      messages,
      thinking: THINKING,
      ...extra
    } as never).finalMessage().then(
      (reply) => ({ ok: true as const, reply }),
      (e: unknown) => ({ ok: false as const, status: (e as { status?: number }).status, text: String(e) })
    )
  )

/** Three model turns with their results, the way an agent loop appends them; returns the messages and the client. */
const agentLoop = (server: MessagesApiServer.MessagesApiServer, preservedThinking = true) =>
  Effect.gen(function* () {
    const client = new Anthropic({ apiKey: "test", baseURL: server.url, maxRetries: 0 })
    const messages: Array<Wire> = [{ role: "user", content: "read the files" }]
    for (let n = 0; n < 3; n++) {
      server.enqueue(Reply.message(turn(n, n === 1 ? "the second file next" : ""), { preservedThinking }))
      const sent = yield* send(client, messages)
      assert.isTrue(sent.ok, `turn ${n}: ${sent.ok ? "" : sent.text}`)
      if (!sent.ok) break
      messages.push({ role: "assistant", content: sent.reply.content }, result(n, `contents of f${n} `.repeat(50)))
    }
    return { client, messages }
  })

describe("the local server: rule 43 (preserved thinking) in both modes", () => {
  it.effect("append-only is accepted, cache_control moves included; the empty thinking field is signed and kept", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const { client, messages } = yield* agentLoop(server)
      const first = (messages[1]!.content as ReadonlyArray<{ type: string; thinking?: string; signature?: string }>)[0]!
      assert.strictEqual(first.type, "thinking")
      assert.strictEqual(first.thinking, "")
      assert.match(first.signature ?? "", /^pt1\./)
      // a breakpoint is not part of the prefix
      const marked = messages.map((m, i) =>
        i === 2
          ? {
            ...m,
            content: (m.content as ReadonlyArray<object>).map((b) => ({ ...b, cache_control: { type: "ephemeral" } }))
          }
          : m
      )
      server.enqueue(Reply.message([{ type: "text", text: "done" }]))
      const sent = yield* send(client, marked)
      assert.isTrue(sent.ok, sent.ok ? "" : sent.text)
      assert.deepStrictEqual(server.rejections, [])
      assert.deepStrictEqual(server.droppedThinking, [])
    })))

  it.effect("error mode: a tool_result rewritten in place before a thinking block is a 400 thinking_prefix_mismatch", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const { client, messages } = yield* agentLoop(server)
      // the offload the library used to make between compactions: the first result shortened in place
      const offloaded = messages.map((m, i) => i === 2 ? result(0, "[offloaded: 2,600 characters]") : m)
      const refused = yield* send(client, offloaded)
      assert.isFalse(refused.ok)
      if (refused.ok) return
      assert.strictEqual(refused.status, 400)
      assert.include(refused.text, "thinking_prefix_mismatch")
      // the first block it names is the thinking right after the rewrite
      assert.include(refused.text, "messages.3.content.0")
      // the system prompt and the tools are part of the prefix too
      const system = yield* send(client, messages, { system: "You are a careful coding agent." })
      assert.isFalse(system.ok)
      const tools = yield* send(client, messages, {
        tools: [{ name: "bash", description: "run", input_schema: { type: "object" } }]
      })
      assert.isFalse(tools.ok)
      // dropping the empty thinking field as blank rewrites message 1: the thinking after it fails
      const blankDropped = messages.map((m, i) =>
        i === 1 ? { ...m, content: (m.content as ReadonlyArray<{ type: string }>).slice(1) } : m
      )
      const blank = yield* send(client, blankDropped)
      assert.isFalse(blank.ok)
      assert.strictEqual(server.rejections.length, 4)
    })))

  it.effect("drop mode: the invalidated blocks are dropped and reported, the request answered", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const { client, messages } = yield* agentLoop(server)
      const offloaded = messages.map((m, i) => i === 2 ? result(0, "[offloaded]") : m)
      server.enqueue(Reply.message([{ type: "text", text: "done" }]))
      const sent = yield* send(client, offloaded, { thinking: DROP, betas: [THINKING_BINDING_BETA] })
      assert.isTrue(sent.ok, sent.ok ? "" : sent.text)
      if (!sent.ok) return
      const paths = ["messages.3.content.0", "messages.5.content.0"]
      assert.deepStrictEqual(
        (sent.reply as unknown as { input_transformations: ReadonlyArray<{ path: string }> }).input_transformations
          .map((t) => t.path),
        paths
      )
      assert.deepStrictEqual(server.droppedThinking.map((d) => d.path), paths)
      assert.deepStrictEqual(server.rejections, [])
    })))

  it.effect("a reply without preservedThinking keeps its scripted signature and binds nothing", () =>
    Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const { client, messages } = yield* agentLoop(server, false)
      const first = (messages[1]!.content as ReadonlyArray<{ signature?: string }>)[0]!
      assert.strictEqual(first.signature, "unsigned")
      server.enqueue(Reply.message([{ type: "text", text: "done" }]))
      const sent = yield* send(client, messages.map((m, i) => i === 2 ? result(0, "[offloaded]") : m))
      assert.isTrue(sent.ok)
    })))
})
