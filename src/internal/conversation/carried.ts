/**
 * What a conversation state carries from the transition that made it (`ConversationState.carried`), so the next step
 * decides in proportion to what changed: the eviction index of its view, the positions of the messages that carry a
 * `cache_control`, once the index moved on, the view's eviction frontier, and, once a request left unbound thinking
 * out, the view without it (kept up to date by the same hand-on). Every function here takes it as an argument;
 * nothing is kept beside the state.
 *
 * A view array is immutable; each transition makes a new one and a new `CarriedIndex` for it. The index itself is
 * mutable and describes one view at a time, the newest it was handed: a transition hands it from its input's view to
 * its output's (an append extends it by the new message, an offload records its blocks). A `CarriedIndex` applies only
 * to the view it was made for: a state whose view is another array (a copy, a view set by hand) decides from scratch,
 * as does a state whose index moved on to a newer view (a state kept aside, a branch); the index such a state builds
 * is kept in its own `CarriedIndex`, so it is built once. When a view hands its index on, its frontier is kept, so the
 * request after an offload still finds the previous one. The frontier is carried only for a view with no compaction
 * block (`Evict.evictionFrontier` reads the whole list).
 *
 * @internal
 */
import { cachePrices, type CacheTtl } from "../cacheTtl.ts"
import type { Message } from "../../Message.ts"
import type { ToolClassifier } from "../../Tools.ts"
import { defaultToolClassifier } from "../../Tools.ts"
import { applyOffloads, buildIndex, decide, type EvictionIndex, extendIndex, indexedFrontier } from "../eviction.ts"
import { type Decision, keepOf } from "../evictionRules.ts"
import { blocksOf } from "../blocks.ts"
import type { BlockPosition } from "../../Cache.ts"
import { strippedMessage, withoutThinkingAt } from "./appendOnly.ts"

/** An eviction index, the view it describes now (the newest it was handed) and that view's `cache_control` positions. */
interface OwnedIndex {
  readonly index: EvictionIndex
  owner: ReadonlyArray<Message>
  /** Positions of the messages that carry a `cache_control` (an offload keeps every other field of a block). */
  readonly cacheControlled: Array<number>
  /** The owner with some unbound thinking left out, once a request asked for it (`CarriedIndex.withoutThinking`). */
  stripped: StrippedCopy | undefined
}

/**
 * `withoutThinkingAt(owner, positions)` as of the owner it was last brought up to date with: its first `messages.length`
 * messages, less the ones at `changed` (replaced by an offload since). `messages` is `undefined` when leaving that
 * thinking out empties a message (the list closes up, which a copy by position cannot follow).
 */
interface StrippedCopy {
  readonly positions: ReadonlyArray<BlockPosition>
  readonly messages: Array<Message> | undefined
  readonly changed: Array<number>
}

type Frontier = { readonly message: number; readonly block: number } | undefined

/** A view's frontier, kept when its index moved on, with the classifier it was found under. */
interface KeptFrontier {
  readonly classify: ToolClassifier
  readonly at: Frontier
}

const carriesCacheControl = (message: Message): boolean => blocksOf(message).some((b) => "cache_control" in b)

const noteCacheControl = (owned: OwnedIndex, view: ReadonlyArray<Message>, from: number): void => {
  for (let i = from; i < view.length; i++) if (carriesCacheControl(view[i]!)) owned.cacheControlled.push(i)
}

/**
 * What one view carries (see the module doc). Its two mutable fields only remember answers about `view`: the index
 * built for it on first need (when no transition handed one on), and its frontier once the index moved on. It is not
 * serialized (`toJSON` is `undefined`): it is derived from the view.
 */
export class CarriedIndex {
  /** The view this was made for; for any other array it is ignored. */
  readonly view: ReadonlyArray<Message>
  private owned: OwnedIndex | undefined
  private kept: KeptFrontier | undefined

  private constructor(view: ReadonlyArray<Message>, owned: OwnedIndex | undefined) {
    this.view = view
    this.owned = owned
    this.kept = undefined
  }

  /** A carry for `view` with nothing decided yet: its index is built at its first eviction. */
  static fresh(view: ReadonlyArray<Message>): CarriedIndex {
    return new CarriedIndex(view, undefined)
  }

