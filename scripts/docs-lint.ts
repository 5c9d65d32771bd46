/**
 * The reference docs' lint (`npm run docs:lint`, one of `npm run checks`): `deno doc --lint` over every public
 * entrypoint, the modules of deno.json's `exports` and of package.json's (each subpath `./X` is `src/X.ts`), so every
 * exported symbol, field and member has a doc comment and every exported function an explicit return type.
 *
 * Every diagnostic fails the check except `private-type-ref` (a public type naming a type the entrypoints do not
 * export). Those are counted and printed, not failed: the ones to types of the dependencies (`effect`, the SDK) are
 * the doc linter's mistake under a `node_modules` directory, which resolves them as local files; the ones to the
 * library's own unexported declarations (the `…Base` classes its services and errors extend, internal helper types)
 * are listed by name. Run it from the repository root.
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
if (failing.length > 0) process.exit(1)
