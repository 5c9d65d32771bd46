/**
 * Concept: eviction, deciding which tool results to offload and offloading them.
 *
 * Eviction decisions: which tool_result payloads to offload, and `evictStaleToolResults`, which offloads them. The
 * pointer that replaces a payload (its format, parser and `isOffloaded`) lives in `Offload`.
 *
 * Tool output is most of a coding agent's context, and most of it is stale: a file read that was read again later, a
 * test run from ten turns ago. `evictStaleToolResults` replaces the payload of such tool_result blocks with a short,
 * typed pointer back to its source (`OffloadRef`). It never removes a block, so every tool_use keeps its tool_result.
 *
 * Order of decisions, for each tool_result whose tool_use is known:
 * 1. a read covered by a later successful read of the same file is **superseded**: offloaded, even when recent;
 * 2. a read followed by a successful write or edit of the same file is **modified**: offloaded, even when recent
 *    (unless it is a pinned path's latest read);
 * 3. of the rest, the newest `keepRecent` stay verbatim; errors, a pinned path's latest read, and results whose
 *    pointer would not be smaller than the payload stay too; everything else is **stale** and offloaded.
 *
 * An error stays unless a later read or write superseded it: a failed read followed by a successful read of the file
 * (1) or a successful write of it (2) goes, since what it failed to show is out of date anyway.
 *
 * "Later" only ever looks forward from a read, so the decision survives the prefix being cut away. Only the API view
 * is read and rewritten (what `ApiView.apiView` returns): what lies before the last compaction block with content is
 * dropped by the API, so rewriting it would free nothing and still change the request's prefix.
 *
 * @since 0.1.0
 */
import { cachePrices } from "./internal/cacheTtl.ts"
import { evictCold } from "./internal/coldEviction.ts"
import { type DecideOptions, keepOf } from "./internal/evictionRules.ts"
import type { Message } from "./Message.ts"
import type * as Offload from "./Offload.ts"
import type { ToolClassifier } from "./Tools.ts"
import { defaultToolClassifier } from "./Tools.ts"

// ============================================================================
// The pointer format, at home in `Offload`
// ============================================================================

// ============================================================================
// Eviction
// ============================================================================

/**
 * The recommended `keepRecent`: the newest 10 live tool results stay verbatim. It matches the observation window of
 * the published masking study, and on the corpus keepRecent 3, 5 and 10 free almost the same tokens (superseded reads
 * dominate), so the larger working set costs little. @category constants
 */
export const DEFAULT_KEEP_RECENT = 10

/**
 * A fixed `minSavings` threshold, in estimated tokens, for callers that want one instead of the rent-or-buy default.
 * Each eviction rewrites the prompt prefix, so the provider re-writes its cache (1.25× input) instead of reading it
 * (0.1×). With `minSavings` 0 the pi sessions break the cache about every other request; from 2,000 evictions are
 * batched. Rent-or-buy (what `evictStaleToolResults` does when `minSavings` is absent) weighs the reads already paid
 * instead of a fixed size, and costs less on the corpus (COMPACTION.md, "What a session costs").
 * @category constants
 */
export const FIXED_MIN_SAVINGS = 2_000

