/**
 * The token estimate itself, with no cache: the constants, image and PDF sizing, `jsonSize`, and the count of a block
 * list or a message computed every time. `Tokens` re-exports the public part and caches the counts; the uncached
 * counts are here for the cold paths (a cold eviction prices each payload once) and for tests and benchmarks.
 */
import type { CompactionBlock, ContentBlock, DocumentBlock, ImageBlock, Message } from "../Message.ts"

// ============================================================================
// Constants
// ============================================================================

/** Characters per token of the estimate. @category constants */
export const CHARS_PER_TOKEN = 4

/** Fixed tokens added per message for the role and framing. @category constants */
export const MESSAGE_OVERHEAD_TOKENS = 4

/**
 * Tokens charged for an image whose size cannot be read (a URL or file source, or an unrecognised header). It is the
 * cost of the largest image the API accepts without downscaling (~1.15 megapixels / 750), so the estimate errs high.
 * @category constants
 */
export const UNKNOWN_IMAGE_TOKENS = 1600

/**
 * Tokens per PDF page. Anthropic charges each page's text (1,500–3,000 tokens for a dense page) plus the page as an
 * image (~1,500 tokens at the downscaled size): 3,000 is the middle of that range.
 * @category constants
 */
export const PDF_PAGE_TOKENS = 3000

/** Longest image edge the API keeps before downscaling, in pixels. @category constants */
export const IMAGE_MAX_EDGE = 1568

/** Most pixels the API keeps before downscaling (about 1.15 megapixels). @category constants */
export const IMAGE_MAX_PIXELS = 1_150_000

// ============================================================================
// Images
// ============================================================================

/** Width and height of an image, in pixels. @category models */
export interface ImageSize {
  readonly width: number
  readonly height: number
}

/**
 * Anthropic's published image cost: `width * height / 750` tokens, after the API scales the image down so that its
 * long edge is at most 1568 px and it has at most ~1.15 megapixels.
 * @category estimation
 */
export const imageTokens = ({ height, width }: ImageSize): number => {
  if (width <= 0 || height <= 0) return UNKNOWN_IMAGE_TOKENS
  const edgeScale = Math.min(1, IMAGE_MAX_EDGE / Math.max(width, height))
  const pixelScale = Math.min(1, Math.sqrt(IMAGE_MAX_PIXELS / (width * height)))
  const scale = Math.min(edgeScale, pixelScale)
  return Math.ceil((width * scale) * (height * scale) / 750)
}

const decodeBase64Prefix = (data: string, bytes: number): string => {
  const chars = Math.min(data.length - (data.length % 4), Math.ceil(bytes / 3) * 4)
  try {
    return atob(data.slice(0, chars))
  } catch {
    return ""
  }
}

const u16be = (s: string, i: number): number => (s.charCodeAt(i) << 8) | s.charCodeAt(i + 1)
const u16le = (s: string, i: number): number => s.charCodeAt(i) | (s.charCodeAt(i + 1) << 8)
const u24le = (s: string, i: number): number => u16le(s, i) | (s.charCodeAt(i + 2) << 16)
const u32be = (s: string, i: number): number => ((u16be(s, i) << 16) >>> 0) + u16be(s, i + 2)

const jpegSize = (bin: string): ImageSize | undefined => {
  let i = 2
  while (i + 9 < bin.length) {
    if (bin.charCodeAt(i) !== 0xff) return undefined
    const marker = bin.charCodeAt(i + 1)
    if (marker === 0xff) {
      i++
      continue
    }
    const isFrame = marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc
    if (isFrame) return { height: u16be(bin, i + 5), width: u16be(bin, i + 7) }
    i += 2 + u16be(bin, i + 2)
  }
  return undefined
}

const headerSize = (bin: string): ImageSize | undefined => {
  if (bin.startsWith("\x89PNG") && bin.length >= 24) return { width: u32be(bin, 16), height: u32be(bin, 20) }
  if (bin.startsWith("GIF8") && bin.length >= 10) return { width: u16le(bin, 6), height: u16le(bin, 8) }
  if (bin.startsWith("RIFF") && bin.slice(8, 12) === "WEBP" && bin.length >= 30) {
    const chunk = bin.slice(12, 16)
    if (chunk === "VP8X") return { width: u24le(bin, 24) + 1, height: u24le(bin, 27) + 1 }
    if (chunk === "VP8 ") return { width: u16le(bin, 26) & 0x3fff, height: u16le(bin, 28) & 0x3fff }
    if (chunk === "VP8L") {
      const bits = (bin.charCodeAt(21) | (bin.charCodeAt(22) << 8) | (bin.charCodeAt(23) << 16) |
        (bin.charCodeAt(24) << 24)) >>> 0
      return { width: (bits & 0x3fff) + 1, height: ((bits >>> 14) & 0x3fff) + 1 }
    }
  }
  return undefined
}

