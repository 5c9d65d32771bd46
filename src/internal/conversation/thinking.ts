/**
 * The thinking config a `Conversation` request carries.
 *
 * @internal
 */
import type Anthropic from "@anthropic-ai/sdk"

/**
 * A request's thinking config: the SDK's `ThinkingConfigParam` with the binding beta's `block_binding`, so a request
 * that carries it still goes to `client.messages.create` as well as `client.beta.messages.create`.
 */
export type ThinkingConfig = Anthropic.ThinkingConfigParam & {
  readonly block_binding?: { readonly prefix_mismatch_behavior?: "error" | "drop_block" | null } | null
}
