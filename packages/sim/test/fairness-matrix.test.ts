/**
 * Every VTC synthetic suite (VTC sections 5.2 and appendix B) under every ordering policy fairway
 * ships, through the production Gateway and MemoryStore. Runs are shortened to 60 simulated
 * seconds: enough for every suite to reach its steady state (the engine saturates within ~5 s) and
 * for each policy to dispatch, charge, settle and (rpm, wsc-oit) reject, which is what this matrix
 * checks; the long-run fairness properties are in the other `fairness-*` tests.
 */
import {
  ORDERING_POLICY_NAMES,
  type OrderingPolicyName,
  orderingPolicyByName,
  placementByName,
} from '@fairway/policy';
import { type DispatchInput, type DispatchResult, MemoryStore } from '@fairway/store';
import { describe, expect, it } from 'vitest';
import { fairserveOptionsOf } from '../src/fairserve-profiles.ts';
import { computeMetrics, type SimMetrics } from '../src/metrics.ts';
import type { SimRun } from '../src/records.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario } from '../src/scenario.ts';

const SUITES = [
  'vtc-overload',
  'vtc-proportional',
  'vtc-on-off-less',
  'vtc-on-off-overload',
  'vtc-poisson-short-long',
  'vtc-poisson-short-long-2',
  'vtc-increase',
  'vtc-dist-shift',
  'vtc-weighted',
  'vtc-overload-multi',
] as const;
const DURATION_S = 60;
/** RPM limit of the `rpm` baseline here: the suites' clients send 15–480 req/min, so it bites. */
const RPM = 20;

/** A real MemoryStore that also counts how often each id was dispatched. */
class CountingStore extends MemoryStore {
  readonly dispatches = new Map<string, number>();
  override async dispatch(input: DispatchInput): Promise<DispatchResult> {
    const r = await super.dispatch(input);
    if (r.kind === 'dispatched') this.dispatches.set(r.req.id, (this.dispatches.get(r.req.id) ?? 0) + 1);
    return r;
  }
}

interface Outcome {
  readonly run: SimRun;
  readonly metrics: SimMetrics;
  readonly store: CountingStore;
}

async function simulate(suite: string, policy: OrderingPolicyName): Promise<Outcome> {
  const loaded = loadScenario(suite);
  const input = buildRunInput(loaded, { durationS: DURATION_S });
  const history = buildRunInput(loaded, { durationS: DURATION_S, seed: input.seed + 1 }).arrivals;
  const ordering = orderingPolicyByName(policy, {
    weightOf: (t) => input.tenantWeights[t] ?? 1,
    ...(policy === 'rpm' ? { rpm: RPM } : {}),
    ...fairserveOptionsOf(history),
  });
  const store = new CountingStore({ validate: false });
  const run = await runSimulation({ ...input, ordering, placement: placementByName('least-kv'), store });
  return { run, metrics: computeMetrics(run), store };
}

describe('every VTC suite under every policy', () => {
  for (const suite of SUITES) {
    it(`runs ${suite} under ${ORDERING_POLICY_NAMES.join(', ')}: each request has one outcome, and work-conserving policies serve the same tokens`, async () => {
      const results = new Map<OrderingPolicyName, Outcome>();
      for (const policy of ORDERING_POLICY_NAMES) results.set(policy, await simulate(suite, policy));

      for (const [policy, { run, metrics, store }] of results) {
        const ctx = `${suite} / ${policy}`;
        expect(run.records.length, ctx).toBeGreaterThan(0);
        for (const r of run.records) {
          const dispatched = store.dispatches.get(r.req.id) ?? 0;
          // Exactly one outcome: rejected at admission (never dispatched), or dispatched once.
          if (r.rejected) expect(dispatched, `${ctx}: ${r.req.id}`).toBe(0);
          else expect(dispatched, `${ctx}: ${r.req.id}`).toBeLessThanOrEqual(1);
          if (r.finishS !== undefined) {
            expect(r.generated, `${ctx}: ${r.req.id}`).toBe(r.req.outputTokens);
            expect(r.finishS).toBeGreaterThanOrEqual(r.dispatchS!);
          }
        }
        const limiting = policy === 'rpm' || policy === 'wsc-oit';
        if (!limiting) expect(metrics.requests.rejected, ctx).toBe(0);
        expect(metrics.requests.completed, ctx).toBeGreaterThan(0);
        for (const t of metrics.tenants) expect(t.service, `${ctx}: ${t.id}`).toBeGreaterThanOrEqual(0);
        for (const v of [metrics.fairness.maxDiff, metrics.fairness.avgDiff, metrics.fairness.jain])
          expect(Number.isFinite(v), ctx).toBe(true);
      }

      // Scheduling order changes who is served, not how much: where every request has the same
      // shape, policies that reject nothing keep the engine equally busy (the VTC paper's Tables 2
      // and 5 show equal throughput too). In the short/long suites, token throughput depends on the
      // mix served (a 512-token prompt prefills in one step), so it legitimately differs.
      const fcfs = results.get('fcfs')!.metrics.throughput.tokensPerS;
      const sameShape = !suite.startsWith('vtc-poisson-short-long');
      for (const policy of sameShape ? ORDERING_POLICY_NAMES : []) {
        if (policy === 'rpm' || policy === 'wsc-oit') continue;
        const tput = results.get(policy)!.metrics.throughput.tokensPerS;
        expect(Math.abs(tput - fcfs) / fcfs, `${suite} / ${policy}: ${tput} vs FCFS ${fcfs}`).toBeLessThan(
          0.03,
        );
      }
      // RPM rejects over-limit clients: on every suite some client sends more than RPM per minute.
      expect(results.get('rpm')!.metrics.requests.rejected, `${suite} / rpm`).toBeGreaterThan(0);
    });
  }
});
