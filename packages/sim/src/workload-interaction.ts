/**
 * Multi-call interactions (FairServe section 3.3): one user request that an application turns into
 * several LLM calls. The arrival process gives when interactions start; this module says how many
 * calls each has and when the follow-up calls arrive.
 */
import { type LengthSpec, lengthSampler, type Rng, searchCdf } from '@fairway/core';

/**
 * FairServe Table 2 ("Distribution of graph sizes"): 73.22% of interactions are a single call,
 * 26.09% have 2–10 calls, 0.50% 11–20 and 0.11% 21–30 (the rarer, larger buckets are dropped and
 * the rest renormalised). Sizes inside a bucket are uniform.
 */
export const FAIRSERVE_SIZE_BUCKETS: readonly {
  readonly share: number;
  readonly min: number;
  readonly max: number;
}[] = [
  { share: 0.7322, min: 1, max: 1 },
  { share: 0.2609, min: 2, max: 10 },
  { share: 0.005, min: 11, max: 20 },
  { share: 0.0011, min: 21, max: 30 },
];

/** Number of calls per interaction: a length distribution, or FairServe's measured mix. */
export type InteractionSizeSpec = LengthSpec | { readonly kind: 'fairserve' };

/** A duration distribution, seconds. */
export type DurationSpec =
  | { readonly kind: 'fixed'; readonly value: number }
  | { readonly kind: 'uniform'; readonly min: number; readonly max: number }
  | { readonly kind: 'exponential'; readonly mean: number };

/**
 * When the next call of an interaction arrives.
 *
 * The generator is open-loop (arrivals are fixed before the simulation runs), so it cannot wait for
 * the previous call to really finish. `after-expected-completion` (the default) places the next call
 * after the previous call's *expected* completion — `ttftS + outputTokens·tpotS` — plus a think time,
 * which keeps a chain of calls from overlapping at typical load; `fixed-gap` spaces calls by a
 * constant gap regardless of their length.
 */
export type FollowUpSpec =
  | {
      readonly mode: 'after-expected-completion';
      /** Think / tool time between calls. @default { kind: 'fixed', value: 1 } */
      readonly thinkS?: DurationSpec | undefined;
      /** Expected time to first token, seconds. @default 0.5 */
      readonly ttftS?: number | undefined;
      /** Expected time per output token, seconds. @default 0.05 */
      readonly tpotS?: number | undefined;
    }
  | { readonly mode: 'fixed-gap'; readonly gapS: number }
  /**
   * Closed loop: the next call is sent when the previous call's answer is complete, after a think
   * time (the runner waits for the real completion; the expected one only orders the workload).
   */
  | { readonly mode: 'after-completion'; readonly thinkS?: DurationSpec | undefined };

/** Interaction settings of a stream. */
export interface InteractionSpec {
  readonly size: InteractionSizeSpec;
  /** @default { mode: 'after-expected-completion' } */
  readonly followUp?: FollowUpSpec | undefined;
}

/** Draws interaction sizes from a spec. */
export function interactionSizeSampler(spec: InteractionSizeSpec): (rng: Rng) => number {
  if (spec.kind !== 'fairserve') {
    const s = lengthSampler(spec);
    return (rng) => s.sample(rng);
  }
  const total = FAIRSERVE_SIZE_BUCKETS.reduce((a, b) => a + b.share, 0);
  let acc = 0;
  const cdf = FAIRSERVE_SIZE_BUCKETS.map((b) => {
    acc += b.share / total;
    return acc;
  });
  cdf[cdf.length - 1] = 1;
  return (rng) => {
    const b = FAIRSERVE_SIZE_BUCKETS[searchCdf(cdf, rng.next())]!;
    return rng.int(b.min, b.max);
  };
}

/** Draws one duration, seconds. */
export function sampleDuration(spec: DurationSpec, rng: Rng): number {
  switch (spec.kind) {
    case 'fixed':
      return spec.value;
    case 'uniform':
      return spec.min + (spec.max - spec.min) * rng.next();
    case 'exponential':
      return rng.exponential(1 / spec.mean);
  }
}

/**
 * Seconds between a call with `outputTokens` arriving and the next call of its interaction, and
 * the think time inside that gap (0 for `fixed-gap`). A closed-loop
 * follow-up waits the think time after the real completion; the gap (expected completion plus
 * think time, with the default TTFT and TPOT) only orders the workload.
 */
export function followUpTiming(
  spec: FollowUpSpec | undefined,
  outputTokens: number,
  rng: Rng,
): { readonly gapS: number; readonly thinkS: number } {
  if (spec?.mode === 'fixed-gap') return { gapS: spec.gapS, thinkS: 0 };
  const expected = spec?.mode === 'after-completion' ? undefined : spec;
  const ttft = expected?.ttftS ?? 0.5;
  const tpot = expected?.tpotS ?? 0.05;
  const thinkS = spec?.thinkS ? sampleDuration(spec.thinkS, rng) : 1;
  return { gapS: ttft + outputTokens * tpot + thinkS, thinkS };
}