  /** The carry of `view` after an append: `from`'s index extended, or nothing decided yet when it cannot be. */
  static appended(
    from: ReadonlyArray<Message>,
    carried: CarriedIndex | undefined,
    view: ReadonlyArray<Message>
  ): CarriedIndex {
    const owned = fits(carried, from) ? carried.ownedBy(from) : undefined
    if (owned === undefined) return CarriedIndex.fresh(view)
    carried!.keepFrontier(owned)
    if (!extendIndex(owned.index, view)) return CarriedIndex.fresh(view)
    noteCacheControl(owned, view, from.length)
    owned.owner = view
    return new CarriedIndex(view, owned)
  }

  /**
   * The eviction of `view` decided on its carried index: equal to `evictStaleToolResults(view, keepRecent, options)`.
   * When it offloads, its output view takes the index over, in the returned `carried`.
   */
  static evict(
    view: ReadonlyArray<Message>,
    carried: CarriedIndex | undefined,
    keepRecent: number,
    options: {
      readonly minSavings: number | undefined
      readonly pinned: (path: string) => boolean
      readonly cacheCold: boolean | undefined
      readonly classifier: ToolClassifier | undefined
      /** The cache lifetime, whose write price the rent-or-buy rule weighs (`internal/cacheTtl`); default `"5m"`. */
      readonly cacheTtl?: CacheTtl | undefined
      readonly droppedThinking?: ((message: number) => number) | undefined
      /** What restarting the server-held thread costs (`DecideOptions.restart`); absent: no thread. */
      readonly restart?: (() => number) | undefined
      /** The caller offers the recall tool (`DecideOptions.recall`). */
      readonly recall?: boolean | undefined
      /** Output pointers keep what the output printed (`DecideOptions.keepPrinted`). */
      readonly keepPrinted?: boolean | undefined
    }
  ): { readonly decision: Decision<Message>; readonly carried: CarriedIndex | undefined } {
    const own = fits(carried, view) ? carried : undefined
    const classify = options.classifier ?? defaultToolClassifier
    let owned = own?.ownedBy(view)
    if (owned === undefined || owned.index.classify !== classify) {
      owned = { index: buildIndex(view, classify), owner: view, cacheControlled: [], stripped: undefined }
      noteCacheControl(owned, view, 0)
      if (own !== undefined) own.owned = owned
    }
    const decision = decide(owned.index, view, keepOf(keepRecent), {
      ...options,
      prices: cachePrices(options.cacheTtl)
    })
    if (decision.offloaded.length === 0) return { decision, carried: own }
    applyOffloads(owned.index, decision.messages, decision.offloaded)
    own?.keepFrontier(owned)
    owned.owner = decision.messages
    if (owned.stripped !== undefined) {
      for (const o of decision.offloaded) {
        owned.stripped.changed.push(o.messageIndex)
      }
    }
    return { decision, carried: new CarriedIndex(decision.messages, owned) }
  }

  /** The eviction frontier of `view` from its carry; `known: false` when the carry cannot tell (scan instead). */
  static frontier(
    view: ReadonlyArray<Message>,
    carried: CarriedIndex | undefined,
    classifier: ToolClassifier | undefined
  ): { readonly known: boolean; readonly at: Frontier } {
    if (!fits(carried, view)) return { known: false, at: undefined }
    const classify = classifier ?? defaultToolClassifier
    const owned = carried.ownedBy(view)
    if (owned !== undefined && owned.index.classify === classify && owned.index.viewStart === 0) {
      return { known: true, at: indexedFrontier(owned.index, view) }
    }
    const kept = carried.kept
    return kept !== undefined && kept.classify === classify
      ? { known: true, at: kept.at }
      : { known: false, at: undefined }
  }

