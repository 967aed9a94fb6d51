import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startUp, type UpHandle } from '@fairway/cli';
import { hashApiKey, silentLogger } from '@fairway/core';
import { freePort } from '@fairway/testkit';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../infra/support/repo.ts';
import { sendChat } from './support/chat.ts';
import { type FairwayProcess, onPath, startFairway } from './support/processes.ts';

/**
 * The live console (`GET /console` on the operator port) in a real browser: Debian's headless
 * Chromium driven by playwright-core against a running `fairway up` fleet with the admin API on.
 * The operator signs in with the admin token, sees the tenants and replicas, adds a tenant and a
 * key, and revokes a key — which then gets 401 from the API. A screenshot is written to
 * test-output/ (gitignored).
 */

/** Debian's chromium (or another on PATH); the test is skipped without one. */
const CHROMIUM = onPath('chromium', 'chromium-browser', 'google-chrome');
const TOKEN = 'console-admin-token-0123456789';
const MODEL = 'llama-2-7b';
const REVOKED = 'sk-fairway-globex-demo';
const OUTPUT = join(REPO_ROOT, 'test-output');

if (CHROMIUM === undefined)
  console.warn('console.e2e: skipped — no chromium on PATH (Debian: apt-get install chromium)');

describe.skipIf(CHROMIUM === undefined)('the live console in headless Chromium', () => {
  let up: UpHandle;
  let dir: string;
  let browser: Browser;
  let page: Page;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fairway-console-'));
    const tokenFile = join(dir, 'admin-token');
    writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
    up = await startUp({
      port: 0,
      operatorPort: await freePort(),
      speed: 50,
      env: {},
      logger: silentLogger,
      settings: { adminTokenFile: tokenFile },
    });
    // Some service to plot.
    await Promise.all(
      up.keys.map((k) => sendChat(up.url, { key: k.key, model: MODEL, tokens: 8, stream: false })),
    );
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    page.on('dialog', (d) => void d.accept());
  }, 90_000);
  afterAll(async () => {
    await browser?.close();
    await up?.close();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('signs in with the admin token, kept in sessionStorage and never in the URL', async () => {
    await page.goto(`${up.dispatcher.operatorUrl}/console`);
    await page.getByTestId('token-input').fill('not-the-token');
    await page.getByTestId('token-submit').click();
    await expect.poll(() => page.getByTestId('login-error').textContent()).toContain('admin token');

    await page.getByTestId('token-input').fill(TOKEN);
    await page.getByTestId('token-submit').click();
    await page.getByTestId('tenants').waitFor();
    expect(page.url()).not.toContain(TOKEN);
    expect(await page.evaluate("sessionStorage.getItem('fairway.console.adminToken')")).toBe(TOKEN);
  });

  it('shows the tenants with their weights and the replicas with their state', async () => {
    const tenants = page.getByTestId('tenant-row');
    await expect
      .poll(() => tenants.evaluateAll((rows) => rows.map((r) => r.getAttribute('data-tenant'))))
      .toEqual(['acme', 'globex', 'initech']);
    await expect
      .poll(() => page.locator('[data-testid=tenant-row][data-tenant=initech] td').nth(1).textContent())
      .toBe('2');
    const replicas = page.getByTestId('replica-row');
    await expect.poll(() => replicas.count()).toBe(up.engines.length);
    for (const state of await replicas.locator('td:nth-child(3)').allTextContents())
      expect(state).toBe('ready');
    await page.getByTestId('share-plot').locator('canvas').first().waitFor();
  });

  it('adds a tenant and a key through the admin API; the new key is served', async () => {
    const form = page.getByTestId('tenant-form');
    await form.locator('input[name=id]').fill('hooli');
    await form.locator('input[name=weight]').fill('3');
    await form.locator('button').click();
    await page.locator('[data-testid=tenant-row][data-tenant=hooli]').waitFor();

    const keyForm = page.getByTestId('key-form');
    await keyForm.locator('select[name=tenant]').selectOption('hooli');
    await keyForm.locator('button').click();
    const secret = (await page.getByTestId('new-key').locator('code').textContent()) ?? '';
    expect(secret.length).toBeGreaterThan(20);
    await expect
      .poll(
        async () => (await sendChat(up.url, { key: secret, model: MODEL, tokens: 2, stream: false })).status,
        {
          timeout: 5000,
        },
      )
      .toBe(200);
  });

  it('revokes a key through the UI: the key then gets 401', async () => {
    const before = await sendChat(up.url, { key: REVOKED, model: MODEL, tokens: 2, stream: false });
    expect(before.status).toBe(200);
    const row = page.locator(`[data-testid=key-row][data-key-id="${hashApiKey(REVOKED)}"]`);
    await row.getByTestId('revoke').click();
    await expect.poll(() => page.getByTestId('admin-message').textContent()).toContain('accepted');
    await expect
      .poll(
        async () => (await sendChat(up.url, { key: REVOKED, model: MODEL, tokens: 2, stream: false })).status,
        {
          timeout: 5000,
        },
      )
      .toBe(401);
    await row.waitFor({ state: 'detached' });
    // Other keys still work.
    const other = await sendChat(up.url, {
      key: 'sk-fairway-acme-demo',
      model: MODEL,
      tokens: 2,
      stream: false,
    });
    expect(other.status).toBe(200);
    mkdirSync(OUTPUT, { recursive: true });
    const shot = join(OUTPUT, 'console.png');
    await page.screenshot({ path: shot, fullPage: true });
    expect(existsSync(shot)).toBe(true);
  });
});

describe.skipIf(CHROMIUM === undefined)('the console link `fairway up` prints', () => {
  let up: FairwayProcess | undefined;
  let browser: Browser | undefined;
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'fairway-up-console-'));
  });
  afterAll(async () => {
    await browser?.close();
    await up?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('opens the console signed in, showing the fleet, with the token out of the address', async () => {
    up = await startFairway(
      [
        'up',
        '--port',
        '0',
        '--operator-port',
        String(await freePort()),
        '--speed',
        '20',
        '--log-level',
        'error',
      ],
      /^console\s+(http:\/\/\S+\/console#token=\S+)/,
      // The embedded default, with no token configured: `up` makes one for this start.
      { REDIS_URL: '', NATS_URL: '', FAIRWAY_ADMIN_TOKEN_FILE: '' },
    );
    const link = up.url;
    const token = new URL(link).hash.replace(/^#token=/, '');
    expect(token.length).toBeGreaterThanOrEqual(16);

    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    await page.goto(link);
    await page.getByTestId('tenants').waitFor();
    await expect
      .poll(() =>
        page.getByTestId('tenant-row').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-tenant'))),
      )
      .toEqual(['acme', 'globex', 'initech']);
    await expect.poll(() => page.getByTestId('replica-row').count()).toBe(2);
    expect(await page.getByTestId('token-input').count()).toBe(0);
    expect(page.url()).not.toContain(token);
    expect(await page.evaluate("sessionStorage.getItem('fairway.console.adminToken')")).toBe(token);

    const shot = join(dir, 'up-console.png');
    await page.screenshot({ path: shot, fullPage: true });
    expect(statSync(shot).size).toBeGreaterThan(0);
  });
});
