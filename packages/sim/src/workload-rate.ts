/**
 * Time-varying request rates and the arrival processes that follow them. A rate schedule is a list
 * of segments with a linearly changing rate; arrivals are drawn as a unit-rate renewal process in
 * "operational time" Λ(t) = ∫r and mapped back through Λ⁻¹, so the same uniform, Poisson or Gamma
 * process serves constant rates, linear ramps (VTC Figure 9), phase schedules (Figure 10) and on/off
 * patterns (Figures 5–6) alike.
 */
import { type Rng, sampleGamma } from '@fairway/core';

/** How inter-arrival gaps are drawn (in operational time, where the mean gap is 1). */
export type ArrivalProcess =
  /** Evenly spaced, with a random phase (VTC's "uniform" suites). */
  | 'uniform'
  /** Exponential gaps (CV 1). */
  | 'poisson'
  /** Gamma gaps with the given coefficient of variation (burstiness); CV 1 is Poisson. */
  | 'gamma';

/** One phase of a schedule: a constant `rate`, or a linear ramp `from` → `to`, for `durationS`. */
export interface RatePhase {
  /** Seconds. */
  readonly durationS: number;
  /** Requests per second. */
  readonly rate?: number | undefined;
  readonly from?: number | undefined;
  readonly to?: number | undefined;
}

/** Arrivals of one stream: a process and a rate that is constant, ramped, phased and/or on/off. */
export interface ArrivalSpec {
  readonly process: ArrivalProcess;
  /** Constant rate, requests per second. */
  readonly rate?: number | undefined;
  /** Gamma only: coefficient of variation of inter-arrival gaps. @default 1 */
  readonly cv?: number | undefined;
  /** Linear ramp of the rate, req/s, from the stream's start to its end. */
  readonly ramp?: { readonly from: number; readonly to: number } | undefined;
  /** Consecutive phases from the stream's start; the rate is 0 after the last one. */
  readonly phases?: readonly RatePhase[] | undefined;
  /**
   * Periodic on/off mask, counted from the stream's start: `onS` seconds sending, `offS` seconds
   * silent (VTC's on/off suites use 60/60). `offFirst` starts with the silent half.
   */
  readonly onOff?:
    | { readonly onS: number; readonly offS: number; readonly offFirst?: boolean | undefined }
    | undefined;
}

/** A segment of a rate schedule: the rate goes linearly from `r0` to `r1` over [t0, t1). */
export interface RateSegment {
  readonly t0: number;
  readonly t1: number;
  readonly r0: number;
  readonly r1: number;
}

/** Compiles an arrival spec into rate segments over [startS, endS), on/off mask applied. */
export function rateSegments(spec: ArrivalSpec, startS: number, endS: number): RateSegment[] {
  const base: RateSegment[] = [];
  if (spec.phases) {
    let t = startS;
    for (const p of spec.phases) {
      if (t >= endS) break;
      const t1 = Math.min(endS, t + p.durationS);
      const r0 = p.rate ?? p.from ?? 0;
      const r1full = p.rate ?? p.to ?? r0;
      // A phase cut by the stream's end keeps its slope.
      const r1 = r0 + ((r1full - r0) * (t1 - t)) / p.durationS;
      base.push({ t0: t, t1, r0, r1 });
      t = t1;
    }
  } else if (spec.ramp) {
    base.push({ t0: startS, t1: endS, r0: spec.ramp.from, r1: spec.ramp.to });
  } else {
    const r = spec.rate ?? 0;
    base.push({ t0: startS, t1: endS, r0: r, r1: r });
  }
  if (!spec.onOff) return base.filter((s) => s.t1 > s.t0);
  const { onS, offS, offFirst } = spec.onOff;
  const period = onS + offS;
  const out: RateSegment[] = [];
  for (const s of base) {
    // Walk the on-windows that overlap the segment.
    const firstK = Math.floor((s.t0 - startS) / period) - 1;
    for (let k = Math.max(0, firstK); ; k++) {
      const onStart = startS + k * period + (offFirst ? offS : 0);
      const onEnd = onStart + onS;
      if (onStart >= s.t1) break;
      const a = Math.max(s.t0, onStart);
      const b = Math.min(s.t1, onEnd);
      if (b > a) out.push({ t0: a, t1: b, r0: rateAt(s, a), r1: rateAt(s, b) });
    }
  }
  return out;
}

function rateAt(s: RateSegment, t: number): number {
  return s.t1 === s.t0 ? s.r0 : s.r0 + ((s.r1 - s.r0) * (t - s.t0)) / (s.t1 - s.t0);
}

/** Expected number of arrivals Λ over the segments. */
export function expectedArrivals(segments: readonly RateSegment[]): number {
  let n = 0;
  for (const s of segments) n += ((s.r0 + s.r1) / 2) * (s.t1 - s.t0);
  return n;
}

/**
 * Draws arrival times (seconds, ascending) for the spec over [startS, endS): unit-mean gaps from
 * the process, mapped through the inverse cumulative rate.
 */
export function arrivalTimes(spec: ArrivalSpec, startS: number, endS: number, rng: Rng): number[] {
  const segments = rateSegments(spec, startS, endS);
  const cv = spec.process === 'poisson' ? 1 : (spec.cv ?? 1);
  const shape = 1 / (cv * cv);
  const nextGap = (): number => {
    switch (spec.process) {
      case 'uniform':
        return 1;
      case 'poisson':
        return rng.exponential(1);
      case 'gamma':
        return sampleGamma(rng, shape, cv * cv);
    }
  };
  const out: number[] = [];
  // Operational time of the next arrival; uniform starts at a random phase in [0, 1).
  let u = spec.process === 'uniform' ? rng.next() : nextGap();
  let acc = 0; // Λ at the start of segment `i`
  for (const s of segments) {
    const len = s.t1 - s.t0;
    const mass = ((s.r0 + s.r1) / 2) * len;
    const b = len > 0 ? (s.r1 - s.r0) / len : 0;
    while (u < acc + mass) {
      const x = u - acc;
      // Solve r0·τ + b·τ²/2 = x; this form is stable for b = 0 and for either sign of b.
      const den = s.r0 + Math.sqrt(Math.max(0, s.r0 * s.r0 + 2 * b * x));
      const tau = x > 0 && den > 0 ? (2 * x) / den : 0;
      out.push(Math.min(s.t1, s.t0 + tau));
      u += nextGap();
    }
    acc += mass;
  }
  return out;
}
