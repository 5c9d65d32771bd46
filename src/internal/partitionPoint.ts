/**
 * The partition point of a sorted list, found by binary search: where a list ordered by some key stops being before a
 * given one (the thinking positions of a message, an offset into a list of positions). Pure.
 *
 * @internal
 */

/**
 * The first index in `0..length` at which `isBefore` answers false, every index before it answering true (`length`
 * when none does). O(log length) calls of `isBefore`.
 */
export const partitionPoint = (length: number, isBefore: (index: number) => boolean): number => {
  let lo = 0
  let hi = length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (isBefore(mid)) lo = mid + 1
    else hi = mid
  }
  return lo
}
