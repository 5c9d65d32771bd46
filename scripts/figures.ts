/**
 * The figures of the docs, as data: which script measures each, how a generated block is rendered from the saved
 * results (`bench/results/*.json`), and the detector that finds a figure written outside a generated block.
 *
 * A doc holds a generated block between `<!-- figures:NAME -->` and `<!-- /figures -->`. `scripts/docs-figures.ts`
 * (`npm run docs:figures`) runs the measuring scripts, saves their results and rewrites every block from them;
 * `test/DocsFigures.test.ts` renders every block again from the saved results and compares (without re-running
 * anything slow), and checks that no figure lies outside a block unless it is a default the source defines.
 */
import { readFileSync } from "node:fs"
import { DEFAULT_KEEP_RECENT, FIXED_MIN_SAVINGS } from "../src/Evict.ts"
import { DEFAULT_MIN_FREED_TOKENS } from "../src/internal/compactDefaults.ts"
import {
  MANIFEST_IDENTIFIER_CHARS,
  MANIFEST_IDENTIFIER_MAX_CHARS,
  MANIFEST_IDENTIFIER_SHARE
} from "../src/internal/summary.ts"
import { CompactionPolicy, defaultPolicy } from "../src/Policy.ts"

/** The docs whose figures are checked. */
export const DOCS = ["README.md", "GUIDE.md", "COMPACTION.md", "bench/README.md"] as const

/** Where the saved results live, relative to the repository root. */
export const RESULTS_DIR = "bench/results"

/** A script whose output the docs quote: the command that writes `bench/results/<name>.json`. */
export interface Source {
  readonly name: string
  /** The command, as a reader would type it. */
  readonly command: string
  /** `data`: the script writes JSON itself (`--json FILE`); `tables`: its stdout's markdown tables are saved. */
  readonly kind: "data" | "tables"
  readonly argv: ReadonlyArray<string>
  /** Where its notes start: after its first table (what precedes is mitata's report, the default) or at once. */
  readonly notes?: "after-first-table" | "all"
}

/** Every measuring script the docs quote. */
export const SOURCES: ReadonlyArray<Source> = [
  {
    name: "simulate-corpus",
    command: "npm run simulate:corpus",
    kind: "data",
    argv: ["scripts/simulate-corpus.ts", "--json"]
  },
  {
    name: "peers",
    command: "npx node --expose-gc bench/peers.bench.ts",
    kind: "tables",
    argv: ["--expose-gc", "bench/peers.bench.ts"]
  },
  {
    name: "tokens",
    command: "npx node --expose-gc bench/tokens.bench.ts",
    kind: "tables",
    argv: ["--expose-gc", "bench/tokens.bench.ts"]
  },
  {
    name: "evict",
    command: "npx node --expose-gc bench/evict.bench.ts",
    kind: "tables",
    argv: ["--expose-gc", "bench/evict.bench.ts"]
  },
  {
    name: "conversation",
    command: "npx node --expose-gc bench/conversation.bench.ts",
    kind: "tables",
    argv: ["--expose-gc", "bench/conversation.bench.ts"]
  },
  {
    name: "shapes",
    command: "npx node --expose-gc bench/shapes.bench.ts",
    kind: "tables",
    argv: ["--expose-gc", "bench/shapes.bench.ts"]
  },
  {
    name: "logged-step",
    command: "npx node --expose-gc bench/loggedStep.bench.ts",
    kind: "tables",
    argv: ["--expose-gc", "bench/loggedStep.bench.ts"],
    notes: "all"
  },
  {
    name: "background",
    command: "npx node bench/background.bench.ts",
    kind: "tables",
    argv: ["bench/background.bench.ts"],
    notes: "all"
  }
]

/** What `docs-figures` saves of a run of a `tables` source. */
export interface TablesRun {
  readonly command: string
  /** ISO time the run finished. */
  readonly finished: string
  readonly node: string
  /** The 1-minute load average when the run started. */
  readonly load: number
  readonly seconds: number
  /** Every markdown table the script printed, as rows of cells (the alignment row as `---` / `---:`). */
  readonly tables: ReadonlyArray<ReadonlyArray<ReadonlyArray<string>>>
  /** Every other non-blank line the script printed after its first table (its notes). */
  readonly lines: ReadonlyArray<string>
}

