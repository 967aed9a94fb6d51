/**
 * A model of the server the VTC paper measured on, for the report's probe only: S-LoRA's router
 * with VTC inside it (Sheng et al., OSDI 2024; the artifact's `slora/server/router/manager.py` and
 * `vtc_req_queue.py`), driving fairway's engine model. Requests wait in the router, not at a
 * gateway; at each admission point (an idle engine, or `k` decode steps after the last admission)
 * the router offers its queue in VTC order — the client with the lowest counter first, charged its
 * request's input as it is taken — and the engine admits the head of that order while the batch's
 * future KV peak fits (`admitEverySteps`); what it does not admit goes back to the router. Output
 * tokens are charged as they are generated (w_q = 2); a client whose queue was empty is lifted to
 * the smallest counter among clients with queued requests.
 *
 * This is not fairway's scheduler (which is the production `Gateway`, used by every other run in
 * the report); it exists to tell whether S-LoRA's admission forms the lockstep batches seen in the
 * artifact's results on the same engine model.
 */
import type { RequestDescriptor } from '@fairway/core';
import { createRng } from '@fairway/core';
import { EngineModel } from '@fairway/perf';
import type { RequestRecord, SimRun } from '../src/records.ts';
import type { ScenarioRunInput } from '../src/scenario.ts';

interface Live {
  readonly req: RequestDescriptor;
  dispatchS?: number;
  firstTokenS?: number;
  finishS?: number;
  generated: number;
}

/** Runs one engine under S-LoRA's router with VTC and admission every `k` decode steps (k ≥ 1). */
export function runSloraRouter(input: ScenarioRunInput, k: number): SimRun {
  const config = { ...input.engines[0]!.config, admitEverySteps: k };
  const engine = new EngineModel(config, 'slora-router', {
    rng: createRng(input.seed).fork('slora-step-noise'),
  });
  const endMs = input.durationS * 1000;
  const live = new Map<string, Live>();
  const queues = new Map<string, Live[]>();
  const served = new Map<string, number>();
  const charge = (tenant: string, cost: number) => served.set(tenant, (served.get(tenant) ?? 0) + cost);
  let next = 0;
  let nowMs = 0;
  let decodesSinceAdmit = 0;
  const arrive = () => {
    while (next < input.arrivals.length && input.arrivals[next]!.arrivalMs <= nowMs) {
      const req = input.arrivals[next++]!;
      const l: Live = { req, generated: 0 };
      live.set(req.id, l);
      const q = queues.get(req.tenant) ?? [];
      queues.set(req.tenant, q);
      q.push(l);
      if (q.length === 1) {
        const others = [...queues].filter(([t, x]) => t !== req.tenant && x.length > 0);
        const floor = Math.min(...others.map(([t]) => served.get(t) ?? 0));
        if (others.length > 0) served.set(req.tenant, Math.max(served.get(req.tenant) ?? 0, floor));
      }
    }
  };
  while (nowMs < endMs) {
    arrive();
    const idle = engine.stats().running === 0;
    const offered: Live[] = [];
    if (idle || decodesSinceAdmit >= k) {
      // VTC's order as the router would take the requests: lowest counter first, input charged.
      const counters = new Map(served);
      const heads = new Map([...queues.keys()].map((t) => [t, 0]));
      for (;;) {
        let best: string | undefined;
        for (const [t, q] of queues)
          if (
            (heads.get(t) ?? 0) < q.length &&
            (best === undefined || counters.get(t)! < counters.get(best)!)
          )
            best = t;
        if (best === undefined) break;
        const l = queues.get(best)![heads.get(best)!]!;
        heads.set(best, heads.get(best)! + 1);
        counters.set(best, (counters.get(best) ?? 0) + l.req.inputTokens);
        offered.push(l);
      }
      for (const l of offered)
        engine.add({
          id: l.req.id,
          inputTokens: l.req.inputTokens,
          outputTokens: l.req.outputTokens ?? l.req.maxTokens,
          maxTokens: l.req.maxTokens,
        });
    }
    if (!engine.hasWork()) {
      if (next >= input.arrivals.length) break;
      nowMs = input.arrivals[next]!.arrivalMs;
      continue;
    }
    const r = engine.step();
    const startS = nowMs / 1000;
    nowMs += r.durationMs;
    let admitted = false;
    for (const e of r.events) {
      const l = live.get(e.id)!;
      if (e.kind === 'scheduled') {
        admitted = true;
        l.dispatchS = startS;
        const q = queues.get(l.req.tenant)!;
        q.splice(q.indexOf(l), 1);
        charge(l.req.tenant, l.req.inputTokens);
      } else if (e.kind === 'first-token') l.firstTokenS = nowMs / 1000;
      else if (e.kind === 'token') {
        l.generated = e.generated;
        charge(l.req.tenant, 2);
      } else if (e.kind === 'finished') l.finishS = nowMs / 1000;
    }
    // What the engine did not admit goes back to the router, to be ordered afresh next time.
    for (const l of offered) if (l.dispatchS === undefined) engine.abort(l.req.id);
    if (admitted) decodesSinceAdmit = 0;
    else if (r.shape.decodeSeqs > 0) decodesSinceAdmit++;
  }
  const records: RequestRecord[] = [...live.values()].map((l) => ({
    req: l.req,
    arrivalS: l.req.arrivalMs / 1000,
    dispatchS: l.dispatchS,
    firstTokenS: l.firstTokenS,
    finishS: l.finishS !== undefined && l.finishS <= input.durationS ? l.finishS : undefined,
    generated: l.generated,
    preemptions: 0,
  }));
  return {
    scenario: input.scenario,
    policy: `slora-router-vtc-k${k}`,
    placement: 'single',
    seed: input.seed,
    durationS: input.durationS,
    records,
    samples: [],
    engineSteps: engine.stats().stepsTotal,
    preemptions: engine.stats().preemptionsTotal,
    tenantWeights: input.tenantWeights ?? {},
  };
}
