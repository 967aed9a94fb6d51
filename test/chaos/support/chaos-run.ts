import { percentile } from '../../e2e/support/load.ts';
import { DEFAULT_TIMING, type Fault, type FaultTiming, type Injected } from './chaos-faults.ts';
import { ChaosFleet, cappedTenant, type FleetOptions } from './chaos-fleet.ts';
import { type RequestRecord, runLoad } from './chaos-load.ts';

/** Options of one chaos experiment: load and one fault on a running fleet. */
export interface ExperimentOptions {
  /** Streamed requests per second. @default 8 */
  readonly rate: number;
  /** Load before the fault, ms. @default 4000 */
  readonly preMs: number;
  /** Load after the fault has repaired itself, ms. @default 6000 */
  readonly postMs: number;
  /** A request not ended after this long is lost, ms. @default 15000 */
  readonly clientTimeoutMs: number;
  /** Output tokens of the streamed requests, spread evenly over [min, max]. @default [64, 256] */
  readonly tokens: readonly [number, number];
  readonly timing: FaultTiming;
  readonly fleet: Partial<FleetOptions>;
  /** Progress lines (stderr in the CLI). */
  readonly log: (line: string) => void;
}

/** Defaults of {@link ExperimentOptions}. */
export const DEFAULT_EXPERIMENT: ExperimentOptions = {
  rate: 8,
  preMs: 4000,
  postMs: 6000,
  clientTimeoutMs: 15_000,
  tokens: [64, 256],
  timing: DEFAULT_TIMING,
  fleet: {},
  log: () => undefined,
};

/** One fault's outcome: the table row's figures and what they were counted from. */
export interface FaultResult {
  readonly fault: string;
  /** Every request as its client saw it (for `--records`). */
  readonly records: readonly RequestRecord[];
  readonly action: string;
  /** Streamed load requests started. */
  readonly sent: number;
  readonly completed: number;
  /** HTTP error statuses before any byte. */
  readonly failedBeforeFirstByte: number;
  /** Error event or broken stream after the 200. */
  readonly failedMidStream: number;
  /** No answer: reset before a status, or no end by the client timeout. */
  readonly lost: number;
  /** Admissions of the capped tenant beyond its RPM limit in any 60 s window. */
  readonly limitOvershoot: number;
  /** From the fault until no request sent fails and 80% of the offered rate completes, ms; null if not within the load. */
  readonly recoverMs: number | null;
  readonly details: {
    /** `status code` → count of the before-first-byte failures. */
    readonly statuses: Record<string, number>;
    readonly midStreamErrorEvents: number;
    readonly midStreamBroken: number;
    readonly lostNoResponse: number;
    readonly lostTimeout: number;
    /** Lost requests whose connection was to the killed dispatcher (open when it died, or reused after). */
    readonly lostAtKilledDispatcher: number;
    /** Streams cut whose connection was to the killed dispatcher. */
    readonly midStreamAtKilledDispatcher: number;
    /** Refused connections the client moved to another dispatcher. */
    readonly refusedRetried: number;
    readonly preFaultRatePerS: number;
    /** Completed requests: send to response headers (queue wait included) and to the end, ms. */
    readonly headersP50Ms: number;
    readonly headersP99Ms: number;
    readonly endP50Ms: number;
    readonly endP99Ms: number;
    readonly faultAtMs: number;
    readonly repairedAtMs: number;
    readonly loadEndMs: number;
    readonly probe: {
      readonly sent: number;
      readonly admitted: number;
      readonly limited: number;
      readonly other: number;
      readonly rpm: number;
    };
  };
}

/** How long before the fault the queueing burst is sent, ms. */
const BURST_LEAD_MS = 300;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Whether a running fleet has the settings a fault needs (a Redis persistence mode). */
function fits(fleet: ChaosFleet, fault: Fault): boolean {
  return Object.entries(fault.fleet).every(([k, v]) => fleet.options[k as keyof FleetOptions] === v);
}

/**
 * Runs faults in turn under load, one table row each: on one fleet brought back to full strength
 * between faults (what was killed is restarted, then the fleet is warmed up again) — a new one
 * only when a fault needs other settings (Redis without persistence) — or with `fresh`, on a new
 * fleet per fault. Every process is stopped at the end, also on failure.
 */
