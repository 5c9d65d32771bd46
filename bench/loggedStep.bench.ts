/**
 * One logged `Conversation` step against `JSON.stringify` of the request it returns (issue 43: a logged step costs at
 * most 0.2x serializing its request), at 1k, 10k and 100k messages (`LOGGED_STEP_SIZES=1000,10000` picks): on the
 * JSONL store with the default durability and with deferred writes, with the same step logged on the memory store
 * (the log's work without the file) and on `layerMemory` (nothing logged) beside it.
 *
 * "Its request" is each step's own: the stringify is measured on the request each timed step of the JSONL
 * conversation returned (the last `RECENT_REQUESTS` of each pass, several compaction cycles: small just after a
 * compaction, largest just before the next), and the table shows the median, with the median stringify of the
 * smallest tenth of them (the requests right after a compaction) beside it.
 *
 * A step is what an agent loop does between two model calls: `prepare`, `recordReply` of a reply that reads a file
 * (its usage the request's estimated tokens, as a provider would report), `append` of its result. The logged
 * conversation runs on `SessionStoreJsonl.layerSessionLog` (Node's file system) in a temporary directory, with the
 * default durability (`sync: "compaction"`: each entry written before it is acknowledged, fsync after compactions) or
 * with `sync: "deferred"` (appends acknowledged once queued, written together within 5 ms by one write: a step waits
 * for no write; in `bench:ci`, timed by CPU time, which counts every thread, the writes that land while steps are
 * timed are in their time). As in issue 43's worker, the policy compacts at a 40k-token window, so
 * the request stays a few hundred messages while the history grows: each conversation starts from a generated session
 * (tool outputs up to 4,000 characters) driven through it once and stepped `RECENT_REQUESTS` times, untimed, then every timed step adds one more reply
 * and result to the same conversation (the median step is one that does not compact). Steps are timed by CPU time,
 * one a sample, as `bench:ci` times them (`bench/cpuTime.ts`: a step's wall-clock time on a shared machine counts the
 * other processes' turns); the stringify side by the clock, 8 calls a request. Each figure is the median of
 * `PASSES` passes over the four conversations (each pass `STEPS_PER_PASS` steps of one, then the next): this
 * machine's speed wanders by up to 2x over seconds (a fixed stringify with it), and one pass of each caught different
 * stretches of it. Steps of the four in turn, one each, cost every kind 2 to 3 times more (caches), so each kind's
 * steps run back to back, as an agent steps its one conversation.
 *
 * Run: node --expose-gc bench/loggedStep.bench.ts
 */
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as NodePath from "@effect/platform-node/NodePath"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import { do_not_optimize } from "mitata"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Conversation, layerLogged, layerMemory, type Prepared } from "../src/Conversation.ts"
import type { MessageParam } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { SessionLog } from "../src/SessionLog.ts"
import { layerSessionLog } from "../src/SessionStoreJsonl.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { generateSession } from "../test/fixtures/Conversation.ts"
import { cpuOfCall } from "./cpuTime.ts"
import { duration } from "./util.ts"

const platform = Layer.mergeAll(NodeFileSystem.layer, NodePath.layer)
/** Issue 43's worker: compaction at a 40k-token window. */
const policy = CompactionPolicy.makeUnsafe({ contextWindow: 40_000 })
/** The usage a provider would report for a request: its estimated tokens. */
const usageOf = (prepared: Prepared) => ({
  input_tokens: estimateTokens(prepared.request.messages as never),
  output_tokens: 200
})

/** A conversation under test: one step per call, the last request it prepared, and its disposal. */
export interface SteppedConversation {
  /** One step (prepare, reply, result); resolves to what the prepare returned. */
  readonly step: () => Promise<Prepared>
  /** The request of the last step (or of the drive, before any step). */
  readonly last: () => Prepared
  /** The requests the latest steps returned (at most `RECENT_REQUESTS`, oldest first; the drive's last before any). */
  readonly recent: () => ReadonlyArray<Prepared["request"]>
  /** Closes the conversation (and its log) and removes its directory. */
  readonly close: () => Promise<void>
}

/** How many of the latest steps' requests a conversation keeps for the stringify side (several compaction cycles). */
export const RECENT_REQUESTS = 256

