import { ManualClock, type RequestDescriptor } from '@fairway/core';
import { fcfsPolicy, leastKvPlacement, rpmWindow, vtcPolicy } from '@fairway/policy';
import { MemoryStore } from '@fairway/store';
import { describe, expect, it } from 'vitest';
import {
  type Dispatched,
  Gateway,
  KvBlockIndex,
  type PrefixAffinityMode,
  PrefixIndex,
  type PrefixLearned,
  type ReplicaSource,
} from '../src/index.ts';
import { Fleet } from './support/fleet.ts';

let n = 0;
/** A request of `tenant` reserving 300 KV tokens (100 in, 200 out) with prefix keys `keys`. */
function req(tenant: string, keys?: string[]): RequestDescriptor {
  n++;
  return {
    id: `q${n}`,
    tenant,
    model: 'm',
    sloClass: 'interactive',
    inputTokens: 100,
    maxTokens: 200,
    arrivalMs: n,
    ...(keys !== undefined ? { prefixKeys: keys } : {}),
  };
}

function gateway(
  replicas: ReplicaSource,
  mode: PrefixAffinityMode,
  over: {
    id?: string;
    store?: MemoryStore;
    index?: PrefixIndex;
    onLearn?: (l: PrefixLearned) => void;
    floor?: number;
  } = {},
) {
  const dispatched: Dispatched[] = [];
  const gw = new Gateway({
    id: over.id ?? 'g1',
    store: over.store ?? new MemoryStore(),
    clock: new ManualClock(0),
    ordering: fcfsPolicy(),
    placement: leastKvPlacement(),
    replicas,
    onDispatch: (d) => dispatched.push(d),
    headroom: { tokenFraction: 0 },
    prefixAffinity: {
      mode,
      ...(over.index !== undefined ? { index: over.index } : {}),
      ...(over.onLearn !== undefined ? { onLearn: over.onLearn } : {}),
      ...(over.floor !== undefined ? { floor: over.floor } : {}),
    },
  });
  const replicaOf = (id: string) => dispatched.find((d) => d.id === id)?.replica;
  const done = (r: RequestDescriptor) => gw.complete(r.id, { inputTokens: 100, outputTokens: 200 });
  return { gw, dispatched, replicaOf, done };
}

