/**
 * `compact()` asked while a tool call waits for its result (the user typed `/compact` while the tool runs) leaves the
 * call alone: a pass with nothing to cut is `Skipped` and changes nothing (the state, the JSONL log's bytes, no
 * warning), and a pass that compacts cuts before the reply that made the call, which stays in the kept tail with
 * everything after it, still pending. The real result that arrives next is taken, and the request prepared after it
 * is judged by the independent checker (test/fixtures/ApiRules.ts). On `layerMemory`, `layerLogged` over a JSONL
 * file (resumed with the call still waiting) and `PromiseConversation`.
 */
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as NodePath from "@effect/platform-node/NodePath"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Logger } from "effect"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { CompactOutcome } from "../src/Compact.ts"
import { Conversation, layerLogged, layerMemory } from "../src/Conversation.ts"
import type { ConversationState, MessageParam } from "../src/ConversationState.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { PromiseConversation } from "../src/index.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { layerSessionLog } from "../src/SessionStoreJsonl.ts"
import { checkApiRules, checkRequest, formatApiViolations } from "./fixtures/ApiRules.ts"

const policy = CompactionPolicy.makeUnsafe({ compactAtTokens: 20_000 })

const user = (text: string): MessageParam => ({ role: "user", content: text })
const calls = (...ids: ReadonlyArray<string>): MessageParam => ({
  role: "assistant",
  content: ids.map((id) => ({ type: "tool_use" as const, id, name: "bash", input: { command: `run ${id}` } }))
})
/** A small reported usage, so that the trigger reads it (and never fires here). */
const usage = { input_tokens: 100, output_tokens: 10 }
const said = (text: string): MessageParam => ({ role: "assistant", content: [{ type: "text", text }] })
const result = (id: string, content: string): MessageParam => ({
  role: "user",
  content: [{ type: "tool_result", tool_use_id: id, content }]
})

const MIGRATED = "migrated 42 tables"
const SEEDED = "seeded 7 rows"

/** The index of the message holding the `tool_use` `id`, judged here. */
const callAt = (view: ReadonlyArray<MessageParam>, id: string): number =>
  view.findIndex((m) =>
    typeof m.content !== "string" && m.content.some((b) => b.type === "tool_use" && (b as { id: string }).id === id)
  )

/** The tool_result blocks answering `id` in `view`, judged here. */
const resultsFor = (view: ReadonlyArray<unknown>, id: string): ReadonlyArray<{ readonly content?: unknown }> =>
  (view as ReadonlyArray<MessageParam>).flatMap((m) =>
    typeof m.content === "string"
      ? []
      : m.content.filter((b) =>
        b.type === "tool_result" && (b as { tool_use_id: string }).tool_use_id === id
      ) as ReadonlyArray<{ readonly content?: unknown }>
  )

/** The state's fields a step changes (the request bookkeeping `issued` aside: `compact` returns a request). */
const stepFields = (state: ConversationState) => {
  const { issued: _issued, ...rest } = state
  return rest
}

const assertValidRequest = (request: { readonly messages: ReadonlyArray<unknown> }, where: string) => {
  const violations = checkRequest(request as never)
  assert.deepStrictEqual(violations, [], `${where}: ${formatApiViolations(violations)}`)
}

/** Eight finished turns of about 1,000 tokens each, recorded without a `prepare` (the trigger never runs). */
const history = Effect.gen(function* () {
  const conversation = yield* Conversation
  for (let k = 0; k < 8; k++) {
    yield* conversation.append(user(`task ${k}: read src/file${k}.ts`))
    yield* conversation.recordReply(calls(`toolu_h${k}`), usage)
    yield* conversation.append(result(`toolu_h${k}`, `line ${k}\n`.repeat(500)))
    yield* conversation.recordReply(said(`read file ${k}`), usage)
  }
})

/** Warnings logged while `effect` runs. */
const withWarnings = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const warnings: Array<string> = []
    const value = yield* effect.pipe(
      Effect.provide(Logger.layer([Logger.make((o) => void warnings.push(String(o.message)))]))
    )
    return { value, warnings }
  })

/**
 * A call waits (`toolu_mig`), `compact()` is asked twice (by the policy, and `upTo` past the call): both `Skipped`,
 * the state unchanged, no warning; `bytes` reads the log's file, unchanged too when there is one. Then the real result.
 */
