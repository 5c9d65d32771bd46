/**
 * The session of issue 29's resume goal, for `bench/sessiontail.bench.ts` and `bench/ci.ts`: 50,000 entries with 20
 * compactions, written through `SessionLog` on the JSONL store (so its lines are the ones a store holds, and the
 * file has the tail index its writer leaves).
 */
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as NodePath from "@effect/platform-node/NodePath"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { type Message, userText } from "../src/Message.ts"
import { SessionLog } from "../src/SessionLog.ts"
import { layerSessionLog } from "../src/SessionStoreJsonl.ts"
import { turnStarts } from "../src/Turns.ts"
import { generateSession, prng } from "../test/fixtures/Conversation.ts"
import { applyStep, decide, performStep, type Step } from "../test/fixtures/SessionScript.ts"

const ENTRIES = 50_000
const COMPACTIONS = 20

/**
 * A 50,000-entry session written to `<directory>/big.jsonl` (and its `big.tail`): messages, evictions (~9%) and a
 * compaction every 1/21 of the way that keeps what a policy keeps, the turns of the last ~100 messages (the cut is
 * the last turn start at least 100 messages from the end). Returns its lines.
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
      // the messages between two other steps in one append (one line each, as one by one, but one write)
      let messages: Array<Message> = []
      for (const step of steps.slice(0, ENTRIES)) {
        if (step._tag === "append") {
          messages.push(step.message)
          continue
        }
        if (messages.length > 0) yield* log.append(messages)
        messages = []
        yield* performStep(log, step)
      }
      if (messages.length > 0) yield* log.append(messages)
    }).pipe(Effect.provide(
      layerSessionLog({ directory, sessionId: "big", sync: "never" }).pipe(
        Layer.provide(Layer.mergeAll(NodeFileSystem.layer, NodePath.layer))
      )
    ))
  ).then(() => {
    const lines = readFileSync(join(directory, "big.jsonl"), "utf8").split("\n")
    lines.pop()
    return lines
  })
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
