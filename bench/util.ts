/**
 * Shared benchmark plumbing. `runBenchmarks()` prints mitata's report, or, when `BENCH_JSON=path` is set, writes a
 * compact JSON of every run (`{ runtime, cpu, rows: [{ name, args, avg_ns, p50_ns, p99_ns }] }`) for CI budgets.
 */
import { writeFileSync } from "node:fs"
import { measure, run } from "mitata"

/** One measured row of a benchmark run, in nanoseconds. */
export interface BenchRow {
  readonly name: string
  readonly args: Record<string, unknown>
  readonly avg_ns: number
  readonly p50_ns: number
  readonly p99_ns: number
}

/** Runs every registered mitata benchmark; see the module doc for `BENCH_JSON`. */
export const runBenchmarks = async (): Promise<ReadonlyArray<BenchRow>> => {
  const out = process.env.BENCH_JSON
  if (out === undefined) {
    await run()
    return []
  }
  const { benchmarks, context } = await run({ format: "quiet" })
  const rows: Array<BenchRow> = benchmarks.flatMap((trial) =>
    trial.runs.flatMap((r) =>
      r.stats === undefined
        ? []
        : [{ name: r.name, args: r.args, avg_ns: r.stats.avg, p50_ns: r.stats.p50, p99_ns: r.stats.p99 }]
    )
  )
  writeFileSync(out, JSON.stringify({ runtime: context.runtime, cpu: context.cpu.name, rows }, null, 2))
  return rows
}

/**
 * A probe of the heap in use after two full collections, or `undefined` when the runtime exposes no `gc`
 * (run with --expose-gc).
 */
export const settledHeap = (): (() => number) | undefined => {
  const gc = (globalThis as { gc?: () => void }).gc
  if (gc === undefined) return undefined
  return () => {
    gc()
    gc()
    return process.memoryUsage().heapUsed
  }
}

/**
 * `value` moved out of the young generation, as the messages of a live session are (they were allocated turns ago):
 * two minor collections, when the runtime exposes `gc` (run with --expose-gc). A per-sample input left young makes the
 * first scavenge inside the timed call copy it, a cost of the benchmark's own allocation (measured: 25% of cold
 * eviction samples at 3-4x the others).
 */
export const aged = <A>(value: A): A => {
  const gc = (globalThis as { gc?: (options?: { type: "minor" }) => void }).gc
  gc?.({ type: "minor" })
  gc?.({ type: "minor" })
  return value
}

/** A duration in nanoseconds as microseconds with one decimal, or milliseconds with two from 1 ms on. */
export const duration = (ns: number): string =>
  ns >= 1e6 ? `${(ns / 1e6).toFixed(2)} ms` : `${(ns / 1e3).toFixed(1)} µs`

/** A byte count in mebibytes with one decimal, e.g. `12.3 MB`. */
export const mb = (bytes: number): string => `${(bytes / 2 ** 20).toFixed(1)} MB`

/** The median time of one call of `f` (mitata's `measure`, its p50 in nanoseconds), with mitata's options. */
export const p50 = async (f: Parameters<typeof measure>[0], options?: object): Promise<number> =>
  (await measure(f as never, options as never)).p50
