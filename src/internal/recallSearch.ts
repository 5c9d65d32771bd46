/**
 * The pure search of the recall tool (`internal/recall` is the rest): the sources a removed text is searched in, their
 * text, and the search `recall` answers a query with. Also what `Retention` measures "recoverable by one recall" with,
 * so it imports only the core's message model.
 *
 * @internal
 */
import type { ContentBlock, Message, ToolResultBlock } from "../Message.ts"
import { isCompaction, isServerToolUse, isText, isThinking, isToolResult, isToolUse } from "./blocks.ts"
import { headOf } from "./text.ts"

/** What a source is: a tool call's result, a message, or a summary a later compaction replaced. @category models */
export type RecallKind = "tool_result" | "message" | "summary"

/**
 * One text the log can give back by reference: where it is stored (`entryId`, and `block` for a tool result), its
 * text, and whether the current view still holds it as it was (`removed` false) or not.
 * @category models
 */
export interface RecallSource {
  readonly ref: string
  readonly kind: RecallKind
  /** The log entry that stored it (for a kept message, its compaction entry's `id#i`). */
  readonly entryId: string
  /** The index of the tool_result block in its message (tool results only). */
  readonly block?: number
  /** The `tool_use_id` of a tool result (its `ref`, or the part before `@` of a qualified one). */
  readonly toolUseId?: string
  /** A tool result in a kept message that copies one stored before: found by its qualified `ref` only, never searched. */
  readonly copy?: true
  readonly role?: "user" | "assistant" | "system"
  /** The tool whose call it answers (tool results only, when the call is in the log). */
  readonly tool?: string
  /**
   * A user's message with human content: the reference by its words (`msg_…`, `userWords`' `wordsRef`) a summary
   * names it by when it left the message out. Not part of an answer.
   */
  readonly words?: string
  /** The text `recall` returns: `recallText` of a tool result's content, `messageSource`'s of a message. */
  readonly text: string
  /** The lines (from 0) of `text` that hold a block as its JSON (`recallText`, `messageSource`): never searched. */
  readonly opaque?: ReadonlyArray<number>
  /** The current view no longer holds it as stored: summarized away or offloaded. */
  readonly removed: boolean
}

/**
 * The text of a tool result's content, from which the content comes back exactly: a string as it is, a single text
 * block as its text; any other list of blocks as each block under a header line (`[block 2 of 3: text, 120 chars]`,
 * `[block 3 of 3: image]`), separated by a newline: a text block's text as it is (its length in code units in its
 * header), any other block (an image, a document) as its JSON on one line.
 * @category text
 */
export const recallText = (content: ToolResultBlock["content"]): string => {
  if (content === undefined) return ""
  if (typeof content === "string") return content
  if (content.length === 1 && isText(content[0]!)) return content[0].text
  return content.map((block, i) => {
    const position = `block ${i + 1} of ${content.length}`
    return isText(block)
      ? `[${position}: text, ${block.text.length} chars]\n${block.text}`
      : `[${position}: ${block.type}]\n${JSON.stringify(block)}`
  }).join("\n")
}

/**
 * The lines (from 0) of `recallText(content)` that hold a block other than text as its JSON, or `undefined` when
 * there is none (what a search leaves out: an image's data is not text).
 */
export const opaqueLines = (content: ToolResultBlock["content"]): ReadonlyArray<number> | undefined => {
  if (content === undefined || typeof content === "string") return undefined
  if (content.length === 1 && isText(content[0]!)) return undefined
  const lines: Array<number> = []
  let line = 0
  for (const block of content) {
    // the header, then the body
    line += 1
    if (isText(block)) line += lineCount(block.text) + 1
    else lines.push(line++)
  }
  return lines.length === 0 ? undefined : lines
}

/**
 * A message block as text, and whether that text is the block's JSON (a block with no text of its own: an image, a
 * document, a server tool's result, a redacted thinking), which a search skips as it skips a tool result's.
 */
const blockText = (block: ContentBlock): { readonly text: string; readonly opaque: boolean } => {
  if (isText(block)) return { text: block.text, opaque: false }
  if (isToolUse(block) || isServerToolUse(block)) {
    return { text: `[${block.type} ${block.name} id=${block.id}] ${JSON.stringify(block.input)}`, opaque: false }
  }
  if (isToolResult(block)) {
    return { text: `[tool_result id=${block.tool_use_id}]\n${recallText(block.content)}`, opaque: false }
  }
  if (isThinking(block) && typeof block.thinking === "string") {
    return { text: `[thinking] ${block.thinking}`, opaque: false }
  }
  if (isCompaction(block) && typeof block.content === "string") {
    return { text: `[compaction] ${block.content}`, opaque: false }
  }
  return { text: `[${block.type}]\n${JSON.stringify(block)}`, opaque: true }
}

