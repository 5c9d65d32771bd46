/**
 * Performance budgets for the CI benchmark run (`bench/ci.ts`), and the pure logic that checks measured rows
 * against them.
 *
 * Every budget is a ratio of two times (the median CPU time of one call, nanoseconds, see `BenchRow.cpu_ns` and
 * `bench/cpuTime.ts`) measured in the same process, close in time (neighbours or two calls apart): `subject / baseline <= max`, where the baseline is a same-run call of the same
 * shape at the same scale (a peer, or a floor over the same arrays). A growth budget (our call at two scales) is never
 * a bare ratio of two scales of ours: it is divided by the growth of a floor (a linear scan of the same arrays) between
 * the same two scales, measured in the same attempt, so what a larger heap or colder caches cost the floor too is
 * taken out. No budget ever names an absolute time, so the table holds on a fast laptop and on a loaded 2-core CI
 * runner alike. A budget is measured up to `MAX_ATTEMPTS` times
 * (a fresh pair of measurements each time) and passes when its best attempt is within the limit: a load burst from
 * another process can slow one side of one pair, but rarely the same side of three pairs in a row. A regression slows
 * every attempt.
 *
 * How the factors were chosen: from repeated full runs on the 2-core development box, idle and under load (a load
 * average of 2 to 6 from other processes, and with two extra busy loops), each `max` is the worst ratio seen times
 * about 1.5, rounded, unless a rule fixes it (no slower than pi's: 1). Each budget's `why` gives the measured range;
 * the runs of the floor-relative budgets are listed in `CALIBRATION_RUNS`. To measure again:
 * `BENCH_CI_CALIBRATE=1 node --expose-gc bench/ci.ts` measures every budget `MAX_ATTEMPTS` times and writes every
 * attempt's ratio to the JSON. `BENCH_CI_SLOWDOWN=eviction` (or `estimation`) makes `bench/ci.ts` run every timed
 * eviction (or estimation) twice per call: a 2x regression, which must fail its budgets in every run;
 * `BENCH_CI_SLOWDOWN=rescan` makes every timed `Conversation` step also read every block of its view, the linear term
 * `growth/step-10k` must fail.
 */

/** One timed measurement of a named call, from one attempt of the CI run. */
export interface BenchRow {
  /** The measurement's name; budgets refer to rows by it. */
  readonly name: string
  /** Which attempt of the run measured it, from 1. The subject and baseline of a ratio come from the same attempt. */
  readonly attempt: number
  /**
   * The median CPU time of one call, in nanoseconds: the figure budgets check. Another process takes the core away
   * from ours, which wall-clock time counts and CPU time does not. (A heap row, named "(bytes)", holds bytes: its
   * budget is a size ratio.)
   */
  readonly cpu_ns: number
  /** The fastest sample's CPU time of one call, in nanoseconds (reported only). */
  readonly cpu_min_ns: number
  /** The median wall-clock time of one call, in nanoseconds (reported only: it moves with the machine's load). */
  readonly wall_ns: number
  /** How many samples the median is over. */
  readonly samples: number
}

/** A limit on the ratio of two measurements made in the same run. */
export interface Budget {
  /** Short stable identifier, used in the table, the JSON and by CI. */
  readonly id: string
  /** What the ratio means, in one line. */
  readonly description: string
  /** The measured call whose time is the numerator. */
  readonly subject: string
  /** The measured call whose time is the denominator. */
  readonly baseline: string
  /**
   * When set, the ratio is `(subject / baseline) / (floor.subject / floor.baseline)`, all four from one attempt: our
   * growth between two scales over a floor's growth between the same two scales (1 = grows as the floor does).
   */
  readonly floor?: { readonly subject: string; readonly baseline: string }
  /** The largest ratio that passes. */
  readonly max: number
  /** How `max` was chosen: the measured range and the headroom. */
  readonly why: string
}

/** How many attempts a budget gets before it is declared broken. */
export const MAX_ATTEMPTS = 3

/** The outcome of one budget over every attempt that measured it. */
export interface BudgetResult {
  readonly id: string
  readonly description: string
  readonly max: number
  /** The ratio of every attempt that measured both sides, in attempt order. */
  readonly ratios: ReadonlyArray<number>
  /** The best (smallest) ratio, or `undefined` when no attempt measured both sides. */
  readonly best: number | undefined
  readonly pass: boolean
}

/** Why a budget failed. */
export type Violation =
  | { readonly _tag: "OverBudget"; readonly id: string; readonly best: number; readonly max: number }
  | { readonly _tag: "NotMeasured"; readonly id: string; readonly missing: ReadonlyArray<string> }

/** Every measurement a budget reads: subject and baseline, and its floor's two sides when it has a floor. */
export const budgetSides = (budget: Budget): ReadonlyArray<string> =>
  budget.floor === undefined
    ? [budget.subject, budget.baseline]
    : [budget.subject, budget.baseline, budget.floor.subject, budget.floor.baseline]

/**
 * The ratio of every attempt that has a usable row (a finite, positive time) for every side the budget reads, in
 * attempt order: `subject / baseline`, divided by `floor.subject / floor.baseline` for a budget with a floor. Rows of
 * other names are ignored.
 */
export const attemptRatios = (budget: Budget, rows: ReadonlyArray<BenchRow>): Array<number> => {
  const usable = (row: BenchRow) => Number.isFinite(row.cpu_ns) && row.cpu_ns > 0
  const sides = budgetSides(budget)
  const byAttempt = new Map<number, Map<string, number>>()
  for (const row of rows) {
    if (!usable(row) || !sides.includes(row.name)) continue
    const attempt = byAttempt.get(row.attempt) ?? new Map<string, number>()
    attempt.set(row.name, row.cpu_ns)
    byAttempt.set(row.attempt, attempt)
  }
  const ratios: Array<number> = []
  for (const attempt of [...byAttempt.keys()].sort((a, b) => a - b)) {
    const p50 = byAttempt.get(attempt)!
    if (!sides.every((name) => p50.has(name))) continue
    const ratio = p50.get(budget.subject)! / p50.get(budget.baseline)!
    ratios.push(
      budget.floor === undefined ? ratio : ratio / (p50.get(budget.floor.subject)! / p50.get(budget.floor.baseline)!)
    )
  }
  return ratios
}

/** Checks one budget: it passes when some attempt's ratio is at most `max`; a budget never measured fails. */
export const checkBudget = (budget: Budget, rows: ReadonlyArray<BenchRow>): BudgetResult => {
  const ratios = attemptRatios(budget, rows)
  const best = ratios.length === 0 ? undefined : Math.min(...ratios)
  return {
    id: budget.id,
    description: budget.description,
    max: budget.max,
    ratios,
    best,
    pass: best !== undefined && best <= budget.max
  }
}

/** Every broken budget, in table order: the best ratio over the limit, or a side with no usable measurement. */
export const violations = (budgets: ReadonlyArray<Budget>, rows: ReadonlyArray<BenchRow>): Array<Violation> =>
  budgets.flatMap((budget): Array<Violation> => {
    const result = checkBudget(budget, rows)
    if (result.pass) return []
    if (result.best !== undefined) return [{ _tag: "OverBudget", id: budget.id, best: result.best, max: budget.max }]
    const measured = (name: string) =>
      attemptRatios({ id: budget.id, description: "", subject: name, baseline: name, max: 1, why: "" }, rows).length >
        0
    return [{ _tag: "NotMeasured", id: budget.id, missing: budgetSides(budget).filter((name) => !measured(name)) }]
  })

