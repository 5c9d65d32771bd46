/**
 * The architecture, checked on the real import graph of `src/`: the pure core reaches no shell module, nothing from
 * `node:`, no FileSystem or platform and no SDK; no import circle, type-only and dynamic edges included; a module of
 * `internal/` never imports the public module that re-exports it; nothing imports the CLI; importing the barrel loads
 * no `@anthropic-ai/sdk` file; no doc comment is `@deprecated`; no namespace is assembled in `internal/`; every public
 * module has its subpath in `exports`. Each rule is also run on small made-up graphs, to show that it fails on a violation.
 * A module's size is not a rule: files are split along concepts.
 */
import { assert, describe, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import {
  backImports,
  circles,
  graphOf,
  localEdges,
  type ModuleInfo,
  parseModule,
  readGraph,
  SRC,
  staticClosure
} from "./fixtures/ImportGraph.ts"

const graph = readGraph()

/** The pure core of LAYOUT.md, those of its modules that exist. */
const CORE_NAMES = [
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
  "Summary",
  "Retention"
].map((name) => `${name}.ts`)
const CORE = CORE_NAMES.filter((file) => graph.has(file))

/** What the core may never reach: the shell's platform, the file system, the SDK. */
const forbiddenForCore = (specifier: string): boolean =>
  specifier.startsWith("node:") || specifier.startsWith("@anthropic-ai/") || specifier.startsWith("@effect/platform") ||
  specifier === "effect/FileSystem" || specifier === "effect/Path" || /^effect\/(sql|http|cli)\b/.test(specifier)

/** What a core module reaches that the core must not: shell modules (by any edge), the platform or SDK, lazy loads. */
const coreViolations = (file: string, modules: ReadonlyMap<string, ModuleInfo>): Array<string> => {
  const reached = new Set<string>()
  const stack = [file]
  while (stack.length > 0) {
    const next = stack.pop()!
    if (reached.has(next)) continue
    reached.add(next)
    const info = modules.get(next)
    if (info !== undefined) stack.push(...info.imports, ...info.typeImports)
  }
  const shell = [...reached].filter((m) => modules.has(m) && !CORE_NAMES.includes(m) && !m.startsWith("internal/"))
  const platform = [...reached].filter(forbiddenForCore)
  const lazy = [...reached].flatMap((m) => modules.get(m)?.dynamicImports ?? [])
  return [...shell.map((m) => `shell ${m}`), ...platform.map((m) => `platform ${m}`), ...lazy.map((m) => `lazy ${m}`)]
    .sort()
}

/** Each import, of any kind, of a module of `cli/` by a module outside it. */
const cliImporters = (modules: ReadonlyMap<string, ModuleInfo>): Array<string> =>
  [...modules.values()].filter((m) => !m.file.startsWith("cli/")).flatMap((m) =>
    [...m.imports, ...m.typeImports, ...m.dynamicImports].filter((s) => s.startsWith("cli/")).map((s) =>
      `${m.file} → ${s}`
    )
  )

/** Where a doc comment of `sources` carries a `@deprecated` tag (`file:line`): 0.2.0 keeps no deprecated name. */
const deprecatedTags = (sources: Readonly<Record<string, string>>): Array<string> =>
  Object.entries(sources).flatMap(([file, text]) =>
    [...text.matchAll(/\/\*\*[\s\S]*?\*\//g)].filter((comment) => /(?:^|[\s*])@deprecated\b/.test(comment[0])).map(
      (comment) => `${file}:${text.slice(0, comment.index).split("\n").length}`
    )
  )

/**
 * Namespaces assembled in `internal/`: a namespace of the barrel (`index.ts`) that is not a top-level module of
 * `src/`, and a module of `internal/` that re-exports a public (top-level) module. A public module is its namespace.
 */
const assembledNamespaces = (modules: ReadonlyMap<string, ModuleInfo>): Array<string> => {
  const barrel = modules.get("index.ts")
  const fromBarrel = (barrel?.reExports ?? []).filter((target) => target.includes("/")).map((t) => `index.ts → ${t}`)
  const fromInternal = [...modules.values()].filter((m) => m.file.startsWith("internal/")).flatMap((m) =>
    m.reExports.filter((target) => modules.has(target) && !target.includes("/")).map((t) => `${m.file} → ${t}`)
  )
  return [...fromBarrel, ...fromInternal].sort()
}

/** The public modules (top-level files of `src/` but the barrel) that have no subpath `./Name` in `exports`. */
const missingSubpaths = (modules: ReadonlyMap<string, ModuleInfo>, exports: Readonly<Record<string, unknown>>) =>
  [...modules.keys()].filter((f) => !f.includes("/") && f !== "index.ts").map((f) => f.slice(0, -3)).filter((name) =>
    exports[`./${name}`] === undefined || exports[`./${name}`] === null
  )

describe("the import graph reader", () => {
  it("sorts runtime, type-only and dynamic edges, keeps re-exports, and skips comments", () => {
    const info = parseModule(
      "A.ts",
      [
        `import type { X } from "./TypeOnly.ts"`,
        `import { type Y } from "./InlineType.ts" // still loads the module`,
        `import * as B from "./B.ts"`,
        `export { c } from "./sub/C.ts"`,
        `export type { D } from "./D.ts"`,
        `export * from "./internal/e.ts"`,
        `import type * as F from "./F.ts"`,
        `import {`,
        `  type G,`,
        `  g`,
        `} from "./G.ts"`,
        `import "node:fs"`,
        `/* import { e } from "./Commented.ts" */`,
        `// import { e } from "./Commented.ts"`,
        `const url = "http://not-a-comment"`,
        ``,
        `type M = typeof import("./TypeOfImport.ts")`,
        `export const load = () => import("./Lazy.ts")`
      ].join("\n")
    )
    assert.deepStrictEqual(info.imports, ["InlineType.ts", "B.ts", "sub/C.ts", "internal/e.ts", "G.ts", "node:fs"])
    assert.deepStrictEqual(info.typeImports, ["TypeOnly.ts", "D.ts", "F.ts", "TypeOfImport.ts"])
    assert.deepStrictEqual(info.dynamicImports, ["Lazy.ts"])
    assert.deepStrictEqual(info.reExports, ["sub/C.ts", "D.ts", "internal/e.ts"])
  })
})

describe("the rules fail on a violation (made-up graphs)", () => {
  it("circles: none in a tree; a runtime, type-only, dynamic or self circle is found, as a path", () => {
    const tree = graphOf({
      "A.ts": `import { b } from "./B.ts"\nimport type { C } from "./C.ts"`,
      "B.ts": `import { c } from "./C.ts"`,
      "C.ts": `export const c = 1`
    })
    assert.deepStrictEqual(circles(tree), [])
    const runtime = graphOf({
      "A.ts": `import { b } from "./B.ts"`,
      "B.ts": `export { c } from "./sub/C.ts"`,
      "sub/C.ts": `import * as A from "../A.ts"`,
      "D.ts": `import { b } from "./B.ts"`
    })
    assert.deepStrictEqual(circles(runtime), [["A.ts", "B.ts", "sub/C.ts", "A.ts"]])
    const typeOnly = graphOf({
      "A.ts": `import { b } from "./B.ts"`,
      "B.ts": `import type { A } from "./A.ts"`
    })
    assert.deepStrictEqual(circles(typeOnly), [["A.ts", "B.ts", "A.ts"]])
    const typeOf = graphOf({
      "A.ts": `export type B = typeof import("./B.ts")`,
      "B.ts": `export type { A } from "./A.ts"`
    })
    assert.deepStrictEqual(circles(typeOf), [["A.ts", "B.ts", "A.ts"]])
    const dynamic = graphOf({
      "A.ts": `const load = () => import("./B.ts")`,
      "B.ts": `import { a } from "./A.ts"`
    })
    assert.deepStrictEqual(circles(dynamic), [["A.ts", "B.ts", "A.ts"]])
    const self = graphOf({ "A.ts": `import type { A } from "./A.ts"` })
    assert.deepStrictEqual(circles(self), [["A.ts", "A.ts"]])
    const two = graphOf({
      "A.ts": `import { b } from "./B.ts"`,
      "B.ts": `import { a } from "./A.ts"\nimport { c } from "./C.ts"`,
      "C.ts": `import { d } from "./D.ts"`,
      "D.ts": `import type { E } from "./E.ts"`,
      "E.ts": `import { c } from "./C.ts"`
    })
    assert.deepStrictEqual(circles(two), [["C.ts", "D.ts", "E.ts", "C.ts"], ["A.ts", "B.ts", "A.ts"]])
  })

  it("back-imports: a helper importing the public module that re-exports it, by any kind of edge", () => {
    const clean = graphOf({
      "X.ts": `export { x } from "./internal/x.ts"\nimport { y } from "./internal/y.ts"`,
      "Other.ts": `export const other = 1`,
      "internal/x.ts": `import { other } from "../Other.ts"\nimport { y } from "./y.ts"`,
      "internal/y.ts": `export const y = 1`
    })
    assert.deepStrictEqual(backImports(clean), [])
    for (
      const back of [
        `import { X } from "../X.ts"`,
        `import type { X } from "../X.ts"`,
        `export const load = () => import("../X.ts")`
      ]
    ) {
      const facadeOver = (reExport: string) =>
        graphOf({ "X.ts": reExport, "internal/x.ts": back, "internal/y.ts": `import { X } from "../X.ts"` })
      assert.deepStrictEqual(backImports(facadeOver(`export { x } from "./internal/x.ts"`)), [
        "internal/x.ts → X.ts"
      ], back)
      assert.deepStrictEqual(backImports(facadeOver(`export * from "./internal/x.ts"`)), ["internal/x.ts → X.ts"], back)
      assert.deepStrictEqual(backImports(facadeOver(`export type { T } from "./internal/x.ts"`)), [
        "internal/x.ts → X.ts"
      ], back)
    }
  })

  it("deprecated tags: any doc comment with @deprecated, on a declaration or a member, is found", () => {
    assert.deepStrictEqual(
      deprecatedTags({ "A.ts": `/** A. */\nexport const a = 1\n// @deprecated in a line comment` }),
      []
    )
    assert.deepStrictEqual(
      deprecatedTags({
        "A.ts": `/** A. */\nexport const a = 1\n/**\n * Old.\n * @deprecated Use \`a\`.\n */\nexport const b = a`,
        "B.ts": `export interface B {\n  /** @deprecated Use \`c\`. */\n  readonly d?: number\n}`
      }),
      ["A.ts:3", "B.ts:2"]
    )
  })

  it("assembled namespaces: the barrel re-exporting an internal module, an internal module re-exporting a public one", () => {
    const clean = graphOf({
      "index.ts": `export * as X from "./X.ts"`,
      "X.ts": `export { x } from "./internal/x.ts"`,
      "internal/x.ts": `import type { Y } from "../Y.ts"\nexport const x = 1`,
      "Y.ts": `export type Y = 1`
    })
    assert.deepStrictEqual(assembledNamespaces(clean), [])
    const assembled = graphOf({
      "index.ts": `export * as X from "./internal/xNamespace.ts"`,
      "X.ts": `export const x = 1`,
      "internal/xNamespace.ts": `export * from "../X.ts"\nexport const old = 1`
    })
    assert.deepStrictEqual(assembledNamespaces(assembled), [
      "index.ts → internal/xNamespace.ts",
      "internal/xNamespace.ts → X.ts"
    ])
  })

  it("subpaths: a public module without its `./Name` in exports is found", () => {
    const modules = graphOf({ "index.ts": `export * as X from "./X.ts"`, "X.ts": "", "Y.ts": "", "internal/z.ts": "" })
    assert.deepStrictEqual(
      missingSubpaths(modules, { ".": "./src/index.ts", "./X": "./src/X.ts", "./Y": "./src/Y.ts" }),
      []
    )
    assert.deepStrictEqual(missingSubpaths(modules, { ".": "./src/index.ts", "./X": "./src/X.ts", "./Y": null }), ["Y"])
  })

  it("the core rule: a core module reaching a shell module (by a type too), node:, the SDK or a lazy load", () => {
    const modules = graphOf({
      "Cut.ts": `import { m } from "./Message.ts"\nimport { h } from "./internal/h.ts"`,
      "Message.ts": `export const m = 1`,
      "internal/h.ts": `export const h = 1`,
      "Policy.ts": `import { h } from "./internal/shell.ts"`,
      "internal/shell.ts": `import type { S } from "../SessionLog.ts"`,
      "Tokens.ts": `import * as fs from "node:fs"\nimport "@anthropic-ai/sdk"`,
      "Turns.ts": `export const load = () => import("./Message.ts")`,
      "SessionLog.ts": `export const s = 1`
    })
    assert.deepStrictEqual(coreViolations("Cut.ts", modules), [])
    assert.deepStrictEqual(coreViolations("Policy.ts", modules), ["shell SessionLog.ts"])
    assert.deepStrictEqual(coreViolations("Tokens.ts", modules), ["platform @anthropic-ai/sdk", "platform node:fs"])
    assert.deepStrictEqual(coreViolations("Turns.ts", modules), ["lazy Message.ts"])
  })

  it("the CLI rule: any kind of import of cli/ from outside it", () => {
    const modules = graphOf({
      "cli/main.ts": `import { a } from "../A.ts"\nimport { b } from "./B.ts"`,
      "cli/B.ts": `export const b = 1`,
      "A.ts": `import type { B } from "./cli/B.ts"`,
      "C.ts": `const load = () => import("./cli/main.ts")`
    })
    assert.deepStrictEqual(cliImporters(modules), ["A.ts → cli/B.ts", "C.ts → cli/main.ts"])
  })
})

describe("architecture", () => {
  it("finds the core modules", () => {
    assert.includeMembers(CORE, ["Message.ts", "Offload.ts", "Evict.ts", "Render.ts", "Summary.ts"])
  })

  for (const file of CORE) {
    it(`${file} reaches only the core and internal helpers: no shell, node:, FileSystem, platform or SDK`, () => {
      assert.deepStrictEqual(coreViolations(file, graph), [])
    })
  }

  it("no import circle, type-only and dynamic edges included", () => {
    assert.isAbove([...graph.values()].reduce((n, m) => n + localEdges(m, graph).length, 0), 100, "the graph has edges")
    assert.deepStrictEqual(circles(graph).map((circle) => circle.join(" → ")), [])
  })

  it("no module of internal/ imports the public module that re-exports it", () => {
    const facades = [...graph.values()].filter((m) => m.reExports.some((r) => r.startsWith("internal/")))
    assert.isAbove(facades.length, 0, "some public module re-exports an internal one")
    assert.deepStrictEqual(backImports(graph), [])
  })

  it("no doc comment of src/ is @deprecated (0.2.0 keeps no deprecated name)", () => {
    const sources = Object.fromEntries([...graph.keys()].map((f) => [f, fs.readFileSync(path.join(SRC, f), "utf8")]))
    assert.deepStrictEqual(deprecatedTags(sources), [])
  })

  it("no namespace is assembled in internal/: the barrel re-exports top-level modules, internal/ re-exports none", () => {
    assert.isAbove(graph.get("index.ts")!.reExports.length, 20, "the barrel's namespaces are read")
    assert.deepStrictEqual(assembledNamespaces(graph), [])
  })

  it("no module outside cli/ imports from cli/", () => {
    assert.deepStrictEqual(cliImporters(graph), [])
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

/**
 * The URLs a fresh Node process resolves while importing `entry` and then running each of `stages` in turn (a module
 * hook records every resolution): one list per step, each holding everything resolved up to the end of that step.
 */
const resolvedBy = (entry: string, ...stages: ReadonlyArray<string>): Array<Array<string>> => {
  const node = path.resolve(SRC, "../node_modules/.bin/node")
  const script = [
    `import { registerHooks } from "node:module"`,
    `const seen = new Set()`,
    `const steps = []`,
    `registerHooks({ resolve(specifier, context, next) { const r = next(specifier, context); seen.add(r.url); return r } })`,
    `const lib = await import(${JSON.stringify(pathToFileURL(path.join(SRC, entry)).href)})`,
    `steps.push([...seen])`,
    ...stages.flatMap((stage) => [stage, `steps.push([...seen])`]),
    `process.stdout.write(JSON.stringify(steps))`
  ].join("\n")
  const output = execFileSync(node, ["--input-type=module", "-e", script], { encoding: "utf8", env: {} })
  return JSON.parse(output) as Array<Array<string>>
}

const sdkFiles = (urls: ReadonlyArray<string>) => urls.filter((url) => url.includes("/@anthropic-ai/sdk/"))

/** A step that builds `SummarizerAuto.layerAuto()` with the configuration `env` (a JS object literal). */
const buildAuto = (env: string) =>
  [
    `{ const { Effect, Layer, ConfigProvider } = await import("effect")`,
    `const config = ConfigProvider.layer(ConfigProvider.fromUnknown(${env}))`,
    `await Effect.runPromise(Effect.scoped(Layer.build(lib.SummarizerAuto.layerAuto().pipe(Layer.provide(config))))) }`
  ].join("\n")

describe("the real module graph (a Node child process)", () => {
  // one process for the barrel: imported, then layerAuto built without a key, then with one (the SDK loads last)
  let barrel: Array<Array<string>> | undefined
  const barrelSteps =
    () => (barrel ??= resolvedBy("index.ts", buildAuto("{}"), buildAuto(`{ ANTHROPIC_API_KEY: "sk-x" }`)))

  it("importing the barrel loads no @anthropic-ai/sdk file; importing AnthropicSummarizer does", () => {
    assert.isTrue(fs.existsSync(path.join(SRC, "index.ts")))
    const [imported] = barrelSteps()
    assert.isTrue(imported!.some((url) => url.endsWith("/src/Cut.ts")), "the hook saw the barrel's modules")
    assert.deepStrictEqual(sdkFiles(imported!), [])
    assert.isAbove(sdkFiles(resolvedBy("AnthropicSummarizer.ts")[0]!).length, 0)
    assert.isAbove(sdkFiles(resolvedBy("ServerCompactionSummarizer.ts")[0]!).length, 0)
  }, 180_000)

  it("layerAuto loads the SDK only when it builds the Anthropic summarizer", () => {
    const [, withoutKey, withKey] = barrelSteps()
    assert.deepStrictEqual(sdkFiles(withoutKey!), [])
    assert.isAbove(sdkFiles(withKey!).length, 0)
  }, 180_000)
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

  it("every public module has its subpath, in package.json and in deno.json", () => {
    for (const file of ["package.json", "deno.json"]) {
      const exports = JSON.parse(fs.readFileSync(path.join(root, file), "utf8")).exports as Record<string, unknown>
      assert.deepStrictEqual(missingSubpaths(graph, exports), [], file)
    }
  })

  it("deno.json mirrors them for JSR", () => {
    const exports = JSON.parse(fs.readFileSync(path.join(root, "deno.json"), "utf8")).exports as Record<string, string>
    const expected: Record<string, string> = { ".": "./src/index.ts" }
    for (const name of publicModules) expected[`./${name}`] = `./src/${name}.ts`
    assert.deepStrictEqual(exports, expected)
  })
})
