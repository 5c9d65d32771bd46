/**
 * Question-and-answer fixtures of our own, in the style outside recall harnesses use: a long noisy agent session with
 * facts planted early (the assistant's status board, what tools printed, values inside a noisy log, the user's
 * corrections and renames, negative knowledge: what not to do, what failed), replayed through `Conversation` at a
 * 24k trigger keeping 4k, the usage predicted from the replay's own requests. A question is answered when its answer
 * (folded) is in the last request the session sends; the control, the whole session with no compaction, must answer
 * every one. Judged by the independent `fixtures/Anchors.ts` text reader, not by the library.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { compactContext } from "../src/Compact.ts"
import { Conversation } from "../src/Conversation.ts"
import type { MessageParam } from "../src/ConversationState.ts"
import type { Request } from "../src/Request.ts"
import { ExtractiveSummarizer } from "../src/ExtractiveSummarizer.ts"
import type { ContentBlock, Message } from "../src/Message.ts"
import { CompactionPolicy, type Usage } from "../src/Policy.ts"
import { estimateTokens } from "../src/Tokens.ts"
import { fold, referencePresent, referenceText } from "./fixtures/Anchors.ts"
import { prng } from "./fixtures/Conversation.ts"

type Kind = "status board" | "tool history" | "value in a noisy log" | "correction or rename" | "negative knowledge"

interface Question {
  readonly kind: Kind
  readonly question: string
  readonly answer: string
}

const QUESTIONS: ReadonlyArray<Question> = [
  { kind: "status board", question: "What is the state of billing-export?", answer: "billing-export: in-progress" },
  { kind: "status board", question: "Why is audit-log not done?", answer: "audit-log: blocked on schema review" },
  {
    kind: "status board",
    question: "What was the next action?",
    answer: "Next action: add the retry to billing-export"
  },
  { kind: "status board", question: "Is ingest-pipeline finished?", answer: "ingest-pipeline: done" },
  { kind: "tool history", question: "Which Node version runs here?", answer: "v22.11.0" },
  { kind: "tool history", question: "How many tests passed?", answer: "Tests: 1482 passed, 3 skipped" },
  { kind: "tool history", question: "Which commit is deployed?", answer: "9f3c2a1b7e44" },
  { kind: "tool history", question: "Which version was published?", answer: "@acme/widgets@4.7.2" },
  { kind: "tool history", question: "Which command deployed staging?", answer: "./deploy.sh --env staging" },
  { kind: "value in a noisy log", question: "What was the p99 latency?", answer: "p99 latency 412ms" },
  { kind: "value in a noisy log", question: "What is the build id?", answer: "build_7f3k9q2" },
  { kind: "value in a noisy log", question: "How many rows were migrated?", answer: "18,204 rows migrated" },
  {
    kind: "correction or rename",
    question: "Which port does staging use?",
    answer: "Correction: the staging port is 8443, not 8080."
  },
  {
    kind: "correction or rename",
    question: "What is the setting called now?",
    answer: "Rename the setting maxConn to max_connections everywhere"
  },
  {
    kind: "correction or rename",
    question: "Who reviews the schema?",
    answer: "Actually the schema reviewer is Ximena Laborde, not Tom."
  },
  {
    kind: "negative knowledge",
    question: "Which folder must not be touched?",
    answer: "Do not touch src/legacy/: it is frozen until the audit."
  },
  {
    kind: "negative knowledge",
    question: "Why did the push fail?",
    answer: "fatal: unable to access 'https://git.acme.dev/widgets.git/': Could not resolve host: git.acme.dev"
  },
  {
    kind: "negative knowledge",
    question: "Why did the bundle check fail?",
    answer: "Error: Cannot find module './generated/schema.js'"
  },
  {
    kind: "negative knowledge",
    question: "Which approach must not be retried?",
    answer: "Never raise the pool size above 64 again: it exhausted the database."
  },
  { kind: "tool history", question: "Which commit was tagged?", answer: "c0ffee5e1a7d" },
  {
    kind: "correction or rename",
    question: "Which database holds the orders?",
    answer: "Correction: the database is orders_v2, not orders_v1."
  },
  {
    kind: "correction or rename",
    question: "Which branch do releases go to?",
    answer: "The branch is renamed: use release/7.3 from now on."
  },
  {
    kind: "negative knowledge",
    question: "Which package manager must not be used?",
    answer: "Don't use yarn in this repo: npm only."
  },
  {
    kind: "negative knowledge",
    question: "Why could the database not be reached?",
    answer: 'psql: error: connection to server at "127.0.0.1", port 5432 failed: Connection refused'
  },
  {
    kind: "negative knowledge",
    question: "Why did the health check fail?",
    answer: "curl: (28) Operation timed out after 30001 milliseconds with 0 bytes received"
  }
]

const REPO = "cd /srv/widgets &&"

/** The session: the facts planted in its first third, then long noisy work that compacts them away several times. */
const session = (): ReadonlyArray<Message> => {
  const rand = prng(4242)
  const int = (n: number) => Math.floor(rand() * n)
  const WORDS = "queue shard worker retry cache index parser router handler socket buffer stream".split(" ")
  const noise = (chars: number): string => {
    const lines: Array<string> = []
    let size = 0
    while (size < chars) {
      const line = `[${String(int(24)).padStart(2, "0")}:${String(int(60)).padStart(2, "0")}] ` +
        Array.from({ length: 5 + int(8) }, () => WORDS[int(WORDS.length)]).join(" ")
      lines.push(line)
      size += line.length + 1
    }
    return lines.join("\n")
  }
  const out: Array<Message> = []
  let id = 0
  const user = (text: string) => out.push({ role: "user", content: [{ type: "text", text }] })
  const say = (text: string) => out.push({ role: "assistant", content: [{ type: "text", text }] })
  const tool = (command: string, result: string, isError = false, text?: string) => {
    const toolId = `toolu_qa_${id++}`
    const blocks: Array<ContentBlock> = []
    if (text !== undefined) blocks.push({ type: "text", text })
    blocks.push({ type: "tool_use", id: toolId, name: "bash", input: { command } })
    out.push({ role: "assistant", content: blocks })
    out.push({
      role: "user",
      content: [{ type: "tool_result", tool_use_id: toolId, content: result, ...(isError ? { is_error: true } : {}) }]
    })
  }
  const filler = (steps: number) => {
    for (let i = 0; i < steps; i++) tool(`${REPO} make step-${id}`, noise(2_000 + int(4_000)))
  }
  user(
    "Finish the billing export for the widgets service and ship it to staging. Rename the setting maxConn to " +
      "max_connections everywhere. Do not touch src/legacy/: it is frozen until the audit."
  )
  tool(`${REPO} node --version`, "v22.11.0")
  tool(`${REPO} git rev-parse HEAD`, "9f3c2a1b7e44")
  filler(6)
  tool(
    `${REPO} git push origin billing-export`,
    `${
      noise(800)
    }\nfatal: unable to access 'https://git.acme.dev/widgets.git/': Could not resolve host: git.acme.dev\n\nCommand exited with code 128`,
    true
  )
  user("Correction: the staging port is 8443, not 8080.")
  tool(`${REPO} git tag v4.7.2 && git rev-parse --short=12 v4.7.2`, `${noise(600)}\nc0ffee5e1a7d`)
  tool(
    `${REPO} psql -h 127.0.0.1 -p 5432 -c 'select 1'`,
    `${noise(400)}\npsql: error: connection to server at "127.0.0.1", port 5432 failed: Connection refused\n` +
      "\tIs the server running on that host and accepting TCP/IP connections?",
    true
  )
  user("Correction: the database is orders_v2, not orders_v1. Don't use yarn in this repo: npm only.")
  filler(6)
  tool(
    `${REPO} node scripts/check-bundle.js`,
    `${"!function(e){var t={};function n(r){if(t[r])return t[r].exports;}".repeat(60)}\n` +
      "Error: Cannot find module './generated/schema.js'\n    at Module._resolveFilename (node:internal)\n\n" +
      "Command exited with code 1",
    true
  )
  tool(
    `${REPO} ./bench.sh --pool 96`,
    `${noise(1_500)}\np99 latency 412ms\n${noise(1_500)}\nartifact build_7f3k9q2\n${noise(600)}`
  )
  user("Never raise the pool size above 64 again: it exhausted the database.")
  filler(6)
  tool(`${REPO} npm test`, `${noise(2_500)}\nTests: 1482 passed, 3 skipped\n`)
  tool(`${REPO} ./migrate.sh`, `${noise(2_000)}\n18,204 rows migrated\n${noise(300)}`)
  user("Actually the schema reviewer is Ximena Laborde, not Tom.")
  tool(
    `${REPO} curl -sS https://staging.acme.dev/health`,
    "curl: (28) Operation timed out after 30001 milliseconds with 0 bytes received",
    true
  )
  user("The branch is renamed: use release/7.3 from now on.")
  say(
    [
      "Where things stand:",
      "## Status",
      "- ingest-pipeline: done",
      "- billing-export: in-progress",
      "- audit-log: blocked on schema review",
      "Next action: add the retry to billing-export"
    ].join("\n")
  )
  tool(`${REPO} ./deploy.sh --env staging`, `${noise(1_000)}\ndeployed.`)
  tool(`${REPO} npm publish`, `${noise(1_000)}\n+ @acme/widgets@4.7.2`)
  // the long rest of the work: the facts above are compacted away several times
  for (let round = 0; round < 10; round++) {
    filler(12)
    say(`Round ${round} finished; moving on.`)
    user(`Keep going with round ${round + 1}.`)
  }
  say("All rounds done.")
  return out
}

