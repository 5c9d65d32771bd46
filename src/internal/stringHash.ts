/**
 * A fast non-cryptographic hash of a string (cyrb53's mixing of its UTF-16 code units): the two 32-bit halves the
 * content references (`textRef`) and the simulated cache's block keys are made of. Pure.
 *
 * @internal
 */

/** The two mixed 32-bit halves (unsigned) of `text` under `seed`: `[high, low]`. */
export const stringHashHalves = (text: string, seed = 0): readonly [number, number] => {
  let h1 = 0xdeadbeef ^ seed
  let h2 = 0x41c6ce57 ^ seed
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    h1 = Math.imul(h1 ^ c, 2654435761)
    h2 = Math.imul(h2 ^ c, 1597334677)
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909)
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909)
  return [h2 >>> 0, h1 >>> 0]
}
