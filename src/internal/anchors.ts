/**
 * The anchor extraction shared by `Retention` (what survives a compaction) and `Summary`'s manifest (what a summary
 * keeps by rule): the anchor models, the normalization, and the reading of a span's paths, commands, errors,
 * identifiers, instructions and plan. Pure. It imports neither of them: the caller says which user messages the
 * library wrote (`isLibraryMessage`), so no import circle runs through here.
 */
import type { ContentBlock, Message, ToolUseBlock } from "../Message.ts"
import { defaultToolClassifier, type ToolClassifier } from "../Tools.ts"
import { isHumanMessage } from "../Turns.ts"
import { headOf } from "./text.ts"
import { blocksOf, isToolResult, isToolUse } from "./blocks.ts"
import { MISSING_RESULT_TEXT } from "./repair.ts"
import { MAX_POINTER_LENGTH, parsePointer } from "./pointer.ts"

// ============================================================================
// Models
// ============================================================================

/** The kinds of anchor, in the order reports list them. @category models */
export type Category = "path" | "command" | "error" | "identifier" | "instruction" | "plan"

/** Every category, in report order. @category constants */
export const CATEGORIES: ReadonlyArray<Category> = ["path", "command", "error", "identifier", "instruction", "plan"]

/** How a command ended: its result's `is_error`, or `unanswered` when the span holds no result for it. @category models */
export type CommandOutcome = "ok" | "failed" | "unanswered"

/** What an identifier is (see `anchorsOf` for the rule of each). @category models */
export type IdentifierKind = "url" | "uuid" | "hash" | "digest" | "arn" | "path" | "version" | "code" | "id"

interface AnchorFields {
  /** The anchor's folded text: what is looked for in a view. */
  readonly text: string
  /** The index, in the span given to `anchorsOf`, of the last message it was found in. */
  readonly messageIndex: number
}

/** A file a tool call read or modified (by the `ToolClassifier`); `modified` when any call in the span wrote it. @category models */
export interface PathAnchor extends AnchorFields {
  /** The anchor's category. */
  readonly category: "path"
  /** `modified` when any call of the span wrote the file, else `read`. */
  readonly access: "read" | "modified"
}

/** A shell command's first line, with how its last run ended and how many of its runs failed. @category models */
export interface CommandAnchor extends AnchorFields {
  /** The anchor's category. */
  readonly category: "command"
  /** How its last run ended. */
  readonly outcome: CommandOutcome
  /** How many times the span ran it. */
  readonly runs: number
  /** How many of those runs failed. */
  readonly failures: number
}

/** The error line of a failed tool result. @category models */
export interface ErrorAnchor extends AnchorFields {
  /** The anchor's category. */
  readonly category: "error"
}

/**
 * A hash, UUID, URL, digest, ARN, path with a line number, version, error code or id written in the user's or the
 * assistant's text or printed by a tool (not a file read). @category models
 */
export interface IdentifierAnchor extends AnchorFields {
  /** The anchor's category. */
  readonly category: "identifier"
  /** What sort of identifier it is (a hash, a UUID, a URL, …). */
  readonly kind: IdentifierKind
  /** How many messages of the span hold it. */
  readonly mentions: number
}

/** The text of a message the user wrote (its head, up to `INSTRUCTION_MAX`). @category models */
export interface InstructionAnchor extends AnchorFields {
  /** The anchor's category. */
  readonly category: "instruction"
}

/** One item of the latest plan or todo list of the span. @category models */
export interface PlanAnchor extends AnchorFields {
  /** The anchor's category. */
  readonly category: "plan"
}

/** One anchor of a span, tagged by its `category`. @category models */
export type Anchor = PathAnchor | CommandAnchor | ErrorAnchor | IdentifierAnchor | InstructionAnchor | PlanAnchor

// ============================================================================
// Limits and normalization
// ============================================================================

/**
 * The longest anchor text kept, in code units, by category: a longer command line, error line, plan item or
 * instruction is cut to its head (no clip mark), and that head is what is looked for. Paths and identifiers are
 * never cut. @category constants
 */
