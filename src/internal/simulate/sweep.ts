/**
 * The sweep: the library's settings over a grid, every point replayed on the same sessions, with its cost, peak
 * context, cache misses (TTL expiries left out: no policy avoids them) and retention (what of the compacted spans the
 * next request, and the session's last request, still hold, by `Retention.measure`), and the Pareto front of cost and
 * retention.
 *
 * @internal
 */
import type { CompactionRetention, LibraryOptions, RetentionTally, SimulateOptions } from "./model.ts"
import type { RecordedSession } from "./model.ts"
import type { Message } from "../../Message.ts"
import { CATEGORIES } from "../../Retention.ts"
import type { Request } from "../../Request.ts"
import { prepareSession, replaySteps, retentionOf, settingsOf as replaySettingsOf } from "./replay.ts"

/** One setting of the grid and its figures over all sessions. @category models */
export interface SweepPoint {
  /** The point's label: its settings in words. */
  readonly name: string
  /** The `Library` settings replayed. */
  readonly options: LibraryOptions
  /** Dollars over all sessions. */
  readonly dollars: number
  /** The largest prompt plus reply of any session, in tokens. */
  readonly peakContext: number
  /** Cache misses other than TTL expiries, over all sessions. */
  readonly misses: number
  /** Requests over all sessions. */
  readonly requests: number
  /** Compactions, over all sessions. */
  readonly compactions: number
  /**
   * The anchors of every compacted span (not in the kept tail) present in the request after its compaction, pooled
   * over all compactions of all sessions, per category and in total; `share` is 1 without a compaction.
   */
  readonly retention: CompactionRetention
  /**
   * The same anchors looked for in the last request of each session instead, after every later compaction (the kept
   * tail of that request counted apart): what of the summarized history the agent still holds at the end.
   */
  readonly retentionAtEnd: CompactionRetention
}

/** The grid of `sweep`. Every field has a default. @category models */
export interface SweepOptions {
  /** The `compactAtTokens` values tried. Default 60k, 80k, 100k, 120k, 140k, 180k. */
  readonly compactAtTokens?: ReadonlyArray<number>
  /** The `keepRecent` values tried. Default 3, 5 and 10. */
  readonly keepRecent?: ReadonlyArray<number>
  /** Eviction rules: `undefined` is rent-or-buy, a number a fixed `minSavings`. */
  readonly minSavings?: ReadonlyArray<number | undefined>
  /**
   * The rewrite disciplines tried (`LibraryOptions.appendOnly`): `undefined` is the default (append-only once thinking
   * or threads give a reason), `false` offloads in place between compactions. Default: the default only.
   */
  readonly appendOnly?: ReadonlyArray<boolean | undefined>
}

/** The default grid: compaction at 60k–180k, keepRecent 3, 5, 10, rent-or-buy or minSavings 2k / 5k. */
const GRID = {
  compactAtTokens: [60_000, 80_000, 100_000, 120_000, 140_000, 180_000],
  keepRecent: [3, 5, 10],
  minSavings: [undefined, 2_000, 5_000],
  appendOnly: [undefined]
} as const

/** Tallies summed over several measures, per category and in total; the share is 1 when nothing was counted. */
const pooled = (measures: ReadonlyArray<CompactionRetention>): CompactionRetention => {
  const sum = (pick: (m: CompactionRetention) => RetentionTally): RetentionTally => {
    let counted = 0
    let present = 0
    let inTail = 0
    let recoverable: number | undefined = measures.length === 0 ? undefined : 0
    for (const m of measures) {
      const t = pick(m)
      counted += t.counted
      present += t.present
      inTail += t.inTail
      recoverable = recoverable === undefined || t.recoverable === undefined ? undefined : recoverable + t.recoverable
    }
    const share = counted === 0 ? 1 : present / counted
    return recoverable === undefined ? { counted, present, inTail, share } : {
      counted,
      present,
      inTail,
      share,
      recoverable,
      recoverableShare: counted === 0 ? 1 : (present + recoverable) / counted
    }
  }
  return {
    categories: Object.fromEntries(CATEGORIES.map((c) => [c, sum((m) => m.categories[c])])) as CompactionRetention[
      "categories"
    ],
    total: sum((m) => m.total)
  }
}

