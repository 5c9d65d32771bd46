/**
 * Side by side with peers, on the real sessions of `../shared/data/sessions/` and on generated sessions of 1k, 10k and
 * 50k messages (each converted to every peer's format once, before anything is timed). One mitata run compares:
 *
 * 1. whole-conversation token estimate: ours (`estimateTokens`, warm cache and no cache) against pi's
 *    `estimateTokens` summed over the messages and LangChain's `countTokensApproximately`;
 * 2. choosing a cut that keeps ~20k recent tokens: ours (`planForPolicy(...).cut`, the rows labelled `planForPolicy`) against pi's `findCutPoint`;
 * 3. tool-output pruning: our `evictStaleToolResults` against the AI SDK's `pruneMessages`. They do different work:
 *    ours decides per result (superseded, modified, stale), replaces each payload with a typed pointer, keeps every
 *    block and reports the tokens freed; `pruneMessages` deletes every tool part before the last N messages.
 *
 * Outside mitata it then times LangChain's `trimMessages` against our cut (up to 1k messages: it recounts the
 * remaining list once per dropped message, O(n²)), first calls on fresh message objects (our identity cache empty),
 * and the heap an eviction's result keeps alive. Last it prints markdown tables: each ratio of medians is said as
 * "N× faster" or "N× slower" for our call.
 *
 * Run: npx node --expose-gc bench/peers.bench.ts
 */
import { bench, do_not_optimize, run, summary } from "mitata"
import type { Message } from "../src/Message.ts"
import {
  CUT_POLICY,
  freshMessages,
  GENERATED_SIZES,
  KEEP_RECENT_MESSAGES,
  KEEP_RECENT_TOOL_RESULTS,
  ours,
  peers,
  type PreparedSession,
  prepareWorkload,
  type Workload
} from "./peers/adapters.ts"
import { planForPolicy } from "../src/Cut.ts"
import { evictStaleToolResults } from "../src/Evict.ts"
import { estimateTokens } from "../src/Tokens.ts"

/**
 * Sessions `trimMessages` is timed on. One call takes ~0.25 s at 1k messages and ~3 s at 3k on an idle core, so it is
 * timed outside mitata (median of 3 calls): mitata's minimum of 12 samples would take most of a minute.
 */
const LANGCHAIN_TRIM_MAX_MESSAGES = 1_000

const workloads: ReadonlyArray<Workload> = (["real", ...GENERATED_SIZES] as const).map(prepareWorkload)

// ============================================================================
// Timed run
// ============================================================================

/** Bench names per workload, for the ratio table. */
interface Names {
  estimateWarm: string
  estimateCold: string
  piEstimate: string
  lcEstimate: string
  cut: string
  piCut: string
  evict: string
  aiPrune: string
}

const each = <A>(w: Workload, f: (s: PreparedSession) => A) => () => {
  for (const s of w.sessions) do_not_optimize(f(s))
}

const names = new Map<Workload, Names>()
for (const w of workloads) {
  for (const s of w.sessions) ours.estimate(s) // fill the identity cache: the warm rows are cache hits
  const tag = `[${w.name}]`
  const n: Names = {
    estimateWarm: `ours estimateTokens, warm cache ${tag}`,
    estimateCold: `ours estimate, no cache ${tag}`,
    piEstimate: `pi estimateTokens (no cache) ${tag}`,
    lcEstimate: `LangChain countTokensApproximately (no cache) ${tag}`,
    cut: `ours planForPolicy ${tag}`,
    piCut: `pi findCutPoint ${tag}`,
    evict: `ours evictStaleToolResults ${tag}`,
    aiPrune: `AI SDK pruneMessages ${tag}`
  }
  summary(() => {
    bench(n.estimateCold, each(w, ours.estimateUncached)).baseline(true)
    bench(n.estimateWarm, each(w, ours.estimate))
    bench(n.piEstimate, each(w, peers.piEstimate))
    bench(n.lcEstimate, each(w, peers.langchainEstimate))
  })
  summary(() => {
    bench(n.cut, each(w, ours.cut)).baseline(true)
    bench(n.piCut, each(w, peers.piCut))
  })
  summary(() => {
    bench(n.evict, each(w, ours.evict)).baseline(true)
    bench(n.aiPrune, each(w, peers.aiPrune))
  })
  names.set(w, n)
}

const started = performance.now()
const { benchmarks } = await run()
const mitataMs = performance.now() - started
/** Median time per iteration of each bench: steadier than the mean on a shared machine (GC pauses, other load). */
const p50 = new Map<string, number>()
for (const trial of benchmarks) {
  for (const r of trial.runs) if (r.stats !== undefined) p50.set(r.name, r.stats.p50)
}

