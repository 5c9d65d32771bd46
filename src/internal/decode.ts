/**
 * The wire-model decoder behind `Message.decodeMessages`: total, linear, and precise.
 *
 * - **Total.** Every input either decodes or yields a failure; nothing throws. Before any field is read, one iterative
 *   walk bounds the nesting depth of the whole message (`MAX_NESTING_DEPTH`, counted from the message object), so the
 *   recursive field checks that follow, and every function that later walks a decoded list, run on bounded depth.
 *   Cyclic objects fail the same check.
 * - **Linear.** Each value is visited a bounded number of times; the path of a failure is built once, on the way out.
 * - **Precise.** The path ends at the field that is wrong (`[2, "content", 1, "source", "data"]`).
 *
 * @internal
 */

/** How deep objects and arrays may nest inside one message (the message object is level 1). @category constants */
export const MAX_NESTING_DEPTH = 128

/** Where decoding failed: the path (from the messages array, reversed while it is built) and the reason. */
export interface DecodeFailure {
  /** The path from the messages array, innermost key first (reversed once by `finish`). */
  readonly reversedPath: Array<string | number>
  readonly reason: string
  /** The type of the innermost block the failure lies in, if any. */
  blockType: string | undefined
}

const fail = (reason: string, ...reversedPath: Array<string | number>): DecodeFailure => ({
  reversedPath,
  reason,
  blockType: undefined
})

const at = (failure: DecodeFailure | undefined, ...keys: Array<string | number>): DecodeFailure | undefined => {
  if (failure !== undefined) { for (let i = keys.length - 1; i >= 0; i--) failure.reversedPath.push(keys[i]!) }
  return failure
}

type Obj = Readonly<Record<string, unknown>>

const isObject = (value: unknown): value is Obj => value !== null && typeof value === "object" && !Array.isArray(value)

/** The first object or array nested deeper than `limit` levels below `root` (itself level 1), as a reversed path. */
const tooDeep = (root: unknown, limit: number): DecodeFailure | undefined => {
  if (root === null || typeof root !== "object") return undefined
  interface Frame {
    readonly node: Obj | ReadonlyArray<unknown>
    readonly keys: ReadonlyArray<string> | undefined
    readonly size: number
    next: number
  }
  const frame = (node: object): Frame => {
    if (Array.isArray(node)) return { node, keys: undefined, size: node.length, next: 0 }
    const keys = Object.keys(node)
    return { node: node as Obj, keys, size: keys.length, next: 0 }
  }
  const stack: Array<Frame> = [frame(root)]
  while (stack.length > 0) {
    const top = stack[stack.length - 1]!
    if (top.next >= top.size) {
      stack.pop()
      continue
    }
    const key = top.keys === undefined ? top.next : top.keys[top.next]!
    top.next++
    const child = (top.node as Record<string | number, unknown>)[key]
    if (child === null || typeof child !== "object") continue
    if (stack.length >= limit) {
      const path: Array<string | number> = []
      for (let i = stack.length - 1; i >= 0; i--) {
        const f = stack[i]!
        path.push(f.keys === undefined ? f.next - 1 : f.keys[f.next - 1]!)
      }
      return fail(`Nested deeper than ${limit} levels`, ...path)
    }
    stack.push(frame(child))
  }
  return undefined
}

// ============================================================================
// Field checks
// ============================================================================

type Check = (value: unknown) => DecodeFailure | undefined

const string: Check = (v) => typeof v === "string" ? undefined : fail("Expected string")
const nonEmpty: Check = (v) =>
  typeof v !== "string" ? fail("Expected string") : v.length === 0 ? fail("Expected a non-empty string") : undefined
const boolean: Check = (v) => typeof v === "boolean" ? undefined : fail("Expected boolean")
const record: Check = (v) => isObject(v) ? undefined : fail("Expected object")
const nullOr = (check: Check): Check => (v) => v === null ? undefined : check(v)
const nullOrNonEmpty: Check = (v) =>
  v === null ?
    undefined :
    typeof v !== "string" ?
    fail("Expected string | null") :
    v.length === 0
    ? fail("Expected a non-empty string or null")
    : undefined
