/**
 * The CI benchmark run: a quick pass over the hot paths that checks the ratio budgets of `bench/budgets.ts`.
 *
 * It times 40 calls on generated sessions of 1k, 10k and 50k messages (the 10k one also in pi's format), the issue's
 * workload (the largest real session repeated 10 times, also in pi's and the AI SDK's format), one `Conversation` step
 * on states of 1k, 10k and 50k messages (`bench/conversation.bench.ts`) and one hot-path step on trackers that saw 100
 * and 10,000 files, 20 append-only steps on a thread over the 1k and 50k sessions (`bench/thread.bench.ts`: their
 * bodies' sizes, and building a continue against the whole request), the open of issue 29's 50,000-entry session from
 * its tail (`bench/tailSession.ts`, on the JSONL store, and on the SQL store at `DATABASE_URL` when it is set:
 * `bench/tailSql.ts`; skipped, and said so, without it) and a worker's open of it (its `Conversation` resumed, from
 * the tail and, today's way, in full), issue 43's logged step on conversations driven through generated 1k and 10k
 * sessions (`bench/loggedStep.bench.ts`: on the JSONL store, default and deferred writes, and on `layerMemory`, each step against the stringify of its own
 * request; the drive takes ~15 s of setup, only when a `logged-step/` budget is measured; a run of every budget
 * measures these in a child process of their own, `ownProcess`), plus the floors the budgets divide by (string-length scans
 * of the same arrays), each by its CPU time (`bench/cpuTime.ts`: the median of at least 12 samples over 0.4 s of CPU
 * time; calls that need a new input per sample, fresh message objects or one more agent step, build it untimed), in
 * an order that keeps the sides of each budget close in time (the four sides of `growth/step-10k` are measured together,
 * in alternation: `stepGrowth`, and so are a size's logged-step sides: `loggedSide`). Last, the heap a 50k-message state holds against its
 * messages' (after full collections: a size, which load does not move), and background compaction's replay of the
 * three pi sessions in scripted time (`bench/background.bench.ts`: simulated milliseconds, which load does not move
 * either), and the CLI's start to `--help` and `--version` against a bare runtime's start, each the CPU time of a fresh
 * process from start to exit (`bench/exitCpu.ts`, the median of 5). A budget that is over its limit is measured again, every side, up to `MAX_ATTEMPTS` attempts in all while
 * the run is under 100 s old, and passes if any attempt is within the limit; the budgets still broken are measured
 * again in fresh processes (`nextProcess`, up to `MAX_PROCESSES` in all), and the run passes when one of them passes.
 *
 * It prints a table (budget, best ratio, every attempt's ratio, limit, pass/fail), writes every row, budget and
 * result with runtime information to `bench-results.json` (or the path in `BENCH_JSON`), exits 1 when a budget is
 * broken, and ends with the line `bench:ci: N passed, M failed`. `BENCH_CI_SLOWDOWN` is the budgets' own regression
 * test (see below).
 *
 * Run: npx node --expose-gc bench/ci.ts (`BENCH_CI_ONLY=resume/` measures and checks only the budgets whose id starts
 * so).
 */
import * as Effect from "effect/Effect"
import { spawnSync } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import * as os from "node:os"
import { join } from "node:path"
import { do_not_optimize } from "mitata"
import { planForPolicy, safeCut } from "../src/Cut.ts"
import { evictStaleToolResults as evictOnce } from "../src/Evict.ts"
import { HotPaths } from "../src/HotPaths.ts"
import { defaultPolicy } from "../src/Policy.ts"
import { isBoundaryLine } from "../src/internal/sessionTail.ts"
import { decodeLine } from "../src/SessionEntry.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { validate } from "../src/Validate.ts"
import { generateSession } from "../test/fixtures/Conversation.ts"
import {
  type BenchRow,
  budgets,
  budgetSides,
  checkBudget,
  formatTable,
  M,
  MAX_ATTEMPTS,
  needRetry,
  summaryLine,
  violations
} from "./budgets.ts"
import {
  coldEstimate,
  filesRead,
  freshCopies,
  growingSession,
  hotPathStep,
  repeatedRealSession,
  sumStringLengths,
  visitBlocks
} from "./baselines.ts"
import { requestOf } from "../src/Request.ts"
import type { Message } from "../src/Message.ts"
import { conversationStep, stateMemory, stateOf } from "./conversation.bench.ts"
import { RECENT_REQUESTS, type SteppedConversation, steppedConversation, stringifyRecent } from "./loggedStep.bench.ts"
import { TICK_MS } from "../test/fixtures/BackgroundReplay.ts"
import { backgroundFigures } from "./background.bench.ts"
import { THREAD_SYSTEM, threadSteps } from "./thread.bench.ts"
import {
  callAsync,
  calls as batchOf,
  callsOn,
  type CpuStats,
  measureCpu,
  measureCpuAsync,
  measureInterleaved,
  measureInterleavedAsync
} from "./cpuTime.ts"
import { checkConversationResume, checkTailFold, conversationOpen, jsonlOpens, tailSession } from "./tailSession.ts"
import { type SqlTail, sqlTailSession } from "./tailSql.ts"
import {
  KEEP_RECENT_TOOL_RESULTS,
  ours,
  peers,
  prepareSession,
  prepareWorkload,
  warmEviction
} from "./peers/adapters.ts"
import { apiViewStart } from "../src/internal/apiView.ts"
import { aged } from "./util.ts"

