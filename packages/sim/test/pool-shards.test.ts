import { orderingPolicyByName, placementByName } from '@fairway/policy';
import type { ReplicaInfo, ReplicaSource } from '@fairway/scheduler';
import { describe, expect, it } from 'vitest';
import { computeMetrics } from '../src/metrics.ts';
import { ShardedReplicas, shardOf } from '../src/pool-shards.ts';
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

  it('moves the shares to the backlogged weight, a rise taking only room the last epoch left', () => {
    const s = new ShardedReplicas(fleet, { count: 3, minShare: 0.05 });
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
      const s = new ShardedReplicas(fleet, { count: 2, serviceGain });
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
    const run = (shards?: { count: number }) =>
      runSimulation({
        ...input,
        ordering: orderingPolicyByName('vtc'),
        placement: placementByName('least-kv'),
        dispatchers: 4,
        ...(shards !== undefined ? { shards } : {}),
      });
    const one = computeMetrics(await run());
    const sharded = await run({ count: 3 });
    const m = computeMetrics(sharded);
    // Reservations cover each request's whole prompt and output cap on its replica, and the
    // shards' shares of a replica never add up to more than it: no engine ever runs out of KV.
    expect(sharded.preemptions).toBe(0);
    expect(new Set(sharded.records.map((r) => r.replica).filter((x) => x !== undefined))).toEqual(
      new Set(input.engines.map((e) => e.id)),
    );
    expect(m.requests.completed).toBeGreaterThan(0.95 * one.requests.completed);
    expect(m.throughput.tokensPerS).toBeGreaterThan(0.95 * one.throughput.tokensPerS);
  });
});