/**
 * `JSON.stringify` of the requests `conversation`'s steps returned, one more per call, round the recent ones: the
 * stringify side of a ratio, each step against its own request.
 */
export const stringifyRecent = (conversation: SteppedConversation): () => string => {
  let i = 0
  return () => {
    const recent = conversation.recent()
    return JSON.stringify(recent[i++ % recent.length])
  }
}

/** Drives `session` through the conversation: user messages and results appended, a prepare before each reply. */
const drive = (session: ReadonlyArray<Message>) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    for (const message of session) {
      if (message.role === "assistant") {
        const prepared = yield* conversation.prepare
        yield* conversation.recordReply(message as MessageParam, usageOf(prepared), { requestEpoch: prepared.epoch })
      } else yield* conversation.append(message as MessageParam)
    }
    return yield* conversation.prepare
  })

/** One agent step on the service: prepare, a reply reading a file, its result. */
const stepOf = (n: number) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    const id = `toolu_logged_${n}`
    const path = `/bench/file_${n % 50}.ts`
    const reply: MessageParam = {
      role: "assistant",
      content: [{ type: "tool_use", id, name: "read", input: { path } }]
    }
    const result: MessageParam = {
      role: "user",
      content: [{ type: "tool_result", tool_use_id: id, content: `${path}\n${"line of code\n".repeat(50)}` }]
    }
    const prepared = yield* conversation.prepare
    yield* conversation.recordReply(reply, usageOf(prepared), { requestEpoch: prepared.epoch })
    yield* conversation.append(result)
    return prepared
  })

/**
 * Where a conversation lives: logged on the JSONL store (`jsonl`; `jsonl-deferred` with `sync: "deferred"`), logged
 * on the memory store (`log-memory`: the log's work without the file), or `layerMemory` (nothing logged).
 */
export type StepKind = "jsonl" | "jsonl-deferred" | "log-memory" | "memory"

/**
 * A conversation holding `session`, of `kind` (the JSONL store in a fresh temporary directory): each `step()` is one
 * more agent step on it.
 */
export const steppedConversation = async (
  session: ReadonlyArray<Message>,
  kind: StepKind
): Promise<SteppedConversation> => {
  const directory = kind.startsWith("jsonl") ? mkdtempSync(join(tmpdir(), "bench-logged-step-")) : undefined
  const conversation = kind === "memory" ? layerMemory({ policy }) : layerLogged({ policy }).pipe(
    Layer.provide(
      directory === undefined ? SessionLog.layerMemory({}) : layerSessionLog({
        directory,
        sessionId: "step",
        ...(kind === "jsonl-deferred" ? { sync: "deferred" } : {})
      }).pipe(Layer.provide(platform))
    )
  )
  const runtime = ManagedRuntime.make(conversation.pipe(Layer.provide(ExtractiveSummarizer.layer)))
  let last = await runtime.runPromise(drive(session))
  const recent: Array<Prepared["request"]> = [last.request]
  let n = 0
  return {
    step: async () => {
      last = await runtime.runPromise(stepOf(n++))
      if (n === 1) recent.length = 0
      recent.push(last.request)
      if (recent.length > RECENT_REQUESTS) recent.shift()
      return last
    },
    last: () => last,
    recent: () => recent,
    close: async () => {
      await runtime.dispose()
      if (directory !== undefined) rmSync(directory, { recursive: true, force: true })
    }
  }
}

/** Whether `text` holds a character beyond ASCII (which makes V8 build a two-byte string). */
const hasNonAscii = (text: string): boolean => {
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) > 0x7f) return true
  return false
}

/** The time of one `JSON.stringify(request)`: the mean of 8 calls after 2 untimed ones, in nanoseconds. */
const stringifyTime = (request: Prepared["request"]): number => {
  for (let i = 0; i < 2; i++) do_not_optimize(JSON.stringify(request))
  const started = performance.now()
  for (let i = 0; i < 8; i++) do_not_optimize(JSON.stringify(request))
  return (performance.now() - started) * 1e6 / 8
}

/** How many passes over the kinds the timed steps take, and how many steps of a kind a pass times. */
const PASSES = 3
const STEPS_PER_PASS = 1_000

