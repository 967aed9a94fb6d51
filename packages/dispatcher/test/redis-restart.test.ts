import { STORE_LAYOUT_VERSION } from '@fairway/store';
import { type RestartableRedisServer, startRestartableRedisServer } from '@fairway/testkit';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { type Stack, startStack, waitFor } from './support/stack.ts';

const MODEL = 'llama-2-7b';
const KEY = 'sk-restart-alpha-0001';
/** Each engine runs at most this many sequences (its agent announces it). */
const SEQS = 2;
const RPM = 20;
const CONFIG = {
  tenants: [{ id: 'alpha', keys: [{ key: KEY }], limits: { rpm: RPM } }],
  pools: [{ id: 'llama', model: MODEL }],
  policy: { ordering: 'vtc', placement: 'least-kv', queueTimeoutS: 15 },
};

interface Answer {
  readonly status: number;
  readonly body: string;
}

async function send(url: string, outputTokens: number): Promise<Answer> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      model: MODEL,
      messages: [{ role: 'user', content: 'x'.repeat(36) }],
      max_tokens: outputTokens,
      fairway_output_tokens: outputTokens,
    }),
  });
  return { status: res.status, body: await res.text() };
}

/** Running plus waiting sequences an engine reports on `/metrics`. */
async function engineLoad(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  let n = 0;
  for (const m of text.matchAll(/^vllm:num_requests_(?:running|waiting)\{[^}]*\} (\d+)/gm)) n += Number(m[1]);
  return n;
}

/**
 * Redis restarts under load (DESIGN.md failure model): the dispatchers notice that the store's
 * state vanished, put back every request whose client they hold, rebuild the windows from what
 * they admitted and write the layout marker back. A real redis-server on its own port, restarted
 * on that port; two dispatchers, two engine-sims with their agents, real HTTP.
 */
describe('dispatchers across a Redis restart', () => {
  let server: RestartableRedisServer | undefined;
  let stack: Stack | undefined;
  afterEach(async () => {
    await stack?.close();
    await server?.stop();
    stack = undefined;
    server = undefined;
  });

  it('answers every queued and running request, keeps the RPM window and writes the layout back (no persistence)', async () => {
    server = await startRestartableRedisServer({ aof: false });
    const s = await startStack({
      config: CONFIG,
      redisUrl: server.url,
      dispatchers: 2,
      // Slow enough that requests still run and wait when Redis is back.
      engines: [
        { maxNumSeqs: SEQS, speed: 2 },
        { maxNumSeqs: SEQS, speed: 2 },
      ],
      options: { leaseMs: 3000 },
    });
    stack = s;
    const urls = s.dispatchers.map((d) => d.url);
    const stats = () => s.dispatchers.map((d) => d.dispatcher.runtime.stats());

    const wave1 = Array.from({ length: 12 }, (_, i) => send(urls[i % 2] as string, 60));
    // Every request admitted (a request still being admitted when Redis goes is answered 503),
    // and some of them waiting for an engine.
    await waitFor(
      () =>
        stats().reduce((n, x) => n + x.admitted, 0) === 12 && stats().reduce((n, x) => n + x.queued, 0) >= 4,
      10_000,
      'requests admitted and queued',
    );
    const held = stats().map((x) => x.queued + x.running);
    await server.restart({ downMs: 300 });

    // Engines are watched from the restart on: how often one runs more than it was given.
    let watching = true;
    let samples = 0;
    let over = 0;
    const watch = (async () => {
      while (watching) {
        const loads = await Promise.all(s.sims.map((sim) => engineLoad(sim.url).catch(() => 0)));
        samples++;
        if (loads.some((l) => l > SEQS)) over++;
        await new Promise((r) => setTimeout(r, 25));
      }
    })();

    let wave2: Answer[];
    try {
      const answers = await Promise.all(wave1);
      for (const a of answers) expect(a, a.body).toMatchObject({ status: 200 });
      for (const [i, x] of stats().entries()) {
        expect(x.repairs, `dispatcher ${i + 1} repaired`).toBeGreaterThanOrEqual(1);
        // What each still held when the store came back (some finished while it was down).
        expect(x.restored).toBeLessThanOrEqual(held[i] as number);
      }
      expect(stats().reduce((n, x) => n + x.restored, 0)).toBeGreaterThanOrEqual(4);
      // The window still counts the 12 admitted before the restart: only RPM − 12 more fit.
      wave2 = await Promise.all(Array.from({ length: 12 }, (_, i) => send(urls[i % 2] as string, 5)));
    } finally {
      watching = false;
      await watch;
    }
    expect(wave2.filter((a) => a.status === 200)).toHaveLength(RPM - 12);
    expect(wave2.filter((a) => a.status === 429)).toHaveLength(12 - (RPM - 12));
    // Restored requests are re-reserved where they run: no engine was handed more than it takes.
    expect(samples).toBeGreaterThan(0);
    expect(over).toBe(0);

    const redis = new Redis(server.url);
    try {
      expect(await redis.get(`{${s.prefix}}:layout`)).toBe(String(STORE_LAYOUT_VERSION));
      for (const r of s.replicas) expect(await s.store.reserved(r)).toEqual({ tokens: 0, seqs: 0 });
    } finally {
      redis.disconnect();
    }
  }, 60_000);

  it('loses nothing when Redis persists with an append-only file: what dispatchers hold is checked, nothing put back', async () => {
    server = await startRestartableRedisServer({ aof: true });
    const s = await startStack({
      config: CONFIG,
      redisUrl: server.url,
      engines: [{ maxNumSeqs: SEQS, speed: 2 }],
      options: { leaseMs: 3000 },
    });
    stack = s;
    const url = s.dispatchers[0]?.url as string;
    const stats = () => s.dispatchers[0]?.dispatcher.runtime.stats();
    const wave1 = Array.from({ length: 8 }, () => send(url, 60));
    await waitFor(
      () => stats()?.admitted === 8 && (stats()?.queued ?? 0) >= 4,
      10_000,
      'requests admitted and queued',
    );
    await server.restart({ downMs: 300 });
    for (const a of await Promise.all(wave1)) expect(a, a.body).toMatchObject({ status: 200 });
    // The reconnection makes the dispatcher put back what it holds; the store still had all of it.
    await waitFor(() => (stats()?.repairs ?? 0) >= 1, 5000, 'the check after the reconnection');
    expect(stats()?.restored).toBe(0);
    const wave2 = await Promise.all(Array.from({ length: 16 }, () => send(url, 5)));
    expect(wave2.filter((a) => a.status === 200)).toHaveLength(RPM - 8);
  }, 60_000);
});
