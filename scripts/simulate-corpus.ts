/**
 * Prints the README's cost table: the corpus replayed under the standard policies by the faithful simulator
 * (`src/Simulate.ts`): the three pi sessions from their raw files (timestamps, models and billed usage), the others
 * from ../shared/data/sessions. Then the goal of issue 26 (ours ≤ 0.40× none and ≤ 0.55× compaction at the window,
 * ≤ 1 miss per 10 requests apart from TTL expiries), the check of the cache model against the bills, the check of the
 * one replay engine on the three pi sessions (`compaction replay`'s run equals `simulate`'s, and its requests priced
 * by the independent cache model of test/fixtures/IndependentCache.ts agree with `simulate`), and one full table per
 * session. With `--sweep`, every setting of the library's grid on the three pi sessions, with its cost, misses and
 * retention, and the Pareto front of cost and retention.
 * With `--json FILE`, it also writes the figures it printed (no sweep) as data, for `scripts/docs-figures.ts`.
 * Run: npm run simulate:corpus [-- --sweep] [-- --json FILE]
 */
import { readFileSync, writeFileSync } from "node:fs"
import process from "node:process"
import * as Effect from "effect/Effect"
import { importSession, type Session } from "../src/Import.ts"
import { replaySession } from "../src/cli/Replay.ts"
import { chosenPolicy, replayPolicyOptions, simulateOptionsFor } from "../src/cli/Report.ts"
import { DEFAULT_KEEP_RECENT } from "../src/Evict.ts"
import { CompactionPolicy, defaultPolicy } from "../src/Policy.ts"
import { formatReport, paretoFront, simulate, sweep } from "../src/Simulate.ts"
import { corpus, rawFile } from "../test/fixtures/Corpus.ts"
import { priceWritten, type Written } from "../test/fixtures/IndependentCache.ts"
import { checkAgainstRecord } from "../src/internal/simulate/record.ts"
import type { RequestEvent } from "../src/internal/simulate/model.ts"

const raw = (name: string): Session => Effect.runSync(importSession(readFileSync(rawFile(`${name}.jsonl`), "utf8")))
const PI = ["pi__before-compaction", "pi__large-session", "pi__session-2025-12-17_thinking"]
const sessions = corpus().map((s) => ({
  name: s.name,
  session: PI.includes(s.name) || s.name.startsWith("claude-code") ? raw(s.name) : { messages: s.messages }
}))
const reports = sessions.map(({ name, session }) => ({ name, report: simulate(session) }))
const long = reports.filter((r) => PI.includes(r.name))

const data: {
  sessions: Array<{ name: string; models: ReadonlyArray<string>; requests: number }>
  policies: Array<{
    name: string
    perSession: Array<
      { dollars: number; peakContext: number; misses: number; ttlMisses: number; compactions: number }
    >
  }>
  engine: Array<
    {
      name: string
      requests: number
      compactions: number
      evictions: number
      same: boolean
      simulate: number
      independent: number
    }
  >
  bills: Array<{ name: string; requests: number; billed: number; modelled: number; error: number }>
  disciplines: Array<
    { name: string; dollars: number; misses: number; requests: number; next: number; atEnd: number; front: boolean }
  >
} = {
  sessions: long.map(({ name, report }) => ({
    name,
    models: report.models,
    requests: report.policies[0]!.requests
  })),
  policies: long[0]!.report.policies.map((policy, i) => ({
    name: policy.name,
    perSession: long.map(({ report }) => {
      const p = report.policies[i]!
      return {
        dollars: p.dollars,
        peakContext: p.peakContext,
        misses: p.misses.policy + p.misses.external,
        ttlMisses: p.misses.ttl,
        compactions: p.compactions
      }
    })
  })),
  engine: [],
  bills: [],
  disciplines: []
}

