/**
 * What survives a compaction, measured on the shared sessions (issue 25, issue 41) and on generated agent-loop sessions
 * (`test/fixtures/AgentLoop.ts`: long task statements, long turns, noisy logs, the common error forms): each session is
 * replayed through `Conversation` (public API only: append, prepare, recordReply), every reply recorded with the usage
 * of the replay's own request (estimated; not the recording's, whose context was another compactor's), with the
 * extractive summarizer and with a scripted one that answers every summary with one generic sentence, at the default
 * policy and at one that compacts at 24k tokens keeping 4k. For each compaction the anchors of the span it summarized
 * (by the independent extractor of `test/fixtures/Anchors.ts`, not the library's `Retention`), and each user message
 * judged whole (`wholeInstructions`: its whole text, or a long one's head and tail), are looked for in the next request
 * the library sends, the kept tail's anchors counted apart; and again in the request after the compaction four later.
 * Per policy it also gives the mean tokens freed per compaction (in the compacted view, and as the fall of the context
 * at the step: the usage the trigger read less the request sent right after), the summaries larger than the fresh content they
 * absorbed, and the longest run of summaries at 95% of their budget or more. Then eight planted incidental facts and
 * how many of them survive 7, 20 and 36 chained compactions with the extractive summarizer. The shared sessions are read
 * from `../shared/data/` (or `$COMPACTION_SHARED_DATA`).
 * Run: npx deno run -A scripts/retention-corpus.ts (or node scripts/retention-corpus.ts on a Node that strips types)
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { Conversation } from "../src/Conversation.ts"
import type { MessageParam } from "../src/ConversationState.ts"
import type { Request } from "../src/Request.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy, defaultPolicy, type Usage, zeroUsage } from "../src/Policy.ts"
import { Summarizer, type SummarizeRequest } from "../src/Summarizer.ts"
import * as Retention from "../src/Retention.ts"
import { estimateTokens } from "../src/Tokens.ts"
import {
  emptyTallies,
  fold,
  REF_CATEGORIES,
  type RefAnchor,
  type RefCategory,
  referenceAnchors,
  referenceText,
  type RefTally,
  tallyRetention,
  wholeInstructions
} from "../test/fixtures/Anchors.ts"
import { agentLoopSession } from "../test/fixtures/AgentLoop.ts"
import { corpus, type CorpusSession } from "../test/fixtures/Corpus.ts"
import { tailOf } from "../test/fixtures/SummaryTail.ts"

/** The scripted model's answer to every summary request. */
const GENERIC = "We worked on the code and made progress."

/** A summarizer that answers every request with `GENERIC`, through the public service interface. */
const generic = Layer.succeed(Summarizer, {
  name: "generic",
  summarize: () => Effect.succeed({ text: GENERIC, model: "scripted", usage: zeroUsage, summarizer: "generic" })
})

/** `base`, recording the span (`request.messages`) of every summary it is asked for. */
const recording = (base: Layer.Layer<Summarizer>, spans: Array<ReadonlyArray<Message>>): Layer.Layer<Summarizer> =>
  Layer.effect(
    Summarizer,
    Effect.gen(function* () {
      const inner = yield* Summarizer
      return {
        name: inner.name,
        summarize: (request: SummarizeRequest) =>
          Effect.suspend(() => {
            spans.push(request.messages)
            return inner.summarize(request)
          })
      }
    })
  ).pipe(Layer.provide(base))

/** One compaction of a replay: the span it summarized, the request sent right after it, and its sizes. */
interface Compaction {
  readonly span: ReadonlyArray<Message>
  readonly request: Request
  /** The summary message's estimated tokens. */
  readonly summaryTokens: number
  /** The estimated tokens of the fresh content it absorbed (the span, the earlier summary not counted). */
  readonly freshTokens: number
  /** The estimated tokens the compaction freed (the outcome's `tokensBefore - tokensAfter`: the compacted view). */
  readonly freedTokens: number
  /**
   * How far the context fell at the step that compacted: the usage the trigger read (the previous request's, with its
   * reply) less the request sent right after the compaction (the offloads of that step's rewrite included).
   */
  readonly stepFreedTokens: number
}

/**
 * The usage the replay's own request would be reported with (not the recording's, whose context was that of another
 * compactor): its messages, system and tools estimated as input, the reply as output.
 */
