/**
 * The outcome of a compaction says what happened: the cut (which messages left, which stayed) judged against the
 * views before and after, its retention judged by the independent extractor (test/fixtures/Anchors.ts), `upTo`
 * landing on a safe cut at or before the chosen message, and no repairs reported for a tail the library built.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { compactContext, type CompactOutcome } from "../src/Compact.ts"
import { Conversation } from "../src/Conversation.ts"
import type { MessageParam } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { CATEGORIES } from "../src/Retention.ts"
import { REF_CATEGORIES, referenceAnchors, tallyRetention } from "./fixtures/Anchors.ts"
import { checkApiRules, formatApiViolations } from "./fixtures/ApiRules.ts"
import { generateSession } from "./fixtures/Conversation.ts"

const policy = CompactionPolicy.makeUnsafe({
  keepRecentTokens: 2_000,
  keepRecentTurns: 2,
  contextWindow: 50_000,
  minRemaining: 5_000
})

const compacted = (outcome: CompactOutcome) => {
  assert.isTrue(outcome._tag === "Compacted" || outcome._tag === "FellBack", `expected a compaction: ${outcome._tag}`)
  return outcome as Extract<CompactOutcome, { _tag: "Compacted" | "FellBack" }>
}

/**
 * The kept tail as a compaction leaves it by default: every `thinking` / `redacted_thinking` block of its assistant
 * messages left out, and a message left with no block left out (judged here). The summary changes the prefix of
 * every kept thinking block, so it is stale (API-RULES 29, 43); since append-only with thinking (issue 39) the default
 * compaction strips it rather than keep it verbatim, which is what the kept tail was compared with before.
 */
const withoutStaleThinking = <M extends Message | MessageParam>(tail: ReadonlyArray<M>): Array<M> =>
  tail.flatMap((m) => {
    if (m.role !== "assistant" || typeof m.content === "string") return [m]
    const kept = (m.content as ReadonlyArray<{ readonly type: string }>).filter((b) =>
      b.type !== "thinking" && b.type !== "redacted_thinking"
    )
    if (kept.length === m.content.length) return [m]
    return kept.length === 0 ? [] : [{ ...m, content: kept } as M]
  })

/**
 * `after` with each tool result the compaction offloaded given back its content from `tail` (judged here): a result
 * whose content is now a pointer (`[offloaded ...]`) naming its own `tool_use_id`. Append-only between compactions
 * (issue 39) holds the offloads that come due until the next compaction, which applies those of its kept tail in the
 * same rewrite; every other block must be as it was.
 */
const withOffloadsUndone = <M extends Message | MessageParam>(
  after: ReadonlyArray<M>,
  tail: ReadonlyArray<M>
): Array<M> =>
  after.map((m, i) => {
    const was = tail[i]
    if (was === undefined || typeof m.content === "string" || typeof was.content === "string") return m
    const blocks = m.content as ReadonlyArray<{ readonly type: string; readonly content?: unknown }>
    const before = was.content as ReadonlyArray<{ readonly type: string; readonly tool_use_id?: string }>
    const restored = blocks.map((b, k) => {
      const old = before[k]
      const pointer = b.type === "tool_result" && old?.type === "tool_result" && typeof b.content === "string" &&
        b.content.startsWith("[offloaded ") && b.content.includes(`id="${old.tool_use_id}"`)
      return pointer ? old : b
    })
    return restored.every((b, k) => b === blocks[k]) ? m : { ...m, content: restored } as M
  })

/** True when the tool ids of `messages.slice(cut)` answer no call of `messages.slice(0, cut)`, judged here. */
const pairsKept = (messages: ReadonlyArray<Message>, cut: number): boolean => {
  const calls = new Set<string>()
  for (const m of messages.slice(0, cut)) {
    if (typeof m.content === "string") continue
    for (const b of m.content) if (b.type === "tool_use") calls.add((b as { id: string }).id)
  }
  return messages.slice(cut).every((m) =>
    typeof m.content === "string" ||
    m.content.every((b) => b.type !== "tool_result" || !calls.has((b as { tool_use_id: string }).tool_use_id))
  )
}

const assertApiValid = (view: ReadonlyArray<unknown>, where: string) => {
  const violations = checkApiRules(view as never)
  assert.strictEqual(violations.length, 0, `${where}: ${formatApiViolations(violations)}`)
}

