/**
 * Resume from the log's tail: where it starts, how a store finds it from line prefixes, and the fold of it with its
 * fallback to a full read. The tail of a log is the entries from the first one whose message its last compaction
 * boundary keeps (or the boundary itself, when it keeps nothing) to the end: folding them from an empty view rebuilds
 * the full fold's view, entry ids, head and `seq`, and the boundary's view hash checks exactly that. When the kept
 * messages reach behind an earlier boundary, the tail starts where that boundary's does. Pure: the stores use it to
 * find their tail, `sessionOpen` to fold it.
 */
import * as Result from "effect/Result"
import { decodeLine, type Loaded, type LoadIssue, loadStored, type StoredEntry } from "../SessionEntry.ts"
import { SessionLogError } from "./sessionLogError.ts"
import { applyStored, LiveView, mayHaveMore, MORE_SUFFIX_CHARS, moreOfLine } from "./sessionEntry.ts"

/** How many characters of a line's start `isBoundaryLine` and `idOfLine` need at most (longer headers go unseen). */
export const PREFIX_CHARS = 512

const STRING = String.raw`"(?:[^"\\]|\\.)*"`
const ID_AT_START = new RegExp(String.raw`^\{"v":\d+,"id":(${STRING})`)
const BOUNDARY = new RegExp(
  String.raw`^\{"v":\d+,"id":${STRING},"parentId":(?:null|${STRING}),"timestamp":[-+.eE0-9]+,"type":"compaction",`
)

const TYPE_KEY = `,"type":"`
const COMPACTION_VALUE = `compaction",`

/**
 * The PostgreSQL regular expression of `isBoundaryLine` (the same pattern), for a store that marks boundary rows.
 */
export const BOUNDARY_SQL_PATTERN = BOUNDARY.source

/**
 * True when a line (or its first `PREFIX_CHARS` characters) starts as `SessionLog` writes a compaction entry. A hint
 * only: a line it accepts is decoded and checked before it is trusted, and one it misses (another key order, a huge
 * id) only makes the tail start earlier.
 */
export const isBoundaryLine = (prefix: string): boolean => {
  // the first `,"type":"` of a line is a key (a string's quotes are escaped): the header's, in a line `SessionLog`
  // wrote; a line whose first one names no compaction cannot match, and most lines (messages) end here
  const type = prefix.indexOf(TYPE_KEY)
  return type !== -1 && prefix.startsWith(COMPACTION_VALUE, type + TYPE_KEY.length) && BOUNDARY.test(prefix)
}

/** The entry id a line (or its prefix) starts with, without decoding the line; `undefined` when it has none. */
export const idOfLine = (prefix: string): string | undefined => {
  const match = ID_AT_START.exec(prefix)
  if (match === null) return undefined
  try {
    return JSON.parse(match[1]!) as string
  } catch {
    return undefined
  }
}

/**
 * The `seq` the tail of a log of `last` lines starts at, walking back from the end: `prefixAt(seq)` gives a line's
 * start (at least `PREFIX_CHARS` characters, or all of it), `lineAt(seq)` the whole line (read only for boundary
 * lines). 1 when there is no boundary, or when a boundary line does not decode (the full read then reports it). With
 * `first` (the first line the caller holds, such as the line a tail index names), the walk reads no line before it,
 * and a tail start at or after `first` comes only from a boundary line the walk read: when none starts the tail there
 * (the lines from `first` on hold no boundary, or its kept entries lie before `first`), the answer is 1, the tail
 * needs lines before `first`.
 */
export const tailStart = (
  last: number,
  prefixAt: (seq: number) => string,
  lineAt: (seq: number) => string,
  first = 1
): number => {
  let wanted = new Set<string>() // the ids of the view items the boundary found last keeps, not yet passed
  for (let seq = last; seq >= first; seq--) {
    const prefix = prefixAt(seq)
    if (isBoundaryLine(prefix)) {
      const kept = keptAnchors(lineAt(seq))
      if (kept === undefined) return 1
      if (kept.length === 0) return seq
      wanted = new Set(kept)
    } else if (wanted.size > 0) {
      const id = idOfLine(prefix)
      if (id !== undefined && wanted.delete(id) && wanted.size === 0) return seq
    }
  }
  return 1
}

