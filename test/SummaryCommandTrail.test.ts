/**
 * What the summary keeps of the commands the agent ran, over many compactions, judged from the outside: conversations
 * driven through `PromiseConversation` with the extractive summarizer, every compaction's view read by a judge written
 * here (not the library's parser or its short form). A command is known by its head: its first line without a leading
 * `cd <dir> &&`, the first 40 code units, white space folded (commands with one head are one), and it is named when
 * the summary shows that head (raw or as a JSON string). At every compaction: the 10 commands run most recently of
 * those no run of which the view still holds are named; every run the view no longer holds is of a named command or
 * counted on the summary's `omitted N command runs` line; every message the user wrote is whole in the view; the
 * summary's characters, over four, stay within `summaryBudgetTokens`. Sessions: seeded generated ones
 * (long commands in many directories, some run again) at a 20k trigger, and the real `pi__before-compaction` at a 24k
 * trigger (read from the shared data folder: a missing folder fails loudly, naming it). And the short form itself, on
 * generated commands: a verbatim piece of the command, within its cap, the same when shortened again.
 */
import { assert, describe, it } from "@effect/vitest"
import { Policy, PromiseConversation } from "../src/index.ts"
import { BRIEF_COMMAND_MAX, briefCommand } from "../src/internal/commandTrail.ts"
import { prng } from "./fixtures/Conversation.ts"
import { corpus, DATA_DIR } from "./fixtures/Corpus.ts"
import { type Block, blocksOf, fold, type Msg, summaryOf, textOf } from "./fixtures/SummaryJudge.ts"

/**
 * The head a bash call's command is known by: its first non-blank line, folded, without a leading `cd <dir> &&` (or
 * `;`), the first 40 code units; `undefined` for any other block.
 */
