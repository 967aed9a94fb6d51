import { connect as connectSocket, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import { createLogger, parseConfig, silentLogger } from '@fairway/core';
import { freePort, startRedisServer, type TestServer } from '@fairway/testkit';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import {
  connectInfrastructure,
  type RunningDispatcher,
  serveSettings,
  startDispatcher,
} from '../src/index.ts';
import { type Stack, startStack } from './support/stack.ts';

const MODEL = 'llama-2-7b';
const KEY = 'sk-hyg-alpha-0001';

function config(extra: Record<string, unknown> = {}) {
  return {
    tenants: [{ id: 'alpha', keys: [{ key: KEY }] }],
    pools: [{ id: 'llama', model: MODEL }],
    ...extra,
  };
}

const CHAT = { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 };

async function served(s: Stack): Promise<void> {
  const res = await s.dispatchers[0]!.dispatcher.app.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    payload: CHAT,
  });
  expect(res.statusCode).toBe(200);
}

/** A log destination that keeps every line. */
function capture(): { lines: string[]; stream: Writable } {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      lines.push(String(chunk));
      done();
    },
  });
  return { lines, stream };
}

/**
 * A dispatcher on a fixed operator port that was free a moment ago. Another process of the test
 * run can take the port in between (an outgoing connection's ephemeral port), so a port found
 * taken is replaced by another, a few times.
 */
async function onFreeOperatorPort(): Promise<{ d: RunningDispatcher; port: number }> {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    try {
      const d = await startDispatcher({
        settings: serveSettings({}, { port: 0, operatorPort: port }),
        config: parseConfig(config()),
        logger: silentLogger,
      });
      return { d, port };
    } catch (err) {
      if (attempt >= 5 || !/EADDRINUSE/.test((err as Error).message)) throw err;
    }
  }
}