/**
 * The `seq` the tail starts at, from the boundary lines alone (`boundaries`: the lines `isBoundaryLine` accepts, in
 * descending `seq`) and the `seq` of the entries they keep first (`seqOf`, by entry id): what a store with an index of
 * boundary rows asks for. The same answer as `tailStart` over every line.
 */
export const tailStartAt = (
  boundaries: ReadonlyArray<StoredEntry>,
  seqOf: ReadonlyMap<string, number>
): number => {
  for (let i = 0; i < boundaries.length; i++) {
    const { line, seq } = boundaries[i]!
    const kept = keptAnchors(line)
    if (kept === undefined) return 1
    if (kept.length === 0) return seq
    const after = boundaries[i + 1]?.seq ?? 0
    const at = kept.map((id) => seqOf.get(id))
    if (at.every((s) => s !== undefined && s < seq && s > after)) return Math.min(...(at as Array<number>))
  }
  return 1
}

/**
 * The ids of the view items a boundary line needs in the view it applies to (its first kept item, and the last
 * summarized one when it stores its kept messages): none when the tail starts at the boundary itself; `undefined`
 * when the tail must start at the first line (the line does not decode as a compaction, or it keeps messages of an
 * empty snapshot, which reach back to the start).
 */
export const keptAnchors = (line: string): ReadonlyArray<string> | undefined => {
  const decoded = decodeLine(line)
  if (Result.isFailure(decoded) || decoded.success.type !== "compaction") return undefined
  const entry = decoded.success
  const first = entry.firstKeptEntryId === null ? [] : [entry.firstKeptEntryId]
  if (entry.kept === undefined) return first
  return entry.kept.through === null ? undefined : [...first, entry.kept.through]
}

/**
 * The `seq` of the first line of the append that lines `first` to `last` end in when its later lines are missing (a
 * write cut short after whole lines: the last line, or one before it in the same append, names more entries than
 * follow it, `moreOfLine`), else `last + 1`. Only the last append can be unfinished (appends are written one after
 * another), so the walk goes back from `last` while a line's append reaches past it; at `first` when the unfinished
 * append holds every line from `first` on (it may start before `first`). `moreAt(seq)` is line `seq`'s `more`.
 */
export const unfinishedFrom = (last: number, moreAt: (seq: number) => number, first = 1): number => {
  let seq = last
  while (seq >= first && seq + moreAt(seq) > last) seq--
  return seq + 1
}

const NEWLINE = 0x0a
const decoder = new TextDecoder()

/**
 * The lines of a stretch of a JSONL file (`bytes`, whose first line is `seq` `first`; `seq` = line number) that end
 * whole appends, and the `seq` its tail starts at (`from`, by `tailStart` given `first`: 1 when the tail needs the
 * file's first line, or a line before the stretch). A torn last line, and the whole lines of an unfinished last
 * append (`unfinishedFrom`), follow them: a write cut short, never acknowledged, is not part of the log.
 */
export interface Region {
  readonly first: number
  /** Where each line of a whole append starts in `bytes`: `starts[i]` is line `first + i`. */
  readonly starts: ReadonlyArray<number>
  /** The bytes of the lines of whole appends (what a write cut short left follows them). */
  readonly completeBytes: number
  readonly from: number
  /**
   * The start of line `first + i` (at least `PREFIX_CHARS` characters, or all of it); the lines the walk to the tail
   * read are decoded once.
   */
  readonly prefix: (i: number) => string
}

/**
 * The lines of `bytes` (see `Region`) and where its tail starts; only boundary lines, and the lines of an unfinished
 * last append, are decoded in full (a line's end tells whether it may be one).
 */
