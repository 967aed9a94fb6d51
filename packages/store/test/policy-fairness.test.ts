import type { RequestDescriptor } from '@fairway/core';
import { fcfsPolicy, lcfPolicy, type OrderingPolicy, vtcPolicy, weightedVtcPolicy } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { MemoryStore, type SchedulingStore } from '../src/index.ts';

/**
 * A tiny continuous-batching engine driven through the store with a policy, in integer ticks:
 * every running request generates one token per tick and is charged for it as it streams. The
 * service a flow received is measured from tokens served (w_in·input at dispatch, w_out per token),
 * independently of the counters.
 */
async function run(
  store: SchedulingStore,
  policy: OrderingPolicy,
  arrivals: (tick: number) => readonly string[],
  ticks: number,
  kvTokens: number,
): Promise<{ service: Map<string, number>[]; backlogged: Set<string>[] }> {
  const IN = 20;
  const OUT = 20;
  const running = new Map<string, { req: RequestDescriptor; done: number }>();
  const served = new Map<string, number>();
  const service: Map<string, number>[] = [];
  const backlogged: Set<string>[] = [];
  let n = 0;
  for (let t = 0; t < ticks; t++) {
    for (const tenant of arrivals(t)) {
      const req: RequestDescriptor = {
        id: `r${n++}`,
        tenant,
        model: 'm',
        sloClass: 'interactive',
        inputTokens: IN,
        maxTokens: OUT,
        outputTokens: OUT,
        arrivalMs: t,
      };
      const predicted = await store.predictedOutput(policy.flowOf(req));
      await store.admit({
        req: {
          id: req.id,
          pool: 'p',
          band: 0,
          flow: policy.flowOf(req),
          score: policy.score(req),
          arrivalMs: t,
          reserveTokens: IN + OUT,
          dispatchCost: policy.dispatchCost(req, predicted),
          owner: 'd',
          payload: JSON.stringify(req),
        },
        nowMs: t,
        lift: policy.lift,
        limits: [],
        overloaded: false,
        tenant: 't',
      });
    }
    for (;;) {
      const d = await store.dispatch({
        pool: 'p',
        bands: [0],
        ordering: policy.mode,
        nowMs: t,
        picker: 'd',
        replicas: [{ id: 'e', tokenCapacity: kvTokens, seqCapacity: 1000 }],
        fit: 'first',
      });
      if (d.kind !== 'dispatched') break;
      const req = JSON.parse(d.req.payload) as RequestDescriptor;
      running.set(req.id, { req, done: 0 });
      served.set(req.tenant, (served.get(req.tenant) ?? 0) + IN);
    }
    const charges = [];
    for (const [id, r] of running) {
      charges.push({ id, amount: policy.outputCost(r.req, r.done, r.done + 1, undefined) });
      r.done++;
      served.set(r.req.tenant, (served.get(r.req.tenant) ?? 0) + 2);
    }
    await store.charge(charges);
    for (const [id, r] of running) {
      if (r.done < OUT) continue;
      running.delete(id);
      await store.settle({
        id,
        nowMs: t,
        finalCost: policy.finalCost(r.req, { inputTokens: IN, outputTokens: OUT }),
        actualTokens: IN + OUT,
        outputTokens: OUT,
      });
    }
    service.push(new Map(served));
    backlogged.push(new Set((await store.snapshot('p', 0)).backlogged));
  }
  return { service, backlogged };
}

const get = (m: Map<string, number> | undefined, k: string): number => m?.get(k) ?? 0;

describe('policies driven through the store', () => {
  const KV = 200;
  // VTC's bound for two backlogged flows: 2·max(w_in·L_in, w_out·M) (Theorem 4.4).
  const BOUND = 2 * Math.max(1 * 20, 2 * KV);
  const overload = (t: number): string[] => (t % 2 === 0 ? ['a', 'b'] : ['a']);

  it('VTC keeps the service difference of backlogged flows within the bound; FCFS does not', async () => {
    const vtc = await run(new MemoryStore(), vtcPolicy(), overload, 600, KV);
    const fcfs = await run(new MemoryStore(), fcfsPolicy(), overload, 600, KV);
    const diff = (s: Map<string, number>[], t: number) => get(s[t], 'a') - get(s[t], 'b');
    let worst = 0;
    for (let t = 50; t < 600; t++) {
      expect(vtc.backlogged[t]).toEqual(new Set(['a', 'b']));
      worst = Math.max(worst, Math.abs(diff(vtc.service, t) - diff(vtc.service, 50)));
    }
    expect(worst).toBeLessThanOrEqual(BOUND);
    // FCFS serves in arrival order, so the heavier sender gets about twice the service.
    expect(diff(fcfs.service, 599) - diff(fcfs.service, 50)).toBeGreaterThan(2 * BOUND);
  });

  it('weighted VTC gives service in proportion to weights', async () => {
    const weights: Record<string, number> = { a: 1, b: 3 };
    const w = await run(
      new MemoryStore(),
      weightedVtcPolicy((t) => weights[t] ?? 1),
      () => ['a', 'b'],
      800,
      KV,
    );
    const a = get(w.service[799], 'a') - get(w.service[99], 'a');
    const b = get(w.service[799], 'b') - get(w.service[99], 'b');
    expect(b / a).toBeGreaterThan(2.7);
    expect(b / a).toBeLessThan(3.3);
  });

  it('LCF over-serves a returning flow; VTC lifts it and shares at once', async () => {
    // b sends from the start, a only from tick 300 on; both overloaded afterwards.
    const arrivals = (t: number): string[] => (t < 300 ? ['b'] : ['a', 'b']);
    const share = async (policy: OrderingPolicy) => {
      const r = await run(new MemoryStore(), policy, arrivals, 500, KV);
      const a = get(r.service[499], 'a') - get(r.service[309], 'a');
      const b = get(r.service[499], 'b') - get(r.service[309], 'b');
      return a / (a + b);
    };
    const lcf = await share(lcfPolicy());
    const vtc = await share(vtcPolicy());
    expect(lcf).toBeGreaterThan(0.9);
    expect(vtc).toBeGreaterThan(0.4);
    expect(vtc).toBeLessThan(0.6);
  });
});
