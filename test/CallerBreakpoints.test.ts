/**
 * The caller's own `cache_control` marks on system blocks and tools, beside the library's breakpoints. The API takes
 * at most 4 breakpoints across tools, system and message blocks together (API-RULES 17), and a longer lifetime never
 * after a shorter one in that order (the prompt-caching docs). Judged here by counting and ordering the request's
 * marks directly: the library's planner and `Validate` are not asked.
 */
import { assert, describe, it } from "@effect/vitest"
import type Anthropic from "@anthropic-ai/sdk"
import { planBreakpoints } from "../src/Cache.ts"
import { appendMessage, type ConversationState, emptyState, recordReply } from "../src/ConversationState.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { open } from "../src/PromiseConversation.ts"
import { type Request, requestOf } from "../src/Request.ts"
import { breakpointBefore, lastBreakpoint } from "../src/internal/breakpoints.ts"
import { generateSession } from "./fixtures/Conversation.ts"

const words = (n: number): string => Array.from({ length: n }, (_, i) => ["alpha", "beta", "gamma"][i % 3]).join(" ")
const FIVE = { type: "ephemeral" } as const
const HOUR = { type: "ephemeral", ttl: "1h" } as const

type Marked = { readonly cache_control?: { readonly type?: string; readonly ttl?: string } | null | undefined }

/** Every mark of a request in the API's order (tools, system, messages): where it is and its lifetime. */
const marksOf = (request: Request): Array<{ readonly at: string; readonly ttl: string }> => {
  const out: Array<{ readonly at: string; readonly ttl: string }> = []
  const visit = (at: string, items: unknown) => {
    if (!Array.isArray(items)) return
    items.forEach((item: Marked, i) => {
      if (item.cache_control != null) out.push({ at: `${at}[${i}]`, ttl: item.cache_control.ttl ?? "5m" })
    })
  }
  visit("tools", request.tools)
  visit("system", request.system)
  request.messages.forEach((m, i) => visit(`messages[${i}].content`, m.content))
  return out
}

/** At most 4 marks, and no `"1h"` after a `"5m"`. */
const assertValid = (request: Request, label: string): void => {
  const marks = marksOf(request)
  assert.isAtMost(marks.length, 4, `${label}: ${JSON.stringify(marks)}`)
  const firstShort = marks.findIndex((m) => m.ttl === "5m")
  if (firstShort >= 0) {
    assert.deepStrictEqual(marks.slice(firstShort).filter((m) => m.ttl === "1h"), [], `${label}: 1h after 5m`)
  }
}

const tools = (n: number): Array<Anthropic.ToolUnion> =>
  Array.from({ length: n }, (_, i) => ({
    name: `tool${i}`,
    description: words(1500),
    input_schema: { type: "object" as const }
  }))

/** A state over a seeded session long enough to carry the frontier and the newest marks. */
const longState = (): ConversationState => {
  let state = emptyState()
  for (const message of generateSession(3, { messages: 80 })) {
    state = message.role === "assistant"
      ? recordReply(state, message as never, { input_tokens: 1, output_tokens: 1 }).state
      : appendMessage(state, message as never).state
  }
  return state
}

/** What a `requestOf` call throws, or `{}` when it returns. */
const thrown = (f: () => unknown): { readonly _tag?: string; readonly reason?: string; readonly path?: string } => {
  try {
    f()
  } catch (error) {
    return error as never
  }
  return {}
}

