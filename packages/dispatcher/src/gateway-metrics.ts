import { createHmac } from 'node:crypto';
import type { MetricsConfig } from '@fairway/core';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';

/**
 * How an admitted request ended: every request counted `admitted` is counted once more with
 * exactly one of these (`engine_rejected`: the engine refused it with a 4xx; `shutdown`: this
 * dispatcher stopped while it waited; `no_replica`: no replica of its pool took work while it
 * waited).
 */
export type EndOutcome =
  | 'completed'
  | 'failed'
  | 'engine_rejected'
  | 'cancelled'
  | 'timed_out'
  | 'no_replica'
  | 'shutdown';

/** The ends of admitted requests, in the order dashboards list them. */
export const END_OUTCOMES: readonly EndOutcome[] = [
  'completed',
  'failed',
  'engine_rejected',
  'cancelled',
  'timed_out',
  'no_replica',
  'shutdown',
];

/**
 * Outcome of a request at the gateway, a bounded label: refused before admission (`throttled`,
 * `rate_limited`, `rejected`, `unavailable`: no replica served its model when it arrived),
 * `admitted`, or one {@link EndOutcome}.
 */
export type RequestOutcome =
  | 'admitted'
  | 'throttled'
  | 'rate_limited'
  | 'rejected'
  | 'unavailable'
  | EndOutcome;

/** The outcome label of a request refused at admission with store/gateway code `code`. */
export function refusalOutcome(code: string): RequestOutcome {
  return code === 'throttled' ? 'throttled' : code.endsWith('_limited') ? 'rate_limited' : 'rejected';
}

/** A replica as this dispatcher sees it (registry, heartbeats, its own failure holds). */
export interface ReplicaGaugeView {
  readonly id: string;
  readonly pool: string;
  /** `suspect` (held out after a failed call), `stale` (silent) or the state it reported. */
  readonly state: string;
  /** 0–1. */
  readonly kvUsage: number;
  readonly running: number;
  readonly waiting: number;
}

/**
 * The gateway's Prometheus metrics. Label cardinality is bounded: tenants are the configured ones
 * (anything else is reported as `other`), pools and SLO classes come from config, store operations
 * from a fixed list. Tenant label values follow `metrics.tenantLabels`: the id, a keyed hash of it
 * or nothing. They are served on the operator port only.
 */
export class GatewayMetrics {
  readonly registry = new Registry();
  readonly #tenants: Set<string>;
  readonly #labels: MetricsConfig;
  /** Hashed labels by tenant, computed once each. */
  readonly #hashed = new Map<string, string>();
  readonly service: Counter<'tenant'>;
  readonly requests: Counter<'tenant' | 'outcome'>;
  readonly queueDepth: Gauge<'pool'>;
  /** Waiting requests this dispatcher holds per pool and band (lower bands are served first). */
  readonly bandDepth: Gauge<'pool' | 'band'>;
  readonly ttft: Histogram<'slo_class' | 'model'>;
  /** Time per output token after the first (streamed requests with two or more tokens). */
  readonly tpot: Histogram<'model'>;
  /** End-to-end latency of completed requests, arrival to last byte. */
  readonly latency: Histogram<'model'>;
  readonly inputTokens: Counter<'tenant' | 'model'>;
  readonly outputTokens: Counter<'tenant' | 'model'>;
  /** Refusals at admission by the store's reason (`throttled`, `rpm_limited`, `queue_full`, …). */
  readonly throttles: Counter<'tenant' | 'reason'>;
  /** Completed requests per SLO class, by whether they met its TTFT (and ATGT) target. */
  readonly slo: Counter<'slo_class' | 'attained'>;
  /** Each tenant's fair-share weight, to plot its share of service against. */
  readonly tenantWeight: Gauge<'tenant'>;
  readonly replicaKv: Gauge<'replica' | 'pool'>;
  readonly replicaRunning: Gauge<'replica' | 'pool'>;
  readonly replicaWaiting: Gauge<'replica' | 'pool'>;
  /** 1 for each replica's current state as this dispatcher sees it. */
  readonly replicaState: Gauge<'replica' | 'pool' | 'state'>;
  readonly overhead: Histogram<'stream'>;
  readonly storeLatency: Histogram<'op'>;
  readonly queueWait: Histogram<'slo_class'>;
  readonly inflight: Gauge<'state'>;
  readonly engineRetries: Counter;
  readonly moves: Counter;
  /** Requests a pool passed on to the next pool of their model's fallbacks (`models.fallbacks`). */
  readonly fallbacks: Counter<'from_pool' | 'to_pool' | 'reason'>;
  /**
   * 1 while the bus is connected; 0 while it is down and placement runs on the last known replica
   * states (refreshed by direct engine probes).
   */
  readonly busConnected: Gauge;
  /** Aladdin's desired replicas per pool, set by the control leader (`policy.scaling`). */
  readonly desiredReplicas: Gauge<'pool'>;
  readonly qlmEstimatorMs: Gauge<'model' | 'gpu' | 'tp' | 'phase'>;
  readonly placementSequences: Gauge<'replica'>;
  /** Blocks each replica's prefix cache holds, by its KV cache events, read on each scrape. */
  kvCachedBlocks: (() => Iterable<readonly [string, number]>) | undefined;
  readonly placementContextTokens: Gauge<'replica'>;
  /** What prefix-cache affinity did for each request with prefix keys this dispatcher placed. */
  readonly prefixAffinity: Counter<'pool' | 'outcome'>;

