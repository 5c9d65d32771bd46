/**
 * The packed-tarball consumer check (`npm run test:package`, part of `npm test`): `npm pack`, then fresh projects
 * that install the tarball the way the README says, from the npm cache where it can (`--prefer-offline`):
 *
 * - core (`effect-compaction effect`, which brings the `@anthropic-ai/sdk` peer: `Conversation`'s types are the SDK's):
 *   no redis, undici or ws is installed, and importing the package loads no SDK file; a strict consumer
 *   (`exactOptionalPropertyTypes`, `skipLibCheck: false`) type-checks and runs; `compaction --version` answers and any
 *   other command says to install `@effect/platform-node`;
 * - cli (+ `@effect/platform-node`): `compaction --version` and `compaction validate FILE` run;
 * - sdk (the SDK named explicitly): SDK `MessageParam[]` go through the core and out into `client.messages.create`
 *   params with no casts, type-checked by our `tsc` and by `deno check`, run by Node and by `deno run`; importing
 *   `effect-compaction` loads no SDK file. `examples/tool-runner.ts` (the SDK's tool runner on a thread, with a
 *   `Conversation` deciding each request) is type-checked the same way and run by Node and by `deno run` against the
 *   suite's local Messages API server (`test/fixtures/ToolRunnerScript.ts`): it must compact, the server must refuse
 *   nothing, and every request must pass the independent checker. The README's agent loop (`examples/agent-loop.ts`
 *   and, without Effect, `examples/agent-loop-promise.ts`) runs the same way under Node and under Deno with the README's
 *   permissions, stopped after three requests and resumed from its JSONL log (`test/fixtures/AgentLoopScript.ts`).
 *
 * It prints what each install weighs (`du` of node_modules). Run it from the repository root. It refuses to start when
 * a `node_modules` directory exists in the temp dir (`TMPDIR`) or above it, where Node would find packages the fresh
 * projects lack.
 */
import { execFile, execFileSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { AGENT_REPLIES, runAgentLoop } from "../test/fixtures/AgentLoopScript.ts"
import { runToolRunner } from "../test/fixtures/ToolRunnerScript.ts"

const root = process.cwd()
const bin = (name: string) => path.join(root, "node_modules", ".bin", name)
const versionOf = (name: string): string =>
  JSON.parse(fs.readFileSync(path.join(root, "node_modules", name, "package.json"), "utf8")).version
const started = Date.now()
const step = (what: string) => console.log(`[${((Date.now() - started) / 1000).toFixed(1)} s] ${what}`)

const fail = (message: string): never => {
  console.error(`check-package: ${message}`)
  process.exit(1)
}

const run = (command: string, args: ReadonlyArray<string>, cwd: string): string => {
  const result = spawnSync(command, args, { cwd, encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } })
  if (result.status !== 0) {
    fail(`${command} ${args.join(" ")} (in ${cwd}) exited ${result.status}:\n${result.stdout}\n${result.stderr}`)
  }
  return result.stdout
}

/**
 * The `node_modules` directories in the temp dir or above it (as given and as its real path): Node resolves a
 * consumer project's imports there too, so one of them could hold what a check says the project lacks (the CLI
 * without `@effect/platform-node` would find it there).
 */
const modulesAbove = (dir: string): Array<string> => {
  const found = new Set<string>()
  for (const start of new Set([path.resolve(dir), fs.realpathSync(dir)])) {
    for (let at = start;; at = path.dirname(at)) {
      const candidate = path.join(at, "node_modules")
      if (fs.existsSync(candidate)) found.add(candidate)
      if (path.dirname(at) === at) break
    }
  }
  return [...found]
}
const outside = modulesAbove(os.tmpdir())
if (outside.length > 0) {
  fail(
    `${outside.join(", ")} exists above the temp dir ${os.tmpdir()}: Node would resolve the consumer projects' ` +
      "imports there too, so the checks of what an install lacks (the CLI without @effect/platform-node) would not " +
      "hold; remove it, or point TMPDIR at a directory with no node_modules above it"
  )
}
const work = fs.mkdtempSync(path.join(os.tmpdir(), "effect-compaction-package-"))
if (process.env["KEEP_PACKAGE_CHECK"] === undefined) {
  process.on("exit", () => fs.rmSync(work, { recursive: true, force: true }))
}

