/**
 * The README's quick start, runnable: `node examples/quickstart.ts` (Node 22) or `deno run -A examples/quickstart.ts`.
 * With ANTHROPIC_API_KEY set it summarizes with Claude (falling back to the extractive summarizer on failure);
 * without it, it uses the extractive summarizer and needs no network.
 */
import { Effect } from "effect"
import { Compact, Cut, Evict, HotPaths, Message, Policy, Summarizer, Tokens, Validate } from "../src/index.ts"
import { readFileSync } from "node:fs"

// 1. The pure core: plain arrays in, plain arrays out.
const untrustedJson: unknown = JSON.parse(readFileSync(new URL("./session.json", import.meta.url), "utf8")).messages
const messages = Message.decodeMessagesSync(untrustedJson) // typed error with the path on bad input

const hot = HotPaths.HotPaths.fromMessages(messages) // files the model re-read after an offload
// minSavings absent: rent-or-buy decides when an eviction is worth rewriting the cached prefix
const evicted = Evict.evictStaleToolResults(messages, Evict.DEFAULT_KEEP_RECENT, { pinned: hot.pinned })
const plan = Cut.planForPolicy(evicted.messages, Policy.defaultPolicy)
console.log(`estimated tokens: ${Tokens.estimateTokens(messages)} -> ${Tokens.estimateTokens(evicted.messages)}`)
console.log(`offloaded ${evicted.offloaded.length} stale tool results; the policy would cut at message ${plan.cut}`)
console.log(`violations: ${Validate.validate(evicted.messages).length}`)

// 2. The effectful shell: compact with a summarizer, as a typed Effect.
const program = Effect.gen(function* () {
  const policy = Policy.CompactionPolicy.makeUnsafe({ keepRecentTokens: 8_000, keepRecentTurns: 2 })
  const { messages: view, outcome } = yield* Compact.compactContext(evicted.messages, policy, {
    instructions: "keep the file paths of the parser work"
  })
  console.log(`${outcome._tag}: ${messages.length} -> ${view.length} messages, valid: ${Validate.isValid(view)}`)
  return view // pass straight to client.messages.create({ messages: view, ... })
})

// Claude (with an extractive fallback) when ANTHROPIC_API_KEY is set; the offline extractive summarizer otherwise.
await Effect.runPromise(program.pipe(Effect.provide(Summarizer.layerAuto())))
