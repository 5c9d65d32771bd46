/**
 * The prompt cache's two lifetimes and what follows from each: how long a written prefix lives,
 * what writing it costs, and the `cache_control` marker that asks for it. The policy's `cacheTtl` picks one; the
 * breakpoints, the cold timer, the rent-or-buy rule and the simulator all read it from here.
 */

/** A cache lifetime the API offers: `"5m"` (the default, refreshed on every hit) or `"1h"`. */
export type CacheTtl = "5m" | "1h"

/** Every lifetime the API accepts, the default first. */
export const CACHE_TTLS: ReadonlyArray<CacheTtl> = ["5m", "1h"]

/** How long a cached prefix lives after its last write or hit, in milliseconds. */
export const ttlMs = (ttl: CacheTtl): number => ttl === "1h" ? 60 * 60 * 1000 : 5 * 60 * 1000

/** A cache write's price relative to an uncached input token: 1.25 for 5 minutes, 2 for an hour. */
export const cacheWritePrice = (ttl: CacheTtl): number => ttl === "1h" ? 2 : 1.25

/** The prices eviction's rent-or-buy rule weighs under `ttl`: a read 0.1, a write `cacheWritePrice(ttl)`. */
export const cachePrices = (ttl: CacheTtl | undefined): { readonly cacheRead: number; readonly cacheWrite: number } =>
  ttl === "1h" ? ONE_HOUR_PRICES : FIVE_MINUTE_PRICES

const FIVE_MINUTE_PRICES = Object.freeze({ cacheRead: 0.1, cacheWrite: cacheWritePrice("5m") })
const ONE_HOUR_PRICES = Object.freeze({ cacheRead: 0.1, cacheWrite: cacheWritePrice("1h") })

const FIVE_MINUTES: { readonly type: "ephemeral" } = Object.freeze({ type: "ephemeral" })
const ONE_HOUR: { readonly type: "ephemeral"; readonly ttl: "1h" } = Object.freeze({ type: "ephemeral", ttl: "1h" })

/**
 * The `cache_control` a breakpoint carries: `{ type: "ephemeral" }` for 5 minutes (the bytes every earlier version
 * sent), `{ type: "ephemeral", ttl: "1h" }` for an hour. One frozen value per lifetime.
 */
export const cacheControlOf = (ttl: CacheTtl | undefined): { readonly type: "ephemeral"; readonly ttl?: "1h" } =>
  ttl === "1h" ? ONE_HOUR : FIVE_MINUTES