// ============================================================================
// Pack
// ============================================================================

step("npm pack (builds dist/)")
const packed = JSON.parse(run("npm", ["pack", "--json", "--pack-destination", work], root)) as Array<
  { readonly filename: string; readonly files: ReadonlyArray<{ readonly path: string }> }
>
const tarball = path.join(work, packed[0]!.filename)
const packedFiles = packed[0]!.files.map((f) => f.path)
for (
  const required of [
    "dist/index.js",
    "dist/index.d.ts",
    "dist/cli/main.js",
    "dist/examples/agent-loop.ts",
    "dist/examples/agent-loop-promise.ts",
    "README.md",
    "GUIDE.md",
    "package.json"
  ]
) {
  if (!packedFiles.includes(required)) fail(`the tarball lacks ${required}`)
}
const leaked = packedFiles.filter((f) => f.startsWith("src/") || f.startsWith("test/") || f.endsWith(".ts.map"))
if (leaked.length > 0) fail(`the tarball holds files it should not: ${leaked.slice(0, 5).join(", ")}`)

const effect = `effect@${versionOf("effect")}`
const platform = `@effect/platform-node@${versionOf("@effect/platform-node")}`
const sdk = `@anthropic-ai/sdk@${versionOf("@anthropic-ai/sdk")}`

// ============================================================================
// Fresh projects
// ============================================================================

const TSCONFIG = {
  compilerOptions: {
    strict: true,
    exactOptionalPropertyTypes: true,
    noUncheckedIndexedAccess: true,
    skipLibCheck: false,
    module: "nodenext",
    moduleResolution: "nodenext",
    target: "es2022",
    lib: ["es2023", "dom"],
    types: [],
    noEmit: true,
    allowImportingTsExtensions: true,
    erasableSyntaxOnly: true,
    verbatimModuleSyntax: true
  },
  files: ["consumer.ts"]
}

/** An example as a consumer writes it: importing `effect-compaction`. */
const exampleAsConsumer = (name: string): string =>
  fs.readFileSync(path.join(root, "examples", name), "utf8").replace(`"../src/index.ts"`, `"effect-compaction"`)

/** The examples the sdk project type-checks and runs: the SDK's tool runner, and the README's agent loop in both forms. */
const SDK_EXAMPLES: Readonly<Record<string, string>> = Object.fromEntries(
  ["tool-runner.ts", "agent-loop.ts", "agent-loop-promise.ts"].map((name) => [name, exampleAsConsumer(name)])
)

/**
 * Writes a consumer project (`"type": "module"`, a strict tsconfig, `consumer.ts` and any `extra` files, which its
 * tsconfig also checks) and installs `packages` into it; the three projects install at once.
 */
const project = async (
  name: string,
  packages: ReadonlyArray<string>,
  consumer: string,
  extra: Readonly<Record<string, string>> = {}
): Promise<string> => {
  const dir = path.join(work, name)
  fs.mkdirSync(dir)
  fs.writeFileSync(
    path.join(dir, "package.json"),
    JSON.stringify({ name: `consumer-${name}`, private: true, type: "module" }, null, 2)
  )
  fs.writeFileSync(
    path.join(dir, "tsconfig.json"),
    JSON.stringify({ ...TSCONFIG, files: [...TSCONFIG.files, ...Object.keys(extra)] }, null, 2)
  )
  fs.writeFileSync(path.join(dir, "consumer.ts"), consumer)
  for (const [file, text] of Object.entries(extra)) fs.writeFileSync(path.join(dir, file), text)
  step(`${name}: npm install ${packages.map((p) => p === tarball ? "<tarball>" : p).join(" ")}`)
  const args = ["install", "--prefer-offline", "--no-audit", "--no-fund", "--no-package-lock", "--loglevel=error"]
  await new Promise<void>((resolve) =>
    execFile("npm", [...args, ...packages], { cwd: dir, env: { ...process.env, NO_COLOR: "1" } }, (error, out, err) => {
      if (error !== null) fail(`npm install ${packages.join(" ")} (in ${dir}) failed: ${error.message}\n${out}\n${err}`)
      resolve()
    })
  )
  step(`${name}: installed`)
  return dir
}

