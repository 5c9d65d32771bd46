/**
 * The command trail: the short form a command keeps in a summary's manifest when its whole line does not fit
 * (`briefCommand`: its leading `cd <dir> &&` dropped, clipped), the room the short forms get of their own, and the
 * line that counts the commands left out even so. What the agent ran then ages as slowly as the identifiers do: a
 * line of a few dozen characters, newest first, instead of a whole one or nothing; the runs left out even so are
 * counted. Pure.
 *
 * @internal
 */
import { clipEnd } from "./text.ts"

/**
 * The longest command a short form keeps, in code units: 60. A longer one keeps its head and `…`, so the form is a
 * verbatim piece of the command and a `recall` query with it (less the `…`) finds its runs.
 * @category constants
 */
export const BRIEF_COMMAND_MAX = 60

/** A leading `cd <dir> &&` (or `;`) with a command after it: where the agent ran it, not what it ran. */
const LEADING_CD = /^cd\s+(?:"[^"]*"|'[^']*'|[^\s;&|"']+)\s*(?:&&|;)\s*(?=\S)/

/**
 * The short form of a command's (folded) first line: without its leading `cd <dir> &&` (each, when chained), within
 * `BRIEF_COMMAND_MAX` code units (its head and `…`). Idempotent.
 * @category trail
 */
export const briefCommand = (command: string): string => {
  let text = command.trim()
  for (let cd = LEADING_CD.exec(text); cd !== null; cd = LEADING_CD.exec(text)) text = text.slice(cd[0].length)
  return clipEnd(text, BRIEF_COMMAND_MAX)
}

/**
 * The share of the manifest's room the short forms of commands get of their own: 0.15. They are admitted after the
 * files list and before the rest, newest first, those of earlier spans within the share the earlier entries may fill,
 * and the identifiers' lines are left room; past it, the rest's room may hold more, and the others are counted.
 * @category constants
 */
export const SUMMARY_TRAIL_SHARE = 0.15

/**
 * The line that counts the runs of commands a summary left out for room (with those an earlier summary left out), and
 * the way back to them. Runs, not commands: a run is summarized once, so the count is exact across compactions, where a
 * command left out, run again and left out again would be counted twice.
 * @category trail
 */
export const omittedRuns = (count: number): string =>
  `omitted ${count} command run${count === 1 ? "" : "s"} for room (the oldest; a \`recall\` query finds them)`

const OMITTED_RUNS = /^omitted (\d+) command runs? for room \(/

/** The count of an `omittedRuns` line, or `undefined` when `line` is not one. @category trail */
export const parseOmittedRuns = (line: string): number | undefined => {
  const match = OMITTED_RUNS.exec(line)
  if (match === null) return undefined
  const count = Number(match[1])
  return count > 0 && omittedRuns(count) === line ? count : undefined
}