/** Budgets that fail after `attempt` attempts and have attempts left: the ones to measure again. */
export const needRetry = (
  budgets: ReadonlyArray<Budget>,
  rows: ReadonlyArray<BenchRow>,
  attempt: number
): Array<Budget> => attempt >= MAX_ATTEMPTS ? [] : budgets.filter((budget) => !checkBudget(budget, rows).pass)

/** The closing line CI reads: `bench:ci: N passed, M failed`. */
export const summaryLine = (results: ReadonlyArray<BudgetResult>): string => {
  const passed = results.filter((r) => r.pass).length
  return `bench:ci: ${passed} passed, ${results.length - passed} failed`
}

/** Two decimals; two significant digits below 0.01 (a "300x faster" budget is 0.0033). */
const fmt = (ratio: number | undefined): string =>
  ratio === undefined ? "—" : ratio < 0.01 ? ratio.toPrecision(2) : ratio.toFixed(2)

/** A plain-text table: budget, best ratio, every attempt's ratio, limit, pass or fail. */
export const formatTable = (results: ReadonlyArray<BudgetResult>): string => {
  const header = ["budget", "ratio", "attempts", "limit", "result"]
  const lines = results.map((r) => [
    r.id,
    fmt(r.best),
    r.ratios.map(fmt).join(" "),
    `<= ${r.max < 0.01 ? fmt(r.max) : r.max}`,
    r.pass ? "pass" : "FAIL"
  ])
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)))
  const row = (cells: ReadonlyArray<string>) => cells.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd()
  return [row(header), row(widths.map((w) => "-".repeat(w))), ...lines.map(row)].join("\n")
}

// ============================================================================
// The budget table
// ============================================================================

/** Measurement names shared by the table and `bench/ci.ts`. */
export const M = {
  floor10k: "floor: sum string lengths [10k]",
  floor50k: "floor: sum string lengths [50k]",
  floorStep1k: "floor: sum string lengths, measured with the steps [1k]",
  floorStep10k: "floor: sum string lengths, measured with the steps [10k]",
  floorFresh10k: "floor: sum string lengths, fresh objects [10k]",
  floorFiles100: "floor: sum string lengths [reads of 100 files]",
  floorFiles10k: "floor: sum string lengths [reads of 10,000 files]",
  estimateCold10k: "estimate cold [10k]",
  estimateCold50k: "estimate cold [50k]",
  estimateWarm10k: "estimate warm [10k]",
  piEstimate10k: "pi estimateTokens [10k]",
  visitBlocks10k: "single pass: visit every block [10k]",
  evict10k: "evictStaleToolResults cold [10k]",
  evict50k: "evictStaleToolResults cold [50k]",
  safeCut10k: "safeCut mid [10k]",
  safeCut50k: "safeCut mid [50k]",
  cut10k: "planForPolicy(…).cut default [10k]",
  cut50k: "planForPolicy(…).cut default [50k]",
  cutPi10k: "planForPolicy(…).cut keep 20k tokens [10k]",
  piCut10k: "pi findCutPoint keep 20k tokens [10k]",
  validate10k: "validate [10k]",
  validate50k: "validate [50k]",
  estimateFresh10k: "estimateTokens, fresh objects [10k]",
  floorReal: "floor: sum string lengths [real x10]",
  floorFreshReal: "floor: sum string lengths, fresh objects [real x10]",
  estimateFreshReal: "estimateTokens, fresh objects [real x10]",
  piEstimateReal: "pi estimateTokens [real x10]",
  estimateStepReal: "estimateTokens, one step (+1 message) [real x10]",
  estimateStep10k: "estimateTokens, one step (+1 message) [10k]",
  estimateStep50k: "estimateTokens, one step (+1 message) [50k]",
  pruneReal: "AI SDK pruneMessages [real x10]",
  evictColdReal: "evictStaleToolResults cold, keepRecent 20 [real x10]",
  evictWarmReal: "eviction warm, +1 turn on the carried index [real x10]",
  step1k: "Conversation step (reply, result, prepare, request) [1k]",
  step10k: "Conversation step (reply, result, prepare, request) [10k]",
  step50k: "Conversation step (reply, result, prepare, request) [50k]",
  evictFull50k: "evictStaleToolResults, keepRecent 10 (the conversation default) [50k]",
  stringify1k: "JSON.stringify of a step's request (what the SDK serializes) [1k]",
  stringify10k: "JSON.stringify of a step's request (what the SDK serializes) [10k]",
  stringify50k: "JSON.stringify of a step's request (what the SDK serializes) [50k]",
  loggedStep1k: "logged Conversation step (prepare, reply, result) on the JSONL store, 40k window [1k]",
  memoryStep1k: "the same step on layerMemory [1k]",
  loggedStringify1k: "JSON.stringify of the logged step's request [1k]",
  deferredStep1k: "the logged step with deferred writes (sync: deferred) on the JSONL store [1k]",
  loggedStep10k: "logged Conversation step (prepare, reply, result) on the JSONL store, 40k window [10k]",
  memoryStep10k: "the same step on layerMemory [10k]",
  loggedStringify10k: "JSON.stringify of the logged step's request [10k]",
  deferredStep10k: "the logged step with deferred writes (sync: deferred) on the JSONL store [10k]",
  loggedStep100k: "logged Conversation step (prepare, reply, result) on the JSONL store, 40k window [100k]",
  loggedStringify100k: "JSON.stringify of the logged step's request [100k]",
  hotStep100: "HotPaths step (a new file read) on a tracker that saw 100 files",
  hotStep10k: "HotPaths step (a new file read) on a tracker that saw 10,000 files",
  tailParse50k: "decodeLine of the last boundary and each entry after it [50k entries, 20 compactions]",
  tailOpenJsonl50k: "open from the tail: readJsonl({ tail: true }), from the tail index [50k entries, 20 compactions]",
  tailWriterJsonl50k: "the writer's open from the tail: layerSessionLog({ tail: true }), lock to loaded [50k entries]",
  fullFoldJsonl50k: "open today: readJsonl, every line read and folded [50k entries, 20 compactions]",
  tailOpenSql50k: "open from the tail: readSession(id, { tail: true }) on the SQL store (PostgreSQL) [50k entries]",
  tailWriterSql50k: "the writer's open from the tail: SessionLog.layer({ tail: true }) on the SQL store [50k entries]",
  fullFoldSql50k: "open today: readSession(id) on the SQL store, every row read and folded [50k entries]",
  conversationTailJsonl50k:
    "a worker's open: Conversation.layerLogged over layerSessionLog({ tail: true }), the state resumed [50k entries]",
  conversationFullJsonl50k: "a worker's open today: Conversation.layerLogged over the log opened in full [50k entries]",
  conversationTailSql50k: "a worker's open: Conversation.layerLogged over the SQL store's tail open [50k entries]",
  messagesHeap50k: "heap of a 50k-message session (bytes)",
  stateHeap50k: "heap of its Conversation state after 100 steps, messages included (bytes)",
  backgroundBlockedP90: "p90 of the time a compacting prepare blocks, background on, upper bound (scripted ms) [3 pi]",
  backgroundLatency: "the scripted summarizer's latency (scripted ms)",
  threadBody1k: "serialized body of an append-only step on a thread, median of 20 steps [1k] (bytes)",
  threadBody50k: "serialized body of an append-only step on a thread, median of 20 steps [50k] (bytes)",
  threadBuild50k: "requestOf on a thread, a continue (only the messages after the anchor) [50k]",
  wholeBuild50k: "requestOf of the same state's whole request (the view copied) [50k]",
  bareStart: "a bare runtime's start: node -e 0, start to exit (CPU time of the process, median of 5)",
  helpStart: "the CLI's start: compaction compact --help, start to exit (CPU time of the process, median of 5)",
  versionStart: "the CLI's start: compaction --version, start to exit (CPU time of the process, median of 5)"
} as const

