/**
 * Writes examples/session.json: a realistic, seeded coding-agent session (`generateSession` from the test fixtures)
 * as an Anthropic Messages request `{ system, messages }`, so `compaction inspect examples/session.json` works
 * offline. Deterministic: running it again writes the same bytes.
 *
 *   node scripts/make-example.ts
 */
import { writeFileSync } from "node:fs"
import { generateSession } from "../test/fixtures/Conversation.ts"

const SEED = 7
const MESSAGES = 400

const session = {
  system: "You are a coding agent working in /home/dev/project. Read files before editing them; run the tests " +
    "after each change.",
  messages: generateSession(SEED, { messages: MESSAGES })
}
const text = `${JSON.stringify(session, null, 2)}\n`
writeFileSync(new URL("../examples/session.json", import.meta.url), text)
console.log(`examples/session.json: ${session.messages.length} messages, ${(text.length / 1e6).toFixed(2)} MB`)
