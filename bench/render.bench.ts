/**
 * `render` against a baseline that only joins every text of the conversation (text, thinking, tool output, nested
 * text blocks of tool output) with newlines, on a generated 1k-message session, a generated 10k-message session and the largest real session.
 * The ratio is the price of escaping, clipping and the one-line tool calls over the cheapest possible flattening.
 * Run: npx node --expose-gc bench/render.bench.ts
 */
import { bench, do_not_optimize, summary } from "mitata"
import type { Message } from "../src/Message.ts"
import { render } from "../src/Render.ts"
import { generateSession } from "../test/fixtures/Conversation.ts"
import { corpus } from "../test/fixtures/Corpus.ts"
import { runBenchmarks } from "./util.ts"

/** The baseline: every text joined, no escaping, no clipping, no structure. */
const joinAllText = (messages: ReadonlyArray<Message>): string => {
  const parts: Array<string> = []
  for (const message of messages) {
    if (typeof message.content === "string") {
      parts.push(message.content)
      continue
    }
    for (const block of message.content) {
      const b = block as { readonly text?: unknown; readonly thinking?: unknown; readonly content?: unknown }
      if (typeof b.text === "string") parts.push(b.text)
      else if (typeof b.thinking === "string") parts.push(b.thinking)
      else if (typeof b.content === "string") parts.push(b.content)
      else if (Array.isArray(b.content)) {
        for (const inner of b.content as ReadonlyArray<{ readonly text?: unknown }>) {
          if (typeof inner.text === "string") parts.push(inner.text)
        }
      }
    }
  }
  return parts.join("\n")
}

const real = [...corpus()].sort((a, b) => b.messages.length - a.messages.length)[0]!
const workloads: ReadonlyArray<readonly [string, ReadonlyArray<Message>]> = [
  ["generated 1k", generateSession(1, { messages: 1_000 })],
  ["generated 10k", generateSession(2, { messages: 10_000, maxOutput: 5_000 })],
  [real.name, real.messages]
]

for (const [name, messages] of workloads) {
  const input = joinAllText(messages).length
  const output = render(messages).length
  console.log(`${name}: ${messages.length} messages, ${input} text chars joined, ${output} chars rendered`)
  summary(() => {
    bench(`joinAllText ${name}`, () => do_not_optimize(joinAllText(messages))).baseline(true)
    bench(`render ${name}`, () => do_not_optimize(render(messages)))
  })
}

await runBenchmarks()
