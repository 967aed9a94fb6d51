/**
 * What a Redis restart under load costs, with and without persistence (docs/operators/faults.md, "Redis").
 * Starts its own redis-server on a free port (never the machine's), two dispatchers and two
 * engine-sims with their agents (the dispatcher test fleet), holds queued and running requests,
 * restarts Redis on the same port and prints, per mode: requests held at the restart, answered
 * 200, failed, lost (no answer), repairs, requests put back, RPM overshoot in the window, engine
 * over-capacity samples, whether the layout marker is back, and the time until every held
 * request was answered.
 *
 *   npx tsx packages/dispatcher/bench/redis-restart.ts
 */
import { STORE_LAYOUT_VERSION } from '@fairway/store';
import { startRestartableRedisServer } from '@fairway/testkit';
import { Redis } from 'ioredis';
import { startStack, waitFor } from '../test/support/stack.ts';

const MODEL = 'llama-2-7b';
const KEY = 'sk-bench-restart-0001';
const SEQS = 2;
const RPM = 30;
const WAVE1 = 16;
const WAVE2 = 30;
/** Output tokens of the held requests: long enough that most still wait when Redis is back. */
const OUTPUT = 100;
const CONFIG = {
  tenants: [{ id: 'alpha', keys: [{ key: KEY }], limits: { rpm: RPM } }],
  pools: [{ id: 'llama', model: MODEL }],
  policy: { ordering: 'vtc', placement: 'least-kv', queueTimeoutS: 20 },
};

async function send(url: string, outputTokens: number): Promise<number> {
  try {
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
    const body = await res.text();
    if (process.env.DEBUG_RESTART && res.status !== 200 && res.status !== 429)
      process.stderr.write(`${res.status} ${body}\n`);
    return res.status;
  } catch {
    return 0; // no answer at all
  }
}

async function engineLoad(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  let n = 0;
  for (const m of text.matchAll(/^vllm:num_requests_(?:running|waiting)\{[^}]*\} (\d+)/gm)) n += Number(m[1]);
  return n;
}

interface Mode {
  readonly name: string;
  readonly aof: boolean;
  readonly signal: 'SIGTERM' | 'SIGKILL';
}

async function run(mode: Mode): Promise<string> {
  const server = await startRestartableRedisServer({ aof: mode.aof });
  const s = await startStack({
    config: CONFIG,
    redisUrl: server.url,
    dispatchers: 2,
    engines: [
      { maxNumSeqs: SEQS, speed: 2 },
      { maxNumSeqs: SEQS, speed: 2 },
    ],
    options: { leaseMs: 3000 },
  });
  try {
    const urls = s.dispatchers.map((d) => d.url);
    const stats = () => s.dispatchers.map((d) => d.dispatcher.runtime.stats());
    const wave1 = Array.from({ length: WAVE1 }, (_, i) => send(urls[i % 2] as string, OUTPUT));
    await waitFor(
      () =>
        stats().reduce((n, x) => n + x.admitted, 0) === WAVE1 &&
        stats().reduce((n, x) => n + x.queued, 0) >= 8,
      10_000,
      'requests admitted and queued',
    );
    const held = stats().reduce((n, x) => n + x.queued + x.running, 0);
    const t0 = performance.now();
    await server.restart({ signal: mode.signal, downMs: 500 });
    let watching = true;
    let over = 0;
    let samples = 0;
    const watch = (async () => {
      while (watching) {
        const loads = await Promise.all(s.sims.map((x) => engineLoad(x.url).catch(() => 0)));
        samples++;
        if (loads.some((l) => l > SEQS)) over++;
        await new Promise((r) => setTimeout(r, 25));
      }
    })();
    const answers = await Promise.all(wave1);
    const recoverMs = performance.now() - t0;
    const wave2 = await Promise.all(Array.from({ length: WAVE2 }, (_, i) => send(urls[i % 2] as string, 5)));
    watching = false;
    await watch;
    // All WAVE1 were admitted before the restart (waited for above): the window allows RPM − WAVE1 more.
    const after = wave2.filter((x) => x === 200).length;
    const allowed = RPM - WAVE1;
    const redis = new Redis(server.url);
    const layout = (await redis.get(`{${s.prefix}}:layout`)) === String(STORE_LAYOUT_VERSION);
    redis.disconnect();
    const st = stats();
    const repairs = st.map((x) => x.repairs ?? '-').join('/');
    const restored = st.reduce((n, x) => n + (x.restored ?? 0), 0);
    return [
      mode.name,
      held,
      answers.filter((x) => x === 200).length,
      answers.filter((x) => x !== 200 && x !== 0).length,
      answers.filter((x) => x === 0).length,
      repairs,
      restored,
      `${after} (${allowed})`,
      Math.max(0, after - allowed),
      `${over}/${samples}`,
      layout ? 'yes' : 'no',
      `${(recoverMs / 1000).toFixed(1)} s`,
    ].join(' | ');
  } finally {
    await s.close();
    await server.stop();
  }
}

const modes: Mode[] = process.env.DEBUG_RESTART
  ? [{ name: 'AOF everysec, SIGKILL (crash)', aof: true, signal: 'SIGKILL' }]
  : [
      { name: 'no persistence, SIGTERM', aof: false, signal: 'SIGTERM' },
      { name: 'AOF everysec, SIGTERM (SHUTDOWN)', aof: true, signal: 'SIGTERM' },
      { name: 'AOF everysec, SIGKILL (crash)', aof: true, signal: 'SIGKILL' },
    ];
const rows: string[] = [];
for (const m of modes) rows.push(`| ${await run(m)} |`);
process.stdout.write(
  [
    `Redis restart (down 500 ms) under load: 2 dispatchers, 2 engine-sims (max_num_seqs ${SEQS}), ${WAVE1} requests of ${OUTPUT} output tokens, then ${WAVE2} more at RPM ${RPM}`,
    '',
    '| Redis | held at restart | answered 200 | answered error | lost (no answer) | repairs (per dispatcher) | put back | admitted after the restart (window allows) | RPM overshoot | engine over capacity (samples) | layout marker back | all held answered after |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
    ...rows,
    '',
  ].join('\n'),
);
