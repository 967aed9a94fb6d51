import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NodeAgent } from '@fairway/agent';
import { hashApiKey, parseConfig, silentLogger, systemClock } from '@fairway/core';
import { VllmClient } from '@fairway/engine';
import { type EngineSimHandle, startEngineSim } from '@fairway/engine-sim';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningDispatcher, serveSettings, startDispatcher } from '../src/index.ts';
import { waitFor } from './support/stack.ts';

const MODEL = 'llama-2-7b';
const ACME = 'sk-quota-acme-0001';
const ACME_2 = 'sk-quota-acme-0002';
const BETA = 'sk-quota-beta-0001';
const TOKEN = 'quota-admin-token';

describe('quotas set over the admin API (embedded: memory store, in-process bus)', () => {
  let dir: string;
  let sim: EngineSimHandle;
  let engine: VllmClient;
  let agent: NodeAgent;
  let d: RunningDispatcher;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fairway-quota-'));
    writeFileSync(join(dir, 'token'), TOKEN);
    const config = parseConfig(
      {
        tenants: [
          { id: 'acme', keys: [{ key: ACME }, { key: ACME_2 }] },
          { id: 'beta', keys: [{ key: BETA }] },
        ],
        pools: [{ id: 'llama', model: MODEL }],
        pricing: { [MODEL]: { input: 1_000_000, output: 1_000_000 } },
      },
      'quota config',
    );
    d = await startDispatcher({
      settings: serveSettings({}, { port: 0, operatorPort: 0, adminTokenFile: join(dir, 'token') }),
      config,
      logger: silentLogger,
    });
    sim = await startEngineSim({ servedModelName: MODEL, speed: 50 });
    engine = new VllmClient({ url: sim.url });
    agent = new NodeAgent({
      bus: d.infrastructure.bus,
      engine,
      clock: systemClock,
      replicaId: 'sim-1',
      pool: 'llama',
      model: MODEL,
      maxNumSeqs: 16,
      heartbeatIntervalMs: 100,
    });
    await agent.start();
  }, 60_000);
  afterAll(async () => {
    await agent?.stop();
    await d?.close();
    await engine?.close();
    await sim?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const admin = (method: 'GET' | 'PUT', url: string, payload?: unknown) =>
    d.dispatcher.operator.inject({
      method,
      url,
      headers: { authorization: `Bearer ${TOKEN}` },
      ...(payload === undefined ? {} : { payload: payload as object }),
    });
  const chat = async (key: string, tokens: number) => {
    const res = await d.dispatcher.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      payload: {
        model: MODEL,
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: tokens,
        fairway_output_tokens: tokens,
      },
    });
    return { status: res.statusCode, body: res.json(), headers: res.headers };
  };

  it("applies a key's token budget set by PUT /admin/v1/quotas: the key is refused, its tenant's other key and other tenants are not", async () => {
    const id = hashApiKey(ACME);
    const put = await admin('PUT', `/admin/v1/quotas/key/${id}`, { tokensPerDay: 200 });
    expect(put.statusCode).toBe(202);
    expect(put.json()).toMatchObject({ type: 'quotaSet' });
    await waitFor(
      async () => (await admin('GET', '/admin/v1/quotas')).json().keys.length === 1,
      5000,
      'quota',
    );
    expect((await admin('GET', '/admin/v1/quotas')).json().keys).toEqual([
      { id, quotas: { tokensPerDay: 200 } },
    ]);
    expect((await chat(ACME, 100)).status).toBe(200);
    const refused = await chat(ACME, 100);
    expect(refused.status).toBe(429);
    expect(refused.body.error).toMatchObject({ type: 'insufficient_quota', code: 'insufficient_quota' });
    expect(refused.body.error.message).toMatch(/this API key's daily token budget/);
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    expect((await chat(ACME_2, 100)).status).toBe(200);
    expect((await chat(BETA, 100)).status).toBe(200);
    // Cleared with {}: the key is served again.
    expect((await admin('PUT', `/admin/v1/quotas/key/${id}`, {})).statusCode).toBe(202);
    await waitFor(async () => (await chat(ACME, 10)).status === 200, 5000, 'cleared quota');
  });

  it("applies a tenant's spend budget at the configured prices (1 per token here)", async () => {
    expect((await admin('PUT', '/admin/v1/quotas/tenant/beta', { spendPerMonth: 10_000 })).statusCode).toBe(
      202,
    );
    await waitFor(
      async () =>
        (await admin('GET', '/admin/v1/quotas')).json().tenants.some((t: { id: string }) => t.id === 'beta'),
      5000,
      'quota',
    );
    // Beta spent about 110 already this month (the test above); a request reserving more than is
    // left, though less than the whole budget, is refused until the month ends.
    const refused = await chat(BETA, 9_950);
    expect(refused.status).toBe(429);
    expect(refused.body.error.message).toMatch(/monthly spend budget/);
    // One reserving more than the whole budget could never fit: a 400 that says so.
    const never = await chat(BETA, 20_000);
    expect(never.status).toBe(400);
    expect(never.body.error.message).toMatch(/whole monthly budget/);
    expect((await chat(BETA, 10)).status).toBe(200);
  });

  it('refuses bad quota writes with a 4xx naming the field, and unknown tenants', async () => {
    expect((await admin('PUT', '/admin/v1/quotas/tenant/acme', { tokensPerDay: -1 })).statusCode).toBe(400);
    expect((await admin('PUT', '/admin/v1/quotas/tenant/acme', { tokens: 5 })).statusCode).toBe(400);
    expect((await admin('PUT', '/admin/v1/quotas/tenant/nobody', { tokensPerDay: 5 })).statusCode).toBe(404);
    expect((await admin('PUT', '/admin/v1/quotas/key/not-a-hash', { tokensPerDay: 5 })).statusCode).toBe(400);
    expect((await admin('PUT', '/admin/v1/quotas/planet/x', {})).statusCode).toBe(400);
    const anon = await d.dispatcher.operator.inject({ method: 'GET', url: '/admin/v1/quotas' });
    expect(anon.statusCode).toBe(401);
  });
});
