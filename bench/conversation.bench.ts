/**
 * One `Conversation` step on sessions of 1k, 10k and 50k messages, and the heap a 50k-message state retains.
 *
 * A step is what an agent loop does between two model calls when no compaction is due: record a reply that reads a
 * file, append its result, `prepareStep` (close pending calls, carried-forward eviction, trigger check) and build the
 * request (`requestOf`, breakpoints included). Each state starts from a generated session, prepared once (its eviction
 * index built, what is stale offloaded), so every timed step is a warm one. The rows:
 * - step: the whole step, median of up to 1,000 consecutive steps on the growing state;
 * - view copy: `view.concat([message])` alone (how `Conversation` appends), the linear part an immutable view array
 *   keeps;
 * - evict cold: `evictStaleToolResults` on the same view, what a step would cost without the carried decisions.
 * Then one copy of an array of messages below and above V8's large-object threshold (~16.4k elements), with the page
 * faults it takes: the reason the step is not flat past 10k. Then the heap the 50k state retains against the heap of
 * its messages (run with --expose-gc).
 *
 * Run: npx node --expose-gc bench/conversation.bench.ts
 */
import { do_not_optimize, measure } from "mitata"
import {
  appendMessage,
  asMessageParams,
  type ConversationState,
  emptyState,
  type MessageParam,
  prepareStep,
  recordReply
} from "../src/ConversationState.ts"
import { requestOf } from "../src/Request.ts"
import { evictStaleToolResults } from "../src/Evict.ts"
import { HotPaths } from "../src/HotPaths.ts"
import type { Message } from "../src/Message.ts"
import { generateSession } from "../test/fixtures/Conversation.ts"
import { perSample, perSampleOptions } from "./baselines.ts"
import { duration, mb, settledHeap } from "./util.ts"

/** A state holding `session` as its view, as a resumed conversation would, then prepared once. */
export const stateOf = (session: ReadonlyArray<Message>): ConversationState => {
  const view = asMessageParams(session)
  const state: ConversationState = { ...emptyState(), view, hot: HotPaths.fromMessages(session) }
  return prepareStep(state).transition.state
}

/** One agent step on `state`: a reply reading a file, its result, prepare, the request. Returns the new state. */
export const conversationStep = (state: ConversationState, n: number): ConversationState => {
  const id = `toolu_step_${n}`
  const path = `/bench/file_${n % 50}.ts`
  const reply: MessageParam = { role: "assistant", content: [{ type: "tool_use", id, name: "read", input: { path } }] }
  const result: MessageParam = {
    role: "user",
    content: [{ type: "tool_result", tool_use_id: id, content: `${path}\n${"line of code\n".repeat(200)}` }]
  }
  const replied = recordReply(state, reply, { input_tokens: 1000, output_tokens: 50 }).state
  const answered = appendMessage(replied, result).state
  const prepared = prepareStep(answered).transition.state
  do_not_optimize(requestOf(prepared, "You are a coding agent.", { before: answered }))
  return prepared
}

/** A mitata per-sample measurement of consecutive steps on one growing state. */
export const stepMeasure = (start: ConversationState, maxSamples: number) => {
  let state = start
  let n = 0
  return measure(perSample(() => 0, () => (state = conversationStep(state, n++))), perSampleOptions(maxSamples))
}

/**
 * One copy of an array of messages below and above V8's large-object threshold, with the minor page faults it takes:
 * why the step grows past 10k. A fresh array over 128 KiB of elements (~16.4k messages) is allocated in fresh pages,
 * and every page costs a fault on first touch.
 */
const copyCliff = async (): Promise<Array<string>> => {
  const messages = generateSession(50_000, { messages: 50_000 })
  const lines = [
    "| elements | one copy (`slice`) | per element | minor page faults per copy |",
    "| ---: | ---: | ---: | ---: |"
  ]
  for (const size of [10_000, 16_000, 16_500, 50_000]) {
    const list = messages.slice(0, size)
    const copy = (await measure(() => do_not_optimize(list.slice()))).p50
    const faults = process.resourceUsage().minorPageFault
    for (let k = 0; k < 200; k++) do_not_optimize(list.slice())
    const perCopy = (process.resourceUsage().minorPageFault - faults) / 200
    lines.push(
      `| ${size.toLocaleString("en")} | ${duration(copy)} | ${(copy / size).toFixed(2)} ns | ${perCopy.toFixed(1)} |`
    )
  }
  return lines
}

/**
 * The heap a generated 50k-message session takes, and the heap its `Conversation` state holds after 100 steps, the
 * messages included (bytes, after full collections); `undefined` when the runtime exposes no `gc`.
 */
export const stateMemory = ():
  | { readonly messageCount: number; readonly messages: number; readonly state: number }
  | undefined => {
  const heap = settledHeap()
  if (heap === undefined) return undefined
  // mitata's do_not_optimize keeps its last value in a global: empty it, or a probe counts what a benchmark left there
  const probe = () => {
    do_not_optimize(null)
    return heap()
  }
  const h0 = probe()
  const session = generateSession(50_001, { messages: 50_000 })
  const h1 = probe()
  let state = stateOf(session)
  for (let n = 0; n < 100; n++) state = conversationStep(state, n)
  const h2 = probe()
  do_not_optimize([session, state])
  do_not_optimize(null)
  return { messageCount: state.view.length, messages: h1 - h0, state: h2 - h0 }
}

const isMain = import.meta.url === `file://${process.argv[1]}`
if (isMain) {
  const lines = [
    "| messages | step | view copy | evict cold (no carried decisions) | step / evict cold |",
    "| ---: | ---: | ---: | ---: | ---: |"
  ]
  const steps = new Map<number, number>()
  for (const size of [1_000, 10_000, 50_000]) {
    const session = generateSession(size, { messages: size })
    const start = stateOf(session)
    const step = (await stepMeasure(start, 1000)).p50
    const view = start.view
    const extra: MessageParam = { role: "user", content: "one more" }
    const copy = (await measure(() => do_not_optimize(view.concat([extra])))).p50
    const cold = (await measure(() => do_not_optimize(evictStaleToolResults(session, 10)))).p50
    steps.set(size, step)
    lines.push(
      `| ${session.length.toLocaleString("en")} | ${duration(step)} | ${duration(copy)} | ${duration(cold)} | ${
        (step / cold).toFixed(3)
      } |`
    )
  }
  lines.push("", `step growth 50k / 10k: ${(steps.get(50_000)! / steps.get(10_000)!).toFixed(2)}`)
  lines.push("", ...(await copyCliff()))
  const memory = stateMemory()
  lines.push(
    "",
    memory === undefined
      ? "Memory: skipped (run with --expose-gc)."
      : `Memory, ${memory.messageCount.toLocaleString("en")} messages: the messages ${mb(memory.messages)}; the ` +
        `state after 100 steps retains ${mb(memory.state - memory.messages)} more (${
          ((memory.state - memory.messages) / memory.messages).toFixed(2)
        }× the messages; ${(memory.state / memory.messages).toFixed(2)}× with them)`
  )
  console.log(lines.join("\n"))
}
