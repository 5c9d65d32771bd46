/**
 * A conversation resumed from a log opened at its tail (`SessionLogOptions.tail`) is the live one: a real session of
 * `../shared/data` (the first 400 messages of `pi__before-compaction`) replayed with compactions through the JSONL store, closed and resumed from the tail every 40
 * requests, sends every request the uninterrupted run sends, byte for byte; and the state a tail-opened log resumes to
 * equals the full resume's (view, hot paths, epoch, pending calls, usage). The tail alone does not hold the epoch (the
 * compactions before it), which is why `layerLogged` reads the rest.
 */
import { NodeFileSystem, NodePath } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { replayMessages } from "../src/cli/Replay.ts"
import { Conversation, resumeState } from "../src/Conversation.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { SessionLog } from "../src/SessionLog.ts"
import { layerSessionLog } from "../src/SessionStoreJsonl.ts"
import { corpus } from "./fixtures/Corpus.ts"
import { comparableState, corpusPolicy, replayCorpus, usageOf } from "./fixtures/ConversationReplay.ts"

const platform = Layer.mergeAll(NodeFileSystem.layer, NodePath.layer)

describe("Conversation resumed from the log's tail", () => {
  it.effect(
    "a real session with compactions: every request equals the live run's, and the state the full resume's",
    () =>
      Effect.gen(function* () {
        // its first 400 messages: 15 compactions under the corpus policy, a few seconds a replay
        const whole = corpus().find((s) => s.name === "pi__before-compaction")!
        const session = { ...whole, messages: whole.messages.slice(0, 400) }
        const directory = mkdtempSync(join(tmpdir(), "conversation-tail-"))
        const log = (tail: boolean) =>
          layerSessionLog({ directory, sessionId: "s", tail, sync: "never" }).pipe(Layer.provide(platform))
        try {
          const live = yield* replayCorpus(session, undefined, corpusPolicy)
          const requests: Array<string> = []
          const summary = yield* replayMessages(session.messages, usageOf(session.messages), {
            policy: corpusPolicy,
            resumeEvery: 40,
            log: log(true),
            onRequest: (_, request) => Effect.sync(() => void requests.push(JSON.stringify(request)))
          }).pipe(Effect.provide(ExtractiveSummarizer.layer))
          assert.isAtLeast(summary.compactions, 2)
          assert.isAtLeast(summary.resumes, 3)
          assert.strictEqual(requests.length, live.requests.length)
          requests.forEach((r, i) =>
            assert.isTrue(r === live.requests[i], `request ${i + 1} differs from the live run`)
          )
          const opened = yield* Effect.gen(function* () {
            const conversation = yield* Conversation
            const l = yield* SessionLog
            return { state: yield* conversation.state, loaded: yield* l.loaded, full: yield* l.load() }
          }).pipe(
            Effect.provide(Conversation.layerLogged({ policy: corpusPolicy }).pipe(Layer.provideMerge(log(true)))),
            Effect.provide(ExtractiveSummarizer.layer)
          )
          assert.isAbove(opened.loaded.verifiedFrom ?? 1, 1, "the log opened from its tail")
          const full = resumeState(opened.full)
          assert.deepStrictEqual(comparableState(opened.state), comparableState(full))
          assert.strictEqual(opened.state.epoch, summary.compactions)
          // the tail's entries alone miss the compactions before it
          assert.isBelow(resumeState(opened.loaded).epoch, summary.compactions)
        } finally {
          rmSync(directory, { recursive: true, force: true })
        }
      }),
    180_000
  )
})
