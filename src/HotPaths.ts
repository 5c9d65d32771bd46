/**
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
 * @since 0.1.0
 */
import type { Message, ToolResultBlock } from "./Message.ts"
import { isToolResult, isToolUse } from "./Message.ts"
import type { LineRange, ToolClassifier } from "./Tools.ts"
import { covers, defaultToolClassifier } from "./Tools.ts"
import type { Offloaded } from "./Offload.ts"
import { isOffloaded, offloadRefOf } from "./Offload.ts"

interface ReadCall {
  readonly path: string
  readonly range: LineRange | undefined
}

interface PreviousRead extends ReadCall {
  readonly toolUseId: string
  readonly offloaded: boolean
}

/**
 * An immutable tracker of hot paths. Build it with `HotPaths.fromMessages`, feed it new messages with `observe` and
 * offloads made by eviction with `observeOffloads`; each returns a new value and leaves this one unchanged.
 * @category models
 */
export class HotPaths {
  readonly #hot: ReadonlySet<string>
  readonly #previous: ReadonlyMap<string, PreviousRead>
  readonly #pending: ReadonlyMap<string, ReadCall>
  readonly #classify: ToolClassifier

  private constructor(
    hot: ReadonlySet<string>,
    previous: ReadonlyMap<string, PreviousRead>,
    pending: ReadonlyMap<string, ReadCall>,
    classify: ToolClassifier
  ) {
    this.#hot = hot
    this.#previous = previous
    this.#pending = pending
    this.#classify = classify
  }

  /** A tracker that has seen nothing: no path is hot. */
  static empty(classifier: ToolClassifier = defaultToolClassifier): HotPaths {
    return new HotPaths(new Set(), new Map(), new Map(), classifier)
  }

  /** The tracker after observing `messages` from the start: `HotPaths.empty(classifier).observe(messages)`. */
  static fromMessages(messages: ReadonlyArray<Message>, classifier: ToolClassifier = defaultToolClassifier): HotPaths {
    return HotPaths.empty(classifier).observe(messages)
  }

  /** The hot paths, in the order they became hot. */
  get paths(): ReadonlyArray<string> {
    return [...this.#hot]
  }

  /** True when `path` is hot. Pass it as `evictStaleToolResults`' `pinned` option (it is bound). */
  readonly pinned = (path: string): boolean => this.#hot.has(path)

  /**
   * Observes messages appended to the conversation, in order. A read's tool_use is remembered until its result
   * arrives; the result decides (see the module doc). Returns `this` when nothing changed.
   */
  observe(messages: ReadonlyArray<Message>): HotPaths {
    let hot: Set<string> | undefined
    let previous: Map<string, PreviousRead> | undefined
    let pending: Map<string, ReadCall> | undefined
    for (const message of messages) {
      if (typeof message.content === "string") continue
      for (const block of message.content) {
        if (isToolUse(block) && message.role === "assistant") {
          const action = this.#classify(block)
          if (action._tag !== "Read") continue
          pending ??= new Map(this.#pending)
          pending.set(block.id, { path: action.path, range: action.range })
        } else if (isToolResult(block) && message.role === "user") {
          const call = (pending ?? this.#pending).get(block.tool_use_id)
          if (call === undefined || block.is_error === true) continue
          pending ??= new Map(this.#pending)
          pending.delete(block.tool_use_id)
          const before = (previous ?? this.#previous).get(call.path)
          if (
            before !== undefined && before.offloaded && covers(call.range, before.range) && !this.#hot.has(call.path)
          ) {
            hot ??= new Set(this.#hot)
            hot.add(call.path)
          }
          previous ??= new Map(this.#previous)
          previous.set(call.path, { ...call, toolUseId: block.tool_use_id, offloaded: offloadedEarly(block) })
        }
      }
    }
    if (hot === undefined && previous === undefined && pending === undefined) return this
    return new HotPaths(hot ?? this.#hot, previous ?? this.#previous, pending ?? this.#pending, this.#classify)
  }

  /**
   * Observes the blocks an eviction offloaded (`EvictResult#offloaded`). A path whose previous read is among them is
   * re-read-sensitive from now on: re-reading it marks it hot. Only each offload's `toolUseId`, `reason` and `ref`
   * are read, so a resume can pass what an eviction entry recorded. Returns `this` when nothing changed.
   */
  observeOffloads(offloaded: ReadonlyArray<Pick<Offloaded, "toolUseId" | "reason" | "ref">>): HotPaths {
    let previous: Map<string, PreviousRead> | undefined
    for (const entry of offloaded) {
      if (entry.ref._tag !== "Read" || entry.reason === "superseded") continue
      const before = (previous ?? this.#previous).get(entry.ref.path)
      if (before === undefined || before.toolUseId !== entry.toolUseId || before.offloaded) continue
      previous ??= new Map(this.#previous)
      previous.set(entry.ref.path, { ...before, offloaded: true })
    }
    return previous === undefined ? this : new HotPaths(this.#hot, previous, this.#pending, this.#classify)
  }
}

/** The result was offloaded before any later covering read existed: the legacy placeholder or a non-superseded pointer. */
const offloadedEarly = (block: ToolResultBlock): boolean => {
  if (!isOffloaded(block)) return false
  const ref = offloadRefOf(block)
  return ref === undefined || ref.reason !== "superseded"
}
