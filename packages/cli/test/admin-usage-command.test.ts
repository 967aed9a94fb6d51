import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NodeAgent } from '@fairway/agent';
import { NatsBus, Subjects } from '@fairway/bus';
import { parseConfig, silentLogger, systemClock } from '@fairway/core';
import { hashApiKey, type RunningDispatcher, serveSettings, startDispatcher } from '@fairway/dispatcher';
import { VllmClient } from '@fairway/engine';
import { type EngineSimHandle, startEngineSim } from '@fairway/engine-sim';
import { freePort, natsUrl, uniquePrefix } from '@fairway/testkit';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fairway } from './support/run-cli.ts';

const MODEL = 'llama-2-7b';
const KEY = 'sk-cli-usage-key-01';
const TOKEN = 'cli-usage-admin-token';

describe('fairway admin usage and quota', () => {
  let dir: string;
  let sim: EngineSimHandle;
  let engine: VllmClient;
  let agent: NodeAgent;
  let d: RunningDispatcher;
  const usage: { input: number; output: number } = { input: 0, output: 0 };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fairway-cliusage-'));
    writeFileSync(join(dir, 'token'), TOKEN);
    const config = parseConfig(
      {
        tenants: [{ id: 'acme', keys: [{ key: KEY }] }],
        pools: [{ id: 'llama', model: MODEL }],
        pricing: { [MODEL]: { input: 1, output: 2 } },
      },
      'cli usage config',
    );
    d = await startDispatcher({
      settings: serveSettings(
        {},
        { port: 0, operatorPort: await freePort(), adminTokenFile: join(dir, 'token'), dispatcherId: 'cli1' },
      ),
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
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${d.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          model: MODEL,
          messages: [{ role: 'user', content: 'hello there' }],
          max_tokens: 4 + i,
          fairway_output_tokens: 4 + i,
        }),
      });
      const body = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
      usage.input += body.usage.prompt_tokens;
      usage.output += body.usage.completion_tokens;
    }
  }, 60_000);
  afterAll(async () => {
    await agent?.stop();
    await d?.close();
    await engine?.close();
    await sim?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('prints the usage table and its JSON from the admin API', async () => {
    const flags = ['--url', d.operatorUrl ?? '', '--admin-token-file', join(dir, 'token')];
    const json = await fairway('admin', 'usage', ...flags, '--key', KEY, '--json');
    expect(json.code).toBe(0);
    const body = JSON.parse(json.stdout);
    expect(body.totals).toEqual({
      requests: 3,
      inputTokens: usage.input,
      outputTokens: usage.output,
      cost: (usage.input * 1 + usage.output * 2) / 1e6,
    });
    expect(body.data[0]).toMatchObject({ tenant: 'acme', key: hashApiKey(KEY), model: MODEL });
    const table = await fairway('admin', 'usage', ...flags, '--tenant', 'acme');
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(
      /day\s+tenant\s+key\s+model\s+requests\s+input tokens\s+output tokens\s+cost/,
    );
    expect(table.stdout).toMatch(
      new RegExp(`acme\\s+sha256:\\S+\\s+${MODEL}\\s+3\\s+${usage.input}\\s+${usage.output}`),
    );
    expect(table.stdout).not.toContain(KEY);
    const wrong = await fairway(
      'admin',
      'usage',
      '--url',
      d.operatorUrl ?? '',
      '--admin-token-file',
      join(dir, 'token'),
      '--from',
      'yesterday',
    );
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toMatch(/from/);
    const noToken = await fairway('admin', 'usage', '--url', d.operatorUrl ?? '');
    expect(noToken.code).toBe(2);
    expect(noToken.stderr).toMatch(/--admin-token-file: required/);
  });

  it('publishes a signed quotaSet naming a key by its hash only', async () => {
    const prefix = uniquePrefix('cliquota');
    const made = await fairway('admin', 'keygen', '--out-dir', dir, '--name', 'op');
    expect(made.code).toBe(0);
    const bus = ['--nats-url', natsUrl(), '--prefix', prefix, '--operator-key', join(dir, 'op.key')];
    const set = await fairway(
      'admin',
      'quota',
      'key',
      KEY,
      '--tokens-per-day',
      '5000',
      '--alert-at',
      '0.9',
      ...bus,
    );
    expect(set.code).toBe(0);
    const tenant = await fairway('admin', 'quota', 'tenant', 'acme', '--spend-per-month', '12.5', ...bus);
    expect(tenant.code).toBe(0);
    const bad = await fairway('admin', 'quota', 'planet', 'x', ...bus);
    expect(bad.code).toBe(2);
    const reader = await NatsBus.connect({ servers: natsUrl(), prefix });
    const events = (await reader.replayAdminEvents()).map((r) => r.event);
    await reader.close();
    const nc = await connect({ servers: natsUrl() });
    await (await jetstreamManager(nc)).streams.delete(new Subjects(prefix).adminStream).catch(() => false);
    await nc.close();
    expect(events).toMatchObject([
      { type: 'quotaSet', scope: 'key', id: hashApiKey(KEY), quotas: { tokensPerDay: 5000, alertAt: 0.9 } },
      { type: 'quotaSet', scope: 'tenant', id: 'acme', quotas: { spendPerMonth: 12.5 } },
    ]);
    expect(JSON.stringify(events)).not.toContain(KEY);
  });
});
