import type Anthropic from "@anthropic-ai/sdk"
import { assert, describe, it } from "@effect/vitest"
import { Result, Schema } from "effect"
import {
  CompactionPolicy,
  contextTokens,
  defaultPolicy,
  PolicyError,
  promptTokens,
  remainingTokens,
  type ReportedUsage,
  shouldCompact
} from "../src/Policy.ts"

const usage = (input: number, output = 0, cacheRead = 0, cacheWrite = 0): ReportedUsage => ({
  input_tokens: input,
  output_tokens: output,
  cache_read_input_tokens: cacheRead,
  cache_creation_input_tokens: cacheWrite
})
const fresh = { requestEpoch: 3, currentEpoch: 3 }

describe("CompactionPolicy", () => {
  it("has documented defaults", () => {
    assert.deepStrictEqual({ ...defaultPolicy }, {
      keepRecentTokens: 15_000,
      keepRecentTurns: 2,
      minRemaining: 20_000,
      contextWindow: 200_000,
      maxTailTokens: 30_000,
      compactAtTokens: 60_000,
      summaryBudgetTokens: 8_000,
      minGrowthTokens: 12_000,
      cacheTtl: "5m"
    })
    assert.strictEqual(defaultPolicy.compactAtTokens, 60_000)
    assert.deepStrictEqual(
      [defaultPolicy.keepRecentTokens, defaultPolicy.keepRecentTurns, defaultPolicy.minRemaining],
      [15_000, 2, 20_000]
    )
    // a quarter of the trigger, at most 20,000: a larger trigger keeps 20,000
    assert.strictEqual(CompactionPolicy.makeUnsafe({ compactAtTokens: 100_000 }).keepRecentTokens, 20_000)
    assert.strictEqual(CompactionPolicy.makeUnsafe({ compactAtTokens: 20_000 }).keepRecentTokens, 5_000)
  })

  it("is immutable", () => {
    assert.isTrue(Object.isFrozen(defaultPolicy))
    assert.throws(() => {
      ;(defaultPolicy as { keepRecentTokens: number }).keepRecentTokens = 1
    })
  })

  it("issue 38: derives maxTailTokens from the trigger, not the window, and keeps retention absolute", () => {
    const small = CompactionPolicy.makeUnsafe({ contextWindow: 8_000, minRemaining: 2_000, keepRecentTokens: 2_000 })
    assert.strictEqual(small.maxTailTokens, 3_000)
    const large = CompactionPolicy.makeUnsafe({ contextWindow: 1_000_000 })
    assert.strictEqual(large.keepRecentTokens, defaultPolicy.keepRecentTokens)
    assert.strictEqual(large.maxTailTokens, 30_000)
    // a user who sets only the trigger gets every other size fitted under it
    for (const compactAtTokens of [5_000, 20_000, 60_000, 150_000]) {
      const p = CompactionPolicy.makeUnsafe({ compactAtTokens })
      assert.isAtMost(p.maxTailTokens + p.summaryBudgetTokens + p.minGrowthTokens, compactAtTokens)
      assert.strictEqual(p.maxTailTokens, Math.floor(compactAtTokens / 2))
      assert.isAtMost(p.keepRecentTokens, p.maxTailTokens)
    }
    const typical = CompactionPolicy.makeUnsafe({ compactAtTokens: 20_000, keepRecentTokens: 4_000 })
    assert.deepInclude(typical, { maxTailTokens: 10_000, summaryBudgetTokens: 5_000, minGrowthTokens: 4_000 })
  })

  it("rejects non-positive or non-integer fields with a clear PolicyError", () => {
    for (
      const [field, value] of [
        ["keepRecentTokens", 0],
        ["keepRecentTurns", -1],
        ["minRemaining", 1.5],
        ["contextWindow", Number.NaN],
        ["maxTailTokens", 0]
      ] as const
    ) {
      const result = CompactionPolicy.make({ [field]: value })
      assert.isTrue(Result.isFailure(result), field)
      if (Result.isFailure(result)) {
        assert.instanceOf(result.failure, PolicyError)
        assert.strictEqual(result.failure.field, field)
        assert.match(result.failure.message, new RegExp(`^Invalid compaction policy: ${field} = .*positive integer`))
      }
    }
  })

  it("rejects contradictory fields", () => {
    const fieldOf = (options: Parameters<typeof CompactionPolicy.make>[0]) => {
      const result = CompactionPolicy.make(options)
      return Result.isFailure(result) ? result.failure.field : "ok"
    }
    assert.strictEqual(fieldOf({ contextWindow: 10_000, minRemaining: 10_000 }), "minRemaining")
    assert.strictEqual(fieldOf({ keepRecentTokens: 30_000, maxTailTokens: 20_000 }), "maxTailTokens")
    assert.strictEqual(fieldOf({ maxTailTokens: 190_000 }), "maxTailTokens")
    // issue 38: a tail as large as the room leaves no room under the trigger for the summary and the growth
    assert.strictEqual(fieldOf({ maxTailTokens: 180_000 }), "minGrowthTokens")
    assert.strictEqual(fieldOf({ maxTailTokens: 100_000 }), "ok")
    assert.strictEqual(fieldOf({ compactAtTokens: 20_000, maxTailTokens: 15_000 }), "minGrowthTokens")
    assert.strictEqual(fieldOf({ compactAtTokens: 20_000, minGrowthTokens: 12_000 }), "minGrowthTokens")
    const refused = CompactionPolicy.make({ compactAtTokens: 20_000, maxTailTokens: 15_000 })
    assert.isTrue(Result.isFailure(refused))
    if (Result.isFailure(refused)) {
      for (const field of ["maxTailTokens", "summaryBudgetTokens", "minGrowthTokens", "compactAtTokens"]) {
        assert.include(refused.failure.message, field)
      }
    }
    assert.throws(() => CompactionPolicy.makeUnsafe({ keepRecentTurns: 0 }), /keepRecentTurns/)
  })

  it("PolicyError encodes as a tagged value", () => {
    const error = new PolicyError({ field: "keepRecentTurns", value: 0, reason: "expected a positive integer" })
    assert.strictEqual(error._tag, "PolicyError")
    assert.deepStrictEqual(Schema.encodeSync(PolicyError)(error), {
      _tag: "PolicyError",
      field: "keepRecentTurns",
      value: 0,
      reason: "expected a positive integer"
    })
  })
})

