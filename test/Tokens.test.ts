import { assert, describe, it } from "@effect/vitest"
import { Arbitrary, Schema } from "effect"
import type { ContentBlock, Message } from "../src/Message.ts"
import { calibrate, estimateContentTokens, estimateMessageTokens, estimateTokens } from "../src/Tokens.ts"
import {
  estimateContentTokensUncached,
  estimateMessageTokensUncached,
  imageSize,
  imageTokens,
  jsonSize,
  MESSAGE_OVERHEAD_TOKENS,
  PDF_PAGE_TOKENS,
  UNKNOWN_IMAGE_TOKENS
} from "../src/internal/estimate.ts"
import { corpus } from "./fixtures/Corpus.ts"
import { conversationArbitrary, generateSession, pngBase64 } from "./fixtures/Conversation.ts"

const b64 = (bytes: ReadonlyArray<number>): string => btoa(String.fromCharCode(...bytes))
const ascii = (s: string): Array<number> => [...s].map((c) => c.charCodeAt(0))
const le16 = (v: number) => [v & 255, (v >> 8) & 255]
const le24 = (v: number) => [v & 255, (v >> 8) & 255, (v >> 16) & 255]
const le32 = (v: number) => [v & 255, (v >> 8) & 255, (v >> 16) & 255, (v >>> 24) & 255]

const gif = (w: number, h: number) => b64([...ascii("GIF89a"), ...le16(w), ...le16(h), 0, 0, 0])
const jpeg = (w: number, h: number) =>
  b64([
    0xff,
    0xd8, // SOI
    0xff,
    0xe0,
    0,
    16,
    ...ascii("JFIF"),
    0,
    1,
    1,
    0,
    0,
    1,
    0,
    1,
    0,
    0, // APP0, 16 bytes
    0xff,
    0xc0,
    0,
    17,
    8,
    h >> 8,
    h & 255,
    w >> 8,
    w & 255,
    3,
    1,
    0x22,
    0,
    2,
    0x11,
    1,
    3,
    0x11,
    1
  ])
const webpVp8x = (w: number, h: number) =>
  b64([...ascii("RIFF"), ...le32(30), ...ascii("WEBPVP8X"), ...le32(10), 0, 0, 0, 0, ...le24(w - 1), ...le24(h - 1)])
const webpVp8l = (w: number, h: number) => {
  const bits = ((w - 1) & 0x3fff) | (((h - 1) & 0x3fff) << 14)
  return b64([...ascii("RIFF"), ...le32(30), ...ascii("WEBPVP8L"), ...le32(10), 0x2f, ...le32(bits), 0, 0, 0, 0, 0])
}
const webpVp8 = (w: number, h: number) =>
  b64([
    ...ascii("RIFF"),
    ...le32(30),
    ...ascii("WEBPVP8 "),
    ...le32(10),
    0,
    0,
    0,
    0x9d,
    0x01,
    0x2a,
    ...le16(w),
    ...le16(h),
    0,
    0
  ])

const msg = (...content: ReadonlyArray<ContentBlock>): Message => ({ role: "user", content })

