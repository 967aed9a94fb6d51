import { mkdtempSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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

  async function operatorKey(): Promise<{ keyFile: string; keyId: string }> {
    const dir = mkdtempSync(join(tmpdir(), 'fairway-cliadm-'));
    const made = await fairway('admin', 'keygen', '--out-dir', dir, '--name', 'op');
    expect(made.code).toBe(0);
    const keyId = /operator key (ed25519:[0-9a-f]{16})/.exec(made.stdout)?.[1] ?? '';
    return { keyFile: join(dir, 'op.key'), keyId };
  }

  it('writes an operator key pair, the private half readable by its owner only, and never overwrites one', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fairway-cliadm-'));
    const made = await fairway('admin', 'keygen', '--out-dir', dir);
    expect(made.code).toBe(0);
    expect(statSync(join(dir, 'fairway-operator.key')).mode & 0o777).toBe(0o600);
    expect(statSync(join(dir, 'fairway-operator.pub')).isFile()).toBe(true);
    const again = await fairway('admin', 'keygen', '--out-dir', dir);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/already exists/);
  });

  it('refuses to publish without the operator key', async () => {
    const prefix = uniquePrefix('cliadm');
    prefixes.push(prefix);
    const res = await fairway('admin', 'tenant', 'carol', '--nats-url', natsUrl(), '--prefix', prefix);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/--operator-key: required/);
  });

  it('publishes tenant, key and limit changes to the admin stream in order, signed, sending only key hashes', async () => {
    const prefix = uniquePrefix('cliadm');
    prefixes.push(prefix);
    const { keyFile, keyId } = await operatorKey();
    const bus = ['--nats-url', natsUrl(), '--prefix', prefix, '--operator-key', keyFile];
    expect((await fairway('admin', 'tenant', 'carol', '--weight', '2', '--rpm', '60', ...bus)).code).toBe(0);
    const added = await fairway('admin', 'key-add', 'carol', '--app', 'chat', ...bus);
    expect(added.code).toBe(0);
    const key = /api key \(shown once\): (sk-fw-\S+)/.exec(added.stdout)?.[1];
    expect(key).toBeDefined();
    expect((await fairway('admin', 'limits', 'user', 'u1', '--tpm', '500', ...bus)).code).toBe(0);
    expect((await fairway('admin', 'key-revoke', '--key', key ?? '', ...bus)).code).toBe(0);

    const reader = await NatsBus.connect({ servers: natsUrl(), prefix });
    const records = await reader.replayAdminEvents();
    const events = records.map((r) => r.event);
    await reader.close();
    expect(records.map((r) => r.signed?.keyId)).toEqual([keyId, keyId, keyId, keyId]);
    expect(events).toMatchObject([
      { type: 'tenantUpsert', tenant: { id: 'carol', weight: 2, limits: { rpm: 60 } } },
      { type: 'keyAdd', tenantId: 'carol', app: 'chat', keyHash: hashApiKey(key ?? '') },
      { type: 'limitsSet', scope: 'user', id: 'u1', limits: { tpm: 500 } },
      { type: 'keyRevoke', keyHash: hashApiKey(key ?? '') },
    ]);
    expect(JSON.stringify(events)).not.toContain(key);

    const listed = await fairway(
      'admin',
      'events',
      '--from',
      '2',
      '--nats-url',
      natsUrl(),
      '--prefix',
      prefix,
    );
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
    const { keyFile } = await operatorKey();
    const bus = ['--nats-url', natsUrl(), '--prefix', prefix, '--operator-key', keyFile];
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
