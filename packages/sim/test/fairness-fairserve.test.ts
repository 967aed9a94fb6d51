/**
 * FairServe's claims (FairServe section 5, qualitatively) on `fairserve-abuse`: 24 benign users of
 * three apps with different token profiles and multi-call interactions, plus one user flooding the
 * platform between 90 s and 270 s. WSC + OIT wastes no tokens on interactions cut in the middle,
 * throttles only the abusive user and only while the pool is overloaded, and serves benign users
 * with less queueing delay than VTC and than an RPM limit. Full 360 s runs (about 0.5 s each).
 */
import type { RequestDescriptor } from '@fairway/core';
import { type OrderingPolicyName, orderingPolicyByName, placementByName } from '@fairway/policy';
import { type AdmitInput, type AdmitResult, MemoryStore } from '@fairway/store';
import { describe, expect, it } from 'vitest';
import { fairserveOptionsOf, peakWindowCounts } from '../src/fairserve-profiles.ts';
import { computeInteractionMetrics } from '../src/interaction-metrics.ts';
import type { SimRun } from '../src/records.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario } from '../src/scenario.ts';
import { FAIRSERVE_ABUSE_WINDOW_S, FAIRSERVE_ABUSER } from '../src/scenarios/fairserve.ts';
import { EVIDENCE_SEEDS, summarizeSeeds } from '../src/seed-summary.ts';
import { SEEDED_TIMEOUT_MS, showSeeds } from './support/seeded.ts';

/** A real MemoryStore that remembers, for every admission, whether the pool was overloaded and the result. */
class AdmissionLog extends MemoryStore {
  readonly admissions: {
    readonly flow: string;
    readonly overloaded: boolean;
    readonly result: AdmitResult;
  }[] = [];
  override async admit(input: AdmitInput): Promise<AdmitResult> {
    const result = await super.admit(input);
    this.admissions.push({ flow: input.req.flow, overloaded: input.overloaded, result });
    return result;
  }
}

const loaded = loadScenario('fairserve-abuse');
const input = buildRunInput(loaded);
// FairServe learns app profiles and limits from history: the same platform under another seed.
const fairserve = fairserveOptionsOf(buildRunInput(loaded, { seed: input.seed + 1 }).arrivals);

async function simulate(policy: OrderingPolicyName, rpm?: number, seed?: number) {
  const store = new AdmissionLog({ validate: false });
  const runInput = seed === undefined ? input : buildRunInput(loaded, { seed });
  const learned =
    seed === undefined ? fairserve : fairserveOptionsOf(buildRunInput(loaded, { seed: seed + 1 }).arrivals);
  const run = await runSimulation({
    ...runInput,
    ordering: orderingPolicyByName(policy, { ...learned, ...(rpm !== undefined ? { rpm } : {}) }),
    placement: placementByName('least-kv'),
    store,
  });
  return { run, store, interactions: computeInteractionMetrics(run) };
}

const benign = (r: RequestDescriptor) => r.tenant !== FAIRSERVE_ABUSER;

/** Queueing delay (dispatch − arrival) of benign users' admitted requests; still queued at the end counts its wait so far. */
function benignDelays(run: SimRun): { mean: number; p90: number } {
  const d = run.records
    .filter((r) => benign(r.req) && !r.rejected)
    .map((r) => (r.dispatchS ?? run.durationS) - r.arrivalS)
    .sort((a, b) => a - b);
  return { mean: d.reduce((a, b) => a + b, 0) / d.length, p90: d[Math.floor(0.9 * (d.length - 1))]! };
}

describe('computeInteractionMetrics', () => {
  const req = (id: string, ix: string, stage: number, size: number): RequestDescriptor => ({
    id,
    tenant: 'u',
    model: 'm',
    sloClass: 'interactive',
    inputTokens: 100,
    maxTokens: 50,
    outputTokens: 50,
    arrivalMs: stage * 1000,
    interactionId: ix,
    interactionStage: stage,
    interactionSize: size,
  });
  it('counts the tokens served to an interaction cut in the middle as wasted, and nothing for completed ones', () => {
    const run: SimRun = {
      scenario: 'fixture',
      policy: 'p',
      placement: 'p',
      seed: 1,
      durationS: 20,
      samples: [],
      engineSteps: 0,
      preemptions: 0,
      tenantWeights: { u: 1 },
      records: [
        // a: both calls served — complete.
        {
          req: req('a0', 'a', 0, 2),
          arrivalS: 0,
          dispatchS: 0,
          firstTokenS: 0.1,
          finishS: 2,
          generated: 50,
          preemptions: 0,
        },
        {
          req: req('a1', 'a', 1, 2),
          arrivalS: 3,
          dispatchS: 4,
          firstTokenS: 4.1,
          finishS: 6,
          generated: 50,
          preemptions: 0,
        },
        // b: first call served, second throttled — 150 tokens wasted.
        {
          req: req('b0', 'b', 0, 3),
          arrivalS: 0,
          dispatchS: 1,
          firstTokenS: 1.1,
          finishS: 3,
          generated: 50,
          preemptions: 0,
        },
        {
          req: req('b1', 'b', 1, 3),
          arrivalS: 4,
          rejected: { code: 'rpm_limited', atS: 4 },
          generated: 0,
          preemptions: 0,
        },
        // c: throttled at its first call — broken, nothing wasted.
        {
          req: req('c0', 'c', 0, 2),
          arrivalS: 12,
          rejected: { code: 'throttled', atS: 12 },
          generated: 0,
          preemptions: 0,
        },
        // d: still queued at the end.
        { req: req('d0', 'd', 0, 1), arrivalS: 15, generated: 0, preemptions: 0 },
      ],
    };
    const m = computeInteractionMetrics(run, { bucketS: 10, delayThresholdS: 4 });
    expect(m.interactions).toEqual({
      total: 4,
      multiCall: 3,
      completed: 1,
      broken: 2,
      brokenMidway: 1,
      unfinished: 1,
    });
    expect(m.wastedTokens).toBe(150);
    expect(m.rejections).toEqual({ rpm_limited: 1, throttled: 1 });
    expect(m.rejectionSeries).toEqual({ t: [0, 10], byUser: { u: [1, 1] } });
    // Admitted requests waited 0, 1, 1 and (still queued) 5 s: over the 4 s threshold.
    expect(m.users[0]!.queueDelayS.max).toBe(5);
    expect(m.delayedUserShare).toBe(1);
  });
});

