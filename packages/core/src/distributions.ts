import type { Rng } from './rng.ts';

/**
 * Token-length distributions for workload generators. Every sampler draws from an injected
 * {@link Rng}, so a seed replays the same lengths; results are integers ≥ 1.
 */
export type LengthSpec =
  /** Always `value` tokens. */
  | { readonly kind: 'fixed'; readonly value: number }
  /** Uniform integer in [min, max] (inclusive). */
  | { readonly kind: 'uniform'; readonly min: number; readonly max: number }
  /**
   * Lognormal, given either by its `mean` and log-space `sigma`, or by its `median` and 90th
   * percentile `p90`; optionally clipped to [min, max].
   */
  | {
      readonly kind: 'lognormal';
      readonly mean?: number | undefined;
      readonly sigma?: number | undefined;
      readonly median?: number | undefined;
      readonly p90?: number | undefined;
      readonly min?: number | undefined;
      readonly max?: number | undefined;
    }
  /** Zipf over the integers [min, max] with exponent `s`: P(k) ∝ (k − min + 1)^−s. */
  | { readonly kind: 'zipf'; readonly min?: number | undefined; readonly max: number; readonly s: number }
  /** Resamples uniformly from observed values (e.g. a trace column). */
  | { readonly kind: 'empirical'; readonly values: readonly number[] };

/** A seeded length sampler built from a {@link LengthSpec}. */
export interface LengthSampler {
  /** Draws one length (integer ≥ 1). */
  sample(rng: Rng): number;
  /** Expected value of the distribution (after clipping and rounding, approximately). */
  readonly mean: number;
  /** Largest value the sampler can return, when bounded. */
  readonly max: number | undefined;
}

/** z such that Φ(z) = 0.9, to turn a median/p90 pair into a lognormal sigma. */
const Z90 = 1.2815515655446004;

/** Builds a sampler; throws a `RangeError` naming the bad parameter when the spec is inconsistent. */
export function lengthSampler(spec: LengthSpec): LengthSampler {
  switch (spec.kind) {
    case 'fixed': {
      const v = Math.max(1, Math.round(spec.value));
      return { sample: () => v, mean: v, max: v };
    }
    case 'uniform': {
      const lo = Math.max(1, Math.round(spec.min));
      const hi = Math.round(spec.max);
      if (hi < lo) throw new RangeError(`uniform: max (${spec.max}) must be ≥ min (${spec.min})`);
      return { sample: (rng) => rng.int(lo, hi), mean: (lo + hi) / 2, max: hi };
    }
    case 'lognormal':
      return lognormalSampler(spec);
    case 'zipf':
      return zipfSampler(spec.min ?? 1, spec.max, spec.s);
    case 'empirical': {
      const values = spec.values.map((v) => Math.max(1, Math.round(v)));
      if (values.length === 0) throw new RangeError('empirical: values must not be empty');
      let sum = 0;
      let max = 1;
      for (const v of values) {
        sum += v;
        if (v > max) max = v;
      }
      return { sample: (rng) => values[rng.int(0, values.length - 1)]!, mean: sum / values.length, max };
    }
  }
}

function lognormalSampler(spec: Extract<LengthSpec, { kind: 'lognormal' }>): LengthSampler {
  let mu: number;
  let sigma: number;
  if (spec.median !== undefined && spec.p90 !== undefined) {
    if (spec.p90 <= spec.median) throw new RangeError('lognormal: p90 must be greater than median');
    mu = Math.log(spec.median);
    sigma = (Math.log(spec.p90) - mu) / Z90;
  } else if (spec.mean !== undefined && spec.sigma !== undefined) {
    sigma = spec.sigma;
    // E[X] = exp(mu + sigma²/2) for a lognormal.
    mu = Math.log(spec.mean) - (sigma * sigma) / 2;
  } else {
    throw new RangeError('lognormal: give either mean and sigma, or median and p90');
  }
  const lo = Math.max(1, spec.min ?? 1);
  const hi = spec.max ?? Number.POSITIVE_INFINITY;
  if (hi < lo) throw new RangeError(`lognormal: max (${spec.max}) must be ≥ min (${lo})`);
  const clip = (x: number) => Math.min(hi, Math.max(lo, Math.round(x)));
  return {
    sample: (rng) => clip(Math.exp(mu + sigma * rng.normal())),
    mean: Math.min(hi, Math.max(lo, Math.exp(mu + (sigma * sigma) / 2))),
    max: Number.isFinite(hi) ? hi : undefined,
  };
}

function zipfSampler(min: number, max: number, s: number): LengthSampler {
  const lo = Math.max(1, Math.round(min));
  const hi = Math.round(max);
  if (hi < lo) throw new RangeError(`zipf: max (${max}) must be ≥ min (${min})`);
  const cdf = zipfCdf(hi - lo + 1, s);
  let mean = 0;
  let prev = 0;
  for (let k = 0; k < cdf.length; k++) {
    mean += (lo + k) * (cdf[k]! - prev);
    prev = cdf[k]!;
  }
  return { sample: (rng) => lo + searchCdf(cdf, rng.next()), mean, max: hi };
}

/** Cumulative probabilities of a Zipf law over ranks 1..n with exponent `s` (P(k) ∝ k^−s). */
export function zipfCdf(n: number, s: number): Float64Array {
  const cdf = new Float64Array(n);
  let acc = 0;
  for (let k = 1; k <= n; k++) {
    acc += k ** -s;
    cdf[k - 1] = acc;
  }
  for (let k = 0; k < n; k++) cdf[k] = cdf[k]! / acc;
  cdf[n - 1] = 1;
  return cdf;
}

/** Index of the first entry of `cdf` that is ≥ `u` (binary search). */
export function searchCdf(cdf: ArrayLike<number>, u: number): number {
  let lo = 0;
  let hi = cdf.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (cdf[mid]! >= u) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/**
 * Gamma(shape, scale) sample by Marsaglia and Tsang's method (ACM TOMS 2000), with the
 * `U^(1/shape)` boost for shape < 1. Mean is shape·scale, CV is 1/√shape.
 */
export function sampleGamma(rng: Rng, shape: number, scale: number): number {
  if (shape < 1) {
    const u = rng.next();
    return sampleGamma(rng, shape + 1, scale) * (u === 0 ? Number.MIN_VALUE : u) ** (1 / shape);
  }
  const d = shape - 1 / 3;
  const c = 1 / Math.sqrt(9 * d);
  for (;;) {
    let x: number;
    let v: number;
    do {
      x = rng.normal();
      v = 1 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const u = rng.next();
    if (u < 1 - 0.0331 * x * x * x * x) return d * v * scale;
    if (Math.log(u) < 0.5 * x * x + d * (1 - v + Math.log(v))) return d * v * scale;
  }
}
