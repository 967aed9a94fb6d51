import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateOperatorKeyPair } from '@fairway/bus';
import { parseConfig, silentLogger } from '@fairway/core';
import { startNatsServer, type TestServer } from '@fairway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningDispatcher, type ServeOverrides, serveSettings, startDispatcher } from '../src/index.ts';
import { dispatcherStarter, waitFor } from './support/stack.ts';

const MODEL = 'llama-2-7b';
const ALPHA_KEY = 'sk-admin-alpha-0001';
const TOKEN = 'admin-token-0123456789abcdef';
const CONFIG = parseConfig(
  {
    pools: [{ id: 'chat', model: MODEL }],
    tenants: [{ id: 'alpha', keys: [{ key: ALPHA_KEY }] }],
  },
  'test config',
);

const dir = mkdtempSync(join(tmpdir(), 'fairway-admin-api-'));
function file(name: string, content: string): string {
  const path = join(dir, name);
  writeFileSync(path, content, { mode: 0o600 });
  return path;
}
const tokenFile = file('admin-token', `${TOKEN}\n`);

interface Answer {
  readonly status: number;
  readonly body: Record<string, unknown> & { error?: { code: string; message: string } };
  readonly text: string;
}

/** Calls a dispatcher's admin API (operator app) in-process. */
async function admin(
  d: RunningDispatcher,
  method: 'GET' | 'POST' | 'PUT' | 'DELETE',
  url: string,
  payload?: unknown,
  token: string | null = TOKEN,
): Promise<Answer> {
  const res = await d.dispatcher.operator.inject({
    method,
    url,
    headers: {
      ...(token === null ? {} : { authorization: `Bearer ${token}` }),
      ...(payload === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }),
  });
  return { status: res.statusCode, body: res.json(), text: res.body };
}

/** What the public API answers a key (GET /v1/models authenticates it). */
async function keyStatus(d: RunningDispatcher, key: string): Promise<number> {
  const res = await d.dispatcher.app.inject({
    method: 'GET',
    url: '/v1/models',
    headers: { authorization: `Bearer ${key}` },
  });
  return res.statusCode;
}