/** The usage the replay's own request would be reported with: the request estimated, the reply as output. */
const predicted = (request: Request, reply: Message): Usage => ({
  input_tokens: estimateTokens(request.messages as unknown as ReadonlyArray<Message>),
  output_tokens: estimateTokens([reply]),
  cache_read_input_tokens: 0,
  cache_creation_input_tokens: 0
})

/** Replays `messages`; returns the last request sent and how many compactions ran. */
const replay = (messages: ReadonlyArray<Message>, policy: CompactionPolicy) =>
  Effect.gen(function* () {
    const conversation = yield* Conversation
    let last: Request | undefined
    let compactions = 0
    for (const message of messages) {
      const param = message as unknown as MessageParam
      if (message.role !== "assistant") {
        yield* conversation.append(param)
        continue
      }
      const prepared = yield* conversation.prepare
      if (prepared.compaction !== undefined && prepared.compaction._tag !== "Skipped") compactions++
      last = prepared.request
      yield* conversation.recordReply(param, predicted(prepared.request, message), { requestEpoch: prepared.epoch })
    }
    return { last: last!, compactions }
  }).pipe(Effect.provide(Conversation.layerMemory({ policy }).pipe(Layer.provide(ExtractiveSummarizer.layer))))

/**
 * The summary alone: the messages appended one by one, and `compactContext` run at every assistant reply once the
 * view reaches the trigger (no eviction: what is measured is what the summary keeps). Returns the final view.
 */