// the rewrite discipline at the defaults: append-only between compactions (the default) against offloads in place,
// cost and retention side by side, and which of the two is on the Pareto front of both
{
  const points = sweep(long.map(({ name }) => sessions.find((s) => s.name === name)!.session), {
    compactAtTokens: [defaultPolicy.compactAtTokens],
    keepRecent: [DEFAULT_KEEP_RECENT],
    minSavings: [undefined],
    appendOnly: [undefined, false]
  })
  const front = new Set(paretoFront(points))
  for (const p of points) {
    data.disciplines.push({
      name: p.options.appendOnly === false ? "rewrites in place" : "append-only (the default)",
      dollars: p.dollars,
      misses: p.misses,
      requests: p.requests,
      next: p.retention.total.share,
      atEnd: p.retentionAtEnd.total.share,
      front: front.has(p)
    })
  }
  console.log("\nThe rewrite discipline (three pi sessions, defaults): $, misses, retention next / at the end, front")
  for (const d of data.disciplines) {
    console.log(
      `${d.name}: $${d.dollars.toFixed(2)}, ${d.misses} misses, ${d.next.toFixed(3)} / ${d.atEnd.toFixed(3)}` +
        `${d.front ? ", on the front" : ""}`
    )
  }
}

const pct = (a: number, b: number) => `${((100 * a) / b).toFixed(0)}%`
console.log(`| policy | ${long.map((r) => `${r.name} (${r.report.models.join(", ")})`).join(" | ")} | three together |`)
console.log(`| --- |${long.map(() => " ---: |").join("")} ---: |`)
for (const [i, policy] of long[0]!.report.policies.entries()) {
  const cells = long.map(({ report }) => {
    const p = report.policies[i]!
    const none = report.policies[0]!.dollars
    const misses = p.misses.policy + p.misses.external
    return `$${p.dollars.toFixed(2)} (${pct(p.dollars, none)}), peak ${Math.round(p.peakContext / 1000)}k, ` +
      `${misses} + ${p.misses.ttl} TTL misses`
  })
  const total = long.reduce((s, { report }) => s + report.policies[i]!.dollars, 0)
  const none = long.reduce((s, { report }) => s + report.policies[0]!.dollars, 0)
  console.log(`| ${policy.name} | ${cells.join(" | ")} | $${total.toFixed(2)} (${pct(total, none)}) |`)
}

const sum = (name: string, f: (p: (typeof long)[number]["report"]["policies"][number]) => number) =>
  long.reduce((s, { report }) => s + f(report.policies.find((p) => p.name === name)!), 0)
const ours = sum("ours (defaults)", (p) => p.dollars)
const none = sum("none", (p) => p.dollars)
const atWindow = sum("compaction at the window", (p) => p.dollars)
const requests = sum("ours (defaults)", (p) => p.requests)
const misses = sum("ours (defaults)", (p) => p.misses.policy + p.misses.external)
console.log(
  `\nGoal (three pi sessions, defaults): ours $${ours.toFixed(2)} = ${(ours / none).toFixed(3)}× none ` +
    `(≤ 0.40), ${(ours / atWindow).toFixed(3)}× compaction at the window (≤ 0.55); ${misses} misses apart from TTL ` +
    `expiries in ${requests} requests = ${((10 * misses) / requests).toFixed(2)} per 10 (≤ 1).` +
    ` ${ours / none <= 0.40 && ours / atWindow <= 0.55 && misses * 10 <= requests ? "Met." : "NOT MET."}`
)

