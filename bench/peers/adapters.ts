/**
 * Prepared inputs and one adapter per measured call, for `bench/peers.bench.ts`, `test/Peers.test.ts`, and CI
 * budget checks that want the same calls (`prepareWorkload(1_000)` then `ours.cut(s)` against `peers.piCut(s)`).
 *
 * A workload is one or more sessions, each already converted to every peer's format (`prepareSession`), so no
 * conversion runs inside a timed region. Every adapter takes one `PreparedSession` and returns the call's result, so
 * tests can check that it did real work.
 */
import { estimateTokens as piEstimateTokens, findCutPoint } from "@mariozechner/pi-coding-agent"
import { type BaseMessage, trimMessages } from "@langchain/core/messages"
import { type ModelMessage, pruneMessages } from "ai"
import { type CutPolicy, planForPolicy } from "../../src/Cut.ts"
import { type EvictResult, evictStaleToolResults } from "../../src/Evict.ts"
import { applyOffloads, buildIndex, decide, extendIndex } from "../../src/internal/eviction.ts"
import { defaultToolClassifier } from "../../src/Tools.ts"
import type { Message } from "../../src/Message.ts"
import { CompactionPolicy } from "../../src/Policy.ts"
import { estimateTokens } from "../../src/Tokens.ts"
import { corpus } from "../../test/fixtures/Corpus.ts"
import { generateSession } from "../../test/fixtures/Conversation.ts"
import { type Converted, type PiConversation, toAiSdk, toLangChain, toPi } from "./convert.ts"
import { countTokensApproximately } from "langchain"
import { coldEstimate } from "../baselines.ts"
import { cachePrices } from "../../src/internal/cacheTtl.ts"

// ============================================================================
// Settings shared by every side
// ============================================================================

/** Recent tokens every cut keeps: pi's default `keepRecentTokens`, and ours for the comparison. */
export const KEEP_RECENT_TOKENS = 20_000

/** Our cut policy for the comparison: the library defaults with `keepRecentTokens` at 20,000. */
export const CUT_POLICY: CutPolicy = CompactionPolicy.makeUnsafe({ keepRecentTokens: KEEP_RECENT_TOKENS })

/** Newest tool results our eviction keeps verbatim (its `keepRecent`). */
export const KEEP_RECENT_TOOL_RESULTS = 20

/**
 * Newest messages whose tool calls and results `pruneMessages` keeps. A step is an assistant message and a tool
 * message with one or more results, so 40 messages hold about the same 20 newest results.
 */
export const KEEP_RECENT_MESSAGES = 40

/** The generated session sizes the benchmark runs, in messages. */
export const GENERATED_SIZES = [1_000, 10_000, 50_000] as const

// ============================================================================
// Workloads
// ============================================================================

/** One session in our format and in every peer's format. */
export interface PreparedSession {
  readonly name: string
  readonly messages: ReadonlyArray<Message>
  readonly pi: PiConversation
  readonly langchain: Converted<BaseMessage>
  readonly ai: Converted<ModelMessage>
}

/** Converts one session to every peer's format (done once, outside the timed region). */
export const prepareSession = (name: string, messages: ReadonlyArray<Message>): PreparedSession => ({
  name,
  messages,
  pi: toPi(messages),
  langchain: toLangChain(messages),
  ai: toAiSdk(messages)
})

/** A named set of prepared sessions; a benchmark iteration runs the measured call once per session. */
export interface Workload {
  readonly name: string
  readonly sessions: ReadonlyArray<PreparedSession>
  readonly messageCount: number
}

/**
 * The real sessions of `../shared/data/sessions/` (`"real"`), or one generated session of about `size` messages
 * (`generateSession(size, { messages: size })`, so the same size always gives the same session).
 */
export const prepareWorkload = (size: "real" | number): Workload => {
  const sessions = size === "real"
    ? corpus().map((s) => prepareSession(s.name, s.messages))
    : [prepareSession(`generated-${size}`, generateSession(size, { messages: size }))]
  return {
    name: size === "real" ? `real sessions (${sessions.length})` : `generated ${size / 1000}k`,
    sessions,
    messageCount: sessions.reduce((n, s) => n + s.messages.length, 0)
  }
}

/**
 * New message objects with the same content, so our identity cache is cold for them. Shallow: blocks are shared,
 * which costs the estimator nothing (it reads them, and caches per message).
 */
export const freshMessages = (messages: ReadonlyArray<Message>): Array<Message> =>
  messages.map((message) => ({ ...message }))

// ============================================================================
// Our calls
// ============================================================================

