/**
 * The HTML report (`compaction inspect --html`, `compaction replay --html`): where a session's tokens and money went,
 * request by request.
 *
 * One self-contained page: inline CSS, inline SVG and one small inline script for the hover tooltip; a
 * Content-Security-Policy of `default-src 'none'`, no links, no `url(...)`, so opening it makes no network request.
 * From the top:
 * - the figures of `inspect`, `replay` and the chosen policy's cost (each figure carries `data-figure`, its path in
 *   the embedded data, and `data-format`);
 * - the context chart: one stacked bar per request (x: request number, with the message of its reply below; y:
 *   tokens), split into cache read, cache write and uncached input, under the chosen policy; a step line for the same
 *   request under no compaction; compactions as vertical lines and evictions as triangles where they happen; hover a
 *   request for its details (an SVG `<title>` and the tooltip);
 * - the cumulative cost of both; the policy comparison of `simulate`; the largest tool results;
 * - the composition bar and the block strip (one `<div class="msg k-… f-…">` per message, width by tokens, colour by
 *   kind at full strength, a band for its fate at the default cut, `off` with stripes wherever eviction would offload,
 *   the summarized part included; message numbers; the cut marker), then superseded reads, hot paths, validation.
 *
 * The data behind every figure is embedded as `<script type="application/json" id="report-data">` (`ReportData`), so
 * a test or a script can compare it with `inspect --json`, `replay --json` and `simulate --json`. All text is
 * HTML-escaped and every element is closed (void elements self-closed), so the page also parses as XML.
 *
 * @since 0.1.0
 */
import { type Fate, groupViolations, KIND_LABELS, KINDS, type TimelineEntry } from "./Inspect.ts"
import type { Report } from "./Report.ts"
import { CATEGORIES } from "../Retention.ts"
import type { RemovalTally } from "../internal/simulate/model.ts"
import { CHART_COLORS, contextChart, costChart, escapeHtml, shortBytes, uploadChart } from "./ReportChart.ts"

const fmt = (n: number): string => Math.round(n).toLocaleString("en-US")
const dollars = (n: number): string => `$${n.toFixed(2)}`

/** A compaction's removals in the retention table: counts, tokens, tools and the first references. */
const removedCell = (removed: RemovalTally): string =>
  `${fmt(removed.messages)} messages, ${fmt(removed.toolResults)} tool results${
    removed.tools.length === 0 ? "" : ` (${removed.tools.map((t) => `${escapeHtml(t.tool)} ${t.count}`).join(", ")})`
  }, ~${fmt(removed.tokens)} tokens${
    removed.refs.length === 0
      ? ""
      : `; refs ${removed.refs.map((r) => `<code>${escapeHtml(r)}</code>`).join(", ")}${
        removed.toolResults > removed.refs.length ? ", …" : ""
      }`
  }`

const pct = (part: number, whole: number): string => whole <= 0 ? "0%" : `${(100 * part / whole).toFixed(1)}%`

/** Total timeline width in pixels the messages share (they wrap into rows). @category constants */
export const TIMELINE_PIXELS = 14_000

/** Widest scale, so a short session is not stretched over the whole timeline. @category constants */
export const MAX_PIXELS_PER_TOKEN = 0.5

/** Narrowest message, in pixels, so even a tiny message can be seen and hovered. @category constants */
export const MIN_MESSAGE_PIXELS = 3

const FATE_LABELS: Readonly<Record<Fate, string>> = {
  hot: "kept verbatim",
  summarized: "summarized"
}

/** Numbers shown on the strip: about 40 of them, at a round step (1, 2, 5, 10, 20, 50, …). @category formatting */
export const numberEvery = (messages: number): number => {
  const raw = Math.max(1, Math.ceil(messages / 40))
  for (let scale = 1;; scale *= 10) {
    for (const step of [1, 2, 5]) if (step * scale >= raw) return step * scale
  }
}

