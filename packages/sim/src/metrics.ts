/**
 * Metrics of a simulation run, computed the way the VTC artifact (Ying1123/VTC-artifact,
 * `fair_bench/plot/visualize.py` and `plot_revision.py`) computes them, so numbers compare with the
 * VTC paper's Tables 2–6: service is `cost(input, output)` (default `input + 2·output`, VTC section
 * 5.1) spread uniformly over each request's service interval; service rates are taken in 60 s
 * windows; the "service difference" of a window is Σ_j min(max_k y_k − y_j, |r_j − y_j|) (y = service
 * rate, r = cost-weighted request rate; VTC section 5.1, Table 2 caption); Max/Avg/Diff Var are the
 * max, mean and population variance of that series over the artifact's 19 ticks.
 */
import type { CostFunction, SloClass } from '@fairway/core';
import { DEFAULT_SLO_CLASSES, linearCost } from '@fairway/core';
import { backloggedServiceGap } from './fairness-bound.ts';
import { ServiceCurve, type ServiceSpan } from './metrics-curve.ts';
import type { RequestRecord, SimRun } from './records.ts';

/** Options of {@link computeMetrics}; defaults reproduce the VTC artifact. */
export interface MetricsOptions {
  /** Width of the service-rate window, seconds (the paper's 2T). @default 60 */
  readonly windowS?: number | undefined;
  /** Seconds skipped at the start before fairness is measured. @default 30 */
  readonly warmupS?: number | undefined;
  /**
   * Ticks of the fairness table: window centres at warmup + (duration − warmup)·i/ticks for
   * i = 1 … ticks − 1 (the artifact's `num_x = 20`, first tick dropped). @default 20
   */
  readonly fairnessTicks?: number | undefined;
  /** Step of the plotted time series and of the backlogged-pair accounting, seconds. @default 3 */
  readonly seriesStepS?: number | undefined;
  /**
   * Start of a request's service interval. The brief and the scheduler's charging start at
   * dispatch; the artifact measured from the first token (the end of prefill). @default 'dispatch'
   */
  readonly serviceStart?: 'dispatch' | 'first-token' | undefined;
  /** Service cost of (input, output) tokens. @default linearCost() — 1·input + 2·output */
  readonly cost?: CostFunction | undefined;
  /**
   * Weight of a prompt token the prefix cache served in the backlogged service gap
   * (`accumulatedMaxDiff`), as the counters charged it. @default 1
   */
  readonly cachedTokenWeight?: number | undefined;
  /** SLO classes for attainment. @default DEFAULT_SLO_CLASSES */
  readonly sloClasses?: readonly SloClass[] | undefined;
}

/** Summary statistics of a sample; `undefined` fields when the sample is empty. */
export interface Distribution {
  readonly count: number;
  readonly mean: number | undefined;
  readonly p50: number | undefined;
  readonly p90: number | undefined;
  readonly p99: number | undefined;
  readonly max: number | undefined;
}

/** Per-tenant results. */
export interface TenantMetrics {
  readonly id: string;
  readonly weight: number;
  readonly arrived: number;
  readonly completed: number;
  readonly rejected: number;
  /** Total service received in the run, cost units (input + 2·output by default). */
  readonly service: number;
  /** Tokens processed in the run (prefilled input of started requests, generated output). */
  readonly inputTokens: number;
  readonly outputTokens: number;
  readonly ttftS: Distribution;
  readonly tpotS: Distribution;
  readonly e2eS: Distribution;
  readonly preemptions: number;
}

/** SLO attainment of one class: TTFT within target (and ATGT, if the class sets one). */
export interface SloAttainment {
  readonly sloClass: string;
  readonly ttftTargetS: number;
  /** Requests whose outcome is known: met, missed, or rejected; excludes those still in time at the end. */
  readonly requests: number;
  readonly met: number;
  /** met / requests, or undefined when there are none. */
  readonly attainment: number | undefined;
  /** Requests with no first token at the end whose deadline lies beyond it (not in `requests`). */
  readonly pending: number;
  /**
   * Requests the engine refused because prompt plus `max_tokens` exceed the model's context or the
   * prompt never fits in its KV cache (in `requests`, as misses): no replica like it serves them.
   */
  readonly refused: number;
}

