/**
 * The API's rules (`Validate`, and the independent checker of API-RULES) held where inputs are hard: duplicate tool_use
 * ids, repair output, an empty list (also in the CLI), decode depth and error paths, a stale failed read, system
 * messages mid-conversation, and the API's own compaction block (estimate, turns, cut, calibrate, eviction, repair,
 * render). Each case is judged by the library and by the checker.
 */
import { assert, describe, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import { existsSync, mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { Effect, Layer, Option, Result } from "effect"
import { apiView, viewCompaction, viewSummary } from "../src/ApiView.ts"
import { planForPolicy, safeCut, splitKeepingTurns as plan } from "../src/Cut.ts"
import {
  type ContentBlock,
  decodeMessages,
  decodeMessagesSync,
  type Message,
  MessageDecodeError
} from "../src/Message.ts"
import { compactContext, type CompactOutcome } from "../src/Compact.ts"
import { evictStaleToolResults } from "../src/Evict.ts"
import { ExtractiveSummarizer, extractiveSummary } from "../src/ExtractiveSummarizer.ts"
import { render } from "../src/Render.ts"
import { Summarizer, type SummarizeRequest } from "../src/Summarizer.ts"
import { SUMMARY_HEADER, summaryText } from "../src/Summary.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { calibrate, estimateMessageTokens, estimateTokens } from "../src/Tokens.ts"
import { countTurns, turnStarts } from "../src/Turns.ts"
import { NothingToSend, repair, repairResult, validate } from "../src/Validate.ts"
import { checkApiRules, formatApiViolations } from "./fixtures/ApiRules.ts"
import { MAX_NESTING_DEPTH } from "../src/internal/decode.ts"
import { apiViewStart } from "../src/internal/apiView.ts"
import { jsonSize } from "../src/internal/estimate.ts"
import { LEADING_USER_TEXT } from "../src/internal/repair.ts"

const user = (text: string): Message => ({ role: "user", content: text })
const assistant = (text: string): Message => ({ role: "assistant", content: [{ type: "text", text }] })
const system = (text: string): Message => ({ role: "system", content: text })
const use = (id: string): ContentBlock => ({ type: "tool_use", id, name: "bash", input: { cmd: "ls" } })
const call = (...ids: Array<string>): Message => ({ role: "assistant", content: ids.map(use) })
const results = (...ids: Array<string>): Message => ({
  role: "user",
  content: ids.map((id) => ({ type: "tool_result", tool_use_id: id, content: `out ${id}` }))
})
const compaction = (content: string | null, signature = "sig"): ContentBlock =>
  ({ type: "compaction", content, encrypted_content: null, signature }) as ContentBlock
const tags = (xs: ReadonlyArray<{ readonly _tag: string }>) => xs.map((x) => x._tag)
const textOf = (m: Message): string =>
  typeof m.content === "string" ? m.content : m.content.map((b) => ("text" in b ? String(b.text) : "")).join("\n")
const long = (tag: string) => `${tag} ${"words ".repeat(2_000)}`

/** The extractive summarizer, recording every request it gets. */
const recording = () => {
  const requests: Array<SummarizeRequest> = []
  const extractive = ExtractiveSummarizer.make()
  const layer = Layer.succeed(
    Summarizer,
    Summarizer.of({
      name: "extractive",
      summarize: (request) => Effect.andThen(Effect.sync(() => requests.push(request)), extractive.summarize(request))
    })
  )
  return { requests, layer }
}
const compactPolicy = CompactionPolicy.makeUnsafe({ keepRecentTokens: 1, keepRecentTurns: 1 })
const compacted = (outcome: CompactOutcome) => assert.strictEqual(outcome._tag, "Compacted", JSON.stringify(outcome))

/** The repaired list passes validate and the independent checker (strict mode), and is a fixed point. */
const assertRepaired = (input: ReadonlyArray<Message>): Array<Message> => {
  const { messages } = repair(input)
  assert.deepStrictEqual(validate(messages), [])
  const independent = checkApiRules(messages, { mode: "on-demand" }).filter((v) => v.rule !== 15)
  assert.strictEqual(formatApiViolations(independent), "")
  assert.strictEqual(repair(messages).messages, messages)
  return messages
}

describe("duplicate tool_use ids", () => {
  it("two tool_use blocks with one id in one message: reported, and the exact duplicate block dropped", () => {
    const input = [user("go"), call("t1", "t1"), results("t1")]
    assert.deepStrictEqual(tags(validate(input)), ["DuplicateToolUseId"])
    assert.deepInclude(validate(input)[0], { messageIndex: 1, blockIndex: 1, toolUseId: "t1" })
    assert.isNotEmpty(checkApiRules(input))
    const out = assertRepaired(input)
    assert.deepStrictEqual(out, [user("go"), call("t1"), results("t1")])
    assert.deepStrictEqual(repair(input).report.addedErrorResults, [])
  })

  it("an assistant message appended twice (a replayed log) is dropped, its result kept", () => {
    const input = [user("go"), call("t1"), results("t1"), call("t1"), results("t1")]
    assert.include(tags(validate(input)), "DuplicateToolUseId")
    const { messages, report } = repair(input)
    assert.deepStrictEqual(messages, [user("go"), call("t1"), results("t1")])
    assert.strictEqual(report.droppedDuplicateMessages, 1)
    assertRepaired(input)
  })

  it("a reused id on a different call is renamed with its result: nothing lost, nothing invented", () => {
    const other: Message = { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "read", input: {} }] }
    const input = [user("go"), call("t1"), results("t1"), other, results("t1")]
    const { messages, report } = repair(input)
    assert.deepStrictEqual(report.renamedToolUses, [{ from: "t1", to: "t1-2" }])
    assert.deepStrictEqual(report.addedErrorResults, [])
    assert.strictEqual(messages.length, 5)
    assertRepaired(input)
  })
})

