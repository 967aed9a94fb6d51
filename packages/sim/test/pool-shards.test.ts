import { orderingPolicyByName, placementByName } from '@fairway/policy';
import type { ReplicaInfo, ReplicaSource } from '@fairway/scheduler';
import { describe, expect, it } from 'vitest';
import { computeMetrics } from '../src/metrics.ts';
import { type PoolShardsOptions, ShardedReplicas, shardOf } from '../src/pool-shards.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, parseScenario } from '../src/scenario.ts';

/** Two replicas of pool m, 1,000 KV tokens and 10 sequences each. */
const fleet: ReplicaSource = {
  replicas: (pool) =>
    pool === 'm'
      ? ['r1', 'r2'].map(
          (id): ReplicaInfo => ({
            id,
            pool: 'm',
            kvCapacityTokens: 1000,
            maxNumSeqs: 10,
            running: 0,
            waiting: 0,
            kvUsage: 0,
            stale: false,
          }),
        )
      : [],
  pools: () => ['m'],
};

describe('one pool over several stores', () => {
  it('shows every shard every replica with its share of the capacity, under ids of its own', () => {
    const s = new ShardedReplicas(fleet, { count: 4 });
    expect(s.pools()).toEqual(['m~0', 'm~1', 'm~2', 'm~3']);
    const seen = s.replicas('m~2');
    expect(seen.map((r) => [r.id, r.pool, r.kvCapacityTokens, r.maxNumSeqs])).toEqual([
      ['r1~2', 'm~2', 250, 2],
      ['r2~2', 'm~2', 250, 2],
    ]);
    expect(s.baseReplica('r1~2')).toBe('r1');
    expect(s.poolOf({ model: 'm', tenant: 'acme' } as never)).toBe(`m~${shardOf('acme', 4)}`);
  });

  it('hands the room a finishing request frees to the backlogged shard with the least counter', () => {
    const s = new ShardedReplicas(fleet, { count: 3, minShare: 0.05 });
    s.replicas('m~0'); // the gateways' first look: every replica split evenly
    const allot = (id: string) => {
      const r = s.replicas('m~0').find((x) => x.id === `${id}~0`)!;
      const a = s.allotment({ ...r, id });
      return { tokens: a.tokens.map((x) => +x.toFixed(2)), seqs: a.seqs.map((x) => +x.toFixed(2)) };
    };
    // Before any view of the shards, a room stays where it was.
    expect(s.release('m', 'r1', 0, 300)).toBeUndefined();
    s.observe('m', [{ weight: 1, counter: 100 }, { weight: 1, counter: 50 }, { weight: 0 }]);
    // Shard 0 is ahead of shard 1: its room goes there, and shard 1 keeps its own.
    expect(s.release('m', 'r1', 0, 300)).toBe(1);
    expect(s.release('m', 'r1', 1, 100)).toBeUndefined();
    // A shard keeps its minimum (5 %: 50 tokens, half a slot) whatever it finishes.
    expect(allot('r1')).toEqual({ tokens: [50, 616.67, 333.33], seqs: [2.33, 4.33, 3.33] });
    expect(s.release('m', 'r1', 0, 300)).toBe(1);
    expect(s.release('m', 'r1', 0, 300)).toBe(1);
    expect(s.release('m', 'r1', 0, 300)).toBeUndefined();
    expect(allot('r1')).toEqual({ tokens: [50, 616.67, 333.33], seqs: [0.5, 6.17, 3.33] });
    // An idle shard hands on what its running requests do not hold, above its minimum.
    expect(s.releaseIdle('m', 'r2', 2, 100, 1)).toBe(1);
    expect(allot('r2')).toEqual({ tokens: [333.33, 566.67, 100], seqs: [3.33, 5.67, 1] });
    expect(s.releaseIdle('m', 'r2', 0, 0, 0)).toBeUndefined(); // shard 0 has work queued
    // Shard 2 rejoins with counter 10 (its flows were idle): it starts from the least of the
    // others' (50), so shard 1 keeps its room rather than paying shard 2 for its idle time...
    s.observe('m', [
      { weight: 1, counter: 100 },
      { weight: 1, counter: 50 },
      { weight: 2, counter: 10 },
    ]);
    expect(s.release('m', 'r2', 1, 100)).toBeUndefined();
    // ...and from then on its counter moves as its own: 10 more served, 10 more counted.
    s.observe('m', [
      { weight: 1, counter: 100 },
      { weight: 1, counter: 70 },
      { weight: 2, counter: 20 },
    ]);
    expect(s.release('m', 'r2', 1, 100)).toBe(2);
    // No replica ever holds more or less than its capacity, over the shards.
    for (const id of ['r1', 'r2']) {
      const { tokens, seqs } = allot(id);
      expect(tokens.reduce((x, y) => x + y, 0)).toBeCloseTo(1000, 6);
      expect(seqs.reduce((x, y) => x + y, 0)).toBeCloseTo(10, 6);
    }
    expect(s.handoffs).toEqual({ completions: 8, handedOff: 4 });
  });

  it('moves the shares to the backlogged weight, a rise taking only room the last epoch left', () => {
    const s = new ShardedReplicas(fleet, { count: 3, minShare: 0.05, controller: 'epoch' });
    const epochs: number[][] = [[...s.shares('m')]];
    const epoch = (weights: number[]) => {
      s.rebalance(
        'm',
        weights.map((weight) => ({ weight })),
      );
      epochs.push([...s.shares('m')]);
    };
    // Shard 0 backlogged with weight 3, shard 1 with 1, shard 2 idle: targets 0.6875, 0.2625, 0.05.
    epoch([3, 1, 0]);
    // The falls apply at once; the rises wait for an epoch in which that room was free.
    expect(s.shares('m').map((x) => +x.toFixed(4))).toEqual([0.3333, 0.2625, 0.05]);
    epoch([3, 1, 0]);
    expect(s.shares('m').map((x) => +x.toFixed(4))).toEqual([0.6875, 0.2625, 0.05]);
    // The backlog moves to shard 2.
    epoch([0, 0, 2]);
    epoch([0, 0, 2]);
    expect(s.shares('m').map((x) => +x.toFixed(4))).toEqual([0.05, 0.05, 0.9]);
    // Dispatchers may use two consecutive epochs' shares at once: the larger of each shard's,
    // summed, never passes the whole replica.
    for (let i = 1; i < epochs.length; i++) {
      const both = epochs[i]!.reduce((a, x, k) => a + Math.max(x, epochs[i - 1]![k]!), 0);
      expect(both).toBeLessThanOrEqual(1 + 1e-12);
    }
  });

  it('gives a shard served more slowly per unit of weight more of the replicas, until the rates meet', () => {
    const run = (serviceGain: number) => {
      const s = new ShardedReplicas(fleet, { count: 2, serviceGain, controller: 'epoch' });
      const epochs: number[][] = [[...s.shares('m')]];
      // Equal backlogged weights; a share of the replicas serves shard 0 at half shard 1's rate
      // (its counter advances 100 per epoch at half the replicas where shard 1's advances 200).
      const counters = [0, 0];
      for (let e = 0; e < 30; e++) {
        const [a, b] = s.shares('m') as [number, number];
        counters[0]! += 200 * a;
        counters[1]! += 400 * b;
        s.rebalance('m', [
          { weight: 1, counter: counters[0] },
          { weight: 1, counter: counters[1] },
        ]);
        epochs.push([...s.shares('m')]);
      }
      return epochs;
    };
    // Backlogged weight alone splits the replicas evenly whatever each shard makes of its half.
    expect(
      run(0)
        .at(-1)!
        .map((x) => +x.toFixed(3)),
    ).toEqual([0.5, 0.5]);
    const steered = run(0.35);
    const [a, b] = steered.at(-1) as [number, number];
    // Equal rates need shard 0 to hold two thirds; the gain gets there within a few percent.
    expect(a).toBeGreaterThan(0.62);
    expect(a).toBeLessThan(0.7);
    expect(Math.abs(200 * a - 400 * b)).toBeLessThan(0.1 * 400 * b);
    // The shares still never over-reserve a replica across two consecutive epochs.
    for (let i = 1; i < steered.length; i++) {
      const both = steered[i]!.reduce((x, y, k) => x + Math.max(y, steered[i - 1]![k]!), 0);
      expect(both).toBeLessThanOrEqual(1 + 1e-12);
    }
  });

  it('serves a sharded pool as fully as one store and never over-reserves a replica', async () => {
    const scenario = parseScenario(
      {
        durationS: 40,
        seed: 7,
        cluster: { engines: [{ gpu: 'A100-80GB', model: 'llama-2-7b', tp: 1, count: 4 }] },
        tenants: ['a', 'b', 'c', 'd', 'e', 'f'].map((id) => ({ id, weight: 1 })),
        streams: ['a', 'b', 'c', 'd', 'e', 'f'].map((tenant) => ({
          tenant,
          arrival: { process: 'poisson', rate: 12 },
          input: { kind: 'lognormal', median: 256, p90: 700, min: 8, max: 2048 },
          output: { kind: 'lognormal', median: 256, p90: 700, min: 8, max: 2048 },
        })),
      },
      'shards',
    );
    const input = buildRunInput({ name: 'shards', scenario, baseDir: process.cwd() });
    const run = (shards?: PoolShardsOptions) =>
      runSimulation({
        ...input,
        ordering: orderingPolicyByName('vtc'),
        placement: placementByName('least-kv'),
        dispatchers: 4,
        ...(shards !== undefined ? { shards } : {}),
      });
    const one = computeMetrics(await run());
    for (const controller of ['handoff', 'epoch'] as const) {
      const sharded = await run({ count: 3, controller });
      const m = computeMetrics(sharded);
      // Reservations cover each request's whole prompt and output cap on its replica, and the
      // shards' parts of a replica never add up to more than it: no engine ever runs out of KV.
      expect(sharded.preemptions).toBe(0);
      expect(new Set(sharded.records.map((r) => r.replica).filter((x) => x !== undefined))).toEqual(
        new Set(input.engines.map((e) => e.id)),
      );
      expect(m.requests.completed).toBeGreaterThan(0.95 * one.requests.completed);
      expect(m.throughput.tokensPerS).toBeGreaterThan(0.95 * one.throughput.tokensPerS);
    }
  });

  it('serves a tenant that arrives at an idle shard its fair share, not the service the others had meanwhile', async () => {
    // Two shards: tenant a alone in shard 0, arriving after 30 s; b, d and f in shard 1 from the
    // start. Every tenant offers twice its fair share.
    expect(['a', 'b', 'd', 'f'].map((t) => shardOf(t, 2))).toEqual([0, 1, 1, 1]);
    const rate = (2 * 8 * 11.5) / 4;
    const scenario = parseScenario(
      {
        durationS: 90,
        seed: 1,
        cluster: { engines: [{ gpu: 'A100-80GB', model: 'llama-2-7b', tp: 1, count: 8 }] },
        tenants: ['a', 'b', 'd', 'f'].map((id) => ({ id, weight: 1 })),
        streams: ['a', 'b', 'd', 'f'].map((tenant) => ({
          tenant,
          arrival:
            tenant === 'a'
              ? {
                  process: 'poisson',
                  phases: [
                    { durationS: 30, rate: 0 },
                    { durationS: 60, rate },
                  ],
                }
              : { process: 'poisson', rate },
          input: { kind: 'lognormal', median: 256, p90: 700, min: 8, max: 2048 },
          output: { kind: 'lognormal', median: 256, p90: 700, min: 8, max: 2048 },
        })),
      },
      'late-shard',
    );
    const input = buildRunInput({ name: 'late-shard', scenario, baseDir: process.cwd() });
    const run = (dispatchers: number, shards?: { count: number }) =>
      runSimulation({
        ...input,
        ordering: orderingPolicyByName('vtc'),
        placement: placementByName('least-kv'),
        dispatchers,
        ...(dispatchers === 1 ? { flushTokens: 1 } : {}),
        ...(shards !== undefined ? { shards } : {}),
      });
    const central = computeMetrics(await run(1));
    const sharded = computeMetrics(await run(4, { count: 2 }));
    // Shard 0's counters start from shard 1's when a arrives (else a would take every replica
    // until its counter caught up: over 100x the centralised difference), and shard 0's idle room
    // serves shard 1 meanwhile (else half the fleet would wait for a).
    expect(sharded.fairness.accumulatedMaxDiff).toBeLessThan(1.5 * central.fairness.accumulatedMaxDiff);
    expect(sharded.throughput.tokensPerS).toBeGreaterThan(0.98 * central.throughput.tokensPerS);
  });
});