const skippedWhileWaiting = (bytes: () => string) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    yield* conversation.append(user("Run the migration."))
    yield* conversation.recordReply(calls("toolu_mig"), usage)
    const before = yield* conversation.state
    const logBefore = bytes()
    for (const options of [undefined, { upTo: before.view.length }]) {
      const { value: compacted, warnings } = yield* withWarnings(conversation.compact(options))
      assert.strictEqual(compacted.outcome._tag, "Skipped")
      const after = yield* conversation.state
      assert.deepStrictEqual(stepFields(after), stepFields(before), "a skipped compaction changes nothing")
      assert.deepStrictEqual(after.pending.map((p) => p.originalId), ["toolu_mig"])
      assert.strictEqual(bytes(), logBefore, "nothing is logged")
      assert.deepStrictEqual(warnings, [], "no call was answered as interrupted")
      // `upTo` past the call: held back before its reply, which the skip says
      if (options !== undefined) {
        const skipped = compacted.outcome as Extract<CompactOutcome, { _tag: "Skipped" }>
        assert.match(skipped.detail, /waiting for their results/, "the skip says that a call is waiting")
      }
    }

    yield* conversation.append(result("toolu_mig", MIGRATED))
    const answered = yield* conversation.state
    assert.deepStrictEqual(answered.pending, [])
    const got = resultsFor(answered.view, "toolu_mig")
    assert.deepStrictEqual(got.map((b) => b.content), [MIGRATED], "the real result is the call's only one")
    const prepared = yield* conversation.prepare
    assertValidRequest(prepared.request, "the request after the result")
    assert.deepStrictEqual(resultsFor(prepared.request.messages, "toolu_mig").map((b) => b.content), [MIGRATED])
  })

/**
 * After `history`, a reply makes two calls; one is answered, the other waits (`toolu_mig`); `compact({ upTo })` past
 * it compacts before that reply, which stays with the answered result after it, the other call still pending.
 */
const compactedWhileWaiting = Effect.gen(function* () {
  const conversation = yield* Conversation
  yield* history
  yield* conversation.append(user("Run the migration and seed the database."))
  yield* conversation.recordReply(calls("toolu_mig", "toolu_seed"), usage)
  yield* conversation.append(result("toolu_seed", SEEDED))
  const before = yield* conversation.state
  const reply = callAt(before.view, "toolu_mig")
  const waiting = before.view.slice(reply)
  const { value: compacted, warnings } = yield* withWarnings(conversation.compact({ upTo: before.view.length }))
  const outcome = compacted.outcome
  assert.strictEqual(outcome._tag, "Compacted", outcome._tag === "Skipped" ? outcome.detail : "")
  const info = outcome as Extract<CompactOutcome, { _tag: "Compacted" }>
  assert.isAtMost(info.cut.kept.from, reply, "the cut lies before the reply whose call waits")
  const after = yield* conversation.state
  assert.strictEqual(after.epoch, before.epoch + 1)
  assert.isBelow(after.view.length, before.view.length)
  assert.deepStrictEqual(after.view.slice(-waiting.length), waiting, "the reply and what follows it are kept")
  assert.deepStrictEqual(after.pending, before.pending, "the call still waits")
  assert.deepStrictEqual(resultsFor(after.view, "toolu_mig"), [], "no result was made up for it")
  assert.deepStrictEqual(warnings, [])
  return after
})

/** The real result of the waiting call arrives: taken, and the next request is valid and holds it. */
const resultArrives = Effect.gen(function* () {
  const conversation = yield* Conversation
  yield* conversation.append(result("toolu_mig", MIGRATED))
  const state = yield* conversation.state
  assert.deepStrictEqual(state.pending, [])
  assert.deepStrictEqual(resultsFor(state.view, "toolu_mig").map((b) => b.content), [MIGRATED])
  assert.deepStrictEqual(checkApiRules(state.view as never), [], "the view")
  const prepared = yield* conversation.prepare
  assertValidRequest(prepared.request, "the request after the result")
  assert.deepStrictEqual(resultsFor(prepared.request.messages, "toolu_mig").map((b) => b.content), [MIGRATED])
  assert.deepStrictEqual(resultsFor(prepared.request.messages, "toolu_seed").map((b) => b.content), [SEEDED])
  return state
})

const summarizer = ExtractiveSummarizer.layer

const jsonl = (directory: string) =>
  layerSessionLog({ directory, sessionId: "s" }).pipe(
    Layer.provide(Layer.mergeAll(NodeFileSystem.layer, NodePath.layer))
  )
const logged = (directory: string) =>
  layerLogged({ policy }).pipe(Layer.provide(jsonl(directory)), Layer.provide(summarizer))

