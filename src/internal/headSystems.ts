/**
 * The head's system messages as a compaction re-emits them after its summary (API-RULES 26, 27): a message with
 * `clear_at: "next_user_message"` that a later user message already cleared is dead and stays dropped; the per-turn
 * settings (`output_config`) of a message whose assistant turn was summarized governed that turn only, so they are
 * not carried to another one (the message's content, when it has some, still is).
 *
 * @internal
 */
import type { Message } from "../Message.ts"

/** The fields a system message may carry besides its content (API-RULES 26, 27), as this module reads them. */
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
