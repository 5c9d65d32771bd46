/**
 * `recall`, the way back, judged against the sessions themselves: every shared session of `../shared/data` replayed
 * whole through `Conversation` with compaction and eviction (offloads with pointers naming recall) into the JSONL
 * store and into the SQL store on the embedded PGlite and on the `DATABASE_URL` server when it is set, each resumed
 * about 8 times (the log closed and opened again). Then
 * every tool result of the input comes back from `recall` on its reference byte for byte (the pages joined), every
 * compaction entry stores the record of what it removed and every reference in it comes back, and every tool result
 * and user message the last request no longer holds is in a removal record; a reused tool_use id names each copy by
 * where it is stored. Planted facts that 20 chained compactions remove are each found by one search; another
 * session's data never comes back; a recall's own result is evicted like a file read; a pattern that backtracks
 * catastrophically is refused.
 */
import { NodeFileSystem, NodePath } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer, Result } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { replayMessages } from "../src/cli/Replay.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import { compactAndRecord, compactContext } from "../src/Compact.ts"
import { evictStaleToolResults } from "../src/Evict.ts"
import { cachePrices } from "../src/internal/cacheTtl.ts"
import { applyOffloads, buildIndex, decide, extendIndex } from "../src/internal/eviction.ts"
import { defaultToolClassifier } from "../src/Tools.ts"
import { parseOffloadRef } from "../src/Offload.ts"
import type { ContentBlock, Message, ToolResultBlock } from "../src/Message.ts"
import { CompactionPolicy } from "../src/Policy.ts"
import { recall, type RecallAnswer, recallClassifier, recallRunnableTool, renderAnswer } from "../src/Recall.ts"
import {
  answerFrom,
  answerFromSources,
  decodeRecallInput,
  formatRemoval,
  MAX_REGEX_LINE,
  pageOf,
  readEntries,
  type RecallSource,
  recallSources,
  removalsOf,
  removedSources,
  searchSources
} from "../src/internal/recall.ts"
import { decodeLine, encodeEntry, type Entry } from "../src/SessionEntry.ts"
import { SessionLog, type SessionLogError } from "../src/SessionLog.ts"
import { SessionStore } from "../src/SessionStore.ts"
import { SessionStoreJsonl } from "../src/SessionStoreJsonl.ts"
import { splitSummary, summaryText } from "../src/Summary.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { corpus, type CorpusSession } from "./fixtures/Corpus.ts"
import { corpusPolicy, usageOf } from "./fixtures/ConversationReplay.ts"
import { generateSession, prng } from "./fixtures/Conversation.ts"
import { databases, makeSchema } from "./fixtures/Pg.ts"

const platform = Layer.mergeAll(NodeFileSystem.layer, NodePath.layer)

// ----------------------------------------------------------------------------
// The test's own reading of texts (independent of the library's rendering)
// ----------------------------------------------------------------------------

/**
 * A tool result's payload as text: a string itself, one text block its text; else each block under a numbered header
 * line (`[block 1 of 2: text, 5 chars]`, `[block 2 of 2: image]`), a text as it is, any other block as its JSON.
 */
const payloadText = (content: ToolResultBlock["content"]): string => {
  if (content === undefined) return ""
  if (typeof content === "string") return content
  if (content.length === 1 && content[0]!.type === "text") return (content[0] as { text: string }).text
  let out = ""
  content.forEach((b, i) => {
    if (i > 0) out += "\n"
    const text = b.type === "text" ? (b as { text: string }).text : undefined
    out += text === undefined
      ? `[block ${i + 1} of ${content.length}: ${b.type}]\n${JSON.stringify(b)}`
      : `[block ${i + 1} of ${content.length}: text, ${text.length} chars]\n${text}`
  })
  return out
}

/** The text of a user message made of text only (string, or text blocks joined by a blank line); else undefined. */
const userTextOf = (message: Message): string | undefined => {
  if (typeof message.content === "string") return message.content
  if (!message.content.every((b) => b.type === "text")) return undefined
  return message.content.map((b) => (b as { text: string }).text).join("\n\n")
}

const blocksOf = (message: Message): ReadonlyArray<ContentBlock> =>
  typeof message.content === "string" ? [] : message.content

/** Asks `recall` for every page of `ref` and joins them; fails the test on any other answer. */
const recallWhole = (sessionId: string, ref: string) =>
  Effect.gen(function* () {
    let text = ""
    for (let page = 1;; page++) {
      const answer = yield* recall(sessionId, { ref, page }, { maxTokens: 2_000 })
      if (answer._tag !== "Found") return assert.fail(`ref ${ref}: ${renderAnswer(answer)}`)
      // the cap holds for the whole answer: header, text and next-page line
      assert.isAtMost(renderAnswer(answer).length, 2_000 * 4)
      text += answer.page.text
      if (page >= answer.page.pages) return { text, pages: answer.page.pages, source: answer.source }
    }
  })

// ----------------------------------------------------------------------------
// Replays over the stores
// ----------------------------------------------------------------------------

type LogOf = Layer.Layer<SessionLog, SessionLogError>

/** What a replay's conversation is given beyond the corpus policy: many offloads, with pointers naming recall. */
const OFFLOADING = { keepRecent: 4, minSavings: 500, recall: true } as const

/**
 * Replays `session` into `log`, resumed every `resumeEvery` requests, with `usage` as each reply's (default: the
 * recorded one) and `options` beside the corpus policy (`OFFLOADING`, another policy); returns the replay's summary,
 * the last request's messages and the ids of every tool result a request held.
 */
const replayInto = (
  session: CorpusSession,
  log: LogOf,
  resumeEvery = 40,
  options: Omit<Parameters<typeof replayMessages>[2], "log" | "resumeEvery" | "onRequest"> = {},
  usage: Parameters<typeof replayMessages>[1] = usageOf(session.messages)
) =>
  Effect.gen(function* () {
    let last: ReadonlyArray<Message> = []
    const sent = new Set<string>()
    const summary = yield* replayMessages(session.messages, usage, {
      policy: corpusPolicy,
      ...options,
      resumeEvery,
      log,
      onRequest: (_, request) =>
        Effect.sync(() => {
          last = request.messages as ReadonlyArray<Message>
          for (const m of last) {
            for (const b of blocksOf(m)) if (b.type === "tool_result") sent.add((b as ToolResultBlock).tool_use_id)
          }
        })
    }).pipe(Effect.provide(ExtractiveSummarizer.layer))
    return { summary, last, sent }
  })

