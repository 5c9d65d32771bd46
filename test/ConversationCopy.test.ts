/**
 * What the `Conversation` service remembers between its steps is a field of its state (issue 37): the time of the
 * last request (`lastRequestAt`, which decides whether the cache is cold), the request awaiting its reply (`issued`:
 * the view it sent on a thread, the request and prediction a diagnosis compares), the cache diagnostics learned
 * (`cacheLearning`), a refused thread (`unthreaded`) and the cut of the summary made in the background
 * (`backgroundCut`). So a state copied out of a live service into a new one
 * (`layerMemory({ initial })`), at any point of an agent loop (after an append, after a `prepare`, after a reply),
 * sends the same requests, predicts the same cache misses and records the same diagnoses as the live service. The
 * same copy with those fields removed (what a service that kept them in its closure handed on) decides otherwise:
 * the check can fail.
 *
 * The loop runs at scripted times (`TestClock.setTime` before each step, the same in every run), with pauses past
 * the cache's lifetime, on server-held threads with diagnostics on, and records SDK replies whose usage is derived
 * from the request they answer.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { TestClock } from "effect/testing"
import { Conversation, type ConversationOptions } from "../src/Conversation.ts"
import { asMessageParams, type ConversationState, type MessageParam, type SdkReply } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import type { Request } from "../src/Request.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { generateSession } from "./fixtures/Conversation.ts"

/** One step of the loop, at the time it runs (ms). */
type Op =
  | { readonly _tag: "append"; readonly at: number; readonly message: MessageParam }
  | { readonly _tag: "prepare"; readonly at: number }
  | { readonly _tag: "reply"; readonly at: number; readonly message: MessageParam; readonly n: number }

/** A generated session as the loop's steps: each reply after a `prepare`, every 6th after a pause past 5 minutes. */
const opsOf = (seed: number, messages: number): ReadonlyArray<Op> => {
  const ops: Array<Op> = []
  let at = 1_000_000
  let n = 0
  for (const message of asMessageParams(generateSession(seed, { messages, maxOutput: 8_000 }))) {
    if (message.role !== "assistant") {
      at += 2_000
      ops.push({ _tag: "append", at, message })
      continue
    }
    n++
    at += n % 6 === 0 ? 6 * 60_000 : 20_000
    ops.push({ _tag: "prepare", at })
    at += 5_000
    ops.push({ _tag: "reply", at, message, n })
  }
  return ops
}

/** The SDK's reply carrying `message`, its usage derived from the request it answers (a cache read and a write). */
const sdkReply = (message: MessageParam, n: number, request: Request | undefined): SdkReply => {
  const tokens = request === undefined ? 1_000 : estimateTokens(request.messages as never) + 400
  return {
    id: `msg_${n}`,
    type: "message",
    role: "assistant",
    content:
      (typeof message.content === "string" ? [{ type: "text", text: message.content }] : message.content) as SdkReply[
        "content"
      ],
    stop_reason: "end_turn",
    usage: {
      input_tokens: 40,
      output_tokens: 30,
      cache_read_input_tokens: Math.floor(tokens * 0.9),
      cache_creation_input_tokens: Math.ceil(tokens * 0.17)
    },
    diagnostics: null
  }
}

/** The 4th reply goes without a thread (`threadReplay`'s answer to `thread_unsupported_request`). */
const UNTHREADED_REPLY = 4

const options: ConversationOptions = {
  system: "You are a coding agent.",
  model: "claude-sonnet-5",
  diagnostics: true,
  threads: true,
  // rewrites in place between compactions, so that offloads (and the predictions and cold decisions they bring) occur
  appendOnly: false,
  policy: CompactionPolicy.makeUnsafe({ contextWindow: 60_000 })
}

/** Without threads, with the summary made in the background from 0.5 of the trigger on. */
const inBackground: ConversationOptions = {
  system: "You are a coding agent.",
  policy: CompactionPolicy.makeUnsafe({
    contextWindow: 30_000,
    minRemaining: 4_000,
    compactAtTokens: 10_000,
    keepRecentTokens: 3_000,
    keepRecentTurns: 1,
    backgroundAt: 0.5
  })
}

/** What one step decided: a request (its bytes, prediction, offloads, compaction) or a recorded reply's report. */
type Decision = string

/**
 * Runs `ops` through a `Conversation` in memory (from `initial` when given), each at its time, with the last request
 * handed out known to its reply: the decisions, and the state after each step.
 */
const run = (
  ops: ReadonlyArray<Op>,
  initial: ConversationState | undefined,
  last?: Request | undefined,
  settings: ConversationOptions = options
) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    const decisions: Array<Decision> = []
    const states: Array<ConversationState> = []
    let request = last
    for (const op of ops) {
      yield* TestClock.setTime(op.at)
      if (op._tag === "append") yield* conversation.append(op.message)
      else if (op._tag === "prepare") {
        const prepared = yield* conversation.prepare
        request = prepared.request
        decisions.push(JSON.stringify({
          request: prepared.request,
          prediction: prepared.cachePrediction,
          offloaded: prepared.offloaded.map((o) => o.toolUseId),
          compaction: prepared.compaction?._tag
        }))
      } else {
        const state = yield* conversation.recordReply(
          sdkReply(op.message, op.n, request),
          undefined,
          op.n === UNTHREADED_REPLY ? { unthreaded: true } : undefined
        )
        decisions.push(JSON.stringify({ reply: state.reply, thread: state.thread, view: state.view.length }))
      }
      states.push(yield* conversation.state)
    }
    return { decisions, states, request }
  }).pipe(
    Effect.provide(
      Conversation.layerMemory({ ...settings, ...(initial === undefined ? {} : { initial }) }).pipe(
        Layer.provide(ExtractiveSummarizer.layer)
      )
    )
  )

