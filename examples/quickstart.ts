/**
 * The README's quick start, runnable: `node examples/quickstart.ts` (Node 22) or `deno run -A examples/quickstart.ts`.
 * A recorded session (`session.json`, 400 messages) runs through a `Conversation` as an agent would run it, each
 * recorded reply standing in for the model's. With ANTHROPIC_API_KEY set it summarizes with Claude (falling back to the
 * extractive summarizer on failure); without it, it uses the extractive summarizer and needs no network.
 */
import { Effect, Layer } from "effect"
import {
  Conversation,
  ConversationState,
  Cut,
  Evict,
  Message,
  Policy,
  SummarizerAuto,
  Tokens,
  Validate
} from "../src/index.ts"
import { readFileSync } from "node:fs"

const recorded = JSON.parse(readFileSync(new URL("./session.json", import.meta.url), "utf8"))
const messages = Message.decodeMessagesSync(recorded.messages) // typed error with the path on bad input

// 1. The front door: a Conversation. Append what the user and the tools say, prepare each request, record each reply.
const agent = Effect.gen(function* () {
  const conversation = yield* Conversation.Conversation
  let requests = 0
  let compactions = 0
  for (const message of ConversationState.asMessageParams(messages)) {
    if (message.role !== "assistant") {
      yield* conversation.append(message) // a user message, or the results of the tool calls
      continue
    }
    // stale tool output offloaded; compacted when the provider-reported usage says so
    const { request, epoch, compaction } = yield* conversation.prepare
    requests++
    if (compaction?._tag === "Compacted") compactions++
    // a real agent sends it here: client.messages.create({ model, max_tokens, tools, ...request })
    const usage = { input_tokens: Tokens.estimateTokens(request.messages), output_tokens: 200 } // the reply's usage
    yield* conversation.recordReply(message, usage, { requestEpoch: epoch })
  }
  const { request } = yield* conversation.prepare
  console.log(`${requests} requests, ${compactions} compactions`)
  console.log(
    `next request: ${request.messages.length} of ${messages.length} messages, ${
      Tokens.estimateTokens(request.messages)
    } of ${Tokens.estimateTokens(messages)} estimated tokens, valid: ${Validate.isValid(request.messages)}`
  )
})

const policy = Policy.CompactionPolicy.makeUnsafe({ keepRecentTokens: 8_000, compactAtTokens: 40_000 })
// Claude (with an extractive fallback) when ANTHROPIC_API_KEY is set; the offline extractive summarizer otherwise.
const conversation = Conversation.layerMemory({ policy, system: recorded.system }).pipe(
  Layer.provide(SummarizerAuto.layerAuto())
)
await Effect.runPromise(agent.pipe(Effect.provide(conversation)))

// 2. Underneath, plain functions over plain arrays, for a loop of your own.
// stale tool output offloaded to typed pointers (rent-or-buy decides when an eviction is worth its cache rewrite)
const evicted = Evict.evictStaleToolResults(messages, Evict.DEFAULT_KEEP_RECENT)
const plan = Cut.planForPolicy(evicted.messages, policy) // where a compaction would cut, never inside a tool pair
console.log(`offloaded ${evicted.offloaded.length} stale tool results; the policy would cut at message ${plan.cut}`)
console.log(`violations: ${Validate.validate(evicted.messages).length}`)
