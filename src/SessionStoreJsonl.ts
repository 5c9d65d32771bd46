/**
 * The JSONL file store: one `<sessionId>.jsonl` per session in a directory, one entry line per line (`seq` = line
 * number), written through Effect's `FileSystem`. Files are created with mode 0600 (the directory 0700); appends are
 * whole lines in one write, cut back when a write fails part way; a torn last line (a write that never finished, so
 * was never acknowledged) is reported on read and cut off when a writer opens the session. One writer per session: a
 * `<sessionId>.lock` file holding the writer's pid, taken over when that process is dead. Session ids are checked, so
 * they cannot leave the directory.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Path from "effect/Path"
import type * as PlatformError from "effect/PlatformError"
import * as Predicate from "effect/Predicate"
import process from "node:process"
import { SessionLogError } from "./internal/sessionLogError.ts"
import { openSession } from "./internal/sessionOpen.ts"
import { idOfLine, tailOfBytes } from "./internal/sessionTail.ts"
import type { Loaded, LoadIssue, LoadOptions } from "./SessionEntry.ts"
import { SessionLog, type SessionLogOptions } from "./SessionLog.ts"
import type { StoredEntry } from "./SessionEntry.ts"
import {
  type AppendResult,
  isSessionId,
  notFound,
  SessionStore,
  type SessionStoreShape,
  spanAttributes,
  validateSessionId
} from "./SessionStore.ts"

const errnoCode = (error: PlatformError.PlatformError): string | undefined => {
  const reason = error.reason
  const cause: unknown = reason.cause
  if (Predicate.hasProperty(cause, "code") && Predicate.isString(cause.code)) return cause.code
  if (reason._tag === "Busy") return "EBUSY"
  if (reason._tag === "WouldBlock") return "EAGAIN"
  if (reason._tag === "PermissionDenied") return "EACCES"
  return undefined
}

const ioError = (sessionId: string, what: string) => (error: PlatformError.PlatformError): SessionLogError => {
  const code = errnoCode(error)
  return new SessionLogError({
    reason: "Io",
    sessionId,
    detail: `${what}: ${error.message}`,
    ...(code === undefined ? {} : { code }),
    cause: error
  })
}

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return Predicate.hasProperty(e, "code") && e.code === "EPERM"
  }
}

/**
 * Takes `<id>.lock`; takes over a lock whose pid is dead; released when the scope closes. The lock is created with
 * its pid already in it (written to a private temporary file, then hard-linked into place, which fails if the lock
 * exists), so another process never sees an empty lock and mistakes a live holder for a dead one.
 */
const acquireLock = (fs: FileSystem.FileSystem, lockPath: string, sessionId: string) => {
  const io = ioError(sessionId, `lock ${lockPath}`)
  const staging = `${lockPath}.${process.pid}.${Math.random().toString(36).slice(2)}`
  const create = fs.writeFileString(staging, `${process.pid}\n`, { flag: "wx", mode: 0o600 }).pipe(
    Effect.andThen(fs.link(staging, lockPath)),
    Effect.ensuring(fs.remove(staging).pipe(Effect.ignore))
  )
  const take: Effect.Effect<void, SessionLogError> = create.pipe(
    Effect.catchTag("PlatformError", (error) => {
      if (error.reason._tag !== "AlreadyExists") return Effect.fail(io(error))
      return Effect.gen(function* () {
        const text = yield* fs.readFileString(lockPath).pipe(Effect.orElseSucceed(() => ""))
        const pid = Number.parseInt(text.trim(), 10)
        if (Number.isInteger(pid) && pid > 0 && isAlive(pid)) {
          return yield* new SessionLogError({
            reason: "Locked",
            sessionId,
            pid,
            detail: `process ${pid} holds ${lockPath}; close that session first`
          })
        }
        // stale: the holder died without releasing (or wrote nothing). Take over.
        yield* Effect.logWarning(`effect-compaction: taking over stale lock ${lockPath} (pid ${text.trim() || "?"})`)
        yield* fs.remove(lockPath).pipe(Effect.catchTag("PlatformError", () => Effect.void))
        return yield* create.pipe(
          Effect.mapError((e) =>
            e.reason._tag === "AlreadyExists"
              ? new SessionLogError({ reason: "Locked", sessionId, detail: `another process took ${lockPath} first` })
              : io(e)
          )
        )
      })
    })
  )
  return Effect.acquireRelease(take, () => fs.remove(lockPath).pipe(Effect.ignore))
}

const NEWLINE = 0x0a
const decoder = new TextDecoder()
const encoder = new TextEncoder()

/** The complete lines of a file's bytes (each one entry, `seq` = line number) and its torn tail, if any. */
const splitLines = (bytes: Uint8Array) => {
  const completeBytes = bytes.lastIndexOf(NEWLINE) + 1
  const lines = decoder.decode(bytes.subarray(0, completeBytes)).split("\n")
  lines.pop()
  const issues: Array<LoadIssue> = completeBytes < bytes.length
    ? [{ _tag: "TornTail", line: lines.length + 1, offset: completeBytes, bytes: bytes.length - completeBytes }]
    : []
  return { lines, completeBytes, issues }
}

