/**
 * The reference of a text by its content: what a summary names when it shortens a text (the middle of a long user
 * message, a long status board), and what `recall` answers with that text whole. A function of the text alone, so the
 * summary needs no log to name it and a resumed session names it the same. Pure.
 *
 * @internal
 */
import { stringHashHalves } from "./stringHash.ts"

/** The prefix of every text reference. */
const PREFIX = "text-"

const TEXT_REF = /^text-[0-9a-f]{16}$/

/**
 * The two 32-bit halves of `stringHashHalves(text)` as 16 lowercase hex digits: the digest of every reference by
 * content (a text's here, a user's words' in `userWords`).
 */
export const contentDigest = (text: string): string => {
  const [high, low] = stringHashHalves(text)
  return hex(high) + hex(low)
}

const hex = (n: number) => n.toString(16).padStart(8, "0")

/** The reference of `text` exactly as it is (no trimming): `text-` and 16 hex digits. */
export const textRef = (text: string): string => `${PREFIX}${contentDigest(text)}`

/** True when `ref` has the form of a text reference. */
export const isTextRef = (ref: string): boolean => TEXT_REF.test(ref)