/** What the test reads of the log (independently of `recall`): each stored tool result's payload by entry and id. */
const storedPayloads = (entries: ReadonlyArray<Entry>) => {
  const payloads = new Map<string, string>()
  /** By tool_use_id: the payload stored first, what a bare id names. */
  const first = new Map<string, string>()
  const messages = new Map<string, Message>()
  const put = (entryId: string, message: Message) => {
    messages.set(entryId, message)
    for (const b of blocksOf(message)) {
      if (b.type === "tool_result") {
        const r = b as ToolResultBlock
        if (!payloads.has(`${r.tool_use_id}@${entryId}`)) {
          payloads.set(`${r.tool_use_id}@${entryId}`, payloadText(r.content))
        }
        if (!first.has(r.tool_use_id)) first.set(r.tool_use_id, payloadText(r.content))
      }
    }
  }
  for (const e of entries) {
    if (e.type === "message") put(e.id, e.message)
    if (e.type === "compaction") e.kept?.messages.forEach((m, i) => put(`${e.id}#${i + 1}`, m))
  }
  return { payloads, first, messages }
}

/** Every page of `ref` answered from `sources` (what `recall` answers after reading the log), joined. */
const answerWhole = (sources: ReadonlyArray<RecallSource>, ref: string): string => {
  let text = ""
  for (let page = 1;; page++) {
    const answer = answerFromSources(sources, { _tag: "ByRef", ref, page }, { maxTokens: 2_000 })
    if (answer._tag !== "Found") return assert.fail(`ref ${ref}: ${renderAnswer(answer)}`)
    assert.isAtMost(renderAnswer(answer).length, 2_000 * 4)
    text += answer.page.text
    if (page >= answer.page.pages) return text
  }
}

/**
 * The judgement of one session replayed into `sessionId` of `store` (`last`: the last request; `sent`: the ids of
 * every tool result a request held). The log is read once, as `recall` reads it; every reference is answered from it
 * as `recall` answers (`answerFromSources`), and a few through `recall` itself, from the store:
 * - the log holds the input: its k-th message entry is the input's k-th message;
 * - every tool result of the input comes back byte-identical from `<tool_use_id>@<entry id>`, and from its bare id
 *   when the session does not reuse it (a reused id's bare ref lists its copies instead);
 * - every compaction entry stores its removal record, and every reference a removal record names comes back
 *   byte-identical (a tool result as stored where the record says it is);
 * - every tool result and user message the last request lost has a removal record (its own, or its kept copy's) and
 *   comes back byte-identical from it;
 * - every pointer of the last request that names recall gives back the output it replaced.
 */
const judgeSession = (
  session: CorpusSession,
  sessionId: string,
  store: Layer.Layer<SessionStore>,
  last: ReadonlyArray<Message>,
  sent: ReadonlySet<string>
) =>
  Effect.gen(function* () {
    const name = session.name
    const entries = yield* readEntries(sessionId).pipe(Effect.provide(store))
    const sources = recallSources(entries)
    const { first, messages: stored, payloads } = storedPayloads(entries)
    const messageEntries = entries.filter((e) => e.type === "message")
    assert.strictEqual(messageEntries.length, session.messages.length, `${name}: one entry per message`)
    // the input's tool results, each occurrence by where the log stores it and under the id it stores (a reply's
    // reused id is renamed in the view, and its result with it); the j-th result of the k-th message, as the input
    // has it (a result that answers no call is dropped on append: never stored, never sent)
    const occurrences: Array<{ readonly id: string; readonly entry: string; readonly text: string }> = []
    const counts = new Map<string, number>()
    let dropped = 0
    session.messages.forEach((m, k) => {
      const results = (message: Message) =>
        blocksOf(message).filter((b) => b.type === "tool_result") as ReadonlyArray<ToolResultBlock>
      const input = results(m)
      const logged = results(messageEntries[k]!.message)
      if (logged.length !== input.length) {
        dropped += input.length - logged.length
        return
      }
      input.forEach((b, j) => {
        const id = logged[j]!.tool_use_id
        const text = payloadText(b.content)
        assert.isTrue(payloadText(logged[j]!.content) === text, `${name}: the log stores result ${id} as given`)
        occurrences.push({ id, entry: messageEntries[k]!.id, text })
        counts.set(id, (counts.get(id) ?? 0) + 1)
      })
    })
    assert.isAtMost(dropped, 2, `${name}: dropped results`)
    let reusedChecked = 0
    for (const o of occurrences) {
      assert.isTrue(answerWhole(sources, `${o.id}@${o.entry}`) === o.text, `${name}: ${o.id}@${o.entry}`)
      if (counts.get(o.id) === 1) {
        assert.isTrue(answerWhole(sources, o.id) === o.text, `${name}: tool result ${o.id} differs from the input`)
      } else {
        const answer = answerFromSources(sources, { _tag: "ByRef", ref: o.id, page: 1 })
        assert.strictEqual(answer._tag, "Ambiguous", `${name}: reused ${o.id}`)
        if (answer._tag === "Ambiguous") assert.include(answer.sources.map((x) => x.ref), `${o.id}@${o.entry}`)
        reusedChecked++
      }
    }
    // every compaction stores its record; every reference a record names comes back as stored where it says
    for (const e of entries) if (e.type === "compaction") assert.isDefined(e.removed, `${name}: compaction ${e.id}`)
    const removals = removalsOf(entries)
    const named = new Set<string>()
    for (const item of removals.flatMap((r) => r.removed)) {
      const key = item.kind === "tool_result" ? `${item.ref.split("@")[0]}@${item.entry}` : item.ref
      if (named.has(key)) continue
      named.add(key)
      const back = answerWhole(sources, item.ref)
      // a bare id names its result as first stored (a kept copy's record too), a qualified one the copy it names
      const expected = item.ref.includes("@") ? payloads.get(item.ref) : first.get(item.ref)
      if (item.kind === "tool_result") assert.isTrue(back === expected, `${name}: record ${key}`)
      else if (stored.has(item.ref)) {
        const message = stored.get(item.ref)!
        if (message.role === "user" && userTextOf(message) !== undefined) {
          assert.isTrue(back === userTextOf(message), `${name}: record ${item.ref}`)
        }
      }
    }
    /** The references a record names for the tool result `id` stored in `entry`, or for a kept copy of it. */
    const copiesOf = (entry: string) => [entry, ...[...stored.keys()].filter((k) => k.includes("#"))]
    const present = presentIn(last)
    let lostResults = 0
    const lostRefs: Array<string> = []
    for (const o of occurrences) {
      // a result after the last reply was never sent: the last request does not lose it
      if (present.results.get(o.id) === o.text || !sent.has(o.id)) continue
      lostResults++
      const via = copiesOf(o.entry).find((e) => named.has(`${o.id}@${e}`) && payloads.get(`${o.id}@${e}`) === o.text)
      assert.isDefined(via, `${name}: lost tool result ${o.id}@${o.entry} has no removal record`)
      lostRefs.push(`${o.id}@${via}`)
    }
    let lostUsers = 0
    let mendedUsers = 0
    const lastReply = session.messages.map((m) => m.role).lastIndexOf("assistant")
    /** The text blocks of a stored user message (its content, when a string). */
    const textsOf = (m: Message): ReadonlyArray<string> =>
      typeof m.content === "string"
        ? [m.content]
        : m.content.filter((b) => b.type === "text").map((b) => (b as { text: string }).text)
    for (const [k, m] of session.messages.entries()) {
      const text = m.role === "user" ? userTextOf(m) : undefined
      // a message after the last reply was never sent: the last request does not lose it
      if (text === undefined || present.users.has(text) || k > lastReply) continue
      lostUsers++
      const entry = messageEntries[k]!.id
      const via = copiesOf(entry).find((e) =>
        named.has(e) && stored.get(e) !== undefined && (e === entry || textsOf(stored.get(e)!).includes(text))
      )
      assert.isDefined(via, `${name}: lost user message ${k} has no removal record`)
      const back = answerWhole(sources, via!)
      const message = stored.get(via!)!
      if (userTextOf(message) === text) {
        assert.isTrue(back === text, `${name}: user message ${k} differs from the input`)
      } else {
        // appended after a call left unanswered: the log stores it mended, with that call's result before its text
        assert.isTrue(
          textsOf(message).join("\n\n") === text && back.endsWith(`\n\n${text}`),
          `${name}: user message ${k} is not in the message its record names`
        )
        mendedUsers++
      }
      lostRefs.push(via!)
    }
    // every pointer the last request holds that names recall: recall on its id gives the input's output back
    let recallPointers = 0
    for (const m of last) {
      for (const b of blocksOf(m)) {
        if (b.type !== "tool_result") continue
        const ref = parseOffloadRef(payloadText((b as ToolResultBlock).content))
        if (ref?.recall !== true || counts.get(ref.toolUseId) !== 1) continue
        recallPointers++
        const input = occurrences.find((o) => o.id === ref.toolUseId)!
        assert.isTrue(answerWhole(sources, ref.toolUseId) === input.text, `${name}: pointer ${ref.toolUseId}`)
      }
    }
    // and `recall` itself, reading the store, on three of the lost ones (one page each: each call reads the log)
    for (const ref of lostRefs.filter((_, i) => i % Math.max(1, Math.ceil(lostRefs.length / 3)) === 0)) {
      const answer = yield* recall(sessionId, { ref }, { maxTokens: 1_000_000 }).pipe(Effect.provide(store))
      assert.isTrue(
        answer._tag === "Found" && answer.page.text === answerWhole(sources, ref),
        `${name}: recall of ${ref} from the store`
      )
    }
    const pagedResults = occurrences.filter((o) => o.text.length > 2_000 * 4).length
    return { lostResults, lostUsers, mendedUsers, recallPointers, pagedResults, reusedChecked }
  })

