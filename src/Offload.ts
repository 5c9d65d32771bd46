/**
 * Concept: the offload pointer, the typed text that stands for an offloaded tool result.
 *
 * The offload pointer: the short, typed text that replaces an offloaded tool_result's payload (`OffloadRef`), how it
 * is written (`formatOffloadRef`) and read back (`parseOffloadRef`, `offloadRefOf`), and `isOffloaded`. Eviction
 * decisions live in `Evict`. The text format itself (its writer, its parser and its one length limit) is written once,
 * in `internal/pointer`, below this module: the eviction prices pointers with the writer's fast paths there, which are
 * not API.
 *
 * @since 0.1.0
 */
import type { ContentBlock, ToolResultBlock } from "./Message.ts"
import type { OffloadReason as PointerReason, OffloadRef as PointerRef } from "./internal/pointer.ts"
import { MAX_POINTER_LENGTH, parsePointer, writePointer } from "./internal/pointer.ts"
import { isText, isToolResult } from "./internal/blocks.ts"

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
export type OffloadReason = PointerReason

/**
 * What an offload pointer records. A `Read` pointer is lossless: re-reading `path` (with `range`) restores the output.
 * An `Output` pointer names the tool and a short form of its input, so the call can be made again. `tokens` is the
 * estimated size of the removed payload and `images` the number of image blocks it held.
 * @category models
 */
export type OffloadRef = PointerRef

/**
 * The pointer text of a ref: one line, a bracketed header of `key=value` fields (strings JSON-quoted) and a fixed
 * instruction. Deterministic: it holds no time and no message index, only what the ref holds.
 * @category pointers
 */
export const formatOffloadRef = (ref: OffloadRef): string => writePointer(ref)

/**
 * Parses a pointer written by `formatOffloadRef`. Returns `undefined` for any other text, including the legacy
 * placeholder. `parseOffloadRef(formatOffloadRef(ref))` deep-equals `ref`.
 * @category pointers
 */
export const parseOffloadRef = (text: string): OffloadRef | undefined => parsePointer(text)

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

/** What `block` holds: one of our pointers, the legacy placeholder, or neither (`none`). */
const heldPointer = (block: ToolResultBlock): OffloadRef | "legacy" | "none" => {
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
  const known = heldPointer(block)
  return typeof known === "string" ? undefined : known
}

/**
 * True when a tool_result block was already offloaded: it holds one of our pointers or the legacy
 * `OMITTED_TOOL_RESULT` placeholder. Such a block is never offloaded again and never counted twice.
 * @category pointers
 */
export const isOffloaded = (block: ContentBlock): boolean => isToolResult(block) && heldPointer(block) !== "none"

/** One offloaded tool_result. `block` is the complete replacement block. @category models */
export interface Offloaded {
  /** Index of the message holding the tool_result. */
  readonly messageIndex: number
  /** Index of the tool_result in that message's content. */
  readonly blockIndex: number
  /** The `tool_use_id` of the offloaded result. */
  readonly toolUseId: string
  /** The replacement: the original block with `content` set to the pointer; every other field is kept. */
  readonly block: ToolResultBlock
  /** Why it was offloaded: `superseded`, `modified` or `stale`. */
  readonly reason: OffloadReason
  /** Estimated tokens of the payload minus those of the pointer (always positive). */
  readonly tokensFreed: number
  /** What the pointer records (the file read, or the call to make again), as written in the pointer. */
  readonly ref: OffloadRef
}
