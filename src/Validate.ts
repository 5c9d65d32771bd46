/**
 * Concept: validity for the Messages API, as violations, and repair.
 *
 * Structural validity of a conversation for the Messages API, and repair.
 *
 * The API merges consecutive same-role messages into one turn before it checks anything, so every rule here is
 * checked on the merged view: a tool-result message followed by a typed human message is valid (it merges into one
 * user turn whose tool results come first), while a human message followed by a tool-result message is not (after the
 * merge, text precedes the results).
 *
 * Rules, and what the API does when one is broken:
 *
 * | violation | rule | API |
 * | --- | --- | --- |
 * | `MalformedMessage` | each message is an object with a known role, its content a string or a list of blocks that each have a `type` (judged first: a list that breaks it is judged by nothing else) | 400 |
 * | `EmptyConversation` | `messages` is not empty | 400 |
 * | `FirstMessageNotUser` | the first message has the user role, unless a compaction block opens it | 400 |
 * | `EmptyMessage` | no empty or whitespace-only content; only a final assistant message's content may be empty, and a system message may have none when it carries `output_config` fields | 400 |
 * | `EmptyTextBlock` | no text block is empty or whitespace-only, anywhere, the final assistant message included | 400 |
 * | `OrphanedToolResult` | every `tool_result` answers a `tool_use` of the (merged) assistant turn before it | 400 |
 * | `MissingToolResult` | every client `tool_use` has a `tool_result` in the very next (merged) user turn | 400 |
 * | `ToolResultNotFirst` | in that user turn, the tool results come before any other block | 400 |
 * | `DuplicateToolUseId` | `tool_use` ids are unique across the list | 400 |
 * | `DuplicateToolResult` | one result per `tool_use` id | 400 |
 * | `SystemMessageFirst` | a system message is never first | 400 |
 * | `SystemMessageNotAfterTurn` | it follows a user turn, or an assistant turn ending in a server tool result | 400 |
 * | `SystemMessageNotBeforeAssistant` | it is followed by an assistant turn, or ends the list | 400 |
 * | `SystemMessageInToolCall` | it never sits between a `tool_use` and its `tool_result` | 400 |
 * | `SystemMessageBlock` | it holds only text and tool changes (`tool_addition`, `tool_removal`) | 400 |
 * | `CompactionBlockAmbiguous` | on demand (`{ mode: "on-demand" }`): one compaction block with content | 400 |
 * | `CompactionBlockMisplaced` | a compaction block with content is the first block of its message, and on demand of the list; never in a system message | 400 |
 * | `ModifiedCompaction` | compaction blocks come back unchanged (needs `reference`) | 400 |
 * | `ModifiedThinking` | signed thinking blocks of the latest assistant turn are sent back unmodified | 400 |
 * | `ThinkingPrefixChanged` | a signed thinking block follows the same messages as where it was created (needs `reference`) | 400, or dropped with `block_binding: drop_block` (`binding` option: not reported) |
 *
 * That an on-demand request ends on a finished turn and holds user or assistant content is covered by
 * `MissingToolResult`, `EmptyConversation` and `SystemMessageFirst`. `validate` reports only what the API rejects: the
 * API drops what precedes the last compaction block with content, so the rules of the list, its tool pairs and its
 * system messages are judged on that API view, and a compaction block in the middle of a list is legal in an ordinary
 * (threshold-mode) request; `repair` drops what precedes it and reports that as a change (`droppedBeforeCompaction`).
 * Two system messages in a row are reported (`SystemMessageNotAfterTurn`): the rules say a system message follows a
 * user or assistant turn. Server tool results (`advisor_tool_result` and `mcp_tool_result` included) end a turn a
 * system message may follow.
 *
 * Only merely tolerated, never flagged: consecutive same-role messages (merged silently), and thinking blocks in
 * earlier assistant turns (the API strips them from the prompt, so changing or dropping them costs nothing).
 * Server tool blocks (`server_tool_use` and its `*_tool_result`) live in one assistant message and are not client
 * tool pairs.
 *
 * **`repair` or `repairResult`.** `repairResult` is total: a list, or `NothingToSend` (a typed value) when the input
 * holds no user or assistant content at all. `repair` is the same for input known to hold some (a conversation with a
 * user message, a kept tail): it returns the list and throws `NothingToSend` otherwise. No non-throwing `repair`
 * is possible without handing the API `[]` or content nobody wrote, so it keeps that documented throw; use
 * `repairResult` wherever empty input can arrive (the CLI's `repair` command, `Compact`).
 *
 * The rules and the pairing scan live in `internal/validate.ts`, the repair in `internal/repair.ts`; this module is
 * their public face and every name is importable from here.
 *
 * @since 0.1.0
 */
export { isValid, validate, type ValidateOptions, Violation } from "./internal/validate.ts"
export { NothingToSend, repair, type Repaired, type RepairReport, repairResult } from "./internal/repair.ts"
