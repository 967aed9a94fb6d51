import { natsUrl, uniquePrefix } from '@fairway/testkit';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  type AdminEventRecord,
  type Bus,
  BusMessageError,
  BusNoRespondersError,
  BusTimeoutError,
  type Heartbeat,
  MemoryBus,
  type MessageInput,
  NatsBus,
  Subjects,
} from '../src/index.ts';
import { RecordingLogger, sleep, waitFor } from './helpers.ts';

/** Two handles on one bus (two connections for NATS) and a way to send bytes no schema checked. */
interface Harness {
  a: Bus;
  b: Bus;
  logger: RecordingLogger;
  injectRaw(subject: string, data: string): Promise<void>;
  requestRaw(subject: string, data: string): Promise<string>;
  close(): Promise<void>;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

const harnesses: { name: string; make: (prefix: string) => Promise<Harness> }[] = [
  {
    name: 'MemoryBus',
    make: async (prefix) => {
      const logger = new RecordingLogger();
      const bus = new MemoryBus({ prefix, logger });
      return {
        a: bus,
        b: bus,
        logger,
        injectRaw: async (subject, data) => bus.injectRaw(subject, data),
        requestRaw: (subject, data) =>
          new Promise((resolve) => bus.injectRaw(subject, data, (reply) => resolve(dec.decode(reply)))),
        close: () => bus.close(),
      };
    },
  },
  {
    name: 'NatsBus',
    make: async (prefix) => {
      const logger = new RecordingLogger();
      const a = await NatsBus.connect({ servers: natsUrl(), prefix, logger });
      const b = await NatsBus.connect({ servers: natsUrl(), prefix, logger });
      const raw: NatsConnection = await connect({ servers: natsUrl() });
      return {
        a,
        b,
        logger,
        injectRaw: async (subject, data) => {
          raw.publish(subject, enc.encode(data));
          await raw.flush();
        },
        requestRaw: async (subject, data) => dec.decode((await raw.request(subject, enc.encode(data))).data),
        close: async () => {
          await Promise.all([a.close(), b.close()]);
          await deleteAdminStream(raw, prefix);
          await raw.drain();
        },
      };
    },
  },
];

/** Removes a test's admin stream so a shared NATS server does not collect them. */
async function deleteAdminStream(nc: NatsConnection, prefix: string): Promise<void> {
  const jsm = await jetstreamManager(nc);
  await jsm.streams.delete(new Subjects(prefix).adminStream).catch(() => false);
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
    ts: 1000 + seq,
    state: 'ready',
    running: 2,
    waiting: 0,
    kvUsage: 0.25,
    kvUsedTokens: 2500,
    promptTokensTotal: 100,
    generationTokensTotal: 200,
    preemptionsTotal: 0,
    ...extra,
  };
}

/** Publishes until `check` holds: core NATS subscriptions take a moment to reach the server. */
async function settle(h: Harness): Promise<void> {
  await h.a.flush();
  await h.b.flush();
}

