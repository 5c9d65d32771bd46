/**
 * How `Offload.formatOffloadRef` writes a pointer, in two steps so an eviction can price one before writing it: a
 * draft holds the fields that do not depend on the reason, escaped once (`pointerDraft`); its length for a reason is
 * sums of lengths (`draftLength`), and its text is built only for a pointer that is taken (`draftText`). Before
 * any escape, `pointerLengthAtLeast` bounds the length from below by the fields' own lengths.
 * `formatOffloadRef(ref)` is `draftText(pointerDraft(ref), ref.reason)`.
 *
 * @internal
 */
import type { OffloadReason, OffloadRef } from "../Offload.ts"

/** The start of every pointer. */
export const PREFIX = "[offloaded "

const OUTPUT_HEAD = PREFIX + 'output tool="'
const READ_HEAD = PREFIX + 'read tool="'

/**
 * The text after a pointer's tokens field: `] ` and the fixed instruction, by kind and reason. The parser requires
 * it, so stray text never parses as a pointer.
 */
const READ_TAIL: Readonly<Record<OffloadReason, string>> = {
  superseded: "] A later read of this file is further down. Re-read the file to restore this output.",
  modified: "] The file was changed after this read. Re-read the file to see its current content.",
  stale: "] This file read was removed to save context. Re-read the file to restore it."
}
const OUTPUT_TAIL = "] This tool output was removed to save context. Make the same call again to see it."

/** The fields from the closing quote of `id` to the tokens value, by reason. */
const REASON_FIELD: Readonly<Record<OffloadReason, string>> = {
  superseded: '" reason=superseded tokens=',
  modified: '" reason=modified tokens=',
  stale: '" reason=stale tokens='
}

/** True when `JSON.stringify` may escape a character of `text`: a quote, backslash, control character or surrogate. */
const needsEscape = (text: string): boolean => {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c < 0x20 || c === 0x22 || c === 0x5c || (c >= 0xd800 && c <= 0xdfff)) return true
  }
  return false
}

/**
 * `JSON.stringify(text)` without its quotes: `text` itself when it needs no escape (the common case for names, ids
 * and paths, which a scan finds faster than `JSON.stringify` copies).
 */
export const escaped = (text: string): string => needsEscape(text) ? JSON.stringify(text).slice(1, -1) : text

/**
 * `escaped` for a text that often needs an escape (most shell commands hold a quote): one native pass, no scan
 * first. Equal lengths mean nothing was escaped, since every escape is longer than its character.
 */
const escapedOften = (text: string): string => {
  const quoted = JSON.stringify(text)
  return quoted.length === text.length + 2 ? text : quoted.slice(1, -1)
}

/** A pointer without its reason: the text up to the reason field, the tokens and images fields, and its kind. */
export interface PointerDraft {
  /** From the `[` to the last character of the id's value. */
  readonly head: string
  /** The tokens value and, when there are images, the images field. */
  readonly counts: string
  readonly read: boolean
}

const INPUT_FIELD = '" input="'
const PATH_FIELD = '" path="'
const LINES_FIELD = " lines="
const ID_FIELD = ' id="'
const IMAGES_FIELD = " images="

/**
 * The draft of `ref`'s pointer (its reason is not read): every string field escaped once. `path`: a read's path
 * already `escaped` (an eviction escapes each file's once).
 */
export const pointerDraft = (ref: OffloadRef, path?: string): PointerDraft => {
  const counts = ref.images > 0 ? `${ref.tokens}${IMAGES_FIELD}${ref.images}` : `${ref.tokens}`
  if (ref._tag === "Output") {
    const head = OUTPUT_HEAD + escaped(ref.tool) + INPUT_FIELD + escapedOften(ref.input) + '"' + ID_FIELD +
      escaped(ref.toolUseId)
    return { head, counts, read: false }
  }
  const lines = ref.range === undefined ? "" : `${LINES_FIELD}${ref.range.start}-${ref.range.end ?? ""}`
  const head = READ_HEAD + escaped(ref.tool) + PATH_FIELD + (path ?? escaped(ref.path)) + '"' + lines + ID_FIELD +
    escaped(ref.toolUseId)
  return { head, counts, read: true }
}

const digits = (n: number): number => `${n}`.length

/**
 * At most the length of `ref`'s pointer for `reason`, and exactly it when no string field needs an escape: the sum of
 * the fields' own lengths, with nothing escaped or built. A pointer this long already is no smaller than its payload.
 */
export const pointerLengthAtLeast = (ref: OffloadRef, reason: OffloadReason): number => {
  const counts = digits(ref.tokens) + (ref.images > 0 ? IMAGES_FIELD.length + digits(ref.images) : 0)
  const common = ref.tool.length + ID_FIELD.length + ref.toolUseId.length + REASON_FIELD[reason].length + counts
  if (ref._tag === "Output") {
    return OUTPUT_HEAD.length + INPUT_FIELD.length + ref.input.length + 1 + common + OUTPUT_TAIL.length
  }
  const range = ref.range
  const lines = range === undefined
    ? 0
    : LINES_FIELD.length + digits(range.start) + 1 + (range.end === undefined ? 0 : digits(range.end))
  return READ_HEAD.length + PATH_FIELD.length + ref.path.length + 1 + lines + common + READ_TAIL[reason].length
}

/** `draftText(draft, reason).length`, without building the text. */
export const draftLength = (draft: PointerDraft, reason: OffloadReason): number =>
  draft.head.length + REASON_FIELD[reason].length + draft.counts.length +
  (draft.read ? READ_TAIL[reason] : OUTPUT_TAIL).length

/** The pointer text of a draft for `reason`. */
export const draftText = (draft: PointerDraft, reason: OffloadReason): string =>
  draft.head + REASON_FIELD[reason] + draft.counts + (draft.read ? READ_TAIL[reason] : OUTPUT_TAIL)
