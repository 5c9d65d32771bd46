/**
 * Concept: a session's stored entries. Their schema (`Entry`, versioned by `CURRENT_VERSION`), the line each one is
 * stored as (`encodeEntry`, `decodeLine`, with a checksum), and the load that folds stored entries into the view they
 * describe (`loadStored`, reporting damage as `LoadIssue`s). No storage and no service here: every store moves these
 * lines, and `SessionLog` folds them; the log's error is `SessionLog.SessionLogError`.
 *
 * @since 0.1.0
 */
// each name's doc comment is on its declaration in `internal/sessionEntry.ts`
export {
  CURRENT_VERSION,
  decodeLine,
  encodeEntry,
  Entry,
  type Loaded,
  type LoadIssue,
  type LoadOptions,
  loadStored,
  type RemovedItem,
  type StoredEntry
} from "./internal/sessionEntry.ts"
