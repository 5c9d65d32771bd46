/**
 * Concept: the JSONL file store.
 *
 * The JSONL file store: one `<sessionId>.jsonl` per session in a directory, one entry line per line (`seq` = line
 * number), written through Effect's `FileSystem`. Files are created with mode 0600 (the directory 0700); appends are
 * whole lines in one write, cut back when a write fails part way: on the platform's own file, one synchronous write on
 * its descriptor (no round trip through the thread pool); deferred appends (`AppendOptions.defer`) are queued and
 * written together a few milliseconds later, in order, through `FileSystem`; a torn tail (a write that never finished,
 * so was never acknowledged: a torn last line, and the whole lines before it of an append of several entries whose
 * later lines are missing, which each entry but the last of such an append tells by its `more`) is reported and left
 * out on read, and cut off when a writer opens the session, so an append lands whole or not at all. One writer per
 * session: a `<sessionId>.lock` file holding the writer's pid, taken over when that process is dead. Session ids are
 * checked, so they cannot leave the directory. `<sessionId>.tail` is the tail index the writer leaves (where the log's
 * tail starts: its `seq`, byte offset and entry id), so a tail read and the writer's open read the file from there on;
 * it is checked against the file, and a missing, corrupt or stale one (such as one naming a tail whose compaction line
 * the file, cut back since, no longer holds) means the whole file is read (and, by a writer, the index written again).
 * A writer opened from the index knows the entry ids from the tail on (and every one it appends): a retried append of
 * entries a later compaction summarized is recognised by a single append's open, which reads every line.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Path from "effect/Path"
import * as PlatformError from "effect/PlatformError"
import * as Predicate from "effect/Predicate"
import type * as Scope from "effect/Scope"
import * as Semaphore from "effect/Semaphore"
import { Buffer, isAscii } from "node:buffer"
import { fstatSync, writeSync } from "node:fs"
import process from "node:process"
import { DEFAULT_RETRY_DEADLINE, retryTransient, startBudget } from "./internal/outage.ts"
import { SessionLogError, withFields } from "./internal/sessionLogError.ts"
import { openSession } from "./internal/sessionOpen.ts"
import {
  idOfLine,
  isBoundaryLine,
  keptAnchors,
  PREFIX_CHARS,
  type Region,
  regionLines,
  regionOf,
  unfinishedFrom
} from "./internal/sessionTail.ts"
import { moreOfLine } from "./internal/sessionEntry.ts"
import type { Loaded, LoadIssue, LoadOptions } from "./SessionEntry.ts"
import { SessionLog, type SessionLogOptions } from "./SessionLog.ts"
import type { StoredEntry } from "./SessionEntry.ts"
import {
  type AppendResult,
  type NewEntry,
  notFound,
  SessionStore,
  type SessionStoreShape,
  validateSessionId
} from "./SessionStore.ts"
import { isSessionId, spanAttributes } from "./internal/storeSupport.ts"

const errnoCode = (error: PlatformError.PlatformError): string | undefined => {
  const reason = error.reason
  const cause: unknown = reason.cause
  if (Predicate.hasProperty(cause, "code") && Predicate.isString(cause.code)) return cause.code
  if (reason._tag === "Busy") return "EBUSY"
  if (reason._tag === "WouldBlock") return "EAGAIN"
  if (reason._tag === "PermissionDenied") return "EACCES"
  return undefined
}

/** What the errno codes a session file's reads and writes meet mean, in plain words. */
const PLAIN_CAUSES: Readonly<Record<string, string>> = {
  ENOSPC: "no space left on the device (the disk is full); free some space and try again",
  EDQUOT: "the disk quota is exceeded; free some space or raise the quota and try again",
  EFBIG: "the file is larger than its file system allows",
  EROFS: "the file system is read-only",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  EIO: "an input/output error (the disk or its driver failed)",
  EMFILE: "this process has too many open files",
  ENFILE: "the system has too many open files",
  ENOENT: "no such file or directory",
  ENOTDIR: "a part of the path is not a directory",
  EISDIR: "the path is a directory",
  EAGAIN: "the resource is temporarily unavailable",
  EBUSY: "the file is busy",
  EINTR: "the call was interrupted",
  EBADF: "the file is no longer open"
}

/**
 * A failed file operation as a `SessionLogError`: `what` names the operation and its file, the detail says the cause
 * in plain words (`PLAIN_CAUSES`, else the system's own message) and `code` is its errno code.
 */
const ioError = (sessionId: string, what: string) => (error: PlatformError.PlatformError): SessionLogError => {
  const code = errnoCode(error)
  const cause: unknown = error.reason.cause
  const system = cause instanceof Error && cause.message !== "" ? cause.message : undefined
  const plain = (code === undefined ? undefined : PLAIN_CAUSES[code]) ?? system ?? error.message
  return new SessionLogError({
    reason: "Io",
    sessionId,
    detail: `${what}: ${plain}`,
    ...(code === undefined ? {} : { code }),
    cause: error
  })
}

/** The reasons Node's `FileSystem` gives the errno codes it names (any other is `Unknown`). */
const PLATFORM_REASONS: Readonly<Record<string, PlatformError.SystemErrorTag>> = {
  ENOENT: "NotFound",
  EACCES: "PermissionDenied",
  EPERM: "PermissionDenied",
  EEXIST: "AlreadyExists",
  EISDIR: "BadResource",
  ENOTDIR: "BadResource",
  ELOOP: "BadResource",
  EBUSY: "Busy"
}

/** The `PlatformError` the platform's `writeAll` gives for a failed `write` on `fd`. */
const writeError = (fd: number, cause: unknown): PlatformError.PlatformError => {
  const code = Predicate.hasProperty(cause, "code") && Predicate.isString(cause.code) ? cause.code : undefined
  return PlatformError.systemError({
    _tag: (code === undefined ? undefined : PLATFORM_REASONS[code]) ?? "Unknown",
    module: "FileSystem",
    method: "writeAll",
    pathOrDescriptor: fd,
    syscall: "write",
    cause
  })
}