export async function runChaos(
  faults: readonly Fault[],
  options: Partial<ExperimentOptions> & { readonly fresh?: boolean } = {},
  onResult: (r: FaultResult) => void = () => undefined,
): Promise<FaultResult[]> {
  const o = { ...DEFAULT_EXPERIMENT, ...options };
  const results: FaultResult[] = [];
  let fleet: ChaosFleet | undefined;
  try {
    for (const [n, fault] of faults.entries()) {
      if (fleet === undefined || options.fresh || !fits(fleet, fault)) {
        await fleet?.close();
        o.log(`${fault.name}: starting a fleet`);
        fleet = await ChaosFleet.start({ ...o.fleet, ...fault.fleet });
      }
      const result = await runExperiment(fault, fleet, n, o);
      results.push(result);
      onResult(result);
      const next = faults[n + 1];
      if (fault.recover !== undefined && next !== undefined && !options.fresh && fits(fleet, next)) {
        o.log(`${fault.name}: recovering the fleet`);
        await fault.recover(fleet);
      }
    }
  } finally {
    await fleet?.close();
  }
  return results;
}

/**
 * Runs one fault on a running fleet: warm it up, start the load, inject the fault after `preMs`,
 * keep the load on until `postMs` after the fault repaired itself, wait for every request to end
 * (each is bounded by the client timeout) and summarise. `n` picks the capped tenant, so each
 * experiment's RPM window starts empty.
 */
export async function runExperiment(
  fault: Fault,
  fleet: ChaosFleet,
  n: number,
  options: Partial<ExperimentOptions> = {},
): Promise<FaultResult> {
  const o = { ...DEFAULT_EXPERIMENT, ...options };
  await fleet.warmUp();
  const origin = performance.now();
  const now = (): number => performance.now() - origin;
  const loadEndMs = o.preMs + fault.durationMs(o.timing) + o.postMs;
  const [min, max] = o.tokens;
  const load = runLoad({
    urls: () => fleet.dispatcherUrls,
    rate: o.rate,
    durationMs: loadEndMs,
    tokens: (i) => min + ((i * 37) % (max - min + 1)),
    clientTimeoutMs: o.clientTimeoutMs,
    probe: { tenant: cappedTenant(n), rpm: fleet.options.cappedRpm, burstExtra: 5, intervalMs: 250 },
    burst: {
      atMs: o.preMs - BURST_LEAD_MS,
      count: fleet.options.engines * fleet.options.maxNumSeqs,
      tokens: max,
    },
    origin,
  });
  o.log(
    `${fault.name}: load at ${o.rate}/s for ${(loadEndMs / 1000).toFixed(1)} s, fault at ${o.preMs / 1000} s`,
  );
  await sleep(o.preMs - now());
  const faultAtMs = now();
  const injected = await fault.inject(fleet, o.timing);
  const repairedAtMs = now();
  o.log(
    `${fault.name}: ${fault.action(o.timing, fleet.options)} at ${(faultAtMs / 1000).toFixed(1)} s, repaired at ${(repairedAtMs / 1000).toFixed(1)} s`,
  );
  const records = await load;
  return summarise(fault, fault.action(o.timing, fleet.options), records, injected, {
    faultAtMs,
    repairedAtMs,
    loadEndMs,
    rate: o.rate,
    rpm: fleet.options.cappedRpm,
  });
}

interface Times {
  readonly faultAtMs: number;
  readonly repairedAtMs: number;
  readonly loadEndMs: number;
  /** Offered load, requests per second. */
  readonly rate: number;
  readonly rpm: number;
}

/** The p-th percentile of durations, whole ms (0 when there are none). */
function ms(values: readonly number[], p: number): number {
  return values.length === 0 ? 0 : Math.round(percentile(values, p));
}

const RATE_WINDOW_MS = 2000;
const RATE_SHARE = 0.8;

/**
 * Counts one experiment's records. Recovery is the first time T after the fault from which no
 * request sent failed and the completions in [T, T + 2 s) reach 80% of the offered rate (what the
 * fleet completed before the fault: it carries the load without queueing).
 */