// ============================================================================
// Untimed-by-mitata extras: first calls and memory
// ============================================================================

const median = (xs: ReadonlyArray<number>): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!

/** Median wall time of `runs` calls, each on inputs that `setup` builds untimed. */
const timeFresh = <I>(runs: number, setup: () => I, f: (input: I) => unknown): number => {
  const times: Array<number> = []
  for (let i = 0; i < runs; i++) {
    const input = setup()
    const t0 = performance.now()
    do_not_optimize(f(input))
    times.push(performance.now() - t0)
  }
  return median(times)
}

/** Median wall time of `runs` sequential calls of an async `f`. */
const timeAsync = async (runs: number, f: () => Promise<unknown>): Promise<number> => {
  const times: Array<number> = []
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now()
    do_not_optimize(await f())
    times.push(performance.now() - t0)
  }
  return median(times)
}

/** LangChain's `trimMessages` against our cut, both timed the same way (wall time, median). */
const trims = new Map<Workload, number>()
for (const w of workloads) {
  if (!w.sessions.every((s) => s.messages.length <= LANGCHAIN_TRIM_MAX_MESSAGES)) continue
  const lc = await timeAsync(3, () => Promise.all(w.sessions.map(peers.langchainTrim)))
  const cut = timeFresh(31, () => 0, () => w.sessions.map(ours.cut))
  trims.set(w, lc / cut)
}

/** First calls: every message object is new, so our identity cache starts empty (pi and LangChain have none). */
const firstCalls = workloads.map((w) => {
  const fresh = () => w.sessions.map((s) => freshMessages(s.messages))
  const estimate = timeFresh(9, fresh, (sessions) => sessions.map((m) => estimateTokens(m)))
  const cut = timeFresh(9, fresh, (sessions) => sessions.map((m) => planForPolicy(m, CUT_POLICY).cut))
  const piEstimate = timeFresh(9, () => 0, () => w.sessions.map(peers.piEstimate))
  const piCut = timeFresh(9, () => 0, () => w.sessions.map(peers.piCut))
  return { w, estimate, cut, piEstimate, piCut }
})

const gc = (globalThis as { gc?: () => void }).gc

/** Heap bytes that `f`'s result keeps alive, after full collections before and after (median of 3). */
const retainedBytes = <A>(f: () => A): { readonly bytes: number; readonly result: A } => {
  const samples: Array<number> = []
  let result: A | undefined
  for (let i = 0; i < 3; i++) {
    result = undefined
    gc!()
    gc!()
    const before = process.memoryUsage().heapUsed
    result = f()
    gc!()
    gc!()
    samples.push(process.memoryUsage().heapUsed - before)
  }
  return { bytes: median(samples), result: result! }
}

/** One agent step: a whole-file read of `path` and its large result. */
const readStep = (messages: ReadonlyArray<Message>, id: string, path: string): Array<Message> => [
  ...messages,
  { role: "assistant", content: [{ type: "tool_use", id, name: "read", input: { path } }] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: id, content: `${path}\n${"x\n".repeat(2_000)}` }] }
]

const memory = gc === undefined ? undefined : workloads.filter((w) => w.messageCount >= 10_000).map((w) => {
  const session = w.sessions[0]!
  const messages = session.messages
  const changedCount = (out: ReadonlyArray<Message>, input: ReadonlyArray<Message>) =>
    out.reduce((k, m, i) => k + (m === input[i] ? 0 : 1), 0)
  const first = retainedBytes(() => evictStaleToolResults(messages, KEEP_RECENT_TOOL_RESULTS, { minSavings: 0 }))
  // the next step after an eviction: the agent reads a file again, which supersedes its previous read
  const withRead =
    evictStaleToolResults(readStep(first.result.messages, "toolu_bench_1", "/bench/new.ts"), KEEP_RECENT_TOOL_RESULTS, {
      minSavings: 0
    })
      .messages
  const grown = readStep(withRead, "toolu_bench_2", "/bench/new.ts")
  const steady = retainedBytes(() => evictStaleToolResults(grown, KEEP_RECENT_TOOL_RESULTS, { minSavings: 0 }))
  const prune = retainedBytes(() => peers.aiPrune(session))
  return {
    size: messages.length,
    first: { bytes: first.bytes, changed: changedCount(first.result.messages, messages) },
    steady: { bytes: steady.bytes, changed: changedCount(steady.result.messages, grown) },
    pruneBytes: prune.bytes
  }
})

// ============================================================================
// Report
// ============================================================================