interface Writer {
  readonly handle: FileSystem.File
  /** Bytes of complete lines in the file. */
  size: number
  /** Lines in the file: the last `seq`. */
  count: number
  /** entry id → seq, for the idempotent retry. */
  readonly ids: Map<string, number>
  /** A failed write may have left part of a line: cut back to `size` before the next write. */
  dirty: boolean
}

const makeJsonlStore = Effect.fnUntraced(function* (directory: string) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const name = `jsonl:${directory}`
  const writers = new Map<string, Writer>()
  const files = (sessionId: string) =>
    Effect.map(validateSessionId(sessionId), () => ({
      file: path.join(directory, `${sessionId}.jsonl`),
      lock: path.join(directory, `${sessionId}.lock`)
    }))
  const readBytes = (sessionId: string, file: string) =>
    fs.readFile(file).pipe(
      Effect.catchTag("PlatformError", (e) =>
        Effect.fail(e.reason._tag === "NotFound" ? notFound(sessionId, name) : ioError(sessionId, "read")(e)))
    )

  const acquire = (sessionId: string) =>
    Effect.gen(function* () {
      const { file, lock } = yield* files(sessionId)
      const io = ioError(sessionId, `append ${file}`)
      yield* fs.makeDirectory(directory, { recursive: true, mode: 0o700 }).pipe(
        Effect.mapError(ioError(sessionId, "create directory"))
      )
      yield* acquireLock(fs, lock, sessionId)
      const bytes = yield* readBytes(sessionId, file).pipe(
        Effect.catchIf((e) => e.reason === "NotFound", () => Effect.succeed(new Uint8Array(0)))
      )
      const { completeBytes, issues, lines } = splitLines(bytes)
      if (completeBytes < bytes.length) {
        // a torn write was never acknowledged: cut it off so the next line does not glue onto it
        yield* Effect.logWarning(
          `effect-compaction: ${file}: cut a torn last line (${bytes.length - completeBytes} bytes)`
        )
        yield* fs.truncate(file, completeBytes).pipe(Effect.mapError(io))
      }
      const handle = yield* fs.open(file, { flag: "a", mode: 0o600 }).pipe(Effect.mapError(io))
      const ids = new Map<string, number>()
      lines.forEach((line, i) => {
        const id = idOfLine(line)
        if (id !== undefined) ids.set(id, i + 1)
      })
      writers.set(sessionId, { handle, size: completeBytes, count: lines.length, ids, dirty: false })
      yield* Effect.addFinalizer(() => Effect.sync(() => writers.delete(sessionId)))
      return issues
    }).pipe(Effect.withSpan("SessionStore.acquire", { attributes: spanAttributes(name, sessionId) }))

  const read = (sessionId: string, afterSeq: number) =>
    Effect.gen(function* () {
      const { file } = yield* files(sessionId)
      const { issues, lines } = splitLines(yield* readBytes(sessionId, file))
      const entries: Array<StoredEntry> = []
      for (let i = afterSeq; i < lines.length; i++) entries.push({ seq: i + 1, line: lines[i]! })
      yield* Effect.annotateCurrentSpan("session.entries", entries.length)
      return { entries, issues }
    }).pipe(Effect.withSpan("SessionStore.read", { attributes: spanAttributes(name, sessionId, { afterSeq }) }))

  const readTail = (sessionId: string) =>
    Effect.gen(function* () {
      const { file } = yield* files(sessionId)
      const bytes = yield* readBytes(sessionId, file)
      const completeBytes = bytes.lastIndexOf(NEWLINE) + 1
      const entries = tailOfBytes(bytes)
      yield* Effect.annotateCurrentSpan("session.entries", entries.length)
      const issues: ReadonlyArray<LoadIssue> = completeBytes < bytes.length
        ? [{
          _tag: "TornTail",
          line: (entries.at(-1)?.seq ?? 0) + 1,
          offset: completeBytes,
          bytes: bytes.length - completeBytes
        }]
        : []
      return { entries, issues }
    }).pipe(Effect.withSpan("SessionStore.readTail", { attributes: spanAttributes(name, sessionId) }))

  const appendWith = (
    sessionId: string,
    writer: Writer,
    expectedSeq: number,
    entries: ReadonlyArray<{ readonly entryId: string; readonly line: string }>,
    durable: boolean
  ) =>
    Effect.gen(function* () {
      const written = entries.map((e) => writer.ids.get(e.entryId)).filter((s) => s !== undefined)
      if (written.length > 0) return { _tag: "AlreadyWritten", seq: Math.max(...written) } satisfies AppendResult
      if (expectedSeq !== writer.count) return { _tag: "Conflict", seq: writer.count } satisfies AppendResult
      const io = ioError(sessionId, `append ${sessionId}.jsonl`)
      const rollback = Effect.suspend(() => writer.handle.truncate(writer.size)).pipe(
        Effect.tap(() => Effect.sync(() => (writer.dirty = false)))
      )
      if (writer.dirty) yield* rollback.pipe(Effect.mapError(io))
      const chunk = encoder.encode(entries.map((e) => `${e.line}\n`).join(""))
      yield* writer.handle.writeAll(chunk).pipe(
        Effect.tapError(() => Effect.sync(() => (writer.dirty = true)).pipe(Effect.andThen(Effect.ignore(rollback)))),
        Effect.mapError(io)
      )
      writer.size += chunk.length
      entries.forEach((e, i) => writer.ids.set(e.entryId, writer.count + i + 1))
      writer.count += entries.length
      if (durable) yield* writer.handle.sync.pipe(Effect.mapError(io))
      return { _tag: "Appended", seq: writer.count } satisfies AppendResult
    })

  const store: SessionStoreShape = {
    name,
    acquire,
    read,
    readTail,
    append: (sessionId, expectedSeq, entries, options = {}) => {
      const durable = options.durable === true
      const writer = writers.get(sessionId)
      const run: Effect.Effect<AppendResult, SessionLogError> = writer !== undefined
        ? appendWith(sessionId, writer, expectedSeq, entries, durable)
        : Effect.scoped(Effect.gen(function* () {
          // not opened for writing here: the session must exist; take its lock for this one append
          const { file } = yield* files(sessionId)
          yield* fs.access(file).pipe(Effect.mapError(() => notFound(sessionId, name)))
          yield* acquire(sessionId)
          return yield* appendWith(sessionId, writers.get(sessionId)!, expectedSeq, entries, durable)
        }))
      return run.pipe(Effect.withSpan("SessionStore.append", {
        attributes: spanAttributes(name, sessionId, { expectedSeq, "session.entries": entries.length })
      }))
    },
    list: fs.readDirectory(directory).pipe(
      Effect.map((names) =>
        names.filter((n) => n.endsWith(".jsonl")).map((n) => n.slice(0, -".jsonl".length)).filter(isSessionId)
          .sort()
      ),
      Effect.catchTag(
        "PlatformError",
        (e) =>
          e.reason._tag === "NotFound"
            ? Effect.succeed([] as ReadonlyArray<string>)
            : Effect.fail(ioError(directory, "list sessions")(e))
      )
    )
  }
  return store
})

