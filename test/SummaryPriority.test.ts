/**
 * What the summary keeps when its budget is short, judged from the outside: conversations driven through
 * `PromiseConversation` with a JSONL log in a temporary folder and the extractive summarizer, every compaction's view
 * read by a judge written here (not the library's parser or its anchors). The judge: each message the user wrote is
 * still in the view (raw in the kept tail, or whole in the summary's text, white space folded), or the summary names
 * it by a reference on one of its lines and `recall` with that reference answers with the user's words, whole (the
 * long-turn case: or it is counted on the summary's omitted line); the summary message's characters, over four, stay
 * within the policy's `summaryBudgetTokens`. Scenarios: repeated compactions over many user rules and many commands;
 * one long turn of hundreds of tool steps whose task must survive; many files with long paths; the real
 * `pi__before-compaction` session at a 20k trigger (read from the shared data folder: a missing folder fails loudly,
 * naming it).
 */
import { assert, describe, it } from "@effect/vitest"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Policy, PromiseConversation, Recall } from "../src/index.ts"
import { corpus, DATA_DIR } from "./fixtures/Corpus.ts"
import { blocksOf, fold, type Msg, summaryOf, textOf } from "./fixtures/SummaryJudge.ts"

/** The words a user message holds (its text blocks), `undefined` for one of tool results only. */
const wordsOf = (m: Msg): string | undefined => {
  if (m.role !== "user") return undefined
  const text = textOf(m)
  return text.trim().length === 0 ? undefined : text
}

/** The way the judge reads a recall answer: every page joined, the header and next-page lines dropped. */
const recalled = async (conversation: PromiseConversation.PromiseConversation, ref: string): Promise<string> => {
  let text = ""
  for (let page = 1; page < 100; page++) {
    const answer = await conversation.recall({ ref, page })
    if (!answer.startsWith("[recall ref=")) return ""
    const lines = answer.split("\n")
    const more = lines.at(-1)!.startsWith("[more:")
    text += lines.slice(1, more ? -1 : undefined).join("\n")
    if (!more) return text
  }
  return text
}

interface Verdict {
  /** The user's messages the view holds raw or whole, named by a reference recall answers, or counted. */
  readonly whole: number
  readonly named: number
  readonly counted: number
  /** The first words of each message the view lost. */
  readonly lost: ReadonlyArray<string>
  /** The summary's tokens by characters over four, and the budget. */
  readonly tokens: number
}

/**
 * Judges a view after a compaction: `words` are the user's messages so far. A reference counts when it is on a line of
 * the summary that starts with `instruction` or `omitted` (the user's lines of the manifest) and `recall` answers it
 * with the words whole. With `counting`, a message neither whole nor named may be one the omitted line counts.
 */
const judge = async (
  conversation: PromiseConversation.PromiseConversation,
  cache: Map<string, string>,
  words: ReadonlyArray<string>,
  counting = false
): Promise<Verdict> => {
  const view = (await conversation.state()).view as unknown as ReadonlyArray<Msg>
  const summary = summaryOf(view) ?? ""
  const folded = fold(summary)
  const tail = view.slice(summary === "" ? 0 : 1).map((m) => fold(textOf(m)))
  const refs = summary.split("\n")
    .filter((line) => line.startsWith("instruction ") || line.startsWith("omitted "))
    .flatMap((line) => [...line.matchAll(/\[ref ([^\s\]]+)\]/g)].map((m) => m[1]!))
  const answers: Array<string> = []
  for (const ref of refs) {
    if (!cache.has(ref)) cache.set(ref, fold(await recalled(conversation, ref)))
    answers.push(cache.get(ref)!)
  }
  const countedOnLine = [...summary.matchAll(/^omitted \d+ user messages?.*?(\d+) not named$/gm)]
    .reduce((n, m) => n + Number(m[1]), 0)
  let whole = 0
  let named = 0
  let counted = 0
  const lost: Array<string> = []
  for (const text of words) {
    const w = fold(text)
    if (tail.some((t) => t.includes(w)) || folded.includes(w)) whole++
    else if (answers.some((a) => a.includes(w))) named++
    else if (counting && counted < countedOnLine) counted++
    else lost.push(w.slice(0, 60))
  }
  return { whole, named, counted, lost, tokens: Math.ceil(summary.length / 4) }
}

const tools = [
  { name: "bash", description: "Run", input_schema: { type: "object", properties: { command: { type: "string" } } } },
  { name: "read", description: "Read", input_schema: { type: "object", properties: { path: { type: "string" } } } },
  Recall.recallTool
]