/** Time series for plots (the VTC paper's figures 3–10). */
export interface MetricSeries {
  /** Sample times, seconds. */
  readonly t: readonly number[];
  /** Tenant id → service rate (cost units/s) in the window centred at each time. */
  readonly serviceRate: Readonly<Record<string, readonly number[]>>;
  /** Tenant id → accumulated service since warm-up, at each time ≥ warm-up (null before). */
  readonly accumulatedService: Readonly<Record<string, readonly (number | null)[]>>;
  /** max − min over tenants of accumulated service since warm-up (the artifact's absolute difference). */
  readonly accumulatedDiff: readonly (number | null)[];
  /** Tenant id → mean TTFT of requests whose first token falls in the window (null if none). */
  readonly ttft: Readonly<Record<string, readonly (number | null)[]>>;
}

/** Fairness results. */
export interface FairnessMetrics {
  /** Max over ticks of the windowed service difference (VTC Table 2 "Max Diff"). */
  readonly maxDiff: number;
  /** Mean over ticks ("Avg Diff"). */
  readonly avgDiff: number;
  /** Population variance over ticks ("Diff Var"). */
  readonly diffVar: number;
  /** The windowed service difference at each fairness tick. */
  readonly diffSeries: readonly number[];
  /** Centres of the fairness ticks, seconds. */
  readonly diffTicks: readonly number[];
  /**
   * Largest |W_i(t1,t2) − W_j(t1,t2)| (weight-normalised) over pairs of tenants and every
   * sub-interval [t1, t2) after warm-up in which both were backlogged throughout — VTC Theorem 4.4's
   * quantity, computed exactly by {@link backloggedServiceGap} (input charged at dispatch, output as
   * it streams). Equals the artifact's accumulated difference when all tenants stay backlogged.
   */
  readonly accumulatedMaxDiff: number;
  /** Jain's index of weight-normalised total service over tenants that sent requests. */
  readonly jain: number;
}

/** Everything computed from one run. */
export interface SimMetrics {
  readonly durationS: number;
  readonly requests: {
    readonly arrived: number;
    readonly completed: number;
    readonly rejected: number;
    readonly dispatched: number;
  };
  readonly throughput: {
    /** (prefilled input + generated output tokens) / duration, the VTC paper's throughput. */
    readonly tokensPerS: number;
    readonly outputTokensPerS: number;
    readonly completedPerS: number;
  };
  readonly fairness: FairnessMetrics;
  readonly latency: {
    readonly ttftS: Distribution;
    /** Time per output token after the first (vLLM's TPOT). */
    readonly tpotS: Distribution;
    /** Aladdin's average token generation time, t_decode / (l_out − 1) (Aladdin section 2); same formula as TPOT. */
    readonly atgtS: Distribution;
    readonly e2eS: Distribution;
  };
  readonly preemptions: number;
  readonly engineSteps: number;
  readonly kv: { readonly meanUsage: number | undefined; readonly maxUsage: number | undefined };
  readonly slo: readonly SloAttainment[];
  readonly tenants: readonly TenantMetrics[];
  readonly series: MetricSeries;
}

/** Orders ids with embedded numbers numerically (`client2` before `client10`), independent of locale. */
export function naturalCompare(a: string, b: string): number {
  const re = /(\d+)|(\D+)/g;
  const pa = a.match(re) ?? [];
  const pb = b.match(re) ?? [];
  for (let i = 0; i < Math.min(pa.length, pb.length); i++) {
    const x = pa[i]!;
    const y = pb[i]!;
    if (x === y) continue;
    const nx = /^\d/.test(x);
    const ny = /^\d/.test(y);
    if (nx && ny) return Number(x) - Number(y) || x.length - y.length;
    return x < y ? -1 : 1;
  }
  return pa.length - pb.length;
}

/** Percentile with linear interpolation between order statistics (numpy's default). */
export function percentile(sorted: readonly number[], p: number): number | undefined {
  if (sorted.length === 0) return undefined;
  const rank = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (rank - lo);
}

/** Summary statistics of a sample. */
export function distribution(values: readonly number[]): Distribution {
  const s = [...values].sort((a, b) => a - b);
  let sum = 0;
  for (const v of s) sum += v;
  return {
    count: s.length,
    mean: s.length ? sum / s.length : undefined,
    p50: percentile(s, 50),
    p90: percentile(s, 90),
    p99: percentile(s, 99),
    max: s.at(-1),
  };
}

