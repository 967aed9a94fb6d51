import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NodeAgent } from '@fairway/agent';
import {
  type AdminEventInput,
  generateOperatorKeyPair,
  MemoryBus,
  NatsBus,
  OperatorSigner,
  OperatorVerifier,
  Subjects,
} from '@fairway/bus';
import { parseConfig, silentLogger, systemClock } from '@fairway/core';
import { VllmClient } from '@fairway/engine';
import { type EngineSimHandle, startEngineSim } from '@fairway/engine-sim';
import { purgeStore } from '@fairway/store';
import { natsUrl, RecordingLogger, redisUrl, uniquePrefix } from '@fairway/testkit';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { AdminEventApplier, type AdminTrust, followAdminEvents } from '../src/admin-events.ts';
import { hashApiKey, KeyRing } from '../src/auth.ts';
import { type RunningDispatcher, serveSettings, startDispatcher } from '../src/index.ts';
import { TenantDirectory } from '../src/tenant-directory.ts';
import { waitFor } from './support/stack.ts';

const MODEL = 'llama-2-7b';
const CONFIG = {
  pools: [{ id: 'chat', model: MODEL }],
  tenants: [{ id: 'alpha', keys: [{ key: 'sk-alpha-0000000001' }] }],
  policy: { ordering: 'vtc' },
};

function applierOn(
  tenants: TenantDirectory,
  keys: KeyRing,
  trust: AdminTrust = { kind: 'in-process' },
): AdminEventApplier {
  return new AdminEventApplier({
    trust,
    fleet: 'fairway',
    keys,
    tenants,
    sloClasses: new Set(['interactive', 'batch-1']),
    logger: silentLogger,
  });
}

describe('AdminEventApplier', () => {
  it('replays the stored history in order, then follows new events', async () => {
    const bus = new MemoryBus();
    const tenants = new TenantDirectory();
    const keys = new KeyRing(tenants);
    const applier = applierOn(tenants, keys);
    await bus.publishAdminEvent({ type: 'tenantUpsert', at: 1, tenant: { id: 'carol', weight: 3 } });
    await bus.publishAdminEvent({
      type: 'keyAdd',
      at: 2,
      tenantId: 'carol',
      keyHash: hashApiKey('sk-carol-1'),
    });
    const stop = await followAdminEvents(bus, applier);
    expect(applier.lastSeq).toBe(2);
    expect(keys.authenticate('sk-carol-1')).toMatchObject({ tenant: 'carol', weight: 3 });

    await bus.publishAdminEvent({
      type: 'limitsSet',
      at: 3,
      scope: 'tenant',
      id: 'carol',
      limits: { rpm: 7 },
    });
    await bus.publishAdminEvent({ type: 'keyRevoke', at: 4, keyHash: hashApiKey('sk-carol-1') });
    await waitFor(() => applier.lastSeq === 4);
    expect(tenants.tenantLimits('carol')).toEqual({ rpm: 7 });
    expect(keys.authenticate('sk-carol-1')).toBeUndefined();
    stop();
    await bus.close();
  });

  it('skips what it cannot apply, the same way on every dispatcher, and ignores redeliveries', () => {
    const tenants = new TenantDirectory({ rpm: 10 });
    const keys = new KeyRing(tenants);
    const applier = applierOn(tenants, keys);
    const key = hashApiKey('sk-ghost');
    expect(
      applier.apply({ seq: 1, event: { type: 'keyAdd', at: 1, tenantId: 'ghost', keyHash: key } }),
    ).toEqual({
      applied: false,
      reason: 'no tenant "ghost"',
    });
    expect(
      applier.apply({
        seq: 2,
        event: {
          type: 'tenantUpsert',
          at: 2,
          tenant: { id: 'dave', weight: 1, sloClass: 'nope', limits: {} },
        },
      }).applied,
    ).toBe(false);
    expect(
      applier.apply({
        seq: 3,
        event: {
          type: 'tenantUpsert',
          at: 3,
          tenant: { id: 'dave', weight: 2, sloClass: 'batch-1', limits: {} },
        },
      }).applied,
    ).toBe(true);
    expect(applier.apply({ seq: 3, event: { type: 'tenantDelete', at: 4, tenantId: 'dave' } }).applied).toBe(
      false,
    );
    expect(tenants.has('dave')).toBe(true);
    // A tenant without limits of its own gets the defaults; deleting it revokes its keys.
    expect(tenants.tenantLimits('dave')).toEqual({ rpm: 10 });
    applier.apply({ seq: 4, event: { type: 'keyAdd', at: 5, tenantId: 'dave', keyHash: key } });
    expect(keys.authenticate('sk-ghost')).toMatchObject({ tenant: 'dave', weight: 2, sloClass: 'batch-1' });
    applier.apply({ seq: 5, event: { type: 'tenantDelete', at: 6, tenantId: 'dave' } });
    applier.apply({
      seq: 6,
      event: { type: 'tenantUpsert', at: 7, tenant: { id: 'dave', weight: 1, limits: {} } },
    });
    expect(keys.authenticate('sk-ghost')).toBeUndefined();
  });
});

