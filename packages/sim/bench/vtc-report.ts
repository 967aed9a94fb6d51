/**
 * Reproduces the VTC paper's figures 3–10 and Table 2 (Sheng et al., "Fairness in Serving Large
 * Language Models", OSDI 2024) with fairway's simulator, which runs the production Gateway and
 * MemoryStore against simulated engines, and writes `reports/vtc-reproduction.md` with SVG plots in
 * `reports/vtc/`. Deterministic: every run is seeded and no wall-clock time is written, so running
 * it twice gives identical files.
 *
 * Usage: npm run report:vtc [-- --out <dir>]   (default: <repo>/reports; about 4½ minutes of CPU)
 *        npm run report:vtc -- --only figure3,table2Trace --out <dir>
 *          runs only those sections (see SECTIONS) and prints their text and summary rows instead of
 *          writing the report: each line is one the full report holds (test/reports checks that)
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { linearCost } from '@fairway/core';
import { type OrderingPolicyName, orderingPolicyByName, placementByName, vtcPolicy } from '@fairway/policy';
import type { TopLevelSpec } from 'vega-lite';
import { backloggedServiceGap, vtcFairnessBound } from '../src/fairness-bound.ts';
import { computeMetrics, type SimMetrics, windowServiceDifference } from '../src/metrics.ts';
import { ServiceCurve } from '../src/metrics-curve.ts';
import { renderSvg } from '../src/plots.ts';
import type { SimRun } from '../src/records.ts';
import { runSimulation } from '../src/runner.ts';
import {
  buildRunInput,
  type LoadedScenario,
  loadScenario,
  parseScenario,
  type ScenarioRunInput,
} from '../src/scenario.ts';
import { VTC_SCENARIOS } from '../src/scenarios/vtc.ts';
import { VTC_APPENDIX_SCENARIOS } from '../src/scenarios/vtc-appendix.ts';
import { EVIDENCE_SEEDS, type SeedSummary, summarizeSeeds } from '../src/seed-summary.ts';
import { runSections } from './report-sections.ts';
import { runSloraRouter } from './slora-router.ts';

const { values: args } = parseArgs({ options: { out: { type: 'string' }, only: { type: 'string' } } });
const OUT = resolve(args.out ?? join(import.meta.dirname, '..', '..', '..', 'reports'));
const PLOT_DIR = join(OUT, 'vtc');
mkdirSync(PLOT_DIR, { recursive: true });

// ---------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------

interface Sim {
  readonly input: ScenarioRunInput;
  readonly run: SimRun;
  readonly m: SimMetrics;
}

const cache = new Map<string, Sim>();

/**
 * Runs a scenario (built-in name or loaded) under a policy; RPM takes its limit, others none.
 * `seed` replaces the scenario's (arrivals and the noisy oracle's errors); `noPrior` runs
 * VTC(predict) as it was before flows without history got a prior (no output charged up front),
 * `expectedOutput` runs it with that prior instead of `max_tokens`.
 */
async function simulate(
  scenario: string | LoadedScenario,
  policy: OrderingPolicyName,
  o: {
    durationS?: number;
    rpm?: number;
    dispatchers?: number;
    flushMs?: number;
    flushTokens?: number;
    seed?: number;
    noPrior?: boolean;
    expectedOutput?: number;
  } = {},
): Promise<Sim> {
  const loaded = typeof scenario === 'string' ? loadScenario(scenario) : scenario;
  const key = JSON.stringify([loaded.name, policy, o]);
  const hit = cache.get(key);
  if (hit) return hit;
  const input = buildRunInput(loaded, {
    durationS: o.durationS,
    ...(o.seed !== undefined ? { seed: o.seed } : {}),
  });
  const prior = o.noPrior ? 0 : o.expectedOutput;
  const ordering =
    prior !== undefined
      ? vtcPolicy({ prediction: 'history', expectedOutput: prior, name: `vtc-predict-prior-${prior}` })
      : orderingPolicyByName(policy, {
          ...(o.rpm !== undefined ? { rpm: o.rpm } : {}),
          weightOf: (t) => input.tenantWeights[t] ?? 1,
          seed: input.seed,
        });
  const run = await runSimulation({
    ...input,
    ordering,
    placement: placementByName('least-kv'),
    ...(o.dispatchers !== undefined ? { dispatchers: o.dispatchers } : {}),
    ...(o.flushMs !== undefined ? { flushMs: o.flushMs } : {}),
    ...(o.flushTokens !== undefined ? { flushTokens: o.flushTokens } : {}),
  });
  const sim = { input, run, m: computeMetrics(run) };
  cache.set(key, sim);
  process.stderr.write('.');
  return sim;
}

// ---------------------------------------------------------------------------------------------
// Measures the paper reads off its figures
// ---------------------------------------------------------------------------------------------

/** Accumulated service of a tenant between two series times (cost units). */
function servedBetween(m: SimMetrics, tenant: string, from: number, to: number): number {
  const i = m.series.t.findIndex((t) => t >= from);
  const j = m.series.t.findIndex((t) => t >= to);
  const acc = m.series.accumulatedService[tenant]!;
  return (acc[j === -1 ? acc.length - 1 : j] ?? 0) - (acc[i] ?? 0);
}

/** Mean service rate of a tenant over [from, to], cost units/s. */
function meanRate(m: SimMetrics, tenant: string, from: number, to: number): number {
  return servedBetween(m, tenant, from, to) / (to - from);
}

/**
 * The paper's response time (section 5.1): mean first-token latency of the requests a client sent
 * in [t − 30, t + 30] s. Requests without a first token by the end of the run are left out.
 */
function responseTime(run: SimRun, t: readonly number[], tenant: string): (number | null)[] {
  const reqs = run.records
    .filter((r) => r.req.tenant === tenant && r.firstTokenS !== undefined)
    .map((r) => ({ at: r.arrivalS, ttft: r.firstTokenS! - r.arrivalS }));
  return t.map((x) => {
    const w = reqs.filter((r) => r.at >= x - 30 && r.at <= x + 30);
    return w.length ? w.reduce((a, r) => a + r.ttft, 0) / w.length : null;
  });
}

function meanResponse(run: SimRun, tenant: string, from: number, to: number): number {
  const w = run.records.filter(
    (r) => r.req.tenant === tenant && r.firstTokenS !== undefined && r.arrivalS >= from && r.arrivalS < to,
  );
  return w.reduce((a, r) => a + (r.firstTokenS! - r.arrivalS), 0) / Math.max(1, w.length);
}

function tenantsOf(sim: Sim): string[] {
  return sim.m.tenants.map((t) => t.id);
}

// ---------------------------------------------------------------------------------------------
// Plots
// ---------------------------------------------------------------------------------------------

type Pt = { t: number; series: string; value: number };

function points(t: readonly number[], bySeries: Readonly<Record<string, readonly (number | null)[]>>): Pt[] {
  const out: Pt[] = [];
  for (const [series, ys] of Object.entries(bySeries))
    ys.forEach((y, k) => {
      if (y !== null && y !== undefined && Number.isFinite(y)) out.push({ t: t[k]!, series, value: y });
    });
  return out;
}

function lineSpec(title: string, yTitle: string, legend: string, pts: Pt[], log = false): TopLevelSpec {
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title,
    width: 560,
    height: 260,
    background: 'white',
    data: { values: log ? pts.map((p) => ({ ...p, value: Math.max(1, p.value) })) : pts },
    mark: { type: 'line', strokeWidth: 1.6 },
    encoding: {
      x: { field: 't', type: 'quantitative', title: 'time (s)' },
      y: {
        field: 'value',
        type: 'quantitative',
        title: yTitle,
        ...(log ? { scale: { type: 'log' } } : {}),
      },
      color: {
        field: 'series',
        type: 'nominal',
        title: legend,
        sort: null,
        scale: { scheme: 'category10' },
      },
    },
  };
}

/** Writes an SVG and returns its markdown image line. */
async function plot(file: string, alt: string, spec: TopLevelSpec): Promise<string> {
  writeFileSync(join(PLOT_DIR, file), await renderSvg(spec));
  return `![${alt}](vtc/${file})`;
}

async function servicePlot(file: string, sim: Sim, label: string): Promise<string> {
  return plot(
    file,
    `${label}: service rate per client`,
    lineSpec(
      `${label}: received service rate (60 s window)`,
      'service rate (input + 2·output tokens/s)',
      'client',
      points(sim.m.series.t, sim.m.series.serviceRate),
    ),
  );
}

async function responsePlot(file: string, sim: Sim, label: string): Promise<string> {
  const by: Record<string, (number | null)[]> = {};
  for (const id of tenantsOf(sim)) by[id] = responseTime(sim.run, sim.m.series.t, id);
  return plot(
    file,
    `${label}: response time per client`,
    lineSpec(
      `${label}: response time (mean TTFT of requests sent in ±30 s)`,
      'response time (s)',
      'client',
      points(sim.m.series.t, by),
    ),
  );
}

async function diffPlot(file: string, sims: Record<string, Sim>, label: string): Promise<string> {
  const first = Object.values(sims)[0]!;
  const by: Record<string, readonly (number | null)[]> = {};
  for (const [name, s] of Object.entries(sims)) by[name] = s.m.series.accumulatedDiff;
  return plot(
    file,
    `${label}: absolute difference in accumulated service`,
    lineSpec(
      `${label}: absolute difference in accumulated service (log scale)`,
      'max − min accumulated service',
      'scheduler',
      points(first.m.series.t, by),
      true,
    ),
  );
}

// ---------------------------------------------------------------------------------------------
// Formatting
// ---------------------------------------------------------------------------------------------

const f0 = (x: number) => x.toFixed(0);
const f1 = (x: number) => x.toFixed(1);
const f2 = (x: number) => x.toFixed(2);
const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const share = (sim: Sim, id: string) => {
  const total = sim.m.tenants.reduce((a, t) => a + t.service, 0);
  return sim.m.tenants.find((t) => t.id === id)!.service / total;
};