/** The JSONL file store. @category services */
export const SessionStoreJsonl: {
  /** The store over `directory` (created with mode 0700 when a session is first opened for writing). */
  readonly layer: (
    options: { readonly directory: string }
  ) => Layer.Layer<SessionStore, never, FileSystem.FileSystem | Path.Path>
} = {
  layer: (options) => Layer.effect(SessionStore, makeJsonlStore(options.directory))
}

/** Options of `layerSessionLog`: the log's and the directory. @category models */
export interface JsonlOptions extends SessionLogOptions {
  /** The directory holding `<sessionId>.jsonl` (created with mode 0700 if missing). */
  readonly directory: string
}

/**
 * The session log in `<directory>/<sessionId>.jsonl`, created with mode 0600: `SessionLog.layer` over this store, the
 * embedded default. Opening takes the session's lock (`Locked` if a live process holds it) and cuts off a torn last
 * line.
 * @category layers
 */
export const layerSessionLog = (
  options: JsonlOptions
): Layer.Layer<SessionLog, SessionLogError, FileSystem.FileSystem | Path.Path> =>
  SessionLog.layer(options).pipe(Layer.provide(SessionStoreJsonl.layer({ directory: options.directory })))

/**
 * The ids of the sessions stored in a directory (every `<id>.jsonl` with a valid id), sorted. A missing directory
 * has none.
 * @category sessions
 */
export const listSessions = (
  directory: string
): Effect.Effect<ReadonlyArray<string>, SessionLogError, FileSystem.FileSystem | Path.Path> =>
  Effect.flatMap(makeJsonlStore(directory), (store) => store.list)

/**
 * Reads a stored session without opening it for writing: no lock, nothing changed on disk (a torn last line is only
 * reported). The same checks as `SessionLog.load`; `NotFound` when there is no such session.
 * @category sessions
 */
export const readJsonl = (
  options: { readonly directory: string; readonly sessionId: string } & LoadOptions
): Effect.Effect<Loaded, SessionLogError, FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function* () {
    const store = yield* makeJsonlStore(options.directory)
    return (yield* openSession(store, options.sessionId, options)).loaded
  }).pipe(
    Effect.mapError((e) => e.sessionId === undefined ? new SessionLogError({ ...e, sessionId: options.sessionId }) : e)
  )
