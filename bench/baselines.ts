/**
 * The loops the benchmarks share, so every run measures the same thing: the floors they compare against, the
 * estimator's cold path, and the estimator's workloads (fresh objects, one agent step).
 */
import { do_not_optimize } from "mitata"
import type { ContentBlock, Message } from "../src/Message.ts"
import { corpus } from "../test/fixtures/Corpus.ts"
import { estimateMessageTokensUncached } from "../src/internal/estimate.ts"

/** The whole-conversation estimate with no cache at all: every message estimated from scratch. */
export const coldEstimate = (messages: ReadonlyArray<Message>): number => {
  let n = 0
  for (const m of messages) n += estimateMessageTokensUncached(m)
  return n
}

const blockChars = (blocks: ReadonlyArray<ContentBlock>): number => {
  let n = 0
  for (const b of blocks) {
    const r = b as { text?: string; thinking?: string; content?: string | ReadonlyArray<ContentBlock> }
    if (typeof r.text === "string") n += r.text.length
    if (typeof r.thinking === "string") n += r.thinking.length
    if (typeof r.content === "string") n += r.content.length
    else if (Array.isArray(r.content)) n += blockChars(r.content)
  }
  return n
}

/** The estimator's floor: sum the string lengths of every text field, nothing else. */
export const sumStringLengths = (messages: ReadonlyArray<Message>): number => {
  let n = 0
  for (const m of messages) n += typeof m.content === "string" ? m.content.length : blockChars(m.content)
  return n
}

/** Eviction's floor: visit every block once and look at its type. */
export const visitBlocks = (messages: ReadonlyArray<Message>): number => {
  let n = 0
  for (let i = 0; i < messages.length; i++) {
    const content = messages[i]!.content
    if (typeof content === "string") continue
    for (let j = 0; j < content.length; j++) if (content[j]!.type === "tool_result") n++
  }
  return n
}

// ============================================================================
// Estimator workloads shared by bench/tokens.bench.ts and bench/ci.ts
// ============================================================================

/**
 * The estimator workload: the largest real session of `../shared/data/sessions/` repeated `times` times, each
 * repetition as new message objects (blocks shared), so the list is one long session of real messages.
 */
export const repeatedRealSession = (times: number): Array<Message> => {
  const largest = corpus().reduce((a, b) => b.messages.length > a.messages.length ? b : a)
  const out: Array<Message> = []
  for (let i = 0; i < times; i++) for (const m of largest.messages) out.push({ ...m })
  return out
}

/** Shallow copies of every message (blocks shared), so no cache has seen one of them. */
export const freshCopies = (messages: ReadonlyArray<Message>): Array<Message> => messages.map((m) => ({ ...m }))

/**
 * A mitata generator timing `f` on a new input per sample, built untimed by `input` (no batching: each sample is one
 * call). Pass it to `measure` or `bench` with `PER_SAMPLE_OPTIONS`.
 */
export const perSample = <I>(input: () => I, f: (input: I) => unknown) =>
  function* () {
    yield { [0]: input, bench: (i: I) => do_not_optimize(f(i)) }
  }

/** Options for `perSample` measurements: one call per sample, at most `max_samples` of them. */
export const perSampleOptions = (maxSamples: number) => ({ batch_threshold: 0, max_samples: maxSamples })

/**
 * One agent step on a growing session, as `perSample`'s input: the list the estimator saw last plus one new user
 * message (a new array and a new message object each time). Start it from a list `estimateTokens` has seen.
 */
export const growingSession = (start: ReadonlyArray<Message>): () => ReadonlyArray<Message> => {
  let current = start
  let step = 0
  return () => (current = [...current, { role: "user", content: `step ${step++}: and one more question on the build` }])
}

// ============================================================================
// Hot-path workloads shared by bench/evict.bench.ts and bench/ci.ts
// ============================================================================

/** A read of `path` under `id` and its successful result. */
const readStep = (id: string, path: string): readonly [Message, Message] => [
  { role: "assistant", content: [{ type: "tool_use", id, name: "read", input: { path } }] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: id, content: `contents of ${path}` }] }
]

/** The steps that read `files` distinct files, once each: what a `HotPaths` tracker is built over. */
export const filesRead = (files: number): Array<Message> =>
  Array.from({ length: files }, (_, i) => readStep(`seen${i}`, `/repo/src/module${i}/file${i}.ts`)).flat()

/** One agent step for a hot-path tracker: a reply reading a file not seen before, and its result. */
export const hotPathStep: readonly [Message, Message] = readStep("next", "/repo/src/new/file.ts")
