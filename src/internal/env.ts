/**
 * Config read one variable at a time. Effect's default `ConfigProvider` copies the whole environment before the first
 * lookup, so under Deno any config read needs a bare `--allow-env`; `readConfig` reads through the app's provider when
 * it provides one, and otherwise asks the environment only for the variables the config names.
 *
 * @internal
 */
import type * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"

/**
 * A provider of environment variables that reads each one by name when asked (`process.env[name]`, which Node and
 * Deno both have), never the whole environment. As in `ConfigProvider.fromEnv`, an empty value counts as unset. A
 * variable the runtime refuses to show (Deno without `--allow-env=NAME`) fails with a `SourceError` naming it.
 */
export const namedEnvProvider: ConfigProvider.ConfigProvider = ConfigProvider.make((path) => {
  const name = path.map(String).join("_")
  return Effect.try({
    try: () => {
      const value = globalThis.process?.env[name]
      return value === undefined || value === "" ? undefined : ConfigProvider.makeValue(value)
    },
    catch: (cause) =>
      new ConfigProvider.SourceError({
        message: `cannot read the environment variable ${name} (${
          cause instanceof Error ? cause.message : String(cause)
        }); under Deno, allow it with --allow-env=${name}`,
        cause
      })
  })
})

/**
 * Reads `config` through the `ConfigProvider` the app provided, or, when it provided none, through
 * `namedEnvProvider`: the same variables as Effect's default provider, but only the named ones are read.
 */
export const readConfig = <A>(config: Config.Config<A>): Effect.Effect<A, Config.ConfigError> =>
  Effect.flatMap(
    Effect.context<never>(),
    (context) =>
      Context.getOrUndefined(context, ConfigProvider.ConfigProvider) === undefined
        ? Effect.provideService(config, ConfigProvider.ConfigProvider, namedEnvProvider)
        : config
  )
