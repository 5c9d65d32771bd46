/**
 * The agent loop with `Conversation`, runnable offline: `node examples/conversation.ts` (Node 22) or
 * `deno run -A examples/conversation.ts`. A scripted model stands in for `client.messages.create`; with the SDK, send
 * `{ model, max_tokens, tools, ...request }` instead.
 */
import { Effect, Layer } from "effect"
import { Conversation, ExtractiveSummarizer, Policy, SessionLog, type SessionStore } from "../src/index.ts"

// stands in for `client.messages.create(...)`: reads a file twice, then answers
const model = (turn: number) => ({
  content: turn < 2
    ? [{ type: "tool_use" as const, id: `call_${turn}`, name: "read", input: { path: "/src/parser.ts" } }]
    : [{ type: "text" as const, text: "The parser is fixed." }],
  usage: { input_tokens: 40_000 + turn, output_tokens: 200 } // provider-reported: the trigger (60k by default) reads this
})

const agent = Effect.gen(function* () {
  const conversation = yield* Conversation.Conversation
  yield* conversation.append({ role: "user", content: "Fix the parser in /src/parser.ts" })
  for (let turn = 0; turn < 3; turn++) {
    if (turn === 2) yield* conversation.append({ role: "user", content: "Now explain the fix" })
    // before each request: abandoned calls answered, stale output offloaded, compacted when the trigger fires
    const { request, epoch } = yield* conversation.prepare
    const reply = model(turn) // client.messages.create({ model, max_tokens, tools, ...request })
    console.log(`request ${turn + 1}: ${request.messages.length} messages`)
    const state = yield* conversation.recordReply({ role: "assistant", content: reply.content }, reply.usage, {
      requestEpoch: epoch
    })
    for (const call of state.pending) {
      yield* conversation.append({
        role: "user",
        content: [{
          type: "tool_result",
          tool_use_id: call.originalId,
          content: "export const parse = ...\n".repeat(400)
        }]
      })
    }
  }
  // `/compact <focus>`
  const { outcome } = yield* conversation.compact({ instructions: "keep the parser work" })
  console.log(`compact: ${outcome._tag}`)
  return yield* conversation.state
})

// SessionStoreJsonl.layerSessionLog({ directory, sessionId }) persists to a file instead
const store: SessionStore.MemorySessions = new Map()
const policy = Policy.CompactionPolicy.makeUnsafe({ keepRecentTokens: 1_000, keepRecentTurns: 1 })
const logged = Conversation.layerLogged({ policy, minFreedTokens: 500 }).pipe(
  Layer.provide(Layer.fresh(SessionLog.SessionLog.layerMemory({ store }))),
  Layer.provide(ExtractiveSummarizer.ExtractiveSummarizer.layer)
)
const live = await Effect.runPromise(agent.pipe(Effect.provide(logged)))
// a restart: the same layer resumes from the log
const resumed = await Effect.runPromise(
  Effect.gen(function* () {
    return yield* (yield* Conversation.Conversation).state
  }).pipe(Effect.provide(logged))
)
console.log(`live: ${live.view.length} messages, epoch ${live.epoch}, hot paths ${JSON.stringify(live.hot.paths)}`)
console.log(
  `resumed equals live: ${JSON.stringify(resumed.view) === JSON.stringify(live.view) && resumed.epoch === live.epoch}`
)
