/**
 * The cut functions on generated sessions of 1k, 10k and 50k messages. Each function is its own summary with the 1k
 * session as the baseline, so the printed ratios show the growth: linear means about 10x at 10k and 50x at 50k, flat
 * means about 1x.
 * The "floor" rows touch every block once and do nothing else: their growth is what memory alone costs (a 50k
 * session does not fit the CPU caches a 1k one fits), the reference the other ratios should be read against.
 * `safeCut` and `planForPolicy` (the "planForPolicy" rows read its `cut`) walk back from the end (or look around the request) and read only the
 * tail the policy keeps, whose size the policy fixes: they should stay flat. `splitKeepingTurns` copies the list into head and tail
 * (linear), `validate` reads everything (linear).
 * Token estimates are cached by message identity. "warm" measures the steady state of an agent that re-plans a
 * growing conversation (every message was estimated before); "cold" gets fresh message objects every iteration
 * (shallow copies built outside the timed region), so every message the cut reads is estimated from scratch.
 * Run: npx node --expose-gc bench/cut.bench.ts
 */
import { bench, do_not_optimize, summary } from "mitata"
import { planForPolicy, safeCut, splitKeepingTurns } from "../src/Cut.ts"
import type { Message } from "../src/Message.ts"
import { defaultPolicy } from "../src/Policy.ts"
import { validate } from "../src/Validate.ts"
import { generateSession } from "../test/fixtures/Conversation.ts"
import { runBenchmarks } from "./util.ts"

const sizes = [1_000, 10_000, 50_000] as const
const sessions = new Map<number, ReadonlyArray<Message>>(
  sizes.map((size) => [size, generateSession(size, { messages: size, maxOutput: 2_000 }).slice(0, size)])
)
const label = (size: number) => `${size / 1000}k`

const measure = (name: string, f: (messages: ReadonlyArray<Message>) => unknown) =>
  summary(() => {
    for (const size of sizes) {
      const messages = sessions.get(size)!
      const b = bench(`${name} ${label(size)}`, () => do_not_optimize(f(messages)))
      if (size === sizes[0]) b.baseline(true)
    }
  })

/** The least any O(n) pass over the blocks can do. */
const touchEveryBlock = (messages: ReadonlyArray<Message>): number => {
  let n = 0
  for (const message of messages) {
    if (typeof message.content === "string") n++
    else for (const block of message.content) n += block.type.length
  }
  return n
}

measure("floor", touchEveryBlock)
// a request in the middle of the session: the scan walks back over whatever pairs straddle it
measure("safeCut", (messages) => safeCut(messages, messages.length >> 1))
measure("splitKeepingTurns", (messages) => splitKeepingTurns(messages, 2))
measure("planForPolicy warm", (messages) => planForPolicy(messages, defaultPolicy).cut)
measure("planForPolicy warm", (messages) => planForPolicy(messages, defaultPolicy))

/** Fresh message objects (shallow copies, new identities, shared blocks): the estimate cache has none of them. */
const fresh = (messages: ReadonlyArray<Message>): Array<Message> => messages.map((message) => ({ ...message }))

summary(() => {
  for (const size of sizes) {
    const messages = sessions.get(size)!
    const b = bench(`planForPolicy cold ${label(size)}`, function* () {
      yield {
        [0]: () => fresh(messages),
        bench: (copy: ReadonlyArray<Message>) => do_not_optimize(planForPolicy(copy, defaultPolicy).cut)
      }
    })
    if (size === sizes[0]) b.baseline(true)
  }
})
measure("validate", (messages) => validate(messages))

await runBenchmarks()
