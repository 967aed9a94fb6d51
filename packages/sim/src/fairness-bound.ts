/**
 * VTC's fairness bound (Sheng et al., OSDI 2024, Theorem 4.4): for any two clients continuously
 * backlogged over an interval, VTC keeps the difference of the service they receive in it at most
 * `2·max(w_in·L_in, w_out·M)`, where `L_in` is the largest prompt of a request and `M` "the maximum
 * number of tokens that can be fitted in a running batch" (section 4.1.1) — the KV-cache capacity in
 * tokens, which bounds the prompt and output tokens of everything running at once. With gateways
 * sharing counters the running batch is the whole fleet's, so `M` sums the replicas' capacities.
 */
import { type CostFunction, chargedPromptTokens, linearCost, type RequestDescriptor } from '@fairway/core';
import { type EngineConfig, EngineModel } from '@fairway/perf';
import type { RequestRecord, SimRun } from './records.ts';

/** The bound and the quantities it is made of. */
export interface VtcFairnessBound {
  /** 2·max(w_in·L_in, w_out·M), cost units. */
  readonly bound: number;
  /** Largest prompt of any request, tokens. */
  readonly lInput: number;
  /** KV tokens the fleet's running batches can hold (Σ over replicas of blocks × block size). */
  readonly m: number;
  readonly wIn: number;
  readonly wOut: number;
}

/**
 * Computes VTC Theorem 4.4's bound for a fleet and a workload under the linear cost
 * `w_in·n_in + w_out·n_out`. `M` is read from the engine models themselves (the KV blocks they
 * allocate times the block size), so it is exactly the capacity the simulated engines enforce.
 * @param wIn weight of a prompt token. @default 1
 * @param wOut weight of an output token. @default 2
 */
export function vtcFairnessBound(
  engines: readonly { readonly config: EngineConfig }[],
  arrivals: readonly RequestDescriptor[],
  wIn = 1,
  wOut = 2,
): VtcFairnessBound {
  let m = 0;
  for (const e of engines) m += new EngineModel(e.config).stats().kvCapacityTokens;
  let lInput = 0;
  for (const r of arrivals) if (r.inputTokens > lInput) lInput = r.inputTokens;
  return { bound: 2 * Math.max(wIn * lInput, wOut * m), lInput, m, wIn, wOut };
}

/** Where the largest service gap between two backlogged flows was found. */
export interface BackloggedGap {
  /** max over flow pairs and sub-intervals [t1, t2) in which both are backlogged of |W_f/w_f − W_g/w_g|. */
  readonly gap: number;
  /** The pair and interval that reach it; absent when no two flows are ever backlogged together. */
  readonly where?: {
    readonly flows: readonly [string, string];
    readonly fromS: number;
    readonly toS: number;
  };
}

/**
 * A flow's service as VTC's counters see it (Theorem 4.4, footnote 5): the prompt's cost lands when
 * the request is dispatched, its output's cost as the tokens are generated. Tokens of one request
 * come at the engine's step rate, so its output cost is spread evenly from its first token to its
 * last (or the end of the run). Piecewise linear with jumps; `left(t)` is the service in [0, t).
 */
class CounterService {
  /** Breakpoints, ascending and distinct. */
  readonly times: number[] = [];
  readonly #jump: number[] = [];
  /** Slope in (times[k], times[k+1]). */
  readonly #slope: number[] = [];
  /** Service in [0, times[k]). */
  readonly #before: number[] = [];

  constructor(
    records: readonly RequestRecord[],
    durationS: number,
    cost: CostFunction,
    weight: number,
    cachedWeight: number,
  ) {
    const ev: { t: number; jump: number; dSlope: number }[] = [];
    for (const r of records) {
      if (r.rejected || r.dispatchS === undefined || r.dispatchS > durationS) continue;
      // The prompt at its computed cost: tokens the prefix cache served count `cachedWeight`.
      const prompt = chargedPromptTokens(
        { inputTokens: r.req.inputTokens, outputTokens: r.generated, cachedTokens: r.cachedTokens },
        cachedWeight,
      );
      const input = cost.cost(prompt, 0) / weight;
      ev.push({ t: r.dispatchS, jump: input, dSlope: 0 });
      const output = (cost.cost(prompt, r.generated) - cost.cost(prompt, 0)) / weight;
      if (output === 0 || r.firstTokenS === undefined) continue;
      const end = Math.min(r.finishS ?? durationS, durationS);
      if (end - r.firstTokenS <= 1e-9) ev.push({ t: r.firstTokenS, jump: output, dSlope: 0 });
      else {
        const rate = output / (end - r.firstTokenS);
        ev.push({ t: r.firstTokenS, jump: 0, dSlope: rate }, { t: end, jump: 0, dSlope: -rate });
      }
    }
    ev.sort((a, b) => a.t - b.t);
    let value = 0;
    let slope = 0;
    for (const e of ev) {
      const k = this.times.length - 1;
      if (k < 0 || e.t !== this.times[k]) {
        if (k >= 0) value += slope * (e.t - this.times[k]!);
        this.times.push(e.t);
        this.#before.push(value);
        this.#jump.push(0);
        this.#slope.push(slope);
      }
      const j = this.times.length - 1;
      this.#jump[j]! += e.jump;
      value += e.jump;
      slope += e.dSlope;
      this.#slope[j] = slope;
    }
  }

  /** Service in [0, t) (without a jump at t). */
  left(t: number): number {
    const k = this.#last(t, false);
    if (k < 0) return 0;
    return this.#before[k]! + this.#jump[k]! + this.#slope[k]! * (t - this.times[k]!);
  }

