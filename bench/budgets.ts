/**
 * Performance budgets for the CI benchmark run (`bench/ci.ts`), and the pure logic that checks measured rows
 * against them.
 *
 * Every budget is a ratio of two medians (mitata p50, nanoseconds per call) measured in the same process, close in
 * time (neighbours or two calls apart): `subject / baseline <= max`. No budget ever names an absolute time, so the
 * table holds on a fast laptop and on a loaded 2-core CI runner alike. A budget is measured up to `MAX_ATTEMPTS` times
 * (a fresh pair of measurements each time) and passes when its best attempt is within the limit: a load burst from
 * another process can slow one side of one pair, but rarely the same side of three pairs in a row. A regression slows
 * every attempt.
 *
 * How the factors were chosen: from repeated full runs on the 2-core development box, idle and under load (a load
 * average of 2 to 6 from other processes, and with two extra busy loops), each `max` is the worst ratio seen times
 * about 1.5, rounded, unless a rule fixes it (no slower than pi's: 1). Each budget's `why` gives the measured range.
 * To measure again: `BENCH_CI_CALIBRATE=1 node --expose-gc bench/ci.ts` measures every budget `MAX_ATTEMPTS` times
 * and writes every attempt's ratio to the JSON.
 */

/** One timed measurement of a named call, from one attempt of the CI run. */
export interface BenchRow {
  /** The measurement's name; budgets refer to rows by it. */
  readonly name: string
  /** Which attempt of the run measured it, from 1. The subject and baseline of a ratio come from the same attempt. */
  readonly attempt: number
  /** Median time of one call, in nanoseconds (a heap row, named "(bytes)", holds bytes: its budget is a size ratio). */
  readonly p50_ns: number
  /** Mean time of one call, in nanoseconds (reported only, never checked: the mean follows GC pauses and load). */
  readonly avg_ns: number
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
  /** The largest ratio `subject / baseline` that passes. */
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

/**
 * The ratio `subject / baseline` of every attempt that has a usable row for both sides (a finite, positive
 * median), in attempt order. Rows of other names are ignored.
 */
export const attemptRatios = (budget: Budget, rows: ReadonlyArray<BenchRow>): Array<number> => {
  const usable = (row: BenchRow) => Number.isFinite(row.p50_ns) && row.p50_ns > 0
  const subjects = new Map<number, number>()
  const baselines = new Map<number, number>()
  for (const row of rows) {
    if (!usable(row)) continue
    if (row.name === budget.subject) subjects.set(row.attempt, row.p50_ns)
    if (row.name === budget.baseline) baselines.set(row.attempt, row.p50_ns)
  }
  const ratios: Array<number> = []
  for (const attempt of [...subjects.keys()].sort((a, b) => a - b)) {
    const base = baselines.get(attempt)
    if (base !== undefined) ratios.push(subjects.get(attempt)! / base)
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
    const measured = (name: string) => attemptRatios({ ...budget, subject: name, baseline: name }, rows).length > 0
    return [{
      _tag: "NotMeasured",
      id: budget.id,
      missing: [budget.subject, budget.baseline].filter((name) => !measured(name))
    }]
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
  estimateCold10k: "estimate cold [10k]",
  estimateCold50k: "estimate cold [50k]",
  estimateWarm10k: "estimate warm [10k]",
  piEstimate10k: "pi estimateTokens [10k]",
  visitBlocks10k: "single pass: visit every block [10k]",
  evict10k: "evictStaleToolResults cold [10k]",
  evict50k: "evictStaleToolResults cold [50k]",
  safeCut10k: "safeCut mid [10k]",
  safeCut50k: "safeCut mid [50k]",
  cut10k: "cutForPolicy default [10k]",
  cut50k: "cutForPolicy default [50k]",
  cutPi10k: "cutForPolicy keep 20k tokens [10k]",
  piCut10k: "pi findCutPoint keep 20k tokens [10k]",
  validate10k: "validate [10k]",
  validate50k: "validate [50k]",
  estimateFresh10k: "estimateTokens, fresh objects [10k]",
  floorReal: "floor: sum string lengths [real x10]",
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
  hotStep100: "HotPaths step (a new file read) on a tracker that saw 100 files",
  hotStep10k: "HotPaths step (a new file read) on a tracker that saw 10,000 files",
  messagesHeap50k: "heap of a 50k-message session (bytes)",
  stateHeap50k: "heap of its Conversation state after 100 steps, messages included (bytes)"
} as const

/** Growth from 10k to 50k messages (the 50k session has 50,004): 5 means linear, 25 quadratic. */
const growth = (id: string, what: string, subject: string, baseline: string, max: number, why: string): Budget => ({
  id: `growth/${id}`,
  description: `${what}: time at 50k messages / time at 10k (linear = 5, quadratic = 25)`,
  subject,
  baseline,
  max,
  why
})

/**
 * The limit of linear growth budgets. Measured 50k/10k ratios of linear passes are 3 to 15 (best of 3 attempts: up to
 * 11.7): a 50k session's working set does not fit the per-core L2 cache a 10k one fits, and another process on the
 * same core evicts it, so the larger run loses more to load. 16 is 1.4x the worst best-of-3 and still fails
 * quadratic growth (25).
 */
const LINEAR_GROWTH = 16

/**
 * The limit of growth budgets for the policy cut, which reads only the kept tail (O(1) in the session's length,
 * measured 0.4 to 2.7 with the walk-back cut): at most linear, 5, plus headroom for the noise of timing microsecond
 * calls.
 */
const TAIL_GROWTH = 8

/** The budgets `bench/ci.ts` checks, in the order it prints them. */
export const budgets: ReadonlyArray<Budget> = [
  {
    id: "estimate-cold/floor",
    description: "estimating every message from scratch / summing the string lengths (10k messages)",
    subject: M.estimateCold10k,
    baseline: M.floor10k,
    max: 2.5,
    why: "measured 0.71 to 1.54 (both walk the same strings); 2.5 is 1.6x the worst"
  },
  {
    id: "evict/single-pass",
    description: "eviction of an untouched session (keepRecent 5) / one pass over every block (10k messages)",
    subject: M.evict10k,
    baseline: M.visitBlocks10k,
    max: 300,
    why: "measured 28 to 70, up to 190 with two busy processes on the 2 cores (eviction allocates, the pass does " +
      "not, so garbage collection makes eviction the side load slows); 300 is 1.6x the worst and still fails a " +
      "quadratic step (thousands at 10k)"
  },
  growth(
    "estimate-cold",
    "estimate, no cache",
    M.estimateCold50k,
    M.estimateCold10k,
    LINEAR_GROWTH,
    "measured 2.8 to 14.7 per attempt, best of 3 up to 11.7 (load); see LINEAR_GROWTH"
  ),
  growth(
    "evict",
    "eviction, untouched session",
    M.evict50k,
    M.evict10k,
    20,
    "measured 11.0 to 13.9 per attempt idle, best of 3 17.2 under two busy loops (3.6 to 10.4 before the backward " +
      "pass): garbage collection, not the pass, grows. The 50k result (11,890 pointers, ~8 MB) outlives a scavenge " +
      "that copies it (~10 ms each, one per call), the 10k one (1.6 MB) mostly dies first. 20 is 1.16x the worst and " +
      "still fails quadratic growth (25)"
  ),
  growth(
    "safeCut",
    "safeCut at the middle (reads every message after the cut for a compaction block: linear in them)",
    M.safeCut50k,
    M.safeCut10k,
    LINEAR_GROWTH,
    "measured 4.4 to 5.2 per attempt (109 us at 10k, 500 us at 50k), up to 11.6 under load. Since a cut may not land " +
      "before the API view's start, safeCut reads each message after the cut for a compaction block with content " +
      "(~20 ns a message, out of cache), so the growth is linear, not the O(1) of the tail cut; see LINEAR_GROWTH"
  ),
  growth(
    "cutForPolicy",
    "cutForPolicy, default policy, warm cache",
    M.cut50k,
    M.cut10k,
    TAIL_GROWTH,
    "measured 0.4 to 2.7 per attempt (reads only the kept tail); see TAIL_GROWTH"
  ),
  growth(
    "validate",
    "validate",
    M.validate50k,
    M.validate10k,
    LINEAR_GROWTH,
    "measured 3.9 to 13.1 per attempt, best of 3 up to 7.4; see LINEAR_GROWTH"
  ),
  {
    id: "estimate-cold/pi",
    description: "our estimate with no cache / pi's estimateTokens summed (10k messages)",
    subject: M.estimateCold10k,
    baseline: M.piEstimate10k,
    max: 1,
    why: "the issue's rule, no slower than pi's; measured 0.29 to 0.90 per attempt, best of 3 up to 0.60"
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
    description: "estimateTokens on fresh message objects / summing the string lengths (10k generated messages)",
    subject: M.estimateFresh10k,
    baseline: M.floor10k,
    max: 2.5,
    why: "the issue's rule (at most 2.5x the floor); measured 1.6 to 2.1 (1k to 50k)"
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
    LINEAR_GROWTH,
    "measured 9.7: the step compares every shared message by reference (~1.4 ns at 10k, ~2.7 ns at 50k, out of " +
      "cache), which no correct estimate of a new array can skip; see LINEAR_GROWTH"
  ),
  {
    id: "evict-cold/prune",
    description: "eviction of an untouched session (keepRecent 20) / the AI SDK's pruneMessages (real session x10)",
    subject: M.evictColdReal,
    baseline: M.pruneReal,
    max: 3,
    why:
      "a regression guard: the issue's goal (<= 2) is at its edge on this workload (met on generated 10k and 50k): " +
      "measured 1.89 to 2.11 per attempt idle, 1.82 to 1.83 with two busy loops on the 2 cores (2.8 to 3.2 before " +
      "the backward pass, 19 to 21 before the pointers were priced before written). Deciding is 0.7x a whole " +
      "pruneMessages run; writing the ~2,100 pointers and their messages the rest, ~1.3x. 3 is 1.42x the worst"
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
    description: "one Conversation step: time at 10k messages / time at 1k (flat = 1)",
    subject: M.step10k,
    baseline: M.step1k,
    max: 2,
    why: "flatness where the outer-array copies are cheap: measured 0.79 to 1.47 per attempt, once 1.77 under two " +
      "busy loops (30 to 67 us; the copies of the view are ~15 us of the 10k step). A step that rescans the view " +
      "measured 5 to 6 (1.65 ms at 10k before the carried index)"
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
  {
    id: "growth/hot-step",
    description: "one HotPaths step (a reply reading a new file, its result): 10,000 files seen / 100 files seen",
    subject: M.hotStep10k,
    baseline: M.hotStep100,
    max: 3,
    why: "the hot paths carry persistent maps, so a step costs what it adds: measured 0.98 to 1.09 (a ~0.4 us " +
      "call). The tracker that copied its maps measured 120 to 185 here; 3 leaves room for the noise of timing a " +
      "sub-microsecond call and still fails any copy of the files seen"
  },
  {
    id: "cut/pi",
    description: "our cutForPolicy (keep 20k tokens, warm cache) / pi's findCutPoint (keep 20k tokens) (10k messages)",
    subject: M.cutPi10k,
    baseline: M.piCut10k,
    max: 1,
    why: "the issue's rule, no slower than pi's; measured 0.07 to 0.25 with the walk-back cut (4x headroom); the " +
      "former full scan measured 13 to 16 here and fails"
  },
  {
    id: "memory/state-50k",
    description: "the heap a 50k-message Conversation state holds after 100 steps, messages included / its messages'",
    subject: M.stateHeap50k,
    baseline: M.messagesHeap50k,
    max: 1.5,
    why: "the issue's rule (a 50,000-message state retains at most 1.5x its messages); a heap size after full " +
      "collections, not a time, so it does not move with load: measured 1.24"
  }
]