const started = performance.now()
/** The CPU time this process has used, in milliseconds. */
const cpuMs = () => {
  const u = process.cpuUsage()
  return (u.user + u.system) / 1000
}
const loadBefore = os.loadavg()

/**
 * The regression knob of the budgets' own test: `BENCH_CI_SLOWDOWN=eviction` runs every timed eviction twice per call,
 * `estimation` every timed estimate (each time on objects no cache has seen, so the second run costs what the first
 * does), `rescan` adds a scan of the view to every timed `Conversation` step (`stepOf`). Read only here: the library's
 * code is untouched. A 2x regression must fail its budgets in every run.
 */
const SLOWDOWN = process.env.BENCH_CI_SLOWDOWN ?? ""
if (!["", "eviction", "estimation", "rescan"].includes(SLOWDOWN)) {
  throw new Error(`BENCH_CI_SLOWDOWN=${SLOWDOWN}: eviction, estimation or rescan`)
}
const slowEviction = SLOWDOWN === "eviction"
const slowEstimation = SLOWDOWN === "estimation"
/**
 * `BENCH_CI_SLOWDOWN=rescan`: every timed `Conversation` step also reads every block of its view once (`visitBlocks`,
 * eviction's floor), as a step that rescans the history would: not a constant factor, which a growth budget cannot
 * see, but a linear term, which `growth/step-10k` must fail.
 */
const stepOf: typeof conversationStep = SLOWDOWN === "rescan"
  ? (state, n) => {
    const next = conversationStep(state, n)
    do_not_optimize(visitBlocks(next.view as unknown as ReadonlyArray<Message>))
    return next
  }
  : conversationStep
const evictStaleToolResults: typeof evictOnce = slowEviction
  ? (messages, keepRecent, options) => {
    do_not_optimize(evictOnce(messages, keepRecent, options))
    return evictOnce(messages, keepRecent, options)
  }
  : evictOnce
const estimateCold = (messages: Parameters<typeof coldEstimate>[0]): number =>
  slowEstimation ? coldEstimate(messages) + coldEstimate(messages) : coldEstimate(messages)
/** Fresh copies for one sample of a fresh-objects estimate: two sets under the estimation knob. */
const freshInput = (messages: Parameters<typeof freshCopies>[0]) => () =>
  slowEstimation ? [freshCopies(messages), freshCopies(messages)] : [freshCopies(messages)]
const estimateEach = (sets: ReadonlyArray<Parameters<typeof estimateTokens>[0]>): number => {
  let n = 0
  for (const set of sets) n += estimateTokens(set)
  return n
}
/** The floor over fresh copies, one sample: the same shape as the fresh-objects estimate, always one set. */
const freshFloorInput = (messages: Parameters<typeof freshCopies>[0]) => () => freshCopies(messages)

// ============================================================================
// Inputs
// ============================================================================

const workload10k = prepareWorkload(10_000)
const prepared10k = workload10k.sessions[0]!
const s10k = prepared10k.messages
const s50k = generateSession(50_000, { messages: 50_000 })
const s1k = generateSession(1_000, { messages: 1_000 })
/** The API view's start of each session, found once (a conversation carries it): `safeCut` then reads no tail. */
const view10k = apiViewStart(s10k)
const view50k = apiViewStart(s50k)
const files100 = filesRead(100)
const files10k = filesRead(10_000)
/** The issue's estimator workload: the largest real session repeated 10 times (~9.6k messages), also in pi's format. */
const real = prepareSession("real session x10", repeatedRealSession(10))
// a live agent loop has estimated every message before it cuts: warm the identity cache
estimateTokens(s10k)
estimateTokens(s50k)
estimateTokens(real.messages)
const KEEP = 5
/** Warm eviction on the real session x10, one new turn per sample (the index grows over the attempts). */
const warm = warmEviction(real.messages)
/** Conversation states over generated sessions, prepared once; each sample is one more step. */
const step1k = stateOf(s1k)
const step10k = stateOf(s10k)
const step50k = stateOf(s50k)
/** The request each state's step returns, as `client.messages.create` would serialize it. */
const bodyOf = (state: typeof step1k) => requestOf(state, "You are a coding agent.")
const body1k = bodyOf(step1k)
const body10k = bodyOf(step10k)
const body50k = bodyOf(step50k)
/** 20 append-only steps on a thread over the 1k and 50k sessions, and a 50k state whose next request continues. */
const thread1k = threadSteps(s1k, 20)
const thread50k = threadSteps(s50k, 20)
const continuing50k = thread50k.continuing
/** Hot-path trackers that have seen 100 and 10,000 distinct files; each sample observes one more step. */
const hot100 = HotPaths.fromMessages(files100)
const hot10k = HotPaths.fromMessages(files10k)
/**
 * Only the budgets whose id starts with one of the comma-separated prefixes of `BENCH_CI_ONLY` (all when unset): a
 * calibration of some budgets, or a later process of a run (below).
 */