  /**
   * What a request over `view` can read from its carry instead of scanning the view, when it holds an index of `view`
   * with no compaction block (the index then covers every message): the estimated tokens before each message and of
   * each message (`estimateMessageTokens`'s), and the positions of the messages that carry a `cache_control`.
   */
  static requestParts(
    view: ReadonlyArray<Message>,
    carried: CarriedIndex | undefined
  ):
    | {
      readonly tokensBefore: (message: number) => number
      readonly tokensOf: (message: number) => number
      readonly cacheControlled: ReadonlyArray<number>
    }
    | undefined {
    const owned = fits(carried, view) ? carried.ownedBy(view) : undefined
    if (owned === undefined || owned.index.viewStart !== 0) return undefined
    const tokens = owned.index.tokens
    return {
      tokensBefore: (message) => tokens.prefix(message),
      tokensOf: (message) => tokens.get(message),
      cacheControlled: owned.cacheControlled
    }
  }

  /**
   * `withoutThinkingAt(view, positions)` as a fresh array, when the carry holds the index of `view`: a copy of the list
   * kept with the index, brought up to date with the messages appended and replaced since the last request (with the
   * same `positions` array, as a state keeps its unbound thinking), so a request reads what changed, not every position.
   * `undefined` when the carry cannot tell, or when leaving that thinking out empties a message.
   */
  static withoutThinking(
    view: ReadonlyArray<Message>,
    carried: CarriedIndex | undefined,
    positions: ReadonlyArray<BlockPosition>
  ): Array<Message> | undefined {
    const owned = fits(carried, view) ? carried.ownedBy(view) : undefined
    if (owned === undefined) return undefined
    let copy = owned.stripped
    if (copy === undefined || copy.positions !== positions || (copy.messages?.length ?? 0) > view.length) {
      // one walk of every position, as a request without the copy makes
      const whole = withoutThinkingAt(view, positions)
      if (whole.length !== view.length) return emptied(owned, positions)
      copy = { positions, messages: whole === view ? view.slice() : whole as Array<Message>, changed: [] }
      owned.stripped = copy
    }
    const messages = copy.messages
    if (messages === undefined) return undefined
    for (const m of copy.changed) {
      if (m >= messages.length) continue
      const stripped = strippedMessage(positions, m, view[m]!)
      if (stripped === null) return emptied(owned, positions)
      messages[m] = stripped
    }
    copy.changed.length = 0
    for (let m = messages.length; m < view.length; m++) {
      const stripped = strippedMessage(positions, m, view[m]!)
      if (stripped === null) return emptied(owned, positions)
      messages.push(stripped)
    }
    return messages.slice()
  }

  /** The `tool_use` ids of `view`'s assistant messages: from its carried index when that covers every message. */
  static toolUseIds(view: ReadonlyArray<Message>, carried: CarriedIndex | undefined): { has(id: string): boolean } {
    const owned = fits(carried, view) ? carried.ownedBy(view) : undefined
    if (owned !== undefined && owned.index.viewStart === 0) return owned.index.calls
    const ids = new Set<string>()
    for (const message of view) {
      if (message.role !== "assistant" || typeof message.content === "string") continue
      for (const block of message.content) if (block.type === "tool_use") ids.add((block as { id: string }).id)
    }
    return ids
  }

  /** Not serialized: a carry is derived from the view, which the state holds. */
  toJSON(): undefined {
    return undefined
  }

  /** The index when it still describes `view`. */
  private ownedBy(view: ReadonlyArray<Message>): OwnedIndex | undefined {
    const owned = this.owned
    return owned !== undefined && owned.owner === view && this.view === view ? owned : undefined
  }

  /** Keeps this view's frontier before its index moves on (the API view must be the whole view, as the scan reads). */
  private keepFrontier(owned: OwnedIndex): void {
    if (owned.index.viewStart === 0) {
      this.kept = { classify: owned.index.classify, at: indexedFrontier(owned.index, this.view) }
    }
  }
}

/** No copy for `positions` (leaving their thinking out empties a message): `withoutThinking` answers `undefined`. */
const emptied = (owned: OwnedIndex, positions: ReadonlyArray<BlockPosition>): undefined => {
  owned.stripped = { positions, messages: undefined, changed: [] }
  return undefined
}

/** The carry applies to `view`: a carry made for this very array (not one spread into a plain object, or a copy's). */
const fits = (carried: CarriedIndex | undefined, view: ReadonlyArray<Message>): carried is CarriedIndex =>
  carried instanceof CarriedIndex && carried.view === view
