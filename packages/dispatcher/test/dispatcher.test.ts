import { VllmClient } from '@fairway/engine';
import { afterEach, describe, expect, it } from 'vitest';
import { type Stack, type StackOptions, startStack, waitFor } from './support/stack.ts';

const MODEL = 'llama-2-7b';
const KEY = 'sk-test-alpha-0001';
const BETA_KEY = 'sk-test-beta-0001';
const APP_KEY = 'sk-test-alpha-app1';

function config(extra: Record<string, unknown> = {}) {
  return {
    tenants: [
      {
        id: 'alpha',
        keys: [{ key: KEY }, { key: APP_KEY, app: 'chat' }],
        limits: { rpm: 1000 },
      },
      { id: 'beta', keys: [{ key: BETA_KEY }], limits: { rpm: 2 } },
    ],
    apps: [{ id: 'chat', stages: [{ input: 10, output: 10 }] }],
    pools: [{ id: 'llama', model: MODEL }],
    ...extra,
  };
}

function chat(extra: Record<string, unknown> = {}) {
  return {
    model: MODEL,
    messages: [{ role: 'user', content: 'Hello there, engine!' }],
    max_tokens: 8,
    ...extra,
  };
}

function headers(key = KEY): Record<string, string> {
  return { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
}

describe('dispatcher', () => {
  const stacks: Stack[] = [];
  afterEach(async () => {
    for (const s of stacks.splice(0)) await s.close();
  });
  async function stack(o: Partial<StackOptions> = {}): Promise<Stack> {
    const s = await startStack({ config: config(), ...o });
    stacks.push(s);
    return s;
  }

  it('forwards a non-streamed completion as the engine sent it, with usage and timing headers', async () => {
    const s = await stack();
    const app = s.dispatchers[0]!.dispatcher.app;
    const res = await app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: headers(),
      payload: chat({ max_tokens: 12, fairway_output_tokens: 12 }),
    });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    // The engine's own count (its chat template around 5 words and marks) reaches the client.
    expect(body.usage).toEqual({ prompt_tokens: 14, completion_tokens: 12, total_tokens: 26 });
    expect(body.object).toBe('chat.completion');
    expect(Number(res.headers['x-fairway-overhead-ms'])).toBeGreaterThanOrEqual(0);
    expect(res.headers['x-fairway-queue-ms']).toBe('0.0');
    expect(String(res.headers['x-request-id'])).toMatch(/^fw-/);
    await waitFor(async () => (await s.store.reserved('sim-1')).seqs === 0, 2000, 'settle');
  });

  it('streams chunks untouched, dropping the usage-only chunk unless the client asked for usage', async () => {
    const s = await stack();
    const url = `${s.dispatchers[0]!.url}/v1/chat/completions`;
    const plain = await fetch(url, {
      method: 'POST',
      headers: headers(),
      body: JSON.stringify(chat({ stream: true, max_tokens: 5, fairway_output_tokens: 5 })),
    });
    expect(plain.status).toBe(200);
    expect(plain.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const plainText = await plain.text();
    expect(plainText).not.toContain('"usage"');
    expect(plainText.match(/"content":" /g)).toHaveLength(5);
    expect(plainText.endsWith('data: [DONE]\n\n')).toBe(true);

    const withUsage = await fetch(url, {
      method: 'POST',
      headers: headers(),
      body: JSON.stringify(
        chat({
          stream: true,
          max_tokens: 5,
          fairway_output_tokens: 5,
          stream_options: { include_usage: true },
        }),
      ),
    });
    const text = await withUsage.text();
    const usageLines = text.split('\n').filter((l) => l.includes('"usage"'));
    expect(usageLines).toHaveLength(1);
    expect(JSON.parse(usageLines[0]!.slice('data: '.length)).usage).toEqual({
      prompt_tokens: 14,
      completion_tokens: 5,
      total_tokens: 19,
    });
  });

  it('answers client errors with OpenAI-shaped bodies and the right status, never a stack trace', async () => {
    const s = await stack();
    const app = s.dispatchers[0]!.dispatcher.app;
    const post = (h: Record<string, string>, payload: unknown, url = '/v1/chat/completions') =>
      app.inject({ method: 'POST', url, headers: h, payload: payload as string });
    const cases: [Promise<{ statusCode: number; json(): unknown; body: string }>, number, string][] = [
      [post({ 'content-type': 'application/json' }, chat()), 401, 'missing_api_key'],
      [post(headers('sk-wrong-key-123'), chat()), 401, 'invalid_api_key'],
      [post({ ...headers(), authorization: 'Basic abc' }, chat()), 401, 'invalid_api_key'],
      [post(headers(), '{"model": '), 400, 'invalid_json'],
      [post(headers(), chat({ max_tokens: 'many' })), 400, 'invalid_request'],
      [post(headers(), chat({ messages: [] })), 400, 'invalid_request'],
      [post(headers(), { prompt: 'x' }, '/v1/completions'), 400, 'invalid_request'],
      [post({ ...headers(), 'x-fairway-slo-class': 'platinum' }, chat()), 400, 'invalid_header'],
      [post({ ...headers(), 'x-fairway-user': 'a b\tc' }, chat()), 400, 'invalid_header'],
      [post({ ...headers(APP_KEY), 'x-fairway-app': 'other' }, chat()), 403, 'forbidden'],
      [post(headers(), chat({ model: 'gpt-17' })), 404, 'model_not_found'],
      [post(headers(), chat(), '/v1/audio/speech'), 404, 'not_found'],
      [
        app.inject({ method: 'GET', url: '/v1/chat/completions', headers: headers() }),
        405,
        'method_not_allowed',
      ],
      [
        post(headers(), { ...chat(), messages: [{ role: 'user', content: 'x'.repeat(5 * 1024 * 1024) }] }),
        413,
        'request_too_large',
      ],
      [post({ ...headers(), 'content-type': 'text/plain' }, 'hello'), 415, 'unsupported_media_type'],
      [post({ ...headers(), 'content-type': 'application/xml' }, '<a/>'), 415, 'unsupported_media_type'],
    ];
    for (const [p, status, code] of cases) {
      const res = await p;
      expect({
        status: res.statusCode,
        code: (res.json() as { error: { code: string } }).error.code,
      }).toEqual({
        status,
        code,
      });
      expect(res.body).not.toMatch(/at .*\.ts:\d+/);
    }
    const bad = await post(headers(), chat({ max_tokens: 'many' }));
    expect(bad.json()).toMatchObject({ error: { param: 'max_tokens', type: 'invalid_request_error' } });
  });

  it('rejects a tenant over its RPM limit with 429 and Retry-After', async () => {
    const s = await stack();
    const app = s.dispatchers[0]!.dispatcher.app;
    const send = () =>
      app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: headers(BETA_KEY),
        payload: chat(),
      });
    expect((await send()).statusCode).toBe(200);
    expect((await send()).statusCode).toBe(200);
    const third = await send();
    expect(third.statusCode).toBe(429);
    expect(third.json()).toMatchObject({ error: { code: 'rate_limit_exceeded', type: 'requests' } });
    expect(Number(third.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    // A window's entries count until the end of their 1 s bucket: at most a minute and a second.
    expect(Number(third.headers['retry-after'])).toBeLessThanOrEqual(61);
    expect(String(third.headers['x-request-id'])).toMatch(/^fw-/);
  });

  it('turns requests away with 429 queue_full beyond the tenant and pool queue bounds', async () => {
    const s = await stack({
      engines: [{ maxNumSeqs: 1, speed: 1 }],
      config: config({
        tenants: [
          { id: 'alpha', keys: [{ key: KEY }], limits: { maxQueued: 1 } },
          { id: 'beta', keys: [{ key: BETA_KEY }] },
        ],
        pools: [{ id: 'llama', model: MODEL, maxQueued: 2 }],
      }),
    });
    const d = s.dispatchers[0]!;
    const long = chat({ stream: true, max_tokens: 3000, fairway_output_tokens: 3000 });
    const aborts: AbortController[] = [];
    const send = (key: string) => {
      const ac = new AbortController();
      aborts.push(ac);
      return fetch(`${d.url}/v1/chat/completions`, {
        method: 'POST',
        headers: headers(key),
        body: JSON.stringify(long),
        signal: ac.signal,
      }).catch(() => undefined);
    };
    try {
      void send(KEY); // runs (one slot)
      await waitFor(async () => (await s.store.reserved('sim-1')).seqs === 1, 2000, 'running');
      void send(KEY); // queued: alpha's one allowed
      await waitFor(async () => (await s.store.snapshot('llama', 0)).queued.alpha === 1, 2000, 'queued');
      const tenantFull = await d.dispatcher.app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: headers(),
        payload: chat(),
      });
      expect(tenantFull.statusCode).toBe(429);
      expect(tenantFull.json()).toMatchObject({ error: { code: 'queue_full' } });
      expect(tenantFull.headers['retry-after']).toBeDefined();
      void send(BETA_KEY); // queued: the pool's second
      await waitFor(async () => (await s.store.snapshot('llama', 0)).queued.beta === 1, 2000, 'queued');
      const poolFull = await d.dispatcher.app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: headers(BETA_KEY),
        payload: chat(),
      });
      expect(poolFull.statusCode).toBe(429);
      expect(poolFull.json()).toMatchObject({ error: { code: 'queue_full' } });
    } finally {
      for (const a of aborts) a.abort();
    }
  });

  it('places a replica in the pool the config gives its model, whatever pool its agent announced', async () => {
    const s = await stack({ agentPool: 'announced-elsewhere' });
    const res = await s.dispatchers[0]!.dispatcher.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: headers(),
      payload: chat(),
    });
    expect(res.statusCode).toBe(200);
  });

  it('answers 503 when no replica serves the model, and 404 for a model nothing serves', async () => {
    const s = await stack({
      config: config({
        pools: [
          { id: 'llama', model: MODEL },
          { id: 'mistral', model: 'mistral-7b' },
        ],
      }),
    });
    const app = s.dispatchers[0]!.dispatcher.app;
    const res = await app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: headers(),
      payload: chat({ model: 'mistral-7b' }),
    });
    expect(res.statusCode).toBe(503);
    expect(res.json()).toMatchObject({ error: { code: 'no_replica' } });
    expect(res.headers['retry-after']).toBe('1');
    const models = await app.inject({ method: 'GET', url: '/v1/models', headers: headers() });
    expect(models.json().data.map((m: { id: string }) => m.id)).toEqual([MODEL, 'mistral-7b']);
  });

  it('times out a request that waits too long for capacity with 504 and takes it out of the queue', async () => {
    const s = await stack({ engines: [{ maxNumSeqs: 1, speed: 1 }], options: { queueTimeoutMs: 300 } });
    const d = s.dispatchers[0]!;
    const long = new AbortController();
    const hog = await fetch(`${d.url}/v1/chat/completions`, {
      method: 'POST',
      headers: headers(),
      body: JSON.stringify(chat({ stream: true, max_tokens: 3000, fairway_output_tokens: 3000 })),
      signal: long.signal,
    });
    expect(hog.status).toBe(200);
    const res = await d.dispatcher.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: headers(),
      payload: chat(),
    });
    expect(res.statusCode).toBe(504);
    expect(res.json()).toMatchObject({ error: { code: 'queue_timeout', type: 'timeout' } });
    const snap = await s.store.snapshot('llama', 0);
    expect(snap.queued).toEqual({});
    long.abort();
  });

  it('frees the reservation and the engine slot when a client disconnects mid-stream or while queued', async () => {
    const s = await stack({ engines: [{ maxNumSeqs: 1, speed: 1 }] });
    const d = s.dispatchers[0]!;
    const engine = new VllmClient({ url: s.sims[0]!.url });
    try {
      const running = new AbortController();
      const res = await fetch(`${d.url}/v1/chat/completions`, {
        method: 'POST',
        headers: headers(),
        body: JSON.stringify(chat({ stream: true, max_tokens: 3000, fairway_output_tokens: 3000 })),
        signal: running.signal,
      });
      const reader = res.body!.getReader();
      await reader.read();
      expect((await s.store.reserved('sim-1')).seqs).toBe(1);
      // A second request queues behind the first (one sequence slot), then its client leaves too.
      const queued = new AbortController();
      const waiting = fetch(`${d.url}/v1/chat/completions`, {
        method: 'POST',
        headers: headers(),
        body: JSON.stringify(chat()),
        signal: queued.signal,
      }).catch((e: unknown) => e);
      await waitFor(async () => (await s.store.snapshot('llama', 0)).queued.alpha === 1, 2000, 'queued');
      queued.abort();
      await waiting;
      await waitFor(
        async () => (await s.store.snapshot('llama', 0)).queued.alpha === undefined,
        2000,
        'dequeue',
      );

      running.abort();
      await waitFor(async () => (await s.store.reserved('sim-1')).seqs === 0, 2000, 'reservation released');
      await waitFor(async () => (await engine.metrics()).running === 0, 2000, 'engine aborted the request');
      // The freed slot serves the next request.
      const next = await d.dispatcher.app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: headers(),
        payload: chat(),
      });
      expect(next.statusCode).toBe(200);
    } finally {
      await engine.close();
    }
  });

  it('charges streamed output to the tenant while the stream runs, not only at the end', async () => {
    const s = await stack({ engines: [{ speed: 1 }] });
    const ac = new AbortController();
    const res = await fetch(`${s.dispatchers[0]!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: headers(),
      body: JSON.stringify(chat({ stream: true, max_tokens: 3000, fairway_output_tokens: 3000 })),
      signal: ac.signal,
    });
    const reader = res.body!.getReader();
    let chunks = 0;
    while (chunks < 40) {
      await reader.read();
      chunks++;
    }
    // 9 input tokens charged at dispatch; output (2 per token) flushed every 50 ms meanwhile.
    await waitFor(
      async () => ((await s.store.snapshot('llama', 0)).counters.alpha ?? 0) > 9 + 2 * 20,
      2000,
      'charges',
    );
    ac.abort();
  });

  it('closes the connection of a request its agent evicts, tells the client, and frees its slot', async () => {
    const s = await stack({ engines: [{ speed: 1 }] });
    const d = s.dispatchers[0]!;
    const res = await fetch(`${d.url}/v1/chat/completions`, {
      method: 'POST',
      headers: headers(),
      body: JSON.stringify(chat({ stream: true, max_tokens: 3000, fairway_output_tokens: 3000 })),
    });
    const id = res.headers.get('x-request-id')!;
    const reader = res.body!.getReader();
    await reader.read();
    const reply = await s.infra.bus.request(
      'command',
      { replicaId: 'sim-1', type: 'evict', requestIds: [id] },
      { timeoutMs: 5000 },
    );
    expect(reply).toMatchObject({ ok: true });
    let text = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    const last = text.trim().split('\n').at(-1) ?? '';
    expect(JSON.parse(last.slice('data: '.length))).toMatchObject({ error: { code: 'not_ready' } });
    await waitFor(async () => (await s.store.reserved('sim-1')).seqs === 0, 2000, 'reservation released');
  });

  it('hands a request another dispatcher picked to the dispatcher that holds its connection', async () => {
    // d2 never pumps on a timer, so only d1 (freeing the slot) can pick d2's queued request.
    const s = await stack({
      engines: [{ maxNumSeqs: 1 }],
      dispatchers: 2,
      perDispatcher: [undefined, { pumpEveryMs: 600_000 }],
    });
    const [d1, d2] = s.dispatchers;
    const first = fetch(`${d1!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: headers(),
      body: JSON.stringify(chat({ max_tokens: 400, fairway_output_tokens: 400 })),
    });
    await waitFor(async () => (await s.store.reserved('sim-1')).seqs === 1, 2000, 'first running');
    const second = await fetch(`${d2!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: headers(),
      body: JSON.stringify(chat({ max_tokens: 7, fairway_output_tokens: 7 })),
    });
    expect(second.status).toBe(200);
    expect(((await second.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(
      7,
    );
    expect(Number(second.headers.get('x-fairway-queue-ms'))).toBeGreaterThan(0);
    expect((await first).status).toBe(200);
    expect(d1!.dispatcher.runtime.stats().dispatched).toBe(2);
    expect(d2!.dispatcher.runtime.stats().dispatched).toBe(0);
    expect(d2!.dispatcher.runtime.stats().settled).toBe(1);
  });

  it('reports per-tenant service and outcomes on the operator /metrics and readiness on /ready', async () => {
    const s = await stack();
    const app = s.dispatchers[0]!.dispatcher.app;
    const operator = s.dispatchers[0]!.dispatcher.operator;
    await app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: headers(),
      payload: chat({ max_tokens: 4, fairway_output_tokens: 4 }),
    });
    await app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: headers('sk-nope-nope'),
      payload: chat(),
    });
    expect((await app.inject({ method: 'GET', url: '/ready' })).statusCode).toBe(200);
    expect((await app.inject({ method: 'GET', url: '/health' })).json()).toEqual({ status: 'ok' });
    const text = (await operator.inject({ method: 'GET', url: '/metrics' })).body;
    // 14 prompt tokens (the engine's count) + 2 x 4 output tokens.
    expect(text).toMatch(/fairway_tenant_service_total\{tenant="alpha"\} 22\n/);
    expect(text).toMatch(/fairway_requests_total\{tenant="alpha",outcome="completed"\} 1\n/);
    // Admission and the first dispatch are one store call.
    expect(text).toMatch(/fairway_store_latency_seconds_count\{op="admit_and_dispatch"\} 1\n/);
    expect(text).toMatch(/fairway_queue_depth\{pool="llama"\} 0\n/);
    expect(text).toMatch(/fairway_overhead_seconds_count\{stream="false"\} 1\n/);
    // …and so are the settlement and the dispatch into the room it frees (after the response).
    await waitFor(async () =>
      /fairway_store_latency_seconds_count\{op="settle_and_dispatch"\} 1\n/.test(
        (await operator.inject({ method: 'GET', url: '/metrics' })).body,
      ),
    );
  });
});
