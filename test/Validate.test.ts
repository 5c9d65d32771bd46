import { assert, describe, it } from "@effect/vitest"
import { Result, Schema } from "effect"
import type { ContentBlock, Message } from "../src/Message.ts"
import { isValid, repair, repairResult, validate, Violation } from "../src/Validate.ts"
import { conversationArbitrary } from "./fixtures/Conversation.ts"
import { corpus } from "./fixtures/Corpus.ts"
import { blocksOf, isText, isToolResult } from "../src/internal/blocks.ts"
import { hasOrphans, toolPairs } from "../src/internal/validate.ts"
import { LEADING_USER_TEXT, MISSING_RESULT_TEXT } from "../src/internal/repair.ts"

const user = (text: string): Message => ({ role: "user", content: text })
const assistant = (text: string): Message => ({ role: "assistant", content: [{ type: "text", text }] })
const call = (...ids: Array<string>): Message => ({
  role: "assistant",
  content: ids.map((id) => ({ type: "tool_use", id, name: "bash", input: {} }))
})
const result = (id: string): ContentBlock => ({ type: "tool_result", tool_use_id: id, content: "ok" })
const results = (...ids: Array<string>): Message => ({ role: "user", content: ids.map(result) })

const tags = (violations: ReadonlyArray<Violation>): Array<string> => violations.map((v) => v._tag)

// ============================================================================
// A mutator that breaks conversations the ways real sessions do
// ============================================================================

const Mutation = Schema.Struct({
  op: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 7 })),
  at: Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 10_000 }))
})
const Mutations = Schema.Array(Mutation).check(Schema.isMaxLength(6))

/** Applies mutations: deletions (orphans, missing results), empties, duplicates, misordered results, ghost results. */
const mutate = (messages: ReadonlyArray<Message>, mutations: ReadonlyArray<typeof Mutation.Type>): Array<Message> => {
  const out = [...messages]
  for (const { at, op } of mutations) {
    const i = out.length === 0 ? 0 : at % out.length
    const target = out[i]
    switch (op) {
      case 0:
        out.splice(i, 1)
        break
      case 1:
        out.splice(i, 0, { role: at % 2 === 0 ? "user" : "assistant", content: at % 3 === 0 ? "" : [] })
        break
      case 2:
        if (target !== undefined) {
          const blocks: ReadonlyArray<ContentBlock> = typeof target.content === "string"
            ? [{ type: "text", text: target.content }]
            : target.content
          out[i] = { role: target.role, content: [...blocks, { type: "text", text: at % 2 === 0 ? "" : "  " }] }
        }
        break
      case 3:
        if (target !== undefined && target.role === "user") out.splice(i + 1, 0, target)
        break
      case 4:
        if (target !== undefined && target.role === "user") out.splice(i, 0, user("typed before the results"))
        break
      case 5:
        out.shift()
        break
      case 6:
        out.splice(i, 0, { role: "user", content: [result(`ghost_${at}`), { type: "text", text: "and more" }] })
        break
      case 7:
        if (target !== undefined && typeof target.content !== "string") {
          out[i] = { role: target.role, content: [...target.content].reverse() }
        }
        break
    }
  }
  return out
}

/** The non-tool-result, non-empty blocks of a list, as a sorted multiset of JSON strings. */
const payload = (messages: ReadonlyArray<Message>): Array<string> =>
  messages.flatMap((m) =>
    (typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content)
      .filter((b) => !isToolResult(b) && !(b.type === "text" && (b as { text: string }).text.trim() === ""))
      .map((b) => JSON.stringify(b))
  ).sort()

// ============================================================================
// validate
// ============================================================================