console.log(
  "\nOne replay engine (`compaction replay`'s run against `simulate`'s ours (defaults), three pi sessions):\n"
)
console.log("| session | requests | compactions | evictions | same tokens | simulate $ | independent $ | difference |")
console.log("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
const replayPolicy = CompactionPolicy.makeUnsafe(replayPolicyOptions({
  keepRecentTokens: defaultPolicy.keepRecentTokens,
  keepRecentTurns: defaultPolicy.keepRecentTurns,
  contextWindow: defaultPolicy.contextWindow
}))
for (const { name, report } of long) {
  const session = sessions.find((s) => s.name === name)!.session as Session
  const written: Array<Written> = []
  const replayed = Effect.runSync(replaySession(
    session,
    chosenPolicy({ keepRecent: DEFAULT_KEEP_RECENT, policy: replayPolicy }),
    {
      simulate: { ...simulateOptionsFor(session, undefined), compaction: replayPolicy },
      onRequest: (n, e: RequestEvent) =>
        Effect.sync(() =>
          void written.push({
            request: e.request as unknown as Written["request"],
            usage: {
              request: n,
              message: e.index,
              time: e.figures.time,
              model: e.figures.model ?? null,
              cacheLost: e.cacheLost,
              usage: e.usage as Written["usage"]["usage"],
              dollars: e.figures.dollars
            }
          })
        )
    }
  ))
  const ours = report.policies.find((p) => p.name === "ours (defaults)")!
  const same = JSON.stringify(replayed.report.perRequest) === JSON.stringify(ours.perRequest) &&
    replayed.summary.compactions === ours.compactions && replayed.summary.evictions === ours.evictions
  const requestDollars = written.reduce((s, w) => s + w.usage.dollars, 0)
  const independent = priceWritten(written).reduce((s, b) => s + b.dollars, 0) + (ours.dollars - requestDollars)
  data.engine.push({
    name,
    requests: replayed.summary.requests,
    compactions: replayed.summary.compactions,
    evictions: replayed.summary.evictions,
    same,
    simulate: ours.dollars,
    independent
  })
  console.log(
    `| ${name} | ${replayed.summary.requests} | ${replayed.summary.compactions} | ${replayed.summary.evictions} | ` +
      `${same ? "yes" : "NO"} | $${ours.dollars.toFixed(2)} | $${independent.toFixed(2)} | ` +
      `${(100 * (independent / ours.dollars - 1)).toFixed(2)}% |`
  )
}

console.log("\nThe cache model against the bills (each session's own requests, misses the record shows given):\n")
console.log("| session | requests | billed (weighted tokens) | modelled | error |")
console.log("| --- | ---: | ---: | ---: | ---: |")
for (const { name, session } of sessions) {
  if (!("usage" in session) || session.usage.length === 0) continue
  const c = checkAgainstRecord(session as Session)
  data.bills.push({
    name,
    requests: c.requests,
    billed: c.billedCost,
    modelled: c.modelledCost,
    error: c.error
  })
  console.log(
    `| ${name} | ${c.requests} | ${Math.round(c.billedCost).toLocaleString("en-US")} | ` +
      `${Math.round(c.modelledCost).toLocaleString("en-US")} | ${(100 * c.error).toFixed(2)}% |`
  )
}

const jsonAt = process.argv.indexOf("--json")
if (jsonAt >= 0) {
  const file = process.argv[jsonAt + 1]
  if (file === undefined) throw new Error("--json needs a file")
  writeFileSync(file, `${JSON.stringify(data, null, 2)}\n`)
}

if (process.argv.includes("--sweep")) {
  const points = sweep(long.map(({ name }) => sessions.find((s) => s.name === name)!.session))
  const front = new Set(paretoFront(points))
  console.log(
    "\nThe sweep (three pi sessions): every setting, cheapest first. Retention: the compacted spans' anchors (by " +
      "Retention.measure, not in the kept tail) present in the next request, and at the end (in each session's last " +
      "request, after every later compaction), total share and per category (paths / commands / errors / " +
      "identifiers / instructions / plan). On the front: no other setting is no dearer and retains no less, next and " +
      "at the end, while better on one.\n"
  )
  console.log(
    "| setting | front | $ | × none | × window | peak | misses per 10 | compactions | retention next | at the end | " +
      "at the end, per category |"
  )
  console.log("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
  const share = (t: { readonly present: number; readonly counted: number; readonly share: number }) =>
    `${t.share.toFixed(3)} (${t.present}/${t.counted})`
  for (const p of points) {
    const categories = Object.values(p.retentionAtEnd.categories).map((t) => t.share.toFixed(2)).join(" / ")
    console.log(
      `| ${p.name} | ${front.has(p) ? "yes" : ""} | $${p.dollars.toFixed(2)} | ${(p.dollars / none).toFixed(3)} | ` +
        `${(p.dollars / atWindow).toFixed(3)} | ${Math.round(p.peakContext / 1000)}k | ` +
        `${((10 * p.misses) / p.requests).toFixed(2)} | ${p.compactions} | ${share(p.retention.total)} | ` +
        `${share(p.retentionAtEnd.total)} | ${categories} |`
    )
  }
}

for (const { name, report } of reports) console.log(`\n${formatReport(report, { title: name })}`)
