/**
 * What a compaction carries from its head into the new view. The head's system messages as it re-emits them after
 * its summary: a message with
 * `clear_at: "next_user_message"` that a later user message already cleared is dead and stays dropped; the per-turn
 * settings (`output_config`) of a message whose assistant turn was summarized governed that turn only, so they are
 * not carried to another one (the message's content, when it has some, still is). And the newest MCP tool listing of
 * each server whose tools the kept part still calls.
 *
 * @internal
 */
import type { Message } from "../Message.ts"

/** The fields a system message may carry besides its content, as this module reads them. */
interface SystemSettings {
  readonly output_config?: unknown
  readonly clear_at?: unknown
}

/**
 * The system messages of `messages.slice(from, cut)` (the head a compaction summarizes) that stay live after it, in
 * order: cleared ones left out, and `output_config` removed from each whose governed assistant turn (the next
 * message that is not a system message) lies in the head. A system message left with neither content nor settings is
 * left out. O(messages).
 */
export const liveHeadSystems = <M extends Message>(
  messages: ReadonlyArray<M>,
  from: number,
  cut: number
): ReadonlyArray<M> => {
  let lastUser = -1
  for (let i = messages.length - 1; i >= from && lastUser < 0; i--) if (messages[i]!.role === "user") lastUser = i
  const live: Array<M> = []
  for (let i = from; i < cut; i++) {
    const message = messages[i]!
    if (message.role !== "system") continue
    const fields = message as M & SystemSettings
    if (fields.clear_at === "next_user_message" && lastUser > i) continue
    if (fields.output_config === undefined || fields.output_config === null) {
      live.push(message)
      continue
    }
    let governed = i + 1
    while (governed < messages.length && messages[governed]!.role === "system") governed++
    if (governed >= cut) {
      live.push(message)
      continue
    }
    const { output_config: _settings, ...rest } = fields
    if ((message.content as Message["content"] | undefined) != null) live.push(rest as unknown as M)
  }
  return live
}

/** A content block as this module reads it. */
type AnyBlock = { readonly type: string; readonly [key: string]: unknown }

const blocksIn = (message: Message): ReadonlyArray<AnyBlock> =>
  Array.isArray(message.content) ? message.content as ReadonlyArray<AnyBlock> : []

/**
 * The `mcp_tool_listing` blocks a compaction carries into the kept part `messages.slice(cut)`: for each
 * MCP server the kept part calls (`mcp_tool_use`) before it lists that server again, the newest listing of it in
 * `messages.slice(from, cut)`. The server reads a listing sent back instead of asking the MCP server again, so the
 * kept calls stay answered by the tools they were made with. In the order of the kept part's first calls.
 */
export const carriedListings = (
  messages: ReadonlyArray<Message>,
  from: number,
  cut: number
): ReadonlyArray<AnyBlock> => {
  const wanted: Array<string> = []
  const listed = new Set<string>()
  for (let i = cut; i < messages.length; i++) {
    for (const block of blocksIn(messages[i]!)) {
      const server = block.type === "mcp_tool_listing" ? block.mcp_server_name : block.server_name
      if (typeof server !== "string" || listed.has(server)) continue
      if (block.type === "mcp_tool_listing") listed.add(server)
      else if (block.type === "mcp_tool_use" && !wanted.includes(server)) wanted.push(server)
    }
  }
  const newest = new Map<string, AnyBlock>()
  for (let i = cut - 1; i >= from && newest.size < wanted.length; i--) {
    const blocks = blocksIn(messages[i]!)
    for (let b = blocks.length - 1; b >= 0; b--) {
      const block = blocks[b]!
      const server = block.mcp_server_name
      if (block.type === "mcp_tool_listing" && typeof server === "string" && wanted.includes(server)) {
        if (!newest.has(server)) newest.set(server, block)
      }
    }
  }
  return wanted.flatMap((server) => newest.get(server) ?? [])
}

/**
 * `kept` with `listings` put into its first assistant message, after that message's leading thinking blocks (a new
 * message object; the others are kept as they are). `kept` itself when there are none to put, or no assistant message.
 */
export const withListings = <M extends Message>(
  kept: ReadonlyArray<M>,
  listings: ReadonlyArray<AnyBlock>
): ReadonlyArray<M> => {
  if (listings.length === 0) return kept
  const at = kept.findIndex((m) => m.role === "assistant")
  if (at < 0) return kept
  const message = kept[at]!
  const blocks = typeof message.content === "string" ? [{ type: "text", text: message.content }] : blocksIn(message)
  let lead = 0
  while (lead < blocks.length && (blocks[lead]!.type === "thinking" || blocks[lead]!.type === "redacted_thinking")) {
    lead++
  }
  const content = [...blocks.slice(0, lead), ...listings, ...blocks.slice(lead)]
  return [...kept.slice(0, at), { ...message, content } as M, ...kept.slice(at + 1)]
}