const ONLY = process.env.BENCH_CI_ONLY ?? ""
const prefixes = ONLY.split(",")
const databaseUrl = process.env.DATABASE_URL ?? ""
const SQL_PREFIX = "resume/sql-"
/**
 * Budgets measured in a process of their own when a run measures everything (`ownProcess`): issue 43's logged steps.
 * Measured after every other call of the run, in the same process, the logged step read 0.33 to 0.53 of its
 * stringify, against 0.20 to 0.28 in a process that measured it alone (2026-12-07, the CI run at 15:15 UTC and a
 * calibration at 15:23: the other calls' code and heap slow the conversation's steps, not its stringify).
 */
const LOGGED_PREFIX = "logged-step/"
const ownProcess = ONLY === "" && process.env.BENCH_CI_PROCESS === undefined
/**
 * The `resume/sql-` budgets need the PostgreSQL server at `DATABASE_URL` (CI's `.ci/run` sets it); without it they
 * are skipped and the run says so. The embedded PGlite of the tests would run the database in this process, so CPU
 * time would count the server's work too, which a client of a server does not pay: another quantity than the budget's.
 */
const selected = budgets.filter((b) =>
  prefixes.some((prefix) => b.id.startsWith(prefix)) && !(ownProcess && b.id.startsWith(LOGGED_PREFIX))
)
const skipped = databaseUrl === "" ? selected.filter((b) => b.id.startsWith(SQL_PREFIX)).map((b) => b.id) : []
const measured = selected.filter((b) => !skipped.includes(b.id))
/**
 * Issue 29's resume session (50k entries, 20 compactions) written by the JSONL store's writer (so with its tail
 * index), its lines from the last boundary on (the boundary, which any open decodes, and the entries after it), and its opens: from the tail (a read, and the writer's), and in full.
 */
const tailDirectory = mkdtempSync(join(os.tmpdir(), "bench-ci-tail-"))
const tailLines = measured.some((b) => b.id.startsWith("resume/")) ? await tailSession(tailDirectory) : []
let lastBoundary = tailLines.length - 1
while (lastBoundary >= 0 && !isBoundaryLine(tailLines[lastBoundary]!)) lastBoundary--
const fromBoundary = tailLines.slice(Math.max(0, lastBoundary))
const jsonl = jsonlOpens(tailDirectory)
const openTail = jsonl.tail
const openFull = jsonl.full
const openWriter = jsonl.writer
/** A worker's whole open: the conversation resumed on the writer's log, from the tail or in full. */
const conversationTail = conversationOpen(jsonl.log(true))
const conversationFull = conversationOpen(jsonl.log(false))
if (tailLines.length > 0) {
  const [tail, writer, full] = await Promise.all([openTail, openWriter, openFull].map((e) => Effect.runPromise(e)))
  checkTailFold("jsonl", tail!, full!)
  checkTailFold("jsonl writer", writer!, full!)
  for (const [what, open] of [["jsonl", conversationTail], ["jsonl full", conversationFull]] as const) {
    checkConversationResume(what, await Effect.runPromise(open), tail!, full!)
  }
}
/** The SQL store's opens of the same session, on the server at `DATABASE_URL`, in a schema of its own. */
const sqlTail = databaseUrl !== "" && measured.some((b) => b.id.startsWith(SQL_PREFIX))
  ? await sqlTailSession(databaseUrl, tailLines, `bench_ci_tail_${process.pid}`)
  : undefined
if (sqlTail !== undefined) {
  const [tail, writer, full] = await Promise.all(
    [sqlTail.tail, sqlTail.writer, sqlTail.full].map((e) => Effect.runPromise(e))
  )
  checkTailFold("sql", tail!, full!)
  checkTailFold("sql writer", writer!, full!)
  checkConversationResume("sql", await Effect.runPromise(conversationOpen(sqlTail.log)), tail!, full!)
}
/** A SQL open, timed; it throws (so its budgets fail as not measured) if the session was not set up. */
const sqlOpen = (open: (t: SqlTail) => Effect.Effect<unknown, unknown>) => () =>
  sqlTail === undefined ? Promise.reject(new Error("no SQL session")) : Effect.runPromise(open(sqlTail))
/**
 * Issue 43's logged step: conversations over generated 1k and 10k sessions, logged on the JSONL store (default and
 * deferred writes) and in memory, and over a 100k session on the JSONL store with the default durability alone (its
 * drive takes ~30 s), driven once (only when a `logged-step/` budget is measured), then stepped `RECENT_REQUESTS`
 * times untimed, so the requests the stringify side goes round are a few whole compaction cycles of the logged
 * conversation's own steps from the start.
 */