/** What the last request holds: its tool results' payloads by id and its user texts. */
const presentIn = (request: ReadonlyArray<Message>) => {
  const results = new Map<string, string>()
  const users = new Set<string>()
  for (const m of request) {
    for (const b of blocksOf(m)) {
      if (b.type === "tool_result") {
        results.set((b as ToolResultBlock).tool_use_id, payloadText((b as ToolResultBlock).content))
      }
    }
    if (m.role !== "user") continue
    // a user's text may be merged into a message with tool results (the API merges adjacent user messages)
    const texts = blocksOf(m).filter((b) => b.type === "text").map((b) => (b as { text: string }).text)
    for (const text of [userTextOf(m), userTextOf({ role: "user", content: texts.join("\n\n") }), ...texts]) {
      if (text !== undefined) users.add(text)
    }
  }
  return { results, users }
}

/**
 * The compaction options: the corpus policy for the long sessions, a small trigger and tail for the short ones, which
 * the corpus policy never compacts (their messages hold a few thousand tokens).
 */
const policyFor = (session: CorpusSession) =>
  session.messages.length >= 200 ? { policy: corpusPolicy } : {
    policy: CompactionPolicy.makeUnsafe({
      contextWindow: 8_000,
      compactAtTokens: 1_200,
      keepRecentTokens: 300,
      keepRecentTurns: 1,
      minRemaining: 1_000
    }),
    minFreedTokens: 100
  }

/**
 * The usage each reply reports: the recorded one, or (a session recorded without usage) the estimated tokens of the
 * messages before it, so the trigger sees the context grow.
 */
const usageFor = (session: CorpusSession) => {
  const recorded = usageOf(session.messages)
  if (recorded.size > 0) return recorded
  return new Map(
    session.messages.flatMap((m, i) =>
      m.role === "assistant"
        ? [[i, { input_tokens: estimateTokens(session.messages.slice(0, i)), output_tokens: 50 }] as const]
        : []
    )
  )
}

/**
 * Replays `session` whole into session `sessionId` of `store` (compaction, eviction with recall offered, resumed
 * about 8 times: the log closed and opened again) and judges it (`judgeSession`).
 */
const replayAndJudge = (session: CorpusSession, sessionId: string, store: Layer.Layer<SessionStore>) =>
  Effect.gen(function* () {
    const log = SessionLog.layer({ sessionId, sync: "never" }).pipe(Layer.provide(store))
    const { summary, last, sent } = yield* replayInto(
      session,
      log,
      Math.max(4, Math.ceil(session.messages.length / 8)),
      { ...policyFor(session), ...OFFLOADING },
      usageFor(session)
    )
    assert.isAtLeast(summary.resumes, 1, session.name)
    assert.isAtLeast(summary.compactions, 1, session.name)
    const judged = yield* judgeSession(session, sessionId, store, last, sent)
    return { ...judged, summary }
  })

/** The judgements of `sessions` (each replayed whole) on `store`, summed. */
const judgeCorpus = (store: Layer.Layer<SessionStore>, sessions: ReadonlyArray<CorpusSession>) =>
  Effect.gen(function* () {
    const totals = {
      lostResults: 0,
      lostUsers: 0,
      mendedUsers: 0,
      recallPointers: 0,
      pagedResults: 0,
      reused: 0,
      compactions: 0
    }
    for (const session of sessions) {
      const judged = yield* replayAndJudge(session, session.name, store)
      totals.lostResults += judged.lostResults
      totals.lostUsers += judged.lostUsers
      totals.mendedUsers += judged.mendedUsers
      totals.recallPointers += judged.recallPointers
      totals.pagedResults += judged.pagedResults
      totals.reused += judged.reusedChecked
      totals.compactions += judged.summary.compactions
    }
    return totals
  })

const longPrefix = (length = 300): CorpusSession => {
  const whole = corpus().find((s) => s.name === "pi__before-compaction")!
  return { ...whole, messages: whole.messages.slice(0, length) }
}

