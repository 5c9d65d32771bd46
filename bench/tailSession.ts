/**
 * The session of issue 29's resume goal, for `bench/sessiontail.bench.ts` and `bench/ci.ts`: 50,000 entries with 20
 * compactions, written through `SessionLog` on the JSONL store (so its lines are the ones a store holds, and the
 * file has the tail index its writer leaves), each boundary with the checkpoint a `Conversation` stores in it; and
 * the checks a bench makes before it times an open.
 */
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as NodePath from "@effect/platform-node/NodePath"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { Conversation } from "../src/Conversation.ts"
import type { ConversationState } from "../src/ConversationState.ts"
import { resumeState } from "../src/internal/conversation/resume.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { HotPaths } from "../src/HotPaths.ts"
import { checkpointMeta } from "../src/internal/conversation/checkpoint.ts"
import { META_KEY, offloadsOf } from "../src/internal/conversation/record.ts"
import type { Message } from "../src/Message.ts"
import type { Loaded } from "../src/SessionEntry.ts"
import { SessionLog } from "../src/SessionLog.ts"
import { layerSessionLog, readJsonl } from "../src/SessionStoreJsonl.ts"
import { turnStarts } from "../src/Turns.ts"
import { generateSession, prng } from "../test/fixtures/Conversation.ts"
import { exactState, foldedFromStart } from "../test/fixtures/ResumeReference.ts"
import { applyStep, decide, performStep, type Step } from "../test/fixtures/SessionScript.ts"
import { userText } from "../src/internal/blocks.ts"

const platform = Layer.mergeAll(NodeFileSystem.layer, NodePath.layer)

const ENTRIES = 50_000
const COMPACTIONS = 20

/**
 * A 50,000-entry session written to `<directory>/big.jsonl` (and its `big.tail`): messages, evictions (~9%) and a
 * compaction every 1/21 of the way that keeps what a policy keeps, the turns of the last ~100 messages (the cut is
 * the last turn start at least 100 messages from the end). Each boundary carries the checkpoint a `Conversation`
 * would have stored there (the hot paths of every message and offload before it, and the epoch), so a conversation
 * resumes from its tail. Returns its lines.
 */
export const tailSession = (directory: string): Promise<ReadonlyArray<string>> => {
  const rand = prng(29)
  const messages = generateSession(29, { messages: 46_000, maxOutput: 2000 })
  const every = Math.floor(messages.length / (COMPACTIONS + 1))
  const steps: Array<Step> = []
  let view: Array<Message> = []
  const take = (step: Step | undefined) => {
    if (step === undefined) return
    steps.push(step)
    view = applyStep(view, step)
  }
  messages.forEach((message, i) => {
    take({ _tag: "append", message })
    if (rand() < 0.09) take(decide(view, { _tag: "evict", pick: Math.floor(rand() * 1000) }, steps.length))
    if (i % every === every - 1 && i < every * COMPACTIONS + 1) {
      const starts = turnStarts(view).filter((s) => s > 0 && s <= view.length - 100)
      const cut = starts.at(-1)
      if (cut !== undefined) take({ _tag: "compact", cut, summary: userText(`[summary ${i}] ${cut} messages`) })
    }
  })
  return Effect.runPromise(
    Effect.gen(function* () {
      const log = yield* SessionLog
      // the state a conversation would hold, for the checkpoints
      let hot = HotPaths.empty()
      let epoch = 0
      // the messages between two other steps in one append (one line each, as one by one, but one write)
      let messages: Array<Message> = []
      for (const step of steps.slice(0, ENTRIES)) {
        if (step._tag === "append") {
          messages.push(step.message)
          continue
        }
        if (messages.length > 0) yield* log.append(messages)
        hot = hot.observe(messages)
        messages = []
        if (step._tag === "evict") {
          yield* performStep(log, step)
          hot = hot.observeOffloads(offloadsOf(step.evictions))
          continue
        }
        epoch++
        const snapshot = yield* log.snapshot
        yield* log.recordCompaction({
          view: [step.summary, ...snapshot.view.slice(step.cut)],
          snapshot,
          cut: step.cut,
          summarizer: "test-extractive",
          meta: checkpointMeta(META_KEY, { hot, epoch })
        })
      }
      if (messages.length > 0) yield* log.append(messages)
    }).pipe(Effect.provide(
      layerSessionLog({ directory, sessionId: "big", sync: "never" }).pipe(
        Layer.provide(platform)
      )
    ))
  ).then(() => {
    const lines = readFileSync(join(directory, "big.jsonl"), "utf8").split("\n")
    lines.pop()
    return lines
  })
}

/** The JSONL session's opens (as `bench/tailSql.ts` gives the SQL one's): from the tail (a read, the writer's) and in
 * full, and the writer's log (a fresh layer: each use opens it anew) from the tail or in full, for a conversation. */
export const jsonlOpens = (directory: string) => {
  const log = (tail: boolean) =>
    layerSessionLog({ directory, sessionId: "big", tail, sync: "never" }).pipe(Layer.provide(platform), Layer.fresh)
  return {
    tail: readJsonl({ directory, sessionId: "big", tail: true }).pipe(Effect.provide(platform)),
    full: readJsonl({ directory, sessionId: "big" }).pipe(Effect.provide(platform)),
    writer: Effect.flatMap(Effect.service(SessionLog), (l) => l.loaded).pipe(Effect.provide(log(true))),
    log
  }
}

/**
 * Throws unless `opened` folded to `full`'s view, entry ids, `seq` and head and was read from its tail
 * (`verifiedFrom` set): the check every bench makes before it times a tail open.
 */
export const checkTailFold = (
  what: string,
  opened: {
    readonly view: unknown
    readonly entryIds: unknown
    readonly seq: number
    readonly head: unknown
    readonly verifiedFrom?: number | undefined
  },
  full: { readonly view: unknown; readonly entryIds: unknown; readonly seq: number; readonly head: unknown }
): void => {
  const same = (l: typeof full) => JSON.stringify([l.view, l.entryIds, l.seq, l.head])
  if (same(opened) !== same(full)) throw new Error(`the ${what} tail's fold is not the full fold`)
  if (opened.verifiedFrom === undefined) throw new Error(`the ${what} open read the whole log`)
}

/** The conversation a log resumes to, opened as a worker opens it (`Conversation.layerLogged` over `log`). */
export const conversationOpen = <E>(log: Layer.Layer<SessionLog, E>): Effect.Effect<ConversationState, unknown> =>
  Effect.flatMap(Effect.service(Conversation), (c) => c.state).pipe(
    Effect.provide(
      Conversation.layerLogged().pipe(Layer.provide(log), Layer.provide(ExtractiveSummarizer.layer), Layer.fresh)
    )
  )

/**
 * Throws unless the conversation `state` opened from the log's tail equals the fold of every entry of `full` from
 * the start with no checkpoint (`test/fixtures/ResumeReference.ts`: view, hot paths with every previous read and
 * open call, epoch, pending calls, usage, reply, thread, unbound thinking), and the tail alone (`tail`) holds that epoch (only its checkpoint can: the compactions before it are not in
 * it).
 */
export const checkConversationResume = (
  what: string,
  state: ConversationState,
  tail: Loaded,
  full: Loaded
): void => {
  const reference = foldedFromStart(full)
  const exact = (s: ConversationState) => JSON.stringify(exactState(s))
  if (exact(state) !== exact(reference)) throw new Error(`the ${what} conversation is not the full fold's`)
  if (resumeState(tail).epoch !== reference.epoch) throw new Error(`the ${what} tail holds no checkpoint`)
}
