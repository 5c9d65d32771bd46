import * as fs from "node:fs"
import { barrelNamespaces, exportedNames } from "../test/fixtures/PublicApi.ts"
const ns = new Map(barrelNamespaces().map(({ namespace, file }) => [namespace, new Set(exportedNames(file))]))
const files = [
  "README.md",
  "COMPACTION.md",
  ...(fs.readdirSync("src", { recursive: true }) as Array<string>).filter((f) => f.endsWith(".ts")).map((f) => `src/${f}`),
  ...(fs.readdirSync("examples") as Array<string>).filter((f) => f.endsWith(".ts")).map((f) => `examples/${f}`)
]
for (const file of files) {
  const text = fs.readFileSync(file, "utf8")
  const lines = text.split("\n")
  lines.forEach((line, i) => {
    for (const m of line.matchAll(/\b([A-Z][A-Za-z]+)\.([A-Za-z_$][\w$]*)/g)) {
      const names = ns.get(m[1]!)
      if (names === undefined) continue
      if (!names.has(m[2]!) && !["ts", "md", "json", "layer", "of", "make", "key"].includes(m[2]!)) console.log(`${file}:${i + 1}: ${m[0]}`)
    }
  })
}
