/**
 * The offload pointer: the short, typed text that replaces an offloaded tool_result's payload (`OffloadRef`), how it
 * is written (`formatOffloadRef`) and read back (`parseOffloadRef`, `offloadRefOf`), and `isOffloaded`. Eviction
 * decisions live in `Evict`; this module only knows the format (written by `internal/pointer`).
 *
 * @since 0.1.0
 */
import type { ContentBlock, ToolResultBlock } from "./Message.ts"
import { isText, isToolResult } from "./Message.ts"
import { estimateContentTokens } from "./Tokens.ts"
import type { LineRange } from "./Tools.ts"
import { PREFIX, writePointer } from "./internal/pointer.ts"

/**
 * The legacy placeholder that older builds (the Go implementation) wrote instead of a typed pointer. `isOffloaded`
 * still recognises it, so such a block is never offloaded again.
 * @category constants
 */
export const OMITTED_TOOL_RESULT = "[earlier tool output omitted to keep this turn within the context window]"

/**
 * Why a result was offloaded: a later read covers it (`superseded`), a later write or edit changed the file
 * (`modified`), or it fell outside the `keepRecent` working set (`stale`).
 * @category models
 */
export type OffloadReason = "superseded" | "modified" | "stale"

/**
 * What an offload pointer records. A `Read` pointer is lossless: re-reading `path` (with `range`) restores the output.
 * An `Output` pointer names the tool and a short form of its input, so the call can be made again. `tokens` is the
 * estimated size of the removed payload and `images` the number of image blocks it held.
 * @category models
 */
export type OffloadRef =
  | {
    readonly _tag: "Read"
    readonly tool: string
    readonly toolUseId: string
    readonly path: string
    readonly range?: LineRange
    readonly reason: OffloadReason
    readonly tokens: number
    readonly images: number
  }
  | {
    readonly _tag: "Output"
    readonly tool: string
    readonly toolUseId: string
    readonly input: string
    readonly reason: OffloadReason
    readonly tokens: number
    readonly images: number
  }

/**
 * The pointer text of a ref: one line, a bracketed header of `key=value` fields (strings JSON-quoted) and a fixed
 * instruction. Deterministic: it holds no time and no message index, only what the ref holds. An eviction writes
 * one per offloaded result, so it is built from few pieces (`internal/pointer`).
 * @category pointers
 */
export const formatOffloadRef = (ref: OffloadRef): string => writePointer(ref)

const FIELD = /^ ([a-z]+)=("(?:[^"\\]|\\.)*"|[0-9a-z-]+)/
const REASONS: ReadonlySet<string> = new Set(["superseded", "modified", "stale"])
const NAT = /^(?:0|[1-9][0-9]*)$/

const parseRange = (text: string): LineRange | undefined => {
  const match = /^([1-9][0-9]*)-([1-9][0-9]*)?$/.exec(text)
  if (match === null) return undefined
  const start = Number(match[1])
  if (match[2] === undefined) return { start }
  const end = Number(match[2])
  return end >= start ? { start, end } : undefined
}

/**
 * Parses a pointer written by `formatOffloadRef`. Returns `undefined` for any other text, including the legacy
 * placeholder. `parseOffloadRef(formatOffloadRef(ref))` deep-equals `ref`.
 * @category pointers
 */
