import { z } from 'zod';
import { FitError, parseInput } from '../errors.ts';
import { type FitQuality, leastSquares } from '../perf-model/least-squares.ts';

/** The fewest replicas that met every SLO at one arrival rate, from a simulated or measured run. */
export interface RatePoint {
  /** Arrival rate, requests per second. */
  readonly rate: number;
  /** Fewest replicas that met the SLOs at that rate. */
  readonly replicas: number;
}

/**
 * Aladdin's worker-count model (section 5.2, Eq. 7): `n = ceil(k·r + c)` above the low-rate
 * threshold `R`; at or below it, the most replicas measured at any rate up to the nearest measured
 * rate not below `r` (so more load never gets fewer replicas).
 */
export interface WorkerCountModel {
  /** Replicas per (request/s). */
  readonly k: number;
  readonly c: number;
  /** Low-rate threshold `R`, requests per second. */
  readonly thresholdRate: number;
  /** Measured points at or below the threshold, by rate. */
  readonly lowRate: readonly RatePoint[];
  /** Fit over the points above the threshold. */
  readonly quality: FitQuality;
}

/** Options of {@link fitWorkerCount}. */
export interface WorkerCountFitOptions {
  /**
   * Low-rate threshold `R`, requests per second. When absent, the smallest measured rate above
   * which the linear fit predicts every point within `maxResidual` replicas (three points at least).
   */
  readonly thresholdRate?: number | undefined;
  /** Largest miss, in replicas, the automatic threshold tolerates on any point above it. @default 1 */
  readonly maxResidual?: number;
  /**
   * Raise `c` so that `ceil(k·r + c)` is never below a measured point above the threshold
   * (a conservative envelope instead of the least-squares line). @default false
   */
  readonly envelope?: boolean;
}

const pointsSchema = z
  .array(z.object({ rate: z.number().nonnegative().finite(), replicas: z.number().int().positive() }))
  .min(2);

function fitAbove(points: readonly RatePoint[], threshold: number) {
  const above = points.filter((p) => p.rate > threshold);
  if (above.length < 2) return undefined;
  try {
    return {
      above,
      fit: leastSquares(
        above.map((p) => [p.rate, 1]),
        above.map((p) => p.replicas),
        'worker count',
      ),
    };
  } catch (err) {
    if (err instanceof FitError) return undefined;
    throw err;
  }
}

/** Fits {@link WorkerCountModel} from (rate, fewest replicas) points. */
export function fitWorkerCount(
  points: readonly RatePoint[],
  options: WorkerCountFitOptions = {},
): WorkerCountModel {
  const sorted = [...parseInput('fitWorkerCount', pointsSchema, points)].sort((a, b) => a.rate - b.rate);
  const maxResidual = options.maxResidual ?? 1;
  let threshold = options.thresholdRate;
  let chosen = threshold === undefined ? undefined : fitAbove(sorted, threshold);
  if (threshold === undefined) {
    const candidates = [Number.NEGATIVE_INFINITY, ...sorted.map((p) => p.rate)];
    for (const r of candidates) {
      const f = fitAbove(sorted, r);
      if (!f || f.above.length < 3) break;
      const [k, c] = f.fit.coefficients as [number, number];
      if (f.above.every((p) => Math.abs(k * p.rate + c - p.replicas) <= maxResidual)) {
        threshold = r;
        chosen = f;
        break;
      }
    }
    if (threshold === undefined) {
      threshold = Number.NEGATIVE_INFINITY;
      chosen = fitAbove(sorted, threshold);
    }
  }
  if (!chosen) {
    throw new FitError(
      'worker count',
      sorted.length,
      `needs two distinct rates above the threshold ${threshold}`,
    );
  }
  const [k, c0] = chosen.fit.coefficients as [number, number];
  let c = c0;
  if (options.envelope) {
    for (const p of chosen.above) c = Math.max(c, p.replicas - k * p.rate);
  }
  return {
    k,
    c,
    thresholdRate: threshold as number,
    lowRate: sorted.filter((p) => p.rate <= (threshold as number)),
    quality: chosen.fit.quality,
  };
}

/**
 * Replicas needed for an arrival rate (requests per second) under a fitted model: `ceil(k·r + c)`
 * above the threshold, the measured minimum below it (made monotone in the rate); never fewer than one, and never fewer than
 * what the highest low-rate measurement needed once above the threshold.
 */
export function replicasForRate(model: WorkerCountModel, rate: number): number {
  const low = model.lowRate;
  const lowMax = low.reduce((m, p) => Math.max(m, p.replicas), 1);
  if (rate <= model.thresholdRate && low.length > 0) {
    // Monotone in the rate: the most any measured rate up to the next measured one needed.
    const next = low.find((p) => p.rate >= rate)?.rate ?? Number.POSITIVE_INFINITY;
    return low.filter((p) => p.rate <= next).reduce((m, p) => Math.max(m, p.replicas), 1);
  }
  // Guard against float noise turning an exact integer into the next one up.
  const linear = Math.ceil(model.k * rate + model.c - 1e-9);
  return Math.max(linear, lowMax, 1);
}
