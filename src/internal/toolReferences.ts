/**
 * The tools a block loads by reference: a deferred tool is loaded only through a `tool_reference` that
 * tool search returned, inside a `tool_result` or a `tool_search_tool_result` (its `tool_references`). Removing such a
 * block unloads the tool for every later call, so eviction never offloads one and a compaction re-emits the tools its
 * summarized part loaded.
 *
 * @internal
 */

const isObject = (v: unknown): v is Readonly<Record<string, unknown>> =>
  v !== null && typeof v === "object" && !Array.isArray(v)

/** The names of the tools every `tool_reference` inside `value` references, in order (nested content included). */
export const referencedTools = (value: unknown): Array<string> => {
  const out: Array<string> = []
  const visit = (v: unknown): void => {
    if (Array.isArray(v)) {
      for (const x of v) visit(x)
      return
    }
    if (!isObject(v)) return
    if (v.type === "tool_reference" && typeof v.tool_name === "string") out.push(v.tool_name)
    if (Array.isArray(v.content) || isObject(v.content)) visit(v.content)
    if (Array.isArray(v.tool_references)) visit(v.tool_references)
  }
  visit(value)
  return out
}

/** True when the block (a tool result, a tool search result) holds a `tool_reference`. */
export const holdsToolReference = (block: { readonly content?: unknown }): boolean =>
  typeof block.content !== "string" && block.content !== undefined && referencedTools(block.content).length > 0