const writeZero = (fd: number): PlatformError.PlatformError =>
  PlatformError.systemError({
    _tag: "WriteZero",
    module: "FileSystem",
    method: "writeAll",
    pathOrDescriptor: fd,
    description: "write returned 0 bytes written"
  })

/**
 * Writes all of `chunk` (`bytes` long, in UTF-8 when it is text) on the descriptor `fd` (a file open for appending)
 * synchronously: one `write` of the chunk itself (no buffer allocated for a text), then, when the system wrote only
 * part of it, as many `write`s of the rest as it needs; what a failure wrote stays (as with `File.writeAll`). The
 * failure is the `PlatformError` the platform's `writeAll` gives for it.
 */
const writeAllSync = (
  fd: number,
  chunk: string | Uint8Array,
  bytes: number
): PlatformError.PlatformError | undefined => {
  try {
    let written = typeof chunk === "string" ? writeSync(fd, chunk) : writeSync(fd, chunk) // one overload each
    let at = written
    if (at === bytes) return undefined
    const all = typeof chunk === "string" ? Buffer.from(chunk, "utf8") : chunk
    while (written !== 0 && at < bytes) {
      written = writeSync(fd, all, at, bytes - at)
      at += written
    }
    return at < bytes ? writeZero(fd) : undefined
  } catch (cause) {
    return writeError(fd, cause)
  }
}

/**
 * The OS descriptor of `handle` when an append may write on it directly (`writeAllSync`, no round trip through the
 * thread pool): the platform's own file (Node's `FileSystem`, under Deno and Bun too), whose `fd` is the open file
 * (the device and inode of its `stat`). A file whose `writeAll` is not its class's (a `FileSystem` wrapping its
 * files' writes, to count or fail them) or that has no descriptor is written through `writeAll`.
 */
