/**
 * Damaged conversations, generated and from the corpus, through `repair`: its output passes `validate` and the
 * independent checker of API-RULES (`fixtures/ApiRules.ts`, in its strictest mode), it is idempotent, it never
 * returns an empty list, and it keeps every system message's text and the server's summary.
 *
 * 10,000 cases per run, seeded by runtime (Node and Deno runs differ), so a CI run (both) covers 20,000. The mixed
 * damage of the second property (two to four of duplicated messages, reused `tool_use` ids, dropped and reordered
 * results at once) has 10,000 cases per runtime too: `repair` loses no block that is neither blank text nor a result
 * that answers no call.
 */
import { assert, describe, it } from "@effect/vitest"
import { Result } from "effect"
import { viewCompaction } from "../src/ApiView.ts"
import type { ContentBlock, Message } from "../src/Message.ts"
import { repairResult, validate } from "../src/Validate.ts"
import { checkApiRules, formatApiViolations } from "./fixtures/ApiRules.ts"
import { generateSession, prng } from "./fixtures/Conversation.ts"
import { corpus } from "./fixtures/Corpus.ts"
import { blocksOf, isText, isToolResult, isToolUse } from "../src/internal/blocks.ts"
import { apiViewStart } from "../src/internal/apiView.ts"

const isDeno = "Deno" in globalThis
const CASES = 10_000
const SEED = isDeno ? 0xde70 : 0x70de

const KINDS = [
  "slice",
  "dropMessage",
  "duplicateMessage",
  "swapNeighbours",
  "removeToolResult",
  "removeToolUse",
  "duplicateToolId",
  "emptyContent",
  "whitespaceText",
  "sameRoleMessages",
  "leadingAssistant",
  "misplacedSystem",
  "insertCompaction",
  "duplicateCompaction"
] as const
type Kind = (typeof KINDS)[number]

type Rand = () => number

const blocks = (m: Message): Array<ContentBlock> => [...blocksOf(m)]
const withBlocks = (m: Message, content: Array<ContentBlock>): Message => ({ ...m, content })
let compactions = 0
const compactionBlock = (rand: Rand): ContentBlock =>
  ({
    type: "compaction",
    content: rand() < 0.15
      ? null
      : `Summary ${++compactions}: the user asked for a refactor; files a.ts, b.ts changed.`,
    encrypted_content: rand() < 0.5 ? null : `enc-${compactions}`,
    signature: `sig-${compactions}`
  }) as ContentBlock

/** Indices of messages matching `p`. */
const where = (xs: ReadonlyArray<Message>, p: (m: Message) => boolean): Array<number> =>
  xs.flatMap((m, i) => (p(m) ? [i] : []))

