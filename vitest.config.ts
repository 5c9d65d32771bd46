import { availableParallelism } from "node:os"
import { defineConfig } from "vitest/config"

// One worker per core (vitest's default leaves one core idle, which on our 2-core CI machine halves the run), and the
// test files of a worker share one module graph (`isolate: false`): no test depends on a fresh module, and loading
// effect and the SDK once per worker instead of once per file saves about a fifth of the run. The timeouts guard
// against hangs, not speed (speed is bench:ci's): the heaviest property tests take 15 to 30 s alone and several
// times that on a machine whose cores are shared.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/fixtures/GlobalSetup.ts"],
    maxWorkers: Math.max(2, availableParallelism()),
    isolate: false,
    testTimeout: 180_000,
    hookTimeout: 180_000
  }
})