const weight = (dir: string): string =>
  execFileSync("du", ["-sh", "node_modules"], { cwd: dir, encoding: "utf8" }).split("\t")[0]!
const installed = (dir: string, name: string) => fs.existsSync(path.join(dir, "node_modules", name))

/** The SDK files a fresh Node process resolves while importing `specifier` from `dir`. */
const sdkFilesLoadedBy = (dir: string, specifier: string): number => {
  const script = [
    `import { registerHooks } from "node:module"`,
    `const seen = new Set()`,
    `registerHooks({ resolve(s, c, next) { const r = next(s, c); seen.add(r.url); return r } })`,
    `await import(${JSON.stringify(specifier)})`,
    `process.stdout.write(String([...seen].filter((u) => u.includes("/@anthropic-ai/sdk/")).length))`
  ].join("\n")
  return Number(run(process.execPath, ["--input-type=module", "-e", script], dir))
}

/** The part every consumer shares: plain JSON messages through decode, evict, cut and repair, then a compaction. */
const CORE_CONSUMER = `
import { Effect } from "effect"
import { Compact, Evict, ExtractiveSummarizer, HotPaths, Message, Policy, Validate } from "effect-compaction"
import { splitKeepingTurns } from "effect-compaction/Cut"
import { estimateTokens } from "effect-compaction/Tokens"
import { isValid } from "effect-compaction/Validate"

const untrustedJson: unknown = JSON.parse(JSON.stringify([
  { role: "user", content: "Read src/a.ts and fix the bug" },
  { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "read", input: { path: "src/a.ts" } }] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: "x".repeat(20_000) }] },
  { role: "assistant", content: "Fixed the off-by-one in src/a.ts." },
  { role: "user", content: "Now run the tests" },
  { role: "assistant", content: [{ type: "tool_use", id: "t2", name: "bash", input: { command: "npm test" } }] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: "t2", content: "all green" }] },
  { role: "assistant", content: "All tests pass." }
]))

export const coreFlow = async (): Promise<string> => {
  const messages: ReadonlyArray<Message.Message> = Message.decodeMessagesSync(untrustedJson)
  const hot = HotPaths.HotPaths.fromMessages(messages)
  const evicted = Evict.evictStaleToolResults(messages, 1, { minSavings: 0, pinned: hot.pinned })
  const split = splitKeepingTurns(evicted.messages, 1)
  const view = Validate.repair(split._tag === "Some" ? split.value.tail : evicted.messages).messages
  const policy = Policy.CompactionPolicy.makeUnsafe({ keepRecentTokens: 100, keepRecentTurns: 1 })
  const compacted = await Effect.runPromise(
    Compact.compactContext(messages, policy).pipe(Effect.provide(ExtractiveSummarizer.ExtractiveSummarizer.layer))
  )
  return [
    \`tokens \${estimateTokens(messages)} -> \${estimateTokens(evicted.messages)}\`,
    \`view \${view.length} valid \${isValid(view)}\`,
    \`\${compacted.outcome._tag} \${compacted.messages.length} valid \${Validate.isValid(compacted.messages)}\`
  ].join("; ")
}
`

const CORE_MAIN = `${CORE_CONSUMER}
console.log(await coreFlow())
`

