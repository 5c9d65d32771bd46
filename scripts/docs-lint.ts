/**
 * The reference docs' lint (`npm run docs:lint`, one of `npm run checks`): `deno doc --lint` over every public
 * entrypoint, the modules of deno.json's `exports` and of package.json's (each subpath `./X` is `src/X.ts`), so every
 * exported symbol, field and member has a doc comment and every exported function an explicit return type.
 *
 * Every diagnostic fails the check except `private-type-ref` (a public type naming a type the entrypoints do not
 * export). Those are counted and printed, not failed: the ones to types of the dependencies (`effect`, the SDK) are
 * the doc linter's mistake under a `node_modules` directory, which resolves them as local files; the ones to the
 * library's own unexported declarations (the `…Base` classes its services and errors extend, internal helper types)
 * are listed by name.
 *
 * Then `deno doc --json` over the same entrypoints: every doc text (module, symbol, member, tag) is searched for
 * references a package user cannot follow: issue numbers, the spec's `API-RULES` and rule numbers, test file names,
 * `../shared` and round numbers. Each one fails the check, listed as file:line and the text matched. Run it from the
 * repository root.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"

const root = process.cwd()
const readJson = (file: string): { readonly exports: Record<string, unknown> } =>
  JSON.parse(fs.readFileSync(path.join(root, file), "utf8"))

/** The source file of a subpath: `.` is `src/index.ts`, `./X` is `src/X.ts`. */
const sourceOf = (subpath: string): string => subpath === "." ? "./src/index.ts" : `./src/${subpath.slice(2)}.ts`

const fromDeno = Object.values(readJson("deno.json").exports).filter((v): v is string => typeof v === "string")
const fromPackage = Object.entries(readJson("package.json").exports)
  .filter(([subpath, target]) => target !== null && subpath !== "./package.json")
  .map(([subpath]) => sourceOf(subpath))
const entries = [...new Set([...fromDeno, ...fromPackage])].sort()
const absent = entries.filter((file) => !fs.existsSync(path.join(root, file)))
if (absent.length > 0) {
  console.error(`docs:lint: exported modules missing: ${absent.join(", ")}`)
  process.exit(1)
}

const deno = spawnSync("deno", ["doc", "--lint", ...entries], {
  encoding: "utf8",
  env: { ...process.env, NO_COLOR: "1" },
  maxBuffer: 64 * 1024 * 1024
})
const output = `${deno.stdout}${deno.stderr}`

interface Diagnostic {
  readonly kind: string
  readonly at: string
  readonly text: string
  /** For `private-type-ref`: the type named, and whether the library declares it (else a dependency does). */
  readonly referenced?: { readonly name: string; readonly own: boolean }
}

const sources = new Map<string, ReadonlyArray<string>>()
const linesOf = (file: string): ReadonlyArray<string> => {
  let lines = sources.get(file)
  if (lines === undefined) sources.set(file, lines = fs.readFileSync(file, "utf8").split("\n"))
  return lines
}
const sourceFiles = (dir: string): Array<string> =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourceFiles(path.join(dir, e.name)) : e.name.endsWith(".ts") ? [path.join(dir, e.name)] : []
  )
const src = sourceFiles(path.join(root, "src"))

/** Whether a file of `src` holds `text` at line `line`: the referenced declaration is the library's own. */
const declaredInSrc = (line: number, text: string): boolean =>
  src.some((file) => linesOf(file)[line - 1]?.trimEnd() === text.trimEnd())

const diagnostics: Array<Diagnostic> = output.split(/\n(?=error\[)/).filter((b) => b.startsWith("error[")).map(
  (block) => {
    const kind = /^error\[([\w-]+)\]/.exec(block)![1]!
    const at = /-->\s*(\S+)/.exec(block)?.[1]?.replace(`${root}/`, "") ?? "?"
    const text = block.split("\n")[0]!.replace(/^error\[[\w-]+\]:\s*/, "")
    if (kind !== "private-type-ref") return { kind, at, text }
    const name = /references private type '([^']+)'/.exec(block)?.[1] ?? "?"
    const declaration = /\n\s*(\d+) \| ?(.*)\n\s*\|\s*-+ this is the referenced type/.exec(block)
    const own = declaration !== null && declaredInSrc(Number(declaration[1]), declaration[2]!)
    return { kind, at, text, referenced: { name, own } }
  }
)

