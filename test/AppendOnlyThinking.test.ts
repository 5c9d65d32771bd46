/**
 * Issue 39, "Done when" 1, over the shared session with thinking: driven through `Conversation` against the local
 * server with rule 43 in error mode (`fixtures/PreservedThinkingDrive.ts`), no request is rejected and no thinking
 * block dropped, whether the caller set `thinking` on the `Conversation` or only on its SDK call: the conversation
 * stays append-only between compactions and its compactions keep no stale thinking.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { CompactionPolicy } from "../src/Policy.ts"
import { corpus } from "./fixtures/Corpus.ts"
import { drive, figuresOf } from "./fixtures/PreservedThinkingDrive.ts"

const POLICY = CompactionPolicy.makeUnsafe({ contextWindow: 60_000, compactAtTokens: 30_000, keepRecentTokens: 8_000 })

describe("append-only under preserved thinking (rule 43, error mode), real sessions", () => {
  it.effect(
    "pi__session-2025-12-17_thinking: 0 rejected, 0 dropped, thinking on the Conversation or on the call",
    () =>
      Effect.gen(function* () {
        const found = corpus().find((s) => s.name === "pi__session-2025-12-17_thinking")
        assert.isDefined(found, "pi__session-2025-12-17_thinking in ../shared/data/sessions")
        for (const where of ["conversation", "caller"] as const) {
          const driven = yield* drive(found!.messages, POLICY, where)
          console.log(figuresOf(`thinking session, thinking on the ${where}`, driven))
          assert.deepStrictEqual(driven.rejected, [], where)
          assert.strictEqual(driven.dropped, 0, where)
          assert.strictEqual(driven.offloadsBetween, 0, where)
          assert.isAtLeast(driven.compactions, 2, "the session compacts")
          assert.isAbove(driven.withSignedThinking, 0, "signed thinking was sent back")
        }
      }),
    120_000
  )

  it.effect(
    "pi__before-compaction (49 thinking blocks), thinking set on the call only: 0 rejected, 0 dropped",
    () =>
      Effect.gen(function* () {
        const found = corpus().find((s) => s.name === "pi__before-compaction")
        assert.isDefined(found, "pi__before-compaction in ../shared/data/sessions")
        const driven = yield* drive(found!.messages, POLICY, "caller")
        console.log(figuresOf("before-compaction, thinking on the caller", driven))
        assert.deepStrictEqual(driven.rejected, [])
        assert.strictEqual(driven.dropped, 0)
        assert.strictEqual(driven.offloadsBetween, 0)
        assert.isAtLeast(driven.compactions, 2)
        assert.isAbove(driven.withSignedThinking, 0)
      }),
    120_000
  )
})
