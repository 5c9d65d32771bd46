/** The corpus replay of `ConversationCorpus.test.ts` for its largest session, pi__before-compaction, in a file of its own. */
import { describe, it } from "@effect/vitest"
import { corpus } from "./fixtures/Corpus.ts"
import { checkSession, corpusPolicy, figures } from "./fixtures/ConversationReplay.ts"
import { afterAll } from "vitest"

describe("Conversation on the corpus (largest session)", () => {
  afterAll(() => console.log(figures.join("\n")))
  const session = corpus().find((s) => s.name === "pi__before-compaction")
  if (session === undefined) throw new Error("pi__before-compaction is missing from the corpus")
  it.effect(`${session.name}: valid requests, resumed runs byte-identical`, () => checkSession(session, corpusPolicy), {
    timeout: 180_000
  })
})
