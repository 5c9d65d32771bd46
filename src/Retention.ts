/**
 * Concept: retention, what of a span survives a compaction, measured without a model.
 *
 * What survives a compaction, measured without a model: the anchors of a span of messages (the exact strings an
 * agent needs to go on with its work: the files it read and changed, the commands it ran and how they ended, the
 * errors it met, the identifiers it was given, the user's own instructions and the latest plan), and the share of
 * them still present, by normalized exact match, in a view (the request sent after the span was summarized).
 *
 * **Normalization.** Every anchor and every piece of view text is compared *folded*: each run of white space
 * (JavaScript's `\s`, newlines included) becomes one space, and the ends are trimmed (`normalize`). Case is kept:
 * paths, commands, errors, URLs and instructions are compared case-sensitively (a path's case matters on most file
 * systems); only hashes, digests and UUIDs, whose hex digits mean the same in either case, are compared in lower
 * case. An anchor is present in a view when its folded text is a substring of one folded piece of the view's text, or
 * when its JSON-escaped form is (a summary that quotes paths as JSON strings, like the files appendix, still keeps
 * them).
 *
 * Pure: plain values in, plain values out.
 *
 * @since 0.1.0
 */
import {
  type Anchor,
  CATEGORIES,
  type Category,
  normalize,
  presentIn,
  spanAnchors,
  textOf,
  viewText
} from "./internal/anchors.ts"
import type { Message } from "./Message.ts"
import { filesOfMessage, summaryText } from "./Summary.ts"
import type { ToolClassifier } from "./Tools.ts"
import { LEADING_USER_TEXT } from "./internal/repair.ts"
import { type RecallSource, searchSources } from "./internal/recallSearch.ts"

export { type Anchor, CATEGORIES, type Category } from "./internal/anchors.ts"
/** The kinds of anchor, each with its category's fields. */
export type {
  CommandAnchor,
  ErrorAnchor,
  IdentifierAnchor,
  InstructionAnchor,
  PathAnchor,
  PlanAnchor
} from "./internal/anchors.ts"

// ============================================================================
// Models
// ============================================================================

/** How much of one category survived. `share` is `present / counted`, and 1 when nothing was counted. @category models */
export interface CategoryRetention {
  /** The anchor category measured: `path`, `command`, `error`, `identifier`, `instruction` or `plan`. */
  readonly category: Category
  /** The span's anchors of this category that are not in the tail: those the share is of. */
  readonly counted: number
  /** Of `counted`, those present in the view. */
  readonly present: number
  /** The span's anchors of this category still present in the kept tail, counted apart (not in `counted`). */
  readonly inTail: number
  /** Of `counted`, those missing from the view, in the order of `anchorsOf`. */
  readonly missing: ReadonlyArray<Anchor>
  /** `present / counted`, from 0 to 1; 1 when `counted` is 0. */
  readonly share: number
  /**
   * Of `missing`, those one `recall` search over what was removed finds (`RetentionOptions.removed`; 0 without it):
   * the anchor's text searched as `recall` searches it (see `retention`).
   */
  readonly recoverable: number
  /** Of `missing`, those no recall search for them finds: lost to the agent, in the order of `anchorsOf`. */
  readonly unrecoverable: ReadonlyArray<Anchor>
}

/** What `retention` measured: one record per category, every category present. @category models */
export interface Retention {
  /** The retention of each category, keyed by category. */
  readonly categories: { readonly [C in Category]: CategoryRetention }
}

// ============================================================================
// Anchors of a span
// ============================================================================

/** Options of `anchorsOf` and `measure`. Every option may be `undefined`, which means its default. @category models */
export interface AnchorOptions {
  /** Classifies tool calls into reads and writes; default `Tools.defaultToolClassifier`. */
  readonly classifier?: ToolClassifier | undefined
}