/** Our side of each comparison, one call per session. */
export const ours = {
  /** Whole-conversation estimate through the identity cache (warm once the session was estimated before). */
  estimate: (s: PreparedSession): number => estimateTokens(s.messages),
  /** Whole-conversation estimate with no cache at all. */
  estimateUncached: (s: PreparedSession): number => coldEstimate(s.messages),
  /** The first kept index for `CUT_POLICY`. */
  cut: (s: PreparedSession): number => planForPolicy(s.messages, CUT_POLICY).cut,
  /** Tool-output eviction with default options, keeping the newest `KEEP_RECENT_TOOL_RESULTS` results. */
  evict: (s: PreparedSession): EvictResult<Message> =>
    evictStaleToolResults(s.messages, KEEP_RECENT_TOOL_RESULTS, { minSavings: 0 })
}

// ============================================================================
// Peer calls
// ============================================================================

/** The peers' side of each comparison, one call per session. */
export const peers = {
  /** pi: `estimateTokens` summed over the messages (what pi's `estimateContextTokens` does without usage). */
  piEstimate: (s: PreparedSession): number => {
    let total = 0
    for (const message of s.pi.messages) total += piEstimateTokens(message)
    return total
  },
  /** LangChain: `countTokensApproximately` over the whole list. */
  langchainEstimate: (s: PreparedSession): number =>
    countTokensApproximately(s.langchain.messages as Array<BaseMessage>),
  /** pi: `findCutPoint` over the whole session, mapped back to the index of our message it starts in. */
  piCut: (s: PreparedSession): number => {
    const entries = s.pi.entries as Parameters<typeof findCutPoint>[0]
    const cut = findCutPoint(entries, 0, entries.length, KEEP_RECENT_TOKENS)
    return s.pi.origin[cut.firstKeptEntryIndex] ?? s.messages.length
  },
  /**
   * LangChain: `trimMessages` keeping the last `KEEP_RECENT_TOKENS` by `countTokensApproximately`, starting on a
   * human message (its documented setting for chat history). Returns the kept messages.
   */
  langchainTrim: (s: PreparedSession): Promise<Array<BaseMessage>> =>
    trimMessages(s.langchain.messages as Array<BaseMessage>, {
      maxTokens: KEEP_RECENT_TOKENS,
      strategy: "last",
      startOn: "human",
      tokenCounter: countTokensApproximately
    }),
  /**
   * AI SDK: `pruneMessages` removing tool calls and results before the last `KEEP_RECENT_MESSAGES` messages (and the
   * messages that become empty).
   */
  aiPrune: (s: PreparedSession): Array<ModelMessage> =>
    pruneMessages({
      messages: s.ai.messages as Array<ModelMessage>,
      toolCalls: `before-last-${KEEP_RECENT_MESSAGES}-messages`
    })
}

// ============================================================================
// Eviction workloads: cold on fresh objects, warm one turn at a time
// ============================================================================

/**
 * The session as new objects, messages and tool_result blocks alike (strings shared), estimated once as a live loop
 * has: no cache of the eviction (its pointers, the payloads it parsed) has seen any of them.
 */
export const freshForEviction = (messages: ReadonlyArray<Message>): Array<Message> => {
  const fresh = messages.map((m): Message =>
    typeof m.content === "string" ? { ...m } : { ...m, content: m.content.map((b) => ({ ...b })) } as Message
  )
  estimateTokens(fresh)
  return fresh
}

/** One agent turn: a whole-file read of a new path and its 8,000-character result. */
const readTurn = (n: number): ReadonlyArray<Message> => {
  const id = `toolu_warm_${n}`
  const path = `/warm/file_${n}.ts`
  return [
    { role: "assistant", content: [{ type: "tool_use", id, name: "read", input: { path } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: id, content: `${path}\n${"x".repeat(8000)}` }] }
  ]
}

/**
 * Warm eviction as a `perSample` pair: the session evicted once (`KEEP_RECENT_TOOL_RESULTS`, `minSavings` 0) and
 * its decisions indexed; `input` appends one new turn (untimed), `evict` extends the carried index by it and decides
 * (what `Conversation`'s prepare does), taking the eviction's output as the next view. Each decision equals
 * `evictStaleToolResults` on the same list (`test/EvictCarried.property.test.ts`).
 */
export const warmEviction = (messages: ReadonlyArray<Message>) => {
  let view: ReadonlyArray<Message> = evictStaleToolResults(messages, KEEP_RECENT_TOOL_RESULTS, { minSavings: 0 })
    .messages
  const index = buildIndex(view, defaultToolClassifier)
  const options = { minSavings: 0, prices: cachePrices("5m") }
  decide(index, view, KEEP_RECENT_TOOL_RESULTS, options)
  let n = 0
  return {
    input: (): ReadonlyArray<Message> => (view = view.concat(readTurn(n++))),
    evict: (grown: ReadonlyArray<Message>): number => {
      extendIndex(index, grown)
      const result = decide(index, grown, KEEP_RECENT_TOOL_RESULTS, options)
      if (result.offloaded.length > 0) {
        applyOffloads(index, result.messages, result.offloaded)
        view = result.messages
      }
      return result.offloaded.length
    }
  }
}