/** SDK \`MessageParam[]\` in, the same type out, into \`client.messages.create\` params: no casts anywhere. */
const SDK_CONSUMER = `${CORE_CONSUMER}
import type Anthropic from "@anthropic-ai/sdk"
import {
  Conversation,
  Cut,
  Evict as EvictNs,
  Message as MessageNs,
  Request,
  Summarizer,
  Validate as ValidateNs
} from "effect-compaction"
import { MySummarizer } from "./own-summarizer.ts"
import { AnthropicSummarizer } from "effect-compaction/AnthropicSummarizer"
import { LanguageModelSummarizer } from "effect-compaction/LanguageModelSummarizer"

const history: Array<Anthropic.MessageParam> = [
  { role: "user", content: "Read src/a.ts" },
  { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "read", input: { path: "src/a.ts" } }] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: "y".repeat(20_000) }] },
  { role: "assistant", content: [{ type: "text", text: "Read it." }] },
  { role: "user", content: "Summarize it" },
  { role: "assistant", content: "It exports one function." }
]

/** The view for the next request, still \`MessageParam[]\`. */
export const nextView = (messages: ReadonlyArray<Anthropic.MessageParam>): Array<Anthropic.MessageParam> => {
  MessageNs.decodeMessagesSync(messages) // the SDK's own values pass the wire-format check
  const evicted = EvictNs.evictStaleToolResults(messages, 1, { minSavings: 0 })
  const split = Cut.splitKeepingTurns(evicted.messages, 1)
  const tail = split._tag === "Some" ? split.value.tail : [...evicted.messages]
  return ValidateNs.repair(tail).messages
}

/** The request the app sends next (type-checked only: no network call). */
export const send = (client: Anthropic) =>
  client.messages.create({ model: "claude-sonnet-5-5", max_tokens: 1024, messages: nextView(history) })

export const sdkParams: Anthropic.MessageCreateParamsNonStreaming = {
  model: "claude-sonnet-5-5",
  max_tokens: 1024,
  messages: nextView(history)
}

export const languageModelSummarizer = LanguageModelSummarizer.layer({ name: "mine" })

/** An SDK client is an \`AnthropicClient\` as it is. */
export const anthropicSummarizer = (client: Anthropic) =>
  AnthropicSummarizer.make({ client, model: "claude-sonnet-5-5" })

/** \`history\` through a \`Conversation\` in memory: SDK messages in, a request for \`client.messages.create\` out. */
export const conversationRequest = Effect.gen(function* () {
  const conversation = yield* Conversation.Conversation
  for (const message of history) {
    if (message.role === "assistant") {
      const { epoch } = yield* conversation.prepare
      yield* conversation.recordReply(message, { input_tokens: 1_000, output_tokens: 10 }, { requestEpoch: epoch })
    } else yield* conversation.append(message)
  }
  return (yield* conversation.prepare).request
}).pipe(
  Effect.provide(Conversation.Conversation.layerMemory()),
  Effect.provide(ExtractiveSummarizer.ExtractiveSummarizer.layer)
)

/** The prepared request, sent as it is (type-checked only). */
export const sendPrepared = (client: Anthropic, request: Request.Request) =>
  client.messages.create({ model: "claude-sonnet-5-5", max_tokens: 1024, ...request })

const prepared = await Effect.runPromise(conversationRequest)
console.log(\`conversation request \${prepared.messages.length} valid \${ValidateNs.isValid(prepared.messages)}\`)
console.log(await coreFlow())
console.log(\`sdk view \${sdkParams.messages.length} valid \${ValidateNs.isValid(sdkParams.messages)}\`)
const mine = await Effect.runPromise(
  Effect.flatMap(Effect.service(Summarizer.Summarizer), (s) => s.summarize(Summarizer.summarizeRequest([])))
    .pipe(Effect.provide(MySummarizer))
)
console.log(\`own summarizer: \${mine.summarizer} \${mine.text}\`)
`

/** The guide's "your own summarizer" snippet, as written there, with the model call it leaves to the reader. */
const ownSummarizer = (): string => {
  const readme = fs.readFileSync(path.join(root, "GUIDE.md"), "utf8")
  const after = readme.indexOf("Any other model takes a few lines")
  const snippet = /```ts\n([\s\S]*?)```/.exec(readme.slice(after))?.[1]
  if (after < 0 || snippet === undefined) return fail("GUIDE.md has no own-summarizer snippet")
  const model =
    "const callMyModel = (prompt: string): Promise<string> => Promise.resolve(`summary of ${prompt.length} chars`)"
  return `${model}\n${snippet}`
}

