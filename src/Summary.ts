/**
 * The summary message: what replaces a summarized prefix (`summaryMessage`, found again by `summaryText`), and the
 * deterministic file appendix that ends its text (build with `renderAppendix`, split with `splitAppendix`, merge
 * lists with `mergeFiles`). Pure; no module outside this one knows the format.
 *
 * @since 0.1.0
 */
import { type BuiltMessage, isText, type Message } from "./Message.ts"
import type { FilesTouched } from "./Tools.ts"

/**
 * The longest summary, in tokens: 8,192. It is the `max_tokens` a summarizer asks for by default, and the cap the
 * simulator puts on a simulated summary, so both count the same room for the summary.
 * @category constants
 */
export const DEFAULT_SUMMARY_MAX_TOKENS = 8192

// ============================================================================
// The summary message
// ============================================================================

/** The first line of every summary message; it is how a later compaction finds an earlier summary. @category constants */
export const SUMMARY_HEADER = "[Summary of the earlier conversation]"

const SUMMARY_PREAMBLE = "This message was written by the context compactor, not by the user. It summarizes the " +
  "earlier part of this conversation, which was removed to fit the context window. It is background for continuing " +
  "the work, not a new instruction: follow the most recent user messages below."

/**
 * The user-role message injected in place of a summarized prefix. It says plainly that it is a summary of earlier
 * conversation and not new instructions. It is assignable to the SDK's `MessageParam`.
 * @category constructors
 */
export const summaryMessage = (summaryText: string): BuiltMessage => ({
  role: "user",
  content: [{ type: "text", text: `${SUMMARY_HEADER}\n${SUMMARY_PREAMBLE}\n\n${summaryText}` }]
})

/**
 * The summary text of a message built by `summaryMessage` (appendix included), or `undefined` for any other message.
 * @category guards
 */
export const summaryText = (message: Message): string | undefined => {
  if (message.role !== "user") return undefined
  const first = typeof message.content === "string" ? message.content : message.content[0]
  const text = typeof first === "string" ? first : first !== undefined && isText(first) ? first.text : undefined
  if (text === undefined || !text.startsWith(`${SUMMARY_HEADER}\n`)) return undefined
  const body = text.slice(SUMMARY_HEADER.length + 1)
  return body.startsWith(`${SUMMARY_PREAMBLE}\n\n`) ? body.slice(SUMMARY_PREAMBLE.length + 2) : body
}

/**
 * The first line of the files message: the user message that follows a server compaction block (`filesMessage`).
 * @category constants
 */
export const FILES_HEADER = "[Files of the earlier conversation]"

/**
 * The user-role message that follows a server compaction block opening a view: the block's summary is the server's
 * and is sent back verbatim, so the deterministic file lists (`renderAppendix`) travel in this message instead, and a
 * later compaction carries them forward (`filesOfMessage`). Assignable to the SDK's `MessageParam`.
 * @category constructors
 */
export const filesMessage = (files: FilesTouched): BuiltMessage => ({
  role: "user",
  content: [{ type: "text", text: `${FILES_HEADER}\n${renderAppendix(files)}` }]
})

/**
 * The file lists of a message built by `filesMessage`, or `undefined` for any other message.
 * @category guards
 */
export const filesOfMessage = (message: Message): FilesTouched | undefined => {
  if (message.role !== "user" || typeof message.content === "string" || message.content.length !== 1) return undefined
  const first = message.content[0]!
  if (!isText(first) || !first.text.startsWith(`${FILES_HEADER}\n`)) return undefined
  return splitAppendix(first.text.slice(FILES_HEADER.length + 1)).files
}

// ============================================================================
// Deterministic appendix
// ============================================================================

const APPENDIX_OPEN = '<compaction-files version="1">'
const APPENDIX_CLOSE = "</compaction-files>"
const APPENDIX_INTRO = "Files touched so far (computed from the conversation by code, not written by the model):"

/** The most paths of each list an appendix keeps (the newest); the rest are counted. @category constants */
export const APPENDIX_MAX_FILES = 300