describe("repair output that validate rejects", () => {
  it("[user, assistant [t1], assistant [t1]]: one answer for t1, and repair is idempotent", () => {
    const input = [user("go"), call("t1"), call("t1")]
    const out = assertRepaired(input)
    assert.strictEqual(out.flatMap((m) => typeof m.content === "string" ? [] : m.content).length, 2)
  })
})

describe("an empty list", () => {
  it("validate([]) reports rule 1, and the checker agrees", () => {
    assert.deepStrictEqual(tags(validate([])), ["EmptyConversation"])
    assert.deepStrictEqual(checkApiRules([]).map((v) => v.rule), [1])
  })

  it("repair of a list with nothing to send is a typed failure, never []", () => {
    const result = repairResult([results("t1")])
    assert.isTrue(Result.isFailure(result))
    if (Result.isFailure(result)) {
      assert.instanceOf(result.failure, NothingToSend)
      assert.deepStrictEqual(result.failure.report.droppedToolResults, ["t1"])
    }
    assert.throws(() => repair([results("t1")]), "no user or assistant content")
    assert.isTrue(Result.isFailure(repairResult([])))
    assert.isTrue(Result.isFailure(repairResult([system("only instructions")])))
  })
})

describe("in the CLI: `compaction repair` of a list with nothing to send", () => {
  it("exits 1 (Violations) with the reason, never an internal error or an empty list", async () => {
    const root = fileURLToPath(new URL("../", import.meta.url))
    const dir = mkdtempSync(join(tmpdir(), "validity-"))
    const file = join(dir, "nothing.json")
    const out = join(dir, "out.json")
    writeFileSync(file, JSON.stringify([{ role: "user", content: [{ type: "tool_result", tool_use_id: "t1" }] }]))
    const deno = (globalThis as { readonly Deno?: { readonly execPath: () => string } }).Deno
    const [command, ...pre] = deno !== undefined
      ? [deno.execPath(), "run", "-A", "-q", join(root, "src/cli/main.ts")]
      : [
        Number(process.versions.node.split(".")[0]) >= 22 ? process.execPath : join(root, "node_modules/.bin/node"),
        join(root, "src/cli/main.ts")
      ]
    const run = await new Promise<{ code: number | null; stderr: string }>((resolve, reject) => {
      const child = spawn(command!, [...pre, "repair", file, "--out", out], { env: { ...process.env, NO_COLOR: "1" } })
      let stderr = ""
      child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d))
      child.on("error", reject)
      child.on("close", (code) => resolve({ code, stderr }))
    })
    assert.strictEqual(run.code, 1, run.stderr)
    assert.include(run.stderr, "no user or assistant content")
    assert.isFalse(existsSync(out))
  }, 180_000)
})