describe("validate", () => {
  it("accepts a well-formed tool loop", () => {
    assert.deepStrictEqual(validate([user("a"), call("t1", "t2"), results("t1", "t2"), assistant("done")]), [])
  })

  it("accepts consecutive user messages that merge validly: results, then typed text", () => {
    const messages = [user("a"), call("t1"), results("t1"), user("typed while the tool ran"), assistant("ok")]
    assert.deepStrictEqual(validate(messages), [])
  })

  it("accepts consecutive assistant messages whose calls are answered by the next user turn", () => {
    assert.deepStrictEqual(validate([user("a"), call("t1"), call("t2"), results("t1", "t2")]), [])
  })

  it("flags text before the results after the merge", () => {
    const v = validate([user("a"), call("t1"), user("typed"), results("t1")])
    assert.deepStrictEqual(tags(v), ["ToolResultNotFirst"])
    assert.deepInclude(v[0], { messageIndex: 3, blockIndex: 0, toolUseId: "t1" })
  })

  it("flags a result that is not in the very next user turn as orphaned, and its call as missing", () => {
    const v = validate([user("a"), call("t1"), user("b"), assistant("x"), results("t1")])
    assert.sameMembers(tags(v), ["OrphanedToolResult", "MissingToolResult"])
    const missing = v.find((x) => x._tag === "MissingToolResult")!
    assert.deepInclude(missing, { messageIndex: 1, blockIndex: 0, toolUseId: "t1" })
  })

  it("flags duplicates, a leading assistant message, empty messages and empty text blocks", () => {
    assert.deepStrictEqual(tags(validate([user("a"), call("t1"), results("t1", "t1")])), ["DuplicateToolResult"])
    assert.deepStrictEqual(tags(validate([assistant("hi"), user("a")])), ["FirstMessageNotUser"])
    assert.deepStrictEqual(tags(validate([user("a"), { role: "assistant", content: [] }, user("b")])), [
      "EmptyMessage"
    ])
    assert.deepStrictEqual(tags(validate([user(""), assistant("x")])), ["EmptyMessage"])
    assert.deepStrictEqual(tags(validate([user(" \n "), assistant("x")])), ["EmptyMessage"])
    assert.deepStrictEqual(
      tags(validate([{ role: "user", content: [{ type: "text", text: "" }] }, assistant("x")])),
      ["EmptyTextBlock"]
    )
  })

  it("flags a message not shaped as one (role usr, a block with no type, content 42, null) and judges nothing else", () => {
    const undecoded = [
      user("a"),
      assistant("ok"),
      { role: "usr", content: "x" },
      { role: "user", content: [{ text: "x" }] },
      { role: "user", content: 42 },
      null
    ] as unknown as Array<Message>
    assert.deepStrictEqual(validate(undecoded), [
      Violation.MalformedMessage({
        messageIndex: 2,
        reason: 'messages[2].role: Expected "user" | "assistant" | "system"'
      }),
      Violation.MalformedMessage({ messageIndex: 3, reason: "messages[3].content[0].type: Missing key" }),
      Violation.MalformedMessage({ messageIndex: 4, reason: "messages[4].content: Expected string | array" }),
      Violation.MalformedMessage({ messageIndex: 5, reason: "messages[5]: Expected object" })
    ])
    assert.isFalse(isValid(undecoded.slice(0, 3)))
  })

  it("allows an empty final assistant message (a prefill)", () => {
    assert.deepStrictEqual(validate([user("a"), { role: "assistant", content: "" }]), [])
  })

  it("flags a trailing call without a result and results with no call at all", () => {
    assert.deepStrictEqual(tags(validate([user("a"), call("t1")])), ["MissingToolResult"])
    assert.deepStrictEqual(tags(validate([results("t0"), assistant("x")])), ["OrphanedToolResult"])
  })

  it("does not treat server tool blocks as client tool pairs", () => {
    const server: Message = {
      role: "assistant",
      content: [
        { type: "server_tool_use", id: "srvtoolu_1", name: "web_search", input: { query: "q" } },
        { type: "web_search_tool_result", tool_use_id: "srvtoolu_1", content: [] },
        { type: "text", text: "found it" }
      ]
    }
    assert.deepStrictEqual(validate([user("a"), server, user("thanks")]), [])
    assert.deepStrictEqual(toolPairs([user("a"), server, user("thanks")]), [])
  })

  it("checks signed thinking in the latest assistant turn against a reference", () => {
    const thought = (thinking: string): Message => ({
      role: "assistant",
      content: [
        { type: "thinking", thinking, signature: "sig1" },
        { type: "tool_use", id: "t1", name: "bash", input: {} }
      ]
    })
    const original = [user("a"), thought("plan"), results("t1")]
    const edited = [user("a"), thought("plan, edited"), results("t1")]
    assert.deepStrictEqual(validate(original, original), [])
    assert.deepStrictEqual(validate(edited), [], "without a reference the rule is not checked")
    const v = validate(edited, original)
    assert.deepStrictEqual(tags(v), ["ModifiedThinking"])
    assert.deepInclude(v[0], { messageIndex: 1, blockIndex: 0, signature: "sig1" })
    // an earlier turn's thinking may change: the API strips it
    assert.deepStrictEqual(validate([...edited, assistant("done"), user("next")], original), [])
  })

  it.prop(
    "generated valid conversations validate (an empty one is rejected: rule 1)",
    [conversationArbitrary()],
    ([messages]) => {
      assert.deepStrictEqual(tags(validate(messages)), messages.length === 0 ? ["EmptyConversation"] : [])
    },
    { arbitrary: { runs: 2000 } }
  )

  it.prop(
    "aborted replies and split finals only ever miss results",
    [conversationArbitrary({ allowInvalid: true })],
    ([messages]) => {
      for (const v of validate(messages)) {
        assert.strictEqual(v._tag, messages.length === 0 ? "EmptyConversation" : "MissingToolResult")
      }
    },
    { arbitrary: { runs: 2000 } }
  )

  it("finds only the corpus's known defects (calls of aborted replies, reused ids), and no orphans", () => {
    for (const session of corpus()) {
      assert.isFalse(hasOrphans(session.messages), session.name)
      const violations = validate(session.messages)
      // the SWE-agent trajectory reuses call ids (converted from OpenAI function calling); the API rejects that
      const known = session.name.startsWith("swe-agent") ? ["DuplicateToolUseId"] : ["MissingToolResult"]
      for (const v of violations) assert.include(known, v._tag, session.name)
      if (session.name === "pi__large-session") assert.strictEqual(violations.length, 18)
    }
  })
})