/**
 * Growth from 10k to 50k messages (the 50k session has 50,004) over the floor's growth over the same two sessions in
 * the same attempt (`floor50k / floor10k`, a linear scan of their strings, measured 4.6 to 7.7 itself): 1 means our
 * call grows as a linear scan does, 5 quadratic, 0.2 constant.
 */
const growth = (id: string, what: string, subject: string, baseline: string, max: number, why: string): Budget => ({
  id: `growth/${id}`,
  description: `${what}: (time at 50k / at 10k) / the floor's (1 = linear like the floor, 5 = quadratic)`,
  subject,
  baseline,
  floor: { subject: M.floor50k, baseline: M.floor10k },
  max,
  why
})

/**
 * The runs `growth/step-10k`'s limit comes from (2026-12-08, `BENCH_CI_ONLY=growth/step node --expose-gc
 * bench/ci.ts`, the JSON of each in /tmp; every ratio is one attempt's).
 */
export const STEP_RUNS: ReadonlyArray<string> = [
  "n1-n5 01:13-01:15 UTC, load 1.5 to 2.2: 0.146, 0.093, 0.137, 0.126, 0.159 (one attempt each)",
  "cal1-cal3 01:15-01:16 UTC, load 1.3 to 1.5, BENCH_CI_CALIBRATE=1: 0.132 0.174 0.185, 0.140 0.168 0.162, 0.132 " +
  "0.145 0.154",
  "r1-r3 01:13-01:14 UTC, load 1.4 to 2.3, BENCH_CI_SLOWDOWN=rescan: each failed in all three processes, 0.343 to " +
  "0.565 in every attempt",
  "D1-D3 and E1-E3 01:05-01:08 UTC, load 4.6 to 6.5: 0.131, 0.130, 0.105; rescan 0.302, 0.338, 0.332",
  "F1-F3 and G1-G3 01:09-01:11 UTC, beside two busy loops (node -e 'for(;;){}'), load 4.9 to 7.0: 0.092, 0.038, " +
  "0.085 (floor growth 26 to 46); rescan 0.277, 0.156, 0.349",
  "A1-A3 01:05-01:08 UTC, the former measurement and code (49a66f5), load 4.5 to 5.7: 0.452 0.739 0.800 (failed), " +
  "0.354, 0.393; B1-B3 this code in the former measurement: 0.423 0.583 0.784 (failed), 0.223, 0.256; C1-C3 the " +
  "former code in this measurement: 0.184, 0.269, 0.259"
]

/**
 * The runs the floor-relative limits and the CPU-time figures come from (`bench/ci.ts`, CPU time, 1 attempt each, on
 * the 2-core box shared with five other sessions: load averages far above the issue's ~2). Ratios per run are in each
 * budget's `why`; the earlier wall-clock ranges quoted there are from the medians of earlier sessions' runs.
 */