/** A conversation logged to a JSONL file in a fresh temporary folder, removed by `close`. */
const open = async (compactAtTokens: number) => {
  const directory = mkdtempSync(join(tmpdir(), "summary-priority-"))
  const policy = Policy.CompactionPolicy.makeUnsafe({ compactAtTokens })
  const conversation = await PromiseConversation.open({
    log: { type: "jsonl", directory, sessionId: "s" },
    system: "agent",
    tools: tools as never,
    recall: true,
    policy
  })
  return {
    conversation,
    budget: policy.summaryBudgetTokens,
    close: async () => {
      await conversation.close()
      rmSync(directory, { recursive: true, force: true })
    }
  }
}

describe("the summary keeps the user's words first, within its budget", () => {
  it("repeated compactions over many user rules and many commands: every rule and the task stay", async () => {
    const { budget, close, conversation } = await open(20_000)
    const words: Array<string> = []
    const cache = new Map<string, string>()
    let n = 0
    const turn = async (user: string, calls: number, command: (i: number) => string) => {
      words.push(user)
      await conversation.append({ role: "user", content: user })
      for (let i = 0; i < calls; i++) {
        const id = `toolu_${String(++n).padStart(5, "0")}`
        await conversation.recordReply({
          role: "assistant",
          content: [{ type: "tool_use", id, name: "bash", input: { command: command(i) } }]
        })
        await conversation.append({
          role: "user",
          content: [{ type: "tool_result", tool_use_id: id, content: "ok\n".repeat(300) }]
        })
      }
      await conversation.recordReply({ role: "assistant", content: [{ type: "text", text: "Done." }] })
    }
    try {
      const task = "RULE-01: The task: migrate the billing service to Postgres. "
      for (let r = 1; r <= 12; r++) {
        await turn(
          `${r === 1 ? task : `RULE-${String(r).padStart(2, "0")}: `}` +
            "Never push to main; always run the linter before committing; keep the public API unchanged. ".repeat(3),
          2,
          (i) => `echo step ${r}.${i}`
        )
      }
      for (let k = 0; k < 3; k++) await turn(`filler ${k}`, 3, (i) => `true ${k}.${i}`)
      const verdicts: Array<Verdict> = []
      assert.strictEqual((await conversation.compact()).outcome._tag, "Compacted")
      verdicts.push(await judge(conversation, cache, words))
      // a busy turn of many distinct commands, then short turns, and a second compaction
      await turn(
        "Now fix the tests.",
        70,
        (i) => `grep -rn "function handler${i}" src/services/billing/ --include=*.ts | head -n 40 # handler ${i}`
      )
      for (let k = 0; k < 3; k++) await turn(`filler2 ${k}`, 3, (i) => `true 2.${k}.${i}`)
      assert.strictEqual((await conversation.compact()).outcome._tag, "Compacted")
      verdicts.push(await judge(conversation, cache, words))
      verdicts.forEach((v, i) => {
        assert.deepStrictEqual(v.lost, [], `compaction ${i + 1}: the user's words lost`)
        assert.isAtMost(v.tokens, budget, `compaction ${i + 1}: the summary's size`)
      })
      // the task statement is whole in the summary itself
      const summary = fold(summaryOf((await conversation.state()).view as unknown as ReadonlyArray<Msg>) ?? "")
      assert.include(summary, fold(words[0]!))
    } finally {
      await close()
    }
  }, 120_000)

  it(
    "one long turn of hundreds of tool steps: its task survives every compaction, each note is kept, named or counted",
    async () => {
      const { budget, close, conversation } = await open(20_000)
      const task =
        "TASK-7731: migrate every package to ESM, keep Node 18 support, never edit generated files under gen/."
      const words = [task]
      const cache = new Map<string, string>()
      const verdicts: Array<Verdict> = []
      try {
        await conversation.append({ role: "user", content: task })
        for (let s = 0; s < 360; s++) {
          const prepared = await conversation.prepare()
          if (prepared.compaction !== undefined && prepared.compaction._tag !== "Skipped") {
            verdicts.push(await judge(conversation, cache, words, true))
            const view = (await conversation.state()).view as unknown as ReadonlyArray<Msg>
            assert.include(fold(summaryOf(view) ?? ""), fold(task), `compaction ${verdicts.length}: the task`)
          }
          const id = `toolu_${String(s).padStart(5, "0")}`
          await conversation.recordReply(
            {
              role: "assistant",
              content: [{
                type: "tool_use",
                id,
                name: "bash",
                input: { command: `npx tsc -p packages/pkg-${s}/tsconfig.json` }
              }]
            },
            undefined,
            { requestEpoch: prepared.epoch }
          )
          const note = `note ${s}: good, pkg-${s} compiles; continue with the next package`
          words.push(note)
          await conversation.append({
            role: "user",
            content: [
              { type: "tool_result", tool_use_id: id, content: `compiled packages/pkg-${s}\n` + "ok\n".repeat(600) },
              { type: "text", text: note }
            ]
          })
        }
        assert.isAtLeast(verdicts.length, 8)
        verdicts.forEach((v, i) => {
          assert.deepStrictEqual(v.lost, [], `compaction ${i + 1}: the user's words lost`)
          assert.isAtMost(v.tokens, budget, `compaction ${i + 1}: the summary's size`)
        })
        // the notes the summary could not hold whole are named by reference, not all merely counted
        assert.isAbove(verdicts.at(-1)!.named, 0)
      } finally {
        await close()
      }
    },
    180_000
  )

  it(
    "many files with long paths: the summary stays within its budget, every instruction stays, every path is listed or counted",
    async () => {
      const { budget, close, conversation } = await open(20_000)
      const words: Array<string> = []
      const cache = new Map<string, string>()
      const read: Array<{ readonly id: string; readonly path: string }> = []
      const verdicts: Array<Verdict> = []
      const path = (i: number) =>
        `/home/dev/workspaces/acme-platform/packages/service-${
          i % 40
        }/src/modules/feature-${i}/internal/handlers/request-handler.ts`
      try {
        let id = 0
        for (let t = 0; t < 12; t++) {
          const instruction = `INSTR-${t}: survey batch ${t} of the handlers and note which ones still use callbacks.`
          words.push(instruction)
          await conversation.append({ role: "user", content: instruction })
          for (let s = 0; s < 50; s++) {
            const prepared = await conversation.prepare()
            if (prepared.compaction !== undefined && prepared.compaction._tag !== "Skipped") {
              const verdict = await judge(conversation, cache, words)
              verdicts.push(verdict)
              assert.isAtMost(verdict.tokens, budget, `compaction ${verdicts.length}: the summary's size`)
              assert.deepStrictEqual(verdict.lost, [], `compaction ${verdicts.length}: the user's words lost`)
              // the paths of the summarized reads: listed in the summary's files block, or counted there
              const view = (await conversation.state()).view as unknown as ReadonlyArray<Msg>
              const summary = summaryOf(view) ?? ""
              const inTail = new Set(
                view.flatMap((m) => blocksOf(m).flatMap((b) => b.type === "tool_use" ? [b.id] : []))
              )
              const removed = new Set(read.filter((r) => !inTail.has(r.id)).map((r) => r.path))
              const files = summary.slice(summary.lastIndexOf("<compaction-files"))
              const listed = [...files.matchAll(/^read ("(?:[^"\\]|\\.)*")$/gm)].map((m) => JSON.parse(m[1]!) as string)
              const counted = [...files.matchAll(/^read-omitted (\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0)
              assert.isTrue(listed.every((p) => removed.has(p)), `compaction ${verdicts.length}: a path listed`)
              assert.strictEqual(listed.length + counted, removed.size, `compaction ${verdicts.length}: paths`)
            }
            const toolUseId = `toolu_${String(++id).padStart(5, "0")}`
            read.push({ id: toolUseId, path: path(t * 1000 + s) })
            await conversation.recordReply(
              {
                role: "assistant",
                content: [{ type: "tool_use", id: toolUseId, name: "read", input: { path: path(t * 1000 + s) } }]
              },
              undefined,
              { requestEpoch: prepared.epoch }
            )
            await conversation.append({
              role: "user",
              content: [{
                type: "tool_result",
                tool_use_id: toolUseId,
                content: "export function handler(req, cb) { cb(null) }\n".repeat(30)
              }]
            })
          }
        }
        assert.isAtLeast(verdicts.length, 5)
      } finally {
        await close()
      }
    },
    180_000
  )

  it(
    "the real pi__before-compaction session at a 20k trigger: every message of the user is kept or named, within the budget",
    async () => {
      const session = corpus().find((s) => s.name === "pi__before-compaction")
      if (session === undefined) throw new Error(`pi__before-compaction is missing from ${DATA_DIR}sessions`)
      const { budget, close, conversation } = await open(20_000)
      const words: Array<string> = []
      const cache = new Map<string, string>()
      const verdicts: Array<Verdict> = []
      try {
        for (const message of session.messages) {
          const plain = Object.fromEntries(Object.entries(message).filter(([key]) => !key.startsWith("_"))) as Msg
          if (plain.role !== "assistant") {
            const said = wordsOf(plain)
            if (said !== undefined) words.push(said)
            await conversation.append(plain as never)
            continue
          }
          const prepared = await conversation.prepare()
          if (prepared.compaction !== undefined && prepared.compaction._tag !== "Skipped") {
            verdicts.push(await judge(conversation, cache, words))
          }
          await conversation.recordReply(plain as never, undefined, { requestEpoch: prepared.epoch })
        }
        assert.isAtLeast(verdicts.length, 10)
        verdicts.forEach((v, i) => {
          assert.deepStrictEqual(v.lost, [], `compaction ${i + 1}: the user's words lost`)
          assert.isAtMost(v.tokens, budget, `compaction ${i + 1}: the summary's size`)
        })
      } finally {
        await close()
      }
    },
    300_000
  )
})
