/**
 * The `effect/ai` LanguageModel summarizer against a `LanguageModel` built for the test (`LanguageModel.make`) that
 * answers or fails as each test scripts it: the request it sends, success, an empty summary, retryable failures
 * retried, non-retryable ones not, the per-attempt timeout, the fallback, and the AiError → reason mapping.
 */
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Exit, Layer, Stream } from "effect"
import { AiError, LanguageModel, type Prompt, type Response } from "effect/ai"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { LanguageModelSummarizer, reasonOfAiError } from "../src/LanguageModelSummarizer.ts"
import { SummarizeError } from "../src/SummarizeError.ts"
import {
  DEFAULT_SYSTEM_PROMPT,
  summarizationPrompt,
  Summarizer,
  summarizeRequest,
  withFallback
} from "../src/Summarizer.ts"
import { generateSession } from "./fixtures/Conversation.ts"

const request = summarizeRequest(generateSession(3, { messages: 24 }), { instructions: "keep the parser work" })

/** One scripted answer: the response parts, an AiError reason to fail with, or a reply that never comes. */
type Step = ReadonlyArray<Response.PartEncoded> | AiError.AiErrorReason | "hang"

const reply = (text: string, extra: Partial<{ modelId: string }> = {}): ReadonlyArray<Response.PartEncoded> => [
  ...(extra.modelId === undefined ? [] : [{ type: "response-metadata" as const, modelId: extra.modelId }]),
  { type: "text", text },
  {
    type: "finish",
    reason: "stop",
    usage: { inputTokens: { total: 1_000, cacheRead: 300, cacheWrite: 100 }, outputTokens: { total: 250 } }
  }
]

/** A LanguageModel that answers with `steps` in order (the last one repeats) and records every prompt it gets. */
const scriptedModel = (steps: ReadonlyArray<Step>) => {
  const prompts: Array<Prompt.Prompt> = []
  const layer = Layer.effect(
    LanguageModel.LanguageModel,
    LanguageModel.make({
      generateText: (options) => {
        const step = steps[Math.min(prompts.length, steps.length - 1)]!
        prompts.push(options.prompt)
        if (step === "hang") return Effect.never
        if (AiError.isAiErrorReason(step)) {
          return Effect.fail(AiError.make({ module: "Test", method: "generateText", reason: step }))
        }
        return Effect.succeed([...step])
      },
      streamText: () => Stream.empty
    })
  )
  return { prompts, layer }
}

const fast = { retry: { base: "1 millis", maxDelay: "2 millis", retries: 3 }, timeout: "200 millis" } as const

const summarizeWith = (
  steps: ReadonlyArray<Step>,
  options: Parameters<typeof LanguageModelSummarizer.layer>[0] = {}
) => {
  const model = scriptedModel(steps)
  const run = Effect.flatMap(Effect.service(Summarizer), (s) => s.summarize(request)).pipe(
    Effect.provide(LanguageModelSummarizer.layer({ ...fast, ...options }).pipe(Layer.provide(model.layer)))
  )
  return { model, run }
}

const failureOf = <A>(exit: Exit.Exit<A, SummarizeError>): SummarizeError => {
  assert.isTrue(Exit.isFailure(exit), "expected a failure")
  const error = Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail")?.error : undefined
  assert.instanceOf(error, SummarizeError)
  return error as SummarizeError
}

const http = (status: number) => ({ response: { status, headers: {} } })