describe('admin API on the in-process bus (fairway up)', () => {
  const start = dispatcherStarter(CONFIG, { adminTokenFile: tokenFile });

  it('is off without an admin token, and refuses a wrong or missing token', async () => {
    const off = await start({});
    const a = await admin(off, 'GET', '/admin/v1/keys');
    expect(a.status).toBe(403);
    expect(a.body.error?.code).toBe('admin_api_disabled');

    const on = await start();
    expect((await admin(on, 'GET', '/admin/v1/keys', undefined, 'wrong-token-0123456789')).status).toBe(401);
    expect((await admin(on, 'GET', '/admin/v1/keys', undefined, null)).status).toBe(401);
    // An API key of a tenant is not the admin token.
    expect((await admin(on, 'GET', '/admin/v1/keys', undefined, ALPHA_KEY)).status).toBe(401);
  });

  it('creates a key that works, lists it without its secret, and revokes it: the key then gets 401', async () => {
    const d = await start();
    const created = await admin(d, 'POST', '/admin/v1/keys', { tenant: 'alpha', app: 'chatbot' });
    expect(created.status).toBe(201);
    const key = created.body.key as string;
    const id = created.body.id as string;
    expect(key).toMatch(/^sk-fw-/);
    expect(id).toMatch(/^sha256:[0-9a-f]{64}$/);
    await waitFor(async () => (await keyStatus(d, key)) === 200, 5000, 'the new key to authenticate');

    const listed = await admin(d, 'GET', '/admin/v1/keys?tenant=alpha');
    expect(listed.status).toBe(200);
    expect(listed.body.data).toContainEqual(expect.objectContaining({ id, tenant: 'alpha', app: 'chatbot' }));
    expect(listed.text).not.toContain(key);
    expect(listed.text).not.toContain(ALPHA_KEY);

    const revoked = await admin(d, 'DELETE', `/admin/v1/keys/${id}`);
    expect(revoked.status).toBe(202);
    expect(revoked.body.type).toBe('keyRevoke');
    await waitFor(async () => (await keyStatus(d, key)) === 401, 5000, 'the revoked key to be refused');
    expect(await keyStatus(d, ALPHA_KEY)).toBe(200);
    expect((await admin(d, 'DELETE', `/admin/v1/keys/${id}`)).status).toBe(404);
  });

  it('issues a key with an expiry that stops authenticating when it passes', async () => {
    const d = await start();
    const created = await admin(d, 'POST', '/admin/v1/keys', {
      tenant: 'alpha',
      expiresAt: Date.now() + 1500,
    });
    expect(created.status).toBe(201);
    const key = created.body.key as string;
    await waitFor(
      async () => (await keyStatus(d, key)) === 200,
      1000,
      'the key to authenticate before it expires',
    );
    await waitFor(async () => (await keyStatus(d, key)) === 401, 5000, 'the key to expire');
    const res = await d.dispatcher.app.inject({
      method: 'GET',
      url: '/v1/models',
      headers: { authorization: `Bearer ${key}` },
    });
    expect(res.json().error.message).toBe('API key expired');
  });

  it('adds a tenant and sets its limits through admin events', async () => {
    const d = await start();
    expect((await admin(d, 'PUT', '/admin/v1/tenants/bravo', { weight: 2 })).status).toBe(202);
    await waitFor(
      async () => ((await admin(d, 'GET', '/admin/v1/tenants')).body.data as unknown[]).length === 2,
    );
    expect((await admin(d, 'PUT', '/admin/v1/limits/tenant/bravo', { rpm: 5 })).status).toBe(202);
    await waitFor(async () => {
      const t = (await admin(d, 'GET', '/admin/v1/tenants')).body.data as { id: string; limits: unknown }[];
      return JSON.stringify(t.find((x) => x.id === 'bravo')?.limits) === '{"rpm":5}';
    });
    const t = (await admin(d, 'GET', '/admin/v1/tenants')).body.data;
    expect(t).toContainEqual({ id: 'bravo', weight: 2, limits: { rpm: 5 } });
    expect((await admin(d, 'PUT', '/admin/v1/limits/default', { tpm: 1000 })).status).toBe(202);
  });

  it('answers bad input with a clear 400 or 404 and changes nothing', async () => {
    const d = await start();
    const unknownTenant = await admin(d, 'POST', '/admin/v1/keys', { tenant: 'nobody' });
    expect(unknownTenant.status).toBe(404);
    expect(unknownTenant.body.error?.message).toBe('no tenant "nobody"');
    const extra = await admin(d, 'POST', '/admin/v1/keys', { tenant: 'alpha', secret: 'x' });
    expect(extra.status).toBe(400);
    const past = await admin(d, 'POST', '/admin/v1/keys', {
      tenant: 'alpha',
      expiresAt: '2001-01-01T00:00:00Z',
    });
    expect(past.status).toBe(400);
    expect(past.body.error?.message).toBe('expiresAt must be in the future');
    expect((await admin(d, 'DELETE', '/admin/v1/keys/not-a-hash')).status).toBe(400);
    expect((await admin(d, 'PUT', '/admin/v1/tenants/bad id!', {})).status).toBe(400);
    expect((await admin(d, 'PUT', '/admin/v1/limits/tenant', { rpm: 1 })).status).toBe(400);
    expect((await admin(d, 'PUT', '/admin/v1/limits/tenant/alpha', { rpm: -1 })).status).toBe(400);
    const keys = (await admin(d, 'GET', '/admin/v1/keys')).body.data as unknown[];
    expect(keys).toHaveLength(1);
  });
});

describe('admin API on NATS: writes are signed admin events every dispatcher verifies', () => {
  let nats: TestServer;
  const running: RunningDispatcher[] = [];
  const pair = generateOperatorKeyPair();
  const publicKeyFile = file('operator.pub', pair.publicKeyPem);
  const privateKeyFile = file('operator.key', pair.privateKeyPem);
  beforeAll(async () => {
    nats = await startNatsServer();
  });
  afterAll(async () => {
    for (const d of running.splice(0)) await d.close();
    await nats.stop();
  });
  async function start(overrides: ServeOverrides): Promise<RunningDispatcher> {
    const settings = serveSettings(
      {},
      {
        port: 0,
        operatorPort: 0,
        natsUrl: nats.url,
        prefix: 'adminapi',
        operatorPublicKeyFiles: [publicKeyFile],
        ...overrides,
      },
    );
    const d = await startDispatcher({ settings, config: CONFIG, logger: silentLogger });
    running.push(d);
    return d;
  }

  it('applies a key created on one dispatcher on another, and refuses writes from a dispatcher without the operator key', async () => {
    const signing = await start({ adminTokenFile: tokenFile, operatorKeyFile: privateKeyFile });
    const other = await start({});
    const created = await admin(signing, 'POST', '/admin/v1/keys', { tenant: 'alpha' });
    expect(created.status).toBe(201);
    const key = created.body.key as string;
    await waitFor(
      async () => (await keyStatus(other, key)) === 200,
      10_000,
      'the key on the other dispatcher',
    );

    const unsigned = await start({ adminTokenFile: tokenFile });
    const refused = await admin(unsigned, 'POST', '/admin/v1/keys', { tenant: 'alpha' });
    expect(refused.status).toBe(403);
    expect(refused.body.error?.code).toBe('admin_writes_disabled');
    // It still reads: the key the signing dispatcher created is on its ring too.
    const listed = (await admin(unsigned, 'GET', '/admin/v1/keys')).body.data as { id: string }[];
    expect(listed.map((k) => k.id)).toContain(created.body.id);
  }, 30_000);
});
