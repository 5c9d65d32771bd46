/**
 * Every public name of the modules this layout moved things out of (as of 56039b9) still imports from the same
 * barrel namespace: the values at run time, the types at compile time.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Lib from "../src/index.ts"
import * as Estimate from "../src/internal/estimate.ts"
import { barrelNamespaces, isDeprecated, parseDocComment, publicNames } from "./fixtures/PublicApi.ts"

/** The reason classes `Summarizer` exported before `SummarizeError` became their home. */
const REASONS_BEFORE: ReadonlyArray<string> = [
  "RateLimited",
  "Overloaded",
  "Server",
  "Timeout",
  "Connection",
  "BadRequest",
  "Unauthorized",
  "EmptySummary",
  "StreamError",
  "NothingToSummarize",
  "CompactionFailed"
]

/** The value exports of each namespace before the split. */
const VALUES_BEFORE: Readonly<Record<string, ReadonlyArray<string>>> = {
  Tools: ["covers", "defaultToolClassifier", "filesTouched", "shortInput"],
  Policy: [
    "CompactionPolicy",
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_KEEP_RECENT_TOKENS",
    "DEFAULT_KEEP_RECENT_TURNS",
    "DEFAULT_MIN_REMAINING",
    "PolicyError",
    "contextTokens",
    "defaultMaxTailTokens",
    "defaultPolicy",
    "remainingTokens",
    "shouldCompact"
  ],
  Evict: [
    "DEFAULT_KEEP_RECENT",
    "DEFAULT_MIN_SAVINGS",
    "OMITTED_TOOL_RESULT",
    "evictStaleToolResults",
    "formatOffloadRef",
    "isOffloaded",
    "offloadRefOf",
    "parseOffloadRef"
  ],
  HotPaths: ["HotPaths"],
  Render: [
    "APPENDIX_MAX_FILES",
    "CLIP_MARKER_MAX",
    "DEFAULT_RENDER_OPTIONS",
    "INLINE_RESULT_MAX",
    "LABEL_MAX",
    "MIN_PART_CHARS",
    "OMISSION_MARKER_MAX",
    "RESERVED_TAGS",
    "mergeFiles",
    "neutralizeTags",
    "noFiles",
    "parseAppendix",
    "render",
    "renderAppendix",
    "renderBound",
    "splitAppendix",
    "stripAppendix"
  ],
  Summarizer: [
    "AnthropicSummarizer",
    "DEFAULT_SUMMARIZER_MODEL",
    "DEFAULT_SUMMARIZER_TIMEOUT",
    "DEFAULT_SUMMARY_MAX_TOKENS",
    "DEFAULT_SYSTEM_PROMPT",
    "EXTRACTIVE_LIMITS",
    "ExtractiveSummarizer",
    "PROMPT_LIMITS",
    "SummarizeError",
    "SummarizeErrorReason",
    "Summarizer",
    "anthropicConfig",
    "extractiveSummary",
    "layerAuto",
    "makeRetrySchedule",
    "retrySummarize",
    "summarizationPrompt",
    "summarizeRequest",
    "summarizeRetrySchedule",
    "withFallback",
    "zeroUsage"
  ],
  Compact: [
    "CompactError",
    "CompactOutcome",
    "DEFAULT_MIN_FREED_TOKENS",
    "SUMMARY_HEADER",
    "compactContext",
    "summaryMessage",
    "summaryText"
  ],
  Import: [
    "ImportError",
    "convertClaudeCode",
    "convertJson",
    "convertJsonl",
    "convertPi",
    "importSession",
    "importSessionFile",
    "normalizeUsage",
    "parseJsonLine"
  ],
  Simulate: [
    "ANTHROPIC_PRICES",
    "CLEAR_TOOL_USES_DEFAULTS",
    "DEFAULT_DOLLARS_PER_MTOK",
    "DEFAULT_SUMMARIZER_OVERHEAD_TOKENS",
    "DEFAULT_SUMMARY_MAX_TOKENS",
    "DEFAULT_SUMMARY_RATIO",
    "MASKING_WINDOW",
    "OPENCODE_PRUNE",
    "OURS_DEFAULTS",
    "OURS_TUNED_MIN_SAVINGS",
    "formatReport",
    "requestCost",
    "simulate",
    "simulatePolicy",
    "standardPolicies",
    "summarizerCost"
  ]
}

