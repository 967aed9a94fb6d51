import { ConfigError, parseConfig, silentLogger } from '@fairway/core';
import { afterEach, describe, expect, it } from 'vitest';
import { AdminEventApplier } from '../src/admin-events.ts';
import { hashApiKey, KeyRing } from '../src/auth.ts';
import { TenantDirectory } from '../src/tenant-directory.ts';
import { type Stack, startStack, waitFor } from './support/stack.ts';

const MODEL = 'llama-2-7b';
const ALPHA = 'sk-iso-alpha-0001';
const BETA = 'sk-iso-beta-00001';

function config(extra: Record<string, unknown> = {}) {
  return {
    tenants: [
      { id: 'alpha', keys: [{ key: ALPHA }] },
      { id: 'beta', keys: [{ key: BETA }] },
    ],
    apps: [{ id: 'chat', stages: [{ input: 10, output: 10 }], limits: { rpm: 2 } }],
    pools: [{ id: 'llama', model: MODEL }],
    ...extra,
  };
}

const CHAT = { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };

describe('tenants are isolated', () => {
  const stacks: Stack[] = [];
  afterEach(async () => {
    for (const s of stacks.splice(0)) await s.close();
  });

  async function send(s: Stack, key: string, h: Record<string, string>): Promise<number> {
    const res = await s.dispatchers[0]!.dispatcher.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...h },
      payload: CHAT,
    });
    return res.statusCode;
  }

  it("does not let alpha's flood as user alice exhaust beta's user alice (Redis store)", async () => {
    const s = await startStack({ config: config(), redis: true });
    stacks.push(s);
    await s.infra.bus.publishAdminEvent({
      type: 'limitsSet',
      at: 1,
      scope: 'user',
      id: 'alice',
      limits: { rpm: 2 },
    });
    // The limit applies once the dispatcher has the event: alice of alpha is limited at 2.
    await waitFor(async () => (await send(s, ALPHA, { 'x-fairway-user': 'alice' })) === 429, 5000, 'limit');
    expect(await send(s, ALPHA, { 'x-fairway-user': 'alice' })).toBe(429);
    // Beta's alice has her own window.
    expect(await send(s, BETA, { 'x-fairway-user': 'alice' })).toBe(200);
    expect(await send(s, BETA, { 'x-fairway-user': 'alice' })).toBe(200);
    expect(await send(s, BETA, { 'x-fairway-user': 'alice' })).toBe(429);
  });

  it("keeps each tenant's window of a shared app apart (Redis store)", async () => {
    const s = await startStack({ config: config(), redis: true });
    stacks.push(s);
    const app = { 'x-fairway-app': 'chat' };
    expect(await send(s, ALPHA, app)).toBe(200);
    expect(await send(s, ALPHA, app)).toBe(200);
    expect(await send(s, ALPHA, app)).toBe(429);
    expect(await send(s, BETA, app)).toBe(200);
  });
});

describe('an API key belongs to one tenant', () => {
  it('refuses a config that gives two tenants the same key, naming both', () => {
    const dup = {
      tenants: [
        { id: 'alpha', keys: [{ key: 'sk-shared-key-1' }] },
        { id: 'beta', keys: [{ hash: hashApiKey('sk-shared-key-1') }] },
      ],
    };
    let err: unknown;
    try {
      parseConfig(dup, 'dup.yaml');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect(String((err as Error).message)).toMatch(/tenants\[1\]\.keys\[0\]/);
    expect(String((err as Error).message)).toMatch(/"alpha" and "beta"/);
  });

  it("refuses and logs an admin key-add of another tenant's key", () => {
    const tenants = new TenantDirectory();
    const keys = new KeyRing(tenants);
    const warnings: unknown[] = [];
    const logger = { ...silentLogger, warn: (o: object | string) => void warnings.push(o) };
    const applier = new AdminEventApplier({
      trust: { kind: 'in-process' },
      fleet: 'fairway',
      keys,
      tenants,
      sloClasses: new Set(),
      logger,
    });
    const hash = hashApiKey('sk-victim-key-1');
    for (const [seq, id] of [
      [1, 'alpha'],
      [2, 'beta'],
    ] as const)
      applier.apply({ seq, event: { type: 'tenantUpsert', at: seq, tenant: { id, weight: 1, limits: {} } } });
    applier.apply({ seq: 3, event: { type: 'keyAdd', at: 3, tenantId: 'alpha', keyHash: hash } });
    const outcome = applier.apply({
      seq: 4,
      event: { type: 'keyAdd', at: 4, tenantId: 'beta', keyHash: hash },
    });
    expect(outcome).toEqual({
      applied: false,
      reason: 'key already belongs to tenant "alpha"; refused for tenant "beta"',
    });
    expect(keys.authenticate('sk-victim-key-1')).toMatchObject({ tenant: 'alpha' });
    expect(warnings).toContainEqual(expect.objectContaining({ seq: 4, type: 'keyAdd' }));
  });

  it("refuses an admin tenant whose id could name another tenant's user", () => {
    const tenants = new TenantDirectory();
    const applier = new AdminEventApplier({
      trust: { kind: 'in-process' },
      fleet: 'fairway',
      keys: new KeyRing(tenants),
      tenants,
      sloClasses: new Set(),
      logger: silentLogger,
    });
    const outcome = applier.apply({
      seq: 1,
      event: { type: 'tenantUpsert', at: 1, tenant: { id: 'alpha/alice', weight: 1, limits: {} } },
    });
    expect(outcome.applied).toBe(false);
    expect(tenants.has('alpha/alice')).toBe(false);
  });
});