const nullOrArray: Check = (v) => v === null || Array.isArray(v) ? undefined : fail("Expected array | null")
const anything: Check = () => undefined

interface Field {
  readonly check: Check
  readonly optional: boolean
}
const req = (check: Check): Field => ({ check, optional: false })
const opt = (check: Check): Field => ({ check, optional: true })

/** Checks the listed fields of an object; an optional field that is absent or `undefined` passes. */
const fields = (value: Obj, spec: Readonly<Record<string, Field>>): DecodeFailure | undefined => {
  for (const key in spec) {
    const field = spec[key]!
    const v = value[key]
    if (v === undefined) {
      if (!field.optional) return fail("Missing key", key)
      continue
    }
    const failure = at(field.check(v), key)
    if (failure !== undefined) return failure
  }
  return undefined
}

/** A `{ type, ... }` object whose `type` picks the field spec. */
const tagged = (specs: Readonly<Record<string, Readonly<Record<string, Field>>>>): Check => {
  const expected = Object.keys(specs).map((t) => JSON.stringify(t)).join(" | ")
  return (v) => {
    if (!isObject(v)) return fail("Expected object")
    const type = v.type
    if (type === undefined) return fail("Missing key", "type")
    const spec = typeof type === "string" && Object.hasOwn(specs, type) ? specs[type] : undefined
    if (spec === undefined) return fail(`Expected ${expected}`, "type")
    return fields(v, spec)
  }
}

const base64 = { media_type: req(string), data: req(string) }
const url = { url: req(string) }
const file = { file_id: req(string) }

const imageSource = tagged({ base64, url, file })

/** Block lists nested in a block: a string or an array of blocks, each checked as a block. */
const nestedBlocks: Check = (v) => {
  if (typeof v === "string") return undefined
  if (!Array.isArray(v)) return fail("Expected string | array")
  for (let i = 0; i < v.length; i++) {
    const failure = at(checkBlock(v[i]), i)
    if (failure !== undefined) return failure
  }
  return undefined
}

const documentSource = tagged({ base64, text: base64, content: { content: req(nestedBlocks) }, url, file })

const textBlocks: Check = (v) => {
  if (!Array.isArray(v)) return fail("Expected array")
  for (let i = 0; i < v.length; i++) {
    const block = v[i]
    const failure = isObject(block) && block.type !== "text" ? fail(`Expected "text"`, "type") : checkBlock(block)
    if (failure !== undefined) return at(failure, i)
  }
  return undefined
}

const SERVER_TOOL_RESULT_SPEC = { tool_use_id: req(nonEmpty), content: opt(anything) }

const BLOCK_SPECS: Readonly<Record<string, Readonly<Record<string, Field>>>> = {
  text: { text: req(string) },
  image: { source: req(imageSource) },
  document: { source: req(documentSource), title: opt(nullOr(string)), context: opt(nullOr(string)) },
  search_result: { source: req(string), title: req(string), content: req(textBlocks) },
  thinking: { thinking: req(string), signature: opt(string) },
  redacted_thinking: { data: req(string) },
  tool_use: { id: req(nonEmpty), name: req(nonEmpty), input: req(record) },
  tool_result: { tool_use_id: req(nonEmpty), content: opt(nestedBlocks), is_error: opt(boolean) },
  server_tool_use: { id: req(nonEmpty), name: req(string), input: req(record) },
  container_upload: { file_id: req(string) },
  compaction: {
    content: opt(nullOrNonEmpty),
    encrypted_content: opt(nullOr(string)),
    signature: opt(nullOr(string)),
    tool_changes: opt(nullOrArray)
  },
  web_search_tool_result: SERVER_TOOL_RESULT_SPEC,
  web_fetch_tool_result: SERVER_TOOL_RESULT_SPEC,
  code_execution_tool_result: SERVER_TOOL_RESULT_SPEC,
  bash_code_execution_tool_result: SERVER_TOOL_RESULT_SPEC,
  text_editor_code_execution_tool_result: SERVER_TOOL_RESULT_SPEC,
  tool_search_tool_result: SERVER_TOOL_RESULT_SPEC,
  advisor_tool_result: SERVER_TOOL_RESULT_SPEC,
  mcp_tool_result: { tool_use_id: req(nonEmpty), content: opt(nestedBlocks), is_error: opt(boolean) },
  mcp_tool_use: { id: req(nonEmpty), name: req(string), server_name: req(string), input: req(record) }
}