describe.each(harnesses)('$name', ({ make }) => {
  let h: Harness;
  let prefix: string;

  beforeEach(async () => {
    prefix = uniquePrefix('bus');
    h = await make(prefix);
  });
  afterEach(async () => {
    await h.close();
  });

  it('delivers a published heartbeat with defaults applied', async () => {
    const got: Heartbeat[] = [];
    h.b.subscribe('heartbeat', (m) => {
      got.push(m);
    });
    await settle(h);
    h.a.publish('heartbeat', heartbeat('r1', 1));
    await waitFor(() => got.length === 1);
    expect(got[0]).toMatchObject({ replicaId: 'r1', seq: 1, kvUsedTokens: 2500, adapters: [] });
  });

  it('routes keyed kinds only to subscribers of that key, ids with dots included', async () => {
    const forOne: string[] = [];
    const forAll: string[] = [];
    h.b.subscribe('heartbeat', (m) => void forOne.push(m.replicaId), { key: 'node.a.1' });
    h.b.subscribe('heartbeat', (m) => void forAll.push(m.replicaId));
    await settle(h);
    h.a.publish('heartbeat', heartbeat('node.a.1', 1));
    h.a.publish('heartbeat', heartbeat('node.a.2', 1));
    h.a.publish('heartbeat', heartbeat('node', 1));
    await waitFor(() => forAll.length === 3);
    await settle(h);
    expect(forOne).toEqual(['node.a.1']);
    expect(forAll.sort()).toEqual(['node', 'node.a.1', 'node.a.2']);
  });

  it('delivers assignments to the dispatcher that holds the connection', async () => {
    const toB: string[] = [];
    const toC: string[] = [];
    h.b.subscribe('assignment', (m) => void toB.push(m.requestId), { key: 'disp-b' });
    h.b.subscribe('assignment', (m) => void toC.push(m.requestId), { key: 'disp-c' });
    await settle(h);
    h.a.publish('assignment', {
      requestId: 'req-1',
      dispatcherId: 'disp-b',
      pickedBy: 'disp-a',
      replicaId: 'r1',
      reserveTokens: 300,
      at: 5,
    });
    await waitFor(() => toB.length === 1);
    await settle(h);
    expect(toB).toEqual(['req-1']);
    expect(toC).toEqual([]);
  });

  it('carries control reports keyed by dispatcher and control routes to every dispatcher, defaults applied', async () => {
    const reports: string[] = [];
    const routes: { held: string[]; pull: boolean; queues: Record<string, number[]> }[] = [];
    h.b.subscribe('controlReport', (m) => void reports.push(`${m.dispatcherId}:${m.queued[0]?.generated}`));
    h.b.subscribe('controlRoutes', (m) => void routes.push(m));
    const forOther: string[] = [];
    h.b.subscribe('controlReport', (m) => void forOther.push(m.dispatcherId), { key: 'd.2' });
    await settle(h);
    const q = {
      requestId: 'q1',
      model: 'm',
      sloClass: 'interactive',
      inputTokens: 5,
      maxTokens: 9,
      arrivalMs: 1,
    };
    h.a.publish('controlReport', { dispatcherId: 'd.1', seq: 0, queued: [q], running: [], at: 2 });
    h.a.publish('controlRoutes', { leaderId: 'd.1', round: 3, queues: { r1: [0, 2] }, at: 2 });
    await waitFor(() => reports.length === 1 && routes.length === 1);
    expect(reports).toEqual(['d.1:0']);
    expect(forOther).toEqual([]);
    expect(routes[0]).toMatchObject({ held: [], pull: true, queues: { r1: [0, 2] } });
    expect(() =>
      h.a.publish('controlReport', {
        dispatcherId: 'd1',
        seq: 1,
        queued: [{ ...q, inputTokens: 0 }],
        running: [],
        at: 2,
      }),
    ).toThrow(/queued\[0\]\.inputTokens/);
  });

  it('stops delivering after unsubscribe', async () => {
    const got: number[] = [];
    const off = h.b.subscribe('heartbeat', (m) => void got.push(m.seq));
    await settle(h);
    h.a.publish('heartbeat', heartbeat('r1', 1));
    await waitFor(() => got.length === 1);
    off();
    off();
    await settle(h);
    h.a.publish('heartbeat', heartbeat('r1', 2));
    await settle(h);
    await sleep(50);
    expect(got).toEqual([1]);
  });

  it('refuses to publish a message that fails its schema, naming the field', () => {
    expect(() => h.a.publish('heartbeat', { ...heartbeat('r1', 1), kvUsage: 1.5 })).toThrow(BusMessageError);
    expect(() => h.a.publish('heartbeat', { ...heartbeat('r1', 1), kvUsage: 1.5 })).toThrow(/kvUsage/);
  });

  it('drops invalid received messages with a logged reason and keeps delivering', async () => {
    const got: number[] = [];
    h.b.subscribe('heartbeat', (m) => void got.push(m.seq));
    await settle(h);
    const subject = new Subjects(prefix).of('heartbeat', 'r1');
    await h.injectRaw(subject, 'not json {');
    await h.injectRaw(subject, JSON.stringify({ ...heartbeat('r1', 1), state: 'exploded' }));
    await h.injectRaw(subject, JSON.stringify({ replicaId: 'r1' }));
    h.a.publish('heartbeat', heartbeat('r1', 7));
    await waitFor(() => got.length === 1);
    await waitFor(() => h.logger.find('warn', 'rejected').length === 3);
    expect(got).toEqual([7]);
    const reasons = h.logger.find('warn', 'rejected').map((l) => (l.obj as { reason: string }).reason);
    expect(reasons[0]).toBe('payload is not JSON');
    expect(reasons[1]).toMatch(/^state: /);
    expect(reasons[2]).toMatch(/epoch: .*seq: /);
    // A flood of the same invalid message is logged once, not once per message.
    for (let i = 0; i < 20; i++) await h.injectRaw(subject, 'not json {');
    h.a.publish('heartbeat', heartbeat('r1', 8));
    await waitFor(() => got.length === 2);
    expect(h.logger.find('warn', 'rejected')).toHaveLength(3);
  });

  it('drops malformed prefix routes: a hostile publisher cannot send unbounded or partial ones', async () => {
    const got: string[][] = [];
    h.b.subscribe('prefixRoute', (m) => void got.push(m.keys));
    await settle(h);
    const subject = new Subjects(prefix).of('prefixRoute', 'd1');
    const valid = {
      dispatcherId: 'd1',
      tenant: 't',
      pool: 'p',
      replicaId: 'r1',
      keys: ['k/8', 'k/4'],
      at: 1,
    };
    await h.injectRaw(subject, 'not json {');
    await h.injectRaw(
      subject,
      JSON.stringify({ ...valid, keys: Array.from({ length: 10_000 }, (_, i) => `k${i}`) }),
    );
    await h.injectRaw(subject, JSON.stringify({ ...valid, keys: ['x'.repeat(100_000)] }));
    await h.injectRaw(subject, JSON.stringify({ ...valid, keys: 'k/8' }));
    await h.injectRaw(subject, JSON.stringify({ ...valid, keys: [] }));
    await h.injectRaw(subject, JSON.stringify({ ...valid, tenant: undefined }));
    await h.injectRaw(subject, JSON.stringify({ ...valid, dispatcherId: 'd2' }));
    h.a.publish('prefixRoute', valid);
    await waitFor(() => got.length === 1);
    await settle(h);
    await sleep(50);
    expect(got).toEqual([['k/8', 'k/4']]);
  });

  it('refuses a message whose payload names another replica than its subject, and logs it', async () => {
    const got: string[] = [];
    h.b.subscribe('heartbeat', (m) => void got.push(m.replicaId));
    h.b.subscribe('evict', (m) => void got.push(`evict ${m.replicaId}`));
    await settle(h);
    const subjects = new Subjects(prefix);
    await h.injectRaw(subjects.of('heartbeat', 'r2'), JSON.stringify(heartbeat('r1', 1)));
    await h.injectRaw(
      subjects.of('evict', 'r2'),
      JSON.stringify({ replicaId: 'r1', requestIds: ['q1'], at: 1 }),
    );
    h.a.publish('heartbeat', heartbeat('r1', 2));
    h.a.publish('evict', { replicaId: 'r1', requestIds: ['q2'], at: 2 });
    await waitFor(() => got.length === 2);
    await waitFor(() => h.logger.find('warn', 'another route than its subject').length === 2);
    expect(got).toEqual(['r1', 'evict r1']);
    expect(subjects.of('evict', 'r1')).toBe(`${prefix}.replica.r1.evict`);
  });

  it('keeps a subscription alive when its handler throws or rejects', async () => {
    const got: number[] = [];
    h.b.subscribe('heartbeat', async (m) => {
      got.push(m.seq);
      if (m.seq === 1) throw new Error('sync boom');
      if (m.seq === 2) await Promise.reject(new Error('async boom'));
    });
    await settle(h);
    for (const seq of [1, 2, 3]) h.a.publish('heartbeat', heartbeat('r1', seq));
    await waitFor(() => got.length === 3);
    await waitFor(() => h.logger.find('error', 'boom').length === 2);
    expect(got).toEqual([1, 2, 3]);
  });

  it('answers node commands through request and serve', async () => {
    const seen: string[] = [];
    h.b.serve(
      'command',
      (cmd) => {
        seen.push(cmd.type);
        return cmd.type === 'sleep' ? { ok: true, state: 'sleeping' } : { ok: true, state: 'ready' };
      },
      { key: 'r1' },
    );
    await settle(h);
    const reply = await h.a.request('command', { replicaId: 'r1', type: 'sleep', level: 1 });
    expect(reply).toEqual({ ok: true, state: 'sleeping' });
    const swap = await h.a.request('command', { replicaId: 'r1', type: 'swapModel', model: 'm2' });
    expect(swap.ok).toBe(true);
    expect(seen).toEqual(['sleep', 'swapModel']);
  });

  it('rejects a request nobody serves with BusNoRespondersError', async () => {
    await expect(h.a.request('command', { replicaId: 'nobody', type: 'drain' })).rejects.toBeInstanceOf(
      BusNoRespondersError,
    );
  });

  it('rejects a request whose server does not answer in time with BusTimeoutError', async () => {
    h.b.serve('command', () => new Promise(() => undefined), { key: 'slow' });
    await settle(h);
    await expect(
      h.a.request('command', { replicaId: 'slow', type: 'drain' }, { timeoutMs: 100 }),
    ).rejects.toBeInstanceOf(BusTimeoutError);
  });

  it('answers invalid requests and failing handlers with a failure reply', async () => {
    h.b.serve(
      'command',
      (cmd) => {
        if (cmd.type === 'wake') throw new Error('engine refused to wake');
        return { ok: true };
      },
      { key: 'r1' },
    );
    await settle(h);
    const subject = new Subjects(prefix).of('command', 'r1');
    const unknown = JSON.parse(
      await h.requestRaw(subject, JSON.stringify({ replicaId: 'r1', type: 'selfDestruct' })),
    );
    expect(unknown.ok).toBe(false);
    expect(unknown.error).toMatch(/type/);
    const badLevel = JSON.parse(
      await h.requestRaw(subject, JSON.stringify({ replicaId: 'r1', type: 'sleep', level: 3 })),
    );
    expect(badLevel).toMatchObject({ ok: false });
    expect(badLevel.error).toMatch(/level/);
    const failed = await h.a.request('command', { replicaId: 'r1', type: 'wake' });
    expect(failed).toEqual({ ok: false, error: 'engine refused to wake' });
    expect(
      h.logger.find('warn', 'selfDestruct').length + h.logger.find('warn', 'type').length,
    ).toBeGreaterThan(0);
  });

  it('numbers admin events and replays them from any sequence', async () => {
    const s1 = await h.a.publishAdminEvent({
      type: 'tenantUpsert',
      at: 1,
      tenant: { id: 'acme', weight: 2 },
    });
    const s2 = await h.a.publishAdminEvent({
      type: 'limitsSet',
      at: 2,
      scope: 'tenant',
      id: 'acme',
      limits: { rpm: 60 },
    });
    const s3 = await h.a.publishAdminEvent({ type: 'tenantDelete', at: 3, tenantId: 'acme' });
    expect([s1, s2, s3]).toEqual([1, 2, 3]);
    const all = await h.b.replayAdminEvents();
    expect(all.map((r) => [r.seq, r.event.type])).toEqual([
      [1, 'tenantUpsert'],
      [2, 'limitsSet'],
      [3, 'tenantDelete'],
    ]);
    expect(all[0]?.event).toMatchObject({ tenant: { id: 'acme', weight: 2, limits: {} } });
    expect((await h.b.replayAdminEvents(2)).map((r) => r.seq)).toEqual([2, 3]);
    expect(await h.b.replayAdminEvents(4)).toEqual([]);
  });

  it('replays nothing from an empty admin history', async () => {
    expect(await h.b.replayAdminEvents()).toEqual([]);
  });

  it('refuses an invalid admin event, naming the field', async () => {
    await expect(
      h.a.publishAdminEvent({ type: 'limitsSet', at: 1, scope: 'default', id: 'x', limits: {} }),
    ).rejects.toThrow(/id/);
    await expect(h.a.publishAdminEvent({ type: 'keyRevoke', at: 1, keyHash: 'plain' })).rejects.toThrow(
      /keyHash/,
    );
  });

  it('delivers admin history from a sequence, then new events, in order', async () => {
    for (let i = 1; i <= 3; i++) {
      await h.a.publishAdminEvent({ type: 'tenantUpsert', at: i, tenant: { id: `t${i}`, weight: i } });
    }
    const got: AdminEventRecord[] = [];
    const off = await h.b.subscribeAdminEvents(
      async (rec) => {
        // A slow handler must not reorder delivery.
        if (rec.seq === 2) await sleep(20);
        got.push(rec);
      },
      { fromSeq: 2 },
    );
    await h.a.publishAdminEvent({ type: 'tenantDelete', at: 9, tenantId: 't1' });
    await waitFor(() => got.length === 3);
    expect(got.map((r) => r.seq)).toEqual([2, 3, 4]);
    expect(got[2]?.event).toEqual({ type: 'tenantDelete', at: 9, tenantId: 't1' });
    off();
    await h.a.publishAdminEvent({ type: 'tenantDelete', at: 10, tenantId: 't2' });
    await sleep(50);
    expect(got).toHaveLength(3);
  });
});

