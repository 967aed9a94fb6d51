import { defineConfig } from 'vitest/config';

/**
 * One run covers every package's unit tests and the integration tests against real Redis and
 * NATS (started by the test kit when `REDIS_URL` / `NATS_URL` are not set). Tests run against
 * source, without a build.
 */
export default defineConfig({
  test: {
    include: ['packages/*/test/**/*.test.ts', 'test/**/*.test.ts'],
    globalSetup: ['./packages/testkit/src/global-setup.ts'],
    reporters: ['default', './scripts/summary-reporter.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
  },
});
