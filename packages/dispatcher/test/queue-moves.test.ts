import { afterEach, describe, expect, it } from 'vitest';
import { type Stack, startStack, waitFor } from './support/stack.ts';

const MODEL = 'llama-2-7b';
const KEY = 'sk-test-moves-0001';

function config(moves: Record<string, unknown>) {
  return {
    tenants: [{ id: 'alpha', keys: [{ key: KEY }] }],
    pools: [{ id: 'llama', model: MODEL }],
    policy: { ordering: 'fcfs', placement: 'aladdin', moves },
  };
}

/** A streamed completion under way: output tokens so far, whether it ended, and how to stop it. */
interface Stream {
  tokens: number;
  ended: boolean;
  readonly done: Promise<void>;
  stop(): void;
}

function stream(url: string, output: number, auth?: string): Stream {
  const ctl = new AbortController();
  const s = { tokens: 0, ended: false, stop: () => ctl.abort() };
  const run = async () => {
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      signal: ctl.signal,
      headers: { 'content-type': 'application/json', ...(auth ? { authorization: `Bearer ${auth}` } : {}) },
      body: JSON.stringify({
        model: MODEL,
        prompt: 'hello there',
        max_tokens: output,
        fairway_output_tokens: output,
        stream: true,
      }),
    });
    if (res.status !== 200 || res.body === null)
      throw new Error(`answered ${res.status}: ${await res.text()}`);
    const decoder = new TextDecoder();
    for await (const bytes of res.body) {
      for (const line of decoder.decode(bytes as Uint8Array, { stream: true }).split('\n'))
        if (line.startsWith('data: {') && line.includes('"text":"') && !line.includes('"text":""'))
          s.tokens++;
    }
    s.ended = true;
  };
  const done = run().catch((err: unknown) => {
    if (!ctl.signal.aborted) throw err;
  });
  return Object.assign(s, { done });
}

/** A Prometheus sample's value (summed over its label sets), 0 when absent. */
function sample(text: string, name: string): number {
  let sum = 0;
  for (const line of text.split('\n'))
    if (line.startsWith(`${name}{`) || line.startsWith(`${name} `)) sum += Number(line.split(' ').pop());
  return sum;
}

const engineMetric = async (url: string, name: string) =>
  sample(await (await fetch(`${url}/metrics`)).text(), name);

/**
 * A request the gateway placed on a replica whose engine turns out to be full — its engine runs
 * work the store's reservations do not show (here two requests sent to the engine directly, past
 * the gateway) — waits in that engine's queue. Aladdin places placed-but-not-started requests
 * again where there is room (Algorithm 2); fairway's equivalent is a request in an engine's
 * waiting queue, which it takes out (nothing has reached the client) and runs on a replica whose
 * engine queues nothing.
 */
describe('requests waiting in an engine queue move to a replica with room (policy.moves)', () => {
  let s: Stack | undefined;
  const streams: Stream[] = [];
  afterEach(async () => {
    for (const x of streams.splice(0)) x.stop();
    await s?.close();
    s = undefined;
  });

  /**
   * Two engines of 3 sequences each; a long gateway request on one of them (the fuller one, which
   * Aladdin's fullest-first order places the next request on), that engine filled by two direct
   * requests, then a short gateway request. Returns which replica ran the short one.
   */
  async function scenario(moves: Record<string, unknown>) {
    const stack = await startStack({
      config: config(moves),
      engines: [
        { maxNumSeqs: 3, speed: 2 },
        { maxNumSeqs: 3, speed: 2 },
      ],
    });
    s = stack;
    const gateway = stack.dispatchers[0]!.url;
    const long = stream(gateway, 2000, KEY);
    streams.push(long);
    await waitFor(() => long.tokens > 0, 10_000, 'the long request to stream');
    const seqs = await Promise.all(stack.replicas.map(async (r) => (await stack.store.reserved(r)).seqs));
    const x = seqs.indexOf(1);
    const y = 1 - x;
    const full = stack.sims[x]!.url;
    for (let i = 0; i < 2; i++) streams.push(stream(full, 2000));
    await waitFor(
      async () => (await engineMetric(full, 'vllm:num_requests_running')) === 3,
      10_000,
      'the engine to run three requests',
    );
    const short = stream(gateway, 5, KEY);
    streams.push(short);
    return { stack, long, short, x, y };
  }

  const served = (stack: Stack, i: number) => engineMetric(stack.sims[i]!.url, 'vllm:request_success_total');
  const moved = async (stack: Stack) =>
    sample(
      (await stack.dispatchers[0]!.dispatcher.operator.inject({ method: 'GET', url: '/metrics' })).body,
      'fairway_moves_total',
    );

  it('moves the request out of the full engine queue to the other replica, where it runs at once', async () => {
    const { stack, long, short, y } = await scenario({ afterS: 0.3 });
    await short.done;
    expect(short.ended).toBe(true);
    expect(short.tokens).toBe(5);
    // It ran on the replica with room while the full engine's requests were all still running.
    expect(long.ended).toBe(false);
    expect(await served(stack, y)).toBe(1);
    expect(await moved(stack)).toBe(1);
    // Its reservation went with it: once it ended, only the long request is reserved.
    await waitFor(async () => (await stack.store.reserved(stack.replicas[y]!)).seqs === 0, 5000, 'settle');
  }, 60_000);

  it('with moves off, the request waits in the full engine queue until a slot there frees', async () => {
    const { stack, short, x, y } = await scenario({ enabled: false, afterS: 0.3 });
    await waitFor(
      async () => (await engineMetric(stack.sims[x]!.url, 'vllm:num_requests_waiting')) === 1,
      10_000,
      'the request to wait in the full engine',
    );
    // Free a slot on the full engine: one of the direct requests ends.
    streams[1]!.stop();
    await short.done;
    expect(short.tokens).toBe(5);
    expect(await served(stack, y)).toBe(0);
    expect(await moved(stack)).toBe(0);
  }, 60_000);
});