const headOf = (block: Block): string | undefined => {
  const input = block.input as { readonly command?: unknown } | undefined
  if (block.type !== "tool_use" || typeof input?.command !== "string") return undefined
  const line = input.command.split("\n").find((l) => l.trim().length > 0)
  if (line === undefined) return undefined
  return fold(fold(line).replace(/^(?:cd\s+(?:"[^"]*"|'[^']*'|[^\s;&|]+)\s*(?:&&|;)\s*)+(?=\S)/, "").slice(0, 40))
}

interface Verdict {
  /** The commands no run of which the view holds, newest last run last. */
  readonly gone: ReadonlyArray<string>
  readonly named: ReadonlyArray<string>
  /** The runs the view no longer holds of commands the summary does not name. */
  readonly unnamedRuns: number
  /** The runs the summary's `omitted N command runs` lines count. */
  readonly counted: number
  /** The user's messages not whole in the view (their first words). */
  readonly lost: ReadonlyArray<string>
  readonly tokens: number
}

/**
 * Drives `messages` through a conversation that compacts at `compactAtTokens`, judging the view after each compaction:
 * `runs` holds every command run so far (tool_use id → its head, in the order of the runs).
 */
const drive = async (messages: ReadonlyArray<Msg>, compactAtTokens: number) => {
  const policy = Policy.CompactionPolicy.makeUnsafe({ compactAtTokens })
  const conversation = await PromiseConversation.open({ system: "agent", policy })
  const runs = new Map<string, string>()
  const words: Array<string> = []
  const verdicts: Array<Verdict> = []
  try {
    for (const message of messages) {
      const plain = Object.fromEntries(Object.entries(message).filter(([key]) => !key.startsWith("_"))) as Msg
      if (plain.role !== "assistant") {
        if (plain.role === "user" && textOf(plain).trim().length > 0) words.push(textOf(plain))
        await conversation.append(plain as never)
        continue
      }
      const prepared = await conversation.prepare()
      if (prepared.compaction !== undefined && prepared.compaction._tag !== "Skipped") {
        const view = (await conversation.state()).view as unknown as ReadonlyArray<Msg>
        const summary = summaryOf(view) ?? ""
        const folded = fold(summary)
        const held = new Set(view.flatMap((m) => blocksOf(m).flatMap((b) => b.type === "tool_use" ? [b.id] : [])))
        const inView = new Set([...runs].filter(([id]) => held.has(id)).map(([, command]) => command))
        // newest last run last
        const order = [...runs.values()].reverse().filter((c, i, all) => all.indexOf(c) === i).reverse()
        const gone = order.filter((command) => !inView.has(command))
        const isNamed = (head: string) => folded.includes(head) || folded.includes(JSON.stringify(head).slice(1, -1))
        const counted = [...summary.matchAll(/^omitted (\d+) command runs? for room/gm)]
          .reduce((n, m) => n + Number(m[1]), 0)
        const unnamedRuns = [...runs].filter(([id, head]) => !held.has(id) && !isNamed(head)).length
        const tail = view.slice(summary === "" ? 0 : 1).map((m) => fold(textOf(m)))
        const lost = words.map(fold).filter((w) => !folded.includes(w) && !tail.some((t) => t.includes(w)))
        verdicts.push({
          gone,
          named: gone.filter(isNamed),
          unnamedRuns,
          counted,
          lost: lost.map((w) => w.slice(0, 60)),
          tokens: Math.ceil(summary.length / 4)
        })
      }
      await conversation.recordReply(plain as never, undefined, { requestEpoch: prepared.epoch })
      for (const block of blocksOf(plain)) {
        const head = headOf(block)
        if (head !== undefined) runs.set(block.id as string, head)
      }
    }
  } finally {
    await conversation.close()
  }
  return { verdicts, budget: policy.summaryBudgetTokens }
}

/** Checks every verdict: the newest 10 gone commands named, every gone run named or counted, words whole, budget. */
const judge = (verdicts: ReadonlyArray<Verdict>, budget: number, name: string) => {
  verdicts.forEach((v, i) => {
    const at = `${name}, compaction ${i + 1}`
    const newest = v.gone.slice(-10)
    assert.deepStrictEqual(newest.filter((c) => !v.named.includes(c)), [], `${at}: the newest commands`)
    assert.isAtMost(v.unnamedRuns, v.counted, `${at}: the runs of commands neither named nor counted`)
    assert.deepStrictEqual(v.lost, [], `${at}: the user's words`)
    assert.isAtMost(v.tokens, budget, `${at}: the summary's size`)
  })
}

/**
 * A seeded session: turns of a short request and 4 to 9 bash calls of long commands (a `cd` into one of a few
 * directories, long paths; each new one told apart by its head), a fifth of them a command run before, each printing
 * 500 to 2,500 characters.
 */
const generated = (seed: number): ReadonlyArray<Msg> => {
  const rand = prng(seed)
  const int = (n: number) => Math.floor(rand() * n)
  const dirs = ["/home/dev/acme-platform", "/home/dev/acme-platform/packages/billing", "/srv/build/acme"]
  const forms = [
    (i: number) => `grep -rn "handler${i}(" src/services/billing/ --include=*.ts | head -n 40`,
    (i: number) => `npx vitest run test/billing/invoice-${i}.test.ts --reporter=dot 2>&1 | tail -20`,
    (i: number) => `git show --stat HEAD~${i} -- packages/service-${i % 7}/src/modules/feature-${i}/index.ts`,
    (i: number) => `sed -n '${i},${i + 40}p' /home/dev/acme-platform/packages/service-${i % 9}/src/handler-${i}.ts`,
    (i: number) => `wc -l feature-${i}/internal/handlers/request-handler.ts packages/service-${i % 5}/src/index.ts`
  ]
  const out: Array<Msg> = []
  const ran: Array<string> = []
  let id = 0
  for (let turn = 0; turn < 90; turn++) {
    out.push({ role: "user", content: `TURN-${seed}-${turn}: check feature ${turn} of the billing service.` })
    for (let c = 4 + int(6); c > 0; c--) {
      const again = ran.length > 0 && rand() < 0.2
      const command = again ? ran[int(ran.length)]! : `cd ${dirs[int(dirs.length)]} && ${forms[int(forms.length)]!(id)}`
      if (!again) ran.push(command)
      const toolUseId = `toolu_${seed}_${id++}`
      out.push({ role: "assistant", content: [{ type: "tool_use", id: toolUseId, name: "bash", input: { command } }] })
      out.push({
        role: "user",
        content: [{ type: "tool_result", tool_use_id: toolUseId, content: `ok ${id}\n`.repeat(100 + int(300)) }]
      })
    }
    out.push({ role: "assistant", content: [{ type: "text", text: `Feature ${turn} checked.` }] })
  }
  return out
}

describe("the summary keeps the command trail over many compactions, the user's words whole", () => {
  for (const seed of [1, 2, 3]) {
    it(
      `generated session ${seed} at a 20k trigger: the newest commands named, the others named or counted`,
      async () => {
        const { budget, verdicts } = await drive(generated(seed), 20_000)
        assert.isAtLeast(verdicts.length, 12)
        judge(verdicts, budget, `seed ${seed}`)
      },
      120_000
    )
  }

  it(
    "the real pi__before-compaction session at a 24k trigger: the newest commands named, the others named or counted",
    async () => {
      const session = corpus().find((s) => s.name === "pi__before-compaction")
      if (session === undefined) throw new Error(`pi__before-compaction is missing from ${DATA_DIR}sessions`)
      const { budget, verdicts } = await drive(session.messages as unknown as ReadonlyArray<Msg>, 24_000)
      assert.isAtLeast(verdicts.length, 20)
      judge(verdicts, budget, "pi__before-compaction")
    },
    300_000
  )
})

describe("a command's short form", () => {
  it("is a verbatim piece of the command (a recall query finds it), within its cap, the same when shortened again", () => {
    const rand = prng(7)
    const pick = <A>(xs: ReadonlyArray<A>): A => xs[Math.floor(rand() * xs.length)]!
    const parts = [
      "cd /srv/app &&",
      "cd 'a b';",
      "git",
      "status",
      '-m "x y"',
      "|",
      "grep -n",
      "/very/long/path/to/a/file.ts"
    ]
    for (let i = 0; i < 500; i++) {
      const command = Array.from({ length: 1 + Math.floor(rand() * 20) }, () => pick(parts)).join(" ")
      const brief = briefCommand(command)
      assert.isAtMost(brief.length, BRIEF_COMMAND_MAX, command)
      assert.strictEqual(briefCommand(brief), brief, command)
      assert.include(command, brief.endsWith("…") ? brief.slice(0, -1) : brief, command)
      // no leading cd with a command after it
      assert.notMatch(brief, /^cd (?:\S+ &&|'[^']*';) \S/, command)
    }
    assert.strictEqual(briefCommand("cd /srv/app && cd 'a b'; npm test"), "npm test")
    assert.strictEqual(briefCommand("cd /srv/app"), "cd /srv/app")
  })
})
