/**
 * Relevance-first offloading of stale tool output.
 *
 * Tool output is most of a coding agent's context, and most of it is stale: a file read that was read again later, a
 * test run from ten turns ago. `evictStaleToolResults` replaces the payload of such tool_result blocks with a short,
 * typed pointer back to its source (`OffloadRef`). It never removes a block, so every tool_use keeps its tool_result.
 *
 * Order of decisions, for each tool_result whose tool_use is known:
 * 1. a read covered by a later successful read of the same file is **superseded**: offloaded, even when recent;
 * 2. a read followed by a successful write or edit of the same file is **modified**: offloaded, even when recent
 *    (unless it is a pinned path's latest read);
 * 3. of the rest, the newest `keepRecent` stay verbatim; errors, a pinned path's latest read, and results whose
 *    pointer would not be smaller than the payload stay too; everything else is **stale** and offloaded.
 *
 * "Later" only ever looks forward from a read, so the decision survives the prefix being cut away.
 *
 * @since 0.1.0
 */
import type { ContentBlock, Message, ToolResultBlock, ToolUseBlock } from "./Message.ts"
import { isImage, isText, isToolResult, isToolUse } from "./Message.ts"
import { CHARS_PER_TOKEN, estimateContentTokens, estimateMessageTokens } from "./Tokens.ts"
import type { LineRange, ToolAction, ToolClassifier } from "./Tools.ts"
import { covers, defaultToolClassifier, shortInput } from "./Tools.ts"

// ============================================================================
// Pointers
// ============================================================================

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

const PREFIX = "[offloaded "

/** The fixed instruction after a pointer's header; the parser requires it, so stray text never parses as a pointer. */
const instruction = (ref: OffloadRef): string => {
  if (ref._tag === "Output") return "This tool output was removed to save context. Make the same call again to see it."
  switch (ref.reason) {
    case "superseded":
      return "A later read of this file is further down. Re-read the file to restore this output."
    case "modified":
      return "The file was changed after this read. Re-read the file to see its current content."
    case "stale":
      return "This file read was removed to save context. Re-read the file to restore it."
  }
}

const formatRange = (range: LineRange): string => `${range.start}-${range.end ?? ""}`

/**
 * The pointer text of a ref: one line, a bracketed header of `key=value` fields (strings JSON-quoted) and a fixed
 * instruction. Deterministic: it holds no time and no message index, only what the ref holds.
 * @category pointers
 */
export const formatOffloadRef = (ref: OffloadRef): string => {
  let header = `${PREFIX}${ref._tag === "Read" ? "read" : "output"} tool=${JSON.stringify(ref.tool)}`
  if (ref._tag === "Read") {
    header += ` path=${JSON.stringify(ref.path)}`
    if (ref.range !== undefined) header += ` lines=${formatRange(ref.range)}`
  } else {
    header += ` input=${JSON.stringify(ref.input)}`
  }
  header += ` id=${JSON.stringify(ref.toolUseId)} reason=${ref.reason} tokens=${ref.tokens}`
  if (ref.images > 0) header += ` images=${ref.images}`
  return `${header}] ${instruction(ref)}`
}

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
 * What each short tool_result block holds, by identity: our pointer, the legacy placeholder, or neither. Blocks are
 * immutable, so a block is parsed at most once; blocks this module builds are entered when built (the warm path).
 */
const pointers = new WeakMap<ContentBlock, OffloadRef | "legacy" | "none">()

