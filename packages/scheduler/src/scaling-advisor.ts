import type { Clock } from '@fairway/core';
import { replicasForRate, type WorkerCountModel } from '@fairway/policy';
import { z } from 'zod';
import { GatewayError, GatewayErrorCode } from './errors.ts';

/**
 * A desired-replicas signal: the same fields as the bus's `desiredReplicas` message, so a
 * dispatcher publishes it as it is (the scheduler does not depend on the bus).
 */
export interface DesiredReplicasAdvice {
  readonly pool: string;
  readonly desired: number;
  /** Replicas the pool has now, when the caller says. */
  readonly current?: number | undefined;
  readonly reason: string;
  /** Clock time of the advice, ms. */
  readonly at: number;
}

/** Options of {@link ScalingAdvisor}. */
export interface ScalingAdvisorOptions {
  readonly pool: string;
  /** Worker-count model `n = ceil(k·r + c)` fitted by `fairway plan` (policy `fitWorkerCount`). */
  readonly model: WorkerCountModel;
  readonly clock: Clock;
  /** Window over which the arrival rate is measured, ms. @default 60000 */
  readonly windowMs?: number;
  /** Fewest replicas ever advised. @default 1 */
  readonly minReplicas?: number;
  /** Most replicas ever advised. @default unbounded */
  readonly maxReplicas?: number;
  /**
   * Called when the advice changes (and on the first one): publish it on the bus
   * (`desiredReplicas` subject of the pool). Errors are the caller's to handle. @default none
   */
  readonly publish?: ((advice: DesiredReplicasAdvice) => void) | undefined;
  /** Called with every advice: set the `fairway_desired_replicas{pool}` gauge. @default none */
  readonly gauge?: ((pool: string, desired: number) => void) | undefined;
}

const optionsSchema = z.object({
  pool: z.string().min(1),
  windowMs: z.number().positive().finite().optional(),
  minReplicas: z.number().int().nonnegative().optional(),
  maxReplicas: z.number().int().positive().optional(),
});

/**
 * Aladdin's scaling signal (section 5.2, Eq. 7): the pool's arrival rate over a sliding window
 * gives the replicas it needs, `ceil(k·r + c)` above the low-rate threshold and the measured
 * minimum below it, clamped to [min, max]. Pure apart from the injected clock and callbacks; a
 * dispatcher records arrivals and calls `advise` on a timer.
 */
export class ScalingAdvisor {
  readonly pool: string;
  readonly #model: WorkerCountModel;
  readonly #clock: Clock;
  readonly #windowMs: number;
  readonly #min: number;
  readonly #max: number;
  readonly #publish: ((advice: DesiredReplicasAdvice) => void) | undefined;
  readonly #gauge: ((pool: string, desired: number) => void) | undefined;
  readonly #arrivals: number[] = [];
  #head = 0;
  #last: number | undefined;

  /** @throws GatewayError (OPTIONS_INVALID) naming the bad field */
  constructor(options: ScalingAdvisorOptions) {
    const r = optionsSchema.safeParse(options);
    if (!r.success) {
      const fields = r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
      throw new GatewayError(
        GatewayErrorCode.OPTIONS_INVALID,
        options.pool ?? '?',
        `scaling advisor: ${fields}`,
        {
          cause: r.error,
        },
      );
    }
    this.pool = options.pool;
    this.#model = options.model;
    this.#clock = options.clock;
    this.#windowMs = options.windowMs ?? 60_000;
    this.#min = options.minReplicas ?? 1;
    this.#max = options.maxReplicas ?? Number.POSITIVE_INFINITY;
    this.#publish = options.publish;
    this.#gauge = options.gauge;
  }

  /** Records one arrival to the pool at the clock's time. */
  recordArrival(): void {
    this.#arrivals.push(this.#clock.now());
  }

  /** Arrivals per second over the window ending now. */
  rate(): number {
    const from = this.#clock.now() - this.#windowMs;
    while (this.#head < this.#arrivals.length && (this.#arrivals[this.#head] as number) <= from) this.#head++;
    if (this.#head > 1024 && this.#head * 2 > this.#arrivals.length) {
      this.#arrivals.splice(0, this.#head);
      this.#head = 0;
    }
    return ((this.#arrivals.length - this.#head) * 1000) / this.#windowMs;
  }

  /**
   * The replicas the pool needs for its current arrival rate; publishes the advice when it differs
   * from the last one and sets the gauge every time.
   * @param current replicas the pool has now, carried in the advice
   */
  advise(current?: number): DesiredReplicasAdvice {
    const rate = this.rate();
    const needed = replicasForRate(this.#model, rate);
    const desired = Math.min(this.#max, Math.max(this.#min, needed));
    const advice: DesiredReplicasAdvice = {
      pool: this.pool,
      desired,
      ...(current !== undefined ? { current } : {}),
      reason: `${rate.toFixed(2)} req/s over ${this.#windowMs / 1000} s needs ${needed} (n = ceil(${this.#model.k.toFixed(3)}·r + ${this.#model.c.toFixed(2)}))`,
      at: this.#clock.now(),
    };
    this.#gauge?.(this.pool, desired);
    if (this.#last !== desired) {
      this.#last = desired;
      this.#publish?.(advice);
    }
    return advice;
  }
}