/** Jain's fairness index (Σx)² / (n·Σx²); 1 when all equal, 1/n when one takes everything. */
export function jainIndex(xs: readonly number[]): number {
  if (xs.length === 0) return 1;
  let s = 0;
  let s2 = 0;
  for (const x of xs) {
    s += x;
    s2 += x * x;
  }
  return s2 === 0 ? 1 : (s * s) / (xs.length * s2);
}

/**
 * The VTC service difference of one window: Σ_j min(max_k y_k − y_j, |r_j − y_j|), where y_j is
 * tenant j's service rate and r_j its cost-weighted request rate in the window (artifact
 * `get_service_diff_over_time`). A tenant served less than the top one counts only as far as it
 * was also served less than it asked for.
 */
export function windowServiceDifference(service: readonly number[], requested: readonly number[]): number {
  let max = Number.NEGATIVE_INFINITY;
  for (const y of service) if (y > max) max = y;
  let sum = 0;
  service.forEach((y, j) => {
    sum += Math.min(max - y, Math.abs((requested[j] ?? 0) - y));
  });
  return sum;
}

function serviceSpan(
  r: RequestRecord,
  durationS: number,
  start: 'dispatch' | 'first-token',
  cost: CostFunction,
): ServiceSpan | undefined {
  if (r.rejected || r.dispatchS === undefined) return undefined;
  const s = start === 'first-token' ? (r.firstTokenS ?? r.dispatchS) : r.dispatchS;
  const end = Math.min(r.finishS ?? durationS, durationS);
  // A request still prefilling at the cut has been charged its input, as the scheduler does.
  return { start: Math.min(s, end), end, cost: cost.cost(r.req.inputTokens, r.generated) };
}