export const ANCHOR_LIMITS = { command: 200, error: 200, plan: 200, instruction: 500 } as const

/** `text` folded: every run of white space one space, both ends trimmed. Idempotent. @category normalization */
export const normalize = (text: string): string => text.replace(/\s+/g, " ").trim()

export const clipped = (text: string, max: number): string => headOf(normalize(text), max).trimEnd()

/** True for the kinds of identifier compared in lower case (hashes, digests and UUIDs). */
export const caselessKind = (kind: IdentifierKind): boolean => kind === "hash" || kind === "uuid" || kind === "digest"

/** True for the identifiers compared in lower case (hashes, digests and UUIDs). */
export const caseless = (anchor: Anchor): boolean => anchor.category === "identifier" && caselessKind(anchor.kind)

/**
 * The key two anchors of one category are the same by: the folded text, in lower case for hashes, digests and UUIDs.
 * @category normalization
 */
export const anchorKey = (anchor: Anchor): string =>
  `${anchor.category}\u0000${caseless(anchor) ? anchor.text.toLowerCase() : anchor.text}`

// ============================================================================
// Reading messages
// ============================================================================

/** The text of a tool result's content: a string, or its text blocks (nested ones too) joined by newlines. */
export const resultText = (content: unknown): string => {
  if (typeof content === "string") return content
  if (!Array.isArray(content)) return ""
  const parts: Array<string> = []
  for (const block of content as ReadonlyArray<ContentBlock>) {
    if (block.type === "text") parts.push((block as { readonly text: string }).text)
  }
  return parts.join("\n")
}

/** The text blocks of a message joined by newlines (a string content is itself). */
export const textOf = (message: Message): string =>
  typeof message.content === "string"
    ? message.content
    : message.content.flatMap((b) => b.type === "text" ? [(b as { readonly text: string }).text] : []).join("\n")

/** The text editors' `command` is a sub-command (`view`, `create`), not a shell command. */
const EDITOR_TOOLS: ReadonlySet<string> = new Set(["str_replace_based_edit_tool", "str_replace_editor"])

/** The shell command of a tool call: a non-empty string `command` (or `cmd`) of any tool but a text editor. */
export const commandOf = (toolUse: ToolUseBlock): string | undefined => {
  if (EDITOR_TOOLS.has(toolUse.name)) return undefined
  const input = toolUse.input
  if (typeof input !== "object" || input === null) return undefined
  const fields = input as { readonly command?: unknown; readonly cmd?: unknown }
  const command = typeof fields.command === "string" ? fields.command : fields.cmd
  return typeof command === "string" && command.trim().length > 0 ? command : undefined
}

export const firstLine = (text: string): string => text.split("\n").find((line) => line.trim().length > 0) ?? ""

/** A line that names the error itself: git's `fatal:`, an `error:` prefix, a missing module, a panic. */
const ERROR_STATEMENT = /fatal:|^\s*(?:error|fatal)(?:\[[^\]]*\])?:|cannot find module|^\s*panic:/i

/** An error's name before its message: a word that is or ends in `Error` or `Exception`, then `:`. */
const ERROR_NAME = /\b(?:[A-Z][A-Za-z0-9]*)?(?:Error|Exception):/

/** A line that reads as an error, less precisely. */
const ERROR_WORDS =
  /error|fail|exception|not found|no such|cannot|can't|could not|couldn't|unable to|refused|timed out|denied|invalid|unexpected|abort|traceback|panic/i

/** A line that only reports how a command exited. */
const EXIT_LINE = /exit(?:ed)? (?:with )?code|exit status/i

/** The longest line an error line may be: a longer one is code or data (minified code, a dump), not a message. */
const ERROR_LINE_MAX = 400

/** A line of code or data rather than a message: over `ERROR_LINE_MAX`, or long and dense with `{`, `}` and `;`. */
const isCodeLine = (line: string): boolean =>
  line.length > ERROR_LINE_MAX || (line.length > 160 && (line.match(/[{};]/g)?.length ?? 0) > line.length / 20)

