import { ManualClock } from '@fairway/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  type Heartbeat,
  MemoryBus,
  type MessageInput,
  type Registration,
  type ReplicaChange,
  ReplicaRegistry,
} from '../src/index.ts';
import { RecordingLogger } from './helpers.ts';

function registration(
  replicaId: string,
  epoch = 'e1',
  extra: Partial<Registration> = {},
): MessageInput<'registration'> {
  return {
    replicaId,
    epoch,
    url: 'http://127.0.0.1:8000',
    pool: 'llama',
    model: 'llama-2-7b',
    tp: 1,
    kvCapacityTokens: 10_000,
    blockSize: 16,
    maxNumSeqs: 8,
    at: 0,
    ...extra,
  };
}

function heartbeat(
  replicaId: string,
  seq: number,
  extra: Partial<Heartbeat> = {},
): MessageInput<'heartbeat'> {
  return {
    replicaId,
    epoch: 'e1',
    seq,
    ts: 0,
    state: 'ready',
    running: 3,
    waiting: 1,
    kvUsage: 0.4,
    kvUsedTokens: 4000,
    promptTokensTotal: 0,
    generationTokensTotal: 0,
    preemptionsTotal: 0,
    ...extra,
  };
}

describe('ReplicaRegistry', () => {
  let bus: MemoryBus;
  let clock: ManualClock;
  let registry: ReplicaRegistry;
  let discovers: number;

  beforeEach(() => {
    bus = new MemoryBus();
    clock = new ManualClock(1_000_000);
    discovers = 0;
    bus.subscribe('discover', () => {
      discovers++;
    });
    registry = new ReplicaRegistry({ bus, clock });
    registry.start();
  });
  afterEach(async () => {
    registry.stop();
    await bus.close();
  });

  async function send(fn: () => void): Promise<void> {
    fn();
    await bus.flush();
  }

  it('asks running agents to announce themselves when it starts', async () => {
    await bus.flush();
    expect(discovers).toBe(1);
  });

  it('reports free KV tokens and sequence slots from the registration and the last heartbeat', async () => {
    await send(() => bus.publish('registration', registration('r1')));
    await send(() => bus.publish('heartbeat', heartbeat('r1', 1)));
    const view = registry.get('r1');
    expect(view?.acceptsWork).toBe(true);
    expect(view?.capacity).toEqual({
      kvCapacityTokens: 10_000,
      kvUsedTokens: 4000,
      kvFreeTokens: 6000,
      maxNumSeqs: 8,
      running: 3,
      waiting: 1,
      freeSeqs: 4,
      saturated: false,
    });
  });

  it('treats a registered replica with no heartbeat yet as saturated', async () => {
    await send(() => bus.publish('registration', registration('r1')));
    const view = registry.get('r1');
    expect(view?.stale).toBe(true);
    expect(view?.capacity.saturated).toBe(true);
    expect(view?.capacity.kvFreeTokens).toBe(0);
  });

  it('treats a replica whose heartbeat is older than the staleness limit as saturated, never free', async () => {
    await send(() => bus.publish('registration', registration('r1')));
    await send(() =>
      bus.publish('heartbeat', heartbeat('r1', 1, { kvUsedTokens: 0, running: 0, waiting: 0 })),
    );
    clock.advance(1000);
    expect(registry.get('r1')?.capacity.saturated).toBe(false);
    clock.advance(1);
    const stale = registry.get('r1');
    expect(stale?.stale).toBe(true);
    expect(stale?.acceptsWork).toBe(false);
    expect(stale?.capacity).toMatchObject({ kvFreeTokens: 0, freeSeqs: 0, saturated: true });
    await send(() =>
      bus.publish('heartbeat', heartbeat('r1', 2, { kvUsedTokens: 0, running: 0, waiting: 0 })),
    );
    expect(registry.get('r1')?.capacity).toMatchObject({ kvFreeTokens: 10_000, saturated: false });
  });

  it('gives no room on a draining or sleeping replica', async () => {
    await send(() => bus.publish('registration', registration('r1')));
    await send(() => bus.publish('heartbeat', heartbeat('r1', 1, { state: 'draining' })));
    expect(registry.get('r1')).toMatchObject({ reportedState: 'draining', acceptsWork: false });
    expect(registry.get('r1')?.capacity.saturated).toBe(true);
    await send(() => bus.publish('heartbeat', heartbeat('r1', 2, { state: 'sleeping' })));
    expect(registry.get('r1')?.capacity.saturated).toBe(true);
  });

  it('is saturated when sequence slots run out even with KV tokens free', async () => {
    await send(() => bus.publish('registration', registration('r1')));
    await send(() =>
      bus.publish('heartbeat', heartbeat('r1', 1, { running: 6, waiting: 2, kvUsedTokens: 100 })),
    );
    expect(registry.get('r1')?.capacity).toMatchObject({ freeSeqs: 0, kvFreeTokens: 9900, saturated: true });
  });

  it('ignores heartbeats that arrive out of order', async () => {
    await send(() => bus.publish('registration', registration('r1')));
    await send(() => bus.publish('heartbeat', heartbeat('r1', 5, { running: 5 })));
    await send(() => bus.publish('heartbeat', heartbeat('r1', 4, { running: 1 })));
    expect(registry.get('r1')?.heartbeat?.seq).toBe(5);
    expect(registry.get('r1')?.capacity.running).toBe(5);
  });

  it('lists the same views until a replica changes, goes stale or is forgotten, and never a stale one as fresh', async () => {
    await send(() => bus.publish('registration', registration('r1')));
    await send(() => bus.publish('registration', registration('r2')));
    await send(() => bus.publish('heartbeat', heartbeat('r1', 1)));
    clock.advance(400);
    await send(() => bus.publish('heartbeat', heartbeat('r2', 1)));
    const first = registry.list();
    expect(first.map((v) => [v.id, v.acceptsWork])).toEqual([
      ['r1', true],
      ['r2', true],
    ]);
    // Nothing changed: the same array, so readers may keep what they derived from it.
    expect(registry.list()).toBe(first);
    // r1's heartbeat is 999 ms old: still fresh; past the 1000 ms limit, stale.
    clock.advance(599);
    expect(registry.list()).toBe(first);
    clock.advance(1);
    expect(registry.list()[0]?.acceptsWork).toBe(true);
    clock.advance(1);
    const r1Stale = registry.list();
    expect(r1Stale).not.toBe(first);
    expect(r1Stale.map((v) => [v.id, v.stale, v.acceptsWork])).toEqual([
      ['r1', true, false],
      ['r2', false, true],
    ]);
    // A heartbeat shows at once, with what it reports.
    await send(() => bus.publish('heartbeat', heartbeat('r2', 2, { running: 7 })));
    expect(registry.list()[1]?.capacity.running).toBe(7);
    // A filtered list reads the same views.
    expect(registry.list({ model: 'llama-2-7b' }).map((v) => v.id)).toEqual(['r1', 'r2']);
    // Silent past forgetAfterMs (60 s): gone from the list.
    clock.advance(60_001);
    expect(registry.list()).toEqual([]);
  });

  it('stands still while every replica is silent (the bus, not the replicas), and resumes on the next heartbeat', async () => {
    await send(() => bus.publish('registration', registration('r1')));
    await send(() => bus.publish('registration', registration('r2')));
    await send(() => bus.publish('heartbeat', heartbeat('r1', 1)));
    clock.advance(150);
    await send(() => bus.publish('heartbeat', heartbeat('r2', 1)));
    expect(registry.busConnected).toBe(true);
    // Nothing heard from either for longer than the 1000 ms staleness period: a silent bus. Each
    // replica is judged as of the last heartbeat heard, so both still take work.
    clock.advance(5000);
    expect(registry.busConnected).toBe(false);
    expect(registry.list().map((v) => [v.id, v.acceptsWork, v.lastKnown])).toEqual([
      ['r1', true, true],
      ['r2', true, true],
    ]);
    expect(registry.get('r1')?.acceptsWork).toBe(true);
    // A heartbeat ends the silence; the silence does not count against the replica not yet heard.
    await send(() => bus.publish('heartbeat', heartbeat('r2', 2)));
    expect(registry.busConnected).toBe(true);
    expect(registry.list().map((v) => [v.id, v.acceptsWork, v.lastKnown])).toEqual([
      ['r1', true, false],
      ['r2', true, false],
    ]);
    // ... and r1, heard last 150 ms before r2 was, is stale once the usual period has passed.
    clock.advance(851);
    expect(registry.get('r1')?.acceptsWork).toBe(false);
    expect(registry.get('r2')?.acceptsWork).toBe(true);
  });

  it('takes one silent replica among others that are heard for stale', async () => {
    await send(() => bus.publish('registration', registration('r1')));
    await send(() => bus.publish('registration', registration('r2')));
    await send(() => bus.publish('heartbeat', heartbeat('r1', 1)));
    await send(() => bus.publish('heartbeat', heartbeat('r2', 1)));
    for (let seq = 2; seq <= 8; seq++) {
      clock.advance(400);
      await send(() => bus.publish('heartbeat', heartbeat('r2', seq)));
    }
    expect(registry.busConnected).toBe(true);
    expect(registry.list().map((v) => [v.id, v.acceptsWork])).toEqual([
      ['r1', false],
      ['r2', true],
    ]);
  });

  it('takes a lone silent replica for stale: with one replica, its silence is its own', async () => {
    await send(() => bus.publish('registration', registration('r1')));
    await send(() => bus.publish('heartbeat', heartbeat('r1', 1)));
    clock.advance(1001);
    expect(registry.busConnected).toBe(true);
    expect(registry.get('r1')?.acceptsWork).toBe(false);
  });

  it('removes a replica that reports gone', async () => {
    const changes: ReplicaChange[] = [];
    registry.onChange((c) => changes.push(c));
    await send(() => bus.publish('registration', registration('r1')));
    await send(() => bus.publish('heartbeat', heartbeat('r1', 1)));
    await send(() => bus.publish('heartbeat', heartbeat('r1', 2, { state: 'gone' })));
    expect(registry.get('r1')).toBeUndefined();
    expect(registry.list()).toEqual([]);
    expect(changes.map((c) => c.type)).toEqual(['registered', 'heartbeat', 'removed']);
  });

  it('starts a restarted agent (new epoch) fresh, and ignores the old epoch', async () => {
    await send(() => bus.publish('registration', registration('r1', 'old')));
    await send(() => bus.publish('heartbeat', heartbeat('r1', 50, { epoch: 'old' })));
    await send(() => bus.publish('registration', registration('r1', 'new', { kvCapacityTokens: 20_000 })));
    expect(registry.get('r1')?.stale).toBe(true);
    await send(() => bus.publish('heartbeat', heartbeat('r1', 1, { epoch: 'new', kvUsedTokens: 0 })));
    expect(registry.get('r1')?.capacity.kvFreeTokens).toBe(20_000);
    // A late `gone` from the old agent must not remove the new one.
    await send(() => bus.publish('heartbeat', heartbeat('r1', 51, { epoch: 'old', state: 'gone' })));
    expect(registry.get('r1')?.registration.epoch).toBe('new');
  });

  it('asks for registrations when it hears an unknown replica, at most once per interval', async () => {
    await bus.flush();
    const before = discovers;
    await send(() => bus.publish('heartbeat', heartbeat('ghost', 1)));
    await send(() => bus.publish('heartbeat', heartbeat('ghost', 2)));
    expect(discovers).toBe(before);
    clock.advance(500);
    await send(() => bus.publish('heartbeat', heartbeat('ghost', 3)));
    await bus.flush();
    expect(discovers).toBe(before + 1);
    expect(registry.get('ghost')).toBeUndefined();
  });

  it('forgets a replica silent for longer than forgetAfterMs', async () => {
    await send(() => bus.publish('registration', registration('r1')));
    await send(() => bus.publish('heartbeat', heartbeat('r1', 1)));
    clock.advance(60_001);
    expect(registry.get('r1')).toBeUndefined();
  });

  it('forgets a silent replica that registered after the registry was read while empty', async () => {
    expect(registry.list()).toEqual([]);
    await send(() => bus.publish('registration', registration('r1')));
    await send(() => bus.publish('heartbeat', heartbeat('r1', 1)));
    expect(registry.get('r1')?.acceptsWork).toBe(true);
    clock.advance(60_001);
    expect(registry.get('r1')).toBeUndefined();
    expect(registry.list()).toEqual([]);
  });

  it('lists replicas of one pool or model in id order', async () => {
    await send(() => bus.publish('registration', registration('b')));
    await send(() => bus.publish('registration', registration('a')));
    await send(() =>
      bus.publish('registration', registration('c', 'e1', { pool: 'mistral', model: 'mistral-7b' })),
    );
    expect(registry.list().map((v) => v.id)).toEqual(['a', 'b', 'c']);
    expect(registry.list({ pool: 'llama' }).map((v) => v.id)).toEqual(['a', 'b']);
    expect(registry.list({ model: 'mistral-7b' }).map((v) => v.id)).toEqual(['c']);
  });

  it('refuses replicas outside its allowed list, logging each once', async () => {
    const logger = new RecordingLogger();
    const guarded = new ReplicaRegistry({ bus, clock, logger, allowedReplicas: ['r1'] });
    guarded.start();
    await send(() => bus.publish('registration', registration('r1')));
    await send(() =>
      bus.publish('registration', registration('intruder', 'e1', { url: 'http://x:secret@evil:1' })),
    );
    await send(() => bus.publish('registration', registration('intruder')));
    expect(guarded.list().map((v) => v.id)).toEqual(['r1']);
    const refused = logger.find('warn', 'not in the allowed list');
    expect(refused).toHaveLength(1);
    expect(JSON.stringify(refused)).not.toContain('secret');
    guarded.stop();
  });

  describe("the engine's measured speed", () => {
    /** Heartbeats every 250 ms of the agent's clock, counters growing as `at(ms)` says. */
    async function beat(seq: number, ts: number, extra: Partial<Heartbeat>): Promise<void> {
      await send(() => bus.publish('heartbeat', heartbeat('r1', seq, { ts, ...extra })));
    }

    it('reports mean inter-token and prefill times over a window, with the batch they ran at', async () => {
      await send(() => bus.publish('registration', registration('r1')));
      // 5 s in which 4 sequences holding 4,000 KV tokens decode 800 tokens at 25 ms and 10
      // prefills of 500 prompt tokens each take 80 ms.
      for (let i = 0; i <= 20; i++)
        await beat(i + 1, i * 250, {
          running: 4,
          kvUsedTokens: 4000,
          interTokenSecondsTotal: i * 40 * 0.025,
          interTokensTotal: i * 40,
          prefillSecondsTotal: Math.floor(i / 2) * 0.08,
          prefillsTotal: Math.floor(i / 2),
          promptTokensTotal: Math.floor(i / 2) * 500,
        });
      const t = registry.timingOf('r1');
      expect(t?.decode?.interTokenMs).toBeCloseTo(25, 9);
      expect(t?.decode).toMatchObject({ tokens: 800, meanRunning: 4, meanContext: 1000 });
      expect(t?.prefill?.prefillMs).toBeCloseTo(80, 9);
      expect(t?.prefill).toMatchObject({ prefills: 10, meanPromptTokens: 500 });
    });

    it('keeps the last figures through a quiet window and starts over when the engine restarts', async () => {
      await send(() => bus.publish('registration', registration('r1')));
      expect(registry.timingOf('r1')).toBeUndefined();
      let seq = 1;
      for (let i = 0; i <= 20; i++)
        await beat(seq++, i * 250, {
          interTokenSecondsTotal: i * 4 * 0.05,
          interTokensTotal: i * 4,
          prefillSecondsTotal: i * 0.1,
          prefillsTotal: i,
          promptTokensTotal: i * 100,
        });
      expect(registry.timingOf('r1')?.decode?.interTokenMs).toBeCloseTo(50, 9);
      // Nothing ran for the next window: the figures stay.
      for (let i = 21; i <= 41; i++)
        await beat(seq++, i * 250, {
          running: 0,
          interTokenSecondsTotal: 20 * 4 * 0.05,
          interTokensTotal: 80,
          prefillSecondsTotal: 2,
          prefillsTotal: 20,
          promptTokensTotal: 2000,
        });
      expect(registry.timingOf('r1')?.decode?.interTokenMs).toBeCloseTo(50, 9);
      expect(registry.timingOf('r1')?.prefill?.prefillMs).toBeCloseTo(100, 9);
      // The engine restarted (its counters went back): the next window counts from the restart
      // only, so the drop is never read as negative time.
      for (let i = 0; i <= 20; i++)
        await beat(seq++, 20_000 + i * 250, {
          interTokenSecondsTotal: i * 4 * 0.01,
          interTokensTotal: i * 4,
          prefillSecondsTotal: i * 0.02,
          prefillsTotal: i,
          promptTokensTotal: i * 100,
        });
      expect(registry.timingOf('r1')?.decode?.interTokenMs).toBeCloseTo(10, 9);
      expect(registry.timingOf('r1')?.prefill?.prefillMs).toBeCloseTo(20, 9);
    });

    it('needs enough work in a window: a few tokens say nothing of the speed', async () => {
      await send(() => bus.publish('registration', registration('r1')));
      for (let i = 0; i <= 20; i++)
        await beat(i + 1, i * 250, {
          interTokenSecondsTotal: i * 0.5,
          interTokensTotal: i,
          prefillsTotal: i > 10 ? 1 : 0,
          prefillSecondsTotal: i > 10 ? 3 : 0,
        });
      expect(registry.timingOf('r1')).toBeUndefined();
    });
  });
});