/**
 * The anchors of `messages`, deduplicated by `anchorKey` (one per category and folded text; each says the last
 * message it was found in), ordered by category (`CATEGORIES`) and then by first appearance:
 *
 * - **path**: the path of every tool call the classifier calls a read or a write.
 * - **command**: the first non-blank line (cut to `ANCHOR_LIMITS.command`) of a tool call's string `command` (or
 *   `cmd`), for any tool but the text editors, whose `command` is a sub-command. Its outcome is its last run's:
 *   `failed` when that run's `tool_result` has `is_error: true`, `ok` when it has a result, `unanswered` otherwise.
 * - **error**: for each tool result with `is_error: true`, among its non-blank lines that are not code (a line over
 *   400 characters, or over 160 with more `{`, `}` and `;` than one in 20 of its characters): the first that states
 *   the error (it holds `fatal:` or "cannot find module", or starts with `error:`, `fatal:` (an `error[E0308]:` too)
 *   or `panic:`, case aside; or it holds a word that is `Error` or `Exception`, or a capitalized word ending in one
 *   of them, followed by `:`); else the
 *   first that reads as one without reporting an exit code (it names an error, a failure, an exception, "not found",
 *   "no such", "cannot", "can't", "could not", "couldn't", "unable to", "refused", "timed out", "denied", "invalid",
 *   "unexpected", an abort, a traceback or a panic); else the first that reports an exit code ("exit code", "exited
 *   with code", "exit status"); else the last line (of all lines, when every one is code); cut to
 *   `ANCHOR_LIMITS.error`. The library's own result for an interrupted call (the text `Validate.repair` gives a missing result) is not an
 *   error of the session.
 * - **identifier**: in the text blocks of user-written messages and of assistant messages (not thinking, not tool
 *   input), and in the text of every tool result but those of calls the classifier calls a read (the path stands for
 *   a file's content) and offload pointers; cut into words at white space and `` "'`()[]{}<>;|* ``, each word
 *   without trailing `.,:!?`: a URL (`http://`, `https://`: the whole word); else the word, or the part after its
 *   last `=` (`request-id=…`), or the version after its last `@` (`name@1.2.3`), when it is a digest (`sha1:`,
 *   `sha224:`, `sha256:`, `sha384:`, `sha512:` or `md5:` and 7–128 hex digits), an ARN (`arn:partition:service:
 *   region:account:resource`), a path with a line number (a path holding a `/` whose last segment has an extension
 *   starting with a letter, then `:line` and maybe `:column`; only that much of a word like `a/b.py:7:text`), a UUID,
 *   a hash (7–64 hex digits with a digit and a letter), a version (`1.2.3`, `v1.2.3-rc.1`, `v1.2`), an error code
 *   (`ERR_` and capitals, digits and underscores; one to four capitals and three to five digits, like `TS2345`; or an
 *   `errno`, libuv, getaddrinfo or npm `E` code, like `ECONNREFUSED`) or an id (`#123`, or letters, `_` and six or
 *   more letters and digits with at least one of each, like `toolu_01AbC9`). A number is none, with a unit (`12ms`)
 *   or without. Each says how many messages of the span hold it (`mentions`).
 * - **instruction**: the text blocks of each message the user wrote (`Turns.isHumanMessage`), joined by newlines and
 *   cut to `ANCHOR_LIMITS.instruction`; not the library's summary and files messages, nor its leading user message.
 * - **plan**: the items of the latest todo list in the span: a `TodoWrite` / `todo_write` / `todo` / `write_todos` /
 *   `update_plan` call's `todos` (or `plan`, `items`), or an assistant text with a markdown checklist of two or more
 *   items. Each item, cut to `ANCHOR_LIMITS.plan`, is one anchor.
 * @category anchors
 */
export const anchorsOf = (messages: ReadonlyArray<Message>, options: AnchorOptions = {}): ReadonlyArray<Anchor> =>
  spanAnchors(messages, isLibraryMessage, options.classifier)

/** The summary, files and leading messages the library writes in the user's role. */
const isLibraryMessage = (message: Message): boolean =>
  summaryText(message) !== undefined || filesOfMessage(message) !== undefined ||
  normalize(textOf(message)) === LEADING_USER_TEXT

// ============================================================================
// Presence in a view
// ============================================================================

/** Options of `retention` and `measure`. @category models */
export interface RetentionOptions {
  /**
   * The kept tail (the view's messages that were not summarized): anchors present in it are counted apart
   * (`inTail`), since they survive by being kept, not by the summary. Absent: none is counted apart.
   */
  readonly tail?: ReadonlyArray<Message> | undefined
  /**
   * What was removed from the view so far, as `recall` searches it (its sources marked removed: the log's, or
   * `removedSources` of the removed messages): an anchor missing from the view is `recoverable` when one search finds
   * it there. Absent: none is.
   */
  readonly removed?: ReadonlyArray<RecallSource> | undefined
}

