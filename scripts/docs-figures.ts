/**
 * Regenerates every figure of the docs. First it runs the measuring scripts named on the command line (or all of
 * them with `--all`; none by default) and saves their results under `bench/results/` (`<name>.json`); then it renders
 * every generated block of README.md, GUIDE.md, COMPACTION.md and bench/README.md from the saved results, and formats
 * the docs it changed with `deno fmt`. The sources and the blocks are in `scripts/figures.ts`.
 *
 * Run: npm run docs:figures [-- --all | -- simulate-corpus peers …]
 */
import { execFileSync } from "node:child_process"
import { readFileSync, writeFileSync } from "node:fs"
import { loadavg } from "node:os"
import process from "node:process"
import {
  blocksOf,
  DOCS,
  normalizeBlock,
  parseOutput,
  readResults,
  renderDoc,
  RESULTS_DIR,
  SOURCES,
  type TablesRun
} from "./figures.ts"

const args = process.argv.slice(2)
const unknown = args.filter((a) => a !== "--all" && !SOURCES.some((s) => s.name === a))
if (unknown.length > 0) {
  console.error(`docs-figures: unknown source ${unknown.join(", ")}; sources: ${SOURCES.map((s) => s.name).join(", ")}`)
  process.exit(2)
}
const chosen = args.includes("--all") ? SOURCES : SOURCES.filter((s) => args.includes(s.name))

for (const source of chosen) {
  const file = `${RESULTS_DIR}/${source.name}.json`
  console.error(`docs-figures: ${source.command}`)
  const load = loadavg()[0]!
  const started = performance.now()
  const argv = source.kind === "data" ? [...source.argv, file] : source.argv
  const stdout = execFileSync(process.execPath, argv, { encoding: "utf8", maxBuffer: 256 * 1024 * 1024 })
  if (source.kind === "tables") {
    const run: TablesRun = {
      command: source.command,
      finished: new Date().toISOString(),
      node: process.version,
      load,
      seconds: (performance.now() - started) / 1000,
      ...parseOutput(stdout, source.notes)
    }
    writeFileSync(file, `${JSON.stringify(run, null, 2)}\n`)
  }
}

const results = readResults(".")
const changed: Array<string> = []
for (const doc of DOCS) {
  const before = readFileSync(doc, "utf8")
  const after = renderDoc(before, results)
  const same = (text: string) => blocksOf(text).map((b) => `${b.name}\n${normalizeBlock(b.body)}`).join("\n")
  if (same(after) !== same(before)) {
    writeFileSync(doc, after)
    changed.push(doc)
  }
}
if (changed.length > 0) {
  execFileSync("node_modules/.bin/deno", ["fmt", "--quiet", ...changed], { stdio: "inherit" })
}
console.error(`docs-figures: ${changed.length === 0 ? "no doc changed" : `rewrote ${changed.join(", ")}`}`)
