/**
 * `compaction inspect` on a session log and the live loop's rule agree (issue 38: "eviction pays in short loops too,
 * or `inspect` says what rent-or-buy will actually do"). A short agent loop runs through `PromiseConversation` over a
 * JSONL log (the README's loop: the tree listed, the parser and the lexer read, the parser read again, …; and a loop
 * of 24 reads of two files), with thinking off and on (on, the conversation is append-only between compactions:
 * nothing is offloaded until the next compaction). Before every step, `inspect LOG --json` runs on the log as it is,
 * then the live conversation's `prepare` on the same state: the tool results inspect says eviction would offload are
 * the ones that `prepare` offloads, and when the conversation is append-only inspect says so.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import { evictStaleToolResults } from "../src/Evict.ts"
import { HotPaths } from "../src/HotPaths.ts"
import { PromiseConversation } from "../src/index.ts"
import type { Message } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { AGENT_REPLIES } from "./fixtures/AgentLoopScript.ts"
import { runInProcess } from "./cli/Process.ts"

type Block = Record<string, unknown>

const dirs: Array<string> = []
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })))

// the README's tools: a read of a small tree, and a shell that only knows `ls`
const files: Readonly<Record<string, string>> = {
  "src/parser.ts": 'export const parse = (input: string) => input.split(" ")\n'.repeat(200),
  "src/lexer.ts": 'export const lex = (input: string) => input.split("\\n")\n'.repeat(200)
}
const runTool = (name: string, input: Record<string, unknown>): string =>
  name === "read"
    ? files[String(input["path"])] ?? `no such file: ${String(input["path"])}`
    : String(input["command"]).startsWith("ls")
    ? Object.keys(files).join("\n")
    : `bash: ${String(input["command"])}: command not found`

/** `steps` steps reading the parser and the lexer in turn, then an answer. */
const readLoop = (steps: number): ReadonlyArray<ReadonlyArray<Block>> => [
  ...Array.from({ length: steps }, (_, k) => [
    { type: "text", text: `step ${k}` },
    {
      type: "tool_use",
      id: `toolu_r${k}`,
      name: "read",
      input: { path: k % 2 === 0 ? "src/parser.ts" : "src/lexer.ts" }
    }
  ]),
  [{ type: "text", text: "Both files read." }]
]

interface Loop {
  readonly name: string
  readonly replies: ReadonlyArray<ReadonlyArray<Block>>
  readonly policy?: CompactionPolicy
  /** Long enough for rent-or-buy to pay in it (without thinking). */
  readonly pays?: boolean
}

const loops: ReadonlyArray<Loop> = [
  {
    name: "the README's loop (compaction at 4,000)",
    replies: AGENT_REPLIES as ReadonlyArray<ReadonlyArray<Block>>,
    policy: CompactionPolicy.makeUnsafe({ keepRecentTokens: 1_000, keepRecentTurns: 1, compactAtTokens: 4_000 })
  },
  { name: "24 reads of two files (defaults)", replies: readLoop(24), pays: true }
]

/** What inspect said before a step, and what the step's `prepare` then did. */
interface Compared {
  readonly inspected: Record<string, unknown>
  readonly offloaded: ReadonlyArray<{ readonly reason: string; readonly tokensFreed: number }>
  /** The step compacted (the trigger fired). */
  readonly compacted: boolean
  readonly appendOnly: string | undefined
  /** What inspect used to report: an eviction of the log's view as it is (stateless, hot paths of the view). */
  readonly stateless: number
}

/**
 * Runs `loop` to its answer, and one step more (the user's next message), over a JSONL log in a fresh directory;
 * before every step's `prepare`, `inspect LOG --json` on the log as it is then; before the last, `inspect LOG` (its
 * text) too.
 */