describe('NatsBus admin stream', () => {
  it('is created once per prefix and shared by every bus on it, isolated from other prefixes', async () => {
    const prefix = uniquePrefix('bus');
    const first = await NatsBus.connect({ servers: natsUrl(), prefix });
    const second = await NatsBus.connect({ servers: natsUrl(), prefix });
    const otherPrefix = uniquePrefix('bus');
    const other = await NatsBus.connect({ servers: natsUrl(), prefix: otherPrefix });
    try {
      await Promise.all([
        first.publishAdminEvent({ type: 'tenantDelete', at: 1, tenantId: 'a' }),
        second.publishAdminEvent({ type: 'tenantDelete', at: 1, tenantId: 'b' }),
      ]);
      const seen = (await first.replayAdminEvents()).map((r) => r.seq);
      expect(seen).toEqual([1, 2]);
      expect(await other.replayAdminEvents()).toEqual([]);
      // A bus that connects later finds the stream and its history.
      const late = await NatsBus.connect({ servers: natsUrl(), prefix });
      expect(await late.replayAdminEvents()).toHaveLength(2);
      await late.close();
    } finally {
      await Promise.all([first.close(), second.close(), other.close()]);
      const raw = await connect({ servers: natsUrl() });
      await deleteAdminStream(raw, prefix);
      await deleteAdminStream(raw, otherPrefix);
      await raw.drain();
    }
  });
});