/** A peer-time ÷ our-time ratio, said as how much faster or slower ours is. */
const verdict = (r: number): string => {
  const x = r >= 1 ? r : 1 / r
  const times = x >= 10 ? x.toFixed(0) : x.toFixed(1)
  return times === "1.0" ? "same" : `${times}× ${r >= 1 ? "faster" : "slower"}`
}
const ratio = (peer: string, ourName: string): string => {
  const p = p50.get(peer)
  const o = p50.get(ourName)
  return p === undefined || o === undefined ? "failed" : verdict(p / o)
}
const trimRatio = (w: Workload): string => {
  const r = trims.get(w)
  return r === undefined ? "not run (O(n²))" : `${verdict(r)}*`
}
const kb = (bytes: number) => `${(bytes / 1024).toFixed(0)} KB`
const deno = (globalThis as { Deno?: { version: { deno: string } } }).Deno
const runtime = deno === undefined ? `Node ${process.versions.node}` : `Deno ${deno.version.deno}`

const lines: Array<string> = [
  "",
  `### Ours against peers: how much faster (or slower) our call is. ${runtime}, ratio of medians per iteration (mitata p50), one run.`,
  "",
  "| workload | messages | estimate, our cache cold vs pi `estimateTokens` | vs LangChain `countTokensApproximately` | estimate, our cache warm vs pi | cut (`planForPolicy`) vs pi `findCutPoint` | vs LangChain `trimMessages` | our eviction vs AI SDK `pruneMessages` (different work) |",
  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
]
for (const w of workloads) {
  const n = names.get(w)!
  lines.push(
    `| ${w.name} | ${w.messageCount.toLocaleString("en")} | ${ratio(n.piEstimate, n.estimateCold)} | ${
      ratio(n.lcEstimate, n.estimateCold)
    } | ${ratio(n.piEstimate, n.estimateWarm)} | ${ratio(n.piCut, n.cut)} | ${trimRatio(w)} | ${
      ratio(n.aiPrune, n.evict)
    } |`
  )
}
lines.push(
  "",
  `Cut: keep ${
    CUT_POLICY.keepRecentTokens.toLocaleString("en")
  } recent tokens (ours also keeps >= ${CUT_POLICY.keepRecentTurns} whole turns, tool-safe). ` +
    `Prune: ours keeps the newest ${KEEP_RECENT_TOOL_RESULTS} tool results verbatim and replaces older payloads with pointers; ` +
    `\`pruneMessages\` deletes tool calls and results before the last ${KEEP_RECENT_MESSAGES} messages. Different work: compare with care.`,
  "",
  `*Wall time, median of 3 \`trimMessages\` calls ÷ median of 31 of our cuts (too slow for mitata's 12 samples); not run above ${
    LANGCHAIN_TRIM_MAX_MESSAGES.toLocaleString("en")
  } messages.`,
  "",
  "First call on fresh message objects, so our identity cache starts empty and fills (median of 9 calls, outside",
  'mitata; the "cold" column above uses the estimator with no cache at all):',
  "",
  "| workload | estimate vs pi | cut vs pi |",
  "| --- | ---: | ---: |",
  ...firstCalls.map((f) => `| ${f.w.name} | ${verdict(f.piEstimate / f.estimate)} | ${verdict(f.piCut / f.cut)} |`)
)
if (memory === undefined) lines.push("", "Memory: skipped (run with --expose-gc).")
else {
  lines.push(
    "",
    "Memory kept alive by one eviction's result (heap after full GC before and after, median of 3). An eviction",
    "builds a new outer array (8 bytes a slot); every unchanged message and block is shared, so the rest grows with",
    "the changed messages only:",
    "",
    "| session | first eviction: changed messages | retained | per changed message* | next step (one re-read): changed | retained | of which outer array | AI SDK `pruneMessages` retained |",
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ...memory.map((m) =>
      `| ${m.size.toLocaleString("en")} | ${m.first.changed.toLocaleString("en")} | ${kb(m.first.bytes)} | ${
        ((m.first.bytes - 8 * m.size) / m.first.changed).toFixed(0)
      } B | ${m.steady.changed} | ${kb(m.steady.bytes)} | ${kb(8 * (m.size + 4))} | ${kb(m.pruneBytes)} |`
    ),
    "",
    "*(retained − outer array) ÷ changed messages. The result's `offloaded` list (one entry per offloaded result, with its",
    "pointer) is included; the offloaded payloads themselves are not copied."
  )
}
const seconds = (ms: number) => (ms / 1000).toFixed(0)
lines.push(
  "",
  `mitata run ${seconds(mitataMs)} s; whole script ${seconds(performance.now())} s wall, ${
    seconds(process.cpuUsage().user / 1000)
  } s CPU.`
)
console.log(lines.join("\n"))
