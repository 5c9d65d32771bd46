import type Anthropic from "@anthropic-ai/sdk"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import {
  type ContentBlock,
  decodeMessages,
  decodeMessagesSync,
  type Message,
  MessageDecodeError
} from "../src/Message.ts"
import { corpus } from "./fixtures/Corpus.ts"
import { pngBase64 } from "./fixtures/Conversation.ts"
import {
  blocksOf,
  hasContent,
  isServerToolCall,
  isServerToolResult,
  isToolResultMessage,
  isUnknownBlock,
  toolResultIds,
  toolUseIds,
  userText
} from "../src/internal/blocks.ts"
import { type BuiltMessage, SERVER_TOOL_RESULT_TYPES } from "../src/internal/wireTypes.ts"

const png = pngBase64(10, 10)

/** One valid example of every block the API has, plus an unknown one. */
const everyBlock: ReadonlyArray<ContentBlock> = [
  { type: "text", text: "hello", cache_control: { type: "ephemeral" }, citations: null },
  { type: "image", source: { type: "base64", media_type: "image/png", data: png } },
  { type: "image", source: { type: "url", url: "https://example.com/a.png" } },
  { type: "image", source: { type: "file", file_id: "file_1" } },
  { type: "document", source: { type: "base64", media_type: "application/pdf", data: "JVBERi0=" }, title: "spec" },
  { type: "document", source: { type: "text", media_type: "text/plain", data: "plain" } },
  { type: "document", source: { type: "content", content: [{ type: "text", text: "inner" }] }, context: null },
  { type: "document", source: { type: "url", url: "https://example.com/a.pdf" } },
  { type: "document", source: { type: "file", file_id: "file_2" } },
  { type: "search_result", source: "https://x", title: "x", content: [{ type: "text", text: "found" }] },
  { type: "thinking", thinking: "hmm", signature: "sig" },
  { type: "redacted_thinking", data: "opaque" },
  { type: "tool_use", id: "toolu_1", name: "bash", input: { command: "ls" } },
  { type: "server_tool_use", id: "srvtoolu_1", name: "web_search", input: { query: "q" } },
  ...SERVER_TOOL_RESULT_TYPES.map((type) => ({ type, tool_use_id: "srvtoolu_1", content: [] })),
  { type: "container_upload", file_id: "file_3" },
  { type: "future_block_type", payload: { anything: [1, 2, 3] } } as ContentBlock
]

const toolResults: ReadonlyArray<ContentBlock> = [
  { type: "tool_result", tool_use_id: "toolu_1", content: "out", is_error: false },
  { type: "tool_result", tool_use_id: "toolu_2", content: [{ type: "text", text: "a" }, everyBlock[1]!] },
  { type: "tool_result", tool_use_id: "toolu_3" },
  { type: "tool_result", tool_use_id: "toolu_4", content: "boom", is_error: true, _private: 1 } as ContentBlock
]

