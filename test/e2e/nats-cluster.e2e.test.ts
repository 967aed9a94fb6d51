import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NodeAgent } from '@fairway/agent';
import {
  type AdminEventInput,
  generateOperatorKeyPair,
  NatsBus,
  OperatorSigner,
  Subjects,
} from '@fairway/bus';
import { parseConfig, silentLogger, systemClock } from '@fairway/core';
import { hashApiKey, type RunningDispatcher, serveSettings, startDispatcher } from '@fairway/dispatcher';
import { VllmClient } from '@fairway/engine';
import { startEngineSim } from '@fairway/engine-sim';
import { purgeStore } from '@fairway/store';
import { type NatsCluster, redisUrl, startNatsCluster, uniquePrefix, waitFor } from '@fairway/testkit';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const MODEL = 'llama-2-7b';

/**
 * The bus beyond one NATS server: a three-server cluster with JetStream on each, the admin stream
 * kept in three copies, two dispatchers and an engine's agent given every server's URL. Killing
 * the server that leads the admin stream, under load, loses no admin event and no request.
 */
describe('fairway on a three-server NATS cluster', () => {
  let cluster: NatsCluster;
  let operator: NatsBus;
  let signer: OperatorSigner;
  const prefix = uniquePrefix('natscl');
  const dispatchers: RunningDispatcher[] = [];
  const cleanups: (() => Promise<void>)[] = [];
  let dir: string;

  const publish = (e: AdminEventInput) => operator.publishAdminEvent(signer.sign(e, prefix));
  const call = async (d: RunningDispatcher, key: string): Promise<number> => {
    const res = await fetch(`${d.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
    });
    await res.arrayBuffer();
    return res.status;
  };

  beforeAll(async () => {
    cluster = await startNatsCluster(3);
    // JetStream answers once the cluster elected its meta leader.
    operator = await NatsBus.connect({ servers: cluster.urls, prefix, name: 'operator' });
    const pair = generateOperatorKeyPair();
    signer = OperatorSigner.fromPem(pair.privateKeyPem);
    dir = mkdtempSync(join(tmpdir(), 'fairway-natscl-'));
    writeFileSync(join(dir, 'operator.pub'), pair.publicKeyPem);
    await waitFor(
      async () => (await publish({ type: 'tenantUpsert', at: Date.now(), tenant: { id: 'carol' } })) > 0,
      30_000,
      'JetStream on the cluster',
    );
    const agentBus = await NatsBus.connect({ servers: cluster.urls, prefix, name: 'agent' });
    const sim = await startEngineSim({ servedModelName: MODEL, speed: 50, seed: 1 });
    const engine = new VllmClient({ url: sim.url });
    const agent = new NodeAgent({
      bus: agentBus,
      engine,
      clock: systemClock,
      replicaId: 'sim-1',
      pool: 'chat',
      model: MODEL,
      maxNumSeqs: 64,
      heartbeatIntervalMs: 100,
    });
    await agent.start();
    cleanups.push(async () => {
      await agent.stop();
      await agentBus.close();
      await engine.close();
      await sim.close();
    });
    const config = parseConfig(
      { pools: [{ id: 'chat', model: MODEL }], policy: { ordering: 'vtc' } },
      'test',
    );
    for (let i = 0; i < 2; i++) {
      const settings = serveSettings(
        {},
        {
          port: 0,
          operatorPort: 0,
          prefix,
          redisUrl: redisUrl(),
          natsUrl: cluster.urls,
          operatorPublicKeyFiles: [join(dir, 'operator.pub')],
        },
      );
      const d = await startDispatcher({ settings, config, logger: silentLogger });
      dispatchers.push(d);
      await waitFor(() => d.infrastructure.registry.list().some((v) => v.acceptsWork), 15_000, 'the replica');
    }
  }, 90_000);

  afterAll(async () => {
    for (const d of dispatchers) await d.close();
    for (const c of cleanups.reverse()) await c();
    await operator?.close();
    const redis = new Redis(redisUrl());
    await purgeStore(redis, prefix);
    await redis.quit();
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('keeps the admin stream in three copies and loses nothing when its leader is killed under load', async () => {
    const before = 'sk-carol-before-kill-01';
    await publish({ type: 'keyAdd', at: Date.now(), tenantId: 'carol', keyHash: hashApiKey(before) });
    for (const d of dispatchers)
      await waitFor(async () => (await call(d, before)) === 200, 10_000, 'the key');

    const nc = await connect({ servers: cluster.urls.split(',') });
    const jsm = await jetstreamManager(nc);
    const stream = new Subjects(prefix).adminStream;
    const info = await jsm.streams.info(stream);
    expect(info.config.num_replicas).toBe(3);
    const leader = info.cluster?.leader;
    const victim = cluster.nodes.find((n) => n.name === leader);
    expect(victim).toBeDefined();
    await nc.close();

    // Load on both dispatchers while the leader dies.
    let stop = false;
    const statuses: number[] = [];
    let loadError: unknown;
    // Settles with the first failed call, if any; awaited (and the load stopped) however the
    // test ends, so no call outlives the dispatchers.
    const load = Promise.all(
      Array.from({ length: 8 }, async (_, c) => {
        while (!stop) statuses.push(await call(dispatchers[c % 2] as RunningDispatcher, before));
      }),
    ).then(
      () => undefined,
      (err: unknown) => err,
    );
    try {
      await new Promise((r) => setTimeout(r, 500));
      await victim?.kill();
      const after = 'sk-carol-after-kill-01';
      // The operator's own connection may have been on the dead server: it reconnects to another.
      await waitFor(
        async () =>
          publish({ type: 'keyAdd', at: Date.now(), tenantId: 'carol', keyHash: hashApiKey(after) }).then(
            () => true,
            () => false,
          ),
        20_000,
        'an admin event accepted by the two servers left',
      );
      // A dispatcher whose consumer died reads the new event by direct gets after its next
      // failed attempt to start one (JetStream waits of up to 5 s), and follows the stream again
      // once the survivors have elected JetStream's meta leader too: NATS's Raft elections take
      // 4-9 s a round, and a split vote or a starved host adds rounds.
      for (const d of dispatchers)
        await waitFor(async () => (await call(d, after)) === 200, 30_000, 'the new key');
      await new Promise((r) => setTimeout(r, 1000));
    } finally {
      stop = true;
      loadError = await load;
    }
    expect(loadError).toBeUndefined();

    expect(statuses.length).toBeGreaterThan(50);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
    // Both events, in the same order, on every dispatcher: none lost in the fail-over.
    const survivor = cluster.nodes.find((n) => n !== victim) as NatsCluster['nodes'][number];
    const nc2 = await connect({ servers: survivor.url });
    // JetStream's API answers again once the survivors have a meta leader (on a loaded machine
    // that election can outlast one request's timeout).
    let messages = -1;
    await waitFor(
      async () =>
        (await jetstreamManager(nc2)).streams.info(stream).then(
          (info) => {
            messages = info.state.messages;
            return true;
          },
          () => false,
        ),
      30_000,
      "the stream's state from a surviving server",
    );
    await nc2.close();
    expect(messages).toBeGreaterThanOrEqual(3);
    for (const d of dispatchers) expect(await call(d, before)).toBe(200);
  }, 150_000);
});