const compactOnly = (messages: ReadonlyArray<Message>, policy: CompactionPolicy) =>
  Effect.gen(function* () {
    let view: Array<Message> = []
    let compactions = 0
    for (const message of messages) {
      if (message.role === "assistant" && estimateTokens(view) >= policy.compactAtTokens) {
        const result = yield* compactContext(view, policy)
        if (result.outcome._tag === "Compacted") compactions++
        view = [...result.messages]
      }
      view.push(message)
    }
    return { view, compactions }
  }).pipe(Effect.provide(ExtractiveSummarizer.layer))

/**
 * The questions whose answer is in `messages`, by the independent text reader: its folded text, or that text
 * JSON-escaped (a quote inside a quoted line), as the reader finds every anchor (`referencePresent`).
 */
const answered = (messages: ReadonlyArray<unknown>): ReadonlyArray<Question> => {
  const text = referenceText(messages)
  // the category does not change how an anchor is found
  return QUESTIONS.filter((q) =>
    referencePresent({ category: "identifier", text: fold(q.answer), caseless: false }, text)
  )
}

const OFTEN = CompactionPolicy.makeUnsafe({ compactAtTokens: 24_000, keepRecentTokens: 4_000, maxTailTokens: 4_000 })

describe("our own question-and-answer fixtures", () => {
  const messages = session()

  it("the control: the whole session, never compacted, answers every question", () => {
    assert.deepStrictEqual(answered(messages).length, QUESTIONS.length)
  })

  const missed = (got: ReadonlyArray<Question>) =>
    QUESTIONS.filter((q) => !got.includes(q)).map((q) => `${q.kind}: ${q.question}`).join("; ")

  it.effect(
    "the extractive summary at a 24k trigger keeping 4k answers at least 95% after many compactions",
    () =>
      Effect.gen(function* () {
        const { compactions, view } = yield* compactOnly(messages, OFTEN)
        assert.isAtLeast(compactions, 5)
        // every planted fact left the kept tail long ago: only the summary can answer
        assert.strictEqual(answered(view.slice(1)).length, 0)
        const got = answered(view)
        assert.isAtLeast(got.length / QUESTIONS.length, 0.95, `missed: ${missed(got)}`)
      }),
    60_000
  )

  it.effect(
    "through Conversation, whose eviction offloads old tool outputs before they are summarized",
    () =>
      Effect.gen(function* () {
        const { compactions, last } = yield* replay(messages, OFTEN)
        assert.isAtLeast(compactions, 5)
        assert.strictEqual(answered(last.messages.slice(1)).length, 0)
        const got = answered(last.messages)
        // the values of an output the eviction offloads before any compaction sees it travel in its pointer
        assert.isAtLeast(got.length / QUESTIONS.length, 0.95, `missed: ${missed(got)}`)
        assert.strictEqual(got.length, QUESTIONS.length, `missed: ${missed(got)}`)
      }),
    60_000
  )
})
