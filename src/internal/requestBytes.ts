/**
 * The bytes a request uploads: its JSON body in UTF-8 (what `client.messages.create` sends, `model` and `max_tokens`
 * aside), counted without serializing the whole body again: each message's bytes are counted once and remembered by
 * the message object (messages are immutable and shared from request to request), and only the rest of the body
 * (system, tools, thread) is serialized per request. Equal to `utf8(JSON.stringify(request)).length`.
 *
 * @internal
 */

const utf8 = new TextEncoder()

/** The UTF-8 length of `text`, without encoding it when it is ASCII. */
// deno-lint-ignore no-control-regex -- the ASCII range starts at the control characters
const ASCII = /^[\x00-\x7f]*$/
const utf8Length = (text: string): number => ASCII.test(text) ? text.length : utf8.encode(text).length

const messageBytes = new WeakMap<object, number>()

/** The bytes of one message's JSON, remembered by the message object. */
const bytesOfMessage = (message: unknown): number => {
  if (typeof message !== "object" || message === null) return utf8Length(JSON.stringify(message) ?? "null")
  let bytes = messageBytes.get(message)
  if (bytes === undefined) {
    bytes = utf8Length(JSON.stringify(message))
    messageBytes.set(message, bytes)
  }
  return bytes
}

/** The bytes of `request`'s JSON body in UTF-8: `utf8(JSON.stringify(request)).length`. */
export const requestBytes = (request: { readonly messages: ReadonlyArray<unknown> }): number => {
  const messages = request.messages
  // the body with an empty `messages` array, then the array's elements and their commas in its place
  const shell = utf8Length(JSON.stringify({ ...request, messages: [] }))
  let bytes = shell + Math.max(0, messages.length - 1)
  for (const message of messages) bytes += bytesOfMessage(message)
  return bytes
}
