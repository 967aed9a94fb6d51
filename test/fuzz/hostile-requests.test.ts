/**
 * 10,000 malformed, oversized or hostile requests against a dispatcher on the machine's
 * Redis (`fairway up` with REDIS_URL, in this process) get only 4xx answers — OpenAI-shaped, no
 * stack trace, no 5xx, no hang — while another tenant's valid requests keep succeeding; afterwards
 * the store holds nothing the storm left behind.
 */

import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startUp, type UpHandle } from '@fairway/cli';
import { createRng, silentLogger } from '@fairway/core';
import { RedisStore, tenantScoped } from '@fairway/store';
import { redisUrl, uniquePrefix } from '@fairway/testkit';
import { Redis } from 'ioredis';
import OpenAI from 'openai';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HostileCase, HostileCases } from './support/hostile-cases.ts';

const CASES = 10_000;
const SEED = 5;
const BODY_LIMIT = 4 * 1024 * 1024;
const ATTACKER_KEY = 'sk-fuzz-attacker-key';
const ATTACKER_APP_KEY = 'sk-fuzz-attacker-app-key';
const VICTIM_KEY = 'sk-fuzz-victim-key';

/** One answer to a hostile request. */
interface Answer {
  readonly label: string;
  /** HTTP status, or 0 when the connection ended without a response. */
  readonly status: number;
  readonly body: string;
}

function isOpenAiError(body: string): boolean {
  try {
    const e = (JSON.parse(body) as { error?: Record<string, unknown> }).error;
    return (
      typeof e === 'object' &&
      e !== null &&
      typeof e.message === 'string' &&
      typeof e.type === 'string' &&
      typeof e.code === 'string' &&
      (e.param === null || typeof e.param === 'string')
    );
  } catch {
    return false;
  }
}

/** Writes raw bytes to the server and reads until it closes or a response is complete. */
function sendRaw(port: number, c: Extract<HostileCase, { kind: 'raw' }>): Promise<Answer> {
  return new Promise((resolve) => {
    const socket = tcpConnect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      const text = Buffer.concat(chunks).toString('latin1');
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(text);
      const split = text.indexOf('\r\n\r\n');
      let body = split >= 0 ? text.slice(split + 4) : '';
      if (/\r\ntransfer-encoding: chunked/i.test(text.slice(0, split))) {
        // Good enough for one small chunked body: drop the chunk-size lines.
        body = body.replace(/^[0-9a-f]+\r\n/gim, '').replace(/\r\n/g, '');
      }
      resolve({ label: c.label, status: m ? Number(m[1]) : 0, body });
    };
    // A raw request must be answered (or dropped) quickly: a stuck one is a hang.
    const timer = setTimeout(() => {
      resolve({ label: `${c.label} (HUNG)`, status: -1, body: '' });
      done = true;
      socket.destroy();
    }, 10_000);
    socket.on('data', (d: Buffer) => {
      chunks.push(d);
      const text = Buffer.concat(chunks).toString('latin1');
      const split = text.indexOf('\r\n\r\n');
      const cl = /\r\ncontent-length: (\d+)/i.exec(text.slice(0, split));
      if (split >= 0 && cl && Buffer.byteLength(text.slice(split + 4), 'latin1') >= Number(cl[1])) finish();
    });
    socket.on('end', finish);
    socket.on('close', finish);
    socket.on('error', finish);
    socket.write(c.bytes);
  });
}

async function sendHttp(pool: Pool, c: Extract<HostileCase, { kind: 'http' }>): Promise<Answer> {
  try {
    const res = await pool.request({
      method: c.method as 'POST',
      path: c.path,
      headers: c.headers,
      ...(c.body !== undefined ? { body: c.body } : {}),
    });
    return { label: c.label, status: res.statusCode, body: await res.body.text() };
  } catch (err) {
    // The server may answer a too-large body before reading it and close the connection.
    const e = err as { code?: string; message?: string };
    return { label: `${c.label} (${e.code ?? e.message})`, status: 0, body: '' };
  }
}

/** Runs `work` over `items` with at most `n` in flight. */
async function concurrently<T, R>(items: readonly T[], n: number, work: (x: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await work(items[i] as T);
      }
    }),
  );
  return out;
}

