/**
 * The token estimator against pi's and against the string-length floor, on the workload (the largest real
 * session repeated 10 times, ~9.6k messages) and on generated sessions of 1k, 10k and 50k messages. Every row is a
 * mitata median measured in this run:
 * - floor: a bare loop that sums the string lengths of every text field (the least any estimator can do);
 * - cold: `estimateTokens` on fresh message objects (copies no cache has seen, built untimed per sample);
 * - no cache: the per-message estimate summed, no cache at all;
 * - step: one agent step, `estimateTokens([...previous, next])` where `previous` was estimated before;
 * - pi: pi-coding-agent's `estimateTokens` summed over the same messages in pi's format.
 * Then `jsonSize` against `JSON.stringify`, and the heap the estimate's caches keep for a 50k-message session
 * against the heap of the session itself (run with --expose-gc).
 *
 * Run: npx node --expose-gc bench/tokens.bench.ts (about 60 s)
 */
import { do_not_optimize } from "mitata"
import type { Message } from "../src/Message.ts"
import { estimateMessageTokens, estimateTokens } from "../src/Tokens.ts"
import { generateSession } from "../test/fixtures/Conversation.ts"
import {
  coldEstimate,
  freshCopies,
  growingSession,
  perSample,
  perSampleOptions,
  repeatedRealSession,
  sumStringLengths
} from "./baselines.ts"
import { peers, prepareSession } from "./peers/adapters.ts"
import { duration, mb, p50, settledHeap } from "./util.ts"
import { jsonSize } from "../src/internal/estimate.ts"

const workloads: ReadonlyArray<readonly [string, ReadonlyArray<Message>]> = [
  ["real session ×10", repeatedRealSession(10)],
  ...[1_000, 10_000, 50_000].map((n) => [`generated ${n / 1000}k`, generateSession(n, { messages: n })] as const)
]

const ratio = (x: number) => x >= 10 ? x.toFixed(0) : x.toFixed(2)

const lines = [
  "| workload | messages | floor | cold (fresh objects) | cold / floor | pi / cold | no cache | step (+1 message) | pi | pi / step |",
  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
]
const steps = new Map<string, number>()
for (const [name, messages] of workloads) {
  const prepared = prepareSession(name, messages)
  const floor = await p50(() => do_not_optimize(sumStringLengths(messages)))
  const cold = await p50(perSample(() => freshCopies(messages), estimateTokens), perSampleOptions(200))
  const uncached = await p50(() => do_not_optimize(coldEstimate(messages)))
  estimateTokens(messages)
  const step = await p50(perSample(growingSession(messages), estimateTokens), perSampleOptions(1000))
  const pi = await p50(() => do_not_optimize(peers.piEstimate(prepared)))
  steps.set(name, step)
  lines.push(
    `| ${name} | ${messages.length.toLocaleString("en")} | ${duration(floor)} | ${duration(cold)} | ${
      ratio(cold / floor)
    } | ${ratio(pi / cold)} | ${duration(uncached)} | ${duration(step)} | ${duration(pi)} | ${ratio(pi / step)} |`
  )
}
lines.push("", `step growth, generated 50k / 10k: ${ratio(steps.get("generated 50k")! / steps.get("generated 10k")!)}`)

const inputs = generateSession(3, { messages: 5_000 }).flatMap((m) =>
  typeof m.content === "string"
    ? []
    : m.content.flatMap((b) => b.type === "tool_use" ? [(b as { input: unknown }).input] : [])
)
const stringify = await p50(() => {
  let n = 0
  for (const input of inputs) n += JSON.stringify(input).length
  return do_not_optimize(n)
})
const sized = await p50(() => {
  let n = 0
  for (const input of inputs) n += jsonSize(input)
  return do_not_optimize(n)
})
lines.push("", `jsonSize / JSON.stringify(input).length over ${inputs.length} tool inputs: ${ratio(sized / stringify)}`)

const heap = settledHeap()
if (heap === undefined) lines.push("", "Memory: skipped (run with --expose-gc).")
else {
  const h0 = heap()
  const session = generateSession(50_001, { messages: 50_000 })
  const h1 = heap()
  estimateTokens(session)
  const h2 = heap()
  for (const m of session) estimateMessageTokens(m)
  const h3 = heap()
  lines.push(
    "",
    `Memory, ${session.length.toLocaleString("en")} messages: the session ${
      mb(h1 - h0)
    }; estimateTokens' running sums ` +
      `${mb(h2 - h1)} (${ratio((h2 - h1) / (h1 - h0))}× the session); plus the per-message cache of ` +
      `estimateMessageTokens on every message ${mb(h3 - h2)} (all caches ${ratio((h3 - h1) / (h1 - h0))}×)`
  )
  do_not_optimize(session)
}
console.log(lines.join("\n"))
