/**
 * The report of a simulation run: a JSON object with stable keys and deterministically rounded
 * numbers (the same scenario and seed give byte-identical JSON apart from `wallMs`), and a
 * readable table for the terminal.
 */
import type { QlmControlStats } from '@fairway/scheduler';
import type { InteractionMetrics } from './interaction-metrics.ts';
import type { SimMetrics } from './metrics.ts';
import type { SimRun } from './records.ts';

/** Rounds to `digits` decimals; `undefined` and non-finite values become null. */
export function round(x: number | undefined, digits = 3): number | null {
  if (x === undefined || !Number.isFinite(x)) return null;
  const f = 10 ** digits;
  const r = Math.round(x * f) / f;
  // Avoid "-0" in the JSON.
  return r === 0 ? 0 : r;
}

/** One tenant's line of the report. */
export interface TenantReport {
  readonly id: string;
  readonly weight: number;
  readonly arrived: number;
  readonly completed: number;
  readonly rejected: number;
  /** Service received, cost units (input + 2·output by default). */
  readonly service: number | null;
  /** Share of all service, 0–1. */
  readonly serviceShare: number | null;
  readonly ttftP50S: number | null;
  readonly ttftP99S: number | null;
  readonly tpotP50S: number | null;
  readonly e2eP50S: number | null;
}

/** The `--json` output of `fairway sim`. */
export interface SimReport {
  readonly scenario: string;
  readonly policy: string;
  readonly placement: string;
  readonly seed: number;
  readonly simulatedS: number;
  /** Wall-clock time of the simulation, ms (the only field that varies between identical runs). */
  readonly wallMs: number;
  /**
   * What became of the requests that arrived: `arrived = completed + rejected + queued + running`,
   * where, when the run ended, `queued` had never been dispatched and `running` had been but had not
   * finished (a request evicted and waiting to resume counts as running).
   */
  readonly requests: {
    readonly arrived: number;
    readonly completed: number;
    readonly rejected: number;
    readonly queued: number;
    readonly running: number;
  };
  readonly throughput: { readonly tokensPerS: number | null; readonly outputTokensPerS: number | null };
  readonly fairness: {
    readonly maxDiff: number | null;
    readonly avgDiff: number | null;
    readonly diffVar: number | null;
    readonly accumulatedMaxDiff: number | null;
    readonly jain: number | null;
  };
  readonly latency: {
    readonly ttftP50S: number | null;
    readonly ttftP99S: number | null;
    readonly tpotP50S: number | null;
    readonly tpotP99S: number | null;
    readonly e2eP50S: number | null;
    readonly e2eP99S: number | null;
  };
  readonly preemptions: number;
  /** Prefix-cache tokens queried and hit, and their ratio (runs whose engines cache prefixes only). */
  readonly prefixCache?: { readonly queries: number; readonly hits: number; readonly hitRate: number | null };
  /** Aladdin's prediction errors per replica and re-predictions (`reserve: 'predicted'` runs only). */
  readonly prediction?: SimRun['prediction'];
  readonly engineSteps: number;
  readonly kv: { readonly meanUsage: number | null; readonly maxUsage: number | null };
  readonly slo: readonly {
    readonly sloClass: string;
    readonly ttftTargetS: number;
    /** Requests whose outcome is known (met, missed or rejected). */
    readonly requests: number;
    readonly met: number;
    readonly attainment: number | null;
    /** 99th-percentile TTFT of the class's requests that got a first token, s. */
    readonly ttftP99S: number | null;
  }[];
  /** Service per tenant over sliding windows (the VTC paper's service rate), tokens/s at `t`. */
  readonly windowedService: {
    readonly t: readonly number[];
    readonly byTenant: Readonly<Record<string, readonly number[]>>;
  };
  /**
   * FairServe's figures (section 5): interactions cut midway, tokens wasted on them, rejections by
   * code and per user over time (throttles), and the share of users delayed.
   */
  readonly fairserve?: {
    readonly interactions: InteractionMetrics['interactions'];
    readonly wastedTokens: number;
    readonly rejections: InteractionMetrics['rejections'];
    readonly rejectionSeries: InteractionMetrics['rejectionSeries'];
    readonly delayedUserShare: number | null;
  };
  /** What an SLO control (QLM, or a baseline's model swapping) did, when one ran. */
  readonly control?: QlmControlStats & { readonly swaps: number; readonly evictions: number };
  readonly tenants: readonly TenantReport[];
}

