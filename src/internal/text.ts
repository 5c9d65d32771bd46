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

/** `text` when it fits in `max` code units, otherwise its head and `…`: at most `max` code units. */
export const clipEnd = (text: string, max: number): string =>
  text.length <= max ? text : `${headOf(text, Math.max(0, max - 1))}…`

/** True for a character of JavaScript's white space (`\s`, what `trim` removes). */
const isSpace = (c: number): boolean =>
  c === 32 || (c >= 9 && c <= 13) ||
  (c >= 0xa0 &&
    (c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029 || c === 0x202f ||
      c === 0x205f || c === 0x3000 || c === 0xfeff))

/**
 * The head of `text.slice(0, end)` on one line (every run of white space one space, trimmed) that decides its clip to `max`: that line itself when it has at most `max`
 * code units, else a prefix of it longer than `max`, found without reading further. One pass over the characters it
 * keeps; runs of white space other than one plain space are the only cuts, so a line without any is not copied.
 */
export const oneLineHead = (text: string, end: number, max: number): string => {
  const last = Math.min(end, text.length)
  let i = 0
  while (i < last && isSpace(text.charCodeAt(i))) i++
  let out = ""
  let start = i
  while (i < last) {
    const c = text.charCodeAt(i)
    if (!isSpace(c)) {
      // more text follows what is kept, so it is a prefix of the line
      if (out.length + (i - start) > max) return out + text.slice(start, i)
      i++
      continue
    }
    let j = i + 1
    while (j < last && isSpace(text.charCodeAt(j))) j++
    if (j === last) return out + text.slice(start, i)
    if (c !== 32 || j > i + 1) {
      out += text.slice(start, i) + " "
      start = j
    }
    i = j
  }
  return out + text.slice(start, last)
}

/** `text` as one line of at most `max` code units (`oneLine`, then `clipEnd`), reading only the head it keeps. */
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
