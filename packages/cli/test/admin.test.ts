import { NatsBus, Subjects } from '@fairway/bus';
import { hashApiKey } from '@fairway/dispatcher';
import { natsUrl, uniquePrefix } from '@fairway/testkit';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { afterEach, describe, expect, it } from 'vitest';
import { fairway } from './support/run-cli.ts';

describe('fairway admin', () => {
  const prefixes: string[] = [];
  afterEach(async () => {
    const nc = await connect({ servers: natsUrl() });
    const jsm = await jetstreamManager(nc);
    for (const p of prefixes.splice(0))
      await jsm.streams.delete(new Subjects(p).adminStream).catch(() => false);
    await nc.close();
  });

  it('publishes tenant, key and limit changes to the admin stream in order, sending only key hashes', async () => {
    const prefix = uniquePrefix('cliadm');
    prefixes.push(prefix);
    const bus = ['--nats-url', natsUrl(), '--prefix', prefix];
    expect((await fairway('admin', 'tenant', 'carol', '--weight', '2', '--rpm', '60', ...bus)).code).toBe(0);
    const added = await fairway('admin', 'key-add', 'carol', '--app', 'chat', ...bus);
    expect(added.code).toBe(0);
    const key = /api key \(shown once\): (sk-fw-\S+)/.exec(added.stdout)?.[1];
    expect(key).toBeDefined();
    expect((await fairway('admin', 'limits', 'user', 'u1', '--tpm', '500', ...bus)).code).toBe(0);
    expect((await fairway('admin', 'key-revoke', '--key', key ?? '', ...bus)).code).toBe(0);

    const reader = await NatsBus.connect({ servers: natsUrl(), prefix });
    const events = (await reader.replayAdminEvents()).map((r) => r.event);
    await reader.close();
    expect(events).toMatchObject([
      { type: 'tenantUpsert', tenant: { id: 'carol', weight: 2, limits: { rpm: 60 } } },
      { type: 'keyAdd', tenantId: 'carol', app: 'chat', keyHash: hashApiKey(key ?? '') },
      { type: 'limitsSet', scope: 'user', id: 'u1', limits: { tpm: 500 } },
      { type: 'keyRevoke', keyHash: hashApiKey(key ?? '') },
    ]);
    expect(JSON.stringify(events)).not.toContain(key);

    const listed = await fairway('admin', 'events', '--from', '2', ...bus);
    expect(
      listed.stdout
        .trim()
        .split('\n')
        .map((l) => l.split('\t')[2]),
    ).toEqual(['keyAdd', 'limitsSet', 'keyRevoke']);
  });

  it('refuses bad input with one line per problem and publishes nothing', async () => {
    const prefix = uniquePrefix('cliadm');
    prefixes.push(prefix);
    const bus = ['--nats-url', natsUrl(), '--prefix', prefix];
    const scope = await fairway('admin', 'limits', 'galaxy', 'x', '--rpm', '5', ...bus);
    expect(scope.code).toBe(2);
    expect(scope.stderr).toMatch(/scope: must be tenant, app, user or default/);
    const noId = await fairway('admin', 'limits', 'tenant', '--rpm', '5', ...bus);
    expect(noId.code).toBe(2);
    expect(noId.stderr).toMatch(/id: give "id" for scope tenant/);
    const both = await fairway('admin', 'key-revoke', ...bus);
    expect(both.code).toBe(2);
    const weight = await fairway('admin', 'tenant', 'x', '--weight', '-1', ...bus);
    expect(weight.code).toBe(2);
    const reader = await NatsBus.connect({ servers: natsUrl(), prefix });
    expect(await reader.replayAdminEvents()).toEqual([]);
    await reader.close();
  });
});
