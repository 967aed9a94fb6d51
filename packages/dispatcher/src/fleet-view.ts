import type { ReplicaRegistry } from '@fairway/bus';
import type { ReplicaGaugeView } from './gateway-metrics.ts';
import type { GatewayRuntime } from './gateway-runtime.ts';
import type { RegistryReplicaSource } from './replica-source.ts';

/** A replica as this dispatcher sees it, for metrics and the console. */
export interface ReplicaSnapshot extends ReplicaGaugeView {
  readonly model: string;
  /** Whether placement may put work on it now (fresh, ready, not held out). */
  readonly acceptsWork: boolean;
  /** ms since its last heartbeat; undefined before the first. */
  readonly heartbeatAgeMs: number | undefined;
}

/** Waiting requests this dispatcher holds in one pool and band. */
export interface BandDepth {
  readonly pool: string;
  readonly band: number;
  readonly depth: number;
}

/**
 * Every replica in the registry with its KV use, running and waiting requests and state as this
 * dispatcher sees them: `suspect` when it holds the replica out after a failed call, `stale` when
 * its heartbeats stopped, else the state its agent reported (`starting` before the first one).
 */
export function replicaSnapshots(
  registry: ReplicaRegistry,
  replicas: RegistryReplicaSource,
  runtime: GatewayRuntime,
  nowMs: number,
): ReplicaSnapshot[] {
  return registry.list().map((v) => {
    const hb = v.heartbeat;
    const suspect = runtime.isSuspect(v.id);
    return {
      id: v.id,
      pool: replicas.poolOf(v),
      model: v.registration.model,
      state: suspect ? 'suspect' : v.stale ? 'stale' : (v.reportedState ?? 'starting'),
      kvUsage: hb?.kvUsage ?? 0,
      running: hb?.running ?? 0,
      waiting: hb?.waiting ?? 0,
      acceptsWork: v.acceptsWork && !suspect,
      heartbeatAgeMs: v.lastHeartbeatMs === undefined ? undefined : Math.max(0, nowMs - v.lastHeartbeatMs),
    };
  });
}

/**
 * Waiting requests per pool and band among those this dispatcher holds, with a zero row for each
 * configured band of every pool in `pools` (so an idle queue reports 0, not nothing).
 */
export function bandDepths(
  runtime: GatewayRuntime,
  pools: readonly string[],
  bands: readonly number[],
): BandDepth[] {
  const held = runtime.queuedByBand();
  const out: BandDepth[] = [];
  for (const pool of new Set([...pools, ...held.keys()])) {
    const byBand = held.get(pool);
    for (const band of new Set([...bands, ...(byBand?.keys() ?? [])]))
      out.push({ pool, band, depth: byBand?.get(band) ?? 0 });
  }
  return out;
}
