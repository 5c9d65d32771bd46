/**
 * The help pages of `compaction`, rendered by `effect/cli` from the command tree, so `main.ts` can print them without
 * loading `effect/cli` (which alone takes longer than the start-up budget). `HelpPages.ts` holds them, written by
 * `node src/cli/WriteHelpPages.ts`; a test fails when it differs from what `renderHelpPages` renders now.
 *
 * @since 0.1.0
 */
import { NodeServices } from "@effect/platform-node"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { CliOutput, Command, type HelpDoc } from "effect/cli"
import { cliConfig, COMMAND_NAMES, compaction } from "./Commands.ts"

/** One help page, plain and with ANSI colours. @category models */
export interface HelpPage {
  readonly plain: string
  readonly color: string
}

/** The key of a help page: `""` for `compaction --help`, else the subcommand name. @category models */
export type HelpKey = "" | (typeof COMMAND_NAMES)[number]

/** Renders every help page as `effect/cli` would print it for `compaction [command] --help`. @category rendering */
export const renderHelpPages = (version: string): Effect.Effect<Record<HelpKey, HelpPage>> =>
  Effect.gen(function* () {
    const pages = {} as Record<HelpKey, HelpPage>
    for (const key of ["", ...COMMAND_NAMES] as const) {
      const docs: Array<HelpDoc.HelpDoc> = []
      const capture = CliOutput.layerPresenter({
        present: (event) => Effect.sync(() => void (event._tag === "Help" && docs.push(event.helpDoc)))
      })
      yield* Command.runWith(compaction, { version })([...(key === "" ? [] : [key]), "--help"]).pipe(
        Effect.provide(Layer.mergeAll(NodeServices.layer, capture, cliConfig)),
        Effect.orDie
      )
      const doc = docs[0]!
      pages[key] = {
        plain: CliOutput.defaultFormatter({ colors: false }).formatHelpDoc(doc),
        color: CliOutput.defaultFormatter({ colors: true }).formatHelpDoc(doc)
      }
    }
    return pages
  })
