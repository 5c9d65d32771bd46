/**
 * Concept: the summary message. What replaces a summarized prefix (`summaryMessage`, found again by `summaryText`),
 * the files it read and modified (`filesMessage`, `filesOfMessage`), and the parts a summary's text splits into
 * (`splitSummary`: the body, the manifest of what must survive, the file lists). Pure; no module outside this one and
 * its helper (`internal/summary.ts`) knows the format.
 *
 * @since 0.1.0
 */
// each name's doc comment is on its declaration in `internal/summary.ts`
export {
  DEFAULT_SUMMARY_MAX_TOKENS,
  type FileLists,
  filesMessage,
  filesOfMessage,
  type Manifest,
  type ManifestEntry,
  type ManifestKind,
  type OmittedMessages,
  splitSummary,
  SUMMARY_HEADER,
  summaryMessage,
  type SummaryParts,
  summaryText
} from "./internal/summary.ts"