/** Checks one content block; a failure carries the innermost block's type. Recursion is bounded by `tooDeep`. */
const checkBlock = (v: unknown): DecodeFailure | undefined => {
  if (!isObject(v)) return fail("Expected object")
  const type = v.type
  if (type === undefined) return fail("Missing key", "type")
  if (typeof type !== "string") return fail("Expected string", "type")
  if (type.length === 0) return fail("Expected a non-empty string", "type")
  const spec = Object.hasOwn(BLOCK_SPECS, type) ? BLOCK_SPECS[type] : undefined
  if (spec === undefined) return undefined
  const failure = fields(v, spec)
  if (failure !== undefined && failure.blockType === undefined) failure.blockType = type
  return failure
}

const ROLES = new Set(["user", "assistant", "system"])

const CLEAR_AT = new Set(["next_user_message", "never"])

/** The fields only a system message has: `output_config` is an object, `clear_at` a known value. */
const systemFields = (v: Obj): DecodeFailure | undefined => {
  const config = v.output_config
  if (config !== undefined && config !== null && !isObject(config)) {
    return fail("Expected object | null", "output_config")
  }
  const clearAt = v.clear_at
  if (clearAt !== undefined && clearAt !== null && (typeof clearAt !== "string" || !CLEAR_AT.has(clearAt))) {
    return fail(`Expected "next_user_message" | "never" | null`, "clear_at")
  }
  return undefined
}

/** Checks one message, with a path relative to the message; `blockIndex` is the failing top-level block, if any. */
export const checkMessage = (
  v: unknown
): { readonly failure: DecodeFailure; readonly blockIndex: number | undefined } | undefined => {
  if (!isObject(v)) return { failure: fail("Expected object"), blockIndex: undefined }
  const deep = tooDeep(v, MAX_NESTING_DEPTH)
  if (deep !== undefined) {
    const path = deep.reversedPath
    const blockIndex = path.length >= 2 && path[path.length - 1] === "content" && typeof path[path.length - 2] ===
        "number"
      ? path[path.length - 2] as number
      : undefined
    return { failure: deep, blockIndex }
  }
  if (v.role === undefined) return { failure: fail("Missing key", "role"), blockIndex: undefined }
  if (typeof v.role !== "string" || !ROLES.has(v.role)) {
    return { failure: fail(`Expected "user" | "assistant" | "system"`, "role"), blockIndex: undefined }
  }
  if (v.role === "system") {
    const failure = systemFields(v)
    if (failure !== undefined) return { failure, blockIndex: undefined }
  }
  const content = v.content
  if (content === undefined) {
    // a system message may carry only per-turn settings (API-RULES 26)
    if (v.role === "system" && isObject(v.output_config)) return undefined
    return { failure: fail("Missing key", "content"), blockIndex: undefined }
  }
  if (typeof content === "string") return undefined
  if (!Array.isArray(content)) return { failure: fail("Expected string | array", "content"), blockIndex: undefined }
  for (let i = 0; i < content.length; i++) {
    const failure = at(checkBlock(content[i]), "content", i)
    if (failure !== undefined) return { failure, blockIndex: i }
  }
  return undefined
}