/** The type exports before the split; this list only compiles while each of them still exists. */
export type TypesBefore = [
  Lib.Tools.FilesTouched,
  Lib.Tools.LineRange,
  Lib.Tools.ToolAction,
  Lib.Tools.ToolClassifier,
  Lib.Policy.PolicyFields,
  Lib.Policy.ReportedUsage,
  Lib.Policy.UsageEpoch,
  Lib.Evict.EvictOptions,
  Lib.Evict.EvictResult<Lib.Message.Message>,
  Lib.Evict.OffloadReason,
  Lib.Evict.OffloadRef,
  Lib.Evict.Offloaded,
  Lib.Render.RenderOptions,
  Lib.Summarizer.AnthropicLayerOptions,
  Lib.Summarizer.AnthropicSummarizerOptions,
  Lib.Summarizer.ExtractiveOptions,
  Lib.Summarizer.RetryOptions,
  Lib.Summarizer.SummarizeErrorReason,
  Lib.Summarizer.SummarizeRequest,
  Lib.Summarizer.SummarizerShape,
  Lib.Summarizer.Summary,
  Lib.Summarizer.SummaryUsage,
  Lib.Compact.CompactOptions,
  Lib.Compact.CompactOutcome,
  Lib.Compact.CompactResult<Lib.Message.Message>,
  Lib.Compact.CompactedInfo,
  Lib.Compact.SkipReason,
  Lib.Import.CompactionRecord,
  Lib.Import.Interruption,
  Lib.Import.JsonlEntry,
  Lib.Import.JsonlLines,
  Lib.Import.MessageUsage,
  Lib.Import.ProviderUsage,
  Lib.Import.Session,
  Lib.Import.SessionFormat,
  Lib.Import.Skipped,
  Lib.Simulate.PolicyReport,
  Lib.Simulate.PriceTable,
  Lib.Simulate.RequestEvent,
  Lib.Simulate.RequestFigures,
  Lib.Simulate.SimPolicy,
  Lib.Simulate.SimulateOptions,
  Lib.Simulate.SimulationReport,
  Lib.Simulate.Strategy
]

describe("public names", () => {
  for (const [namespace, names] of Object.entries(VALUES_BEFORE)) {
    it(`${namespace}: every value exported before still imports from the barrel`, () => {
      const module = (Lib as unknown as Record<string, Record<string, unknown>>)[namespace]
      assert.isDefined(module, namespace)
      const missing = names.filter((name) => module![name] === undefined)
      assert.deepStrictEqual(missing, [], `${namespace} lost ${missing.join(", ")}`)
    })
  }

  it("the moved names are the same values as at their new homes", () => {
    assert.strictEqual(Lib.Evict.parseOffloadRef, Lib.Offload.parseOffloadRef)
    assert.strictEqual(Lib.Evict.isOffloaded, Lib.Offload.isOffloaded)
    assert.strictEqual(Lib.Evict.formatOffloadRef, Lib.Offload.formatOffloadRef)
    assert.strictEqual(Lib.Evict.offloadRefOf, Lib.Offload.offloadRefOf)
    assert.strictEqual(Lib.Evict.OMITTED_TOOL_RESULT, Lib.Offload.OMITTED_TOOL_RESULT)
    assert.strictEqual(Lib.Compact.summaryMessage, Lib.Summary.summaryMessage)
    assert.strictEqual(Lib.Compact.SUMMARY_HEADER, Lib.Summary.SUMMARY_HEADER)
    assert.strictEqual(Lib.Render.renderAppendix, Lib.Summary.renderAppendix)
    assert.strictEqual(Lib.Render.stripAppendix, Lib.Summary.stripAppendix)
    assert.strictEqual(Lib.Summarizer.ExtractiveSummarizer, Lib.ExtractiveSummarizer.ExtractiveSummarizer)
    assert.strictEqual(Lib.Summarizer.extractiveSummary, Lib.ExtractiveSummarizer.extractiveSummary)
    assert.strictEqual(Lib.Summarizer.zeroUsage, Lib.Policy.zeroUsage)
    assert.strictEqual(Lib.Summarizer.DEFAULT_SUMMARY_MAX_TOKENS, Lib.Simulate.DEFAULT_SUMMARY_MAX_TOKENS)
    assert.strictEqual(typeof Lib.Summarizer.AnthropicSummarizer.make, "function")
    assert.strictEqual(Lib.Summarizer.EXTRACTIVE_LIMITS, Lib.ExtractiveSummarizer.EXTRACTIVE_LIMITS)
    assert.strictEqual(Lib.Summarizer.layerAuto, Lib.SummarizerAuto.layerAuto)
    assert.strictEqual(Lib.Summarizer.SummarizeError, Lib.SummarizeError.SummarizeError)
    assert.strictEqual(Lib.Summarizer.SummarizeErrorReason, Lib.SummarizeError.SummarizeErrorReason)
    // the reasons the contract held before the split (a reason added since, like CompactionRefused, has one home)
    const before = Lib.SummarizeError.SummarizeErrorReason.members.filter((r) => REASONS_BEFORE.includes(r.identifier))
    assert.strictEqual(before.length, REASONS_BEFORE.length)
    for (const reason of before) {
      const tag = reason.identifier as keyof typeof Lib.SummarizeError
      assert.isDefined(Lib.SummarizeError[tag], tag)
      assert.strictEqual((Lib.Summarizer as Record<string, unknown>)[tag], Lib.SummarizeError[tag], tag)
    }
    assert.strictEqual(typeof Lib.Summarizer.ServerCompactionSummarizer.make, "function")
  })
})

/** The barrel's public names read from the source (`test/fixtures/PublicApi.ts`), with their doc comments. */
const names = publicNames()
const live = names.filter((name) => !isDeprecated(name))
const barrel = Lib as unknown as Record<string, Record<string, unknown> | undefined>
const valueOf = (namespace: string, name: string): unknown => barrel[namespace]?.[name]
const isObject = (value: unknown): value is object =>
  (typeof value === "object" && value !== null) || typeof value === "function"