const runLoop = async (
  loop: Loop,
  thinking: boolean
): Promise<{ readonly compared: ReadonlyArray<Compared>; readonly text: string }> => {
  let text = ""
  const directory = mkdtempSync(join(tmpdir(), "inspect-live-"))
  dirs.push(directory)
  const log = join(directory, "loop.jsonl")
  const conversation = await PromiseConversation.open({
    log: { type: "jsonl", directory, sessionId: "loop" },
    system: "You are a coding agent. Use the tools.",
    ...(loop.policy === undefined ? {} : { policy: loop.policy }),
    ...(thinking ? { thinking: { type: "enabled", budget_tokens: 1_024 } } : {})
  })
  const compared: Array<Compared> = []
  const step = async () => {
    const run = await runInProcess(["inspect", log, "--json"])
    assert.strictEqual(run.code, 0, run.stderr)
    const before = (await conversation.state()).view as unknown as ReadonlyArray<Message>
    const stateless = evictStaleToolResults(before, 10, { pinned: HotPaths.fromMessages(before).pinned }).offloaded
    const prepared = await conversation.prepare()
    compared.push({
      inspected: JSON.parse(run.stdout).eviction,
      offloaded: prepared.offloaded,
      compacted: prepared.compaction?._tag === "Compacted",
      appendOnly: (await conversation.state()).appendOnly,
      stateless: stateless.length
    })
    return prepared.epoch
  }
  try {
    await conversation.append({ role: "user", content: "Fix the parser in src/parser.ts: it must split on newlines." })
    for (const [k, content] of loop.replies.entries()) {
      const epoch = await step()
      const reply = [
        ...(thinking ? [{ type: "thinking", thinking: `step ${k}`, signature: `sig${k}` }] : []),
        ...content
      ]
      // the usage the API would report: the request's size, by the estimate
      const sent = estimateTokens((await conversation.state()).view as never)
      const state = await conversation.recordReply(
        { role: "assistant", content: reply } as never,
        { input_tokens: sent, output_tokens: 10 },
        { requestEpoch: epoch }
      )
      if (state.pending.length === 0) break
      const calls = content.filter((b) => b["type"] === "tool_use")
      await conversation.append({
        role: "user",
        content: calls.map((call) => ({
          type: "tool_result" as const,
          tool_use_id: String(call["id"]),
          content: runTool(String(call["name"]), call["input"] as Record<string, unknown>)
        }))
      })
    }
    await conversation.append({ role: "user", content: "Thanks. Anything else?" })
    text = (await runInProcess(["inspect", log])).stdout
    await step()
  } finally {
    await conversation.close()
  }
  return { compared, text }
}

describe("inspect reports what the live loop's eviction does on the same log", () => {
  for (const loop of loops) {
    for (const thinking of [false, true]) {
      it.live(`${loop.name}, thinking ${thinking ? "on" : "off"}`, () =>
        Effect.promise(async () => {
          const { compared, text } = await runLoop(loop, thinking)
          for (const [k, c] of compared.entries()) {
            const e = c.inspected
            const at = `before step ${k + 1}: inspect ${JSON.stringify(e)}`
            assert.strictEqual(e["rule"], "next-prepare", at)
            // inspect judges the trigger by the default policy: where the loop runs on it, they agree on it too
            if (loop.policy === undefined) assert.strictEqual(e["triggerFires"], c.compacted, at)
            // an append-only conversation offloads nothing before its compaction: what the step offloaded came with
            // the compaction (its kept tail's, `Prepared.offloaded`), and inspect's figures are of the offloads before
            const now = c.compacted && c.appendOnly !== undefined ? [] : c.offloaded
            assert.strictEqual(e["offloaded"], now.length, at)
            for (const reason of ["superseded", "modified", "stale"] as const) {
              assert.strictEqual(e[reason], now.filter((o) => o.reason === reason).length, `${at}: ${reason}`)
            }
            assert.strictEqual(e["tokensFreed"], now.reduce((sum, o) => sum + o.tokensFreed, 0), at)
            // the reason is in the log from the first reply's step metadata on (before it, only the live options know)
            if (k > 0) assert.strictEqual(e["appendOnly"], c.appendOnly, at)
          }
          if (thinking) {
            // append-only from the first reply on: nothing is offloaded but by a compaction, and inspect says why
            assert.isTrue(
              compared.slice(1).every((c) => c.appendOnly === "thinking" && (c.compacted || c.offloaded.length === 0))
            )
            assert.include(text, "nothing now: the conversation is append-only between compactions (thinking)")
          }
          if (loop.pays) {
            // the agreement is not on nothing: without thinking the rent is paid and the live loop offloads; with
            // thinking the stateless rule inspect used would have promised offloads the live loop never makes
            const key = thinking ? "stateless" : "live"
            const steps = compared.filter((c) => (thinking ? c.stateless : c.offloaded.length) > 0).length
            assert.isAbove(steps, 0, key)
          }
        }))
    }
  }
})
