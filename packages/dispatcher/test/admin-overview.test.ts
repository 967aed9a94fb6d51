import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseConfig } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import type { RunningDispatcher } from '../src/index.ts';
import { dispatcherStarter, waitFor } from './support/stack.ts';

const TOKEN = 'overview-token-0123456789abcdef';
const ALPHA_KEY = 'sk-overview-alpha-01';
const CONFIG = parseConfig(
  {
    pools: [{ id: 'chat', model: 'llama-2-7b' }],
    sloClasses: [
      { name: 'interactive', ttftS: 5, band: 0 },
      { name: 'batch', ttftS: 600, band: 1 },
    ],
    tenants: [
      { id: 'alpha', weight: 2, keys: [{ key: ALPHA_KEY }] },
      { id: 'beta', limits: { rpm: 10 } },
    ],
  },
  'test config',
);
const dir = mkdtempSync(join(tmpdir(), 'fairway-overview-'));
const tokenFile = join(dir, 'admin-token');
writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });

describe('GET /admin/v1/overview and the console files (operator port)', () => {
  const start = dispatcherStarter(CONFIG, { adminTokenFile: tokenFile });
  const overview = (d: RunningDispatcher, token: string | null = TOKEN) =>
    d.dispatcher.operator.inject({
      method: 'GET',
      url: '/admin/v1/overview',
      headers: token === null ? {} : { authorization: `Bearer ${token}` },
    });

  it('is guarded like the admin API: 403 when off, 401 without the admin token', async () => {
    const off = await start({});
    const r = await overview(off);
    expect(r.statusCode).toBe(403);
    expect(r.json().error.code).toBe('admin_api_disabled');
    const on = await start();
    expect((await overview(on, null)).statusCode).toBe(401);
    expect((await overview(on, 'wrong-token-0123456789')).statusCode).toBe(401);
    expect((await overview(on, ALPHA_KEY)).statusCode).toBe(401);
  });

  it('gives tenants with weights and service, queues per band, replicas and recent evictions', async () => {
    const d = await start();
    const first = (await overview(d)).json();
    expect(first.dispatcher).toBe(d.id);
    expect(first.tenants).toEqual([
      { id: 'alpha', weight: 2, limits: {}, service: 0 },
      { id: 'beta', weight: 1, limits: { rpm: 10 }, service: 0 },
    ]);
    expect(first.queues).toEqual([
      { pool: 'chat', band: 0, depth: 0 },
      { pool: 'chat', band: 1, depth: 0 },
    ]);
    expect(first.replicas).toEqual([]);
    expect(first.events).toEqual([]);

    d.infrastructure.bus.publish('evict', {
      replicaId: 'r1',
      requestIds: ['a', 'b'],
      reason: 'qlm: make room',
      at: 1234,
    });
    await waitFor(async () => (await overview(d)).json().events.length === 1, 5000, 'the eviction');
    expect((await overview(d)).json().events).toEqual([
      { kind: 'eviction', at: 1234, replica: 'r1', requests: 2, reason: 'qlm: make room' },
    ]);
  });

  it('serves the console page and its vendored libraries, with a CSP that allows only its own import map', async () => {
    const d = await start();
    const page = await d.dispatcher.operator.inject({ method: 'GET', url: '/console' });
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toContain('text/html');
    const map = /<script type="importmap">([\s\S]*?)<\/script>/.exec(page.body)?.[1] ?? '';
    const hash = createHash('sha256').update(map, 'utf8').digest('base64');
    expect(String(page.headers['content-security-policy'])).toContain(`script-src 'self' 'sha256-${hash}'`);
    for (const url of Object.values(JSON.parse(map).imports as Record<string, string>)) {
      const res = await d.dispatcher.operator.inject({ method: 'GET', url });
      expect(res.statusCode, url).toBe(200);
      expect(res.headers['content-type'], url).toContain('javascript');
      expect(res.body, url).toMatch(/\bexport\b/);
    }
    // Only the listed files: nothing else of the disk is reachable.
    for (const url of ['/console/../package.json', '/console/vendor/../../src/app.ts', '/console/nope.js'])
      expect((await d.dispatcher.operator.inject({ method: 'GET', url })).statusCode, url).toBe(404);
  });
});
