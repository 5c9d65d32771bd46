/**
 * Generated system prompts and tools carrying the caller's own `cache_control` marks (none to five, each with no
 * `ttl`, `"5m"` or `"1h"`), under `cacheTtl` `"5m"` or `"1h"`, with and without threads, driven through `Conversation`
 * over generated conversations as an agent loop does. Judged from the rules alone, by this file's own reading of the
 * request (not the library's planner, nor `Validate`):
 *
 * - API-RULES 17: at most 4 `cache_control` breakpoints across tools, system and message blocks together;
 * - the prompt-caching docs: in the order tools, system, messages, no `"1h"` breakpoint after a `"5m"` one;
 * - the caller's marks reach the request as given, and while they leave room the newest block carries a breakpoint;
 * - marks that no request could carry (more than 4, a `"1h"` after a `"5m"`, a `"5m"` one that the library's `"1h"`
 *   breakpoints would follow) fail the conversation's build with a `CacheBreakpointError`, and nothing else does.
 */
import { assert, describe, it } from "@effect/vitest"
import type Anthropic from "@anthropic-ai/sdk"
import { Arbitrary, Cause, Effect, Exit, Layer, Schema } from "effect"
import { Conversation, layerMemory } from "../src/Conversation.ts"
import { asMessageParams } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import type { Request } from "../src/Request.ts"
import { conversationArbitrary } from "./fixtures/Conversation.ts"

const Ttl = Schema.Literals(["none", "5m", "1h"])
const Head = Schema.Struct({
  system: Schema.Literals(["absent", "string", "blocks"]),
  systemBlocks: Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 4 })),
  tools: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 3 })),
  /**
   * The marks, each at its position among the markable items (tools, then system blocks) modulo their number, or the
   * next unmarked one: as many marks as items allow.
   */
  marks: Schema.Array(Schema.Struct({ at: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 5 })), ttl: Ttl }))
    .check(Schema.isMaxLength(5)),
  /** The marks' lifetimes put in the order the API accepts (the longer first), else left as drawn. */
  ordered: Schema.Boolean,
  cacheTtl: Schema.Literals(["5m", "1h"]),
  threads: Schema.Boolean
})
type Head = typeof Head.Type

const rank = (ttl: "none" | "5m" | "1h"): number => ttl === "1h" ? 0 : 1

const LONG = "alpha beta gamma delta ".repeat(400)

/** The options a generated head gives: a system prompt and tools, with the caller's marks on them. */
const optionsOf = (head: Head) => {
  const items: Array<{ text?: string; name?: string; cache_control?: { type: "ephemeral"; ttl?: "5m" | "1h" } }> = [
    ...Array.from({ length: head.tools }, (_, i) => ({ name: `tool${i}`, description: LONG, input_schema: {} })),
    ...(head.system === "blocks"
      ? Array.from({ length: head.systemBlocks }, (_, i) => ({ type: "text", text: `part ${i}: ${LONG}` }))
      : [])
  ]
  const marks = head.marks.slice(0, items.length)
  const ttls = head.ordered ? [...marks.map((m) => m.ttl)].sort((a, b) => rank(a) - rank(b)) : marks.map((m) => m.ttl)
  const positions: Array<number> = []
  for (const mark of marks) {
    let at = mark.at % items.length
    while (positions.includes(at)) at = (at + 1) % items.length
    positions.push(at)
  }
  positions.sort((a, b) => a - b).forEach((at, i) => {
    const ttl = ttls[i]!
    items[at]!.cache_control = ttl === "none" ? { type: "ephemeral" } : { type: "ephemeral", ttl }
  })
  const tools = items.slice(0, head.tools) as unknown as Array<Anthropic.ToolUnion>
  const system = head.system === "absent"
    ? undefined
    : head.system === "string"
    ? LONG
    : items.slice(head.tools) as Array<Anthropic.TextBlockParam>
  return { tools, system }
}

type Marked = { readonly cache_control?: { readonly type?: string; readonly ttl?: string } | null | undefined }

/** Every breakpoint of a request in the API's order (tools, system, messages): the block and its lifetime. */
const breakpointsOf = (request: Request): Array<{ readonly block: unknown; readonly ttl: string }> => {
  const out: Array<{ readonly block: unknown; readonly ttl: string }> = []
  const visit = (items: unknown) => {
    if (!Array.isArray(items)) return
    for (const item of items as Array<Marked>) {
      if (item.cache_control != null) out.push({ block: item, ttl: item.cache_control.ttl ?? "5m" })
    }
  }
  visit(request.tools)
  visit(request.system)
  for (const m of request.messages) visit(m.content)
  return out
}

/** The lifetimes of the caller's marks, tools then system; a mark with no `ttl` is `"5m"`. */
const callerTtls = (options: ReturnType<typeof optionsOf>): Array<string> =>
  [...options.tools, ...(Array.isArray(options.system) ? options.system : [])].flatMap((item) => {
    const control = (item as Marked).cache_control
    return control == null ? [] : [control.ttl ?? "5m"]
  })

/** No `"1h"` after a `"5m"`. */
const ordered = (ttls: ReadonlyArray<string>): boolean => {
  const short = ttls.indexOf("5m")
  return short < 0 || !ttls.slice(short).includes("1h")
}

