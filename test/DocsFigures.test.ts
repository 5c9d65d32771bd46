/**
 * No figure in the docs that a script does not regenerate. Every generated block of README.md, GUIDE.md,
 * COMPACTION.md and bench/README.md is what `scripts/docs-figures.ts` renders from the saved results under
 * `bench/results/` (re-rendered here, nothing re-run), and every figure outside a block is a definition on the
 * allow-list (a default the source defines, a price rule of the API), not a measurement.
 */
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { assert, describe, it } from "vitest"
import {
  ALLOWED,
  blocksOf,
  DOCS,
  normalizeBlock,
  prose,
  readResults,
  renderBlock,
  strayFigures
} from "../scripts/figures.ts"

const root = join(import.meta.dirname, "..")
const read = (doc: string) => readFileSync(join(root, doc), "utf8")
const results = readResults(root)

describe("the docs' figures", () => {
  for (const doc of DOCS) {
    it(`${doc}: every generated block is what the script renders from the saved results`, () => {
      for (const block of blocksOf(read(doc))) {
        assert.strictEqual(
          normalizeBlock(block.body),
          normalizeBlock(renderBlock(block.name, results)),
          `${doc}: block figures:${block.name} differs from its saved results; run npm run docs:figures`
        )
      }
    })

    it(`${doc}: no figure outside a generated block but the allowed definitions`, () => {
      const stray = strayFigures(read(doc), ALLOWED)
      assert.deepStrictEqual(
        stray.map((s) => `${doc}:${s.line}: ${s.figure} (… ${s.context} …)`),
        [],
        "a measured figure belongs in a generated block (scripts/figures.ts)"
      )
    })
  }

  it("the docs name nothing a package user cannot follow: issue numbers, test files, the spec's rule numbers", () => {
    const unfollowable = /\bissue (?:\d+|'s)|\btest\/|\.test\.ts\b|\.\.\/shared|API-RULES|test\/fixtures/g
    const found = DOCS.flatMap((doc) =>
      read(doc).split("\n").flatMap((line, i) =>
        [...line.matchAll(unfollowable)].map((m) => `${doc}:${i + 1}: ${m[0]}`)
      )
    )
    assert.deepStrictEqual(found, [])
  })

  it("the blocks are there: the cost table, the defaults and the benchmarks' tables", () => {
    const names = DOCS.flatMap((doc) => blocksOf(read(doc)).map((b) => b.name))
    for (const name of ["cost-table", "policy-defaults", "bench:peers#0", "bench:evict#0"]) {
      assert.include(names, name)
    }
  })

  it("every allowed figure is still written somewhere (no stale entry)", () => {
    const texts = DOCS.map((doc) => prose(read(doc)).replace(/\s+/g, " "))
    for (const allowed of ALLOWED) {
      const used = texts.some((text) =>
        strayFigures(text, []).some((s) => s.figure === allowed.figure) &&
        text.includes(allowed.near)
      )
      assert.isTrue(used, `${allowed.figure} near "${allowed.near}" (${allowed.why}) is in no doc`)
    }
  })

  it("the detector finds each kind of figure, and none inside a block or code", () => {
    const planted = [
      "It costs $3.20, 31% of none, 0.3× the window, 2x faster, 12 ms a step, 3 s in all, 1.3 MB retained,",
      "a peak of 478k, 97.6M tokens sent, 20,000 tokens kept and 100_000 at the trigger, a share of 0.309."
    ].join("\n")
    assert.deepStrictEqual(strayFigures(planted, []).map((s) => s.figure), [
      "$3.20",
      "31%",
      "0.3×",
      "2x",
      "12 ms",
      "3 s",
      "1.3 MB",
      "478k",
      "97.6M",
      "20,000",
      "100_000",
      "0.309"
    ])
    const fenced = ["```ts", "const x = 100_000 // 12 ms", "```"].join("\n")
    const block = ["<!-- figures:cost-table -->", "", "| $3.20 | 31% |", "", "<!-- /figures -->"].join("\n")
    assert.deepStrictEqual(strayFigures(`${fenced}\n${block}\nNode 22, Deno 2, effect 4.1.0, 3 turns.`, []), [])
  })
})