describe('AdminEventApplier with an operator key', () => {
  const operator = generateOperatorKeyPair();
  const signer = OperatorSigner.fromPem(operator.privateKeyPem);
  const trust: AdminTrust = { kind: 'signed', verifier: OperatorVerifier.fromPems([operator.publicKeyPem]) };
  const tenant: AdminEventInput = { type: 'tenantUpsert', at: 1, tenant: { id: 'carol' } };
  const keyAdd: AdminEventInput = {
    type: 'keyAdd',
    at: 2,
    tenantId: 'carol',
    keyHash: hashApiKey('sk-carol-1'),
  };

  async function follow(bus: MemoryBus, t: AdminTrust = trust) {
    const tenants = new TenantDirectory();
    const keys = new KeyRing(tenants);
    const applier = applierOn(tenants, keys, t);
    const stop = await followAdminEvents(bus, applier);
    return { tenants, keys, applier, stop };
  }

  it('applies events signed by a trusted key', async () => {
    const bus = new MemoryBus();
    await bus.publishAdminEvent(signer.sign(tenant, 'fairway'));
    await bus.publishAdminEvent(signer.sign(keyAdd, 'fairway'));
    const { keys, applier, stop } = await follow(bus);
    expect(applier.lastSeq).toBe(2);
    expect(keys.authenticate('sk-carol-1')).toMatchObject({ tenant: 'carol' });
    stop();
  });

  it('refuses unsigned events, other keys, tampered payloads, other fleets and copies of applied events', async () => {
    const bus = new MemoryBus();
    const intruder = OperatorSigner.fromPem(generateOperatorKeyPair().privateKeyPem);
    const signedTenant = signer.sign(tenant, 'fairway');
    const signedKey = signer.sign(keyAdd, 'fairway');
    const tampered = { ...signedKey, payload: signedKey.payload.replace('carol', 'mallory') };
    await bus.publishAdminEvent(signedTenant);
    await bus.publishAdminEvent(keyAdd);
    await bus.publishAdminEvent(intruder.sign(keyAdd, 'fairway'));
    await bus.publishAdminEvent({ ...intruder.sign(keyAdd, 'fairway'), keyId: signer.keyId });
    await bus.publishAdminEvent(tampered);
    // Signed by the operator, but for the staging fleet.
    await bus.publishAdminEvent(signer.sign(keyAdd, 'staging'));
    const log = new RecordingLogger();
    const tenants = new TenantDirectory();
    const keys = new KeyRing(tenants);
    const applier = new AdminEventApplier({
      trust,
      fleet: 'fairway',
      keys,
      tenants,
      sloClasses: new Set(['interactive']),
      logger: log,
    });
    const stop = await followAdminEvents(bus, applier);
    expect(keys.authenticate('sk-carol-1')).toBeUndefined();
    const reasons = log.find('warn', 'admin: event refused').map((l) => (l.obj as { reason: string }).reason);
    // One line per kind of refusal: the second bad signature in a row is held back (anyone on
    // the stream can send refused events; they must not flood the log).
    expect(reasons).toEqual([
      'unsigned',
      expect.stringMatching(/^signed by unknown key ed25519:/),
      expect.stringMatching(/^bad signature/),
      'signed for fleet "staging", not "fairway"',
    ]);
    // The key is added, revoked, and a copy of the old signed keyAdd is published again: it stays revoked.
    await bus.publishAdminEvent(signedKey);
    await waitFor(() => keys.authenticate('sk-carol-1') !== undefined);
    await bus.publishAdminEvent(
      signer.sign({ type: 'keyRevoke', at: 3, keyHash: hashApiKey('sk-carol-1') }, 'fairway'),
    );
    await bus.publishAdminEvent(signedKey);
    await bus.publishAdminEvent(signer.sign(keyAdd, 'fairway'));
    await waitFor(() => applier.lastSeq === 10);
    expect(keys.authenticate('sk-carol-1')).toBeUndefined();
    const last = log.lines.filter((l) => /refused|skipped/.test(l.msg ?? '')).slice(-2);
    expect(last.map((l) => (l.obj as { reason: string }).reason)).toEqual([
      'replayed: an event with this nonce was already applied',
      'this key was revoked; issue a new key',
    ]);
    stop();
  });

  it('applies nothing from the bus without an operator key (trust none), and says so', async () => {
    const bus = new MemoryBus();
    await bus.publishAdminEvent(signer.sign(tenant, 'fairway'));
    await bus.publishAdminEvent(tenant);
    const { tenants, applier, stop } = await follow(bus, { kind: 'none' });
    expect(applier.lastSeq).toBe(2);
    expect(tenants.has('carol')).toBe(false);
    stop();
  });
});

