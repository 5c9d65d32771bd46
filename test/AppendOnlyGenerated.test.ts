/**
 * Issue 39, "Done when" 1, over generated agent sessions with thinking on (every reply opens with thinking, every
 * third with an empty field as Fable 5.1 sends it) and the one-request, many-steps shape: driven through
 * `Conversation` against the local server with rule 43 in error mode (`fixtures/PreservedThinkingDrive.ts`), no
 * request is rejected and no thinking block dropped, whether the caller set `thinking` on the `Conversation` or only
 * on its SDK call. The control: the same drive with `appendOnly: false` (offloads in place) loses the thinking each
 * offload invalidates: left out of the request by the library when the conversation has no thinking config (which
 * cannot carry `drop_block`), dropped by the server under the binding otherwise. The judge failing on such thinking
 * sent back is shown in `ThinkingMovedPrefix.test.ts` (a 400 on the code before the library left it out).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { generateSession } from "./fixtures/Conversation.ts"
import { drive, figuresOf, withThinking } from "./fixtures/PreservedThinkingDrive.ts"

const POLICY = CompactionPolicy.makeUnsafe({ contextWindow: 60_000, compactAtTokens: 30_000, keepRecentTokens: 8_000 })

/** One user request, then `steps` tool steps with no human turn between them (the one-request, many-steps shape). */
const oneRequestManySteps = (steps: number): ReadonlyArray<Message> => {
  const generated = generateSession(7, { messages: steps * 3, maxOutput: 6_000 })
  const out: Array<Message> = [{ role: "user", content: "Fix every failing test in the repository." }]
  for (let i = 0; i < generated.length - 1 && out.length < 2 * steps + 1; i++) {
    const m = generated[i]!
    const next = generated[i + 1]!
    if (m.role !== "assistant" || next.role !== "user") continue
    if (typeof next.content === "string" || !next.content.every((b) => b.type === "tool_result")) continue
    out.push(m, next)
  }
  return withThinking(out)
}

describe("append-only under preserved thinking (rule 43, error mode), generated sessions", () => {
  it.effect(
    "agent sessions: 0 rejected, 0 dropped, empty thinking fields kept and signed",
    () =>
      Effect.gen(function* () {
        for (const [seed, where] of [[1, "conversation"], [2, "caller"]] as const) {
          const driven = yield* drive(
            withThinking(generateSession(seed, { messages: 240, maxOutput: 12_000 })),
            POLICY,
            where
          )
          console.log(figuresOf(`seed ${seed}, thinking on the ${where}`, driven))
          assert.deepStrictEqual(driven.rejected, [], `seed ${seed}`)
          assert.strictEqual(driven.dropped, 0, `seed ${seed}`)
          assert.strictEqual(driven.offloadsBetween, 0, `seed ${seed}`)
          assert.isAtLeast(driven.compactions, 2, `seed ${seed}: the session compacts`)
          assert.isAbove(driven.emptyThinkingSentBack, 0, `seed ${seed}: empty thinking fields were kept`)
        }
      }),
    120_000
  )

  it.effect("one request of many tool steps: 0 rejected, 0 dropped", () =>
    Effect.gen(function* () {
      const messages = oneRequestManySteps(120)
      assert.isAbove(messages.length, 200)
      for (const where of ["conversation", "caller"] as const) {
        const driven = yield* drive(messages, POLICY, where)
        console.log(figuresOf(`one request, thinking on the ${where}`, driven))
        assert.deepStrictEqual(driven.rejected, [], where)
        assert.strictEqual(driven.dropped, 0, where)
        assert.strictEqual(driven.offloadsBetween, 0, where)
        assert.isAbove(driven.withSignedThinking, 0)
      }
    }), 120_000)

  it.effect(
    "the control: offloads in place (appendOnly false) lose the thinking they invalidate, left out or dropped",
    () =>
      Effect.gen(function* () {
        const messages = withThinking(generateSession(1, { messages: 240, maxOutput: 12_000 }))
        const caller = yield* drive(messages, POLICY, "caller", { appendOnly: false })
        assert.isAbove(caller.offloadsBetween, 0, "the control offloads between compactions")
        // no config on the conversation: it cannot ask for drop_block, so it leaves the invalidated thinking out
        assert.deepStrictEqual(caller.rejected, [])
        assert.strictEqual(caller.dropped, 0, "nothing for the server to drop: the library left it out")
        const bound = yield* drive(messages, POLICY, "conversation", { appendOnly: false })
        assert.deepStrictEqual(bound.rejected, [])
        assert.isAbove(bound.dropped, 0, "with drop_block the server drops the thinking each offload invalidated")
      }),
    120_000
  )

  it.effect(
    "with the API's on-demand compaction as the summarizer: the kept turns after the signed block, 0 rejected",
    () =>
      Effect.gen(function* () {
        const messages = withThinking(generateSession(3, { messages: 200, maxOutput: 12_000 }))
        const driven = yield* drive(messages, POLICY, "caller", { summarizer: "server" })
        console.log(figuresOf("seed 3, on-demand compaction, thinking on the caller", driven))
        assert.deepStrictEqual(driven.rejected, [])
        assert.strictEqual(driven.dropped, 0)
        assert.strictEqual(driven.offloadsBetween, 0)
        assert.isAtLeast(driven.compactions, 1)
        assert.isAtLeast(driven.onDemandOpened, 1, "a request opened with the server's signed block")
      }),
    120_000
  )
})
