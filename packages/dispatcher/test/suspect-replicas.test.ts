import { ManualClock } from '@fairway/core';
import type { ReplicaInfo, ReplicaSource } from '@fairway/scheduler';
import { describe, expect, it } from 'vitest';
import { SuspectReplicas } from '../src/suspect-replicas.ts';

function fleet(...ids: [string, boolean][]): ReplicaSource {
  const infos: ReplicaInfo[] = ids.map(([id, stale]) => ({
    id,
    pool: 'p',
    kvCapacityTokens: 1000,
    maxNumSeqs: 8,
    running: 0,
    waiting: 0,
    kvUsage: 0,
    stale,
  }));
  return { replicas: () => infos, pools: () => ['p'] };
}

const staleOf = (s: SuspectReplicas): Record<string, boolean> =>
  Object.fromEntries(s.replicas('p').map((r) => [r.id, r.stale]));

function suspects(
  inner: ReplicaSource,
  clock: ManualClock,
  epochs: Map<string, string>,
  healthy: Set<string>,
): SuspectReplicas {
  return new SuspectReplicas({
    inner,
    clock,
    holdMs: 5000,
    epochOf: (id) => epochs.get(id),
    probe: async (id) => healthy.has(id),
  });
}

describe('SuspectReplicas', () => {
  it('holds a failed replica out until its hold passed and a health probe succeeds', async () => {
    const clock = new ManualClock(0);
    const healthy = new Set<string>();
    const s = suspects(
      fleet(['a', false], ['b', false]),
      clock,
      new Map([
        ['a', 'e1'],
        ['b', 'e1'],
      ]),
      healthy,
    );
    s.mark('a');
    expect(staleOf(s)).toEqual({ a: true, b: false });
    healthy.add('a');
    clock.advance(4999);
    expect(await s.probe()).toEqual([]); // still within its hold: not even probed
    clock.advance(1);
    healthy.delete('a');
    expect(await s.probe()).toEqual([]); // probed, does not answer: stays out
    expect(staleOf(s)).toEqual({ a: true, b: false });
    clock.advance(60_000);
    expect(staleOf(s)).toEqual({ a: true, b: false }); // time alone never brings it back
    healthy.add('a');
    expect(await s.probe()).toEqual(['a']);
    expect(staleOf(s)).toEqual({ a: false, b: false });
  });

  it('holds out every replica, even the last one taking work (no fallback onto a failing engine)', () => {
    const clock = new ManualClock(0);
    const s = suspects(fleet(['a', false], ['b', true]), clock, new Map([['a', 'e1']]), new Set());
    s.mark('a');
    expect(staleOf(s)).toEqual({ a: true, b: true });
  });

  it('takes a restarted replica (new registration epoch) back at once, and ignores reports about old epochs', () => {
    const clock = new ManualClock(0);
    const epochs = new Map([['a', 'e1']]);
    const s = suspects(fleet(['a', false]), clock, epochs, new Set());
    s.mark('a');
    expect(s.isSuspect('a')).toBe(true);
    epochs.set('a', 'e2');
    expect(s.isSuspect('a')).toBe(false);
    expect(s.mark('a', 'e1')).toBe(false);
    expect(s.isSuspect('a')).toBe(false);
    expect(s.mark('a', 'e2')).toBe(true);
    expect(s.isSuspect('a')).toBe(true);
  });
});
