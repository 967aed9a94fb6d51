import { createHmac } from 'node:crypto';
import type { MetricsConfig } from '@fairway/core';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';

/** Outcome of a request at the gateway, a bounded label. */
export type RequestOutcome =
  | 'admitted'
  | 'throttled'
  | 'rate_limited'
  | 'rejected'
  | 'completed'
  | 'failed'
  | 'cancelled'
  | 'timed_out'
  | 'no_replica';

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
  readonly ttft: Histogram<'slo_class'>;
  readonly overhead: Histogram<'stream'>;
  readonly storeLatency: Histogram<'op'>;
  readonly queueWait: Histogram<'slo_class'>;
  readonly inflight: Gauge<'state'>;
  readonly engineRetries: Counter;
  /**
   * 1 while the bus is connected; 0 while it is down and placement runs on the last known replica
   * states (refreshed by direct engine probes).
   */
  readonly busConnected: Gauge;
  /** Aladdin's desired replicas per pool, set by the control leader (`policy.scaling`). */
  readonly desiredReplicas: Gauge<'pool'>;

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
    this.queueDepth = new Gauge({
      name: 'fairway_queue_depth',
      help: 'Requests this dispatcher holds waiting for capacity, per pool',
      labelNames: ['pool'],
      registers,
    });
    this.ttft = new Histogram({
      name: 'fairway_time_to_first_token_seconds',
      help: 'Time from arrival at the gateway to the first token sent to the client',
      labelNames: ['slo_class'],
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 60, 300],
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

  /** Adds a tenant to the bounded label set (admin events). */
  addTenant(tenant: string): void {
    this.#tenants.add(tenant);
  }
}
