/**
 * Concept: the summarizer picked from the environment.
 *
 * The out-of-the-box summarizer, picked from the environment: `layerAuto`. It sits above the summarizers it picks
 * from (the contract, `Summarizer`, names none of them), and loads `AnthropicSummarizer` (with the SDK) by dynamic
 * import only when it picks it, so importing this module, or the barrel, never loads `@anthropic-ai/sdk`.
 *
 * @since 0.1.0
 */
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { ExtractiveSummarizer } from "./ExtractiveSummarizer.ts"
import type { AnthropicLayerOptions } from "./internal/anthropicConfig.ts"
import { readConfig } from "./internal/env.ts"
import type { Summarizer } from "./Summarizer.ts"

/**
 * The out-of-the-box summarizer: `AnthropicSummarizer.layerWithFallback` when `ANTHROPIC_API_KEY` is set, otherwise
 * `ExtractiveSummarizer.layer`. The Anthropic module (and the SDK) is loaded only in the first case.
 * @category layers
 */
export const layerAuto = (extra: AnthropicLayerOptions = {}): Layer.Layer<Summarizer, Config.ConfigError> =>
  Layer.unwrap(
    Effect.flatMap(
      readConfig(Config.option(Config.Redacted("ANTHROPIC_API_KEY"))),
      (key) =>
        Option.isSome(key)
          ? Effect.map(
            Effect.promise(() => import("./AnthropicSummarizer.ts")),
            (module) => module.AnthropicSummarizer.layerWithFallback(extra)
          )
          : Effect.succeed(ExtractiveSummarizer.layer)
    )
  )
