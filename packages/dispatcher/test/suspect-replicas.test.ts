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

describe('SuspectReplicas', () => {
  it('reports a replica that failed stale for suspectMs, then takes it back', () => {
    const clock = new ManualClock(0);
    const s = new SuspectReplicas(fleet(['a', false], ['b', false]), clock, 5000);
    s.mark('a');
    expect(staleOf(s)).toEqual({ a: true, b: false });
    clock.advance(4999);
    expect(s.isSuspect('a')).toBe(true);
    clock.advance(1);
    expect(staleOf(s)).toEqual({ a: false, b: false });
    expect(s.isSuspect('a')).toBe(false);
  });

  it('skips no one when every replica taking work is a suspect', () => {
    const clock = new ManualClock(0);
    const s = new SuspectReplicas(fleet(['a', false], ['b', true]), clock, 5000);
    s.mark('a');
    expect(staleOf(s)).toEqual({ a: false, b: true });
  });
});