describe("compact() while a tool call waits for its result", () => {
  it.live("on layerMemory: a skipped pass changes nothing and the real result is taken", () =>
    skippedWhileWaiting(() => "").pipe(Effect.provide(layerMemory({ policy }).pipe(Layer.provide(summarizer)))))

  it.live("on layerMemory: a pass cuts before the waiting call's reply, which stays pending", () =>
    Effect.gen(function* () {
      yield* compactedWhileWaiting
      yield* resultArrives
    }).pipe(Effect.provide(layerMemory({ policy }).pipe(Layer.provide(summarizer)))))

  it.live("on a JSONL log: a skipped pass writes nothing and the real result is logged", () =>
    Effect.gen(function* () {
      const directory = mkdtempSync(join(tmpdir(), "compact-open-call-"))
      const file = join(directory, "s.jsonl")
      yield* skippedWhileWaiting(() => readFileSync(file, "utf8")).pipe(Effect.provide(logged(directory)))
      const resumed = yield* Effect.flatMap(Effect.service(Conversation), (c) => c.state).pipe(
        Effect.provide(logged(directory))
      )
      assert.deepStrictEqual(resultsFor(resumed.view, "toolu_mig").map((b) => b.content), [MIGRATED])
      rmSync(directory, { recursive: true, force: true })
    }))

  it.live("on a JSONL log: the compaction is logged with the call open, a resume still waits for it", () =>
    Effect.gen(function* () {
      const directory = mkdtempSync(join(tmpdir(), "compact-open-call-"))
      const live = yield* compactedWhileWaiting.pipe(Effect.provide(logged(directory)))
      const answered = yield* Effect.gen(function* () {
        const resumed = yield* Effect.flatMap(Effect.service(Conversation), (c) => c.state)
        assert.deepStrictEqual(resumed.view, live.view, "the resume rebuilds the compacted view")
        assert.deepStrictEqual(resumed.pending, live.pending, "the resumed conversation still waits for the call")
        return yield* resultArrives
      }).pipe(Effect.provide(logged(directory)))
      const again = yield* Effect.flatMap(Effect.service(Conversation), (c) => c.state).pipe(
        Effect.provide(logged(directory))
      )
      assert.deepStrictEqual(again.view, answered.view, "the real result is in the log")
      rmSync(directory, { recursive: true, force: true })
    }))
})

describe("PromiseConversation.compact while a tool call waits for its result", () => {
  it("skips without answering the call, and takes the real result", async () => {
    const directory = mkdtempSync(join(tmpdir(), "compact-open-call-"))
    const file = join(directory, "s.jsonl")
    try {
      const conversation = await PromiseConversation.open({
        log: { type: "jsonl", directory, sessionId: "s" },
        system: "agent",
        policy
      })
      await conversation.append(user("Run the migration."))
      await conversation.recordReply(calls("toolu_mig"), usage)
      const before = await conversation.state()
      const logBefore = readFileSync(file, "utf8")
      const compacted = await conversation.compact()
      assert.strictEqual(compacted.outcome._tag, "Skipped")
      assert.deepStrictEqual(stepFields(await conversation.state()), stepFields(before))
      assert.strictEqual(readFileSync(file, "utf8"), logBefore, "nothing is logged")
      await conversation.append(result("toolu_mig", MIGRATED))
      const prepared = await conversation.prepare()
      assertValidRequest(prepared.request, "the request after the result")
      assert.deepStrictEqual(resultsFor(prepared.request.messages, "toolu_mig").map((b) => b.content), [MIGRATED])
      await conversation.close()
      const reopened = await PromiseConversation.open({ log: { type: "jsonl", directory, sessionId: "s" }, policy })
      const view = (await reopened.state()).view
      await reopened.close()
      assert.deepStrictEqual(resultsFor(view, "toolu_mig").map((b) => b.content), [MIGRATED], "logged")
    } finally {
      rmSync(directory, { recursive: true, force: true })
    }
  })

  it("compacts before the waiting call's reply and takes the real result", async () => {
    const conversation = await PromiseConversation.open({ policy })
    try {
      for (let k = 0; k < 8; k++) {
        await conversation.append(user(`task ${k}: read src/file${k}.ts`))
        await conversation.recordReply(calls(`toolu_h${k}`), usage)
        await conversation.append(result(`toolu_h${k}`, `line ${k}\n`.repeat(500)))
        await conversation.recordReply(said(`read file ${k}`), usage)
      }
      await conversation.append(user("Run the migration."))
      await conversation.recordReply(calls("toolu_mig"), usage)
      const before = await conversation.state()
      const compacted = await conversation.compact({ upTo: before.view.length })
      assert.strictEqual(compacted.outcome._tag, "Compacted")
      const after = await conversation.state()
      assert.deepStrictEqual(after.view.at(-1), before.view.at(-1), "the reply with the waiting call is kept")
      assert.deepStrictEqual(after.pending, before.pending)
      await conversation.append(result("toolu_mig", MIGRATED))
      const prepared = await conversation.prepare()
      assertValidRequest(prepared.request, "the request after the result")
      assert.deepStrictEqual(resultsFor(prepared.request.messages, "toolu_mig").map((b) => b.content), [MIGRATED])
    } finally {
      await conversation.close()
    }
  })
})