/** What `scripts/simulate-corpus.ts --json` writes. */
export interface CorpusData {
  readonly sessions: ReadonlyArray<{ readonly name: string; readonly models: ReadonlyArray<string> }>
  readonly policies: ReadonlyArray<{
    readonly name: string
    readonly perSession: ReadonlyArray<{
      readonly dollars: number
      readonly peakContext: number
      readonly misses: number
      readonly ttlMisses: number
      readonly requests?: number
      readonly compactions: number
    }>
  }>
  readonly engine: ReadonlyArray<{
    readonly name: string
    readonly requests: number
    readonly compactions: number
    readonly evictions: number
    readonly same: boolean
    readonly simulate: number
    readonly independent: number
  }>
  readonly bills: ReadonlyArray<
    { readonly name: string; readonly requests: number; readonly billed: number; readonly modelled: number }
  >
  readonly disciplines: ReadonlyArray<{
    readonly name: string
    readonly dollars: number
    readonly misses: number
    readonly requests: number
    readonly next: number
    readonly atEnd: number
    readonly front: boolean
  }>
}

// ---------------------------------------------------------------------------------------------------------------------
// Reading a script's output
// ---------------------------------------------------------------------------------------------------------------------

const ANSI = new RegExp(String.raw`\u001b\[[0-9;]*[A-Za-z]`, "g")

const cellsOf = (row: string): Array<string> =>
  row.trim().replace(/^\|/, "").replace(/\|$/, "").split(/(?<!\\)\|/).map((c) => c.trim())

/** A line of Effect's default logger: `[12:00:00.000] WARN (#1): …`. */
const LOG_LINE = /^\[\d{2}:\d{2}:\d{2}\.\d{3}\] [A-Z]+ /

const isTableRow = (line: string): boolean => line.trimStart().startsWith("|") && line.trimEnd().endsWith("|")

/**
 * The markdown tables and the other lines a script printed; with `notes: "after-first-table"` (the default) the lines
 * before its first table are left out (a mitata bench's own report).
 */
export const parseOutput = (
  stdout: string,
  notes: Source["notes"] = "after-first-table"
): { tables: Array<Array<Array<string>>>; lines: Array<string> } => {
  const all = stdout.replace(ANSI, "").split("\n")
  const tables: Array<Array<Array<string>>> = []
  const lines: Array<string> = []
  let current: Array<Array<string>> | undefined
  let inLog = false
  for (const [i, line] of all.entries()) {
    // Effect's logger writes to the same stdout: a log line, and the object it prints over several lines
    if (inLog) {
      inLog = line.trim() !== "}"
      continue
    }
    if (LOG_LINE.test(line)) {
      inLog = line.trimEnd().endsWith("{")
      continue
    }
    const startsTable = isTableRow(line) && /^\s*\|\s*:?-{3,}/.test(all[i + 1] ?? "")
    if (current !== undefined && isTableRow(line)) {
      current.push(cellsOf(line))
      continue
    }
    current = undefined
    if (startsTable) {
      current = [cellsOf(line)]
      tables.push(current)
    } else if ((notes === "all" || tables.length > 0) && line.trim() !== "") lines.push(line.trim())
  }
  return { tables, lines }
}

// ---------------------------------------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------------------------------------

const tableText = (rows: ReadonlyArray<ReadonlyArray<string>>): string =>
  rows.map((cells) => `| ${cells.join(" | ")} |`).join("\n")

const money = (n: number) => `$${n.toFixed(2)}`
const int = (n: number) => Math.round(n).toLocaleString("en-US")
const kTokens = (n: number) => `${Math.round(n / 1000)}k`
const underscored = (n: number) => String(n).replace(/\B(?=(\d{3})+$)/g, "_")
const share = (a: number, b: number) => `${((100 * a) / b).toFixed(0)}%`
const utc = (iso: string) => `${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC`

/** The saved results a block is rendered from, read lazily by name. */
export type Results = (name: string) => unknown

const corpusOf = (results: Results): CorpusData => results("simulate-corpus") as CorpusData
const tablesOf = (results: Results, name: string): TablesRun => results(name) as TablesRun

const total = (data: CorpusData, policy: string) =>
  data.policies.find((p) => p.name === policy)!.perSession.reduce((s, p) => s + p.dollars, 0)

const costTable = (data: CorpusData): string => {
  const header = ["policy", ...data.sessions.map((s) => `${s.name} (${s.models.join(", ")})`), "three together"]
  const none = data.policies[0]!
  const rows = data.policies.map((policy) => {
    const cells = policy.perSession.map((p, i) =>
      `${money(p.dollars)} (${share(p.dollars, none.perSession[i]!.dollars)}), peak ${kTokens(p.peakContext)}, ` +
      `${p.misses} + ${p.ttlMisses} TTL misses`
    )
    const sum = policy.perSession.reduce((s, p) => s + p.dollars, 0)
    return [policy.name, ...cells, `${money(sum)} (${share(sum, total(data, none.name))})`]
  })
  return tableText([header, ["---", ...data.sessions.map(() => "---:"), "---:"], ...rows])
}