describe('Gateway prefix affinity', () => {
  it('sends a follow-up turn to the replica that served the turn before it, not the least loaded', async () => {
    const { gw, replicaOf, done } = gateway(
      new Fleet(['r1', 10_000], ['r2', 10_000], ['r3', 10_000]),
      'bounded',
    );
    await gw.submit(req('other'));
    const turn1 = req('chat', ['c/4']);
    await gw.submit(turn1);
    const first = replicaOf(turn1.id) as string;
    expect(first).toBe('r2');
    await done(turn1);
    // Other traffic: every replica busy alike, so least-KV alone would choose r1 (the first).
    for (let i = 0; i < 2; i++) await gw.submit(req('other'));
    const turn2 = req('chat', ['c/8', 'c/4']);
    await gw.submit(turn2);
    expect(replicaOf(turn2.id)).toBe(first);
    await done(turn2);
    const turn3 = req('chat', ['c/16', 'c/8', 'c/4']);
    await gw.submit(turn3);
    expect(replicaOf(turn3.id)).toBe(first);
    expect(gw.stats().affinity).toEqual({ hit: 2, bounded: 0, miss: 1 });
  });

  it('places by load once the replica holds more than the bound, unless affinity is unbounded', async () => {
    for (const mode of ['bounded', 'unbounded'] as const) {
      const fleet = new Fleet(['r1', 10_000], ['r2', 10_000], ['r3', 10_000]);
      const { gw, replicaOf, dispatched } = gateway(fleet, mode, { floor: 0 });
      const turn1 = req('chat', ['c/4']);
      await gw.submit(turn1);
      const first = replicaOf(turn1.id) as string;
      // turn1 still runs: `first` holds 300 tokens, the pool's mean is 100 — over 1.25 × the mean.
      const turn2 = req('chat', ['c/8', 'c/4']);
      await gw.submit(turn2);
      if (mode === 'bounded') {
        expect(replicaOf(turn2.id)).not.toBe(first);
        expect(dispatched.at(-1)?.affinity).toBe('bounded');
      } else {
        expect(replicaOf(turn2.id)).toBe(first);
        expect(dispatched.at(-1)?.affinity).toBe('hit');
      }
    }
  });

  it('does nothing with affinity off: no affinity, no outcome, placement order only', async () => {
    const { gw, dispatched } = gateway(new Fleet(['r1', 10_000], ['r2', 10_000]), 'off');
    await gw.submit(req('chat', ['c/4']));
    await gw.submit(req('chat', ['c/8', 'c/4']));
    expect(dispatched.map((d) => d.replica)).toEqual(['r1', 'r2']);
    expect(dispatched.every((d) => d.affinity === undefined && d.queued.affinity === undefined)).toBe(true);
    expect(gw.stats().affinity).toEqual({ hit: 0, bounded: 0, miss: 0 });
  });

  it('reserves a shared prompt start once per replica, and only while a pool places by affinity', async () => {
    // A 64-token system prompt in two parts, shared by every conversation.
    const shared = (id: string): RequestDescriptor => ({
      ...req(id, ['sys/4', 'sys/2']),
      prefixTokens: [32, 32],
    });
    for (const mode of ['bounded', 'off'] as const) {
      const store = new MemoryStore();
      const { gw, dispatched } = gateway(new Fleet(['r1', 10_000]), mode, { store });
      for (const t of ['a', 'b', 'c']) await gw.submit(shared(t));
      expect(dispatched).toHaveLength(3);
      // Each reserves its 100 + 200 tokens; with affinity the 64 shared tokens are held once.
      expect((await store.reserved('r1')).tokens).toBe(mode === 'bounded' ? 300 + 2 * 236 : 900);
      expect(dispatched[0]!.queued.prefixParts).toEqual(
        mode === 'bounded'
          ? [
              { key: 'sys/4', tokens: 32 },
              { key: 'sys/2', tokens: 32 },
            ]
          : undefined,
      );
    }
  });

  it('never counts more of a prompt as shared than the prompt has', async () => {
    const store = new MemoryStore();
    const { gw, dispatched } = gateway(new Fleet(['r1', 10_000]), 'bounded', { store });
    // Parts of 80 + 40 tokens in a 100-token prompt: only the shorter (40) is kept.
    await gw.submit({ ...req('a', ['long', 'short']), prefixTokens: [80, 40] });
    expect(dispatched[0]!.queued.prefixParts).toEqual([{ key: 'short', tokens: 40 }]);
  });

  it('keeps a hot prefix within the load bound on every replica, however many requests share it', async () => {
    const fleet = new Fleet(['r1', 100_000], ['r2', 100_000], ['r3', 100_000], ['r4', 100_000]);
    const store = new MemoryStore();
    const { gw } = gateway(fleet, 'bounded', { store });
    for (let i = 0; i < 200; i++) {
      await gw.submit(req('hot', ['system/64', 'system/32', 'system/16']));
      const held = await Promise.all(
        ['r1', 'r2', 'r3', 'r4'].map(async (r) => (await store.reserved(r)).tokens),
      );
      const mean = held.reduce((a, b) => a + b, 0) / held.length;
      // The bound (1.25 × the mean, at least 5% of a replica) admits one request at or under it.
      expect(Math.max(...held)).toBeLessThanOrEqual(Math.max(1.25 * mean, 5000) + 300);
    }
    expect(gw.stats().affinity.hit).toBeGreaterThan(0);
    expect(gw.stats().affinity.bounded).toBeGreaterThan(0);
  });

  it('shares what one dispatcher learned with another: the next turn lands on the same replica through it', async () => {
    const fleet = new Fleet(['r1', 10_000], ['r2', 10_000], ['r3', 10_000]);
    const store = new MemoryStore();
    const index2 = new PrefixIndex();
    // What the bus does: every placement gateway 1 learns reaches gateway 2's index.
    const g1 = gateway(fleet, 'bounded', {
      store,
      onLearn: (l) => index2.learn(l.tenant, l.pool, l.keys, l.replica, 0),
    });
    const g2 = gateway(fleet, 'bounded', { id: 'g2', store, index: index2 });
    await g1.gw.submit(req('other'));
    const turn1 = req('chat', ['c/4']);
    await g1.gw.submit(turn1);
    const first = g1.replicaOf(turn1.id) as string;
    expect(first).toBe('r2');
    await g1.done(turn1);
    // Every replica busy alike (least-KV alone would choose r1), as gateway 2 reads them.
    for (let i = 0; i < 2; i++) await g1.gw.submit(req('other'));
    await g2.gw.pump();
    const turn2 = req('chat', ['c/8', 'c/4']);
    await g2.gw.submit(turn2);
    expect(g2.replicaOf(turn2.id)).toBe(first);
  });

  it('does not steer one tenant by another tenant’s prefixes', async () => {
    const { gw, replicaOf, dispatched } = gateway(new Fleet(['r1', 10_000], ['r2', 10_000]), 'unbounded');
    const a = req('a', ['shared/4']);
    await gw.submit(a);
    const b = req('b', ['shared/4']);
    await gw.submit(b);
    expect(replicaOf(b.id)).not.toBe(replicaOf(a.id));
    expect(dispatched.at(-1)?.affinity).toBe('miss');
  });

  it('never hands work to a replica that left the pool after the request was admitted', async () => {
    const fleet = new Fleet(['r1', 1000], ['r2', 1000]);
    const { gw, dispatched, done } = gateway(fleet, 'bounded');
    const turn1 = req('chat', ['c/4']);
    await gw.submit(turn1);
    expect(dispatched.at(-1)?.replica).toBe('r1');
    await done(turn1);
    const fill = [req('x'), req('x'), req('x'), req('x'), req('x'), req('x')];
    for (const f of fill) await gw.submit(f);
    // Both replicas full (900 of 1000 each): the next turn waits, admitted with affinity to r1.
    const turn2 = req('chat', ['c/8', 'c/4']);
    await gw.submit(turn2);
    expect(dispatched.some((d) => d.id === turn2.id)).toBe(false);
    fleet.down('r1');
    // Room comes back on r1 (a request there ends) while it is out of the pool.
    const onR1 = fill.find(
      (f) => dispatched.find((d) => d.id === f.id)?.replica === 'r1',
    ) as RequestDescriptor;
    await done(onR1);
    expect(dispatched.some((d) => d.id === turn2.id)).toBe(false);
    const onR2 = fill.find(
      (f) => dispatched.find((d) => d.id === f.id)?.replica === 'r2',
    ) as RequestDescriptor;
    await done(onR2);
    expect(dispatched.filter((d) => d.id === turn2.id).map((d) => d.replica)).toEqual(['r2']);
  });

  it('keeps the fairness order: affinity changes where a request runs, never which runs next', async () => {
    const fleet = new Fleet(['r1', 600], ['r2', 600]);
    const store = new MemoryStore();
    const dispatched: Dispatched[] = [];
    const gw = new Gateway({
      id: 'g',
      store,
      clock: new ManualClock(0),
      ordering: vtcPolicy(),
      placement: leastKvPlacement(),
      replicas: fleet,
      onDispatch: (d) => dispatched.push(d),
      headroom: { tokenFraction: 0 },
      prefixAffinity: { mode: 'unbounded' },
    });
    // Every request of `hot` shares one prefix; `cold`'s are unique. With both backlogged, VTC
    // alternates between them whatever the placement does.
    const reqs: RequestDescriptor[] = [];
    for (let i = 0; i < 6; i++) reqs.push(req('hot', ['hot/4']), req('cold', [`cold${i}/4`]));
    for (const r of reqs) await gw.submit(r);
    // Both replicas hold two requests at once: finish the oldest running one until all ran.
    for (let done = 0; done < dispatched.length; done++)
      await gw.complete((dispatched[done] as Dispatched).id, { inputTokens: 100, outputTokens: 200 });
    expect(dispatched.length).toBe(reqs.length);
    const order = dispatched.map((d) => d.req.tenant);
    expect(order.filter((t) => t === 'hot').length).toBe(6);
    for (let i = 2; i < order.length; i++)
      expect(order.slice(0, i).filter((t) => t === 'hot').length).toBeLessThanOrEqual(Math.ceil(i / 2) + 1);
  });
});