/** The median of `xs` (the upper one of an even count). */
const median = (xs: ReadonlyArray<number>): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!

const isMain = import.meta.url === `file://${process.argv[1]}`
if (isMain) {
  const lines = [
    "| messages | requests | own-request stringify | smallest tenth | JSONL step | JSONL deferred | " +
    "log on the memory store | layerMemory step | JSONL / stringify | deferred / stringify | " +
    "memory-store log / stringify | layerMemory / stringify |",
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  ]
  const kinds: ReadonlyArray<StepKind> = ["jsonl", "jsonl-deferred", "log-memory", "memory"]
  const notes: Array<string> = []
  const sizes = (process.env.LOGGED_STEP_SIZES ?? "1000,10000,100000").split(",").map(Number)
  for (const size of sizes) {
    const session = generateSession(size, { messages: size, maxOutput: 4000 })
    const conversations: Array<SteppedConversation> = []
    for (const kind of kinds) {
      const conversation = await steppedConversation(session, kind)
      // warm (the JIT, and whole compaction cycles of requests) before the timed steps
      for (let i = 0; i < RECENT_REQUESTS; i++) await conversation.step()
      conversations.push(conversation)
    }
    // by CPU time, one step a sample (`bench/cpuTime.ts`, as `bench:ci` times it), each kind's steps back to back (as
    // an agent steps one conversation), in `PASSES` passes over the kinds, the JSONL conversation's pass followed by the
    // stringify of the last `RECENT_REQUESTS` requests it returned: the median of each kind's per-pass medians
    const medians: Array<Array<number>> = kinds.map(() => [])
    const stringifyMedians: Array<number> = []
    const requests: Array<Prepared["request"]> = []
    const each: Array<number> = []
    for (let pass = 0; pass < PASSES; pass++) {
      for (let k = 0; k < kinds.length; k++) {
        const samples: Array<number> = []
        for (let i = 0; i < STEPS_PER_PASS; i++) samples.push(await cpuOfCall(() => conversations[k]!.step()))
        medians[k]!.push(median(samples))
        if (k === 0) {
          const own = conversations[0]!.recent()
          const times = own.map(stringifyTime)
          requests.push(...own)
          each.push(...times)
          stringifyMedians.push(median(times))
        }
      }
    }
    const steps = medians.map(median)
    const stringify = median(stringifyMedians)
    for (const conversation of conversations) await conversation.close()
    // the stringify of the smallest tenth of the requests
    const sorted = [...each].sort((a, b) => a - b)
    const smallest = sorted[Math.floor(sorted.length / 20)]!
    const sizesOf = requests.map((r) => r.messages.length).sort((a, b) => a - b)
    const bytes = requests.map((r) => JSON.stringify(r).length)
    const perByte = requests.map((_, i) => each[i]! / bytes[i]!)
    const under = perByte.filter((_, i) => bytes[i]! < 65_536)
    const over = perByte.filter((_, i) => bytes[i]! >= 65_536)
    const perByteMedian = (xs: ReadonlyArray<number>) => xs.length === 0 ? "-" : `${median(xs).toFixed(2)} ns`
    notes.push(
      `${size.toLocaleString("en")} messages: ${requests.length} requests of ${
        Math.min(...bytes).toLocaleString("en")
      }` +
        ` to ${Math.max(...bytes).toLocaleString("en")} bytes, ` +
        `${requests.filter((r) => hasNonAscii(JSON.stringify(r))).length} holding non-ASCII text; ` +
        `stringify per byte: ${perByteMedian(under)} under 64 KiB (${under.length}), ${
          perByteMedian(over)
        } from 64 KiB (${over.length})`
    )
    lines.push(
      `| ${size.toLocaleString("en")} | ${sizesOf[0]}–${sizesOf.at(-1)} messages | ${duration(stringify)} | ` +
        `${duration(smallest)} | ${steps.map(duration).join(" | ")} | ` +
        `${steps.map((t) => (t / stringify).toFixed(2)).join(" | ")} |`
    )
  }
  console.log(lines.join("\n"))
  console.log(`\n${notes.join("\n")}`)
}