/** Computes every metric of a run. Pure: the same run and options give the same numbers. */
export function computeMetrics(run: SimRun, options: MetricsOptions = {}): SimMetrics {
  const windowS = options.windowS ?? 60;
  const warmupS = Math.min(options.warmupS ?? 30, run.durationS);
  const ticks = options.fairnessTicks ?? 20;
  const step = options.seriesStepS ?? 3;
  const cost = options.cost ?? linearCost();
  const startMode = options.serviceStart ?? 'dispatch';
  const T = run.durationS;

  // Tenants: declared ones first (stable order), then any seen only in records.
  const tenantIds = [...Object.keys(run.tenantWeights)];
  for (const r of run.records) if (!tenantIds.includes(r.req.tenant)) tenantIds.push(r.req.tenant);
  tenantIds.sort(naturalCompare);
  const weight = (id: string) => run.tenantWeights[id] ?? 1;
  const byTenant = new Map<string, RequestRecord[]>(tenantIds.map((id) => [id, []]));
  for (const r of run.records) byTenant.get(r.req.tenant)!.push(r);
  const active = tenantIds.filter((id) => byTenant.get(id)!.length > 0);

  const curves = new Map<string, ServiceCurve>();
  const demand = new Map<string, ServiceCurve>();
  for (const id of tenantIds) {
    const recs = byTenant.get(id)!;
    const spans: ServiceSpan[] = [];
    const asked: ServiceSpan[] = [];
    for (const r of recs) {
      const sp = serviceSpan(r, T, startMode, cost);
      if (sp) spans.push(sp);
      if (!r.rejected)
        asked.push({
          start: r.arrivalS,
          end: r.arrivalS,
          cost: cost.cost(r.req.inputTokens, r.req.outputTokens ?? r.generated),
        });
    }
    curves.set(id, new ServiceCurve(spans));
    demand.set(id, new ServiceCurve(asked));
  }

  // Fairness table: the artifact's ticks and windows, weight-normalised.
  const diffTicks: number[] = [];
  const diffSeries: number[] = [];
  for (let i = 1; i < ticks; i++) {
    const c = warmupS + ((T - warmupS) * i) / ticks;
    const l = c - windowS / 2;
    const r = c + windowS / 2;
    const y = active.map((id) => curves.get(id)!.between(l, r) / windowS / weight(id));
    // Requests arriving exactly at l count (the artifact's window is closed).
    const q = active.map((id) => demand.get(id)!.between(l - 1e-9, r) / windowS / weight(id));
    diffTicks.push(c);
    diffSeries.push(windowServiceDifference(y, q));
  }
  const maxDiff = diffSeries.length ? Math.max(...diffSeries) : 0;
  const avgDiff = diffSeries.length ? diffSeries.reduce((a, b) => a + b, 0) / diffSeries.length : 0;
  const diffVar = diffSeries.length
    ? diffSeries.reduce((a, b) => a + (b - avgDiff) ** 2, 0) / diffSeries.length
    : 0;

  const series = buildSeries(run, tenantIds, curves, byTenant, { windowS, warmupS, step });
  const accumulatedMaxDiff = backloggedServiceGap(run, {
    cost,
    fromS: warmupS,
    ...(options.cachedTokenWeight === undefined ? {} : { cachedTokenWeight: options.cachedTokenWeight }),
  }).gap;
  const jain = jainIndex(active.map((id) => curves.get(id)!.total / weight(id)));

  // Requests, throughput, latency.
  let arrived = 0;
  let completed = 0;
  let rejected = 0;
  let dispatched = 0;
  let inTok = 0;
  let outTok = 0;
  const ttft: number[] = [];
  const tpot: number[] = [];
  const e2e: number[] = [];
  const tenants: TenantMetrics[] = [];
  for (const id of tenantIds) {
    const recs = byTenant.get(id)!;
    const t = { arrived: 0, completed: 0, rejected: 0, inTok: 0, outTok: 0, preemptions: 0 };
    const tt: number[] = [];
    const tp: number[] = [];
    const te: number[] = [];
    for (const r of recs) {
      t.arrived++;
      t.preemptions += r.preemptions;
      if (r.rejected) t.rejected++;
      if (r.dispatchS !== undefined && !r.rejected) dispatched++;
      if (r.firstTokenS !== undefined) {
        t.inTok += r.req.inputTokens;
        tt.push(r.firstTokenS - r.arrivalS);
      }
      t.outTok += r.generated;
      if (r.finishS !== undefined) {
        t.completed++;
        te.push(r.finishS - r.arrivalS);
        if (r.firstTokenS !== undefined && r.generated > 1)
          tp.push((r.finishS - r.firstTokenS) / (r.generated - 1));
      }
    }
    arrived += t.arrived;
    completed += t.completed;
    rejected += t.rejected;
    inTok += t.inTok;
    outTok += t.outTok;
    ttft.push(...tt);
    tpot.push(...tp);
    e2e.push(...te);
    tenants.push({
      id,
      weight: weight(id),
      arrived: t.arrived,
      completed: t.completed,
      rejected: t.rejected,
      service: curves.get(id)!.total,
      inputTokens: t.inTok,
      outputTokens: t.outTok,
      ttftS: distribution(tt),
      tpotS: distribution(tp),
      e2eS: distribution(te),
      preemptions: t.preemptions,
    });
  }
  const tpotDist = distribution(tpot);

  let kvSum = 0;
  let kvMax: number | undefined;
  for (const s of run.samples) {
    kvSum += s.kvUsage;
    if (kvMax === undefined || s.kvUsage > kvMax) kvMax = s.kvUsage;
  }

  return {
    durationS: T,
    requests: { arrived, completed, rejected, dispatched },
    throughput: {
      tokensPerS: T > 0 ? (inTok + outTok) / T : 0,
      outputTokensPerS: T > 0 ? outTok / T : 0,
      completedPerS: T > 0 ? completed / T : 0,
    },
    fairness: { maxDiff, avgDiff, diffVar, diffSeries, diffTicks, accumulatedMaxDiff, jain },
    latency: { ttftS: distribution(ttft), tpotS: tpotDist, atgtS: tpotDist, e2eS: distribution(e2e) },
    preemptions: run.preemptions,
    engineSteps: run.engineSteps,
    kv: {
      meanUsage: run.samples.length ? kvSum / run.samples.length : undefined,
      maxUsage: kvMax,
    },
    slo: sloAttainment(run, options.sloClasses ?? DEFAULT_SLO_CLASSES),
    tenants,
    series,
  };
}

