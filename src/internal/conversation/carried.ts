/**
 * Eviction decisions carried from one conversation step to the next, keyed by the view array they describe.
 *
 * A view array is immutable; each transition makes a new one. The `EvictionIndex` of a view is handed to the view a
 * transition derives from it (an append extends it by the new message, an offload records its blocks), so the next
 * `prepare` decides in proportion to what changed. One index is owned by one view at a time, the newest: an older
 * view (a state kept aside, a branch) finds it owned by another and gets a fresh index, built once. Each view the
 * index described keeps its eviction frontier, so the request after an offload still finds the previous one. The
 * frontier is carried only for a view with no compaction block (`Evict.evictionFrontier` reads the whole list).
 *
 * @internal
 */
import type { Message } from "../../Message.ts"
import type { ToolClassifier } from "../../Tools.ts"
import { defaultToolClassifier } from "../../Tools.ts"
import { CACHE_PRICES } from "../../Evict.ts"
import {
  applyOffloads,
  buildIndex,
  decide,
  type Decision,
  type EvictionIndex,
  extendIndex,
  frontierOf,
  keepOf
} from "../eviction.ts"

interface Owned {
  readonly index: EvictionIndex
  /** The view that owns the index now. */
  owner: ReadonlyArray<Message>
  /** Positions of the messages that carry a `cache_control` (an offload keeps every other field of a block). */
  readonly cacheControlled: Array<number>
}

const carriesCacheControl = (message: Message): boolean =>
  typeof message.content !== "string" && message.content.some((b) => "cache_control" in b)

const noteCacheControl = (owned: Owned, view: ReadonlyArray<Message>, from: number): void => {
  for (let i = from; i < view.length; i++) if (carriesCacheControl(view[i]!)) owned.cacheControlled.push(i)
}

type Frontier = { readonly message: number; readonly block: number } | undefined

const owners = new WeakMap<ReadonlyArray<Message>, Owned>()
const frontiers = new WeakMap<ReadonlyArray<Message>, Frontier>()

/** Keeps the frontier of a view about to hand its index on (the API view must be the whole view, as the scan reads). */
const keepFrontier = (index: EvictionIndex, view: ReadonlyArray<Message>): void => {
  if (index.viewStart === 0) frontiers.set(view, frontierOf(index, view))
}

/** The index of `view` (built when no current one exists, or when it was built for another classifier). */
const indexOf = (view: ReadonlyArray<Message>, classifier: ToolClassifier | undefined): EvictionIndex => {
  const classify = classifier ?? defaultToolClassifier
  const owned = owners.get(view)
  if (owned !== undefined && owned.owner === view && owned.index.classify === classify) return owned.index
  const index = buildIndex(view, classify)
  const fresh: Owned = { index, owner: view, cacheControlled: [] }
  noteCacheControl(fresh, view, 0)
  owners.set(view, fresh)
  return index
}

/** Hands the index of `from` (if it owns one) to `to`, which extends it; `to` gets none when it cannot be extended. */
export const handOnAppend = (from: ReadonlyArray<Message>, to: ReadonlyArray<Message>): void => {
  const owned = owners.get(from)
  if (owned === undefined || owned.owner !== from) return
  keepFrontier(owned.index, from)
  if (!extendIndex(owned.index, to)) return
  noteCacheControl(owned, to, from.length)
  owned.owner = to
  owners.set(to, owned)
}

/**
 * The eviction of `view` decided on its carried index: equal to `evictStaleToolResults(view, keepRecent, options)`.
 * When it offloads, its output view takes the index over.
 */
export const evictCarried = (
  view: ReadonlyArray<Message>,
  keepRecent: number,
  options: {
    readonly minSavings: number | undefined
    readonly pinned: (path: string) => boolean
    readonly cacheCold: boolean | undefined
    readonly classifier: ToolClassifier | undefined
  }
): Decision<Message> => {
  const index = indexOf(view, options.classifier)
  const evicted = decide(index, view, keepOf(keepRecent), { ...options, prices: CACHE_PRICES })
  if (evicted.offloaded.length > 0) {
    applyOffloads(index, evicted.messages, evicted.offloaded)
    handOnOffload(view, evicted.messages)
  }
  return evicted
}

/** Hands the index of `from` to `to`, an eviction's output that `applyOffloads` already recorded in it. */
const handOnOffload = (from: ReadonlyArray<Message>, to: ReadonlyArray<Message>): void => {
  const owned = owners.get(from)
  if (owned === undefined || owned.owner !== from) return
  keepFrontier(owned.index, from)
  owned.owner = to
  owners.set(to, owned)
}

/** The eviction frontier of `view` from its index or the frontier it kept; `undefined` when neither is known. */
export const carriedFrontier = (
  view: ReadonlyArray<Message>,
  classifier: ToolClassifier | undefined
): { readonly known: boolean; readonly at: Frontier } => {
  const owned = owners.get(view)
  if (owned === undefined || owned.index.classify !== (classifier ?? defaultToolClassifier)) {
    return { known: false, at: undefined }
  }
  if (owned.owner === view && owned.index.viewStart === 0) {
    return { known: true, at: frontierOf(owned.index, view) }
  }
  return frontiers.has(view) ? { known: true, at: frontiers.get(view) } : { known: false, at: undefined }
}

/**
 * What a request over `view` can read from its index instead of scanning the view, when `view` owns one with no
 * compaction block (the index then covers every message): the estimated tokens before each message, and the
 * positions of the messages that carry a `cache_control`.
 */
export const carriedRequestParts = (
  view: ReadonlyArray<Message>
):
  | { readonly tokensBefore: (message: number) => number; readonly cacheControlled: ReadonlyArray<number> }
  | undefined => {
  const owned = owners.get(view)
  if (owned === undefined || owned.owner !== view || owned.index.viewStart !== 0) return undefined
  const tokens = owned.index.tokens
  if (tokens === undefined) return undefined
  return { tokensBefore: (message) => tokens.prefix(message), cacheControlled: owned.cacheControlled }
}

/** The `tool_use` ids of `view`'s assistant messages: from its index when it owns one covering every message. */
export const toolUseIdsOf = (view: ReadonlyArray<Message>): { has(id: string): boolean } => {
  const owned = owners.get(view)
  if (owned !== undefined && owned.owner === view && owned.index.viewStart === 0) return owned.index.calls
  const ids = new Set<string>()
  for (const message of view) {
    if (message.role !== "assistant" || typeof message.content === "string") continue
    for (const block of message.content) if (block.type === "tool_use") ids.add((block as { id: string }).id)
  }
  return ids
}