export const parseOffloadRef = (text: string): OffloadRef | undefined => {
  if (!text.startsWith(PREFIX)) return undefined
  const kind = text.startsWith("read", PREFIX.length)
    ? "read"
    : text.startsWith("output", PREFIX.length)
    ? "output"
    : ""
  if (kind === "") return undefined
  let rest = text.slice(PREFIX.length + kind.length)
  const fields = new Map<string, string>()
  for (;;) {
    const match = FIELD.exec(rest)
    if (match === null) break
    const key = match[1]!
    if (fields.has(key)) return undefined
    let value = match[2]!
    if (value.startsWith('"')) {
      try {
        value = JSON.parse(value) as string
      } catch {
        return undefined
      }
    }
    fields.set(key, value)
    rest = rest.slice(match[0].length)
  }
  if (!rest.startsWith("] ")) return undefined
  const tool = fields.get("tool")
  const toolUseId = fields.get("id")
  const reason = fields.get("reason")
  const tokens = fields.get("tokens")
  const images = fields.get("images") ?? "0"
  if (tool === undefined || toolUseId === undefined || reason === undefined || !REASONS.has(reason)) return undefined
  if (tokens === undefined || !NAT.test(tokens) || !NAT.test(images)) return undefined
  const common = {
    tool,
    toolUseId,
    reason: reason as OffloadReason,
    tokens: Number(tokens),
    images: Number(images)
  }
  const expected = kind === "read" ? ["tool", "path", "lines", "id", "reason", "tokens", "images"] : [
    "tool",
    "input",
    "id",
    "reason",
    "tokens",
    "images"
  ]
  for (const key of fields.keys()) if (!expected.includes(key)) return undefined
  let ref: OffloadRef
  if (kind === "read") {
    const path = fields.get("path")
    if (path === undefined) return undefined
    const lines = fields.get("lines")
    const range = lines === undefined ? undefined : parseRange(lines)
    if (lines !== undefined && range === undefined) return undefined
    ref = range === undefined ? { _tag: "Read", path, ...common } : { _tag: "Read", path, range, ...common }
  } else {
    const input = fields.get("input")
    if (input === undefined) return undefined
    ref = { _tag: "Output", input, ...common }
  }
  // the canonical form is the only accepted form: field order, spacing and instruction must match exactly
  return formatOffloadRef(ref) === text ? ref : undefined
}

/** Pointers are short; longer text is never parsed, which keeps the check cheap on real tool output. */
const MAX_POINTER_LENGTH = 2048

const pointerText = (content: ToolResultBlock["content"]): string | undefined => {
  if (typeof content === "string") return content
  if (content !== undefined && content.length === 1) {
    const only = content[0]!
    if (isText(only)) return only.text
  }
  return undefined
}

/**
 * What each tool_result block that could hold a pointer holds, by identity: our pointer, the legacy placeholder, or
 * neither. Blocks are immutable, so such a block is parsed at most once. Any other text is told apart by its first
 * character, with no entry: real tool output is never entered, and neither are the blocks `pointerBlock` builds (an
 * eviction builds thousands; its result carries each block's ref).
 */
const pointers = new WeakMap<ContentBlock, OffloadRef | "legacy" | "none">()

/** The first character of every pointer and of the legacy placeholder. */
const OPEN_BRACKET = 91

const pointerOf = (block: ToolResultBlock): OffloadRef | "legacy" | "none" => {
  const text = pointerText(block.content)
  if (text === undefined || text.length > MAX_POINTER_LENGTH || text.charCodeAt(0) !== OPEN_BRACKET) return "none"
  let known = pointers.get(block)
  if (known === undefined) {
    known = text === OMITTED_TOOL_RESULT ? "legacy" : parseOffloadRef(text) ?? "none"
    pointers.set(block, known)
  }
  return known
}

/**
 * The pointer held by a tool_result block, if it holds one of ours (as a string or a single text block).
 * @category pointers
 */
export const offloadRefOf = (block: ToolResultBlock): OffloadRef | undefined => {
  const known = pointerOf(block)
  return typeof known === "string" ? undefined : known
}

/**
 * True when a tool_result block was already offloaded: it holds one of our pointers or the legacy
 * `OMITTED_TOOL_RESULT` placeholder. Such a block is never offloaded again and never counted twice.
 * @category pointers
 */
export const isOffloaded = (block: ContentBlock): boolean => isToolResult(block) && pointerOf(block) !== "none"

/**
 * The block with its `content` replaced by the pointer text of `ref` (`formatOffloadRef(ref)`); every other field is
 * kept. `offloadRefOf` of the result is `ref`.
 * @category pointers
 */
export const pointerBlock = (block: ToolResultBlock, ref: OffloadRef): ToolResultBlock => ({
  ...block,
  content: formatOffloadRef(ref)
})

/**
 * The estimated tokens of a tool_result's payload, as the estimator counts its content inside a message: what
 * offloading it would remove before the pointer is added.
 * @category pointers
 */
export const payloadTokens = (block: ToolResultBlock): number =>
  block.content === undefined ? 0 : estimateContentTokens(block.content)

/** One offloaded tool_result. `block` is the complete replacement block. @category models */
export interface Offloaded {
  readonly messageIndex: number
  readonly blockIndex: number
  readonly toolUseId: string
  /** The replacement: the original block with `content` set to the pointer; every other field is kept. */
  readonly block: ToolResultBlock
  readonly reason: OffloadReason
  /** Estimated tokens of the payload minus those of the pointer (always positive). */
  readonly tokensFreed: number
  readonly ref: OffloadRef
}
