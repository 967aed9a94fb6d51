import { BatchKeys } from '@fairway/batch';
import { startUp, type UpHandle } from '@fairway/cli';
import { createLogger } from '@fairway/core';
import { startRedisServer, type TestServer } from '@fairway/testkit';
import { Redis } from 'ioredis';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * The Batch API as a user of the official `openai` client meets it: `fairway up` on a throw-away
 * Redis (BullMQ's jobs and the batch state there) with two simulated engines; files.create →
 * batches.create → batches.retrieve until done → files.content of the output.
 */
const KEY_ACME = 'sk-fairway-acme-demo';
const KEY_GLOBEX = 'sk-fairway-globex-demo';
/** The upload limit these tests set (FAIRWAY_BATCH_MAX_FILE_BYTES). */
const MAX_FILE_BYTES = 1_000_000;

function jsonl(n: number, tag: string): string {
  return Array.from({ length: n }, (_, i) =>
    JSON.stringify({
      custom_id: `${tag}-${i}`,
      method: 'POST',
      url: '/v1/chat/completions',
      body: { model: 'llama-2-7b', messages: [{ role: 'user', content: `hello ${i}` }], max_tokens: 8 },
    }),
  ).join('\n');
}

/** Uploads `text` as a batch input file and creates a batch of it. */
async function submit(client: OpenAI, text: string, endpoint: '/v1/chat/completions' | '/v1/completions') {
  const file = await client.files.create({
    file: await toFile(Buffer.from(text), 'input.jsonl'),
    purpose: 'batch',
  });
  return client.batches.create({ input_file_id: file.id, endpoint, completion_window: '24h' });
}

async function waitDone(client: OpenAI, id: string, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const b = await client.batches.retrieve(id);
    if (['completed', 'failed', 'cancelled', 'expired'].includes(b.status)) return b;
    if (Date.now() > deadline)
      throw new Error(`batch ${id} still ${b.status}: ${JSON.stringify(b.request_counts)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('the Batch API through the openai client', () => {
  let redisServer: TestServer;
  let up: UpHandle;
  let acme: OpenAI;
  let globex: OpenAI;

  beforeAll(async () => {
    redisServer = await startRedisServer();
    up = await startUp({
      redisUrl: redisServer.url,
      port: 0,
      operatorPort: 0,
      env: { FAIRWAY_BATCH_MAX_FILE_BYTES: String(MAX_FILE_BYTES) },
      speed: 20,
      logger: createLogger({ level: 'warn', name: 'batch-e2e' }),
    });
    acme = new OpenAI({ apiKey: KEY_ACME, baseURL: `${up.url}/v1`, maxRetries: 0 });
    globex = new OpenAI({ apiKey: KEY_GLOBEX, baseURL: `${up.url}/v1`, maxRetries: 0 });
  }, 60_000);

  afterAll(async () => {
    await up?.close();
    await redisServer?.stop();
  });

  it('answers every line once, in a completed batch with the right counts', async () => {
    const file = await acme.files.create({
      file: await toFile(Buffer.from(jsonl(40, 'req')), 'in.jsonl'),
      purpose: 'batch',
    });
    expect(file).toMatchObject({
      object: 'file',
      purpose: 'batch',
      filename: 'in.jsonl',
      status: 'processed',
    });
    const created = await acme.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
      metadata: { run: 'e2e' },
    });
    expect(created).toMatchObject({ object: 'batch', status: 'validating', input_file_id: file.id });
    const done = await waitDone(acme, created.id);
    expect(done.status).toBe('completed');
    expect(done.request_counts).toEqual({ total: 40, completed: 40, failed: 0 });
    expect(done.in_progress_at).not.toBeNull();
    expect(done.finalizing_at).not.toBeNull();
    expect(done.completed_at).not.toBeNull();
    expect(done.error_file_id).toBeNull();
    expect(done.metadata).toEqual({ run: 'e2e' });
    const text = await (await acme.files.content(done.output_file_id!)).text();
    const lines = text
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.map((l) => l.custom_id)).toEqual(Array.from({ length: 40 }, (_, i) => `req-${i}`));
    for (const l of lines) {
      expect(l.error).toBeNull();
      expect(l.response.status_code).toBe(200);
      expect(l.response.request_id).toMatch(/.+/);
      expect(l.response.body.object).toBe('chat.completion');
      expect(l.response.body.usage.completion_tokens).toBeGreaterThan(0);
    }
    const list = await acme.batches.list();
    expect(list.data.map((b) => b.id)).toContain(created.id);
  });

  it('puts lines the route refuses in the error file, with their status and body', async () => {
    const bad = [
      JSON.stringify({
        custom_id: 'good',
        method: 'POST',
        url: '/v1/chat/completions',
        body: { model: 'llama-2-7b', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 },
      }),
      JSON.stringify({
        custom_id: 'no-model',
        method: 'POST',
        url: '/v1/chat/completions',
        body: { model: 'gpt-nope', messages: [{ role: 'user', content: 'hi' }] },
      }),
    ].join('\n');
    const b = await waitDone(acme, (await submit(acme, bad, '/v1/chat/completions')).id);
    expect(b.status).toBe('completed');
    expect(b.request_counts).toEqual({ total: 2, completed: 1, failed: 1 });
    const errors = (await (await acme.files.content(b.error_file_id!)).text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({
      custom_id: 'no-model',
      response: { status_code: 404, body: { error: { code: 'model_not_found' } } },
    });
  });

  it('cancels a running batch: it ends cancelled, and what ran is in its output', async () => {
    const created = await submit(acme, jsonl(2000, 'c'), '/v1/chat/completions');
    // Cancel once it runs and some lines are done.
    for (const deadline = Date.now() + 30_000; ; ) {
      const b = await acme.batches.retrieve(created.id);
      if ((b.request_counts?.completed ?? 0) >= 5) break;
      if (Date.now() > deadline) throw new Error(`batch never ran: ${b.status}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const cancelling = await acme.batches.cancel(created.id);
    expect(['cancelling', 'cancelled']).toContain(cancelling.status);
    const done = await waitDone(acme, created.id);
    // Cancelling again answers the batch as it is.
    expect((await acme.batches.cancel(created.id)).status).toBe('cancelled');
    expect(done.status).toBe('cancelled');
    expect(done.cancelling_at).not.toBeNull();
    expect(done.cancelled_at).not.toBeNull();
    const counts = done.request_counts!;
    expect(counts.total).toBe(2000);
    expect(counts.completed).toBeGreaterThanOrEqual(5);
    expect(counts.completed).toBeLessThan(2000);
    // What ran before the cancel is in the output, once per line.
    const out = done.output_file_id
      ? (await (await acme.files.content(done.output_file_id)).text()).trim().split('\n')
      : [];
    expect(out).toHaveLength(counts.completed);
    expect(new Set(out.map((l) => JSON.parse(l).custom_id)).size).toBe(out.length);
  });

  it('expires a batch whose window ends: the lines not run are in the error file as batch_expired', async () => {
    const created = await submit(acme, jsonl(1000, 'x'), '/v1/chat/completions');
    for (const deadline = Date.now() + 30_000; ; ) {
      const b = await acme.batches.retrieve(created.id);
      if ((b.request_counts?.completed ?? 0) >= 3) break;
      if (Date.now() > deadline) throw new Error(`batch never ran: ${b.status}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    // 24 hours pass: the stored end of the window moves to the past.
    const redis = new Redis(redisServer.url);
    await redis.hset(`${new BatchKeys('fairway').batch(created.id)}`, 'expires_at', '1');
    redis.disconnect();
    const done = await waitDone(acme, created.id);
    expect(done.status).toBe('expired');
    expect(done.expired_at).not.toBeNull();
    const counts = done.request_counts!;
    expect(counts.completed).toBeGreaterThanOrEqual(3);
    expect(counts.completed).toBeLessThan(1000);
    const out = done.output_file_id
      ? (await (await acme.files.content(done.output_file_id)).text()).trim().split('\n')
      : [];
    const errors = (await (await acme.files.content(done.error_file_id!)).text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { custom_id: string; response: unknown; error: { code: string } });
    expect(out).toHaveLength(counts.completed);
    expect(errors.every((e) => e.response === null && e.error.code === 'batch_expired')).toBe(true);
    // Every line once: answered, or expired.
    const ids = [
      ...out.map((l) => (JSON.parse(l) as { custom_id: string }).custom_id),
      ...errors.map((e) => e.custom_id),
    ];
    expect(ids.sort()).toEqual(Array.from({ length: 1000 }, (_, i) => `x-${i}`).sort());
  });

  it('cancels a batch still validating: it ends cancelled with no output', async () => {
    const created = await submit(acme, jsonl(50, 'v'), '/v1/chat/completions');
    await acme.batches.cancel(created.id);
    const done = await waitDone(acme, created.id);
    expect(done.status).toBe('cancelled');
    expect(done.request_counts!.completed).toBeLessThanOrEqual(50);
  });

  it('fails a batch whose lines target another endpoint than its own, naming the line', async () => {
    const created = await submit(acme, jsonl(3, 'm'), '/v1/completions');
    const done = await waitDone(acme, created.id);
    expect(done.status).toBe('failed');
    expect(done.failed_at).not.toBeNull();
    expect(done.errors?.data?.[0]).toMatchObject({ code: 'mismatched_endpoint', line: 1 });
  });

  it("keeps a tenant's files and batches from every other tenant (404, as if absent)", async () => {
    const file = await acme.files.create({
      file: await toFile(Buffer.from(jsonl(2, 'iso')), 'mine.jsonl'),
      purpose: 'batch',
    });
    const batch = await acme.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
    });
    await expect(globex.files.retrieve(file.id)).rejects.toMatchObject({ status: 404 });
    await expect(globex.files.content(file.id)).rejects.toMatchObject({ status: 404 });
    await expect(globex.files.delete(file.id)).rejects.toMatchObject({ status: 404 });
    await expect(globex.batches.retrieve(batch.id)).rejects.toMatchObject({ status: 404 });
    await expect(globex.batches.cancel(batch.id)).rejects.toMatchObject({ status: 404 });
    // Nor may it run a batch on another tenant's file.
    await expect(
      globex.batches.create({
        input_file_id: file.id,
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
      }),
    ).rejects.toMatchObject({ status: 404 });
    expect((await globex.files.list()).data.map((f) => f.id)).not.toContain(file.id);
    expect((await globex.batches.list()).data.map((b) => b.id)).not.toContain(batch.id);
    // The owner still has both, untouched.
    expect((await acme.files.retrieve(file.id)).id).toBe(file.id);
    expect((await waitDone(acme, batch.id)).status).toBe('completed');
  });

  it('refuses bad upload files line by line with OpenAI-style 400s', async () => {
    const cases: Array<[string, RegExp]> = [
      [
        '{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}\n{not json',
        /line 2: not valid JSON/,
      ],
      [`${jsonl(1, 'd')}\n${jsonl(1, 'd')}`, /line 2: duplicate custom_id "d-0"/],
      [
        '{"custom_id":"a","method":"POST","url":"/v1/responses","body":{"model":"m"}}',
        /line 1: url must be one of/,
      ],
      [
        '{"custom_id":"a","method":"GET","url":"/v1/completions","body":{"model":"m"}}',
        /line 1: method must be "POST"/,
      ],
      ['\n\n', /no request lines/],
    ];
    for (const [text, message] of cases) {
      const err = await acme.files
        .create({ file: await toFile(Buffer.from(text), 'bad.jsonl'), purpose: 'batch' })
        .catch((e) => e);
      expect(err).toMatchObject({ status: 400, type: 'invalid_request_error', param: 'file' });
      expect(err.message).toMatch(message);
    }
    const tooLarge = await acme.files
      .create({ file: await toFile(Buffer.from(jsonl(8000, 'big')), 'big.jsonl'), purpose: 'batch' })
      .catch((e) => e);
    expect(jsonl(8000, 'big').length).toBeGreaterThan(MAX_FILE_BYTES);
    expect(tooLarge).toMatchObject({ status: 413, param: 'file' });
    expect(tooLarge.message).toMatch(`at most ${MAX_FILE_BYTES} bytes`);
    const wrongPurpose = await acme.files
      .create({ file: await toFile(Buffer.from(jsonl(1, 'p')), 'x.jsonl'), purpose: 'assistants' })
      .catch((e) => e);
    expect(wrongPurpose).toMatchObject({ status: 400, param: 'purpose' });
    const res = await fetch(`${up.url}/v1/batches`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY_ACME}`, 'content-type': 'application/json' },
      body: JSON.stringify({ input_file_id: 'file-x', endpoint: '/v1/responses', completion_window: '24h' }),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: unknown }).error).toMatchObject({
      type: 'invalid_request_error',
      param: 'endpoint',
    });
    const anon = await fetch(`${up.url}/v1/files`);
    expect(anon.status).toBe(401);
  });
});

describe('the Batch API without Redis (fairway up on the in-memory store)', () => {
  let up: UpHandle;

  beforeAll(async () => {
    up = await startUp({
      port: 0,
      operatorPort: 0,
      env: {},
      logger: createLogger({ level: 'warn', name: 'batch-e2e' }),
    });
  }, 60_000);

  afterAll(async () => {
    await up?.close();
  });

  it('answers 501 with what to do, after authenticating', async () => {
    const client = new OpenAI({ apiKey: KEY_ACME, baseURL: `${up.url}/v1`, maxRetries: 0 });
    const err = await client.batches.list().catch((e) => e);
    expect(err).toMatchObject({ status: 501, code: 'not_implemented' });
    expect(err.message).toMatch(/needs Redis: start fairway with REDIS_URL/);
    const anon = await fetch(`${up.url}/v1/batches`);
    expect(anon.status).toBe(401);
  });
});