describe("shouldCompact", () => {
  it("counts input, cache reads, cache writes and the reply itself", () => {
    assert.strictEqual(contextTokens(usage(1_000, 500, 150_000, 2_000)), 153_500)
    assert.strictEqual(contextTokens({ input_tokens: 10, output_tokens: 5, cache_read_input_tokens: null }), 15)
    assert.strictEqual(remainingTokens(defaultPolicy, usage(100_000, 0, 50_000)), 50_000)
  })

  it("issue 27 finding 3: reads the context from the last message iteration, as the API reports it", () => {
    const step = (type: string, input: number, cached: number, output: number) => ({
      type,
      input_tokens: input,
      output_tokens: output,
      cache_read_input_tokens: cached,
      cache_creation_input_tokens: 0,
      cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
      model: null
    })
    // three web search steps over a 60k context: the top level adds them up (180k)
    const searches = {
      ...usage(3_000, 1_500, 177_000),
      cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
      iterations: [
        step("message", 1_000, 59_000, 500),
        step("message", 1_000, 59_000, 500),
        step("message", 1_000, 59_000, 500)
      ]
    }
    assert.strictEqual(contextTokens(searches), 60_500)
    assert.strictEqual(promptTokens(searches), 60_000)
    // at the window line (180k): the last step's 60.5k does not fire it, the top level's 181.5k would
    const atWindow = CompactionPolicy.makeUnsafe({ compactAtTokens: 180_000 })
    assert.isFalse(shouldCompact(atWindow, searches, fresh))
    assert.isTrue(shouldCompact(atWindow, usage(3_000, 1_500, 177_000), fresh), "the top level alone would fire")
    // the compaction step measures the context it closed, never ours; a fallback model's step finished the reply
    const compacted = {
      ...usage(2_000, 300),
      iterations: [step("compaction", 150_000, 0, 3_000), step("message", 2_000, 0, 300)]
    }
    assert.strictEqual(contextTokens(compacted), 2_300)
    const fellBack = {
      ...usage(9, 9),
      iterations: [step("message", 40_000, 0, 0), step("fallback_message", 41_000, 0, 50)]
    }
    assert.strictEqual(contextTokens(fellBack), 41_050)
    assert.strictEqual(contextTokens({ ...usage(10, 5), iterations: null }), 15)
    // the SDK's usage shapes are accepted as they are
    const fromSdk = (
      beta: Anthropic.Beta.BetaUsage,
      plain: Anthropic.Usage
    ): Array<number> => [contextTokens(beta), contextTokens(plain)]
    assert.isFunction(fromSdk)
  })

  it("fires once fewer than minRemaining tokens remain, and not before", () => {
    // 200,000 window, 20,000 held free: the line is 180,000 tokens in context (cost target at the window)
    const atWindow = CompactionPolicy.makeUnsafe({ compactAtTokens: 180_000 })
    assert.isFalse(shouldCompact(atWindow, usage(1_000, 1_000, 178_000), fresh))
    assert.isTrue(shouldCompact(atWindow, usage(1_000, 1_001, 178_000), fresh))
    assert.isTrue(shouldCompact(atWindow, usage(5_000, 8_000, 170_000, 3_000), fresh))
  })

  it("fires at the cost target, and at half of it at a human turn after the cache expired", () => {
    // the default target is 60,000 reported tokens, 30,000 at a cold human turn
    assert.isFalse(shouldCompact(defaultPolicy, usage(1_000, 1_000, 58_000), fresh))
    assert.isTrue(shouldCompact(defaultPolicy, usage(1_000, 1_000, 58_001), fresh))
    assert.isFalse(shouldCompact(defaultPolicy, usage(1_000, 1_000, 28_000), fresh, { coldHumanTurn: true }))
    assert.isTrue(shouldCompact(defaultPolicy, usage(1_000, 1_000, 28_001), fresh, { coldHumanTurn: true }))
    assert.isFalse(shouldCompact(defaultPolicy, usage(1_000, 1_000, 28_001), fresh))
    assert.isTrue(Result.isFailure(CompactionPolicy.make({ compactAtTokens: 190_000 })), "never past the window line")
    assert.strictEqual(CompactionPolicy.makeUnsafe({ contextWindow: 50_000 }).compactAtTokens, 30_000)
  })

  it("never fires on usage from a request made before the latest compaction", () => {
    const huge = usage(2_000, 4_000, 190_000)
    assert.isTrue(shouldCompact(defaultPolicy, huge, { requestEpoch: 1, currentEpoch: 1 }))
    assert.isFalse(shouldCompact(defaultPolicy, huge, { requestEpoch: 1, currentEpoch: 2 }))
    assert.isTrue(shouldCompact(defaultPolicy, huge, { requestEpoch: 2, currentEpoch: 2 }))
  })

  it.prop(
    "fires exactly when the reported context is past the line, for any window",
    [
      Schema.Int.check(Schema.isBetween({ minimum: 8_000, maximum: 1_000_000 })),
      Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 1_000_000 })),
      Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 64_000 }))
    ],
    ([contextWindow, prompt, output]) => {
      const policy = CompactionPolicy.makeUnsafe({
        contextWindow,
        minRemaining: 4_000,
        keepRecentTokens: 1_000,
        compactAtTokens: contextWindow - 4_000
      })
      const fires = shouldCompact(policy, usage(prompt, output), fresh)
      assert.strictEqual(fires, contextWindow - prompt - output < 4_000)
      assert.isFalse(shouldCompact(policy, usage(prompt, output), { requestEpoch: 0, currentEpoch: 1 }))
    },
    { arbitrary: { runs: 2000 } }
  )
})