const weights: Array<string> = []

const [core, cli, withSdk] = await Promise.all([
  project("core", [tarball, effect], CORE_MAIN),
  project("cli", [tarball, effect, platform], CORE_MAIN),
  project("sdk", [tarball, effect, platform, sdk], SDK_CONSUMER, SDK_EXAMPLES)
])

// core only
weights.push(`core only (effect-compaction effect): ${weight(core)}`)
for (
  const name of ["redis", "@redis/client", "ioredis", "undici", "ws", "@effect/platform-node"]
) {
  if (installed(core, name)) fail(`a core-only install holds ${name}`)
}
if (!installed(core, "@anthropic-ai/sdk")) fail("npm did not install the @anthropic-ai/sdk peer")
if (sdkFilesLoadedBy(core, "effect-compaction") !== 0) fail("importing effect-compaction loads SDK files (core)")
step("core: tsc (strict, exactOptionalPropertyTypes, skipLibCheck false)")
run(bin("tsc"), ["-p", "tsconfig.json"], core)
step("core: node consumer.ts")
const coreOutput = run(process.execPath, ["consumer.ts"], core)
if (!/valid true; Compacted \d+ valid true/.test(coreOutput)) fail(`unexpected core output: ${coreOutput}`)
console.log(`  ${coreOutput.trim()}`)
const version = run(path.join(core, "node_modules", ".bin", "compaction"), ["--version"], core).trim()
if (version !== `compaction ${JSON.parse(fs.readFileSync("package.json", "utf8")).version}`) {
  fail(`compaction --version printed ${version}`)
}
const noPlatform = spawnSync(path.join(core, "node_modules", ".bin", "compaction"), ["validate", "x.json"], {
  cwd: core,
  encoding: "utf8"
})
if (
  noPlatform.status !== 70 || !noPlatform.stderr.includes("npm i -g effect-compaction effect @effect/platform-node")
) {
  fail(`the CLI without @effect/platform-node: exit ${noPlatform.status}, ${noPlatform.stderr}`)
}

// core + CLI: the README's CLI install
weights.push(`core + CLI (+ @effect/platform-node): ${weight(cli)}`)
step("cli: compaction --version, compaction validate")
run(path.join(cli, "node_modules", ".bin", "compaction"), ["--version"], cli)
fs.writeFileSync(path.join(cli, "session.json"), JSON.stringify([{ role: "user", content: "hi" }]))
const validated = run(path.join(cli, "node_modules", ".bin", "compaction"), ["validate", "session.json"], cli)
if (!/valid|no violations|0 violations/i.test(validated)) fail(`compaction validate printed ${validated}`)

// with the SDK
fs.writeFileSync(path.join(withSdk, "own-summarizer.ts"), ownSummarizer())
weights.push(`core + CLI + SDK (+ @anthropic-ai/sdk): ${weight(withSdk)}`)
step("sdk: tsc")
run(bin("tsc"), ["-p", "tsconfig.json"], withSdk)
step("sdk: node consumer.ts")
const sdkOutput = run(process.execPath, ["consumer.ts"], withSdk)
if (!/sdk view \d+ valid true/.test(sdkOutput) || !/conversation request \d+ valid true/.test(sdkOutput)) {
  fail(`unexpected sdk output: ${sdkOutput}`)
}
console.log(`  ${sdkOutput.trim().replaceAll("\n", "\n  ")}`)
if (sdkFilesLoadedBy(withSdk, "effect-compaction") !== 0) fail(`importing effect-compaction loads SDK files`)
if (sdkFilesLoadedBy(withSdk, "effect-compaction/AnthropicSummarizer") === 0) fail(`the hook saw no SDK file`)
step("sdk: deno check, deno run")
fs.writeFileSync(
  path.join(withSdk, "deno.json"),
  JSON.stringify({ nodeModulesDir: "manual", compilerOptions: { strict: true, exactOptionalPropertyTypes: true } })
)
run(bin("deno"), ["check", "--quiet", "consumer.ts", ...Object.keys(SDK_EXAMPLES)], withSdk)
const denoOutput = run(bin("deno"), ["run", "--quiet", "--no-prompt", "consumer.ts"], withSdk)
if (denoOutput !== sdkOutput) fail(`deno run printed\n${denoOutput}\nnode printed\n${sdkOutput}`)