/** The decisions of the steps before op `k` (each `prepare` and each reply is one). */
const decisionsBefore = (ops: ReadonlyArray<Op>, k: number): number =>
  ops.slice(0, k).filter((op) => op._tag !== "append").length

/** The state without what the service remembers between steps: what a copy handed on before issue 37. */
const forgetful = (state: ConversationState): ConversationState => {
  const { lastRequestAt: _at, issued: _issued, cacheLearning: _learning, unthreaded: _unthreaded, ...rest } = state
  return rest
}

describe("Conversation: a copied state decides as the live one", () => {
  it.effect(
    "copied after any step, it sends the same requests, predictions and diagnoses as the live service",
    () =>
      Effect.gen(function* () {
        const ops = opsOf(37, 160)
        const live = yield* run(ops, undefined)
        // the loop exercises what is remembered: cold pauses that offload, predictions, a refused thread
        assert.isAbove(live.decisions.filter((d) => d.includes('"prediction":{')).length, 3, "predicted misses")
        assert.isTrue(live.states.some((s) => s.unthreaded === true), "a reply was recorded unthreaded")
        assert.isTrue(live.states.some((s) => s.issued?.sent !== undefined), "a request went on a thread")
        // copy points after an append, after a prepare and after a reply, before and after the refused thread
        const points = [3, 4, 5, 9, 10, 14, 15, 16, 26, 27, 28, 40, 41, 42, 60, 61, 62].filter((k) => k < ops.length)
        let forgetfulDiffers = 0
        for (const k of points) {
          const before = ops.slice(0, k)
          const prefix = yield* run(before, undefined)
          const copied = prefix.states.at(-1)!
          const rest = ops.slice(k)
          const expected = live.decisions.slice(decisionsBefore(ops, k))
          const resumed = yield* run(rest, copied, prefix.request)
          assert.deepStrictEqual(resumed.decisions, expected, `copied after step ${k} (${ops[k - 1]!._tag})`)
          const plain = yield* run(rest, forgetful(copied), prefix.request)
          if (JSON.stringify(plain.decisions) !== JSON.stringify(expected)) forgetfulDiffers++
        }
        // without the remembered fields, most copies decide otherwise (a warm cache after a pause, no prediction, a
        // thread not anchored or tried again)
        assert.isAbove(forgetfulDiffers, points.length / 2, `${forgetfulDiffers} of ${points.length} copies differ`)
      }),
    120_000
  )

  it.effect(
    "a pause past the cache's lifetime is cold for the copy too: the copy offloads what the live one does",
    () =>
      Effect.gen(function* () {
        const ops = opsOf(41, 120)
        // the prepares after a pause (a cold cache), and the step just before each
        const cold = ops.flatMap((op, k) =>
          op._tag === "prepare" && k > 0 && op.at - ops[k - 1]!.at > 5 * 60_000 ? [k] : []
        )
        assert.isAbove(cold.length, 2)
        const live = yield* run(ops, undefined)
        let warmDiffers = 0
        for (const k of cold) {
          const prefix = yield* run(ops.slice(0, k), undefined)
          const copied = prefix.states.at(-1)!
          assert.isDefined(copied.lastRequestAt)
          const expected = live.decisions[decisionsBefore(ops, k)]
          const next = yield* run(ops.slice(k, k + 1), copied, prefix.request)
          assert.strictEqual(next.decisions[0], expected, `the cold prepare at step ${k}`)
          // the same state with the time of its last request forgotten counts the cache warm
          const { lastRequestAt: _, ...warm } = copied
          const asWarm = yield* run(ops.slice(k, k + 1), warm, prefix.request)
          if (asWarm.decisions[0] !== expected) warmDiffers++
        }
        assert.isAbove(warmDiffers, 0, "a cold cache changed no decision: the check shows nothing")
      }),
    120_000
  )

  it.effect(
    "copied while a summary is made in the background, it applies that summary on the same cut",
    () =>
      Effect.gen(function* () {
        const ops = opsOf(43, 220)
        const live = yield* run(ops, undefined, undefined, inBackground)
        assert.isAbove(live.decisions.filter((d) => d.includes('"compaction":"Compacted"')).length, 1, "compactions")
        // the steps at which a summary is pending in the background (the state's cut, as its reply recorded it)
        const pending = live.states.flatMap((s, k) => s.backgroundCut === undefined ? [] : [k + 1])
        assert.isAbove(pending.length, 3)
        let forgetfulDiffers = 0
        // four of them, spread over the session
        const points = [0, 1, 2, 3].map((q) => pending[Math.floor(q * (pending.length - 1) / 3)]!)
        for (const k of points) {
          const prefix = yield* run(ops.slice(0, k), undefined, undefined, inBackground)
          const copied = prefix.states.at(-1)!
          assert.isDefined(copied.backgroundCut)
          const expected = live.decisions.slice(decisionsBefore(ops, k))
          const resumed = yield* run(ops.slice(k), copied, prefix.request, inBackground)
          assert.deepStrictEqual(resumed.decisions, expected, `copied after step ${k}`)
          const { backgroundCut: _, ...without } = copied
          const plain = yield* run(ops.slice(k), without, prefix.request, inBackground)
          if (JSON.stringify(plain.decisions) !== JSON.stringify(expected)) forgetfulDiffers++
        }
        // without the cut, the copy compacts on the trigger's cut instead: other requests
        assert.isAbove(forgetfulDiffers, 0, "the background cut changed no decision: the check shows nothing")
      }),
    120_000
  )
})
