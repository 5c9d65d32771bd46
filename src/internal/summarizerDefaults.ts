/**
 * The summarizer contract's defaults: the per-attempt timeout of the summarizers that call a model, the sections the
 * default prompt asks for and the quality gate requires, and the caps on the prompt's unbounded parts.
 *
 * @internal
 */
import * as Duration from "effect/Duration"

/**
 * The default per-attempt timeout of the summarizers that call a model (opening the request and reading the whole
 * reply): 120 seconds. @category constants
 */
export const DEFAULT_SUMMARIZER_TIMEOUT: Duration.Duration = Duration.seconds(120)

/**
 * The sections the default prompt asks for and the quality gate requires (`withQualityGate`), as Markdown headings:
 * decisions, open todos, constraints and rules, pending user asks, exact identifiers.
 * @category prompt
 */
export const SUMMARY_SECTIONS: ReadonlyArray<string> = [
  "Constraints and rules",
  "Decisions",
  "Open todos",
  "Pending user asks",
  "Exact identifiers"
]

/**
 * Caps on the parts of the request that `render` does not bound: the earlier summary and the user's focus. With the
 * transcript's own cap (`RenderOptions.maxChars`, 400,000 by default) the user message stays under ~465,000 chars.
 * @category prompt
 */
export const PROMPT_LIMITS = { previousSummaryChars: 60_000, instructionsChars: 4_000 } as const