describe("decode is total", () => {
  const nested = (depth: number): unknown => {
    let content: unknown = "leaf"
    for (let i = 0; i < depth; i++) content = [{ type: "tool_result", tool_use_id: `t${i}`, content }]
    return content
  }

  // Bounded work is shown by where decode stops (the same path at the cap, whatever the depth), not by a clock: a test
  // that times itself fails on a loaded machine, and an unbounded walk would still fail here by the test's timeout.
  it("a tool_result nested 2,048 to 8,192 levels fails with MessageDecodeError naming the path at the cap", () => {
    for (const depth of [2048, 4096, 8192]) {
      const input = [{ role: "user", content: nested(depth) }]
      const error = (() => {
        try {
          decodeMessagesSync(input)
        } catch (e) {
          return e
        }
      })()
      assert.instanceOf(error, MessageDecodeError)
      const e = error as MessageDecodeError
      assert.include(e.reason, `${MAX_NESTING_DEPTH}`)
      assert.strictEqual(e.path.length, MAX_NESTING_DEPTH + 1)
      assert.isTrue(e.message.startsWith("messages[0].content[0].content[0].content[0]"), e.message)
    }
  })

  it.effect("decodeMessages fails (not dies) on deep nesting, also inside a tool_use input", () =>
    Effect.gen(function* () {
      let input: unknown = {}
      for (let i = 0; i < 10_000; i++) input = { a: input }
      const messages = [{ role: "assistant", content: [{ type: "tool_use", id: "t", name: "x", input }] }]
      const error = yield* Effect.flip(decodeMessages(messages))
      assert.strictEqual(error._tag, "MessageDecodeError")
      assert.deepStrictEqual(error.path.slice(0, 5), [0, "content", 0, "input", "a"])
      // jsonSize and the estimate are iterative: total even on input decode would refuse
      assert.isAbove(jsonSize(input), 10_000 * 5)
      assert.isAbove(estimateMessageTokens(messages[0] as Message), 10_000)
    }))

  it("a cyclic value is a decode error, not a stack overflow", () => {
    const input: Record<string, unknown> = {}
    input.self = input
    const messages = [{ role: "assistant", content: [{ type: "tool_use", id: "t", name: "x", input }] }]
    assert.throws(() => decodeMessagesSync(messages), MessageDecodeError)
  })
})

describe("the error path ends at the field", () => {
  it("a base64 image whose data is a number: messages[2].content[1].source.data", () => {
    const input = [user("a"), assistant("b"), {
      role: "user",
      content: [{ type: "text", text: "look" }, {
        type: "image",
        source: { type: "base64", media_type: "image/png", data: 7 }
      }]
    }]
    assert.throws(() => decodeMessagesSync(input), "messages[2].content[1].source.data (image): Expected string")
  })

  it("an unknown source type names the type field", () => {
    const input = [{ role: "user", content: [{ type: "image", source: { type: "svg" } }] }]
    assert.throws(() => decodeMessagesSync(input), `messages[0].content[0].source.type (image): Expected "base64"`)
  })
})