const CSS = `
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;padding:0 24px;color:#1f2328;background:#fff;max-width:1260px}
h1{font-size:20px;margin:0 0 4px;word-break:break-all}
h2{font-size:16px;margin:28px 0 6px}
.sub{color:#59636e;margin:0 0 12px}
.lead{font-size:15px;margin:0 0 14px}
.stats{display:flex;flex-wrap:wrap;gap:10px}
.stat{border:1px solid #d1d9e0;border-radius:6px;padding:6px 12px;min-width:150px;max-width:260px}
.stat b{display:block;font-size:18px}
.stat span{font-size:12px}
.bar{display:flex;height:22px;border-radius:4px;overflow:hidden;border:1px solid #d1d9e0;max-width:900px}
.legend{display:flex;flex-wrap:wrap;gap:6px 18px;margin:6px 0}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:-1px;margin-right:5px}
.sw.line{height:0;border-top:2px dashed;border-radius:0;vertical-align:3px;width:18px}
.sw.vline{width:0;height:14px;border-left:2px dashed;border-radius:0;vertical-align:-2px;margin-left:4px;margin-right:8px}
.sw.tri{width:0;height:0;border-left:6px solid transparent;border-right:6px solid transparent;border-top:10px solid;border-radius:0;background:none}
.chart{position:relative;overflow-x:auto}
.chart svg{display:block;font:11px system-ui,-apple-system,"Segoe UI",sans-serif}
.chart .tick{fill:#59636e}
.chart .axis-label{fill:#1f2328;font-size:12px}
.chart .grid{stroke:#e6e9ed}
.chart .hit{fill:transparent;cursor:crosshair}
.chart .hit:hover{fill:rgba(31,35,40,.10)}
.tip{position:absolute;pointer-events:none;background:#1f2328;color:#fff;font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;padding:6px 9px;border-radius:5px;white-space:pre;z-index:2;box-shadow:0 2px 8px rgba(0,0,0,.25)}
.tip[hidden]{display:none}
.timeline{display:flex;flex-wrap:wrap;align-items:flex-end;gap:30px 1px;padding:20px 0 12px}
.msg{height:34px;border-radius:2px;max-width:100%;position:relative}
.msg::before{content:"";position:absolute;left:0;right:0;top:-7px;height:5px}
.num{position:absolute;left:0;top:36px;font-size:10px;color:#59636e;white-space:nowrap;border-left:1px solid #8c959f;padding-left:2px}
.k-prose{background:#3b82f6}
.k-tool-call{background:#06b6d4}
.k-tool-output{background:#f59e0b}
.k-thinking{background:#a855f7}
.k-image{background:#22c55e}
.k-other{background:#9ca3af}
.f-hot::before{background:#1f2328}
.f-summarized::before{background:repeating-linear-gradient(90deg,#8c959f 0 2px,transparent 2px 4px)}
.off{background-image:repeating-linear-gradient(135deg,rgba(255,255,255,.75) 0 3px,transparent 3px 6px);outline:1px dashed #1f2328}
.sw.band{height:5px;vertical-align:3px}
.role-user{height:26px}
.cut{width:4px;height:46px;background:#dc2626;position:relative;margin:0 3px}
.cut span{position:absolute;top:-18px;left:-12px;font-size:11px;color:#dc2626;white-space:nowrap;font-weight:600}
.msg:hover{outline:2px solid #111}
table{border-collapse:collapse}
td,th{text-align:left;padding:3px 12px 3px 0;vertical-align:top}
th{border-bottom:1px solid #d1d9e0;font-weight:600}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
tr.chosen td{background:#eef4fb;font-weight:600}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}
.muted{color:#59636e}
.note{color:#59636e;max-width:1000px;margin:6px 0}
`.trim()

