import type { RequestDescriptor } from '@fairway/core';
import { fcfsPolicy, leastKvPlacement } from '@fairway/policy';
import { describe, expect, it } from 'vitest';
import { computeMetrics } from '../src/metrics.ts';
import { buildReport, type SimReport } from '../src/report.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario } from '../src/scenario.ts';
import { generateWorkload } from '../src/workload.ts';

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

/**
 * Runs the multi-turn scenario with prefix caching on or off: TTFTs (s) of the chat turns after
 * the first, and the report's prefix-cache line.
 */
async function laterTurnTtfts(
  enablePrefixCaching: boolean,
): Promise<{ ttfts: number[]; prefixCache: SimReport['prefixCache'] }> {
  const input = buildRunInput(loadScenario('multi-turn-chat'), { durationS: 60 });
  const result = await runSimulation({
    ...input,
    engines: input.engines.map((e) => ({ id: e.id, config: { ...e.config, enablePrefixCaching } })),
    ordering: fcfsPolicy(),
    placement: leastKvPlacement(),
  });
  const ttfts = result.records
    .filter(
      (r) => r.req.tenant === 'chat' && (r.req.interactionStage ?? 0) > 0 && r.firstTokenS !== undefined,
    )
    .map((r) => r.firstTokenS! - r.arrivalS);
  return { ttfts, prefixCache: buildReport(result, computeMetrics(result), 0).prefixCache };
}