const costSummary = (data: CorpusData): string => {
  const ours = total(data, "ours (defaults)")
  const none = total(data, "none")
  const atWindow = total(data, "compaction at the window")
  const oursRows = data.policies.find((p) => p.name === "ours (defaults)")!.perSession
  const misses = oursRows.reduce((s, p) => s + p.misses, 0)
  const requests = data.engine.reduce((s, e) => s + e.requests, 0)
  return `On the three pi sessions together our defaults cost ${money(ours)}: ${(ours / none).toFixed(3)}× no ` +
    `compaction (${money(none)}) and ${(ours / atWindow).toFixed(3)}× compaction at the window ` +
    `(${money(atWindow)}), with ${misses} cache misses apart from TTL expiries in ${int(requests)} requests ` +
    `(${((10 * misses) / requests).toFixed(2)} per 10).`
}

const disciplineTable = (data: CorpusData): string =>
  tableText([
    ["between compactions", "three pi sessions", "misses per 10", "retention, next request", "at the end", "front"],
    ["---", "---:", "---:", "---:", "---:", "---"],
    ...data.disciplines.map((d) => [
      d.name,
      money(d.dollars),
      ((10 * d.misses) / d.requests).toFixed(2),
      d.next.toFixed(3),
      d.atEnd.toFixed(3),
      d.front ? "yes" : "no"
    ])
  ])

const engineTable = (data: CorpusData): string =>
  tableText([
    ["session", "requests", "compactions", "evictions", "replay = simulate", "simulate", "independent", "difference"],
    ["---", "---:", "---:", "---:", "---", "---:", "---:", "---:"],
    ...data.engine.map((e) => [
      e.name,
      int(e.requests),
      int(e.compactions),
      int(e.evictions),
      e.same ? "yes" : "no",
      money(e.simulate),
      money(e.independent),
      `${(100 * (e.independent / e.simulate - 1)).toFixed(2)}%`
    ])
  ])

const billTable = (data: CorpusData): string =>
  tableText([
    ["session", "requests", "billed (weighted tokens)", "modelled", "error"],
    ["---", "---:", "---:", "---:", "---:"],
    ...data.bills.map((b) => [
      b.name,
      int(b.requests),
      int(b.billed),
      int(b.modelled),
      `${(100 * (b.modelled / b.billed - 1)).toFixed(2)}%`
    ])
  ])

/** The trigger of the defaults table's second column: what a policy given only a smaller trigger derives. */
export const SMALL_TRIGGER = 20_000

/** The defaults of `CompactionPolicy`, and what a policy given only a smaller trigger derives, from the source. */
const defaultsTable = (): string => {
  const small = CompactionPolicy.makeUnsafe({ compactAtTokens: SMALL_TRIGGER })
  const row = (field: keyof typeof defaultPolicy & string, derivation: string) => [
    `\`${field}\``,
    int(defaultPolicy[field] as number),
    int(small[field] as number),
    derivation
  ]
  return tableText([
    ["field", "default", `at \`compactAtTokens: ${underscored(SMALL_TRIGGER)}\``, "how it derives"],
    ["---", "---:", "---:", "---"],
    row("compactAtTokens", "the cost target; at most `contextWindow - minRemaining`"),
    row("keepRecentTokens", "a quarter of the trigger, at most its default"),
    row("keepRecentTurns", "its own default"),
    row("maxTailTokens", "half the trigger, at least `keepRecentTokens`"),
    row("summaryBudgetTokens", "a quarter of the trigger, at most its default"),
    row("minGrowthTokens", "a fifth of the trigger, at most what the tail and the summary leave under it"),
    row("minRemaining", "its own default"),
    row("contextWindow", "its own default"),
    ["`keepRecent` (eviction)", int(DEFAULT_KEEP_RECENT), int(DEFAULT_KEEP_RECENT), "the newest tool results kept"],
    [
      "`minFreedTokens` (`Compact`)",
      int(DEFAULT_MIN_FREED_TOKENS),
      int(DEFAULT_MIN_FREED_TOKENS),
      "the least any compaction must free"
    ],
    ["`minSavings` (given as a number)", int(FIXED_MIN_SAVINGS), int(FIXED_MIN_SAVINGS), "absent: rent-or-buy"]
  ])
}

