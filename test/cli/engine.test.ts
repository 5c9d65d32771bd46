/**
 * One replay engine: `compaction replay --json`, `compaction simulate --json` and the HTML report's embedded data
 * (`#report-data`) tell the same story of a session under the defaults (the same requests, compactions, evictions and
 * per-request tokens), and the requests `replay --out` writes, priced by an independent cache model written from the
 * API's caching rules (test/fixtures/IndependentCache.ts), cost what `simulate` says within 3%.
 *
 * Run as real child processes. One pi session (from its raw file: timestamps, models, billed usage) and the bundled
 * example; `npm run engine:corpus` runs the same checks on all three pi sessions and the example.
 */
import { assert, describe, it } from "@effect/vitest"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll } from "vitest"
import { priceWritten, readWritten, tokensOfWritten } from "../fixtures/IndependentCache.ts"
import { rawFile } from "../fixtures/Corpus.ts"
import { example, pool, type Run, run } from "./Process.ts"

const work = mkdtempSync(join(tmpdir(), "engine-test-"))
afterAll(() => rmSync(work, { recursive: true, force: true }))

const SESSIONS = {
  pi: rawFile("pi__session-2025-12-17_thinking.jsonl"),
  example
} as const
type Name = keyof typeof SESSIONS

interface Tokens {
  readonly message: number
  readonly cacheRead: number
  readonly cacheWrite: number
  readonly input: number
  readonly output: number
}
interface Counts {
  readonly requests: number
  readonly compactions: number
  readonly evictions: number
  readonly offloadedResults: number
}

let runs: Record<string, Run>
beforeAll(async () => {
  const jobs: Record<string, () => Promise<Run>> = {}
  for (const [name, file] of Object.entries(SESSIONS)) {
    jobs[`${name}:replay`] = () =>
      run(["replay", file, "--json", "--out", join(work, name), "--html", join(work, `${name}.html`)])
    jobs[`${name}:simulate`] = () => run(["simulate", file, "--json"])
  }
  runs = await pool(jobs, 2)
}, 240_000)

const json = (key: string) => {
  const r = runs[key]!
  assert.strictEqual(r.code, 0, `${key}: ${r.stderr}`)
  return JSON.parse(r.stdout)
}

const reportData = (name: Name) => {
  const html = readFileSync(join(work, `${name}.html`), "utf8")
  const m = html.match(/<script type="application\/json" id="report-data">([\s\S]*?)<\/script>/)
  assert.isNotNull(m, "the report embeds its data")
  return JSON.parse(m![1]!)
}

const writtenCache = new Map<Name, ReturnType<typeof readWritten>>()
const writtenOf = (name: Name) => {
  let w = writtenCache.get(name)
  if (w === undefined) writtenCache.set(name, w = readWritten(join(work, name)))
  return w
}

const counts = (o: Counts): Counts => ({
  requests: o.requests,
  compactions: o.compactions,
  evictions: o.evictions,
  offloadedResults: o.offloadedResults
})

describe("one replay engine", () => {
  for (const name of Object.keys(SESSIONS) as Array<Name>) {
    it(`${name}: replay --json, simulate --json and the report's data give the same requests and tokens`, () => {
      const replay = json(`${name}:replay`)
      const simulate = json(`${name}:simulate`)
      const ours = simulate.policies.find((p: { name: string }) => p.name === "ours (defaults)")
      const data = reportData(name)
      assert.isAbove(replay.requests, 100)
      assert.isAbove(replay.evictions, 0)
      assert.deepStrictEqual(counts(replay), counts(ours))
      assert.deepStrictEqual(counts(data.replay), counts(replay))
      assert.deepStrictEqual(counts({ ...data.chosen, requests: data.requests.length }), counts(replay))
      assert.deepStrictEqual(replay.requestTokens, ours.requestTokens)
      assert.deepStrictEqual(data.replay.requestTokens, replay.requestTokens)
      const charted: Array<Tokens> = data.requests.map((r: Tokens & { message: number }) => ({
        message: r.message,
        cacheRead: r.cacheRead,
        cacheWrite: r.cacheWrite,
        input: r.input,
        output: r.output
      }))
      assert.deepStrictEqual(charted, replay.requestTokens)
      const reportOurs = data.simulate.policies.find((p: { name: string }) => p.name === "ours (defaults)")
      assert.deepStrictEqual(reportOurs.requestTokens, ours.requestTokens)
      // the usage files beside the requests are the same tokens
      const written = writtenOf(name)
      assert.strictEqual(written.length, replay.requests)
      assert.deepStrictEqual(
        tokensOfWritten(written),
        replay.requestTokens
      )
    })

    it(`${name}: the written requests, priced independently, cost what simulate says within 3%`, () => {
      const simulate = json(`${name}:simulate`)
      const ours = simulate.policies.find((p: { name: string }) => p.name === "ours (defaults)")
      const written = writtenOf(name)
      const independent = priceWritten(written).reduce((s, b) => s + b.dollars, 0)
      const requests = written.reduce((s, w) => s + w.usage.dollars, 0)
      // the summarizer's calls are not requests of the conversation: they are simulate's, beside the requests
      const summarizer = ours.dollars - requests
      assert.isAtLeast(summarizer, 0)
      const error = (independent + summarizer) / ours.dollars - 1
      assert.isAtMost(Math.abs(error), 0.03, `independent $${independent.toFixed(3)} vs $${requests.toFixed(3)}`)
    })
  }
})
