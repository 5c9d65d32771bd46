/**
 * Prints the README's cost table: every real session in ../shared/data/sessions replayed under the seven standard
 * policies (`src/Simulate.ts`), as a summary of the long pi sessions and then one full table per session.
 * Run: npm run simulate:corpus
 */
import { simulate } from "../src/Simulate.ts"
import { formatReport } from "../src/Simulate.ts"
import { corpus } from "../test/fixtures/Corpus.ts"

const sessions = corpus()
const reports = sessions.map((s) => ({ name: s.name, report: simulate(s.messages) }))
const long = reports.filter((r) => r.name.startsWith("pi__"))

console.log(`| policy | ${long.map((r) => r.name).join(" | ")} |`)
console.log(`| --- |${long.map(() => " ---: |").join("")}`)
for (const [i, policy] of long[0]!.report.policies.entries()) {
  const cells = long.map(({ report }) => {
    const p = report.policies[i]!
    const base = report.policies[0]!.cost
    return `$${p.dollars.toFixed(2)} (${Math.round((100 * p.cost) / base)}%), peak ${
      Math.round(p.peakContext / 1000)
    }k, ${p.cacheInvalidations} inv.`
  })
  console.log(`| ${policy.name} | ${cells.join(" | ")} |`)
}
for (const { name, report } of reports) console.log(`\n${formatReport(report, { title: name })}`)
