/**
 * The compaction's default floor on what a pass must free: shared by `Compact.compactContext` and the conversation's
 * count of what a compaction would free.
 *
 * @internal
 */

/**
 * Tokens a compaction must free at least, by default. Below it the pass is `Skipped` ("TooLittleFreed"), which is
 * what stops compact-again loops: a second pass with no new turns would free almost nothing. @category constants
 */
export const DEFAULT_MIN_FREED_TOKENS = 2_000
