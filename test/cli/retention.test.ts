/**
 * Retention where users see it: `compaction retention --json` gives, per compaction, the share of the removed span's
 * anchors present in the next request, and it agrees with the independent extractor of `test/fixtures/Anchors.ts`
 * applied to what `replay --out` wrote (the request after each compaction, and the span beside it); `replay --json`
 * and the report's `#report-data` carry the same per-compaction retention; `simulate --json` carries a retention
 * figure per policy.
 *
 * Run as real child processes on the bundled example, under a policy that compacts it several times, and `simulate`
 * on one pi session (the example never compacts under the simulator's defaults).
 */
import { assert, describe, it } from "@effect/vitest"
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll } from "vitest"
import { REF_CATEGORIES, type RefCategory, referenceAnchors, tallyRetention } from "../fixtures/Anchors.ts"
import { rawFile } from "../fixtures/Corpus.ts"
import { example, pool, type Run, run } from "./Process.ts"

const work = mkdtempSync(join(tmpdir(), "retention-test-"))
afterAll(() => rmSync(work, { recursive: true, force: true }))

/** Compacts the example several times (the defaults compact it never). */
const POLICY = ["--context-window", "20000", "--keep-recent-tokens", "4000"]
/** The one shared session: it compacts under the simulator's defaults, which the example does not. */
const pi = rawFile("pi__session-2025-12-17_thinking.jsonl")
const out = join(work, "requests")
const html = join(work, "report.html")

let runs: Record<string, Run>
beforeAll(async () => {
  runs = await pool({
    retention: () => run(["retention", example, "--json", ...POLICY]),
    text: () => run(["retention", example, ...POLICY]),
    replay: () => run(["replay", example, "--json", "--out", out, "--html", html, ...POLICY]),
    simulate: () => run(["simulate", pi, "--json"])
  }, 2)
}, 180_000)

const json = (key: string) => {
  const r = runs[key]!
  assert.strictEqual(r.code, 0, `${key}: ${r.stderr}`)
  return JSON.parse(r.stdout)
}

interface Tally {
  readonly counted: number
  readonly present: number
  readonly inTail: number
  readonly share: number
}
interface Row {
  readonly compaction: number
  readonly request: number
  readonly message: number
  readonly categories: Record<RefCategory, Tally>
  readonly total: Tally
}

const SUMMARY_FIRST_LINE = "[Summary of the earlier conversation]\n"

/** The kept tail of a written request: every message after the summary (blocks merged into it first). */
const tailOf = (messages: ReadonlyArray<{ role: string; content: unknown }>) => {
  const first = messages[0]
  const blocks = Array.isArray(first?.content) ? first.content as Array<{ type: string; text?: string }> : []
  const opensWithSummary = typeof first?.content === "string"
    ? first.content.startsWith(SUMMARY_FIRST_LINE)
    : blocks[0]?.type === "text" && blocks[0].text?.startsWith(SUMMARY_FIRST_LINE) === true
  if (first === undefined || !opensWithSummary) return messages
  const merged = blocks.slice(1)
  return merged.length === 0 ? messages.slice(1) : [{ role: first.role, content: merged }, ...messages.slice(1)]
}

describe("compaction retention", () => {
  it("per compaction, agrees with the independent extractor on the written requests and spans", () => {
    const { compactions, meanShare } = json("retention") as { compactions: Array<Row>; meanShare: number | null }
    const replay = json("replay")
    assert.isAtLeast(compactions.length, 3)
    assert.strictEqual(compactions.length, replay.compactions)
    const written = readdirSync(out).filter((f) => /^summarized-\d+\.json$/.test(f)).sort()
    assert.deepStrictEqual(
      written,
      compactions.map((r) => `summarized-${String(r.request).padStart(4, "0")}.json`),
      "a span beside every request that follows a compaction, and no other"
    )
    let counted = 0
    for (const row of compactions) {
      const n = String(row.request).padStart(4, "0")
      const span = JSON.parse(readFileSync(join(out, `summarized-${n}.json`), "utf8"))
      const request = JSON.parse(readFileSync(join(out, `request-${n}.json`), "utf8"))
      const reference = tallyRetention(referenceAnchors(span), request.messages, tailOf(request.messages))
      for (const category of REF_CATEGORIES) {
        const ours = row.categories[category]
        const theirs = reference[category]
        assert.deepStrictEqual(
          { counted: ours.counted, present: ours.present, inTail: ours.inTail },
          theirs,
          `compaction ${row.compaction}, ${category}`
        )
        assert.strictEqual(ours.share, theirs.counted === 0 ? 1 : theirs.present / theirs.counted)
      }
      const sum = (f: "counted" | "present" | "inTail") => REF_CATEGORIES.reduce((a, c) => a + reference[c][f], 0)
      assert.deepStrictEqual(
        { counted: row.total.counted, present: row.total.present, inTail: row.total.inTail },
        { counted: sum("counted"), present: sum("present"), inTail: sum("inTail") }
      )
      counted += row.total.counted
    }
    assert.isAbove(counted, 0, "the spans have anchors to count")
    const mean = compactions.reduce((a, r) => a + r.total.share, 0) / compactions.length
    assert.closeTo(meanShare!, mean, 1e-12)
  })

  it("prints a table per compaction with a row per category and a total row", () => {
    const r = runs["text"]!
    assert.strictEqual(r.code, 0, r.stderr)
    const { compactions } = json("retention") as { compactions: Array<Row> }
    assert.strictEqual(r.stdout.match(/^compaction \d+ \(request \d+/gm)?.length, compactions.length)
    const first = compactions[0]!
    const t = first.total
    assert.include(r.stdout, `  total       ${t.counted === 0 ? " n/a" : t.share.toFixed(2)}`)
    for (const category of REF_CATEGORIES) assert.match(r.stdout, new RegExp(`^  ${category} +`, "m"))
  })

  it("replay --json and the report's data carry the same per-compaction retention", () => {
    const { compactions } = json("retention") as { compactions: Array<Row> }
    const replay = json("replay")
    assert.deepStrictEqual(replay.retention, compactions)
    assert.isTrue(existsSync(html))
    const page = readFileSync(html, "utf8")
    const m = page.match(/<script type="application\/json" id="report-data">([\s\S]*?)<\/script>/)
    assert.isNotNull(m, "the report embeds its data")
    const data = JSON.parse(m![1]!)
    assert.deepStrictEqual(data.replay.retention, replay.retention)
    assert.include(page, '<table id="retention">')
  })

  it("simulate --json carries a retention figure per policy", () => {
    const simulate = json("simulate")
    assert.isAbove(simulate.policies.length, 1)
    for (const p of simulate.policies) {
      if (p.compactions === 0) assert.isNull(p.retention, p.name)
      else {
        assert.isNumber(p.retention, p.name)
        assert.isTrue(p.retention >= 0 && p.retention <= 1, p.name)
      }
    }
    assert.isTrue(simulate.policies.some((p: { retention: unknown }) => typeof p.retention === "number"))
  })
})