/**
 * Reads the pixel size of a base64 PNG, GIF, WebP or JPEG from its header, decoding only the first bytes (JPEG may
 * need more, up to its frame marker). Returns `undefined` for any other or truncated data.
 * @category estimation
 */
export const imageSize = (base64: string): ImageSize | undefined => {
  const head = decodeBase64Prefix(base64, 32)
  if (head.startsWith("\xff\xd8")) {
    for (const bytes of [4096, 65536, Infinity]) {
      const size = jpegSize(decodeBase64Prefix(base64, bytes))
      if (size !== undefined || bytes * 4 / 3 >= base64.length) return size
    }
    return undefined
  }
  return headerSize(head)
}

const imageBlockTokens = (block: ImageBlock): number => {
  const source = block.source
  if (source.type !== "base64") return UNKNOWN_IMAGE_TOKENS
  const size = imageSize(source.data)
  return size === undefined ? UNKNOWN_IMAGE_TOKENS : imageTokens(size)
}

/** Counts `/Type /Page` objects in a PDF; falls back to one page per 100 kB when the page tree is compressed. */
const pdfPages = (base64: string): number => {
  const bin = decodeBase64Prefix(base64, Infinity)
  const pages = bin.match(/\/Type\s*\/Page(?![a-zA-Z])/g)?.length ?? 0
  return pages > 0 ? pages : Math.max(1, Math.ceil(bin.length / 100_000))
}

/** The characters of a document block; its pages add to `fixedTokens`. */
const documentChars = (block: DocumentBlock): number => {
  const source = block.source
  const title = (block.title?.length ?? 0) + (block.context?.length ?? 0)
  switch (source.type) {
    case "base64":
      fixedTokens += pdfPages(source.data) * PDF_PAGE_TOKENS
      return title
    case "text":
      return title + source.data.length
    case "content":
      return typeof source.content === "string" ? title + source.content.length : blocksChars(source.content, title)
    default:
      fixedTokens += PDF_PAGE_TOKENS
      return title
  }
}

// ============================================================================
// JSON size
// ============================================================================

/** The JSON size of a scalar (anything but a non-null object). */
const scalarSize = (value: unknown): number => {
  switch (typeof value) {
    case "string":
      return value.length + 2
    case "number":
      return Number.isFinite(value) ? String(value).length : 4
    case "boolean":
      return value ? 4 : 5
    case "bigint":
      return String(value).length
    case "object":
      return 4 // null
    default:
      return 0
  }
}

/** Values JSON has no text for: omitted as an object's property, written as `null` as an array item. */
const isUnwritable = (item: unknown): boolean =>
  item === undefined || typeof item === "function" || typeof item === "symbol"

/** Marks, on `jsonSize`'s stack, the end of the object below it. */
const EXIT: unique symbol = Symbol("jsonSize/exit")

/** Nesting depth up to which `jsonSize` recurses; deeper values (and cycles) go to the explicit-stack walk. */
const RECURSION_DEPTH = 16

/**
 * Objects the recursive walk visits before it gives up for the explicit-stack walk: it bounds the work wasted on a
 * cycle, which the recursion only detects at `RECURSION_DEPTH` (an object whose keys all point back to it would
 * otherwise be walked key-count^16 times).
 */
const RECURSION_BUDGET = 4096

let recursionBudget = 0

/**
 * The JSON framing of a non-null, non-array object: its braces, and the quoted key, colon and comma of each own
 * entry JSON writes (`undefined`, functions and symbols are left out). Each such value goes to `visit`, in key order;
 * when `visit` returns false the walk stops and the answer is -1. The values' own sizes are the caller's.
 */
const objectFraming = (item: object, visit: (value: unknown) => boolean): number => {
  let size = 2
  let first = true
  for (const key in item) {
    if (!Object.hasOwn(item, key)) continue
    const v = (item as Record<string, unknown>)[key]
    if (isUnwritable(v)) continue
    size += (first ? 0 : 1) + key.length + 3
    first = false
    if (!visit(v)) return -1
  }
  return size
}

/** `jsonSize` of a non-null object by recursion, or -1 when it nests deeper than `depth` (a cycle always does). */
const objectSizeRecursive = (item: object, depth: number): number => {
  if (depth === 0 || --recursionBudget < 0) return -1
  if (Array.isArray(item)) {
    let size = 2 + Math.max(0, item.length - 1)
    for (let i = 0; i < item.length; i++) {
      const v: unknown = item[i]
      if (v !== null && typeof v === "object") {
        const inner = objectSizeRecursive(v, depth - 1)
        if (inner < 0) return -1
        size += inner
      } else size += isUnwritable(v) ? 4 : scalarSize(v)
    }
    return size
  }
  let values = 0
  const framing = objectFraming(item, (v) => {
    if (v === null || typeof v !== "object") values += scalarSize(v)
    else {
      const inner = objectSizeRecursive(v, depth - 1)
      if (inner < 0) return false
      values += inner
    }
    return true
  })
  return framing < 0 ? -1 : framing + values
}