/** `bench-run:NAME`: which command printed a source's tables, when, where. */
const runLine = (run: TablesRun): string =>
  `Printed by \`${run.command}\` (run of ${utc(run.finished)}, Node ${run.node}, load average ${
    run.load.toFixed(1)
  } at its start, ${Math.round(run.seconds)} s).`

/** Renders the block NAME from the saved results; throws on a name it does not know. */
export const renderBlock = (name: string, results: Results): string => {
  const table = /^bench:([a-z-]+)#(\d+)$/.exec(name)
  if (table) {
    const rows = tablesOf(results, table[1]!).tables[Number(table[2])]
    if (rows === undefined) throw new Error(`figures:${name}: ${table[1]} printed no table ${table[2]}`)
    return tableText(rows)
  }
  const notes = /^bench-notes:([a-z-]+)$/.exec(name)
  if (notes) return ["```text", ...tablesOf(results, notes[1]!).lines, "```"].join("\n")
  const run = /^bench-run:([a-z-]+)$/.exec(name)
  if (run) return runLine(tablesOf(results, run[1]!))
  switch (name) {
    case "cost-table":
      return costTable(corpusOf(results))
    case "cost-summary":
      return costSummary(corpusOf(results))
    case "rewrite-discipline":
      return disciplineTable(corpusOf(results))
    case "engine-check":
      return engineTable(corpusOf(results))
    case "bill-check":
      return billTable(corpusOf(results))
    case "policy-defaults":
      return defaultsTable()
  }
  throw new Error(`figures:${name}: no such block`)
}

/** Reads `bench/results/NAME.json` under `root`. */
export const readResults = (root: string): Results => {
  const cache = new Map<string, unknown>()
  return (name) => {
    if (!cache.has(name)) {
      cache.set(name, JSON.parse(readFileSync(`${root}/${RESULTS_DIR}/${name}.json`, "utf8")))
    }
    return cache.get(name)
  }
}

// ---------------------------------------------------------------------------------------------------------------------
// Blocks in a doc
// ---------------------------------------------------------------------------------------------------------------------

const BLOCK = /<!-- figures:([^ ]+) -->\n([\s\S]*?)<!-- \/figures -->/g

/** The generated blocks of a doc: name and body. */
export const blocksOf = (text: string): Array<{ name: string; body: string }> =>
  [...text.matchAll(BLOCK)].map((m) => ({ name: m[1]!, body: m[2]! }))

/** The doc with every block's body rendered again. */
export const renderDoc = (text: string, results: Results): string =>
  text.replace(
    BLOCK,
    (_, name: string) => `<!-- figures:${name} -->\n\n${renderBlock(name, results)}\n\n<!-- /figures -->`
  )

/**
 * A block's body in a form `deno fmt` does not change: table rows as trimmed cells (alignment rows as their
 * alignment), every other run of lines as its words. Compared instead of the text, since `deno fmt` pads tables and
 * wraps prose.
 */
export const normalizeBlock = (body: string): string =>
  body.split("\n").map((line) =>
    isTableRow(line) ? cellsOf(line).map((c) => /^:?-+:?$/.test(c) ? c.replace(/-+/, "-") : c).join(" | ") : line.trim()
  ).join("\n").replace(/([^\n|])\n(?=[^\n|])/g, "$1 ").replace(/\n{2,}/g, "\n").trim()

// ---------------------------------------------------------------------------------------------------------------------
// The detector
// ---------------------------------------------------------------------------------------------------------------------

/** A number as the docs write one: digits, with decimals or thousands separators. */
const NUMBER = String.raw`\d+(?:[.,]\d+)*`

/**
 * What reads as a measured figure: dollars, percentages, ratios (`0.3×`, `2x`), durations (`5 ms`, `3 s`, `10
 * seconds`), sizes (`1.3 MB`), counts with a unit suffix (`60k`, `97.6M`) and numbers written with thousands
 * separators (`20,000`, `100_000`), and bare decimals (`0.309`; not versions such as `4.1.0`).
 */