function buildSeries(
  run: SimRun,
  tenantIds: readonly string[],
  curves: ReadonlyMap<string, ServiceCurve>,
  byTenant: ReadonlyMap<string, readonly RequestRecord[]>,
  o: { windowS: number; warmupS: number; step: number },
): MetricSeries {
  const T = run.durationS;
  const t: number[] = [];
  for (let k = 0; k * o.step <= T + 1e-9; k++) t.push(Math.round(k * o.step * 1e6) / 1e6);
  const serviceRate: Record<string, number[]> = {};
  const accumulatedService: Record<string, (number | null)[]> = {};
  const ttft: Record<string, (number | null)[]> = {};
  for (const id of tenantIds) {
    const c = curves.get(id)!;
    const base = c.at(o.warmupS);
    serviceRate[id] = t.map((x) => {
      // Windows are clipped to the run so the edges do not droop.
      const l = Math.max(0, x - o.windowS / 2);
      const r = Math.min(T, x + o.windowS / 2);
      // Float error can leave -1e-13 where nothing was served; service is never negative.
      return r > l ? Math.max(0, c.between(l, r) / (r - l)) : 0;
    });
    accumulatedService[id] = t.map((x) => (x >= o.warmupS ? c.at(x) - base : null));
    const firsts = byTenant
      .get(id)!
      .filter((r) => r.firstTokenS !== undefined)
      .map((r) => ({ at: r.firstTokenS!, ttft: r.firstTokenS! - r.arrivalS }))
      .sort((a, b) => a.at - b.at);
    const prefix = [0];
    for (const f of firsts) prefix.push(prefix.at(-1)! + f.ttft);
    ttft[id] = t.map((x) => {
      const lo = lowerBound(firsts, x - o.windowS / 2);
      const hi = upperBound(firsts, x + o.windowS / 2);
      return hi > lo ? (prefix[hi]! - prefix[lo]!) / (hi - lo) : null;
    });
  }
  const accumulatedDiff = t.map((x, k) => {
    if (x < o.warmupS) return null;
    const vs = tenantIds
      .filter((id) => byTenant.get(id)!.length > 0)
      .map((id) => accumulatedService[id]![k] ?? 0);
    return vs.length ? Math.max(...vs) - Math.min(...vs) : 0;
  });
  return { t, serviceRate, accumulatedService, accumulatedDiff, ttft };
}

function lowerBound(xs: readonly { at: number }[], v: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const m = (lo + hi) >>> 1;
    if (xs[m]!.at < v) lo = m + 1;
    else hi = m;
  }
  return lo;
}

function upperBound(xs: readonly { at: number }[], v: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const m = (lo + hi) >>> 1;
    if (xs[m]!.at <= v) lo = m + 1;
    else hi = m;
  }
  return lo;
}

/** Rejection codes of requests no replica of the same model and GPU can serve (runner.ts). */
const CONTEXT_REFUSALS = new Set(['context_length_exceeded', 'context_too_long']);

function sloAttainment(run: SimRun, classes: readonly SloClass[]): SloAttainment[] {
  const out: SloAttainment[] = [];
  const names = [...new Set(run.records.map((r) => r.req.sloClass))].sort();
  for (const name of names) {
    const cls = classes.find((c) => c.name === name);
    if (!cls) continue;
    let requests = 0;
    let met = 0;
    let pending = 0;
    let refused = 0;
    for (const r of run.records) {
      if (r.req.sloClass !== name) continue;
      if (r.rejected) {
        requests++;
        if (CONTEXT_REFUSALS.has(r.rejected.code)) refused++;
        continue;
      }
      const deadline = r.arrivalS + cls.ttftS;
      if (r.firstTokenS === undefined) {
        // Still waiting at the end: a miss only once its deadline has passed inside the run.
        if (deadline <= run.durationS) requests++;
        else pending++;
        continue;
      }
      requests++;
      let ok = r.firstTokenS - r.arrivalS <= cls.ttftS;
      if (ok && cls.atgtS !== undefined && r.finishS !== undefined && r.generated > 1)
        ok = (r.finishS - r.firstTokenS) / (r.generated - 1) <= cls.atgtS;
      if (ok) met++;
    }
    out.push({
      sloClass: name,
      ttftTargetS: cls.ttftS,
      requests,
      met,
      attainment: requests ? met / requests : undefined,
      pending,
      refused,
    });
  }
  return out;
}
