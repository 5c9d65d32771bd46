/**
 * Compaction blocks and system messages inserted at many points of generated sessions and corpus windows, through
 * the estimate, the cut, eviction, `compactContext` and `repair`. Each output is judged by the independent checker
 * of API-RULES (`fixtures/ApiRules.ts`, which also gives the API view's start independently of the library), the
 * API view's estimate must be what is reported, and the server's summary text and every system message's text of
 * the API view must survive.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Result } from "effect"
import { compactContext } from "../src/Compact.ts"
import { evictStaleToolResults } from "../src/Evict.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import type { ContentBlock, Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { planForPolicy } from "../src/Cut.ts"
import { estimateMessageTokens, estimateTokens } from "../src/Tokens.ts"
import type { Summarizer } from "../src/Summarizer.ts"
import { countTurns } from "../src/Turns.ts"
import { repairResult, validate } from "../src/Validate.ts"
import { apiViewStart, checkApiRules, formatApiViolations } from "./fixtures/ApiRules.ts"
import { generateSession, prng, thinkingTokens } from "./fixtures/Conversation.ts"
import { corpus } from "./fixtures/Corpus.ts"
import { blocksOf } from "../src/internal/blocks.ts"
import type { SystemMessageFields } from "../src/internal/wireTypes.ts"
import { liveSystemMessages } from "../src/internal/apiView.ts"

const isDeno = "Deno" in globalThis
const CASES = 2_000
const SEED = isDeno ? 0x5eed : 0xa11
/** The seeds of the pipeline property, each run under both runtimes (a case one seed reaches, the other may not). */
const PIPELINE_SEEDS = [0xa11, 0x5eed]

type Rand = () => number

const blocks = (m: Message): Array<ContentBlock> => [...blocksOf(m)]
const textOf = (m: Message): string =>
  blocks(m).map((b) => (b.type === "text" ? (b as { readonly text: string }).text : "")).join("\n")

/** The estimate of what the API processes, summed from the checker's view start (not the library's). */
const viewTokens = (messages: ReadonlyArray<Message>): number => {
  let total = 0
  for (let i = apiViewStart(messages); i < messages.length; i++) total += estimateMessageTokens(messages[i]!)
  return total
}

/** The compaction block that opens the API view: the last one with content in the view's first message (or none). */
const openingBlock = (messages: ReadonlyArray<Message>): ContentBlock | undefined => {
  const start = messages[apiViewStart(messages)]
  if (start === undefined || start.role === "system") return undefined
  const bs = blocks(start)
  for (let b = bs.length - 1; b >= 0; b--) {
    if (bs[b]!.type === "compaction" && typeof (bs[b] as { readonly content?: unknown }).content === "string") {
      return bs[b]
    }
  }
  return undefined
}

/** The server's summary that opens the API view (found here, not by the library), or undefined. */
const serverSummary = (messages: ReadonlyArray<Message>): string | undefined =>
  (openingBlock(messages) as { readonly content?: string } | undefined)?.content

/** The text of every system message of the API view. */
const systemTexts = (messages: ReadonlyArray<Message>): Array<string> =>
  messages.slice(apiViewStart(messages)).filter((m) => m.role === "system").map(textOf)

let counter = 0
const compactionBlock = (rand: Rand): ContentBlock =>
  ({
    type: "compaction",
    content: rand() < 0.15 ? null : `Server summary ${++counter}: the user refactored the lexer; parse.ts changed.`,
    encrypted_content: `enc-${counter}`,
    signature: `sig-${counter}`
  }) as ContentBlock

const systemMessage = (rand: Rand): Message => {
  counter++
  return rand() < 0.7 ? { role: "system", content: `System note ${counter}: from now on, keep answers short.` } : {
    role: "system",
    content: [
      { type: "text", text: `System note ${counter}: the deploy tool is gone.` },
      { type: "tool_removal", tool: { type: "tool_reference", name: "deploy" } } as ContentBlock
    ]
  }
}

/** Where a system message may go (API-RULES 8–11): after a user message, before an assistant message or at the end. */
const systemSlots = (xs: ReadonlyArray<Message>): Array<number> => {
  const slots: Array<number> = []
  for (let q = 1; q <= xs.length; q++) {
    if (xs[q - 1]!.role === "user" && (q === xs.length || xs[q]!.role === "assistant")) slots.push(q)
  }
  return slots
}

/** Inserts 0–2 threshold-mode compaction blocks (first block of an assistant reply) and 0–3 well-placed system messages. */
const insertPoints = (input: ReadonlyArray<Message>, rand: Rand): Array<Message> => {
  const xs = [...input]
  const int = (n: number) => Math.floor(rand() * n)
  const replies = xs.flatMap((m, i) => (m.role === "assistant" ? [i] : []))
  for (let k = int(3); k > 0 && replies.length > 0; k--) {
    const i = replies.splice(int(replies.length), 1)[0]!
    xs[i] = { ...xs[i]!, content: [compactionBlock(rand), ...blocks(xs[i]!)] }
  }
  for (let k = int(4); k > 0; k--) {
    const slots = systemSlots(xs)
    if (slots.length > 0) xs.splice(slots[int(slots.length)]!, 0, systemMessage(rand))
  }
  return xs
}