/** A markdown table; numeric columns (all but the first, unless `text`) are right-aligned. */
function table(head: readonly string[], rows: readonly (readonly string[])[], text = false): string {
  return [
    `| ${head.join(' | ')} |`,
    `|${head.map((_, i) => (i === 0 || text ? '---' : '---:')).join('|')}|`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');
}

const md: string[] = [];
const summary: string[][] = [];
/** Appends blocks separated by blank lines; consecutive quote lines stay one block quote. */
const add = (...blocks: string[]) => {
  blocks.forEach((b, i) => {
    md.push(b);
    const next = blocks[i + 1];
    if (!(b.startsWith('>') && next?.startsWith('>'))) md.push('');
  });
};
const yes = (ok: boolean, note = '') => (ok ? 'yes' : 'no') + (note ? ` (${note})` : '');
/** Numbers later sections quote. */
const R = {
  overloadTput: 0,
  realTput: 0,
  rpm5Ratio: 0,
  traceRpm5Ratio: 0,
  traceCoarse: false,
  /** Prediction variants below VTC on the trace's median Avg Diff. */
  tracePredBelow: [] as string[],
  t5: { vtcMax: 0, vtcAvg: 0, predictAcc: 0, vtcAcc: 0 },
};

// ---------------------------------------------------------------------------------------------
// Figures 3–10
// ---------------------------------------------------------------------------------------------

async function figure3(): Promise<void> {
  const vtc = await simulate('vtc-overload', 'vtc');
  const lcf = await simulate('vtc-overload', 'lcf');
  const fcfs = await simulate('vtc-overload', 'fcfs');
  const a = await diffPlot('fig3a-accumulated-diff.svg', { VTC: vtc, LCF: lcf, FCFS: fcfs }, 'Figure 3a');
  const b = await servicePlot('fig3b-service-rate-vtc.svg', vtc, 'Figure 3b · VTC');
  const endDiff = (s: Sim) => s.m.series.accumulatedDiff.at(-1)!;
  const rates = vtc.m.series.t
    .map((t, i) => ({
      t,
      d: Math.abs(vtc.m.series.serviceRate.client1![i]! - vtc.m.series.serviceRate.client2![i]!),
    }))
    .filter((x) => x.t >= 30 && x.t <= 570);
  const worst = Math.max(...rates.map((x) => x.d));
  add(
    '### Figure 3 — two overloaded clients (`vtc-overload`)',
    '> Client 1 sends 90 requests per minute. Client 2 sends 180 requests per minute, both evenly spaced out … Both clients are backlogged because they exceed the server capacity.',
    '>',
    '> "Figure 3(a) shows VTC can keep the difference between services received by both clients to be small. FCFS cannot maintain fairness, which always serves more for the client who is sending requests at a higher rate. Figure 3(b) shows the real-time received service rate for two clients in VTC, which confirms that the two received the same level of services at any time interval."',
    `fairway: after 600 s the accumulated service of the two clients differs by **${f0(endDiff(vtc))}** under VTC, ${f0(endDiff(lcf))} under LCF and **${f0(endDiff(fcfs))}** under FCFS (cost units, input + 2·output; measured from the 30 s warm-up). FCFS gives client 2 ${pct(share(fcfs, 'client2'))} of the service; VTC gives each client ${pct(share(vtc, 'client1'))} / ${pct(share(vtc, 'client2'))}, and their 60 s service rates never differ by more than ${f1(worst)} units/s (of ${f0(meanRate(vtc.m, 'client1', 30, 570))} each).`,
    a,
    b,
  );
  R.overloadTput = vtc.m.throughput.tokensPerS;
  summary.push([
    'Fig. 3',
    'VTC keeps two backlogged clients equal; FCFS serves the faster sender more',
    `acc. diff VTC ${f0(endDiff(vtc))} vs FCFS ${f0(endDiff(fcfs))}; VTC shares ${pct(share(vtc, 'client1'))}/${pct(share(vtc, 'client2'))}`,
    yes(endDiff(vtc) < 0.01 * endDiff(fcfs) && Math.abs(share(vtc, 'client1') - 0.5) < 0.02),
  ]);
}

async function figure4(): Promise<void> {
  const vtc = await simulate('vtc-proportional', 'vtc');
  const a = await servicePlot('fig4a-service-rate-vtc.svg', vtc, 'Figure 4a · VTC');
  const b = await responsePlot('fig4b-response-time-vtc.svg', vtc, 'Figure 4b · VTC');
  const r = (id: string) => meanRate(vtc.m, id, 30, 570);
  const capacity = r('client1') + r('client2') + r('client3');
  add(
    '### Figure 4 — one overloaded client among two light ones (`vtc-proportional`)',
    '> "three clients send requests at around 2/13, 4/13, and >7/13 of the server\'s capacity, respectively. In this case, Clients 1 and 2 can be served immediately when their requests arrive (Figure 4(b)), and Client 3 will consume the remaining capacity (more than 1/3), which is an empirical illustration of the work-conserving property of VTC. The service received for Client 1 and Client 2 have a ratio 1 : 2, which is consistent with their request rates (15 versus 30)."',
    `fairway: mean service rates ${f0(r('client1'))}, ${f0(r('client2'))} and ${f0(r('client3'))} units/s (ratio client 2 : client 1 = ${f2(r('client2') / r('client1'))}); client 3 takes ${pct(r('client3') / capacity)} of the served capacity. Mean response times: client 1 ${f2(meanResponse(vtc.run, 'client1', 30, 570))} s, client 2 ${f2(meanResponse(vtc.run, 'client2', 30, 570))} s, client 3 ${f1(meanResponse(vtc.run, 'client3', 30, 570))} s (its queue grows all run).`,
    a,
    b,
  );
  summary.push([
    'Fig. 4',
    'light clients served at once, 1:2 service ratio; client 3 takes the rest',
    `ratio ${f2(r('client2') / r('client1'))}; TTFT ${f2(meanResponse(vtc.run, 'client1', 30, 570))} s / ${f2(meanResponse(vtc.run, 'client2', 30, 570))} s vs ${f0(meanResponse(vtc.run, 'client3', 30, 570))} s`,
    yes(
      Math.abs(r('client2') / r('client1') - 2) < 0.2 &&
        Math.max(meanResponse(vtc.run, 'client1', 30, 570), meanResponse(vtc.run, 'client2', 30, 570)) < 1 &&
        meanResponse(vtc.run, 'client3', 30, 570) > 10,
    ),
  ]);
}

async function onOff(fig: 5 | 6): Promise<void> {
  const scenario = fig === 5 ? 'vtc-on-off-less' : 'vtc-on-off-overload';
  const vtc = await simulate(scenario, 'vtc');
  const a = await servicePlot(`fig${fig}a-service-rate-vtc.svg`, vtc, `Figure ${fig}a · VTC`);
  const b = await responsePlot(`fig${fig}b-response-time-vtc.svg`, vtc, `Figure ${fig}b · VTC`);
  const s = vtc.m.series;
  const idx = s.t.map((t, i) => ({ t, i })).filter((x) => x.t >= 60 && x.t <= 540);
  const totals = idx.map(({ i }) => s.serviceRate.client1![i]! + s.serviceRate.client2![i]!);
  const lo = Math.min(...totals);
  const hi = Math.max(...totals);
  if (fig === 5) {
    add(
      '### Figure 5 — ON/OFF client under its share (`vtc-on-off-less`)',
      '> "Since Client 1 uses less than half the system capacity when it is in the ON phase, its requests are mostly processed before it switches to the OFF phase (Figure 5(b)). When it is in the OFF phase, Client 1 thus takes all the system capacity. The total service rate remains the same, which confirms VTC\'s flexibility in achieving work-conserving." (The second sentence means client 2.)',
      `fairway: the total service rate stays between ${f0(lo)} and ${f0(hi)} units/s from 60 s to 540 s (±${pct((hi - lo) / (hi + lo))}); client 1's mean response time is ${f2(meanResponse(vtc.run, 'client1', 30, 570))} s against client 2's ${f1(meanResponse(vtc.run, 'client2', 30, 570))} s.`,
      a,
      b,
    );
    summary.push([
      'Fig. 5',
      'client 1 served at once; total service rate constant',
      `total rate ${f0(lo)}–${f0(hi)}; client 1 TTFT ${f2(meanResponse(vtc.run, 'client1', 30, 570))} s`,
      yes((hi - lo) / (hi + lo) < 0.05 && meanResponse(vtc.run, 'client1', 30, 570) < 1),
    ]);
  } else {
    const worst = Math.max(
      ...idx.map(({ i }) => Math.abs(s.serviceRate.client1![i]! - s.serviceRate.client2![i]!)),
    );
    add(
      '### Figure 6 — ON/OFF client over its share (`vtc-on-off-overload`)',
      '> "client 1 sends much more than half the capacity during the ON phase, and makes itself always backlogged. Thus, even when it is in the OFF phase, it is still in the backlog status. In this case, Client 1 and Client 2 should still receive the same level of service rate."',
      `fairway: service shares ${pct(share(vtc, 'client1'))} / ${pct(share(vtc, 'client2'))}; between 60 s and 540 s the two 60 s service rates differ by at most ${f1(worst)} units/s (total ${f0((lo + hi) / 2)}).`,
      a,
      b,
    );
    summary.push([
      'Fig. 6',
      'both clients get the same service rate through ON and OFF',
      `shares ${pct(share(vtc, 'client1'))}/${pct(share(vtc, 'client2'))}, max rate gap ${f1(worst)}`,
      yes(Math.abs(share(vtc, 'client1') - 0.5) < 0.02),
    ]);
  }
}

async function poisson(fig: 7 | 8): Promise<void> {
  const scenario = fig === 7 ? 'vtc-poisson-short-long' : 'vtc-poisson-short-long-2';
  const vtc = await simulate(scenario, 'vtc');
  const fcfs = await simulate(scenario, 'fcfs');
  const a = await servicePlot(`fig${fig}a-service-rate-vtc.svg`, vtc, `Figure ${fig}a · VTC`);
  const b = await diffPlot(`fig${fig}b-accumulated-diff.svg`, { VTC: vtc, FCFS: fcfs }, `Figure ${fig}b`);
  const fcfsB = await servicePlot(`fig${fig}c-service-rate-fcfs.svg`, fcfs, `Figure ${fig} · FCFS`);
  const { bound } = vtcFairnessBound(vtc.input.engines, vtc.input.arrivals);
  const lengths =
    fig === 7
      ? 'client 1 sends 64/64-token requests, client 2 256/256'
      : 'client 1 sends 64 in / 512 out, client 2 512 in / 64 out';
  add(
    `### Figure ${fig} — Poisson arrivals, different lengths (\`${scenario}\`)`,
    `> Client 1 sends 480 requests per minute. Client 2 sends 90 requests per minute. Requests arrive according to a Poisson process … (${lengths}).`,
    '>',
    '> "Similarly, with the observation before, VTC maintains a bounded difference between the services received by two clients. FCFS cannot preserve fairness according to Figure 7(b) and Figure 8(b)."',
    `fairway: the largest difference of accumulated service between the backlogged clients is **${f0(vtc.m.fairness.accumulatedMaxDiff)}** under VTC (Theorem 4.4's bound here: ${f0(bound)}) and **${f0(fcfs.m.fairness.accumulatedMaxDiff)}** under FCFS, which gives client 1 ${pct(share(fcfs, 'client1'))} of the service (VTC: ${pct(share(vtc, 'client1'))}). Panel (a) is VTC's service rate, (b) the accumulated difference of both schedulers, and the third plot FCFS's service rate.`,
    a,
    b,
    fcfsB,
  );
  summary.push([
    `Fig. ${fig}`,
    'VTC bounded, FCFS unfair under Poisson arrivals and mixed lengths',
    `acc. diff VTC ${f0(vtc.m.fairness.accumulatedMaxDiff)} vs FCFS ${f0(fcfs.m.fairness.accumulatedMaxDiff)}`,
    yes(
      vtc.m.fairness.accumulatedMaxDiff <= bound &&
        fcfs.m.fairness.accumulatedMaxDiff > 10 * vtc.m.fairness.accumulatedMaxDiff,
    ),
  ]);
}

async function figure9(): Promise<void> {
  const vtc = await simulate('vtc-increase', 'vtc');
  const fcfs = await simulate('vtc-increase', 'fcfs');
  const a = await servicePlot('fig9a-service-rate-vtc.svg', vtc, 'Figure 9a · VTC');
  const b = await responsePlot('fig9b-response-time-vtc.svg', vtc, 'Figure 9b · VTC');
  const c = await responsePlot('fig9c-response-time-fcfs.svg', fcfs, 'Figure 9 · FCFS');
  const early = (s: Sim, id: string) => meanResponse(s.run, id, 30, 150);
  const late = (s: Sim, id: string) => meanResponse(s.run, id, 450, 570);
  add(
    '### Figure 9 — an ill-behaved client ramping up (`vtc-increase`)',
    '> Client 1 sends 30 requests per minute … Client 2 sends requests at a linearly increasing rate, and gradually over half of the system capacity.',
    '>',
    '> "We observe that the response time of requests from client 1 is roughly unchanged, empirically validating the property stated in Theorem 4.13."',
    `fairway: under VTC client 1's mean response time is ${f2(early(vtc, 'client1'))} s for requests sent in 30–150 s and ${f2(late(vtc, 'client1'))} s in 450–570 s, while client 2's grows from ${f2(early(vtc, 'client2'))} s to ${f1(late(vtc, 'client2'))} s. Under FCFS client 1 is dragged along: ${f2(early(fcfs, 'client1'))} s → ${f1(late(fcfs, 'client1'))} s (third plot).`,
    a,
    b,
    c,
  );
  summary.push([
    'Fig. 9',
    "client 1's response time unchanged while client 2 ramps up",
    `VTC ${f2(early(vtc, 'client1'))} → ${f2(late(vtc, 'client1'))} s; FCFS ${f2(early(fcfs, 'client1'))} → ${f1(late(fcfs, 'client1'))} s`,
    yes(
      late(vtc, 'client1') < 2 * early(vtc, 'client1') + 0.5 &&
        late(fcfs, 'client1') > 5 * early(fcfs, 'client1'),
    ),
  ]);
}

async function figure10(): Promise<void> {
  const vtc = await simulate('vtc-dist-shift', 'vtc');
  const lcf = await simulate('vtc-dist-shift', 'lcf');
  const a = await servicePlot('fig10a-service-rate-vtc.svg', vtc, 'Figure 10a · VTC');
  const b = await servicePlot('fig10b-service-rate-lcf.svg', lcf, 'Figure 10b · LCF');
  const phase = (s: Sim, from: number, to: number) => {
    const c1 = servedBetween(s.m, 'client1', from, to);
    const c2 = servedBetween(s.m, 'client2', from, to);
    return c1 / (c1 + c2);
  };
  add(
    '### Figure 10 — distribution shift (`vtc-dist-shift`)',
    '> The first 5 minutes is ON/OFF phase … The second 5 minutes is the overload phase. Both Client 1 and Client 2 send 60 requests per minute … In the last 5 minutes, Client 1 sends 30 requests per minute (less than its share), and Client 2 sends 90 requests per minute.',
    '>',
    '> "Figure 10(a) demonstrates that VTC yields a desired pattern, similar to that shown in Figure 3(b). Figure 10(b) reveals that LCF disproportionately serves Client 1, as it inherits Client 1\'s deficit from the first phase. In the last phase, the serving pattern for VTC and LCF are similar, because they simply serve all requests from Client 1 immediately as Client 1 sends requests under its share."',
    `fairway: in the overload phase (330–600 s) client 1 receives ${pct(phase(vtc, 330, 600))} of the service under VTC and ${pct(phase(lcf, 330, 600))} under LCF — LCF serves everything client 1 sends and client 2 gets the rest. In the last phase (690–900 s) the shares are ${pct(phase(vtc, 690, 900))} (VTC) and ${pct(phase(lcf, 690, 900))} (LCF).`,
    a,
    b,
  );
  summary.push([
    'Fig. 10',
    'LCF over-serves the returning client 1 in phase 2; VTC does not; phase 3 alike',
    `client 1 share in phase 2: VTC ${pct(phase(vtc, 330, 600))}, LCF ${pct(phase(lcf, 330, 600))}`,
    yes(
      Math.abs(phase(vtc, 330, 600) - 0.5) < 0.02 &&
        phase(lcf, 330, 600) > 0.53 &&
        Math.abs(phase(vtc, 690, 900) - phase(lcf, 690, 900)) < 0.03,
    ),
  ]);
}

// ---------------------------------------------------------------------------------------------
// Tables
// ---------------------------------------------------------------------------------------------

/** VTC Table 2 (section 5.3), quoted: Max Diff, Avg Diff, Diff Var, throughput (tokens/s). */
const TABLE2: readonly [string, OrderingPolicyName, number | undefined, number, number, number, number][] = [
  ['FCFS', 'fcfs', undefined, 759.97, 433.53, 32112.0, 777],
  ['LCF', 'lcf', undefined, 750.49, 323.82, 29088.9, 778],
  ['VTC', 'vtc', undefined, 368.4, 251.66, 6549.16, 779],
  ['VTC(predict)', 'vtc-predict', undefined, 365.47, 240.33, 5321.62, 773],
  ['VTC(oracle)', 'vtc-oracle', undefined, 329.46, 227.51, 4475.76, 781],
  ['RPM(5)', 'rpm', 5, 143.86, 83.58, 1020.46, 340],
  ['RPM(20)', 'rpm', 20, 446.76, 195.71, 7449.79, 694],
  ['RPM(30)', 'rpm', 30, 693.66, 309.45, 24221.31, 747],
];

async function table2(): Promise<Map<string, Sim>> {
  const sims = new Map<string, Sim>();
  const rows: string[][] = [];
  for (const [label, policy, rpm, pMax, pAvg, pVar, pTput] of TABLE2) {
    const s = await simulate('vtc-real', policy, rpm === undefined ? {} : { rpm });
    sims.set(label, s);
    const f = s.m.fairness;
    rows.push([
      label,
      `${f2(pMax)} / **${f2(f.maxDiff)}**`,
      `${f2(pAvg)} / **${f2(f.avgDiff)}**`,
      `${f2(pVar)} / **${f2(f.diffVar)}**`,
      `${pTput} / **${f0(s.m.throughput.tokensPerS)}**`,
      `${pct(s.m.requests.rejected / s.m.requests.arrived)}`,
    ]);
  }
  const vtc = sims.get('VTC')!.m;
  const fcfs = sims.get('FCFS')!.m;
  const lcf = sims.get('LCF')!.m;
  const rpm5 = sims.get('RPM(5)')!.m;
  R.realTput = vtc.throughput.tokensPerS;
  R.rpm5Ratio = rpm5.throughput.tokensPerS / vtc.throughput.tokensPerS;
  add(
    '## Table 2 on the synthetic stand-in (`vtc-real`)',
    "Each cell is **paper / fairway**. Max/Avg Diff and Diff Var are the windowed service difference of section 5.1 (cost units per second, 60 s windows, the artifact's 19 ticks); throughput is input + output tokens per second. The last column is fairway's share of requests rejected at admission.",
    table(['scheduler', 'Max Diff', 'Avg Diff', 'Diff Var', 'throughput', 'rejected'], rows),
    `The ordering the paper draws from Table 2 holds: VTC's Avg Diff (${f1(vtc.fairness.avgDiff)}) is ${pct(1 - vtc.fairness.avgDiff / fcfs.fairness.avgDiff)} below FCFS's and ${pct(1 - vtc.fairness.avgDiff / lcf.fairness.avgDiff)} below LCF's (paper: 42% and 22%) at the same throughput (±${pct(Math.abs(vtc.throughput.tokensPerS - fcfs.throughput.tokensPerS) / fcfs.throughput.tokensPerS)}), and RPM(5) reaches the smallest difference only by rejecting ${pct(rpm5.requests.rejected / rpm5.requests.arrived)} of the requests, which cuts throughput to ${pct(R.rpm5Ratio)} of VTC's (paper: ${pct(340 / 779)}).`,
    await predictionNote(sims),
  );
  const ordered =
    vtc.fairness.avgDiff < 0.8 * lcf.fairness.avgDiff &&
    lcf.fairness.avgDiff < fcfs.fairness.avgDiff &&
    Math.abs(vtc.throughput.tokensPerS - fcfs.throughput.tokensPerS) / fcfs.throughput.tokensPerS < 0.03;
  summary.push([
    'Table 2, stand-in (seed 42)',
    "VTC's Avg Diff well below FCFS's and LCF's at equal throughput; RPM(5) cuts throughput",
    `Avg Diff VTC ${f0(vtc.fairness.avgDiff)}, LCF ${f0(lcf.fairness.avgDiff)}, FCFS ${f0(fcfs.fairness.avgDiff)}; RPM(5) ${pct(R.rpm5Ratio)} of VTC's throughput`,
    yes(
      ordered && R.rpm5Ratio < 2 / 3,
      R.rpm5Ratio > 0.5 ? `RPM(5) cut milder than the paper's ${pct(340 / 779)}` : '',
    ),
  ]);
  return sims;
}

/** Seeds of the prediction sweep on `vtc-real`. */
const SWEEP_SEEDS = EVIDENCE_SEEDS;

/**
 * Where the prediction variants stand against VTC on vtc-real, stated from the numbers: one
 * seed's Max Diff is the largest of 19 windows and moves by ±100 between seeds, so the sweep says
 * more than the table row.
 */
async function predictionNote(sims: ReadonlyMap<string, Sim>): Promise<string> {
  const f = (k: string) => sims.get(k)!.m.fairness;
  const cmp = (k: string, metric: 'maxDiff' | 'avgDiff' | 'diffVar') =>
    f(k)[metric] < f('VTC')[metric] ? 'below' : 'above';
  const policies: [string, OrderingPolicyName][] = [
    ['VTC', 'vtc'],
    ['VTC(predict)', 'vtc-predict'],
    ['VTC(oracle)', 'vtc-oracle'],
  ];
  const runs = new Map<string, SimMetrics['fairness'][]>();
  for (const [label, policy] of policies) {
    const list: SimMetrics['fairness'][] = [];
    for (const seed of SWEEP_SEEDS) list.push((await simulate('vtc-real', policy, { seed })).m.fairness);
    runs.set(label, list);
  }
  const mean = (xs: number[]) => summarizeSeeds(xs).median;
  const vtcRuns = runs.get('VTC')!;
  const rows = policies.map(([label]) => {
    const list = runs.get(label)!;
    const below = (k: 'maxDiff' | 'avgDiff' | 'diffVar') =>
      label === 'VTC'
        ? ''
        : ` (${list.filter((x, i) => x[k] < vtcRuns[i]![k]).length}/${list.length} below VTC)`;
    return [
      label,
      `${f1(mean(list.map((x) => x.maxDiff)))}${below('maxDiff')}`,
      `${f1(mean(list.map((x) => x.avgDiff)))}${below('avgDiff')}`,
      `${f0(mean(list.map((x) => x.diffVar)))}${below('diffVar')}`,
    ];
  });
  // Clients 4–27: everything but the three whose shares shift.
  const light = (k: string) =>
    sims.get(k)!.run.records.filter((r) => Number(r.req.tenant.replace('client', '')) > 3);
  const lightShare = (k: string) => {
    const m = sims.get(k)!.m;
    const total = m.tenants.reduce((a, t) => a + t.service, 0);
    return (
      m.tenants.filter((t) => Number(t.id.replace('client', '')) > 3).reduce((a, t) => a + t.service, 0) /
      total
    );
  };
  const lightSlow = (k: string) => {
    const started = light(k).filter((r) => r.firstTokenS !== undefined);
    return started.filter((r) => r.firstTokenS! - r.arrivalS > 5).length / started.length;
  };
  return [
    `Prediction: with seed 42, VTC(predict) is ${cmp('VTC(predict)', 'maxDiff')} VTC on Max Diff, ${cmp('VTC(predict)', 'avgDiff')} on Avg Diff and ${cmp('VTC(predict)', 'diffVar')} on Diff Var; VTC(oracle) is ${cmp('VTC(oracle)', 'maxDiff')}, ${cmp('VTC(oracle)', 'avgDiff')} and ${cmp('VTC(oracle)', 'diffVar')}. One seed's Max Diff is the largest of 19 windows and moves by about ±100 from seed to seed, so here are the medians over seeds ${SWEEP_SEEDS.join(', ')} (arrivals and step-time noise re-drawn; the paper's row is one run of one trace):`,
    table(['scheduler', 'Max Diff', 'Avg Diff', 'Diff Var'], rows),
    `On this stand-in the paper's VTC > VTC(predict) > VTC(oracle) ordering does not hold on the medians: VTC(predict) (whose history is a client's last five outputs) is about level with VTC and VTC(oracle) is above it. With the stationary Zipf(1) shares \`vtc-real\` had before (table below) the oracle was below VTC on Avg Diff, so the sign depends on how client shares move over the run. Burstiness alone is not the cause (with Poisson arrivals the oracle is still above VTC, see below). We have not isolated the mechanism. What we see is that the light clients wait longer under the oracle at the same service: clients 4–27 get ${pct(lightShare('VTC(oracle)'))} of the service under the oracle and ${pct(lightShare('VTC'))} under VTC, but ${pct(lightSlow('VTC(oracle)'))} of their requests wait over 5 s for the first token against ${pct(lightSlow('VTC'))}. A candidate, not verified, is that charging a request's whole output when it starts makes a light client's next request wait for the others to catch up, which the windowed difference counts as unmet demand.`,
  ].join('\n\n');
}

/**
 * The windowed service difference (60 s windows, as the table's) at every whole-second centre
 * from 30 s on, rather than only at the artifact's 19 ticks: shows how long the start-up lasts.
 */
function everySecondDiff(sim: Sim): number[] {
  const cost = linearCost();
  const T = sim.run.durationS;
  const ids = sim.m.tenants.map((t) => t.id);
  const of = (id: string) => sim.run.records.filter((r) => r.req.tenant === id && !r.rejected);
  const served = ids.map(
    (id) =>
      new ServiceCurve(
        of(id)
          .filter((r) => r.dispatchS !== undefined)
          .map((r) => ({
            start: r.dispatchS!,
            end: Math.min(r.finishS ?? T, T),
            cost: cost.cost(r.req.inputTokens, r.generated),
          })),
      ),
  );
  const asked = ids.map(
    (id) =>
      new ServiceCurve(
        of(id).map((r) => ({
          start: r.arrivalS,
          end: r.arrivalS,
          cost: cost.cost(r.req.inputTokens, r.req.outputTokens ?? r.generated),
        })),
      ),
  );
  const out: number[] = [];
  for (let c = 30; c <= T - 30; c++)
    out.push(
      windowServiceDifference(
        served.map((x) => x.between(c - 30, c + 30) / 60),
        asked.map((x) => x.between(c - 30 - 1e-9, c + 30) / 60),
      ),
    );
  return out;
}

/** Last whole-second window centre (s) at which the difference is above `level`. */
function settledBy(diffs: readonly number[], level: number): number {
  let last = 30;
  diffs.forEach((d, i) => {
    if (d > level) last = 30 + i;
  });
  return last;
}

/**
 * VTC Table 5 (appendix B.3), quoted, with fairway's rows: the paper's three (VTC, the ±50% noisy
 * oracle, the oracle) and VTC(predict) with and without the prior for flows without history.
 */
async function table5(): Promise<void> {
  type Row = { label: string; policy: OrderingPolicyName; noPrior?: boolean; paper?: number[] };
  const spec: Row[] = [
    { label: 'VTC', policy: 'vtc', paper: [192.88, 103.77, 6981.24, 893] },
    { label: 'VTC(±50%)', policy: 'vtc-noisy-oracle', paper: [33.98, 12.54, 111.94, 904] },
    { label: 'VTC(oracle)', policy: 'vtc-oracle', paper: [5.87, 0.51, 1.71, 895] },
    { label: 'VTC(predict)', policy: 'vtc-predict' },
    { label: 'VTC(predict) without prior', policy: 'vtc-predict', noPrior: true },
  ];
  const got = new Map<string, Sim>();
  const rows: string[][] = [];
  const cell = (p: number | undefined, x: string) =>
    p === undefined ? `— / **${x}**` : `${f2(p)} / **${x}**`;
  for (const r of spec) {
    const s = await simulate('vtc-overload', r.policy, {
      durationS: 360,
      ...(r.noPrior ? { noPrior: true } : {}),
    });
    got.set(r.label, s);
    const f = s.m.fairness;
    rows.push([
      r.label,
      cell(r.paper?.[0], f2(f.maxDiff)),
      cell(r.paper?.[1], f2(f.avgDiff)),
      cell(r.paper?.[2], f2(f.diffVar)),
      r.paper
        ? `${r.paper[3]} / **${f0(s.m.throughput.tokensPerS)}**`
        : `— / **${f0(s.m.throughput.tokensPerS)}**`,
      f0(f.accumulatedMaxDiff),
    ]);
  }
  const f = (label: string) => got.get(label)!.m.fairness;
  const v = f('VTC');
  const p = f('VTC(predict)');
  const o = f('VTC(oracle)');
  const n = f('VTC(predict) without prior');
  const noisy = f('VTC(±50%)');
  Object.assign(R.t5, {
    vtcMax: v.maxDiff,
    vtcAvg: v.avgDiff,
    vtcAcc: v.accumulatedMaxDiff,
    predictAcc: p.accumulatedMaxDiff,
  });
  const noisySeeds: SimMetrics['fairness'][] = [];
  for (const seed of [1, 2, 3, 4, 5, 6])
    noisySeeds.push(
      (await simulate('vtc-overload', 'vtc-noisy-oracle', { durationS: 360, seed })).m.fairness,
    );
  const range = (k: 'maxDiff' | 'avgDiff') =>
    `${f1(Math.min(...noisySeeds.map((x) => x[k])))}–${f1(Math.max(...noisySeeds.map((x) => x[k])))}`;
  const below = (x: typeof v, k: 'maxDiff' | 'avgDiff' | 'diffVar') => x[k] < v[k];
  const early = (tenant: string) =>
    got.get('VTC(oracle)')!.run.records.filter((r) => r.req.tenant === tenant && (r.dispatchS ?? 99) < 5)
      .length;
  const fine = (label: string) => everySecondDiff(got.get(label)!).slice(0, 120);
  const settle = {
    n: settledBy(fine('VTC(predict) without prior'), 5),
    v: settledBy(fine('VTC'), 5),
    o: settledBy(fine('VTC(oracle)'), 5),
  };
  const later = n.diffSeries.slice(1);
  const sameAfter = later.every((d, i) => Math.abs(d - o.diffSeries[i + 1]!) < 1e-6);
  add(
    '## Table 5 — length prediction on two overloaded clients (`vtc-overload`, 360 s as in the artifact)',
    "Each cell is **paper / fairway**; the last column is fairway's largest accumulated service difference (Figure 19's quantity). VTC(±50%) is the paper's middle row, `vtc-noisy-oracle`: the true output times a factor uniform in [0.5, 1.5], drawn per request from the scenario's seed (42), charged at dispatch and corrected as in Algorithm 3 (the artifact's `--predict-range 0.5`). VTC(predict) is the history predictor of Table 2 (mean of the client's last five outputs); a client with no finished request yet is priced at its request's `max_tokens`. The last row is VTC(predict) as it was before that prior.",
    table(
      ['scheduler (paper / fairway)', 'Max Diff', 'Avg Diff', 'Diff Var', 'throughput', 'acc. diff'],
      rows,
    ),
    `**VTC(predict) and VTC(oracle)** are below VTC on Max Diff (${f2(p.maxDiff)} and ${f2(o.maxDiff)} against ${f2(v.maxDiff)}), Avg Diff (${f2(p.avgDiff)}, ${f2(o.avgDiff)} against ${f2(v.avgDiff)}) and the accumulated difference (${f0(p.accumulatedMaxDiff)}, ${f0(o.accumulatedMaxDiff)} against ${f0(v.accumulatedMaxDiff)}); Diff Var is ${below(o, 'diffVar') ? 'below' : 'above'} (${f2(o.diffVar)} against ${f2(v.diffVar)}, the variance of windows that all lie within a few units). Every output here is 256 tokens = \`max_tokens\`, so the prior is exact and VTC(predict) prices every request as the oracle does: their rows are the same run.`,
    `**Why VTC(predict) used to be worse than VTC here** (Max Diff ${f2(n.maxDiff)}, Diff Var ${f2(n.diffVar)}). Measured per window: the largest of its 19 windows is the first (${f2(n.diffSeries[0]!)}, centred at ${f0(n.diffTicks[0]!)} s, against ${f2(o.diffSeries[0]!)} for the oracle), and ${sameAfter ? "every later window equals the oracle's to 10⁻⁶" : "later windows differ from the oracle's"}. The run starts with an empty engine: in the first five seconds it admits whatever arrives (${early('client2')} requests of client 2, ${early('client1')} of client 1), and the windowed difference then swings with the batch period until the counters have evened it out. Measured at every whole-second window centre (the last centre before 150 s whose difference is above 5 units/s), that start-up lasts until ${settle.n} s without a prior (plain VTC: ${settle.v} s), but only until ${settle.o} s when every request is charged its output up front (oracle, and VTC(predict) now). The artifact's first window (centred at ${f0(n.diffTicks[0]!)} s) falls inside the longer start-up. Without a prior the first batch was charged only as it streamed, while every later request was charged up front: the counters of the first ~10 s did not see the output already committed. The paper's Algorithm 3 starts each client's prediction at 0 as well (the artifact's \`vtc_pred_len_req_queue.py\`), so the paper's VTC(predict) had the same start-up; its Table 5 has no VTC(predict) row.`,
    `**VTC(±50%) does not reproduce the paper's middle row**: it is ${below(noisy, 'maxDiff') ? 'below' : 'above'} VTC on Max Diff (${f2(noisy.maxDiff)}) and ${below(noisy, 'avgDiff') ? 'below' : 'above'} on Avg Diff (${f2(noisy.avgDiff)}); over seeds 1–6 its Max Diff ranges ${range('maxDiff')} and its Avg Diff ${range('avgDiff')}. In the paper plain VTC's windows differ by ~100 units/s on a real server, and a ±50% prediction still beats that; on fairway's engine, even with vLLM's step-time jitter, plain VTC's windows differ by only ${f1(v.avgDiff)}, while each noisy prediction misprices a request by up to ±256 cost units until it finishes (~10 s later), which is larger than what it corrects. (This table is one run, seed 42; the five-seed table above is the claim.)`,
  );
  const loose: string[][] = [];
  const LOOSE_LABELS = ['the max_tokens prior', 'no prior', 'expectedOutput 256', 'the oracle'];
  const notBelow: string[] = [];
  for (const maxTokens of [256, 512, 1024]) {
    const base = VTC_SCENARIOS['vtc-overload']!;
    const scenario: LoadedScenario = {
      name: `vtc-overload-max-${maxTokens}`,
      scenario: parseScenario(
        { ...base, streams: (base.streams ?? []).map((st) => ({ ...st, maxTokens })) },
        `vtc-overload (max_tokens ${maxTokens})`,
      ),
      baseDir: process.cwd(),
    };
    const run = async (policy: OrderingPolicyName, o: { noPrior?: boolean; expectedOutput?: number } = {}) =>
      (await simulate(scenario, policy, { durationS: 360, ...o })).m.fairness;
    const runs = [
      await run('vtc'),
      await run('vtc-predict'),
      await run('vtc-predict', { noPrior: true }),
      await run('vtc-predict', { expectedOutput: 256 }),
      await run('vtc-oracle'),
    ];
    const [plain, ...variants] = runs;
    variants.forEach((x, i) => {
      if (!(x.maxDiff < plain!.maxDiff && x.avgDiff < plain!.avgDiff))
        notBelow.push(`${LOOSE_LABELS[i]} at ${maxTokens}`);
    });
    loose.push([String(maxTokens), ...runs.map((x) => `${f2(x.maxDiff)} / ${f2(x.avgDiff)}`)]);
  }
  add(
    "**How good must the prior be?** `max_tokens` is exact above because the suite sets it to the output. When clients ask for more than they get, the prior over-charges a flow's first requests until they settle. Max Diff / Avg Diff on `vtc-overload` (360 s) with `max_tokens` raised (outputs stay 256; the engine then holds fewer requests at once, so VTC's own numbers change too):",
    table(
      [
        'max_tokens',
        'VTC',
        'VTC(predict), max_tokens prior',
        'no prior',
        'expectedOutput 256',
        'VTC(oracle)',
      ],
      loose,
    ),
    `${notBelow.length === 0 ? 'Every variant is below VTC on both measures at every max_tokens.' : `Below VTC on both measures everywhere except: ${notBelow.join('; ')}.`} A configured \`expectedOutput\` close to the true mean does as well as the oracle. A loose \`max_tokens\` prior can cost start-up fairness against no prior (compare the columns at 1024), but it never under-charges; without a prior a flow's first requests are charged only their input, the under-estimate the paper blames for VTC's larger differences (section 4.4). A prior from the pool's recent outputs would avoid both; it needs the store or the gateway to keep outputs across flows, which fairway does not yet do.`,
  );
  summary.push([
    'Table 5 (seed 42)',
    'VTC(±50%) and VTC(oracle) reduce the service difference below VTC',
    `Max/Avg Diff VTC ${f2(v.maxDiff)}/${f2(v.avgDiff)}, VTC(oracle) ${f2(o.maxDiff)}/${f2(o.avgDiff)}, VTC(±50%) ${f2(noisy.maxDiff)}/${f2(noisy.avgDiff)} (VTC(predict) is not evidence here: every output equals max_tokens, so it prices as the oracle and its run is the oracle's)`,
    (() => {
      const exact = below(o, 'maxDiff') && below(o, 'avgDiff');
      const noisyOk = below(noisy, 'maxDiff') && below(noisy, 'avgDiff');
      const varNote = `Diff Var ${below(o, 'diffVar') ? 'below' : 'not below'} VTC's`;
      if (exact && noisyOk) return yes(true, varNote);
      if (exact) return `partly (VTC(oracle) yes, VTC(±50%) no; ${varNote})`;
      return yes(false, varNote);
    })(),
  ]);
}

/** `vtc-real` with every stream's rate scaled by `factor` (same shares, fewer requests). */
function scaledReal(factor: number, name: string): LoadedScenario {
  const base = VTC_SCENARIOS['vtc-real']!;
  const streams = (base.streams ?? []).map((st) => ({
    ...st,
    arrival: { ...st.arrival, rate: (st.arrival.rate ?? 0) * factor },
  }));
  return { name, scenario: parseScenario({ ...base, streams }, name), baseDir: process.cwd() };
}

/** The share model `vtc-real` had before: 27 stationary streams with Zipf(1) shares of 3.5 req/s. */
function zipfReal(): LoadedScenario {
  const base = VTC_SCENARIOS['vtc-real']!;
  const template = base.streams![0]!;
  let h = 0;
  for (let k = 1; k <= 27; k++) h += 1 / k;
  const streams = Array.from({ length: 27 }, (_, i) => ({
    tenant: `client${i + 1}`,
    arrival: { process: 'gamma' as const, rate: 3.5 / (i + 1) / h, cv: 2 },
    input: template.input,
    output: template.output,
    maxTokens: template.maxTokens,
  }));
  return {
    name: 'vtc-real-zipf1',
    scenario: parseScenario({ ...base, streams }, 'vtc-real (Zipf 1)'),
    baseDir: process.cwd(),
  };
}

/** Table 2's key numbers under the share models we tried, against the paper's. */
async function shareModels(): Promise<void> {
  const models: [string, string | LoadedScenario][] = [
    ['stationary Zipf(1), 210 req/min (before)', zipfReal()],
    ['three shifting dominant clients + Zipf(1) tail, 210 req/min (built-in)', 'vtc-real'],
    ['the same at 150 req/min (the published results file)', scaledReal(2.5 / 3.5, 'vtc-real-150')],
  ];
  const rows: string[][] = [];
  for (const [label, scenario] of models) {
    const m = async (p: OrderingPolicyName, rpm?: number) =>
      (await simulate(scenario, p, rpm === undefined ? {} : { rpm })).m;
    const fcfs = await m('fcfs');
    const first = (await simulate(scenario, 'fcfs')).run.records.filter((r) => r.arrivalS < 200);
    const top = Math.max(
      ...fcfs.tenants.map((t) => first.filter((r) => r.req.tenant === t.id).length / first.length),
    );
    const avg = [fcfs, await m('lcf'), await m('vtc'), await m('vtc-predict'), await m('vtc-oracle')].map(
      (x) => f0(x.fairness.avgDiff),
    );
    const vtc = await m('vtc');
    const r5 = await m('rpm', 5);
    rows.push([
      label,
      pct(top),
      avg.join(' / '),
      pct(r5.requests.rejected / r5.requests.arrived),
      `${f0(r5.throughput.tokensPerS)} / ${f0(vtc.throughput.tokensPerS)} (${pct(r5.throughput.tokensPerS / vtc.throughput.tokensPerS)})`,
    ]);
  }
  rows.push([
    'paper (LMSYS trace)',
    '≈ 50% (first 26 s)',
    '434 / 324 / 252 / 240 / 228',
    '—',
    '340 / 779 (43.6%)',
  ]);
  add(
    table(
      [
        'share model',
        'top client, first 200 s',
        'Avg Diff FCFS / LCF / VTC / VTC(predict) / VTC(oracle)',
        'RPM(5) rejects',
        'throughput RPM(5) / VTC',
      ],
      rows,
    ),
  );
}

async function dispatchersCurve(): Promise<void> {
  const base = (await simulate('vtc-overload', 'vtc', { dispatchers: 1, flushMs: 50, flushTokens: 1 })).m
    .fairness.accumulatedMaxDiff;
  const flushes = [10, 50, 200, 1000];
  const rows: string[][] = [];
  let worstAt50 = 0;
  for (const n of [1, 2, 4, 8]) {
    const cells = [String(n)];
    for (const f of flushes) {
      const d = (await simulate('vtc-overload', 'vtc', { dispatchers: n, flushMs: f })).m.fairness
        .accumulatedMaxDiff;
      if (f === 50) worstAt50 = Math.max(worstAt50, d / base);
      cells.push(`${f0(d)} (${f2(d / base)}×)`);
    }
    rows.push(cells);
  }
  add(
    '## Beyond the paper — VTC across dispatchers',
    `The paper names distributed counters as open work. fairway's gateways share VTC's counters through one store and charge streamed output in coalesced flushes (every F ms, or 512 tokens). Largest accumulated service difference on \`vtc-overload\`, against a centralised VTC charging every token (${f0(base)}); \`npm run bench:dispatchers\` prints the same curve with store load, and for \`vtc-poisson-short-long\`:`,
    table(['dispatchers \\ flush', ...flushes.map((f) => `${f} ms`)], rows),
    `At 50 ms coalescing costs at most ${pct(worstAt50 - 1)} over the centralised difference, for any number of dispatchers (the test \`fairness-dispatchers\` holds 4 dispatchers to 1.2×); the cost grows once a flush interval spans several engine steps (≈ 40 ms each here), because a client then runs ahead by what it generates before its charges land.`,
  );
}

// ---------------------------------------------------------------------------------------------
// Evidence over seeds: Theorem 4.4 on every sub-interval, Tables 2 and 5 as medians and worst cases
// ---------------------------------------------------------------------------------------------

/** `median (worst)` of a seed summary. */
const mw = (s: SeedSummary, fmt: (x: number) => string) => `${fmt(s.median)} (${fmt(s.worst)})`;

/** One measure of a policy's runs over {@link EVIDENCE_SEEDS}. */
async function overSeedsOf(
  scenario: string | LoadedScenario,
  policy: OrderingPolicyName,
  durationS: number,
  measure: (s: Sim) => number,
  rpm?: number,
): Promise<SeedSummary> {
  const values: number[] = [];
  for (const seed of EVIDENCE_SEEDS)
    values.push(
      measure(await simulate(scenario, policy, { durationS, seed, ...(rpm === undefined ? {} : { rpm }) })),
    );
  return summarizeSeeds(values);
}

/** Whether `order` (labels, expected largest first) holds on the medians of `by`. */
function inOrder(order: readonly string[], by: (label: string) => number): boolean {
  return order.every((l, i) => i === 0 || by(order[i - 1]!) > by(l));
}

/** Every suite of the paper whose clients have equal weights: section 5's and Table 6's. */
const BOUND_SUITES = [...Object.keys(VTC_SCENARIOS), 'vtc-overload-multi'];

async function evidence(): Promise<void> {
  const seeds = EVIDENCE_SEEDS.join(', ');
  // Theorem 4.4 over every backlogged sub-interval.
  const boundRows: string[][] = [];
  const verdict = { vtcOk: 0, fcfsOver: [] as string[], lcfOver: [] as string[] };
  let bound = 0;
  for (const suite of BOUND_SUITES) {
    const durationS = suite === 'vtc-real' ? 600 : 300;
    bound = vtcFairnessBound(
      buildRunInput(loadScenario(suite), { durationS }).engines,
      buildRunInput(loadScenario(suite), { durationS }).arrivals,
    ).bound;
    const cells: string[] = [suite, String(durationS)];
    for (const policy of ['vtc', 'lcf', 'fcfs'] as const) {
      const g = await overSeedsOf(suite, policy, durationS, (s) => backloggedServiceGap(s.run).gap);
      const over = g.values.filter((v) => v > bound).length;
      cells.push(`${mw(g, f0)}${over > 0 ? ` — **${over}/${g.values.length} over**` : ''}`);
      if (policy === 'vtc' && over === 0) verdict.vtcOk++;
      if (policy === 'fcfs' && g.median > bound) verdict.fcfsOver.push(suite);
      if (policy === 'lcf' && g.median > bound) verdict.lcfOver.push(suite);
    }
    cells.push(String(bound));
    boundRows.push(cells);
  }
  add(
    '## Evidence over five seeds, on a jittered engine',
    `Every claim in this section is judged over seeds ${seeds} — arrivals, the ±50% predictor's errors and the engine's step-time noise all re-drawn — and reported as **median (worst)**. The engine's step times carry vLLM's measured decode-step jitter: each step's modelled time is multiplied by a lognormal factor of mean 1 and CV 0.10 (\`VLLM_STEP_JITTER_CV\`, from single-stream \`vllm bench serve\` inter-token latencies, median 4.62 ms and p99 5.83 ms, vllm-project/vllm PR #51349), which the VTC suites declare and \`fairway sim --step-noise none\` turns off. The seeded RNG expands each seed through SplitMix32, so seeds 1–5 are unrelated streams.`,
    '### Theorem 4.4 over every sub-interval',
    `For each pair of clients and **every** interval [t1, t2) in which both are backlogged (a request waiting at the gateway, Definition 4.1), the largest |W_f(t1,t2) − W_g(t1,t2)|, computed exactly (\`backloggedServiceGap\` in \`packages/sim/src/fairness-bound.ts\`: input charged at dispatch, output as it streams, max − min of the difference at every dispatch and token breakpoint), against the theorem's threshold 2·max(w_p·L_input, w_q·M) with M = 10,000 KV tokens: ${bound.toLocaleString('en-US')} in every suite. "over" counts the seeds that exceed it.`,
    table(['suite', 'run (s)', 'VTC', 'LCF', 'FCFS', 'bound'], boundRows),
    `VTC stays within the bound in ${verdict.vtcOk} of ${BOUND_SUITES.length} suites under every seed. FCFS exceeds it (median) in ${verdict.fcfsOver.length} suites (${verdict.fcfsOver.join(', ')}): wherever backlogged clients send at different rates it serves them in proportion to their rates, and the gap grows with the interval. LCF exceeds it (median) in ${verdict.lcfOver.length === 0 ? 'no suite' : verdict.lcfOver.join(', ')}: on the real workload clients fall quiet and return with counters lagging behind, and a returning client that is itself backlogged takes the server until its counter catches up — the paper's note on Table 2 that LCF's isolation "can be broken by newly joined clients whose virtual counter is lagging behind". On the distribution shift of Figure 10 LCF over-serves the returning client 1 (see Figure 10) but does not break Theorem 4.4's quantity: client 1 asks 60 requests/min, less than LCF hands it, so it is never backlogged there — the theorem bounds only pairs of backlogged clients.`,
  );
  summary.push([
    'Thm 4.4',
    'two backlogged clients differ by at most 2·max(w_p·L_in, w_q·M) over any interval under VTC; FCFS and LCF are unbounded',
    `every sub-interval, 5 seeds: VTC within 40,000 in ${verdict.vtcOk}/${BOUND_SUITES.length} suites; FCFS over in ${verdict.fcfsOver.length}, LCF over in ${verdict.lcfOver.length} (vtc-real)`,
    yes(verdict.vtcOk === BOUND_SUITES.length && verdict.fcfsOver.length > 0 && verdict.lcfOver.length > 0),
  ]);

  // Table 5 over seeds: the paper's order is VTC > VTC(±50%) > VTC(oracle).
  const t5: [string, OrderingPolicyName, number, number][] = [
    ['VTC', 'vtc', 192.88, 103.77],
    ['VTC(±50%)', 'vtc-noisy-oracle', 33.98, 12.54],
    ['VTC(oracle)', 'vtc-oracle', 5.87, 0.51],
    ['VTC(predict)', 'vtc-predict', Number.NaN, Number.NaN],
  ];
  const t5m = new Map<string, { max: SeedSummary; avg: SeedSummary; acc: SeedSummary; tput: SeedSummary }>();
  for (const [label, policy] of t5)
    t5m.set(label, {
      max: await overSeedsOf('vtc-overload', policy, 360, (s) => s.m.fairness.maxDiff),
      avg: await overSeedsOf('vtc-overload', policy, 360, (s) => s.m.fairness.avgDiff),
      acc: await overSeedsOf('vtc-overload', policy, 360, (s) => s.m.fairness.accumulatedMaxDiff),
      tput: await overSeedsOf('vtc-overload', policy, 360, (s) => s.m.throughput.tokensPerS),
    });
  const paperCell = (x: number) => (Number.isNaN(x) ? '—' : f2(x));
  const t5order = ['VTC', 'VTC(±50%)', 'VTC(oracle)'];
  const t5MaxOk = inOrder(t5order, (l) => t5m.get(l)!.max.median);
  const t5AvgOk = inOrder(t5order, (l) => t5m.get(l)!.avg.median);
  const v5 = t5m.get('VTC')!;
  const n5 = t5m.get('VTC(±50%)')!;
  const o5 = t5m.get('VTC(oracle)')!;
  const p5 = t5m.get('VTC(predict)')!;
  add(
    '### Table 5 over five seeds (`vtc-overload`, 360 s)',
    'Max Diff and Avg Diff are the windowed service difference (cost units/s); the accumulated difference is the largest over every sub-interval in which both clients are backlogged (after the 30 s warm-up). Each fairway cell is median (worst) over the five seeds; paper values are its one run.',
    table(
      ['scheduler', 'paper Max Diff', 'Max Diff', 'paper Avg Diff', 'Avg Diff', 'acc. diff', 'throughput'],
      t5.map(([label, , pMax, pAvg]) => {
        const r = t5m.get(label)!;
        return [
          label,
          paperCell(pMax),
          mw(r.max, f2),
          paperCell(pAvg),
          mw(r.avg, f2),
          mw(r.acc, f0),
          f0(r.tput.median),
        ];
      }),
    ),
    `The paper's order VTC > VTC(±50%) > VTC(oracle) ${t5MaxOk ? 'holds' : 'does not hold'} on the median Max Diff (${f2(v5.max.median)} > ${f2(n5.max.median)} > ${f2(o5.max.median)} is ${t5MaxOk ? 'true' : 'false'}) and ${t5AvgOk ? 'holds' : 'does not hold'} on the median Avg Diff (${f2(v5.avg.median)}, ${f2(n5.avg.median)}, ${f2(o5.avg.median)}). VTC(predict) prices every request at \`max_tokens\` = 256 = its output here, so it runs as the oracle (${f2(p5.max.median)} / ${f2(p5.avg.median)}).${t5MaxOk && t5AvgOk ? '' : ` Measured reason: VTC(±50%) misprices each request by up to ±256 cost units until it finishes (about 10 s later); with jitter plain VTC's windows differ by ${f2(v5.avg.median)} units/s (median Avg Diff), against the paper's 103.77 on a real server, so on this engine the ±50% error is larger than the batching error it would correct.`}`,
  );
  summary.push([
    'Table 5 (5 seeds)',
    'VTC > VTC(±50%) > VTC(oracle) in service difference',
    `median Max Diff ${f2(v5.max.median)} / ${f2(n5.max.median)} / ${f2(o5.max.median)}; Avg Diff ${f2(v5.avg.median)} / ${f2(n5.avg.median)} / ${f2(o5.avg.median)}`,
    t5MaxOk && t5AvgOk ? 'yes' : t5MaxOk || t5AvgOk ? 'partly' : 'no',
  ]);

  // Table 2 over seeds: the paper's order is FCFS > LCF > VTC > VTC(predict) > VTC(oracle).
  const t2: [string, OrderingPolicyName, number, number][] = [
    ['FCFS', 'fcfs', 759.97, 433.53],
    ['LCF', 'lcf', 750.49, 323.82],
    ['VTC', 'vtc', 368.4, 251.66],
    ['VTC(predict)', 'vtc-predict', 365.47, 240.33],
    ['VTC(oracle)', 'vtc-oracle', 329.46, 227.51],
  ];
  const t2m = new Map<string, { max: SeedSummary; avg: SeedSummary; tput: SeedSummary }>();
  for (const [label, policy] of t2)
    t2m.set(label, {
      max: await overSeedsOf('vtc-real', policy, 600, (s) => s.m.fairness.maxDiff),
      avg: await overSeedsOf('vtc-real', policy, 600, (s) => s.m.fairness.avgDiff),
      tput: await overSeedsOf('vtc-real', policy, 600, (s) => s.m.throughput.tokensPerS),
    });
  const order2 = t2.map(([l]) => l);
  const avgOk = inOrder(order2, (l) => t2m.get(l)!.avg.median);
  const coarseOk = inOrder(['FCFS', 'LCF', 'VTC'], (l) => t2m.get(l)!.avg.median);
  const broken = order2
    .slice(1)
    .filter((l, i) => !(t2m.get(order2[i]!)!.avg.median > t2m.get(l)!.avg.median));
  add(
    '### Table 2 over five seeds on the synthetic stand-in (`vtc-real`, 600 s)',
    table(
      ['scheduler', 'paper Max Diff', 'Max Diff', 'paper Avg Diff', 'Avg Diff', 'throughput'],
      t2.map(([label, , pMax, pAvg]) => {
        const r = t2m.get(label)!;
        return [label, f2(pMax), mw(r.max, f2), f2(pAvg), mw(r.avg, f2), f0(r.tput.median)];
      }),
    ),
    `The paper's order FCFS > LCF > VTC > VTC(predict) > VTC(oracle) on Avg Diff ${avgOk ? 'holds on the medians' : `holds on the medians for FCFS > LCF > VTC${coarseOk ? '' : ' only in part'}, and breaks at ${broken.join(', ')} (each not below the scheduler before it)`}. ${avgOk ? '' : 'We have not isolated why the prediction variants are not below VTC here; the Table 2 section below shows what we measured (light clients wait longer for their first token under the oracle at the same service).'}`,
  );
  summary.push([
    'Table 2, stand-in (5 seeds)',
    'FCFS > LCF > VTC > VTC(predict) > VTC(oracle) in Avg Diff',
    order2.map((l) => `${l} ${f0(t2m.get(l)!.avg.median)}`).join(', '),
    avgOk ? 'yes' : coarseOk ? `partly (FCFS > LCF > VTC yes; breaks at ${broken.join(', ')})` : 'no',
  ]);
}

// ---------------------------------------------------------------------------------------------
// Table 2 on the artifact's own trace
// ---------------------------------------------------------------------------------------------

/** Share of a Sim's requests rejected at admission. */
const rejectedShare = (s: Sim) => s.m.requests.rejected / Math.max(1, s.m.requests.arrived);

async function table2Trace(): Promise<void> {
  const rows: string[][] = [];
  const got = new Map<string, { max: SeedSummary; avg: SeedSummary; tput: SeedSummary; rej: SeedSummary }>();
  for (const [label, policy, rpm, pMax, pAvg, pVar, pTput] of TABLE2) {
    const of = (measure: (s: Sim) => number) => overSeedsOf('vtc-real-trace', policy, 600, measure, rpm);
    const r = {
      max: await of((s) => s.m.fairness.maxDiff),
      avg: await of((s) => s.m.fairness.avgDiff),
      diffVar: await of((s) => s.m.fairness.diffVar),
      tput: await of((s) => s.m.throughput.tokensPerS),
      rej: await of(rejectedShare),
    };
    const standIn = await overSeedsOf('vtc-real', policy, 600, (s) => s.m.fairness.avgDiff, rpm);
    got.set(label, r);
    rows.push([
      label,
      `${f2(pMax)} / **${mw(r.max, f1)}**`,
      `${f2(pAvg)} / **${mw(r.avg, f1)}**`,
      `${f0(pVar)} / **${f0(r.diffVar.median)}**`,
      `${pTput} / **${f0(r.tput.median)}**`,
      pct(r.rej.median),
      f0(standIn.median),
    ]);
  }
  const avg = (l: string) => got.get(l)!.avg.median;
  const tput = (l: string) => got.get(l)!.tput.median;
  const order = ['FCFS', 'LCF', 'VTC', 'VTC(predict)', 'VTC(oracle)'];
  const fullOrder = inOrder(order, avg);
  const coarse = inOrder(['FCFS', 'LCF', 'VTC'], avg);
  const broken = order.slice(1).filter((l, i) => !(avg(order[i]!) > avg(l)));
  const sameTput = Math.abs(tput('VTC') - tput('FCFS')) / tput('FCFS');
  const rpm5 = tput('RPM(5)') / tput('VTC');
  R.traceRpm5Ratio = rpm5;
  R.traceCoarse = coarse;
  R.tracePredBelow = ['VTC(predict)', 'VTC(oracle)'].filter((l) => avg(l) < avg('VTC'));
  const ratio = (l: string, paper: number) => paper / avg(l);
  add(
    "## Table 2 on the artifact's trace (`vtc-real-trace`)",
    "The VTC artifact publishes, for every scheduler of Table 2, the per-request results of its real-workload run (`fair_bench/<scheduler>/all_results_real.jsonl` in Ying1123/VTC-artifact, commit 192c2e2). All of them hold the same 1,500 requests — arrival time, client (27 Chatbot Arena models, as LoRA adapters), input and output length — and that trace is vendored here (`packages/sim/traces/vtc-artifact-real.csv`, Apache-2.0, provenance in the README beside it) and replayed request for request by `vtc-real-trace`, with `max_tokens` = the output length as the artifact's client asks. Applying the artifact's own formula (`get_service_diff_over_time` in `fair_bench/plot/visualize.py`, T = 600, 60 s windows, 19 ticks after a 30 s warm-up) to those published results gives the paper's FCFS, LCF, VTC, VTC(predict) and VTC(oracle) rows to two decimals (we recomputed them from the published files; the paper's RPM rows do not come out of that formula, and we have not traced which script made them), so this trace is the workload of the paper's Table 2. The file's header says `req_rate` 3.5 (210 req/min, the figure in the paper and in `exp_suite.py`), but it holds 1,500 requests over 600 s, i.e. **150 req/min**; we replay the file as it is, at 150 req/min (the artifact's README says the original trace was lost and re-sampled). The request arriving at exactly 600 s falls at the cut, so 1,499 are replayed.",
    `Each cell is **paper / fairway**, fairway as median (worst) over seeds ${EVIDENCE_SEEDS.join(', ')} (the trace is fixed; the seeds re-draw the engine's step-time jitter and the noisy predictors). Diff Var and throughput are medians. The last column is the median Avg Diff of the synthetic stand-in \`vtc-real\` (210 req/min) for comparison.`,
    table(
      ['scheduler', 'Max Diff', 'Avg Diff', 'Diff Var', 'throughput', 'rejected', 'stand-in Avg Diff'],
      rows,
    ),
    `On the real trace the paper's order FCFS > LCF > VTC > VTC(predict) > VTC(oracle) on Avg Diff ${fullOrder ? 'holds on the medians' : coarse ? `holds for FCFS > LCF > VTC and breaks at ${broken.join(', ')} (each not below the scheduler before it)` : `breaks at ${broken.join(', ')}`}: ${order.map((l) => `${l} ${f0(avg(l))}`).join(', ')}. VTC's throughput is within ${pct(sameTput)} of FCFS's, and RPM(5) serves ${pct(rpm5)} of VTC's throughput (paper ${pct(340 / 779)}). Unlike on the synthetic overload suites (Tables 5 and 6 below), the magnitudes are of the paper's order on this trace: the paper's Avg Diff is ${f2(ratio('FCFS', 433.53))}× fairway's for FCFS, ${f2(ratio('LCF', 323.82))}× for LCF and ${f2(ratio('VTC', 251.66))}× for VTC. Throughput is counted differently: fairway's runs are cut at 600 s, while the artifact's server drained its queue (its FCFS run took 758 s) and divides by that time.`,
  );
  summary.push([
    'Table 2, real trace (5 seeds)',
    'FCFS > LCF > VTC > VTC(predict) > VTC(oracle) in Avg Diff at equal throughput; RPM(5) cuts throughput',
    `${order.map((l) => `${l} ${f0(avg(l))}`).join(', ')} (paper 434, 324, 252, 240, 228); RPM(5) ${pct(rpm5)} of VTC's throughput (paper 44%)`,
    fullOrder && sameTput < 0.03 && rpm5 < 2 / 3
      ? 'yes'
      : coarse && sameTput < 0.03
        ? `partly (FCFS > LCF > VTC yes${broken.length ? `; breaks at ${broken.join(', ')}` : ''}${rpm5 < 2 / 3 ? '' : `; RPM(5) keeps ${pct(rpm5)}`})`
        : 'no',
  ]);
}

// ---------------------------------------------------------------------------------------------
// S-LoRA's admission cadence: Tables 5 and 6, Figure 15
// ---------------------------------------------------------------------------------------------

/**
 * The engine admission rules compared: vLLM's (the engine model's default: every step), S-LoRA's
 * (`max_wait_tokens` = 10 decode steps, future-peak check), and the same with k above every
 * output length, so that a running batch is never joined: admission waits until it drains.
 */
const CADENCES: readonly { label: string; k: number }[] = [
  { label: 'every step (vLLM)', k: 0 },
  { label: 'engine every 10 steps (S-LoRA cadence)', k: 10 },
  { label: 'k = 1024 (drain)', k: 1024 },
];

/** A built-in VTC scenario with `admitEverySteps: k` on its engines (the name itself when k = 0). */
function withCadence(name: string, k: number): string | LoadedScenario {
  if (k === 0) return name;
  const base = VTC_SCENARIOS[name] ?? VTC_APPENDIX_SCENARIOS[name]!;
  const cluster = {
    engines: base.cluster.engines.map((e) => ({ ...e, options: { ...e.options, admitEverySteps: k } })),
  };
  const label = `${name}@admitEverySteps=${k}`;
  return { name: label, scenario: parseScenario({ ...base, cluster }, label), baseDir: process.cwd() };
}

/**
 * How one-sided the running batch is: the mean, over every 3 s from the warm-up on, of the largest
 * share one client has of the requests running then (between first token and finish).
 */
function topShare(sim: Sim): number {
  const recs = sim.run.records.filter((r) => r.firstTokenS !== undefined && r.finishS !== undefined);
  const shares: number[] = [];
  for (let t = 30; t < sim.run.durationS; t += 3) {
    const by = new Map<string, number>();
    let n = 0;
    for (const r of recs)
      if (r.firstTokenS! <= t && t < r.finishS!) {
        by.set(r.req.tenant, (by.get(r.req.tenant) ?? 0) + 1);
        n++;
      }
    if (n > 0) shares.push(Math.max(...by.values()) / n);
  }
  return shares.reduce((a, b) => a + b, 0) / Math.max(1, shares.length);
}

const routerCache = new Map<string, Sim>();

/**
 * VTC inside S-LoRA's router on fairway's engine model (`slora-router.ts`, a model of the paper's
 * server for this probe), admitting every `k` decode steps with the future-peak check.
 */
function sloraRouter(scenario: string, durationS: number, seed: number, k: number): Sim {
  const key = JSON.stringify([scenario, durationS, seed, k]);
  const hit = routerCache.get(key);
  if (hit) return hit;
  const input = buildRunInput(loadScenario(scenario), { durationS, seed });
  const run = runSloraRouter(input, k);
  const sim = { input, run, m: computeMetrics(run) };
  routerCache.set(key, sim);
  process.stderr.write('.');
  return sim;
}

/** One measure of the S-LoRA router probe over {@link EVIDENCE_SEEDS}. */
function routerOverSeeds(scenario: string, durationS: number, measure: (s: Sim) => number): SeedSummary {
  return summarizeSeeds(EVIDENCE_SEEDS.map((seed) => measure(sloraRouter(scenario, durationS, seed, 10))));
}

/** Paper rows of Tables 5 and 6: Max Diff, Avg Diff. */
const CADENCE_TABLES: readonly {
  table: string;
  scenario: string;
  rows: readonly [string, OrderingPolicyName, number, number][];
}[] = [
  {
    table: 'Table 5',
    scenario: 'vtc-overload',
    rows: [
      ['VTC', 'vtc', 192.88, 103.77],
      ['VTC(±50%)', 'vtc-noisy-oracle', 33.98, 12.54],
      ['VTC(oracle)', 'vtc-oracle', 5.87, 0.51],
    ],
  },
  {
    table: 'Table 6',
    scenario: 'vtc-overload-multi',
    rows: [
      ['VTC', 'vtc', 322.16, 162.2],
      ['VTC(±50%)', 'vtc-noisy-oracle', 99.43, 66.32],
      ['VTC(oracle)', 'vtc-oracle', 43.23, 36.34],
    ],
  },
];

/** Figure 15's settings: the artifact's suites; the 65,000-token pool's results are not published. */
const FIG15: readonly { label: string; scenario: string; artifact?: number }[] = [
  { label: '35,000 KV, 256/256', scenario: 'vtc-ablation-35000-256', artifact: 45757 },
  { label: '35,000 KV, 512/512', scenario: 'vtc-ablation-35000-512', artifact: 27160 },
  { label: '35,000 KV, 768/768', scenario: 'vtc-ablation-35000-768', artifact: 33396 },
  { label: '65,000 KV, 512/512', scenario: 'vtc-ablation-65000-512' },
];

async function cadenceSection(): Promise<void> {
  add(
    "## S-LoRA's admission cadence: Tables 5, 6 and Figure 15",
    "The paper measured on S-LoRA, whose router admits new requests into a running batch only every 10 decode steps (`max_wait_tokens` in `slora/server/router/manager.py`) and admits a request only if the batch's future peak of KV use fits (`_can_add_new_req` in `req_queue.py`: every running request growing to its `max_new_tokens`, each freeing its memory when it finishes). fairway's engine model admits every step as vLLM does; `admitEverySteps: k` (an engine option, settable in scenario files) admits as S-LoRA does. The rows *in S-LoRA's router* move VTC itself into the router, as in the paper's server: a model of S-LoRA's router (`packages/sim/bench/slora-router.ts`, VTC only) drives the same engine with `admitEverySteps: 10`, without fairway's gateway. In every other row fairway's gateway stays in front of the engine in every run: it dispatches in VTC order only when the replica has room for the prompt plus `max_tokens` of every request on it, a sum that is never below the future peak, so the engine's peak check never refuses what the gateway sends; what the cadence changes is when dispatched requests start.",
    `Each fairway cell is median (worst) over seeds ${EVIDENCE_SEEDS.join(', ')}; *one-sided* is the mean share of the running batch that its largest client holds (0.5 is an even split of two clients, 1 means the batch is one client's). The paper's numbers are its one run.`,
  );
  const t5t6: {
    table: string;
    k0: number;
    k10: number;
    drain: number;
    paper: number;
    side10: number;
    sideDrain: number;
    router: number;
    sideRouter: number;
  }[] = [];
  for (const spec of CADENCE_TABLES) {
    const rows: string[][] = [];
    const vtcAvg = new Map<number, number>();
    const vtcSide = new Map<number, number>();
    for (const [label, policy, pMax, pAvg] of spec.rows)
      for (const c of CADENCES) {
        const sc = withCadence(spec.scenario, c.k);
        const max = await overSeedsOf(sc, policy, 360, (s) => s.m.fairness.maxDiff);
        const avg = await overSeedsOf(sc, policy, 360, (s) => s.m.fairness.avgDiff);
        const acc = await overSeedsOf(sc, policy, 360, (s) => s.m.fairness.accumulatedMaxDiff);
        const tput = await overSeedsOf(sc, policy, 360, (s) => s.m.throughput.tokensPerS);
        const side = await overSeedsOf(sc, policy, 360, topShare);
        if (policy === 'vtc') {
          vtcAvg.set(c.k, avg.median);
          vtcSide.set(c.k, side.median);
        }
        rows.push([
          `${label}, ${c.label}`,
          f2(pMax),
          mw(max, f2),
          f2(pAvg),
          mw(avg, f2),
          mw(acc, f0),
          f0(tput.median),
          f2(side.median),
        ]);
        if (policy !== 'vtc' || c.k !== 1024) continue;
        const of = (measure: (s: Sim) => number) => routerOverSeeds(spec.scenario, 360, measure);
        const ravg = of((s) => s.m.fairness.avgDiff);
        const rside = of(topShare);
        vtcAvg.set(-1, ravg.median);
        vtcSide.set(-1, rside.median);
        rows.push([
          `${label}, in S-LoRA's router (k = 10)`,
          f2(pMax),
          mw(
            of((s) => s.m.fairness.maxDiff),
            f2,
          ),
          f2(pAvg),
          mw(ravg, f2),
          mw(
            of((s) => s.m.fairness.accumulatedMaxDiff),
            f0,
          ),
          f0(of((s) => s.m.throughput.tokensPerS).median),
          f2(rside.median),
        ]);
      }
    const paper = spec.rows[0]![3];
    t5t6.push({
      table: spec.table,
      k0: vtcAvg.get(0)!,
      k10: vtcAvg.get(10)!,
      drain: vtcAvg.get(1024)!,
      paper,
      side10: vtcSide.get(10)!,
      sideDrain: vtcSide.get(1024)!,
      router: vtcAvg.get(-1)!,
      sideRouter: vtcSide.get(-1)!,
    });
    add(
      `### ${spec.table} with each admission rule (\`${spec.scenario}\`, 360 s)`,
      table(
        [
          'scheduler, admission',
          'paper Max Diff',
          'Max Diff',
          'paper Avg Diff',
          'Avg Diff',
          'acc. diff',
          'throughput',
          'one-sided',
        ],
        rows,
      ),
    );
  }
  const ratioLine = t5t6
    .map(
      (x) =>
        `${x.table}: the paper's VTC Avg Diff is ${f1(x.paper / x.k0)}× fairway's with vLLM's admission, ${f1(x.paper / x.k10)}× with the engine admitting every 10 decode steps behind the gateway, ${f1(x.paper / x.drain)}× when admission waits for the batch to drain, and ${f1(x.paper / x.router)}× with VTC inside S-LoRA's router`,
    )
    .join('; ');
  const k10Closes = t5t6.every((x) => x.k10 > 2 * x.k0);
  // A rule "closes most of the gap" where it multiplies fairway's Avg Diff over fourfold.
  const drainCloses = t5t6.every((x) => x.drain > 4 * x.k0);
  const routerCloses = t5t6.every((x) => x.router > 4 * x.k0);
  add(
    `**Does the cadence explain the ~40× gap?** ${ratioLine}. ${k10Closes ? 'The engine’s cadence at k = 10 behind the gateway more than doubles the differences.' : `Behind fairway's gateway, the engine's cadence at k = 10 leaves the differences where they were: a dispatched request waits at most 10 decode steps (about half a second) to start, and the gateway still replaces each finished request with one from the client whose counter is lowest, so the running batch stays mixed (VTC one-sided ${t5t6.map((x) => f2(x.side10)).join(' and ')}).`} ${drainCloses ? `When a running batch is never joined the differences approach the paper’s: the batch then starts and ends together and the gateway refills it all at once from the clients whose counters are lowest, so each batch belongs to one client of two, or to a few of eight (VTC one-sided ${t5t6.map((x) => f2(x.sideDrain)).join(' and ')}).` : 'Never joining a running batch does not close the gap on every table.'} (Draining is a probe of the mechanism, not a model of S-LoRA: it idles the engine while a batch drains; its throughput cost is measured on Figure 15's suites below.) ${routerCloses ? `With VTC inside S-LoRA's router — requests wait in the router, and at each admission point VTC offers them lowest counter first while the engine admits the head of that order as long as the future peak fits — the same engine model forms such batches by itself (one-sided ${t5t6.map((x) => f2(x.sideRouter)).join(' and ')}) and the differences reach the paper's order.` : `With VTC inside S-LoRA's router the differences do not reach the paper's order on every table (one-sided ${t5t6.map((x) => f2(x.sideRouter)).join(' and ')}).`} The artifact's own per-request results show those batches: counting, every 30 s, each client's requests between their first token and their finish in \`fair_bench/VTC/all_results_overload.jsonl\`, all 20 running requests belong to one client at 90, 120, 180, 210, 270, 300 and 330 s (20/0 at 90 s, 0/20 at 120 s), while under VTC(oracle) (\`fair_bench/VTC_oracle/all_results_overload.jsonl\`), which charges a request's whole output when it is picked, they split 10/10 from 90 s to 210 s. The ablation runs behave alike (70/0 at 150 s, 35/0 at 300 s and 23/0 at 450 s in the 256-, 512- and 768-token suites). So the hypothesis that the 10-step cadence accounts for the gap is **${k10Closes ? 'supported' : 'not supported'}** on fairway's architecture; ${routerCloses ? "what accounts for most of it is where VTC picks: in S-LoRA's router it picks a whole admission's worth of requests at once under the future-peak check, while fairway's gateway picks one request per finished request under a sum of reservations (which of the two differences matters more we have not separated)" : 'where VTC picks accounts for only part of it'}. The router model is a probe for this report (\`packages/sim/bench/slora-router.ts\`), not a fairway scheduler.`,
  );

  // Figure 15: accumulated service difference by pool size and request length.
  const rows: string[][] = [];
  const acc = new Map<string, SeedSummary>();
  const tputOf = new Map<string, number>();
  for (const f of FIG15)
    for (const c of CADENCES) {
      const sc = withCadence(f.scenario, c.k);
      const a = await overSeedsOf(sc, 'vtc', 600, (s) => s.m.fairness.accumulatedMaxDiff);
      const tput = await overSeedsOf(sc, 'vtc', 600, (s) => s.m.throughput.tokensPerS);
      const side = await overSeedsOf(sc, 'vtc', 600, topShare);
      acc.set(`${f.scenario}@${c.k}`, a);
      tputOf.set(`${f.scenario}@${c.k}`, tput.median);
      rows.push([
        `${f.label}, ${c.label}`,
        f.artifact === undefined ? '—' : f0(f.artifact),
        mw(a, f0),
        f0(tput.median),
        f2(side.median),
      ]);
      if (c.k !== 1024) continue;
      const of = (measure: (s: Sim) => number) => routerOverSeeds(f.scenario, 600, measure);
      const ra = of((s) => s.m.fairness.accumulatedMaxDiff);
      acc.set(`${f.scenario}@router`, ra);
      rows.push([
        `${f.label}, in S-LoRA's router (k = 10)`,
        f.artifact === undefined ? '—' : f0(f.artifact),
        mw(ra, f0),
        f0(of((s) => s.m.throughput.tokensPerS).median),
        f2(of(topShare).median),
      ]);
    }
  const at = (scenario: string, k: number | 'router') => acc.get(`${scenario}@${k}`)!.median;
  const drainCost = FIG15.map((f) => 1 - tputOf.get(`${f.scenario}@1024`)! / tputOf.get(`${f.scenario}@0`)!);
  const fig15Claims = [...CADENCES, { label: "VTC in S-LoRA's router", k: 'router' as const }].map((c) => {
    const pool = at('vtc-ablation-65000-512', c.k) > at('vtc-ablation-35000-512', c.k);
    const len = at('vtc-ablation-35000-512', c.k) > at('vtc-ablation-35000-256', c.k);
    const len768 = at('vtc-ablation-35000-768', c.k) > at('vtc-ablation-35000-256', c.k);
    return { c, pool, len: len && len768 };
  });
  const seed42 = async (scenario: string) => sloraRouter(scenario, 600, 42, 10);
  const a = await diffPlot(
    'fig15a-pool-size.svg',
    {
      '35,000 KV': await seed42('vtc-ablation-35000-512'),
      '65,000 KV': await seed42('vtc-ablation-65000-512'),
    },
    "Figure 15a · 512/512, VTC in S-LoRA's router",
  );
  const b = await diffPlot(
    'fig15b-request-length.svg',
    {
      '256/256': await seed42('vtc-ablation-35000-256'),
      '512/512': await seed42('vtc-ablation-35000-512'),
      '768/768': await seed42('vtc-ablation-35000-768'),
    },
    "Figure 15b · 35,000 KV, VTC in S-LoRA's router",
  );
  add(
    '### Figure 15 — memory pool size and request length (section 5.4)',
    '> "with a larger memory pool size, the attainable batch size becomes larger. Therefore, there is greater variation in the absolute difference of accumulated services received by the clients when the memory pool is 65000 than that is 35000 … larger request lengths will also lead to greater variation in the service difference … The curves of (512*2) and (768*2) show the same variance. This is because at length (512*2), the upper bound given by VTC has been reached."',
    "Two backlogged clients on Llama-2-13B on one A100-80GB (the artifact's `overload-s4-*` suites: 180/360 req/min of 256/256, 90/180 of 512/512, 60/120 of 768/768 on a 35,000-token pool, and 120/240 of 512/512 on 65,000). The quantity is the largest difference in accumulated service (cost units) over the run; the *artifact* column is the same quantity computed from the artifact's published per-request results (`fair_bench/ablation/80GB_llama13B_35000/`, service spread from first token to finish, 3 s steps; the 65,000-token run is not published).",
    table(['setting, admission', 'artifact', 'acc. diff', 'throughput', 'one-sided'], rows),
    `Larger pool → larger difference (65,000 vs 35,000 at 512/512): ${fig15Claims.map((x) => `${x.c.label} ${x.pool ? 'yes' : 'no'}`).join(', ')}. Longer requests → larger difference (512 and 768 above 256): ${fig15Claims.map((x) => `${x.c.label} ${x.len ? 'yes' : 'no'}`).join(', ')}. Draining costs ${pct(Math.min(...drainCost))}–${pct(Math.max(...drainCost))} of the throughput on these suites. The plots show seed 42 with VTC in S-LoRA's router.`,
    a,
    b,
  );
  const k10 = fig15Claims.find((x) => x.c.k === 10)!;
  const inRouter = fig15Claims.find((x) => x.c.k === 'router')!;
  const verdict = (x: { pool: boolean; len: boolean }) =>
    x.pool && x.len
      ? 'yes'
      : x.pool || x.len
        ? `partly (pool ${x.pool ? 'yes' : 'no'}, length ${x.len ? 'yes' : 'no'})`
        : 'no';
  summary.push(
    ...t5t6.map((x) => [
      `${x.table}, admission cadence (5 seeds)`,
      'S-LoRA’s admission (every 10 decode steps, future-peak check) brings VTC’s Avg Diff to the paper’s magnitude',
      `paper ÷ fairway: ${f1(x.paper / x.k0)}× (vLLM), ${f1(x.paper / x.k10)}× (k = 10), ${f1(x.paper / x.drain)}× (drain), ${f1(x.paper / x.router)}× (VTC in S-LoRA's router)`,
      x.k10 > 2 * x.k0
        ? 'yes'
        : x.router > 4 * x.k0
          ? "no for the cadence alone (k = 10 behind the gateway changes nothing); VTC inside S-LoRA's router closes most of the gap"
          : 'no',
    ]),
    [
      'Fig. 15 (5 seeds)',
      'larger KV pool and longer requests give larger accumulated service differences',
      (['gateway, k = 10', "VTC in S-LoRA's router"] as const)
        .map((label, i) => {
          const k = i === 0 ? 10 : ('router' as const);
          return `${label}: 65,000 vs 35,000 ${f0(at('vtc-ablation-65000-512', k))} vs ${f0(at('vtc-ablation-35000-512', k))}; 256/512/768 ${f0(at('vtc-ablation-35000-256', k))} / ${f0(at('vtc-ablation-35000-512', k))} / ${f0(at('vtc-ablation-35000-768', k))}`;
        })
        .join('; '),
      `gateway: ${verdict(k10)}; router: ${verdict(inRouter)}`,
    ],
  );
}

// ---------------------------------------------------------------------------------------------
// The report
// ---------------------------------------------------------------------------------------------

const intro = [
  '# Reproducing the VTC paper with fairway',
  '',
  'Sheng et al., *Fairness in Serving Large Language Models* (OSDI 2024): figures 3–10 (section 5.2), Table 2 (section 5.3) replayed from the artifact’s own request trace and on a synthetic stand-in, Figure 15 (section 5.4), Tables 5 and 6 (appendix B.3) with the engine admitting as vLLM does and as S-LoRA does, and the cross-dispatcher curve as an extra. Generated by `npm run report:vtc` (`packages/sim/bench/vtc-report.ts`); every run is seeded, so the numbers and plots below regenerate identically. The claims are judged over five seeds (median and worst) in the first section; the figure and table sections after it show one run each (each scenario’s own seed, 42).',
  '',
  "**Setup.** The paper runs Llama-2-7B on one A10G (24 GB) with S-LoRA, a KV pool of 10,000 tokens and block size 1. fairway simulates the same engine (`A10G-24GB`, `llama-2-7b`, `kvCapacityTokens: 10000`, `blockSize: 1`; step times from the VTC authors' A10G profile, see `packages/perf/src/cost-models.ts`, each multiplied by vLLM's measured step-time jitter, see below) and schedules it with the production `Gateway` over a `MemoryStore`: requests wait at the gateway until the engine has room for their prompt plus `max_tokens`, so the gateway's order is the order that runs. Workloads are the built-in scenarios named in each section (`packages/sim/src/scenarios/vtc.ts`). Service is input + 2·output tokens (the paper's w_p = 1, w_q = 2); service rates use 60 s windows (T = 30 s); the windowed *service difference* and its Max/Avg/Var follow the artifact's scripts (`packages/sim/src/metrics.ts`). Runs are cut at the scenario's end (600 s unless stated); the artifact lets the server drain the queue, so fairway's response-time curves omit requests still waiting at the cut.",
  '',
];

/** Sections `--only` can run on their own: those that read no number another section sets. */
const SECTIONS: Record<string, () => Promise<unknown>> = {
  evidence,
  figure3,
  figure4,
  figure5: () => onOff(5),
  figure6: () => onOff(6),
  figure7: () => poisson(7),
  figure8: () => poisson(8),
  figure9,
  figure10,
  table2,
  table2Trace,
  table5,
  cadence: cadenceSection,
  dispatchers: dispatchersCurve,
};

if (args.only !== undefined) {
  await runSections(args.only, SECTIONS);
  const rows = table(['paper', 'claim', 'fairway measured', 'holds'], summary, true).split('\n').slice(2);
  process.stdout.write(`${[...md, ...rows].join('\n')}\n`);
  process.exit(0);
}

await evidence();
const evidenceMd = md.splice(0);
const evidenceSummary = summary.splice(0);
await figure3();
await figure4();
await onOff(5);
await onOff(6);
await poisson(7);
await poisson(8);
await figure9();
await figure10();
const figures = md.splice(0);
await table2();
const table2Md = md.splice(0);
add(
  '### How the stand-in was built, and why it differs',
  "Before the artifact's trace was vendored, `vtc-real` stood in for it with the paper's aggregate statistics (27 clients, 210 requests/min, mean 136 input / 256 output tokens, lengths clipped to the paper's ranges, bursty Gamma CV 2 arrivals). Its client shares follow the artifact's published per-request results (`fair_bench/FCFS/all_results_real.jsonl` in Ying1123/VTC-artifact). There a client is one Chatbot Arena model, and the sampled conversations span the months of the log re-scaled onto 10 minutes, so which clients dominate shifts during the run: in samples of about 85 requests, `rank-8-0` sends about half at 0–26 s, over a quarter at 137–164 s and one in twenty at 316–353 s, while `rank-8-2` sends a seventh at first and a quarter to a third later, and `rank-8-10` none in the first two samples and a sixth to a fifth from the middle on. `vtc-real` models this as three dominant clients whose shares change every 200 s (45/20/0%, 10/25/22%, 5/30/18%) and a stationary Zipf(1) tail of 24 clients. Before, it used stationary Zipf(1) shares over all 27, which gives the top client 26% throughout.",
  "RPM(5) throttles only clients above 5 requests/minute, so its throughput depends on how much of the traffic the heaviest clients carry in each minute. With shifting dominant clients RPM(5) rejects more and cuts throughput to well under two thirds, and VTC's lead over LCF grows, because clients that fall quiet and return are what LCF's missing counter lift gets wrong. (The published results file holds 150 requests/min — 1,500 requests over 600 s, although its header says `req_rate` 3.5, the paper's 210 — see the real-trace table above; the last row shows the stand-in at 150.)",
);
await shareModels();
{
  const base = VTC_SCENARIOS['vtc-real']!;
  const poissonReal: LoadedScenario = {
    name: 'vtc-real-cv1',
    scenario: parseScenario(
      { ...base, streams: (base.streams ?? []).map((st) => ({ ...st, arrival: { ...st.arrival, cv: 1 } })) },
      'vtc-real (CV 1)',
    ),
    baseDir: process.cwd(),
  };
  const fcfs2 = (await simulate('vtc-real', 'fcfs')).m.fairness.avgDiff;
  const fcfs1 = (await simulate(poissonReal, 'fcfs')).m.fairness.avgDiff;
  const vtc1 = (await simulate(poissonReal, 'vtc')).m.fairness.avgDiff;
  const oracle1 = (await simulate(poissonReal, 'vtc-oracle')).m.fairness.avgDiff;
  add(
    `FCFS's Avg Diff is also far above the paper's (${f0(fcfs2)} against 434). Part of it is the stand-in's burstiness: with Poisson arrivals (CV 1) instead of Gamma CV 2, FCFS's Avg Diff falls to ${f0(fcfs1)} (VTC's to ${f0(vtc1)}, VTC(oracle)'s to ${f0(oracle1)}); the rest we cannot attribute without the original trace.`,
  );
}
const why2 = md.splice(0);
await table2Trace();
const table2TraceMd = md.splice(0);
await table5();
const table5Md = md.splice(0);
await cadenceSection();
const cadenceMd = md.splice(0);
await dispatchersCurve();
const beyond = md.splice(0);

const out = [
  ...intro,
  '## Summary',
  '',
  table(['paper', 'claim', 'fairway measured', 'holds'], [...evidenceSummary, ...summary], true),
  '',
  ...evidenceMd,
  '## Figures 3–10 — synthetic workloads (section 5.2)',
  '',
  "Each section quotes the paper (caption, then text), states what fairway measured, and shows the plots: service rate per client (60 s window), response time per client, or the absolute difference in accumulated service (log scale, from the 30 s warm-up). Which panel shows what follows the paper's text; its figures themselves are not in the text we have.",
  '',
  ...figures,
  ...table2TraceMd,
  ...table2Md,
  ...why2,
  ...table5Md,
  ...cadenceMd,
  '## Where and why fairway differs from the paper',
  '',
  `- **Magnitudes of the windowed service difference on synthetic workloads.** fairway's VTC keeps two backlogged clients within a few cost units per second of each other (Table 5: Max Diff ${f1(R.t5.vtcMax)} vs the paper's 192.9; Avg ${f1(R.t5.vtcAvg)} vs 103.8), and its VTC(oracle) likewise. The simulated engine carries vLLM's measured step-time jitter (lognormal, CV 0.10), and the differences stay small: jitter of this size moves when a step ends by a few milliseconds, while the gateway still refills the batch the moment memory frees. The engine admitting as S-LoRA does (every 10 decode steps, future-peak check) does not change that behind fairway's gateway; the artifact's own results show batches that start and finish together and each belong to one client, and the same engine model forms such batches, with differences of the paper's order, when VTC picks inside a model of S-LoRA's router instead of at the gateway (see *S-LoRA's admission cadence* above). Both are well inside Theorem 4.4's bound (40,000 here; the five-seed section above checks every sub-interval). The orderings, which are what the paper argues from, are the same, except where the magnitude itself decides: the ±50% noisy oracle of Table 5 adds more error than plain VTC has here.`,
  `- **Throughput.** fairway's A10G model serves ${f0(R.overloadTput)} tokens/s on the 256/256 synthetic suites (paper: 875–904 in Tables 4–6) and ${f0(R.realTput)} on \`vtc-real\` (paper 777–781); the cost model comes from the authors' profile, not from our own GPU measurements.`,
  `- **Real workload.** Table 2 is replayed from the artifact's own request trace (\`vtc-real-trace\`, 150 req/min as published) and, for comparison, on the synthetic stand-in \`vtc-real\` (210 req/min) whose client shares follow it. On the trace the ordering FCFS > LCF > VTC ${R.traceCoarse ? 'holds' : 'does not hold'} on the five-seed medians and RPM(5) cuts throughput to ${pct(R.traceRpm5Ratio)} of VTC's (paper ${pct(340 / 779)}); on the stand-in RPM(5) cuts it to ${pct(R.rpm5Ratio)}. On the trace ${R.tracePredBelow.length === 0 ? 'neither VTC(predict) nor VTC(oracle) is' : `only ${R.tracePredBelow.join(' and ')} ${R.tracePredBelow.length > 1 ? 'are' : 'is'}`} below VTC on the median Avg Diff (the paper has both below).`,
  "- **VTC(predict).** The paper predicts a request's output when it is selected (Algorithm 3). fairway predicted it at admission until commit 56fca6c: a request that waited minutes kept the prediction of its arrival, which on `vtc-overload` left a permanent offset of ~2,400 cost units between the clients. The gateway re-prices at dispatch (`packages/scheduler/src/gateway.ts`, the same `Gateway` the live dispatcher runs), and a flow without history is priced at `max_tokens` (or a configured `expectedOutput`, `packages/policy/src/vtc.ts`) and refunded at settle, so every flow's in-flight output is in its counter from its first request. The artifact starts each client's prediction at 0; on `vtc-overload` that made VTC(predict)'s start-up longer (Table 5).",
  '- **Response times** are cut at the end of the run (the artifact drains the queue after the last arrival), so late curves of overloaded clients omit requests that never started.',
  '',
  ...beyond,
  '## Reproduce',
  '',
  '```sh',
  'npm run report:vtc                       # this report and reports/vtc/*.svg (about 4½ CPU-minutes)',
  'npx fairway sim --scenario vtc-overload --policy vtc --json     # one run of any row above',
  'npx fairway sim --scenario vtc-real --policy rpm --rpm 5 --out /tmp/rpm5   # with plots',
  'npx fairway sim --scenario vtc-real-trace --policy vtc --json   # Table 2 on the artifact trace',
  '# S-LoRA admission: a scenario file whose engines set options: { admitEverySteps: 10 }',
  'npx vitest run packages/sim/test/fairness-*.test.ts            # the properties, as tests',
  '```',
  '',
];
writeFileSync(join(OUT, 'vtc-reproduction.md'), out.join('\n'));
process.stderr.write(`\nwrote ${join(OUT, 'vtc-reproduction.md')} and ${PLOT_DIR}/*.svg\n`);
