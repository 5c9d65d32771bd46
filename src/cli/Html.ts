/**
 * `compaction inspect --html`: a self-contained HTML report.
 *
 * The page draws the session as a timeline: one `<div class="msg k-… f-…">` per message, in order, its width
 * proportional to the message's estimated tokens, its colour by kind (`k-prose`, `k-tool-call`, `k-tool-output`,
 * `k-thinking`, `k-image`, `k-other`, always at full strength so it matches the legend), a band above it for its fate
 * under the default policy (`f-hot`: kept verbatim, solid; `f-summarized`: before the cut, hatched), and `off` when
 * eviction would offload tool output in it (white stripes and a dashed outline, wherever the message is, the
 * summarized part included). Every `numberEvery(n)`-th message carries its number (`<span class="num">`). A
 * `<div class="cut">` marks the cut. Inline CSS only: no scripts, no links, no `url(...)`, so opening the page makes no network request. All
 * text is HTML-escaped, and void elements are self-closed, so the page also parses as XML.
 *
 * @since 0.1.0
 */
import { type Analysis, type Fate, groupViolations, KIND_LABELS, KINDS, type TimelineEntry } from "./Inspect.ts"

/** Escapes text for HTML content and double- or single-quoted attribute values. @category formatting */
export const escapeHtml = (text: string): string =>
  text.replace(
    /[&<>"']/g,
    (c) => c === "&" ? "&amp;" : c === "<" ? "&lt;" : c === ">" ? "&gt;" : c === '"' ? "&quot;" : "&#39;"
  )

const fmt = (n: number): string => n.toLocaleString("en-US")

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
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1f2328;background:#fff}
h1{font-size:20px;margin:0 0 4px}
h2{font-size:16px;margin:28px 0 8px}
.sub{color:#59636e;margin:0 0 16px}
.stats{display:flex;flex-wrap:wrap;gap:12px}
.stat{border:1px solid #d1d9e0;border-radius:6px;padding:8px 12px;min-width:140px}
.stat b{display:block;font-size:18px}
.bar{display:flex;height:22px;border-radius:4px;overflow:hidden;border:1px solid #d1d9e0;max-width:900px}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;margin:8px 0}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:-1px;margin-right:4px}
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
td,th{text-align:left;padding:3px 10px 3px 0;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}
.muted{color:#59636e}
`.trim()

const messageDiv = (entry: TimelineEntry, scale: number, numbered: boolean): string => {
  const width = Math.max(MIN_MESSAGE_PIXELS, Math.round(entry.tokens * scale))
  const offloaded = entry.offloadedTokens > 0
  const title = `#${entry.index} · ${entry.role} · ${fmt(entry.tokens)} tokens · ${KIND_LABELS[entry.kind]} · ` +
    `${FATE_LABELS[entry.fate]}${offloaded ? ` · eviction offloads ${fmt(entry.offloadedTokens)} tokens` : ""}` +
    (entry.preview.length > 0 ? ` — ${entry.preview}` : "")
  return `<div class="msg k-${entry.kind} f-${entry.fate}${offloaded ? " off" : ""} role-${
    entry.role === "user" ? "user" : "assistant"
  }" data-index="${entry.index}" data-tokens="${entry.tokens}" style="width:${width}px" ` +
    `title="${escapeHtml(title)}">${numbered ? `<span class="num">${entry.index}</span>` : ""}</div>`
}

/**
 * The HTML report of an analysis: a complete, self-contained document (no external resources, no scripts) with the
 * figures of `formatInspect`, a composition bar, and the timeline with one element per message and the cut marker.
 * @category formatting
 */
export const renderHtml = (analysis: Analysis): string => {
  const { report, timeline } = analysis
  const total = KINDS.reduce((a, k) => a + report.composition[k], 0)
  const scale = report.estimatedTokens > 0
    ? Math.min(MAX_PIXELS_PER_TOKEN, TIMELINE_PIXELS / report.estimatedTokens)
    : 0
  const cut = report.cut.cut
  const parts: Array<string> = []
  const push = (s: string) => parts.push(s)

  push("<!DOCTYPE html>")
  push('<html lang="en">')
  push("<head>")
  push('<meta charset="utf-8" />')
  push('<meta name="viewport" content="width=device-width, initial-scale=1" />')
  push(`<title>${escapeHtml(`compaction inspect: ${report.file}`)}</title>`)
  push(`<style>${CSS}</style>`)
  push("</head>")
  push("<body>")
  push(`<h1>${escapeHtml(report.file)}</h1>`)
  push(
    `<p class="sub">${escapeHtml(report.format)} · ${fmt(report.messages)} messages · ${fmt(report.turns)} turns</p>`
  )

  push('<div class="stats">')
  const stat = (label: string, value: string, note: string) =>
    push(
      `<div class="stat">${escapeHtml(label)}<b>${escapeHtml(value)}</b><span class="muted">${
        escapeHtml(note)
      }</span></div>`
    )
  stat("estimated tokens", fmt(report.estimatedTokens), "about 4 characters per token")
  const ctx = report.context
  stat(
    "system prompt",
    ctx.systemTokens === 0 ? "not in file" : fmt(ctx.systemTokens),
    ctx.systemTokens === 0 ? "the file holds no system prompt" : "estimated tokens, sent with every request"
  )
  stat(
    "tools",
    ctx.tools === 0 ? "not in file" : fmt(ctx.toolsTokens),
    ctx.tools === 0 ? "the file holds no tool definitions" : `${ctx.tools} definitions, estimated tokens`
  )
  if (report.provider !== null) {
    stat(
      "provider-reported",
      fmt(report.provider.contextTokens),
      `after message ${report.provider.messageIndex}, with system prompt and tools (messages alone: ${
        fmt(report.provider.estimatedTokens)
      } estimated)`
    )
  }
  stat(
    "summarized at the cut",
    fmt(report.cut.summarizedTokens),
    cut === 0 ? "nothing to compact" : `messages 0–${cut - 1}, ${report.cut.summarizedTurns} turns`
  )
  stat(
    "kept verbatim",
    fmt(report.cut.keptTokens),
    `${report.cut.keptMessages} messages, ${report.cut.keptTurns} turns`
  )
  stat(
    "eviction would free",
    fmt(report.eviction.tokensFreed),
    `${report.eviction.offloaded} tool results (${pct(report.eviction.tokensFreed, report.estimatedTokens)})`
  )
  stat("violations", String(report.violations.length), report.violations.length === 0 ? "valid" : "see below")
  push("</div>")
  if (report.providerNote !== undefined) {
    push(`<p class="muted">Not reporting provider usage: ${escapeHtml(report.providerNote)}.</p>`)
  }

  push("<h2>Composition</h2>")
  push('<div class="bar">')
  for (const k of KINDS) {
    const share = total > 0 ? (100 * report.composition[k]) / total : 0
    if (share <= 0) continue
    push(
      `<div class="k-${k}" style="width:${share.toFixed(3)}%" title="${
        escapeHtml(`${KIND_LABELS[k]}: ${fmt(report.composition[k])} tokens (${share.toFixed(1)}%)`)
      }"></div>`
    )
  }
  push("</div>")
  push('<div class="legend">')
  for (const k of KINDS) {
    push(
      `<span><span class="sw k-${k}"></span>${escapeHtml(KIND_LABELS[k])} ${pct(report.composition[k], total)}</span>`
    )
  }
  push("</div>")

  push("<h2>Timeline</h2>")
  push(
    '<p class="muted">One block per message, in order; width by estimated tokens, colour by kind; short blocks ' +
      "are user messages; the numbers are message indexes. The band above a block: solid when kept verbatim, " +
      "hatched when summarized at the cut. Striped with a dashed outline: tool output eviction would offload " +
      `(${fmt(report.eviction.offloaded)} tool results in ${timeline.filter((e) => e.offloadedTokens > 0).length} ` +
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
  if (report.supersededReads.length === 0) push('<p class="muted">none</p>')
  else {
    push("<table><tr><th>tokens</th><th>reads</th><th>path</th></tr>")
    for (const s of report.supersededReads.slice(0, 50)) {
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
    report.hotPaths.length === 0
      ? '<p class="muted">none</p>'
      : `<ul>${report.hotPaths.map((p) => `<li><code>${escapeHtml(p)}</code></li>`).join("")}</ul>`
  )

  push("<h2>Validation</h2>")
  push(
    report.violations.length === 0
      ? '<p class="muted">valid: no violations</p>'
      : `<ul>${groupViolations(report.violations).slice(0, 200).map((l) => `<li>${escapeHtml(l)}</li>`).join("")}</ul>`
  )
  push("</body>")
  push("</html>")
  return `${parts.join("\n")}\n`
}
