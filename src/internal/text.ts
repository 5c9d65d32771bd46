/**
 * Surrogate-safe text helpers: the one copy of clipping and of the surrogate checks that the renderer, the tool
 * classifier and the summarizers share. No clip here ever splits a surrogate pair.
 *
 * @internal
 */

/** True for the first half of a UTF-16 surrogate pair. */
export const isHighSurrogate = (code: number): boolean => code >= 0xd800 && code <= 0xdbff

/** True for the second half of a UTF-16 surrogate pair. */
export const isLowSurrogate = (code: number): boolean => code >= 0xdc00 && code <= 0xdfff

/** Lone surrogates (a half without its other half). */
export const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g

/** The first `n` code units of `s`, one fewer when that would end between the halves of a surrogate pair. */
export const headOf = (s: string, n: number): string => {
  if (s.length <= n) return s
  if (n <= 0) return ""
  const end = isHighSurrogate(s.charCodeAt(n - 1)) && isLowSurrogate(s.charCodeAt(n)) ? n - 1 : n
  return s.slice(0, end)
}

/** The last `n` code units of `s`, one fewer when that would start between the halves of a surrogate pair. */
export const tailOf = (s: string, n: number): string => {
  if (n <= 0) return ""
  if (s.length <= n) return s
  const start = s.length - n
  return s.slice(isLowSurrogate(s.charCodeAt(start)) && isHighSurrogate(s.charCodeAt(start - 1)) ? start + 1 : start)
}

/** What `clipEnd` appends to a clipped head. */
export const CLIP_MARK = "…"

/** What `clipEnd` keeps of `text`: `text` itself when it fits in `max` code units, else the head it marks. */
export const clipHead = (text: string, max: number): string =>
  text.length <= max ? text : headOf(text, Math.max(0, max - 1))

/** `text` when it fits in `max` code units, otherwise its head and `…`: at most `max` code units. */
export const clipEnd = (text: string, max: number): string =>
  text.length <= max ? text : clipHead(text, max) + CLIP_MARK

/** True for a character of JavaScript's white space (`\s`, what `trim` removes). */
const isSpace = (c: number): boolean =>
  c === 32 || (c >= 9 && c <= 13) ||
  (c >= 0xa0 &&
    (c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029 || c === 0x202f ||
      c === 0x205f || c === 0x3000 || c === 0xfeff))

/**
 * Where a fold starts, or one past it: white space other than a plain space, or two plain spaces. A plain space
 * before other white space starts a fold too; the match is one past it, and `oneLineHead` steps back. (An explicit
 * class, without the lookahead of `[^\S ]| (?=\s)`, is what the engine scans fastest.)
 */
const FOLD = /[\t-\r\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]| {2}/g

/**
 * The head of `text.slice(0, end)` on one line (every run of white space one space, trimmed) that decides its clip to
 * `max`: that line itself when it has at most `max` code units, else a prefix of it longer than `max`, found without
 * reading further. The runs to fold are found by a regular expression (native, so a line with none is scanned fast and
 * not copied) in a window that ends where the kept text would pass `max`; the rest is copied in slices between them.
 */
export const oneLineHead = (text: string, end: number, max: number): string => {
  const last = Math.min(end, text.length)
  let start = 0
  while (start < last && isSpace(text.charCodeAt(start))) start++
  let out = ""
  for (;;) {
    // text kept from `start` up to `reach` passes `max`: a fold is looked for up to there (and one more character,
    // the second of two spaces)
    const reach = start + max - out.length + 1
    const bound = reach + 1 < last ? reach + 1 : last
    FOLD.lastIndex = start
    if (!FOLD.test(bound < text.length ? text.slice(0, bound) : text)) {
      if (bound < last) return out + text.slice(start, reach)
      // nothing more to fold: the rest is kept, but for a plain space at the very end
      return out + text.slice(start, text.charCodeAt(last - 1) === 32 && last - 1 >= start ? last - 1 : last)
    }
    let at = FOLD.lastIndex - 1
    if (at > start && text.charCodeAt(at - 1) === 32) at--
    // what precedes `at` is kept as is, and more text follows it unless the run from `at` reaches the end
    if (out.length + (at - start) > max) return out + text.slice(start, at)
    let next = at + 1
    while (next < last && isSpace(text.charCodeAt(next))) next++
    // a run that reaches the end is trimmed (the character before `at` is not white space: a fold would start there)
    if (next >= last) return out + text.slice(start, at)
    out += text.slice(start, at) + " "
    start = next
    if (out.length > max) return out
  }
}

/**
 * `text` as one line (every run of white space one space, trimmed) of at most `max` code units, reading only the head
 * it keeps.
 */
export const clipLine = (text: string, max: number): string => clipEnd(oneLineHead(text, text.length, max), max)

/**
 * `text` cut to its head and tail around a `[… N chars cut …]` line when longer than `max` (half of `max` each side);
 * unchanged otherwise.
 */
export const clipMiddle = (text: string, max: number): string => {
  if (text.length <= max) return text
  const head = headOf(text, Math.ceil(max / 2))
  const tail = tailOf(text, Math.floor(max / 2))
  return `${head}\n[… ${text.length - head.length - tail.length} chars cut …]\n${tail}`
}
