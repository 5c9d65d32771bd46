/**
 * Issue 26's check of the one replay engine, on all three pi sessions (from their raw files) and
 * `examples/session.json`, through the CLI as a user runs it (child processes, defaults): `replay FILE --json --out
 * DIR --html FILE`, `simulate FILE --json`, and the report's embedded data (`#report-data`) must give the same
 * requests, compactions, evictions, offloaded results and per-request tokens; the usage files `--out` writes beside
 * the requests must hold the same tokens; and those requests, priced by the independent cache model of
 * test/fixtures/IndependentCache.ts, must cost what `simulate` says within 3%. test/cli/engine.test.ts asserts the
 * same for the thinking session and the example; the other two pi sessions take up to a minute each, so this script
 * checks all four. Exits 1 when any check fails.
 * Run: npm run engine:corpus
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { example, run } from "../test/cli/Process.ts"
import { rawFile } from "../test/fixtures/Corpus.ts"
import { priceWritten, readWritten, tokensOfWritten } from "../test/fixtures/IndependentCache.ts"

const SESSIONS: ReadonlyArray<[string, string]> = [
  ["pi__before-compaction", rawFile("pi__before-compaction.jsonl")],
  ["pi__large-session", rawFile("pi__large-session.jsonl")],
  ["pi__session-2025-12-17_thinking", rawFile("pi__session-2025-12-17_thinking.jsonl")],
  ["examples/session.json", example]
]

interface Counts {
  readonly requests: number
  readonly compactions: number
  readonly evictions: number
  readonly offloadedResults: number
}
const counts = (o: Counts): Counts => ({
  requests: o.requests,
  compactions: o.compactions,
  evictions: o.evictions,
  offloadedResults: o.offloadedResults
})
const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b)

const work = mkdtempSync(join(tmpdir(), "engine-corpus-"))
let failed = false
console.log(
  "| session | requests | compactions | evictions | offloaded | replay = simulate | report = replay | " +
    "usage files = replay | simulate $ | independent $ | difference |"
)
console.log("| --- | ---: | ---: | ---: | ---: | --- | --- | --- | ---: | ---: | ---: |")
try {
  for (const [name, file] of SESSIONS) {
    const dir = join(work, name.replace(/\W/g, "_"))
    const html = `${dir}.html`
    const [replayRun, simulateRun] = await Promise.all([
      run(["replay", file, "--json", "--out", dir, "--html", html]),
      run(["simulate", file, "--json"])
    ])
    for (const [what, r] of [["replay", replayRun], ["simulate", simulateRun]] as const) {
      if (r.code !== 0) throw new Error(`${name}: ${what} exited ${r.code}: ${r.stderr}`)
    }
    const replay = JSON.parse(replayRun.stdout)
    const ours = JSON.parse(simulateRun.stdout).policies.find((p: { name: string }) => p.name === "ours (defaults)")
    const m = readFileSync(html, "utf8").match(/<script type="application\/json" id="report-data">([\s\S]*?)<\/script>/)
    if (m === null) throw new Error(`${name}: the report embeds no data`)
    const data = JSON.parse(m[1]!)
    const reportOurs = data.simulate.policies.find((p: { name: string }) => p.name === "ours (defaults)")
    const charted = data.requests.map((r: Record<string, number>) => ({
      message: r["message"],
      cacheRead: r["cacheRead"],
      cacheWrite: r["cacheWrite"],
      input: r["input"],
      output: r["output"]
    }))
    const replaySimulate = same(counts(replay), counts(ours)) && same(replay.requestTokens, ours.requestTokens)
    const reportReplay = same(counts(data.replay), counts(replay)) &&
      same(counts({ ...data.chosen, requests: data.requests.length }), counts(replay)) &&
      same(data.replay.requestTokens, replay.requestTokens) && same(charted, replay.requestTokens) &&
      same(reportOurs.requestTokens, ours.requestTokens)
    const written = readWritten(dir)
    const usageReplay = written.length === replay.requests && same(
      tokensOfWritten(written),
      replay.requestTokens
    )
    // the summarizer's calls are not requests of the conversation: both sides carry simulate's price for them
    const requestDollars = written.reduce((s, w) => s + w.usage.dollars, 0)
    const independent = priceWritten(written).reduce((s, b) => s + b.dollars, 0) + (ours.dollars - requestDollars)
    const error = independent / ours.dollars - 1
    if (!replaySimulate || !reportReplay || !usageReplay || Math.abs(error) > 0.03) failed = true
    const yes = (ok: boolean) => ok ? "yes" : "NO"
    console.log(
      `| ${name} | ${replay.requests} | ${replay.compactions} | ${replay.evictions} | ${replay.offloadedResults} | ` +
        `${yes(replaySimulate)} | ${yes(reportReplay)} | ${yes(usageReplay)} | $${ours.dollars.toFixed(2)} | ` +
        `$${independent.toFixed(2)} | ${(100 * error).toFixed(2)}% |`
    )
  }
} finally {
  rmSync(work, { recursive: true, force: true })
}
console.log(failed ? "\nNOT the same story on every session." : "\nThe same story on every session.")
if (failed) process.exit(1)
