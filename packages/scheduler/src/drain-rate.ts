/**
 * How fast each pool's queue drains, measured: an exponentially weighted rate of dispatches per
 * second (each dispatch adds `1/τ` to a rate that decays with time constant τ), so a `queue_full`
 * rejection can tell the client when room is likely, from the depth ahead of it and this rate,
 * instead of a constant.
 */
export class DrainRate {
  readonly #tauMs: number;
  readonly #pools = new Map<string, { rate: number; atMs: number }>();

  /** @param tauMs time constant of the average, ms. @default 10000 */
  constructor(tauMs = 10_000) {
    this.#tauMs = tauMs;
  }

  /** Records one dispatch from `pool` at `nowMs`. */
  dispatched(pool: string, nowMs: number): void {
    const p = this.#pools.get(pool);
    if (p === undefined) {
      this.#pools.set(pool, { rate: 1 / this.#tauMs, atMs: nowMs });
      return;
    }
    p.rate = this.#decayed(p, nowMs) + 1 / this.#tauMs;
    p.atMs = Math.max(p.atMs, nowMs);
  }

  /** Dispatches per second from `pool` lately; 0 if none. */
  perSecond(pool: string, nowMs: number): number {
    const p = this.#pools.get(pool);
    return p === undefined ? 0 : this.#decayed(p, nowMs) * 1000;
  }

  /**
   * Seconds until `depth` requests ahead have drained at the measured rate, rounded up and clamped
   * to [`minS`, `maxS`]; `maxS` when nothing drains.
   */
  retryAfterS(pool: string, depth: number, nowMs: number, minS = 1, maxS = 60): number {
    const rate = this.perSecond(pool, nowMs);
    if (!(rate > 0)) return maxS;
    return Math.min(maxS, Math.max(minS, Math.ceil(depth / rate)));
  }

  #decayed(p: { rate: number; atMs: number }, nowMs: number): number {
    return p.rate * Math.exp(-Math.max(0, nowMs - p.atMs) / this.#tauMs);
  }
}