describe("Message", () => {
  it("decodes every block type and returns the input itself, extra fields preserved", () => {
    const input: ReadonlyArray<Message & Record<string, unknown>> = [
      { role: "user", content: "plain string", _usage: { input: 1 } },
      { role: "system", content: "mid-conversation system message" },
      { role: "assistant", content: everyBlock },
      { role: "user", content: toolResults }
    ]
    const decoded = decodeMessagesSync(input)
    assert.strictEqual(decoded, input)
    assert.deepStrictEqual(JSON.parse(JSON.stringify(decoded)), JSON.parse(JSON.stringify(input)))
    assert.strictEqual((decoded[3]!.content[3] as unknown as { _private: number })._private, 1)
  })

  it("keeps unknown blocks and recognises them", () => {
    const unknown = everyBlock.at(-1)!
    assert.isTrue(isUnknownBlock(unknown))
    assert.isFalse(isUnknownBlock(everyBlock[0]!))
    assert.isTrue(SERVER_TOOL_RESULT_TYPES.every((type) => isServerToolResult({ type })))
  })

  it.effect("decodeMessages succeeds with the same array", () =>
    Effect.gen(function* () {
      const input: ReadonlyArray<Message> = [{ role: "user", content: "hi" }]
      assert.strictEqual(yield* decodeMessages(input), input)
    }))

  const bad: ReadonlyArray<readonly [string, unknown, string]> = [
    ["not an array", "hello", "messages: Expected an array of messages, got string"],
    ["null", null, "messages: Expected an array of messages, got null"],
    ["a number as message", [1], "messages[0]: Expected object"],
    ["an unknown role", [{ role: "tool", content: "x" }], `messages[0].role: Expected "user" | "assistant" | "system"`],
    ["missing content", [{ role: "user" }], "messages[0].content: Missing key"],
    ["numeric content", [{ role: "user", content: 5 }], "messages[0].content: Expected string | array"],
    ["a block without type", [{ role: "user", content: [{ text: "x" }] }], "messages[0].content[0].type: Missing key"],
    [
      "an empty type",
      [{ role: "user", content: [{ type: "" }] }],
      "messages[0].content[0].type: Expected a non-empty string"
    ],
    ["a null block", [{ role: "user", content: [null] }], "messages[0].content[0]: Expected object"],
    [
      "text without text",
      [{ role: "user", content: [{ type: "text" }] }],
      "messages[0].content[0].text (text): Missing key"
    ],
    [
      "numeric text",
      [{ role: "user", content: [{ type: "text", text: 3 }] }],
      "messages[0].content[0].text (text): Expected string"
    ],
    [
      "tool_use with string input",
      [{ role: "assistant", content: [{ type: "tool_use", id: "a", name: "x", input: "ls" }] }],
      "messages[0].content[0].input (tool_use): Expected object"
    ],
    [
      "tool_use with empty id",
      [{ role: "assistant", content: [{ type: "tool_use", id: "", name: "x", input: {} }] }],
      "messages[0].content[0].id (tool_use): Expected a non-empty string"
    ],
    [
      "tool_result without tool_use_id",
      [{ role: "user", content: [{ type: "tool_result", content: "x" }] }],
      "messages[0].content[0].tool_use_id (tool_result): Missing key"
    ],
    [
      "tool_result with numeric content",
      [{ role: "user", content: [{ type: "tool_result", tool_use_id: "a", content: 7 }] }],
      "messages[0].content[0].content (tool_result): Expected string | array"
    ],
    [
      "tool_result with non-boolean is_error",
      [{ role: "user", content: [{ type: "tool_result", tool_use_id: "a", is_error: "yes" }] }],
      "messages[0].content[0].is_error (tool_result): Expected boolean"
    ],
    [
      "a bad block nested in a tool_result",
      [{ role: "user", content: [{ type: "tool_result", tool_use_id: "a", content: [{ type: "text", text: 1 }] }] }],
      "messages[0].content[0].content[0].text (text): Expected string"
    ],
    [
      "image without source",
      [{ role: "user", content: [{ type: "image" }] }],
      "messages[0].content[0].source (image): Missing key"
    ],
    [
      "thinking with numeric signature",
      [{ role: "assistant", content: [{ type: "thinking", thinking: "t", signature: 1 }] }],
      "messages[0].content[0].signature (thinking): Expected string"
    ],
    [
      "redacted_thinking without data",
      [{ role: "assistant", content: [{ type: "redacted_thinking" }] }],
      "messages[0].content[0].data (redacted_thinking): Missing key"
    ],
    [
      "an error in a later message",
      [{ role: "user", content: "ok" }, { role: "assistant", content: "ok" }, {
        role: "assistant",
        content: [{ type: "text" }]
      }],
      "messages[2].content[0].text (text): Missing key"
    ]
  ]

  for (const [name, input, message] of bad) {
    it(`rejects ${name} with a message that says where and what`, () => {
      try {
        decodeMessagesSync(input)
        assert.fail("expected a MessageDecodeError")
      } catch (error) {
        assert.instanceOf(error, MessageDecodeError)
        assert.strictEqual((error as MessageDecodeError).message, message)
      }
    })
  }

  it.effect("decodeMessages fails with the typed error, with message and block indices", () =>
    Effect.gen(function* () {
      const exit = yield* Effect.exit(decodeMessages([{ role: "user", content: "a" }, {
        role: "user",
        content: [{ type: "text", text: "ok" }, { type: "tool_use", id: "x", name: "n", input: 1 }]
      }]))
      assert.isTrue(Exit.isFailure(exit))
      const error = yield* Effect.flip(
        decodeMessages([{ role: "user", content: [{ type: "text", text: "ok" }, { type: "text" }] }])
      )
      assert.strictEqual(error._tag, "MessageDecodeError")
      assert.strictEqual(error.messageIndex, 0)
      assert.strictEqual(error.blockIndex, 1)
      assert.strictEqual(error.blockType, "text")
      assert.deepStrictEqual(error.path, [0, "content", 1, "text"])
    }))

  it("helpers read tool ids and tool-result-only messages", () => {
    const assistant: Message = { role: "assistant", content: everyBlock }
    const results: Message = { role: "user", content: toolResults }
    assert.deepStrictEqual(toolUseIds(assistant), ["toolu_1"])
    assert.deepStrictEqual(toolResultIds(results), ["toolu_1", "toolu_2", "toolu_3", "toolu_4"])
    assert.isTrue(isToolResultMessage(results))
    assert.isFalse(isToolResultMessage({ role: "user", content: [] }))
    assert.deepStrictEqual(blocksOf({ role: "user", content: "x" }), [{ type: "text", text: "x" }])
  })

  it("issue 27 finding 1: a system message with no content carrying output_config decodes, fields verbatim", () => {
    const settings = { role: "system", output_config: { effort: "low" }, clear_at: "never", _mine: [1] }
    const input = [
      { role: "user", content: "a" },
      { role: "assistant", content: "b" },
      { role: "user", content: "c" },
      settings,
      { role: "system", content: "later", clear_at: "next_user_message", output_config: null }
    ]
    const decoded = decodeMessagesSync(input)
    assert.strictEqual<unknown>(decoded, input)
    assert.strictEqual<unknown>(decoded[3], settings)
    assert.deepStrictEqual(JSON.parse(JSON.stringify(decoded)), JSON.parse(JSON.stringify(input)))
    assert.isFalse(hasContent(decoded[3]!))
    assert.deepStrictEqual(blocksOf(decoded[3]!), [])
    assert.deepStrictEqual(toolUseIds(decoded[3]!), [])
    // content is still required without output_config, and the system fields are checked
    const fails = (messages: unknown, message: string) => {
      try {
        decodeMessagesSync(messages)
        assert.fail("expected a MessageDecodeError")
      } catch (error) {
        assert.strictEqual((error as MessageDecodeError).message, message)
      }
    }
    fails([{ role: "system" }], "messages[0].content: Missing key")
    fails([{ role: "user", output_config: { effort: "low" } }], "messages[0].content: Missing key")
    fails([{ role: "system", output_config: "low" }], "messages[0].output_config: Expected object | null")
    fails(
      [{ role: "system", content: "x", clear_at: "later" }],
      `messages[0].clear_at: Expected "next_user_message" | "never" | null`
    )
  })

  it("issue 27 finding 6: advisor and MCP results are server tool results; MCP calls are server calls", () => {
    for (const type of ["advisor_tool_result", "mcp_tool_result"]) {
      assert.isTrue(isServerToolResult({ type }), type)
      assert.isFalse(isUnknownBlock({ type }), type)
    }
    assert.isTrue(isServerToolCall({ type: "mcp_tool_use" }))
    assert.isTrue(isServerToolCall({ type: "server_tool_use" }))
    assert.isFalse(isServerToolCall({ type: "tool_use" }))
    const turn: Message = {
      role: "assistant",
      content: [
        { type: "mcp_tool_listing", mcp_server_name: "db", tools: [] } as ContentBlock,
        { type: "mcp_tool_use", id: "mcptoolu_1", name: "query", server_name: "db", input: { q: 1 } },
        { type: "mcp_tool_result", tool_use_id: "mcptoolu_1", content: [{ type: "text", text: "rows" }] },
        { type: "fallback", from: { model: "a" }, to: { model: "b" }, trigger: null } as ContentBlock,
        { type: "server_tool_use", id: "srvtoolu_2", name: "advisor", input: {} },
        { type: "advisor_tool_result", tool_use_id: "srvtoolu_2", content: { type: "advisor_result", text: "ok" } }
      ]
    }
    const input = [{ role: "user", content: "q" }, turn]
    assert.strictEqual<unknown>(decodeMessagesSync(input), input)
    try {
      decodeMessagesSync([{ role: "assistant", content: [{ type: "mcp_tool_use", id: "m", name: "q", input: {} }] }])
      assert.fail("expected a MessageDecodeError")
    } catch (error) {
      assert.strictEqual(
        (error as MessageDecodeError).message,
        "messages[0].content[0].server_name (mcp_tool_use): Missing key"
      )
    }
  })

  it("decodes every real session in the corpus", () => {
    for (const session of corpus()) assert.strictEqual(decodeMessagesSync(session.messages), session.messages)
  })

  it("type-checks both directions against @anthropic-ai/sdk", () => {
    const sdk: Array<Anthropic.MessageParam> = [
      { role: "user", content: "hi" },
      {
        role: "assistant",
        content: [
          { type: "thinking", thinking: "t", signature: "s" },
          { type: "tool_use", id: "t1", name: "bash", input: { command: "ls" } }
        ]
      },
      {
        role: "user",
        content: [{ type: "tool_result", tool_use_id: "t1", content: "ok", cache_control: { type: "ephemeral" } }]
      },
      { role: "system", content: "mid-conversation system message" }
    ]
    // SDK -> ours: MessageParam[] is accepted as it is.
    const ours: ReadonlyArray<Message> = sdk
    // ours -> SDK: messages this library builds are MessageParams.
    const built: BuiltMessage = userText("summary")
    const back: Anthropic.MessageParam = built
    const request: Anthropic.MessageCreateParamsNonStreaming = { model: "m", max_tokens: 1, messages: [...sdk, back] }
    // @ts-expect-error a role the API does not have is rejected at compile time
    const wrong: Message = { role: "tool", content: "x" }
    assert.strictEqual(ours.length + request.messages.length + wrong.content.length, 10)
  })
})
