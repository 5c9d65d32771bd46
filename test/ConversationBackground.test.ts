/**
 * Background compaction (`CompactionPolicy.backgroundAt`, issue 29), in scripted time: a summarizer that takes 5 s of
 * Effect's clock and agent steps of 2 s (`test/fixtures/BackgroundReplay.ts`, under `TestClock`: no wall time). The
 * rules: the background never changes the view before it is applied, the log records a summary only when it is
 * applied, a failed background summary falls back to the blocking path, closing the scope interrupts the fiber, a
 * resumed session sends the live one's requests byte for byte, and a background summary's retention equals a blocking
 * one's on the same cut.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Result from "effect/Result"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { measure } from "../src/Retention.ts"
import type { MemorySessions } from "../src/SessionStore.ts"
import { referenceAnchors, tallyRetention } from "./fixtures/Anchors.ts"
import { checkRequest, formatApiViolations } from "./fixtures/ApiRules.ts"
import { blockingTwin, replayTimed, scriptedSummarizer } from "./fixtures/BackgroundReplay.ts"

const LATENCY = 5_000

/** A coding session: `turns` human turns, each of `steps` file reads of about `size` repetitions of a phrase. */
const session = (turns: number, steps: number, size: number): ReadonlyArray<Message> => {
  const out: Array<Message> = []
  for (let k = 0; k < turns; k++) {
    out.push({ role: "user", content: `task ${k}: fix module m${k} (see #${100 + k})` })
    for (let j = 0; j < steps; j++) {
      const id = `toolu_${k}_${j}`
      out.push({
        role: "assistant",
        content: [{ type: "text", text: `step ${j}` }, {
          type: "tool_use",
          id,
          name: "read",
          input: { path: `/src/m${k}_${j}.ts` }
        }]
      } as Message)
      out.push({
        role: "user",
        content: [{ type: "tool_result", tool_use_id: id, content: `line of m${k}_${j} `.repeat(size) }]
      } as Message)
    }
    out.push({ role: "assistant", content: `done ${k}` })
  }
  return out
}

const messages = session(10, 4, 60)

const policyOf = (fields: { readonly backgroundAt?: number; readonly maxTailTokens?: number } = {}) =>
  CompactionPolicy.makeUnsafe({
    contextWindow: 20_000,
    minRemaining: 4_000,
    keepRecentTokens: 1_200,
    keepRecentTurns: 1,
    compactAtTokens: 5_000,
    ...fields
  })

// 0.6, as the benchmark: the summary's cut must leave its tail room to grow to the trigger (plus a tenth) under the
// ceiling a compaction keeps (compactAtTokens − summaryBudgetTokens − minGrowthTokens = 2,750 here); from 0.5 the
// growth alone (2,500) leaves no such cut, so the step that compacts updates the summary (tested below)
const background = policyOf({ backgroundAt: 0.6 })
const options = { minFreedTokens: 300, stepMs: 2_000 }

const assertValid = (requests: ReadonlyArray<Parameters<typeof checkRequest>[0]>) =>
  requests.forEach((request, i) => {
    const violations = checkRequest(request)
    assert.strictEqual(violations.length, 0, `request ${i + 1}: ${formatApiViolations(violations)}`)
  })

