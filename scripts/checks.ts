/**
 * The static checks of `npm test`, run at once (`npm run checks`): `check` (tsc), `check:deno`, `check:jsr`, `lint`
 * and `docs:lint` (the reference docs' `deno doc --lint`) each run as their own npm script, two at a time (the
 * machine's cores); each one's output is printed whole, in this order, once it ends, and the run fails when any of
 * them fails, naming it.
 */
import { spawn } from "node:child_process"
import { availableParallelism } from "node:os"

const SCRIPTS = ["check", "check:deno", "check:jsr", "lint", "docs:lint"] as const

const run = (script: string): Promise<{ readonly script: string; readonly code: number; readonly output: string }> =>
  new Promise((resolve) => {
    const child = spawn("npm", ["run", "-s", script], { stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    child.stdout.on("data", (d: Buffer) => (output += d.toString()))
    child.stderr.on("data", (d: Buffer) => (output += d.toString()))
    child.on("close", (code) => resolve({ script, code: code ?? 1, output }))
  })

const started = Date.now()
const results: Array<Promise<Awaited<ReturnType<typeof run>>>> = []
let running: Array<Promise<unknown>> = []
for (const script of SCRIPTS) {
  if (running.length >= Math.max(2, availableParallelism())) await Promise.race(running)
  const result = run(script)
  results.push(result)
  const settled = result.then(() => void (running = running.filter((p) => p !== settled)))
  running.push(settled)
}
const failed: Array<string> = []
for (const { code, output, script } of await Promise.all(results)) {
  console.log(`> npm run ${script} (exit ${code})`)
  if (output.trim() !== "") console.log(output.trimEnd())
  if (code !== 0) failed.push(script)
}
console.log(
  `checks: ${SCRIPTS.length - failed.length} passed, ${failed.length} failed in ${(Date.now() - started) / 1000} s`
)
if (failed.length > 0) {
  console.error(`checks: failed: ${failed.join(", ")}`)
  process.exit(1)
}