/** Whether the caller's marks are refused, by the rules: too many, out of order, or before the library's `"1h"`. */
const refused = (ttls: ReadonlyArray<string>, cacheTtl: "5m" | "1h"): boolean =>
  ttls.length > 4 || !ordered(ttls) || (cacheTtl === "1h" && ttls.length < 4 && ttls.includes("5m"))

/** The last block of a request's messages that may carry a breakpoint (not thinking, not blank text). */
const newestMarkable = (request: Request): Marked | undefined => {
  for (let m = request.messages.length - 1; m >= 0; m--) {
    const content = request.messages[m]!.content
    if (typeof content === "string") return undefined // a string content the library did not mark: none
    for (let b = content.length - 1; b >= 0; b--) {
      const block = content[b] as { readonly type: string; readonly text?: string } & Marked
      if (block.type === "thinking" || block.type === "redacted_thinking") continue
      if (block.type === "text" && (block.text ?? "").trim() === "") continue
      return block
    }
  }
  return undefined
}

const checkRequest = (
  request: Request,
  options: ReturnType<typeof optionsOf>,
  head: Head,
  label: string
): void => {
  const marks = breakpointsOf(request)
  const ttls = marks.map((m) => m.ttl)
  assert.isAtMost(marks.length, 4, `${label}: ${marks.length} breakpoints ${JSON.stringify(ttls)}`)
  assert.isTrue(ordered(ttls), `${label}: a 1h breakpoint after a 5m one: ${JSON.stringify(ttls)}`)
  if (request.thread?.type === "continue") return // no system, no tools: the whole request is checked beside it
  // the caller's marked items reach the request as given; the others at most gain the library's mark
  const sameItems = (sent: unknown, given: ReadonlyArray<unknown>, part: string) => {
    assert.strictEqual((sent as ReadonlyArray<unknown>).length, given.length, `${label}: ${part}`)
    given.forEach((item, i) => {
      const out = (sent as ReadonlyArray<unknown>)[i]
      if ((item as Marked).cache_control != null) assert.strictEqual(out, item, `${label}: ${part}[${i}] as given`)
      else {assert.deepStrictEqual({ ...out as object, cache_control: undefined }, {
          ...item as object,
          cache_control: undefined
        })}
    })
  }
  sameItems(request.tools ?? [], options.tools, "tools")
  if (Array.isArray(options.system)) sameItems(request.system, options.system, "system")
  // the library's own breakpoints ask for the policy's lifetime
  const caller = callerTtls(options).length
  for (const m of marks.slice(caller)) assert.strictEqual(m.ttl, head.cacheTtl, `${label}: the library's ttl`)
  if (caller < 4 && (options.system !== undefined || options.tools.length > 0)) {
    const newest = newestMarkable(request)
    if (newest !== undefined) assert.isDefined(newest.cache_control ?? undefined, `${label}: the newest block`)
  }
}

/** Sends `session` through a `Conversation` with `head`'s options, checking every request it prepares. */
const run = (session: ReadonlyArray<Message>, head: Head) => {
  const options = optionsOf(head)
  const ttls = callerTtls(options)
  return Effect.gen(function* () {
    const conversation = yield* Conversation
    let prepared = 0
    let id = 0
    for (const message of asMessageParams(session)) {
      if (message.role !== "assistant") {
        yield* conversation.append(message)
        continue
      }
      const { epoch, fullRequest, request } = yield* conversation.prepare
      checkRequest(request, options, head, `request ${prepared}`)
      if (fullRequest !== undefined) checkRequest(fullRequest, options, head, `request ${prepared}, whole`)
      prepared++
      const reply = {
        id: `msg_${id++}`,
        type: "message",
        role: "assistant",
        content: message.content,
        stop_reason: "end_turn",
        usage: { input_tokens: 2_000, output_tokens: 50 }
      }
      yield* conversation.recordReply(reply as never, undefined, { requestEpoch: epoch })
    }
  }).pipe(
    Effect.provide(
      layerMemory({
        ...options,
        model: "claude-sonnet-4-5",
        threads: head.threads,
        minSavings: 0,
        policy: CompactionPolicy.makeUnsafe({ cacheTtl: head.cacheTtl })
      }).pipe(Layer.provide(ExtractiveSummarizer.layer))
    ),
    Effect.exit,
    Effect.map((exit) => {
      if (refused(ttls, head.cacheTtl)) {
        // refused when the conversation is built: a typed failure, before any request
        assert.isTrue(Exit.isFailure(exit), `refused marks ${JSON.stringify(ttls)} under ${head.cacheTtl}`)
        const failed = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail") : undefined
        assert.strictEqual(
          (failed as { readonly error?: { readonly _tag?: string } })?.error?._tag,
          "CacheBreakpointError"
        )
      } else assert.isTrue(Exit.isSuccess(exit), Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "")
    })
  )
}

describe("the caller's cache_control marks beside the library's breakpoints", () => {
  it.effect.prop(
    "every prepared request carries at most 4 breakpoints, none 1h after 5m; impossible marks are refused",
    [conversationArbitrary(), Arbitrary.schema(Head)],
    ([session, head]) => run(session, head),
    { timeout: 180_000, arbitrary: { runs: 300 } }
  )
})
