/**
 * The cost simulator on the largest real sessions: each standard policy's replay against the raw replay (`none`,
 * the floor: walking the session and measuring the cache prefix, with no policy work), plus all seven together.
 * Estimates are warm (cached by identity), as they are after the first policy of a `simulate` call.
 * Run: npx node --expose-gc bench/simulate.bench.ts
 */
import { bench, do_not_optimize, group, summary } from "mitata"
import { simulate, standardPolicies } from "../src/Simulate.ts"
import { corpus } from "../test/fixtures/Corpus.ts"
import { runBenchmarks } from "./util.ts"
import { simulatePolicy } from "../src/internal/simulate/replay.ts"

const policies = standardPolicies()

for (const name of ["pi__before-compaction", "pi__large-session"]) {
  const session = corpus().find((s) => s.name === name)
  if (session === undefined) throw new Error(`missing corpus session ${name}`)
  const messages = session.messages
  simulate(messages) // warm the estimate caches
  group(`${name} (${messages.length} messages)`, () => {
    summary(() => {
      for (const [i, policy] of policies.entries()) {
        const b = bench(policy.name, () => do_not_optimize(simulatePolicy(messages, policy)))
        if (i === 0) b.baseline(true)
      }
      bench("all seven (simulate)", () => do_not_optimize(simulate(messages)))
    })
  })
}

await runBenchmarks()
