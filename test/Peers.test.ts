/**
 * Guards for the peer benchmarks (bench/peers.bench.ts): the converters keep every piece of content, and every peer
 * call the benchmark times does real work on the same inputs (so no row times a no-op or an error path).
 */
import { assert, describe, it } from "@effect/vitest"
import { AIMessage, type BaseMessage, HumanMessage, ToolMessage } from "@langchain/core/messages"
import type { ModelMessage } from "ai"
import {
  GENERATED_SIZES,
  KEEP_RECENT_MESSAGES,
  KEEP_RECENT_TOKENS,
  ours,
  peers,
  type PreparedSession,
  prepareSession,
  prepareWorkload
} from "../bench/peers/adapters.ts"
import { blockAsText, type PiMessage, toAiSdk, toLangChain, toPi } from "../bench/peers/convert.ts"
import { countTokensApproximately } from "langchain"
import type { ContentBlock, Message } from "../src/Message.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { conversationArbitrary, generateSession } from "./fixtures/Conversation.ts"
import { isImage, isRedactedThinking, isText, isThinking, isToolResult, isToolUse } from "../src/internal/blocks.ts"

// ============================================================================
// Content pieces: every string a converter must carry over, in a format-neutral form
// ============================================================================

const textPiece = (text: string): Array<string> => text.length === 0 ? [] : [`text:${text}`]
const imagePiece = (mime: string, data: string) => `image:${mime}:${data}`
const callPiece = (id: string, name: string, input: unknown) => `call:${id}:${name}:${JSON.stringify(input)}`

const sourcePieces = (block: ContentBlock): Array<string> => {
  if (isText(block)) return textPiece(block.text)
  if (isThinking(block)) return [`thinking:${block.thinking}:${block.signature ?? ""}`]
  if (isRedactedThinking(block)) return [`redacted:${block.data}`]
  if (isToolUse(block)) return [callPiece(block.id, block.name, block.input)]
  if (isToolResult(block)) {
    const content = block.content
    const inner = content === undefined
      ? []
      : typeof content === "string"
      ? textPiece(content)
      : content.flatMap(sourcePieces)
    return [`result:${block.tool_use_id}`, ...inner]
  }
  if (isImage(block) && block.source.type === "base64") return [imagePiece(block.source.media_type, block.source.data)]
  return textPiece(blockAsText(block))
}

const ours_ = (messages: ReadonlyArray<Message>): Array<string> =>
  messages.flatMap((m) => typeof m.content === "string" ? textPiece(m.content) : m.content.flatMap(sourcePieces))

const piPieces = (messages: ReadonlyArray<PiMessage>): Array<string> =>
  messages.flatMap((m): Array<string> => {
    const part = (b: { type: string; text?: string; data?: string; mimeType?: string }): Array<string> =>
      b.type === "image" ? [imagePiece(b.mimeType!, b.data!)] : textPiece(b.text ?? "")
    if (m.role === "user") return typeof m.content === "string" ? textPiece(m.content) : m.content.flatMap(part)
    if (m.role === "toolResult") return [`result:${m.toolCallId}`, ...m.content.flatMap(part)]
    return m.content.flatMap((b): Array<string> => {
      if (b.type === "text") return textPiece(b.text)
      if (b.type === "thinking") {
        return b.redacted === true
          ? [`redacted:${b.thinkingSignature}`]
          : [`thinking:${b.thinking}:${b.thinkingSignature ?? ""}`]
      }
      return [callPiece(b.id, b.name, b.arguments)]
    })
  })

type LcPart = {
  type: string
  text?: string
  thinking?: string
  signature?: string
  data?: string
  image_url?: { url: string }
}

const lcPart = (b: LcPart): Array<string> => {
  if (b.type === "image_url") {
    const match = /^data:([^;]+);base64,(.*)$/s.exec(b.image_url!.url)!
    return [imagePiece(match[1]!, match[2]!)]
  }
  if (b.type === "thinking") return [`thinking:${b.thinking}:${b.signature ?? ""}`]
  if (b.type === "redacted_thinking") return [`redacted:${b.data}`]
  return textPiece(b.text ?? "")
}

const lcContent = (content: BaseMessage["content"]): Array<string> =>
  typeof content === "string" ? textPiece(content) : (content as Array<LcPart>).flatMap(lcPart)