describe("Conversation: background compaction", () => {
  it("backgroundAt is a fraction strictly between 0 and 1, absent by default", () => {
    assert.isUndefined(CompactionPolicy.makeUnsafe().backgroundAt)
    assert.strictEqual(CompactionPolicy.makeUnsafe({ backgroundAt: 0.8 }).backgroundAt, 0.8)
    for (const bad of [0, 1, 1.5, -0.2, Number.NaN]) {
      const made = CompactionPolicy.make({ backgroundAt: bad })
      assert.isTrue(Result.isFailure(made) && made.failure.field === "backgroundAt", String(bad))
    }
  })

  it.effect("the trigger applies the summary made in the background without waiting; nothing changes before", () =>
    Effect.gen(function* () {
      const store: MemorySessions = new Map()
      const compactionsInLog = () =>
        (store.get("memory") ?? []).filter((e) => JSON.parse(e.line).type === "compaction").length
      const scripted = scriptedSummarizer(LATENCY)
      let applied = 0
      let startedBefore = false
      const live = yield* replayTimed(messages, {
        ...options,
        policy: background,
        summarizer: scripted.layer,
        store,
        keepObjects: true,
        onPrepared: (_, prepared) =>
          Effect.sync(() => {
            if (prepared.compaction !== undefined && prepared.compaction._tag !== "Skipped") applied++
            // the log holds a compaction only once one is applied
            assert.strictEqual(compactionsInLog(), applied)
            if (applied === 0 && scripted.calls.requests.length > 0) startedBefore = true
          })
      })
      const off = yield* replayTimed(messages, {
        ...options,
        policy: policyOf(),
        summarizer: scriptedSummarizer(LATENCY).layer
      })
      assert.isTrue(startedBefore, "the background summary started before the first compaction")
      assert.isAbove(live.compactions.length, 1)
      // until the first compaction, every request is the one a conversation without the background sends
      const first = live.compactions[0]!.request
      assert.strictEqual(off.compactions[0]!.request, first)
      assert.deepStrictEqual(live.requests.slice(0, first - 1), off.requests.slice(0, first - 1))
      // the first waits for nothing; a later one may wait for a summary started again after an offload changed its head
      const blocked = live.compactions.map((c) => c.blockedMs)
      assert.strictEqual(blocked[0], 0)
      assert.isAtLeast(blocked.filter((ms) => ms === 0).length, blocked.length - 1, String(blocked))
      assert.isTrue(blocked.every((ms) => ms < LATENCY), String(blocked))
      assert.deepStrictEqual(off.compactions.map((c) => c.blockedMs), off.compactions.map(() => LATENCY))
      assertValid(live.objects)
    }))

  it.effect("its retention equals a blocking compaction's on the same cut of the same view", () =>
    Effect.gen(function* () {
      const live = yield* replayTimed(messages, {
        ...options,
        policy: background,
        summarizer: scriptedSummarizer(LATENCY).layer
      })
      assert.isAbove(live.compactions.length, 1)
      for (const c of live.compactions) {
        const twin = blockingTwin(c, { policy: background, minFreedTokens: options.minFreedTokens })
        assert.strictEqual(JSON.stringify(twin.applied), JSON.stringify(twin.blocking))
        assert.deepStrictEqual(
          measure(twin.span, twin.applied, { tail: twin.applied.slice(1) }),
          measure(twin.span, twin.blocking, { tail: twin.blocking.slice(1) })
        )
        const anchors = referenceAnchors(twin.span)
        assert.deepStrictEqual(
          tallyRetention(anchors, twin.applied, twin.applied.slice(1)),
          tallyRetention(anchors, twin.blocking, twin.blocking.slice(1))
        )
      }
    }))

  it.effect("a failed background summary falls back to the blocking path", () =>
    Effect.gen(function* () {
      const run = (fail?: (n: number, startedAtMs: number) => boolean) => {
        const scripted = scriptedSummarizer(LATENCY, { fail })
        return Effect.map(
          replayTimed(messages, { ...options, policy: background, summarizer: scripted.layer, keepObjects: true }),
          (replay) => ({ replay, calls: scripted.calls })
        )
      }
      const ok = yield* run()
      const trigger = ok.replay.compactions[0]!.atMs
      // every summary started before the first trigger fails: that step falls back to summarizing itself
      const failing = yield* run((_, startedAtMs) => startedAtMs < trigger)
      const first = failing.replay.compactions[0]!
      assert.strictEqual(first.atMs, trigger)
      // it waits for the summary in flight to fail, then for its own: the whole latency at least
      assert.isAtLeast(first.blockedMs, LATENCY)
      assert.isBelow(first.blockedMs, 2 * LATENCY)
      assert.isAbove(failing.calls.requests.length, ok.calls.requests.length)
      const twin = blockingTwin(first, { policy: background, minFreedTokens: options.minFreedTokens })
      assert.strictEqual(JSON.stringify(twin.applied), JSON.stringify(twin.blocking))
      assertValid(failing.replay.objects)
    }))

  it.effect("closing the conversation's scope interrupts the background fiber", () =>
    Effect.gen(function* () {
      const off = yield* replayTimed(messages, {
        ...options,
        policy: policyOf(),
        summarizer: scriptedSummarizer(LATENCY).layer
      })
      // stop right before the reply of the first compaction's request, with no time passing: the summary is in flight
      let replies = 0
      const end = messages.findIndex((m) => m.role === "assistant" && ++replies === off.compactions[0]!.request)
      const scripted = scriptedSummarizer(LATENCY)
      const cut = yield* replayTimed(messages.slice(0, end), {
        ...options,
        stepMs: 0,
        policy: background,
        summarizer: scripted.layer
      })
      assert.strictEqual(cut.compactions.length, 0)
      assert.strictEqual(scripted.calls.requests.length, 1)
      assert.strictEqual(scripted.calls.interrupted, 1)
    }))

  it.effect("a resumed conversation recomputes the pending summary and sends the live one's requests", () =>
    Effect.gen(function* () {
      const liveSummarizer = scriptedSummarizer(LATENCY)
      const live = yield* replayTimed(messages, {
        ...options,
        policy: background,
        summarizer: liveSummarizer.layer
      })
      const summarized = (calls: typeof liveSummarizer.calls) =>
        new Set(calls.requests.map((request) => JSON.stringify(request)))
      // every 1: a resume before every request. A request comes every 4 s (two 2 s steps) and a summary takes 5 s,
      // so every background summary is still pending at the resume after it starts, wherever the trigger-derived
      // start (internal/conversation/background.ts, `startPlan`) puts it. Every 2 resumed only between summaries
      // once the start moved later (each starts at a resume and is done 3 s before the next), so it alone no longer
      // reached the middle of one; it stays for the recomputation of a finished but not yet applied summary.
      for (const every of [1, 2]) {
        const scripted = scriptedSummarizer(LATENCY)
        const resumed = yield* replayTimed(messages, {
          ...options,
          policy: background,
          summarizer: scripted.layer,
          resumeEvery: every
        })
        assert.isAbove(resumed.resumes, 0)
        assert.strictEqual(resumed.requests.length, live.requests.length)
        resumed.requests.forEach((request, i) =>
          assert.isTrue(request === live.requests[i], `every ${every}: request ${i + 1}`)
        )
        // each resume recomputed the pending summary on the same cut: the summaries asked for are the live one's
        assert.isAbove(scripted.calls.requests.length, liveSummarizer.calls.requests.length, `every ${every}`)
        assert.deepStrictEqual(summarized(scripted.calls), summarized(liveSummarizer.calls), `every ${every}`)
        // each resume in the middle of a background summary interrupted it (and it started again, as above)
        if (every === 1) assert.isAbove(scripted.calls.interrupted, 0)
      }
    }))

  it.effect("when the tail from the background's cut is over budget, only the span between the cuts is summarized", () =>
    Effect.gen(function* () {
      const policy = policyOf({ backgroundAt: 0.3, maxTailTokens: 1_800 })
      const scripted = scriptedSummarizer(LATENCY)
      const live = yield* replayTimed(messages, {
        ...options,
        policy,
        summarizer: scripted.layer,
        keepObjects: true
      })
      const first = live.compactions[0]!
      assert.strictEqual(first.blockedMs, LATENCY)
      const [head, update] = scripted.calls.requests
      assert.isUndefined(head!.previousSummary)
      assert.isDefined(update!.previousSummary)
      if (first.outcome._tag === "Skipped") return assert.fail("skipped")
      // the update reads the messages between the two cuts only: the background's head plus them is the whole cut
      assert.strictEqual(head!.messages.length + update!.messages.length, first.outcome.cut.removed.to)
      assert.isTrue(update!.previousSummary!.length > 0)
      assertValid(live.objects)
    }))
})
