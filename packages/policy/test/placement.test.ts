import { createRng } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import {
  joinShortestQueuePlacement,
  leastKvPlacement,
  type PlacementPolicy,
  placementByName,
  powerOfTwoPlacement,
  type ReplicaState,
  roundRobinPlacement,
} from '../src/index.ts';

function replica(id: string, over: Partial<ReplicaState> = {}): ReplicaState {
  return {
    id,
    tokenCapacity: 10_000,
    seqCapacity: 256,
    reservedTokens: 0,
    reservedSeqs: 0,
    running: 0,
    waiting: 0,
    kvUsage: 0,
    stale: false,
    ...over,
  };
}

const ids = (rs: readonly ReplicaState[]) => rs.map((r) => r.id);

describe('placement policies', () => {
  const all: [string, () => PlacementPolicy][] = [
    ['round-robin', roundRobinPlacement],
    ['jsq', joinShortestQueuePlacement],
    ['least-kv', leastKvPlacement],
    ['power-of-two', () => powerOfTwoPlacement(createRng(1))],
  ];

  for (const [name, make] of all) {
    it(`${name} returns every replica once and puts stale ones last, even when they look idle`, () => {
      const p = make();
      const rs = [
        replica('a', { reservedSeqs: 9, running: 9, kvUsage: 0.9, reservedTokens: 9000 }),
        replica('b', { stale: true }),
        replica('c', { reservedSeqs: 5, running: 5, kvUsage: 0.5, reservedTokens: 5000 }),
        replica('d', { reservedSeqs: 7, running: 7, kvUsage: 0.7, reservedTokens: 7000 }),
      ];
      for (let i = 0; i < 20; i++) {
        const out = ids(p.order(rs));
        expect([...out].sort()).toEqual(['a', 'b', 'c', 'd']);
        expect(out[3]).toBe('b');
      }
    });
  }

  it('round-robin rotates the first choice over fresh replicas', () => {
    const p = roundRobinPlacement();
    const rs = [replica('r2'), replica('r0'), replica('r1'), replica('rx', { stale: true })];
    const firsts = Array.from({ length: 6 }, () => p.order(rs)[0]!.id);
    expect(firsts).toEqual(['r0', 'r1', 'r2', 'r0', 'r1', 'r2']);
    expect(ids(p.order(rs))).toEqual(['r0', 'r1', 'r2', 'rx']);
    expect(ids(p.order(rs))).toEqual(['r1', 'r2', 'r0', 'rx']);
  });

  it('jsq prefers the replica with the fewest requests, counting what the engine reports', () => {
    const p = joinShortestQueuePlacement();
    const rs = [
      replica('a', { reservedSeqs: 3, running: 3 }),
      // The gateway reserved little here, but the engine reports a queue (another gateway, or lag).
      replica('b', { reservedSeqs: 1, running: 2, waiting: 4 }),
      replica('c', { reservedSeqs: 2, running: 2, kvUsage: 0.8 }),
      replica('d', { reservedSeqs: 2, running: 2, kvUsage: 0.1 }),
    ];
    expect(ids(p.order(rs))).toEqual(['d', 'c', 'a', 'b']);
  });

  it('least-kv fills replicas of different sizes in proportion to their capacity', () => {
    const p = leastKvPlacement();
    const rs = [
      replica('small', { tokenCapacity: 10_000, reservedTokens: 4_000 }),
      replica('big', { tokenCapacity: 100_000, reservedTokens: 30_000 }),
      replica('busy', { tokenCapacity: 100_000, reservedTokens: 10_000, kvUsage: 0.95 }),
    ];
    expect(ids(p.order(rs))).toEqual(['big', 'small', 'busy']);
  });

  it('power-of-two picks the less loaded of two samples, replays with a seed, and forks per dispatcher', () => {
    const rs = Array.from({ length: 8 }, (_, i) => replica(`r${i}`, { reservedSeqs: i, running: i }));
    const run = (p: PlacementPolicy) => Array.from({ length: 50 }, () => ids(p.order(rs)));
    const a = run(powerOfTwoPlacement(createRng(42)));
    expect(run(powerOfTwoPlacement(createRng(42)))).toEqual(a);
    // The heaviest replica can never win a pair.
    expect(a.some((o) => o[0] === 'r7')).toBe(false);
    // The first two are the sampled pair, less loaded first; the rest follow by load.
    for (const o of a) {
      const load = o.map((id) => Number(id.slice(1)));
      expect(load[0]).toBeLessThan(load[1]!);
      expect(load.slice(2)).toEqual([...load.slice(2)].sort((x, y) => x - y));
    }
    // Different first choices over time, not a fixed replica.
    expect(new Set(a.map((o) => o[0])).size).toBeGreaterThan(3);
    const base = powerOfTwoPlacement(createRng(42));
    expect(run(base.forDispatcher('g1'))).not.toEqual(run(base.forDispatcher('g2')));
  });

  it('builds policies by name and names the unknown one', () => {
    expect(placementByName('jsq').name).toBe('jsq');
    expect(placementByName('power-of-two', createRng(3)).name).toBe('power-of-two');
    expect(() => placementByName('random')).toThrow(/unknown placement "random"/);
  });
});