/**
 * The error string of a failed result, from its non-blank lines that are not code (`isCodeLine`): the first that
 * names the error (`ERROR_STATEMENT`, `ERROR_NAME`), else the first that reads as one (`ERROR_WORDS`) without
 * reporting an exit code, else the first that reports an exit code, else the last line (of all lines when every one is
 * code).
 */
export const errorLine = (text: string): string => {
  const all = text.split("\n").filter((line) => line.trim().length > 0)
  const lines = all.filter((line) => !isCodeLine(line))
  return lines.find((line) => ERROR_STATEMENT.test(line) || ERROR_NAME.test(line)) ??
    lines.find((line) => ERROR_WORDS.test(line) && !EXIT_LINE.test(line)) ??
    lines.find((line) => EXIT_LINE.test(line)) ?? lines.at(-1) ?? all.at(-1) ?? ""
}

/** The units of a quantity (`printedValues`): a number before one is a value a command printed. */
const UNITS_PATTERN = "ms|s|sec|µs|us|ns|min|h|B|KB|kB|MB|GB|TB|KiB|MiB|GiB|bytes|k|K|tokens|lines|px|%|x"

/** A line that prints a count of something (tests, files, errors, rows, changes). */
const COUNT_LINE =
  /\b\d[\d,]*(?:\.\d+)?\s*(?:passed|failed|skipped|pending|tests?|specs?|suites?|files?|errors?|warnings?|problems?|ok|lines?|rows?|records?|items?|packages?|changed|insertions?|deletions?)\b/i

/**
 * What every line holding a count or an identifier matches (and more): a URL's scheme, a run of seven hex digits (a
 * hash, a UUID), a digit, dot, digit (a version), a number before a unit (a quantity), `#` and a digit or a word,
 * `_` and a digit (an id), or a count. One test of it spares most lines the word-by-word reading.
 */
const VALUE_CANDIDATE = new RegExp(
  `https?://|[0-9a-f]{7}|\\d\\.\\d|\\d[\\s"'\`()[\\]{}<>;|*]*(?:${UNITS_PATTERN})|#\\d|[a-z]_[a-z0-9]*\\d|${COUNT_LINE.source}`,
  "i"
)

/** What every line holding a code, an ARN or a path with a line number matches (and more), case kept. */
const CODE_CANDIDATE = /\bE[A-Z0-9]{2,}|ERR_|arn:|\.[A-Za-z][A-Za-z0-9]*:\d|[A-Z]\d{3}/

/** The most value lines `printedValues` keeps, and the longest each may be, in code units. */
const PRINTED_LINES = 2
const PRINTED_LINE_MAX = 160

/** How far from its end `printedValues` reads an output, in code units: what a command printed last. */
const PRINTED_WINDOW = 4_000

/** The longest line `printedValues` reads: a longer one is code or a dump, not a value. */
const PRINTED_LINE_READ = 400

/**
 * What a successful tool output printed worth keeping: among the lines of its last `PRINTED_WINDOW` code units, the
 * last `PRINTED_LINES` (at most `PRINTED_LINE_READ` long, so no code or dump) that hold a count (`COUNT_LINE`: "Tests:
 * 42 passed"), an identifier (`identifiersOf`) or a number with a unit (`12ms`, `3.5 MB`), each folded and cut to `PRINTED_LINE_MAX`, in
 * order, joined by ` | `; empty when it printed none. The one rule for a command's values in a summary's manifest and
 * in the pointer of an offloaded output, so a value survives either way.
 */
export const printedValues = (text: string): string => {
  const from = Math.max(0, text.length - PRINTED_WINDOW)
  // a line cut by the window's start is not read
  const newline = from === 0 ? -1 : text.indexOf("\n", from)
  const start = from === 0 ? 0 : newline === -1 ? text.length : newline + 1
  const found: Array<string> = []
  let end = text.length
  while (end > start && found.length < PRINTED_LINES) {
    const at = text.lastIndexOf("\n", end - 1)
    const lineStart = at < start ? start : at + 1
    const line = text.slice(lineStart, end)
    end = at < start ? start : at
    if (line.length > PRINTED_LINE_READ || !(VALUE_CANDIDATE.test(line) || CODE_CANDIDATE.test(line))) continue
    if (!COUNT_LINE.test(line) && !holdsValue(line)) continue
    const value = clipped(line, PRINTED_LINE_MAX)
    if (value.length > 0) found.push(value)
  }
  return found.reverse().join(" | ")
}