describe("LanguageModelSummarizer", () => {
  it.live("sends the system prompt and the summarization prompt, and returns the text, model and usage", () =>
    Effect.gen(function* () {
      const { model, run } = summarizeWith([reply("  ## Goal\nFix the parser.\n", { modelId: "gpt-test-1" })])
      const summary = yield* run
      assert.deepStrictEqual(summary, {
        text: "## Goal\nFix the parser.",
        model: "gpt-test-1",
        usage: {
          input_tokens: 600,
          output_tokens: 250,
          cache_read_input_tokens: 300,
          cache_creation_input_tokens: 100
        },
        summarizer: "language-model",
        stopReason: "stop"
      })
      assert.strictEqual(model.prompts.length, 1)
      const [system, user] = model.prompts[0]!.content
      assert.deepInclude(system, { role: "system", content: DEFAULT_SYSTEM_PROMPT })
      assert.strictEqual(user?.role, "user")
      const text = user?.role === "user" ? user.content.map((p) => p.type === "text" ? p.text : "").join("") : ""
      assert.strictEqual(text, summarizationPrompt(request))
    }))

  it.live("names the summary after the options when the response names no model", () =>
    Effect.gen(function* () {
      const summary = yield* summarizeWith([reply("A summary.")], { name: "local", model: "llama-test" }).run
      assert.strictEqual(summary.model, "llama-test")
      assert.strictEqual(summary.summarizer, "local")
    }))

  it.live("an empty reply fails with EmptySummary at once (never retried)", () =>
    Effect.gen(function* () {
      const { model, run } = summarizeWith([reply(" \n "), reply("never reached")])
      const error = failureOf(yield* Effect.exit(run))
      assert.strictEqual(error.reason._tag, "EmptySummary")
      assert.deepInclude(error.reason, { stopReason: "stop", outputTokens: 250 })
      assert.strictEqual(error.attempts, 1)
      assert.strictEqual(model.prompts.length, 1)
    }))

  it.live("retries a rate limit, a provider error, a dropped connection and a timeout, then succeeds", () =>
    Effect.gen(function* () {
      const { model, run } = summarizeWith([
        new AiError.RateLimitError({ retryAfter: Duration.millis(5), http: http(429) }),
        new AiError.InternalProviderError({ description: "upstream failed", http: http(500) }),
        new AiError.NetworkError({ reason: "TransportError", method: "POST", url: "http://model.test" }),
        "hang",
        reply("Recovered.")
      ], { retry: { base: "1 millis", maxDelay: "2 millis", retries: 4 }, timeout: "50 millis" })
      const summary = yield* run
      assert.strictEqual(summary.text, "Recovered.")
      assert.strictEqual(model.prompts.length, 5)
    }))

  it.live("gives up after its retries with the last reason and the number of attempts", () =>
    Effect.gen(function* () {
      const { model, run } = summarizeWith([new AiError.InternalProviderError({ description: "still down" })])
      const error = failureOf(yield* Effect.exit(run))
      assert.strictEqual(error.reason._tag, "Server")
      assert.isTrue(error.isRetryable)
      assert.strictEqual(error.attempts, 4)
      assert.strictEqual(model.prompts.length, 4)
      assert.include(error.detail, "still down")
    }))

  it.live("a non-retryable error fails at once, with the provider's status when it reported one", () =>
    Effect.gen(function* () {
      const auth = summarizeWith([new AiError.AuthenticationError({ kind: "InvalidKey", http: http(401) })])
      const authError = failureOf(yield* Effect.exit(auth.run))
      assert.strictEqual(authError.reason._tag, "Unauthorized")
      assert.strictEqual(authError.status, 401)
      assert.strictEqual(authError.attempts, 1)
      assert.strictEqual(auth.model.prompts.length, 1)

      const invalid = summarizeWith([new AiError.InvalidRequestError({ description: "max_tokens too large" })])
      const invalidError = failureOf(yield* Effect.exit(invalid.run))
      assert.strictEqual(invalidError.reason._tag, "BadRequest")
      assert.isUndefined(invalidError.status)
      assert.include(invalidError.detail, "max_tokens too large")
      assert.strictEqual(invalid.model.prompts.length, 1)
    }))

  it.live("layerWithFallback and withFallback summarize extractively when the model fails", () =>
    Effect.gen(function* () {
      const failing = () => scriptedModel([new AiError.AuthenticationError({ kind: "ExpiredKey" })])
      const viaLayer = yield* Effect.flatMap(Effect.service(Summarizer), (s) => s.summarize(request)).pipe(
        Effect.provide(LanguageModelSummarizer.layerWithFallback(fast).pipe(Layer.provide(failing().layer)))
      )
      const primary = yield* LanguageModelSummarizer.make(fast).pipe(Effect.provide(failing().layer))
      const viaCombinator = yield* withFallback(primary, ExtractiveSummarizer.make()).summarize(request)
      const extractive = yield* ExtractiveSummarizer.make().summarize(request)
      for (const summary of [viaLayer, viaCombinator]) {
        assert.strictEqual(summary.summarizer, "extractive")
        assert.strictEqual(summary.text, extractive.text)
        assert.strictEqual(summary.fellBackFrom?.summarizer, "language-model")
        assert.strictEqual(summary.fellBackFrom?.error.reason._tag, "Unauthorized")
      }
    }))
})

