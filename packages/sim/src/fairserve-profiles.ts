/**
 * What FairServe derives from historical traffic before it can schedule (FairServe sections 4.2 and
 * 4.3): each app's expected input, system and output tokens per interaction stage (WSC's weights
 * `w_{a,j}`), and the user and app request limits OIT applies under overload. Here "history" is a
 * list of requests — in the simulator, the same scenario generated with another seed, so the
 * profiles are learned from traffic like the run's, not from the run itself.
 */
import type { AppProfile, RequestDescriptor } from '@fairway/core';
import {
  AppProfileLearner,
  appOf,
  MINUTE_MS,
  type OitOptions,
  userOf,
  type WscOptions,
} from '@fairway/policy';

/** Options of {@link appProfilesOf}. */
export interface AppProfileOptions {
  /** A stage needs this many samples to get its own entry; later stages reuse the last one. @default 5 */
  readonly minSamples?: number;
}

/**
 * Mean input (without system prompt), system and output tokens per app and interaction stage
 * (FairServe Eq. 2's N̄). Requests outside interactions count as stage 0.
 */
export function appProfilesOf(
  requests: readonly RequestDescriptor[],
  options: AppProfileOptions = {},
): Map<string, AppProfile> {
  const minSamples = options.minSamples ?? 5;
  const sums = new Map<string, { n: number; input: number; system: number; output: number }[]>();
  for (const r of requests) {
    const app = appOf(r);
    const stage = r.interactionStage ?? 0;
    let stages = sums.get(app);
    if (stages === undefined) {
      stages = [];
      sums.set(app, stages);
    }
    while (stages.length <= stage) stages.push({ n: 0, input: 0, system: 0, output: 0 });
    const s = stages[stage]!;
    const sys = Math.min(r.systemTokens ?? 0, r.inputTokens);
    s.n++;
    s.input += r.inputTokens - sys;
    s.system += sys;
    s.output += r.outputTokens ?? r.maxTokens;
  }
  const out = new Map<string, AppProfile>();
  for (const [app, stages] of [...sums].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    const profile: AppProfile['stages'][number][] = [];
    for (const s of stages) {
      // Rare deep stages would rest on a handful of samples; they reuse the last reliable stage.
      if (s.n < minSamples && profile.length > 0) break;
      if (s.n === 0) break;
      profile.push({ input: s.input / s.n, system: s.system / s.n, output: s.output / s.n });
    }
    if (profile.length > 0) out.set(app, { id: app, stages: profile });
  }
  return out;
}

/** Largest number of requests with the same key inside any window of `windowMs` (sliding). */
export function peakWindowCounts(
  requests: readonly RequestDescriptor[],
  keyOf: (r: RequestDescriptor) => string,
  windowMs = MINUTE_MS,
): Map<string, number> {
  const times = new Map<string, number[]>();
  for (const r of requests) {
    const k = keyOf(r);
    let ts = times.get(k);
    if (ts === undefined) {
      ts = [];
      times.set(k, ts);
    }
    ts.push(r.arrivalMs);
  }
  const peaks = new Map<string, number>();
  for (const [k, ts] of times) {
    ts.sort((a, b) => a - b);
    let lo = 0;
    let best = 0;
    for (let hi = 0; hi < ts.length; hi++) {
      while (ts[hi]! - ts[lo]! >= windowMs) lo++;
      best = Math.max(best, hi - lo + 1);
    }
    peaks.set(k, best);
  }
  return peaks;
}

function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return 0;
  const rank = q * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (rank - lo);
}

/** Options of {@link oitLimitsOf}. */
export interface OitLimitOptions {
  /** Tukey fence multiplier on the inter-quartile range of users' peak rates. @default 3 */
  readonly fence?: number;
  /** Headroom of each app's limit over the app's historical peak. @default 1.5 */
  readonly appHeadroom?: number;
  /** Window of both limits, ms. @default 60000 */
  readonly windowMs?: number;
}

/**
 * OIT limits from history (FairServe section 4.2: limits "based on the analysis of historical
 * data", throttling users "who fall outside the normal range"). The user limit is the upper
 * outer Tukey fence, Q3 + 3·IQR, of the users' peak requests per window — the textbook edge of the
 * normal range, which one abusive user in the history cannot move. Each app's limit is its own
 * historical peak per window with 50% headroom, since apps differ by orders of magnitude.
 */
export function oitLimitsOf(
  requests: readonly RequestDescriptor[],
  options: OitLimitOptions = {},
): OitOptions {
  const windowMs = options.windowMs ?? MINUTE_MS;
  const userPeaks = [...peakWindowCounts(requests, userOf, windowMs).values()].sort((a, b) => a - b);
  const q1 = quantile(userPeaks, 0.25);
  const q3 = quantile(userPeaks, 0.75);
  const userLimit = Math.max(1, Math.ceil(q3 + (options.fence ?? 3) * (q3 - q1)));
  const appPeaks = peakWindowCounts(requests, appOf, windowMs);
  const headroom = options.appHeadroom ?? 1.5;
  const appLimits = new Map(
    [...appPeaks].map(([app, peak]) => [app, Math.max(1, Math.ceil(peak * headroom))]),
  );
  const appLimit = Math.max(1, ...appLimits.values());
  // The limits are of an app across all its users; in the FairServe scenarios every user is a
  // tenant, so the app's window must be one across tenants (a gateway keeps one per tenant).
  return { userLimit, appLimit, appLimitOf: (app) => appLimits.get(app), windowMs, appWindow: 'shared' };
}

/** FairServe's two configurations learned from history: WSC's app profiles and OIT's limits. */
export interface FairServeOptions {
  readonly wsc: WscOptions;
  readonly oit: OitOptions;
  /** The learned profiles by app, for reports. */
  readonly profiles: ReadonlyMap<string, AppProfile>;
}

/** Options of {@link fairserveOptionsOf}. */
export interface FairServeSetup {
  /** FairServe's user priority factor E by user (absent: 1). */
  readonly userPriorities?: Readonly<Record<string, number>> | undefined;
  /** Whose service a WSC counter measures (see `WscOptions.counter`). @default 'user' */
  readonly counter?: 'user' | 'user-app' | undefined;
  /** Keep learning app profiles from the run's settled calls. @default true */
  readonly learn?: boolean | undefined;
}

/**
 * WSC and OIT options learned from `history`. Apps absent from the history are normalised by the
 * mean profile of all requests (a `fallbackProfile`), so a new app is served rather than rejected;
 * WSC goes on learning each app's profile from the run's own settled calls.
 */
export function fairserveOptionsOf(
  history: readonly RequestDescriptor[],
  setup: FairServeSetup = {},
): FairServeOptions {
  const profiles = appProfilesOf(history);
  const all = appProfilesOf(
    history.map((r) => ({ ...r, app: '*', interactionStage: 0 })),
    { minSamples: 1 },
  ).get('*');
  return {
    wsc: {
      appProfile: (app) => profiles.get(app),
      ...(all !== undefined ? { fallbackProfile: all } : {}),
      ...(setup.learn === false ? {} : { learner: new AppProfileLearner() }),
      ...(setup.counter !== undefined ? { counter: setup.counter } : {}),
      ...(setup.userPriorities !== undefined
        ? { userPriority: (u: string) => setup.userPriorities?.[u] ?? 1 }
        : {}),
    },
    oit: oitLimitsOf(history),
    profiles,
  };
}
