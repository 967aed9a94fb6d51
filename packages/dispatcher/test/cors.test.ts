import { afterEach, describe, expect, it } from 'vitest';
import { type Stack, startStack } from './support/stack.ts';

/**
 * Cross-origin requests from browser pages, over real HTTP: preflights, the headers of plain,
 * streamed and refused answers, per-tenant origins, and nothing at all while CORS is off.
 */

const MODEL = 'llama-2-7b';
const ACME = 'sk-cors-acme-00001';
const GLOBEX = 'sk-cors-globex-0001';
const APP = 'https://app.acme.example';
const FLEET_APP = 'https://status.fleet.example';

function config(cors: Record<string, unknown> | undefined) {
  return {
    tenants: [
      { id: 'acme', keys: [{ key: ACME }], limits: { rpm: 100 }, corsOrigins: [APP] },
      { id: 'globex', keys: [{ key: GLOBEX }] },
    ],
    pools: [{ id: 'llama', model: MODEL }],
    ...(cors === undefined ? {} : { server: { cors } }),
  };
}

const chat = JSON.stringify({
  model: MODEL,
  messages: [{ role: 'user', content: 'hi' }],
  max_tokens: 4,
  fairway_output_tokens: 3,
});

describe('CORS', () => {
  const stacks: Stack[] = [];
  afterEach(async () => {
    for (const s of stacks.splice(0)) await s.close();
  });
  async function start(cors: Record<string, unknown> | undefined): Promise<string> {
    const s = await startStack({ config: config(cors) });
    stacks.push(s);
    return s.dispatchers[0]!.url;
  }
  const preflight = (url: string, origin: string) =>
    fetch(`${url}/v1/chat/completions`, {
      method: 'OPTIONS',
      headers: {
        origin,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization,content-type,x-stainless-os',
      },
    });
  const post = (url: string, key: string, origin: string, body = chat) =>
    fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { origin, authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body,
    });

  it('answers a preflight from a listed origin with 204 and the Access-Control headers', async () => {
    const url = await start({ enabled: true, maxAgeS: 300 });
    const res = await preflight(url, APP);
    expect(res.status).toBe(204);
    expect(res.headers.get('access-control-allow-origin')).toBe(APP);
    expect(res.headers.get('access-control-allow-methods')).toBe('GET, POST');
    expect(res.headers.get('access-control-allow-headers')).toBe('authorization,content-type,x-stainless-os');
    expect(res.headers.get('access-control-max-age')).toBe('300');
    // An origin nobody lists gets no permission.
    const other = await preflight(url, 'https://evil.example');
    expect(other.headers.get('access-control-allow-origin')).toBeNull();
  });

  it('lets a page read plain, streamed and refused answers, rate-limit headers included', async () => {
    const url = await start({ enabled: true });
    const plain = await post(url, ACME, APP);
    expect(plain.status).toBe(200);
    expect(plain.headers.get('access-control-allow-origin')).toBe(APP);
    const exposed = (plain.headers.get('access-control-expose-headers') ?? '').split(/,\s*/);
    for (const h of [
      'x-ratelimit-remaining-requests',
      'x-ratelimit-reset-tokens',
      'retry-after',
      'x-request-id',
      'x-fairway-fallback-model',
    ])
      expect(exposed).toContain(h);
    expect(plain.headers.get('x-ratelimit-limit-requests')).toBe('100');
    const streamed = await post(url, ACME, APP, JSON.stringify({ ...JSON.parse(chat), stream: true }));
    expect(streamed.headers.get('access-control-allow-origin')).toBe(APP);
    expect(await streamed.text()).toContain('[DONE]');
    const bad = await post(url, ACME, APP, JSON.stringify({ model: MODEL }));
    expect(bad.status).toBe(400);
    expect(bad.headers.get('access-control-allow-origin')).toBe(APP);
    // A refused key's 401 is readable, so the page can say so.
    const unknown = await post(url, 'sk-nobody-000000001', APP);
    expect(unknown.status).toBe(401);
    expect(unknown.headers.get('access-control-allow-origin')).toBe(APP);
  });

  it("allows a tenant's origin for that tenant's keys only; the fleet's origins for every key", async () => {
    const url = await start({ enabled: true, origins: [FLEET_APP] });
    const globex = await post(url, GLOBEX, APP);
    // Served (a server cannot stop a request), but the browser keeps the answer from the page.
    expect(globex.headers.get('access-control-allow-origin')).toBeNull();
    await globex.text();
    const fleet = await post(url, GLOBEX, FLEET_APP);
    expect(fleet.headers.get('access-control-allow-origin')).toBe(FLEET_APP);
    expect((await preflight(url, FLEET_APP)).headers.get('access-control-allow-origin')).toBe(FLEET_APP);
  });

  it("reads Anthropic's x-api-key as the request's key: a tenant's origin is for its own keys only", async () => {
    const url = await start({ enabled: true });
    const messages = (key: string) =>
      fetch(`${url}/v1/messages`, {
        method: 'POST',
        headers: { origin: APP, 'x-api-key': key, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }),
      });
    const acme = await messages(ACME);
    expect(acme.status).toBe(200);
    expect(acme.headers.get('access-control-allow-origin')).toBe(APP);
    const globex = await messages(GLOBEX);
    await globex.text();
    expect(globex.headers.get('access-control-allow-origin')).toBeNull();
  });

  it('allows any origin with "*"', async () => {
    const url = await start({ enabled: true, origins: ['*'] });
    const res = await post(url, GLOBEX, 'https://anything.example');
    expect(res.headers.get('access-control-allow-origin')).toBe('*');
  });

  it('sends no Access-Control header and refuses preflights while off (the default)', async () => {
    const url = await start(undefined);
    const res = await preflight(url, APP);
    expect(res.status).toBe(405);
    expect(res.headers.get('access-control-allow-origin')).toBeNull();
    const plain = await post(url, ACME, APP);
    expect(plain.status).toBe(200);
    expect(plain.headers.get('access-control-allow-origin')).toBeNull();
  });
});
