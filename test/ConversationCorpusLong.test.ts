/** The corpus replay of `ConversationCorpus.test.ts` for pi__large-session, in a file of its own. */
import { describe, it } from "@effect/vitest"
import { corpus } from "./fixtures/Corpus.ts"
import { checkSession, corpusPolicy, figures } from "./fixtures/ConversationReplay.ts"
import { afterAll } from "vitest"

describe("Conversation on the corpus (pi__large-session)", () => {
  afterAll(() => console.log(figures.join("\n")))
  const session = corpus().find((s) => s.name === "pi__large-session")
  if (session === undefined) throw new Error("pi__large-session is missing from the corpus")
  it.effect(`${session.name}: valid requests, resumed runs byte-identical`, () => checkSession(session, corpusPolicy), {
    timeout: 180_000
  })
})