const predictedUsage = (request: Request, reply: Message): Usage => ({
  input_tokens: estimateTokens(request.messages as unknown as ReadonlyArray<Message>) +
    Math.ceil((JSON.stringify(request.system ?? "").length + JSON.stringify(request.tools ?? []).length) / 4),
  output_tokens: estimateTokens([reply]),
  cache_read_input_tokens: 0,
  cache_creation_input_tokens: 0
})

/** Replays `messages` and returns every compaction that ran, in order. */
const replay = (
  messages: ReadonlyArray<Message>,
  summarizer: Layer.Layer<Summarizer>,
  policy: CompactionPolicy
): Promise<ReadonlyArray<Compaction>> => {
  const spans: Array<ReadonlyArray<Message>> = []
  const compactions: Array<Compaction> = []
  const program = Effect.gen(function* () {
    const conversation = yield* Conversation
    let lastUsage = 0
    for (const message of messages) {
      const param = message as unknown as MessageParam
      if (message.role !== "assistant") {
        yield* conversation.append(param)
        continue
      }
      spans.length = 0
      const prepared = yield* conversation.prepare
      const outcome = prepared.compaction
      if (outcome !== undefined && outcome._tag !== "Skipped") {
        const span = spans.at(-1)
        if (span === undefined) throw new Error("a compaction ran without a summary request")
        const summaryTokens = estimateTokens([(prepared.request.messages as unknown as ReadonlyArray<Message>)[0]!])
        compactions.push({
          span,
          request: prepared.request,
          summaryTokens,
          freshTokens: estimateTokens(span),
          freedTokens: outcome._tag === "Compacted" ? outcome.tokensBefore - outcome.tokensAfter : 0,
          stepFreedTokens: lastUsage - predictedUsage(prepared.request, message).input_tokens
        })
      }
      const usage = predictedUsage(prepared.request, message)
      lastUsage = usage.input_tokens + usage.output_tokens
      yield* conversation.recordReply(param, usage, { requestEpoch: prepared.epoch })
    }
  })
  return Effect.runPromise(
    program.pipe(Effect.provide(Conversation.layerMemory({ policy }).pipe(Layer.provide(recording(summarizer, spans)))))
  )
    .then(() => compactions)
}

/** What one policy and summarizer gave over every session. */
interface Measured {
  readonly now: Record<RefCategory, RefTally>
  readonly later: Record<RefCategory, RefTally>
  /** The user's instructions judged whole (`wholeInstructions`): next request, four compactions later. */
  readonly whole: { readonly now: RefTally; readonly later: RefTally }
  compactions: number
  freed: number
  stepFreed: number
  /** Summaries larger than the fresh content they absorbed. */
  larger: number
  largest: number
  /** The longest run of consecutive compactions whose summary was at 95% of its budget or more. */
  longestPinned: number
  pinned: number
  checked: number
  disagreements: number
}

const emptyMeasured = (): Measured => ({
  now: emptyTallies(),
  later: emptyTallies(),
  whole: { now: { counted: 0, present: 0, inTail: 0 }, later: { counted: 0, present: 0, inTail: 0 } },
  compactions: 0,
  freed: 0,
  stepFreed: 0,
  larger: 0,
  largest: 0,
  longestPinned: 0,
  pinned: 0,
  checked: 0,
  disagreements: 0
})

/** The tallies of every compaction's span in its next request, and in the request four compactions later. */
const measureReplay = (compactions: ReadonlyArray<Compaction>, policy: CompactionPolicy, into: Measured) => {
  const anchors = compactions.map((c) => referenceAnchors(c.span))
  const whole = compactions.map((c) => wholeInstructions(c.span))
  let run = 0
  compactions.forEach((c, i) => {
    into.compactions++
    into.freed += c.freedTokens
    into.stepFreed += c.stepFreedTokens
    into.largest = Math.max(into.largest, c.summaryTokens)
    if (c.summaryTokens > c.freshTokens) into.larger++
    run = c.summaryTokens >= 0.95 * policy.summaryBudgetTokens ? run + 1 : 0
    if (run > 0) into.pinned++
    into.longestPinned = Math.max(into.longestPinned, run)
    const tail = tailOf(c.request)
    const one = tallyRetention(anchors[i]!, c.request.messages, tail)
    for (const category of REF_CATEGORIES) {
      for (const field of ["counted", "present", "inTail"] as const) into.now[category][field] += one[category][field]
    }
    const wholeNow = tallyRetention(whole[i]!, c.request.messages, tail).instruction
    for (const field of ["counted", "present", "inTail"] as const) into.whole.now[field] += wholeNow[field]
    // the library's own measure of the same compaction, to show where it and the reference differ
    const library = Retention.measure(c.span, c.request.messages as unknown as ReadonlyArray<Message>, { tail })
    into.checked++
    if (
      REF_CATEGORIES.some((category) =>
        library.categories[category].counted !== one[category].counted ||
        library.categories[category].present !== one[category].present ||
        library.categories[category].inTail !== one[category].inTail
      )
    ) into.disagreements++
    const fourLater = compactions[i + 4]
    if (fourLater !== undefined) {
      tallyRetention(anchors[i]!, fourLater.request.messages, tailOf(fourLater.request), into.later)
      const wholeLater = tallyRetention(whole[i]!, fourLater.request.messages, tailOf(fourLater.request)).instruction
      for (const field of ["counted", "present", "inTail"] as const) into.whole.later[field] += wholeLater[field]
    }
  })
}