/** Options of `evictStaleToolResults`. @category models */
export interface EvictOptions {
  /**
   * A hot path (see `HotPaths`): its latest live read survives the `keepRecent` cutoff and a later write. Its
   * superseded duplicates still go, since that is deduplication, not thrash.
   */
  readonly pinned?: (path: string) => boolean
  /**
   * Fewest estimated tokens worth an eviction, as a fixed threshold (e.g. `FIXED_MIN_SAVINGS`); absent, the rent-or-buy
   * rule decides. When the eviction would free fewer, nothing changes and
   * the input array itself is returned, so the provider's prompt cache stays valid.
   */
  readonly minSavings?: number | undefined
  /** Which tool reads or writes what (default `defaultToolClassifier`). */
  readonly classifier?: ToolClassifier | undefined
  /** The provider's cache is known to have expired: everything is rewritten anyway, so offload at once. */
  readonly cacheCold?: boolean | undefined
  /** Cache prices the rent-or-buy rule weighs; default the 5-minute cache's (a read 0.1, a write 1.25 of an input token). */
  readonly prices?: { readonly cacheRead: number; readonly cacheWrite: number } | undefined
  /**
   * The estimated tokens of the thinking blocks a rewrite from message `message` on would newly make the API drop
   * (they are bound to the prefix it changes); the rent-or-buy rule counts them as thought again.
   * Absent: none (a caller without thinking, or one that does not track binding).
   */
  readonly droppedThinking?: ((message: number) => number) | undefined
  /**
   * The caller sends on a server-held thread: what restarting it costs, in uncached input tokens (the whole view
   * uploaded again, the first request's latency). The rent-or-buy rule adds it to the rewrite's price.
   * Absent: no thread (nothing beyond the cache is rewritten).
   */
  readonly restartCost?: number | undefined
  /**
   * The caller gives the model the `recall` tool (`Recall.recallTool`): an output's pointer (and a modified read's)
   * then says to call it with the pointer's id, which returns the removed output exactly. Default: not offered.
   */
  readonly recall?: boolean | undefined
  /**
   * An output's pointer keeps what the output printed worth keeping: its last lines holding a count or an identifier
   * ("Tests: 42 passed", a version, a hash, an id), by the rule a summary's manifest keeps a command's values by, so
   * such a value survives the offload (and a later summary keeps it). It reads the end of each output it offloads,
   * which costs more than the rest of the offload: a `Conversation` keeps them (`OffloadOptions.keepPrinted`).
   * Default: not kept.
   */
  readonly keepPrinted?: boolean | undefined
}

/** What `evictStaleToolResults` returns. @category models */
export interface EvictResult<M extends Message> {
  /** The conversation with offloaded payloads; the input array itself when nothing changed. */
  readonly messages: Array<M>
  /** The offloaded blocks, in conversation order. */
  readonly offloaded: ReadonlyArray<Offload.Offloaded>
  /** `estimateTokens(input) - estimateTokens(messages)`, exactly. */
  readonly tokensFreed: number
}

/**
 * Offloads the payload of old tool_result blocks, replacing it with a typed pointer (`formatOffloadRef`).
 *
 * Guarantees:
 * - no block is added or removed, and every tool_use/tool_result id pair is unchanged; only `content` changes;
 * - superseded and modified reads go first; of the rest, the newest `keepRecent` stay verbatim; errors stay unless
 *   superseded or modified (a later read or write of the file made them stale); a pinned path's latest read stays;
 *   a result is offloaded only when its pointer is smaller;
 * - only the API view (what `ApiView.apiView` returns) is touched: results before the last compaction block with content
 *   are left as they are (the API drops them), so `tokensFreed` is what the API view loses;
 * - the estimate never grows, and `tokensFreed` is the exact drop of `estimateTokens` (taken on the API view);
 * - when fewer than `minSavings` tokens (if given; otherwise when rent-or-buy says the rewrite does not pay) would be
 *   freed (or nothing would change), the input array is returned;
 * - the input is never mutated; unchanged messages and blocks are shared by reference;
 * - pure and idempotent: the same input and options give byte-identical output, and a second application changes
 *   nothing. Tool results without a preceding tool_use, and blocks already offloaded, are left as they are.
 *
 * One backward pass decides each result from what follows it and rebuilds what it changes: linear in the number of
 * blocks (a result whose call is not among the last 16 blocks of the reply before it looks it up in a map of the view's
 * calls, built once). Its rules are those of the index `Conversation` carries from step to step (one module of rules
 * serves both).
 * @category eviction
 */
export const evictStaleToolResults = <M extends Message>(
  messages: ReadonlyArray<M>,
  keepRecent: number,
  options: EvictOptions = {}
): EvictResult<M> => {
  return evictCold(messages, keepOf(keepRecent), options.classifier ?? defaultToolClassifier, decideOptions(options))
}

/** The options of the decisions for `EvictOptions`. */
const decideOptions = (options: EvictOptions): DecideOptions => ({
  pinned: options.pinned,
  minSavings: options.minSavings,
  cacheCold: options.cacheCold,
  prices: options.prices ?? cachePrices("5m"),
  droppedThinking: options.droppedThinking,
  restart: options.restartCost === undefined ? undefined : () => options.restartCost!,
  recall: options.recall,
  keepPrinted: options.keepPrinted
})
