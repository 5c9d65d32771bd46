/**
 * The barrel's `Summarizer` namespace: the contract (`Summarizer.ts`, re-exported whole) and, until 0.2.0, the names
 * the namespace held before the contract stood alone, as deprecated aliases of their homes: the extractive
 * summarizer, `layerAuto`, the Anthropic and server-compaction options and config, and the stand-ins that load those
 * two summarizers (and the SDK) on first use. Only `index.ts` re-exports this file, and nothing here imports it back;
 * `Summarizer.ts` itself imports no summarizer, so the contract and its implementations form no circle.
 *
 * @internal
 */
import type * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Extractive from "../ExtractiveSummarizer.ts"
import * as AnthropicSettings from "./anthropicConfig.ts"
import * as ServerCompactionSettings from "./serverCompactionConfig.ts"
import type { Summarizer, SummarizerShape } from "../Summarizer.ts"
import * as Auto from "../SummarizerAuto.ts"

export * from "../Summarizer.ts"

/** @deprecated Use `SummarizerAuto.layerAuto`. */
export const layerAuto: typeof Auto.layerAuto = Auto.layerAuto

/** @deprecated Use `ExtractiveSummarizer.ExtractiveSummarizer`. */
export const ExtractiveSummarizer: typeof Extractive.ExtractiveSummarizer = Extractive.ExtractiveSummarizer

/** @deprecated Use `ExtractiveSummarizer.extractiveSummary`. */
export const extractiveSummary: typeof Extractive.extractiveSummary = Extractive.extractiveSummary

/** @deprecated Use `ExtractiveSummarizer.EXTRACTIVE_LIMITS`. */
export const EXTRACTIVE_LIMITS: typeof Extractive.EXTRACTIVE_LIMITS = Extractive.EXTRACTIVE_LIMITS

/** @deprecated Use `ExtractiveSummarizer.ExtractiveOptions`. */
export type ExtractiveOptions = Extractive.ExtractiveOptions

/** @deprecated Use `AnthropicSummarizer.DEFAULT_SUMMARIZER_MODEL` (`effect-compaction/AnthropicSummarizer`). */
export const DEFAULT_SUMMARIZER_MODEL: typeof AnthropicSettings.DEFAULT_SUMMARIZER_MODEL =
  AnthropicSettings.DEFAULT_SUMMARIZER_MODEL

/** @deprecated Use `AnthropicSummarizer.anthropicConfig` (`effect-compaction/AnthropicSummarizer`). */
export const anthropicConfig: typeof AnthropicSettings.anthropicConfig = AnthropicSettings.anthropicConfig

/** @deprecated Use `AnthropicSummarizer.ANTHROPIC_ENV_VARIABLES` (`effect-compaction/AnthropicSummarizer`). */
export const ANTHROPIC_ENV_VARIABLES: typeof AnthropicSettings.ANTHROPIC_ENV_VARIABLES =
  AnthropicSettings.ANTHROPIC_ENV_VARIABLES

/** @deprecated Use `AnthropicSummarizer.AnthropicClient` (`effect-compaction/AnthropicSummarizer`). */
export type AnthropicClient = AnthropicSettings.AnthropicClient

/** @deprecated Use `AnthropicSummarizer.AnthropicSummarizerOptions` (`effect-compaction/AnthropicSummarizer`). */
export type AnthropicSummarizerOptions = AnthropicSettings.AnthropicSummarizerOptions

/** @deprecated Use `AnthropicSummarizer.AnthropicLayerOptions` (`effect-compaction/AnthropicSummarizer`). */
export type AnthropicLayerOptions = AnthropicSettings.AnthropicLayerOptions

/** @deprecated Use `AnthropicSummarizer.AnthropicConfig` (`effect-compaction/AnthropicSummarizer`). */
export type AnthropicConfig = AnthropicSettings.AnthropicConfig

/** @deprecated Use `ServerCompactionSummarizer.ON_DEMAND_COMPACTION_BETA` (`effect-compaction/ServerCompactionSummarizer`). */
export const ON_DEMAND_COMPACTION_BETA: typeof ServerCompactionSettings.ON_DEMAND_COMPACTION_BETA =
  ServerCompactionSettings.ON_DEMAND_COMPACTION_BETA

/** @deprecated Use `ServerCompactionSummarizer.DEFAULT_COMPACTION_INSTRUCTIONS` (`effect-compaction/ServerCompactionSummarizer`). */
export const DEFAULT_COMPACTION_INSTRUCTIONS: typeof ServerCompactionSettings.DEFAULT_COMPACTION_INSTRUCTIONS =
  ServerCompactionSettings.DEFAULT_COMPACTION_INSTRUCTIONS

/** @deprecated Use `ServerCompactionSummarizer.ServerCompactionBody` (`effect-compaction/ServerCompactionSummarizer`). */
export type ServerCompactionBody = ServerCompactionSettings.ServerCompactionBody

