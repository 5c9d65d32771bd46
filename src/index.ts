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
 * @since 0.1.0
 */
// The front door: the agent loop: the service and its layers, over the state value and its pure transitions and the
// request a state sends (those two are plain values in, plain values out; no services, no I/O)
export * as Conversation from "./Conversation.ts"
export * as ConversationState from "./ConversationState.ts"
export * as Request from "./Request.ts"
// The same loop for code without Effect: each step a Promise
export * as PromiseConversation from "./PromiseConversation.ts"
// The pure core: plain values in, plain values out; no services, no I/O
export * as Message from "./Message.ts"
export * as Tokens from "./Tokens.ts"
export * as Turns from "./Turns.ts"
export * as ApiView from "./ApiView.ts"
export * as Tools from "./Tools.ts"
export * as Cut from "./Cut.ts"
export * as Policy from "./Policy.ts"
export * as Validate from "./Validate.ts"
export * as Offload from "./Offload.ts"
export * as Evict from "./Evict.ts"
export * as Cache from "./Cache.ts"
export * as HotPaths from "./HotPaths.ts"
export * as Render from "./Render.ts"
export * as Summary from "./Summary.ts"
export * as Retention from "./Retention.ts"
// The effectful shell: services, layers and typed errors
export * as Summarizer from "./Summarizer.ts"
export * as SummarizeError from "./SummarizeError.ts"
export * as ExtractiveSummarizer from "./ExtractiveSummarizer.ts"
export * as LanguageModelSummarizer from "./LanguageModelSummarizer.ts"
export * as SummarizerAuto from "./SummarizerAuto.ts"
export * as Compact from "./Compact.ts"
export * as TokenCounter from "./TokenCounter.ts"
export * as SessionLog from "./SessionLog.ts"
export * as SessionEntry from "./SessionEntry.ts"
export * as SessionStore from "./SessionStore.ts"
export * as SessionStoreJsonl from "./SessionStoreJsonl.ts"
export * as SessionStoreSql from "./SessionStoreSql.ts"
// The way back: the recall tool and its answers from the session log
export * as Recall from "./Recall.ts"
// The tools: pure conversions and replays over recorded sessions (`Import.importSessionFile` reads a file through
// `FileSystem`; everything else in both is pure)
export * as Import from "./Import.ts"
export * as Simulate from "./Simulate.ts"