/**
 * The text of a message and the lines (from 0) of it that are a block's JSON (`opaque`, absent when none): a string
 * content as it is; blocks as their texts, separated by a blank line: a tool call (a server tool's too) as
 * `[tool_use name id=…] input`, a tool result under a `[tool_result id=…]` line (`recallText`'s forms), a thinking
 * block's or a server compaction's text after `[thinking]` or `[compaction]`, any other block (an image, a
 * document, a server tool's result) as its JSON on the line after `[type]`.
 * @category text
 */
export const messageSource = (
  message: Message
): { readonly text: string; readonly opaque?: ReadonlyArray<number> } => {
  if (typeof message.content === "string") return { text: message.content }
  const texts: Array<string> = []
  let opaque: Array<number> | undefined
  let line = 0
  for (const block of message.content) {
    const part = blockText(block)
    // the JSON is the line after the header; each part is followed by a blank line
    if (part.opaque) (opaque ??= []).push(line + 1)
    texts.push(part.text)
    line += lineCount(part.text) + 2
  }
  return opaque === undefined ? { text: texts.join("\n\n") } : { text: texts.join("\n\n"), opaque }
}

/**
 * The sources of messages that are all removed (the measure of `Retention` asks what one search finds in them): each
 * message (`ref` `removed#n`, `n` its index plus `from`) and each tool result in it (by its `tool_use_id`), with the
 * texts `recallSources` gives them: what `searchSources` searches, as it searches a log's removed sources. Pure.
 * @category sources
 */
export const removedSources = (messages: ReadonlyArray<Message>, from = 0): ReadonlyArray<RecallSource> =>
  messages.flatMap((message, i) => {
    const entryId = `removed#${from + i}`
    const own: RecallSource = {
      ref: entryId,
      kind: "message",
      entryId,
      role: message.role,
      ...messageSource(message),
      removed: true
    }
    if (typeof message.content === "string") return [own]
    const results = message.content.flatMap((block, index): ReadonlyArray<RecallSource> =>
      isToolResult(block)
        ? [{
          ref: block.tool_use_id,
          kind: "tool_result",
          entryId,
          block: index,
          toolUseId: block.tool_use_id,
          role: message.role,
          text: recallText(block.content),
          ...opaqueField(block.content),
          removed: true
        }]
        : []
    )
    return [own, ...results]
  })

/** The `opaque` field of a tool result's source: present only when its content holds a block other than text. */
export const opaqueField = (
  content: ToolResultBlock["content"]
): { readonly opaque?: ReadonlyArray<number> } => {
  const opaque = opaqueLines(content)
  return opaque === undefined ? {} : { opaque }
}

/** One search hit: the source's reference, the matching line and a few lines around it. @category models */
export interface RecallHit {
  readonly ref: string
  readonly kind: RecallKind
  readonly tool?: string
  /** The matching line's number in the source's text (from 1). */
  readonly line: number
  /** The lines around it (`context` before and after), the matching one included. */
  readonly excerpt: string
}

/** Lines of context each side of a hit, by default. @category constants */
export const DEFAULT_CONTEXT_LINES = 2

/** The longest line an excerpt shows, in code units (a longer one is clipped around nothing: its head). */
const MAX_EXCERPT_LINE = 400

/**
 * The code units of each line a regular expression is tried on: a longer line's head, which `$` does not match the end
 * of (a plain query reads whole lines). With
 * `riskyPattern` refusing the exponential patterns, this bounds a polynomial one's backtracking per line.
 * @category constants
 */
export const MAX_REGEX_LINE = 1_000

/** What follows a long line's head when a regular expression is tried on it: not a line end, so `$` fails there. */
const CUT = "\u0000"

/**
 * Why `pattern` (a regular expression's source) may backtrack catastrophically, or `undefined`: a repeated group
 * (`*`, `+`, `{n,}`, `{n,m}` with m > 1) whose body holds an unbounded quantifier (`*`, `+`, `{n,}`) or a
 * backreference, as in `(a+)+$` or `(\w*\s?)*x`, which the engine can take exponential time to fail on. A scan of the
 * source (escapes and character classes skipped), not a proof: it refuses the classic shape, and `MAX_REGEX_LINE`
 * bounds what is left. Pure.
 * @category search
 */