describe("Tokens", () => {
  it("reads image sizes from PNG, GIF, JPEG and WebP headers", () => {
    assert.deepStrictEqual(imageSize(pngBase64(800, 600)), { width: 800, height: 600 })
    assert.deepStrictEqual(imageSize(gif(320, 200)), { width: 320, height: 200 })
    assert.deepStrictEqual(imageSize(jpeg(1024, 768)), { width: 1024, height: 768 })
    assert.deepStrictEqual(imageSize(webpVp8x(1920, 1080)), { width: 1920, height: 1080 })
    assert.deepStrictEqual(imageSize(webpVp8l(300, 150)), { width: 300, height: 150 })
    assert.deepStrictEqual(imageSize(webpVp8(640, 480)), { width: 640, height: 480 })
    assert.isUndefined(imageSize(btoa("not an image at all")))
    assert.isUndefined(imageSize("%%%not base64"))
  })

  it("charges images by Anthropic's formula, downscaled to 1568 px and 1.15 MP", () => {
    assert.strictEqual(imageTokens({ width: 200, height: 200 }), Math.ceil(40_000 / 750))
    assert.strictEqual(imageTokens({ width: 1000, height: 1000 }), Math.ceil(1_000_000 / 750))
    // 4000x3000 is scaled to about 1.15 MP: ~1533 tokens, never the raw 16,000.
    assert.isAtMost(imageTokens({ width: 4000, height: 3000 }), 1534)
    assert.isAtLeast(imageTokens({ width: 4000, height: 3000 }), 1500)
    // a long strip is limited by its long edge
    assert.strictEqual(imageTokens({ width: 3136, height: 100 }), Math.ceil(1568 * 50 / 750))
  })

  it("counts an image by its pixels, not its base64 length", () => {
    const small = msg({
      type: "image",
      source: { type: "base64", media_type: "image/png", data: pngBase64(100, 100, 50_000) }
    })
    assert.strictEqual(estimateMessageTokens(small), Math.ceil(10_000 / 750) + MESSAGE_OVERHEAD_TOKENS)
    const url = msg({ type: "image", source: { type: "url", url: "https://example.com/x.png" } })
    assert.strictEqual(estimateMessageTokens(url), UNKNOWN_IMAGE_TOKENS + MESSAGE_OVERHEAD_TOKENS)
  })

  it("charges a PDF per page", () => {
    const pdf = btoa("%PDF-1.4\n1 0 obj <</Type /Pages /Count 2>>\n2 0 obj <</Type /Page>>\n3 0 obj <</Type/Page>>\n")
    const doc = msg({ type: "document", source: { type: "base64", media_type: "application/pdf", data: pdf } })
    assert.strictEqual(estimateMessageTokens(doc), 2 * PDF_PAGE_TOKENS + MESSAGE_OVERHEAD_TOKENS)
    const text = msg({ type: "document", source: { type: "text", media_type: "text/plain", data: "x".repeat(400) } })
    assert.strictEqual(estimateMessageTokens(text), 100 + MESSAGE_OVERHEAD_TOKENS)
  })

  it("counts text, thinking, tool calls, tool results and unknown blocks at ~4 chars per token", () => {
    assert.strictEqual(estimateMessageTokens({ role: "user", content: "x".repeat(40) }), 10 + MESSAGE_OVERHEAD_TOKENS)
    const assistant: Message = {
      role: "assistant",
      content: [
        { type: "text", text: "a".repeat(8) },
        { type: "thinking", thinking: "b".repeat(8), signature: "ignored-signature" },
        { type: "tool_use", id: "t", name: "bash", input: { command: "ls" } }
      ]
    }
    const toolChars = "bash".length + JSON.stringify({ command: "ls" }).length
    assert.strictEqual(estimateMessageTokens(assistant), Math.ceil((16 + toolChars) / 4) + MESSAGE_OVERHEAD_TOKENS)
    const results = msg(
      { type: "tool_result", tool_use_id: "t", content: "c".repeat(12) },
      { type: "tool_result", tool_use_id: "u", content: [{ type: "text", text: "d".repeat(4) }] }
    )
    assert.strictEqual(estimateMessageTokens(results), 4 + MESSAGE_OVERHEAD_TOKENS)
    const unknown = { type: "future", payload: [1, 2, 3] } as ContentBlock
    assert.strictEqual(
      estimateMessageTokens(msg(unknown)),
      Math.ceil(JSON.stringify(unknown).length / 4) + MESSAGE_OVERHEAD_TOKENS
    )
  })

  it.prop(
    "jsonSize equals the JSON length for values without escapes",
    [Arbitrary.schema(
      Schema.Json.pipe(
        Schema.check(Schema.makeFilter((json) => /^[ -[\]-~]*$/.test(JSON.stringify(json))))
      )
    )],
    ([value]) => {
      assert.strictEqual(jsonSize(value), JSON.stringify(value).length)
    },
    { arbitrary: { runs: 2000 } }
  )

  it.prop(
    "estimation is additive per message, never throws, and the cache never changes a result",
    [conversationArbitrary({ allowInvalid: true }), conversationArbitrary()],
    ([a, b]) => {
      const whole = [...a, ...b]
      assert.strictEqual(estimateTokens(whole), estimateTokens(a) + estimateTokens(b))
      let sum = 0
      for (const message of whole) {
        const uncached = estimateMessageTokensUncached(message)
        assert.strictEqual(estimateContentTokens(message.content) + MESSAGE_OVERHEAD_TOKENS, uncached)
        assert.strictEqual(estimateContentTokensUncached(message.content) + MESSAGE_OVERHEAD_TOKENS, uncached)
        assert.strictEqual(estimateMessageTokens(message), uncached)
        assert.strictEqual(estimateMessageTokens(message), uncached)
        sum += uncached
      }
      assert.strictEqual(estimateTokens(whole), sum)
    },
    { arbitrary: { runs: 2000 } }
  )

  it("appending one message adds exactly its estimate", () => {
    const session = generateSession(7, { messages: 2000 })
    const before = estimateTokens(session)
    const next: Message = { role: "user", content: "one more" }
    assert.strictEqual(estimateTokens([...session, next]), before + estimateMessageTokens(next))
  })

  it("issue 27 finding 1: a system message with no content costs its framing", () => {
    const settings = { role: "system", output_config: { effort: "low" } } as unknown as Message
    assert.strictEqual(estimateMessageTokens(settings), MESSAGE_OVERHEAD_TOKENS)
    assert.strictEqual(estimateMessageTokensUncached(settings), MESSAGE_OVERHEAD_TOKENS)
    const list: Array<Message> = [{ role: "user", content: "abcd" }, { role: "assistant", content: "efgh" }, settings]
    assert.strictEqual(estimateTokens(list), 1 + 1 + 3 * MESSAGE_OVERHEAD_TOKENS)
  })

  it("calibrate is the ratio of reported to estimated tokens", () => {
    const messages: ReadonlyArray<Message> = [{ role: "user", content: "x".repeat(384) }]
    assert.strictEqual(calibrate(messages, 150), 1.5)
    assert.strictEqual(calibrate([], 10), 1)
  })

  it("is within a factor of 1.5 of the provider-reported prompt at every reply where the view is known", () => {
    // The view is known up to a session's first real compaction. The system prompt and tool definitions are not in
    // the files, so their fixed size is taken from the first reply (reported prompt minus our estimate of its
    // messages) and added to every later estimate.
    const usageOf = (m: unknown): number | undefined => {
      const u = (m as { _usage?: Record<string, number | null | undefined> })._usage
      if (u === undefined) return undefined
      const total = (u.input ?? u.input_tokens ?? 0) + (u.cacheRead ?? u.cache_read_input_tokens ?? 0) +
        (u.cacheWrite ?? u.cache_creation_input_tokens ?? 0)
      return total > 0 ? total : undefined
    }
    let checked = 0
    for (const session of corpus()) {
      const known = session.meta.compactions?.[0]?.at_message_index ?? session.messages.length
      const points: Array<readonly [number, number]> = []
      session.messages.forEach((message, i) => {
        const reported = usageOf(message)
        if (i < known && reported !== undefined) points.push([estimateTokens(session.messages.slice(0, i)), reported])
      })
      if (points.length === 0) continue
      const overhead = points[0]![1] - points[0]![0]
      for (const [estimate, reported] of points) {
        const ratio = (estimate + overhead) / reported
        assert.isTrue(ratio >= 1 / 1.5 && ratio <= 1.5, `${session.name}: ratio ${ratio.toFixed(3)}`)
        checked++
      }
    }
    assert.isAbove(checked, 800)
  })
})
