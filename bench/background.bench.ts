/**
 * Background compaction (`CompactionPolicy.backgroundAt`) on the three pi sessions of `../shared/data/raw/`, in
 * scripted time: a summarizer that takes `LATENCY_MS` (5 s) of Effect's clock, and agent steps that take the time the
 * session recorded between its messages, clamped to `MAX_GAP_MS` (`test/fixtures/BackgroundReplay.ts`). Nothing of it
 * is wall time: `TestClock` moves by those amounts, so the figures are exact counts of simulated milliseconds, the
 * same on every machine. What is simulated: the summarizer's latency (a constant 5 s per call, an update as slow as a
 * first summary), the model's and the tools' time (the recorded gaps) and the usage each reply reports (the request's
 * estimated tokens: `predictedUsage`). What is real: every `Conversation` step, every summary (the extractive one),
 * every request.
 *
 * For each session it replays the conversation live with the background on, and with it off (every compaction
 * waits), then resumed from its log every 7 requests; it reports for each applied compaction how long its `prepare`
 * blocked, checks every request with the independent checker (`test/fixtures/ApiRules.ts`), that the resumed run
 * sends the live one's requests byte for byte, and that each compaction's retention (the independent anchor extractor
 * `test/fixtures/Anchors.ts`) equals that of a blocking compaction on the same cut of the same view.
 *
 * The issue's goal: the `prepare` that applies a compaction blocks at most 5% of the summarizer's latency in at least
 * 90% of the compactions; `bench/ci.ts` holds it (budget `background/p90-blocked`: the 90th percentile of the blocked
 * times over the latency, at most 0.05).
 *
 * Run: npx node bench/background.bench.ts (`BENCH_BACKGROUND_AT=0.8` for another pre-trigger)
 */
import { Effect } from "effect"
import { readFileSync } from "node:fs"
import { importSession } from "../src/Import.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { checkRequest, formatApiViolations } from "../test/fixtures/ApiRules.ts"
import { referenceAnchors, tallyRetention } from "../test/fixtures/Anchors.ts"
import {
  blockingTwin,
  recordedGaps,
  replayTimed,
  scriptedSummarizer,
  type TimedCompaction
} from "../test/fixtures/BackgroundReplay.ts"
import { rawFile } from "../test/fixtures/Corpus.ts"

/** The scripted summarizer's latency. */
export const LATENCY_MS = 5_000
/** The longest agent step: a longer recorded pause counts as this long (the user away does not help more). */
export const MAX_GAP_MS = 60_000
/** The pre-trigger the bench runs: 0.6 of the default 60,000-token trigger. */
export const BACKGROUND_AT = 0.6
/** The sessions replayed. */
export const SESSIONS = [
  "pi__before-compaction.jsonl",
  "pi__large-session.jsonl",
  "pi__session-2025-12-17_thinking.jsonl"
]

/** One session's figures. */
export interface SessionFigures {
  readonly session: string
  readonly requests: number
  readonly blockedMs: ReadonlyArray<number>
  readonly summarizerCalls: number
  /** The checks of a full run (`sessionFigures(file, true)`); absent in the CI run, which times the live replay only. */
  readonly checks?: {
    /** Compactions with the background off (each waits the whole latency). */
    readonly blockingCompactions: number
    readonly invalidRequests: number
    /** Requests of the run resumed every 7 requests that differ from the live run's. */
    readonly resumedDiffer: number
    /** Compactions whose retention differs from a blocking compaction's on the same cut. */
    readonly retentionDiffer: number
    /** Anchors of the compacted spans present in the new views, of those counted (independent extractor). */
    readonly retained: { readonly present: number; readonly counted: number }
  }
}

const loadSession = (file: string) => Effect.runSync(importSession(readFileSync(rawFile(file), "utf8")))

/** The independent extractor's tally of a compaction's removed span in `view`, the kept tail apart. */
const tally = (span: ReadonlyArray<Message>, view: ReadonlyArray<unknown>, tail: ReadonlyArray<unknown>) => {
  const t = tallyRetention(referenceAnchors(span), view, tail)
  return Object.values(t).reduce((a, c) => ({ present: a.present + c.present, counted: a.counted + c.counted }), {
    present: 0,
    counted: 0
  })
}

/** The retention of `c` and of a blocking compaction on the same cut of the same view, by the independent extractor. */
const retentionPair = (c: TimedCompaction, policy: CompactionPolicy) => {
  const twin = blockingTwin(c, { policy })
  return {
    applied: tally(twin.span, twin.applied, twin.applied.slice(1)),
    blocking: tally(twin.span, twin.blocking, twin.blocking.slice(1))
  }
}

