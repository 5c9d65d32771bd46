/**
 * The sweep: the library's settings over a grid, every point replayed on the same sessions, and the Pareto front of
 * total cost, peak context and cache misses (TTL expiries left out: no policy avoids them).
 *
 * @internal
 */
import type { LibraryOptions, SimulateOptions } from "./model.ts"
import type { RecordedSession } from "./model.ts"
import type { Message } from "../../Message.ts"
import { prepareSession, replay, settingsOf } from "./replay.ts"

/** One setting of the grid and its figures over all sessions. @category models */
export interface SweepPoint {
  readonly name: string
  readonly options: LibraryOptions
  readonly dollars: number
  readonly peakContext: number
  /** Cache misses other than TTL expiries, over all sessions. */
  readonly misses: number
  readonly requests: number
}

/** The grid of `sweep`. Every field has a default. @category models */
export interface SweepOptions {
  readonly compactAtTokens?: ReadonlyArray<number>
  readonly keepRecent?: ReadonlyArray<number>
  /** Eviction rules: `undefined` is rent-or-buy, a number a fixed `minSavings`. */
  readonly minSavings?: ReadonlyArray<number | undefined>
}

/** The default grid: compaction at 60k–180k, keepRecent 3, 5, 10, rent-or-buy or minSavings 2k / 5k. */
const GRID = {
  compactAtTokens: [60_000, 80_000, 100_000, 120_000, 140_000, 180_000],
  keepRecent: [3, 5, 10],
  minSavings: [undefined, 2_000, 5_000]
} as const

/**
 * Replays `sessions` at every point of the grid (the library's defaults elsewhere) and returns every point, cheapest
 * first. Pure and deterministic.
 * @category simulation
 */
export const sweep = (
  sessions: ReadonlyArray<ReadonlyArray<Message> | RecordedSession>,
  grid: SweepOptions = {},
  options: SimulateOptions = {}
): ReadonlyArray<SweepPoint> => {
  const settings = settingsOf(options)
  const prepared = sessions.map((s) => prepareSession(s, options))
  const points: Array<SweepPoint> = []
  for (const compactAtTokens of grid.compactAtTokens ?? GRID.compactAtTokens) {
    for (const keepRecent of grid.keepRecent ?? GRID.keepRecent) {
      for (const minSavings of grid.minSavings ?? GRID.minSavings) {
        const library: LibraryOptions = { keepRecent, minSavings, policy: { compactAtTokens } }
        const name = `compact at ${compactAtTokens / 1000}k, keepRecent ${keepRecent}, ${
          minSavings === undefined ? "rent-or-buy" : `minSavings ${minSavings}`
        }`
        let dollars = 0
        let peakContext = 0
        let misses = 0
        let requests = 0
        for (const session of prepared) {
          const r = replay(session, { name, strategy: { _tag: "Library", options: library } }, settings)
          dollars += r.dollars
          peakContext = Math.max(peakContext, r.peakContext)
          misses += r.misses.policy + r.misses.external
          requests += r.requests
        }
        points.push({ name, options: library, dollars, peakContext, misses, requests })
      }
    }
  }
  return points.sort((a, b) => a.dollars - b.dollars)
}

/** The points no other point beats on cost, peak context and misses at once (each no worse, one better). @category simulation */
export const paretoFront = (points: ReadonlyArray<SweepPoint>): ReadonlyArray<SweepPoint> =>
  points.filter((p) =>
    !points.some((q) =>
      q !== p && q.dollars <= p.dollars && q.peakContext <= p.peakContext && q.misses <= p.misses &&
      (q.dollars < p.dollars || q.peakContext < p.peakContext || q.misses < p.misses)
    )
  )