const damage = (kind: Kind, input: Array<Message>, rand: Rand): Array<Message> => {
  const xs = [...input]
  const int = (n: number) => Math.floor(rand() * n)
  const any = () => int(Math.max(1, xs.length))
  const pick = (is: ReadonlyArray<number>): number | undefined => is.length === 0 ? undefined : is[int(is.length)]
  switch (kind) {
    case "slice": {
      const a = int(xs.length + 1)
      const b = a + int(xs.length - a + 1)
      return xs.slice(a, b)
    }
    case "dropMessage":
      xs.splice(any(), 1)
      return xs
    case "duplicateMessage": {
      const i = any()
      if (xs[i] !== undefined) xs.splice(rand() < 0.5 ? i + 1 : xs.length, 0, xs[i]!)
      return xs
    }
    case "swapNeighbours": {
      const i = int(Math.max(1, xs.length - 1))
      if (xs[i + 1] !== undefined) [xs[i], xs[i + 1]] = [xs[i + 1]!, xs[i]!]
      return xs
    }
    case "removeToolResult":
    case "removeToolUse": {
      const guard = kind === "removeToolResult" ? isToolResult : isToolUse
      const i = pick(where(xs, (m) => blocks(m).some(guard)))
      if (i === undefined) return xs
      const bs = blocks(xs[i]!)
      const at = pick(bs.flatMap((b, k) => (guard(b) ? [k] : [])))!
      bs.splice(at, 1)
      xs[i] = withBlocks(xs[i]!, bs)
      return xs
    }
    case "duplicateToolId": {
      const uses = where(xs, (m) => blocks(m).some(isToolUse))
      const i = pick(uses)
      if (i === undefined) return xs
      const source = blocks(xs[i]!).find(isToolUse)!
      const j = pick(uses)!
      const bs = blocks(xs[j]!)
      if (rand() < 0.4 || j === i) bs.push(rand() < 0.5 ? source : { ...source, input: { other: int(9) } })
      else {
        const k = bs.findIndex(isToolUse)
        bs[k] = { ...(bs[k] as typeof source), id: source.id }
      }
      xs[j] = withBlocks(xs[j]!, bs)
      return xs
    }
    case "emptyContent": {
      const i = any()
      if (xs[i] !== undefined) xs[i] = { ...xs[i]!, content: rand() < 0.5 ? [] : "" }
      return xs
    }
    case "whitespaceText": {
      const i = any()
      if (xs[i] === undefined) return xs
      const bs = blocks(xs[i]!)
      const t = bs.findIndex(isText)
      if (t >= 0 && rand() < 0.5) bs[t] = { type: "text", text: " \n\t" }
      else bs.splice(int(bs.length + 1), 0, { type: "text", text: rand() < 0.5 ? "" : "   " })
      xs[i] = withBlocks(xs[i]!, bs)
      return xs
    }
    case "sameRoleMessages": {
      const i = any()
      const role = xs[i]?.role === "assistant" ? "assistant" : "user"
      xs.splice(i + 1, 0, { role, content: role === "user" ? "and one more thing" : [{ type: "text", text: "Also." }] })
      return xs
    }
    case "leadingAssistant":
      xs.unshift({ role: "assistant", content: [{ type: "text", text: "Where were we?" }] })
      return xs
    case "misplacedSystem": {
      const n = 1 + int(2)
      for (let k = 0; k < n; k++) {
        xs.splice(int(xs.length + 1), 0, {
          role: "system",
          content: rand() < 0.5 ? `Policy ${k}: answer briefly.` : [{ type: "text", text: `Tool note ${k}` }]
        })
      }
      return xs
    }
    case "insertCompaction":
    case "duplicateCompaction": {
      const n = kind === "insertCompaction" ? 1 : 2
      const block = compactionBlock(rand)
      for (let k = 0; k < n; k++) {
        const b = k === 0 || rand() < 0.5 ? block : compactionBlock(rand)
        const i = any()
        if (rand() < 0.5 || xs[i] === undefined) xs.splice(i, 0, { role: "assistant", content: [b] })
        else {
          const bs = blocks(xs[i]!)
          bs.splice(rand() < 0.6 ? 0 : int(bs.length + 1), 0, b)
          xs[i] = withBlocks(xs[i]!, bs)
        }
      }
      return xs
    }
  }
}

/** The text of every non-blank text block of the system messages the API would read. */
const systemTexts = (xs: ReadonlyArray<Message>): Array<string> =>
  xs.slice(apiViewStart(xs)).filter((m) => m.role === "system").flatMap((m) =>
    blocks(m).filter(isText).map((b) => b.text).filter((t) => t.trim() !== "")
  )

const tagsOf = (violations: ReadonlyArray<{ readonly _tag: string }>): string => violations.map((v) => v._tag).join(",")

/** True when the list ends on an assistant message without a call (a prefill, or an empty one). */
const prefill = (xs: ReadonlyArray<Message>): boolean => {
  const last = xs.at(-1)!
  return last.role === "assistant" && !blocks(last).some(isToolUse)
}

/** True when no user or assistant message holds anything `repair` could keep. */
const nothingToSend = (xs: ReadonlyArray<Message>): boolean =>
  xs.slice(apiViewStart(xs)).every((m) =>
    m.role === "system" ||
    blocks(m).every((b) => isToolResult(b) || (isText(b) && b.text.trim() === ""))
  )

