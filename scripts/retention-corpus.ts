/**
 * What survives a compaction, measured on the shared sessions (issue 25): each session is replayed through
 * `Conversation` (public API only: append, prepare, recordReply), with the extractive summarizer and with a scripted
 * one that answers every summary with one generic sentence, at the default policy and at one that compacts at 24k
 * tokens keeping 4k. For each compaction the anchors of the span it summarized (by the independent extractor of
 * `test/fixtures/Anchors.ts`, not the library's `Retention`) are looked for in the next request the library sends,
 * the kept tail's anchors counted apart; and again in the request after the compaction four later. Then eight planted
 * incidental facts and how many of them survive 7, 20 and 36 chained compactions with the extractive summarizer.
 * The shared sessions are read from `../shared/data/` (or `$COMPACTION_SHARED_DATA`).
 * Run: npx deno run -A scripts/retention-corpus.ts (or node scripts/retention-corpus.ts on a Node that strips types)
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { Conversation, type MessageParam, type Request } from "../src/Conversation.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy, defaultPolicy, zeroUsage } from "../src/Policy.ts"
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
  tallyRetention
} from "../test/fixtures/Anchors.ts"
import { corpus, type CorpusSession } from "../test/fixtures/Corpus.ts"
import { tailOf } from "../test/fixtures/SummaryTail.ts"
import { normalizeUsage } from "../src/internal/import/builder.ts"

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

/** One compaction of a replay: the span it summarized and the request sent right after it. */
interface Compaction {
  readonly span: ReadonlyArray<Message>
  readonly request: Request
}

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
        compactions.push({ span, request: prepared.request })
      }
      const usage = normalizeUsage((message as unknown as Record<string, unknown>)["_usage"])
      yield* conversation.recordReply(param, usage, { requestEpoch: prepared.epoch })
    }
  })
  return Effect.runPromise(
    program.pipe(Effect.provide(Conversation.layerMemory({ policy }).pipe(Layer.provide(recording(summarizer, spans)))))
  )
    .then(() => compactions)
}

/** The tallies of every compaction's span in its next request, and in the request four compactions later. */
const measureReplay = (
  compactions: ReadonlyArray<Compaction>,
  now: Record<RefCategory, RefTally>,
  later: Record<RefCategory, RefTally>
) => {
  const anchors = compactions.map((c) => referenceAnchors(c.span))
  compactions.forEach((c, i) => {
    const summary = (c.request.messages as unknown as ReadonlyArray<Message>)[0]!
    largestSummary = Math.max(largestSummary, estimateTokens([summary]))
    const tail = tailOf(c.request)
    const one = tallyRetention(anchors[i]!, c.request.messages, tail)
    for (const category of REF_CATEGORIES) {
      for (const field of ["counted", "present", "inTail"] as const) now[category][field] += one[category][field]
    }
    // the library's own measure of the same compaction, to show where it and the reference differ
    const library = Retention.measure(c.span, c.request.messages as unknown as ReadonlyArray<Message>, { tail })
    checked++
    if (
      REF_CATEGORIES.some((category) =>
        library.categories[category].counted !== one[category].counted ||
        library.categories[category].present !== one[category].present ||
        library.categories[category].inTail !== one[category].inTail
      )
    ) disagreements++
    const fourLater = compactions[i + 4]
    if (fourLater !== undefined) {
      tallyRetention(anchors[i]!, fourLater.request.messages, tailOf(fourLater.request), later)
    }
  })
}

let checked = 0
let disagreements = 0
/** The largest summary message of the policy being replayed, in estimated tokens. */
let largestSummary = 0

const ROWS: ReadonlyArray<[RefCategory, string]> = [
  ["path", "file paths read or modified"],
  ["command", "commands run (first line)"],
  ["error", "error strings of failed tool results"],
  ["identifier", "identifiers (hashes, ids, URLs, versions, numbers with units)"],
  ["instruction", "the user's own instructions"],
  ["plan", "the latest plan or todo list"]
]

const cell = (t: RefTally): string =>
  t.counted === 0 ? "n/a (0/0)" : `${(t.present / t.counted).toFixed(2)} (${t.present}/${t.counted})`
const short = (t: RefTally): string => t.counted === 0 ? "n/a" : (t.present / t.counted).toFixed(2)

const sessions = corpus()
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
console.log("Anchors by test/fixtures/Anchors.ts; counted: not present in the kept tail of the request checked.\n")

for (const [policyName, policy] of POLICIES) {
  const results = []
  largestSummary = 0
  for (const [name, layer] of SUMMARIZERS) {
    const now = emptyTallies()
    const later = emptyTallies()
    const counts: Array<string> = []
    for (const session of sessions) {
      const compactions = await replay(session.messages, layer, policy)
      counts.push(`${session.name} ${compactions.length}`)
      measureReplay(compactions, now, later)
    }
    results.push({ name, now, later, counts })
  }
  console.log(`### ${policyName} (compactions: ${results[0]!.counts.join(", ")})\n`)
  console.log(`| anchors of the removed span | ${results.map((r) => r.name).join(" | ")} |`)
  console.log(`| --- |${results.map(() => " --- |").join("")}`)
  for (const [category, label] of ROWS) {
    console.log(`| ${label} | ${results.map((r) => cell(r.now[category])).join(" | ")} |`)
  }
  const fiveCategories = REF_CATEGORIES.filter((c) => c !== "plan")
  console.log(
    `| the same, four compactions later (paths/commands/errors/ids/instructions) | ${
      results.map((r) => fiveCategories.map((c) => short(r.later[c])).join(" / ")).join(" | ")
    } |`
  )
  console.log(
    `| (four compactions later, counts) | ${
      results.map((r) => fiveCategories.map((c) => `${r.later[c].present}/${r.later[c].counted}`).join(" / ")).join(
        " | "
      )
    } |\n`
  )
  console.log(
    `Largest summary message (model text, manifest, files): ${largestSummary.toLocaleString("en-US")} tokens; ` +
      `the policy's summaryBudgetTokens: ${policy.summaryBudgetTokens.toLocaleString("en-US")}.\n`
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
for (const session of sessions) {
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