/** @deprecated Use `ServerCompactionSummarizer.ServerCompactionClient` (`effect-compaction/ServerCompactionSummarizer`). */
export type ServerCompactionClient = ServerCompactionSettings.ServerCompactionClient

/** @deprecated Use `ServerCompactionSummarizer.ServerCompactionSummarizerOptions` (`effect-compaction/ServerCompactionSummarizer`). */
export type ServerCompactionSummarizerOptions = ServerCompactionSettings.ServerCompactionSummarizerOptions

type AnthropicModule = typeof import("../AnthropicSummarizer.ts")

/** The Anthropic summarizer module, loaded (with the SDK) on first use only. */
const loadAnthropic = (): Effect.Effect<AnthropicModule> => Effect.promise(() => import("../AnthropicSummarizer.ts"))

const lazyLayer = <E>(pick: (module: AnthropicModule) => Layer.Layer<Summarizer, E>): Layer.Layer<Summarizer, E> =>
  Layer.unwrap(Effect.map(loadAnthropic(), pick))

/**
 * `AnthropicSummarizer.AnthropicSummarizer` with the same members, loading that module (and the SDK) when a member is
 * first built or run, not when the barrel is imported. `make` returns a summarizer at once and loads the module on its
 * first `summarize`.
 * @deprecated Use `AnthropicSummarizer.AnthropicSummarizer` (`effect-compaction/AnthropicSummarizer`), or
 * `SummarizerAuto.layerAuto`.
 */
export const AnthropicSummarizer = {
  /** The summarizer from explicit options; the module loads on its first `summarize`. */
  make: (options: AnthropicSettings.AnthropicSummarizerOptions): SummarizerShape => ({
    name: "anthropic",
    summarize: (request) =>
      Effect.flatMap(loadAnthropic(), (module) => module.AnthropicSummarizer.make(options).summarize(request))
  }),
  /** A layer from explicit options. */
  layerWith: (options: AnthropicSettings.AnthropicSummarizerOptions): Layer.Layer<Summarizer> =>
    lazyLayer((module) => module.AnthropicSummarizer.layerWith(options)),
  /** A layer from config (see `AnthropicSummarizer.layerConfig`). */
  layerConfig: (extra: AnthropicSettings.AnthropicLayerOptions = {}): Layer.Layer<Summarizer, Config.ConfigError> =>
    lazyLayer((module) => module.AnthropicSummarizer.layerConfig(extra)),
  /** `layerConfig` whose failures (after retries) fall back to the extractive summarizer. */
  layerWithFallback: (
    extra: AnthropicSettings.AnthropicLayerOptions = {}
  ): Layer.Layer<Summarizer, Config.ConfigError> =>
    lazyLayer((module) => module.AnthropicSummarizer.layerWithFallback(extra)),
  /** `layerConfig()`. */
  layer: lazyLayer((module) => module.AnthropicSummarizer.layer) as Layer.Layer<Summarizer, Config.ConfigError>
} as const

type ServerCompactionModule = typeof import("../ServerCompactionSummarizer.ts")

/** The server-compaction summarizer module, loaded (with the SDK) on first use only. */
const loadServerCompaction = (): Effect.Effect<ServerCompactionModule> =>
  Effect.promise(() => import("../ServerCompactionSummarizer.ts"))

/**
 * `ServerCompactionSummarizer.ServerCompactionSummarizer` with the same members, loading that module (and the SDK)
 * when a member is first built or run, not when the barrel is imported. `make` returns a summarizer at once.
 * @deprecated Use `ServerCompactionSummarizer.ServerCompactionSummarizer` (`effect-compaction/ServerCompactionSummarizer`).
 */
export const ServerCompactionSummarizer = {
  /** The summarizer from explicit options; the module loads on its first `summarize`. */
  make: (options: ServerCompactionSettings.ServerCompactionSummarizerOptions): SummarizerShape => ({
    name: "server-compaction",
    summarize: (request) =>
      Effect.flatMap(
        loadServerCompaction(),
        (module) => module.ServerCompactionSummarizer.make(options).summarize(request)
      )
  }),
  /** A layer from explicit options. */
  layerWith: (options: ServerCompactionSettings.ServerCompactionSummarizerOptions): Layer.Layer<Summarizer> =>
    Layer.unwrap(Effect.map(loadServerCompaction(), (module) => module.ServerCompactionSummarizer.layerWith(options))),
  /** A layer from config (see `ServerCompactionSummarizer.layerConfig`). */
  layerConfig: (): Layer.Layer<Summarizer, Config.ConfigError> =>
    Layer.unwrap(Effect.map(loadServerCompaction(), (module) => module.ServerCompactionSummarizer.layerConfig())),
  /** `layerConfig` whose failures fall back to the extractive summarizer. */
  layerWithFallback: (): Layer.Layer<Summarizer, Config.ConfigError> =>
    Layer.unwrap(Effect.map(loadServerCompaction(), (module) => module.ServerCompactionSummarizer.layerWithFallback()))
} as const