const pointerOf = (block: ToolResultBlock): OffloadRef | "legacy" | "none" => {
  let known = pointers.get(block)
  if (known === undefined) {
    const text = pointerText(block.content)
    known = text === undefined || text.length > MAX_POINTER_LENGTH
      ? "none"
      : text === OMITTED_TOOL_RESULT
      ? "legacy"
      : parseOffloadRef(text) ?? "none"
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

// ============================================================================
// Eviction
// ============================================================================

/**
 * The recommended `keepRecent`: the newest 10 live tool results stay verbatim. It matches the observation window of
 * the published masking study, and on the corpus keepRecent 3, 5 and 10 free almost the same tokens (superseded reads
 * dominate), so the larger working set costs little. @category constants
 */
export const DEFAULT_KEEP_RECENT = 10

/**
 * The recommended `minSavings` for an agent loop, in estimated tokens. Each eviction rewrites the prompt prefix, so
 * the provider re-writes its cache (1.25× input) instead of reading it (0.1×). With `minSavings` 0 the pi sessions
 * break the cache about every other request (179 breaks, 0.647× the cost of no eviction); from 2,000 evictions are
 * batched (39 breaks, 0.627×); up to 15,000 the corpus cost stays within 1.5% of its minimum. The function's own
 * default stays 0 (evict whatever is stale); pass this in a loop. @category constants
 */
export const DEFAULT_MIN_SAVINGS = 2_000

/** Options of `evictStaleToolResults`. @category models */
export interface EvictOptions {
  /**
   * A hot path (see `HotPaths`): its latest live read survives the `keepRecent` cutoff and a later write. Its
   * superseded duplicates still go, since that is deduplication, not thrash.
   */
  readonly pinned?: (path: string) => boolean
  /**
   * Fewest estimated tokens worth an eviction (default 0). When the eviction would free fewer, nothing changes and
   * the input array itself is returned, so the provider's prompt cache stays valid.
   */
  readonly minSavings?: number
  /** Which tool reads or writes what (default `defaultToolClassifier`). */
  readonly classifier?: ToolClassifier
}

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

/** What `evictStaleToolResults` returns. @category models */
export interface EvictResult<M extends Message> {
  /** The conversation with offloaded payloads; the input array itself when nothing changed. */
  readonly messages: Array<M>
  /** The offloaded blocks, in conversation order. */
  readonly offloaded: ReadonlyArray<Offloaded>
  /** `estimateTokens(input) - estimateTokens(messages)`, exactly. */
  readonly tokensFreed: number
}

/** Per-path facts about the part of the conversation after the current position (the backward scan). */
interface PathState {
  /** A later successful read of the whole file exists. */
  whole: boolean
  /** Ranges of later successful partial reads (none covered by another). */
  ranges: Array<LineRange>
  /** A later successful write or edit exists. */
  modified: boolean
  /** A later successful read exists (so this one is not the path's latest). */
  readLater: boolean
}

/** The estimated tokens of a result's payload, as the estimator counts its content inside a message. */
const payloadTokens = (block: ToolResultBlock): number =>
  block.content === undefined ? 0 : estimateContentTokens(block.content)

const countImages = (content: ToolResultBlock["content"]): number => {
  if (content === undefined || typeof content === "string") return 0
  let n = 0
  for (const block of content) if (isImage(block)) n++
  return n
}

const makeRef = (
  toolUse: ToolUseBlock,
  action: ToolAction,
  block: ToolResultBlock,
  reason: OffloadReason,
  tokens: number
): OffloadRef => {
  const images = countImages(block.content)
  const common = { tool: toolUse.name, toolUseId: block.tool_use_id, reason, tokens, images }
  if (action._tag !== "Read") return { _tag: "Output", input: shortInput(toolUse), ...common }
  return action.range === undefined
    ? { _tag: "Read", path: action.path, ...common }
    : { _tag: "Read", path: action.path, range: action.range, ...common }
}

/** No pointer is shorter than this many tokens: its fixed text alone is longer. */
const MIN_POINTER_TOKENS = Math.floor(
  Math.min(
    ...(["superseded", "modified", "stale"] as const).flatMap((reason) => {
      const common = { tool: "", toolUseId: "", reason, tokens: 0, images: 0 }
      return [
        formatOffloadRef({ _tag: "Output", input: "", ...common }).length,
        formatOffloadRef({ _tag: "Read", path: "", ...common }).length
      ]
    })
  ) / CHARS_PER_TOKEN
)

/** Results whose pointer for the given reason was not smaller than their payload (their decision is cached). */
const tooSmall = new WeakMap<ToolResultBlock, OffloadReason>()

const addRead = (state: PathState, range: LineRange | undefined): void => {
  state.readLater = true
  if (state.whole) return
  if (range === undefined) {
    state.whole = true
    state.ranges = []
    return
  }
  if (state.ranges.some((r) => covers(r, range))) return
  state.ranges = state.ranges.filter((r) => !covers(range, r))
  state.ranges.push(range)
}

const isCovered = (state: PathState, range: LineRange | undefined): boolean =>
  state.whole || (range !== undefined && state.ranges.some((r) => covers(r, range)))

/**
 * Offloads the payload of old tool_result blocks, replacing it with a typed pointer (`formatOffloadRef`).
 *
 * Guarantees:
 * - no block is added or removed, and every tool_use/tool_result id pair is unchanged; only `content` changes;
 * - superseded and modified reads go first; of the rest, the newest `keepRecent` stay verbatim; errors stay unless
 *   superseded; a pinned path's latest read stays; a result is offloaded only when its pointer is smaller;
 * - the estimate never grows, and `tokensFreed` is the exact drop of `estimateTokens`;
 * - when fewer than `minSavings` tokens would be freed (or nothing would change), the input array is returned;
 * - the input is never mutated; unchanged messages and blocks are shared by reference;
 * - pure and idempotent: the same input and options give byte-identical output, and a second application changes
 *   nothing. Tool results without a preceding tool_use, and blocks already offloaded, are left as they are.
 *
 * One forward pass indexes the tool calls, one backward pass decides and rebuilds: linear in the number of blocks.
 * @category eviction
 */
export const evictStaleToolResults = <M extends Message>(
  messages: ReadonlyArray<M>,
  keepRecent: number,
  options: EvictOptions = {}
): EvictResult<M> => {
  const classify = options.classifier ?? defaultToolClassifier
  const pinned = options.pinned
  const keep = Number.isNaN(keepRecent) ? 0 : Math.max(0, keepRecent)
  // forward: each tool_result's call is the nearest preceding tool_use with its id (real sessions reuse ids)
  const calls = new Map<string, ToolUseBlock>()
  const resolved: Array<ToolUseBlock | undefined> = []
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i]!
    if (typeof message.content === "string") continue
    if (message.role === "assistant") {
      for (const block of message.content) if (isToolUse(block)) calls.set(block.id, block)
    } else if (message.role === "user") {
      for (const block of message.content) if (isToolResult(block)) resolved.push(calls.get(block.tool_use_id))
    }
  }
  const paths = new Map<string, PathState>()
  const stateOf = (path: string): PathState => {
    let state = paths.get(path)
    if (state === undefined) {
      state = { whole: false, ranges: [], modified: false, readLater: false }
      paths.set(path, state)
    }
    return state
  }
  const offloaded: Array<Offloaded> = []
  let out: Array<M> | undefined
  let tokensFreed = 0
  let rank = 0
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i]!
    if (message.role !== "user" || typeof message.content === "string") continue
    const content = message.content
    let newContent: Array<ContentBlock> | undefined
    for (let j = content.length - 1; j >= 0; j--) {
      const block = content[j]!
      if (!isToolResult(block)) continue
      const toolUse = resolved.pop()
      if (toolUse === undefined) continue
      const action = classify(toolUse)
      const failed = block.is_error === true
      let reason: OffloadReason | undefined
      if (action._tag === "Read") {
        const state = stateOf(action.path)
        const superseded = isCovered(state, action.range)
        const pinnedLatest = !state.readLater && pinned !== undefined && pinned(action.path)
        if (superseded) reason = "superseded"
        else if (state.modified && !pinnedLatest) reason = "modified"
        else if (rank++ >= keep && !pinnedLatest) reason = "stale"
        if (!failed) addRead(state, action.range)
      } else {
        if (action._tag === "Write" && !failed) stateOf(action.path).modified = true
        if (rank++ >= keep) reason = "stale"
      }
      if (reason === undefined || (failed && reason !== "superseded") || isOffloaded(block)) continue
      const before = payloadTokens(block)
      if (before <= MIN_POINTER_TOKENS || tooSmall.get(block) === reason) continue
      const ref = makeRef(toolUse, action, block, reason, before)
      const pointer = formatOffloadRef(ref)
      const after = Math.ceil(pointer.length / CHARS_PER_TOKEN)
      if (after >= before) {
        tooSmall.set(block, reason)
        continue
      }
      const replacement: ToolResultBlock = { ...block, content: pointer }
      pointers.set(replacement, ref)
      newContent ??= content.slice()
      newContent[j] = replacement
      offloaded.push({
        messageIndex: i,
        blockIndex: j,
        toolUseId: block.tool_use_id,
        block: replacement,
        reason,
        tokensFreed: before - after,
        ref
      })
    }
    if (newContent !== undefined) {
      const replaced = { ...message, content: newContent } as M
      tokensFreed += estimateMessageTokens(message) - estimateMessageTokens(replaced)
      out ??= messages.slice()
      out[i] = replaced
    }
  }
  if (out === undefined || tokensFreed < (options.minSavings ?? 0)) {
    return { messages: messages as Array<M>, offloaded: [], tokensFreed: 0 }
  }
  offloaded.reverse()
  return { messages: out, offloaded, tokensFreed }
}