export const FIGURE: RegExp = new RegExp(
  [
    String.raw`\$${NUMBER}`,
    String.raw`${NUMBER}\s?%`,
    String.raw`\b${NUMBER}\s?[×x](?![\w])`,
    String.raw`\b${NUMBER}\s?(?:ns|µs|us|ms|s|seconds?|minutes?|min|hours?)\b`,
    String.raw`\b${NUMBER}\s?(?:B|KB|MB|GB|KiB|MiB|GiB)\b`,
    String.raw`\b\d+(?:\.\d+)?[kM]\b`,
    String.raw`\b\d{1,3}(?:,\d{3})+\b`,
    String.raw`\b\d+(?:_\d{3})+\b`,
    // a bare decimal, a ratio or a share written without a unit (`0.309`), but not a version (`4.1.0`)
    String.raw`(?<![\w.])\d+\.\d+(?!\.?\d|\w)`
  ].join("|"),
  "g"
)

/** A figure allowed outside a generated block: it is a definition (a default, a price rule), not a measurement. */
export interface Allowed {
  /** The figure as written. */
  readonly figure: string
  /** Text that must stand within 100 characters of it. */
  readonly near: string
  readonly why: string
}

/** The text outside generated blocks and fenced code, where a figure is not allowed unless `Allowed`. */
export const prose = (text: string): string =>
  text.replace(BLOCK, (m) => m.replace(/[^\n]/g, " ")).replace(/^```[\s\S]*?^```/gm, (m) => m.replace(/[^\n]/g, " "))

/** Every figure of `text` outside its generated blocks and code that no entry of `allowed` covers. */
export const strayFigures = (
  text: string,
  allowed: ReadonlyArray<Allowed>
): Array<{ figure: string; line: number; context: string }> => {
  const body = prose(text)
  const out: Array<{ figure: string; line: number; context: string }> = []
  for (const m of body.matchAll(FIGURE)) {
    const figure = m[0].trim()
    const around = body.slice(Math.max(0, m.index - 100), m.index + m[0].length + 100).replace(/\s+/g, " ")
    if (allowed.some((a) => a.figure === figure && around.includes(a.near))) continue
    out.push({
      figure,
      line: body.slice(0, m.index).split("\n").length,
      context: around.trim()
    })
  }
  return out
}

/** The figures the docs may state outside a block: definitions, checked against the source where it exports them. */
export const ALLOWED: ReadonlyArray<Allowed> = [
  {
    figure: underscored(SMALL_TRIGGER),
    near: "makeUnsafe({ compactAtTokens",
    why: "the trigger the defaults table is printed at (SMALL_TRIGGER)"
  },
  {
    figure: int(FIXED_MIN_SAVINGS),
    near: `minSavings ${int(FIXED_MIN_SAVINGS)}`,
    why: "the policy row of the cost table that evicts by the fixed threshold FIXED_MIN_SAVINGS"
  },
  { figure: "1.25×", near: "cache-write price", why: "the API's price of a cache write (5-minute cache)" },
  { figure: "0.1×", near: "cache-read price", why: "the API's price of a cache read" },
  { figure: "1.25×", near: "writes cost 2× input", why: "the API's price of a cache write (5-minute cache)" },
  { figure: "2×", near: "writes cost 2× input", why: "the API's price of a cache write (1-hour cache)" },
  {
    figure: "5%",
    near: "missed tokens within 5%",
    why: "the tolerance `agrees` uses (internal/conversation/diagnostics)"
  },
  { figure: "10 seconds", near: "a timeout after 10 seconds", why: "TokenCounter's default timeout" },
  { figure: "0.6", near: "backgroundAt: 0.6", why: "an example value of CompactionPolicy#backgroundAt" },
  { figure: "0.6", near: "passes 0.6 of `compactAtTokens`", why: "the same example value, explained" },
  { figure: "40k", near: "compacts at a 40k-token window", why: "the logged-step bench's policy (contextWindow)" },
  {
    figure: "64 KiB",
    near: "per byte from 64 KiB on",
    why: "the size the logged-step bench's notes split requests at"
  },
  {
    figure: `${MANIFEST_IDENTIFIER_SHARE * 100}%`,
    near: "of the budget, never less than",
    why: "the manifest's identifiers' share of the summary budget (MANIFEST_IDENTIFIER_SHARE)"
  },
  {
    figure: int(MANIFEST_IDENTIFIER_CHARS),
    near: "of the budget, never less than",
    why: "the least room of the manifest's identifiers (MANIFEST_IDENTIFIER_CHARS)"
  },
  {
    figure: int(MANIFEST_IDENTIFIER_MAX_CHARS),
    near: "characters nor more than",
    why: "the most room of the manifest's identifiers (MANIFEST_IDENTIFIER_MAX_CHARS)"
  }
]