const stepped = async (size: number) => {
  const session = generateSession(size, { messages: size, maxOutput: 4000 })
  const logged = await steppedConversation(session, "jsonl")
  const deferred = await steppedConversation(session, "jsonl-deferred")
  const memory = await steppedConversation(session, "memory")
  for (let i = 0; i < RECENT_REQUESTS; i++) await Promise.all([logged.step(), deferred.step(), memory.step()])
  return { logged, deferred, memory, stringify: stringifyRecent(logged) }
}
const steppedLogged = async (size: number) => {
  const logged = await steppedConversation(generateSession(size, { messages: size, maxOutput: 4000 }), "jsonl")
  for (let i = 0; i < RECENT_REQUESTS; i++) await logged.step()
  return { logged, stringify: stringifyRecent(logged) }
}
const loggedSteps = measured.some((b) => b.id.startsWith(LOGGED_PREFIX))
  ? { s1k: await stepped(1_000), s10k: await stepped(10_000), s100k: await steppedLogged(100_000) }
  : undefined
/** One step of a stepped conversation, timed; it throws (its budgets fail as not measured) when none was set up. */
/** How many rounds a size's logged-step sides are measured in, and how many step samples each kind takes a round. */
const LOGGED_ROUNDS = 50
const LOGGED_STEPS_PER_ROUND = 20
/**
 * The logged-step sides of one size (the JSONL step, with deferred writes, on `layerMemory`, and the stringify of the
 * JSONL conversation's own requests), measured in alternation once per attempt (`measureInterleavedAsync`): rounds of
 * `LOGGED_STEPS_PER_ROUND` steps of each kind, one a sample, then one stringify sample batched to 2 ms, so a ratio's
 * two sides see the same stretches of the machine (measured one after the other, 1,000 steps then the stringify, the
 * same code read 0.15 to 0.32 of it in one day).
 */
const loggedSide = (() => {
  const made = new Map<string, { readonly attempt: number; readonly stats: ReadonlyMap<string, CpuStats> }>()
  return (size: "s1k" | "s10k" | "s100k", side: "logged" | "deferred" | "memory" | "stringify"): Timed => async () => {
    if (loggedSteps === undefined) throw new Error("no logged conversation")
    let measuredSize = made.get(size)
    if (measuredSize?.attempt !== attempts) {
      const steps = loggedSteps[size]
      const kinds: ReadonlyArray<readonly [string, SteppedConversation]> = "deferred" in steps
        ? [["logged", steps.logged], ["deferred", steps.deferred], ["memory", steps.memory]]
        : [["logged", steps.logged]]
      const stats = await measureInterleavedAsync([
        ...kinds.map(([, conversation]) => ({
          sample: callAsync(() => conversation.step()),
          perRound: LOGGED_STEPS_PER_ROUND
        })),
        { sample: batchOf(steps.stringify), perRound: 1 }
      ], LOGGED_ROUNDS)
      measuredSize = {
        attempt: attempts,
        stats: new Map([...kinds.map(([name]) => name), "stringify"].map((name, i) => [name, stats[i]!]))
      }
      made.set(size, measuredSize)
    }
    const stats = measuredSize.stats.get(side)
    if (stats === undefined) throw new Error(`no ${side} side at ${size}`)
    return stats
  }
})()
const setupMs = performance.now() - started
/** The CPU time the setup used (the drives of the logged-step conversations are most of it). */
const setupCpuMs = cpuMs()

/** CPU time each measurement samples for: 0.4 s, at least 12 samples (a run stays in CI's slot under load). */
const CPU_BUDGET_NS = 4e8

/** A timed call: its CPU-time statistics (`bench/cpuTime.ts`). */
type Timed = () => Promise<CpuStats>

/** A call timed as is, batched when it is fast. */
const timed = (f: () => unknown): Timed => () => Promise.resolve(measureCpu(batchOf(f), { cpuBudgetNs: CPU_BUDGET_NS }))

/**
 * A call timed on new inputs (`input` runs untimed, `perSample` inputs a sample, in order), at most `maxSamples`
 * samples.
 */
const timedPerSample = <I>(input: () => I, f: (i: I) => unknown, maxSamples: number, perSample = 1): Timed => () =>
  Promise.resolve(measureCpu(callsOn(input, f, perSample), { cpuBudgetNs: CPU_BUDGET_NS, maxSamples }))

/** An asynchronous call timed one call a sample, at most `maxSamples` samples. */
const timedAsync = (f: () => Promise<unknown>, maxSamples = 1_000): Timed => () =>
  measureCpuAsync(f, { cpuBudgetNs: CPU_BUDGET_NS, maxSamples, minSamples: Math.min(12, maxSamples) })

/** One more `Conversation` step per call, on a state that grows by one step each time. */
const stepCalls = (start: Parameters<typeof conversationStep>[0]): Timed => {
  let state = start
  let n = 0
  return timed(() => (state = stepOf(state, n++)))
}