export const CALIBRATION_RUNS: ReadonlyArray<string> = [
  "run1 2026-12-01 21:36 UTC, load 25.6 (node --expose-gc bench/ci.ts, BENCH_JSON=/tmp/run1.json)",
  "cal1 2026-12-01 21:09 UTC, load 16.7 to 20, wall-clock medians, 3 attempts (BENCH_CI_CALIBRATE=1)",
  "v1-v5 2026-12-01 21:47-22:08 UTC, npm run bench:ci back to back beside a busy loop (node -e 'for(;;){}'), load " +
  "12.8 to 33.1: 4 of 5 passed; v3 (load 33.1) failed estimate-cold/pi at 1.03, 1.15, 1.31 against the old limit 1",
  "knobs 2026-12-01 21:47-21:58 UTC, BENCH_CI_SLOWDOWN=estimation twice: both failed (estimate-cold/floor 2.63 and " +
  "2.46+, estimate-cold/pi 1.38+); BENCH_CI_SLOWDOWN=eviction once: passed (no eviction budget was that tight)",
  "b1 2026-12-02 00:37 UTC, load 4.5 (npm run bench:ci, two attempts): evict-cold/prune 0.90, step/stringify 0.06 to " +
  "0.11 (1k), 0.0078 (10k), 0.04 (50k)",
  "knob2 2026-12-02 00:45 UTC, load 7.5 to 17.1, BENCH_CI_SLOWDOWN=eviction: evict-cold/prune failed in all three " +
  "attempts (2.35, 2.63, 3.25 against the then limit 1.6)",
  "tail1 2026-12-02 05:48 UTC, load 8.3 (BENCH_CI_CALIBRATE=1 BENCH_CI_ONLY=resume/ node --expose-gc bench/ci.ts): " +
  "resume/tail-parse 1.56 1.21 1.25, resume/tail-writer 2.20 1.92 1.55, resume/tail-full 0.04 0.05 0.04",
  "tail2 2026-12-02 05:50 UTC, load 7.0 to 8.1, the same beside node -e 'for(;;){}': tail-parse 1.75 1.65 1.81, " +
  "tail-writer 2.12 2.15 1.74, tail-full 0.06 0.05 0.07",
  "tail3 2026-12-02 05:52 UTC, load 4.0 to 7.0, the same: tail-parse 1.57 1.37 1.14, tail-writer 2.15 1.89 1.78, " +
  "tail-full 0.05 0.04 0.06",
  "tail4 2026-12-02 06:02 UTC, load 9.9 to 6.7, the writer's open reusing its acquire's read: tail-parse 1.45 1.43 " +
  "1.52, tail-writer 1.99 1.85 1.58, tail-full 0.05 0.04 0.04",
  "tail5 2026-12-02 06:04 UTC, load 7.7 to 6.7, the same beside node -e 'for(;;){}': tail-parse 1.49 1.74 1.43, " +
  "tail-writer 1.77 1.84 1.59, tail-full 0.05 0.06 0.05",
  "b5 2026-12-02 02:11-02:15 UTC, npm run bench:ci 5 times back to back beside node -e 'for(;;){}', load 2.2 to 3.9: " +
  "4 of 5 passed; run 4 failed evict-cold/prune at 2.23, 2.48, 2.73 against 1.6 (so the limit went back to 3)",
  "b5 2026-12-02 06:28-06:31 UTC, npm run bench:ci 5 times beside node -e 'for(;;){}', load 1.3 to 2.6: 3 of 5 " +
  "passed (estimate-cold/floor 1.92, estimate-fresh/floor 4.00, growth/step-10k 0.49 in every attempt of their " +
  "processes): so a broken budget is measured again in a fresh process, and the step sizes from fresh states",
  "c5 2026-12-02 06:46-06:50 UTC, the same 5 runs with the second process: 5 of 5 passed (two rescued: " +
  "estimate-fresh/floor 2.59 and 2.78, then 1 of 1 passed in the second process)",
  "k1-k3 2026-12-02 06:53-06:58 UTC, BENCH_CI_SLOWDOWN=eviction 3 times: evict/single-pass 57.4, 59.6, 76.7 " +
  "(limit then 300); BENCH_CI_SLOWDOWN=estimation 3 times: all failed (estimate-cold/floor 2.22 to 5.60, " +
  "estimate-fresh/floor 2.54 to 5.09, both processes)",
  "ke1-ke3 2026-12-02 06:51-06:55 UTC, BENCH_CI_SLOWDOWN=eviction 3 times (evict/single-pass at 45): 3 of 3 failed " +
  "(evict/single-pass 54.4, 57.1 and 43.6, the last failed by evict-cold/prune in both processes)",
  "d5 2026-12-02 06:56-07:00 UTC, npm run bench:ci 5 times beside node -e 'for(;;){}' at the final limits, load " +
  "1.2 to 2.7: 5 of 5 passed (two rescued in the second process: estimate-cold/floor 2.61 and 2.92 in every " +
  "attempt of the first)",
  "kf1-kf3 2026-12-02 07:15-07:18 UTC, BENCH_CI_SLOWDOWN=eviction 3 times at the final limit 40: 3 of 3 failed, " +
  "in both processes (evict/single-pass best 48.1 to 73.2)",
  "sql1 2026-12-02 09:59 UTC, load 0.1 to 1.1 (DATABASE_URL=postgres://postgres@127.0.0.1:5432/test " +
  "BENCH_CI_CALIBRATE=1 BENCH_CI_ONLY=resume/ node --expose-gc bench/ci.ts): resume/sql-tail-parse 1.62 1.47 1.08, " +
  "resume/sql-tail-writer 1.64 1.55 1.11, resume/sql-tail-full 0.05 0.04 0.05 (jsonl: tail-parse 2.34 1.97 1.86, " +
  "tail-writer 2.57 2.31 1.74)",
  "sql2 2026-12-02 10:00 UTC, load 1.1, the same: sql-tail-parse 1.68 1.55 1.54, sql-tail-writer 1.78 1.67 1.58, " +
  "sql-tail-full 0.04 0.04 0.05",
  "sql3 2026-12-02 10:01 UTC, load 1.4, the same: sql-tail-parse 1.43 1.41 1.85, sql-tail-writer 1.73 1.48 2.20, " +
  "sql-tail-full 0.04 0.05 0.05 (jsonl tail-writer 2.19 2.44 2.91)",
  "f1 2026-12-02 14:15-14:40 UTC, idle, BENCH_CI_ONLY=estimate-fresh node --expose-gc bench/ci.ts, about 15 " +
  "processes: estimate-fresh/floor 1.54 to 3.98 per attempt (1.87 to 3.38 at 8693c75), every attempt over 2.5 in 3 " +
  "processes; so a run may take a third process",
  "conv1 2026-12-02 13:32 UTC, load 1.4 to 2.6 (DATABASE_URL=postgres://postgres@127.0.0.1:5432/test " +
  "BENCH_CI_CALIBRATE=1 BENCH_CI_ONLY=resume/ node --expose-gc bench/ci.ts): resume/conversation-parse 2.77 2.95 " +
  "1.94, resume/conversation-full 0.08 0.06 0.06, resume/sql-conversation-parse 1.82 2.63 1.71",
  "conv2 2026-12-02 13:33 UTC, load 1.3 to 2.4, the same: conversation-parse 2.05 2.69 2.03, conversation-full " +
  "0.10 0.06 0.04, sql-conversation-parse 1.09 2.22 1.75",
  "conv3 2026-12-02 13:34 UTC, load 1.6 to 1.9, the same: conversation-parse 1.93 2.46 2.87, conversation-full " +
  "0.08 0.07 0.08, sql-conversation-parse 1.26 1.97 1.80"
]

/** The runs the thread budgets come from (`BENCH_CI_ONLY=thread node --expose-gc bench/ci.ts`). */
export const THREAD_RUNS: ReadonlyArray<string> = [
  "t1-t3 2026-12-02 05:42-05:44 UTC, load 11.5 to 12.4, BENCH_CI_ONLY=thread BENCH_CI_CALIBRATE=1 node --expose-gc " +
  "bench/ci.ts three times back to back (3 attempts each): body 50k/1k 1.000 in all 9, continue-build 0.0092 to 0.013"
]

/**
 * The limit of linear growth budgets, over the floor's growth: run1 measured 0.91 (estimate-cold) and 1.77
 * (validate), cal1's wall-clock medians 0.07 to 9.5 per attempt (so best-of-3, and CPU time, not wall time). 3.5 is
 * 2x the worst CPU-time figure and still fails quadratic growth (5).
 */
const LINEAR_GROWTH = 3.5

/**
 * Issue 29's resume goal: opening from the tail costs at most 2x decoding the entries after the last boundary. The
 * JSONL open reads the tail index and the file from the tail's first line on (`SessionStoreJsonl`); in CPU time (the
 * `tail` runs of `CALIBRATION_RUNS`) the read measured 1.14 to 1.81 per attempt (best of three 1.14 to 1.65), the
 * writer's open (the lock, the store's acquire over the same stretch, the fold of what it read) 1.58 to 1.99 since it
 * reuses the acquire's read (best of three 1.58 and 1.59; 1.55 to 2.20 when it read the stretch twice, tail1-tail3).
 * The goal holds in every attempt; the limit is the worst attempt times ~1.3 (the best of three times 1.5), so a busy
 * machine does not fail it (one measurement at a load of 16 gave 1.95), and it still fails the read of the whole file
 * that the index replaced (2.68 to 9.19 in the runs of 2026-12-02 01:22 UTC) and a full fold (~30).
 */
const TAIL_PARSE_MAX = 2.5
const TAIL_RUNS = "tail1-tail5 (CPU time, 3 attempts each, load 4 to 10, two beside a busy loop)"
const TAIL_PARSE_WHY = `issue 29's goal is 2, met in every attempt: ${TAIL_RUNS} 1.14 to 1.81 (best of three 1.14 to ` +
  "1.65); 2.5 is 1.4x the worst attempt and fails the whole-file read it replaced (2.68+) and a full fold (~30). The " +
  "baseline decodes the last boundary too, as every open must (bench/sessiontail.bench.ts always did): since a " +
  "compaction line carries its removal record, leaving it out read 2.5 to 3.8 (2026-12-07 10:30 UTC, load 2 to 7); " +
  "with it, 1.57 to 2.17 best of three (10:42 UTC, BENCH_CI_CALIBRATE=1 BENCH_CI_ONLY=resume/, with DATABASE_URL)"
const TAIL_WRITER_WHY = "the writer's open (lock, acquire from the tail index, the fold of what the acquire read): " +
  "tail4-tail5 1.58 to 1.99 (best of three 1.58, 1.59; tail1-tail3, reading the stretch twice, 1.55 to 2.20); 2.5 is " +
  "1.26x the worst attempt and fails a full fold (~30)"
/**
 * The SQL store's opens (PostgreSQL at `DATABASE_URL`; skipped without it, see `bench/ci.ts`): in CPU time of this
 * process the server's work (the index scans, ~1.6 ms) is not counted, the driver's is; the runs are in
 * `CALIBRATION_RUNS` (`sql`).
 */