/**
 * Deprecated knobs whose replacement gives the same results but is not the same function: the knob itself moved to
 * `src/internal/`, and the note names what a user should call instead.
 */
const REPLACED_BY_ANOTHER_FUNCTION: ReadonlyArray<string> = [
  "Tokens.estimateContentTokensUncached",
  "Tokens.estimateMessageTokensUncached"
]

describe("the public surface, read from the source", () => {
  it("the reader sees exactly the values each namespace of the barrel exports", () => {
    for (const { namespace } of barrelNamespaces()) {
      const read = names.filter((n) => n.namespace === namespace && n.declarations.some((d) => d.kind === "value"))
      assert.deepStrictEqual(read.map((n) => n.name).sort(), Object.keys(barrel[namespace]!).sort(), namespace)
    }
    assert.deepStrictEqual(names.filter((n) => n.declarations.length === 0), [], "every name reaches a declaration")
  })

  it("every deprecated name says what to use instead; a replacement the barrel holds is the very same value", () => {
    let compared = 0
    for (const name of names.filter(isDeprecated)) {
      const note = name.declarations.map((d) => d.deprecated ?? "").join(" ")
      assert.match(note, /Use `[^`]+`/, `${name.namespace}.${name.name}: a @deprecated note says what to use`)
      // `Namespace.name` or a `name` of the same namespace, exactly (a call or an expression is only read)
      const use = /Use `([\w$]+)(?:\.([\w$]+))?`/.exec(note)
      if (use === null) continue
      const [namespace, replacement] = use[2] === undefined ? [name.namespace, use[1]!] : [use[1]!, use[2]]
      const now = valueOf(namespace, replacement)
      const old = valueOf(name.namespace, name.name)
      if (now === undefined || old === undefined) continue
      if (REPLACED_BY_ANOTHER_FUNCTION.includes(`${name.namespace}.${name.name}`)) {
        assert.notStrictEqual(old, now, `${name.namespace}.${name.name} is listed as another function`)
        continue
      }
      assert.strictEqual(old, now, `${name.namespace}.${name.name} is ${namespace}.${replacement}`)
      compared++
    }
    assert.isAbove(compared, 40, "the deprecated values compared with their replacements")
  })

  it("a value the barrel reaches under two names is deprecated under all but one of them", () => {
    const namesOf = new Map<object, Array<string>>()
    for (const name of live) {
      const value = valueOf(name.namespace, name.name)
      if (isObject(value)) namesOf.set(value, [...(namesOf.get(value) ?? []), `${name.namespace}.${name.name}`])
    }
    assert.deepStrictEqual([...namesOf.values()].filter((both) => both.length > 1), [])
    // a constant is not an object: two live names re-exporting one declaration are the same value too
    const namesAt = new Map<string, Array<string>>()
    for (const name of live) {
      const at = name.declarations.map((d) => `${d.file}:${d.line}`).sort().join(" ")
      namesAt.set(at, [...(namesAt.get(at) ?? []), `${name.namespace}.${name.name}`])
    }
    assert.deepStrictEqual([...namesAt.values()].filter((both) => both.length > 1), [])
  })

  it("the live surface is at most 250 names (issue 24's target)", () => {
    // 249 today: a new live name has to displace one
    assert.isAtMost(live.length, 250, `${live.length} live names`)
    assert.isAbove(names.length - live.length, 200, "the deprecated names still resolve")
  })

  it("every name that is not deprecated has a doc comment", () => {
    const undocumented = live.filter((name) => name.declarations.every((d) => d.doc === ""))
    assert.deepStrictEqual(undocumented.map((name) => `${name.namespace}.${name.name}`), [])
  })
})

describe("the source reader of the public surface", () => {
  it("reads a doc comment's text apart from its tags, and the @deprecated note", () => {
    assert.deepStrictEqual(parseDocComment("/** The same. @deprecated Use `A.b`. */"), {
      doc: "The same.",
      deprecated: "Use `A.b`."
    })
    assert.deepStrictEqual(parseDocComment("/**\n * Two lines\n * of text.\n * @category models\n */"), {
      doc: "Two lines\nof text.",
      deprecated: undefined
    })
    assert.deepStrictEqual(parseDocComment("/** @category guards */"), { doc: "", deprecated: undefined })
  })
})

describe("knobs moved to internal/", () => {
  it("the deprecated Tokens knobs are the internal functions, which count what the cached estimates count", () => {
    assert.strictEqual(Lib.Tokens.estimateContentTokensUncached, Estimate.estimateContentTokensUncached)
    assert.strictEqual(Lib.Tokens.estimateMessageTokensUncached, Estimate.estimateMessageTokensUncached)
    const message: Lib.Message.Message = { role: "user", content: [{ type: "text", text: "x".repeat(41) }] }
    assert.strictEqual(Estimate.estimateMessageTokensUncached(message), Lib.Tokens.estimateMessageTokens(message))
    assert.strictEqual(Estimate.estimateContentTokensUncached(message.content), 11)
  })
})
