/**
 * A Promise conversation on PostgreSQL that its script never closes (on each database of `fixtures/Pg.ts`): the child
 * process ends by itself once its work is done, as it does on the JSONL store, and every append it was answered for
 * is in the store. The bound is a guard against a hang (the pool's idle connections and timers holding the event
 * loop for ever), not a measure of speed.
 */
import { assert, describe, it } from "@effect/vitest"
import { type ChildProcess, spawn } from "node:child_process"
import process from "node:process"
import { fileURLToPath } from "node:url"
import { Effect } from "effect"
import { SessionStore } from "../src/SessionStore.ts"
import { databases, makeSchema } from "./fixtures/Pg.ts"

const script = fileURLToPath(new URL("./fixtures/promise-pg-unclosed.ts", import.meta.url))
const isDeno = typeof (globalThis as { readonly Deno?: unknown }).Deno !== "undefined"

/** How long the child may stay alive after its last append was answered before the test calls it a hang. */
const HANG_BOUND_MS = 20_000

/** The child's exit (code, signal) and its stdout; killed, with `hung` true, when still alive `HANG_BOUND_MS` after it appended. */
const runUnclosed = (args: ReadonlyArray<string>) =>
  new Promise<{ readonly code: number | null; readonly hung: boolean; readonly stdout: string }>((resolve) => {
    const child: ChildProcess = isDeno
      ? spawn(process.execPath, ["run", "-A", script, ...args], { stdio: ["ignore", "pipe", "inherit"] })
      : spawn(process.execPath, [script, ...args], { stdio: ["ignore", "pipe", "inherit"] })
    let stdout = ""
    let hung = false
    let timer: ReturnType<typeof setTimeout> | undefined
    child.stdout!.on("data", (chunk: Buffer) => {
      stdout += chunk.toString()
      if (timer === undefined && stdout.includes("appended")) {
        timer = setTimeout(() => {
          hung = true
          child.kill("SIGKILL")
        }, HANG_BOUND_MS)
      }
    })
    child.once("exit", (code) => {
      clearTimeout(timer)
      resolve({ code, hung, stdout })
    })
  })

describe.concurrent("PromiseConversation on PostgreSQL, never closed", () => {
  for (const database of databases) {
    it(`the process exits by itself and keeps every answered append (${database.name})`, async () => {
      const { schema, url, context, drop } = await makeSchema(database)
      try {
        const storeUrl = `${url}${url.includes("?") ? "&" : "?"}options=-c%20search_path%3D${schema}`
        // a short idle timeout: the test waits for the pool to let go of its idle connection
        const run = await runUnclosed([storeUrl, "unclosed", "3", "2 seconds"])
        assert.isFalse(run.hung, `still running ${HANG_BOUND_MS / 1000} s after its last append: ${run.stdout}`)
        assert.strictEqual(run.code, 0)
        assert.include(run.stdout, "appended 3")
        const { entries } = await Effect.runPromise(
          Effect.provide(
            Effect.gen(function* () {
              const store = yield* SessionStore
              return yield* store.read("unclosed", 0)
            }),
            context
          )
        )
        const texts = entries.map((e) => e.line).filter((line) => line.includes("unclosed "))
        assert.strictEqual(texts.length, 3, "every append the script was answered for is stored")
      } finally {
        await drop()
      }
    })
  }
})
