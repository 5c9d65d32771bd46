/**
 * Leaving thinking out of a valid list (a compaction's `staleThinking: "strip"`, a request whose config cannot ask the
 * API to drop invalidated thinking) keeps it valid: generated agent conversations with mid-conversation system
 * messages, thinking-only replies (a `max_tokens` stop while thinking, Fable's empty thinking field) and interleaved
 * thinking, any set of their thinking blocks left out, judged by the independent checker (`fixtures/ApiRules.ts`).
 * Every other block stays, in order, and a system message moves only when its place is no longer allowed.
 */
import { assert, describe, it } from "@effect/vitest"
import type { ContentBlock, Message } from "../src/Message.ts"
import { withoutThinking, withoutThinkingAt } from "../src/internal/conversation/appendOnly.ts"
import { allThinking } from "../src/internal/thinkingBinding.ts"
import { checkApiRules, formatApiViolations } from "./fixtures/ApiRules.ts"
import { prng } from "./fixtures/Conversation.ts"

const CASES = 2_000

type Rand = () => number

/** A valid conversation: user turns, system messages where the API allows them, replies with and without thinking. */
const conversation = (rand: Rand): Array<Message> => {
  let id = 0
  let n = 0
  const thinking = (): ContentBlock =>
    ({ type: "thinking", thinking: rand() < 0.3 ? "" : `thought ${n++}`, signature: `sig${n++}` }) as ContentBlock
  const system = (): Message => ({ role: "system", content: [{ type: "text", text: `rule ${n++}` }] } as never)
  const out: Array<Message> = []
  const turns = 1 + Math.floor(rand() * 5)
  for (let t = 0; t < turns; t++) {
    out.push({ role: "user", content: [{ type: "text", text: `ask ${n++}` }] })
    const steps = 1 + Math.floor(rand() * 3)
    for (let s = 0; s < steps; s++) {
      // after a user turn, before the assistant one
      if (rand() < 0.3) out.push(system())
      const r = rand()
      if (r < 0.25) {
        // a reply that only thought, then the user goes on
        out.push({ role: "assistant", content: [thinking()] })
        out.push({ role: "user", content: [{ type: "text", text: `go on ${n++}` }] })
        continue
      }
      const blocks: Array<ContentBlock> = []
      if (rand() < 0.7) blocks.push(thinking())
      if (r < 0.5) {
        blocks.push({ type: "text", text: `answer ${n++}` } as ContentBlock)
        out.push({ role: "assistant", content: blocks })
        break
      }
      const calls: Array<string> = []
      const count = 1 + Math.floor(rand() * 2)
      for (let c = 0; c < count; c++) {
        const call = `call_${id++}`
        if (c > 0 && rand() < 0.5) blocks.push(thinking())
        blocks.push({ type: "tool_use", id: call, name: "bash", input: { command: call } } as ContentBlock)
        calls.push(call)
      }
      out.push({ role: "assistant", content: blocks })
      out.push({
        role: "user",
        content: calls.map((call) =>
          ({ type: "tool_result", tool_use_id: call, content: `out ${call}` }) as ContentBlock
        )
      })
    }
  }
  // the list may end on a system message too (it then ends the list)
  if (out.at(-1)!.role === "user" && rand() < 0.2) out.push(system())
  return out
}

const blocks = (m: Message): ReadonlyArray<ContentBlock> => typeof m.content === "string" ? [] : m.content

/** Every block of `list` that is not a thinking block, in order (system messages' blocks apart). */
const otherBlocks = (list: ReadonlyArray<Message>, role: "system" | "turns") =>
  list.filter((m) => (m.role === "system") === (role === "system")).flatMap((m) =>
    blocks(m).filter((b) => b.type !== "thinking")
  )

describe("withoutThinkingAt keeps a valid list valid", () => {
  it("any set of thinking blocks left out: no rule broken, every other block kept in order", () => {
    const rand = prng(0x7a1c)
    let emptied = 0
    let moved = 0
    for (let k = 0; k < CASES; k++) {
      const list = conversation(rand)
      const before = checkApiRules(list)
      assert.strictEqual(before.length, 0, `generated case ${k}: ${formatApiViolations(before)}`)
      const all = allThinking(list)
      const positions = k % 4 === 0 ? all : all.filter(() => rand() < 0.5)
      const out = withoutThinkingAt(list, positions)
      const after = checkApiRules(out)
      assert.strictEqual(after.length, 0, `case ${k}: ${formatApiViolations(after)}\n${JSON.stringify(out)}`)
      // only the thinking at `positions` went
      const left = out.flatMap((m) => blocks(m).filter((b) => b.type === "thinking"))
      assert.strictEqual(left.length, all.length - positions.length, `case ${k}`)
      assert.deepStrictEqual(otherBlocks(out, "turns"), otherBlocks(list, "turns"), `case ${k}`)
      assert.deepStrictEqual(otherBlocks(out, "system"), otherBlocks(list, "system"), `case ${k}`)
      if (positions.length === 0) assert.strictEqual(out, list, "nothing to leave out: the same array")
      if (out.length < list.length) emptied++
      const systemsAt = (l: ReadonlyArray<Message>) =>
        l.flatMap((m, i) => (m.role === "system" ? [l.slice(0, i).filter((x) => x.role !== "system").length] : []))
      if (JSON.stringify(systemsAt(out)) !== JSON.stringify(systemsAt(withoutPlacement(list, positions)))) moved++
    }
    // the cases that matter were drawn
    assert.isAbove(emptied, CASES / 20)
    assert.isAbove(moved, CASES / 100)
  })

  it("withoutThinking leaves every thinking block out, and returns the same array when there is none", () => {
    const rand = prng(0x51e7)
    for (let k = 0; k < 500; k++) {
      const list = conversation(rand)
      const out = withoutThinking(list)
      assert.deepStrictEqual(allThinking(out), [])
      assert.strictEqual(checkApiRules(out).length, 0, `case ${k}`)
      assert.strictEqual(withoutThinking(out), out)
    }
  })
})

/** `list` with the blocks at `positions` left out and emptied messages dropped, nothing moved: the old behaviour. */
const withoutPlacement = (
  list: ReadonlyArray<Message>,
  positions: ReadonlyArray<{ readonly message: number; readonly block: number }>
): ReadonlyArray<Message> =>
  list.flatMap((m, i) => {
    const kept = blocks(m).filter((_, b) => !positions.some((p) => p.message === i && p.block === b))
    return typeof m.content !== "string" && kept.length === 0 && blocks(m).length > 0 ? [] : [m]
  })