  /** @param labels how tenants are labelled. @default plain ids */
  constructor(tenants: Iterable<string>, labels: MetricsConfig = { tenantLabels: 'plain' }) {
    this.#tenants = new Set(tenants);
    this.#labels = labels;
    const registers = [this.registry];
    this.service = new Counter({
      name: 'fairway_tenant_service_total',
      help: 'Weighted service (cost units: input + 2x output by default) delivered per tenant',
      labelNames: ['tenant'],
      registers,
    });
    this.requests = new Counter({
      name: 'fairway_requests_total',
      help: 'Requests by tenant and outcome',
      labelNames: ['tenant', 'outcome'],
      registers,
    });
    this.engineRetries = new Counter({
      name: 'fairway_engine_retries_total',
      help: 'Engine calls that failed before anything reached the client and were sent to another replica',
      registers,
    });
    this.moves = new Counter({
      name: 'fairway_moves_total',
      help: "Requests taken out of an engine's queue, with nothing sent to the client yet, and placed again on a replica with room (policy.moves)",
      registers,
    });
    this.fallbacks = new Counter({
      name: 'fairway_fallbacks_total',
      help: 'Requests a pool passed on to the next pool of their model (models.fallbacks), by why: no_replica, queue_full, over_deadline',
      labelNames: ['from_pool', 'to_pool', 'reason'],
      registers,
    });
    this.prefixAffinity = new Counter({
      name: 'fairway_prefix_affinity_total',
      help: 'Requests with prefix keys this dispatcher placed, by what prefix-cache affinity did: hit (on the replica its prefix was sent to), bounded (that replica was over the load bound, full or gone), miss (no replica known for its prefix)',
      labelNames: ['pool', 'outcome'],
      registers,
    });
    this.busConnected = new Gauge({
      name: 'fairway_bus_connected',
      help: '1 while the bus (NATS) is connected; 0 while replica states are the last known ones (stale, probed directly)',
      registers,
    });
    this.busConnected.set(1);
    this.desiredReplicas = new Gauge({
      name: 'fairway_desired_replicas',
      help: "Replicas a pool needs for its arrival rate (Aladdin's n = ceil(k*r + c)), on the control leader",
      labelNames: ['pool'],
      registers,
    });
    this.qlmEstimatorMs = new Gauge({
      name: 'fairway_qlm_estimator_ms',
      help: "QLM's waiting-time estimator, on the control leader, per replica shape: decode ms per iteration of a full batch and prefill ms of a mean request (phase), the preset corrected by the speed the engines measured",
      labelNames: ['model', 'gpu', 'tp', 'phase'],
      registers,
    });
    const kvBlocks = new Gauge({
      name: 'fairway_kv_cached_blocks',
      help: "Where a pool places by the engines' KV cache events: the KV blocks this dispatcher knows each replica's prefix cache holds",
      labelNames: ['replica'],
      registers,
      collect: () => {
        kvBlocks.reset();
        for (const [replica, n] of this.kvCachedBlocks?.() ?? []) kvBlocks.set({ replica }, n);
      },
    });
    this.placementSequences = new Gauge({
      name: 'fairway_placement_sequences',
      help: 'Under placement aladdin: requests running on each replica as this dispatcher and the others report them',
      labelNames: ['replica'],
      registers,
    });
    this.placementContextTokens = new Gauge({
      name: 'fairway_placement_context_tokens',
      help: 'Under placement aladdin: KV tokens the reported requests on each replica hold now (prompt and output so far)',
      labelNames: ['replica'],
      registers,
    });
    this.queueDepth = new Gauge({
      name: 'fairway_queue_depth',
      help: 'Requests this dispatcher holds waiting for capacity, per pool',
      labelNames: ['pool'],
      registers,
    });
    this.bandDepth = new Gauge({
      name: 'fairway_queue_depth_by_band',
      help: 'Requests this dispatcher holds waiting for capacity, per pool and SLO band (0 is served first)',
      labelNames: ['pool', 'band'],
      registers,
    });
    this.ttft = new Histogram({
      name: 'fairway_time_to_first_token_seconds',
      help: 'Time from arrival at the gateway to the first token sent to the client',
      labelNames: ['slo_class', 'model'],
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 60, 300],
      registers,
    });
    this.tpot = new Histogram({
      name: 'fairway_time_per_output_token_seconds',
      help: 'Mean time between output tokens after the first, per streamed request of two or more tokens',
      labelNames: ['model'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.25, 0.5, 1],
      registers,
    });
    this.latency = new Histogram({
      name: 'fairway_request_duration_seconds',
      help: 'Time from arrival at the gateway to the last byte of a completed request',
      labelNames: ['model'],
      buckets: [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 300, 600],
      registers,
    });
    this.inputTokens = new Counter({
      name: 'fairway_input_tokens_total',
      help: 'Prompt tokens of finished requests (as the engine counted them), per tenant and model',
      labelNames: ['tenant', 'model'],
      registers,
    });
    this.outputTokens = new Counter({
      name: 'fairway_output_tokens_total',
      help: 'Output tokens delivered (as the engine counted them), per tenant and model',
      labelNames: ['tenant', 'model'],
      registers,
    });
    this.throttles = new Counter({
      name: 'fairway_throttles_total',
      help: 'Requests refused at admission, per tenant and reason (throttled, rpm_limited, tpm_limited, queue_full, …)',
      labelNames: ['tenant', 'reason'],
      registers,
    });
    this.slo = new Counter({
      name: 'fairway_slo_requests_total',
      help: "Completed requests per SLO class, by whether they met the class's TTFT (and ATGT) target",
      labelNames: ['slo_class', 'attained'],
      registers,
    });
    this.tenantWeight = new Gauge({
      name: 'fairway_tenant_weight',
      help: "Each tenant's fair-share weight (service is shared in proportion to it)",
      labelNames: ['tenant'],
      registers,
    });
    this.replicaKv = new Gauge({
      name: 'fairway_replica_kv_usage_ratio',
      help: "Each replica's KV-cache use (0-1) as this dispatcher last saw it",
      labelNames: ['replica', 'pool'],
      registers,
    });
    this.replicaRunning = new Gauge({
      name: 'fairway_replica_running_requests',
      help: 'Requests each replica runs, as this dispatcher last saw it',
      labelNames: ['replica', 'pool'],
      registers,
    });
    this.replicaWaiting = new Gauge({
      name: 'fairway_replica_waiting_requests',
      help: "Requests waiting in each replica's own queue, as this dispatcher last saw it",
      labelNames: ['replica', 'pool'],
      registers,
    });
    this.replicaState = new Gauge({
      name: 'fairway_replica_state',
      help: "1 for each replica's state as this dispatcher sees it (ready, draining, …, stale, suspect)",
      labelNames: ['replica', 'pool', 'state'],
      registers,
    });
    this.overhead = new Histogram({
      name: 'fairway_overhead_seconds',
      help: 'Time the gateway itself added to a request (auth, admission, dispatch, proxy setup)',
      labelNames: ['stream'],
      buckets: [0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1],
      registers,
    });
    this.storeLatency = new Histogram({
      name: 'fairway_store_latency_seconds',
      help: 'Latency of scheduling-store operations',
      labelNames: ['op'],
      buckets: [0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05],
      registers,
    });
    this.queueWait = new Histogram({
      name: 'fairway_queue_wait_seconds',
      help: 'Time a request waited at the gateway for replica capacity (0 when dispatched at once)',
      labelNames: ['slo_class'],
      buckets: [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
      registers,
    });
    this.inflight = new Gauge({
      name: 'fairway_requests_in_flight',
      help: 'Requests this dispatcher holds, waiting for capacity or running on a replica',
      labelNames: ['state'],
      registers,
    });
  }