describe("repair on damaged conversations", () => {
  it("every output passes validate and the independent checker; idempotent; never empty", () => {
    const sessions = corpus()
    assert.isAbove(sessions.length, 0)
    const generated = Array.from({ length: 64 }, (_, s) => generateSession(SEED + s, { messages: 60, maxOutput: 400 }))
    const rand = prng(SEED)
    const int = (n: number) => Math.floor(rand() * n)
    const counts = new Map<string, { cases: number; invalid: number; nothing: number }>()
    const started = performance.now()
    for (let c = 0; c < CASES; c++) {
      const kind = KINDS[c % KINDS.length]!
      const fromCorpus = Math.floor(c / KINDS.length) % 2 === 1
      let base: Array<Message>
      if (fromCorpus) {
        const session = sessions[int(sessions.length)]!.messages
        const from = int(Math.max(1, session.length - 40))
        base = session.slice(from, from + 10 + int(60))
      } else base = generated[int(generated.length)]!
      let broken = damage(kind, base, rand)
      if (rand() < 0.3) broken = damage(KINDS[int(KINDS.length)]!, broken, rand)
      const key = `${kind} (${fromCorpus ? "corpus" : "generated"})`
      const count = counts.get(key) ?? { cases: 0, invalid: 0, nothing: 0 }
      counts.set(key, count)
      count.cases++
      const before = validate(broken)
      // validate reports exactly what the API rejects in an ordinary request (threshold mode), and in on-demand mode
      // what an on-demand request may not hold
      const rejected = checkApiRules(broken)
      assert.strictEqual(
        before.length > 0,
        rejected.length > 0,
        `${key} #${c}: validate ${tagsOf(before)}, the checker ${formatApiViolations(rejected)}`
      )
      const onDemand = checkApiRules(broken, { mode: "on-demand" }).filter((v) => v.rule !== 15)
      assert.strictEqual(
        validate(broken, undefined, { mode: "on-demand" }).length > 0,
        onDemand.length > 0,
        `${key} #${c} (on-demand): ${formatApiViolations(onDemand)}`
      )
      if (before.length > 0) count.invalid++
      const result = repairResult(broken)
      if (Result.isFailure(result)) {
        count.nothing++
        assert.isTrue(nothingToSend(broken), `${key} #${c}: NothingToSend on input with content`)
        continue
      }
      const out = result.success.messages
      assert.isAbove(out.length, 0)
      assert.deepStrictEqual(validate(out), [], `${key} #${c}`)
      // on-demand is the strict mode for compaction blocks (rule 13); rule 15 (the request ends on a finished turn) is
      // about on-demand compaction requests only, and a repaired list may end on an assistant prefill
      const independent = checkApiRules(out, { mode: "on-demand" }).filter((v) => v.rule !== 15 || !prefill(out))
      if (independent.length > 0) assert.fail(`${key} #${c}: ${formatApiViolations(independent)}`)
      // a valid list comes back as is, unless the API ignores part of it: what repair drops of it, it reports
      if (before.length === 0 && apiViewStart(broken) === 0) assert.strictEqual(out, broken)
      if (before.length === 0 && apiViewStart(broken) > 0) {
        assert.strictEqual(result.success.report.droppedBeforeCompaction, apiViewStart(broken), `${key} #${c}`)
      }
      const again = repairResult(out)
      assert.isTrue(Result.isSuccess(again) && again.success.messages === out, `${key} #${c}: not idempotent`)
      // nothing the caller needs is lost: every system message's text, and the server's summary
      const texts = systemTexts(out)
      for (const text of systemTexts(broken)) assert.include(texts, text, `${key} #${c}: system text lost`)
      const opening = viewCompaction(broken)
      if (opening._tag === "Some") {
        assert.isTrue(out.some((m) => blocks(m).includes(opening.value.block)), `${key} #${c}: summary lost`)
      }
    }
    const seconds = (performance.now() - started) / 1000
    const rows = [...counts].sort(([a], [b]) => (a < b ? -1 : 1)).map(([key, v]) =>
      `| ${key} | ${v.cases} | ${v.invalid} | ${v.nothing} |`
    )
    console.log(
      [
        `repair property suite (${isDeno ? "Deno" : "Node"}, seed ${SEED}): ${CASES} cases in ${seconds.toFixed(1)} s`,
        "| damage (base) | cases | invalid before repair | NothingToSend |",
        "| --- | --- | --- | --- |",
        ...rows
      ].join("\n")
    )
    for (const kind of KINDS) {
      for (const origin of ["generated", "corpus"]) {
        const v = counts.get(`${kind} (${origin})`)
        assert.isAbove(v?.cases ?? 0, CASES / KINDS.length / 2 - 10, `${kind} ${origin}`)
        // damage that leaves a list invalid: at least 1 in 250 cases of each kind (1 in 2,500 for the mild ones)
        assert.isAbove(
          v?.invalid ?? 0,
          kind === "slice" || kind === "swapNeighbours" ? CASES / 2_500 : CASES / 250,
          `${kind} ${origin}`
        )
      }
    }
  }, 180_000)
})

/**
 * The mixed damage of issue 42, what a replayed, merged or hand-edited log does to tool pairs: duplicated messages,
 * reused ids, dropped and reordered results (within a message, or messages swapped, dropped or split), with the
 * calls and text that go with them.
 */
const MIXED = [
  "duplicateMessage",
  "duplicateToolId",
  "removeToolResult",
  "reorderResults",
  "swapNeighbours",
  "dropMessage",
  "sameRoleMessages",
  "removeToolUse",
  "whitespaceText"
] as const
type Mixed = (typeof MIXED)[number]