const langchainPieces = (messages: ReadonlyArray<BaseMessage>): Array<string> =>
  messages.flatMap((m): Array<string> => {
    if (ToolMessage.isInstance(m)) return [`result:${m.tool_call_id}`, ...lcContent(m.content)]
    if (AIMessage.isInstance(m)) {
      return [...lcContent(m.content), ...(m.tool_calls ?? []).map((c) => callPiece(c.id!, c.name, c.args))]
    }
    return lcContent(m.content)
  })

const aiPieces = (messages: ReadonlyArray<ModelMessage>): Array<string> =>
  messages.flatMap((m): Array<string> => {
    if (typeof m.content === "string") return textPiece(m.content)
    return m.content.flatMap((p): Array<string> => {
      switch (p.type) {
        case "text":
          return textPiece(p.text)
        case "image":
          return [imagePiece(p.mediaType!, p.image as string)]
        case "reasoning": {
          const anthropic = p.providerOptions?.anthropic as { signature?: string; redactedData?: string } | undefined
          return anthropic?.redactedData !== undefined
            ? [`redacted:${anthropic.redactedData}`]
            : [`thinking:${p.text}:${anthropic?.signature ?? ""}`]
        }
        case "tool-call":
          return [callPiece(p.toolCallId, p.toolName, p.input)]
        case "tool-result": {
          const out = p.output
          const inner = out.type === "content"
            ? out.value.flatMap((v) =>
              v.type === "text" ? textPiece(v.text) : v.type === "media" ? [imagePiece(v.mediaType, v.data)] : []
            )
            : out.type === "text" || out.type === "error-text"
            ? textPiece(out.value)
            : []
          return [`result:${p.toolCallId}`, ...inner]
        }
        default:
          return [`unexpected:${p.type}`]
      }
    })
  })

/** LangChain moves tool calls out of the content into `tool_calls`, so compare the pieces as multisets. */
const sorted = (pieces: ReadonlyArray<string>): Array<string> => [...pieces].sort()

const assertOrigin = (origin: ReadonlyArray<number>, length: number) => {
  for (let i = 1; i < origin.length; i++) assert.isTrue(origin[i - 1]! <= origin[i]!, "origin is ascending")
  assert.deepStrictEqual([...new Set(origin)], Array.from({ length }, (_, i) => i), "every message converted")
}

const assertPreserved = (messages: ReadonlyArray<Message>) => {
  const expected = ours_(messages)
  const pi = toPi(messages)
  const lc = toLangChain(messages)
  const ai = toAiSdk(messages)
  assert.deepStrictEqual(piPieces(pi.messages), expected, "pi")
  assert.deepStrictEqual(sorted(langchainPieces(lc.messages)), sorted(expected), "LangChain")
  assert.deepStrictEqual(aiPieces(ai.messages), expected, "AI SDK")
  const nonEmpty = messages.filter((m) => m.content.length > 0).length
  if (nonEmpty === messages.length) {
    assertOrigin(pi.origin, messages.length)
    assertOrigin(lc.origin, messages.length)
    assertOrigin(ai.origin, messages.length)
  }
  assert.deepStrictEqual(pi.entries.map((e) => e.message), [...pi.messages])
}

// ============================================================================
// Converters
// ============================================================================

describe("peer converters", () => {
  it("keep every text, thinking, tool call, tool output and image of the real sessions", () => {
    for (const session of prepareWorkload("real").sessions) assertPreserved(session.messages)
  })

  it("keep every piece of a generated 1k session", () => {
    assertPreserved(generateSession(7, { messages: 1_000 }))
  })

  it.prop(
    "keep every piece of arbitrary conversations (server tools, unknown blocks, aborted calls)",
    [conversationArbitrary({ allowInvalid: true })],
    ([messages]) => assertPreserved(messages),
    { arbitrary: { runs: 500 } }
  )

  it("split a user message holding results and text into results first, then the human message", () => {
    const messages: Array<Message> = [
      { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "read", input: { path: "a" } }] },
      {
        role: "user",
        content: [{ type: "tool_result", tool_use_id: "t1", content: "body", is_error: true }, {
          type: "text",
          text: "and now?"
        }]
      }
    ]
    const pi = toPi(messages).messages
    assert.deepStrictEqual(pi.map((m) => m.role), ["assistant", "toolResult", "user"])
    assert.isTrue(pi[1]!.role === "toolResult" && pi[1]!.isError && pi[1]!.toolName === "read")
    const lc = toLangChain(messages).messages
    assert.isTrue(ToolMessage.isInstance(lc[1]) && lc[1].status === "error" && HumanMessage.isInstance(lc[2]))
    const ai = toAiSdk(messages).messages
    assert.deepStrictEqual(ai.map((m) => m.role), ["assistant", "tool", "user"])
  })
})

