/**
 * Concept: the re-read tracker, files read again right after their output was offloaded.
 *
 * Hot paths: files the model re-read right after their output was offloaded (the read-evict-reread thrash).
 * `evictStaleToolResults` takes `HotPaths#pinned` as its `pinned` option, so a hot file's latest read is kept.
 *
 * The rule. Each path's *previous read* is its latest successful (non-error) read so far. A path becomes hot at a
 * successful read whose range covers the previous read's range while the previous read's result is offloaded: it
 * holds the legacy placeholder or a pointer whose reason is not `superseded`. A `superseded` pointer means the block
 * was offloaded after a later covering read existed, so it was still live when the model read the file again; a
 * `stale` or `modified` pointer on the previous read of a covering re-read can only have been written before that
 * re-read. The state is therefore a function of the messages alone: `fromMessages` on a resumed conversation gives
 * the same paths as observing it live. A partial re-read (a range that does not cover the previous read) is not
 * counted.
 *
 * The cost. The state lives in persistent hash maps (`effect/HashMap`, a hash array mapped trie): a new value shares
 * every untouched node with the value it came from, so one observed step costs what it adds (each change copies one
 * trie path, ⌈log₃₂ n⌉ nodes for n entries), not a copy of every file the session read. Every older value keeps
 * answering as before, and deriving two values from one (a branch) costs what a step costs. The ownership trick of
 * `internal/conversation/carried.ts` (mutable maps owned by the newest value) would need an undo log per value here,
 * as an older tracker has no view to rebuild its state from. One `observe` collects its changes in native maps over
 * the persistent ones and applies each changed key once, as a transient (`HashMap.mutate`, which mutates only nodes
 * it creates): a long batch (`fromMessages`, a resume) pays the trie for what it leaves, not for every call it saw
 * opened and answered. The hot paths are a persistent set for `pinned` and a list, newest first, for `paths`.
 *
 * Pending calls. A read call is remembered until a successful result answers it or a later read call reuses its id.
 * An error result does not close it (a later successful result for the same id still counts) and any later message
 * may carry such a result, so no entry can be dropped without changing an answer. In a `Conversation`, which answers
 * every call exactly once, the entries that stay are the reads whose result was an error (interrupted ones included):
 * one small entry each, which a step only looks up.
 *
 * @since 0.1.0
 */
import * as HashMap from "effect/HashMap"
import * as HashSet from "effect/HashSet"
import * as Option from "effect/Option"
import type { Message, ToolResultBlock } from "./Message.ts"
import type { ToolClassifier } from "./Tools.ts"
import { defaultToolClassifier } from "./Tools.ts"
import type { Offloaded } from "./Offload.ts"
import { isOffloaded, offloadRefOf } from "./Offload.ts"
import { hasContent, isToolResult, isToolUse } from "./internal/blocks.ts"
import { covers, type LineRange } from "./internal/toolInput.ts"

interface ReadCall {
  readonly path: string
  readonly range: LineRange | undefined
}

interface PreviousRead extends ReadCall {
  readonly toolUseId: string
  readonly offloaded: boolean
}

/**
 * A tracker as plain JSON (`HotPaths#toSnapshot`), read back by `HotPaths.fromSnapshot`: the hot paths in the order
 * they became hot; each path's previous read as `[path, toolUseId, offloaded, start?, end?]` (1 or 0 for
 * `offloaded`; `start` absent: the whole file; `end` absent: to its end); each open read call as
 * `[toolUseId, path, start?, end?]`. The classifier is not part of it.
 */
export interface HotPathsSnapshot {
  /** The hot paths, in the order they became hot. */
  readonly hot: ReadonlyArray<string>
  /** Each path's previous read: `[path, toolUseId, offloaded (1) or not (0), start?, end?]`. */
  readonly previous: ReadonlyArray<readonly [string, string, 0 | 1, ...RangeJson]>
  /** Each open read call: `[toolUseId, path, start?, end?]`. */
  readonly pending: ReadonlyArray<readonly [string, string, ...RangeJson]>
}

type RangeJson = [] | [number] | [number, number]

