import { assert, describe, it } from "@effect/vitest"
import type { Message } from "../src/Message.ts"
import { countTurns, isHumanMessage, turnStarts } from "../src/Turns.ts"
import { conversationArbitrary } from "./fixtures/Conversation.ts"

const user = (text: string): Message => ({ role: "user", content: text })
const assistant = (text: string): Message => ({ role: "assistant", content: [{ type: "text", text }] })
const results: Message = { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: "ok" }] }
const call: Message = { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "bash", input: {} }] }

describe("Turns", () => {
  it("counts a turn at each human user message after an assistant or tool results", () => {
    const messages = [user("a"), call, results, assistant("done"), user("b"), assistant("ok")]
    assert.deepStrictEqual(turnStarts(messages), [0, 4])
    assert.strictEqual(countTurns(messages), 2)
  })

  it("treats consecutive human messages as one turn", () => {
    assert.deepStrictEqual(turnStarts([user("a"), user("b"), assistant("x")]), [0])
  })

  it("never starts a turn at a tool-result-only message, and does start one at a human message after results", () => {
    assert.isFalse(isHumanMessage(results))
    assert.deepStrictEqual(turnStarts([user("a"), call, results, user("typed while tools ran")]), [0, 3])
  })

  it("counts a user message mixing tool results and text as human", () => {
    const mixed: Message = {
      role: "user",
      content: [{ type: "tool_result", tool_use_id: "t1", content: "ok" }, { type: "text", text: "also" }]
    }
    assert.isTrue(isHumanMessage(mixed))
    assert.isFalse(isHumanMessage({ role: "user", content: [] }))
    assert.isFalse(isHumanMessage(assistant("x")))
  })

  it.prop(
    "countTurns(a ++ b) is the sum, or one less exactly when the join falls inside a turn",
    [conversationArbitrary({ allowInvalid: true }), conversationArbitrary({ allowInvalid: true })],
    ([a, b]) => {
      const joined = countTurns([...a, ...b])
      const insideTurn = a.length > 0 && b.length > 0 && isHumanMessage(a.at(-1)!) && isHumanMessage(b[0]!)
      assert.strictEqual(joined, countTurns(a) + countTurns(b) - (insideTurn ? 1 : 0))
    },
    { arbitrary: { runs: 2000 } }
  )

  it.prop(
    "every split point: turns before plus turns after, minus a split turn",
    [conversationArbitrary({ allowInvalid: true })],
    ([messages]) => {
      for (let i = 0; i <= messages.length; i++) {
        const a = messages.slice(0, i)
        const b = messages.slice(i)
        const inside = i > 0 && i < messages.length && isHumanMessage(messages[i - 1]!) && isHumanMessage(messages[i]!)
        assert.strictEqual(countTurns(a) + countTurns(b) - (inside ? 1 : 0), countTurns(messages))
      }
    },
    { arbitrary: { runs: 1000 } }
  )
})
