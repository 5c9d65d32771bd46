/**
 * One logged `Conversation` step against `JSON.stringify` of the request it returns (issue 43: a logged step costs at
 * most 0.2x serializing its request), at 1k and 10k messages, with the same step on `layerMemory` beside it.
 *
 * A step is what an agent loop does between two model calls: `prepare`, `recordReply` of a reply that reads a file
 * (its usage the request's estimated tokens, as a provider would report), `append` of its result. The logged
 * conversation runs on `SessionStoreJsonl.layerSessionLog` (Node's file system, the default durability: fsync after
 * compactions only) in a temporary directory. As in issue 43's worker, the policy compacts at a 40k-token window, so
 * the request stays a few hundred messages while the history grows: each conversation starts from a generated session
 * (tool outputs up to 4,000 characters) driven through it once, untimed, then every timed step adds one more reply
 * and result to the same conversation (the median step is one that does not compact).
 *
 * Run: node --expose-gc bench/loggedStep.bench.ts
 */
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as NodePath from "@effect/platform-node/NodePath"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as ManagedRuntime from "effect/ManagedRuntime"
import { do_not_optimize, measure } from "mitata"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Conversation, layerLogged, layerMemory, type Prepared } from "../src/Conversation.ts"
import type { MessageParam } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { layerSessionLog } from "../src/SessionStoreJsonl.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { generateSession } from "../test/fixtures/Conversation.ts"
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
  /** Closes the conversation (and its log) and removes its directory. */
  readonly close: () => Promise<void>
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
 * A conversation holding `session`, logged on the JSONL store in a fresh temporary directory (`logged`) or in memory:
 * each `step()` is one more agent step on it.
 */
export const steppedConversation = async (
  session: ReadonlyArray<Message>,
  logged: boolean
): Promise<SteppedConversation> => {
  const directory = logged ? mkdtempSync(join(tmpdir(), "bench-logged-step-")) : undefined
  const conversation = directory === undefined ? layerMemory({ policy }) : layerLogged({ policy }).pipe(
    Layer.provide(layerSessionLog({ directory, sessionId: "step" }).pipe(Layer.provide(platform)))
  )
  const runtime = ManagedRuntime.make(conversation.pipe(Layer.provide(ExtractiveSummarizer.layer)))
  let last = await runtime.runPromise(drive(session))
  let n = 0
  return {
    step: async () => {
      last = await runtime.runPromise(stepOf(n++))
      return last
    },
    last: () => last,
    close: async () => {
      await runtime.dispose()
      if (directory !== undefined) rmSync(directory, { recursive: true, force: true })
    }
  }
}

const isMain = import.meta.url === `file://${process.argv[1]}`
if (isMain) {
  const lines = [
    "| messages | logged step | memory step | stringify of the request | logged / stringify | memory / stringify |",
    "| ---: | ---: | ---: | ---: | ---: | ---: |"
  ]
  for (const size of [1_000, 10_000]) {
    const session = generateSession(size, { messages: size, maxOutput: 4000 })
    const logged = await steppedConversation(session, true)
    const memory = await steppedConversation(session, false)
    const options = { min_samples: 50, max_samples: 400 }
    const loggedStep = (await measure(async () => do_not_optimize(await logged.step()), options)).p50
    const memoryStep = (await measure(async () => do_not_optimize(await memory.step()), options)).p50
    const body = logged.last().request
    const sent = memory.last().request
    console.log(`${size}: request ${body.messages.length} messages (memory ${sent.messages.length})`)
    const stringify = (await measure(() => do_not_optimize(JSON.stringify(body)))).p50
    lines.push(
      `| ${size.toLocaleString("en")} | ${duration(loggedStep)} | ${duration(memoryStep)} | ${duration(stringify)} | ` +
        `${(loggedStep / stringify).toFixed(2)} | ${(memoryStep / stringify).toFixed(2)} |`
    )
    await logged.close()
    await memory.close()
  }
  console.log(lines.join("\n"))
}