const ROWS: ReadonlyArray<[RefCategory, string]> = [
  ["path", "file paths read or modified"],
  ["command", "commands run (first line)"],
  ["error", "error strings of failed tool results"],
  ["identifier", "identifiers (hashes, ids, URLs, versions, numbers with units)"],
  ["instruction", "the user's own instructions (first 500 characters)"],
  ["plan", "the latest plan or todo list"]
]

const cell = (t: RefTally): string =>
  t.counted === 0 ? "n/a (0/0)" : `${(t.present / t.counted).toFixed(2)} (${t.present}/${t.counted})`
const short = (t: RefTally): string => t.counted === 0 ? "n/a" : (t.present / t.counted).toFixed(2)

/** The shared sessions, then generated agent-loop sessions (long task statements, long turns, noisy logs). */
const sessions: ReadonlyArray<{ readonly name: string; readonly messages: ReadonlyArray<Message> }> = [
  ...corpus(),
  ...[1, 2, 3].map((seed) => ({ name: `agent-loop-${seed}`, messages: agentLoopSession(seed) }))
]
const POLICIES: ReadonlyArray<[string, CompactionPolicy]> = [
  ["defaults", defaultPolicy],
  ["24k/4k", CompactionPolicy.makeUnsafe({ compactAtTokens: 24_000, keepRecentTokens: 4_000, maxTailTokens: 4_000 })]
]
const SUMMARIZERS: ReadonlyArray<[string, Layer.Layer<Summarizer>]> = [
  ["extractive", ExtractiveSummarizer.layer],
  [`generic ("${GENERIC}")`, generic]
]

console.log(`Sessions: ${sessions.map((s) => `${s.name} (${s.messages.length})`).join(", ")}`)
console.log("24k/4k: compactAtTokens 24,000, keepRecentTokens 4,000, maxTailTokens 4,000; defaults: defaultPolicy.")
console.log("Usage: the replay's own request, estimated (not the recording's usage).")
console.log("Anchors by test/fixtures/Anchors.ts; counted: not present in the kept tail of the request checked.\n")

