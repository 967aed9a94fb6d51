import { NodeAgent } from '@fairway/agent';
import type { Bus, Unsubscribe } from '@fairway/bus';
import { NatsBus } from '@fairway/bus';
import { parseConfig, silentLogger, systemClock } from '@fairway/core';
import { VllmClient } from '@fairway/engine';
import { type EngineSimHandle, startEngineSim } from '@fairway/engine-sim';
import { startNatsServer, type TestServer, uniquePrefix } from '@fairway/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import {
  connectInfrastructure,
  type Infrastructure,
  type RunningDispatcher,
  serveSettings,
  startDispatcher,
} from '../src/index.ts';
import { waitFor } from './support/stack.ts';

const MODEL = 'llama-2-7b';
const KEY = 'sk-resub-alpha-0001';
const CONFIG = parseConfig(
  {
    tenants: [{ id: 'alpha', keys: [{ key: KEY }] }],
    pools: [{ id: 'llama', model: MODEL }],
    policy: { ordering: 'vtc', placement: 'least-kv' },
  },
  'test config',
);

/**
 * A real bus whose `assignment` subscriptions reach the NATS server only once `open` is called:
 * the state of a live dispatcher reconnecting to a restarted NATS after the others did (every
 * client resubscribes on its own reconnect), as a sender sees it — NATS answers no-responders.
 */
function withheldAssignments(bus: Bus): { bus: Bus; open: () => Promise<void> } {
  const waiting: (() => void)[] = [];
  let opened = false;
  const gated = new Proxy(bus, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (prop !== 'subscribe') return typeof value === 'function' ? value.bind(target) : value;
      return (...args: Parameters<Bus['subscribe']>): Unsubscribe => {
        if (args[0] !== 'assignment' || opened) return target.subscribe(...args);
        let stop: Unsubscribe | undefined;
        let stopped = false;
        waiting.push(() => {
          if (!stopped) stop = target.subscribe(...args);
        });
        return () => {
          stopped = true;
          stop?.();
        };
      };
    },
  });
  return {
    bus: gated,
    async open() {
      opened = true;
      for (const subscribe of waiting.splice(0)) subscribe();
      await bus.flush();
    },
  };
}

/** Sends a chat completion with `key` asking for exactly `tokens` output tokens; status and body. */
function sender(key: string) {
  return (url: string, tokens: number) =>
    fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: 'hello' }],
        max_tokens: tokens,
        fairway_output_tokens: tokens,
      }),
    }).then(async (r) => ({ status: r.status, body: await r.text() }));
}

/**
 * A real bus that never sends `assignment` messages: a picker killed (SIGKILL) between its pick in
 * the store and its message to the request's owner, as the owner sees it.
 */
