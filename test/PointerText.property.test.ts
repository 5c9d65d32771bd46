/**
 * The pointer text and the short input form are built by hand for speed (an eviction writes one per offloaded
 * result). Here both are held, over thousands of generated inputs, to references written the plain way: every string
 * JSON-quoted with `JSON.stringify`, and the input folded with one regular expression. A pointer priced before it is
 * written (its draft's length) is priced at the length of the text it becomes, and the bound taken before any escape
 * is never above it (and is it when nothing needs an escape).
 */
import { assert, describe, it } from "@effect/vitest"
import type { ToolUseBlock } from "../src/Message.ts"
import { formatOffloadRef, type OffloadReason, type OffloadRef, parseOffloadRef } from "../src/Offload.ts"
import { clipLine, oneLineHead } from "../src/internal/text.ts"
import { outputLengthAtLeast, pointerLengthAtLeast, writePointer } from "../src/internal/pointer.ts"
import { prng } from "./fixtures/Conversation.ts"
import { shortInput } from "../src/internal/toolInput.ts"

const CASES = 5_000

/** Characters that stress the escapes: quotes, backslashes, controls, white space of every kind, lone surrogates. */
const ALPHABET = [
  ..."abcXYZ019 _-./:=[]{}",
  '"',
  "\\",
  "\u0000",
  "\u0007",
  "\n",
  "\r",
  "\t",
  "\u000b",
  "\u000c",
  "\u001f",
  "\u007f",
  "\u00a0",
  "\u1680",
  "\u2000",
  "\u2003",
  "\u200a",
  "\u200b",
  "\u202f",
  "\u205f",
  "\u0085",
  "\u180e",
  "\u2028",
  "\u2029",
  "\u3000",
  "\ufeff",
  "é",
  "…",
  "\ud83d\ude00",
  "\ud800",
  "\udfff"
]

const stringOf = (random: () => number, maxLength: number): string => {
  const length = Math.floor(random() * (maxLength + 1))
  let s = ""
  for (let i = 0; i < length; i++) s += ALPHABET[Math.floor(random() * ALPHABET.length)]!
  return s
}

const REASONS: ReadonlyArray<OffloadReason> = ["superseded", "modified", "stale"]

const refOf = (random: () => number): OffloadRef => {
  const common = {
    tool: stringOf(random, 12),
    toolUseId: stringOf(random, 30),
    reason: REASONS[Math.floor(random() * 3)]!,
    tokens: Math.floor(random() * 100_000),
    images: random() < 0.8 ? 0 : Math.floor(random() * 5)
  }
  if (random() < 0.5) {
    const input = stringOf(random, 60)
    const printed = random() < 0.7 ? "" : stringOf(random, 80)
    return printed.length === 0 ? { _tag: "Output", input, ...common } : { _tag: "Output", input, ...common, printed }
  }
  const path = stringOf(random, 40)
  if (random() < 0.5) return { _tag: "Read", path, ...common }
  const start = 1 + Math.floor(random() * 500)
  return random() < 0.5
    ? { _tag: "Read", path, range: { start }, ...common }
    : { _tag: "Read", path, range: { start, end: start + Math.floor(random() * 500) }, ...common }
}

/** The pointer format of `Offload`'s doc comment, written the plain way. */
const referencePointer = (ref: OffloadRef): string => {
  const q = JSON.stringify
  let header = `[offloaded ${ref._tag === "Read" ? "read" : "output"} tool=${q(ref.tool)}`
  if (ref._tag === "Read") {
    header += ` path=${q(ref.path)}`
    if (ref.range !== undefined) header += ` lines=${ref.range.start}-${ref.range.end ?? ""}`
  } else header += ` input=${q(ref.input)}`
  header += ` id=${q(ref.toolUseId)} reason=${ref.reason} tokens=${ref.tokens}`
  if (ref.images > 0) header += ` images=${ref.images}`
  if (ref._tag === "Output" && ref.printed !== undefined) header += ` printed=${q(ref.printed)}`
  const instruction = ref._tag === "Output"
    ? "This tool output was removed to save context. Make the same call again to see it."
    : {
      superseded: "A later read of this file is further down. Re-read the file to restore this output.",
      modified: "The file was changed after this read. Re-read the file to see its current content.",
      stale: "This file read was removed to save context. Re-read the file to restore it."
    }[ref.reason]
  return `${header}] ${instruction}`
}

/** `shortInput` for a call whose input has a `command` and nothing else, written the plain way. */
const referenceShortCommand = (command: string, max: number): string =>
  referenceClip(command.slice(0, max * 4).replace(/\s+/g, " ").trim(), max)

/** `text` clipped to `max` code units with an ellipsis, never between the halves of a surrogate pair. */
const referenceClip = (text: string, max: number): string => {
  if (text.length <= max) return text
  let head = Math.max(0, max - 1)
  const last = text.charCodeAt(head - 1)
  const next = text.charCodeAt(head)
  if (last >= 0xd800 && last <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) head--
  return `${text.slice(0, head)}…`
}