/** Statistics of samples of `steps` calls each, per call. */
const perCall = (stats: CpuStats, steps: number): CpuStats => ({
  ...stats,
  cpuP50: stats.cpuP50 / steps,
  cpuMin: stats.cpuMin / steps,
  wallP50: stats.wallP50 / steps
})

/**
 * Samples of `steps` steps, each from a fresh state of `session` built untimed and moved out of the young generation
 * (`aged`, as the state of a live conversation was built turns ago; left young, the first collection inside the timed
 * steps copies the whole state, a cost that grows with the session and belongs to the setup: the 10k step measured
 * 170 to 370 us so, 117 to 190 aged): the 1k and 10k states, stepped on for a whole measurement (thousands of steps,
 * two messages each), would end several times past their size while their bodies' stringify stays at it. The 50k
 * state grows by a small part of its size (`stepCalls`).
 */
const freshSteps = (session: ReadonlyArray<Message>, steps: number) =>
  callsOn(() => aged(stateOf(session)), (start) => {
    let state = start
    for (let n = 0; n < steps; n++) state = stepOf(state, n)
    return state
  }, 1)

/** How many steps a sample of the 1k and the 10k step takes. */
const STEPS_1K = 20
const STEPS_10K = 100

/** How long a floor sample of `growth/step-10k` lasts at least: its first call, after a step sample, reads from memory. */
const FLOOR_SAMPLE_NS = 2e7

/**
 * The four sides of `growth/step-10k` measured together, one sample of each a round (`measureInterleaved`: the floors
 * over the two sessions, then the steps at 1k and 10k, `STEPS_1K` and `STEPS_10K` a sample), so that all four see the
 * same load, heap and caches: measured one after the other, the same code read 0.35 and 0.48 in back-to-back runs.
 * A floor sample is a batch of at least `FLOOR_SAMPLE_NS`: batched to 2 ms, as `timed` batches, the 10k floor read its
 * arrays from memory after each step sample and grew 24 to 31 times from 1k (11 to 16 in a loop of its own). The CPU time of the four
 * calls it replaces, at least 16 rounds. The first of the four calls of an attempt measures them; the others read it
 * (the step rows also serve `step/stringify-1k` and `-10k`).
 */
const stepGrowth = (() => {
  let made: { readonly attempt: number; readonly stats: ReadonlyArray<CpuStats> } | undefined
  const measure = (): ReadonlyArray<CpuStats> => {
    if (made?.attempt !== attempts) {
      const [floor10k, floor1k, step1k, step10k] = measureInterleaved([
        batchOf(() => sumStringLengths(s10k), FLOOR_SAMPLE_NS),
        batchOf(() => sumStringLengths(s1k), FLOOR_SAMPLE_NS),
        freshSteps(s1k, STEPS_1K),
        freshSteps(s10k, STEPS_10K)
      ], { cpuBudgetNs: 4 * CPU_BUDGET_NS, minSamples: 16, maxSamples: 60 })
      made = {
        attempt: attempts,
        stats: [perCall(step1k!, STEPS_1K), perCall(step10k!, STEPS_10K), floor1k!, floor10k!]
      }
    }
    return made.stats
  }
  return (side: "step1k" | "step10k" | "floor1k" | "floor10k"): Timed => () =>
    Promise.resolve(measure()[["step1k", "step10k", "floor1k", "floor10k"].indexOf(side)]!)
})()

/**
 * A heap size as a timed row (a median of one): the messages' side measures both (`stateMemory`), the state's side,
 * next in the list, reads them. Without --expose-gc it throws, so the memory budget fails as not measured.
 */
let heaps: ReturnType<typeof stateMemory>
const heapOf = (side: "messages" | "state"): Timed => () => {
  if (side === "messages") heaps = stateMemory()
  if (heaps === undefined) return Promise.reject(new Error("no heap measurement: run with --expose-gc"))
  return Promise.resolve({ cpuP50: heaps[side], cpuMin: heaps[side], wallP50: heaps[side], samples: 1 })
}

/**
 * Background compaction in scripted time (`bench/background.bench.ts`, the live replays only): the p90 of the blocked
 * times as its upper bound at the clock's resolution (a prepare that blocked no tick blocked less than one), and the
 * latency. Simulated milliseconds, not CPU time: the same on every machine, so measured once per run.
 */
let background: { readonly p90: number; readonly latency: number } | undefined
const backgroundOf = (side: "p90" | "latency"): Timed => async () => {
  if (background === undefined) {
    const figures = await Effect.runPromise(backgroundFigures(false))
    background = { p90: figures.p90BlockedMs + TICK_MS, latency: figures.latencyMs }
  }
  const ns = background[side] * 1e6
  return { cpuP50: ns, cpuMin: ns, wallP50: ns, samples: 1 }
}
/** How many times a process start is measured: the median of 5 is its row. */
const START_SAMPLES = 5
const EXIT_CPU = join(import.meta.dirname, "exitCpu.ts")
const CLI = join(import.meta.dirname, "../src/cli/main.ts")