function silentPicker(bus: Bus): Bus {
  return new Proxy(bus, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (prop === 'deliver')
        return (subject: string, ...rest: unknown[]) =>
          subject === 'assignment'
            ? new Promise(() => undefined)
            : (value as (...a: unknown[]) => unknown).call(target, subject, ...rest);
      if (prop === 'publish')
        return (subject: string, ...rest: unknown[]) =>
          subject === 'assignment'
            ? undefined
            : (value as (...a: unknown[]) => unknown).call(target, subject, ...rest);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/**
 * Dispatcher B picks a request dispatcher A holds, and its assignment message is late (A's
 * subscription is missing on the NATS server for a moment, as after a NATS restart that B
 * reconnected from first) or never sent (B was killed right after its pick). Two dispatchers in
 * this process, each with its own NATS connection to a server of this test's own, sharing one
 * store; one engine-sim with its agent.
 */
describe('the owner of a request another dispatcher picked', () => {
  let nats: TestServer | undefined;
  const closers: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const close of closers.splice(0).reverse()) await close().catch(() => undefined);
    await nats?.stop();
    nats = undefined;
  });

  async function infrastructure(server: TestServer, prefix: string, name: string): Promise<Infrastructure> {
    const infra = await connectInfrastructure({
      natsUrl: server.url,
      prefix,
      defaultLeaseMs: 10_000,
      staleAfterMs: 3000,
      name,
      clock: systemClock,
      logger: silentLogger,
    });
    closers.push(() => infra.close());
    return infra;
  }

  async function dispatcher(
    name: string,
    infra: Infrastructure,
    options: Record<string, number>,
  ): Promise<RunningDispatcher> {
    const settings = serveSettings(
      {},
      { port: 0, operatorPort: 0, dispatcherId: name, options: { queueTimeoutMs: 8000, ...options } },
    );
    const d = await startDispatcher({
      settings,
      config: CONFIG,
      logger: silentLogger,
      infrastructure: infra,
    });
    closers.push(() => d.close());
    return d;
  }

  /** One engine-sim (one slot) and its agent, registered with both dispatchers' registries. */
  async function startReplica(server: TestServer, prefix: string, infras: Infrastructure[]): Promise<void> {
    const sim: EngineSimHandle = await startEngineSim({ servedModelName: MODEL, speed: 10, maxNumSeqs: 1 });
    closers.push(() => sim.close());
    const engine = new VllmClient({ url: sim.url });
    closers.push(() => engine.close());
    const agentBus = await NatsBus.connect({ servers: server.url, prefix, name: 'agent' });
    closers.push(() => agentBus.close());
    const agent = new NodeAgent({
      bus: agentBus,
      engine,
      clock: systemClock,
      replicaId: 'sim-1',
      pool: 'llama',
      model: MODEL,
      maxNumSeqs: 1,
      heartbeatIntervalMs: 100,
    });
    await agent.start();
    closers.push(() => agent.stop());
    await waitFor(
      () => infras.every((i) => i.registry.list().some((v) => v.acceptsWork)),
      5000,
      'the replica',
    );
  }

  /**
   * B's request takes the engine's only slot and A's waits in the queue behind it; when B's ends,
   * B picks A's request (A never pumps on its own timer). Resolves once B has picked it, with A's
   * answer still to come and the time A's request was sent.
   */
  async function pickedByB(a: RunningDispatcher, b: RunningDispatcher) {
    const send = sender(KEY);
    const first = send(b.url, 40);
    await waitFor(() => b.dispatcher.runtime.stats().running === 1, 5000, "B's request to run");
    const sentAt = performance.now();
    const held = send(a.url, 4);
    await waitFor(() => a.dispatcher.runtime.stats().queued === 1, 5000, "A's request to queue");
    expect((await first).status).toBe(200);
    await waitFor(() => b.dispatcher.runtime.stats().dispatched === 2, 5000, "B's pick of A's request");
    return { held, sentAt };
  }

  it('serves the request: the picker waits for the owner instead of releasing its pick', async () => {
    nats = await startNatsServer();
    const prefix = uniquePrefix('resub');
    const infraA = await infrastructure(nats, prefix, 'a');
    const infraB = await infrastructure(nats, prefix, 'b');
    const withheld = withheldAssignments(infraA.bus);
    // A never pumps on its own timer: the request it holds is picked by B when B's request ends.
    const a = await dispatcher('a', { ...infraA, bus: withheld.bus }, { pumpEveryMs: 600_000 });
    // B shares A's store, as dispatchers share Redis.
    const b = await dispatcher('b', { ...infraB, store: infraA.store }, {});

    await startReplica(nats, prefix, [infraA, infraB]);
    // B's assignment found no subscriber; A subscribes again a moment later.
    const { held } = await pickedByB(a, b);
    await new Promise((r) => setTimeout(r, 200));
    await withheld.open();

    const answer = await held;
    expect(answer.status, answer.body).toBe(200);
    // It ran on B's pick: A dispatched nothing itself.
    expect(a.dispatcher.runtime.stats().dispatched).toBe(0);
  }, 30_000);

  it('serves a request whose picker never sent its assignment, from the placement in the store', async () => {
    nats = await startNatsServer();
    const prefix = uniquePrefix('lostpick');
    const infraA = await infrastructure(nats, prefix, 'a');
    const infraB = await infrastructure(nats, prefix, 'b');
    // A queue timeout well past the owner's look-up (every assignGraceMs for requests waiting that
    // long) and short of what the test allows: without the look-up the request ends in a 504.
    const a = await dispatcher('a', infraA, {
      pumpEveryMs: 600_000,
      assignGraceMs: 1000,
      queueTimeoutMs: 10_000,
    });
    const b = await dispatcher('b', { ...infraB, bus: silentPicker(infraB.bus), store: infraA.store }, {});
    await startReplica(nats, prefix, [infraA, infraB]);
    const { held, sentAt } = await pickedByB(a, b);

    const answer = await held;
    expect(answer.status, answer.body).toBe(200);
    expect(a.dispatcher.runtime.stats().dispatched).toBe(0);
    // Found by a look-up, not by the queue timeout's last check.
    expect(performance.now() - sentAt).toBeLessThan(8000);
  }, 30_000);

  it('serves a request the picker released after finding no subscriber for its grace, from its queue', async () => {
    nats = await startNatsServer();
    const prefix = uniquePrefix('released');
    const infraA = await infrastructure(nats, prefix, 'a');
    const infraB = await infrastructure(nats, prefix, 'b');
    // A's assignment subscription stays missing: cut off from the bus longer than B's grace.
    const withheld = withheldAssignments(infraA.bus);
    const a = await dispatcher(
      'a',
      { ...infraA, bus: withheld.bus },
      { pumpEveryMs: 600_000, assignGraceMs: 1000, queueTimeoutMs: 10_000 },
    );
    const b = await dispatcher('b', { ...infraB, store: infraA.store }, { assignGraceMs: 300 });
    await startReplica(nats, prefix, [infraA, infraB]);
    // B found no subscriber for 300 ms after its pick and released the request: the store forgot it.
    const { held, sentAt } = await pickedByB(a, b);

    const answer = await held;
    expect(answer.status, answer.body).toBe(200);
    // A put it back in its queue and dispatched it itself (had B's pick stood, A would have
    // found it running and adopted it, dispatching nothing).
    expect(a.dispatcher.runtime.stats().dispatched).toBe(1);
    expect(performance.now() - sentAt).toBeLessThan(8000);
  }, 30_000);
});