// ============================================================================
// issue 27: what today's API accepts
// ============================================================================

const settings = (effort: string): Message => ({ role: "system", output_config: { effort } }) as unknown as Message
const compaction = (content: string): ContentBlock =>
  ({ type: "compaction", content, encrypted_content: null, signature: `sig-${content}` }) as ContentBlock
const advisorTurn = (last: "result" | "call"): Message => ({
  role: "assistant",
  content: [
    { type: "text", text: "asking the advisor" },
    { type: "server_tool_use", id: "srvtoolu_a", name: "advisor", input: {} },
    ...(last === "result"
      ? [
        {
          type: "advisor_tool_result",
          tool_use_id: "srvtoolu_a",
          content: { type: "advisor_result", text: "go" }
        } as ContentBlock
      ]
      : [])
  ]
})

describe("validate and repair on issue 27's shapes", () => {
  it("finding 11: validate answers on a system message without content instead of throwing", () => {
    assert.deepStrictEqual(validate([user("a"), settings("low"), assistant("b")]), [])
    assert.deepStrictEqual(validate([user("a"), assistant("b"), user("c"), settings("high")]), [])
    const empty = { role: "system", output_config: {} } as unknown as Message
    assert.deepStrictEqual(tags(validate([user("a"), empty, assistant("b")])), ["EmptyMessage"])
    const repaired = repair([user("a"), settings("low"), settings("high"), assistant("b"), {
      role: "user",
      content: []
    }])
    assert.deepStrictEqual(validate(repaired.messages), [])
    assert.deepStrictEqual<unknown>(repaired.messages[1], { role: "system", output_config: { effort: "high" } })
  })

  it("finding 6: a system message after an advisor or MCP result is legal", () => {
    const mcpTurn: Message = {
      role: "assistant",
      content: [
        { type: "mcp_tool_use", id: "mcptoolu_1", name: "query", server_name: "db", input: {} },
        { type: "mcp_tool_result", tool_use_id: "mcptoolu_1", content: "rows" }
      ]
    }
    const note: Message = { role: "system", content: "answer in French" }
    assert.deepStrictEqual(validate([user("a"), advisorTurn("result"), note, assistant("b")]), [])
    assert.deepStrictEqual(validate([user("a"), mcpTurn, note]), [])
    assert.deepStrictEqual(tags(validate([user("a"), advisorTurn("call"), note])), ["SystemMessageNotAfterTurn"])
  })

  it("finding 6: repair sends mcp_tool_listing and fallback blocks back verbatim and in place", () => {
    const listing = { type: "mcp_tool_listing", mcp_server_name: "db", tools: [{ name: "q" }] } as ContentBlock
    const fallback = { type: "fallback", from: { model: "a" }, to: { model: "b" }, trigger: { x: 1 } } as ContentBlock
    const turn: Message = {
      role: "assistant",
      content: [listing, { type: "thinking", thinking: "t", signature: "s" }, fallback, { type: "text", text: "" }, {
        type: "text",
        text: "done"
      }]
    }
    const { messages: out } = repair([user("a"), turn, user("b")])
    const blocks = out[1]!.content as ReadonlyArray<ContentBlock>
    assert.strictEqual(blocks[0], listing)
    assert.strictEqual(blocks[2], fallback)
    assert.deepStrictEqual(blocks.map((b) => b.type), ["mcp_tool_listing", "thinking", "fallback", "text"])
  })

  it("finding 8: a compaction block in the middle of a list is what the API accepts; repair reports the drop", () => {
    const opened: Message = { role: "assistant", content: [compaction("summary"), { type: "text", text: "next" }] }
    const messages = [user("a"), assistant("b"), user("c"), opened, user("d")]
    assert.deepStrictEqual(validate(messages), [])
    assert.isTrue(isValid(messages))
    // what the API drops anyway, repair drops, as a change it reports
    const { messages: out, report } = repair(messages)
    assert.deepStrictEqual(out, [opened, user("d")])
    assert.strictEqual(report.droppedBeforeCompaction, 3)
    // the strict rules of an on-demand request still hold there
    assert.deepStrictEqual(tags(validate(messages, undefined, { mode: "on-demand" })), ["CompactionBlockMisplaced"])
    assert.deepStrictEqual(tags(validate(out, undefined, { mode: "on-demand" })), [])
    // the API view is judged, not what precedes it
    assert.deepStrictEqual(validate([assistant("x"), call("t1"), opened, user("d")]), [])
    // still rejected anywhere: a compaction block that is not its message's first block, or in a system message
    const late: Message = { role: "assistant", content: [{ type: "text", text: "x" }, compaction("s2")] }
    assert.deepStrictEqual(tags(validate([user("a"), late, user("b")])), [
      "FirstMessageNotUser",
      "CompactionBlockMisplaced"
    ])
  })

  it("finding 9: no empty text block survives repair, at the end of a list included", () => {
    const trailing: Message = { role: "assistant", content: [{ type: "text", text: "" }] }
    assert.deepStrictEqual(tags(validate([user("a"), trailing])), ["EmptyTextBlock"])
    assert.deepStrictEqual(repair([user("a"), trailing]).messages, [user("a")])
    const mixed: Message = { role: "assistant", content: [{ type: "text", text: "Sure" }, { type: "text", text: " " }] }
    assert.deepStrictEqual(repair([user("a"), mixed]).messages[1]!.content, [{ type: "text", text: "Sure" }])
    assert.deepStrictEqual(tags(validate([user("a"), { role: "assistant", content: " \n" }])), ["EmptyMessage"])
    // an empty final assistant message (a prefill) is still accepted
    assert.deepStrictEqual(validate([user("a"), { role: "assistant", content: [] }]), [])
  })
})