/** An empty `FilesTouched`. @category constructors */
export const noFiles: FilesTouched = { read: [], modified: [] }

/**
 * Merges an earlier summary's lists with the head's: order of first appearance, no duplicates, and a path modified in
 * either is listed under `modified` only. `mergeFiles(noFiles, x)` lists the same paths as `x`.
 * @category appendix
 */
export const mergeFiles = (earlier: FilesTouched, later: FilesTouched): FilesTouched => {
  const modified = new Set([...earlier.modified, ...later.modified])
  const read = new Set([...earlier.read, ...later.read].filter((path) => !modified.has(path)))
  return { read: [...read], modified: [...modified] }
}

/**
 * The deterministic appendix that ends a summary message: an intro line and a `<compaction-files version="1">` block
 * with one line per path, `read "<json string>"` or `modified "<json string>"`. Paths are JSON strings, so any path
 * (newlines, quotes, tags) fits on one line and `parseAppendix` gets it back exactly. At most `maxFiles` paths per
 * list are kept (the newest); the count of the others is written as `read-omitted N` / `modified-omitted N`.
 * @category appendix
 */
export const renderAppendix = (files: FilesTouched, maxFiles: number = APPENDIX_MAX_FILES): string => {
  const lines = [APPENDIX_INTRO, APPENDIX_OPEN]
  for (const kind of ["read", "modified"] as const) {
    const list = files[kind]
    const kept = list.slice(Math.max(0, list.length - Math.max(0, maxFiles)))
    if (kept.length < list.length) lines.push(`${kind}-omitted ${list.length - kept.length}`)
    for (const path of kept) lines.push(`${kind} ${JSON.stringify(path)}`)
  }
  lines.push(APPENDIX_CLOSE)
  return lines.join("\n")
}

const ENTRY = /^(read|modified) ("(?:[^"\\]|\\.)*")$/
const OMITTED = /^(read|modified)-omitted \d+$/

/**
 * Splits a summary text into its body and the lists of its appendix. Only an appendix at the very end counts (after
 * it, only whitespace), so a block the model imitated inside its own text is never read as the real one; when the end
 * is not a well-formed appendix, `files` is `undefined` and `body` is the whole text.
 * @category appendix
 */
export const splitAppendix = (text: string): { readonly body: string; readonly files: FilesTouched | undefined } => {
  const trimmed = text.trimEnd()
  if (!trimmed.endsWith(APPENDIX_CLOSE)) return { body: text, files: undefined }
  const open = trimmed.lastIndexOf(`\n${APPENDIX_OPEN}\n`)
  const start = open === -1 ? (trimmed.startsWith(`${APPENDIX_OPEN}\n`) ? 0 : -1) : open + 1
  if (start === -1) return { body: text, files: undefined }
  const inner = trimmed.slice(start + APPENDIX_OPEN.length + 1, trimmed.length - APPENDIX_CLOSE.length)
  const read: Array<string> = []
  const modified: Array<string> = []
  for (const line of inner.split("\n")) {
    if (line.length === 0 || OMITTED.test(line)) continue
    const match = ENTRY.exec(line)
    if (match === null) return { body: text, files: undefined }
    let path: unknown
    try {
      path = JSON.parse(match[2]!)
    } catch {
      return { body: text, files: undefined }
    }
    if (typeof path !== "string") return { body: text, files: undefined }
    ;(match[1] === "read" ? read : modified).push(path)
  }
  let body = trimmed.slice(0, start)
  if (body.endsWith(`${APPENDIX_INTRO}\n`)) body = body.slice(0, body.length - APPENDIX_INTRO.length - 1)
  return { body: body.trimEnd(), files: { read, modified } }
}

/** The file lists of the appendix that ends `summaryText`, or `undefined` when it has none. @category appendix */
export const parseAppendix = (summaryText: string): FilesTouched | undefined => splitAppendix(summaryText).files

/** `summaryText` without its trailing appendix (unchanged when it has none). @category appendix */
export const stripAppendix = (summaryText: string): string => splitAppendix(summaryText).body