describe("pointer text", () => {
  it("formatOffloadRef equals the JSON-quoted reference and parses back to its ref", () => {
    const random = prng(18)
    for (let n = 0; n < CASES; n++) {
      const ref = refOf(random)
      const text = formatOffloadRef(ref)
      assert.strictEqual(text, referencePointer(ref), JSON.stringify(ref))
      assert.deepStrictEqual(parseOffloadRef(text), ref)
    }
  })

  it("a pointer's length bound is its length when nothing is escaped, and at most it otherwise", () => {
    const random = prng(1918)
    let exact = 0
    // half the refs with no character to escape, where the bound before escapes is exact
    const plainOf = (text: string) => [...text].filter((c) => JSON.stringify(c) === `"${c}"`).join("")
    for (let n = 0; n < CASES; n++) {
      const drawn = refOf(random)
      const ref: OffloadRef = random() < 0.5
        ? drawn
        : drawn._tag === "Read"
        ? { ...drawn, tool: plainOf(drawn.tool), toolUseId: plainOf(drawn.toolUseId), path: plainOf(drawn.path) }
        : {
          ...drawn,
          tool: plainOf(drawn.tool),
          toolUseId: plainOf(drawn.toolUseId),
          input: plainOf(drawn.input),
          ...(drawn.printed === undefined || plainOf(drawn.printed).length === 0
            ? {}
            : { printed: plainOf(drawn.printed) })
        }
      for (const reason of REASONS) {
        const text = writePointer({ ...ref, reason })
        const bound = pointerLengthAtLeast({ ...ref, reason })
        if (ref._tag === "Output") {
          const inputFree = outputLengthAtLeast(ref.tool, ref.toolUseId, 0, reason, ref.tokens, ref.images)
          const printed = ref.printed === undefined ? 0 : ' printed="'.length + ref.printed.length + 1
          assert.strictEqual(inputFree + ref.input.length + printed, bound)
        }
        const plain = [ref.tool, ref.toolUseId, ...(ref._tag === "Read" ? [ref.path] : [ref.input, ref.printed ?? ""])]
          .every((field) => JSON.stringify(field) === `"${field}"`)
        if (plain) assert.strictEqual(bound, text.length, JSON.stringify({ ref, reason }))
        else assert.isAtMost(bound, text.length, JSON.stringify({ ref, reason }))
        exact += plain ? 1 : 0
        assert.strictEqual(text, referencePointer({ ...ref, reason }))
      }
    }
    assert.isAbove(exact, CASES)
  })
})

describe("shortInput", () => {
  it("folds white space and clips exactly as the one-regex reference", () => {
    const random = prng(1818)
    for (let n = 0; n < CASES; n++) {
      // a non-empty command (an empty one is no command: the input's JSON is used)
      const command = ALPHABET[Math.floor(random() * ALPHABET.length)]! + stringOf(random, random() < 0.9 ? 80 : 700)
      const max = 1 + Math.floor(random() * 150)
      const use: ToolUseBlock = { type: "tool_use", id: "toolu_1", name: "bash", input: { command } }
      assert.strictEqual(shortInput(use, max), referenceShortCommand(command, max), JSON.stringify({ command, max }))
    }
  })

  it("oneLineHead trims white space that starts right at the clip and runs to the end", () => {
    for (const max of [0, 1, 5, 120]) {
      for (const run of [" \n", "  ", " \t ", "\n", " \u00a0"]) {
        const text = "a".repeat(max) + run
        assert.strictEqual(oneLineHead(text, text.length, max), "a".repeat(max), JSON.stringify({ text, max }))
        const longer = oneLineHead(text + "b", text.length + 1, max)
        const line = (text + "b").replace(/\s+/g, " ").trim()
        assert.isTrue(
          line.startsWith(longer) && (longer === line || longer.length > max),
          JSON.stringify({ text, max })
        )
      }
    }
  })

  it("oneLineHead is the folded line, or a prefix of it longer than the clip; clipLine clips it as the reference", () => {
    const random = prng(1819)
    let cut = 0
    for (let n = 0; n < CASES; n++) {
      const text = stringOf(random, random() < 0.9 ? 80 : 700)
      const end = Math.floor(random() * (text.length + 2))
      const max = Math.floor(random() * 150)
      const line = text.slice(0, end).replace(/\s+/g, " ").trim()
      const head = oneLineHead(text, end, max)
      const context = JSON.stringify({ text, end, max })
      if (line.length <= max) assert.strictEqual(head, line, context)
      else {
        assert.isAbove(head.length, max, context)
        assert.isTrue(line.startsWith(head), context)
        cut++
      }
      assert.strictEqual(clipLine(text, max), referenceClip(text.replace(/\s+/g, " ").trim(), max), context)
    }
    assert.isAbove(cut, CASES / 10)
  })
})
