/**
 * Accumulated service as a function of time. Each request's cost is spread uniformly over its
 * service interval (as the VTC artifact's `get_service_over_time` does), so a tenant's accumulated
 * service A(t) is piecewise linear; {@link ServiceCurve} evaluates it exactly at any time.
 */

/** A request's contribution: `cost` spread uniformly over [start, end] (a point mass if end ≤ start). */
export interface ServiceSpan {
  readonly start: number;
  readonly end: number;
  readonly cost: number;
}

/** Piecewise-linear accumulated service A(t) of one tenant. */
export class ServiceCurve {
  readonly #times: Float64Array;
  readonly #values: Float64Array;
  readonly #slopes: Float64Array;
  /** A(∞): the tenant's total service. */
  readonly total: number;

  constructor(spans: readonly ServiceSpan[]) {
    // Breakpoints: slope changes and jumps, merged by time.
    const events: { t: number; dSlope: number; jump: number }[] = [];
    for (const s of spans) {
      if (s.cost === 0) continue;
      if (s.end - s.start <= 1e-9) events.push({ t: s.start, dSlope: 0, jump: s.cost });
      else {
        const rate = s.cost / (s.end - s.start);
        events.push({ t: s.start, dSlope: rate, jump: 0 }, { t: s.end, dSlope: -rate, jump: 0 });
      }
    }
    events.sort((a, b) => a.t - b.t);
    const times: number[] = [];
    const values: number[] = [];
    const slopes: number[] = [];
    let value = 0;
    let slope = 0;
    let last = Number.NEGATIVE_INFINITY;
    for (const e of events) {
      if (e.t !== last) {
        if (times.length > 0) value += slope * (e.t - last);
        times.push(e.t);
        values.push(value);
        slopes.push(slope);
        last = e.t;
      }
      value += e.jump;
      slope += e.dSlope;
      values[values.length - 1] = value;
      slopes[slopes.length - 1] = slope;
    }
    this.#times = Float64Array.from(times);
    this.#values = Float64Array.from(values);
    // Rounding can leave a tiny residual slope after the last end; there is none.
    if (slopes.length > 0) slopes[slopes.length - 1] = 0;
    this.#slopes = Float64Array.from(slopes);
    this.total = value;
  }

  /** Service accumulated over (−∞, t]. */
  at(t: number): number {
    const times = this.#times;
    if (times.length === 0 || t < times[0]!) return 0;
    let lo = 0;
    let hi = times.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (times[mid]! <= t) lo = mid;
      else hi = mid - 1;
    }
    return this.#values[lo]! + this.#slopes[lo]! * (t - times[lo]!);
  }

  /** Service received in [a, b]. */
  between(a: number, b: number): number {
    return this.at(b) - this.at(a);
  }
}