describe("Recall over replayed sessions", () => {
  it.effect(
    "every reference a summary's manifest shows is answered by recall with the tool result it came from",
    () =>
      Effect.gen(function* () {
        const sessions = new Map()
        const store = SessionStore.layerMemory(sessions)
        const log = SessionLog.layerMemory({ sessionId: "manifest", store: sessions })
        yield* replayInto(longPrefix(), log)
        const entries = yield* readEntries("manifest").pipe(Effect.provide(store))
        let refs = 0
        for (const entry of entries) {
          if (entry.type !== "compaction") continue
          const text = summaryText(entry.summary)
          const manifest = text === undefined ? undefined : splitSummary(text).manifest
          assert.isDefined(manifest, `compaction ${entry.id} has a manifest`)
          for (const e of manifest!.entries) {
            if (e.kind !== "command" && e.kind !== "error") continue
            // a command in short form may leave its ref out for room
            if (e.kind === "error" || (e.last !== "unanswered" && e.brief !== true)) {
              assert.isDefined(e.ref, `${e.kind} ${e.text}`)
            }
            if (e.ref === undefined) continue
            assert.include(text!, `[ref ${e.ref}]`)
            refs++
            const { source, text: whole } = yield* recallWhole("manifest", e.ref).pipe(Effect.provide(store))
            assert.strictEqual(source.kind, "tool_result", e.ref)
            // an error's line is its result's; a command's result answers a call of that command
            if (e.kind === "error") assert.include(whole.replace(/\s+/g, " "), e.text, e.ref)
            const call = entries.flatMap((x) => x.type === "message" ? blocksOf(x.message) : []).find((b) =>
              b.type === "tool_use" && (b as { id: string }).id === e.ref
            ) as { input: { command?: string; cmd?: string } } | undefined
            const command = (call?.input.command ?? call?.input.cmd ?? "").replace(/\s+/g, " ").trim()
            // a short form is a piece of the command (its head and `…` when clipped)
            const piece = e.kind === "command" && e.brief === true ? e.text.replace(/…$/, "") : undefined
            if (e.kind === "command") {
              assert.isTrue(
                piece === undefined ? command.startsWith(e.text) : command.includes(piece),
                `${e.ref}: ${command} / ${e.text}`
              )
            }
          }
        }
        assert.isAtLeast(refs, 20)
      }),
    180_000
  )

  it.effect(
    "JSONL, every shared session whole: every offloaded or summarized tool result and user message comes back byte-identical",
    () =>
      Effect.gen(function* () {
        const directory = mkdtempSync(join(tmpdir(), "recall-"))
        try {
          const totals = yield* judgeCorpus(
            SessionStoreJsonl.layer({ directory }).pipe(Layer.provide(platform)),
            corpus()
          )
          // the corpus exercises every path: summarized and offloaded results, lost user messages (a few stored
          // mended), pages, a reused id
          const figures = JSON.stringify(totals)
          assert.strictEqual(corpus().length, 5, figures)
          assert.isAtLeast(totals.compactions, 40, figures)
          assert.isAtLeast(totals.lostResults, 800, figures)
          assert.isAtLeast(totals.lostUsers, 100, figures)
          assert.isAtLeast(totals.mendedUsers, 1, figures)
          assert.isAtLeast(totals.recallPointers, 10, figures)
          assert.isAtLeast(totals.pagedResults, 10, figures)
          assert.isAtLeast(totals.reused, 2, figures)
        } finally {
          rmSync(directory, { recursive: true, force: true })
        }
      }),
    120_000
  )

  for (const database of databases) {
    it.effect(
      `SQL (${database.name}), every shared session whole: the same, and a second session's data never comes back`,
      () =>
        Effect.gen(function* () {
          const db = yield* Effect.promise(() => makeSchema(database))
          try {
            const store = Layer.succeedContext(db.context)
            const totals = yield* judgeCorpus(store, corpus())
            const figures = JSON.stringify(totals)
            assert.isAtLeast(totals.compactions, 40, figures)
            assert.isAtLeast(totals.lostResults, 800, figures)
            assert.isAtLeast(totals.lostUsers, 100, figures)
            assert.isAtLeast(totals.recallPointers, 10, figures)
            assert.isAtLeast(totals.reused, 2, figures)
            // another session on the same store, with removed data of its own: its refs are missing from the
            // others, its texts are never found there, and they are found in its own log
            const planted = yield* replayPlanted(20, store, "other")
            const long = "pi__session-2025-12-17_thinking"
            // `recall` is `answerFrom` over the log it reads: the first of each kind asked through `recall` (a read of
            // the store each), the others answered the same way from one read of the log, which nothing changes here
            const entries = yield* readEntries(long).pipe(Effect.provide(store))
            const ask = (input: unknown, first: boolean) =>
              first ? recall(long, input).pipe(Effect.provide(store)) : answerFrom(Effect.succeed(entries), input)
            for (let t = 0; t < 20; t++) {
              const answer = yield* ask({ ref: `toolu_${t}` }, t === 0)
              assert.strictEqual(answer._tag, "Missing")
            }
            for (const [k, fact] of planted.facts.entries()) {
              const key = fact.slice(fact.lastIndexOf(" ") + 1)
              const answer = yield* ask({ query: key }, k === 0)
              assert.isTrue(answer._tag === "Hits" && answer.total === 0, `${key} found in another session`)
            }
            const there = yield* recall("other", { query: "checksum of build" }).pipe(Effect.provide(store))
            assert.isTrue(there._tag === "Hits" && there.total > 0)
          } finally {
            yield* Effect.promise(() => db.drop())
          }
        }),
      180_000
    )
  }
})

// ----------------------------------------------------------------------------
// Planted facts across 20 chained compactions
// ----------------------------------------------------------------------------

/** A session of `turns` turns, each a user request with a planted fact and a large tool result with another. */
const plantedSession = (turns: number, seed: number) => {
  const random = prng(seed)
  const word = () => Math.floor(random() * 36 ** 6).toString(36).padStart(6, "0")
  const facts: Array<string> = []
  const messages: Array<Message> = []
  for (let t = 0; t < turns; t++) {
    const userFact = `deploy code ${t}: ZK${word()}`
    const toolFact = `checksum of build ${t} is QX${word()}`
    facts.push(userFact, toolFact)
    const filler = Array.from({ length: 120 }, (_, i) => `log line ${i} of run ${t}: ${word()} ${word()} ${word()}`)
    filler.splice(Math.floor(random() * filler.length), 0, toolFact)
    const notes = Array.from(
      { length: 60 },
      (_, i) => `Note ${i} for step ${t}: ${word()} ${word()} ${word()} ${word()} ${word()}`
    )
    messages.push(
      { role: "user", content: `Step ${t}. Remember: ${userFact}. Now run the build.\n${notes.join("\n")}` },
      {
        role: "assistant",
        content: [{ type: "tool_use", id: `toolu_${t}`, name: "bash", input: { command: `make build-${t}` } }]
      },
      { role: "user", content: [{ type: "tool_result", tool_use_id: `toolu_${t}`, content: filler.join("\n") }] },
      { role: "assistant", content: [{ type: "text", text: `Build ${t} done.` }] }
    )
  }
  return { messages, facts }
}

