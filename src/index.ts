/**
 * effect-compaction: context compaction for LLM agents, on Effect 4.
 *
 * The pure core decides where to cut and what to offload; the effectful shell summarizes, persists and simulates.
 * See COMPACTION.md for the doctrine.
 *
 * @since 0.1.0
 */
// The pure core
export * as Message from "./Message.ts"
export * as Tokens from "./Tokens.ts"
export * as Turns from "./Turns.ts"
export * as ApiView from "./ApiView.ts"
export * as Tools from "./Tools.ts"
export * as Cut from "./Cut.ts"
export * as Policy from "./Policy.ts"
export * as Validate from "./Validate.ts"
export * as Evict from "./Evict.ts"
export * as HotPaths from "./HotPaths.ts"
export * as Render from "./Render.ts"
// The effectful shell
export * as Summarizer from "./Summarizer.ts"
export * as Compact from "./Compact.ts"
export * as SessionLog from "./SessionLog.ts"
export * as Import from "./Import.ts"
export * as Simulate from "./Simulate.ts"