describe("a stale error read is offloaded", () => {
  const readCall = (id: string, path: string): Message => ({
    role: "assistant",
    content: [{ type: "tool_use", id, name: "read", input: { path } }]
  })
  const editCall = (id: string, path: string): Message => ({
    role: "assistant",
    content: [{ type: "tool_use", id, name: "edit", input: { path } }]
  })
  const answer = (id: string, text: string, isError = false): Message => ({
    role: "user",
    content: [{ type: "tool_result", tool_use_id: id, content: text, ...(isError ? { is_error: true } : {}) }]
  })
  const failure = `EACCES: permission denied ${"x".repeat(4000)}`
  /** A failed read of /a.ts, then an edit of `editPath` answered by `editAnswer`. */
  const failedReadThenEdit = (editPath: string, editAnswer: Message): Array<Message> => [
    user("go"),
    readCall("r1", "/a.ts"),
    answer("r1", failure, true),
    editCall("e1", editPath),
    editAnswer,
    assistant("done")
  ]

  it("a failed read that a later successful write of the same file made stale goes (reason modified)", () => {
    const messages = failedReadThenEdit("/a.ts", answer("e1", "ok"))
    const out = evictStaleToolResults(messages, 10, { minSavings: 0 })
    assert.deepStrictEqual(out.offloaded.map((o) => [o.toolUseId, o.reason]), [["r1", "modified"]])
    assert.isAbove(out.tokensFreed, 900)
    // the block stays an error result: only its payload changed
    assert.isTrue((out.messages[2]!.content as ReadonlyArray<{ readonly is_error?: boolean }>)[0]!.is_error)
    assert.deepStrictEqual(validate(out.messages), [])
  })

  it("a failed read stays when the later write failed, or when nothing later touched the file", () => {
    const failedWrite = failedReadThenEdit("/a.ts", answer("e1", "no match", true))
    assert.deepStrictEqual(evictStaleToolResults(failedWrite, 10, { minSavings: 0 }).offloaded, [])
    const otherFile = failedReadThenEdit("/b.ts", answer("e1", "ok"))
    assert.deepStrictEqual(evictStaleToolResults(otherFile, 0, { minSavings: 0 }).offloaded, [])
  })
})

describe("mid-conversation system messages", () => {
  it("validate checks rules 8–11", () => {
    assert.deepStrictEqual(tags(validate([system("s"), user("a")])), [
      "SystemMessageFirst",
      "SystemMessageNotBeforeAssistant"
    ])
    assert.deepStrictEqual(tags(validate([user("a"), assistant("b"), system("s"), assistant("c")])), [
      "SystemMessageNotAfterTurn"
    ])
    assert.deepStrictEqual(tags(validate([user("a"), system("s"), user("b")])), ["SystemMessageNotBeforeAssistant"])
    assert.include(tags(validate([user("a"), call("t1"), system("s"), results("t1")])), "SystemMessageInToolCall")
    assert.deepStrictEqual(validate([user("a"), system("s"), assistant("b"), user("c"), system("t")]), [])
  })

  it("repair moves a misplaced system message, keeps it a system message and keeps the real tool result", () => {
    const input = [user("a"), call("t1"), system("use the new tool"), results("t1"), assistant("done")]
    const { messages, report } = repair(input)
    assert.deepStrictEqual(messages, [
      user("a"),
      call("t1"),
      results("t1"),
      system("use the new tool"),
      assistant("done")
    ])
    assert.strictEqual(report.movedSystemMessages, 1)
    assert.deepStrictEqual(report.addedErrorResults, [])
    assertRepaired(input)
  })

  it("a system message first, or after the last assistant reply, moves to the nearest allowed place", () => {
    assert.deepStrictEqual(repair([system("s"), user("a"), assistant("b")]).messages, [
      user("a"),
      system("s"),
      assistant("b")
    ])
    assert.deepStrictEqual(repair([user("a"), assistant("b"), system("s")]).messages, [
      user("a"),
      system("s"),
      assistant("b")
    ])
    const merged = repair([user("a"), system("s"), system("t"), assistant("b")])
    assert.strictEqual(merged.report.mergedSystemMessages, 1)
    assertRepaired([user("a"), system("s"), system("t"), assistant("b")])
  })
})

