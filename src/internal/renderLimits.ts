/**
 * The transcript's fixed bounds and escaping: the longest clip and omission markers `Render.render` writes, and the
 * reserved tags it neutralizes in content (the summarizer's prompt neutralizes them the same way).
 *
 * @internal
 */

/**
 * Upper bound of a clip marker line (`[… 812 chars cut, 14 lines …]`). @category constants
 */
export const CLIP_MARKER_MAX = 64

/**
 * Upper bound of the omission marker written when `maxChars` is reached. @category constants
 */
export const OMISSION_MARKER_MAX = 96

/**
 * The tags the summarizer wraps session content in; `render` neutralises them in content. @category constants
 */
export const RESERVED_TAGS: ReadonlyArray<string> = [
  "transcript",
  "previous_summary",
  "instructions",
  "compaction-files"
]

/** A reserved tag opening or closing, in any case and spacing. */
export const TAG_PATTERN: RegExp = new RegExp(`<(\\s*/?\\s*)(${RESERVED_TAGS.join("|")})(?![\\w-])`, "gi")

/**
 * Neutralises the reserved wrapper tags (`<transcript>`, `</instructions>`, …) in `text` by writing their `<` as
 * `&lt;`, so the text cannot open or close a section of the summarization request. Other text is unchanged.
 * @category formatting
 */
export const neutralizeTags = (text: string): string => text.replace(TAG_PATTERN, "&lt;$1$2")