/** Replays a planted session of `turns` turns into session `sessionId` of `store`, compacting at nearly every step. */
const replayPlanted = (turns: number, store: Layer.Layer<SessionStore>, sessionId: string) =>
  Effect.gen(function* () {
    const { facts, messages } = plantedSession(turns, 40)
    const log = SessionLog.layer({ sessionId, sync: "never" }).pipe(Layer.provide(store))
    let last: ReadonlyArray<Message> = []
    // every reply reports a request over the trigger, so each step that can free enough compacts
    const usage = new Map(
      messages.flatMap((m, i) =>
        m.role === "assistant" ? [[i, { input_tokens: 10_000, output_tokens: 50 }] as const] : []
      )
    )
    const summary = yield* replayMessages(messages, usage, {
      policy: CompactionPolicy.makeUnsafe({
        contextWindow: 12_000,
        compactAtTokens: 6_000,
        keepRecentTokens: 2_000,
        minRemaining: 2_000
      }),
      resumeEvery: 25,
      log,
      onRequest: (_, request) => Effect.sync(() => void (last = request.messages as ReadonlyArray<Message>))
    }).pipe(Effect.provide(ExtractiveSummarizer.layer))
    return { facts, last, summary }
  })

describe("Removal records", () => {
  it.effect("summaries and kept copies are references too: a replaced summary and a repaired kept message come back", () =>
    Effect.gen(function* () {
      const store = SessionStore.layerMemory(new Map())
      const text = (role: "user" | "assistant", t: string): Message => ({ role, content: t })
      yield* Effect.gen(function* () {
        const log = yield* SessionLog
        yield* log.append([text("user", "first ask"), text("assistant", "first answer"), text("user", "second ask")])
        const one = yield* log.snapshot
        // the kept tail changed by the caller (a repair): the log stores it as the compaction's kept messages
        yield* log.recordCompaction({
          snapshot: one,
          cut: 2,
          view: [text("user", "summary one"), text("user", "second ask, repaired")],
          summarizer: "test"
        })
        yield* log.append([text("assistant", "second answer"), text("user", "third ask")])
        const two = yield* log.snapshot
        yield* log.recordCompaction({
          snapshot: two,
          cut: 3,
          view: [text("user", "summary two"), ...two.view.slice(3)],
          summarizer: "test"
        })
      }).pipe(Effect.provide(SessionLog.layer({ sessionId: "kept", sync: "never" }).pipe(Layer.provide(store))))
      const entries = yield* readEntries("kept").pipe(Effect.provide(store))
      const [first, second] = entries.filter((e) => e.type === "compaction")
      const back = (ref: string) =>
        Effect.map(
          recall("kept", { ref }).pipe(Effect.provide(store)),
          (a) => a._tag === "Found" ? a.page.text : a._tag
        )
      assert.strictEqual(yield* back(first!.id), "summary one")
      assert.strictEqual(yield* back(`${first!.id}#1`), "second ask, repaired")
      const removals = removalsOf(entries)
      assert.deepStrictEqual(
        removals.map((r) => r.removed.map((i) => i.ref)),
        [[entries[0]!.id, entries[1]!.id, entries[2]!.id], [first!.id, `${first!.id}#1`, entries[4]!.id]]
      )
      // the record is the compaction entry's own: what it summarized, then the messages its kept copies replaced;
      // the summary it replaced is one
      assert.deepStrictEqual(second!.type === "compaction" ? second!.removed?.map((i) => i.kind) : [], [
        "summary",
        "message",
        "message"
      ])
      // a log written before entries carried the record: derived from the entries (the repaired original too)
      const old = removalsOf(entries.map((e) => {
        if (e.type !== "compaction") return e
        const { removed: _, ...rest } = e
        return rest
      }))
      assert.deepStrictEqual(
        old.map((r) => r.removed.map((i) => i.ref)),
        [[entries[0]!.id, entries[1]!.id, entries[2]!.id], [first!.id, `${first!.id}#1`, entries[4]!.id]]
      )
      assert.strictEqual(removals[1]!.entryId, second!.id)
      const found = yield* recall("kept", { query: "summary one" }).pipe(Effect.provide(store))
      assert.isTrue(found._tag === "Hits" && found.hits[0]!.ref === first!.id && found.hits[0]!.kind === "summary")
    }))

  it.effect("a removed message's blocks without text of their own come back as their JSON, never searched; a server summary's text", () =>
    Effect.gen(function* () {
      const store = SessionStore.layerMemory(new Map())
      const document: ContentBlock = {
        type: "document",
        source: { type: "text", media_type: "text/plain", data: "the contract says: deliver by March" },
        title: "contract.txt"
      } as ContentBlock
      const image: ContentBlock = {
        type: "image",
        source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgoAAAANSUhEUg" }
      } as ContentBlock
      const search: ContentBlock = {
        type: "server_tool_use",
        id: "srvtoolu_1",
        name: "web_search",
        input: { query: "effect compaction" }
      } as ContentBlock
      const serverSummary: ContentBlock = {
        type: "compaction",
        content: "the server's summary of the start"
      } as ContentBlock
      const asked: Message = {
        role: "user",
        content: [{ type: "text", text: "read the attached contract" }, document, image]
      }
      const answered: Message = {
        role: "assistant",
        content: [serverSummary, search, { type: "text", text: "searched" }]
      }
      yield* Effect.gen(function* () {
        const log = yield* SessionLog
        yield* log.append([asked, answered, { role: "user", content: "next" }])
        const snapshot = yield* log.snapshot
        yield* log.recordCompaction({
          snapshot,
          cut: 2,
          view: [{ role: "user", content: "summary" }, ...snapshot.view.slice(2)],
          summarizer: "test"
        })
      }).pipe(Effect.provide(SessionLog.layer({ sessionId: "blocks", sync: "never" }).pipe(Layer.provide(store))))
      const entries = yield* readEntries("blocks").pipe(Effect.provide(store))
      const back = (ref: string) =>
        Effect.map(
          recall("blocks", { ref }).pipe(Effect.provide(store)),
          (a) => a._tag === "Found" ? a.page.text : a._tag
        )
      // each block is in the message's text: a document's and an image's JSON whole (so the block comes back exactly)
      const user = (yield* back(entries[0]!.id)).split("\n\n")
      assert.deepStrictEqual(user, [
        "read the attached contract",
        `[document]\n${JSON.stringify(document)}`,
        `[image]\n${JSON.stringify(image)}`
      ])
      assert.deepStrictEqual(JSON.parse(user[1]!.split("\n")[1]!), document)
      assert.strictEqual(
        yield* back(entries[1]!.id),
        "[compaction] the server's summary of the start\n\n" +
          `[server_tool_use web_search id=srvtoolu_1] {"query":"effect compaction"}\n\nsearched`
      )
      const search1 = (query: string) =>
        Effect.map(
          recall("blocks", { query }).pipe(Effect.provide(store)),
          (a) => a._tag === "Hits" ? a.hits.map((h) => [h.ref, h.line]) : []
        )
      // the texts are searched (a server tool's input, a server summary), a block's JSON is not
      assert.deepStrictEqual(yield* search1("server's summary"), [[entries[1]!.id, 1]])
      assert.deepStrictEqual(yield* search1("effect compaction"), [[entries[1]!.id, 3]])
      assert.deepStrictEqual(yield* search1("iVBORw0KGgo"), [])
      // the same from the sources a retention measure searches
      const sources = removedSources([asked, answered])
      assert.deepStrictEqual(sources[0]!.opaque, [3, 6])
      assert.deepStrictEqual(searchSources(sources, "attached").map((h) => [h.ref, h.line]), [["removed#0", 1]])
    }))

  it.effect("a compaction's outcome lists every message and tool result of the removed span, results by reference", () =>
    Effect.gen(function* () {
      const { messages } = plantedSession(12, 41)
      const policy = CompactionPolicy.makeUnsafe({
        contextWindow: 12_000,
        compactAtTokens: 6_000,
        keepRecentTokens: 2_000,
        minRemaining: 2_000
      })
      const { outcome } = yield* compactContext(messages, policy).pipe(Effect.provide(ExtractiveSummarizer.layer))
      assert.strictEqual(outcome._tag, "Compacted")
      if (outcome._tag !== "Compacted") return
      const span = messages.slice(0, outcome.cut.removed.to)
      const ids = span.flatMap((m) =>
        blocksOf(m).flatMap((b) => b.type === "tool_result" ? [(b as ToolResultBlock).tool_use_id] : [])
      )
      assert.isAbove(ids.length, 0)
      assert.deepStrictEqual(outcome.removed.filter((r) => r.kind === "tool_result").map((r) => r.ref), ids)
      assert.isTrue(
        outcome.removed.filter((r) => r.kind === "tool_result").every((r) => r.tool === "bash" && r.tokens > 100)
      )
      assert.deepStrictEqual(
        outcome.removed.filter((r) => r.kind === "message").map((r) => r.role),
        span.map((m) => m.role)
      )
    }))
})

