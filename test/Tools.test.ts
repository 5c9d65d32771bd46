import { assert, describe, it } from "@effect/vitest"
import type { Message, ToolUseBlock } from "../src/Message.ts"
import { defaultToolClassifier, filesTouched } from "../src/Tools.ts"
import type { ToolAction } from "../src/Tools.ts"
import { covers, shortInput } from "../src/internal/toolInput.ts"

const use = (name: string, input: unknown): ToolUseBlock => ({ type: "tool_use", id: "t", name, input })

describe("defaultToolClassifier", () => {
  it("classifies the common agent tools", () => {
    const cases: ReadonlyArray<readonly [ToolUseBlock, ToolAction]> = [
      [use("Read", { file_path: "/a.ts" }), { _tag: "Read", path: "/a.ts" }],
      [use("Read", { file_path: "/a.ts", offset: 10, limit: 20 }), {
        _tag: "Read",
        path: "/a.ts",
        range: { start: 10, end: 29 }
      }],
      [use("Read", { file_path: "/a.ts", offset: 10 }), { _tag: "Read", path: "/a.ts", range: { start: 10 } }],
      [use("Write", { file_path: "/a.ts", content: "x" }), { _tag: "Write", path: "/a.ts" }],
      [use("Edit", { file_path: "/a.ts" }), { _tag: "Write", path: "/a.ts" }],
      [use("MultiEdit", { file_path: "/a.ts" }), { _tag: "Write", path: "/a.ts" }],
      [use("str_replace_based_edit_tool", { command: "view", path: "/a.ts", view_range: [5, 9] }), {
        _tag: "Read",
        path: "/a.ts",
        range: { start: 5, end: 9 }
      }],
      [use("str_replace_editor", { command: "view", path: "/a.ts", view_range: [5, -1] }), {
        _tag: "Read",
        path: "/a.ts",
        range: { start: 5 }
      }],
      [use("str_replace_editor", { command: "str_replace", path: "/a.ts" }), { _tag: "Write", path: "/a.ts" }],
      [use("str_replace_based_edit_tool", { command: "create", path: "/a.ts" }), { _tag: "Write", path: "/a.ts" }],
      [use("str_replace_based_edit_tool", { command: "insert", path: "/a.ts" }), { _tag: "Write", path: "/a.ts" }],
      [use("read", { path: "/a.ts", offset: 3, limit: 1 }), {
        _tag: "Read",
        path: "/a.ts",
        range: { start: 3, end: 3 }
      }],
      [use("write", { path: "/a.ts" }), { _tag: "Write", path: "/a.ts" }],
      [use("edit", { path: "/a.ts" }), { _tag: "Write", path: "/a.ts" }],
      [use("read_file", { path: "/a.ts" }), { _tag: "Read", path: "/a.ts" }],
      [use("write_file", { path: "/a.ts" }), { _tag: "Write", path: "/a.ts" }],
      [use("open", { path: "setup.py" }), { _tag: "Read", path: "setup.py", range: { start: 1, end: 1 } }],
      [use("open", { path: "a.py", line_number: 40 }), { _tag: "Read", path: "a.py", range: { start: 40, end: 40 } }],
      [use("create", { filename: "reproduce.py" }), { _tag: "Write", path: "reproduce.py" }],
      [use("bash", { command: "cat /a.ts" }), { _tag: "Other" }],
      [use("Read", {}), { _tag: "Other" }],
      [use("Read", { file_path: "" }), { _tag: "Other" }],
      [use("read", "not an object"), { _tag: "Other" }],
      [use("str_replace_editor", { command: "undo", path: "/a.ts" }), { _tag: "Other" }],
      [use("str_replace_editor", { command: "undo_edit", path: "/a.ts" }), { _tag: "Write", path: "/a.ts" }],
      [use("NotebookEdit", { notebook_path: "/n.ipynb" }), { _tag: "Write", path: "/n.ipynb" }],
      [use("edit_file", { file_path: "/a.ts" }), { _tag: "Write", path: "/a.ts" }],
      [use("read", { file_path: "/a.ts", offset: Number.NaN }), { _tag: "Read", path: "/a.ts" }],
      [use("open", { file: "b.py", line_number: 0 }), { _tag: "Read", path: "b.py", range: { start: 1, end: 1 } }],
      [use("constructor", { path: "/a.ts" }), { _tag: "Other" }],
      [use("__proto__", { path: "/a.ts" }), { _tag: "Other" }],
      [use("Write", null), { _tag: "Other" }]
    ]
    for (const [toolUse, expected] of cases) {
      assert.deepStrictEqual(defaultToolClassifier(toolUse), expected, toolUse.name)
    }
  })
})