describe('shared-prefix workloads', () => {
  it('resends a conversation’s history: each turn extends the previous turn’s blocks', () => {
    const arrivals = generateWorkload({
      seed: 3,
      durationS: 60,
      model: 'llama-2-7b',
      streams: [
        {
          tenant: 'chat',
          arrival: { process: 'poisson', rate: 1 },
          input: { kind: 'uniform', min: 20, max: 100 },
          output: { kind: 'uniform', min: 20, max: 100 },
          interaction: { size: { kind: 'fixed', value: 4 }, followUp: { mode: 'fixed-gap', gapS: 1 } },
          prefix: { sharedTokens: 64, conversation: true },
        },
      ],
    });
    const turns = arrivals.filter((r) => r.interactionId === arrivals[0]!.interactionId);
    expect(turns.length).toBeGreaterThan(1);
    for (let k = 1; k < turns.length; k++) {
      const prev = turns[k - 1]!;
      const cur = turns[k]!;
      // The prompt is the previous prompt and answer, then a new message.
      expect(cur.inputTokens).toBeGreaterThan(prev.inputTokens + prev.outputTokens!);
      const known = Math.floor((prev.inputTokens + prev.outputTokens!) / 16);
      expect(cur.blockHashes!.slice(0, known)).toEqual(prev.blockHashes!.slice(0, known));
    }
    // The turns are planned open-loop here: none waits for an answer.
    expect(turns.every((r) => r.thinkMs === undefined)).toBe(true);
    const closed = generateWorkload({
      seed: 3,
      durationS: 60,
      model: 'llama-2-7b',
      streams: [
        {
          tenant: 'chat',
          arrival: { process: 'poisson', rate: 1 },
          input: { kind: 'uniform', min: 20, max: 100 },
          output: { kind: 'uniform', min: 20, max: 100 },
          interaction: {
            size: { kind: 'fixed', value: 4 },
            followUp: { mode: 'after-completion', thinkS: { kind: 'fixed', value: 2 } },
          },
          prefix: { conversation: true },
        },
      ],
    });
    // Closed loop: every turn after the first waits its think time after the previous answer.
    for (const r of closed) expect(r.thinkMs).toBe(r.interactionStage === 0 ? undefined : 2000);
    // Every conversation starts with the stream's shared system prompt, and only with it.
    const other = arrivals.find((r) => r.interactionId !== turns[0]!.interactionId)!;
    expect(other.blockHashes!.slice(0, 4)).toEqual(turns[0]!.blockHashes!.slice(0, 4));
    expect(other.blockHashes![4]).not.toBe(turns[0]!.blockHashes![4]);
  });

  it('sends a closed-loop turn its think time after the previous answer is complete', async () => {
    const turn = (stage: number, arrivalMs: number): RequestDescriptor => ({
      id: `t${stage}`,
      tenant: 'chat',
      model: 'llama-2-7b',
      sloClass: 'interactive',
      inputTokens: 300 + 100 * stage,
      maxTokens: 50,
      outputTokens: 50,
      arrivalMs,
      interactionId: 'conv',
      interactionStage: stage,
      interactionSize: 3,
      ...(stage > 0 ? { thinkMs: 250 } : {}),
    });
    const result = await runSimulation({
      scenario: 'closed-loop',
      seed: 1,
      durationS: 30,
      engines: [{ id: 'replica-0', config: { gpu: 'A100-80GB', model: 'llama-2-7b' } }],
      // The planned arrivals are far too early: the second turn must wait for the first answer.
      arrivals: [turn(0, 0), turn(1, 1), turn(2, 2)],
      ordering: fcfsPolicy(),
      placement: leastKvPlacement(),
    });
    const recs = result.records.map((r) => ({ id: r.req.id, arrivalS: r.arrivalS, finishS: r.finishS! }));
    expect(recs.map((r) => r.id)).toEqual(['t0', 't1', 't2']);
    for (let k = 1; k < 3; k++) expect(recs[k]!.arrivalS).toBeCloseTo(recs[k - 1]!.finishS + 0.25, 9);
  });

  it('serves the multi-turn scenario’s later turns with a lower median TTFT with prefix caching on', async () => {
    const { ttfts: on, prefixCache } = await laterTurnTtfts(true);
    const { ttfts: off, prefixCache: none } = await laterTurnTtfts(false);
    // Most prompt tokens are found in the cache: shared system prompts and resent histories.
    expect(prefixCache!.hitRate).toBeGreaterThan(0.5);
    expect(prefixCache!.hits).toBeLessThan(prefixCache!.queries);
    expect(none).toBeUndefined();
    // Closed loop: faster answers send the next turns sooner, so the counts may differ a little.
    expect(on.length).toBeGreaterThan(50);
    expect(off.length).toBeGreaterThan(50);
    expect(median(on)).toBeLessThan(median(off) * 0.8);
  });

  it('finds, with the fleet sharing an ideal cache, every turn cached on whichever replica it lands, in no KV', async () => {
    const input = buildRunInput(loadScenario('multi-turn-chat-fleet'), { durationS: 40, seed: 2 });
    const serve = async (idealPrefixCache: boolean) => {
      const run = await runSimulation({
        ...input,
        ordering: fcfsPolicy(),
        placement: leastKvPlacement(),
        idealPrefixCache,
      });
      return { run, metrics: computeMetrics(run) };
    };
    const own = await serve(false);
    const ideal = await serve(true);
    const hitRate = (r: typeof own) => r.run.prefixCache!.hits / r.run.prefixCache!.queries;
    // Least-KV spreads a conversation's turns over four replicas: their own caches miss the turns
    // that land elsewhere; the ideal cache finds every turn's history wherever it lands.
    expect(hitRate(ideal)).toBeGreaterThan(hitRate(own) + 0.15);
    // Hits hold no KV there: the engines use far less of it for the same workload.
    expect(ideal.metrics.kv.meanUsage!).toBeLessThan(own.metrics.kv.meanUsage! / 2);
    // Every later turn's history was computed before it was sent (closed loop), so every later turn hits.
    const laterTurns = ideal.run.records.filter(
      (r) => (r.req.interactionStage ?? 0) > 0 && r.firstTokenS !== undefined && r.req.inputTokens > 64,
    );
    expect(laterTurns.length).toBeGreaterThan(50);
    for (const r of laterTurns) expect(r.cachedTokens, r.req.id).toBeGreaterThan(0);
  });
});