describe("the caller's cache_control on system blocks and tools", () => {
  const state = longState()
  const docsPattern = [
    { type: "text" as const, text: `Instructions. ${words(2000)}`, cache_control: FIVE },
    { type: "text" as const, text: `Notes. ${words(2000)}` }
  ]

  it("the docs' pattern (a mark on the first system block) keeps it, and the request carries at most 4", () => {
    const request = requestOf(state, docsPattern, { tools: tools(2), minCacheTokens: 1024 })
    assertValid(request, "docs pattern")
    const marks = marksOf(request)
    assert.deepStrictEqual(marks.slice(0, 2).map((m) => m.at), ["system[0]", "system[1]"])
    assert.strictEqual(marks.length, 4, "the library fills what the caller left")
    assert.deepStrictEqual((request.system as Array<Marked>)[0], docsPattern[0])
    // the newest block keeps its mark: the next request reads everything this one sent
    const last = request.messages.at(-1)!.content as Array<Marked>
    assert.isDefined(last.at(-1)!.cache_control)
  })

  it("a caller's mark that already ends system and tools stays as given, and the library adds none there", () => {
    const system = [docsPattern[1]!, { ...docsPattern[1]!, cache_control: HOUR }]
    const request = requestOf(state, system, { tools: tools(1), minCacheTokens: 1024 })
    assertValid(request, "marked end")
    assert.deepStrictEqual((request.system as Array<Marked>)[1]!.cache_control, HOUR)
    assert.strictEqual(marksOf(request).filter((m) => m.at.startsWith("system")).length, 1)
    // the caller's, the frontier and the newest block (no previous frontier without `before`)
    assert.strictEqual(marksOf(request).length, 3)
  })

  it("marks on tools count too; with no system prompt the last tool's own mark is kept", () => {
    const marked = tools(3).map((t, i) =>
      i === 0 ? { ...t, cache_control: HOUR } : i === 2 ? { ...t, cache_control: FIVE } : t
    )
    const request = requestOf(state, undefined, { tools: marked, minCacheTokens: 1024 })
    assertValid(request, "tools")
    assert.deepStrictEqual(marksOf(request).slice(0, 2), [{ at: "tools[0]", ttl: "1h" }, { at: "tools[2]", ttl: "5m" }])
    assert.strictEqual(marksOf(request).length, 4)
  })

  it("three caller marks leave one: the newest block; four leave none", () => {
    const three = [0, 1, 2].map(() => ({ type: "text" as const, text: words(800), cache_control: FIVE }))
    const withThree = requestOf(state, three, { minCacheTokens: 1024 })
    assertValid(withThree, "three")
    const messageMarks = marksOf(withThree).filter((m) => m.at.startsWith("messages"))
    assert.strictEqual(messageMarks.length, 1)
    assert.isTrue(messageMarks[0]!.at.startsWith(`messages[${withThree.messages.length - 1}]`))
    const four = [...three, { type: "text" as const, text: "four", cache_control: FIVE }]
    const withFour = requestOf(state, four, { minCacheTokens: 1024, ttl: "1h" })
    assert.deepStrictEqual(marksOf(withFour).map((m) => m.at), ["system[0]", "system[1]", "system[2]", "system[3]"])
  })

  it("with cacheTtl 1h the caller's 1h marks come first and every library mark is 1h", () => {
    const system = [{ ...docsPattern[0]!, cache_control: HOUR }, docsPattern[1]!]
    const request = requestOf(state, system, { tools: tools(1), minCacheTokens: 1024, ttl: "1h" })
    assertValid(request, "1h")
    assert.isTrue(marksOf(request).every((m) => m.ttl === "1h"))
  })

  it("marks no request could carry throw a CacheBreakpointError naming the mark", () => {
    const five = [0, 1, 2, 3, 4].map(() => ({ type: "text" as const, text: "x", cache_control: FIVE }))
    assert.deepInclude(thrown(() => requestOf(state, five)), {
      _tag: "CacheBreakpointError",
      reason: "TooManyBreakpoints",
      path: "system[4].cache_control"
    })
    const hourAfterFive = [{ type: "text" as const, text: "x", cache_control: HOUR }]
    const fiveTool = tools(1).map((t) => ({ ...t, cache_control: FIVE }))
    assert.deepInclude(thrown(() => requestOf(state, hourAfterFive, { tools: fiveTool })), {
      _tag: "CacheBreakpointError",
      reason: "LongerTtlAfterShorter",
      path: "system[0].cache_control"
    })
    // the docs' pattern under cacheTtl 1h: the library's 1h marks would follow the caller's 5m one
    assert.deepInclude(thrown(() => requestOf(state, docsPattern, { ttl: "1h" })), {
      _tag: "CacheBreakpointError",
      reason: "ShorterTtlThanPolicy",
      path: "system[0].cache_control"
    })
    // four 5m marks leave the library no room: nothing follows them, the request is valid
    assert.deepStrictEqual(thrown(() => requestOf(state, five.slice(0, 4), { ttl: "1h" })), {})
    // a caller that places every breakpoint itself is not second-guessed
    assert.strictEqual(marksOf(requestOf(state, five, { breakpoints: false })).length, 5)
  })

  it("planBreakpoints places at most 4 minus the reserved ones, the newest block first", () => {
    const messages: Array<Message> = generateSession(7, { messages: 60 })
    const options = {
      systemTokens: 5_000,
      hasSystem: true,
      frontier: breakpointBefore(messages, { message: 12, block: 0 }),
      previousFrontier: breakpointBefore(messages, { message: 6, block: 0 }),
      minTokens: 1
    }
    const all = planBreakpoints(messages, options)
    assert.deepStrictEqual(all, {
      system: true,
      blocks: [options.previousFrontier!, options.frontier!, lastBreakpoint(messages)!]
    })
    // by priority: the newest block, system and tools, the frontier, the previous frontier
    const newest = [lastBreakpoint(messages)!]
    assert.deepStrictEqual(planBreakpoints(messages, { ...options, reserved: 1 }), {
      system: true,
      blocks: all.blocks.slice(1)
    })
    assert.deepStrictEqual(planBreakpoints(messages, { ...options, reserved: 2 }), { system: true, blocks: newest })
    assert.deepStrictEqual(planBreakpoints(messages, { ...options, reserved: 3 }), { system: false, blocks: newest })
    assert.deepStrictEqual(planBreakpoints(messages, { ...options, reserved: 4 }), { system: false, blocks: [] })
  })

  it("through PromiseConversation: 30 tool steps under the docs' pattern, and the 1h refusal at open", async () => {
    const reply = (content: Array<unknown>, id: string) => ({
      id,
      type: "message",
      role: "assistant",
      content,
      stop_reason: "tool_use",
      usage: { input_tokens: 100, output_tokens: 10, cache_read_input_tokens: 4_000, cache_creation_input_tokens: 900 }
    })
    // with diagnostics on: the cache prediction reads the request's marks, the caller's among them
    const conversation = await open({ system: docsPattern, tools: tools(2), diagnostics: true })
    await conversation.append({ role: "user", content: `task ${words(3000)}` })
    let grown = 0
    for (let i = 0; i < 30; i++) {
      await conversation.recordReply(
        reply([{ type: "tool_use", id: `toolu_${i}`, name: "tool0", input: {} }], `m${i}`) as never
      )
      await conversation.append({
        role: "user",
        content: [{ type: "tool_result", tool_use_id: `toolu_${i}`, content: words(3000) }]
      })
      const prepared = await conversation.prepare()
      assertValid(prepared.request, `step ${i}`)
      // a step that only grew the view diverges nowhere: the prediction is a full hit
      if (i > 0 && prepared.offloaded.length === 0 && prepared.compaction === undefined) {
        assert.strictEqual(prepared.cachePrediction, null, `step ${i}`)
        grown++
      }
    }
    assert.isAbove(grown, 10)
    await conversation.close()
    const error = await open({ system: docsPattern, policy: CompactionPolicy.makeUnsafe({ cacheTtl: "1h" }) }).then(
      async (hour) => {
        await hour.close()
        return undefined
      },
      (e: unknown) => e as { _tag?: string; message?: string }
    )
    assert.strictEqual(error?._tag, "CacheBreakpointError")
    assert.match(String(error?.message), /^system\[0\]\.cache_control: ttl "5m"/)
  })
})