const reported = /Found (\d+) documentation lint errors?/.exec(output)
const expected = reported === null ? 0 : Number(reported[1])
if (deno.status !== 0 && (reported === null || expected !== diagnostics.length)) {
  console.error(output.trimEnd())
  console.error(`docs:lint: deno doc --lint failed (exit ${deno.status}) with ${diagnostics.length} diagnostics read`)
  process.exit(1)
}

const failing = diagnostics.filter((d) => d.kind !== "private-type-ref")
const own = diagnostics.filter((d) => d.referenced?.own === true)
const dependencies = diagnostics.filter((d) => d.referenced?.own === false)
const names = (ds: ReadonlyArray<Diagnostic>): string =>
  [...new Set(ds.map((d) => d.referenced!.name))].sort().join(", ")

for (const d of failing) console.error(`${d.at}: ${d.kind}: ${d.text}`)
console.log(
  `docs:lint: ${entries.length} entrypoints, ${failing.length} failing diagnostic(s); private-type-ref not failed: ` +
    `${own.length} to the library's unexported declarations (${
      names(own)
    }), ${dependencies.length} to dependencies' types`
)

/**
 * References a package user cannot follow: an issue number, the spec file `API-RULES` (a sibling directory the
 * package does not ship) or one of its rule numbers, a test file, `../shared`, a round number.
 */
const unfollowable = new RegExp(
  [
    String.raw`\b[Ii]ssues?\s+#?\d+`,
    String.raw`(?<=[\s(])#\d+\b`,
    String.raw`\bAPI-RULES\b`,
    String.raw`\b[Rr]ules?\s+\d+`,
    String.raw`[\w./-]+\.test\.ts\b`,
    String.raw`\.\./shared\b`,
    String.raw`\b[Rr]ounds?\s+\d+`
  ].join("|"),
  "g"
)

const docJson = spawnSync("deno", ["doc", "--json", ...entries], {
  encoding: "utf8",
  env: { ...process.env, NO_COLOR: "1" },
  maxBuffer: 256 * 1024 * 1024
})
if (docJson.status !== 0) {
  console.error(docJson.stderr.trimEnd())
  console.error(`docs:lint: deno doc --json failed (exit ${docJson.status})`)
  process.exit(1)
}

/** The line of `file` that holds the start of `match`: the last one at or before `near` (the documented node). */
const lineOf = (file: string, match: string, near: number): number => {
  const head = match.split(/\s/)[0]!
  const lines = fs.existsSync(file) ? linesOf(file) : []
  for (let i = Math.min(near, lines.length) - 1; i >= 0; i--) if (lines[i]!.includes(head)) return i + 1
  const first = lines.findIndex((l) => l.includes(head))
  return first >= 0 ? first + 1 : near
}

const references = new Set<string>()
/** Every `doc` string under `value`, located by the nearest enclosing `location` (else the module's file). */
const walk = (value: unknown, file: string, line: number): void => {
  if (Array.isArray(value)) { for (const v of value) walk(v, file, line) }
  else if (value !== null && typeof value === "object") {
    const o = value as Record<string, unknown>
    const at = o["location"] as { readonly filename?: string; readonly line?: number } | undefined
    const here = at?.filename?.startsWith("file://") === true
      ? { file: new URL(at.filename).pathname, line: at.line ?? 0 }
      : { file, line }
    for (const [key, v] of Object.entries(o)) {
      if (key === "doc" && typeof v === "string") {
        for (const m of v.matchAll(unfollowable)) {
          const where = `${path.relative(root, here.file)}:${lineOf(here.file, m[0], here.line)}`
          references.add(`${where}: ${JSON.stringify(m[0].replace(/\s+/g, " "))}`)
        }
      } else walk(v, here.file, here.line)
    }
  }
}
const modules = (JSON.parse(docJson.stdout) as { readonly nodes: Record<string, unknown> }).nodes
for (const [url, module] of Object.entries(modules)) {
  if (url.startsWith("file://")) walk(module, new URL(url).pathname, 1)
}
const inSource = [...references].filter((r) => !r.startsWith("node_modules/") && !r.startsWith(".."))
for (const r of inSource.sort()) console.error(`${r}: a reference a package user cannot follow`)
console.log(`docs:lint: ${inSource.length} reference(s) a package user cannot follow in the doc comments`)
if (failing.length > 0 || inSource.length > 0) process.exit(1)
