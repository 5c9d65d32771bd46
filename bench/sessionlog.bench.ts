/**
 * SessionLog: append throughput and `load` of a 10k-entry session, each against a raw baseline in the same run.
 *
 * - append: 100 single-message appends through `SessionStoreJsonl.layerSessionLog` (serialized, async FileSystem, whole lines,
 *   retry wrapper) vs 100 `fs.appendFileSync` calls of the same lines.
 * - load: `readJsonl` of a 10k-entry session (read, per-line SHA-256 checksum, JSON.parse, Schema decode + message
 *   validation, parent chain, fold, SHA-256 of the view at every compaction) vs `readFileSync` + `JSON.parse` of each line.
 *
 * Run: `npx node --expose-gc bench/sessionlog.bench.ts`
 */
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as NodePath from "@effect/platform-node/NodePath"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import { bench, do_not_optimize, group, run, summary } from "mitata"
import { appendFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { SessionLog } from "../src/SessionLog.ts"
import { layerSessionLog, readJsonl } from "../src/SessionStoreJsonl.ts"
import { generateSession, prng } from "../test/fixtures/Conversation.ts"
import { interleave, modelSteps, performStep } from "../test/fixtures/SessionScript.ts"

const platform = Layer.mergeAll(NodeFileSystem.layer, NodePath.layer)
const directory = mkdtempSync(join(tmpdir(), "sessionlog-bench-"))

// a 10k-entry session: messages, evictions (~10%) and compactions (~1%)
const rand = prng(42)
const messages = generateSession(42, { messages: 9500, maxOutput: 4000 })
const { steps } = modelSteps(interleave(messages, () => ({
  evict: rand() < 0.1,
  compact: rand() < 0.01,
  pick: Math.floor(rand() * 1000)
})))
const script = steps.slice(0, 10_000)

const openScoped = (sessionId: string) =>
  Effect.gen(function* () {
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(
      layerSessionLog({ directory, sessionId }).pipe(Layer.provide(platform)),
      scope
    )
    return { scope, context }
  })

await Effect.runPromise(
  Effect.gen(function* () {
    const log = yield* SessionLog
    for (const step of script) yield* performStep(log, step)
  }).pipe(Effect.provide(layerSessionLog({ directory, sessionId: "big" }).pipe(Layer.provide(platform))))
)
const bigFile = join(directory, "big.jsonl")
const loadBig = readJsonl({ directory, sessionId: "big" }).pipe(Effect.provide(platform))
const check = await Effect.runPromise(loadBig)
console.log(
  `session: ${check.entries.length} entries, ${(readFileSync(bigFile).length / 1e6).toFixed(1)} MB, ` +
    `${check.entries.filter((e) => e.type === "compaction").length} compactions, view ${check.view.length} messages`
)

// append: the same 100 lines both ways
const batch = messages.slice(0, 100)
const { context, scope } = await Effect.runPromise(openScoped("append"))
const service = Context.getUnsafe(context, SessionLog)
const appendService = Effect.forEach(batch, (m) => service.append([m]), { discard: true })
const rawFile = join(directory, "raw.jsonl")
let parent: string | null = null
const rawLines = batch.map((message, i) => {
  const line = JSON.stringify({
    v: 1,
    id: `id-${i}`,
    parentId: parent,
    timestamp: Date.now(),
    type: "message",
    message
  })
  parent = `id-${i}`
  return `${line}\n`
})

group("append 100 messages", () => {
  summary(() => {
    bench("fs.appendFileSync (baseline)", () => {
      for (const line of rawLines) appendFileSync(rawFile, line, { mode: 0o600 })
    }).baseline(true)
    bench("SessionLog.append (jsonl)", function* () {
      yield async () => do_not_optimize(await Effect.runPromise(appendService))
    })
  })
})

group("load a 10k-entry session", () => {
  summary(() => {
    bench("readFileSync + JSON.parse per line (baseline)", () => {
      const lines = readFileSync(bigFile, "utf8").split("\n")
      lines.pop()
      do_not_optimize(lines.map((l) => JSON.parse(l)))
    }).baseline(true)
    bench("readJsonl (decode, validate, fold, verify hashes)", function* () {
      yield async () => do_not_optimize(await Effect.runPromise(loadBig))
    })
  })
})

await run()
await Effect.runPromise(Scope.close(scope, Exit.void))
rmSync(directory, { recursive: true, force: true })
