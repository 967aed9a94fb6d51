/**
 * FairServe's main comparisons (FairServe section 5, Figures 8a–d) on `fairserve-abuse` over five
 * seeds: RPM (a per-user rate limit at OIT's user limit, and a stricter one that bites benign
 * users), VTC, FS (W) = WSC alone and FS (W+I) = WSC + OIT. Per policy: interactions throttled
 * (broken), cut in the middle, tokens wasted on them, users throttled (abusive / benign), the share
 * of benign users who waited longer than 5 s, the benign users' mean queueing delay, output
 * throughput, and Jain's index over the benign users' service. Median and worst over the seeds.
 * Runs it with open-loop interactions and with closed-loop ones (`fairserve-abuse-closed`: each next
 * call waits for the previous answer), and FS (W+I) also with its counters charged at completion
 * (Algorithm 1 as written). Writes `reports/fairserve-reproduction.md`'s tables to stdout
 * (`npm run report:fairserve`).
 */
import type { RequestDescriptor } from '@fairway/core';
import { type OrderingPolicyName, orderingPolicyByName, placementByName } from '@fairway/policy';
import { fairserveOptionsOf } from '../src/fairserve-profiles.ts';
import { computeInteractionMetrics } from '../src/interaction-metrics.ts';
import { computeMetrics } from '../src/metrics.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario } from '../src/scenario.ts';
import { FAIRSERVE_ABUSER } from '../src/scenarios/fairserve.ts';

const SEEDS = (process.env.FAIRSERVE_SEEDS ?? '1,2,3,4,5').split(',').map(Number);
/** Open-loop interactions (the paper's setup as modelled first), then closed loop. */
const WORKLOADS = ['fairserve-abuse', 'fairserve-abuse-closed'] as const;

interface Row {
  throttledInteractions: number;
  brokenMidway: number;
  wastedTokens: number;
  abuserThrottled: number;
  benignUsersThrottled: number;
  delayedBenignShare: number;
  benignDelayMeanS: number;
  outputTokPerS: number;
  benignJain: number;
}

const benign = (r: RequestDescriptor) => r.tenant !== FAIRSERVE_ABUSER;

interface Policy {
  readonly label: string;
  readonly name: OrderingPolicyName;
  readonly rpm?: 'oit' | number;
  /** WSC's counters charged at completion (Algorithm 1 as written) instead of while streaming. */
  readonly atCompletion?: boolean;
}

async function run(workload: (typeof WORKLOADS)[number], policy: Policy, seed: number) {
  const loaded = loadScenario(workload);
  const input = buildRunInput(loaded, { seed });
  const fs = fairserveOptionsOf(buildRunInput(loaded, { seed: seed + 1000 }).arrivals);
  const rpm = policy.rpm === 'oit' ? fs.oit.userLimit : policy.rpm;
  const wsc = policy.atCompletion ? { ...fs.wsc, chargeAt: 'completion' as const } : fs.wsc;
  const sim = await runSimulation({
    ...input,
    ordering: orderingPolicyByName(policy.name, { ...fs, wsc, ...(rpm !== undefined ? { rpm } : {}) }),
    placement: placementByName('least-kv'),
  });
  const ix = computeInteractionMetrics(sim);
  const m = computeMetrics(sim);
  const delays = sim.records
    .filter((r) => benign(r.req) && !r.rejected)
    .map((r) => (r.dispatchS ?? sim.durationS) - r.arrivalS);
  const benignUsers = ix.users.filter((u) => u.user !== FAIRSERVE_ABUSER);
  const service = m.tenants.filter((t) => t.id !== FAIRSERVE_ABUSER).map((t) => t.service);
  const sum = service.reduce((a, b) => a + b, 0);
  const sq = service.reduce((a, b) => a + b * b, 0);
  const abuser = ix.users.find((u) => u.user === FAIRSERVE_ABUSER);
  return {
    throttledInteractions: ix.interactions.broken,
    brokenMidway: ix.interactions.brokenMidway,
    wastedTokens: ix.wastedTokens,
    abuserThrottled: Object.values(abuser?.rejected ?? {}).reduce((a, b) => a + b, 0),
    benignUsersThrottled: benignUsers.filter((u) => Object.values(u.rejected).some((n) => n > 0)).length,
    delayedBenignShare:
      benignUsers.filter((u) => (u.queueDelayS.max ?? 0) > 5).length / Math.max(1, benignUsers.length),
    benignDelayMeanS: delays.reduce((a, b) => a + b, 0) / Math.max(1, delays.length),
    outputTokPerS: m.throughput.outputTokensPerS,
    benignJain: sq > 0 ? (sum * sum) / (service.length * sq) : 1,
  } satisfies Row;
}

const POLICIES: Policy[] = [
  { label: 'RPM (OIT user limit)', name: 'rpm', rpm: 'oit' },
  { label: 'RPM (8/min)', name: 'rpm', rpm: 8 },
  { label: 'VTC', name: 'vtc' },
  { label: 'FS (W)', name: 'wsc' },
  { label: 'FS (W+I)', name: 'wsc-oit' },
  { label: 'FS (W+I), charged at completion', name: 'wsc-oit', atCompletion: true },
];
// Worse is larger for every column but throughput and Jain's index.
const COLUMNS: { key: keyof Row; head: string; digits: number; higherBetter?: boolean }[] = [
  { key: 'throttledInteractions', head: 'interactions throttled', digits: 0 },
  { key: 'brokenMidway', head: 'cut midway', digits: 0 },
  { key: 'wastedTokens', head: 'wasted tokens', digits: 0 },
  { key: 'abuserThrottled', head: 'abuser requests throttled', digits: 0 },
  { key: 'benignUsersThrottled', head: 'benign users throttled', digits: 0 },
  { key: 'delayedBenignShare', head: 'benign users delayed > 5 s', digits: 3 },
  { key: 'benignDelayMeanS', head: 'benign mean queueing delay, s', digits: 2 },
  { key: 'outputTokPerS', head: 'output tok/s', digits: 0, higherBetter: true },
  { key: 'benignJain', head: "Jain's index (benign service)", digits: 3, higherBetter: true },
];

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? (s[(n - 1) / 2] as number) : ((s[n / 2 - 1] as number) + (s[n / 2] as number)) / 2;
};

for (const workload of WORKLOADS) {
  console.log(`${workload}, seeds ${SEEDS.join(', ')}: median (worst) per policy`);
  console.log('');
  console.log(`| policy | ${COLUMNS.map((c) => c.head).join(' | ')} |`);
  console.log(`|---|${COLUMNS.map(() => '---').join('|')}|`);
  for (const p of POLICIES) {
    const rows: Row[] = [];
    for (const seed of SEEDS) rows.push(await run(workload, p, seed));
    const cells = COLUMNS.map((c) => {
      const xs = rows.map((r) => r[c.key]);
      const worst = c.higherBetter ? Math.min(...xs) : Math.max(...xs);
      return `${median(xs).toFixed(c.digits)} (${worst.toFixed(c.digits)})`;
    });
    console.log(`| ${p.label} | ${cells.join(' | ')} |`);
  }
  console.log('');
}
