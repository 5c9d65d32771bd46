/**
 * The agent loop with Effect: the SDK client, two tools and `recall`, the conversation logged to a JSONL file, and a
 * resume.
 * `node examples/agent-loop.ts [directory]` (Node 22) or `deno run --allow-env --allow-net --allow-read --allow-write
 * examples/agent-loop.ts [directory]`, with `ANTHROPIC_API_KEY` set (or `ANTHROPIC_BASE_URL` at a server that speaks
 * the Messages API: the tests run it against the suite's local server). Run it again with the same directory and it
 * resumes the session from its log; `MAX_STEPS` stops it early, as a crash would.
 */
import Anthropic from "@anthropic-ai/sdk"
import * as NodeFileSystem from "@effect/platform-node/NodeFileSystem"
import * as NodePath from "@effect/platform-node/NodePath"
import { Effect, Layer } from "effect"
import process from "node:process"
import { Conversation, ExtractiveSummarizer, Policy, Recall, SessionStoreJsonl } from "../src/index.ts"

// the agent's tools: a read of a small in-memory tree, and a shell that only knows `ls`
const files: Readonly<Record<string, string>> = {
  "src/parser.ts": 'export const parse = (input: string) => input.split(" ")\n'.repeat(200),
  "src/lexer.ts": 'export const lex = (input: string) => input.split("\\n")\n'.repeat(200)
}
const tools: Array<Anthropic.Tool> = [
  {
    name: "read",
    description: "Read a file",
    input_schema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] }
  },
  {
    name: "bash",
    description: "Run a shell command",
    input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] }
  }
]
const runTool = (name: string, input: Record<string, unknown>): string =>
  name === "read"
    ? files[String(input["path"])] ?? `no such file: ${String(input["path"])}`
    : String(input["command"]).startsWith("ls")
    ? Object.keys(files).join("\n")
    : `bash: ${String(input["command"])}: command not found`

const client = new Anthropic()
const maxSteps = Number(process.env["MAX_STEPS"] ?? 50)

const agent = Effect.gen(function* () {
  const conversation = yield* Conversation.Conversation
  // a new session starts with the task; a resumed one goes on where its log ends
  if ((yield* conversation.state).view.length === 0) {
    yield* conversation.append({ role: "user", content: "Fix the parser in src/parser.ts: it must split on newlines." })
  }
  let requests = 0
  let compactions = 0
  for (let step = 0; step < maxSteps; step++) {
    // answers calls a crash left open, offloads stale output, compacts when the trigger fires
    const { request, epoch, compaction } = yield* conversation.prepare
    if (compaction?._tag === "Compacted") compactions++
    const reply = yield* Effect.tryPromise(() =>
      client.messages.stream({ model: "claude-sonnet-5-5", max_tokens: 4_096, ...request }).finalMessage()
    )
    requests++
    const state = yield* conversation.recordReply(reply, undefined, { requestEpoch: epoch })
    if (state.pending.length === 0) break // the agent answered: the task is done
    // every call of the reply gets its result, in one user message
    const calls = reply.content.filter((block) => block.type === "tool_use")
    const content = yield* Effect.forEach(calls, (call) =>
      Effect.map(
        call.name === "recall"
          ? conversation.recall(call.input) // answered from the log, with no model call
          : Effect.succeed(runTool(call.name, call.input as Record<string, unknown>)),
        (text) => ({ type: "tool_result" as const, tool_use_id: call.id, content: text })
      ))
    yield* conversation.append({ role: "user", content })
  }
  const { view, epoch } = yield* conversation.state
  console.log(`${requests} requests, ${compactions} compactions; view ${view.length} messages, epoch ${epoch}`)
})

const conversation = Conversation.layerLogged({
  system: "You are a coding agent. Use the tools.",
  tools: [...tools, Recall.recallTool], // recall: the model reads back what a compaction removed, from the log
  recall: true, // offload pointers name recall as the way back
  classifier: Recall.recallClassifier(), // a later recall of the same output supersedes the earlier one
  // a small policy, so that this short session compacts; the defaults suit a real agent
  policy: Policy.CompactionPolicy.makeUnsafe({ keepRecentTokens: 1_000, keepRecentTurns: 1, compactAtTokens: 4_000 })
}).pipe(
  Layer.provide(
    SessionStoreJsonl.layerSessionLog({ directory: process.argv[2] ?? "sessions", sessionId: "agent-loop" })
  ),
  Layer.provide(Layer.mergeAll(ExtractiveSummarizer.ExtractiveSummarizer.layer, NodeFileSystem.layer, NodePath.layer))
)
// the layer holds the log (and its lock) while the agent runs, and releases it when the program ends
await Effect.runPromise(agent.pipe(Effect.provide(conversation)))
