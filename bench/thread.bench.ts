/**
 * An append-only step on a server-held thread (issue 29, with the thread rules of API-RULES 22–24), on sessions of
 * 1k, 10k and 50k messages: the request a `continue` sends holds only the messages after the anchored reply, so its
 * serialized body is the same size whatever the session's length, and it is built without copying the view.
 *
 * A step is `conversationStep`'s on a thread: the SDK reply to the request the state sent (a read of a file no
 * earlier step read, so no read supersedes another), its result, `prepareStep` with `threads` and the request as it
 * goes on the thread (`requestOf` with `thread`). The rows:
 * - body bytes: the median size of the `continue` bodies (`JSON.stringify`) over 50 steps;
 * - build: `requestOf(state, system, { thread: true })` on a state whose next request continues its thread;
 * - whole: the same state's whole request (`requestOf` without `thread`, what a step off threads builds: the view
 *   copied), for scale.
 *
 * Run: npx node bench/thread.bench.ts
 */
import { do_not_optimize, measure } from "mitata"
import {
  appendMessage,
  type ConversationState,
  type MessageParam,
  prepareStep,
  recordReply,
  type SdkReply
} from "../src/ConversationState.ts"
import { type Request, requestOf } from "../src/Request.ts"
import type { Message } from "../src/Message.ts"
import { generateSession } from "../test/fixtures/Conversation.ts"
import { stateOf } from "./conversation.bench.ts"
import { duration } from "./util.ts"

/** The system prompt every bench request carries. */
export const THREAD_SYSTEM = "You are a coding agent."

/**
 * One agent step on a thread: the reply to the request `state` sent (an SDK reply the server holds), its result, the
 * prepare, and the request as it goes on the thread.
 */
export const threadStep = (
  state: ConversationState,
  n: number
): { readonly state: ConversationState; readonly before: ConversationState; readonly request: Request } => {
  const id = `toolu_thread_${n}`
  const path = `/bench/thread_${n}.ts`
  const reply: SdkReply = {
    id: `msg_thread_${n}`,
    type: "message",
    role: "assistant",
    content: [{ type: "tool_use", id, name: "read", input: { path } } as { readonly type: string }],
    stop_reason: "tool_use",
    usage: { input_tokens: 1000, output_tokens: 50 }
  }
  const result: MessageParam = {
    role: "user",
    content: [{ type: "tool_result", tool_use_id: id, content: `${path}\n${"line of code\n".repeat(200)}` }]
  }
  const replied = recordReply(state, reply, undefined, state.epoch, { sent: state.view.length }).state
  const answered = appendMessage(replied, result).state
  const prepared = prepareStep(answered, { threads: true }).transition.state
  return {
    state: prepared,
    before: answered,
    request: requestOf(prepared, THREAD_SYSTEM, { before: answered, thread: true })
  }
}

/**
 * `session` on a thread: prepared once, then `steps` thread steps. Returns the median
 * byte size of the `continue` bodies among them (each `JSON.stringify`'s length, what the SDK serializes), how many
 * continued, and the last step whose request continues its thread (to time the body's build on).
 */
export const threadSteps = (session: ReadonlyArray<Message>, steps: number): {
  readonly bodyBytes: number
  readonly continues: number
  readonly continuing: { readonly state: ConversationState; readonly before: ConversationState } | undefined
} => {
  let state = stateOf(session)
  const sizes: Array<number> = []
  let continuing: { readonly state: ConversationState; readonly before: ConversationState } | undefined
  for (let n = 0; n < steps; n++) {
    const step = threadStep(state, n)
    state = step.state
    if (step.request.thread?.type === "continue") {
      sizes.push(JSON.stringify(step.request).length)
      continuing = { state: step.state, before: step.before }
    }
  }
  sizes.sort((a, b) => a - b)
  return { bodyBytes: sizes[sizes.length >> 1] ?? Number.NaN, continues: sizes.length, continuing }
}

const isMain = import.meta.url === `file://${process.argv[1]}`
if (isMain) {
  const lines = [
    "| messages | continues of 50 steps | body bytes (median) | build the continue | build the whole request |",
    "| ---: | ---: | ---: | ---: | ---: |"
  ]
  const bytes = new Map<number, number>()
  const builds = new Map<number, number>()
  for (const size of [1_000, 10_000, 50_000]) {
    const run = threadSteps(generateSession(size, { messages: size }), 50)
    const at = run.continuing
    if (at === undefined) throw new Error(`${size} messages: no step continued its thread`)
    const build = (await measure(() =>
      do_not_optimize(requestOf(at.state, THREAD_SYSTEM, { before: at.before, thread: true }))
    )).p50
    const whole = (await measure(() => do_not_optimize(requestOf(at.state, THREAD_SYSTEM, { before: at.before }))))
      .p50
    bytes.set(size, run.bodyBytes)
    builds.set(size, build)
    lines.push(
      `| ${size.toLocaleString("en")} | ${run.continues} | ${run.bodyBytes.toLocaleString("en")} | ${
        duration(build)
      } | ${duration(whole)} |`
    )
  }
  lines.push(
    "",
    `body bytes 50k / 1k: ${(bytes.get(50_000)! / bytes.get(1_000)!).toFixed(3)}; ` +
      `build 50k / 1k: ${(builds.get(50_000)! / builds.get(1_000)!).toFixed(2)}`
  )
  console.log(lines.join("\n"))
}