describe("system messages in render, the extractive summary and compactContext", () => {
  const rule = system("From now on, answer in French.")
  const head = [user(long("first task")), assistant(long("did it")), rule, assistant(long("more"))]
  const conversation = [...head, user("second task"), assistant("ok"), user("third task"), assistant("fine")]

  it("render labels a system message [System]", () => {
    const transcript = render([user("a"), rule, assistant("b")])
    assert.include(transcript, "[System]:\nFrom now on, answer in French.")
    assert.notInclude(transcript, "[Assistant]:\nFrom now on")
    assert.include(
      render([{
        role: "system",
        content: [{ type: "tool_removal", tool: { type: "tool_reference", name: "bash" } } as ContentBlock]
      }]),
      "[Tool removed] bash"
    )
  })

  it("the extractive summary keeps a system message's text", () => {
    const text = extractiveSummary({ messages: [user("go"), rule, assistant("ok")], transcript: "" })
    assert.include(text, "From now on, answer in French.")
  })

  it.effect("compactContext keeps a system message of the head: re-emitted after the summary, not summarized", () =>
    Effect.gen(function* () {
      const { layer, requests } = recording()
      const { messages, outcome } = yield* compactContext(conversation, compactPolicy, { minFreedTokens: 1 }).pipe(
        Effect.provide(layer)
      )
      compacted(outcome)
      assert.isDefined(summaryText(messages[0]!))
      assert.include(messages, rule)
      assert.isFalse(requests[0]!.messages.some((m) => m.role === "system"))
      assert.deepStrictEqual(validate(messages), [])
      assert.deepStrictEqual(checkApiRules(messages), [])
      // after the tail's first user turn (the tail starts with a user message), before the assistant's reply
      const at = messages.indexOf(rule)
      assert.strictEqual(messages[at - 1]!.role, "user")
      assert.strictEqual(messages[at + 1]!.role, "assistant")
    }))

  it.effect("with the tail opening on an assistant step, the system message sits right after the summary", () =>
    Effect.gen(function* () {
      const split = [user("go"), assistant(long("a")), rule, assistant(long("b")), assistant("c")]
      const { messages, outcome } = yield* compactContext(
        split,
        CompactionPolicy.makeUnsafe({ keepRecentTokens: 1, keepRecentTurns: 1, maxTailTokens: 100 }),
        { minFreedTokens: 1 }
      ).pipe(Effect.provide(ExtractiveSummarizer.layer))
      compacted(outcome)
      assert.strictEqual(messages[1], rule)
      assert.strictEqual(messages[2]!.role, "assistant")
      assert.deepStrictEqual(checkApiRules(messages), [])
    }))
})

