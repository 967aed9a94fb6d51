import { natsUrl, redisUrl, uniquePrefix } from '@fairway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ChatOutcome, engineMetric, gatewayMetric, sendChat } from './support/chat.ts';
import { E2E_MODEL } from './support/fleet-config.ts';
import { type FairwayProcess, stopFleet } from './support/processes.ts';
import { type SmallFleet, startSmallFleet } from './support/small-fleet.ts';

const KEY = 'sk-engine-freeze-0001';
/** Output tokens per request: seconds of decoding at the engines' speed, so calls are caught under way. */
const TOKENS = 3000;

const chat = (url: string, stream: boolean, tokens = TOKENS): Promise<ChatOutcome> =>
  sendChat(url, { key: KEY, model: E2E_MODEL, tokens, stream });

/** `completion_tokens` of a whole (non-streamed) answer. */
const completionTokens = (o: ChatOutcome): number =>
  (JSON.parse(o.text) as { usage: { completion_tokens: number } }).usage.completion_tokens;

/**
 * An engine that hangs rather than dies (SIGSTOP of an engine-sim and its agent: its connections
 * stay open and nothing answers, as a frozen process or a host cut off does), under a real fleet
 * of two engine-sims and one `fairway serve`. The calls already on it must not wait out their
 * timeouts (a whole answer's is 600 s): a request that had sent nothing to its client is served by
 * the other engine; a stream under way waits, within its idle limit, and finishes once the engine
 * goes on; then the engine serves again.
 */
describe('a frozen engine', () => {
  const prefix = uniquePrefix('engine-freeze');
  let fleet: SmallFleet | undefined;
  let frozen: FairwayProcess | undefined;

  beforeAll(async () => {
    fleet = await startSmallFleet({
      id: 'engine-freeze',
      key: KEY,
      redisUrl: redisUrl(),
      natsUrl: natsUrl(),
      prefix,
      speed: 10,
      attempt: async (d) => (await chat(d.url, false, 4)).status,
    });
  }, 90_000);

  afterAll(async () => {
    frozen?.proc.kill('SIGCONT');
    await stopFleet(fleet === undefined ? [] : [fleet.dispatcher, ...fleet.engines], undefined, prefix);
  }, 60_000);

  it('serves the whole answers it held on the other engine instead of waiting, and lets its streams go on', async () => {
    const f = fleet as SmallFleet;
    const running = (e: FairwayProcess): Promise<number> => engineMetric(e.url, 'vllm:num_requests_running');
    /** Requests of each kind each engine runs, as they were started. */
    const on = f.engines.map(() => ({ streams: 0, whole: 0 }));
    const streamed: Promise<ChatOutcome>[] = [];
    const whole: Promise<ChatOutcome>[] = [];
    // One at a time, each once an engine runs it: placement by free KV then alternates engines.
    for (const stream of [true, true, false, false, true, true, false, false, false, false]) {
      const before = await Promise.all(f.engines.map(running));
      (stream ? streamed : whole).push(chat(f.dispatcher.url, stream));
      const deadline = Date.now() + 20_000;
      for (;;) {
        const now = await Promise.all(f.engines.map(running));
        const k = now.findIndex((n, i) => n > (before[i] ?? 0));
        if (k >= 0) {
          const counts = on[k] as { streams: number; whole: number };
          if (stream) counts.streams++;
          else counts.whole++;
          break;
        }
        if (Date.now() > deadline) throw new Error('a request never started on an engine');
        await new Promise((r) => setTimeout(r, 10));
      }
    }
    // The engine to freeze runs requests of both kinds.
    const k = on.findIndex((c) => c.streams > 0 && c.whole > 0);
    expect(k, JSON.stringify(on)).toBeGreaterThanOrEqual(0);
    frozen = f.engines[k] as FairwayProcess;
    frozen.proc.kill('SIGSTOP');
    let answers: ChatOutcome[];
    try {
      // Without a check on the frozen engine, the whole answers would wait for as long as it hangs.
      answers = await Promise.all(whole);
    } finally {
      frozen.proc.kill('SIGCONT');
    }
    expect(answers.map((o) => `${o.status} ${o.status === 200 ? '' : o.text.slice(0, 200)}`)).toEqual(
      Array.from({ length: 6 }, () => '200 '),
    );
    expect(answers.map(completionTokens)).toEqual(Array.from({ length: 6 }, () => TOKENS));
    // The streams under way on it were left to their idle limit (30 s), longer than the freeze:
    // they go on once the engine does, and finish.
    const streams = await Promise.all(streamed);
    expect(streams.map((o) => `${o.status} ${o.ok} ${o.sseError}`)).toEqual(
      Array.from({ length: 4 }, () => '200 true false'),
    );
    expect(await gatewayMetric(f.operatorUrl, 'fairway_engine_retries_total')).toBeGreaterThan(0);

    // Once it goes on, the fleet serves again.
    const after: ChatOutcome[] = [];
    for (let i = 0; i < 4; i++) after.push(await chat(f.dispatcher.url, false, 4));
    expect(after.map((o) => o.status)).toEqual([200, 200, 200, 200]);
  }, 90_000);
});