/** Damage for `repair`: a system message at any place, and perhaps a copy of a compaction block elsewhere. */
const misplace = (input: ReadonlyArray<Message>, rand: Rand): Array<Message> => {
  const xs = [...input]
  const int = (n: number) => Math.floor(rand() * n)
  xs.splice(int(xs.length + 1), 0, systemMessage(rand))
  const withBlock = xs.flatMap((m, i) => (m.role !== "system" && blocks(m)[0]?.type === "compaction" ? [i] : []))
  if (withBlock.length > 0 && rand() < 0.5) {
    const from = xs[withBlock[int(withBlock.length)]!]!
    const to = int(xs.length)
    if (xs[to]!.role === "assistant") xs[to] = { ...xs[to]!, content: [blocks(from)[0]!, ...blocks(xs[to]!)] }
  }
  return xs
}

const base = (
  rand: Rand,
  sessions: ReadonlyArray<ReadonlyArray<Message>>
): { kind: string; messages: Array<Message> } => {
  const int = (n: number) => Math.floor(rand() * n)
  if (rand() < 0.5) {
    return { kind: "generated", messages: generateSession(int(1e9), { messages: 20 + int(100), maxOutput: 8_000 }) }
  }
  const session = sessions[int(sessions.length)]!
  const from = int(Math.max(1, session.length - 40))
  const window = session.slice(from, from + 30 + int(150)).map(({ content, role }) => ({ role, content }) as Message)
  const repaired = repairResult(window)
  return {
    kind: "corpus",
    messages: Result.isSuccess(repaired) ? repaired.success.messages : [{ role: "user", content: "hello" }]
  }
}

const extractive = <A, E>(effect: Effect.Effect<A, E, Summarizer>) =>
  Effect.runSync(effect.pipe(Effect.provide(ExtractiveSummarizer.layer)))

/** The checker's verdict (empty when accepted); rule 15 is on-demand only and judged where the list is sent so. */
const rejected = (messages: ReadonlyArray<Message>, mode: "threshold" | "on-demand" = "threshold"): string =>
  formatApiViolations(checkApiRules(messages, { mode }).filter((v) => mode === "threshold" || v.rule !== 15))

