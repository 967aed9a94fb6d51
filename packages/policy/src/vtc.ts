import {
  type CostFunction,
  chargedPromptTokens,
  createRng,
  DEFAULT_CACHED_TOKEN_WEIGHT,
  linearCost,
  type RequestDescriptor,
  type Usage,
} from '@fairway/core';
import { CachedShareHistory } from './cached-share.ts';
import { PolicyInputError } from './errors.ts';
import type { LiftMode, OrderingPolicy } from './ordering.ts';

/** Where VTC takes a request's output length from when it is dispatched (VTC section 4.4). */
export type OutputPrediction =
  /** Nothing is predicted: output is charged only as it streams (plain VTC, Algorithm 2). */
  | 'none'
  /**
   * Mean of the flow's last five outputs (`SchedulingStore.predictedOutput`), VTC(predict); a flow
   * without history is priced at {@link VtcOptions.expectedOutput}.
   */
  | 'history'
  /** The true output length (`RequestDescriptor.outputTokens`), VTC(oracle). */
  | 'oracle'
  /**
   * The true output length with a uniform relative error of ±{@link VtcOptions.noise}, drawn per
   * request from a seeded RNG: VTC Table 5's "VTC (±50%)" row (appendix B.3).
   */
  | 'noisy-oracle';

/** Options of {@link vtcPolicy}. */
export interface VtcOptions {
  /** Cost of serving `h(n_in, n_out)` (VTC section 4.2). @default linearCost() (1, 2) */
  readonly cost?: CostFunction;
  /** Counter lift when a flow becomes backlogged; `none` makes the policy LCF. @default 'vtc' */
  readonly lift?: LiftMode;
  /** Weight of a tenant: its counter grows by cost ÷ weight (weighted VTC, section 4.3). @default 1 */
  readonly weightOf?: (tenant: string) => number;
  /** Output-length prediction charged at dispatch and corrected as tokens stream. @default 'none' */
  readonly prediction?: OutputPrediction;
  /**
   * Output tokens predicted for a flow with no finished request yet (`history` only). Every flow
   * is then charged for its in-flight output from its first request, as it is once it has
   * history; without a prior, the first requests of each flow would be charged only as they
   * stream and flows would switch to predicted charging at different moments.
   * @default the request's `max_tokens` (the most it can cost; the excess is refunded at settle)
   */
  readonly expectedOutput?: number;
  /** Relative error range of `noisy-oracle`: predictions are uniform in output·(1 ± noise). @default 0.5 */
  readonly noise?: number;
  /** Seed of `noisy-oracle`'s errors; a request's error depends only on the seed and its id. @default 0 */
  readonly seed?: number;
  /**
   * Weight of a prompt token the engine served from its prefix cache, relative to one it
   * prefilled (0–1), or a weight per request (by its model's pool). The hit is known only from
   * the engine's usage, so the dispatch charge predicts it (`predictCached`) and settlement
   * corrects it to the engine's count. @default DEFAULT_CACHED_TOKEN_WEIGHT (0.1)
   */
  readonly cachedTokenWeight?: number | ((req: RequestDescriptor) => number);
  /**
   * Whether the dispatch charge predicts the prompt's cached tokens from the flow's recent share
   * ({@link CachedShareHistory}, learned from the engines' usage as requests settle). Without it a
   * request is charged its whole prompt until it settles, which, with many long cached prompts in
   * flight, holds a flow's counter far above its service meanwhile. @default true
   */
  readonly predictCached?: boolean;
  /** Policy name in reports. @default derived from the options */
  readonly name?: string;
}

/** The cached-token weight of a request under a policy option (a number or a function of it). */
export function cachedWeightOf(
  option: number | ((req: RequestDescriptor) => number) | undefined,
  req: RequestDescriptor,
): number {
  if (option === undefined) return DEFAULT_CACHED_TOKEN_WEIGHT;
  return checkCachedWeight(typeof option === 'number' ? option : option(req));
}

function checkCachedWeight(w: number): number {
  if (!(w >= 0 && w <= 1))
    throw new PolicyInputError('cachedTokenWeight', [
      { path: 'cachedTokenWeight', message: `must be in [0, 1], got ${w}` },
    ]);
  return w;
}

/**
 * The Virtual Token Counter family (VTC paper, Algorithm 2 and section 4): the backlogged tenant
 * with the least counter is served next; counters grow by the cost of served tokens divided by the
 * tenant's weight, input at dispatch and output as it streams. With a prediction, the predicted
 * output is charged at dispatch, output beyond it as it streams, and the excess refunded at the
 * end (Algorithm 3). Pass the same `predictedOutput` to `dispatchCost` and `outputCost`.
 */