  /** Service in [0, t] (with a jump at t). */
  right(t: number): number {
    const k = this.#last(t, true);
    if (k < 0) return 0;
    return this.#before[k]! + this.#jump[k]! + this.#slope[k]! * (t - this.times[k]!);
  }

  /** Index of the last breakpoint before t (or at t when `inclusive`), −1 if none. */
  #last(t: number, inclusive: boolean): number {
    let lo = 0;
    let hi = this.times.length;
    while (lo < hi) {
      const m = (lo + hi) >>> 1;
      const x = this.times[m]!;
      if (x < t || (inclusive && x === t)) lo = m + 1;
      else hi = m;
    }
    return lo - 1;
  }
}

/**
 * Maximal intervals [a, b) in which a flow has a request waiting at the gateway (arrived, not yet
 * dispatched or rejected) — VTC's Definition 4.1 of backlogged, with the gateway's queue as Q.
 */
export function backlogIntervals(records: readonly RequestRecord[], durationS: number): [number, number][] {
  const ev: [number, number][] = [];
  for (const r of records) {
    const leave = Math.min(r.rejected ? r.rejected.atS : (r.dispatchS ?? durationS), durationS);
    if (leave > r.arrivalS) ev.push([r.arrivalS, 1], [leave, -1]);
  }
  // Arrivals before departures at the same instant: a flow whose next request arrives as the
  // previous one leaves is backlogged throughout.
  ev.sort((a, b) => a[0] - b[0] || b[1] - a[1]);
  const out: [number, number][] = [];
  let waiting = 0;
  let start = 0;
  for (const [t, d] of ev) {
    if (waiting === 0 && d > 0) start = t;
    waiting += d;
    if (waiting === 0 && t > start) out.push([start, t]);
  }
  return out;
}

/**
 * Checks VTC Theorem 4.4 over every sub-interval, exactly: for every pair of flows f, g and every
 * [t1, t2) in which both are backlogged throughout, the largest |W_f(t1,t2)/w_f − W_g(t1,t2)/w_g|.
 * Within a stretch [a, b) where both are backlogged, the largest difference over its sub-intervals
 * is max − min of D(t) = W_f(0,t)/w_f − W_g(0,t)/w_g over t ∈ [a, b]; D is piecewise linear, so its
 * extremes lie at the two flows' breakpoints (dispatches, first and last tokens), each taken
 * before and after its jump. Cost O(n log n) per pair in the number of requests.
 * @param cost service measure. @default linear, w_in = 1, w_out = 2 (the paper's)
 * @param cachedTokenWeight weight of a prompt token the prefix cache served (`RequestRecord.cachedTokens`),
 *   as the counters charged it. @default 1 (every prompt token counts in full)
 */
export function backloggedServiceGap(
  run: SimRun,
  options: {
    readonly cost?: CostFunction;
    readonly fromS?: number;
    readonly cachedTokenWeight?: number;
  } = {},
): BackloggedGap {
  const cost = options.cost ?? linearCost();
  const cachedWeight = options.cachedTokenWeight ?? 1;
  const fromS = options.fromS ?? 0;
  const T = run.durationS;
  const byFlow = new Map<string, RequestRecord[]>();
  for (const r of run.records) {
    const list = byFlow.get(r.req.tenant);
    if (list) list.push(r);
    else byFlow.set(r.req.tenant, [r]);
  }
  const flows = [...byFlow.keys()].sort();
  const service = flows.map(
    (id) => new CounterService(byFlow.get(id)!, T, cost, run.tenantWeights[id] ?? 1, cachedWeight),
  );
  const backlog = flows.map((id) =>
    backlogIntervals(byFlow.get(id)!, T)
      .map(([a, b]): [number, number] => [Math.max(a, fromS), b])
      .filter(([a, b]) => b > a),
  );
  let best: BackloggedGap = { gap: 0 };
  for (let i = 0; i < flows.length; i++) {
    for (let j = i + 1; j < flows.length; j++) {
      const f = service[i]!;
      const g = service[j]!;
      const bi = backlog[i]!;
      const bj = backlog[j]!;
      let p = 0;
      let q = 0;
      while (p < bi.length && q < bj.length) {
        const a = Math.max(bi[p]![0], bj[q]![0]);
        const b = Math.min(bi[p]![1], bj[q]![1]);
        if (b > a) {
          // D at a (before a's jump: W(a, ·) includes it), at b (before: [·, b) excludes it) and on
          // both sides of every breakpoint inside.
          let lo = { v: f.left(a) - g.left(a), t: a };
          let hi = lo;
          const visit = (t: number, v: number): void => {
            if (v < lo.v) lo = { v, t };
            if (v > hi.v) hi = { v, t };
          };
          for (const s of [f, g])
            for (let k = firstAfter(s.times, a); k < s.times.length && s.times[k]! < b; k++) {
              const t = s.times[k]!;
              visit(t, f.left(t) - g.left(t));
              visit(t, f.right(t) - g.right(t));
            }
          visit(b, f.left(b) - g.left(b));
          if (hi.v - lo.v > best.gap)
            best = {
              gap: hi.v - lo.v,
              where: {
                flows: [flows[i]!, flows[j]!],
                fromS: Math.min(lo.t, hi.t),
                toS: Math.max(lo.t, hi.t),
              },
            };
        }
        if (bi[p]![1] < bj[q]![1]) p++;
        else q++;
      }
    }
  }
  return best;
}

/** Index of the first element ≥ t in an ascending array. */
function firstAfter(xs: readonly number[], t: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const m = (lo + hi) >>> 1;
    if (xs[m]! < t) lo = m + 1;
    else hi = m;
  }
  return lo;
}