describe("The removal record in the compaction entry", () => {
  it.effect("it is the outcome's records with their entry ids; a resumed log reads the same; old and bad lines", () =>
    Effect.gen(function* () {
      const { messages } = plantedSession(12, 43)
      const sessions = new Map()
      const store = SessionStore.layerMemory(sessions)
      const policy = CompactionPolicy.makeUnsafe({
        contextWindow: 12_000,
        compactAtTokens: 6_000,
        keepRecentTokens: 2_000,
        minRemaining: 2_000
      })
      const logLayer = () => SessionLog.layer({ sessionId: "record", sync: "never" }).pipe(Layer.provide(store))
      // live: the log's view compacted through compactContext, which records the boundary
      const live = yield* Effect.gen(function* () {
        const log = yield* SessionLog
        const ids = yield* log.append(messages)
        const { outcome } = yield* compactAndRecord(messages, policy)
        const { entries } = yield* log.loaded
        return { ids, outcome, entry: entries.filter((e) => e.type === "compaction").at(-1)! }
      }).pipe(Effect.provide(ExtractiveSummarizer.layer), Effect.provide(logLayer()))
      assert.strictEqual(live.outcome._tag, "Compacted")
      if (live.outcome._tag !== "Compacted" || live.entry.type !== "compaction") return
      const record = live.entry.removed!
      // the outcome's records, each message named by its entry, each tool result by its id and where it is stored
      assert.strictEqual(record.length, live.outcome.removed.length)
      let message = -1
      live.outcome.removed.forEach((r, i) => {
        const stored = record[i]!
        if (r.kind === "message") message++
        assert.deepStrictEqual(
          { kind: stored.kind, role: stored.role, tool: stored.tool, tokens: stored.tokens },
          { kind: r.kind, role: r.role, tool: r.tool, tokens: r.tokens }
        )
        assert.strictEqual(stored.ref, r.kind === "message" ? live.ids[message] : r.ref)
        if (r.kind === "tool_result") assert.strictEqual(stored.entry, live.ids[message])
      })
      // resumed: a fresh log reads the same record, and removalsOf and inspect's line come from it
      const resumed = yield* Effect.gen(function* () {
        const log = yield* SessionLog
        const loaded = yield* log.load()
        return loaded.entries.filter((e) => e.type === "compaction").at(-1)!
      }).pipe(Effect.provide(logLayer()))
      assert.deepStrictEqual(resumed, live.entry)
      const entries = yield* readEntries("record").pipe(Effect.provide(store))
      const [removal] = removalsOf(entries)
      assert.deepStrictEqual(removal!.removed, record)
      const line = formatRemoval(removal!)
      assert.include(line, `compaction ${live.entry.id}: removed ${live.outcome.cut.removed.to} messages`)
      assert.include(line, `recall refs: ${record.find((i) => i.kind === "tool_result")!.ref}`)
      // a line written before entries carried the record decodes, its record derived; a malformed one is Corrupt
      const { removed: _, ...old } = live.entry
      const decodedOld = decodeLine(encodeEntry(old))
      assert.isTrue(Result.isSuccess(decodedOld) && decodedOld.success.type === "compaction")
      const oldRemovals = removalsOf([...entries.filter((e) => e.type !== "compaction"), old])
      assert.deepStrictEqual(
        oldRemovals[0]!.removed.filter((i) => i.kind === "message").map((i) => i.ref),
        live.ids.slice(0, live.outcome.cut.removed.to)
      )
      for (
        const bad of [[{ ref: "", kind: "message", tokens: 1 }], [{ ref: "a", kind: "file", tokens: 1 }], [{
          ref: "a",
          kind: "message",
          tokens: 1.5
        }], "all"]
      ) {
        const decoded = decodeLine(encodeEntry({ ...live.entry, removed: bad } as unknown as Entry))
        assert.isTrue(Result.isFailure(decoded) && decoded.failure.reason === "Corrupt", JSON.stringify(bad))
      }
    }))

  it.effect("a reused tool_use id: each copy has its own reference, and the bare id lists them", () =>
    Effect.gen(function* () {
      const sessions = new Map()
      const store = SessionStore.layerMemory(sessions)
      const step = (id: string, command: string, output: string): ReadonlyArray<Message> => [
        { role: "assistant", content: [{ type: "tool_use", id, name: "bash", input: { command } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: id, content: output }] }
      ]
      // a writer that reuses its call ids (as some agents do across turns) writes to the log directly
      const record = yield* Effect.gen(function* () {
        const log = yield* SessionLog
        yield* log.append([
          { role: "user", content: "go" },
          ...step("call_1", "ls", "first output\nalpha"),
          { role: "user", content: "again" },
          ...step("call_1", "ls -a", "second output\nbeta"),
          { role: "user", content: "and the other" },
          ...step("call_2", "pwd", "/work"),
          { role: "assistant", content: "done" },
          { role: "user", content: "next" }
        ])
        const snapshot = yield* log.snapshot
        const entry = yield* log.recordCompaction({
          snapshot,
          cut: 9,
          view: [{ role: "user", content: "summary" }, ...snapshot.view.slice(9)],
          summarizer: "test"
        })
        return { entry, ids: snapshot.entryIds }
      }).pipe(Effect.provide(SessionLog.layerMemory({ sessionId: "reuse", store: sessions })))
      const first = `call_1@${record.ids[2]}`
      const second = `call_1@${record.ids[5]}`
      // the stored record says where each copy is
      assert.deepStrictEqual(
        record.entry.removed!.filter((i) => i.kind === "tool_result").map((i) => `${i.ref}@${i.entry}`),
        [first, second, `call_2@${record.ids[8]}`]
      )
      const answer = (input: unknown) => recall("reuse", input).pipe(Effect.provide(store))
      const text = (a: RecallAnswer) => a._tag === "Found" ? a.page.text : renderAnswer(a)
      assert.strictEqual(text(yield* answer({ ref: first })), "first output\nalpha")
      assert.strictEqual(text(yield* answer({ ref: second })), "second output\nbeta")
      assert.strictEqual(text(yield* answer({ ref: "call_2" })), "/work")
      // the bare id is ambiguous: the answer lists both references, never picks one
      const bare = yield* answer({ ref: "call_1" })
      assert.strictEqual(bare._tag, "Ambiguous")
      if (bare._tag === "Ambiguous") assert.deepStrictEqual(bare.sources.map((s) => s.ref), [first, second])
      assert.include(renderAnswer(bare), `ref="${second}" tool="bash" removed: second output`)
      // a search names the copy it found; the removal records name each copy as recall does
      const hit = yield* answer({ query: "beta" })
      assert.isTrue(hit._tag === "Hits" && hit.hits[0]!.ref === second, renderAnswer(hit))
      const entries = yield* readEntries("reuse").pipe(Effect.provide(store))
      assert.deepStrictEqual(
        removalsOf(entries)[0]!.removed.filter((i) => i.kind === "tool_result").map((i) => i.ref),
        [first, second, "call_2"]
      )
      // the runner's tool answers the bare id with the list, for the model to choose
      const runner = recallRunnableTool("reuse", store)
      assert.include(yield* Effect.promise(() => runner.run({ ref: "call_1" })), first)
    }))
})