describe("covers", () => {
  it("treats an absent range as the whole file and compares bounds inclusively", () => {
    assert.isTrue(covers(undefined, undefined))
    assert.isTrue(covers(undefined, { start: 3, end: 4 }))
    assert.isFalse(covers({ start: 1 }, undefined))
    assert.isTrue(covers({ start: 1 }, { start: 7 }))
    assert.isTrue(covers({ start: 1, end: 10 }, { start: 1, end: 10 }))
    assert.isFalse(covers({ start: 1, end: 10 }, { start: 5 }))
    assert.isFalse(covers({ start: 2, end: 10 }, { start: 1, end: 5 }))
  })
})

describe("shortInput", () => {
  it("prefers the command or path, collapses whitespace, adds the range and clips", () => {
    assert.strictEqual(shortInput(use("bash", { command: "npm  test\n  -- --watch" })), "npm test -- --watch")
    assert.strictEqual(shortInput(use("read", { path: "/a.ts", offset: 5, limit: 10 })), "/a.ts:5-14")
    assert.strictEqual(shortInput(use("x", { a: 1 })), '{"a":1}')
    const long = shortInput(use("bash", { command: "y".repeat(500) }), 20)
    assert.strictEqual(long.length, 20)
    assert.isTrue(long.endsWith("…"))
  })
})

describe("filesTouched", () => {
  it("lists reads and modifications in order of first appearance, a modified file only once", () => {
    const messages: ReadonlyArray<Message> = [{
      role: "assistant",
      content: [
        use("read", { path: "/b.ts" }),
        use("read", { path: "/a.ts" }),
        use("edit", { path: "/a.ts" }),
        use("read", { path: "/b.ts" }),
        use("write", { path: "/c.ts" })
      ]
    }]
    assert.deepStrictEqual(filesTouched(messages), { read: ["/b.ts"], modified: ["/a.ts", "/c.ts"] })
  })
})

describe("the SDK agent toolset (API-RULES 41)", () => {
  const saved = "/tmp/bash-output-Ab12Cd/0f8fad5b-d9cb-469f-a165-70867728950e.txt"

  it("reads `read { file_path, view_range }` as a ranged read; `write` and `edit` modify `file_path`", () => {
    const cases: ReadonlyArray<readonly [ToolUseBlock, ToolAction]> = [
      [use("read", { file_path: "/big.ts", view_range: [501, 1000] }), {
        _tag: "Read",
        path: "/big.ts",
        range: { start: 501, end: 1000 }
      }],
      // end ≤ 0 reads to the end of the file
      [use("read", { file_path: "/big.ts", view_range: [1001, 0] }), {
        _tag: "Read",
        path: "/big.ts",
        range: { start: 1001 }
      }],
      [use("read", { file_path: "/big.ts", view_range: [1001, -1] }), {
        _tag: "Read",
        path: "/big.ts",
        range: { start: 1001 }
      }],
      [use("read", { file_path: "/small.ts" }), { _tag: "Read", path: "/small.ts" }],
      [use("write", { file_path: "/n.ts", content: "x" }), { _tag: "Write", path: "/n.ts" }],
      [use("edit", { file_path: "/n.ts", old_string: "a", new_string: "b", replace_all: true }), {
        _tag: "Write",
        path: "/n.ts"
      }],
      [use("bash", { command: "npm test" }), { _tag: "Other" }],
      // the temp file `bash` saved a long output to is no file to re-read
      [use("read", { file_path: saved, view_range: [1, 200] }), { _tag: "Other" }],
      [use("Read", { file_path: saved }), { _tag: "Other" }]
    ]
    for (const [toolUse, expected] of cases) assert.deepStrictEqual(defaultToolClassifier(toolUse), expected)
  })

  it("`filesTouched` never lists a bash saved output", () => {
    const messages: ReadonlyArray<Message> = [{
      role: "assistant",
      content: [
        use("bash", { command: "npm test" }),
        use("read", { file_path: saved, view_range: [1, 200] }),
        use("read", { file_path: "/big.ts", view_range: [1, 500] }),
        use("edit", { file_path: "/big.ts", old_string: "a", new_string: "b" }),
        use("read", { file_path: "/other.ts" })
      ]
    }]
    assert.deepStrictEqual(filesTouched(messages), { read: ["/other.ts"], modified: ["/big.ts"] })
  })
})