export function summarise(
  fault: Fault,
  action: string,
  records: readonly RequestRecord[],
  injected: Injected,
  t: Times,
): FaultResult {
  const load = records.filter((r) => r.kind === 'load');
  const count = (f: (r: RequestRecord) => boolean): number => load.filter(f).length;
  const statuses: Record<string, number> = {};
  for (const r of load)
    if (r.outcome === 'http-error') statuses[String(r.status)] = (statuses[String(r.status)] ?? 0) + 1;
  const atKilled = (r: RequestRecord): boolean =>
    injected.killedDispatcher !== undefined && r.dispatcher === injected.killedDispatcher;
  const lostAtKilled = count((r) => r.outcome.startsWith('lost') && atKilled(r));
  const midStreamAtKilled = count((r) => r.outcome.startsWith('stream-') && atKilled(r));

  const completed = load.filter((r) => r.outcome === 'completed');
  const completedEnds = completed.map((r) => r.endMs);
  const preStart = Math.min(1500, t.faultAtMs / 2);
  const preFaultRate =
    completedEnds.filter((e) => e >= preStart && e < t.faultAtMs).length / ((t.faultAtMs - preStart) / 1000);
  const failedSends = load.filter((r) => r.outcome !== 'completed').map((r) => r.sentMs);
  let recoverMs: number | null = null;
  for (let at = t.faultAtMs; at + RATE_WINDOW_MS <= t.loadEndMs; at += 100) {
    if (failedSends.some((s) => s >= at)) continue;
    const done = completedEnds.filter((e) => e >= at && e < at + RATE_WINDOW_MS).length;
    if (done >= RATE_SHARE * t.rate * (RATE_WINDOW_MS / 1000)) {
      recoverMs = at - t.faultAtMs;
      break;
    }
  }

  const probes = records.filter((r) => r.kind === 'probe');
  const admitted = probes
    .filter((r) => r.outcome === 'completed')
    .map((r) => r.sentMs)
    .sort((a, b) => a - b);
  let most = 0;
  for (let i = 0, j = 0; i < admitted.length; i++) {
    while (j < admitted.length && admitted[j]! < admitted[i]! + 60_000) j++;
    most = Math.max(most, j - i);
  }
  const limited = probes.filter((r) => r.status === 429).length;
  return {
    fault: fault.name,
    records,
    action,
    sent: load.length,
    completed: count((r) => r.outcome === 'completed'),
    failedBeforeFirstByte: count((r) => r.outcome === 'http-error'),
    failedMidStream: count((r) => r.outcome === 'stream-error-event' || r.outcome === 'stream-broken'),
    lost: count((r) => r.outcome.startsWith('lost')),
    limitOvershoot: Math.max(0, most - t.rpm),
    recoverMs,
    details: {
      statuses,
      midStreamErrorEvents: count((r) => r.outcome === 'stream-error-event'),
      midStreamBroken: count((r) => r.outcome === 'stream-broken'),
      lostNoResponse: count((r) => r.outcome === 'lost-no-response'),
      lostTimeout: count((r) => r.outcome === 'lost-timeout'),
      lostAtKilledDispatcher: lostAtKilled,
      midStreamAtKilledDispatcher: midStreamAtKilled,
      refusedRetried: load.reduce((s, r) => s + r.refused, 0),
      preFaultRatePerS: Math.round(preFaultRate * 10) / 10,
      headersP50Ms: ms(
        completed.map((r) => (r.headersMs ?? r.endMs) - r.sentMs),
        50,
      ),
      headersP99Ms: ms(
        completed.map((r) => (r.headersMs ?? r.endMs) - r.sentMs),
        99,
      ),
      endP50Ms: ms(
        completed.map((r) => r.endMs - r.sentMs),
        50,
      ),
      endP99Ms: ms(
        completed.map((r) => r.endMs - r.sentMs),
        99,
      ),
      faultAtMs: Math.round(t.faultAtMs),
      repairedAtMs: Math.round(t.repairedAtMs),
      loadEndMs: t.loadEndMs,
      probe: {
        sent: probes.length,
        admitted: admitted.length,
        limited,
        other: probes.length - admitted.length - limited,
        rpm: t.rpm,
      },
    },
  };
}

/** The chaos table: one markdown row per fault. */
export function markdownTable(results: readonly FaultResult[]): string {
  const head =
    '| fault | what is done | sent | completed | failed before first byte | failed mid-stream | lost | limit overshoot | time to recover |';
  const rule = '|---|---|---:|---:|---:|---:|---:|---:|---:|';
  const rows = results.map((r) => {
    const statuses = Object.entries(r.details.statuses)
      .map(([s, n]) => `${s}×${n}`)
      .join(', ');
    const before = r.failedBeforeFirstByte === 0 ? '0' : `${r.failedBeforeFirstByte} (${statuses})`;
    const killed = (n: number): string => (n > 0 ? `, ${n} at the killed dispatcher` : '');
    const mid =
      r.failedMidStream === 0
        ? '0'
        : `${r.failedMidStream} (${r.details.midStreamErrorEvents} error event, ${r.details.midStreamBroken} broken${killed(r.details.midStreamAtKilledDispatcher)})`;
    const lost =
      r.details.lostAtKilledDispatcher > 0
        ? `${r.lost} (${r.details.lostAtKilledDispatcher} at the killed dispatcher)`
        : String(r.lost);
    const recover = r.recoverMs === null ? 'not within the load' : `${(r.recoverMs / 1000).toFixed(1)} s`;
    return `| ${r.fault} | ${r.action} | ${r.sent} | ${r.completed} | ${before} | ${mid} | ${lost} | ${r.limitOvershoot} of ${r.details.probe.rpm} | ${recover} |`;
  });
  return [head, rule, ...rows].join('\n');
}