export const riskyPattern = (pattern: string): string | undefined => {
  /** Per open group: whether its body holds an unbounded quantifier or a backreference. */
  const open: Array<boolean> = []
  /** Whether the atom just closed (a group) held one, for the quantifier that may follow it. */
  let closed = false
  let i = 0
  const unbounded = (at: number): { readonly end: number; readonly repeats: boolean; readonly unbounded: boolean } => {
    const c = pattern[at]
    if (c === "*" || c === "+") return { end: at + 1, repeats: true, unbounded: true }
    if (c === "?") return { end: at + 1, repeats: false, unbounded: false }
    const brace = c === "{" ? /^\{(\d+)(,(\d*))?\}/.exec(pattern.slice(at)) : null
    if (brace === null) return { end: at, repeats: false, unbounded: false }
    const max = brace[2] === undefined ? Number(brace[1]) : brace[3] === "" ? Infinity : Number(brace[3])
    return { end: at + brace[0].length, repeats: max > 1, unbounded: max === Infinity }
  }
  const mark = () => {
    if (open.length > 0) open[open.length - 1] = true
  }
  while (i < pattern.length) {
    const c = pattern[i]!
    let wasGroup = false
    if (c === "\\") {
      if (/[1-9k]/.test(pattern[i + 1] ?? "")) mark()
      i += 2
    } else if (c === "[") {
      for (i++; i < pattern.length && pattern[i] !== "]"; i++) if (pattern[i] === "\\") i++
      i++
    } else if (c === "(") {
      open.push(false)
      i++
      continue
    } else if (c === ")") {
      closed = open.pop() ?? false
      wasGroup = true
      i++
    } else {
      i++
    }
    const q = unbounded(i)
    if (q.end === i) continue
    if (wasGroup && closed && q.repeats) {
      return `a repeated group holds a repeat of its own (like (a+)+), which can take exponential time: ` +
        "rewrite it without the nesting, or search plain text"
    }
    if (q.unbounded || (wasGroup && closed)) mark()
    i = q.end
    if (pattern[i] === "?") i++ // lazy
  }
  return undefined
}

/**
 * The hits of `query` in the removed sources, newest first (later entries first, the first match of each source
 * first): at most one hit per line, each with `context` lines either side. A plain query matches case-insensitively;
 * a regular expression as written (with the `u` flag). Pure.
 * @category search
 */
export const searchSources = (
  sources: ReadonlyArray<RecallSource>,
  query: string,
  options: { readonly regex?: boolean; readonly context?: number } = {}
): ReadonlyArray<RecallHit> => {
  const context = options.context ?? DEFAULT_CONTEXT_LINES
  const needle = query.toLowerCase()
  const pattern = options.regex === true ? new RegExp(query, "u") : undefined
  // a line that matches is a match of the whole text (with `^` and `$` at line ends): one scan rules a text out,
  // unless a line is longer than a regular expression is tried on (`MAX_REGEX_LINE`, its head only)
  const anywhere = options.regex === true ? new RegExp(query, "mu") : undefined
  const matches = (line: string) =>
    pattern === undefined
      ? line.toLowerCase().includes(needle)
      : pattern.test(line.length > MAX_REGEX_LINE ? headOf(line, MAX_REGEX_LINE) + CUT : line)
  const mayMatch = (text: string) =>
    anywhere === undefined
      ? text.toLowerCase().includes(needle)
      : longestLine(text) > MAX_REGEX_LINE || anywhere.test(text)
  const hits: Array<RecallHit> = []
  for (let s = sources.length - 1; s >= 0; s--) {
    const source = sources[s]!
    if (!source.removed || source.copy === true || !mayMatch(source.text)) continue
    // a message's text repeats its tool results: search each tool result once, in its own source (the message's
    // other blocks, a user's text beside a tool result, in the message)
    const skip = source.kind === "tool_result" ? undefined : ownResultLines(sources, s)
    const opaque = source.opaque === undefined ? undefined : new Set(source.opaque)
    const lines = source.text.split("\n")
    lines.forEach((line, i) => {
      if (skip?.has(i) === true || opaque?.has(i) === true || !matches(line)) return
      const excerpt = lines.slice(Math.max(0, i - context), i + context + 1).map((l) => headOf(l, MAX_EXCERPT_LINE))
      hits.push({
        ref: source.ref,
        kind: source.kind,
        ...(source.tool === undefined ? {} : { tool: source.tool }),
        line: i + 1,
        excerpt: excerpt.join("\n")
      })
    })
  }
  return hits
}

/**
 * The lines (from 0) of the message source at `index` that hold its own tool results (the tool result sources of its
 * entry that follow it, each as `messageSource` writes it: a `[tool_result id=…]` line, then its text).
 */
const ownResultLines = (sources: ReadonlyArray<RecallSource>, index: number): ReadonlySet<number> | undefined => {
  const message = sources[index]!
  let skip: Set<number> | undefined
  for (let r = index + 1; r < sources.length; r++) {
    const result = sources[r]!
    if (result.kind !== "tool_result" || result.entryId !== message.entryId) break
    const segment = `[tool_result id=${result.toolUseId ?? result.ref}]\n${result.text}`
    const at = message.text.indexOf(segment)
    if (at === -1) continue
    skip ??= new Set()
    const first = lineCount(message.text.slice(0, at))
    const last = first + lineCount(segment)
    for (let line = first; line <= last; line++) skip.add(line)
  }
  return skip
}

/** The length of the longest line of `text`, in code units. */
const longestLine = (text: string): number => {
  let longest = 0
  let from = 0
  for (let i = text.indexOf("\n"); i !== -1; i = text.indexOf("\n", from)) {
    longest = Math.max(longest, i - from)
    from = i + 1
  }
  return Math.max(longest, text.length - from)
}

const lineCount = (text: string): number => {
  let n = 0
  for (let i = text.indexOf("\n"); i !== -1; i = text.indexOf("\n", i + 1)) n++
  return n
}
