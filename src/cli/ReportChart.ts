/**
 * The charts of the HTML report, as inline SVG: the context per request (stacked cache read, cache write and uncached
 * input under the chosen policy, the no-compaction line, compaction and eviction marks, a hover target per request)
 * and the cumulative cost. Every element is closed and every text escaped, so the SVG also parses as XML.
 *
 * @since 0.1.0
 */
import type { ReportData, ReportRequest } from "./Report.ts"

/** Escapes text for HTML content and double- or single-quoted attribute values. @category formatting */
export const escapeHtml = (text: string): string =>
  text.replace(
    /[&<>"']/g,
    (c) => c === "&" ? "&amp;" : c === "<" ? "&lt;" : c === ">" ? "&gt;" : c === '"' ? "&quot;" : "&#39;"
  )

const fmt = (n: number): string => Math.round(n).toLocaleString("en-US")
const finePrice = (n: number): string => `$${n.toFixed(4)}`

/**
 * The colours of the request chart; the legend's swatches and the drawn marks use these same values.
 * @category constants
 */
export const CHART_COLORS = {
  cacheRead: "#4e79a7",
  cacheWrite: "#f28e2b",
  input: "#e15759",
  none: "#3d4450",
  compaction: "#8e44ad",
  eviction: "#2e9d4f",
  uploaded: "#76b7b2",
  whole: "#3d4450"
} as const

/** A round axis step (1, 2, 2.5 or 5 times a power of ten) giving at most about `ticks` intervals up to `max`. @category formatting */
export const niceStep = (max: number, ticks: number): number => {
  if (max <= 0) return 1
  const raw = max / ticks
  const power = 10 ** Math.floor(Math.log10(raw))
  for (const m of [1, 2, 2.5, 5, 10]) if (m * power >= raw) return m * power
  return 10 * power
}

/** Short token counts for axis labels: 950, 12k, 1.5M. @category formatting */
export const shortTokens = (n: number): string =>
  n >= 1e6 ? `${+(n / 1e6).toFixed(2)}M` : n >= 1e3 ? `${+(n / 1e3).toFixed(1)}k` : String(Math.round(n))

// ============================================================================
// SVG helpers
// ============================================================================

const num = (n: number): string => String(Math.round(n * 100) / 100)

const attrs = (a: Readonly<Record<string, string | number>>): string =>
  Object.entries(a).map(([k, v]) => ` ${k}="${escapeHtml(typeof v === "number" ? num(v) : v)}"`).join("")

const el = (name: string, a: Readonly<Record<string, string | number>>, children = ""): string =>
  `<${name}${attrs(a)}>${children}</${name}>`

const title = (text: string): string => `<title>${escapeHtml(text)}</title>`

interface Frame {
  readonly width: number
  readonly height: number
  readonly left: number
  readonly right: number
  readonly top: number
  readonly bottom: number
}

const plotWidth = (f: Frame) => f.width - f.left - f.right
const plotHeight = (f: Frame) => f.height - f.top - f.bottom

/** The y axis: gridlines and labels every `step`, and the axis title. */
const yAxis = (f: Frame, max: number, step: number, label: (v: number) => string, name: string): string => {
  const parts: Array<string> = []
  const y = (v: number) => f.top + plotHeight(f) - (v / max) * plotHeight(f)
  for (let v = 0; v <= max + 1e-9; v += step) {
    parts.push(el("line", { class: "grid", x1: f.left, x2: f.width - f.right, y1: y(v), y2: y(v) }))
    parts.push(el("text", { class: "tick", x: f.left - 6, y: y(v) + 4, "text-anchor": "end" }, escapeHtml(label(v))))
  }
  parts.push(
    el(
      "text",
      {
        class: "axis-label",
        transform: `translate(14 ${num(f.top + plotHeight(f) / 2)}) rotate(-90)`,
        "text-anchor": "middle"
      },
      escapeHtml(name)
    )
  )
  return parts.join("")
}

/** The x axis over requests 1..n: ticks at round request numbers, each with the message of its reply below. */
const xAxis = (f: Frame, requests: ReadonlyArray<ReportRequest>, withMessages: boolean): string => {
  const n = requests.length
  const col = plotWidth(f) / Math.max(1, n)
  const step = Math.max(1, Math.round(niceStep(n, 12)))
  const base = f.top + plotHeight(f)
  const parts: Array<string> = [
    el("line", { x1: f.left, x2: f.width - f.right, y1: base, y2: base, stroke: "#1f2328" })
  ]
  const ticks = [1, ...Array.from({ length: Math.floor(n / step) }, (_, i) => (i + 1) * step)].filter((t) => t <= n)
  for (const t of ticks) {
    const x = f.left + (t - 0.5) * col
    parts.push(el("line", { x1: x, x2: x, y1: base, y2: base + 5, stroke: "#1f2328" }))
    parts.push(el("text", { class: "tick", x, y: base + 17, "text-anchor": "middle" }, String(t)))
    if (withMessages) {
      parts.push(
        el("text", { class: "tick", x, y: base + 30, "text-anchor": "middle" }, `msg ${requests[t - 1]!.message}`)
      )
    }
  }
  parts.push(
    el(
      "text",
      { class: "axis-label", x: f.left + plotWidth(f) / 2, y: f.height - 4, "text-anchor": "middle" },
      withMessages ? "request number (below it: the message its reply is)" : "request number"
    )
  )
  return parts.join("")
}

const stepPath = (f: Frame, values: ReadonlyArray<number>, max: number): string => {
  const col = plotWidth(f) / Math.max(1, values.length)
  const y = (v: number) => f.top + plotHeight(f) - (v / max) * plotHeight(f)
  const steps = values.map((v, i) =>
    i === 0 ? `M${num(f.left)} ${num(y(v))}` : `H${num(f.left + i * col)} V${num(y(v))}`
  )
  return `${steps.join(" ")} H${num(f.left + values.length * col)}`
}

const linePath = (f: Frame, values: ReadonlyArray<number>, max: number): string => {
  const col = plotWidth(f) / Math.max(1, values.length)
  const y = (v: number) => f.top + plotHeight(f) - (v / max) * plotHeight(f)
  return values.map((v, i) => `${i === 0 ? "M" : "L"}${num(f.left + (i + 0.5) * col)} ${num(y(v))}`).join(" ")
}

const promptOf = (r: ReportRequest): number => r.cacheRead + r.cacheWrite + r.input

const messageList = (messages: ReadonlyArray<number>): string =>
  messages.length <= 8 ? messages.join(", ") : `${messages.slice(0, 8).join(", ")} and ${messages.length - 8} more`

/** The hover text of one request. @category formatting */
export const requestDetails = (r: ReportRequest, chosen: string): string =>
  [
    `Request ${r.n} · reply at message ${r.message}`,
    `${chosen}:`,
    `  context sent   ${fmt(promptOf(r)).padStart(9)} tokens`,
    `    cache read   ${fmt(r.cacheRead).padStart(9)}`,
    `    cache write  ${fmt(r.cacheWrite).padStart(9)}`,
    `    uncached     ${fmt(r.input).padStart(9)}`,
    `  output         ${fmt(r.output).padStart(9)}`,
    `  cost           ${finePrice(r.dollars).padStart(9)}`,
    `no compaction:   ${fmt(r.none).padStart(9)} tokens, ${finePrice(r.noneDollars)}`,
    ...(r.miss === null ? [] : [`cache miss (${r.miss})`]),
    ...(r.compacted ? ["compaction ran before this request"] : []),
    ...(r.offloaded.length === 0
      ? []
      : [`offloaded ${r.offloadedResults} tool results (in messages ${messageList(r.offloaded)})`]),
    `uploaded         ${shortBytes(r.uploadedBytes).padStart(9)}${
      r.thread === null ? "" : r.thread === "continue" ? " (thread continued: new messages only)" : " (new thread)"
    }`,
    ...(r.uploadedBytes === r.fullBytes ? [] : [`whole request    ${shortBytes(r.fullBytes).padStart(9)}`])
  ].join("\n")

/** Short byte counts: 950 B, 12.3 kB, 1.50 MB (decimal units). @category formatting */
export const shortBytes = (n: number): string =>
  n >= 1e6 ? `${(n / 1e6).toFixed(2)} MB` : n >= 1e3 ? `${(n / 1e3).toFixed(1)} kB` : `${Math.round(n)} B`

/** The context chart (`#context-chart`): stacked bars per request, the no-compaction line, compaction and eviction marks. */
export const contextChart = (data: ReportData): string => {
  const requests = data.requests
  const f: Frame = { width: 1200, height: 400, left: 66, right: 40, top: 30, bottom: 56 }
  const top = Math.max(1, ...requests.map(promptOf), ...requests.map((r) => r.none))
  const step = niceStep(top, 6)
  const max = Math.ceil(top / step) * step
  const col = plotWidth(f) / Math.max(1, requests.length)
  const bar = col >= 3 ? col * 0.78 : col
  const y = (v: number) => f.top + plotHeight(f) - (v / max) * plotHeight(f)
  const h = (v: number) => (v / max) * plotHeight(f)
  const parts: Array<string> = []
  parts.push(yAxis(f, max, step, shortTokens, "tokens sent per request"))
  const bars: Array<string> = []
  const marks: Array<string> = []
  const hits: Array<string> = []
  requests.forEach((r, i) => {
    const x = f.left + i * col + (col - bar) / 2
    let base = 0
    for (const key of ["cacheRead", "cacheWrite", "input"] as const) {
      const v = r[key]
      if (v > 0) {
        bars.push(el("rect", {
          class: `s-${key}`,
          x,
          y: y(base + v),
          width: bar,
          height: Math.max(0.5, h(v)),
          fill: CHART_COLORS[key]
        }))
      }
      base += v
    }
    if (r.compacted) {
      const cx = f.left + i * col
      marks.push(el(
        "line",
        {
          class: "compaction",
          "data-request": r.n,
          x1: cx,
          x2: cx,
          y1: f.top - 6,
          y2: f.top + plotHeight(f),
          stroke: CHART_COLORS.compaction,
          "stroke-width": 2,
          "stroke-dasharray": "5 3"
        },
        title(`compaction before request ${r.n} (reply at message ${r.message})`)
      ))
    }
    if (r.offloaded.length > 0) {
      const cx = f.left + (i + 0.5) * col
      marks.push(el(
        "polygon",
        {
          class: "eviction",
          "data-request": r.n,
          points: `${num(cx - 5)},${num(f.top - 16)} ${num(cx + 5)},${num(f.top - 16)} ${num(cx)},${num(f.top - 6)}`,
          fill: CHART_COLORS.eviction
        },
        title(
          `before request ${r.n}: offloaded ${r.offloadedResults} tool results (in messages ${
            messageList(r.offloaded)
          })`
        )
      ))
    }
    const details = requestDetails(r, "chosen policy")
    hits.push(el(
      "rect",
      {
        class: "hit",
        "data-request": r.n,
        "data-tip": details,
        x: f.left + i * col,
        y: f.top,
        width: col,
        height: plotHeight(f)
      },
      title(details)
    ))
  })
  parts.push(`<g class="bars">${bars.join("")}</g>`)
  if (data.contextWindow <= max) {
    const wy = y(data.contextWindow)
    parts.push(el("line", {
      class: "window",
      x1: f.left,
      x2: f.width - f.right,
      y1: wy,
      y2: wy,
      stroke: "#1f2328",
      "stroke-dasharray": "2 3"
    }))
    parts.push(
      el(
        "text",
        { class: "tick", x: f.width - f.right, y: wy - 4, "text-anchor": "end" },
        `window ${fmt(data.contextWindow)}`
      )
    )
  }
  parts.push(el("path", {
    class: "none-line",
    d: stepPath(f, requests.map((r) => r.none), max),
    fill: "none",
    stroke: CHART_COLORS.none,
    "stroke-width": 1.5,
    "stroke-dasharray": "6 3"
  }))
  parts.push(xAxis(f, requests, true))
  parts.push(`<g class="marks">${marks.join("")}</g>`)
  parts.push(`<g class="hits">${hits.join("")}</g>`)
  return el("svg", {
    id: "context-chart",
    width: f.width,
    height: f.height,
    role: "img",
    "aria-label": "tokens sent per request"
  }, parts.join(""))
}

/** The cumulative cost chart (`#cost-chart`) of the chosen policy and of no compaction, request by request. */
export const costChart = (data: ReportData): string => {
  const f: Frame = { width: 1200, height: 230, left: 66, right: 40, top: 14, bottom: 40 }
  let a = 0
  let b = 0
  const chosen = data.requests.map((r) => (a += r.dollars))
  const none = data.requests.map((r) => (b += r.noneDollars))
  const top = Math.max(0.01, a, b)
  const step = niceStep(top, 5)
  const max = Math.ceil(top / step) * step
  return el(
    "svg",
    { id: "cost-chart", width: f.width, height: f.height, role: "img", "aria-label": "cumulative cost" },
    [
      yAxis(f, max, step, (v) => `$${v.toFixed(step < 0.1 ? 2 : step < 1 ? 1 : 0)}`, "cumulative $"),
      el("path", {
        d: linePath(f, none, max),
        fill: "none",
        stroke: CHART_COLORS.none,
        "stroke-width": 2,
        "stroke-dasharray": "6 3"
      }),
      el("path", { d: linePath(f, chosen, max), fill: "none", stroke: CHART_COLORS.cacheRead, "stroke-width": 2.5 }),
      xAxis(f, data.requests, false)
    ].join("")
  )
}

/**
 * The upload chart (`#upload-chart`): the bytes each request uploads (bars; on a thread a `continue` holds only the new
 * messages) beside the bytes of the whole request (the line: what it uploads off threads), request by request.
 */
export const uploadChart = (data: ReportData): string => {
  const requests = data.requests
  const f: Frame = { width: 1200, height: 230, left: 66, right: 40, top: 14, bottom: 40 }
  const top = Math.max(1, ...requests.map((r) => r.fullBytes), ...requests.map((r) => r.uploadedBytes))
  const step = niceStep(top, 5)
  const max = Math.ceil(top / step) * step
  const col = plotWidth(f) / Math.max(1, requests.length)
  const bar = col >= 3 ? col * 0.78 : col
  const y = (v: number) => f.top + plotHeight(f) - (v / max) * plotHeight(f)
  const bars = requests.map((r, i) =>
    el("rect", {
      class: "s-uploaded",
      "data-request": r.n,
      x: f.left + i * col + (col - bar) / 2,
      y: y(r.uploadedBytes),
      width: bar,
      height: Math.max(0.5, (r.uploadedBytes / max) * plotHeight(f)),
      fill: CHART_COLORS.uploaded
    }, title(`request ${r.n}: uploaded ${shortBytes(r.uploadedBytes)} of ${shortBytes(r.fullBytes)}`))
  )
  return el(
    "svg",
    { id: "upload-chart", width: f.width, height: f.height, role: "img", "aria-label": "bytes uploaded per request" },
    [
      yAxis(f, max, step, shortBytes, "bytes per request"),
      `<g class="bars">${bars.join("")}</g>`,
      el("path", {
        class: "whole-line",
        d: stepPath(f, requests.map((r) => r.fullBytes), max),
        fill: "none",
        stroke: CHART_COLORS.whole,
        "stroke-width": 1.5,
        "stroke-dasharray": "6 3"
      }),
      xAxis(f, requests, false)
    ].join("")
  )
}
