/**
 * The package version, read from package.json (two levels up from both src/cli and dist/cli), with no Effect import so
 * `compaction --version` answers at once.
 *
 * @since 0.1.0
 */
import { readFileSync } from "node:fs"

/** The `version` of package.json, or `"unknown"` when it cannot be read. @category constants */
export const packageVersion = (): string => {
  try {
    const pkg: unknown = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"))
    return typeof pkg === "object" && pkg !== null && "version" in pkg && typeof pkg.version === "string"
      ? pkg.version
      : "unknown"
  } catch {
    return "unknown"
  }
}
