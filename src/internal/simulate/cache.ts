/**
 * The simulator's model of Anthropic's prompt cache: entries written at the breakpoints of each request, read at a
 * breakpoint by looking back up to `LOOKBACK_BLOCKS` blocks for the longest cached prefix, never for a prefix below the
 * minimum cacheable length, living the cache TTL (5 minutes by default) from their last write or hit.
 *
 * A prompt is a list of units (the system prompt and tools as one unit, then every message block), each with the
 * identity of the prefix that ends with it (a chained hash of block contents, `cache_control` left out) and its
 * cumulative tokens.
 *
 * @internal
 */
import { ttlMs as lifetimeMs } from "../cacheTtl.ts"
import { LOOKBACK_BLOCKS } from "../breakpoints.ts"
import { stringHashHalves } from "../stringHash.ts"

/** One prompt, ready to price: per unit, the prefix identity and the tokens up to and including it. */
export interface PricedPrompt {
  readonly keys: ReadonlyArray<number>
  readonly cumulative: ReadonlyArray<number>
  /** Unit indices carrying a breakpoint, ascending. */
  readonly breakpoints: ReadonlyArray<number>
}

/** How a request was billed: `read + write + input` is the prompt's tokens. */
export interface CacheBill {
  readonly read: number
  readonly write: number
  readonly input: number
}

/** The cache of one session: prefix identity → expiry time. */
export class PromptCache {
  private readonly entries = new Map<number, number>()
  readonly minTokens: number
  readonly ttlMs: number
  constructor(minTokens: number, ttlMs: number = lifetimeMs("5m")) {
    this.minTokens = minTokens
    this.ttlMs = ttlMs
  }

  /** Forgets every entry (the provider lost the cache). */
  clear(): void {
    this.entries.clear()
  }

  /** Marks a prefix as cached at `now` (written before the replay began). */
  seed(key: number, now: number): void {
    this.entries.set(key, now + this.ttlMs)
  }

  /** True when nothing live is cached at `now`. */
  coldAt(now: number): boolean {
    for (const expiry of this.entries.values()) if (expiry > now) return false
    return true
  }

  /** Prices `prompt` sent at `now`, then writes (or refreshes) the entries of its breakpoints. */
  price(prompt: PricedPrompt, now: number): CacheBill {
    const { breakpoints, cumulative, keys } = prompt
    const total = cumulative.length === 0 ? 0 : cumulative[cumulative.length - 1]!
    let hit = -1
    for (const bp of breakpoints) {
      for (let j = bp; j >= 0 && j > bp - LOOKBACK_BLOCKS; j--) {
        const expiry = this.entries.get(keys[j]!)
        if (expiry !== undefined && expiry > now) {
          if (j > hit) hit = j
          break
        }
      }
    }
    const read = hit < 0 ? 0 : cumulative[hit]!
    if (hit >= 0) this.entries.set(keys[hit]!, now + this.ttlMs)
    let cachedTo = read
    for (const bp of breakpoints) {
      if (cumulative[bp]! < this.minTokens) continue
      this.entries.set(keys[bp]!, now + this.ttlMs)
      cachedTo = Math.max(cachedTo, cumulative[bp]!)
    }
    return { read, write: cachedTo - read, input: total - cachedTo }
  }
}

const hashes = new WeakMap<object, number>()

/** A 52-bit hash of a string (cyrb53: `stringHashHalves`' high half and 21 bits of its low one). */
const hashString = (text: string, seed = 0): number => {
  const [high, low] = stringHashHalves(text, seed)
  return 2097152 * high + (low >>> 11)
}

/** The content identity of a block (or of system and tools), without `cache_control`; cached per object. */
export const blockKey = (block: object): number => {
  let h = hashes.get(block)
  if (h === undefined) {
    h = hashString(JSON.stringify(block, (k, v) => k === "cache_control" ? undefined : v))
    hashes.set(block, h)
  }
  return h
}

/** The key of the prefix `previous` extended by a unit of content key `key` (and the message boundary `role`). */
export const chainKey = (previous: number, key: number, role: string): number =>
  hashString(`${previous}:${role}:${key}`)
