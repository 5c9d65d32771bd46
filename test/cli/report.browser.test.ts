/**
 * The HTML report in a real browser: the Chromium of `fixtures/Browser.ts` (the npm one, else the system's) driven by
 * playwright-core, under Node and under Deno. The report of `compaction replay --html` renders with no console errors
 * and no network request, its figures equal `inspect --json`, `replay --json` and `simulate --json` for the same file,
 * the legend's colours are the drawn ones, hovering a request shows its details, and screenshots are written to
 * `test-output/`. With no Chromium it is one skip line saying how to get one, and a failure under CI=true.
 */
import { assert, describe, it } from "@effect/vitest"
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import process from "node:process"
import { type BrowserContext, chromium, type Page } from "playwright-core"
import { afterAll, beforeAll } from "vitest"
import type { ReportData } from "../../src/cli/Report.ts"
import { CHROMIUM_ARGS, chromiumCandidates, HOW_TO_GET_ONE } from "../fixtures/Browser.ts"
import { example, pool, root, type Run, run } from "./Process.ts"

const candidates = await chromiumCandidates()
/** No Chromium outside CI: the one skip line below; under CI=true the suite runs and fails in `beforeAll`. */
const skip = candidates.found.length === 0 && process.env["CI"] !== "true"
if (skip) {
  console.log(
    `report.browser.test.ts: SKIPPED, no Chromium (${candidates.missing.join("; ")}): ${HOW_TO_GET_ONE}`
  )
}
const output = join(root, "test-output")
const work = mkdtempSync(join(tmpdir(), "report-browser-"))
const profile = mkdtempSync(join(tmpdir(), "report-chromium-"))
const html = join(output, "report.html")
const compactedHtml = join(output, "report-compacting.html")
/** A window small enough that the chosen policy compacts the example. */
const SMALL_WINDOW = ["--context-window", "30000", "--keep-recent-tokens", "8000"]

let runs: Record<"replay" | "inspect" | "simulate" | "small", Run>
let context: BrowserContext
/** Every URL the pages asked for, and every console error or page error. */
const requested: Array<string> = []
const errors: Array<string> = []

beforeAll(async () => {
  if (skip) return
  assert.isAbove(
    candidates.found.length,
    0,
    `no Chromium (${candidates.missing.join("; ")}), and CI=true makes that a failure: ${HOW_TO_GET_ONE}`
  )
  mkdirSync(output, { recursive: true })
  runs = await pool({
    replay: () => run(["replay", example, "--json", "--html", html]),
    inspect: () => run(["inspect", example, "--json"]),
    simulate: () => run(["simulate", example, "--json"]),
    small: () => run(["replay", example, "--json", "--html", compactedHtml, ...SMALL_WINDOW])
  }, 2)
  const failures: Array<string> = []
  for (const candidate of candidates.found) {
    try {
      context = await chromium.launchPersistentContext(profile, {
        executablePath: candidate.executablePath,
        headless: true,
        args: [...CHROMIUM_ARGS],
        viewport: { width: 1300, height: 1000 }
      })
      console.log(`report.browser.test.ts: Chromium from ${candidate.source}, ${candidate.executablePath}`)
      break
    } catch (e) {
      failures.push(`${candidate.source} did not start: ${String((e as Error)?.message ?? e).split("\n")[0]}`)
    }
  }
  assert.isDefined(context, failures.join("; "))
  await context.route("**/*", (route) => {
    const url = route.request().url()
    requested.push(url)
    return url.startsWith("file:") || url.startsWith("data:") ? route.continue() : route.abort()
  })
}, 180_000)

afterAll(async () => {
  await context?.close()
  rmSync(work, { recursive: true, force: true })
  rmSync(profile, { recursive: true, force: true })
})

const open = async (file: string): Promise<Page> => {
  const page = await context.newPage()
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") errors.push(`${m.type()}: ${m.text()}`)
  })
  page.on("pageerror", (e) => errors.push(`pageerror: ${e.message}`))
  page.on("requestfailed", (r) => errors.push(`request failed: ${r.url()}`))
  await page.goto(`file://${file}`)
  return page
}

const json = (r: Run): unknown => {
  assert.strictEqual(r.code, 0, r.stderr)
  return JSON.parse(r.stdout)
}

const dataOf = (page: Page): Promise<ReportData> =>
  page.evaluate(() => JSON.parse(document.getElementById("report-data")!.textContent!) as ReportData)

const at = (value: unknown, path: string): unknown =>
  path.split(".").reduce<unknown>((v, key) => (v as Record<string, unknown> | undefined)?.[key], value)

const formatted = (format: string, value: number): string =>
  format === "dollars" ? `$${value.toFixed(2)}` : Math.round(value).toLocaleString("en-US")

