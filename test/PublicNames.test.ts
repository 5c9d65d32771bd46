/**
 * The barrel's public surface, read from the source (`test/fixtures/PublicApi.ts`) and checked against the barrel's
 * values at run time: what each namespace exports, how many runtime names there are, that each has a doc comment, and
 * that no value is reachable under two live names.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Lib from "../src/index.ts"
import * as Estimate from "../src/internal/estimate.ts"
import { barrelNamespaces, isDeprecated, parseDocComment, publicNames } from "./fixtures/PublicApi.ts"

/** The barrel's public names read from the source (`test/fixtures/PublicApi.ts`), with their doc comments. */
const names = publicNames()
const live = names.filter((name) => !isDeprecated(name))
const barrel = Lib as unknown as Record<string, Record<string, unknown> | undefined>
const valueOf = (namespace: string, name: string): unknown => barrel[namespace]?.[name]
const isObject = (value: unknown): value is object =>
  (typeof value === "object" && value !== null) || typeof value === "function"

/** Issue 37's ceiling on the runtime names of the barrel, every namespace together. */
const MAX_RUNTIME_NAMES = 150

describe("the public surface, read from the source", () => {
  it("the reader sees exactly the values each namespace of the barrel exports", () => {
    for (const { namespace } of barrelNamespaces()) {
      const read = names.filter((n) => n.namespace === namespace && n.declarations.some((d) => d.kind === "value"))
      assert.deepStrictEqual(read.map((n) => n.name).sort(), Object.keys(barrel[namespace]!).sort(), namespace)
    }
    assert.deepStrictEqual(names.filter((n) => n.declarations.length === 0), [], "every name reaches a declaration")
  })

  it(`the barrel holds at most ${MAX_RUNTIME_NAMES} runtime names`, () => {
    const runtime = Object.values(barrel).reduce((n, namespace) => n + Object.keys(namespace!).length, 0)
    assert.isAtMost(runtime, MAX_RUNTIME_NAMES, `${runtime} runtime names`)
  })

  it("a value the barrel reaches under two names is deprecated under all but one of them", () => {
    const namesOf = new Map<object, Array<string>>()
    for (const name of live) {
      const value = valueOf(name.namespace, name.name)
      if (isObject(value)) namesOf.set(value, [...(namesOf.get(value) ?? []), `${name.namespace}.${name.name}`])
    }
    assert.deepStrictEqual([...namesOf.values()].filter((both) => both.length > 1), [])
    // a constant is not an object: two live names re-exporting one declaration are the same value too
    const namesAt = new Map<string, Array<string>>()
    for (const name of live) {
      const at = name.declarations.map((d) => `${d.file}:${d.line}`).sort().join(" ")
      namesAt.set(at, [...(namesAt.get(at) ?? []), `${name.namespace}.${name.name}`])
    }
    assert.deepStrictEqual([...namesAt.values()].filter((both) => both.length > 1), [])
  })

  it("every name that is not deprecated has a doc comment", () => {
    const undocumented = live.filter((name) => name.declarations.every((d) => d.doc === ""))
    assert.deepStrictEqual(undocumented.map((name) => `${name.namespace}.${name.name}`), [])
  })
})

describe("the source reader of the public surface", () => {
  it("reads a doc comment's text apart from its tags, and the @deprecated note", () => {
    assert.deepStrictEqual(parseDocComment("/** The same. @deprecated Use `A.b`. */"), {
      doc: "The same.",
      deprecated: "Use `A.b`."
    })
    assert.deepStrictEqual(parseDocComment("/**\n * Two lines\n * of text.\n * @category models\n */"), {
      doc: "Two lines\nof text.",
      deprecated: undefined
    })
    assert.deepStrictEqual(parseDocComment("/** @category guards */"), { doc: "", deprecated: undefined })
  })
})

describe("knobs in internal/", () => {
  it("the uncached estimates count what the cached public ones count", () => {
    const message: Lib.Message.Message = { role: "user", content: [{ type: "text", text: "x".repeat(41) }] }
    assert.strictEqual(Estimate.estimateMessageTokensUncached(message), Lib.Tokens.estimateMessageTokens(message))
    assert.strictEqual(
      Estimate.estimateContentTokensUncached(message.content),
      Lib.Tokens.estimateContentTokens(message.content)
    )
    assert.strictEqual(Estimate.estimateContentTokensUncached(message.content), 11)
  })
})
