import { type FairwayConfig, parseWith } from '@fairway/core';
import type { ReserveMode } from '@fairway/scheduler';
import { z } from 'zod';

/** Tuning of one dispatcher; every field has a default (config values first, then the ones below). */
export interface DispatcherOptions {
  /**
   * Lease on everything this dispatcher holds in the store; a dispatcher that stops renewing it
   * (crash, partition) has its queued requests dropped and its reservations released after this long,
   * ms. @default 10000
   */
  readonly leaseMs?: number;
  /** How often the lease is renewed, ms. @default leaseMs / 3 */
  readonly renewEveryMs?: number;
  /** How often expired leases (of any dispatcher) are reclaimed, ms (one cheap store call). @default 250 */
  readonly reclaimEveryMs?: number;
  /**
   * How often queued work is re-offered to free capacity even without an event, ms (a safety net:
   * dispatch is event-driven on arrival, completion and replica changes). @default 250
   */
  readonly pumpEveryMs?: number;
  /**
   * How long the owner of a request waits for the assignment of a request another dispatcher picked
   * while the owner was giving up on it, ms; after that the reservation is released. Also how long
   * a dispatcher tries to reach the owner of a request it picked that has no subscription (gone, or
   * reconnecting to NATS) before releasing the pick. @default 2000
   */
  readonly assignGraceMs?: number;
  /** How long a request may wait for capacity before a 504, ms. @default config `policy.queueTimeoutS` */
  readonly queueTimeoutMs?: number;
  /** Output cap injected when a request gives no `max_tokens`, tokens. @default 1024 */
  readonly defaultMaxTokens?: number;
  /** Largest request body accepted, bytes (413 above). @default 4194304 */
  readonly bodyLimitBytes?: number;
  /** What a request reserves on its replica (see the scheduler's `ReserveMode`). @default 'max-tokens' */
  readonly reserve?: ReserveMode;
  /**
   * With `reserve: 'predicted'`: a request streaming past its predicted output is predicted again
   * and its reservation grows with the next coalesced charge (Aladdin section 4.3), so new requests
   * go to replicas with room. @default false
   */
  readonly repredict?: boolean;
  /** KV fraction never reserved on a replica, 0–0.9. @default 0.01 */
  readonly headroomFraction?: number;
  /** Streamed output is charged at least this often, ms. @default config `policy.chargeFlushMs` */
  readonly flushMs?: number;
  /** …or as soon as this many output tokens wait to be charged. @default 256 */
  readonly flushTokens?: number;
  /** On shutdown, how long running requests may take to finish before connections are dropped, ms. @default 30000 */
  readonly drainTimeoutMs?: number;
  /**
   * How long a flow's predicted output (`vtc-predict`, `reserve: predicted`) is served from memory
   * before it is re-read from the store in the background, ms; 0 reads it on every request.
   * @default 1000
   */
  readonly predictionTtlMs?: number;
  /**
   * How old this dispatcher's view of the replicas' reservations may be before a dispatch round
   * reads it from the store again, ms (arrivals never read it: every admission's reply refreshes
   * it). Only placement order depends on it; the store's fit check is always exact. @default 100
   */
  readonly reservationsMaxAgeMs?: number;
  /**
   * Most engine calls one request makes: when a call fails before anything reached the client
   * (connection refused or reset, engine 5xx), the request goes back to the head of its queue and
   * is dispatched again on another replica, up to this many calls in all; 1 never retries. @default 2
   */
  readonly engineAttempts?: number;
  /**
   * How long a replica whose engine failed a call (here or at another dispatcher) is held out of
   * placement before a direct health probe may bring it back, ms; a restarted replica (new
   * registration epoch) comes back at once. @default 5000
   */
  readonly suspectMs?: number;
  /**
   * How often suspect replicas are probed for recovery, and — while the bus is down — every
   * replica's load is read from its engine's `/metrics`, ms. @default 500
   */
  readonly probeEveryMs?: number;
  /** How long one direct engine probe may take, ms. @default 1000 */
  readonly probeTimeoutMs?: number;
  /**
   * How long requests wait while no replica of their pool takes work (every one dead, silent or
   * failing) before they are answered 503 `no_replica`, ms. @default 10000
   */
  readonly noReplicaWaitMs?: number;
  /**
   * Under `placement: aladdin`, how often this dispatcher sends the requests it runs, with their
   * progress, to the others (Aladdin's per-sequence reports: time-indexed KV, decode and TTFT
   * slack), ms. @default 200
   */
  readonly sequenceReportMs?: number;
}