describe("Recall search", () => {
  it.effect(
    "planted facts removed by 20 chained compactions are each found by one search",
    () =>
      Effect.gen(function* () {
        const store = SessionStore.layerMemory(new Map())
        const { facts, last, summary } = yield* replayPlanted(50, store, "planted")
        assert.isAtLeast(summary.compactions, 20)
        const sent = JSON.stringify(last)
        let removedFacts = 0
        for (const fact of facts) {
          const key = fact.slice(fact.lastIndexOf(" ") + 1)
          const answer: RecallAnswer = yield* recall("planted", { query: key }).pipe(Effect.provide(store))
          if (sent.includes(fact)) continue
          removedFacts++
          assert.isTrue(answer._tag === "Hits" && answer.total >= 1, `${fact}: ${renderAnswer(answer)}`)
          if (answer._tag === "Hits") assert.include(answer.hits[0]!.excerpt, fact)
        }
        assert.isAtLeast(removedFacts, 60)
        // a regular expression finds them too, newest first
        const all = yield* recall("planted", { query: "checksum of build \\d+ is QX", regex: true }).pipe(
          Effect.provide(store)
        )
        assert.isTrue(all._tag === "Hits" && all.total >= 40)
        if (all._tag === "Hits") {
          // the tool results' hits, newest first (summaries a later compaction replaced repeat older facts)
          const builds = all.hits.filter((h) => h.kind === "tool_result").map((h) =>
            Number(/checksum of build (\d+) is QX/.exec(h.excerpt)![1])
          )
          assert.deepStrictEqual(builds, [...builds].sort((a, b) => b - a), "newest first")
        }
      }),
    60_000
  )
})

// ----------------------------------------------------------------------------
// Pure parts
// ----------------------------------------------------------------------------

