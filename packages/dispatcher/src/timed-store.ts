import type { Clock } from '@fairway/core';
import type {
  AdmitAndDispatchInput,
  AdmitAndDispatchResult,
  AdmitInput,
  AdmitResult,
  ChargeItem,
  DispatchInput,
  DispatchResult,
  QueueSnapshot,
  RequestLocations,
  RequeueInput,
  RestoreInput,
  RestoreResult,
  SchedulingStore,
  SettleAndDispatchInput,
  SettleAndDispatchResult,
  SettleInput,
  UsageQuery,
  UsageRow,
} from '@fairway/store';
import type { Histogram } from 'prom-client';

/**
 * A {@link SchedulingStore} that records the latency of every operation in a histogram labelled by
 * operation name (a fixed set), and otherwise passes each call through unchanged.
 */
export class TimedStore implements SchedulingStore {
  readonly #inner: SchedulingStore;
  readonly #hist: Histogram<'op'>;
  readonly #timer: Clock;

  /** @param timer a monotonic millisecond clock */
  constructor(inner: SchedulingStore, hist: Histogram<'op'>, timer: Clock) {
    this.#inner = inner;
    this.#hist = hist;
    this.#timer = timer;
    const fused = inner.admitAndDispatch?.bind(inner);
    if (fused !== undefined)
      this.admitAndDispatch = (input) => this.#time('admit_and_dispatch', fused(input));
    const settled = inner.settleAndDispatch?.bind(inner);
    if (settled !== undefined)
      this.settleAndDispatch = (input) => this.#time('settle_and_dispatch', settled(input));
    const requeue = inner.requeue?.bind(inner);
    if (requeue !== undefined) this.requeue = (input) => this.#time('requeue', requeue(input));
    const restore = inner.restore?.bind(inner);
    if (restore !== undefined) this.restore = (input) => this.#time('restore', restore(input));
    const adoptEpoch = inner.adoptEpoch?.bind(inner);
    if (adoptEpoch !== undefined) this.adoptEpoch = () => this.#time('adopt_epoch', adoptEpoch());
    const usage = inner.usage?.bind(inner);
    if (usage !== undefined) this.usage = (query) => this.#time('usage', usage(query));
  }

  async #time<T>(op: string, call: Promise<T>): Promise<T> {
    const t0 = this.#timer.now();
    try {
      return await call;
    } finally {
      this.#hist.observe({ op }, (this.#timer.now() - t0) / 1000);
    }
  }

  /** The inner store's epoch. */
  get epoch(): string | undefined {
    return this.#inner.epoch;
  }

  admit(input: AdmitInput): Promise<AdmitResult> {
    return this.#time('admit', this.#inner.admit(input));
  }
  /** Present exactly when the inner store has it, so the gateway's fallback still applies. */
  readonly admitAndDispatch?: (input: AdmitAndDispatchInput) => Promise<AdmitAndDispatchResult>;
  /** Present exactly when the inner store has it (engine retries and evictions re-queue with it). */
  readonly requeue?: (input: RequeueInput) => Promise<boolean>;
  /** Present exactly when the inner store has it (a dispatcher repairs a lost state with it). */
  readonly restore?: (input: RestoreInput) => Promise<RestoreResult>;
  /** Present exactly when the inner store has it. */
  readonly adoptEpoch?: () => Promise<void>;
  /** Present exactly when the inner store has it (the admin API reads usage with it). */
  readonly usage?: (query: UsageQuery) => Promise<readonly UsageRow[]>;
  /** Present exactly when the inner store has it. */
  readonly settleAndDispatch?: (input: SettleAndDispatchInput) => Promise<SettleAndDispatchResult>;
  dispatch(input: DispatchInput): Promise<DispatchResult> {
    return this.#time('dispatch', this.#inner.dispatch(input));
  }
  charge(items: readonly ChargeItem[]): Promise<void> {
    return this.#time('charge', this.#inner.charge(items));
  }
  settle(input: SettleInput): Promise<boolean> {
    return this.#time('settle', this.#inner.settle(input));
  }
  cancel(id: string, nowMs: number): Promise<boolean> {
    return this.#time('cancel', this.#inner.cancel(id, nowMs));
  }
  renewOwner(owner: string, nowMs: number, leaseMs: number): Promise<void> {
    return this.#time('renew', this.#inner.renewOwner(owner, nowMs, leaseMs));
  }
  reclaim(
    nowMs: number,
  ): Promise<{ readonly dropped: readonly string[]; readonly released: readonly string[] }> {
    return this.#time('reclaim', this.#inner.reclaim(nowMs));
  }
  predictedOutput(flow: string): Promise<number | undefined> {
    return this.#time('predicted_output', this.#inner.predictedOutput(flow));
  }
  reserved(replica: string): Promise<{ readonly tokens: number; readonly seqs: number }> {
    return this.#time('reserved', this.#inner.reserved(replica));
  }
  locate(ids: readonly string[]): Promise<RequestLocations> {
    return this.#time('locate', this.#inner.locate(ids));
  }
  snapshot(pool: string, band: number): Promise<QueueSnapshot> {
    return this.#time('snapshot', this.#inner.snapshot(pool, band));
  }
  close(): Promise<void> {
    return this.#inner.close();
  }
}
