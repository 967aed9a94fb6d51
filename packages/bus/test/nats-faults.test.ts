import { ManualClock } from '@fairway/core';
import { type RestartableServer, startRestartableNatsServer, uniquePrefix } from '@fairway/testkit';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type AdminEventRecord, NatsBus, ReplicaRegistry } from '../src/index.ts';
import { waitFor } from './helpers.ts';

/**
 * The bus when NATS or a peer fails: a `nats-server -js` of this test's own is stopped and started
 * again on the same port and JetStream store (as an operator's restart or a crash does), and a
 * subscriber's connection goes away.
 */
/** An assignment from picker d2 to owner d1, as dispatchers send them. */
const assignment = {
  requestId: 'r1',
  dispatcherId: 'd1',
  pickedBy: 'd2',
  replicaId: 'sim-1',
  reserveTokens: 10,
  at: 0,
};

describe('NatsBus when NATS restarts or a peer is gone', () => {
  let nats: RestartableServer;
  const buses: NatsBus[] = [];
  let prefix: string;

  beforeEach(async () => {
    nats = await startRestartableNatsServer();
    prefix = uniquePrefix('restart');
  });
  afterEach(async () => {
    for (const b of buses.splice(0)) await b.close().catch(() => undefined);
    await nats.stop();
  });

  async function connect(name: string): Promise<NatsBus> {
    const b = await NatsBus.connect({ servers: nats.url, prefix, name });
    buses.push(b);
    return b;
  }

  it('resumes the admin-event subscription after the last event it delivered, without replaying from the start', async () => {
    const publisher = await connect('publisher');
    const consumer = await connect('consumer');
    const seen: AdminEventRecord[] = [];
    await publisher.publishAdminEvent({ type: 'tenantUpsert', at: 1, tenant: { id: 'a' } });
    await publisher.publishAdminEvent({ type: 'tenantUpsert', at: 2, tenant: { id: 'b' } });
    await consumer.subscribeAdminEvents((r) => {
      seen.push(r);
    });
    await waitFor(() => seen.length === 2, 5000, 'the stored events');

    await nats.halt();
    await nats.resume();
    // Published as soon as the server is back (the publisher retries while it reconnects).
    const deadline = Date.now() + 15_000;
    for (;;) {
      try {
        await publisher.publishAdminEvent({ type: 'tenantDelete', at: 3, tenantId: 'a' });
        break;
      } catch (err) {
        if (Date.now() > deadline) throw err;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    await waitFor(() => seen.length >= 3, 20_000, 'the event published after the restart');
    await new Promise((r) => setTimeout(r, 300));
    expect(seen.map((r) => r.seq)).toEqual([1, 2, 3]);
    expect(seen[2]?.event).toMatchObject({ type: 'tenantDelete', tenantId: 'a' });
  }, 60_000);

  it('acknowledges a delivered message, and tells the sender at once when its addressee is gone', async () => {
    const sender = await connect('sender');
    const owner = await connect('owner');
    const got: string[] = [];
    const stop = owner.subscribe(
      'assignment',
      (a) => {
        got.push(a.requestId);
      },
      { key: 'd1' },
    );
    await owner.flush();
    expect(await sender.deliver('assignment', assignment)).toBe('delivered');
    await waitFor(() => got.length === 1, 2000, 'the assignment');
    // The owner's connection is gone (a dispatcher SIGKILLed): NATS has no subscriber to offer.
    stop();
    await owner.close();
    expect(await sender.deliver('assignment', { ...assignment, requestId: 'r2' })).toBe('no_responders');
    expect(got).toEqual(['r1']);
  }, 30_000);

  it('awaits an addressee that subscribes again (a reconnect after a NATS restart) before answering no_responders', async () => {
    const sender = await connect('sender');
    const owner = await connect('owner');
    // The owner is alive but, like a client reconnecting after the sender did, has no subscription
    // on the server yet when the message is sent; it subscribes again a moment later.
    const got: string[] = [];
    const sent = sender.deliver('assignment', assignment, { timeoutMs: 2000, awaitSubscriberMs: 10_000 });
    await new Promise((r) => setTimeout(r, 300));
    owner.subscribe('assignment', (a) => void got.push(a.requestId), { key: 'd1' });
    await owner.flush();
    expect(await sent).toBe('delivered');
    await waitFor(() => got.length === 1, 2000, 'the assignment');
    expect(got).toEqual(['r1']);
    // An addressee that never comes back is still reported gone once the wait is over.
    expect(
      await sender.deliver('assignment', { ...assignment, dispatcherId: 'd9' }, { awaitSubscriberMs: 300 }),
    ).toBe('no_responders');
  }, 30_000);

  it('reports the connection dropping and coming back, and the registry keeps replicas meanwhile', async () => {
    const agent = await connect('agent');
    const bus = await connect('dispatcher');
    const clock = new ManualClock(1_000_000);
    const registry = new ReplicaRegistry({ bus, clock, staleAfterMs: 1000 });
    registry.start();
    const changes: boolean[] = [];
    bus.onConnectionChange((up) => changes.push(up));
    let agentUp = true;
    agent.onConnectionChange((up) => {
      agentUp = up;
    });
    await bus.flush();
    agent.publish('registration', {
      replicaId: 'r1',
      epoch: 'e1',
      url: 'http://127.0.0.1:8000',
      pool: 'llama',
      model: 'llama-2-7b',
      tp: 1,
      kvCapacityTokens: 10_000,
      blockSize: 16,
      maxNumSeqs: 8,
      at: 0,
    });
    const beat = (seq: number): void =>
      agent.publish('heartbeat', {
        replicaId: 'r1',
        epoch: 'e1',
        seq,
        ts: 0,
        state: 'ready',
        running: 1,
        waiting: 0,
        kvUsage: 0.1,
        kvUsedTokens: 1000,
        promptTokensTotal: 0,
        generationTokensTotal: 0,
        preemptionsTotal: 0,
      });
    beat(1);
    await agent.flush();
    await waitFor(() => registry.get('r1')?.acceptsWork === true, 5000, 'the replica');

    await nats.halt();
    await waitFor(() => !registry.busConnected && !agentUp, 5000, 'the disconnect');
    expect(changes).toEqual([false]);
    // Silence caused by the bus says nothing about the replica: it keeps its last known state.
    clock.advance(30_000);
    expect(registry.get('r1')).toMatchObject({ acceptsWork: true, lastKnown: true });
    // Load read from the engine directly while the bus is down.
    expect(registry.observe('r1', { running: 5, waiting: 2, kvUsage: 0.5 })).toBe(true);
    expect(registry.get('r1')?.capacity).toMatchObject({ running: 5, waiting: 2, kvUsedTokens: 5000 });

    await nats.resume();
    await waitFor(() => registry.busConnected && agentUp, 15_000, 'the reconnect');
    expect(changes).toEqual([false, true]);
    // Back on the bus: the agent has one staleness period to be heard again…
    expect(registry.get('r1')).toMatchObject({ acceptsWork: true, lastKnown: false });
    clock.advance(1001);
    expect(registry.get('r1')?.acceptsWork).toBe(false);
    // …and its heartbeats count again once they arrive (sent every 100 ms, as an agent does: the
    // registry's subscription may reach the restarted server after the first one).
    let seq = 2;
    const beats = setInterval(() => beat(seq++), 100);
    try {
      await waitFor(() => registry.get('r1')?.acceptsWork === true, 10_000, 'a heartbeat after the restart');
    } finally {
      clearInterval(beats);
    }
    registry.stop();
  }, 60_000);
});