let checked = 0
let disagreements = 0
for (const [policyName, policy] of POLICIES) {
  const results: Array<{ readonly name: string; readonly m: Measured; readonly counts: ReadonlyArray<string> }> = []
  for (const [name, layer] of SUMMARIZERS) {
    const m = emptyMeasured()
    const counts: Array<string> = []
    for (const session of sessions) {
      const compactions = await replay(session.messages, layer, policy)
      counts.push(`${session.name} ${compactions.length}`)
      measureReplay(compactions, policy, m)
    }
    checked += m.checked
    disagreements += m.disagreements
    results.push({ name, m, counts })
  }
  console.log(`### ${policyName} (compactions: ${results[0]!.counts.join(", ")})\n`)
  console.log(`| anchors of the removed span | ${results.map((r) => r.name).join(" | ")} |`)
  console.log(`| --- |${results.map(() => " --- |").join("")}`)
  for (const [category, label] of ROWS) {
    console.log(`| ${label} | ${results.map((r) => cell(r.m.now[category])).join(" | ")} |`)
  }
  console.log(
    `| the user's own instructions, whole (head and tail) | ${results.map((r) => cell(r.m.whole.now)).join(" | ")} |`
  )
  const fiveCategories = REF_CATEGORIES.filter((c) => c !== "plan")
  console.log(
    `| the same, four compactions later (paths/commands/errors/ids/instructions/whole instructions) | ${
      results.map((r) => [...fiveCategories.map((c) => short(r.m.later[c])), short(r.m.whole.later)].join(" / "))
        .join(" | ")
    } |`
  )
  console.log(
    `| (four compactions later, counts) | ${
      results.map((r) =>
        [...fiveCategories.map((c) => r.m.later[c]), r.m.whole.later].map((t) => `${t.present}/${t.counted}`)
          .join(" / ")
      ).join(" | ")
    } |`
  )
  const mean = (r: Measured, total: number) => r.compactions === 0 ? 0 : total / r.compactions
  const freedCell = (r: Measured, total: number) =>
    `${Math.round(mean(r, total)).toLocaleString("en-US")} (${(mean(r, total) / policy.compactAtTokens).toFixed(2)})`
  const trigger = policy.compactAtTokens.toLocaleString("en-US")
  console.log(
    `| mean tokens freed per compaction, in the compacted view (share of compactAtTokens ${trigger}) | ${
      results.map((r) => freedCell(r.m, r.m.freed)).join(" | ")
    } |`
  )
  console.log(
    `| mean fall of the context at a compacting step: the usage the trigger read less the next request (share) | ${
      results.map((r) => freedCell(r.m, r.m.stepFreed)).join(" | ")
    } |`
  )
  console.log(
    `| summaries larger than the fresh content they absorbed | ${
      results.map((r) => `${r.m.larger} of ${r.m.compactions}`).join(" | ")
    } |`
  )
  console.log(
    `| summaries at ≥95% of the budget (longest run of consecutive ones) | ${
      results.map((r) => `${r.m.pinned} (${r.m.longestPinned})`).join(" | ")
    } |`
  )
  console.log(
    `| largest summary message (budget ${policy.summaryBudgetTokens.toLocaleString("en-US")}) | ${
      results.map((r) => r.m.largest.toLocaleString("en-US")).join(" | ")
    } |\n`
  )
}

console.log(
  `The library's Retention.measure gives the same counts as the independent extractor on ${
    checked - disagreements
  } of ${checked} compactions.\n`
)

// ============================================================================
// Planted facts
// ============================================================================

/** Eight incidental facts, in the style of an outside recall harness. */
const FACTS = [
  "the staging port is 8471",
  "the deploy key is named orchid-17",
  "our on-call reviewer is Ximena Laborde",
  "the feature flag is called late_bloom_v2",
  "the build cache lives in /var/cache/quartz-42",
  "the release train leaves on Thursday at 16:40",
  "the test tenant id is tn-55120-omega",
  "the fallback region is eu-north-7"
]

/** The session with the facts planted, one more text block each, in its first human messages (in turn). */
const plant = (session: CorpusSession): ReadonlyArray<Message> => {
  const human = session.messages.flatMap((m, i) =>
    m.role === "user" && (typeof m.content === "string" || m.content.some((b) => b.type !== "tool_result")) ? [i] : []
  )
  const slots = human.slice(0, FACTS.length)
  const extra = new Map<number, Array<string>>()
  FACTS.forEach((fact, i) => {
    const at = slots[i % slots.length]!
    extra.set(at, [...(extra.get(at) ?? []), `By the way, ${fact}.`])
  })
  return session.messages.map((m, i) => {
    const facts = extra.get(i)
    if (facts === undefined) return m
    const blocks = typeof m.content === "string" ? [{ type: "text" as const, text: m.content }] : m.content
    return { ...m, content: [...blocks, ...facts.map((text) => ({ type: "text" as const, text }))] }
  })
}

const AFTER = [7, 20, 36]
const planted = corpus()
const factAnchors: ReadonlyArray<RefAnchor> = FACTS.map((f) => ({
  category: "instruction",
  text: fold(f),
  caseless: false
}))
console.log(
  "### Eight planted facts, extractive summarizer, 24k/4k (facts present in the request after the k-th compaction, not in its tail)\n"
)
console.log(`| session | compactions | ${AFTER.map((k) => `after ${k}`).join(" | ")} |`)
console.log(`| --- | ---: |${AFTER.map(() => " ---: |").join("")}`)
for (const session of planted) {
  const compactions = await replay(plant(session), ExtractiveSummarizer.layer, POLICIES[1]![1])
  const cells = AFTER.map((k) => {
    const c = compactions[k - 1]
    if (c === undefined) return "n/a"
    const text = referenceText(c.request.messages)
    const tail = referenceText(tailOf(c.request))
    const survived = factAnchors.filter((a) => text.pieces.includes(a.text) && !tail.pieces.includes(a.text)).length
    return `${survived}/8`
  })
  console.log(`| ${session.name} | ${compactions.length} | ${cells.join(" | ")} |`)
}
