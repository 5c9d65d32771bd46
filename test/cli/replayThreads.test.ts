/**
 * `compaction replay FILE --threads --out DIR`, run as a real child process beside the same replay without threads.
 * Judged by the thread rules alone (API-RULES 22–24): each request's full conversation, rebuilt from what the server
 * holds under the reply it continues plus the messages it sends, equals exactly the request the replay without
 * threads sends (breakpoints aside: they belong to the request that sent them); every rewrite starts a new thread;
 * an append-only step sends only the new messages; and the local server, which holds threads, rejects none of the
 * requests.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import { importSession } from "../../src/Import.ts"
import { checkRequest, formatApiViolations, withoutCacheControl } from "../fixtures/ApiRules.ts"
import { DATA_DIR, sessionPrefixFile } from "../fixtures/Corpus.ts"
import * as MessagesApiServer from "../fixtures/MessagesApiServer.ts"
import { Reply } from "../fixtures/MessagesApiServer.ts"
import { example, pool, run } from "./Process.ts"

const work = mkdtempSync(join(tmpdir(), "replay-threads-"))
afterAll(() => rmSync(work, { recursive: true, force: true }))

type Body = {
  readonly system?: unknown
  readonly tools?: unknown
  readonly messages: ReadonlyArray<{ readonly role: string; readonly content: unknown }>
  readonly thread?: { readonly type: "create" } | { readonly type: "continue"; readonly previous_message_id: string }
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b)

const file = (dir: string, n: number, suffix = "") => join(dir, `request-${String(n).padStart(4, "0")}${suffix}.json`)
const read = <A>(path: string): A => JSON.parse(readFileSync(path, "utf8")) as A

/** Replays `session` with and without threads, checks every request by the thread rules, then sends them all. */
const check = (session: string, flags: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const name = session.replace(/.*\//, "")
    const plainDir = join(work, `${name}-plain`)
    const threadDir = join(work, `${name}-threads`)
    const runs = yield* Effect.promise(() =>
      pool({
        plain: () => run(["replay", session, "--json", "--out", plainDir, ...flags]),
        // the plain replay's decisions on threads (a rewrite priced by the cache alone), to compare request by request
        threads: () =>
          run(["replay", session, "--json", "--threads", "--cache-only-rewrites", "--out", threadDir, ...flags])
      }, 2)
    )
    assert.strictEqual(runs.plain.code, 0, runs.plain.stderr)
    assert.strictEqual(runs.threads.code, 0, runs.threads.stderr)
    const plainSummary = JSON.parse(runs.plain.stdout)
    const threadSummary = JSON.parse(runs.threads.stdout)
    const { uploadedBytes: plainBytes, ...plainRest } = plainSummary
    const { uploadedBytes: threadBytes, threadRestarts, ...threadRest } = threadSummary
    assert.deepStrictEqual(threadRest, plainRest, "the same replay: requests, compactions, evictions, tokens")
    const messages = Effect.runSync(importSession(readFileSync(session, "utf8"))).messages
    const held = new Map<string, { messages: Array<unknown>; system: unknown; tools: unknown }>()
    const continued = new Set<string>()
    let previous: { readonly plain: Body; readonly reply: unknown } | undefined
    let creates = 0
    let rewrites = 0
    let sentBytes = 0
    const threadRequests: Array<{ readonly body: Body; readonly reply: ReadonlyArray<Record<string, unknown>> }> = []
    for (let n = 1; n <= plainSummary.requests; n++) {
      const plain = read<Body>(file(plainDir, n))
      const threaded = read<Body>(file(threadDir, n))
      const usage = read<{ readonly message: number; readonly uploadBytes: number }>(file(threadDir, n, ".usage"))
      sentBytes += usage.uploadBytes
      assert.isDefined(threaded.thread, `request ${n} carries thread`)
      let conversation: { messages: Array<unknown>; system: unknown; tools: unknown; held?: Array<unknown> }
      if (threaded.thread!.type === "create") {
        creates++
        conversation = {
          messages: withoutCacheControl(threaded.messages) as Array<unknown>,
          system: threaded.system,
          tools: threaded.tools
        }
      } else {
        const id = threaded.thread!.previous_message_id
        const before = held.get(id)
        assert.isDefined(before, `request ${n} continues ${id}, which no earlier reply left`)
        assert.isFalse(continued.has(id), `request ${n}: ${id} continued twice`)
        continued.add(id)
        assert.notProperty(threaded, "system", `request ${n}: a continue repeats no system`)
        assert.notProperty(threaded, "tools", `request ${n}: a continue repeats no tools`)
        conversation = {
          messages: [...before!.messages, ...withoutCacheControl(threaded.messages) as Array<unknown>],
          system: before!.system,
          tools: before!.tools,
          held: before!.messages
        }
      }
      assert.notProperty(threaded, "context_management")
      if (!same(conversation.messages, withoutCacheControl(plain.messages))) {
        assert.deepStrictEqual(
          conversation.messages,
          withoutCacheControl(plain.messages),
          `request ${n}: the rebuilt conversation`
        )
      }
      assert.isTrue(
        same(withoutCacheControl(conversation.system), withoutCacheControl(plain.system)),
        `request ${n}: system`
      )
      assert.isTrue(
        same(withoutCacheControl(conversation.tools), withoutCacheControl(plain.tools)),
        `request ${n}: tools`
      )
      const violations = checkRequest(
        threaded as never,
        conversation.held === undefined ? {} : {
          held: conversation.held as never
        }
      )
      assert.strictEqual(violations.length, 0, `request ${n}: ${formatApiViolations(violations)}`)
      // append-only: the plain request begins with the previous one and its reply
      const grew = previous !== undefined && (() => {
        const before = withoutCacheControl([...previous.plain.messages, {
          role: "assistant",
          content: previous.reply
        }]) as Array<
          unknown
        >
        return same((withoutCacheControl(plain.messages) as Array<unknown>).slice(0, before.length), before)
      })()
      if (!grew && previous !== undefined) {
        rewrites++
        assert.strictEqual(threaded.thread!.type, "create", `request ${n}: a rewrite starts a new thread`)
      }
      if (grew) {
        assert.strictEqual(threaded.thread!.type, "continue", `request ${n}: an append-only step continues`)
        assert.deepStrictEqual(
          threaded.messages,
          plain.messages.slice(previous!.plain.messages.length + 1),
          `request ${n}: only the new messages, as the plain request sends them`
        )
      }
      const reply = messages[usage.message]!.content as unknown as ReadonlyArray<Record<string, unknown>>
      held.set(`msg_replay_${usage.message}`, {
        system: conversation.system,
        tools: conversation.tools,
        messages: [...conversation.messages, { role: "assistant", content: reply }]
      })
      threadRequests.push({ body: threaded, reply })
      previous = { plain, reply }
    }
    assert.isAbove(creates, 1, "some rewrite started a new thread")
    assert.strictEqual(creates, rewrites + 1, "a new thread exactly at the first request and at each rewrite")
    assert.strictEqual(threadRestarts, creates - 1, "the summary counts each new thread after the first")
    assert.strictEqual(threadBytes, sentBytes, "the summary's bytes are the sum of the requests'")
    assert.isBelow(threadBytes, plainBytes / 5)
    // the local server holds the threads: replay every request against it, its reply ids in place of the replay's
    const rejected = yield* Effect.scoped(Effect.gen(function* () {
      const server = yield* MessagesApiServer.make
      const serverId = new Map<string, string>()
      let refused: Array<string> = []
      for (const [i, { body, reply }] of threadRequests.entries()) {
        const thread = body.thread!.type === "create"
          ? body.thread
          : { type: "continue", previous_message_id: serverId.get(body.thread!.previous_message_id) }
        server.enqueue(Reply.message(reply))
        const response = yield* Effect.promise(() =>
          fetch(`${server.url}/v1/messages`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ model: "claude-sonnet-4-5", max_tokens: 1024, stream: true, ...body, thread })
          }).then(async (r) => ({ status: r.status, text: await r.text() }))
        )
        if (response.status !== 200) refused = [...refused, `request ${i + 1}: ${response.status} ${response.text}`]
        const id = /"id":"(msg_test_\d+)"/.exec(response.text)?.[1]
        const usage = read<{ readonly message: number }>(file(threadDir, i + 1, ".usage"))
        if (id !== undefined) serverId.set(`msg_replay_${usage.message}`, id)
      }
      return refused
    }))
    assert.deepStrictEqual(rejected, [], "the local server rejects no request")
    return { requests: plainSummary.requests, creates, plainBytes, threadBytes }
  })