/** `damage`, and `reorderResults`: a user message's blocks in another order (its results after its text, or shuffled). */
const mixedDamage = (kind: Mixed, input: Array<Message>, rand: Rand): Array<Message> => {
  if (kind !== "reorderResults") return damage(kind, input, rand)
  const xs = [...input]
  const candidates = where(xs, (m) => m.role === "user" && blocks(m).filter(isToolResult).length > 0)
  if (candidates.length === 0) return xs
  const i = candidates[Math.floor(rand() * candidates.length)]!
  const bs = blocks(xs[i]!)
  if (rand() < 0.5) {
    bs.push(...bs.splice(0, bs.filter(isToolResult).length))
    bs.unshift({ type: "text", text: "Here is what the tools said." })
  } else {
    for (let k = bs.length - 1; k > 0; k--) {
      const j = Math.floor(rand() * (k + 1))
      ;[bs[k], bs[j]] = [bs[j]!, bs[k]!]
    }
  }
  xs[i] = withBlocks(xs[i]!, bs)
  return xs
}

/** A block's content, ids aside (a renamed call is the same call), `cache_control` aside. */
const signature = (block: ContentBlock): string => {
  const { cache_control: _mark, ...rest } = block as ContentBlock & { readonly cache_control?: unknown }
  if (isToolUse(block)) return canonicalJson({ ...rest, id: null })
  if (isToolResult(block)) return canonicalJson({ ...rest, tool_use_id: null })
  return canonicalJson(rest)
}

const canonicalJson = (value: unknown): string =>
  JSON.stringify(
    value,
    (_key, v: unknown) =>
      v !== null && typeof v === "object" && !Array.isArray(v)
        ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, (v as Record<string, unknown>)[k]]))
        : v
  )

/**
 * The blocks `repair` must keep: every block of the API view but blank text and results that answer no call (their
 * `tool_use_id` names no `tool_use` of the assistant turn before them that an earlier result has not answered,
 * API-RULES 5–7; consecutive messages of one role are one turn, as the API merges them, and a call repeated exactly,
 * id and input, is one call).
 */
const mustKeep = (xs: ReadonlyArray<Message>): Array<ContentBlock> => {
  const calls = new Map<string, Set<string>>()
  const answered = new Map<string, number>()
  const keep: Array<ContentBlock> = []
  let previous: Message["role"] | undefined
  for (const m of xs.slice(apiViewStart(xs))) {
    if (m.role === "system") continue
    if (m.role === "assistant" && previous !== "assistant") {
      calls.clear()
      answered.clear()
    }
    previous = m.role
    for (const b of blocks(m)) {
      if (isToolUse(b)) calls.set(b.id, (calls.get(b.id) ?? new Set()).add(canonicalJson(b)))
      if (isText(b) && b.text.trim() === "") continue
      if (isToolResult(b)) {
        const answers = answered.get(b.tool_use_id) ?? 0
        if (m.role !== "user" || answers >= (calls.get(b.tool_use_id)?.size ?? 0)) continue
        answered.set(b.tool_use_id, answers + 1)
      }
      keep.push(b)
    }
  }
  return keep
}

describe("repair on mixed damage", () => {
  it(
    "two to four kinds at once: valid output, and no block lost but blank text and results that answer no call",
    () => {
      const sessions = corpus()
      const generated = Array.from(
        { length: 64 },
        (_, s) => generateSession(SEED + 100 + s, { messages: 60, maxOutput: 400 })
      )
      const rand = prng(SEED + 1)
      const int = (n: number) => Math.floor(rand() * n)
      const lost: Array<string> = []
      let invalid = 0
      for (let c = 0; c < CASES; c++) {
        let base: Array<Message>
        if (c % 2 === 1) {
          const session = sessions[int(sessions.length)]!.messages
          const from = int(Math.max(1, session.length - 40))
          base = session.slice(from, from + 10 + int(60))
        } else base = generated[int(generated.length)]!
        const kinds = Array.from({ length: 2 + int(3) }, () => MIXED[int(MIXED.length)]!)
        let broken = base
        for (const kind of kinds) broken = mixedDamage(kind, broken, rand)
        if (validate(broken).length > 0) invalid++
        const result = repairResult(broken)
        if (Result.isFailure(result)) {
          assert.isTrue(nothingToSend(broken), `${kinds} #${c}: NothingToSend on input with content`)
          continue
        }
        const out = result.success.messages
        assert.deepStrictEqual(validate(out), [], `${kinds} #${c}`)
        // the same block object, else one with the same content (a renamed call or result, a merged message)
        const same = new Set(out.flatMap((m) => blocks(m)))
        let kept: Set<string> | undefined
        for (const block of mustKeep(broken)) {
          if (same.has(block)) continue
          kept ??= new Set(out.flatMap((m) => blocks(m).map(signature)))
          const key = signature(block)
          if (!kept.has(key)) lost.push(`${kinds.join("+")} #${c}: lost ${block.type} ${key.slice(0, 160)}`)
        }
      }
      assert.isAbove(invalid, CASES / 4)
      assert.deepStrictEqual(lost.slice(0, 5), [], `${lost.length} blocks lost in ${CASES} cases`)
    },
    180_000
  )
})
