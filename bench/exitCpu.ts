/**
 * Preloaded into a child process that `bench/ci.ts` times (`node --import ./bench/exitCpu.ts …`): when the process
 * exits, it writes the CPU time it used (user + system, nanoseconds, from its start) to stderr as the last line,
 * `cpu_ns <n>`. A start is then measured in CPU time like every other row, unmoved by another process's load.
 */
import { writeSync } from "node:fs"
import process from "node:process"

process.on("exit", () => {
  const usage = process.cpuUsage()
  writeSync(2, `\ncpu_ns ${(usage.user + usage.system) * 1000}\n`)
})
