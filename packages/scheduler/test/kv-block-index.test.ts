import { describe, expect, it } from 'vitest';
import { KvBlockIndex } from '../src/index.ts';

const all = new Set(['r1', 'r2', 'r3']);
const keys = (prefix: string, n: number): string[] => Array.from({ length: n }, (_, i) => `${prefix}${i}`);

describe('KvBlockIndex', () => {
  it('finds the replica holding the longest run of a prompt’s blocks, and every replica holding it', () => {
    const index = new KvBlockIndex();
    const prompt = keys('p', 20);
    index.store('r1', prompt.slice(0, 4));
    index.store('r2', prompt.slice(0, 12));
    index.store('r3', prompt.slice(0, 12));
    const m = index.longest(prompt, all);
    expect(m?.blocks).toBe(12);
    expect(m?.tokens).toBe(12 * 16);
    expect([...(m?.replicas ?? [])].sort()).toEqual(['r2', 'r3']);
    // Only the candidates count (a stale or other pool's replica is not one).
    expect(index.longest(prompt, new Set(['r1']))?.blocks).toBe(4);
    expect(index.longest(keys('x', 5), all)).toBeUndefined();
  });

  it('applies removals, clears and a replica leaving', () => {
    const index = new KvBlockIndex();
    const prompt = keys('p', 8);
    index.store('r1', prompt);
    index.store('r2', prompt.slice(0, 2));
    index.remove('r1', prompt.slice(4));
    expect(index.longest(prompt, all)).toMatchObject({ blocks: 4, replicas: ['r1'] });
    index.clear('r1');
    expect(index.longest(prompt, all)).toMatchObject({ blocks: 2, replicas: ['r2'] });
    index.forget('r2');
    expect(index.longest(prompt, all)).toBeUndefined();
    expect(index.size).toBe(0);
  });

  it('forgets a replica’s blocks when its events arrive out of sequence or from a new run', () => {
    const index = new KvBlockIndex();
    const prompt = keys('p', 6);
    index.apply({ replicaId: 'r1', epoch: 'a', seq: 0, events: [['stored', prompt.slice(0, 3)]] });
    index.apply({ replicaId: 'r1', epoch: 'a', seq: 1, events: [['stored', prompt.slice(3)]] });
    expect(index.blocksOf('r1')).toBe(6);
    // seq 2 was lost: it may have removed blocks, so only what follows is trusted.
    index.apply({ replicaId: 'r1', epoch: 'a', seq: 3, events: [['stored', ['q0']]] });
    expect(index.blocksOf('r1')).toBe(1);
    index.apply({
      replicaId: 'r1',
      epoch: 'a',
      seq: 4,
      events: [['stored', prompt.slice(0, 2)], ['cleared']],
    });
    expect(index.blocksOf('r1')).toBe(0);
    index.apply({ replicaId: 'r1', epoch: 'a', seq: 5, events: [['stored', prompt]] });
    index.apply({ replicaId: 'r1', epoch: 'b', seq: 0, events: [['stored', ['q1']]] });
    expect(index.blocksOf('r1')).toBe(1);
  });

  it('holds no more blocks for a replica than its cache can, oldest dropped first', () => {
    const index = new KvBlockIndex({ maxBlocksPerReplica: 100 });
    index.setReplica('r1', 32, 5);
    index.store('r1', keys('p', 8));
    expect(index.blocksOf('r1')).toBe(5);
    expect(index.longest(keys('p', 8), all)).toBeUndefined();
    expect(index.longest(keys('p', 8).slice(3), all)).toMatchObject({ blocks: 5, tokens: 5 * 32 });
    // A replica without a known capacity is bounded by the index's limit.
    index.store('r2', keys('q', 150));
    expect(index.blocksOf('r2')).toBe(100);
  });
});
