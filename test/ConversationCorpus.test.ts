/**
 * Every corpus session replayed through `Conversation` as an agent runs it, uninterrupted and resumed from its log
 * every request and every 50 (under Node) or 7 (under Deno) requests: every request passes the independent API-rules checker, and the resumed runs send the
 * same requests, byte for byte. The two largest sessions run in `ConversationCorpusLarge.test.ts` and `ConversationCorpusLong.test.ts` (so each file stays
 * short). A missing corpus fails loudly (see `fixtures/Corpus.ts`).
 */
import { describe, it } from "@effect/vitest"
import { corpus } from "./fixtures/Corpus.ts"
import { checkSession, corpusPolicy, figures } from "./fixtures/ConversationReplay.ts"
import { afterAll } from "vitest"

const LARGE = ["pi__before-compaction", "pi__large-session"]

describe("Conversation on the corpus", () => {
  afterAll(() => console.log(figures.join("\n")))
  it("the corpus is there, with the large sessions the other files replay", () => {
    if (!LARGE.every((name) => corpus().some((s) => s.name === name))) {
      throw new Error("the large sessions are missing from the corpus")
    }
  })
  for (const session of corpus().filter((s) => !LARGE.includes(s.name))) {
    it.effect(
      `${session.name}: valid requests, resumed runs byte-identical`,
      () => checkSession(session, corpusPolicy),
      {
        timeout: 180_000
      }
    )
  }
})
