import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import {
  freePort,
  natsPassword,
  startNatsServer,
  startRedisServer,
  type TestServer,
  waitFor,
} from '@fairway/testkit';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sendChat } from './support/chat.ts';
import { type FairwayProcess, onPath, startFairway } from './support/processes.ts';

/**
 * The console's writes on the fleet as shipped: `fairway serve` with the operator key and an admin
 * token, logged in to NATS as the shipped config's `dispatcher` user, a second dispatcher without
 * the key, an engine-sim under its own agent user. A tenant and a key added in the console in
 * headless Chromium become signed admin events that both dispatchers apply.
 */
const CHROMIUM = onPath('chromium', 'chromium-browser', 'google-chrome');
const SHIPPED_NATS = resolve(import.meta.dirname, '..', '..', 'infra', 'nats', 'nats-server.conf');
const EXAMPLE_CONFIG = resolve(import.meta.dirname, '..', '..', 'infra', 'fairway.example.yaml');
const MODEL = 'llama-2-7b';
const TOKEN = 'console-nats-admin-token-0123456789';
const PASSWORDS = {
  FAIRWAY_DISPATCHER_NATS_PASSWORD: natsPassword(),
  FAIRWAY_ADMIN_NATS_PASSWORD: natsPassword(),
  FAIRWAY_AGENT_ENGINE_A_NATS_PASSWORD: natsPassword(),
  FAIRWAY_AGENT_ENGINE_B_NATS_PASSWORD: natsPassword(),
};

describe.skipIf(CHROMIUM === undefined)('the console on the shipped NATS config', () => {
  let nats: TestServer;
  let redis: TestServer;
  let dir: string;
  let browser: Browser;
  const processes: FairwayProcess[] = [];
  let operatorUrl = '';
  let urls: string[] = [];

  beforeAll(async () => {
    nats = await startNatsServer({ configPath: SHIPPED_NATS, env: PASSWORDS });
    redis = await startRedisServer();
    dir = mkdtempSync(join(tmpdir(), 'fairway-console-nats-'));
    writeFileSync(join(dir, 'admin.token'), `${TOKEN}\n`, { mode: 0o600 });
    const keygen = await startFairway(
      ['admin', 'keygen', '--out-dir', join(dir, 'keys'), '--name', 'operator'],
      /^operator key (ed25519:\S+)/,
    );
    await keygen.stop();
    const env = {
      NATS_URL: nats.url,
      NATS_USER: 'dispatcher',
      NATS_PASSWORD: PASSWORDS.FAIRWAY_DISPATCHER_NATS_PASSWORD,
      REDIS_URL: redis.url,
      FAIRWAY_OPERATOR_PUBLIC_KEY_FILE: join(dir, 'keys', 'operator.pub'),
    };
    const operatorPort = await freePort();
    const writer = await startFairway(
      ['serve', '-c', EXAMPLE_CONFIG, '--port', '0', '--operator-port', String(operatorPort)],
      /listening on (http:\S+)/,
      {
        ...env,
        FAIRWAY_OPERATOR_KEY_FILE: join(dir, 'keys', 'operator.key'),
        FAIRWAY_ADMIN_TOKEN_FILE: join(dir, 'admin.token'),
      },
    );
    operatorUrl = `http://127.0.0.1:${operatorPort}`;
    const reader = await startFairway(
      ['serve', '-c', EXAMPLE_CONFIG, '--port', '0', '--operator-port', String(await freePort())],
      /listening on (http:\S+)/,
      env,
    );
    const engine = await startFairway(
      ['engine-sim', '--port', '0', '--speed', '50', '--replica-id', 'engine-a', '--nats-url', nats.url],
      /listening on (http:\S+)/,
      { NATS_USER: 'agent-engine-a', NATS_PASSWORD: PASSWORDS.FAIRWAY_AGENT_ENGINE_A_NATS_PASSWORD },
    );
    processes.push(writer, reader, engine);
    urls = [writer.url, reader.url];
    for (const url of urls)
      await waitFor(
        async () =>
          (await sendChat(url, { key: 'sk-fairway-acme-demo', model: MODEL, tokens: 2, stream: false }))
            .status === 200,
        20_000,
        `${url} to serve`,
      );
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    for (const p of processes) await p.stop().catch(() => undefined);
    await redis?.stop();
    await nats?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('adds a tenant and a key from the console; both dispatchers serve the key', async () => {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    page.on('dialog', (d) => void d.accept());
    await page.goto(`${operatorUrl}/console`);
    await page.getByTestId('token-input').fill(TOKEN);
    await page.getByTestId('token-submit').click();
    await page.getByTestId('tenants').waitFor();

    const form = page.getByTestId('tenant-form');
    await form.locator('input[name=id]').fill('hooli');
    await form.locator('input[name=weight]').fill('2');
    await form.locator('button').click();
    await page.locator('[data-testid=tenant-row][data-tenant=hooli]').waitFor({ timeout: 15_000 });

    const keyForm = page.getByTestId('key-form');
    await keyForm.locator('select[name=tenant]').selectOption('hooli');
    await keyForm.locator('button').click();
    const secret = (await page.getByTestId('new-key').locator('code').textContent()) ?? '';
    expect(secret.length).toBeGreaterThan(20);
    for (const url of urls)
      await expect
        .poll(
          async () => (await sendChat(url, { key: secret, model: MODEL, tokens: 2, stream: false })).status,
          {
            timeout: 15_000,
          },
        )
        .toBe(200);
  }, 60_000);
});