/** Every setting of `grid` (the default grid's values where it has none), with its label. */
const settingsOf = (grid: SweepOptions): ReadonlyArray<{ readonly name: string; readonly library: LibraryOptions }> =>
  (grid.compactAtTokens ?? GRID.compactAtTokens).flatMap((compactAtTokens) =>
    (grid.keepRecent ?? GRID.keepRecent).flatMap((keepRecent) =>
      (grid.minSavings ?? GRID.minSavings).flatMap((minSavings) =>
        (grid.appendOnly ?? GRID.appendOnly).map((appendOnly) => ({
          name: `compact at ${compactAtTokens / 1000}k, keepRecent ${keepRecent}, ${
            minSavings === undefined ? "rent-or-buy" : `minSavings ${minSavings}`
          }${appendOnly === false ? ", rewrites in place" : appendOnly === true ? ", append-only" : ""}`,
          library: {
            keepRecent,
            minSavings,
            policy: { compactAtTokens },
            ...(appendOnly === undefined ? {} : { appendOnly })
          }
        }))
      )
    )
  )

/** One setting replayed on every prepared session: its figures summed, its retention pooled. */
const pointOf = (
  prepared: ReadonlyArray<ReturnType<typeof prepareSession>>,
  name: string,
  library: LibraryOptions,
  settings: ReturnType<typeof replaySettingsOf>
): SweepPoint => {
  let dollars = 0
  let peakContext = 0
  let misses = 0
  let requests = 0
  let compactions = 0
  const next: Array<CompactionRetention> = []
  const atEnd: Array<CompactionRetention> = []
  for (const session of prepared) {
    const steps = replaySteps(session, { name, strategy: { _tag: "Library", options: library } }, settings)
    const spans: Array<ReadonlyArray<Message>> = []
    let last: Request | undefined
    let step = steps.next()
    while (step.done !== true) {
      const { event } = step.value
      if (event.summarized !== undefined) spans.push(event.summarized)
      if (event.figures.retention !== undefined) next.push(event.figures.retention)
      last = event.request
      step = steps.next()
    }
    const r = step.value.report
    dollars += r.dollars
    peakContext = Math.max(peakContext, r.peakContext)
    misses += r.misses.policy + r.misses.external
    requests += r.requests
    compactions += r.compactions
    if (last !== undefined) { for (const span of spans) atEnd.push(retentionOf(span, last)) }
  }
  return {
    name,
    options: library,
    dollars,
    peakContext,
    misses,
    requests,
    compactions,
    retention: pooled(next),
    retentionAtEnd: pooled(atEnd)
  }
}

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
  const settings = replaySettingsOf(options)
  const prepared = sessions.map((s) => prepareSession(s, options))
  return settingsOf(grid).map(({ library, name }) => pointOf(prepared, name, library, settings))
    .sort((a, b) => a.dollars - b.dollars)
}

/**
 * The points no other point beats on cost and retention at once: no other is no dearer and retains no less of the
 * compacted spans' anchors in total, both in the next request and at the end, while better on one of the three. In the
 * order given. @category simulation
 */
export const paretoFront = <P extends Pick<SweepPoint, "dollars" | "retention" | "retentionAtEnd">>(
  points: ReadonlyArray<P>
): ReadonlyArray<P> => {
  const next = (p: P) => p.retention.total.share
  const end = (p: P) => p.retentionAtEnd.total.share
  return points.filter((p) =>
    !points.some((q) =>
      q !== p && q.dollars <= p.dollars && next(q) >= next(p) && end(q) >= end(p) &&
      (q.dollars < p.dollars || next(q) > next(p) || end(q) > end(p))
    )
  )
}