describe('Gateway placement by KV cache events', () => {
  /** A request whose prompt (100 tokens) has the block keys `blocks`. */
  const withBlocks = (tenant: string, blocks: string[], keys?: string[]): RequestDescriptor => ({
    ...req(tenant, keys),
    promptBlockKeys: blocks,
  });
  const blocks = (n: number): string[] => Array.from({ length: n }, (_, i) => `b${i}`);

  function kvGateway(kvBlocks: KvBlockIndex, mode: PrefixAffinityMode = 'bounded') {
    const dispatched: Dispatched[] = [];
    const gw = new Gateway({
      id: 'g1',
      store: new MemoryStore(),
      clock: new ManualClock(0),
      ordering: vtcPolicy({ cachedTokenWeight: 0.1 }),
      placement: leastKvPlacement(),
      replicas: new Fleet(['r1', 10_000], ['r2', 10_000], ['r3', 10_000]),
      onDispatch: (d) => dispatched.push(d),
      headroom: { tokenFraction: 0 },
      prefixAffinity: { mode, kvBlocks },
    });
    return { gw, dispatched };
  }

  it('places a prompt on the replica whose engine holds the longest run of its blocks, over the prefix index', async () => {
    const kv = new KvBlockIndex();
    kv.store('r1', blocks(2));
    kv.store('r3', blocks(5));
    const index = new PrefixIndex();
    index.learn('chat', 'm', ['c/4'], 'r2', 0);
    const { gw, dispatched } = kvGateway(kv);
    // Without events the prefix index's replica (r2) would take it; with them, r3 holds most.
    await gw.submit(withBlocks('chat', blocks(6), ['c/4']));
    expect(dispatched.map((d) => [d.replica, d.affinity])).toEqual([['r3', 'hit']]);
    // Another tenant's prompt with the same start goes there too: the cache is the engine's.
    await gw.submit(withBlocks('other', blocks(6)));
    expect(dispatched[1]?.replica).toBe('r3');
    // A prompt no engine holds is placed by load.
    await gw.submit(withBlocks('other', ['z0', 'z1']));
    expect(dispatched[2]?.replica).toBe('r1');
  });

  it('charges the tokens the chosen engine holds at the cached-token weight, not a guess', async () => {
    const kv = new KvBlockIndex();
    kv.setReplica('r2', 16, 1000);
    kv.store('r2', blocks(4));
    const { gw, dispatched } = kvGateway(kv);
    await gw.submit(withBlocks('chat', blocks(6)));
    await gw.submit(withBlocks('chat', ['z0']));
    const [hit, miss] = dispatched;
    expect(hit?.replica).toBe('r2');
    expect(hit?.req.cachedPromptTokens).toBe(64);
    // 100 prompt tokens, 64 of them cached at weight 0.1: 36 + 6.4 charged for the prompt.
    expect((miss?.queued.dispatchCost ?? 0) - (hit?.queued.dispatchCost ?? 0)).toBeCloseTo(64 * 0.9, 6);
    // The block keys stay out of the queued request and what the owner keeps.
    expect(hit?.queued.payload).not.toContain('b0');
    expect(hit?.req.promptBlockKeys).toBeUndefined();
  });

  it('prices a waiting prompt by what its replica holds when it is dispatched, not when it was admitted', async () => {
    const counterAfter = async (warmBeforeDispatch: boolean): Promise<number> => {
      const kv = new KvBlockIndex();
      const store = new MemoryStore();
      const gw = new Gateway({
        id: 'g1',
        store,
        clock: new ManualClock(0),
        ordering: vtcPolicy({ cachedTokenWeight: 0.1, predictCached: false }),
        placement: leastKvPlacement(),
        // Room for one request (300 KV tokens) at a time.
        replicas: new Fleet(['r1', 300]),
        onDispatch: () => {},
        headroom: { tokenFraction: 0 },
        prefixAffinity: { mode: 'bounded', kvBlocks: kv },
      });
      const first = req('other');
      await gw.submit(first);
      // Admitted while no engine holds its blocks: charged its whole prompt, and it waits.
      await gw.submit(withBlocks('chat', blocks(6)));
      if (warmBeforeDispatch) kv.store('r1', blocks(4));
      await gw.complete(first.id, { inputTokens: 100, outputTokens: 200 });
      await gw.flush();
      return (await store.snapshot('m', 0)).counters.chat ?? Number.NaN;
    };
    // 64 of its 100 prompt tokens were cached by then: charged at weight 0.1, 57.6 less.
    expect((await counterAfter(false)) - (await counterAfter(true))).toBeCloseTo(64 * 0.9, 6);
  });

  it('asks for a prompt’s block keys only once its own refusals pass: a tenant flooding past its RPM costs no engine call', async () => {
    const clock = new ManualClock(0);
    const kv = new KvBlockIndex();
    kv.store('r2', blocks(4));
    const dispatched: Dispatched[] = [];
    const gw = new Gateway({
      id: 'g1',
      store: new MemoryStore(),
      clock,
      ordering: vtcPolicy(),
      placement: leastKvPlacement(),
      replicas: new Fleet(['r1', 10_000], ['r2', 10_000]),
      onDispatch: (d) => dispatched.push(d),
      headroom: { tokenFraction: 0 },
      prefixAffinity: { mode: 'bounded', kvBlocks: kv },
      admission: (r) => ({ limits: [rpmWindow(r.tenant, 2, 10_000)] }),
    });
    let asked = 0;
    const options = {
      promptBlockKeys: async () => {
        asked++;
        return blocks(6);
      },
    };
    const results = [];
    for (let i = 0; i < 50; i++) results.push(await gw.submit(req('flood'), options));
    expect(results.filter((r) => r.ok)).toHaveLength(2);
    // The two admitted and the one the store refused first; the other 47 were refused here.
    expect(asked).toBe(3);
    expect(dispatched.map((d) => d.replica)).toEqual(['r2', 'r2']);
  });

  it('does not steer a pool without affinity', async () => {
    const kv = new KvBlockIndex();
    kv.store('r3', blocks(5));
    const { gw, dispatched } = kvGateway(kv, 'off');
    await gw.submit(withBlocks('chat', blocks(6)));
    expect(dispatched[0]?.replica).toBe('r1');
    expect(dispatched[0]?.req.cachedPromptTokens).toBeUndefined();
  });
});
