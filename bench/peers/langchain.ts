/**
 * LangChain's approximate token counter, `countTokensApproximately`, as the `langchain` package (v1) exports it
 * (langchain-ai/langchainjs, libs/langchain/src/agents/middleware/utils.ts, MIT). It is the counter LangChain's own
 * summarization middleware passes to `trimMessages`. `@langchain/core`, which holds `trimMessages`, does not ship it,
 * and only `@langchain/core` is a devDependency here, so the function is reproduced line for line (formatting aside).
 */
import { AIMessage, type BaseMessage, ToolMessage } from "@langchain/core/messages"

/** Characters of text content, JSON of tool calls and tool-call ids, divided by 4 (LangChain's approximation). */
export const countTokensApproximately = (messages: Array<BaseMessage>): number => {
  let totalChars = 0
  for (const msg of messages) {
    let textContent: string
    if (typeof msg.content === "string") {
      textContent = msg.content
    } else if (Array.isArray(msg.content)) {
      textContent = msg.content
        .map((item) => {
          if (typeof item === "string") return item
          if (item.type === "text" && "text" in item) return item.text as string
          return ""
        })
        .join("")
    } else {
      textContent = ""
    }

    if (AIMessage.isInstance(msg) && Array.isArray(msg.tool_calls) && msg.tool_calls.length > 0) {
      textContent += JSON.stringify(msg.tool_calls)
    }

    if (ToolMessage.isInstance(msg)) {
      textContent += msg.tool_call_id ?? ""
    }

    totalChars += textContent.length
  }
  // Approximate 1 token = 4 characters
  return Math.ceil(totalChars / 4)
}