/**
 * A fresh process of this runtime started with `args`, `START_SAMPLES` times: the CPU time each used from its start to
 * its exit, as it reports it (`bench/exitCpu.ts`). A start that fails, or reports no time, throws (the budget then
 * fails as not measured).
 */
const startOf = (args: ReadonlyArray<string>): Timed => () => {
  const cpu: Array<number> = []
  const wall: Array<number> = []
  for (let i = 0; i < START_SAMPLES; i++) {
    const w0 = performance.now()
    const res = spawnSync(process.execPath, ["--import", EXIT_CPU, ...args], { encoding: "utf8" })
    wall.push((performance.now() - w0) * 1e6)
    const reported = /\ncpu_ns (\d+(?:\.\d+)?)\n$/.exec(res.stderr ?? "")
    if (res.status !== 0 || reported === null) {
      return Promise.reject(new Error(`${args.join(" ")}: exit ${res.status}, ${res.stderr}`))
    }
    cpu.push(Number(reported[1]))
  }
  const median = (xs: ReadonlyArray<number>) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!
  return Promise.resolve({ cpuP50: median(cpu), cpuMin: Math.min(...cpu), wallP50: median(wall), samples: cpu.length })
}

/** A size as a timed row (a median of one); not measured (no row) when it is not a positive number. */
const sizeRow = (bytes: number): Timed => () =>
  Number.isFinite(bytes) && bytes > 0
    ? Promise.resolve({ cpuP50: bytes, cpuMin: bytes, wallP50: bytes, samples: 1 })
    : Promise.reject(new Error("no append-only step continued its thread"))

/** Every measured call, in the order an attempt times them: each budget's two sides are neighbours. */
const plainCalls: ReadonlyArray<readonly [string, () => unknown]> = [
  [M.floor10k, () => sumStringLengths(s10k)],
  [M.estimateCold10k, () => estimateCold(s10k)],
  [M.piEstimate10k, () => peers.piEstimate(prepared10k)],
  [M.estimateWarm10k, () => ours.estimate(prepared10k)],
  [M.estimateCold50k, () => estimateCold(s50k)],
  [M.floor50k, () => sumStringLengths(s50k)],
  [M.visitBlocks10k, () => visitBlocks(s10k)],
  [M.evict10k, () => evictStaleToolResults(s10k, KEEP, { minSavings: 0 })],
  [M.evict50k, () => evictStaleToolResults(s50k, KEEP, { minSavings: 0 })],
  [M.safeCut10k, () => safeCut(s10k, s10k.length >> 1, view10k)],
  [M.safeCut50k, () => safeCut(s50k, s50k.length >> 1, view50k)],
  [M.cut10k, () => planForPolicy(s10k, defaultPolicy).cut],
  [M.cut50k, () => planForPolicy(s50k, defaultPolicy).cut],
  [M.cutPi10k, () => ours.cut(prepared10k)],
  [M.piCut10k, () => peers.piCut(prepared10k)],
  [M.validate10k, () => validate(s10k)],
  [M.validate50k, () => validate(s50k)]
]