describe("reasonOfAiError", () => {
  const reasons: ReadonlyArray<AiError.AiErrorReason> = [
    new AiError.RateLimitError({ retryAfter: Duration.seconds(3), http: http(429) }),
    new AiError.QuotaExhaustedError({}),
    new AiError.AuthenticationError({ kind: "MissingKey" }),
    new AiError.ContentPolicyError({ description: "refused" }),
    new AiError.InvalidRequestError({ parameter: "temperature" }),
    new AiError.InvalidResponseError({ description: "not JSON" }),
    new AiError.InternalProviderError({ description: "boom", http: http(503) }),
    new AiError.NetworkError({ reason: "TransportError", method: "POST", url: "http://x" }),
    new AiError.NetworkError({ reason: "InvalidUrlError", method: "POST", url: "::" }),
    new AiError.InvalidOutputError({ description: "bad part" }),
    new AiError.StructuredOutputError({ description: "bad object", responseText: "{" }),
    new AiError.UnsupportedSchemaError({ description: "unions" }),
    new AiError.UnknownError({}),
    new AiError.ToolNotFoundError({ toolName: "t", availableTools: [] }),
    new AiError.ToolParameterValidationError({ toolName: "t", description: "d" }),
    new AiError.InvalidToolResultError({ toolName: "t", description: "d" }),
    new AiError.ToolResultEncodingError({ toolName: "t", toolResult: 1n, description: "d" }),
    new AiError.ToolConfigurationError({ toolName: "t", description: "d" }),
    new AiError.ToolkitRequiredError({ pendingApprovals: ["t"] }),
    new AiError.InvalidUserInputError({ description: "d" })
  ]

  it("keeps every AiError reason's retryability, its message, its status and the AiError as the cause", () => {
    assert.strictEqual(new Set(reasons.map((r) => r._tag)).size, 19, "one of each AiError reason")
    for (const reason of reasons) {
      const error = AiError.make({ module: "Test", method: "generateText", reason })
      const ours = reasonOfAiError(error)
      assert.strictEqual(ours.isRetryable, reason.isRetryable, reason._tag)
      assert.strictEqual(ours.detail, reason.message, reason._tag)
      assert.strictEqual("cause" in ours ? ours.cause : undefined, error, reason._tag)
      const status = "http" in reason ? reason.http?.response?.status : undefined
      assert.strictEqual("status" in ours ? ours.status : undefined, status, reason._tag)
    }
  })

  it("maps the kinds a retry policy cares about to their own reasons", () => {
    const tags = reasons.map((reason) => [
      reason._tag + (reason._tag === "NetworkError" ? `/${reason.reason}` : ""),
      reasonOfAiError(AiError.make({ module: "Test", method: "m", reason }))._tag
    ])
    assert.deepInclude(tags, ["RateLimitError", "RateLimited"])
    assert.deepInclude(tags, ["InternalProviderError", "Server"])
    assert.deepInclude(tags, ["NetworkError/TransportError", "Connection"])
    assert.deepInclude(tags, ["NetworkError/InvalidUrlError", "BadRequest"])
    assert.deepInclude(tags, ["AuthenticationError", "Unauthorized"])
    assert.deepInclude(tags, ["QuotaExhaustedError", "BadRequest"])
    assert.deepInclude(tags, ["UnknownError", "StreamError"])
    const rateLimited = reasonOfAiError(AiError.make({ module: "Test", method: "m", reason: reasons[0]! }))
    assert.strictEqual("retryAfterMillis" in rateLimited ? rateLimited.retryAfterMillis : undefined, 3_000)
  })
})