describe("the outcome of a compaction", () => {
  it.effect("reports the cut (which left, which stayed) and the retention of the removed span", () =>
    Effect.gen(function* () {
      for (const seed of [1, 2, 3]) {
        const before = generateSession(seed, { messages: 60, maxOutput: 3_000 })
        const { messages: after, outcome } = yield* compactContext(before, policy, { minFreedTokens: 1 })
        const info = compacted(outcome)
        const { removed, kept } = info.cut
        assert.strictEqual(removed.from, 0)
        assert.strictEqual(removed.to, kept.from)
        assert.strictEqual(kept.to, before.length)
        assert.isAbove(removed.to, 0)
        // judged on the views: every kept message is in the new view, in order, after the summary; no removed
        // message other than a system message is
        const tail = after.slice(1)
        assert.deepStrictEqual(tail, before.slice(kept.from), `seed ${seed}: the new view is summary + kept`)
        for (const m of before.slice(0, removed.to)) {
          if (m.role !== "system") assert.isFalse(after.includes(m), `seed ${seed}: a removed message stayed`)
        }
        // the retention agrees with the independent extractor over the same span, view and tail
        const reference = tallyRetention(referenceAnchors(before.slice(0, removed.to)), after, tail)
        assert.deepStrictEqual(CATEGORIES, REF_CATEGORIES)
        for (const c of REF_CATEGORIES) {
          const got = info.retention.categories[c]
          assert.deepStrictEqual(
            { counted: got.counted, present: got.present, inTail: got.inTail },
            reference[c],
            `seed ${seed}, ${c}`
          )
        }
        assertApiValid(after, `seed ${seed}`)
      }
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))

  it.effect("upTo: the cut lands on a safe cut at or before the chosen message, and every view is valid", () =>
    Effect.gen(function* () {
      const before = generateSession(7, { messages: 50, maxOutput: 2_000 })
      let compactions = 0
      for (let upTo = 1; upTo <= before.length; upTo++) {
        const { messages: after, outcome } = yield* compactContext(before, policy, { upTo, minFreedTokens: 1 })
        assertApiValid(after, `upTo ${upTo}`)
        if (outcome._tag === "Skipped") {
          assert.strictEqual(after, before)
          continue
        }
        compactions++
        const cut = compacted(outcome).cut.kept.from
        assert.isAtMost(cut, upTo)
        assert.isAbove(cut, 0)
        assert.isTrue(pairsKept(before, cut), `upTo ${upTo}: cut ${cut} splits a tool call from its result`)
        // the nearest: no later cut up to upTo keeps the pairs
        for (let later = cut + 1; later <= upTo; later++) assert.isFalse(pairsKept(before, later), `upTo ${upTo}`)
        assert.deepStrictEqual(after.slice(1).filter((m) => m.role !== "system"), before.slice(cut))
      }
      assert.isAbove(compactions, before.length / 2)
    }).pipe(Effect.provide(ExtractiveSummarizer.layer)))
})

describe("a Conversation's manual compaction", () => {
  const conversation = (messages: ReadonlyArray<Message>) =>
    Effect.gen(function* () {
      const c = yield* Conversation
      for (const message of messages) {
        const param = message as unknown as MessageParam
        if (message.role === "assistant") yield* c.recordReply(param)
        else yield* c.append(param)
      }
      return c
    })
  const layer = Conversation.layerMemory({ policy, minFreedTokens: 1 }).pipe(
    Layer.provide(ExtractiveSummarizer.layer)
  )

  it.effect("with upTo: reports the cut of the view before, no repairs, and a valid request", () =>
    Effect.gen(function* () {
      const messages = generateSession(11, { messages: 40, maxOutput: 2_000 })
      let startsOnReply = 0
      for (let upTo = 4; upTo < messages.length; upTo++) {
        yield* Effect.gen(function* () {
          const c = yield* conversation(messages)
          const before = (yield* c.state).view
          const { outcome, request } = yield* c.compact({ upTo })
          if (outcome._tag === "Skipped") return
          const info = compacted(outcome)
          assert.isAtMost(info.cut.kept.from, upTo)
          assert.strictEqual(info.cut.kept.to, before.length)
          if (before[info.cut.kept.from]!.role === "assistant") startsOnReply++
          const after = (yield* c.state).view
          const kept = withoutStaleThinking(before.slice(info.cut.kept.from))
          assert.deepStrictEqual(withOffloadsUndone(after.slice(1), kept), kept)
          assert.deepStrictEqual(info.repairs, noRepairs, `upTo ${upTo}: a library-built tail needs no repair`)
          assertApiValid(request.messages, `upTo ${upTo}`)
        }).pipe(Effect.provide(layer))
      }
      // the case the repair report got wrong: a kept tail that opens on an assistant reply
      assert.isAbove(startsOnReply, 0)
    }))

  it.effect("prepare: the compaction the trigger ran reports its cut and retention, judged on the views", () =>
    Effect.gen(function* () {
      const c = yield* conversation(generateSession(13, { messages: 40, maxOutput: 2_000 }))
      yield* c.append({ role: "user", content: "go on, and keep /src/keep.ts in mind" })
      const before = (yield* c.state).view
      yield* c.recordReply({ role: "assistant", content: "on it" }, { input_tokens: 49_000, output_tokens: 10 })
      yield* c.append({ role: "user", content: "next" })
      const grown = (yield* c.state).view
      const prepared = yield* c.prepare
      const info = compacted(prepared.compaction!)
      const after = (yield* c.state).view
      assert.isAtLeast(grown.length, before.length)
      assert.strictEqual(info.cut.kept.to, grown.length)
      assert.deepStrictEqual(after.slice(1), withoutStaleThinking(grown.slice(info.cut.kept.from)))
      const reference = tallyRetention(referenceAnchors(grown.slice(0, info.cut.removed.to)), after, after.slice(1))
      for (const category of REF_CATEGORIES) {
        const got = info.retention.categories[category]
        assert.deepStrictEqual({ counted: got.counted, present: got.present, inTail: got.inTail }, reference[category])
      }
      assertApiValid(prepared.request.messages, "the request after the compaction")
    }).pipe(Effect.provide(layer)))

  it.effect("without upTo: no repairs reported", () =>
    Effect.gen(function* () {
      const c = yield* conversation(generateSession(12, { messages: 40, maxOutput: 2_000 }))
      const { outcome } = yield* c.compact()
      assert.deepStrictEqual(compacted(outcome).repairs, noRepairs)
    }).pipe(Effect.provide(layer)))
})

const noRepairs = {
  droppedEmptyBlocks: 0,
  droppedEmptyMessages: 0,
  mergedMessages: 0,
  droppedToolResults: [],
  addedErrorResults: [],
  reorderedMessages: 0,
  insertedLeadingUser: false,
  droppedDuplicateMessages: 0,
  droppedDuplicateToolUses: [],
  renamedToolUses: [],
  droppedBeforeCompaction: 0,
  droppedMisplacedBlocks: 0,
  movedSystemMessages: 0,
  mergedSystemMessages: 0,
  appendedUserForSystem: false
}
