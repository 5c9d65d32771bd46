/**
 * The barrel's `SessionLog` namespace: everything `SessionLog.ts` exports, and the names that moved from it to the
 * store modules, kept under their old names until 0.2.0. They cannot stay in `SessionLog.ts` itself: the stores import
 * it, and `SessionLog.ts` loads no store but the memory one (so `Compact`, `Conversation` and `Simulate` load no
 * `effect/sql`).
 */
import { SessionLog as SessionLogService } from "../SessionLog.ts"
import * as Jsonl from "../SessionStoreJsonl.ts"
import * as Sql from "../SessionStoreSql.ts"

export * from "../SessionLog.ts"

/** @deprecated Use `SessionStoreJsonl.listSessions`. */
export const listSessions: typeof Jsonl.listSessions = Jsonl.listSessions
/** @deprecated Use `SessionStoreJsonl.readJsonl`. */
export const readJsonl: typeof Jsonl.readJsonl = Jsonl.readJsonl
/** @deprecated Use `SessionStoreJsonl.JsonlOptions`. */
export type JsonlOptions = Jsonl.JsonlOptions

/**
 * The session log service (`SessionLog.ts`'s, the same key), with the shorthand layers it had before they moved to
 * the store modules.
 * @category services
 */
export class SessionLog extends SessionLogService {
  /** @deprecated Use `SessionStoreJsonl.layerSessionLog`. */
  static readonly layerJsonl: typeof Jsonl.layerSessionLog = Jsonl.layerSessionLog
  /** @deprecated Use `SessionStoreSql.layerSessionLog`. */
  static readonly layerSql: typeof Sql.layerSessionLog = Sql.layerSessionLog
  /** @deprecated Use `SessionStoreSql.layerSessionLogPg`. */
  static readonly layerPg: typeof Sql.layerSessionLogPg = Sql.layerSessionLogPg
}