  /**
   * The tenant label: for a configured tenant its id, or the first 12 hex digits of
   * HMAC-SHA256(labelKey, id) under `hashed` (stable per deployment, not reversible by guessing
   * ids without the key); `other` otherwise; empty (no label) under `none`.
   */
  tenantLabel(tenant: string): string {
    const { tenantLabels, labelKey } = this.#labels;
    if (tenantLabels === 'none') return '';
    if (!this.#tenants.has(tenant)) return 'other';
    if (tenantLabels === 'plain') return tenant;
    let label = this.#hashed.get(tenant);
    if (label === undefined) {
      label = createHmac('sha256', labelKey ?? '')
        .update(tenant)
        .digest('hex')
        .slice(0, 12);
      this.#hashed.set(tenant, label);
    }
    return label;
  }

  /**
   * Sets the per-replica gauges to the fleet as seen now; replicas that left are dropped (their
   * series end rather than hold their last value).
   */
  observeReplicas(replicas: readonly ReplicaGaugeView[]): void {
    for (const g of [this.replicaKv, this.replicaRunning, this.replicaWaiting, this.replicaState]) g.reset();
    for (const r of replicas) {
      const labels = { replica: r.id, pool: r.pool };
      this.replicaKv.set(labels, r.kvUsage);
      this.replicaRunning.set(labels, r.running);
      this.replicaWaiting.set(labels, r.waiting);
      this.replicaState.set({ ...labels, state: r.state }, 1);
    }
  }

  /** Sets the queue depth per pool and band (pools or bands that went away are dropped). */
  observeBands(
    depths: Iterable<{ readonly pool: string; readonly band: number; readonly depth: number }>,
  ): void {
    this.bandDepth.reset();
    for (const d of depths) this.bandDepth.set({ pool: d.pool, band: String(d.band) }, d.depth);
  }

  /** Sets the weight gauge of every tenant (none under `tenantLabels: none`, where they would collide). */
  observeWeights(weights: Iterable<readonly [string, number]>): void {
    if (this.#labels.tenantLabels === 'none') return;
    this.tenantWeight.reset();
    for (const [tenant, weight] of weights)
      this.tenantWeight.set({ tenant: this.tenantLabel(tenant) }, weight);
  }

  /** Adds Node.js process metrics (CPU, memory, event-loop lag, GC, handles): once per process. */
  collectProcessMetrics(): void {
    collectDefaultMetrics({ register: this.registry });
  }

  /** Adds a tenant to the bounded label set (admin events). */
  addTenant(tenant: string): void {
    this.#tenants.add(tenant);
  }
}
