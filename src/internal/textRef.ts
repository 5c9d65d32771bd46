/**
 * The reference of a text by its content: what a summary names when it shortens a text (the middle of a long user
 * message, a long status board), and what `recall` answers with that text whole. A function of the text alone, so the
 * summary needs no log to name it and a resumed session names it the same. Pure.
 *
 * @internal
 */

/** The prefix of every text reference. */
const PREFIX = "text-"

const TEXT_REF = /^text-[0-9a-f]{16}$/

/**
 * Two 32-bit mixes of the UTF-16 code units of `text` (different seeds), as 16 lowercase hex digits: the digest of
 * every reference by content (a text's here, a user's words' in `userWords`).
 */
export const contentDigest = (text: string): string => {
  let h1 = 0xdeadbeef
  let h2 = 0x41c6ce57
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    h1 = Math.imul(h1 ^ c, 2654435761)
    h2 = Math.imul(h2 ^ c, 1597334677)
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909)
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909)
  const hex = (n: number) => (n >>> 0).toString(16).padStart(8, "0")
  return hex(h2) + hex(h1)
}

/** The reference of `text` exactly as it is (no trimming): `text-` and 16 hex digits. */
export const textRef = (text: string): string => `${PREFIX}${contentDigest(text)}`

/** True when `ref` has the form of a text reference. */
export const isTextRef = (ref: string): boolean => TEXT_REF.test(ref)
