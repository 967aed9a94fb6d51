import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../src/json-body.ts';
import { type Stack, startStack } from './support/stack.ts';

const MODEL = 'llama-2-7b';
const KEY = 'sk-test-hostile-0001';
const auth = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };

function chatBytes(content: Buffer): Buffer {
  const [head, tail] = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: '@' }] }).split(
    '@',
  );
  return Buffer.concat([Buffer.from(head ?? ''), content, Buffer.from(tail ?? '')]);
}

/** Sends raw bytes and returns what the server wrote before closing. */
function raw(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1');
    let out = '';
    s.on('data', (d: Buffer) => {
      out += d.toString('latin1');
    });
    s.on('close', () => resolve(out));
    s.on('error', reject);
    s.write(text, 'latin1');
  });
}

describe('nestsDeeperThan', () => {
  it('counts arrays and objects but not brackets inside strings', () => {
    expect(nestsDeeperThan(Buffer.from('{"a":[[1]]}'), 3)).toBe(false);
    expect(nestsDeeperThan(Buffer.from('{"a":[[[1]]]}'), 3)).toBe(true);
    expect(nestsDeeperThan(Buffer.from('{"a":"[[[[\\"[[[["}'), 1)).toBe(false);
  });
});

describe('dispatcher input hardening', () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startStack({
      config: { tenants: [{ id: 't', keys: [{ key: KEY }] }], pools: [{ id: 'llama', model: MODEL }] },
    });
  });
  afterAll(async () => {
    await s?.close();
  });

  it('refuses a body that is not UTF-8 instead of forwarding replaced text', async () => {
    const res = await s.dispatchers[0]!.dispatcher.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: auth,
      payload: chatBytes(Buffer.from([0x68, 0xc3, 0x28])),
    });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({
      error: { code: 'invalid_json', message: 'request body is not valid UTF-8' },
    });
  });

  it(`refuses a body nested deeper than ${MAX_JSON_DEPTH} levels, even in a field it forwards to the engine`, async () => {
    const deep = `${'['.repeat(10_000)}${']'.repeat(10_000)}`;
    const body = JSON.stringify({
      model: MODEL,
      messages: [{ role: 'user', content: 'x' }],
      guided_json: 'X',
    }).replace('"X"', deep);
    const res = await s.dispatchers[0]!.dispatcher.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: auth,
      payload: body,
    });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ error: { code: 'invalid_json' } });
  });

  it('answers a URL that does not decode with an OpenAI-shaped 400', async () => {
    const res = await s.dispatchers[0]!.dispatcher.app.inject({
      method: 'GET',
      url: '/v1/%zz',
      headers: auth,
    });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ error: { type: 'invalid_request_error', code: 'invalid_request' } });
  });

  it('answers malformed HTTP and missing Host in the same shape, and closes the connection', async () => {
    const port = s.dispatchers[0]!.port;
    const smuggled = await raw(
      port,
      'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
    );
    expect(smuggled).toMatch(/^HTTP\/1\.1 400 /);
    expect(JSON.parse(smuggled.slice(smuggled.indexOf('\r\n\r\n') + 4))).toMatchObject({
      error: { code: 'invalid_request', message: 'malformed HTTP request' },
    });
    const big = await raw(port, `GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Pad: ${'p'.repeat(20_000)}\r\n\r\n`);
    expect(big).toMatch(/^HTTP\/1\.1 431 /);
    const noHost = await raw(
      port,
      `GET /v1/models HTTP/1.1\r\nAuthorization: Bearer ${KEY}\r\nConnection: close\r\n\r\n`,
    );
    expect(noHost).toMatch(/^HTTP\/1\.1 400 /);
    expect(noHost).toContain('"param":"host"');
  });
});
