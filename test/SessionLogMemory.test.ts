/**
 * A log's memory follows its view, not its history: opened with the defaults, a log holds the entries from its last
 * compaction boundary on (and says so with `verifiedFrom`), while its view stays the full fold's, equal to a full
 * read of the store; and the JSONL writer keeps the ids of its last lines only, so a retried append is still
 * recognised while an id far behind is not remembered.
 */
import { NodeFileSystem, NodePath } from "@effect/platform-node"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { Message } from "../src/Message.ts"
import { userText } from "../src/internal/blocks.ts"
import { encodeEntry } from "../src/SessionEntry.ts"
import { SessionLog } from "../src/SessionLog.ts"
import { SessionStore } from "../src/SessionStore.ts"
import { layerSessionLog, readJsonl, SessionStoreJsonl } from "../src/SessionStoreJsonl.ts"

const platform = Layer.mergeAll(NodeFileSystem.layer, NodePath.layer)
const user = (text: string): Message => userText(text)
const reply = (text: string): Message => ({ role: "assistant", content: text })

const withTemp = <A, E, R>(body: (directory: string) => Effect.Effect<A, E, R>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => mkdtempSync(join(tmpdir(), "log-memory-"))),
    body,
    (directory) => Effect.sync(() => rmSync(directory, { recursive: true, force: true }))
  )

describe("SessionLog: memory bounded by the view", () => {
  it.effect("a default log holds the entries from its last boundary on; its view is the full read's", () =>
    withTemp((directory) =>
      Effect.gen(function* () {
        const log = yield* SessionLog
        for (let round = 0; round < 4; round++) {
          for (let k = 0; k < 10; k++) yield* log.append([user(`q${round}.${k}`), reply(`a${round}.${k}`)])
          const snapshot = yield* log.snapshot
          const cut = snapshot.view.length - 4
          const boundary = yield* log.recordCompaction({
            view: [user(`summary ${round}`), ...snapshot.view.slice(cut)],
            snapshot,
            cut,
            summarizer: "test"
          })
          const loaded = yield* log.loaded
          assert.strictEqual(loaded.entries[0]!.id, boundary.id, `round ${round}: the entries start at the boundary`)
          assert.strictEqual(loaded.entries.length, 1)
          assert.strictEqual(loaded.verifiedFrom, loaded.seq, "verifiedFrom says the entries start late")
          yield* log.append([user(`after ${round}`)])
          const full = yield* readJsonl({ directory, sessionId: "bounded" }).pipe(Effect.provide(platform))
          assert.strictEqual(full.entries.length, loaded.seq + 1, "the store holds every entry")
          assert.deepStrictEqual((yield* log.snapshot).view, full.view, "the live view is the full fold's")
          assert.deepStrictEqual((yield* log.loaded).entries.map((e) => e.type), ["compaction", "message"])
        }
      }).pipe(Effect.provide(layerSessionLog({ directory, sessionId: "bounded" }).pipe(Layer.provide(platform))))
    ))

  it.effect("the JSONL writer remembers its last lines' ids: a retried append is recognised, an old id is not", () =>
    withTemp((directory) =>
      Effect.scoped(Effect.gen(function* () {
        const store = yield* SessionStore
        yield* store.acquire("window")
        const batch = (b: number) =>
          Array.from({ length: 100 }, (_, i) => {
            const id = `e${b}-${i}`
            const entry = {
              v: 3 as const,
              id,
              parentId: null,
              timestamp: 0,
              type: "message" as const,
              message: user(id)
            }
            return { entryId: id, line: encodeEntry(entry) }
          })
        let seq = 0
        for (let b = 0; b < 60; b++) {
          const result = yield* store.append("window", seq, batch(b))
          assert.strictEqual(result._tag, "Appended")
          seq = result.seq
        }
        // the last append retried (its reply lost): recognised, nothing written twice
        assert.deepStrictEqual(yield* store.append("window", 5_900, batch(59)), { _tag: "AlreadyWritten", seq: 6_000 })
        // the first one retried 6,000 lines later: its ids are forgotten, so the stale seq answers Conflict
        assert.deepStrictEqual(yield* store.append("window", 0, batch(0)), { _tag: "Conflict", seq: 6_000 })
        const all = yield* store.read("window", 0)
        assert.strictEqual(all.entries.length, 6_000)
      })).pipe(Effect.provide(SessionStoreJsonl.layer({ directory }).pipe(Layer.provide(platform))))
    ))
})