/** The tools whose input is a todo list (`todos`, `plan` or `items`: strings, or objects with a text field). */
const TODO_TOOLS: ReadonlySet<string> = new Set(["todowrite", "todo_write", "todo", "write_todos", "update_plan"])

const itemText = (item: unknown): string | undefined => {
  if (typeof item === "string") return item
  if (typeof item !== "object" || item === null) return undefined
  const fields = item as Record<string, unknown>
  for (const key of ["content", "step", "text", "title", "task"]) {
    if (typeof fields[key] === "string") return fields[key]
  }
  return undefined
}

export const todoItems = (toolUse: ToolUseBlock): ReadonlyArray<string> | undefined => {
  if (!TODO_TOOLS.has(toolUse.name.toLowerCase())) return undefined
  const input = toolUse.input
  if (typeof input !== "object" || input === null) return undefined
  const fields = input as Record<string, unknown>
  const list = fields["todos"] ?? fields["plan"] ?? fields["items"]
  if (!Array.isArray(list)) return undefined
  return list.flatMap((item) => {
    const text = itemText(item)
    return text === undefined || text.trim().length === 0 ? [] : [text]
  })
}

const CHECKLIST_ITEM = /^\s*[-*] \[[ xX]\] (.+)$/

/** The items of a markdown checklist (`- [ ] …`, `- [x] …`) in an assistant's text, when it has at least two. */
export const checklistItems = (text: string): ReadonlyArray<string> | undefined => {
  const items = text.split("\n").flatMap((line) => {
    const match = CHECKLIST_ITEM.exec(line)
    return match === null || match[1]!.trim().length === 0 ? [] : [match[1]!]
  })
  return items.length >= 2 ? items : undefined
}

// ============================================================================
// Identifiers
// ============================================================================