describe('NatsBus admin stream history', () => {
  it('warns when the stream it finds drops old events, which nonce replay checks rely on', async () => {
    const prefix = uniquePrefix('bus');
    const raw = await connect({ servers: natsUrl() });
    const jsm = await jetstreamManager(raw);
    const subjects = new Subjects(prefix);
    await jsm.streams.add({ name: subjects.adminStream, subjects: [subjects.adminPattern], max_msgs: 5 });
    const logger = new RecordingLogger();
    const bus = await NatsBus.connect({ servers: natsUrl(), prefix, logger });
    const other = uniquePrefix('bus');
    const keeper = new RecordingLogger();
    const full = await NatsBus.connect({ servers: natsUrl(), prefix: other, logger: keeper });
    try {
      await bus.replayAdminEvents();
      await full.replayAdminEvents();
      await NatsBus.connect({ servers: natsUrl(), prefix: other, logger: keeper }).then(async (b) => {
        await b.replayAdminEvents();
        await b.close();
      });
      expect(logger.find('warn', 'drops old events')).toHaveLength(1);
      expect(keeper.find('warn', 'drops old events')).toHaveLength(0);
    } finally {
      await Promise.all([bus.close(), full.close()]);
      await deleteAdminStream(raw, prefix);
      await deleteAdminStream(raw, other);
      await raw.drain();
    }
  });
});

describe('MemoryBus', () => {
  it('refuses use after close', async () => {
    const bus = new MemoryBus();
    await bus.close();
    expect(() => bus.publish('discover', {})).toThrow(/closed/);
  });
});