describe("compaction blocks and system messages at many points", () => {
  it.each(PIPELINE_SEEDS)(
    `${CASES} sessions through the estimate, the cut, eviction, compactContext and repair (seed %i)`,
    (seed) => {
      const rand = prng(seed)
      const int = (n: number) => Math.floor(rand() * n)
      const sessions = corpus().map((s) => s.messages as ReadonlyArray<Message>)
      const counts = new Map<string, number>()
      const count = (key: string) => counts.set(key, (counts.get(key) ?? 0) + 1)
      for (let c = 0; c < CASES; c++) {
        const { kind, messages: plain } = base(rand, sessions)
        const list = insertPoints(plain, rand)
        const at = `case ${c} (${kind}, ${list.length} messages)`
        assert.strictEqual(rejected(list), "", `${at}: the generated input itself`)
        const start = apiViewStart(list)
        count(`${kind}: ${start > 0 ? "view after a compaction block" : "whole list is the view"}`)
        if (list.some((m) => m.role === "system")) count(`${kind}: with system messages`)

        // the estimate and the turns are the API view's
        assert.strictEqual(estimateTokens(list), viewTokens(list), `${at}: estimate`)
        assert.strictEqual(countTurns(list), countTurns(list.slice(start)), `${at}: turns`)

        // the cut lies after the view's start, and keptTokens is the tail's estimate
        const policy = CompactionPolicy.makeUnsafe({
          keepRecentTokens: [300, 2_000, 8_000, 30_000][int(4)]!,
          keepRecentTurns: 1 + int(3)
        })
        const cut = planForPolicy(list, policy)
        assert.isTrue(cut.cut === 0 || cut.cut > start, `${at}: cut ${cut.cut} at or before the view's start ${start}`)
        if (cut.cut > 0) assert.strictEqual(cut.keptTokens, estimateTokens(list.slice(cut.cut)), `${at}: keptTokens`)

        // eviction touches only the view, and reports what the view loses
        const evicted = evictStaleToolResults(list, int(4), { minSavings: 0 })
        for (let i = 0; i < start; i++) assert.strictEqual(evicted.messages[i], list[i], `${at}: evicted before view`)
        assert.strictEqual(evicted.tokensFreed, viewTokens(list) - viewTokens(evicted.messages), `${at}: tokensFreed`)
        assert.strictEqual(rejected(evicted.messages), "", `${at}: evicted`)
        if (evicted.offloaded.length > 0) count(`${kind}: evicted`)

        // compaction: accepted, reports the view's estimate, keeps the server's summary and the system messages
        const summary = serverSummary(evicted.messages)
        const systems = systemTexts(evicted.messages)
        const { messages: out, outcome } = extractive(
          compactContext(evicted.messages, policy, { minFreedTokens: 200 })
        )
        count(`${kind}: ${outcome._tag === "Skipped" ? `Skipped ${outcome.reason}` : outcome._tag}`)
        if (outcome._tag === "Skipped") assert.strictEqual(out, evicted.messages, `${at}: skipped`)
        else {
          assert.strictEqual(rejected(out, "on-demand"), "", `${at}: compacted`)
          assert.deepStrictEqual(validate(out), [], `${at}: compacted, validate`)
          assert.strictEqual(apiViewStart(out), 0, `${at}: the summary opens the view`)
          assert.strictEqual(outcome.tokensBefore, viewTokens(evicted.messages), `${at}: tokensBefore`)
          // the summary invalidates the thinking the tail keeps (API-RULES 29): the API drops it
          assert.strictEqual(outcome.tokensAfter, viewTokens(out) - thinkingTokens(out), `${at}: tokensAfter`)
          const all = out.map(textOf).join("\n")
          if (summary !== undefined) {
            assert.include(all, summary, `${at}: the server's summary survives`)
            count(`${kind}: compacted over a server summary`)
          }
          const kept = out.filter((m) => m.role === "system").map(textOf).join("\n")
          for (const text of systems) assert.include(kept, text, `${at}: a system message survives`)
          if (systems.length > 0) count(`${kind}: compacted with system messages`)
        }

        // repair of a misplaced system message (and an ambiguous block): accepted, nothing of the view lost
        const damaged = misplace(list, rand)
        const repaired = repairResult(damaged)
        assert.isTrue(Result.isSuccess(repaired), `${at}: repair has content to send`)
        if (Result.isSuccess(repaired)) {
          const fixed = repaired.success.messages
          assert.strictEqual(rejected(fixed, "on-demand"), "", `${at}: repaired`)
          assert.deepStrictEqual(validate(fixed), [], `${at}: repaired, validate`)
          const text = fixed.map(textOf).join("\n")
          for (const s of systemTexts(damaged)) assert.include(text, s, `${at}: repair keeps a system message`)
          const opening = openingBlock(damaged)
          if (opening !== undefined) {
            assert.strictEqual(blocks(fixed[0]!)[0], opening, `${at}: repair keeps the server's block, first`)
          }
          const again = extractive(compactContext(fixed, policy, { minFreedTokens: 200 }))
          assert.strictEqual(rejected(again.messages, "on-demand"), "", `${at}: repaired, then compacted`)
        }
      }
      const table = [...counts].sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, n]) => `  ${k}: ${n}`).join("\n")
      console.log(`API view property suite (seed ${seed}, ${CASES} cases):\n${table}`)
      assert.isAbove(counts.get("generated: compacted over a server summary") ?? 0, 20)
      assert.isAbove(counts.get("corpus: compacted with system messages") ?? 0, 20)
    }
  )
})

describe("liveSystemMessages (API-RULES 27)", () => {
  const note = (
    text: string,
    clear?: "next_user_message" | "never"
  ): Message => {
    const fields: SystemMessageFields = clear === undefined ? {} : { clear_at: clear }
    return { role: "system", content: text, ...fields } as Message
  }

  it("issue 27 finding 5: a clear_at message cleared by a later user message is not live", () => {
    const messages: Array<Message> = [
      { role: "user", content: "a" },
      note("only for this turn", "next_user_message"),
      { role: "assistant", content: "b" },
      { role: "user", content: "c" },
      note("always", "never"),
      { role: "assistant", content: "d" },
      { role: "user", content: "e" },
      note("this turn too", "next_user_message")
    ]
    assert.deepStrictEqual(liveSystemMessages(messages), [4, 7])
    // a tool-result message is a user message too; and what precedes the API view is never live
    const summary = { type: "compaction", content: "s", encrypted_content: null } as ContentBlock
    assert.deepStrictEqual(
      liveSystemMessages([
        ...messages.slice(0, 5),
        { role: "assistant", content: [summary, { type: "text", text: "go" }] },
        note("fresh", "next_user_message")
      ]),
      [6]
    )
  })

  it("agrees with the rule read literally on random lists", () => {
    const rand = prng(SEED)
    const roles = ["user", "assistant", "system"] as const
    for (let c = 0; c < 2_000; c++) {
      const messages: Array<Message> = Array.from({ length: Math.floor(rand() * 12) }, (_, i) => {
        const role = roles[Math.floor(rand() * 3)]!
        if (role !== "system") return { role, content: `m${i}` }
        return note(`s${i}`, rand() < 0.5 ? "next_user_message" : rand() < 0.5 ? "never" : undefined)
      })
      const expected = messages.flatMap((m, i) =>
        m.role === "system" &&
          !((m as SystemMessageFields).clear_at === "next_user_message" &&
            messages.slice(i + 1).some((x) => x.role === "user"))
          ? [i]
          : []
      )
      assert.deepStrictEqual(liveSystemMessages(messages), expected, JSON.stringify(messages))
    }
  })
})