/** The hot paths, newest first: shared tails, so becoming hot prepends one node. */
interface HotList {
  readonly path: string
  readonly rest: HotList | undefined
}

interface Hot {
  readonly set: HashSet.HashSet<string>
  readonly list: HotList | undefined
  readonly size: number
}

const NO_HOT: Hot = { set: HashSet.empty(), list: undefined, size: 0 }

const addHot = (hot: Hot, path: string): Hot => ({
  set: HashSet.add(hot.set, path),
  list: { path, rest: hot.list },
  size: hot.size + 1
})

/**
 * An immutable tracker of hot paths. Build it with `HotPaths.fromMessages`, feed it new messages with `observe` and
 * offloads made by eviction with `observeOffloads`; each returns a new value and leaves this one unchanged.
 * @category models
 */
export class HotPaths {
  readonly #hot: Hot
  readonly #previous: HashMap.HashMap<string, PreviousRead>
  readonly #pending: OpenCalls
  readonly #classify: ToolClassifier

  private constructor(
    hot: Hot,
    previous: HashMap.HashMap<string, PreviousRead>,
    pending: OpenCalls,
    classify: ToolClassifier
  ) {
    this.#hot = hot
    this.#previous = previous
    this.#pending = pending
    this.#classify = classify
  }

  /** A tracker that has seen nothing: no path is hot. */
  static empty(classifier: ToolClassifier = defaultToolClassifier): HotPaths {
    return new HotPaths(NO_HOT, HashMap.empty(), NO_CALLS, classifier)
  }

  /** The tracker after observing `messages` from the start: `HotPaths.empty(classifier).observe(messages)`. */
  static fromMessages(messages: ReadonlyArray<Message>, classifier: ToolClassifier = defaultToolClassifier): HotPaths {
    return HotPaths.empty(classifier).observe(messages)
  }

  /**
   * The tracker read back from `toSnapshot`'s JSON, with `classifier` (the one the snapshotted tracker used): it
   * answers and observes exactly as that tracker did. `undefined` when `snapshot` is not such JSON (a foreign or
   * damaged value), so the caller can observe the messages instead.
   */
  static fromSnapshot(snapshot: unknown, classifier: ToolClassifier = defaultToolClassifier): HotPaths | undefined {
    if (!isRecord(snapshot)) return undefined
    const { hot: paths, pending: open, previous: reads } = snapshot
    if (!isArrayOf(paths, isString) || !isArrayOf(reads, isPreviousJson) || !isArrayOf(open, isPendingJson)) {
      return undefined
    }
    let hot = NO_HOT
    for (const path of paths) if (!HashSet.has(hot.set, path)) hot = addHot(hot, path)
    const previous = HashMap.fromIterable(
      reads.map(([path, toolUseId, offloaded, ...range]): [string, PreviousRead] => [
        path,
        { path, range: rangeOf(range), toolUseId, offloaded: offloaded === 1 }
      ])
    )
    const pending = HashMap.fromIterable(
      open.map(([toolUseId, path, ...range]): [string, ReadCall] => [toolUseId, { path, range: rangeOf(range) }])
    )
    return new HotPaths(hot, previous, fewOrMap(pending), classifier)
  }