/** Where words end: white space and the quotes, brackets and separators around identifiers in prose and code. */
const WORD_BREAK = /[\s"'`()[\]{}<>;|*]+/
/** What a word loses at its end: sentence punctuation. */
const TRAILING_PUNCTUATION = /[.,:!?]+$/

const URL = /^https?:\/\/./
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i
const HASH = /^[0-9a-f]{7,64}$/i
const DIGEST = /^(?:sha1|sha224|sha256|sha384|sha512|md5):[0-9a-f]{7,128}$/i
const ARN = /^arn:[a-z0-9-]+:[a-z0-9-]+:[a-z0-9-]*:[0-9]*:\S+$/
/**
 * A path with a line number at the start of a word (`src/a.ts:12`, `/srv/x.js:10:5`, grep's `a/b.py:7:text`): a
 * path holding a `/`, whose last segment has an extension that starts with a letter, then `:line` and maybe `:column`.
 */
const PATH_LINE =
  /^(?:~|\.{1,2})?(?:[\w@+-][\w.@+-]*)?(?:\/[\w@+-][\w.@+-]*)*\/[\w@+-][\w.@+-]*\.[A-Za-z][A-Za-z0-9]*:\d+(?::\d+)?(?=:|$)/
const VERSION = /^(?:v?\d+(?:\.\d+){2,}(?:[-+][0-9A-Za-z.-]+)?|v\d+\.\d+)$/
/** A code of Node or a package manager: `ERR_` and capitals, digits and underscores (`ERR_PNPM_OUTDATED_LOCKFILE`). */
const ERR_CODE = /^ERR_[A-Z0-9]+(?:_[A-Z0-9]+)*$/
/** A compiler's or linter's diagnostic code: one to four capitals and three to five digits (`TS2345`, `E0308`). */
const DIAGNOSTIC_CODE = /^[A-Z]{1,4}\d{3,5}$/
/** An `E` code (`ECONNREFUSED`): a word of this shape counts when it is one of `E_CODES`. */
const E_CODE = /^E[A-Z0-9]{2,}(?:_[A-Z0-9]+)*$/
/**
 * The `E` codes that are identifiers: the POSIX and Linux `errno` names, libuv's and getaddrinfo's, and npm's. A
 * capitalized word that merely starts with `E` (`ERROR`, `EXIT`) is not one.
 */
const E_CODES: ReadonlySet<string> = new Set(
  (
    "E2BIG EACCES EADDRINUSE EADDRNOTAVAIL EADV EAFNOSUPPORT EAGAIN EAI_ADDRFAMILY EAI_AGAIN EAI_BADFLAGS " +
    "EAI_BADHINTS EAI_CANCELED EAI_FAIL EAI_FAMILY EAI_MEMORY EAI_NODATA EAI_NONAME EAI_OVERFLOW EAI_PROTOCOL " +
    "EAI_SERVICE EAI_SOCKTYPE EAI_SYSTEM EALREADY EBADE EBADF EBADFD EBADMSG EBADR EBADRQC EBADSLT EBFONT EBUSY " +
    "ECANCELED ECHARSET ECHILD ECHRNG ECOMM ECONNABORTED ECONNREFUSED ECONNRESET EDEADLK EDEADLOCK EDESTADDRREQ EDOM " +
    "EDOTDOT EDQUOT EEXIST EFAULT EFBIG EFTYPE EHOSTDOWN EHOSTUNREACH EHWPOISON EIDRM EILSEQ EINPROGRESS EINTR " +
    "EINVAL EIO EISCONN EISDIR EISNAM EKEYEXPIRED EKEYREJECTED EKEYREVOKED EL2HLT EL2NSYNC EL3HLT EL3RST ELIBACC " +
    "ELIBBAD ELIBEXEC ELIBMAX ELIBSCN ELNRNG ELOOP EMEDIUMTYPE EMFILE EMLINK EMSGSIZE EMULTIHOP ENAMETOOLONG " +
    "ENAVAIL ENETDOWN ENETRESET ENETUNREACH ENFILE ENOANO ENOBUFS ENOCSI ENODATA ENODEV ENOENT ENOEXEC ENOKEY " +
    "ENOLCK ENOLINK ENOMEDIUM ENOMEM ENOMSG ENONET ENOPKG ENOPROTOOPT ENOSPC ENOSR ENOSTR ENOSYS ENOTBLK ENOTCONN " +
    "ENOTDIR ENOTEMPTY ENOTNAM ENOTRECOVERABLE ENOTSOCK ENOTSUP ENOTTY ENOTUNIQ ENXIO EOPNOTSUPP EOVERFLOW " +
    "EOWNERDEAD EPERM EPFNOSUPPORT EPIPE EPROTO EPROTONOSUPPORT EPROTOTYPE ERANGE EREMCHG EREMOTE EREMOTEIO " +
    "ERESTART ERFKILL EROFS ESHUTDOWN ESOCKTNOSUPPORT ESPIPE ESRCH ESRMNT ESTALE ESTRPIPE ETIME ETIMEDOUT " +
    "ETOOMANYREFS ETXTBSY EUCLEAN EUNATCH EUSERS EWOULDBLOCK EXDEV EXFULL " +
    "EBADENGINE EBADPLATFORM EINTEGRITY EJSONPARSE ELIFECYCLE ELOCKVERIFY ENEEDAUTH ENOAUDIT ENOLOCK ENOTARGET " +
    "ENOVERSIONS ENOWORKSPACES EOTP EPUBLISHCONFLICT ERESOLVE ETARGET EUNSUPPORTEDPROTOCOL EUSAGE"
  ).split(" ")
)
const ID = /^(?:#\d{1,7}|[A-Za-z]+_(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{6,})$/

const LETTERS = /^[A-Za-z]+$/
const NUMBER = /^\d+(?:,\d{3})*(?:\.\d+)?$/
const QUANTITY = new RegExp(`^\\d+(?:,\\d{3})*(?:\\.\\d+)?(?:${UNITS_PATTERN})$`)
const UNIT = new RegExp(`^(?:${UNITS_PATTERN})$`)

/** The identifier a word (or the part after its last `=`) is, with its kind; `undefined` when it is none. */
const identifierOfWord = (word: string): { readonly text: string; readonly kind: IdentifierKind } | undefined => {
  // a word of letters alone can only be an `E` code: every other kind needs a digit or a sign
  if (LETTERS.test(word)) return E_CODE.test(word) && E_CODES.has(word) ? { text: word, kind: "code" } : undefined
  if (URL.test(word)) return { text: word, kind: "url" }
  // `key=value`: the value
  const equals = word.lastIndexOf("=")
  const part = equals === -1 ? word : word.slice(equals + 1)
  if (part.length === 0) return undefined
  const at = part.lastIndexOf("@")
  const candidate = at > 0 && VERSION.test(part.slice(at + 1)) ? part.slice(at + 1) : part
  if (DIGEST.test(candidate)) return { text: candidate, kind: "digest" }
  if (ARN.test(candidate)) return { text: candidate, kind: "arn" }
  const path = PATH_LINE.exec(candidate)
  if (path !== null) return { text: path[0], kind: "path" }
  if (UUID.test(candidate)) return { text: candidate, kind: "uuid" }
  if (HASH.test(candidate) && /\d/.test(candidate) && /[a-f]/i.test(candidate)) return { text: candidate, kind: "hash" }
  if (VERSION.test(candidate)) return { text: candidate, kind: "version" }
  if (
    ERR_CODE.test(candidate) || DIAGNOSTIC_CODE.test(candidate) || (E_CODE.test(candidate) && E_CODES.has(candidate))
  ) return { text: candidate, kind: "code" }
  if (ID.test(candidate)) return { text: candidate, kind: "id" }
  return undefined
}

/**
 * The identifiers of a text, in order, each with its kind (the rules are `Retention.anchorsOf`'s). A number, with a
 * unit or without, is none. Each one's text occurs in `text` as it is.
 */
export const identifiersOf = (
  text: string
): ReadonlyArray<{ readonly text: string; readonly kind: IdentifierKind }> => {
  const found: Array<{ readonly text: string; readonly kind: IdentifierKind }> = []
  for (const raw of text.split(WORD_BREAK)) {
    const word = raw.replace(TRAILING_PUNCTUATION, "")
    if (word.length === 0) continue
    const id = identifierOfWord(word)
    if (id !== undefined) found.push(id)
  }
  return found
}

/** The identifiers last found in the text of a message or block, with that text. */
const identifiersFound = new WeakMap<
  object,
  { readonly text: string; readonly found: ReadonlyArray<{ readonly text: string; readonly kind: IdentifierKind }> }
>()

/**
 * `identifiersOf(text)`, where `text` is what `source` (a message or a block) holds: found once per source while its
 * text stays the same (a compaction reads the span's messages for its manifest and again for its retention).
 */
const identifiersIn = (
  text: string,
  source: object
): ReadonlyArray<{ readonly text: string; readonly kind: IdentifierKind }> => {
  const known = identifiersFound.get(source)
  if (known !== undefined && known.text === text) return known.found
  const found = identifiersOf(text)
  identifiersFound.set(source, { text, found })
  return found
}

/** True when `line` holds an identifier or a number with a unit (`12ms`, `3.5 MB`): a value a command printed. */
const holdsValue = (line: string): boolean => {
  const words = line.split(WORD_BREAK).map((w) => w.replace(TRAILING_PUNCTUATION, "")).filter((w) => w.length > 0)
  return words.some((word, i) =>
    identifierOfWord(word) !== undefined || QUANTITY.test(word) ||
    (NUMBER.test(word) && i + 1 < words.length && UNIT.test(words[i + 1]!))
  )
}

// ============================================================================
// Anchors of a span
// ============================================================================

/**
 * The anchors of `messages` by the rules `Retention.anchorsOf` documents (which is this with the library's own
 * messages recognized by `Summary`): user messages for which `isLibraryMessage` is true are not the user's.
 */
export const spanAnchors = (
  messages: ReadonlyArray<Message>,
  isLibraryMessage: (message: Message) => boolean,
  classifier: ToolClassifier = defaultToolClassifier
): ReadonlyArray<Anchor> => {
  const classify = classifier
  const found = new Map<string, Anchor>()
  const add = (anchor: Anchor): void => {
    if (anchor.text.length === 0) return
    const key = anchorKey(anchor)
    const earlier = found.get(key)
    // a key set again keeps its place: the order stays that of first appearance
    found.set(key, earlier === undefined ? anchor : merge(earlier, anchor))
  }
  /** An identifier's key → how many messages hold it, and the last message counted. */
  const mentions = new Map<string, { count: number; at: number }>()
  const addIdentifiers = (text: string, messageIndex: number, source: object): void => {
    for (const id of identifiersIn(text, source)) {
      const anchor: IdentifierAnchor = { category: "identifier", ...id, mentions: 1, messageIndex }
      add(anchor)
      const key = anchorKey(anchor)
      const seen = mentions.get(key)
      if (seen === undefined) mentions.set(key, { count: 1, at: messageIndex })
      else if (seen.at !== messageIndex) mentions.set(key, { count: seen.count + 1, at: messageIndex })
    }
  }
  // outcomes of tool calls by id, read first so a command's result may come after it; and the calls that read a file
  const outcomes = new Map<string, boolean>()
  const reads = new Set<string>()
  for (const message of messages) {
    // a system message may have no content (API-RULES 26)
    if (!Array.isArray(message.content)) continue
    for (const block of message.content) {
      if (isToolResult(block)) outcomes.set(block.tool_use_id, block.is_error === true)
      else if (isToolUse(block) && classify(block)._tag === "Read") reads.add(block.id)
    }
  }
  let plan: { readonly items: ReadonlyArray<string>; readonly messageIndex: number } | undefined
  messages.forEach((message, messageIndex) => {
    if (message.role === "system") return
    if (message.role === "user") {
      if (isHumanMessage(message) && !isLibraryMessage(message)) {
        const text = textOf(message)
        add({ category: "instruction", text: clipped(text, ANCHOR_LIMITS.instruction), messageIndex })
        addIdentifiers(text, messageIndex, message)
      }
      if (typeof message.content === "string") return
      for (const block of message.content) {
        if (!isToolResult(block)) continue
        const text = resultText(block.content)
        // what a tool printed, but not a file a read returned (its path stands for it) nor an offload pointer
        if (!reads.has(block.tool_use_id) && !isPointer(text)) addIdentifiers(text, messageIndex, block)
        if (block.is_error !== true || normalize(text) === MISSING_RESULT_TEXT) continue
        add({ category: "error", text: clipped(errorLine(text), ANCHOR_LIMITS.error), messageIndex })
      }
      return
    }
    for (const block of blocksOf(message)) {
      if (block.type === "text") {
        const text = (block as { readonly text: string }).text
        addIdentifiers(text, messageIndex, block)
        const items = checklistItems(text)
        if (items !== undefined) plan = { items, messageIndex }
        continue
      }
      if (!isToolUse(block)) continue
      const action = classify(block)
      if (action._tag !== "Other") {
        add({
          category: "path",
          text: normalize(action.path),
          access: action._tag === "Write" ? "modified" : "read",
          messageIndex
        })
      }
      const command = commandOf(block)
      if (command !== undefined) {
        const failed = outcomes.get(block.id)
        add({
          category: "command",
          text: clipped(firstLine(command), ANCHOR_LIMITS.command),
          outcome: failed === undefined ? "unanswered" : failed ? "failed" : "ok",
          runs: 1,
          failures: failed === true ? 1 : 0,
          messageIndex
        })
      }
      const items = todoItems(block)
      if (items !== undefined) plan = { items, messageIndex }
    }
  })
  if (plan !== undefined) {
    for (const item of plan.items) {
      add({ category: "plan", text: clipped(item, ANCHOR_LIMITS.plan), messageIndex: plan.messageIndex })
    }
  }
  const all = [...found.entries()].map(([key, anchor]) =>
    anchor.category === "identifier" ? { ...anchor, mentions: mentions.get(key)?.count ?? 1 } : anchor
  )
  return CATEGORIES.flatMap((category) => all.filter((a) => a.category === category))
}

/** True when `text` is an offload pointer (what an eviction left of a tool result). */
const isPointer = (text: string): boolean => text.length <= MAX_POINTER_LENGTH && parsePointer(text) !== undefined

/** A later sighting of the same anchor: its message, and for a command its run counted and its outcome the last. */
const merge = (earlier: Anchor, later: Anchor): Anchor => {
  if (earlier.category === "command" && later.category === "command") {
    return {
      ...later,
      runs: earlier.runs + later.runs,
      failures: earlier.failures + later.failures
    }
  }
  if (earlier.category === "path" && later.category === "path") {
    return { ...later, access: earlier.access === "modified" ? "modified" : later.access }
  }
  return later
}

/** The string leaves of a tool input, depth-first. */
const stringLeaves = (value: unknown, out: Array<string>, depth = 0): void => {
  if (typeof value === "string") out.push(value)
  else if (depth < 32 && typeof value === "object" && value !== null) {
    for (const child of Object.values(value)) stringLeaves(child, out, depth + 1)
  }
}

/** The text pieces of a block: what a model reads of it. */
const blockPieces = (block: ContentBlock, out: Array<string>): void => {
  const b = block as unknown as Record<string, unknown>
  switch (block.type) {
    case "text":
      out.push(b["text"] as string)
      return
    case "thinking":
      out.push(b["thinking"] as string)
      return
    case "compaction":
      if (typeof b["content"] === "string") out.push(b["content"])
      return
    case "tool_use":
    case "server_tool_use":
      stringLeaves(b["input"], out)
      return
    case "tool_result": {
      const content = b["content"]
      if (typeof content === "string") out.push(content)
      else if (Array.isArray(content)) { for (const inner of content) blockPieces(inner as ContentBlock, out) }
      return
    }
  }
}

/**
 * The view's text as `retention` searches it: each piece folded, joined by newlines (a folded anchor holds no newline,
 * so no match spans two pieces). The pieces are text and thinking blocks, a compaction block's content, the string
 * values of tool inputs and the text of tool results. Build it once to test many anchors (`presentIn`).
 * @category presence
 */
export interface ViewText {
  readonly folded: string
  readonly lower: string
}

/**
 * The searchable text of `messages` (see `ViewText`). @category presence
 */
export const viewText = (messages: ReadonlyArray<Message>): ViewText => {
  const folded: Array<string> = []
  for (const message of messages) {
    for (const block of blocksOf(message)) {
      const pieces: Array<string> = []
      blockPieces(block, pieces)
      const known = piecesFolded.get(block)
      if (known !== undefined && samePieces(known.pieces, pieces)) folded.push(...known.folded)
      else {
        const now = pieces.map(normalize)
        piecesFolded.set(block, { pieces, folded: now })
        folded.push(...now)
      }
    }
  }
  const text = folded.join("\n")
  return { folded: text, lower: text.toLowerCase() }
}

/**
 * The pieces of a block last folded for `viewText`, as they were and folded: a compaction searches its new view and
 * its kept tail, which holds the same blocks.
 */
const piecesFolded = new WeakMap<
  object,
  { readonly pieces: ReadonlyArray<string>; readonly folded: ReadonlyArray<string> }
>()

const samePieces = (a: ReadonlyArray<string>, b: ReadonlyArray<string>): boolean =>
  a.length === b.length && a.every((piece, i) => piece === b[i])

/**
 * True when `anchor` is present in `text`: its folded text, or its JSON-escaped form, is a substring. @category presence
 */
export const presentIn = (anchor: Anchor, text: ViewText): boolean => {
  const lower = caseless(anchor)
  const haystack = lower ? text.lower : text.folded
  const needle = lower ? anchor.text.toLowerCase() : anchor.text
  if (haystack.includes(needle)) return true
  const escaped = JSON.stringify(needle).slice(1, -1)
  return escaped !== needle && haystack.includes(escaped)
}
