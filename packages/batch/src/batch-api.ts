import { randomBytes } from 'node:crypto';
import {
  type Clock,
  type FairwayConfig,
  type Logger,
  parseWith,
  type SloClass,
  systemClock,
} from '@fairway/core';
import type { DispatcherPlugin } from '@fairway/dispatcher';
import { z } from 'zod';
import { BatchKeys } from './batch-keys.ts';
import { type BatchLimits, DEFAULT_BATCH_LIMITS, storageLimitsOf } from './batch-limits.ts';
import { batchRoutes } from './batch-routes.ts';
import { BatchRunner, type BatchRunnerOptions } from './batch-runner.ts';
import { BatchStore } from './batch-store.ts';
import { MemoryGuard } from './memory-guard.ts';

/** Options of {@link batchApi}. */
export interface BatchApiOptions {
  readonly config: FairwayConfig;
  /** Key prefix of the fleet (the store's). */
  readonly prefix: string;
  readonly logger: Logger;
  /** @default the system clock */
  readonly clock?: Clock;
  /** @default {@link DEFAULT_BATCH_LIMITS} */
  readonly limits?: Partial<BatchLimits>;
  /** The SLO class batch lines run in. @default {@link batchSloClass} of the config */
  readonly sloClass?: string | undefined;
  readonly runner?: BatchRunnerOptions;
}

/**
 * The SLO class batch lines run in when none is named: the configured class of the lowest
 * priority (largest band, then longest TTFT target) — `batch-2` with QLM's default classes.
 */
export function batchSloClass(classes: readonly SloClass[]): string {
  const sorted = [...classes].sort((a, b) => b.band - a.band || b.ttftS - a.ttftS);
  return sorted[0]?.name ?? 'interactive';
}

/**
 * Adds OpenAI's Files and Batch API to a dispatcher: its routes on the public port and, on Redis
 * (one server or a Redis Cluster, where every batch key and BullMQ's are in the slot of
 * `{prefix}`), a BullMQ worker that takes batch jobs alongside every other dispatcher of the
 * fleet. On the in-memory store the routes answer 501 (there is no BullMQ without Redis).
 * Each tenant's files and batches are held to its `storage` limits, and new ones wait while
 * Redis is nearly full (`storage.refuseAbove`).
 */
export function batchApi(options: BatchApiOptions): DispatcherPlugin {
  return async (dispatcher, infrastructure) => {
    const limits = { ...DEFAULT_BATCH_LIMITS, ...options.limits };
    const sloClass = options.sloClass ?? batchSloClass(options.config.sloClasses);
    if (!options.config.sloClasses.some((c) => c.name === sloClass))
      throw new Error(`FAIRWAY_BATCH_SLO_CLASS: unknown SLO class "${sloClass}"`);
    const newId = (): string => randomBytes(12).toString('hex');
    const logger = options.logger.child({ component: 'batch' });
    const redis = infrastructure.redis;
    let backend: { store: BatchStore; runner: BatchRunner; guard: MemoryGuard } | undefined;
    if (redis !== undefined) {
      const keys = new BatchKeys(options.prefix);
      const clock = options.clock ?? systemClock;
      const store = new BatchStore(redis, keys, clock, storageLimitsOf(options.config));
      const guard = new MemoryGuard(redis, clock, {
        refuseAbove: options.config.storage.refuseAbove,
        redisMemoryBytes: options.config.storage.redisMemoryBytes,
      });
      const runner = new BatchRunner({
        redis,
        keys,
        store,
        internal: dispatcher.internal,
        limits,
        logger,
        newId,
        options: options.runner,
      });
      backend = { store, runner, guard };
      dispatcher.app.addHook('onReady', async () => runner.start());
      dispatcher.app.addHook('onClose', async () => runner.close());
    }
    await dispatcher.app.register(batchRoutes, {
      backend,
      authenticate: dispatcher.authenticate,
      limits,
      sloClass,
      newId,
    });
  };
}

const batchEnvSchema = z.object({
  FAIRWAY_BATCH_CONCURRENCY: z.coerce.number().int().min(1).max(10_000).optional(),
  FAIRWAY_BATCH_LOCK_MS: z.coerce.number().int().min(1000).optional(),
  FAIRWAY_BATCH_MAX_FILE_BYTES: z.coerce
    .number()
    .int()
    .min(1024)
    .max(512 * 1024 * 1024)
    .optional(),
  FAIRWAY_BATCH_SLO_CLASS: z.string().min(1).optional(),
});

/** What {@link batchEnv} reads: the parts of {@link BatchApiOptions} the environment may set. */
export type BatchEnvOptions = Pick<BatchApiOptions, 'limits' | 'sloClass' | 'runner'>;

/**
 * Batch options from the environment: `FAIRWAY_BATCH_CONCURRENCY` (lines a dispatcher runs at
 * once), `FAIRWAY_BATCH_LOCK_MS` (how soon a dead dispatcher's lines run elsewhere),
 * `FAIRWAY_BATCH_MAX_FILE_BYTES` (largest upload) and `FAIRWAY_BATCH_SLO_CLASS`.
 */
export function batchEnv(env: Readonly<Record<string, string | undefined>>): BatchEnvOptions {
  const e = parseWith(batchEnvSchema, env, 'environment');
  return {
    runner: {
      ...(e.FAIRWAY_BATCH_CONCURRENCY !== undefined ? { concurrency: e.FAIRWAY_BATCH_CONCURRENCY } : {}),
      ...(e.FAIRWAY_BATCH_LOCK_MS !== undefined ? { lockMs: e.FAIRWAY_BATCH_LOCK_MS } : {}),
    },
    limits:
      e.FAIRWAY_BATCH_MAX_FILE_BYTES !== undefined ? { maxFileBytes: e.FAIRWAY_BATCH_MAX_FILE_BYTES } : {},
    sloClass: e.FAIRWAY_BATCH_SLO_CLASS,
  };
}