const calls: ReadonlyArray<readonly [string, Timed]> = [
  ...plainCalls.map(([name, f]) => [name, timed(f)] as const),
  [M.floorFresh10k, timedPerSample(freshFloorInput(s10k), sumStringLengths, 150)],
  [M.estimateFresh10k, timedPerSample(freshInput(s10k), estimateEach, 150)],
  [M.floorReal, timed(() => sumStringLengths(real.messages))],
  [M.estimateFreshReal, timedPerSample(freshInput(real.messages), estimateEach, 150)],
  [M.piEstimateReal, timed(() => peers.piEstimate(real))],
  [M.estimateStepReal, timedPerSample(growingSession(real.messages), estimateTokens, 100, 10)],
  [M.estimateStep10k, timedPerSample(growingSession(s10k), estimateTokens, 100, 10)],
  [M.estimateStep50k, timedPerSample(growingSession(s50k), estimateTokens, 100, 10)],
  [M.pruneReal, timed(() => peers.aiPrune(real))],
  [M.evictColdReal, timed(() => evictStaleToolResults(real.messages, KEEP_RECENT_TOOL_RESULTS, { minSavings: 0 }))],
  [M.evictWarmReal, timedPerSample(warm.input, warm.evict, 1000)],
  [M.step1k, stepGrowth("step1k")],
  [M.stringify1k, timed(() => JSON.stringify(body1k))],
  [M.step10k, stepGrowth("step10k")],
  [M.stringify10k, timed(() => JSON.stringify(body10k))],
  [M.floorStep1k, stepGrowth("floor1k")],
  [M.floorStep10k, stepGrowth("floor10k")],
  [M.evictFull50k, timed(() => evictStaleToolResults(s50k, 10))],
  [M.step50k, stepCalls(step50k)],
  [M.stringify50k, timed(() => JSON.stringify(body50k))],
  [M.loggedStep1k, loggedSide("s1k", "logged")],
  [M.loggedStringify1k, loggedSide("s1k", "stringify")],
  [M.memoryStep1k, loggedSide("s1k", "memory")],
  [M.deferredStep1k, loggedSide("s1k", "deferred")],
  [M.loggedStep10k, loggedSide("s10k", "logged")],
  [M.loggedStringify10k, loggedSide("s10k", "stringify")],
  [M.memoryStep10k, loggedSide("s10k", "memory")],
  [M.deferredStep10k, loggedSide("s10k", "deferred")],
  [M.loggedStep100k, loggedSide("s100k", "logged")],
  [M.loggedStringify100k, loggedSide("s100k", "stringify")],
  [M.floorFiles100, timed(() => sumStringLengths(files100))],
  [M.hotStep100, timed(() => hot100.observe(hotPathStep))],
  [M.hotStep10k, timed(() => hot10k.observe(hotPathStep))],
  [M.floorFiles10k, timed(() => sumStringLengths(files10k))],
  [M.threadBody1k, sizeRow(thread1k.bodyBytes)],
  [M.threadBody50k, sizeRow(thread50k.bodyBytes)],
  [
    M.threadBuild50k,
    timed(() => requestOf(continuing50k!.state, THREAD_SYSTEM, { before: continuing50k!.before, thread: true }))
  ],
  [M.wholeBuild50k, timed(() => requestOf(continuing50k!.state, THREAD_SYSTEM, { before: continuing50k!.before }))],
  [M.tailOpenJsonl50k, timedAsync(() => Effect.runPromise(openTail))],
  [M.tailParse50k, timed(() => fromBoundary.map(decodeLine))],
  [M.tailWriterJsonl50k, timedAsync(() => Effect.runPromise(openWriter))],
  // ~1 s a call: the median of 3
  [M.fullFoldJsonl50k, timedAsync(() => Effect.runPromise(openFull), 3)],
  [M.tailOpenSql50k, timedAsync(sqlOpen((t) => t.tail))],
  [M.tailWriterSql50k, timedAsync(sqlOpen((t) => t.writer))],
  [M.fullFoldSql50k, timedAsync(sqlOpen((t) => t.full), 3)],
  [M.conversationTailJsonl50k, timedAsync(() => Effect.runPromise(conversationTail))],
  [M.conversationFullJsonl50k, timedAsync(() => Effect.runPromise(conversationFull), 3)],
  [M.conversationTailSql50k, timedAsync(sqlOpen((t) => conversationOpen(t.log)))],
  [M.messagesHeap50k, heapOf("messages")],
  [M.stateHeap50k, heapOf("state")],
  [M.backgroundBlockedP90, backgroundOf("p90")],
  [M.backgroundLatency, backgroundOf("latency")],
  [M.bareStart, startOf(["-e", "0"])],
  [M.helpStart, startOf([CLI, "compact", "--help"])],
  [M.versionStart, startOf([CLI, "--version"])]
]

// ============================================================================
// Attempts
// ============================================================================

/**
 * `BENCH_CI_CALIBRATE=1` measures every budget `MAX_ATTEMPTS` times, passing or not and with no deadline: the runs
 * to choose the factors of `bench/budgets.ts` from (every attempt's ratio is in the JSON).
 */
const CALIBRATE = process.env.BENCH_CI_CALIBRATE === "1"

/**
 * No attempt starts after the run's measurements (its setup not counted: the logged-step drives take ~40 s of CPU
 * time) have used this much CPU time (an attempt of everything takes 50 s of it), nor after `RETRY_WALL_MS` of
 * wall-clock time: on a loaded machine a run still gets its retries, within CI's slot.
 */
const RETRY_DEADLINE_MS = 100_000
const RETRY_WALL_MS = 360_000

const rows: Array<BenchRow> = []
const errors: Array<{ name: string; attempt: number; error: string }> = []
let attempts = 0
let pending = measured
while (pending.length > 0) {
  attempts++
  const names = new Set(pending.flatMap(budgetSides))
  for (const [name, f] of calls) {
    if (!names.has(name)) continue
    try {
      const stats = await f()
      rows.push({
        name,
        attempt: attempts,
        cpu_ns: stats.cpuP50,
        cpu_min_ns: stats.cpuMin,
        wall_ns: stats.wallP50,
        samples: stats.samples
      })
    } catch (error) {
      // no row: the budgets on this call fail as not measured, and the run still reports every other budget
      errors.push({ name, attempt: attempts, error: String(error) })
    }
  }
  // retry only while a retry still fits the 3-minute CI slot (an attempt of everything takes 40 to 60 s)
  pending = CALIBRATE
    ? (attempts < MAX_ATTEMPTS ? measured : [])
    : cpuMs() - setupCpuMs < RETRY_DEADLINE_MS && performance.now() - started < RETRY_WALL_MS
    ? needRetry(pending, rows, attempts)
    : []
}

// ============================================================================
// Report
// ============================================================================

/** How many processes a run may take in all: the first, and fresh ones for the budgets still broken. */
const MAX_PROCESSES = 3
/** Which process of the run this is (1: the first). */
const processNumber = Number(process.env.BENCH_CI_PROCESS ?? "1")