export function vtcPolicy(options: VtcOptions = {}): OrderingPolicy {
  const cost = options.cost ?? linearCost();
  const lift = options.lift ?? 'vtc';
  const prediction = options.prediction ?? 'none';
  const weightOf = options.weightOf;
  const weight = (tenant: string): number => {
    if (weightOf === undefined) return 1;
    const w = weightOf(tenant);
    if (!(w > 0) || !Number.isFinite(w)) {
      throw new PolicyInputError('vtcPolicy', [
        { path: `weights.${tenant}`, message: `must be a positive number, got ${w}` },
      ]);
    }
    return w;
  };
  const expected = options.expectedOutput;
  if (expected !== undefined && !(expected >= 0 && Number.isFinite(expected)))
    throw new PolicyInputError('vtcPolicy', [
      { path: 'expectedOutput', message: `must be a non-negative number of tokens, got ${expected}` },
    ]);
  const noise = options.noise ?? 0.5;
  if (!(noise >= 0 && noise <= 1))
    throw new PolicyInputError('vtcPolicy', [{ path: 'noise', message: `must be in [0, 1], got ${noise}` }]);
  const seed = options.seed ?? 0;
  if (typeof options.cachedTokenWeight === 'number') checkCachedWeight(options.cachedTokenWeight);
  const predicted = (req: RequestDescriptor, history: number | undefined): number => {
    switch (prediction) {
      case 'none':
        return 0;
      case 'oracle':
        return clip(req.outputTokens ?? history ?? 0, req.maxTokens);
      case 'history':
        return clip(history ?? expected ?? req.maxTokens, req.maxTokens);
      case 'noisy-oracle': {
        // As the artifact (`--predict-range`): not clipped to max_tokens, so errors stay symmetric.
        const out = req.outputTokens ?? history ?? 0;
        return Math.max(0, out * (1 + noise * (2 * requestUniform(seed, req.id) - 1)));
      }
    }
  };
  const cachedHistory = (options.predictCached ?? true) ? new CachedShareHistory() : undefined;
  /** The prompt as charged at dispatch: its cached tokens, known or the flow's predicted share, at the weight. */
  const promptAtDispatch = (req: RequestDescriptor): number => {
    const known = req.cachedPromptTokens;
    if (known === undefined && cachedHistory === undefined) return req.inputTokens;
    const cached = known ?? (cachedHistory as CachedShareHistory).predict(req.tenant, req.inputTokens);
    if (cached === 0) return req.inputTokens;
    return req.inputTokens - (1 - cachedWeightOf(options.cachedTokenWeight, req)) * cached;
  };
  const base = lift === 'none' ? 'lcf' : 'vtc';
  const variant = VARIANT_SUFFIX[prediction];
  const weighted = weightOf !== undefined ? '-weighted' : '';
  return {
    name: options.name ?? `${base}${weighted}${variant}`,
    mode: 'fair',
    lift,
    flowOf: (req) => req.tenant,
    score: (req) => req.arrivalMs,
    dispatchCost: (req, history) =>
      cost.cost(promptAtDispatch(req), predicted(req, history)) / weight(req.tenant),
    outputCost: (req, before, after, history) => {
      const p = predicted(req, history);
      const from = Math.max(before, p);
      const to = Math.max(after, p);
      if (to <= from) return 0;
      return (cost.cost(req.inputTokens, to) - cost.cost(req.inputTokens, from)) / weight(req.tenant);
    },
    // The engine's usage settles the prompt too: admission only estimated it, and only the engine
    // knows which of its tokens came from the prefix cache.
    finalCost: (req, usage: Usage) =>
      cost.cost(
        chargedPromptTokens(usage, cachedWeightOf(options.cachedTokenWeight, req)),
        usage.outputTokens,
      ) / weight(req.tenant),
    ...(cachedHistory
      ? { settled: (req: RequestDescriptor, usage: Usage) => cachedHistory.observe(req.tenant, usage) }
      : {}),
  };
}

const VARIANT_SUFFIX: Readonly<Record<OutputPrediction, string>> = {
  none: '',
  history: '-predict',
  oracle: '-oracle',
  'noisy-oracle': '-noisy-oracle',
};

/**
 * Uniform in [0, 1) for one request, the same on every call and every dispatcher: a seeded RNG
 * keyed by a well-mixed hash of (seed, id). (`Rng.fork` is not enough: labels that differ in a
 * digit, like consecutive request ids, give strongly correlated first draws.)
 */
function requestUniform(seed: number, id: string): number {
  let h = 0x811c9dc5 ^ seed;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193);
  // murmur3's finaliser: every input bit reaches every output bit.
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return createRng((h ^ (h >>> 16)) >>> 0).next();
}

function clip(p: number, maxTokens: number): number {
  return Math.max(0, Math.min(p, maxTokens));
}

/** Least Counter First: VTC's counters without the lift (the VTC paper's LCF baseline, section 5.1). */
export function lcfPolicy(cost?: CostFunction): OrderingPolicy {
  return vtcPolicy({ ...(cost ? { cost } : {}), lift: 'none' });
}

/** Weighted VTC (VTC section 4.3): tenant `t` gets a share proportional to `weightOf(t)`. */
export function weightedVtcPolicy(weightOf: (tenant: string) => number, cost?: CostFunction): OrderingPolicy {
  return vtcPolicy({ ...(cost ? { cost } : {}), weightOf });
}