/** {@link DispatcherOptions} with every default applied. */
export type ResolvedDispatcherOptions = Required<DispatcherOptions>;

const ms = z.number().positive().finite();
const optionsSchema = z
  .object({
    leaseMs: ms.min(100, 'must be at least 100 ms').optional(),
    renewEveryMs: ms.optional(),
    reclaimEveryMs: ms.optional(),
    pumpEveryMs: ms.optional(),
    assignGraceMs: ms.optional(),
    queueTimeoutMs: ms.optional(),
    defaultMaxTokens: z.number().int().positive().optional(),
    bodyLimitBytes: z.number().int().min(1024, 'must be at least 1024 bytes').optional(),
    reserve: z.enum(['max-tokens', 'predicted', 'oracle']).optional(),
    repredict: z.boolean().optional(),
    headroomFraction: z.number().min(0).max(0.9).optional(),
    flushMs: ms.optional(),
    flushTokens: z.number().int().positive().optional(),
    drainTimeoutMs: z.number().min(0).finite().optional(),
    predictionTtlMs: z.number().min(0).finite().optional(),
    reservationsMaxAgeMs: z.number().min(0).finite().optional(),
    engineAttempts: z.number().int().min(1).max(10).optional(),
    suspectMs: z.number().min(0).finite().optional(),
    probeEveryMs: ms.optional(),
    probeTimeoutMs: ms.optional(),
    noReplicaWaitMs: ms.optional(),
    sequenceReportMs: ms.min(10, 'must be at least 10 ms').optional(),
  })
  .strict()
  .refine((o) => o.renewEveryMs === undefined || o.leaseMs === undefined || o.renewEveryMs < o.leaseMs, {
    message: 'must be shorter than leaseMs, or the lease lapses between renewals',
    path: ['renewEveryMs'],
  });

/** Validates options (errors name the field) and fills defaults from `config` and the table above. */
export function resolveDispatcherOptions(
  options: DispatcherOptions,
  config: FairwayConfig,
): ResolvedDispatcherOptions {
  const o = parseWith(optionsSchema, options, 'dispatcher options');
  const leaseMs = o.leaseMs ?? 10_000;
  return {
    leaseMs,
    renewEveryMs: o.renewEveryMs ?? Math.floor(leaseMs / 3),
    reclaimEveryMs: o.reclaimEveryMs ?? 250,
    pumpEveryMs: o.pumpEveryMs ?? 250,
    assignGraceMs: o.assignGraceMs ?? 2000,
    queueTimeoutMs: o.queueTimeoutMs ?? config.policy.queueTimeoutS * 1000,
    defaultMaxTokens: o.defaultMaxTokens ?? 1024,
    bodyLimitBytes: o.bodyLimitBytes ?? 4 * 1024 * 1024,
    reserve: o.reserve ?? 'max-tokens',
    repredict: o.repredict ?? false,
    headroomFraction: o.headroomFraction ?? 0.01,
    flushMs: o.flushMs ?? config.policy.chargeFlushMs,
    flushTokens: o.flushTokens ?? 256,
    drainTimeoutMs: o.drainTimeoutMs ?? 30_000,
    predictionTtlMs: o.predictionTtlMs ?? 1000,
    reservationsMaxAgeMs: o.reservationsMaxAgeMs ?? 100,
    engineAttempts: o.engineAttempts ?? 2,
    suspectMs: o.suspectMs ?? 5000,
    probeEveryMs: o.probeEveryMs ?? 500,
    probeTimeoutMs: o.probeTimeoutMs ?? 1000,
    noReplicaWaitMs: o.noReplicaWaitMs ?? 10_000,
    sequenceReportMs: o.sequenceReportMs ?? 200,
  };
}