describe('admin events across dispatchers (Redis + NATS)', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  async function fleet(prefix: string): Promise<{
    operator: { publishAdminEvent(e: AdminEventInput): Promise<number> };
    start: () => Promise<RunningDispatcher>;
  }> {
    const bus = await NatsBus.connect({ servers: natsUrl(), prefix, name: 'operator' });
    const pair = generateOperatorKeyPair();
    const dir = mkdtempSync(join(tmpdir(), 'fairway-operator-'));
    const publicKeyFile = join(dir, 'operator.pub');
    writeFileSync(publicKeyFile, pair.publicKeyPem);
    const signer = OperatorSigner.fromPem(pair.privateKeyPem);
    const operator = {
      publishAdminEvent: (e: AdminEventInput) => bus.publishAdminEvent(signer.sign(e, prefix)),
    };
    cleanups.push(async () => {
      await bus.close();
      const nc = await connect({ servers: natsUrl() });
      const jsm = await jetstreamManager(nc);
      await jsm.streams.delete(new Subjects(prefix).adminStream).catch(() => false);
      await nc.close();
      const redis = new Redis(redisUrl());
      await purgeStore(redis, prefix);
      await redis.quit();
    });
    const sim: EngineSimHandle = await startEngineSim({ servedModelName: MODEL, speed: 50, seed: 1 });
    const engine = new VllmClient({ url: sim.url });
    const agent = new NodeAgent({
      bus,
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
      await engine.close();
      await sim.close();
    });
    const config = parseConfig(CONFIG, 'test config');
    const start = async (): Promise<RunningDispatcher> => {
      const settings = serveSettings(
        {},
        {
          port: 0,
          operatorPort: 0,
          prefix,
          redisUrl: redisUrl(),
          natsUrl: natsUrl(),
          operatorPublicKeyFiles: [publicKeyFile],
        },
      );
      const d = await startDispatcher({ settings, config, logger: silentLogger });
      cleanups.push(() => d.close());
      await waitFor(() => d.infrastructure.registry.list().some((v) => v.acceptsWork));
      return d;
    };
    return { operator, start };
  }

  async function call(d: RunningDispatcher, key: string): Promise<number> {
    const res = await fetch(`${d.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
    });
    await res.arrayBuffer();
    return res.status;
  }

  it('adds a tenant and its key on every dispatcher, limits it exactly across them, and revokes the key', async () => {
    const prefix = uniquePrefix('admin');
    const { operator, start } = await fleet(prefix);
    const [d1, d2] = [await start(), await start()];
    const key = 'sk-carol-live-000001';
    expect(await call(d1, key)).toBe(401);

    await operator.publishAdminEvent({
      type: 'tenantUpsert',
      at: Date.now(),
      tenant: { id: 'carol', limits: { rpm: 3 } },
    });
    await operator.publishAdminEvent({
      type: 'keyAdd',
      at: Date.now(),
      tenantId: 'carol',
      keyHash: hashApiKey(key),
    });
    await waitFor(async () => (await call(d2, key)) === 200);
    // RPM 3 in the shared store: one admitted above via d2, two more across both, then 429 on both.
    expect([await call(d1, key), await call(d2, key)]).toEqual([200, 200]);
    expect([await call(d1, key), await call(d2, key)]).toEqual([429, 429]);
    expect(await call(d1, 'sk-alpha-0000000001')).toBe(200);

    // A dispatcher started after the events replays them before it serves.
    await operator.publishAdminEvent({
      type: 'limitsSet',
      at: Date.now(),
      scope: 'tenant',
      id: 'carol',
      limits: {},
    });
    const d3 = await start();
    expect(await call(d3, key)).toBe(200);

    await operator.publishAdminEvent({ type: 'keyRevoke', at: Date.now(), keyHash: hashApiKey(key) });
    await waitFor(async () => (await call(d1, key)) === 401 && (await call(d2, key)) === 401);
    expect(await call(d3, key)).toBe(401);
  }, 30_000);
});