/**
 * The share of `anchors` present in `view`, per category: an anchor present in the tail is `inTail`; any other is
 * `counted`, and `present` when found in the view (see `presentIn`). Every category has a record, empty ones too.
 * A missing anchor is `recoverable` when one `recall` search over `options.removed` (`searchSources`, its matching
 * as it is) has a hit: its text as a plain query when it is one word (case aside, as `recall` matches), else as a
 * regular expression of its words with any white space between them; one written over several lines (an
 * instruction) by its first line as written, with a hit in a text that holds all of it (`recall` matches line by
 * line); or, failing that, its JSON-escaped form likewise (a tool call's input is stored as JSON).
 * @category presence
 */
export const retention = (
  anchors: ReadonlyArray<Anchor>,
  view: ReadonlyArray<Message>,
  options: RetentionOptions = {}
): Retention => {
  const text = viewText(view)
  const tail = options.tail === undefined || options.tail.length === 0 ? undefined : viewText(options.tail)
  const tallies = new Map<
    Category,
    { counted: number; present: number; inTail: number; missing: Array<Anchor>; unrecoverable: Array<Anchor> }
  >(
    CATEGORIES.map((c) => [c, { counted: 0, present: 0, inTail: 0, missing: [], unrecoverable: [] }])
  )
  const removed = options.removed ?? []
  for (const anchor of anchors) {
    const tally = tallies.get(anchor.category)!
    if (tail !== undefined && presentIn(anchor, tail)) tally.inTail++
    else {
      tally.counted++
      if (presentIn(anchor, text)) tally.present++
      else {
        tally.missing.push(anchor)
        if (!recoverable(anchor, removed)) tally.unrecoverable.push(anchor)
      }
    }
  }
  const categories = Object.fromEntries(CATEGORIES.map((category) => {
    const t = tallies.get(category)!
    const record: CategoryRetention = {
      category,
      counted: t.counted,
      present: t.present,
      inTail: t.inTail,
      missing: t.missing,
      share: t.counted === 0 ? 1 : t.present / t.counted,
      recoverable: t.missing.length - t.unrecoverable.length,
      unrecoverable: t.unrecoverable
    }
    return [category, record]
  })) as { readonly [C in Category]: CategoryRetention }
  return { categories }
}

/** True when one `recall` search over `removed` finds `anchor` (see `retention`). */
const recoverable = (anchor: Anchor, removed: ReadonlyArray<RecallSource>): boolean => {
  if (removed.length === 0) return false
  const escaped = JSON.stringify(anchor.text).slice(1, -1)
  return [anchor.text, ...(escaped === anchor.text ? [] : [escaped])].some((text) => {
    const words = text.split(" ")
    if (words.length === 1) return searchSources(removed, text).length > 0
    const query = wordsPattern(words)
    if (searchSources(removed, query, { regex: true }).length > 0) return true
    // written over several lines: the query is its first line, and a hit must be in a text that holds all of it
    const across = new RegExp(query, "u")
    return removed.some((source) => {
      const match = source.removed ? across.exec(source.text) : null
      if (match === null) return false
      const first = match[0].split("\n")[0]!.trim().split(/\s+/)
      return searchSources(removed, wordsPattern(first), { regex: true }).some((hit) => hit.ref === source.ref)
    })
  })
}

/** A regular expression source matching `words` with any white space between them. */
const wordsPattern = (words: ReadonlyArray<string>): string => words.map(escapeRegExp).join("\\s+")

const escapeRegExp = (text: string): string => text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")

/**
 * `retention(anchorsOf(span), view, options)`: what of a span survives in the view that replaced it, with the kept
 * tail's anchors counted apart.
 * @category presence
 */
export const measure = (
  span: ReadonlyArray<Message>,
  view: ReadonlyArray<Message>,
  options: AnchorOptions & RetentionOptions = {}
): Retention => retention(anchorsOf(span, options), view, options)
