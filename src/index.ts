/**
 * Concept: the barrel, every public module as a namespace.
 *
 * effect-compaction: context compaction for LLM agents, on Effect 4.
 *
 * `Conversation` is the front door: an agent appends messages, asks for the next request and records the reply; it
 * runs the rest. Below it, the pure core decides where to cut and what to offload; the effectful shell summarizes and
 * persists; the tools import recorded sessions and price policies over them. Importing this barrel never loads
 * `@anthropic-ai/sdk`: only `AnthropicSummarizer` does, on first use. See COMPACTION.md for the doctrine.
 *
 * @module
 * @since 0.1.0
 */
// The front door: the agent loop: the service and its layers, over the state value and its pure transitions and the
// request a state sends (those two are plain values in, plain values out; no services, no I/O)
/** The conversation service: the agent loop for Effect code over a `ConversationState`. */
export * as Conversation from "./Conversation.ts"
/** The state of the agent loop as a value, and its pure transitions. */
export * as ConversationState from "./ConversationState.ts"
/** The Messages API request a conversation state sends (`requestOf`). */
export * as Request from "./Request.ts"
// The same loop for code without Effect: each step a Promise
/** The agent loop for code without Effect: each step a Promise. */
export * as PromiseConversation from "./PromiseConversation.ts"
// The pure core: plain values in, plain values out; no services, no I/O
/** The wire model: a conversation as the Messages API takes it, and its decoding. */
export * as Message from "./Message.ts"
/** Token estimation, used to place cuts (never to trigger a compaction). */
export * as Tokens from "./Tokens.ts"
/** User turns: where they start and how many there are. */
export * as Turns from "./Turns.ts"
/** The API view: what the Messages API processes of a message list. */
export * as ApiView from "./ApiView.ts"
/** The tool classifier: which files a tool call reads or writes. */
export * as Tools from "./Tools.ts"
/** The cut: the index that splits a conversation into a summarized head and a kept tail. */
export * as Cut from "./Cut.ts"
/** The compaction policy: when to compact and how much recent history to keep. */
export * as Policy from "./Policy.ts"
/** Validity for the Messages API, as violations, and repair. */
export * as Validate from "./Validate.ts"
/** The offload pointer: the typed text that stands for an offloaded tool result. */
export * as Offload from "./Offload.ts"
/** Eviction: which tool results to offload, and offloading them. */
export * as Evict from "./Evict.ts"
/** Where the prompt cache's `cache_control` breakpoints go. */
export * as Cache from "./Cache.ts"
/** The re-read tracker: files read again right after their output was offloaded. */
export * as HotPaths from "./HotPaths.ts"
/** The transcript a summarizer reads. */
export * as Render from "./Render.ts"
/** The summary message that replaces a summarized prefix, and the parts its text splits into. */
export * as Summary from "./Summary.ts"
/** Retention: what of a span survives a compaction, measured without a model. */
export * as Retention from "./Retention.ts"
// The effectful shell: services, layers and typed errors
/** The summarizer contract, and what wraps any summarizer (retries, timeout, fallback, quality gate). */
export * as Summarizer from "./Summarizer.ts"
/** Why a summarization failed: `SummarizeError`, one reason class per cause. */
export * as SummarizeError from "./SummarizeError.ts"
/** The summarizer that needs no model: a deterministic summary written from the messages. */
export * as ExtractiveSummarizer from "./ExtractiveSummarizer.ts"
/** A summarizer over any `effect/ai` `LanguageModel` in context. */
export * as LanguageModelSummarizer from "./LanguageModelSummarizer.ts"
/** The summarizer picked from the environment (`layerAuto`). */
export * as SummarizerAuto from "./SummarizerAuto.ts"
/** One compaction: prepare (pure), summarize, finish (pure), record. */
export * as Compact from "./Compact.ts"
/** The service that counts a request's input tokens (estimate or the Messages API's count). */
export * as TokenCounter from "./TokenCounter.ts"
/** The session log service: append-only, over a `SessionStore`, and the resume that rebuilds the view. */
export * as SessionLog from "./SessionLog.ts"
/** A session's stored entries: their schema, the line each is stored as, and the load that folds them. */
export * as SessionEntry from "./SessionEntry.ts"
/** The store contract of the session log, and the in-memory store. */
export * as SessionStore from "./SessionStore.ts"
/** The JSONL file store: one `<sessionId>.jsonl` file per session. */
export * as SessionStoreJsonl from "./SessionStoreJsonl.ts"
/** The SQL store, through `effect/sql`'s `SqlClient` (PostgreSQL). */
export * as SessionStoreSql from "./SessionStoreSql.ts"
// The way back: the recall tool and its answers from the session log
/** The way back: a tool that reads from the log what a compaction or an eviction removed. */
export * as Recall from "./Recall.ts"
// The tools: pure conversions and replays over recorded sessions (`Import.importSessionFile` reads a file through
// `FileSystem`; everything else in both is pure)
/** Session import: a recorded session in any supported format into the wire model. */
export * as Import from "./Import.ts"
/** The cost simulator: a recorded session replayed and priced under a policy. */
export * as Simulate from "./Simulate.ts"