/** The tooltip: the hovered mark's `data-tip`, placed beside the pointer. No network, no other state. */
const SCRIPT = `
(function () {
  var tip = document.getElementById("tip");
  document.querySelectorAll("[data-tip]").forEach(function (el) {
    var chart = el.closest(".chart");
    el.addEventListener("mousemove", function (ev) {
      var box = chart.getBoundingClientRect();
      tip.textContent = el.getAttribute("data-tip");
      tip.hidden = false;
      var x = ev.clientX - box.left + chart.scrollLeft + 14;
      var room = chart.scrollLeft + chart.clientWidth - tip.offsetWidth - 4;
      tip.style.left = Math.max(0, Math.min(x, room)) + "px";
      var y = ev.clientY - box.top + 14;
      if (Math.sign(y + tip.offsetHeight - chart.clientHeight) === 1) y = Math.max(0, y - tip.offsetHeight - 28);
      tip.style.top = y + "px";
    });
    el.addEventListener("mouseleave", function () { tip.hidden = true; });
  });
})();
`.trim()

const messageDiv = (entry: TimelineEntry, scale: number, numbered: boolean): string => {
  const width = Math.max(MIN_MESSAGE_PIXELS, Math.round(entry.tokens * scale))
  const offloaded = entry.offloadedTokens > 0
  const tip = `#${entry.index} · ${entry.role} · ${fmt(entry.tokens)} tokens · ${KIND_LABELS[entry.kind]} · ` +
    `${FATE_LABELS[entry.fate]}${offloaded ? ` · eviction offloads ${fmt(entry.offloadedTokens)} tokens` : ""}` +
    (entry.preview.length > 0 ? ` — ${entry.preview}` : "")
  return `<div class="msg k-${entry.kind} f-${entry.fate}${offloaded ? " off" : ""} role-${
    entry.role === "user" ? "user" : "assistant"
  }" data-index="${entry.index}" data-tokens="${entry.tokens}" style="width:${width}px" ` +
    `title="${escapeHtml(tip)}">${numbered ? `<span class="num">${entry.index}</span>` : ""}</div>`
}

