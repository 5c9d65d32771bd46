/**
 * The architecture, checked on the real import graph of `src/`: the pure core imports no shell module, nothing from
 * `node:`, no FileSystem or platform and no SDK (transitively); nothing imports the CLI; importing the barrel loads no
 * `@anthropic-ai/sdk` file; no source file is over 500 lines of code.
 */
import { assert, describe, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import { linesOfCode, parseModule, readGraph, SRC, staticClosure } from "./fixtures/ImportGraph.ts"

const graph = readGraph()

/** The pure core of LAYOUT.md; `ApiView` and `Cache` once they exist. */
const CORE = [
  "Message",
  "Tokens",
  "Turns",
  "Tools",
  "ApiView",
  "Cut",
  "Policy",
  "Validate",
  "Offload",
  "Evict",
  "HotPaths",
  "Cache",
  "Render",
  "Summary"
].map((name) => `${name}.ts`).filter((file) => graph.has(file))

const MAX_LINES_OF_CODE = 500

/** What the core may never reach: the shell's platform, the file system, the SDK. */
const forbiddenForCore = (specifier: string): boolean =>
  specifier.startsWith("node:") || specifier.startsWith("@anthropic-ai/") || specifier.startsWith("@effect/platform") ||
  specifier === "effect/FileSystem" || specifier === "effect/Path" || /^effect\/(sql|http|cli)\b/.test(specifier)

const isLocal = (specifier: string): boolean => graph.has(specifier)

describe("the import graph reader", () => {
  it("sees runtime imports and re-exports, skips type-only ones and type positions, and counts code lines", () => {
    const info = parseModule(
      "A.ts",
      [
        `import type { X } from "./TypeOnly.ts"`,
        `import { type Y } from "./InlineType.ts" // still loads the module`,
        `import * as B from "./B.ts"`,
        `export { c } from "./sub/C.ts"`,
        `export type { D } from "./D.ts"`,
        `import "node:fs"`,
        `/* import { e } from "./Commented.ts" */`,
        `const url = "http://not-a-comment"`,
        ``,
        `type M = typeof import("./TypeOfImport.ts")`,
        `export const load = () => import("./Lazy.ts")`
      ].join("\n")
    )
    assert.deepStrictEqual(info.imports, ["InlineType.ts", "B.ts", "sub/C.ts", "node:fs"])
    assert.deepStrictEqual(info.dynamicImports, ["Lazy.ts"])
    assert.strictEqual(info.linesOfCode, 9)
    assert.strictEqual(linesOfCode("// a\n\n/**\n * b\n */\nconst x = 1 // c\n"), 1)
  })
})

describe("architecture", () => {
  it("finds the core modules", () => {
    assert.includeMembers(CORE, ["Message.ts", "Offload.ts", "Evict.ts", "Render.ts", "Summary.ts"])
  })

  for (const file of CORE) {
    it(`${file} reaches only the core and internal helpers: no shell, node:, FileSystem, platform or SDK`, () => {
      const reached = [...staticClosure(file, graph)]
      const shell = reached.filter((m) => isLocal(m) && !CORE.includes(m) && !m.startsWith("internal/"))
      assert.deepStrictEqual(shell, [], `${file} reaches shell modules`)
      assert.deepStrictEqual(reached.filter(forbiddenForCore), [], `${file} reaches the platform or the SDK`)
      const lazy = reached.flatMap((m) => graph.get(m)?.dynamicImports ?? [])
      assert.deepStrictEqual(lazy, [], `${file} reaches dynamic imports`)
    })
  }

  it("no module outside cli/ imports from cli/", () => {
    const offenders = [...graph.values()].filter((m) => !m.file.startsWith("cli/")).flatMap((m) =>
      [...m.imports, ...m.dynamicImports].filter((s) => s.startsWith("cli/")).map((s) => `${m.file} → ${s}`)
    )
    assert.deepStrictEqual(offenders, [])
  })

  it(`no source file is over ${MAX_LINES_OF_CODE} lines of code`, () => {
    const over = [...graph.values()].filter((m) => m.linesOfCode > MAX_LINES_OF_CODE).map((m) =>
      `${m.file}: ${m.linesOfCode}`
    )
    assert.deepStrictEqual(over, [])
  })

  it("the barrel's static imports never reach @anthropic-ai/sdk; only the summarizers that call the API do", () => {
    const sdk = (entry: string) => [...staticClosure(entry, graph)].filter((m) => m.startsWith("@anthropic-ai/"))
    assert.deepStrictEqual(sdk("index.ts"), [])
    assert.deepStrictEqual(sdk("Summarizer.ts"), [])
    const loaders = [...graph.keys()].filter((file) => !file.includes("/") && sdk(file).length > 0).sort()
    assert.deepStrictEqual(loaders, ["AnthropicSummarizer.ts", "ServerCompactionSummarizer.ts"])
    for (const file of loaders) assert.deepStrictEqual(sdk(file), ["@anthropic-ai/sdk"])
  })
})

/** The URLs a fresh Node process resolves while importing `entry` (a module hook records every resolution). */
const resolvedBy = (entry: string, then = ""): Array<string> => {
  const node = path.resolve(SRC, "../node_modules/.bin/node")
  const script = [
    `import { registerHooks } from "node:module"`,
    `const seen = new Set()`,
    `registerHooks({ resolve(specifier, context, next) { const r = next(specifier, context); seen.add(r.url); return r } })`,
    `const lib = await import(${JSON.stringify(pathToFileURL(path.join(SRC, entry)).href)})`,
    then,
    `process.stdout.write(JSON.stringify([...seen]))`
  ].join("\n")
  const output = execFileSync(node, ["--input-type=module", "-e", script], { encoding: "utf8", env: {} })
  return JSON.parse(output) as Array<string>
}

const sdkFiles = (urls: ReadonlyArray<string>) => urls.filter((url) => url.includes("/@anthropic-ai/sdk/"))

describe("the real module graph (a Node child process)", () => {
  it("importing the barrel loads no @anthropic-ai/sdk file; importing AnthropicSummarizer does", () => {
    assert.isTrue(fs.existsSync(path.join(SRC, "index.ts")))
    const barrel = resolvedBy("index.ts")
    assert.isTrue(barrel.some((url) => url.endsWith("/src/Cut.ts")), "the hook saw the barrel's modules")
    assert.deepStrictEqual(sdkFiles(barrel), [])
    assert.isAbove(sdkFiles(resolvedBy("AnthropicSummarizer.ts")).length, 0)
    assert.isAbove(sdkFiles(resolvedBy("ServerCompactionSummarizer.ts")).length, 0)
  }, 60_000)

  it("layerAuto loads the SDK only when it builds the Anthropic summarizer", () => {
    const build = (env: string) =>
      [
        `const { Effect, Layer, ConfigProvider } = await import("effect")`,
        `const config = ConfigProvider.layer(ConfigProvider.fromUnknown(${env}))`,
        `await Effect.runPromise(Effect.scoped(Layer.build(lib.Summarizer.layerAuto().pipe(Layer.provide(config)))))`
      ].join("\n")
    assert.deepStrictEqual(sdkFiles(resolvedBy("index.ts", build("{}"))), [])
    assert.isAbove(sdkFiles(resolvedBy("index.ts", build(`{ ANTHROPIC_API_KEY: "sk-x" }`))).length, 0)
  }, 60_000)
})

describe("package exports", () => {
  const root = path.resolve(SRC, "..")
  const publicModules = [...graph.keys()].filter((f) => !f.includes("/") && f !== "index.ts").map((f) => f.slice(0, -3))

  it("package.json: the barrel, one subpath per public module (with its types), internals hidden", () => {
    const exports = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")).exports as Record<
      string,
      unknown
    >
    const expected: Record<string, unknown> = {
      ".": { types: "./dist/index.d.ts", default: "./dist/index.js" },
      "./internal/*": null,
      "./package.json": "./package.json"
    }
    for (const name of publicModules) {
      expected[`./${name}`] = { types: `./dist/${name}.d.ts`, default: `./dist/${name}.js` }
    }
    assert.deepStrictEqual(exports, expected)
  })

  it("deno.json mirrors them for JSR", () => {
    const exports = JSON.parse(fs.readFileSync(path.join(root, "deno.json"), "utf8")).exports as Record<string, string>
    const expected: Record<string, string> = { ".": "./src/index.ts" }
    for (const name of publicModules) expected[`./${name}`] = `./src/${name}.ts`
    assert.deepStrictEqual(exports, expected)
  })
})