/** Builds the report object from a run and its metrics. */
export function buildReport(
  run: SimRun,
  m: SimMetrics,
  wallMs: number,
  extra: { readonly interactions?: InteractionMetrics; readonly control?: QlmControlStats } = {},
): SimReport {
  const totalService = m.tenants.reduce((a, t) => a + t.service, 0);
  return {
    scenario: run.scenario,
    policy: run.policy,
    placement: run.placement,
    seed: run.seed,
    simulatedS: m.durationS,
    wallMs: Math.round(wallMs),
    requests: {
      arrived: m.requests.arrived,
      completed: m.requests.completed,
      rejected: m.requests.rejected,
      queued: m.requests.arrived - m.requests.rejected - m.requests.dispatched,
      running: m.requests.dispatched - m.requests.completed,
    },
    throughput: {
      tokensPerS: round(m.throughput.tokensPerS, 2),
      outputTokensPerS: round(m.throughput.outputTokensPerS, 2),
    },
    fairness: {
      maxDiff: round(m.fairness.maxDiff, 2),
      avgDiff: round(m.fairness.avgDiff, 2),
      diffVar: round(m.fairness.diffVar, 2),
      accumulatedMaxDiff: round(m.fairness.accumulatedMaxDiff, 1),
      jain: round(m.fairness.jain, 4),
    },
    latency: {
      ttftP50S: round(m.latency.ttftS.p50),
      ttftP99S: round(m.latency.ttftS.p99),
      tpotP50S: round(m.latency.tpotS.p50, 4),
      tpotP99S: round(m.latency.tpotS.p99, 4),
      e2eP50S: round(m.latency.e2eS.p50),
      e2eP99S: round(m.latency.e2eS.p99),
    },
    preemptions: m.preemptions,
    ...(run.prefixCache
      ? {
          prefixCache: {
            ...run.prefixCache,
            hitRate:
              run.prefixCache.queries > 0 ? round(run.prefixCache.hits / run.prefixCache.queries, 4) : null,
          },
        }
      : {}),
    ...(run.prediction ? { prediction: run.prediction } : {}),
    engineSteps: m.engineSteps,
    kv: { meanUsage: round(m.kv.meanUsage, 4), maxUsage: round(m.kv.maxUsage, 4) },
    slo: m.slo.map((s) => ({
      sloClass: s.sloClass,
      ttftTargetS: s.ttftTargetS,
      requests: s.requests,
      met: s.met,
      attainment: round(s.attainment, 4),
      ttftP99S: round(classTtftP99(run, s.sloClass)),
    })),
    windowedService: {
      t: m.series.t.map((t) => round(t, 2) ?? 0),
      byTenant: Object.fromEntries(
        Object.entries(m.series.serviceRate).map(([k, v]) => [k, v.map((x) => round(x, 2) ?? 0)]),
      ),
    },
    ...(extra.interactions
      ? {
          fairserve: {
            interactions: extra.interactions.interactions,
            wastedTokens: extra.interactions.wastedTokens,
            rejections: extra.interactions.rejections,
            rejectionSeries: extra.interactions.rejectionSeries,
            delayedUserShare: round(extra.interactions.delayedUserShare, 4),
          },
        }
      : {}),
    ...(extra.control
      ? {
          control: {
            ...extra.control,
            swaps: run.swaps ?? 0,
            evictions: run.records.reduce((a, r) => a + (r.evictions ?? 0), 0),
          },
        }
      : {}),
    tenants: m.tenants.map((t) => ({
      id: t.id,
      weight: t.weight,
      arrived: t.arrived,
      completed: t.completed,
      rejected: t.rejected,
      service: round(t.service, 1),
      serviceShare: round(totalService > 0 ? t.service / totalService : undefined, 4),
      ttftP50S: round(t.ttftS.p50),
      ttftP99S: round(t.ttftS.p99),
      tpotP50S: round(t.tpotS.p50, 4),
      e2eP50S: round(t.e2eS.p50),
    })),
  };
}

