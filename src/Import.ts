/**
 * Concept: session import, a recorded session in any supported format into the wire model.
 *
 * Session import: a saved agent session (JSON, Anthropic request, Claude Code or pi JSONL) into the wire model. This
 * module detects the format and reads files; the converters live in `internal/import/`, one file per format.
 *
 * `importSession(text)` auto-detects the format and converts it: a JSON message array, an Anthropic Messages request
 * (or a corpus file `{ system, messages, meta }`), Claude Code session JSONL, or pi session JSONL. `importSessionFile`
 * does the same from a file and streams JSONL line by line, so a large JSONL file is never held whole as one string.
 *
 * The conversion is pure (functions over parsed lines); reading the file is a thin shell around it. Every line that
 * does not become (part of) a message is counted in `skipped`, by reason. Structure is not repaired (orphan tool
 * calls, consecutive same-role messages stay as they are): only what the format itself splits is merged.
 *
 * @since 0.1.0
 */
import { convertClaudeCode } from "./internal/import/claudeCode.ts"
import { convertJson } from "./internal/import/json.ts"
import { binaryError, isRecord, type JsonlLines, LineReader } from "./internal/import/lines.ts"
import { EXPECTED, ImportError, type Session } from "./internal/import/model.ts"
import { convertPi } from "./internal/import/pi.ts"
import * as Effect from "effect/Effect"
import * as FileSystem from "effect/FileSystem"
import type { PlatformError } from "effect/PlatformError"
import * as Result from "effect/Result"
import * as Stream from "effect/Stream"

/** The session model, the line parser and the converters (they live in `internal/import/`). */
export { type CompactionRecord, ImportError, type Session, type SessionFormat } from "./internal/import/model.ts"

// ============================================================================
// Detection
// ============================================================================

const CLAUDE_CODE_TYPES: ReadonlySet<string> = new Set(["user", "assistant"])

/**
 * Picks the JSONL converter: pi when the first entry is a `session` header, Claude Code when any entry is a
 * `user`/`assistant` line with a `message` object; otherwise an `unknown-format` error.
 * @category converters
 */
const convertJsonl = (read: JsonlLines): Result.Result<Session, ImportError> => {
  const first = read.entries[0]
  if (first === undefined) {
    return Result.fail(
      new ImportError({ reason: "empty", message: `empty input: ${EXPECTED}; found no JSON object on any line` })
    )
  }
  if (first.value["type"] === "session") return convertPi(read)
  if (read.entries.some((e) => CLAUDE_CODE_TYPES.has(e.value["type"] as string) && isRecord(e.value["message"]))) {
    return convertClaudeCode(read)
  }
  return Result.fail(
    new ImportError({
      reason: "unknown-format",
      line: first.line,
      message: `not a known session format: ${EXPECTED}; JSONL, but line ${first.line} is not a pi "session" header ` +
        `and no line is a Claude Code user/assistant entry (line ${first.line} has keys ${
          JSON.stringify(Object.keys(first.value).slice(0, 6))
        })`
    })
  )
}

const finishReader = (reader: LineReader): Result.Result<Session, ImportError> => {
  if (reader.mode === "jsonl") return convertJsonl(reader.result())
  if (reader.mode === "undecided") {
    return Result.fail(new ImportError({ reason: "empty", message: `empty input: ${EXPECTED}; found no content` }))
  }
  return parseWholeJson(reader.json.join("\n"))
}

const parseWholeJson = (text: string): Result.Result<Session, ImportError> => {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch (cause) {
    return Result.fail(
      new ImportError({
        reason: "invalid-json",
        message: `invalid JSON: ${EXPECTED}; ${cause instanceof Error ? cause.message : String(cause)}`
      })
    )
  }
  return convertJson(value)
}

/** Splits text into lines (`\n`, `\r\n`, `\r`) and reads them. */
const readText = (text: string): Result.Result<Session, ImportError> => {
  const reader = new LineReader()
  const lines = text.split(/\r\n|\r|\n/)
  if (lines.at(-1) === "") lines.pop()
  for (const line of lines) {
    const error = reader.push(line)
    if (error !== undefined) return Result.fail(error)
  }
  return finishReader(reader)
}

/**
 * Imports a session from its text, auto-detecting the format (JSON message array, Anthropic Messages request or
 * corpus file, Claude Code JSONL, pi JSONL). The messages of the result pass `decodeMessages`. Fails with
 * `ImportError` when the text is empty, binary, not a known format, or holds an invalid message.
 * @category importing
 */
export const importSession = (text: string): Effect.Effect<Session, ImportError> =>
  Effect.suspend(() => {
    if (text.includes("\u0000")) {
      return Effect.fail(binaryError(text.slice(0, text.indexOf("\u0000")).split("\n").length))
    }
    const trimmed = text.trimStart()
    if (trimmed.startsWith("[")) return Effect.fromResult(parseWholeJson(text))
    if (trimmed.startsWith("{")) {
      try {
        const value: unknown = JSON.parse(text)
        if (!isRecord(value) || Array.isArray(value["messages"])) return Effect.fromResult(convertJson(value))
      } catch {
        // several lines (JSONL) or broken JSON: read line by line
      }
    }
    return Effect.fromResult(readText(text))
  })

/**
 * Imports a session from a file. JSONL is streamed line by line (bytes → UTF-8 text → lines → parsed objects), so the
 * file is never held whole as one string; a file whose first line is not JSON fails without reading the rest. JSON
 * formats are read whole. Fails with `ImportError` like `importSession`, or `PlatformError` when reading fails.
 * @category importing
 */
export const importSessionFile = (
  path: string
): Effect.Effect<Session, ImportError | PlatformError, FileSystem.FileSystem> =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const reader = new LineReader()
    yield* fs.stream(path, { chunkSize: 1 << 20 }).pipe(
      Stream.decodeText,
      Stream.splitLines,
      Stream.runForEachArray((lines) => {
        for (const line of lines) {
          const error = reader.push(line)
          if (error !== undefined) return Effect.fail(error)
        }
        return Effect.void
      })
    )
    return yield* Effect.fromResult(finishReader(reader))
  })