// ============================================================================
// Every timed call does real work
// ============================================================================

/** Sessions large enough that every cut and prune has something to do. */
const big = (sessions: ReadonlyArray<PreparedSession>) =>
  sessions.filter((s) => estimateTokens(s.messages) > 2 * KEEP_RECENT_TOKENS)

describe("peer calls on the benchmark inputs", () => {
  const real = prepareWorkload("real")
  const generated = prepareSession("generated-1000", generateSession(GENERATED_SIZES[0], { messages: 1_000 }))
  const all = [...real.sessions, generated]

  it("the workloads hold the expected sessions", () => {
    assert.strictEqual(real.sessions.length, 5)
    assert.strictEqual(big(all).length, 4)
    const again = prepareWorkload(1_000).sessions[0]!
    assert.strictEqual(again.messages.length, generated.messages.length)
  })

  it("every estimator returns a positive total within 25% of ours", () => {
    for (const s of all) {
      const ourTotal = ours.estimate(s)
      assert.strictEqual(ours.estimateUncached(s), ourTotal)
      for (const [name, total] of [["pi", peers.piEstimate(s)], ["LangChain", peers.langchainEstimate(s)]] as const) {
        assert.isTrue(total > 0, `${name} on ${s.name}`)
        assert.isTrue(Math.abs(total / ourTotal - 1) < 0.25, `${name} on ${s.name}: ${total} vs ours ${ourTotal}`)
      }
    }
  })

  it("pi's and our cuts keep about 20k recent tokens, and agree within a few messages", () => {
    for (const s of big(all)) {
      const cut = ours.cut(s)
      const piCut = peers.piCut(s)
      for (const [name, at] of [["ours", cut], ["pi", piCut]] as const) {
        const kept = estimateTokens(s.messages.slice(at))
        assert.isTrue(at > 0 && at < s.messages.length, `${name} cut on ${s.name}: ${at}`)
        assert.isTrue(kept > KEEP_RECENT_TOKENS * 0.75 && kept < KEEP_RECENT_TOKENS * 2, `${name} keeps ${kept}`)
      }
      assert.isTrue(Math.abs(cut - piCut) <= 10, `${s.name}: ours ${cut}, pi ${piCut}`)
    }
  })

  it("LangChain's trimMessages keeps a human-first tail within 20k tokens", async () => {
    for (const s of big(all)) {
      const kept = await peers.langchainTrim(s)
      const total = s.langchain.messages.length
      assert.isTrue(kept.length > 0 && kept.length < total / 2, `${s.name}: kept ${kept.length} of ${total}`)
      assert.isTrue(HumanMessage.isInstance(kept[0]))
      const tokens = countTokensApproximately(kept)
      assert.isTrue(tokens <= KEEP_RECENT_TOKENS && tokens > KEEP_RECENT_TOKENS / 2, `${s.name}: ${tokens}`)
      assert.strictEqual(kept.at(-1)!.content, s.langchain.messages.at(-1)!.content)
    }
  })

  it("our eviction offloads old tool output and shares every unchanged message", () => {
    for (const s of big(all)) {
      const result = ours.evict(s)
      assert.strictEqual(result.messages.length, s.messages.length)
      assert.isTrue(result.offloaded.length > 10 && result.tokensFreed > 0, s.name)
      const changed = result.messages.filter((m, i) => m !== s.messages[i]).length
      assert.isTrue(changed > 0 && changed < s.messages.length / 2, `${s.name}: ${changed} changed`)
      assert.strictEqual(estimateTokens(result.messages), estimateTokens(s.messages) - result.tokensFreed)
    }
  })

  it("the AI SDK's pruneMessages removes old tool parts and keeps the newest messages", () => {
    const toolParts = (messages: ReadonlyArray<ModelMessage>) =>
      messages.reduce(
        (n, m) => n + (typeof m.content === "string" ? 0 : m.content.filter((p) => p.type.startsWith("tool-")).length),
        0
      )
    for (const s of big(all)) {
      const pruned = peers.aiPrune(s)
      const input = s.ai.messages
      assert.isTrue(pruned.length < input.length, s.name)
      assert.isTrue(toolParts(pruned) < toolParts(input) / 2, s.name)
      assert.deepStrictEqual(pruned.slice(-KEEP_RECENT_MESSAGES), input.slice(-KEEP_RECENT_MESSAGES))
    }
  })
})
