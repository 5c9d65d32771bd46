/**
 * The way back, with the SDK's tool runner (`client.beta.messages.toolRunner`): the model gets `recall` beside its
 * own tools, the conversation compacts and offloads as usual into its session log, and when the model needs an output
 * that was removed (a long test run, summarized away) it calls `recall`, which answers from the log exactly, with no
 * model call. Run it with `ANTHROPIC_API_KEY` set, or with `ANTHROPIC_BASE_URL` at a server that speaks the Messages
 * API (the tests run it against the suite's local server): `node examples/recall.ts` (Node 22).
 */
import Anthropic from "@anthropic-ai/sdk"
import { betaTool } from "@anthropic-ai/sdk/helpers/beta/json-schema"
import { Effect, Layer } from "effect"
import { Conversation, ExtractiveSummarizer, Policy, Recall, SessionLog, SessionStore } from "../src/index.ts"

// a test run whose one failure sits deep in a long output, and two other long outputs
const testRun = Array.from(
  { length: 400 },
  (_, i) => i === 216 ? "FAIL src/parser.test.ts:42 expected 3 lines, got 4" : `PASS test ${i}`
)
  .join("\n")
const outputs: Readonly<Record<string, string>> = {
  "npm test": testRun,
  "cat src/parser.ts": 'export const parse = (input: string) => input.split("\\n")\n'.repeat(200),
  "git log": Array.from({ length: 200 }, (_, i) => `commit ${i}: tidy the parser`).join("\n")
}
const bash = betaTool({
  name: "bash",
  description: "Run a shell command",
  inputSchema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] },
  run: ({ command }) => outputs[command] ?? `bash: ${command}: command not found`
})

// the session log the conversation writes and `recall` reads (a memory store here; JSONL or SQL work the same)
const sessionId = "recall-example"
const store = SessionStore.SessionStore.layerMemory(new Map())
const recall = Recall.recallRunnableTool(sessionId, store, { maxTokens: 1_000 })

// a small policy, so that this short session compacts
const policy = Policy.CompactionPolicy.makeUnsafe({ keepRecentTokens: 500, keepRecentTurns: 1, compactAtTokens: 1_000 })
const layer = Conversation.layerLogged({
  policy,
  system: "You fix bugs.",
  minFreedTokens: 200,
  recall: true, // offload pointers say to call recall with their id
  classifier: Recall.recallClassifier() // a recall's result is evicted like a file read
}).pipe(
  Layer.provide(SessionLog.SessionLog.layer({ sessionId, sync: "never" })),
  Layer.provide(store),
  Layer.provide(ExtractiveSummarizer.ExtractiveSummarizer.layer)
)
const conversation = await Effect.runPromise(Effect.service(Conversation.Conversation).pipe(Effect.provide(layer)))
const run = <A, E>(effect: Effect.Effect<A, E>): Promise<A> => Effect.runPromise(effect)

await run(conversation.append({ role: "user", content: "Run the tests and look at the parser." }))
const first = (await run(conversation.prepare)).request
const runner = new Anthropic().beta.messages.toolRunner({
  model: "claude-sonnet-5-5",
  max_tokens: 1024,
  tools: [bash, recall],
  stream: true,
  max_iterations: 20,
  ...(first.system === undefined ? {} : { system: first.system }),
  messages: first.messages
})
let compactions = 0
let offloaded = 0
const recalled: Array<string> = []
const followUps = ["Which test fails, and on which line? Look at the test output again."]
for await (const stream of runner) {
  const reply = await stream.finalMessage()
  await run(conversation.recordReply(reply))
  const results = await runner.generateToolResponse()
  for (const block of results?.content ?? []) {
    if (typeof block === "object" && block.type === "tool_result" && typeof block.content === "string") {
      if (block.content.startsWith("[recall")) recalled.push(block.content)
    }
  }
  const next = results ?? (followUps.length > 0 ? { role: "user" as const, content: followUps.shift()! } : undefined)
  if (next === undefined) continue // the final answer: the runner stops
  await run(conversation.append(next))
  // offloads stale outputs and compacts when the trigger fires; the runner sends the conversation's view
  const prepared = await run(conversation.prepare)
  if (prepared.compaction?._tag === "Compacted") compactions++
  offloaded += prepared.offloaded.length
  const request = prepared.request
  runner.setMessagesParams({ ...runner.params, messages: request.messages })
}
console.log(`${compactions} compactions, ${offloaded} offloaded outputs, ${recalled.length} recall answers`)
console.log(`recall found the failure: ${recalled.some((answer) => answer.includes("FAIL src/parser.test.ts:42"))}`)
