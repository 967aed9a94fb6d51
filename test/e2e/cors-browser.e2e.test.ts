import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startUp, type UpHandle } from '@fairway/cli';
import { silentLogger } from '@fairway/core';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { onPath } from './support/processes.ts';

/**
 * A web app on another origin calls fairway from headless Chromium (Debian's, driven by
 * playwright-core), as a browser app built on the OpenAI API would: with CORS on and its origin
 * listed, it reads the answer, streamed too, and the rate-limit headers; with CORS off the browser
 * refuses to hand it anything.
 */

const CHROMIUM = onPath('chromium', 'chromium-browser', 'google-chrome');
const MODEL = 'llama-2-7b';
const KEY = 'sk-browser-app-00001';

if (CHROMIUM === undefined)
  console.warn('cors-browser.e2e: skipped — no chromium on PATH (Debian: apt-get install chromium)');

/** Serves one blank page: the web app's origin. */
async function appOrigin(): Promise<{ server: Server; origin: string }> {
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end('<!doctype html><title>app</title><p>app</p>');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

/** `fairway up` with one tenant whose key the app holds, CORS as given. */
async function fleet(dir: string, cors: Record<string, unknown>, corsOrigins: string[]): Promise<UpHandle> {
  const configPath = join(dir, `fairway-${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(
    configPath,
    JSON.stringify({
      tenants: [{ id: 'webapp', keys: [{ key: KEY }], limits: { rpm: 600, tpm: 100_000 }, corsOrigins }],
      pools: [{ id: 'llama', model: MODEL }],
      server: { operatorPort: 0, cors },
    }),
  );
  return startUp({ configPath, port: 0, operatorPort: 0, speed: 50, env: {}, logger: silentLogger });
}

interface PageCall {
  ok: boolean;
  status?: number;
  text?: string;
  remaining?: string | null;
  error?: string;
}

/** What the page's own `fetch` gets from the API (plain or streamed). */
function callFromPage(page: Page, url: string, stream: boolean): Promise<PageCall> {
  return page.evaluate(
    async ({ url, key, model, stream }) => {
      try {
        const res = await fetch(`${url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({
            model,
            messages: [{ role: 'user', content: 'hello from the browser' }],
            max_tokens: 8,
            fairway_output_tokens: 6,
            stream,
          }),
        });
        return {
          ok: true,
          status: res.status,
          text: await res.text(),
          remaining: res.headers.get('x-ratelimit-remaining-requests'),
        };
      } catch (e) {
        return { ok: false, error: String(e) };
      }
    },
    { url, key: KEY, model: MODEL, stream },
  );
}

describe.skipIf(CHROMIUM === undefined)('a browser app on another origin', () => {
  let dir: string;
  let app: { server: Server; origin: string };
  let browser: Browser;
  let page: Page;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fairway-cors-'));
    app = await appOrigin();
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
    page = await browser.newPage();
    await page.goto(app.origin);
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
    await new Promise((r) => app?.server.close(r));
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('reads plain and streamed answers and the rate-limit headers with CORS on', async () => {
    const up = await fleet(dir, { enabled: true }, [app.origin]);
    try {
      const plain = await callFromPage(page, up.url, false);
      expect(plain).toMatchObject({ ok: true, status: 200, remaining: '599' });
      expect(JSON.parse(plain.text ?? '{}').usage.completion_tokens).toBe(6);
      const streamed = await callFromPage(page, up.url, true);
      expect(streamed).toMatchObject({ ok: true, status: 200 });
      expect(streamed.text).toContain('data: [DONE]');
    } finally {
      await up.close();
    }
  }, 60_000);

  it('is refused by the browser with CORS off, and from an origin its tenant does not list', async () => {
    const off = await fleet(dir, { enabled: false }, [app.origin]);
    try {
      const refused = await callFromPage(page, off.url, false);
      expect(refused.ok).toBe(false);
      expect(refused.error).toMatch(/Failed to fetch/);
    } finally {
      await off.close();
    }
    const elsewhere = await fleet(dir, { enabled: true }, ['https://other-app.example']);
    try {
      const refused = await callFromPage(page, elsewhere.url, false);
      expect(refused.ok).toBe(false);
    } finally {
      await elsewhere.close();
    }
  }, 60_000);
});