  /** The tracker as plain JSON (see `HotPathsSnapshot`), for `HotPaths.fromSnapshot`. */
  toSnapshot(): HotPathsSnapshot {
    const previous: Array<readonly [string, string, 0 | 1, ...RangeJson]> = []
    for (const [path, read] of this.#previous) {
      previous.push([path, read.toolUseId, read.offloaded ? 1 : 0, ...rangeJson(read.range)])
    }
    const pending: Array<readonly [string, string, ...RangeJson]> = []
    for (const [toolUseId, call] of openCallsMap(this.#pending)) {
      pending.push([toolUseId, call.path, ...rangeJson(call.range)])
    }
    return { hot: this.paths, previous, pending }
  }

  /** The hot paths, in the order they became hot. */
  get paths(): ReadonlyArray<string> {
    const out = new Array<string>(this.#hot.size)
    let i = out.length
    for (let node = this.#hot.list; node !== undefined; node = node.rest) out[--i] = node.path
    return out
  }

  /** True when `path` is hot. Pass it as `evictStaleToolResults`' `pinned` option (it is bound). */
  readonly pinned = (path: string): boolean => this.#hot.size > 0 && HashSet.has(this.#hot.set, path)

  /**
   * Observes messages appended to the conversation, in order. A read's tool_use is remembered until its result
   * arrives; the result decides (see the module doc). Returns `this` when nothing changed.
   */
  observe(messages: ReadonlyArray<Message>): HotPaths {
    let hot = this.#hot
    // this call's changes, in native maps over the persistent ones (`undefined`: a call answered here)
    let pending: Map<string, ReadCall | undefined> | undefined
    let previous: Map<string, PreviousRead> | undefined
    for (const message of messages) {
      // a system message may have no content (API-RULES 26)
      if (typeof message.content === "string" || !hasContent(message)) continue
      for (const block of message.content) {
        if (isToolUse(block) && message.role === "assistant") {
          const action = this.#classify(block)
          if (action._tag !== "Read") continue
          pending ??= new Map()
          pending.set(block.id, { path: action.path, range: action.range })
        } else if (isToolResult(block) && message.role === "user") {
          const id = block.tool_use_id
          const call = pending?.has(id) === true ? pending.get(id) : openCall(this.#pending, id)
          if (call === undefined || block.is_error === true) continue
          pending ??= new Map()
          // marked answered only if the persistent map may hold it (so a long batch's map holds only open calls)
          if (openCallCount(this.#pending) === 0) pending.delete(id)
          else pending.set(id, undefined)
          const before = previous?.get(call.path) ?? lookup(this.#previous, call.path)
          if (
            before !== undefined && before.offloaded && covers(call.range, before.range) &&
            !HashSet.has(hot.set, call.path)
          ) hot = addHot(hot, call.path)
          previous ??= new Map()
          previous.set(call.path, { ...call, toolUseId: id, offloaded: offloadedEarly(block) })
        }
      }
    }
    if (previous === undefined && pending === undefined) return this
    return new HotPaths(
      hot,
      previous === undefined ? this.#previous : withChanges(this.#previous, previous),
      pending === undefined ? this.#pending : withOpenCalls(this.#pending, pending),
      this.#classify
    )
  }

  /**
   * Observes the blocks an eviction offloaded (`EvictResult#offloaded`). A path whose previous read is among them is
   * re-read-sensitive from now on: re-reading it marks it hot. Only each offload's `toolUseId`, `reason` and `ref`
   * are read, so a resume can pass what an eviction entry recorded. Returns `this` when nothing changed.
   */
  observeOffloads(offloaded: ReadonlyArray<Pick<Offloaded, "toolUseId" | "reason" | "ref">>): HotPaths {
    let previous: HashMap.HashMap<string, PreviousRead> | undefined
    for (const entry of offloaded) {
      if (entry.ref._tag !== "Read" || entry.reason === "superseded") continue
      const before = Option.getOrUndefined(HashMap.get(previous ?? this.#previous, entry.ref.path))
      if (before === undefined || before.toolUseId !== entry.toolUseId || before.offloaded) continue
      previous ??= HashMap.beginMutation(this.#previous)
      HashMap.set(previous, entry.ref.path, { ...before, offloaded: true })
    }
    return previous === undefined
      ? this
      : new HotPaths(this.#hot, HashMap.endMutation(previous), this.#pending, this.#classify)
  }
}

const rangeJson = (range: LineRange | undefined): RangeJson =>
  range === undefined ? [] : range.end === undefined ? [range.start] : [range.start, range.end]

const rangeOf = (json: RangeJson): LineRange | undefined =>
  json.length === 0 ? undefined : json.length === 1 ? { start: json[0] } : { start: json[0], end: json[1] }

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)
const isString = (u: unknown): u is string => typeof u === "string"
const isArrayOf = <A>(u: unknown, is: (v: unknown) => v is A): u is ReadonlyArray<A> => Array.isArray(u) && u.every(is)
const isRangeJson = (range: ReadonlyArray<unknown>): range is RangeJson =>
  range.length === 0 || (range.length <= 2 && range.every((n) => Number.isFinite(n)))
const isPreviousJson = (u: unknown): u is readonly [string, string, 0 | 1, ...RangeJson] =>
  Array.isArray(u) && isString(u[0]) && isString(u[1]) && (u[2] === 0 || u[2] === 1) && isRangeJson(u.slice(3))
const isPendingJson = (u: unknown): u is readonly [string, string, ...RangeJson] =>
  Array.isArray(u) && isString(u[0]) && isString(u[1]) && isRangeJson(u.slice(2))

/**
 * The open read calls by id: up to `FEW_CALLS` in an array (what a `Conversation` holds: a reply's calls until their
 * results, one step later), more in a hash map. Only a read whose result failed stays open for long.
 */
type OpenCalls = ReadonlyArray<readonly [string, ReadCall]> | HashMap.HashMap<string, ReadCall>

/** The most open calls kept in an array: a scan of that many ids costs less than one hash map lookup. */
const FEW_CALLS = 8

const NO_CALLS: OpenCalls = []

const isFew = (calls: OpenCalls): calls is ReadonlyArray<readonly [string, ReadCall]> => Array.isArray(calls)

/** Open calls keyed by id (unique keys, as a hash map's), an array when they are few. */
const fewOrMap = (calls: HashMap.HashMap<string, ReadCall>): OpenCalls =>
  HashMap.size(calls) <= FEW_CALLS ? [...calls] : calls

const openCallCount = (calls: OpenCalls): number => isFew(calls) ? calls.length : HashMap.size(calls)

const openCall = (calls: OpenCalls, id: string): ReadCall | undefined => {
  if (!isFew(calls)) return lookup(calls, id)
  for (const [key, call] of calls) if (key === id) return call
  return undefined
}

/** The open calls as a hash map: its order (the hash map's, whatever the history) is what a snapshot lists. */
const openCallsMap = (calls: OpenCalls): HashMap.HashMap<string, ReadCall> =>
  isFew(calls) ? HashMap.fromIterable(calls) : calls

/** `calls` with `changes` applied (an `undefined` value removes its key), an array while they are few. */
const withOpenCalls = (calls: OpenCalls, changes: ReadonlyMap<string, ReadCall | undefined>): OpenCalls => {
  if (!isFew(calls)) return withChanges(calls, changes)
  const out: Array<readonly [string, ReadCall]> = []
  for (const entry of calls) if (!changes.has(entry[0])) out.push(entry)
  for (const [key, call] of changes) if (call !== undefined) out.push([key, call])
  return out.length <= FEW_CALLS ? out : HashMap.fromIterable(out)
}

const lookup = <V>(map: HashMap.HashMap<string, V>, key: string): V | undefined =>
  HashMap.size(map) === 0 ? undefined : Option.getOrUndefined(HashMap.get(map, key))

/**
 * `map` with `changes` applied (an `undefined` value removes its key), as one transient: it mutates only the nodes it
 * creates, never `map`'s. A key removed is one `changes` never set, so it can be in the result only if `map` holds it.
 */
const withChanges = <V>(
  map: HashMap.HashMap<string, V>,
  changes: ReadonlyMap<string, V | undefined>
): HashMap.HashMap<string, V> => {
  const mayHold = HashMap.size(map) > 0
  if (changes.size === 1) {
    // one change (a step's read): the persistent operation makes the same trie, without a transient
    const [key, value] = changes.entries().next().value!
    return value !== undefined ? HashMap.set(map, key, value) : mayHold ? HashMap.remove(map, key) : map
  }
  return HashMap.mutate(map, (out) => {
    for (const [key, value] of changes) {
      if (value !== undefined) HashMap.set(out, key, value)
      else if (mayHold) HashMap.remove(out, key)
    }
  })
}

/** The result was offloaded before any later covering read existed: the legacy placeholder or a non-superseded pointer. */
const offloadedEarly = (block: ToolResultBlock): boolean => {
  if (!isOffloaded(block)) return false
  const ref = offloadRefOf(block)
  return ref === undefined || ref.reason !== "superseded"
}
