/**
 * The SDK's tool runner (`client.beta.messages.toolRunner`, `@anthropic-ai/sdk` ^1.17.0) on a server-held thread with
 * `runToolsEagerly`, and `Conversation` deciding what each request holds. Run it with `ANTHROPIC_API_KEY` set, or with
 * `ANTHROPIC_BASE_URL` at a server that speaks the Messages API (the tests and the package check run it against the
 * suite's local server): `node examples/tool-runner.ts` (Node 22) or `deno run -A examples/tool-runner.ts`.
 *
 * The runner runs the tools and sends each turn on its thread; in the loop body the conversation decides the next
 * turn through the runner's own hook, `setMessagesParams`: while the view only grew, the runner's history plus the new
 * messages (the thread continues with only those), and after an offload or a compaction the whole view (it no longer
 * starts with what the server holds, so the runner starts a new thread with it). The runner's thread answers
 * `thread_not_found`, `thread_already_continued` and `thread_continue_in_flight` itself, with the whole history under a
 * new thread. The runner's `compactBeforeNextTurn()` is the server's compaction; with the conversation compacting,
 * leave it uncalled.
 */
import Anthropic from "@anthropic-ai/sdk"
import { betaTool } from "@anthropic-ai/sdk/helpers/beta/json-schema"
import { Effect, Layer } from "effect"
import { Conversation, ExtractiveSummarizer, Policy } from "../src/index.ts"

const files: Readonly<Record<string, string>> = {
  "/src/parser.ts": 'export const parse = (input: string) => input.split("\\n")\n'.repeat(300),
  "/src/lexer.ts": 'export const lex = (input: string) => input.split(" ")\n'.repeat(300)
}
let calls = 0
const read = betaTool({
  name: "read",
  description: "Read a file",
  inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
  run: ({ path }) => {
    calls++
    return files[path] ?? `no such file: ${path}`
  }
})

// a small policy, so that this short session compacts (the trigger reads the usage each reply reports)
const policy = Policy.CompactionPolicy.makeUnsafe({ keepRecentTokens: 500, keepRecentTurns: 1, compactAtTokens: 1_000 })
const layer = Conversation.layerMemory({ policy, threads: true, system: "You fix bugs.", minFreedTokens: 200 }).pipe(
  Layer.provide(ExtractiveSummarizer.ExtractiveSummarizer.layer)
)
const conversation = await Effect.runPromise(Effect.service(Conversation.Conversation).pipe(Effect.provide(layer)))
const run = <A, E>(effect: Effect.Effect<A, E>): Promise<A> => Effect.runPromise(effect)

await run(conversation.append({ role: "user", content: "Fix the parser in /src/parser.ts" }))
const first = (await run(conversation.prepare)).request
const runner = new Anthropic().beta.messages.toolRunner({
  model: "claude-sonnet-5-5",
  max_tokens: 1024,
  tools: [read], // the runner's runnable tools; the conversation gets the system prompt
  stream: true,
  runToolsEagerly: true, // each call starts while the reply still streams
  max_iterations: 20,
  ...(first.system === undefined ? {} : { system: first.system }),
  messages: first.messages
})
const followUps = ["Now explain the fix"]
const threads: Array<string> = ["create"]
let compactions = 0
for await (const stream of runner) {
  const reply = await stream.finalMessage()
  await run(conversation.recordReply(reply))
  // the results of the calls the runner started while the reply streamed (none runs twice)
  const results = await runner.generateToolResponse()
  const next = results ?? (followUps.length > 0 ? { role: "user" as const, content: followUps.shift()! } : undefined)
  if (next === undefined) continue // the final answer: left alone, the runner stops
  await run(conversation.append(next))
  // offloads stale results, compacts when the trigger fires, and says whether the thread goes on
  const { request, compaction } = await run(conversation.prepare)
  if (compaction?._tag === "Compacted") compactions++
  threads.push(request.thread?.type ?? "none")
  // continue: what the runner holds (the messages it sent, then this reply) and the new messages; create: the view
  const messages = request.thread?.type === "continue"
    ? [...runner.params.messages, { role: reply.role, content: reply.content }, ...request.messages]
    : request.messages
  runner.setMessagesParams({ ...runner.params, messages })
}
const { view, epoch } = await run(conversation.state)
console.log(`threads: ${threads.join(" ")}`)
console.log(`${threads.length} requests, ${compactions} compactions, ${calls} tool calls run`)
console.log(`view: ${view.length} messages, epoch ${epoch}`)