/**
 * Replays one session live with the background on; with `full`, also with it off and resumed every 7 requests, every
 * request checked and every compaction's retention compared with its blocking twin's.
 */
export const sessionFigures = (
  file: string,
  full: boolean,
  backgroundAt: number = BACKGROUND_AT
): Effect.Effect<SessionFigures, unknown> =>
  Effect.gen(function* () {
    const session = loadSession(file)
    const gaps = recordedGaps(session.messages.length, session.recorded, MAX_GAP_MS)
    const policy = CompactionPolicy.makeUnsafe({ backgroundAt })
    const scripted = scriptedSummarizer(LATENCY_MS)
    const live = yield* replayTimed(session.messages, {
      policy,
      summarizer: scripted.layer,
      gaps,
      keepObjects: full
    })
    const figures = {
      session: file.replace(/\.jsonl$/, ""),
      requests: live.requests.length,
      blockedMs: live.compactions.map((c) => c.blockedMs),
      summarizerCalls: scripted.calls.requests.length
    }
    if (!full) return figures
    const off = yield* replayTimed(session.messages, {
      policy: CompactionPolicy.makeUnsafe(),
      summarizer: scriptedSummarizer(LATENCY_MS).layer,
      gaps
    })
    let invalidRequests = 0
    live.objects.forEach((request, i) => {
      const violations = checkRequest(request)
      if (violations.length > 0) {
        invalidRequests++
        console.error(`${file} request ${i + 1}: ${formatApiViolations(violations)}`)
      }
    })
    const again = yield* replayTimed(session.messages, {
      policy,
      summarizer: scriptedSummarizer(LATENCY_MS).layer,
      gaps,
      resumeEvery: 7
    })
    let resumedDiffer = Math.abs(again.requests.length - live.requests.length)
    for (let i = 0; i < Math.min(again.requests.length, live.requests.length); i++) {
      if (again.requests[i] !== live.requests[i]) resumedDiffer++
    }
    let retentionDiffer = 0
    const retained = { present: 0, counted: 0 }
    for (const c of live.compactions) {
      const pair = retentionPair(c, policy)
      if (pair.applied.present !== pair.blocking.present || pair.applied.counted !== pair.blocking.counted) {
        retentionDiffer++
      }
      retained.present += pair.applied.present
      retained.counted += pair.applied.counted
    }
    return {
      ...figures,
      checks: {
        blockingCompactions: off.compactions.length,
        invalidRequests,
        resumedDiffer,
        retentionDiffer,
        retained
      }
    }
  })

/** The nearest-rank 90th percentile of `values` (0 for none). */
export const p90 = (values: ReadonlyArray<number>): number => {
  if (values.length === 0) return 0
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.ceil(0.9 * sorted.length) - 1]!
}

/** Every session's figures and the blocked times of all their compactions together. */
export const backgroundFigures = (full: boolean, backgroundAt: number = BACKGROUND_AT) =>
  Effect.gen(function* () {
    const sessions: Array<SessionFigures> = []
    for (const file of SESSIONS) sessions.push(yield* sessionFigures(file, full, backgroundAt))
    const blocked = sessions.flatMap((s) => s.blockedMs)
    return { sessions, blocked, p90BlockedMs: p90(blocked), latencyMs: LATENCY_MS }
  })

if (import.meta.main) {
  const started = performance.now()
  // BENCH_BACKGROUND_AT=0.8 runs another pre-trigger (the CI budget holds 0.6)
  const figures = await Effect.runPromise(
    backgroundFigures(true, Number(process.env.BENCH_BACKGROUND_AT ?? BACKGROUND_AT))
  )
  for (const s of figures.sessions) {
    const c = s.checks!
    console.log(
      `${s.session}: ${s.requests} requests; ${s.blockedMs.length} compactions (${c.blockingCompactions} with the ` +
        `background off); blocked ms ${s.blockedMs.join(", ")}; ${s.summarizerCalls} summarizer calls; ` +
        `${c.invalidRequests} invalid requests; resumed every 7: ${c.resumedDiffer} requests differ; retention ` +
        `${c.retained.present}/${c.retained.counted}, ${c.retentionDiffer} compactions differ from blocking`
    )
  }
  const within = figures.blocked.filter((ms) => ms <= 0.05 * LATENCY_MS).length
  console.log(
    `compactions blocking <= 5% of ${LATENCY_MS} ms: ${within}/${figures.blocked.length} ` +
      `(${(100 * within / Math.max(1, figures.blocked.length)).toFixed(1)}%); p90 blocked ${figures.p90BlockedMs} ms ` +
      `= ${(figures.p90BlockedMs / LATENCY_MS).toFixed(3)} of the latency; wall ${
        Math.round(performance.now() - started)
      } ms`
  )
}
