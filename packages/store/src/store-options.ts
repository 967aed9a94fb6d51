import { z } from 'zod';
import { parseInput } from './errors.ts';

/**
 * How long usage is kept, days. Redis: every usage key (a day's rows, a tenant's or key's day and
 * month totals) expires this long after its first write (`includes/usage.lua`, which holds the
 * same number). Memory store: a settlement drops days and buckets that ended more than this long
 * before its `nowMs`. A year of daily rows plus a month's slack.
 */
export const USAGE_RETENTION_DAYS = 400;

/** Options shared by both store backends; both must be given the same values to behave alike. */
export interface StoreOptions {
  /**
   * Lease granted to an owner the first time it admits a request without having called
   * `renewOwner`, so that nothing it holds can be stuck forever if it never renews.
   * @default 30000 (ms)
   */
  readonly defaultLeaseMs?: number;
  /**
   * `retryAfterMs` reported with `queue_full` rejections (there is no window to wait out).
   * @default 1000 (ms)
   */
  readonly queueFullRetryMs?: number;
  /**
   * Validate every operation's input with zod (errors name the field). The simulator may turn this
   * off on its hot path once its inputs are known to be well formed.
   * @default true
   */
  readonly validate?: boolean;
}

/** {@link StoreOptions} with defaults applied. */
export interface ResolvedStoreOptions {
  readonly defaultLeaseMs: number;
  readonly queueFullRetryMs: number;
  readonly validate: boolean;
}

const storeOptionsSchema = z.object({
  defaultLeaseMs: z.number().finite().positive().optional(),
  queueFullRetryMs: z.number().finite().min(0).optional(),
  validate: z.boolean().optional(),
});

/** Number of output lengths kept per flow for VTC(predict) (VTC section 4.4: the last five). */
export const HISTORY_LENGTH = 5;

/** Validates options and applies defaults. */
export function resolveStoreOptions(options: StoreOptions = {}): ResolvedStoreOptions {
  parseInput('options', storeOptionsSchema, options);
  return {
    defaultLeaseMs: options.defaultLeaseMs ?? 30_000,
    queueFullRetryMs: options.queueFullRetryMs ?? 1_000,
    validate: options.validate ?? true,
  };
}

/** Whether a window's reserved amount is replaced by true tokens at settle (TPM by default). */
export function trueUpOf(limit: { readonly code: string; readonly trueUp?: boolean | undefined }): boolean {
  return limit.trueUp ?? limit.code === 'tpm_limited';
}

/** Mean of a flow's recorded output lengths (oldest first), or undefined with no history. */
export function meanOfHistory(history: readonly number[]): number | undefined {
  if (history.length === 0) return undefined;
  let sum = 0;
  for (const v of history) sum += v;
  return sum / history.length;
}

/** Order of backlogged flows under `fair` ordering: counter, then oldest head arrival, then flow id. */
export function fairBefore(
  aCounter: number,
  aHead: number,
  aFlow: string,
  bCounter: number,
  bHead: number,
  bFlow: string,
): boolean {
  if (aCounter !== bCounter) return aCounter < bCounter;
  if (aHead !== bHead) return aHead < bHead;
  return aFlow < bFlow;
}