const SQL_TAIL_WHY = "on PostgreSQL 15 at DATABASE_URL, in this process's CPU time (the server's scans not counted): " +
  "sql1-sql3 the read 1.08 to 1.85 per attempt (best of three 1.08 to 1.54), the writer's open 1.11 to 2.20 (best " +
  "1.11 to 1.58); 2.5 is 1.6x the worst best-of-three and fails a full fold (~25)"
const CONVERSATION_TAIL_WHY = "the writer's open and the state resumed from the last boundary's checkpoint " +
  "(resumeState of the tail ~1.5 ms of the ~40): conv1-conv3 JSONL 1.93 to 2.95 per attempt (best of three 1.93 to " +
  "2.03), SQL 1.09 to 2.63 (best 1.09 to 1.71); 2.5 is 1.2x the worst JSONL best-of-three and fails a full read (~20)"
const TAIL_FULL_WHY = `issue 29's goal: at most 0.2x today's full fold; ${TAIL_RUNS} 0.04 to 0.07 (the full fold 486 ` +
  "to 939 ms, a median of 3 samples); 0.2 is the goal itself"

/**
 * The limit of growth budgets for the calls that read only what is around the cut (the policy cut's kept tail,
 * `safeCut` given the view's start), over the floor's growth: constant is ~0.2, a scan of the session ~1. run1
 * measured 0.18 (planForPolicy) and 0.26 (safeCut); cal1 0.009 to 1.45 (wall-clock medians, one outlier attempt).
 * 0.6 is 2.3x the worst CPU-time figure and fails a linear scan.
 */
const TAIL_GROWTH = 0.6

/** The budgets `bench/ci.ts` checks, in the order it prints them. */
/**
 * Issue 43's logged step (`bench/loggedStep.bench.ts`): a worker compacting at a 40k-token window, so its request
 * stays a few hundred messages at most while the history grows, each step timed against the stringify of its own
 * request (the logged conversation's latest requests, whole compaction cycles: V8 serializes a request above 64 KiB
 * that holds non-ASCII text several times slower per byte, which most of them are). The issue's goal (a logged step
 * <= 0.2x that stringify) is held with `sync: "deferred"` (0.15 to 0.16) and not quite with the default durability
 * (0.20 to 0.24): its two appends a step (a reply, a result) are each a synchronous write (a system call, ~8 us on the
 * CI machine) besides the encoded and checksummed line, the live view's fold and a span each in the log and the
 * store. These budgets guard what is held, and the step's growth from 1k to 100k messages (none: memory and work
 * follow the view).
 */
/** The logged step's limits and how they were chosen (see `LOGGED_STEP_BUDGETS`). */
const LOGGED_STRINGIFY_MAX = 0.45
const LOGGED_MEMORY_MAX = 8
const DEFERRED_STRINGIFY_MAX = 0.4
const DEFERRED_MEMORY_MAX = 4.5
const LOGGED_GROWTH_MAX = 1.5
const LOGGED_CALIBRATION =
  "two runs of BENCH_CI_CALIBRATE=1 BENCH_CI_ONLY=logged-step/ (2026-12-07 14:50 UTC, load 0.7 to 3.5, Node 22, " +
  "an AMD EPYC machine; the step against its own requests, one synchronous write and one span an append): the " +
  "logged step / stringify measured 0.22 to 0.27 per attempt (best per run 0.24 and 0.22 at 1k, 0.23 and 0.22 at " +
  "10k, 0.23 and 0.24 at 100k), the logged / in-memory step 2.29 to 3.47 (best 2.29 to 3.20), the step at 100k / " +
  "at 1k 0.81 to 1.06. The same code before that day's span cut measured 0.28 to 0.31 (best) there; on the " +
  "machine of the 13:08 runs, whose V8 stringified these requests 2.7x slower (7 to 8 ns a byte from 64 KiB " +
  "against 3), the logged step / stringify was 0.20 to 0.24. Limits: about 1.5x the worst best (the logged / " +
  "in-memory step: 8, above the worst single attempt); a step that grew with the history would be tens of times " +
  "over the growth limit. Again at 17:22 to 17:25 UTC, load 0.8 to 1.9, on the same machine in a phase where it " +
  "stringified faster (175 to 200 us a request) and stepped slower: the code of 14:50 (cec0c0d) measured 0.32, 0.26 " +
  "and 0.30 (best, 1k, 10k, 100k; single attempts up to 0.39), and the code with the conversation's own input checks " +
  "and conditional writes 0.33, 0.33, 0.25 and 0.28, 0.26, 0.28 in two runs (single attempts up to 0.41); paired in " +
  "one process the two codes' steps differ by 3.5%. So the limit is 0.45, about 1.4x the worst best of either code. Since 2026-12-08 the sides are measured in " +
  "alternation (bench/ci.ts loggedSide): BENCH_CI_ONLY=logged-step/ at 02:00 UTC, load 0.7 to 1.0, read 0.25, 0.31, " +
  "0.30 and 0.30, 0.32, 0.31 (1k, 10k, 100k): the step as before (78 to 85 us), the stringify 256 to 326 us a " +
  "request, against 410 to 550 us measured in a loop of its own after the steps that day. An agent loop serializes " +
  "one request between two steps, as the alternation does. The CI run of 02:19 UTC (load 2.2 to 3.8), in " +
  "alternation too, read 0.18, 0.20, 0.19: the stringify 427 to 530 us, the step 85 to 98 us. The stringify's own " +
  "speed wanders about 2x from one process to the next"
const DEFERRED_CALIBRATION =
  "the same two runs: the deferred step / stringify measured 0.18 to 0.24 per attempt (best per run 0.18 and 0.18 " +
  "at 1k, 0.19 and 0.19 at 10k), the deferred / in-memory step 2.28 to 2.71 (best 2.28 to 2.52). At 17:22 to " +
  "17:25 UTC (see the logged step's) the code of 14:50 measured 0.23 and 0.22 (best) and the later code 0.24, 0.24 " +
  "and 0.24, 0.22, single attempts up to 0.33. Limits: about 1.5x the worst best (0.4). In alternation (see the logged step's, 2026-12-08 02:00 UTC): 0.18, " +
  "0.22 and 0.21, 0.23 (1k, 10k)"