/** The report as JSON, one line per call (what `--json` prints). */
export function reportJson(report: SimReport): string {
  return JSON.stringify(report);
}

const fmt = (x: number | null, unit = ''): string => (x === null ? '–' : `${x}${unit}`);

function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [line(header), widths.map((w) => '─'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

/** Renders the report as a readable terminal table. */
export function formatReport(r: SimReport): string {
  const head = [
    `scenario ${r.scenario}  policy ${r.policy}  placement ${r.placement}  seed ${r.seed}`,
    `simulated ${r.simulatedS} s in ${(r.wallMs / 1000).toFixed(2)} s wall  ·  ${r.engineSteps} engine steps  ·  ${r.preemptions} preemptions`,
    '',
  ];
  const summary = table(
    ['metric', 'value'],
    [
      [
        'requests arrived / completed / rejected',
        `${r.requests.arrived} / ${r.requests.completed} / ${r.requests.rejected}`,
      ],
      ['unfinished at the end: queued / running', `${r.requests.queued} / ${r.requests.running}`],
      ['throughput (in+out tokens/s)', fmt(r.throughput.tokensPerS)],
      ['output tokens/s', fmt(r.throughput.outputTokensPerS)],
      ['fairness: max / avg diff', `${fmt(r.fairness.maxDiff)} / ${fmt(r.fairness.avgDiff)}`],
      ['fairness: diff var', fmt(r.fairness.diffVar)],
      ['fairness: accumulated max diff', fmt(r.fairness.accumulatedMaxDiff)],
      ["Jain's index", fmt(r.fairness.jain)],
      ['TTFT p50 / p99', `${fmt(r.latency.ttftP50S, ' s')} / ${fmt(r.latency.ttftP99S, ' s')}`],
      ['TPOT p50 / p99', `${fmt(r.latency.tpotP50S, ' s')} / ${fmt(r.latency.tpotP99S, ' s')}`],
      ['end-to-end p50 / p99', `${fmt(r.latency.e2eP50S, ' s')} / ${fmt(r.latency.e2eP99S, ' s')}`],
      ['KV usage mean / max', `${fmt(r.kv.meanUsage)} / ${fmt(r.kv.maxUsage)}`],
      ...(r.prefixCache ? [['prefix cache hits / queried tokens', fmt(r.prefixCache.hitRate)]] : []),
      ...r.slo.map((s) => [`SLO ${s.sloClass} (TTFT ≤ ${s.ttftTargetS} s)`, fmt(s.attainment)]),
    ],
  );
  const tenants = table(
    [
      'tenant',
      'weight',
      'arrived',
      'done',
      'rejected',
      'service',
      'share',
      'TTFT p50',
      'TTFT p99',
      'TPOT p50',
    ],
    r.tenants.map((t) => [
      t.id,
      String(t.weight),
      String(t.arrived),
      String(t.completed),
      String(t.rejected),
      fmt(t.service),
      fmt(t.serviceShare),
      fmt(t.ttftP50S, ' s'),
      fmt(t.ttftP99S, ' s'),
      fmt(t.tpotP50S, ' s'),
    ]),
  );
  return [...head, summary, '', tenants, ''].join('\n');
}

/** 99th-percentile TTFT of a class's requests that got a first token, s (nearest rank). */
export function classTtftP99(run: SimRun, sloClass: string): number | undefined {
  const ttfts = run.records
    .filter((r) => r.req.sloClass === sloClass && r.firstTokenS !== undefined)
    .map((r) => (r.firstTokenS as number) - r.arrivalS)
    .sort((a, b) => a - b);
  return ttfts.length ? ttfts[Math.min(ttfts.length - 1, Math.ceil(0.99 * ttfts.length) - 1)] : undefined;
}
