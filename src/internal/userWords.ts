/**
 * The words of a user's message and the reference they give it: what a summary names a user's message it left out by
 * (`msg_` and 16 hex digits, a 64-bit digest of the words), and what `Recall.recall` finds that message by. The
 * reference is a function of the message alone, so the same message gets the same one in every view, every log and
 * every resume. Pure.
 *
 * @internal
 */
import type { Message } from "../Message.ts"
import { isText } from "./blocks.ts"
import { contentDigest } from "./textRef.ts"

/** The words of a message: a string content as it is, else its text blocks' texts joined by newlines. */
export const userWords = (message: Message): string =>
  typeof message.content === "string"
    ? message.content
    : message.content.flatMap((block) => isText(block) ? [block.text] : []).join("\n")

/** The prefix of a reference by words. */
const PREFIX = "msg_"

/** The reference of a user's message by its words (`userWords`): `msg_` and 16 hex digits. */
export const wordsRef = (message: Message): string => `${PREFIX}${contentDigest(userWords(message))}`

const WORDS_REF = /^msg_[0-9a-f]{16}$/

/** True when `ref` has the form of a reference by words. */
export const isWordsRef = (ref: string): boolean => WORDS_REF.test(ref)
