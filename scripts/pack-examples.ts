/**
 * Part of `npm run build` (so of `npm pack`): copies the examples into `dist/examples/` as a user of the package writes
 * them, importing `effect-compaction` instead of the checkout's `../src/index.ts`. The session file goes as it is.
 */
import * as fs from "node:fs"
import * as path from "node:path"

const from = path.join(process.cwd(), "examples")
const to = path.join(process.cwd(), "dist", "examples")
fs.mkdirSync(to, { recursive: true })
for (const name of fs.readdirSync(from)) {
  const text = fs.readFileSync(path.join(from, name), "utf8")
  fs.writeFileSync(
    path.join(to, name),
    name.endsWith(".ts") ? text.replaceAll(`"../src/index.ts"`, `"effect-compaction"`) : text
  )
}
// nothing on stdout: `npm pack --json` (which runs this through prepack) reads stdout as its JSON
process.stderr.write(`examples: ${fs.readdirSync(to).length} files in dist/examples/\n`)