describe('FairServe WSC + OIT on fairserve-abuse', () => {
  it('wastes no tokens on interactions cut in the middle, where an RPM limit that bites benign users does', async () => {
    const fs = await simulate('wsc-oit');
    expect(fs.interactions.interactions.multiCall).toBeGreaterThan(20);
    expect(fs.interactions.interactions.brokenMidway).toBe(0);
    expect(fs.interactions.wastedTokens).toBe(0);
    // The metric does see waste: RPM(8) throttles benign users in the middle of their interactions.
    const rpm = await simulate('rpm', 8);
    expect(rpm.interactions.interactions.brokenMidway).toBeGreaterThan(0);
    expect(rpm.interactions.wastedTokens).toBeGreaterThan(1000);
  });

  it('throttles only the abusive user, only while the pool is overloaded, and lets it exceed its limit otherwise', async () => {
    const { run, store } = await simulate('wsc-oit');
    const throttled = store.admissions.filter((a) => !a.result.ok);
    expect(throttled.length).toBeGreaterThan(50);
    for (const a of throttled) {
      expect(a.result.ok === false && a.result.code).toBe('throttled');
      expect(a.flow).toBe(FAIRSERVE_ABUSER);
      expect(a.overloaded).toBe(true);
    }
    for (const r of run.records.filter((x) => x.rejected)) {
      expect(r.rejected!.atS).toBeGreaterThanOrEqual(FAIRSERVE_ABUSE_WINDOW_S.startS);
      expect(r.rejected!.atS).toBeLessThanOrEqual(FAIRSERVE_ABUSE_WINDOW_S.endS);
    }
    // Unlike a plain rate limit, OIT admits the abuser beyond its limit while the pool has room.
    const admitted = run.records
      .filter((r) => r.req.tenant === FAIRSERVE_ABUSER && !r.rejected)
      .map((r) => r.req);
    const peak = peakWindowCounts(admitted, (r) => r.tenant).get(FAIRSERVE_ABUSER)!;
    expect(peak).toBeGreaterThan(fairserve.oit.userLimit);
  });

  it(
    'serves benign users with lower queueing delay than VTC and than an RPM limit at the same user limit, over five seeds',
    async () => {
      const ratios: Record<'meanVtc' | 'meanRpm' | 'p90Vtc' | 'p90Rpm', number>[] = [];
      for (const seed of EVIDENCE_SEEDS) {
        const userLimit = fairserveOptionsOf(buildRunInput(loaded, { seed: seed + 1 }).arrivals).oit
          .userLimit;
        const fs = benignDelays((await simulate('wsc-oit', undefined, seed)).run);
        const vtc = benignDelays((await simulate('vtc', undefined, seed)).run);
        const rpm = benignDelays((await simulate('rpm', userLimit, seed)).run);
        ratios.push({
          meanVtc: fs.mean / vtc.mean,
          meanRpm: fs.mean / rpm.mean,
          p90Vtc: fs.p90 / vtc.p90,
          p90Rpm: fs.p90 / rpm.p90,
        });
      }
      // Measured over seeds 1–5: the mean against VTC and the p90 against VTC hold under every
      // seed; against RPM the mean holds 0.75 in the median (worst 0.88) and the p90 only in the
      // median (seed 3: 1.33; seed 4: RPM rejects so much that its benign p90 is 0).
      const claims: [keyof (typeof ratios)[number], number, number | undefined][] = [
        ['meanVtc', 0.75, 0.75],
        ['meanRpm', 0.75, 1],
        ['p90Vtc', 1, 1],
        ['p90Rpm', 1, undefined],
      ];
      for (const [k, median, worst] of claims) {
        const r = summarizeSeeds(ratios.map((x) => x[k]));
        expect(r.median, `${k}: ${showSeeds(r)}`).toBeLessThan(median);
        if (worst !== undefined) expect(r.worst, `${k}: ${showSeeds(r)}`).toBeLessThan(worst);
      }
    },
    SEEDED_TIMEOUT_MS,
  );
});