describe("Recall pages and input", () => {
  it("pages of any text and line range join to exactly the selected lines, none above the cap", () => {
    const random = prng(7)
    const alphabet = ["a", "b", "\n", "😀", "é", " ", "\n\n"]
    for (let n = 0; n < 300; n++) {
      const text = Array.from(
        { length: Math.floor(random() * 400) },
        () => alphabet[Math.floor(random() * alphabet.length)]
      ).join("")
      const lineCount = text.split("\n").length
      const start = 1 + Math.floor(random() * lineCount)
      const end = random() < 0.3 ? undefined : start + Math.floor(random() * 5)
      const lines = random() < 0.3 ? undefined : end === undefined ? { start } : { start, end }
      const maxChars = 2 + Math.floor(random() * 40)
      const first = pageOf(text, { lines, maxChars })
      let joined = ""
      for (let p = 1; p <= first.pages; p++) {
        const page = pageOf(text, { lines, page: p, maxChars })
        assert.isAtMost(page.text.length, maxChars)
        joined += page.text
      }
      const all = text.split("\n")
      const expected = lines === undefined
        ? text
        : all.slice(start - 1, Math.min(end ?? all.length, all.length)).join("\n") +
          (Math.min(end ?? all.length, all.length) < all.length ? "\n" : "")
      assert.strictEqual(joined, expected)
      assert.notMatch(joined, /[\ud800-\udbff]$/)
    }
  })

  it("search finds a user's text beside a tool result in one message, and each tool result line once", () => {
    const messages: ReadonlyArray<Message> = [
      { role: "user", content: "start" },
      { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "bash", input: { command: "ls" } }] },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "t1", content: "alpha.txt\nbeta.txt" },
          { type: "text", text: "now remove alpha please" }
        ]
      }
    ]
    const sources = removedSources(messages)
    const text = searchSources(sources, "remove alpha")
    assert.deepStrictEqual(text.map((h) => [h.ref, h.kind, h.line]), [["removed#2", "message", 5]])
    const result = searchSources(sources, "alpha.txt")
    assert.deepStrictEqual(result.map((h) => [h.ref, h.kind, h.line]), [["t1", "tool_result", 1]])
  })

  it("bad input is a typed error the model can read, never a guess", () => {
    const bad: ReadonlyArray<unknown> = [
      null,
      "ref",
      {},
      { ref: "a", query: "b" },
      { ref: "" },
      { ref: "a", lines: "5-2" },
      { ref: "a", page: 0 },
      { query: "(", regex: true },
      { query: "a", lines: "1-2" },
      { ref: "a", extra: 1 }
    ]
    for (const input of bad) {
      const decoded = decodeRecallInput(input)
      assert.isTrue(Result.isFailure(decoded), JSON.stringify(input))
      if (Result.isFailure(decoded)) assert.strictEqual(decoded.failure._tag, "RecallInputError")
    }
    assert.deepStrictEqual(
      decodeRecallInput({ ref: "x", lines: "3-9", page: 2 }),
      Result.succeed({
        _tag: "ByRef" as const,
        ref: "x",
        lines: { start: 3, end: 9 },
        page: 2
      })
    )
  })

  it.effect("a pattern that backtracks catastrophically is refused with a typed error; a long line is searched in its head", () =>
    Effect.gen(function* () {
      // the classic exponential shape, on the line that makes it exponential: refused before any search
      const line = `${"a".repeat(5_000)}!`
      for (const query of ["(a+)+$", "(a*)*b", "(\\w*\\s?)*x", "(?:ab{2,})+c", "(a\\1)+"]) {
        const decoded = decodeRecallInput({ query, regex: true })
        assert.isTrue(Result.isFailure(decoded), query)
        if (Result.isFailure(decoded)) {
          assert.strictEqual(decoded.failure._tag, "RecallInputError")
          assert.include(decoded.failure.detail, "exponential", query)
        }
      }
      const sessions = new Map()
      const store = SessionStore.layerMemory(sessions)
      yield* Effect.gen(function* () {
        const log = yield* SessionLog
        yield* log.append([
          { role: "user", content: "go" },
          { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "bash", input: { command: "x" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: `${line}\nend marker` }] },
          { role: "assistant", content: "done" },
          { role: "user", content: "next" }
        ])
        const snapshot = yield* log.snapshot
        yield* log.recordCompaction({
          snapshot,
          cut: 4,
          view: [{ role: "user", content: "summary" }, ...snapshot.view.slice(4)],
          summarizer: "test"
        })
      }).pipe(Effect.provide(SessionLog.layerMemory({ sessionId: "regex", store: sessions })))
      const refused = yield* recall("regex", { query: "(a+)+$", regex: true }).pipe(Effect.provide(store))
      assert.strictEqual(refused._tag, "Invalid")
      assert.match(renderAnswer(refused), /^\[recall\] query is refused: a repeated group/)
      // the same shape without the nesting is answered; a regular expression sees a line's head only
      const plain = yield* recall("regex", { query: "a+$", regex: true }).pipe(Effect.provide(store))
      assert.isTrue(plain._tag === "Hits" && plain.total === 0, "the line's end is past the head a pattern sees")
      const head = yield* recall("regex", { query: `^a{${MAX_REGEX_LINE}}`, regex: true }).pipe(Effect.provide(store))
      assert.isTrue(head._tag === "Hits" && head.total === 1 && head.hits[0]!.ref === "t1")
      const text = yield* recall("regex", { query: "a!" }).pipe(Effect.provide(store))
      assert.isTrue(text._tag === "Hits" && text.total === 1, "a plain query reads whole lines")
      const marker = yield* recall("regex", { query: "^end marker$", regex: true }).pipe(Effect.provide(store))
      assert.isTrue(marker._tag === "Hits" && marker.total === 1 && marker.hits[0]!.line === 2)
    }))

  it("with recall offered, an output's pointer (and a modified read's) says to call it with its id; it round-trips", () => {
    const output = Array.from({ length: 300 }, (_, i) => `output line ${i}`).join("\n")
    const messages: Array<Message> = [
      { role: "user", content: "go" },
      { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "bash", input: { command: "npm test" } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: output }] },
      { role: "assistant", content: [{ type: "tool_use", id: "t2", name: "Read", input: { file_path: "/a.ts" } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "t2", content: output }] },
      { role: "assistant", content: [{ type: "tool_use", id: "t3", name: "Write", input: { file_path: "/a.ts" } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "t3", content: "ok" }] }
    ]
    const offered = evictStaleToolResults(messages, 0, { recall: true, minSavings: 1 })
    const texts = offered.offloaded.map((o) => o.block.content as string)
    assert.strictEqual(texts.length, 2)
    assert.include(texts[0]!, 'id="t1"')
    assert.match(texts[0]!, /via=recall\] This tool output was removed to save context\. Call recall with this id/)
    assert.match(
      texts[1]!,
      /reason=modified .*via=recall\] The file was changed after this read\..*call recall with this id/
    )
    for (const o of offered.offloaded) assert.deepStrictEqual(parseOffloadRef(o.block.content as string), o.ref)
    assert.isTrue(offered.offloaded.every((o) => o.ref.recall === true))
    // not offered: the pointers say nothing of recall
    const plain = evictStaleToolResults(messages, 0, { minSavings: 1 })
    assert.isTrue(plain.offloaded.every((o) => !(o.block.content as string).includes("recall")))
  })

  it("with recall offered, the carried eviction index decides as a fresh eviction does, over 60 generated loops", () => {
    let offloads = 0
    for (let seed = 1; seed <= 60; seed++) {
      const rand = prng(seed * 104_729)
      const session = generateSession(seed, { messages: 30 + Math.floor(rand() * 120), maxOutput: 6000 })
      const keep = [0, 1, 3, 5][Math.floor(rand() * 4)]!
      const options = { recall: true, ...(rand() < 0.5 ? { minSavings: 0 } : {}) }
      let view: Array<Message> = []
      const index = buildIndex(view, defaultToolClassifier)
      for (let next = 0; next < session.length; next += 2) {
        view = [...view, ...session.slice(next, next + 2)]
        assert.isTrue(extendIndex(index, view))
        const carried = decide(index, view, keep, { ...options, prices: cachePrices("5m") })
        assert.deepStrictEqual(carried, evictStaleToolResults(view, keep, options), `seed ${seed} at ${view.length}`)
        if (carried.offloaded.length > 0) {
          offloads += carried.offloaded.length
          assert.isTrue(carried.offloaded.every((o) => o.ref._tag === "Read" || o.ref.recall === true))
          view = carried.messages
          applyOffloads(index, view, carried.offloaded)
        }
      }
    }
    assert.isAbove(offloads, 100)
  })

  it("a recall's result is evicted like a file read: a later recall of the same reference supersedes it", () => {
    const big = Array.from({ length: 400 }, (_, i) => `line ${i} of the recalled output`).join("\n")
    const call = (id: string, ref: string): Message => ({
      role: "assistant",
      content: [{ type: "tool_use", id, name: "recall", input: { ref } }]
    })
    const result = (id: string): Message => ({
      role: "user",
      content: [{ type: "tool_result", tool_use_id: id, content: `[recall ref="toolu_x"]\n${big}` }]
    })
    const messages: Array<Message> = [
      { role: "user", content: "go" },
      call("r1", "toolu_x"),
      result("r1"),
      call("r2", "toolu_y"),
      result("r2"),
      call("r3", "toolu_x"),
      result("r3")
    ]
    const evicted = evictStaleToolResults(messages, 10, { classifier: recallClassifier(), minSavings: 1 })
    assert.deepStrictEqual(evicted.offloaded.map((o) => [o.toolUseId, o.reason]), [["r1", "superseded"]])
    // without the recall classifier a recall is any other tool: nothing supersedes it
    assert.strictEqual(evictStaleToolResults(messages, 10, { minSavings: 1 }).offloaded.length, 0)
  })
})