describe("the API's own compaction", () => {
  const head = [user("old question"), assistant("x".repeat(40_000)), user("more"), assistant("y".repeat(40_000))]
  const opened: Message = {
    role: "assistant",
    content: [compaction("The user asked about X; we did Y."), { type: "text", text: "Continuing." }]
  }
  const tail = [
    user("next question"),
    call("t1"),
    results("t1"),
    assistant("answer"),
    user("and then?"),
    assistant("ok")
  ]
  const list = [...head, opened, ...tail]

  it("the API view starts at the last compaction block with content; null content is a no-op", () => {
    assert.strictEqual(apiViewStart(list), head.length)
    assert.deepStrictEqual(apiView(list), [opened, ...tail])
    assert.deepStrictEqual(Option.getOrThrow(viewSummary(list)), "The user asked about X; we did Y.")
    const failed: Message = { role: "assistant", content: [compaction(null)] }
    assert.strictEqual(apiViewStart([...head, failed, ...tail]), 0)
    assert.isTrue(Option.isNone(viewCompaction([...head, failed, ...tail])))
  })

  it("estimates, turn counts and calibrate are taken on the API view; the block is priced by its content", () => {
    const view = [opened, ...tail]
    assert.strictEqual(estimateTokens(list), estimateTokens(view))
    assert.isBelow(estimateTokens(list), 1000)
    const opaque: Message = {
      role: "assistant",
      content: [{ ...(compaction("short") as object), encrypted_content: "e".repeat(100_000) } as ContentBlock]
    }
    assert.isBelow(estimateMessageTokens(opaque), 20)
    assert.strictEqual(countTurns(list), 2)
    assert.deepStrictEqual(turnStarts(list), [head.length + 1, head.length + 5])
    assert.strictEqual(calibrate(list, estimateTokens(view) * 2), 2)
  })

  it("a cut never lands before the API view's start, and never at it", () => {
    for (let requested = 0; requested <= list.length; requested++) {
      const cut = safeCut(list, requested)
      assert.isTrue(cut === 0 || cut >= head.length, `requested ${requested}: cut ${cut}`)
    }
    const policy = CompactionPolicy.makeUnsafe({ keepRecentTokens: 1, keepRecentTurns: 1 })
    const p = planForPolicy(list, policy)
    assert.isAbove(p.cut, head.length)
    assert.strictEqual(p.keptTokens, estimateTokens(list.slice(p.cut)))
    const huge = CompactionPolicy.makeUnsafe({ keepRecentTokens: 100_000, keepRecentTurns: 1 })
    assert.strictEqual(planForPolicy(list, huge).cut, 0)
    const split = Option.getOrThrow(plan(list, 1))
    assert.isAbove(split.head.length, head.length)
    assert.isTrue(Option.isNone(plan([...head, opened, user("q"), assistant("a")], 1)))
  })

  it("eviction reports what the API view loses: results before the view's start are left as they are", () => {
    const bash = (id: string, text: string): Array<Message> => [
      { role: "assistant", content: [{ type: "tool_use", id, name: "bash", input: { command: `run ${id}` } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: id, content: text }] }
    ]
    const dropped = [user("old"), ...bash("old1", "o".repeat(20_000)), assistant("old done")]
    const view = [opened, user("new"), ...bash("new1", "n".repeat(20_000)), ...bash("new2", "short"), assistant("ok")]
    const before = [...dropped, ...view]
    const out = evictStaleToolResults(before, 1, { minSavings: 0 })
    assert.deepStrictEqual(out.offloaded.map((o) => o.toolUseId), ["new1"])
    for (let i = 0; i < dropped.length; i++) assert.strictEqual(out.messages[i], before[i])
    assert.strictEqual(out.tokensFreed, estimateTokens(apiView(before)) - estimateTokens(apiView(out.messages)))
    // only dropped history is stale: nothing the API reads changes, so nothing is rewritten
    const onlyOld = evictStaleToolResults([...dropped, opened, user("new"), assistant("ok")], 0, { minSavings: 0 })
    assert.strictEqual(onlyOld.tokensFreed, 0)
    assert.deepStrictEqual(onlyOld.offloaded, [])
  })

  it("a list opened by an assistant message whose first block is a compaction block is valid", () => {
    const view = [opened, ...tail]
    assert.deepStrictEqual(validate(view), [])
    assert.deepStrictEqual(checkApiRules(view, { mode: "on-demand" }), [])
    assert.strictEqual(repair(view).messages, view)
  })

  it("repair keeps only the last compaction block with content and drops what is before it", () => {
    const earlier: Message = { role: "assistant", content: [compaction("first summary", "s1")] }
    const input = [user("a"), earlier, user("b"), assistant("c"), opened, ...tail]
    // in on-demand mode the API refuses them; in threshold mode it drops what precedes the last block (rule 13)
    assert.includeMembers(tags(validate(input, undefined, { mode: "on-demand" })), [
      "CompactionBlockAmbiguous",
      "CompactionBlockMisplaced"
    ])
    assert.deepStrictEqual(validate(input), [])
    const { messages, report } = repair(input)
    assert.deepStrictEqual(messages, [opened, ...tail])
    assert.strictEqual(report.droppedBeforeCompaction, 4)
    assert.isFalse(report.insertedLeadingUser)
    assertRepaired(input)
    // the block is sent back verbatim: same object, every field
    assert.strictEqual(
      (messages[0]!.content as ReadonlyArray<ContentBlock>)[0],
      (opened.content as ReadonlyArray<ContentBlock>)[0]
    )
  })

  it("validate with a reference reports a changed compaction block (rule 14)", () => {
    const changed: Message = { role: "assistant", content: [compaction("edited summary")] }
    assert.deepStrictEqual(tags(validate([changed, ...tail], list)), ["ModifiedCompaction"])
    assert.deepStrictEqual(validate([opened, ...tail], list), [])
  })

  it("unknown fields of a compaction block are preserved by decode", () => {
    const block = {
      type: "compaction",
      content: "s",
      encrypted_content: null,
      signature: "x",
      tool_changes: [],
      cache_control: { type: "ephemeral" },
      extra: 1
    }
    const decoded = decodeMessagesSync([{ role: "assistant", content: [block] }])
    assert.strictEqual((decoded[0]!.content as ReadonlyArray<ContentBlock>)[0], block)
    assert.throws(
      () => decodeMessagesSync([{ role: "assistant", content: [{ type: "compaction", content: "" }] }]),
      "content"
    )
  })

  it("the filler user message is not put before an assistant message that opens with a compaction block", () => {
    const input = [opened, user(""), ...tail]
    const { messages, report } = repair(input)
    assert.isFalse(report.insertedLeadingUser)
    assert.notStrictEqual((messages[0]!.content as ReadonlyArray<ContentBlock>)[0], {
      type: "text",
      text: LEADING_USER_TEXT
    })
    assertRepaired(input)
  })

  it("render shows a compaction block's content, not [Block: compaction]; content: null renders nothing", () => {
    const transcript = render([...head, opened])
    assert.include(transcript, "The user asked about X; we did Y.")
    assert.notInclude(transcript, "[Block: compaction]")
    assert.notInclude(render([{ role: "assistant", content: [compaction(null)] }]), "compaction")
  })

  it.effect("compactContext: the server's summary becomes previousSummary; the block and what precedes it leave", () =>
    Effect.gen(function* () {
      const big = [opened, user(long("next question")), ...tail.slice(1), user("last"), assistant("done")]
      const input = [...head, ...big]
      const { layer, requests } = recording()
      const { messages, outcome } = yield* compactContext(input, compactPolicy, { minFreedTokens: 1 }).pipe(
        Effect.provide(layer)
      )
      compacted(outcome)
      assert.strictEqual(requests[0]!.previousSummary, "The user asked about X; we did Y.")
      // only the API view is summarized: nothing of the dropped head reaches the summarizer
      assert.notInclude(requests[0]!.transcript, "old question")
      assert.include(requests[0]!.transcript, "Continuing.")
      assert.isTrue(messages[0]!.content[0] !== undefined && textOf(messages[0]!).startsWith(SUMMARY_HEADER))
      assert.include(textOf(messages[0]!), "The user asked about X; we did Y.")
      assert.strictEqual(apiViewStart(messages), 0)
      assert.isFalse(
        messages.some((m) => typeof m.content !== "string" && m.content.some((b) => b.type === "compaction"))
      )
      assert.deepStrictEqual(checkApiRules(messages, { mode: "on-demand" }), [])
      if (outcome._tag === "Compacted") assert.strictEqual(outcome.tokensBefore, estimateTokens(apiView(input)))
    }))

  it.effect("a head whose API view is only the server's block is NothingToCut (no summary of a summary)", () =>
    Effect.gen(function* () {
      // the server's summary is long, the rest of the view fits the budget: the cut lands right after the block
      const bare: Message = { role: "assistant", content: [compaction(long("Server summary."))] }
      const input = [...head, bare, user("q1"), assistant("a1"), user("q2"), assistant("a2")]
      const policy = CompactionPolicy.makeUnsafe({ keepRecentTokens: 1_000, keepRecentTurns: 1 })
      assert.strictEqual(planForPolicy(input, policy).cut, head.length + 1)
      const { messages, outcome } = yield* compactContext(input, policy, { minFreedTokens: 1 }).pipe(
        Effect.provide(ExtractiveSummarizer.layer)
      )
      assert.deepInclude(outcome, { _tag: "Skipped", reason: "NothingToCut", tokens: estimateTokens(input) })
      assert.strictEqual(messages, input)
    }))
})