/** The embedded data as JSON safe inside `<script>`: `<`, `>` and `&` are written as `\u003c`, … @category formatting */
export const embeddedJson = (value: unknown): string =>
  JSON.stringify(value).replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`)

/**
 * The HTML report: a complete, self-contained document (see the module doc). Every figure is drawn from `report.data`,
 * which the page also embeds.
 * @category formatting
 */
export const renderHtml = (report: Report): string => {
  const { data, timeline } = report
  const inspect = data.inspect
  const total = KINDS.reduce((a, k) => a + inspect.composition[k], 0)
  const scale = inspect.estimatedTokens > 0
    ? Math.min(MAX_PIXELS_PER_TOKEN, TIMELINE_PIXELS / inspect.estimatedTokens)
    : 0
  const cut = inspect.cut.cut
  const parts: Array<string> = []
  const push = (s: string) => parts.push(s)
  const figure = (path: string, format: "int" | "dollars", value: number) =>
    ` data-figure="${path}" data-format="${format}" data-value="${value}"`
  const fmtAs = (format: "int" | "dollars", value: number) => format === "int" ? fmt(value) : dollars(value)

  push("<!DOCTYPE html>")
  push('<html lang="en">')
  push("<head>")
  push('<meta charset="utf-8" />')
  push(
    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; " +
      "script-src 'unsafe-inline'\" />"
  )
  push('<meta name="viewport" content="width=device-width, initial-scale=1" />')
  push(`<title>${escapeHtml(`compaction report: ${inspect.file}`)}</title>`)
  push(`<style>${CSS}</style>`)
  push("</head>")
  push("<body>")
  push(`<h1>${escapeHtml(inspect.file)}</h1>`)
  push(
    `<p class="sub">${escapeHtml(inspect.format)} · ${fmt(inspect.messages)} messages · ${
      fmt(inspect.turns)
    } turns · ` +
      `${fmt(data.replay.requests)} requests</p>`
  )
  const saved = data.none.dollars - data.chosen.dollars
  push(
    `<p class="lead">Replayed request by request, the chosen policy sends ${fmt(data.chosen.tokensSent)} tokens for ` +
      `${dollars(data.chosen.dollars)}; with no compaction the same session sends ${fmt(data.none.tokensSent)} ` +
      `tokens for ${dollars(data.none.dollars)} (${saved >= 0 ? "saves" : "costs"} ${dollars(Math.abs(saved))}). ` +
      `${pct(data.chosen.cacheRead, data.chosen.tokensSent)} of what it sends is read from the cache.</p>`
  )

  push('<div class="stats">')
  const stat = (label: string, value: string, note: string, fig = "") =>
    push(
      `<div class="stat"${fig}>${escapeHtml(label)}<b>${escapeHtml(value)}</b><span class="muted">${
        escapeHtml(note)
      }</span></div>`
    )
  const numStat = (label: string, path: string, format: "int" | "dollars", value: number, note: string) =>
    stat(label, fmtAs(format, value), note, figure(path, format, value))
  numStat(
    "cost, chosen policy",
    "chosen.dollars",
    "dollars",
    data.chosen.dollars,
    `peak context ${fmt(data.chosen.peakContext)} tokens`
  )
  numStat(
    "cost, no compaction",
    "none.dollars",
    "dollars",
    data.none.dollars,
    `peak context ${fmt(data.none.peakContext)} tokens`
  )
  numStat("requests", "replay.requests", "int", data.replay.requests, "one per recorded reply")
  numStat(
    "compactions",
    "replay.compactions",
    "int",
    data.replay.compactions,
    "marked in the chart where they run"
  )
  numStat(
    "evictions",
    "replay.evictions",
    "int",
    data.replay.evictions,
    `${fmt(data.replay.offloadedResults)} tool results offloaded, marked in the chart`
  )
  push("</div>")
  push("<h2>Context per request</h2>")
  push('<div class="legend">')
  const swatch = (key: keyof typeof CHART_COLORS, label: string, kind = "") =>
    push(
      `<span><span class="sw${kind}" data-legend="${key}" style="${
        kind === "" ? "background" : kind === " tri" ? "border-top-color" : "border-color"
      }:${CHART_COLORS[key]}"></span>${escapeHtml(label)}</span>`
    )
  swatch("cacheRead", "cache read")
  swatch("cacheWrite", "cache write")
  swatch("input", "uncached input")
  swatch("none", "no compaction: tokens sent", " line")
  swatch("compaction", `compaction (${data.chosen.compactions})`, " vline")
  swatch("eviction", `eviction: tool results offloaded (${data.chosen.evictions})`, " tri")
  push("</div>")
  push(`<div class="chart">${contextChart(data)}<div id="tip" class="tip" hidden=""></div></div>`)
  push(
    `<p class="note">Bars: the chosen policy, <b>${escapeHtml(data.chosen.name)}</b>, replayed through ` +
      "Conversation's transitions by the replay engine <code>compaction replay</code> and <code>compaction simulate</code> " +
      "run (each reply recorded with the usage its own request is predicted to be billed), each request priced " +
      `by the prompt-cache model. The window is ${fmt(data.contextWindow)} tokens. Hover a request for its ` +
      "details.</p>"
  )

  push("<h2>Cost, cumulative</h2>")
  push('<div class="legend">')
  swatch("cacheRead", `chosen policy: ${dollars(data.requests.reduce((x, r) => x + r.dollars, 0))}`)
  swatch("none", `no compaction: ${dollars(data.requests.reduce((x, r) => x + r.noneDollars, 0))}`, " line")
  push("</div>")
  push(`<div class="chart">${costChart(data)}</div>`)
  push('<p class="note">Requests only; the totals above and below include the summarizer calls.</p>')

  push("<h2>Bytes uploaded per request</h2>")
  push('<div class="legend">')
  swatch("uploaded", `uploaded: ${shortBytes(data.chosen.uploadedBytes)}`)
  swatch("whole", `whole requests: ${shortBytes(data.chosen.fullBytes)}`, " line")
  push("</div>")
  push(`<div class="chart">${uploadChart(data)}</div>`)
  push(
    '<p class="note">' +
      (data.requests.some((r) => r.thread !== null)
        ? `On server-held threads: a request that continues its thread uploads only the messages after the reply it ` +
          `continues; each rewrite (an offload, a compaction) starts a new thread with the whole view ` +
          `(${fmt(data.chosen.threadRestarts)} restarts after the first request).`
        : "Off threads every request uploads the whole view (replay with <code>--threads</code> to compare).") +
      "</p>"
  )

  push("<h2>The session</h2>")
  push('<div class="stats">')
  numStat(
    "estimated tokens",
    "inspect.estimatedTokens",
    "int",
    inspect.estimatedTokens,
    "the whole session, about 4 characters per token"
  )
  const ctx = inspect.context
  /** The tokens of a part of the request the file may not hold: "not in file" when it holds none. */
  const partStat = (label: string, held: boolean, path: string, tokens: number, note: string, absent: string) =>
    held ? numStat(label, path, "int", tokens, note) : stat(label, "not in file", absent)
  partStat(
    "system prompt",
    ctx.systemTokens > 0,
    "inspect.context.systemTokens",
    ctx.systemTokens,
    "estimated tokens, sent with every request",
    "the file holds no system prompt"
  )
  partStat(
    "tools",
    ctx.tools > 0,
    "inspect.context.toolsTokens",
    ctx.toolsTokens,
    `${ctx.tools} definitions, estimated tokens`,
    "the file holds no tool definitions"
  )
  numStat(
    "system and tools, billed",
    "simulate.systemTokens",
    "int",
    data.simulate.systemTokens,
    "what every request carries besides the messages, as the simulator prices it"
  )
  if (inspect.provider !== null) {
    numStat(
      "provider-reported",
      "inspect.provider.contextTokens",
      "int",
      inspect.provider.contextTokens,
      `after message ${inspect.provider.messageIndex}, with system prompt and tools`
    )
  }
  numStat(
    "summarized at the cut",
    "inspect.cut.summarizedTokens",
    "int",
    inspect.cut.summarizedTokens,
    cut === 0 ? "nothing to compact" : `messages 0–${cut - 1}, ${inspect.cut.summarizedTurns} turns`
  )
  numStat(
    "eviction would free",
    "inspect.eviction.tokensFreed",
    "int",
    inspect.eviction.tokensFreed,
    `${inspect.eviction.offloaded} tool results now (${pct(inspect.eviction.tokensFreed, inspect.estimatedTokens)})`
  )
  stat("violations", String(inspect.violations.length), inspect.violations.length === 0 ? "valid" : "see below")
  push("</div>")
  if (inspect.providerNote !== undefined) {
    push(`<p class="muted">Not reporting provider usage: ${escapeHtml(inspect.providerNote)}.</p>`)
  }

  push("<h2>Policy comparison</h2>")
  push(
    `<p class="note">From <code>compaction simulate</code>: ${fmt(data.simulate.messages)} messages; system prompt ` +
      `and tools ${fmt(data.simulate.systemTokens)} tokens; ${data.simulate.tokenFactor.toFixed(2)} billed tokens ` +
      `per estimated token; models ${
        escapeHtml(data.simulate.models.length === 0 ? "unknown (Sonnet prices)" : data.simulate.models.join(", "))
      }.</p>`
  )
  push(
    '<table id="policies"><tr><th>policy</th><th class="n">$</th><th class="n">tokens sent</th>' +
      '<th class="n">cache read</th><th class="n">cache write</th><th class="n">uncached</th>' +
      '<th class="n">compactions</th><th class="n">retention</th><th class="n">peak context</th>' +
      '<th class="n">misses</th><th class="n">offloaded</th></tr>'
  )
  // the chosen policy's row: the first with its figures (two policies can price alike, e.g. append-only and in-place
  // rewrites on a session without thinking)
  const chosenRow = data.simulate.policies.findIndex((p) =>
    Math.abs(p.dollars - data.chosen.dollars) < 1e-9 && p.tokensSent === data.chosen.tokensSent
  )
  data.simulate.policies.forEach((p, i) => {
    const cell = (
      key:
        | "dollars"
        | "tokensSent"
        | "cacheRead"
        | "cacheWrite"
        | "inputTokens"
        | "compactions"
        | "peakContext"
        | "tokensOffloaded",
      format: "int" | "dollars" = "int"
    ) => `<td class="n"${figure(`simulate.policies.${i}.${key}`, format, p[key])}>${fmtAs(format, p[key])}</td>`
    const misses = p.misses.policy + p.misses.ttl + p.misses.external
    const same = i === chosenRow
    push(
      `<tr${same ? ' class="chosen"' : ""}><td>${escapeHtml(p.name)}${same ? " (the chosen policy)" : ""}</td>` +
        cell("dollars", "dollars") + cell("tokensSent") + cell("cacheRead") + cell("cacheWrite") +
        cell("inputTokens") + cell("compactions") +
        `<td class="n">${p.retention === null ? "n/a" : p.retention.toFixed(2)}</td>` + cell("peakContext") +
        `<td class="n">${misses}</td>` + cell("tokensOffloaded") + "</tr>"
    )
  })
  push("</table>")

  push("<h2>Retention per compaction</h2>")
  const kept = data.replay.retention
  if (kept.length === 0) push('<p class="muted">no compaction</p>')
  else {
    push(
      '<p class="note">Of the anchors of the span each compaction removed (paths, commands, errors, identifiers, ' +
        "instructions, plan items; <code>compaction retention</code>), the share present in the next request, as " +
        "present / counted; anchors still in the kept tail are not counted. <em>Recoverable</em>: of the anchors " +
        "absent from that request, those one <code>recall</code> search over what was removed so far finds. " +
        "<em>Removed</em>: the messages and tool results the compaction took out, and the first references " +
        "<code>recall</code> gives them back by.</p>"
    )
    push(
      `<table id="retention"><tr><th class="n">compaction</th><th class="n">request</th>${
        CATEGORIES.map((c) => `<th class="n">${c}</th>`).join("")
      }<th class="n">total</th><th class="n">recoverable</th><th>removed</th></tr>`
    )
    const share = (t: { readonly counted: number; readonly present: number; readonly share: number }) =>
      `<td class="n">${t.counted === 0 ? "n/a" : `${t.share.toFixed(2)} (${t.present}/${t.counted})`}</td>`
    for (const row of kept) {
      push(
        `<tr><td class="n">${row.compaction}</td><td class="n">${row.request}</td>${
          CATEGORIES.map((c) => share(row.categories[c])).join("")
        }${share(row.total)}<td class="n">${
          row.total.recoverable === undefined ? "n/a" : `${row.total.recoverable}`
        }</td><td class="removed">${row.removed === undefined ? "" : removedCell(row.removed)}</td></tr>`
      )
    }
    push("</table>")
  }

  push("<h2>Cache diagnostics</h2>")
  const { disagreements, predictedMisses } = data.diagnostics
  push(
    `<p id="diagnostics" class="note">The misses <code>Conversation</code>'s <code>diagnostics</code> option predicts ` +
      `(API-RULES 33), checked against this replay's cache model: ` +
      `<span${figure("diagnostics.predictedMisses", "int", predictedMisses)}>${fmt(predictedMisses)}</span> ` +
      `requests predicted to miss; <span${figure("diagnostics.disagreements.length", "int", disagreements.length)}>${
        fmt(disagreements.length)
      }</span> disagree${disagreements.length === 0 ? "" : ` (requests ${disagreements.join(", ")})`}.</p>`
  )

  push("<h2>Largest tool results</h2>")
  if (data.largestToolResults.length === 0) push('<p class="muted">none</p>')
  else {
    push(
      '<table id="largest"><tr><th class="n">tokens</th><th class="n">message</th><th>tool</th><th>on</th>' +
        "<th>chosen policy</th></tr>"
    )
    data.largestToolResults.forEach((t, i) => {
      push(
        `<tr><td class="n"${figure(`largestToolResults.${i}.tokens`, "int", t.tokens)}>${fmt(t.tokens)}</td>` +
          `<td class="n">${t.message}</td><td><code>${escapeHtml(t.tool)}</code></td><td><code>${
            escapeHtml(t.target)
          }</code></td><td>${t.offloadedAt === null ? "kept" : `offloaded before request ${t.offloadedAt}`}</td></tr>`
      )
    })
    push("</table>")
  }

  push("<h2>Composition</h2>")
  push('<div class="bar">')
  for (const k of KINDS) {
    const share = total > 0 ? (100 * inspect.composition[k]) / total : 0
    if (share <= 0) continue
    push(
      `<div class="k-${k}" style="width:${share.toFixed(3)}%" title="${
        escapeHtml(`${KIND_LABELS[k]}: ${fmt(inspect.composition[k])} tokens (${share.toFixed(1)}%)`)
      }"></div>`
    )
  }
  push("</div>")
  push('<div class="legend">')
  for (const k of KINDS) {
    push(
      `<span><span class="sw k-${k}"></span>${escapeHtml(KIND_LABELS[k])} ${pct(inspect.composition[k], total)}</span>`
    )
  }
  push("</div>")

  push("<h2>Timeline: one block per message</h2>")
  push(
    '<p class="note">The detail view, in order; width by estimated tokens, colour by kind; short blocks are user ' +
      "messages; the numbers are message indexes. The band above a block: solid when kept verbatim, hatched when " +
      "summarized at the default cut. Striped with a dashed outline: tool output eviction would offload now " +
      `(${fmt(inspect.eviction.offloaded)} tool results in ${timeline.filter((e) => e.offloadedTokens > 0).length} ` +
      "messages, in the summarized part too). Hover a block for its details.</p>"
  )
  push('<div class="legend">')
  push('<span><span class="sw band" style="background:#1f2328"></span>kept verbatim</span>')
  push(
    '<span><span class="sw band" style="background:repeating-linear-gradient(90deg,#8c959f 0 2px,transparent 2px 4px)">' +
      "</span>summarized</span>"
  )
  push('<span><span class="sw k-tool-output off"></span>offloaded by eviction</span>')
  push('<span><span class="sw" style="background:#dc2626"></span>cut</span>')
  push("</div>")
  const every = numberEvery(timeline.length)
  push('<div class="timeline">')
  for (const entry of timeline) {
    if (entry.index === cut && cut > 0) {
      push(
        `<div class="cut" title="${
          escapeHtml(`cut: messages before #${cut} are summarized, #${cut} onward are kept`)
        }"><span>cut</span></div>`
      )
    }
    push(messageDiv(entry, scale, entry.index % every === 0))
  }
  push("</div>")

  push("<h2>Superseded reads</h2>")
  if (inspect.supersededReads.length === 0) push('<p class="muted">none</p>')
  else {
    push("<table><tr><th>tokens</th><th>reads</th><th>path</th></tr>")
    for (const s of inspect.supersededReads.slice(0, 50)) {
      push(
        `<tr><td class="n">${fmt(s.tokens)}</td><td class="n">${s.reads}</td><td><code>${
          escapeHtml(s.path)
        }</code></td></tr>`
      )
    }
    push("</table>")
  }

  push("<h2>Hot paths</h2>")
  push(
    inspect.hotPaths.length === 0
      ? '<p class="muted">none</p>'
      : `<ul>${inspect.hotPaths.map((p) => `<li><code>${escapeHtml(p)}</code></li>`).join("")}</ul>`
  )

  push("<h2>Validation</h2>")
  push(
    inspect.violations.length === 0
      ? '<p class="muted">valid: no violations</p>'
      : `<ul>${groupViolations(inspect.violations).slice(0, 200).map((l) => `<li>${escapeHtml(l)}</li>`).join("")}</ul>`
  )
  push(`<script type="application/json" id="report-data">${embeddedJson(data)}</script>`)
  push(`<script>${SCRIPT}</script>`)
  push("</body>")
  push("</html>")
  return `${parts.join("\n")}\n`
}
