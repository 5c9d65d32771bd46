/**
 * An offloaded output keeps its URLs (API-RULES 30, issue 27 finding 6): `web_fetch` fetches only URLs still in the
 * context (`url_not_in_prior_context`), so a pointer that removed a search result's links must name them.
 */
import { assert, describe, it } from "@effect/vitest"
import { evictStaleToolResults } from "../src/Evict.ts"
import type { Message } from "../src/Message.ts"
import { formatOffloadRef, type OffloadRef, parseOffloadRef } from "../src/Offload.ts"

const links = ["https://example.com/docs/a", "http://example.org/b?q=1&x=2", "https://example.net/c#frag"]

const session = (): Array<Message> => {
  const messages: Array<Message> = [{ role: "user", content: "find the docs" }]
  const page = `Results:\n1. ${links[0]}.\n2. (${links[1]})\n3. "${links[2]}"\nrepeat ${links[0]}\n` +
    "filler text ".repeat(400)
  for (let n = 0; n < 4; n++) {
    messages.push({
      role: "assistant",
      content: [{ type: "tool_use", id: `s${n}`, name: "search", input: { query: `docs ${n}` } }]
    })
    messages.push({
      role: "user",
      content: [{ type: "tool_result", tool_use_id: `s${n}`, content: n === 0 ? page : `other ${n} `.repeat(400) }]
    })
  }
  return messages
}

describe("an offload pointer keeps the URLs of what it removed", () => {
  it("the stale search result's pointer names each URL once, in order, and reads back with them", () => {
    const { messages, offloaded } = evictStaleToolResults(session(), 1, { minSavings: 0 })
    const first = offloaded.find((o) => o.toolUseId === "s0")
    assert.isDefined(first)
    const text = first!.block.content as string
    assert.include(text, `urls="${links.join(" ")}"`)
    // every URL the removed output held is still in the context the next request sends
    const context = JSON.stringify(messages)
    for (const url of links) assert.include(context, url)
    const ref = parseOffloadRef(text)
    assert.deepStrictEqual(ref, first!.ref)
    assert.deepStrictEqual(ref?._tag === "Output" ? ref.urls : undefined, links)
    // an output without URLs has no urls field
    const other = offloaded.find((o) => o.toolUseId === "s1")!
    assert.notInclude(other.block.content as string, "urls=")
    assert.isUndefined((other.ref as { urls?: unknown }).urls)
  })

  it("a pointer with URLs round-trips through its text; a malformed urls field is not a pointer", () => {
    const ref: OffloadRef = {
      _tag: "Output",
      input: "q",
      tool: "search",
      toolUseId: "t1",
      reason: "stale",
      tokens: 900,
      images: 0,
      urls: ["https://a.example/x", "https://b.example/y"]
    }
    const text = formatOffloadRef(ref)
    assert.deepStrictEqual(parseOffloadRef(text), ref)
    assert.isUndefined(parseOffloadRef(text.replace(/urls="[^"]*"/, 'urls=""')))
    assert.isUndefined(parseOffloadRef(text.replace(" urls=", " urlz=")))
  })
})