const LOGGED_STEP_BUDGETS: ReadonlyArray<Budget> = ([
  ["1k", M.loggedStep1k, M.deferredStep1k, M.loggedStringify1k, M.memoryStep1k],
  ["10k", M.loggedStep10k, M.deferredStep10k, M.loggedStringify10k, M.memoryStep10k]
] as const).flatMap(([size, subject, deferred, stringify, memory]): Array<Budget> => [
  {
    id: `logged-step/stringify-${size}`,
    description: `one logged Conversation step on the JSONL store / JSON.stringify of its request (${size} messages)`,
    subject,
    baseline: stringify,
    max: LOGGED_STRINGIFY_MAX,
    why: `issue 43's goal is 0.2; ${LOGGED_CALIBRATION}`
  },
  {
    id: `logged-step/memory-${size}`,
    description: `one logged Conversation step on the JSONL store / the same step on layerMemory (${size} messages)`,
    subject,
    baseline: memory,
    max: LOGGED_MEMORY_MAX,
    why: `what the log adds to a step; ${LOGGED_CALIBRATION}`
  },
  {
    id: `logged-step/deferred-stringify-${size}`,
    description: `one logged Conversation step with deferred writes / JSON.stringify of its request (${size} messages)`,
    subject: deferred,
    baseline: stringify,
    max: DEFERRED_STRINGIFY_MAX,
    why: `issue 43's goal is 0.2; ${DEFERRED_CALIBRATION}`
  },
  {
    id: `logged-step/deferred-memory-${size}`,
    description: `one logged Conversation step with deferred writes / the same step on layerMemory (${size} messages)`,
    subject: deferred,
    baseline: memory,
    max: DEFERRED_MEMORY_MAX,
    why: `what the log adds to a step when it waits for no write; ${DEFERRED_CALIBRATION}`
  }
]).concat([
  {
    id: "logged-step/stringify-100k",
    description: "one logged Conversation step on the JSONL store / JSON.stringify of its request (100k messages)",
    subject: M.loggedStep100k,
    baseline: M.loggedStringify100k,
    max: LOGGED_STRINGIFY_MAX,
    why: `issue 43's goal is 0.2; ${LOGGED_CALIBRATION}`
  },
  {
    id: "logged-step/growth-100k",
    description: "one logged Conversation step on the JSONL store at 100k messages / the same at 1k",
    subject: M.loggedStep100k,
    baseline: M.loggedStep1k,
    max: LOGGED_GROWTH_MAX,
    why: `memory and work follow the view, not the history; ${LOGGED_CALIBRATION}`
  }
])