describe('a dispatcher under 10,000 hostile requests', () => {
  let up: UpHandle;
  let prefix: string;
  let redis: Redis;
  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fairway-fuzz-'));
    const configPath = join(dir, 'fairway.yaml');
    writeFileSync(
      configPath,
      JSON.stringify({
        tenants: [
          {
            id: 'attacker',
            limits: { rpm: 1_000_000, maxQueued: 1000 },
            keys: [{ key: ATTACKER_KEY }, { key: ATTACKER_APP_KEY, app: 'attack-app' }],
          },
          { id: 'victim', limits: { rpm: 1_000_000, maxQueued: 1000 }, keys: [{ key: VICTIM_KEY }] },
        ],
        apps: [{ id: 'attack-app', stages: [{ input: 10, output: 10 }] }],
        pools: [{ id: 'fuzz', model: 'llama-2-7b' }],
        policy: { ordering: 'vtc' },
      }),
    );
    prefix = uniquePrefix('fuzz');
    redis = new Redis(redisUrl());
    up = await startUp({
      configPath,
      port: 0,
      operatorPort: 0,
      engines: 1,
      speed: 50,
      redisUrl: redisUrl(),
      prefix,
      env: {},
      logger: silentLogger,
      settings: { options: { bodyLimitBytes: BODY_LIMIT } },
    });
  });
  afterAll(async () => {
    await up?.close();
    if (redis) {
      const keys = await redis.keys(`{${prefix}}:*`);
      if (keys.length > 0) await redis.del(...keys);
      await redis.quit();
    }
  });

  it('answers every one with an OpenAI-shaped 4xx while the other tenant is served, and leaves no state behind', async () => {
    const port = up.dispatcher.port;
    const gen = new HostileCases(createRng(SEED), {
      model: up.model,
      attackerKey: ATTACKER_KEY,
      attackerAppKey: ATTACKER_APP_KEY,
      victimKey: VICTIM_KEY,
      bodyLimitBytes: BODY_LIMIT,
    });
    const cases = Array.from({ length: CASES }, () => gen.next());

    // The victim: valid requests, streamed and not, for as long as the storm lasts.
    const victim = new OpenAI({
      baseURL: `${up.url}/v1`,
      apiKey: VICTIM_KEY,
      maxRetries: 0,
      timeout: 20_000,
    });
    let storming = true;
    const victimUsage: { prompt: number; completion: number }[] = [];
    // When each victim request was sent and answered: its RPM window entry (admission time) lies between.
    const victimTimes: { sentMs: number; doneMs: number }[] = [];
    const victimFailures: string[] = [];
    const victimLoop = (async () => {
      for (let i = 0; storming || i < 5; i++) {
        const sentMs = Date.now();
        try {
          if (i % 2 === 0) {
            const r = await victim.chat.completions.create({
              model: up.model,
              messages: [{ role: 'user', content: `hello ${i}` }],
              max_tokens: 8,
            });
            victimUsage.push({
              prompt: r.usage?.prompt_tokens ?? -1,
              completion: r.usage?.completion_tokens ?? -1,
            });
            victimTimes.push({ sentMs, doneMs: Date.now() });
          } else {
            const s = await victim.chat.completions.create({
              model: up.model,
              messages: [{ role: 'user', content: `stream ${i}` }],
              max_tokens: 8,
              stream: true,
              stream_options: { include_usage: true },
            });
            let usage: { prompt: number; completion: number } | undefined;
            for await (const chunk of s)
              if (chunk.usage)
                usage = { prompt: chunk.usage.prompt_tokens, completion: chunk.usage.completion_tokens };
            victimUsage.push(usage ?? { prompt: -1, completion: -1 });
            victimTimes.push({ sentMs, doneMs: Date.now() });
          }
        } catch (err) {
          victimFailures.push(String((err as Error).message));
        }
      }
    })();

    const pool = new Pool(up.url, { connections: 48, headersTimeout: 15_000, bodyTimeout: 15_000 });
    const started = Date.now();
    const http = cases.filter((c): c is Extract<HostileCase, { kind: 'http' }> => c.kind === 'http');
    const raw = cases.filter((c): c is Extract<HostileCase, { kind: 'raw' }> => c.kind === 'raw');
    const [httpAnswers, rawAnswers] = await Promise.all([
      concurrently(http, 48, (c) => sendHttp(pool, c)),
      concurrently(raw, 16, (c) => sendRaw(port, c)),
    ]);
    storming = false;
    await victimLoop;
    await pool.destroy();
    const elapsedS = (Date.now() - started) / 1000;
    const answers = [...httpAnswers, ...rawAnswers];

    // Only 4xx, each with an OpenAI-shaped body and nothing from inside the server.
    const byStatus = new Map<number, number>();
    for (const a of answers) byStatus.set(a.status, (byStatus.get(a.status) ?? 0) + 1);
    const bad = answers.filter(
      (a) =>
        !(a.status >= 400 && a.status < 500) ||
        !isOpenAiError(a.body) ||
        /\bat .+:\d+:\d+|node:internal|\/work\/|stack/i.test(a.body),
    );
    // A too-large upload may be cut off once the 413 is sent: that is the one allowed non-answer.
    const cut = bad.filter(
      (a) => a.status === 0 && /over the limit|1 MB|larger than any context/.test(a.label),
    );
    const failures = bad.filter((a) => !cut.includes(a));
    const groups = new Map<string, { n: number; example: string }>();
    for (const a of failures) {
      const k = `${a.status} ${a.label.replace(/ \(.*\)$/, '')}`;
      const g = groups.get(k) ?? { n: 0, example: a.body.slice(0, 160) };
      g.n++;
      groups.set(k, g);
    }
    const sample = [...groups].map(([k, g]) => `${g.n} × ${k}: ${g.example}`).join('\n');
    expect(answers).toHaveLength(CASES);
    expect(failures.length, `bad answers:\n${sample}`).toBe(0);
    expect(cut.length).toBeLessThan(CASES / 100);
    // The storm covered the range of refusals, not one kind.
    for (const status of [400, 401, 403, 404, 405, 413, 415])
      expect(byStatus.get(status), `status ${status}`).toBeGreaterThan(0);
    expect(elapsedS).toBeGreaterThan(0);

    // The other tenant was served throughout, with exact usage.
    expect(victimFailures).toEqual([]);
    expect(victimUsage.length).toBeGreaterThanOrEqual(5);
    for (const u of victimUsage) {
      expect(u.prompt).toBeGreaterThan(0);
      expect(u.completion).toBeGreaterThan(0);
    }

    // The process still serves, and the store holds only what the valid work left.
    expect((await fetch(`${up.url}/health`)).status).toBe(200);
    const store = up.dispatcher.infrastructure.store;
    expect(store).toBeInstanceOf(RedisStore);
    for (const band of [0, 1, 2]) {
      const snap = await store.snapshot('fuzz', band);
      expect(snap.backlogged).toEqual([]);
      expect(snap.queued).toEqual({});
      // Nothing from the attacker was ever admitted, so it has no counter at all.
      expect(snap.counters.attacker).toBeUndefined();
    }
    // VTC, linear cost 1·input + 2·output, weight 1: the victim's counter is exactly its usage.
    const victimCost = victimUsage.reduce((a, u) => a + u.prompt + 2 * u.completion, 0);
    expect((await store.snapshot('fuzz', 0)).counters.victim).toBe(victimCost);
    for (const replica of up.agents.map((a) => a.agent.replicaId))
      expect(await store.reserved(replica)).toEqual({ tokens: 0, seqs: 0 });
    const keys = (store as RedisStore).keys;
    expect(await redis.keys(keys.key('req', '*'))).toEqual([]);
    expect(Number(await redis.get(keys.key('poolQueued', 'fuzz')))).toBe(0);
    // Windows are the tenant's own (store layout 3: keyed by tenant).
    const window = (tenant: string): string =>
      keys.key('windowSums', tenantScoped(tenant, `rpm:tenant:${tenant}`));
    expect(await redis.hget(window('attacker'), 't')).toBeNull();
    // Every admitted victim request is counted once in its sliding 60 s window: all of them while the
    // run is shorter than the window; on a slow machine the oldest have aged out, so the count lies
    // between those sent and those answered within the last 60 s (a window's entries leave at the
    // end of their 1 s bucket, up to a second later).
    const windowStart = Date.now() - 60_000;
    const victimWindow = Number(await redis.hget(window('victim'), 't'));
    expect(victimWindow).toBeGreaterThanOrEqual(
      victimTimes.filter((t) => t.sentMs > windowStart + 1000).length,
    );
    expect(victimWindow).toBeLessThanOrEqual(victimTimes.filter((t) => t.doneMs > windowStart - 2000).length);
    console.log(
      `hostile requests: ${CASES} in ${elapsedS.toFixed(1)} s; statuses ${JSON.stringify(Object.fromEntries([...byStatus].sort((a, b) => a[0] - b[0])))}; victim served ${victimUsage.length}`,
    );
  }, 180_000);
});