const descriptorOf = (handle: FileSystem.File): Effect.Effect<number | undefined> => {
  const fd: unknown = Predicate.hasProperty(handle, "fd") ? handle.fd : undefined
  const prototype: unknown = Object.getPrototypeOf(handle)
  if (
    typeof fd !== "number" || !Predicate.hasProperty(prototype, "writeAll") || prototype.writeAll !== handle.writeAll
  ) return Effect.succeed(undefined)
  return handle.stat.pipe(
    Effect.map((info) => {
      try {
        const os = fstatSync(fd, { bigint: true })
        const same = BigInt.asUintN(64, os.dev) === info.dev &&
          Option.getOrUndefined(info.ino) === BigInt.asUintN(64, os.ino)
        return same ? fd : undefined
      } catch {
        return undefined
      }
    }),
    Effect.orElseSucceed(() => undefined)
  )
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
 * its pid (and a token of this acquisition) already in it (written to a private temporary file, then hard-linked into place, which fails if the lock
 * exists), so another process never sees an empty lock and mistakes a live holder for a dead one.
 *
 * A stale lock is taken over by moving aside the very file judged stale (a rename is atomic: of several openers that
 * judged it so, one moves it), then creating a new one. An opener that finds it moved another file (an opener that
 * took over first made a fresh lock there) puts that file back and is refused with `Locked`. The release removes the
 * lock only while it is still the file this writer made.
 */
const acquireLock = (fs: FileSystem.FileSystem, lockPath: string, sessionId: string) => {
  const io = ioError(sessionId, `lock ${lockPath}`)
  const token = Math.random().toString(36).slice(2)
  const staging = `${lockPath}.${process.pid}.${token}`
  // the pid, then a token of this acquisition: two locks of one process differ where the platform has no inodes
  const create = fs.writeFileString(staging, `${process.pid}\n${token}\n`, { flag: "wx", mode: 0o600 }).pipe(
    Effect.andThen(fs.link(staging, lockPath)),
    Effect.ensuring(fs.remove(staging).pipe(Effect.ignore))
  )
  const lockedBy = (detail: string) => new SessionLogError({ reason: "Locked", sessionId, detail })
  const take: Effect.Effect<void, SessionLogError> = create.pipe(
    Effect.catchTag("PlatformError", (error) => {
      if (error.reason._tag !== "AlreadyExists") return Effect.fail(io(error))
      return Effect.gen(function* () {
        const judged = yield* identityOf(fs, lockPath)
        const pid = Number.parseInt(judged?.text ?? "", 10)
        if (Number.isInteger(pid) && pid > 0 && isAlive(pid)) {
          return yield* new SessionLogError({
            reason: "Locked",
            sessionId,
            pid,
            detail: `process ${pid} holds ${lockPath}; close that session first`
          })
        }
        // stale: the holder died without releasing (or wrote nothing). Take over.
        yield* Effect.logWarning(
          `effect-compaction: taking over stale lock ${lockPath} (pid ${Number.isInteger(pid) ? pid : "?"})`
        )
        if (judged !== undefined) {
          const aside = `${lockPath}.stale.${process.pid}.${Math.random().toString(36).slice(2)}`
          const moved = yield* fs.rename(lockPath, aside).pipe(
            Effect.as(true),
            Effect.catchTag("PlatformError", () => Effect.succeed(false))
          )
          if (moved) {
            const found = yield* identityOf(fs, aside)
            if (found === undefined || !sameLock(found, judged)) {
              // another opener's fresh lock: back in place (unless yet another is there), and this opener is refused
              yield* fs.link(aside, lockPath).pipe(Effect.ignore)
              yield* fs.remove(aside).pipe(Effect.ignore)
              return yield* lockedBy(`another process took ${lockPath} first`)
            }
            yield* fs.remove(aside).pipe(Effect.ignore)
          }
        }
        return yield* create.pipe(
          Effect.mapError((e) =>
            e.reason._tag === "AlreadyExists" ? lockedBy(`another process took ${lockPath} first`) : io(e)
          )
        )
      })
    })
  )
  return Effect.acquireRelease(
    Effect.andThen(take, identityOf(fs, lockPath)),
    (own) =>
      Effect.flatMap(
        identityOf(fs, lockPath),
        (now) =>
          own !== undefined && now !== undefined && sameLock(now, own)
            ? fs.remove(lockPath).pipe(Effect.ignore)
            : Effect.void
      )
  )
}

/** What tells one lock file from another: its inode where the platform has one, and its text (the holder's pid). */
interface LockIdentity {
  readonly inode: bigint | undefined
  readonly text: string
}

/** The identity of the lock file at `path`, or `undefined` when there is none (or it cannot be read). */
const identityOf = (fs: FileSystem.FileSystem, path: string): Effect.Effect<LockIdentity | undefined> =>
  Effect.all([fs.stat(path), fs.readFileString(path)]).pipe(
    Effect.map(([info, text]): LockIdentity => ({ inode: Option.getOrUndefined(info.ino), text })),
    Effect.orElseSucceed(() => undefined)
  )

/** Whether two identities are one lock file: the same inode (where both have one) and the same text. */
const sameLock = (a: LockIdentity, b: LockIdentity): boolean =>
  a.text === b.text && (a.inode === undefined || b.inode === undefined || a.inode === b.inode)

const NEWLINE = 0x0a
const decoder = new TextDecoder()

const latin1 = (bytes: Uint8Array): string =>
  Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("latin1")

/**
 * The UTF-8 text of a file's bytes, exactly as `TextDecoder` gives it, faster: each run of ASCII lines (JSON lines
 * mostly are: `JSON.stringify` writes any other character as itself, so only some lines hold one) is copied as
 * one-byte text, and only the runs of other lines go through the UTF-8 decoder. On Node 22 that decoder makes ~300 MB/s
 * (its V8 validates without SIMD) against ~20 GB/s for the copy; Deno's is fast either way.
 */
const textOf = (bytes: Uint8Array): string => {
  if (isAscii(bytes)) return latin1(bytes)
  let text = ""
  for (let at = 0; at < bytes.length;) {
    let end = at
    let ascii: boolean | undefined
    while (end < bytes.length) {
      const newline = bytes.indexOf(NEWLINE, end)
      const next = newline === -1 ? bytes.length : newline + 1
      const lineAscii = isAscii(bytes.subarray(end, next))
      if (ascii !== undefined && lineAscii !== ascii) break
      ascii = lineAscii
      end = next
    }
    const run = bytes.subarray(at, end)
    text += ascii === true ? latin1(run) : decoder.decode(run)
    at = end
  }
  return text
}

/**
 * The lines of a file's bytes that end whole appends (each one entry, `seq` = line number), and its torn tail, if any:
 * a torn last line, and the whole lines of an unfinished last append (`unfinishedFrom`) before it.
 */
const splitLines = (bytes: Uint8Array) => {
  const lineBytes = bytes.lastIndexOf(NEWLINE) + 1
  const lines = textOf(bytes.subarray(0, lineBytes)).split("\n")
  lines.pop()
  const kept = unfinishedFrom(lines.length, (seq) => moreOfLine(lines[seq - 1]!)) - 1
  let completeBytes = lineBytes
  for (let i = lines.length - 1; i >= kept; i--) completeBytes -= Buffer.byteLength(lines[i]!, "utf8") + 1
  lines.length = kept
  const issues: Array<LoadIssue> = completeBytes < bytes.length
    ? [{ _tag: "TornTail", line: lines.length + 1, offset: completeBytes, bytes: bytes.length - completeBytes }]
    : []
  return { lines, completeBytes, issues }
}

/**
 * `<sessionId>.tail`, the tail index: where the log's tail starts (`seq`, its byte `offset`, the `id` of the entry
 * there), so an open reads the file from there on. A hint, checked against the file before it is used: the byte
 * before `offset` must end a line, the line at `offset` must start with entry `id`, and the lines from there on must
 * hold the compaction boundary that starts the tail there (`tailStart` finds it walking back from the end); otherwise
 * (missing, corrupt, another file, or a log cut back before that boundary: sync "never" and a power loss, or an older
 * copy of the log beside a newer index) the whole file is read. Written by the writer (after a compaction moves the
 * tail, and when an open had to read the whole file), to a private temporary file renamed into place; an index that
 * did not match is rewritten from the file (or removed, when the file has no tail) by the writer's open.
 */
interface TailIndex {
  readonly v: 1
  readonly seq: number
  readonly offset: number
  readonly id: string
}

const parseIndex = (text: string): TailIndex | undefined => {
  try {
    const value: unknown = JSON.parse(text)
    if (
      Predicate.hasProperty(value, "v") && value.v === 1 && Predicate.hasProperty(value, "seq") &&
      Number.isSafeInteger(value.seq) && (value.seq as number) > 1 && Predicate.hasProperty(value, "offset") &&
      Number.isSafeInteger(value.offset) && (value.offset as number) > 0 && Predicate.hasProperty(value, "id") &&
      Predicate.isString(value.id)
    ) return { v: 1, seq: value.seq as number, offset: value.offset as number, id: value.id }
  } catch {
    // not JSON: no index
  }
  return undefined
}

/** The file read from a line on: its bytes from byte `base` to the end, their lines and tail (`Region`). */
interface Scanned {
  readonly bytes: Uint8Array
  readonly base: number
  readonly region: Region
}

/**
 * The torn tail of a scan (a torn last line, the lines of an unfinished append before it), if any, as a load issue
 * (its first line's number and byte offset in the whole file).
 */
const tornTail = (scanned: Scanned): ReadonlyArray<LoadIssue> => {
  const { base, bytes, region } = scanned
  return region.completeBytes < bytes.length
    ? [{
      _tag: "TornTail",
      line: region.first + region.starts.length,
      offset: base + region.completeBytes,
      bytes: bytes.length - region.completeBytes
    }]
    : []
}

interface Writer {
  /** The session's file, for messages. */
  readonly file: string
  readonly handle: FileSystem.File
  /** The handle's OS descriptor, when lines are written on it synchronously (`descriptorOf`). */
  readonly fd: number | undefined
  /** Bytes of the complete lines the writer acknowledged (the file's, and then its `queued` lines'). */
  size: number
  /** Bytes of complete lines in the file (`size` less what is queued). */
  written: number
  /** Deferred appends' lines (each append's text): acknowledged, not yet written, in order (`AppendOptions.defer`). */
  queued: Array<string>
  queuedBytes: number
  queuedLines: number
  /** A write of the queued lines is scheduled. */
  scheduled: boolean
  /**
   * Why a deferred write failed: acknowledged lines are not in the file, so every later append and read of the
   * writer fails with it (the session must be reopened).
   */
  broken: SessionLogError | undefined
  /** One write at a time, so lines reach the file in the order they were acknowledged. */
  readonly writing: Semaphore.Semaphore
  /**
   * How many writes hold or wait for `writing` (`exclusive`): with none, and nothing queued, an append writes on `fd`
   * at once, without taking the permit (its write starts and ends before anything else runs).
   */
  pending: number
  /** The writer's scope: a scheduled write runs in it, and closing it writes what is queued. */
  readonly scope: Scope.Scope
  /** Lines acknowledged (the file's, then the queued ones): the last `seq`. */
  count: number
  /**
   * entry id → seq, for the idempotent retry, of the lines from `first` on: the writer's state is O(1) per session
   * (`forgetOld`: the lines of its tail, at most the last `WRITER_WINDOW`), not its history; a retried append is at
   * the file's end.
   */
  readonly ids: Map<string, number>
  /** A failed write may have left part of a line: cut back to `written` before the next write. */
  dirty: boolean
  /** The `seq` of the first line the writer knows (`offsets[0]`, `lineIds[0]`): the tail's start, or 1. */
  first: number
  /** The byte offset and entry id of every line from `first` on. */
  readonly offsets: Array<number>
  readonly lineIds: Array<string | undefined>
  /** Where the tail starts, and the last boundary line (0: none known). */
  tail: number
  lastBoundary: number
  /** What the open read (its complete lines), for the tail read that follows it; dropped when it is used or stale. */
  opened: Scanned | undefined
}

/** How many of its last lines a writer keeps the ids and offsets of (beyond its tail). */
const WRITER_WINDOW = 4096

/**
 * How long a deferred append's line waits for others to share its write (`AppendOptions.defer`): the longest a
 * process crash can take acknowledged appends with it.
 */
const DEFER_MILLIS = 5

/** How many bytes of deferred lines may wait: an append that reaches it writes them at once. */
const DEFER_MAX_BYTES = 1 << 20

/**
 * The longest chunk an append that is not deferred writes on the file's descriptor directly (`Writer.fd`), holding
 * the event loop for it (a line of a few hundred KB is written to the page cache in tens of microseconds, faster
 * than a round trip through the thread pool); a longer one is written through `writeAll`.
 */
const DIRECT_MAX_BYTES = 1 << 20

const makeJsonlStore = Effect.fnUntraced(function* (directory: string) {
  const fs = yield* FileSystem.FileSystem
  const path = yield* Path.Path
  const name = `jsonl:${directory}`
  const writers = new Map<string, Writer>()
  const files = (sessionId: string) =>
    Effect.map(validateSessionId(sessionId), () => ({
      file: path.join(directory, `${sessionId}.jsonl`),
      lock: path.join(directory, `${sessionId}.lock`),
      index: path.join(directory, `${sessionId}.tail`)
    }))
  const readBytes = (sessionId: string, file: string) =>
    fs.readFile(file).pipe(
      Effect.catchTag("PlatformError", (e) =>
        Effect.fail(e.reason._tag === "NotFound" ? notFound(sessionId, name) : ioError(sessionId, `read ${file}`)(e)))
    )

  /**
   * The file from the tail index's line on, when the index checks out against it (`TailIndex`); else why it does
   * not (`mismatch`), or nothing when there is no index to read (or the file cannot be read: the full read says why).
   */
  const readFromIndex = (
    file: string,
    indexFile: string
  ): Effect.Effect<{ readonly scanned?: Scanned; readonly mismatch?: string }> =>
    Effect.gen(function* () {
      const text = yield* fs.readFileString(indexFile)
      const index = parseIndex(text)
      if (index === undefined) return { mismatch: "it is not a tail index" }
      return yield* Effect.scoped(Effect.gen(function* () {
        const handle = yield* fs.open(file, { flag: "r" })
        const size = Number((yield* handle.stat).size)
        if (index.offset >= size) {
          return { mismatch: `the log ends at byte ${size}, the index names byte ${index.offset}` }
        }
        // from the newline before the indexed line, which must be there
        const bytes = new Uint8Array(size - index.offset + 1)
        let read = 0
        while (read < bytes.length) {
          const n = yield* handle.read(bytes.subarray(read), { position: BigInt(index.offset - 1 + read) })
          if (n === 0) break
          read += n
        }
        if (read < 2 || bytes[0] !== NEWLINE) return { mismatch: `no line starts at byte ${index.offset}` }
        const tail = bytes.subarray(1, read)
        const region = regionOf(tail, index.seq)
        if (region.starts.length === 0) {
          return { mismatch: `the line at byte ${index.offset} is torn, or in an append whose later lines are missing` }
        }
        if (idOfLine(region.prefix(0)) !== index.id) {
          return { mismatch: `the line at byte ${index.offset} is not entry ${index.id}` }
        }
        // the walk back from the end reads only these lines: the boundary the index stands for must be among them
        if (region.from === 1) {
          return { mismatch: `no compaction boundary after line ${index.seq} starts the tail there` }
        }
        return { scanned: { bytes: tail, base: index.offset, region } satisfies Scanned }
      }))
    }).pipe(Effect.catchTag("PlatformError", () => Effect.succeed({})))

  /**
   * The file from its tail index's line on, or all of it when there is no usable index (`stale`: the index did not
   * match the file, logged as a warning).
   */
  const scan = (sessionId: string, useIndex: boolean) =>
    Effect.gen(function* () {
      const { file, index } = yield* files(sessionId)
      const fromIndex = useIndex ? yield* readFromIndex(file, index) : {}
      if (fromIndex.scanned !== undefined) return { scanned: fromIndex.scanned, indexed: true, stale: false }
      if (fromIndex.mismatch !== undefined) {
        yield* Effect.logWarning(
          `effect-compaction: ${file}: the tail index ${index} does not match the log (${fromIndex.mismatch}); ` +
            `reading the whole file`
        )
      }
      const bytes = yield* readBytes(sessionId, file)
      return {
        scanned: { bytes, base: 0, region: regionOf(bytes) } satisfies Scanned,
        indexed: false,
        stale: fromIndex.mismatch !== undefined
      }
    })

  /** Writes the writer's tail index (a hint: a failure is logged, and the next open reads the whole file). */
  const writeIndex = (sessionId: string, writer: Writer) =>
    Effect.gen(function* () {
      const { index } = yield* files(sessionId)
      const at = writer.tail - writer.first
      const id = writer.lineIds[at]
      if (writer.tail <= 1 || id === undefined) return
      const content: TailIndex = { v: 1, seq: writer.tail, offset: writer.offsets[at]!, id }
      const staging = `${index}.${process.pid}.${Math.random().toString(36).slice(2)}`
      yield* fs.writeFileString(staging, `${JSON.stringify(content)}\n`, { mode: 0o600 }).pipe(
        Effect.andThen(fs.rename(staging, index)),
        Effect.tapError(() => fs.remove(staging).pipe(Effect.ignore))
      )
    }).pipe(
      Effect.catch((e) => Effect.logWarning(`effect-compaction: ${sessionId}: tail index not written: ${e.message}`))
    )

  /** Removes the session's tail index (as `writeIndex`, a failure is logged: the next open checks it again). */
  const removeIndex = (sessionId: string) =>
    Effect.flatMap(files(sessionId), ({ index }) => fs.remove(index)).pipe(
      Effect.catch((e) => Effect.logWarning(`effect-compaction: ${sessionId}: tail index not removed: ${e.message}`))
    )

  /**
   * Forgets the ids and offsets of the lines before the writer's tail, or before its last `WRITER_WINDOW` lines (in
   * batches of a quarter of it): what is older is read from the file on demand. A kept anchor of a later boundary
   * that is no longer known only keeps the tail where it is.
   */
  const forgetOld = (writer: Writer): void => {
    const drop = Math.max(writer.tail, writer.count - WRITER_WINDOW + 1) - writer.first
    if (drop < WRITER_WINDOW / 4) return
    for (let i = 0; i < drop; i++) {
      const id = writer.lineIds[i]
      if (id !== undefined && writer.ids.get(id) === writer.first + i) writer.ids.delete(id)
    }
    writer.offsets.splice(0, drop)
    writer.lineIds.splice(0, drop)
    writer.first += drop
  }

  /**
   * Moves the writer's tail after it took the lines of `entries` from `seq` on: a boundary that keeps nothing starts it, one whose
   * kept entries all follow the boundary before it starts it at the first of them (else it stays where it was, as
   * `tailStartAt` finds it). True when it moved.
   */
  const advanceTail = (writer: Writer, entries: ReadonlyArray<NewEntry>, seq: number): boolean => {
    const before = writer.tail
    entries.forEach(({ line }, i) => {
      if (!isBoundaryLine(line.slice(0, PREFIX_CHARS))) return
      const at = seq + i
      const kept = keptAnchors(line)
      const seqs = kept?.map((id) => writer.ids.get(id))
      if (kept !== undefined && kept.length === 0) writer.tail = at
      else if (seqs !== undefined && seqs.every((s) => s !== undefined && s > writer.lastBoundary && s < at)) {
        writer.tail = Math.max(writer.tail, Math.min(...(seqs as Array<number>)))
      }
      writer.lastBoundary = at
    })
    return writer.tail > before
  }

  const acquireWith = (sessionId: string, useIndex: boolean) =>
    Effect.gen(function* () {
      const { file, lock } = yield* files(sessionId)
      const io = ioError(sessionId, `append ${file}`)
      yield* fs.makeDirectory(directory, { recursive: true, mode: 0o700 }).pipe(
        Effect.mapError(ioError(sessionId, `create directory ${directory}`))
      )
      yield* acquireLock(fs, lock, sessionId)
      const { indexed, scanned, stale } = yield* scan(sessionId, useIndex).pipe(
        Effect.catchIf((e) => e.reason === "NotFound", () =>
          Effect.succeed({
            scanned: { bytes: new Uint8Array(0), base: 0, region: regionOf(new Uint8Array(0)) } satisfies Scanned,
            indexed: false,
            stale: false
          }))
      )
      const { base, bytes, region } = scanned
      const issues = tornTail(scanned)
      const completeBytes = base + region.completeBytes
      if (issues.length > 0) {
        // a torn write was never acknowledged: cut it off (a torn line, and the whole lines of its append before it)
        // so the next line does not glue onto it and the log never holds part of an append
        yield* Effect.logWarning(
          `effect-compaction: ${file}: cut a torn tail from line ${issues[0]!.line} (${
            bytes.length - region.completeBytes
          } bytes)`
        )
        yield* fs.truncate(file, completeBytes).pipe(Effect.mapError(io))
      }
      const handle = yield* fs.open(file, { flag: "a", mode: 0o600 }).pipe(Effect.mapError(io))
      const ids = new Map<string, number>()
      const offsets: Array<number> = []
      const lineIds: Array<string | undefined> = []
      let lastBoundary = 0
      region.starts.forEach((start, i) => {
        const prefix = region.prefix(i)
        const id = idOfLine(prefix)
        if (id !== undefined) ids.set(id, region.first + i)
        if (isBoundaryLine(prefix)) lastBoundary = region.first + i
        offsets.push(base + start)
        lineIds.push(id)
      })
      const fd = yield* descriptorOf(handle)
      const writer: Writer = {
        file,
        handle,
        fd,
        size: completeBytes,
        written: completeBytes,
        queued: [],
        queuedBytes: 0,
        queuedLines: 0,
        scheduled: false,
        broken: undefined,
        writing: Semaphore.makeUnsafe(1),
        pending: 0,
        scope: yield* Effect.scope,
        count: region.first + region.starts.length - 1,
        ids,
        dirty: false,
        first: region.first,
        offsets,
        lineIds,
        tail: region.from,
        lastBoundary,
        opened: { bytes: bytes.subarray(0, region.completeBytes), base, region }
      }
      writers.set(sessionId, writer)
      // closing writes what is queued (before the file is closed: finalizers run last first)
      yield* Effect.addFinalizer(() =>
        Effect.sync(() => writers.delete(sessionId)).pipe(
          Effect.andThen(flushQueued(sessionId, writer)),
          Effect.catch((e) => Effect.logError(`effect-compaction: ${e.message}`))
        )
      )
      // an open that read the whole file leaves the index for the next one (a stale one goes when there is no tail)
      if (!indexed && writer.tail > 1) yield* writeIndex(sessionId, writer)
      else if (stale) yield* removeIndex(sessionId)
      // the writer of the session keeps its tail only; a one-append writer (not `useIndex`) knows every id
      if (useIndex) forgetOld(writer)
      return issues
    }).pipe(Effect.withSpan("SessionStore.acquire", { attributes: spanAttributes(name, sessionId) }))

  const acquire = (sessionId: string) => acquireWith(sessionId, true)

  /** What this process's writer of `sessionId` queued, written (so a read sees every acknowledged line). */
  const flushOf = (sessionId: string) => {
    const writer = writers.get(sessionId)
    return writer === undefined ? Effect.void : flushQueued(sessionId, writer)
  }

  const read = (sessionId: string, afterSeq: number) =>
    Effect.gen(function* () {
      const { file } = yield* files(sessionId)
      yield* flushOf(sessionId)
      const { issues, lines } = splitLines(yield* readBytes(sessionId, file))
      const entries: Array<StoredEntry> = []
      for (let i = afterSeq; i < lines.length; i++) entries.push({ seq: i + 1, line: lines[i]! })
      yield* Effect.annotateCurrentSpan("session.entries", entries.length)
      return { entries, issues }
    }).pipe(Effect.withSpan("SessionStore.read", { attributes: spanAttributes(name, sessionId, { afterSeq }) }))

  const readTail = (sessionId: string) =>
    Effect.gen(function* () {
      // right after the writer's open (nothing appended since), the stretch it read
      const writer = writers.get(sessionId)
      const opened = writer?.opened
      if (writer !== undefined) writer.opened = undefined
      if (opened === undefined) yield* flushOf(sessionId)
      const { indexed, scanned } = opened !== undefined
        ? { scanned: opened, indexed: opened.base > 0 }
        : yield* scan(sessionId, true)
      const entries = regionLines(scanned.bytes, scanned.region, scanned.region.from, textOf)
      yield* Effect.annotateCurrentSpan("session.entries", entries.length)
      yield* Effect.annotateCurrentSpan("session.indexed", indexed)
      return { entries, issues: tornTail(scanned) }
    }).pipe(Effect.withSpan("SessionStore.readTail", { attributes: spanAttributes(name, sessionId) }))

  /** Takes the lines of `entries` (`sizes`: their bytes, newline included) into the writer's state. */
  const take = (writer: Writer, entries: ReadonlyArray<NewEntry>, sizes: ReadonlyArray<number>) => {
    let offset = writer.size
    for (let i = 0; i < entries.length; i++) {
      const id = entries[i]!.entryId
      writer.ids.set(id, writer.count + i + 1)
      writer.offsets.push(offset)
      writer.lineIds.push(id) // the id its line starts with (a line that does not is never indexed)
      offset += sizes[i]!
    }
    writer.size = offset
    writer.count += entries.length
  }

  /** Cuts the file back to the writer's `written` bytes (what a failed write left of a line goes). */
  const rollback = (writer: Writer) =>
    Effect.suspend(() => writer.handle.truncate(writer.written)).pipe(
      Effect.tap(() => Effect.sync(() => (writer.dirty = false)))
    )

  /** A write that failed with `error`: the writer is `dirty` until the cut back to its `written` bytes succeeds. */
  const writeFailed = (sessionId: string, writer: Writer, error: PlatformError.PlatformError) => {
    writer.dirty = true
    return Effect.andThen(
      Effect.ignore(rollback(writer)),
      Effect.fail(ioError(sessionId, `append ${writer.file}`)(error))
    )
  }

  /**
   * Writes `chunk` (`bytes` long) on the descriptor `fd` at once (`writeAllSync`) and counts it `written`: `undefined`
   * when it was, else the effect that cuts the file back and fails (`writeFailed`).
   */
  const writeDirect = (
    sessionId: string,
    writer: Writer,
    fd: number,
    chunk: string | Uint8Array,
    bytes: number
  ): Effect.Effect<never, SessionLogError> | undefined => {
    const error = writeAllSync(fd, chunk, bytes)
    if (error !== undefined) return writeFailed(sessionId, writer, error)
    writer.written += bytes
    return undefined
  }

  /** Whether an append may write `bytes` on the writer's descriptor now (`Writer.pending`, `writeDirect`). */
  const writesAtOnce = (writer: Writer, bytes: number) =>
    writer.fd !== undefined && writer.pending === 0 && !writer.dirty && writer.queued.length === 0 &&
    bytes <= DIRECT_MAX_BYTES

  /**
   * Writes `chunk` (`bytes` long, in UTF-8 when it is text) at the file's end (after its `written` bytes), one write at
   * a time: a failed write is cut back, so the file never keeps part of a line (`dirty` when the cut failed too: the
   * next write cuts first). A `direct` chunk of at most `DIRECT_MAX_BYTES` is written on the writer's descriptor
   * (`fd`) before this returns; any other through `writeAll`.
   */
  const writeChunk = (
    sessionId: string,
    writer: Writer,
    chunk: string | Uint8Array,
    bytes: number,
    direct: boolean
  ): Effect.Effect<void, SessionLogError> => {
    const write = Effect.suspend(() => {
      const fd = direct && bytes <= DIRECT_MAX_BYTES ? writer.fd : undefined
      if (fd === undefined) {
        const all = typeof chunk === "string" ? Buffer.from(chunk, "utf8") : chunk
        return Effect.matchEffect(writer.handle.writeAll(all), {
          onFailure: (error) => writeFailed(sessionId, writer, error),
          onSuccess: () => Effect.sync(() => void (writer.written += bytes))
        })
      }
      return writeDirect(sessionId, writer, fd, chunk, bytes) ?? Effect.void
    })
    return Effect.suspend(() =>
      writer.dirty
        ? Effect.andThen(Effect.mapError(rollback(writer), ioError(sessionId, `append ${writer.file}`)), write)
        : write
    )
  }

  /** `effect` holding the writer's `writing` permit, counted in its `pending` writes from now until it ends. */
  const exclusive = <A, E>(writer: Writer, effect: Effect.Effect<A, E>): Effect.Effect<A, E> =>
    Effect.suspend(() => {
      writer.pending++
      return Semaphore.withPermit(writer.writing, effect).pipe(
        Effect.ensuring(Effect.sync(() => void writer.pending--))
      )
    })

  /**
   * Writes the writer's queued lines in one write (holding its `writing` permit), through transient failures
   * (`EAGAIN`) for the default deadline. A write that fails for good leaves the writer `broken`: those lines were
   * acknowledged, so every later append and read fails with the error, which counts them.
   */
  const flushHeld = (sessionId: string, writer: Writer): Effect.Effect<void, SessionLogError> =>
    Effect.suspend(() => {
      if (writer.broken !== undefined) return Effect.fail(writer.broken)
      if (writer.queued.length === 0) return Effect.void
      const queued = writer.queued
      const bytes = writer.queuedBytes
      const last = writer.count
      const first = last - writer.queuedLines + 1
      writer.queued = []
      writer.queuedBytes = 0
      writer.queuedLines = 0
      // each append's text encoded once, into the one buffer of the write
      const chunk = Buffer.allocUnsafe(bytes)
      let at = 0
      for (const text of queued) at += chunk.write(text, at, "utf8")
      return Effect.flatMap(startBudget(DEFAULT_RETRY_DEADLINE), (budget) =>
        retryTransient(budget, "deferred append", writeChunk(sessionId, writer, chunk, bytes, false))).pipe(
          Effect.tapError((e) =>
            Effect.sync(() => {
              writer.broken = new SessionLogError({
                reason: "Io",
                sessionId,
                detail: `lines ${first} to ${last} were acknowledged (deferred) and not written; reopen the ` +
                  `session: ${e.detail}`,
                ...(e.code === undefined ? {} : { code: e.code }),
                cause: e
              })
            })
          ),
          Effect.mapError(() =>
            writer.broken!
          )
        )
    }).pipe(Effect.uninterruptible)

  /** The writer's queued lines, written (`flushHeld`) once no other write is under way. */
  const flushQueued = (sessionId: string, writer: Writer): Effect.Effect<void, SessionLogError> =>
    exclusive(writer, flushHeld(sessionId, writer))

  /**
   * Queues `text` (the lines of `entries`, `bytes` long, acknowledged now): written with the lines queued within
   * `DEFER_MILLIS` by one write, or at once when the queue reaches `DEFER_MAX_BYTES`. What must run for it, if
   * anything (the write, or scheduling it).
   */
  const queueChunk = (
    sessionId: string,
    writer: Writer,
    entries: ReadonlyArray<NewEntry>,
    sizes: ReadonlyArray<number>,
    text: string,
    bytes: number
  ): Effect.Effect<void, SessionLogError> | undefined => {
    take(writer, entries, sizes)
    writer.queued.push(text)
    writer.queuedBytes += bytes
    writer.queuedLines += entries.length
    if (writer.queuedBytes >= DEFER_MAX_BYTES) return flushQueued(sessionId, writer)
    if (writer.scheduled) return undefined
    writer.scheduled = true
    return Effect.asVoid(Effect.forkIn(
      Effect.sleep(DEFER_MILLIS).pipe(
        Effect.andThen(Effect.sync(() => (writer.scheduled = false))),
        Effect.andThen(flushQueued(sessionId, writer)),
        // the error is the writer's now (`broken`): the next append or read reports it
        Effect.ignore
      ),
      writer.scope
    ))
  }

  /** What was queued goes first; then `text`, acknowledged once written (and synced when `durable`). */
  const writeNow = (
    sessionId: string,
    writer: Writer,
    entries: ReadonlyArray<NewEntry>,
    sizes: ReadonlyArray<number>,
    text: string,
    bytes: number,
    durable: boolean
  ): Effect.Effect<void, SessionLogError> =>
    exclusive(
      writer,
      Effect.andThen(flushHeld(sessionId, writer), writeChunk(sessionId, writer, text, bytes, true))
    ).pipe(
      Effect.andThen(() => {
        take(writer, entries, sizes)
        return durable
          ? writer.handle.sync.pipe(Effect.mapError(ioError(sessionId, `append ${writer.file}`)))
          : Effect.void
      })
    )

  /** An append's answer once its lines were taken (old offsets forgotten). */
  const done = (writer: Writer): AppendResult => {
    forgetOld(writer)
    return { _tag: "Appended", seq: writer.count }
  }

  /** After lines from `seq` on were taken: the tail moved on (its index written), old offsets forgotten. */
  const appended = (
    sessionId: string,
    writer: Writer,
    entries: ReadonlyArray<NewEntry>,
    seq: number
  ): Effect.Effect<AppendResult, SessionLogError> => {
    // the index names a line in the file
    if (advanceTail(writer, entries, seq)) {
      return flushQueued(sessionId, writer).pipe(
        Effect.andThen(writeIndex(sessionId, writer)),
        Effect.andThen(Effect.sync(() => done(writer)))
      )
    }
    return Effect.succeed(done(writer))
  }

  // plain code between the few effects an append needs (a generator per append costs a logged step microseconds);
  // an append that may write at once (`writesAtOnce`) runs no other effect
  const appendWith = (
    sessionId: string,
    writer: Writer,
    expectedSeq: number,
    entries: ReadonlyArray<NewEntry>,
    options: { readonly durable: boolean; readonly defer: boolean }
  ): Effect.Effect<AppendResult, SessionLogError> =>
    Effect.suspend(() => {
      if (writer.broken !== undefined) return Effect.fail(writer.broken)
      let written = 0
      for (const e of entries) written = Math.max(written, writer.ids.get(e.entryId) ?? 0)
      if (written > 0) return Effect.succeed({ _tag: "AlreadyWritten", seq: written } satisfies AppendResult)
      if (expectedSeq !== writer.count) {
        return Effect.succeed({ _tag: "Conflict", seq: writer.count } satisfies AppendResult)
      }
      writer.opened = undefined
      const seq = writer.count + 1
      let text: string
      let sizes: Array<number>
      if (entries.length === 1) {
        text = `${entries[0]!.line}\n`
        sizes = [Buffer.byteLength(text, "utf8")]
      } else {
        text = entries.map((e) => `${e.line}\n`).join("")
        sizes = entries.map((e) => Buffer.byteLength(e.line, "utf8") + 1)
      }
      const bytes = entries.length === 1 ? sizes[0]! : sizes.reduce((a, b) => a + b, 0)
      if (options.defer && !options.durable) {
        const run = queueChunk(sessionId, writer, entries, sizes, text, bytes)
        return run === undefined
          ? appended(sessionId, writer, entries, seq)
          : Effect.andThen(run, Effect.suspend(() => appended(sessionId, writer, entries, seq)))
      }
      if (!options.durable && writesAtOnce(writer, bytes)) {
        const failed = writeDirect(sessionId, writer, writer.fd!, text, bytes)
        if (failed !== undefined) return failed
        take(writer, entries, sizes)
        return appended(sessionId, writer, entries, seq)
      }
      return Effect.andThen(
        writeNow(sessionId, writer, entries, sizes, text, bytes, options.durable),
        Effect.suspend(() => appended(sessionId, writer, entries, seq))
      )
    })

  const store: SessionStoreShape = {
    name,
    acquire,
    read,
    readTail,
    append: (sessionId, expectedSeq, entries, options = {}) => {
      const durable = options.durable === true
      const defer = options.defer === true
      const writer = writers.get(sessionId)
      const run: Effect.Effect<AppendResult, SessionLogError> = writer !== undefined
        ? appendWith(sessionId, writer, expectedSeq, entries, { durable, defer })
        : Effect.scoped(Effect.gen(function* () {
          // not opened for writing here: the session must exist; take its lock for this one append
          const { file } = yield* files(sessionId)
          yield* fs.access(file).pipe(Effect.mapError(() => notFound(sessionId, name)))
          // every line read, so a retry of any stored entry is recognised
          yield* acquireWith(sessionId, false)
          return yield* appendWith(sessionId, writers.get(sessionId)!, expectedSeq, entries, { durable, defer: false })
        }))
      // a leaf span, ended with the append's exit (the store's reads of a first append run beside it)
      return Effect.useSpan("SessionStore.append", {
        attributes: {
          "session.store": name,
          "session.id": sessionId,
          expectedSeq,
          "session.entries": entries.length
        }
      }, () => run)
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
 * embedded default. Opening takes the session's lock (`Locked` if a live process holds it) and cuts off a torn tail (a
 * torn last line, and the lines of an append whose later lines are missing).
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
 * Reads a stored session without opening it for writing: no lock, nothing changed on disk (a torn tail, a torn last
 * line or the lines of an append whose later lines are missing, is only reported and left out). The same checks as
 * `SessionLog.load`; `NotFound` when there is no such session.
 * @category sessions
 */
export const readJsonl = (
  options: { readonly directory: string; readonly sessionId: string } & LoadOptions
): Effect.Effect<Loaded, SessionLogError, FileSystem.FileSystem | Path.Path> =>
  Effect.gen(function* () {
    const store = yield* makeJsonlStore(options.directory)
    return (yield* openSession(store, options.sessionId, options)).loaded
  }).pipe(
    Effect.mapError((e) => e.sessionId === undefined ? withFields(e, { sessionId: options.sessionId }) : e)
  )