describe('metrics on the operator port', () => {
  const stacks: Stack[] = [];
  const running: RunningDispatcher[] = [];
  afterEach(async () => {
    for (const s of stacks.splice(0)) await s.close();
    for (const d of running.splice(0)) await d.close();
  });

  it('answers /metrics on the API port with a 404 and serves it on the operator port', async () => {
    const { d, port } = await onFreeOperatorPort();
    running.push(d);
    const api = await fetch(`${d.url}/metrics`);
    expect(api.status).toBe(404);
    expect(await api.json()).toMatchObject({ error: { type: 'invalid_request_error', code: 'not_found' } });
    expect(d.operatorUrl).toBe(`http://127.0.0.1:${port}`);
    const op = await fetch(`${d.operatorUrl}/metrics`);
    expect(op.status).toBe(200);
    expect(await op.text()).toMatch(/^# HELP fairway_requests_total/m);
    expect((await fetch(`${d.operatorUrl}/health`)).status).toBe(200);
  });

  it('says which setting to change when the operator port is taken', async () => {
    const { d: first, port } = await onFreeOperatorPort();
    running.push(first);
    const err = await startDispatcher({
      settings: serveSettings({}, { port: 0, operatorPort: port }),
      config: parseConfig(config()),
      logger: silentLogger,
    }).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(err?.message).toMatch(/operator port .* \(EADDRINUSE\): set --operator-port/);
    expect((err as { code?: string }).code).toBe('FAIRWAY_DISPATCHER_OPERATOR_PORT_INVALID');
  });

  it('runs no operator listener with operator port 0', async () => {
    const d = await startDispatcher({
      settings: serveSettings({ FAIRWAY_OPERATOR_PORT: '0' }, { port: 0 }),
      config: parseConfig(config()),
      logger: silentLogger,
    });
    running.push(d);
    expect(d.operatorUrl).toBeUndefined();
    expect(d.dispatcher.operator.server.listening).toBe(false);
  });

  it('requires the metrics token when one is configured', async () => {
    const token = 'metrics-token-0123456789';
    const s = await startStack({ config: config({ server: { metricsToken: token } }) });
    stacks.push(s);
    const op = s.dispatchers[0]!.dispatcher.operator;
    const none = await op.inject({ method: 'GET', url: '/metrics' });
    expect(none.statusCode).toBe(401);
    expect(none.json()).toMatchObject({ error: { code: 'invalid_api_key' } });
    const wrong = await op.inject({
      method: 'GET',
      url: '/metrics',
      headers: { authorization: 'Bearer metrics-token-wrong-000' },
    });
    expect(wrong.statusCode).toBe(401);
    const right = await op.inject({
      method: 'GET',
      url: '/metrics',
      headers: { authorization: `Bearer ${token}` },
    });
    expect(right.statusCode).toBe(200);
  });

  it('labels tenants by a keyed hash, stable across dispatchers, or not at all', async () => {
    const labelKey = 'deployment-label-key-1';
    const hashed = await startStack({
      config: config({ metrics: { tenantLabels: 'hashed', labelKey } }),
      dispatchers: 2,
    });
    stacks.push(hashed);
    await served(hashed);
    const text = async (i: number) =>
      (await hashed.dispatchers[i]!.dispatcher.operator.inject({ method: 'GET', url: '/metrics' })).body;
    const first = await text(0);
    expect(first).not.toMatch(/alpha/);
    const label = /fairway_requests_total\{tenant="([0-9a-f]{12})",outcome="completed"\} 1/.exec(first)?.[1];
    expect(label).toBeDefined();
    // Another dispatcher of the deployment gives the same tenant the same label.
    expect(hashed.dispatchers[1]!.dispatcher.metrics.tenantLabel('alpha')).toBe(label);

    const none = await startStack({ config: config({ metrics: { tenantLabels: 'none' } }) });
    stacks.push(none);
    await served(none);
    const body = (await none.dispatchers[0]!.dispatcher.operator.inject({ method: 'GET', url: '/metrics' }))
      .body;
    expect(body).not.toMatch(/alpha/);
    expect(body).toMatch(/fairway_requests_total\{tenant="",outcome="completed"\} 1/);
  });

  it('refuses hashed labels without a key at load', () => {
    expect(() => parseConfig(config({ metrics: { tenantLabels: 'hashed' } }))).toThrow(/labelKey/);
  });
});

describe('request ids', () => {
  it('gives every request an id no other can be guessed from', async () => {
    const s = await startStack({ config: config() });
    try {
      const ids: string[] = [];
      for (let i = 0; i < 8; i++) {
        const res = await s.dispatchers[0]!.dispatcher.app.inject({
          method: 'POST',
          url: '/v1/chat/completions',
          headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
          payload: CHAT,
        });
        ids.push(String(res.headers['x-request-id']));
        // The engine's response id reaches the client as the engine made it: random too.
        expect(res.json().id).toMatch(/^chatcmpl-[0-9a-f]{24}$/);
      }
      for (const id of ids) expect(id).toMatch(/^fw-[0-9a-f-]{36}$/);
      // Random UUIDs: no shared prefix a counter or a clock would leave.
      expect(new Set(ids.map((id) => id.slice(3, 11))).size).toBe(ids.length);
    } finally {
      await s.close();
    }
  });
});

describe('slow clients', () => {
  const stacks: Stack[] = [];
  afterEach(async () => {
    for (const s of stacks.splice(0)) await s.close();
  });

  it('answers a request whose body never completes with a 408 and closes the connection', async () => {
    const s = await startStack({ config: config({ server: { requestTimeoutS: 1, headersTimeoutS: 1 } }) });
    stacks.push(s);
    const socket = connectSocket(s.dispatchers[0]!.port, '127.0.0.1');
    let received = '';
    socket.on('data', (d) => {
      received += String(d);
    });
    const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    const body = JSON.stringify(CHAT);
    socket.write(
      'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n' +
        `Authorization: Bearer ${KEY}\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${body.length + 100}\r\n\r\n${body.slice(0, 10)}`,
    );
    // The client never sends the rest; the server must give up on it, not hold it.
    await closed;
    expect(received).toMatch(/^HTTP\/1\.1 408 /);
    // Like every other error, with a request id.
    expect(received).toMatch(/\r\nX-Request-Id: fw-[0-9a-f-]{36}\r\n/i);
    const json = received.slice(received.indexOf('\r\n\r\n') + 4);
    expect(JSON.parse(json)).toMatchObject({
      error: { type: 'invalid_request_error', code: 'request_timeout' },
    });
  }, 20_000);

  it('does not cut a response that streams for longer than the request timeout', async () => {
    const s = await startStack({
      config: config({ server: { requestTimeoutS: 1, headersTimeoutS: 1 } }),
      engines: [{ speed: 1 }],
    });
    stacks.push(s);
    const started = performance.now();
    const res = await fetch(`${s.dispatchers[0]!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ...CHAT, max_tokens: 300, fairway_output_tokens: 300, stream: true }),
    });
    expect(res.status).toBe(200);
    const text = await res.text();
    // The stream outlived the 1 s request timeout and ended normally.
    expect(performance.now() - started).toBeGreaterThan(1500);
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
  }, 30_000);

  it('closes a connection from an address that already holds its share', async () => {
    const s = await startStack({ config: config({ server: { maxConnectionsPerIp: 2 } }) });
    stacks.push(s);
    const open = async (): Promise<{ socket: Socket; closed: Promise<void>; isClosed: () => boolean }> => {
      const socket = connectSocket(s.dispatchers[0]!.port, '127.0.0.1');
      let done = false;
      const closed = new Promise<void>((resolve) =>
        socket.on('close', () => {
          done = true;
          resolve();
        }),
      );
      socket.on('error', () => undefined);
      await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
      return { socket, closed, isClosed: () => done };
    };
    const a = await open();
    const b = await open();
    const c = await open();
    // The third is closed without a word; the first two are still held.
    await c.closed;
    expect(a.isClosed()).toBe(false);
    expect(b.isClosed()).toBe(false);
    // When one goes, the address may connect again.
    a.socket.destroy();
    await a.closed;
    // (The server sees the close a moment after the client does: try until it has.)
    let res = '';
    for (let i = 0; i < 50 && res === ''; i++) {
      const d = await open();
      res = await new Promise<string>((resolve) => {
        d.socket.once('data', (chunk) => resolve(String(chunk)));
        void d.closed.then(() => resolve(''));
        d.socket.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
      });
      d.socket.destroy();
      if (res === '') await new Promise((r) => setTimeout(r, 20));
    }
    expect(res).toMatch(/^HTTP\/1\.1 200 /);
    b.socket.destroy();
  });

  it('caps the connections the API listener holds', async () => {
    const s = await startStack({ config: config({ server: { maxConnections: 3 } }) });
    stacks.push(s);
    expect(s.dispatchers[0]!.dispatcher.app.server.maxConnections).toBe(3);
  });
});

describe('secrets stay out of logs and errors', () => {
  let redis: TestServer | undefined;
  afterEach(async () => {
    await redis?.stop();
    redis = undefined;
  });

  it('never prints a Redis password, in the start-up error or the logs', async () => {
    redis = await startRedisServer();
    const admin = new Redis(redis.url);
    await admin.config('SET', 'requirepass', 'right-password-1');
    admin.disconnect();
    const { lines, stream } = capture();
    const logger = createLogger({ level: 'debug', destination: stream });
    const url = `redis://:wrong-s3cret-pw@127.0.0.1:${redis.port}`;
    const err = await connectInfrastructure({
      redisUrl: url,
      prefix: 'hyg',
      defaultLeaseMs: 1000,
      staleAfterMs: 1000,
      name: 'test',
      clock: { now: () => 0 },
      logger,
      connectTimeoutMs: 2000,
    }).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(err).toBeInstanceOf(Error);
    expect(err!.message).toMatch(/cannot reach Redis at redis:\/\/:\*\*\*@127\.0\.0\.1/);
    expect(err!.message).not.toMatch(/wrong-s3cret-pw/);
    logger.error({ err, url, headers: { authorization: 'Bearer sk-live-123456789' } }, `failed on ${url}`);
    const out = lines.join('');
    expect(out).toMatch(/failed on redis:\/\/:\*\*\*@/);
    expect(out).not.toMatch(/wrong-s3cret-pw|sk-live-123456789/);
  });
});
