/**
 * Metrics of FairServe's evaluation (FairServe section 5) computed from a run's records: how many
 * multi-call interactions were cut in the middle and how many tokens were wasted on them (Figure
 * 8a–b), who was throttled and when (Figure 8c), and how long users' requests waited in the queue
 * (Figure 8d). Pure: the same run gives the same numbers.
 */
import { userOf } from '@fairway/policy';
import { type Distribution, distribution, naturalCompare } from './metrics.ts';
import type { RequestRecord, SimRun } from './records.ts';

/** Options of {@link computeInteractionMetrics}. */
export interface InteractionMetricsOptions {
  /** Width of the buckets of the throttle time series, seconds. @default 10 */
  readonly bucketS?: number | undefined;
  /** A user "experiences queueing delay" when one of its requests waits longer than this, seconds. @default 5 */
  readonly delayThresholdS?: number | undefined;
}

/** Outcome of the run's interactions (single-call requests count as interactions of one call). */
export interface InteractionCounts {
  readonly total: number;
  /** Interactions of two calls or more. */
  readonly multiCall: number;
  /** Every call finished within the run. */
  readonly completed: number;
  /** A call was rejected at admission: the user never gets the final answer. */
  readonly broken: number;
  /** Broken after at least one of its calls had been served: the served calls were wasted. */
  readonly brokenMidway: number;
  /** Neither completed nor broken when the run ended. */
  readonly unfinished: number;
}

/** Per-user outcome. */
export interface UserInteractionMetrics {
  readonly user: string;
  readonly app: string | undefined;
  readonly requests: number;
  /** Rejections by code (`throttled`, `rpm_limited`, …). */
  readonly rejected: Readonly<Record<string, number>>;
  /** Queueing delay of admitted requests (dispatch − arrival), seconds; requests still queued at the end count with their wait so far. */
  readonly queueDelayS: Distribution;
  readonly wastedTokens: number;
}

/** Everything {@link computeInteractionMetrics} returns. */
export interface InteractionMetrics {
  readonly interactions: InteractionCounts;
  /**
   * Tokens processed (prefilled prompt and generated output) for calls of broken interactions —
   * work whose result no user receives (FairServe Figure 8b).
   */
  readonly wastedTokens: number;
  /** Rejections at admission by code, over all users. */
  readonly rejections: Readonly<Record<string, number>>;
  readonly users: readonly UserInteractionMetrics[];
  /** Rejections per user over time: bucket start times (s) and, per user rejected at least once, counts per bucket. */
  readonly rejectionSeries: {
    readonly t: readonly number[];
    readonly byUser: Readonly<Record<string, readonly number[]>>;
  };
  /** Fraction of users with a request that waited longer than the threshold (FairServe Figure 8d). */
  readonly delayedUserShare: number;
}

/** Tokens the engine processed for a call: its prompt once prefilled, plus the output generated. */
function processedTokens(r: RequestRecord): number {
  return (r.firstTokenS !== undefined ? r.req.inputTokens : 0) + r.generated;
}

/** Computes FairServe's interaction, waste, throttling and queueing-delay metrics of a run. */
export function computeInteractionMetrics(
  run: SimRun,
  options: InteractionMetricsOptions = {},
): InteractionMetrics {
  const bucketS = options.bucketS ?? 10;
  const threshold = options.delayThresholdS ?? 5;
  const T = run.durationS;

  const groups = new Map<string, RequestRecord[]>();
  for (const r of run.records) {
    const key = r.req.interactionId ?? `request:${r.req.id}`;
    let g = groups.get(key);
    if (g === undefined) {
      g = [];
      groups.set(key, g);
    }
    g.push(r);
  }
  let multiCall = 0;
  let completed = 0;
  let broken = 0;
  let brokenMidway = 0;
  let unfinished = 0;
  let wasted = 0;
  const wastedByUser = new Map<string, number>();
  for (const g of groups.values()) {
    const size = g[0]!.req.interactionSize ?? 1;
    if (size > 1) multiCall++;
    const rejectedAt = g.find((r) => r.rejected !== undefined);
    if (rejectedAt !== undefined) {
      broken++;
      let tokens = 0;
      for (const r of g) tokens += processedTokens(r);
      if (tokens > 0) brokenMidway++;
      wasted += tokens;
      const u = userOf(rejectedAt.req);
      wastedByUser.set(u, (wastedByUser.get(u) ?? 0) + tokens);
    } else if (g.length >= size && g.every((r) => r.finishS !== undefined)) completed++;
    else unfinished++;
  }

  const rejections: Record<string, number> = {};
  const byUser = new Map<string, RequestRecord[]>();
  for (const r of run.records) {
    const u = userOf(r.req);
    let list = byUser.get(u);
    if (list === undefined) {
      list = [];
      byUser.set(u, list);
    }
    list.push(r);
    if (r.rejected) rejections[r.rejected.code] = (rejections[r.rejected.code] ?? 0) + 1;
  }

  const t: number[] = [];
  for (let x = 0; x < T; x += bucketS) t.push(x);
  const series: Record<string, number[]> = {};
  const users: UserInteractionMetrics[] = [];
  let delayed = 0;
  for (const user of [...byUser.keys()].sort(naturalCompare)) {
    const recs = byUser.get(user)!;
    const rejected: Record<string, number> = {};
    const delays: number[] = [];
    for (const r of recs) {
      if (r.rejected) {
        rejected[r.rejected.code] = (rejected[r.rejected.code] ?? 0) + 1;
        series[user] ??= t.map(() => 0);
        const s = series[user];
        const k = Math.min(t.length - 1, Math.floor(r.rejected.atS / bucketS));
        if (k >= 0) s[k]!++;
        continue;
      }
      delays.push((r.dispatchS ?? T) - r.arrivalS);
    }
    const d = distribution(delays);
    if ((d.max ?? 0) > threshold) delayed++;
    users.push({
      user,
      app: recs[0]!.req.app,
      requests: recs.length,
      rejected,
      queueDelayS: d,
      wastedTokens: wastedByUser.get(user) ?? 0,
    });
  }

  return {
    interactions: { total: groups.size, multiCall, completed, broken, brokenMidway, unfinished },
    wastedTokens: wasted,
    rejections,
    users,
    rejectionSeries: { t, byUser: series },
    delayedUserShare: users.length > 0 ? delayed / users.length : 0,
  };
}