export const budgets: ReadonlyArray<Budget> = [
  {
    id: "estimate-cold/floor",
    description: "estimating every message from scratch / summing the string lengths (10k messages)",
    subject: M.estimateCold10k,
    baseline: M.floor10k,
    max: 1.8,
    why: "v1-v5 (CPU time, load 12.8 to 33.1, a busy loop beside) 0.69 to 1.28, run1 1.30; earlier sessions' idle " +
      "wall-clock medians 0.71 to 1.54. The estimation knob (2x) measured 2.39 to 4.08; 1.8 is 1.4x the worst " +
      "CPU-time figure and 1.33x under the knob's best, so a 2x regression of the estimator fails it"
  },
  {
    id: "evict/single-pass",
    description: "eviction of an untouched session (keepRecent 5) / one pass over every block (10k messages)",
    subject: M.evict10k,
    baseline: M.visitBlocks10k,
    max: 40,
    why: "the eviction knob's budget: b5, c5 and the CI run of 2026-12-02 06:28-06:52 UTC (11 runs, 5 beside a busy " +
      "core, load 1.3 to 3.9) measured 17.4 to 31.1; BENCH_CI_SLOWDOWN=eviction (k1-k3, 06:53-06:56 UTC) 57.4 to " +
      "76.7, then with 45 (ke1-ke3, 06:51-06:55 UTC) 43.6 to 69.7 (ke3 43.6: failed by evict-cold/prune in both " +
      "processes). 40 is 1.29x the worst plain run and 1.09x under the knob's best, so a 2x regression of eviction " +
      "fails it or evict-cold/prune. d5 (limit 40, beside a busy core): 21.6 to 33.2 best, single attempts up to " +
      "54.1. Earlier sessions saw up to 190 with two other sessions' busy processes on the 2 cores (eviction " +
      "allocates, the pass does not): a run that loaded is measured again in a fresh process (bench/ci.ts)"
  },
  growth(
    "estimate-cold",
    "estimate, no cache",
    M.estimateCold50k,
    M.estimateCold10k,
    LINEAR_GROWTH,
    "over the floor's growth: run1 0.91; cal1 0.36 to 9.5 per attempt (raw 50k/10k: 2.8 to 14.7 in earlier " +
      "sessions, best of 3 up to 11.7); see LINEAR_GROWTH"
  ),
  growth(
    "evict",
    "eviction, untouched session",
    M.evict50k,
    M.evict10k,
    4.9,
    "over the floor's growth: run1 3.87 (CPU time, GC threads included), cal1 0.37 to 2.0 (raw 50k/10k 11.0 to 17.2 " +
      "in earlier sessions): garbage collection, not the pass, grows. The 50k result (11,890 pointers, ~8 MB) " +
      "outlives a scavenge that copies it, the 10k one (1.6 MB) mostly dies first. 4.9 is 1.27x the worst, the " +
      "thinnest margin of the table, and still fails quadratic growth (5)"
  ),
  growth(
    "safeCut",
    "safeCut at the middle, given the API view's start (reads only the turns around the cut)",
    M.safeCut50k,
    M.safeCut10k,
    TAIL_GROWTH,
    "over the floor's growth: run1 0.26 (about 0.3 us a call at 10k and 50k), cal1 0.03 to 1.45. Given the view's " +
      "start (as a conversation carries it), safeCut reads only the turns around the cut; without it, it read every " +
      "message after the cut (109 us at 10k, 500 us at 50k: ~1 over the floor). See TAIL_GROWTH"
  ),
  growth(
    "cutForPolicy",
    "planForPolicy, default policy, warm cache",
    M.cut50k,
    M.cut10k,
    TAIL_GROWTH,
    "over the floor's growth: run1 0.18, cal1 0.009 to 0.09 (raw 0.4 to 2.7; reads only the kept tail); see " +
      "TAIL_GROWTH"
  ),
  growth(
    "validate",
    "validate",
    M.validate50k,
    M.validate10k,
    LINEAR_GROWTH,
    "over the floor's growth: run1 1.77, cal1 0.07 to 2.34 (raw 3.9 to 13.1 in earlier sessions); see LINEAR_GROWTH"
  ),
  {
    id: "estimate-cold/pi",
    description: "our estimate with no cache / pi's estimateTokens summed (10k messages)",
    subject: M.estimateCold10k,
    baseline: M.piEstimate10k,
    max: 1.6,
    why: "a regression guard: the issue's rule (no slower than pi's, <= 1) held in earlier sessions' idle wall-clock " +
      "medians (0.29 to 0.90) but not in CPU time under load: v1-v5 0.80 to 1.31 per attempt (v3 failed the old limit " +
      "1 at 1.03 best of 3), run1 1.23; 1.6 is 1.22x the worst. The estimation knob measured 1.38 and 1.81 here: not " +
      "separable from load at 1.3, so estimate-cold/floor is the knob's budget"
  },
  {
    id: "estimate-warm/pi",
    description: "our estimateTokens, every message estimated before / pi's estimateTokens summed (10k messages)",
    subject: M.estimateWarm10k,
    baseline: M.piEstimate10k,
    max: 0.25,
    why: "measured 0.017 to 0.11; 0.25 (at least 4x faster than pi) is 2.3x the worst, and fails when the " +
      "identity cache stops hitting (the ratio would then be the cold one, 0.3 to 0.9)"
  },
  {
    id: "estimate-fresh/floor",
    description: "estimateTokens on fresh message objects / summing their string lengths (10k generated messages)",
    subject: M.estimateFresh10k,
    baseline: M.floorFresh10k,
    max: 2.5,
    why: "the issue's rule (at most 2.5x the floor), now over a floor of the same shape (the string lengths of fresh " +
      "copies, so both sides touch objects no cache has seen): run1 1.63 (CPU time); against the warm floor the " +
      "wall-clock medians were 1.6 to 2.1 idle and 2.81 under a load of 2. v1-v5 1.33 to 1.79; the estimation " +
      "knob measured 2.26 to 3.87, not always over the limit: estimate-cold/floor is the knob's budget"
  },
  {
    id: "estimate-fresh/pi",
    description: "estimateTokens on fresh message objects / pi's estimateTokens summed (real session x10, ~9.6k)",
    subject: M.estimateFreshReal,
    baseline: M.piEstimateReal,
    max: 0.5,
    why: "the issue's rule (at least 2x faster than pi) on its workload; measured 0.07 (14x faster). On generated " +
      "sessions, whose messages are small, pi is only 1.4x slower (both near the floor): not budgeted"
  },
  {
    id: "estimate-step/pi",
    description: "one agent step, estimateTokens([...previous, next]) / pi's estimateTokens summed (real session x10)",
    subject: M.estimateStepReal,
    baseline: M.piEstimateReal,
    max: 0.0033,
    why: "the issue's rule (at least 300x faster than pi) on its workload; measured 0.0012 to 0.0014 (700 to 820x)"
  },
  growth(
    "estimate-step",
    "one agent step of estimateTokens (one reference comparison per message, one new estimate)",
    M.estimateStep50k,
    M.estimateStep10k,
    4.9,
    "over the floor's growth: run1 3.37, cal1 0.26 to 7.6 per attempt (wall-clock medians; raw 9.7 in earlier " +
      "sessions): the step compares every shared message by reference (~1.4 ns at 10k, ~2.7 ns at 50k, out of " +
      "cache, so it grows faster than the floor's string scan), which no correct estimate of a new array can skip. " +
      "4.9 is 1.45x the CPU-time figure and still fails quadratic growth (5)"
  ),
  {
    id: "evict-cold/prune",
    description: "eviction of an untouched session (keepRecent 20) / the AI SDK's pruneMessages (real session x10)",
    subject: M.evictColdReal,
    baseline: M.pruneReal,
    max: 3,
    why: "a regression guard above the issue's goal (<= 2), which holds in quiet runs: measured 0.90 and 1.48 idle, " +
      "1.31 to 1.55 beside a busy core in 4 of the b5 runs and 2.23 to 2.73 in every attempt of the fifth (single " +
      "attempts up to 3.53): eviction allocates, so garbage collection under load moves it more than pruneMessages. " +
      "A limit under 2 failed that run spuriously; 3 fails a 2x regression only on a quiet machine"
  },
  {
    id: "evict-warm/prune",
    description: "one new turn on an evicted session, decided on the carried index / pruneMessages (real session x10)",
    subject: M.evictWarmReal,
    baseline: M.pruneReal,
    max: 0.1,
    why: "the issue's rule (warm eviction <= 0.1x pruneMessages); measured 0.0056 to 0.013 per attempt (6 to 19 us " +
      "against about 1 ms)"
  },
  {
    id: "growth/step-10k",
    description: "one Conversation step: (time at 10k messages / at 1k) / the floor's (flat = 0.1, linear = 1)",
    subject: M.step10k,
    baseline: M.step1k,
    floor: { subject: M.floorStep10k, baseline: M.floorStep1k },
    max: 0.3,
    why: "flatness where the outer-array copies are cheap (the view copies of two appends and a request grow with " +
      "the view), each size stepped from fresh aged states of its own size, the four sides in alternation (bench/ci.ts " +
      "stepGrowth; the floor's growth so measured is 12 to 22 from 1k to 10k). 2026-12-08 (STEP_RUNS, " +
      "BENCH_CI_ONLY=growth/step node --expose-gc bench/ci.ts): 0.09 to 0.16 in the first attempt at load 1.3 to 2.3 " +
      "(the step 49 to 95 us at 1k, 117 to 190 us at 10k), up to 0.19 in later attempts, 0.10 to 0.17 at load 3 to " +
      "6.6, 0.04 to 0.09 beside two busy loops (the 10k floor slows most). BENCH_CI_SLOWDOWN=rescan (each step also " +
      "reads every block of its view, a step that rescans the history): 0.34 to 0.57 in all 27 attempts of 3 runs at " +
      "load 1.4 to 2.3, 0.28 to 0.38 at load 3 to 7, once 0.16 beside two busy loops. 0.3 is 1.6x the worst attempt " +
      "of the step measured alone and 1.4x a whole run's (0.22, 01:20 UTC, load 0.9 to 2.1), and fails the rescan on a " +
      "quiet machine (0.34 at least), as CI runs it, not beside busy loops. The sides measured one after the other, the 10k state " +
      "left young (its first collection in the timed steps copied it), read the same code 0.35 to 0.8 (0.4 was the " +
      "limit; CI failed once)"
  },
  {
    id: "resume/tail-parse",
    description: "opening a 50k-entry JSONL session from its tail / decoding the entries after its last boundary",
    subject: M.tailOpenJsonl50k,
    baseline: M.tailParse50k,
    max: TAIL_PARSE_MAX,
    why: TAIL_PARSE_WHY
  },
  {
    id: "resume/tail-writer",
    description:
      "the writer's open of a 50k-entry JSONL session from its tail / decoding the entries after its boundary",
    subject: M.tailWriterJsonl50k,
    baseline: M.tailParse50k,
    max: TAIL_PARSE_MAX,
    why: TAIL_WRITER_WHY
  },
  {
    id: "resume/tail-full",
    description: "opening a 50k-entry JSONL session from its tail / opening it by folding every line (today)",
    subject: M.tailOpenJsonl50k,
    baseline: M.fullFoldJsonl50k,
    max: 0.2,
    why: TAIL_FULL_WHY
  },
  {
    id: "resume/sql-tail-parse",
    description: "opening a 50k-entry SQL session from its tail / decoding the entries after its last boundary",
    subject: M.tailOpenSql50k,
    baseline: M.tailParse50k,
    max: TAIL_PARSE_MAX,
    why: SQL_TAIL_WHY
  },
  {
    id: "resume/sql-tail-writer",
    description: "the writer's open of a 50k-entry SQL session from its tail / decoding the entries after its boundary",
    subject: M.tailWriterSql50k,
    baseline: M.tailParse50k,
    max: TAIL_PARSE_MAX,
    why: SQL_TAIL_WHY
  },
  {
    id: "resume/sql-tail-full",
    description: "opening a 50k-entry SQL session from its tail / opening it by reading and folding every row (today)",
    subject: M.tailOpenSql50k,
    baseline: M.fullFoldSql50k,
    max: 0.2,
    why: "issue 29's goal: at most 0.2x today's full fold; 0.2 is the goal itself"
  },
  {
    id: "resume/conversation-parse",
    description:
      "a worker's open of a 50k-entry JSONL session, its conversation resumed / decoding the entries after its boundary",
    subject: M.conversationTailJsonl50k,
    baseline: M.tailParse50k,
    max: TAIL_PARSE_MAX,
    why: CONVERSATION_TAIL_WHY
  },
  {
    id: "resume/conversation-full",
    description:
      "a worker's open of a 50k-entry JSONL session from its tail / the same over the log read in full (today)",
    subject: M.conversationTailJsonl50k,
    baseline: M.conversationFullJsonl50k,
    max: 0.2,
    why: "issue 29's goal: at most 0.2x today's full fold; 0.2 is the goal itself"
  },
  {
    id: "resume/sql-conversation-parse",
    description:
      "a worker's open of a 50k-entry SQL session, its conversation resumed / decoding the entries after its boundary",
    subject: M.conversationTailSql50k,
    baseline: M.tailParse50k,
    max: TAIL_PARSE_MAX,
    why: CONVERSATION_TAIL_WHY
  },
  {
    id: "step/evict-cold",
    description: "one Conversation step / a fresh evictStaleToolResults of the same session (50k messages)",
    subject: M.step50k,
    baseline: M.evictFull50k,
    max: 0.1,
    why: "the step carries its decisions instead of re-deciding: measured 0.0073 to 0.03 (a step that re-decides " +
      "measured 0.37). The issue's 50k / 10k <= 1.5 is not reached (measured 7 to 21): each step copies the view " +
      "array (two appends, an offload, the request), and past ~16k messages V8 allocates such arrays in its " +
      "large-object space (0.23 to 0.56 ms a copy at 50k against 5 to 15 us at 10k)"
  },
  ...([
    [
      "1k",
      M.step1k,
      M.stringify1k,
      0.2,
      "0.06 to 0.07 (three runs of BENCH_CI_ONLY=step, 2026-12-02 06:38 UTC, load 0.7 to 3.4), each sample 20 " +
      "steps from a fresh 1k state: stepped on for a whole measurement, the state grew several times past 1k and " +
      "measured 0.14 to 0.28 (CI run 06:28 UTC). A step's fixed part (a reply, a result, the trigger check) weighs " +
      "most beside a 1k body; 0.2 guards it. Since the step is measured from aged states in alternation with the " +
      "10k step and the floors (growth/step), a whole run read 0.03 (2026-12-08 01:20 UTC, load 0.9 to 2.1)"
    ],
    [
      "10k",
      M.step10k,
      M.stringify10k,
      0.1,
      "0.0078 (2026-12-02 00:40 UTC, load 4.5), 0.01 measured as growth/step measures it (2026-12-08 01:20 UTC, " +
      "load 0.9 to 2.1); 0.1 is the goal itself"
    ],
    [
      "50k",
      M.step50k,
      M.stringify50k,
      0.1,
      "0.04 (2026-12-02 00:40 UTC, load 4.5: the step copies the view array in " +
      "V8's large-object space); 0.1 is the goal itself"
    ]
  ] as const).map(([size, subject, baseline, max, measured]): Budget => ({
    id: `step/stringify-${size}`,
    description: `one Conversation step / JSON.stringify of the request it returns (${size} messages)`,
    subject,
    baseline,
    max,
    why: `issue 29's goal (a step costs at most 10% of serializing the request it builds); measured ${measured}`
  })),
  {
    id: "growth/hot-step",
    description:
      "one HotPaths step (a new file read): (10,000 files seen / 100) / the floor's (flat = 0.01, linear = 1)",
    subject: M.hotStep10k,
    baseline: M.hotStep100,
    floor: { subject: M.floorFiles10k, baseline: M.floorFiles100 },
    max: 0.1,
    why:
      "the hot paths carry persistent maps, so a step costs what it adds: over the floor's growth (~100 from 100 to " +
      "10,000 files) run1 0.0097, cal1 0.02 to 0.09 (raw 0.98 to 1.09 in earlier sessions, a ~0.4 us call). The " +
      "tracker that copied its maps measured 120 to 185 raw (~1.5 over the floor); 0.1 fails any copy of the files seen"
  },
  {
    id: "cut/pi",
    description: "our planForPolicy (keep 20k tokens, warm cache) / pi's findCutPoint (keep 20k tokens) (10k messages)",
    subject: M.cutPi10k,
    baseline: M.piCut10k,
    max: 1,
    why: "the issue's rule, no slower than pi's; measured 0.07 to 0.25 with the walk-back cut (4x headroom); the " +
      "former full scan measured 13 to 16 here and fails"
  },
  {
    id: "thread/body-50k-1k",
    description: "an append-only step's serialized body on a thread: at 50k messages / at 1k (the same size: 1)",
    subject: M.threadBody50k,
    baseline: M.threadBody1k,
    max: 1.05,
    why: "issue 29's rule (the body holds the new messages only, so its size does not follow the session's); a size, " +
      "not a time, so load does not move it: THREAD_RUNS measured 1.000 in every attempt (3,035 bytes at 1k and " +
      "50k; bench/thread.bench.ts the same at 10k). A body that held the view would be ~50x"
  },
  {
    id: "thread/continue-build",
    description: "building an append-only step's request on a thread / building the whole request (50k messages)",
    subject: M.threadBuild50k,
    baseline: M.wholeBuild50k,
    max: 0.05,
    why: "issue 29's rule (built without copying the view): THREAD_RUNS measured 0.0092 to 0.013 per attempt " +
      "(CPU time 2.9 to 4.7 us against 284 to 375 us); 0.05 is about 4x the worst, and still allows the whole " +
      "request's best case (a 50k copy at 0.23 ms) against a slow continue. A continue sliced from the whole request " +
      "(the former build) costs the whole request plus its slice: >= 1"
  },
  ...LOGGED_STEP_BUDGETS,
  {
    id: "memory/state-50k",
    description: "the heap a 50k-message Conversation state holds after 100 steps, messages included / its messages'",
    subject: M.stateHeap50k,
    baseline: M.messagesHeap50k,
    max: 1.5,
    why: "the issue's rule (a 50,000-message state retains at most 1.5x its messages); a heap size after full " +
      "collections, not a time, so it does not move with load: measured 1.24"
  },
  {
    id: "background/p90-blocked",
    description:
      "the 90th percentile of how long a compacting prepare blocks with backgroundAt 0.6 / the summarizer's " +
      "latency (scripted time, the three pi sessions)",
    subject: M.backgroundBlockedP90,
    baseline: M.backgroundLatency,
    max: 0.05,
    why: "issue 29's rule (the prepare that applies a compaction returns within 5% of the summarizer's latency in at " +
      "least 90% of compactions); scripted time (TestClock, bench/background.bench.ts), the same on every machine: " +
      "measured 13 of 14 compactions at 0 ms, p90 0 ms, reported as its bound of one 10 ms tick (0.002); 0.8 measures " +
      "11 of 13 (p90 over the limit)"
  },
  {
    id: "cli/help-start",
    description: "the CLI's start to its help (compact --help) / a bare runtime's start, CPU time of each process",
    subject: M.helpStart,
    baseline: M.bareStart,
    max: 2.5,
    why: "the regression guard that was a timed assertion of test/cli/run.test.ts (5x a bare start in wall time), " +
      "now in CPU time: measured 1.01 to 1.42 (4 attempts, load average 21 on 2 cores); 2.5 is about 1.75x the worst. " +
      "A start that loads the barrel and the SDK measured ~10x (790 to 850 ms of CPU against 73 to 96 ms)"
  },
  {
    id: "cli/version-start",
    description: "the CLI's start to its version (--version) / a bare runtime's start, CPU time of each process",
    subject: M.versionStart,
    baseline: M.bareStart,
    max: 2.5,
    why: "the regression guard that was a timed assertion of test/cli/run.test.ts (5x a bare start in wall time), " +
      "now in CPU time: measured 1.01 to 1.42 (4 attempts, load average 21 on 2 cores); 2.5 is about 1.75x the worst. " +
      "A start that loads the barrel and the SDK measured ~10x (790 to 850 ms of CPU against 73 to 96 ms)"
  }
]