// ============================================================================
// repair
// ============================================================================

describe("repair", () => {
  it("returns a valid list itself, by reference", () => {
    const messages = [user("a"), call("t1"), results("t1"), user("typed"), assistant("ok")]
    const repaired = repair(messages)
    assert.strictEqual(repaired.messages, messages)
    assert.deepStrictEqual(repaired.report.addedErrorResults, [])
  })

  it("gives a call without a result an explicit error result", () => {
    const messages = [user("a"), call("t1", "t2"), results("t1"), assistant("x"), user("b"), call("t3")]
    const { messages: out, report } = repair(messages)
    assert.deepStrictEqual(validate(out), [])
    assert.deepStrictEqual(report.addedErrorResults, ["t2", "t3"])
    const filled = (out[2]!.content as ReadonlyArray<ContentBlock>)[1]!
    assert.deepStrictEqual(filled, {
      type: "tool_result",
      tool_use_id: "t2",
      content: MISSING_RESULT_TEXT,
      is_error: true
    })
    assert.strictEqual(out.at(-1)!.role, "user")
    assert.strictEqual(out[0], messages[0], "unchanged messages are shared")
  })

  it("drops orphaned and duplicate results, moves results first, merges and drops empties", () => {
    const messages: Array<Message> = [
      assistant("stray"),
      user("a"),
      { role: "user", content: [] },
      call("t1"),
      user("typed"),
      { role: "user", content: [result("t1"), result("t1"), result("ghost")] },
      { role: "assistant", content: [{ type: "text", text: "" }, { type: "text", text: "done" }] }
    ]
    const { messages: out, report } = repair(messages)
    assert.deepStrictEqual(validate(out), [])
    assert.deepStrictEqual(report.droppedToolResults, ["t1", "ghost"])
    assert.strictEqual(report.droppedEmptyMessages, 1)
    assert.strictEqual(report.droppedEmptyBlocks, 1)
    assert.strictEqual(report.reorderedMessages, 1)
    assert.isTrue(report.insertedLeadingUser)
    assert.deepStrictEqual(out[0], { role: "user", content: [{ type: "text", text: LEADING_USER_TEXT }] })
    const merged = out.find((m) => m.role === "user" && typeof m.content !== "string" && m.content.some(isToolResult))!
    assert.deepStrictEqual(merged.content, [result("t1"), { type: "text", text: "typed" }])
  })

  it("never mutates its input", () => {
    const messages: Array<Message> = [user("a"), call("t1"), user("b"), user("c"), call("t2"), call("t3")]
    const snapshot = structuredClone(messages)
    repair(messages)
    assert.deepStrictEqual(messages, snapshot)
  })

  const seen = new Map<string, number>()

  it.prop(
    "output always validates, repair is idempotent, and only tool results and empties are removed",
    [conversationArbitrary({ allowInvalid: true }), Mutations],
    ([conversation, mutations]) => {
      const broken = mutate(conversation, mutations)
      for (const tag of new Set(tags(validate(broken)))) seen.set(tag, (seen.get(tag) ?? 0) + 1)
      const result = repairResult(broken)
      if (Result.isFailure(result)) {
        // nothing to send: only blank text and tool results that answer nothing (no call survives)
        assert.isTrue(
          broken.every((m) => blocksOf(m).every((b) => isToolResult(b) || (isText(b) && b.text.trim() === "")))
        )
        return
      }
      const once = result.success
      assert.isAbove(once.messages.length, 0)
      assert.deepStrictEqual(validate(once.messages), [])
      assert.isTrue(isValid(once.messages))
      const twice = repair(once.messages)
      assert.strictEqual(twice.messages, once.messages)
      if (validate(broken).length === 0) assert.strictEqual(once.messages, broken)
      const after = payload(once.report.insertedLeadingUser ? once.messages.slice(1) : once.messages)
      assert.deepStrictEqual(after, payload(broken))
    },
    { arbitrary: { runs: 3000 } }
  )

  it("the property above met every repairable violation", () => {
    for (
      const tag of [
        "OrphanedToolResult",
        "DuplicateToolResult",
        "ToolResultNotFirst",
        "MissingToolResult",
        "FirstMessageNotUser",
        "EmptyMessage",
        "EmptyTextBlock"
      ]
    ) assert.isAbove(seen.get(tag) ?? 0, 20, tag)
  })

  it("repairs every corpus session into a valid list", () => {
    for (const session of corpus()) {
      const { messages, report } = repair(session.messages)
      assert.deepStrictEqual(validate(messages), [], session.name)
      if (session.name === "pi__large-session") assert.strictEqual(report.addedErrorResults.length, 18)
    }
  })
})
