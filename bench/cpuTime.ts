/**
 * Timing by the process's CPU time (`process.cpuUsage`, user + system, every thread of the process), for the CI
 * budgets. On a shared machine another process takes the core away from ours; wall-clock time counts that wait, CPU
 * time does not, so a call's CPU time moves far less with load (measured on the 2-core box at a load average of ~20:
 * wall-clock medians 1.1x to 21x the fastest sample, see `bench/budgets.ts`). What load still changes (caches another
 * process evicted, a shared memory bus) touches both sides of a ratio alike.
 */
import { do_not_optimize } from "mitata"
import process from "node:process"

/** A sample: how many calls ran, and the CPU and wall-clock nanoseconds they took together. */
export interface Batch {
  readonly calls: number
  readonly cpuNs: number
  readonly wallNs: number
}

/** The statistics of one measured call: per-call CPU time (median, fastest) and median wall-clock time. */
export interface CpuStats {
  readonly cpuP50: number
  readonly cpuMin: number
  readonly wallP50: number
  readonly samples: number
}

const cpuNow = (): number => {
  const u = process.cpuUsage()
  return (u.user + u.system) * 1000
}

/** How much CPU time one sample of a fast call lasts at least: 2 ms, so the microsecond clock is 0.05% of it. */
const SAMPLE_NS = 2e6

/**
 * Samples of `f` called as is, batched so a sample lasts at least `sampleNs` (default `SAMPLE_NS`) of CPU time (found
 * on the first).
 */
export const calls = (f: () => unknown, sampleNs = SAMPLE_NS): () => Batch => {
  let k = 1
  return () => {
    for (;;) {
      const w0 = performance.now()
      const t0 = cpuNow()
      for (let i = 0; i < k; i++) do_not_optimize(f())
      const cpuNs = cpuNow() - t0
      const wallNs = (performance.now() - w0) * 1e6
      if (cpuNs >= sampleNs || k >= 1 << 24) return { calls: k, cpuNs, wallNs }
      k *= 2
    }
  }
}

/**
 * Samples of `f` over new inputs: `perSample` inputs built untimed by `input` (in order: an input may extend the one
 * before), then timed in one block.
 */
export const callsOn = <I>(input: () => I, f: (i: I) => unknown, perSample: number): () => Batch => () => {
  const inputs = Array.from({ length: perSample }, input)
  const w0 = performance.now()
  const t0 = cpuNow()
  for (const i of inputs) do_not_optimize(f(i))
  return { calls: perSample, cpuNs: cpuNow() - t0, wallNs: (performance.now() - w0) * 1e6 }
}

/**
 * Samples of several calls taken in alternation: `measureCpu` of each `sides[i]`, one sample of each a round (in
 * order, after one warm-up sample of each), so every side is measured under the same load, heap and caches as the
 * others. Rounds go on until `minSamples` and `cpuBudgetNs` of CPU time over all sides, at most `maxSamples`.
 */
export const measureInterleaved = (
  sides: ReadonlyArray<() => Batch>,
  options: MeasureOptions = {}
): Array<CpuStats> => {
  for (const sample of sides) sample()
  const samples = sides.map((): Array<Batch> => [])
  const all: Array<Batch> = []
  while (more(all, options, sides.length)) {
    sides.forEach((sample, i) => {
      const batch = sample()
      samples[i]!.push(batch)
      all.push(batch)
    })
  }
  return samples.map(statsOf)
}

/** Options of `measureCpu`. */
export interface MeasureOptions {
  readonly cpuBudgetNs?: number
  readonly minSamples?: number
  readonly maxSamples?: number
}

/**
 * Measures `sample` after one warm-up sample: at least `minSamples` samples and until `cpuBudgetNs` of CPU time is
 * spent, at most `maxSamples`.
 */
export const measureCpu = (sample: () => Batch, options: MeasureOptions = {}): CpuStats => {
  sample()
  const samples: Array<Batch> = []
  while (more(samples, options)) samples.push(sample())
  return statsOf(samples)
}

/**
 * `measureCpu` of an asynchronous call, one call a sample: the CPU time from its start to its end, every thread of
 * the process counted (a file read's thread pool included), the time it waits on nothing running not.
 */
export const measureCpuAsync = async (f: () => Promise<unknown>, options: MeasureOptions = {}): Promise<CpuStats> => {
  const sample = callAsync(f)
  await sample()
  const samples: Array<Batch> = []
  while (more(samples, options)) samples.push(await sample())
  return statsOf(samples)
}

/** Samples of the asynchronous `f`, one call a sample. */
export const callAsync = (f: () => Promise<unknown>) => async (): Promise<Batch> => {
  const w0 = performance.now()
  const t0 = cpuNow()
  do_not_optimize(await f())
  return { calls: 1, cpuNs: cpuNow() - t0, wallNs: (performance.now() - w0) * 1e6 }
}

/**
 * Asynchronous sides measured in alternation, `rounds` rounds after one warm-up sample of each: each round takes
 * `perRound` samples of every side in turn (a side timed one call a sample takes many a round beside one batched to a
 * few milliseconds), so every side sees the same stretches of the machine's speed and load.
 */
export const measureInterleavedAsync = async (
  sides: ReadonlyArray<{ readonly sample: () => Promise<Batch> | Batch; readonly perRound: number }>,
  rounds: number
): Promise<Array<CpuStats>> => {
  for (const side of sides) await side.sample()
  const samples = sides.map((): Array<Batch> => [])
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < sides.length; i++) {
      for (let k = 0; k < sides[i]!.perRound; k++) samples[i]!.push(await sides[i]!.sample())
    }
  }
  return samples.map(statsOf)
}

/** The CPU time of one call of the asynchronous `f`, in nanoseconds, every thread of the process counted. */
export const cpuOfCall = async (f: () => Promise<unknown>): Promise<number> => {
  const t0 = cpuNow()
  do_not_optimize(await f())
  return cpuNow() - t0
}

/** Whether to take another sample (another round of `perRound` samples, one per side). */
const more = (
  samples: ReadonlyArray<Batch>,
  { cpuBudgetNs = 4e8, maxSamples = 1_000, minSamples = 12 }: MeasureOptions,
  perRound = 1
): boolean => {
  const spent = samples.reduce((n, b) => n + b.cpuNs, 0)
  const rounds = samples.length / perRound
  return rounds < maxSamples && (rounds < minSamples || spent < cpuBudgetNs)
}

const statsOf = (samples: ReadonlyArray<Batch>): CpuStats => {
  const cpu = samples.map((b) => b.cpuNs / b.calls)
  const wall = samples.map((b) => b.wallNs / b.calls)
  const median = (xs: Array<number>) => {
    const s = [...xs].sort((a, b) => a - b)
    return s.length % 2 === 1 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2
  }
  return { cpuP50: median(cpu), cpuMin: Math.min(...cpu), wallP50: median(wall), samples: cpu.length }
}