/** `jsonSize` of a non-null object with an explicit stack: any depth, and cycles. */
const objectSizeIterative = (value: object): number => {
  let size = 0
  const open = new Set<object>()
  const stack: Array<unknown> = [value]
  while (stack.length > 0) {
    const item = stack.pop()
    if (item === EXIT) {
      open.delete(stack.pop() as object)
      continue
    }
    if (item === null || typeof item !== "object") {
      size += scalarSize(item)
      continue
    }
    if (open.has(item)) {
      size += 4
      continue
    }
    open.add(item)
    stack.push(item, EXIT)
    if (Array.isArray(item)) {
      size += 2 + Math.max(0, item.length - 1)
      for (let i = item.length - 1; i >= 0; i--) {
        const v = item[i]
        if (isUnwritable(v)) size += 4
        else stack.push(v)
      }
      continue
    }
    size += objectFraming(item, (v) => {
      stack.push(v)
      return true
    })
  }
  return size
}

/**
 * The length of `JSON.stringify(value)` without building the string, except that string escapes are not counted (the
 * provider tokenizes the characters, not their JSON escapes). `undefined`, functions and symbols count as in JSON.
 * Any nesting depth is fine (past 16 levels it walks an explicit stack); a value met again while it is still being
 * walked (a cycle) counts as `null`.
 * @category estimation
 */
export const jsonSize = (value: unknown): number => {
  if (value === null || typeof value !== "object") return scalarSize(value)
  recursionBudget = RECURSION_BUDGET
  const size = objectSizeRecursive(value, RECURSION_DEPTH)
  return size >= 0 ? size : objectSizeIterative(value)
}

// ============================================================================
// Estimation
// ============================================================================

/**
 * The tokens of the blocks being estimated that do not come from characters (images, PDF pages): `blocksChars` adds
 * to it as it walks, and `blocksTokens` reads it (a walk allocates nothing; one walk runs at a time).
 */
let fixedTokens = 0

/** The characters of `blocks` plus `initialChars`; their images and PDF pages add to `fixedTokens`. */
const blocksChars = (blocks: ReadonlyArray<ContentBlock>, initialChars: number): number => {
  let chars = initialChars
  for (const block of blocks) {
    switch (block.type) {
      case "text":
        chars += (block as { text: string }).text.length
        break
      case "thinking":
        chars += (block as { thinking: string }).thinking.length
        break
      case "redacted_thinking":
        chars += (block as { data: string }).data.length
        break
      case "tool_use":
      case "server_tool_use": {
        const call = block as { name: string; input: unknown }
        chars += call.name.length + jsonSize(call.input)
        break
      }
      case "tool_result": {
        const content = (block as { content?: string | ReadonlyArray<ContentBlock> }).content
        if (typeof content === "string") chars += content.length
        else if (content !== undefined) chars += blocksChars(content, 0)
        break
      }
      case "image":
        fixedTokens += imageBlockTokens(block as ImageBlock)
        break
      case "compaction": {
        // priced by the summary the model reads, not the opaque fields it sends back
        const content = (block as CompactionBlock).content
        chars += typeof content === "string" ? content.length : 0
        break
      }
      case "document":
        chars += documentChars(block as DocumentBlock)
        break
      default:
        chars += jsonSize(block)
    }
  }
  return chars
}

/** The estimated tokens of a block list, computed every time. */
export const blocksTokens = (content: ReadonlyArray<ContentBlock>): number => {
  fixedTokens = 0
  const chars = blocksChars(content, 0)
  return Math.ceil(chars / CHARS_PER_TOKEN) + fixedTokens
}

/** The estimated tokens of a message's (or a tool result's) content without the per-message overhead, uncached. */
export const estimateContentTokensUncached = (content: string | ReadonlyArray<ContentBlock>): number =>
  typeof content === "string" ? Math.ceil(content.length / CHARS_PER_TOKEN) : blocksTokens(content)

/**
 * The estimated tokens of a request's system prompt and tools, the part of a prompt before its messages: the system
 * prompt as text blocks, the tools by their JSON size (none for an empty list).
 */
export const systemAndToolsTokens = (
  system: string | ReadonlyArray<ContentBlock> | undefined,
  tools: ReadonlyArray<unknown> | undefined
): number =>
  (system === undefined ? 0 : blocksTokens(typeof system === "string" ? [{ type: "text", text: system }] : system)) +
  (tools === undefined || tools.length === 0 ? 0 : Math.ceil(jsonSize(tools) / CHARS_PER_TOKEN))

/**
 * The estimated prompt tokens of one message, computed every time (`Tokens.estimateMessageTokens` caches it). A system
 * message without content costs only its framing: its `output_config` is settings, not text.
 */
export const estimateMessageTokensUncached = (message: Message): number => {
  const content = message.content as Message["content"] | undefined
  return (typeof content === "string"
    ? Math.ceil(content.length / CHARS_PER_TOKEN)
    : content === undefined
    ? 0
    : blocksTokens(content)) + MESSAGE_OVERHEAD_TOKENS
}
