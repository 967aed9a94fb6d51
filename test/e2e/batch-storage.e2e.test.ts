import { mkdtempSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { BatchKeys } from '@fairway/batch';
import { startUp, type UpHandle } from '@fairway/cli';
import { createLogger } from '@fairway/core';
import { startRedisServer, type TestServer } from '@fairway/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * The Files and Batch API's storage limits over real HTTP: `fairway up` on a throw-away Redis of
 * the test's own (its `maxmemory` is changed here), tenants with small quotas of their own.
 */
const CONFIG = `
tenants:
  - { id: counted, keys: [{ key: sk-storage-counted }], storage: { maxFiles: 3 } }
  - { id: sized, keys: [{ key: sk-storage-sized }], storage: { maxBytes: 10000 } }
  - { id: brief, keys: [{ key: sk-storage-brief }], storage: { fileRetentionDays: 1 } }
  - { id: hasty, keys: [{ key: sk-storage-hasty }], limits: { rpm: 3 } }
  - { id: other, keys: [{ key: sk-storage-other }] }
  - { id: bulky, keys: [{ key: sk-storage-bulky }] }
pools:
  - { id: llama, model: llama-2-7b }
policy:
  ordering: vtc
  placement: least-kv
  queueTimeoutS: 30
`;

/** `n` request lines of about `pad` bytes each. */
function jsonl(n: number, tag: string, pad = 0): string {
  return Array.from({ length: n }, (_, i) => line(`${tag}-${i}`, pad)).join('\n');
}

function line(id: string, pad = 0): string {
  return JSON.stringify({
    custom_id: id,
    method: 'POST',
    url: '/v1/chat/completions',
    body: {
      model: 'llama-2-7b',
      messages: [{ role: 'user', content: `hi ${'x'.repeat(pad)}` }],
      max_tokens: 4,
    },
  });
}

interface Answer {
  status: number;
  headers: Headers;
  body: {
    id?: string;
    bytes?: number;
    created_at?: number;
    expires_at?: number | null;
    error?: { code: string; message: string; type: string };
  };
}

describe('Files API storage limits', () => {
  let redisServer: TestServer;
  let redis: Redis;
  let up: UpHandle;
  const keys = new BatchKeys('fairway');

  async function call(key: string, path: string, init: RequestInit = {}): Promise<Answer> {
    const res = await fetch(`${up.url}${path}`, {
      ...init,
      headers: { authorization: `Bearer ${key}`, ...(init.headers ?? {}) },
    });
    const text = await res.text();
    return { status: res.status, headers: res.headers, body: text === '' ? {} : JSON.parse(text) };
  }

  function upload(key: string, text: string, extra: Record<string, string> = {}): Promise<Answer> {
    const form = new FormData();
    form.append('purpose', 'batch');
    for (const [k, v] of Object.entries(extra)) form.append(k, v);
    form.append('file', new Blob([text]), 'in.jsonl');
    return call(key, '/v1/files', { method: 'POST', body: form });
  }

  function chat(key: string): Promise<Answer> {
    return call(key, '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'llama-2-7b',
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 2,
      }),
    });
  }

  async function storedBytes(tenant: string): Promise<number> {
    return Number((await redis.hget(keys.tenantStorage(tenant), 'bytes')) ?? '0');
  }

  beforeAll(async () => {
    redisServer = await startRedisServer();
    redis = new Redis(redisServer.url);
    const dir = mkdtempSync(join(tmpdir(), 'fairway-storage-'));
    const configPath = join(dir, 'fairway.yaml');
    writeFileSync(configPath, CONFIG);
    up = await startUp({
      configPath,
      redisUrl: redisServer.url,
      port: 0,
      operatorPort: 0,
      env: {},
      speed: 20,
      logger: createLogger({ level: 'warn', name: 'batch-storage-e2e' }),
    });
  }, 60_000);

  afterAll(async () => {
    await up?.close();
    redis?.disconnect();
    await redisServer?.stop();
  });

  it('refuses a file past the file count with 429 naming the limit, while another tenant uploads and chats', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const ok = await upload('sk-storage-counted', jsonl(2, `c${i}`));
      expect(ok.status).toBe(200);
      ids.push(ok.body.id ?? '');
    }
    const refused = await upload('sk-storage-counted', jsonl(2, 'c3'));
    expect(refused.status).toBe(429);
    expect(refused.body.error).toMatchObject({ code: 'storage_quota_exceeded', type: 'insufficient_quota' });
    expect(refused.body.error?.message).toMatch(
      /file count quota reached: tenant counted holds 3 files, its limit is 3/,
    );
    expect((await upload('sk-storage-other', jsonl(2, 'o'))).status).toBe(200);
    expect((await chat('sk-storage-other')).status).toBe(200);
    // Deleting a file frees its place.
    expect((await call('sk-storage-counted', `/v1/files/${ids[0]}`, { method: 'DELETE' })).status).toBe(200);
    expect((await upload('sk-storage-counted', jsonl(2, 'c4'))).status).toBe(200);
  });

  it('refuses bytes past the byte quota with 429, keeps nothing of the refused upload, and frees bytes on delete', async () => {
    const text = jsonl(30, 's', 100); // about 6 KB
    const first = await upload('sk-storage-sized', text);
    expect(first.status).toBe(200);
    expect(await storedBytes('sized')).toBe(Buffer.byteLength(text));
    const refused = await upload('sk-storage-sized', jsonl(30, 't', 100));
    expect(refused.status).toBe(429);
    expect(refused.body.error?.code).toBe('storage_quota_exceeded');
    expect(refused.body.error?.message).toMatch(
      new RegExp(
        `storage quota reached: tenant sized's files hold ${Buffer.byteLength(text)} bytes, .*its limit is 10000 bytes`,
      ),
    );
    // The refused upload's pieces are gone, and uncounted.
    expect(await storedBytes('sized')).toBe(Buffer.byteLength(text));
    expect(await redis.zcard(keys.tenantFileExpiry('sized'))).toBe(1);
    // A file larger than the whole quota is refused from its Content-Length alone.
    const huge = await upload('sk-storage-sized', jsonl(100, 'h', 100));
    expect(huge.status).toBe(413);
    expect(huge.body.error?.message).toMatch(/larger than tenant sized's whole storage quota of 10000 bytes/);
    expect((await call('sk-storage-sized', `/v1/files/${first.body.id}`, { method: 'DELETE' })).status).toBe(
      200,
    );
    expect(await storedBytes('sized')).toBe(0);
    expect((await upload('sk-storage-sized', jsonl(30, 'u', 100))).status).toBe(200);
  });

  it('deletes a file past its expiry, uncounting its bytes; expires_after is capped by the retention', async () => {
    const capped = await upload('sk-storage-brief', jsonl(2, 'cap'), {
      'expires_after[anchor]': 'created_at',
      'expires_after[seconds]': String(30 * 86_400),
    });
    expect(capped.status).toBe(200);
    expect((capped.body.expires_at ?? 0) - (capped.body.created_at ?? 0)).toBe(86_400);
    const text = jsonl(3, 'short');
    const short = await upload('sk-storage-brief', text, {
      'expires_after[anchor]': 'created_at',
      'expires_after[seconds]': '1',
    });
    expect(short.status).toBe(200);
    expect(short.body.expires_at).toBe((short.body.created_at ?? 0) + 1);
    const id = short.body.id ?? '';
    expect(await storedBytes('brief')).toBe(Buffer.byteLength(jsonl(2, 'cap')) + Buffer.byteLength(text));
    await new Promise((r) => setTimeout(r, 2100));
    expect((await call('sk-storage-brief', `/v1/files/${id}`)).status).toBe(404);
    expect((await call('sk-storage-brief', `/v1/files/${id}/content`)).status).toBe(404);
    const list = await fetch(`${up.url}/v1/files`, { headers: { authorization: 'Bearer sk-storage-brief' } });
    const ids = ((await list.json()) as { data: { id: string }[] }).data.map((f) => f.id);
    expect(ids).toEqual([capped.body.id]);
    // The listing purged it: its keys are gone and its bytes no longer count.
    expect(await redis.exists(keys.file(id), keys.fileChunks(id))).toBe(0);
    expect(await storedBytes('brief')).toBe(Buffer.byteLength(jsonl(2, 'cap')));
  });

  it('counts uploads against the tenant rate limit (its rpm caps the upload rate)', async () => {
    for (let i = 0; i < 3; i++)
      expect((await upload('sk-storage-hasty', jsonl(1, `r${i}`))).status).toBe(200);
    const refused = await upload('sk-storage-hasty', jsonl(1, 'r3'));
    expect(refused.status).toBe(429);
    expect(refused.body.error).toMatchObject({ code: 'rate_limit_exceeded', type: 'requests' });
    expect(refused.body.error?.message).toMatch(
      /upload rate limit reached: tenant hasty made 3 uploads in the last 60 s, its limit is 3 per minute/,
    );
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
  });

  it('refuses new files and batches with 507 while Redis is nearly full, and chat goes on', async () => {
    const kept = await upload('sk-storage-other', jsonl(2, 'g'));
    expect(kept.status).toBe(200);
    const used = Number(/used_memory:(\d+)/.exec(await redis.info('memory'))?.[1]);
    // 90% full: past the default threshold of 80%, with room left for chat's writes.
    await redis.config('SET', 'maxmemory', String(Math.ceil(used / 0.9)));
    try {
      await new Promise((r) => setTimeout(r, 1100));
      const refused = await upload('sk-storage-other', jsonl(2, 'g2'));
      expect(refused.status).toBe(507);
      expect(refused.body.error).toMatchObject({ code: 'insufficient_storage', type: 'server_error' });
      expect(refused.body.error?.message).toMatch(/storage is nearly full .* refused above 80%/);
      const batch = await call('sk-storage-other', '/v1/batches', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          input_file_id: kept.body.id,
          endpoint: '/v1/chat/completions',
          completion_window: '24h',
        }),
      });
      expect(batch.status).toBe(507);
      expect((await chat('sk-storage-other')).status).toBe(200);
    } finally {
      await redis.config('SET', 'maxmemory', '0');
    }
    await new Promise((r) => setTimeout(r, 1100));
    expect((await upload('sk-storage-other', jsonl(2, 'g3'))).status).toBe(200);
  });

  it('streams a 30 MiB upload to Redis without holding it: the heap grows by far less than the file', async () => {
    const lineText = `${line('m-0', 1000)}\n`;
    const lines = Math.floor((30 * 1024 * 1024) / lineText.length);
    const boundary = 'fairwayStorageBoundary';
    const head = Buffer.from(
      `--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n` +
        `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\nContent-Type: application/jsonl\r\n\r\n`,
    );
    const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
    const lineBytes = (i: number) => Buffer.from(`${line(`m-${i}`, 1000)}\n`);
    let fileBytes = 0;
    for (let i = 0; i < lines; i++) fileBytes += lineBytes(i).length;
    // A first upload compiles the code on its path: its code objects are no part of what a file costs.
    expect((await upload('sk-storage-bulky', jsonl(2000, 'warm', 1000))).status).toBe(200);
    // What is live, not garbage not yet collected: collect before each reading.
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const memory = () => {
      gc();
      const m = process.memoryUsage();
      return m.heapUsed + m.arrayBuffers;
    };
    const baseline = memory();
    let peak = baseline;
    const sampler = setInterval(() => {
      peak = Math.max(peak, memory());
    }, 20);
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const url = new URL(`${up.url}/v1/files`);
      const req = httpRequest(
        {
          host: url.hostname,
          port: url.port,
          path: url.pathname,
          method: 'POST',
          headers: {
            authorization: 'Bearer sk-storage-bulky',
            'content-type': `multipart/form-data; boundary=${boundary}`,
            'content-length': String(head.length + fileBytes + tail.length),
          },
        },
        (res) => {
          let body = '';
          res.on('data', (c) => {
            body += c;
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        },
      );
      req.on('error', reject);
      let i = 0;
      const write = () => {
        if (i === 0) req.write(head);
        while (i < lines) {
          const batch: Buffer[] = [];
          for (let k = 0; k < 64 && i < lines; k++, i++) batch.push(lineBytes(i));
          if (!req.write(Buffer.concat(batch))) {
            req.once('drain', write);
            return;
          }
        }
        req.end(tail);
      };
      write();
    });
    clearInterval(sampler);
    peak = Math.max(peak, memory());
    expect(answer.status, answer.body).toBe(200);
    const file = JSON.parse(answer.body) as { id: string; bytes: number };
    expect(file.bytes).toBe(fileBytes);
    const growthMiB = (peak - baseline) / 1024 / 1024;
    expect(growthMiB, `heap + array buffers grew by ${growthMiB.toFixed(1)} MiB`).toBeLessThan(10);
    // The download streams it back whole.
    const res = await fetch(`${up.url}/v1/files/${file.id}/content`, {
      headers: { authorization: 'Bearer sk-storage-bulky' },
    });
    expect(res.headers.get('content-length')).toBe(String(fileBytes));
    let got = 0;
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) got += chunk.length;
    expect(got).toBe(fileBytes);
  }, 120_000);
});