describe.skipIf(skip)("the HTML report in chromium", () => {
  it("renders with no console error and no network request", async () => {
    const page = await open(html)
    await page.waitForSelector("#context-chart .hit")
    assert.deepStrictEqual(errors, [])
    assert.isTrue(requested.length > 0)
    assert.deepStrictEqual(requested.filter((u) => !u.startsWith("file:") && !u.startsWith("data:")), [])
    await page.close()
  })

  it("its data and every figure it shows equal inspect --json, replay --json and simulate --json", async () => {
    const page = await open(html)
    const data = await dataOf(page)
    const cli = { inspect: json(runs.inspect), replay: json(runs.replay), simulate: json(runs.simulate) }
    assert.deepStrictEqual(data.inspect, cli.inspect)
    assert.deepStrictEqual(data.replay, cli.replay)
    assert.deepStrictEqual(data.simulate, cli.simulate)

    const figures = await page.$$eval("[data-figure]", (els) =>
      els.map((e) => ({
        path: e.getAttribute("data-figure")!,
        format: e.getAttribute("data-format")!,
        value: Number(e.getAttribute("data-value")),
        text: (e.querySelector("b") ?? e).textContent!.trim()
      })))
    assert.isAbove(figures.length, 60)
    for (const f of figures) {
      const [source] = f.path.split(".")
      const expected = source === "inspect" || source === "replay" || source === "simulate"
        ? at(cli, f.path)
        : at(data, f.path)
      assert.isNumber(expected, f.path)
      assert.strictEqual(f.value, expected, f.path)
      assert.strictEqual(f.text, formatted(f.format, expected as number), f.path)
    }
    for (
      const path of ["replay.requests", "replay.evictions", "inspect.estimatedTokens", "simulate.policies.0.dollars"]
    ) {
      assert.isTrue(figures.some((f) => f.path === path), path)
    }

    // the chart: one column per request, the bars stack to what each request sent, the marks where they happen
    const replay = cli.replay as { requests: number; evictions: number; offloadedResults: number }
    const chart = await page.$$eval(
      "#context-chart .hit",
      (els) => els.map((e) => Number(e.getAttribute("data-request")))
    )
    assert.deepStrictEqual(chart, Array.from({ length: replay.requests }, (_, i) => i + 1))
    assert.strictEqual(data.requests.length, replay.requests)
    const evictions = await page.$$eval(
      "#context-chart .eviction",
      (els) => els.map((e) => Number(e.getAttribute("data-request")))
    )
    assert.deepStrictEqual(evictions, data.requests.filter((r) => r.offloadedResults > 0).map((r) => r.n))
    // on this file the simulated replay evicts exactly where the recorded replay does
    assert.strictEqual(evictions.length, replay.evictions)
    assert.strictEqual(data.chosen.offloadedResults, replay.offloadedResults)
    const ticks = await page.$$eval("#context-chart text.tick", (els) => els.map((e) => e.textContent!))
    assert.include(ticks, "msg 1")
    assert.isTrue(ticks.some((t) => /^\d+(\.\d+)?k$/.test(t)), "y ticks in tokens")
    const labels = await page.$$eval("#context-chart text.axis-label", (els) => els.map((e) => e.textContent!))
    assert.include(labels.join(" "), "request number")
    assert.include(labels.join(" "), "tokens sent per request")

    // the policy comparison has a row per simulated policy, the chosen one marked
    const rows = await page.$$eval("#policies tr", (els) => els.length)
    assert.strictEqual(rows, (cli.simulate as { policies: Array<unknown> }).policies.length + 1)
    assert.strictEqual(await page.locator("#policies tr.chosen").count(), 1)
    // replayed without --min-savings, the chosen policy is the library's default: the simulator's "ours (defaults)"
    assert.match(await page.locator("#policies tr.chosen td").first().innerText(), /^ours \(defaults\)/)
    assert.strictEqual(await page.locator("#largest tr").count(), data.largestToolResults.length + 1)
    await page.close()
  })

  it("the legend's colours are the colours drawn", async () => {
    const page = await open(html)
    const colours = await page.evaluate(() => {
      const legend = (key: string) => {
        const s = getComputedStyle(document.querySelector(`[data-legend="${key}"]`)!)
        return key === "none" ? s.borderTopColor : key === "eviction" ? s.borderTopColor : s.backgroundColor
      }
      const drawn = (
        selector: string,
        prop: "fill" | "stroke"
      ) => [...new Set([...document.querySelectorAll(selector)].map((e) => getComputedStyle(e)[prop]))]
      return {
        cacheRead: { legend: legend("cacheRead"), drawn: drawn("#context-chart .s-cacheRead", "fill") },
        cacheWrite: { legend: legend("cacheWrite"), drawn: drawn("#context-chart .s-cacheWrite", "fill") },
        input: { legend: legend("input"), drawn: drawn("#context-chart .s-input", "fill") },
        none: { legend: legend("none"), drawn: drawn("#context-chart .none-line", "stroke") },
        eviction: { legend: legend("eviction"), drawn: drawn("#context-chart .eviction", "fill") }
      }
    })
    for (const [key, { drawn, legend }] of Object.entries(colours)) assert.deepStrictEqual(drawn, [legend], key)
    await page.close()
  })

  it("hovering a request shows its details, and the screenshots are written", async () => {
    const page = await open(html)
    const data = await dataOf(page)
    const target = data.requests.find((r) => r.n > data.requests.length / 2 && r.offloadedResults > 0)!
    assert.isDefined(target)
    const tip = page.locator("#tip")
    assert.isFalse(await tip.isVisible())
    await page.locator(`#context-chart .hit[data-request="${target.n}"]`).hover()
    await tip.waitFor({ state: "visible" })
    const text = await tip.textContent()
    const int = (n: number) => Math.round(n).toLocaleString("en-US")
    assert.include(text, `Request ${target.n} · reply at message ${target.message}`)
    assert.include(text, `cache read   ${int(target.cacheRead).padStart(9)}`)
    assert.include(text, `cache write  ${int(target.cacheWrite).padStart(9)}`)
    assert.include(text, `uncached     ${int(target.input).padStart(9)}`)
    assert.include(text, `no compaction:   ${int(target.none).padStart(9)} tokens`)
    assert.include(text, `offloaded ${target.offloadedResults} tool results`)
    await page.locator("#context-chart").scrollIntoViewIfNeeded()
    const shot = join(output, "report.png")
    await page.screenshot({ path: shot })
    await page.screenshot({ path: join(output, "report-full.png"), fullPage: true })
    const png = readFileSync(shot)
    assert.deepStrictEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
    assert.isAbove(png.length, 20_000)
    await page.locator("h1").hover()
    await tip.waitFor({ state: "hidden" })
    await page.close()
    assert.deepStrictEqual(errors, [])
  })

  it("compactions are drawn where the chosen policy runs them", async () => {
    const page = await open(compactedHtml)
    const data = await dataOf(page)
    assert.deepStrictEqual(data.replay, json(runs.small))
    assert.isAbove(data.chosen.compactions, 0)
    const lines = await page.$$eval(
      "#context-chart .compaction",
      (els) => els.map((e) => Number(e.getAttribute("data-request")))
    )
    assert.deepStrictEqual(lines, data.requests.filter((r) => r.compacted).map((r) => r.n))
    assert.strictEqual(lines.length, data.chosen.compactions)
    const colour = await page.evaluate(() => [
      getComputedStyle(document.querySelector('[data-legend="compaction"]')!).borderTopColor,
      getComputedStyle(document.querySelector("#context-chart .compaction")!).stroke
    ])
    assert.strictEqual(colour[0], colour[1])
    // after the compaction the chosen policy sends less than the request before it
    const first = data.requests.find((r) => r.compacted)!
    const before = data.requests[first.n - 2]!
    const sent = (r: typeof first) => r.cacheRead + r.cacheWrite + r.input
    assert.isBelow(sent(first), sent(before))
    // the retention table: per compaction, the anchors one recall search finds and what it removed, with references
    const rows = data.replay.retention
    assert.isAbove(rows.length, 0)
    const cells = await page.$$eval("#retention tr", (trs) =>
      trs.slice(1).map((tr) => {
        const tds = [...tr.querySelectorAll("td")]
        return { recoverable: tds.at(-2)!.textContent!, removed: tds.at(-1)!.textContent! }
      }))
    assert.strictEqual(cells.length, rows.length)
    rows.forEach((row, i) => {
      const removed = row.removed!
      assert.isDefined(removed, `compaction ${row.compaction}`)
      assert.isAbove(removed.messages, 0)
      const int = (n: number) => Math.round(n).toLocaleString("en-US")
      assert.strictEqual(
        cells[i]!.recoverable,
        row.total.recoverable === undefined ? "n/a" : `${row.total.recoverable}`
      )
      assert.include(cells[i]!.removed, `${int(removed.messages)} messages, ${int(removed.toolResults)} tool results`)
      assert.include(cells[i]!.removed, `~${int(removed.tokens)} tokens`)
      for (const ref of removed.refs) assert.include(cells[i]!.removed, ref)
    })
    assert.isTrue(rows.some((r) => r.removed!.refs.length > 0), "some compaction removed tool results")
    await page.screenshot({ path: join(output, "report-compacting.png") })
    await page.close()
    assert.deepStrictEqual(errors, [])
  })
})