/**
 * A run's broken budgets are measured again in a fresh process (`BENCH_CI_ONLY` set to their ids), up to
 * `MAX_PROCESSES` processes in all, and the run passes when one of them passes all it measured: a process's own heap
 * and compiled code can keep a side slow in every attempt (seen beside a busy core: estimate-fresh/floor 4.0 to 5.0
 * in all three attempts of one process, 0.9 to 2.0 in the next four; in a CI run of 2026-12-02 14:01 UTC, load 3.2 to
 * 3.9 after the tests, 2.67 to 3.69 in the first process and 2.81 to 3.46 in the second), and a regression is slow in
 * every process. Not in calibration runs. Returns the exit code: 0 when a later process passed.
 */
const nextProcess = (broken: ReadonlyArray<string>): number => {
  if (CALIBRATE || processNumber >= MAX_PROCESSES) return 1
  console.log(
    `\nbench:ci: measuring the ${broken.length} broken budget(s) again in a fresh process (${processNumber + 1} of ` +
      `at most ${MAX_PROCESSES}): ${broken.join(", ")}`
  )
  const child = spawnSync(process.execPath, [...process.execArgv, process.argv[1]!], {
    stdio: "inherit",
    env: {
      ...process.env,
      BENCH_CI_ONLY: broken.join(","),
      BENCH_CI_PROCESS: String(processNumber + 1),
      BENCH_JSON: `${out.replace(/(\.second|\.process\d+)?\.json$/, "")}.${
        processNumber + 1 === 2 ? "second" : `process${processNumber + 1}`
      }.json`
    }
  })
  return child.status === 0 ? 0 : 1
}

const results = measured.map((budget) => checkBudget(budget, rows))
const failed = results.filter((r) => !r.pass).length
const durationS = (performance.now() - started) / 1000
const out = process.env.BENCH_JSON ?? "bench-results.json"
writeFileSync(
  out,
  JSON.stringify(
    {
      runtime: {
        runtime: "node",
        version: process.version,
        v8: process.versions.v8,
        platform: process.platform,
        arch: process.arch,
        cpu: os.cpus()[0]?.model ?? "unknown",
        cores: os.availableParallelism(),
        loadavg: { before: loadBefore, after: os.loadavg() },
        gcExposed: typeof globalThis.gc === "function"
      },
      sessions: { "10k": s10k.length, "50k": s50k.length },
      setup_s: setupMs / 1000,
      duration_s: durationS,
      attempts,
      calibrate: CALIBRATE,
      slowdown: SLOWDOWN === "" ? null : SLOWDOWN,
      pass: failed === 0,
      passed: results.length - failed,
      failed,
      only: ONLY === "" ? null : ONLY,
      skipped,
      budgets: measured.map((budget, i) => ({ ...budget, ...results[i]! })),
      rows,
      errors
    },
    null,
    2
  ) + "\n"
)

for (const e of errors) console.error(`error in ${e.name} (attempt ${e.attempt}): ${e.error}`)
console.log(formatTable(results))
for (const v of violations(measured, rows)) {
  console.error(
    v._tag === "OverBudget"
      ? `budget broken: ${v.id}: best ratio ${v.best.toFixed(2)} > ${v.max} in every attempt`
      : `budget not measured: ${v.id}: no usable timing of ${v.missing.join(", ")}`
  )
}
console.log(
  `\n${attempts} attempt(s), ${durationS.toFixed(1)} s (setup ${(setupMs / 1000).toFixed(1)} s), ` +
    `load ${loadBefore.map((l) => l.toFixed(1)).join(" ")}; results in ${out}`
)
if (SLOWDOWN !== "") console.log(`BENCH_CI_SLOWDOWN=${SLOWDOWN}: every timed ${SLOWDOWN} ran twice per call`)
if (skipped.length > 0) {
  console.log(`bench:ci: skipped ${skipped.join(", ")}: DATABASE_URL is not set (they need a PostgreSQL server)`)
}
console.log(summaryLine(results))
rmSync(tailDirectory, { recursive: true, force: true })
if (loggedSteps !== undefined) {
  for (const { deferred, logged, memory } of [loggedSteps.s1k, loggedSteps.s10k]) {
    await Promise.all([logged.close(), deferred.close(), memory.close()])
  }
  await loggedSteps.s100k.logged.close()
}
await sqlTail?.close()
if (failed > 0) process.exitCode = nextProcess(results.filter((r) => !r.pass).map((r) => r.id))
if (ownProcess) {
  // the logged steps, in a process of their own (with its own fresh processes for what it finds broken)
  console.log(`\nbench:ci: measuring the ${LOGGED_PREFIX} budgets in a process of their own`)
  const child = spawnSync(process.execPath, [...process.execArgv, process.argv[1]!], {
    stdio: "inherit",
    env: {
      ...process.env,
      BENCH_CI_ONLY: LOGGED_PREFIX,
      BENCH_JSON: `${out.replace(/\.json$/, "")}.logged.json`
    }
  })
  if (child.status !== 0) process.exitCode = 1
}