// the SDK's tool runner against the local server, under Node and Deno
for (
  const [runtime, command, args] of [
    ["node", process.execPath, ["tool-runner.ts"]],
    ["deno", bin("deno"), ["run", "--quiet", "--no-prompt", "--allow-env", "--allow-net=127.0.0.1", "tool-runner.ts"]]
  ] as const
) {
  step(`sdk: ${runtime} tool-runner.ts against the local Messages API server`)
  const toolRunner = await runToolRunner(command, args, withSdk)
  const summary = /(\d+) requests, (\d+) compactions/.exec(toolRunner.stdout)
  if (toolRunner.status !== 0) fail(`${runtime} tool-runner.ts exited ${toolRunner.status}:\n${toolRunner.stderr}`)
  if (toolRunner.rejections.length > 0) fail(`the local server refused:\n${toolRunner.rejections.join("\n")}`)
  if (toolRunner.violations.length > 0) fail(`requests the checker rejects:\n${toolRunner.violations.join("\n")}`)
  if (summary === null || Number(summary[1]) !== toolRunner.requests.length || Number(summary[2]) < 1) {
    fail(`tool-runner.ts under ${runtime} printed\n${toolRunner.stdout}`)
  }
  console.log(`  ${runtime}: ${toolRunner.stdout.trim().replaceAll("\n", "; ")}`)
}

// the README's agent loop, Effect and Promise forms, under Node and Deno (with the README's permissions): stopped
// after three requests as a crash would, then resumed from its JSONL log to the end
for (const example of ["agent-loop.ts", "agent-loop-promise.ts"]) {
  for (const runtime of ["node", "deno"] as const) {
    const directory = fs.mkdtempSync(path.join(work, "sessions-"))
    const [command, args] = runtime === "node" ? [process.execPath, [example, directory]] : [bin("deno"), [
      "run",
      "--quiet",
      "--no-prompt",
      "--allow-env",
      "--allow-net=127.0.0.1",
      `--allow-read=${directory}`,
      `--allow-write=${directory}`,
      example,
      directory
    ]]
    step(`sdk: ${runtime} ${example} against the local Messages API server, stopped and resumed`)
    const first = await runAgentLoop(command, args, withSdk, AGENT_REPLIES.slice(0, 3), 3)
    const second = await runAgentLoop(command, args, withSdk, AGENT_REPLIES.slice(3))
    for (
      const [which, part, replies] of [["first", first, 3], ["resumed", second, AGENT_REPLIES.length - 3]] as const
    ) {
      if (part.status !== 0) fail(`${runtime} ${example} (${which}) exited ${part.status}:\n${part.stderr}`)
      if (part.rejections.length > 0) fail(`the local server refused:\n${part.rejections.join("\n")}`)
      if (part.violations.length > 0) fail(`requests the checker rejects:\n${part.violations.join("\n")}`)
      if (part.requests.length !== replies) fail(`${runtime} ${example} (${which}) printed\n${part.stdout}`)
    }
    // the resumed run's first request carries what the first run recorded: its last call's result, and the task and
    // the steps before it as they were or, when that request compacts, in the summary
    const resumed = second.requests[0]!.body["messages"] as ReadonlyArray<unknown>
    const sent = JSON.stringify(resumed)
    if (
      !sent.includes(`"tool_use_id":"toolu_03"`) ||
      (resumed.length < 7 && !sent.includes("[Summary of the earlier conversation]"))
    ) fail(`${runtime} ${example} did not resume from its log: ${resumed.length} messages, ${sent.slice(0, 300)}`)
    console.log(`  ${runtime} ${example}: ${first.stdout.trim()} | resumed: ${second.stdout.trim()}`)
  }
}

step("done")
for (const line of weights) console.log(`  ${line}`)