export const regionOf = (bytes: Uint8Array, first = 1): Region => {
  const lineBytes = bytes.lastIndexOf(NEWLINE) + 1
  const starts: Array<number> = []
  for (let at = 0; at < lineBytes; at = bytes.indexOf(NEWLINE, at) + 1) starts.push(at)
  const lineEnd = (i: number) => i === starts.length - 1 ? lineBytes - 1 : starts[i + 1]! - 1
  // the whole lines of an unfinished last append go with the torn rest
  const moreAt = (seq: number) => {
    const i = seq - first
    const end = lineEnd(i)
    const tail = decoder.decode(bytes.subarray(Math.max(starts[i]!, end - MORE_SUFFIX_CHARS), end))
    return mayHaveMore(tail) ? moreOfLine(decoder.decode(bytes.subarray(starts[i]!, end))) : 0
  }
  const kept = unfinishedFrom(first + starts.length - 1, moreAt, first) - first
  const completeBytes = kept === starts.length ? lineBytes : starts[kept]!
  starts.length = kept
  const last = first + starts.length - 1
  const endOf = (seq: number) => seq === last ? completeBytes - 1 : starts[seq - first + 1]! - 1
  const lineAt = (seq: number) => decoder.decode(bytes.subarray(starts[seq - first], endOf(seq)))
  // the prefixes the walk decodes are kept for the caller (the lines of the tail); later ones are not
  const prefixes: Array<string | undefined> = []
  let walking = true
  const prefix = (i: number) => {
    const known = prefixes[i]
    if (known !== undefined) return known
    const start = starts[i]!
    const decoded = decoder.decode(bytes.subarray(start, Math.min(endOf(first + i), start + PREFIX_CHARS)))
    if (walking) prefixes[i] = decoded
    return decoded
  }
  const from = tailStart(last, (seq) => prefix(seq - first), lineAt, first)
  walking = false
  return { first, starts, completeBytes, from, prefix }
}

/**
 * The lines of a region from `seq` on, as stored entries; `textOf` decodes their bytes as UTF-8 (the store's decoder,
 * which may be faster than `TextDecoder` and gives the same text).
 */
export const regionLines = (
  bytes: Uint8Array,
  region: Region,
  seq: number,
  textOf: (bytes: Uint8Array) => string
): Array<StoredEntry> => {
  const entries: Array<StoredEntry> = []
  const at = seq - region.first
  if (at >= region.starts.length) return entries
  const text = textOf(bytes.subarray(region.starts[at], region.completeBytes - 1)).split("\n")
  text.forEach((line, i) => entries.push({ seq: seq + i, line }))
  return entries
}

/** The tail of stored entries read in full (`seq` 1, 2, … in order), by `tailStart`. */
export const tailOf = (stored: ReadonlyArray<StoredEntry>): ReadonlyArray<StoredEntry> => {
  if (stored.some((e, i) => e.seq !== i + 1)) return stored
  const at = (seq: number) => stored[seq - 1]!.line
  return stored.slice(tailStart(stored.length, at, at) - 1)
}

/**
 * Folds a tail (stored entries from some `seq` to the end), from an empty view after the parent its first entry
 * names, with every check of a full fold on what it reads. A tail that starts after the first line must hold the
 * compaction boundary its start comes from (whose view hash then checks the fold up to it): one that holds none (a
 * stale tail index over a log cut back before its last boundary) fails, and the caller reads the log in full.
 */
export const loadTail = (
  stored: ReadonlyArray<StoredEntry>,
  storeIssues: ReadonlyArray<LoadIssue> = []
): Result.Result<{ readonly loaded: Loaded; readonly live: LiveView }, SessionLogError> => {
  const first = stored[0]
  if (first === undefined || first.seq === 1) return loadStored(stored, {}, storeIssues)
  const live = new LiveView()
  const decoded = decodeLine(first.line)
  live.startAfter(Result.isSuccess(decoded) ? decoded.success.parentId : null, first.seq - 1)
  return Result.flatMap(
    applyStored(live, stored),
    ({ entries, issues }) =>
      entries.some((e) => e.type === "compaction")
        ? Result.succeed({ loaded: live.loaded([...storeIssues, ...issues], first.seq), live })
        : Result.fail(
          new SessionLogError({
            reason: "Corrupt",
            line: first.seq,
            detail: `the tail from line ${first.seq} holds no compaction boundary; it is not the log's tail`
          })
        )
  )
}
