/**
 * effect-compaction: context compaction for LLM agents, on Effect 4.
 *
 * The pure core (`Message`, `Tokens`, `Turns`, …) decides where to cut and what to offload; the effectful shell
 * summarizes and persists. See COMPACTION.md for the doctrine.
 *
 * @since 0.1.0
 */
export * as Message from "./Message.ts"
export * as Tokens from "./Tokens.ts"
export * as Turns from "./Turns.ts"