describe("compaction replay --threads", () => {
  it.effect(
    "examples/session.json: every request rebuilds the plain view; rewrites create; 0 rejected",
    () =>
      Effect.gen(function* () {
        const r = yield* check(example, [])
        assert.strictEqual(r.requests, 200)
        // resumed from its log every 7 requests, the threaded replay sends the same bytes: the anchor is restored
        const resumedDir = join(work, "example-resumed")
        const logs = join(work, "example-logs")
        const args = [
          "replay",
          example,
          "--json",
          "--threads",
          "--cache-only-rewrites",
          "--out",
          resumedDir,
          "--log",
          logs,
          "--resume-every",
          "7"
        ]
        const resumed = yield* Effect.promise(() => run(args))
        assert.strictEqual(resumed.code, 0, resumed.stderr)
        assert.isAbove(JSON.parse(resumed.stdout).resumes, 20)
        const uninterrupted = join(work, "session.json-threads")
        for (let n = 1; n <= r.requests; n++) {
          if (readFileSync(file(resumedDir, n), "utf8") !== readFileSync(file(uninterrupted, n), "utf8")) {
            assert.fail(`request ${n} differs between the resumed and the uninterrupted threaded replay`)
          }
        }
      }),
    180_000
  )

  it.effect(
    "a pi session with compactions (its turns to message 220): the same, each compaction a new thread",
    () =>
      Effect.gen(function* () {
        // its first 252 messages (to the end of the turn under way at message 220) at a 40,000-token window: 7
        // compactions and an eviction in 125 requests, where the whole session at 60,000 made 4 in 214 requests
        // (and was the same plain replay as test/cli/replay.test.ts's)
        const session = sessionPrefixFile(
          `${DATA_DIR}sessions/pi__session-2025-12-17_thinking.anthropic.json`,
          220,
          join(work, "pi-prefix.json")
        )
        const r = yield* check(session, ["--context-window", "40000"])
        assert.isAbove(r.creates, 3)
      }),
    180_000
  )
})
