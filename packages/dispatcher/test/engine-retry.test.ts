import { afterEach, describe, expect, it } from 'vitest';
import { type Stack, type StackOptions, startStack, waitFor } from './support/stack.ts';

const MODEL = 'llama-2-7b';
const KEY = 'sk-retry-alpha-0001';
const CONFIG = {
  tenants: [{ id: 'alpha', keys: [{ key: KEY }] }],
  pools: [{ id: 'llama', model: MODEL }],
  policy: { ordering: 'vtc', placement: 'least-kv' },
};

interface Answer {
  readonly status: number;
  readonly body: string;
}

/**
 * A request whose engine call fails before anything reached the client (connection refused,
 * engine 500) goes back to its queue and is dispatched on another replica; only when no replica
 * can take it does the client get a 502. Real engine-sims (HTTP), real Redis, in this process.
 */
describe('dispatcher retries a failed engine call on another replica', () => {
  const stacks: Stack[] = [];
  afterEach(async () => {
    for (const s of stacks.splice(0)) await s.close();
  });
  async function stack(o: Partial<StackOptions>): Promise<Stack> {
    const s = await startStack({ config: CONFIG, redis: true, ...o });
    stacks.push(s);
    return s;
  }
  async function send(s: Stack, stream: boolean): Promise<Answer> {
    const res = await fetch(`${s.dispatchers[0]!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: 'x'.repeat(36) }],
        max_tokens: 5,
        fairway_output_tokens: 5,
        ...(stream ? { stream: true } : {}),
      }),
    });
    return { status: res.status, body: await res.text() };
  }
  function retries(s: Stack): Promise<number> {
    return s.dispatchers[0]!.dispatcher.metrics.engineRetries.get().then((m) => m.values[0]?.value ?? 0);
  }
  // A client may read its last byte just before its dispatcher's settle reaches the store.
  async function expectNothingReserved(s: Stack): Promise<void> {
    const free = async (): Promise<boolean> => {
      for (const id of s.replicas) if ((await s.store.reserved(id)).seqs > 0) return false;
      return true;
    };
    await waitFor(free, 2000, 'settles').catch(() => undefined);
    for (const id of s.replicas) expect(await s.store.reserved(id)).toEqual({ tokens: 0, seqs: 0 });
  }

  it('serves every request when one replica answers 500 to everything', async () => {
    const s = await stack({ engines: [{ faults: { errorRate: 1 } }, {}] });
    const answers = await Promise.all(Array.from({ length: 16 }, (_, i) => send(s, i % 2 === 1)));
    for (const a of answers) expect(a, a.body).toMatchObject({ status: 200 });
    for (const a of answers.filter((_, i) => i % 2 === 1)) {
      expect(a.body).toContain('data: [DONE]');
      expect(a.body).not.toContain('"error"');
    }
    // Least-kv placed some on the failing replica; each of those was retried, not failed.
    expect(await retries(s)).toBeGreaterThan(0);
    // Each request is charged once, for the 14 prompt tokens the engine counts (its template
    // around 36 letters) and 5 output tokens at the config's default cost (1 per input, 2 per
    // output token): nothing for the failed attempts.
    await expectNothingReserved(s);
    expect((await s.store.snapshot('llama', 0)).counters.alpha).toBe(16 * (14 + 2 * 5));
  });

  it('serves every request when one replica refuses connections', async () => {
    const s = await stack({ engines: [{}, {}] });
    // The engine is gone but its agent still reports the replica: placement picks it.
    await s.sims[0]!.close();
    const answers = await Promise.all(Array.from({ length: 16 }, (_, i) => send(s, i % 2 === 1)));
    for (const a of answers) expect(a, a.body).toMatchObject({ status: 200 });
    expect(await retries(s)).toBeGreaterThan(0);
    await expectNothingReserved(s);
  });

  it('answers 503 no_replica at once when no other replica can take the request', async () => {
    // A long queue timeout: the answer must not wait for it.
    const s = await stack({ engines: [{ faults: { errorRate: 1 } }], options: { queueTimeoutMs: 600_000 } });
    const first = await send(s, false);
    expect(first.status).toBe(503);
    expect(JSON.parse(first.body)).toEqual({
      error: {
        message:
          'every replica serving model "llama-2-7b" failed or is unavailable (the engine answered 500); retry',
        type: 'service_unavailable',
        param: null,
        code: 'no_replica',
      },
    });
    // The failed replica is held out: the next request is refused before it reaches the engine.
    const second = await send(s, true);
    expect(second.status).toBe(503);
    expect(JSON.parse(second.body).error.code).toBe('no_replica');
    expect(await retries(s)).toBe(0);
    await expectNothingReserved(s);
  });

  it('answers requests waiting for capacity 503 no_replica once no replica has taken work for noReplicaWaitMs', async () => {
    // One slot, so the second request waits at the gateway; a queue timeout far beyond the test.
    const s = await stack({
      engines: [{ maxNumSeqs: 1 }],
      options: { queueTimeoutMs: 600_000, noReplicaWaitMs: 500 },
    });
    const running = fetch(`${s.dispatchers[0]!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: 'x'.repeat(36) }],
        max_tokens: 4000,
        fairway_output_tokens: 4000,
        stream: true,
      }),
    }).then((r) => r.text().catch(() => ''));
    await waitFor(async () => (await s.store.reserved(s.replicas[0]!)).seqs === 1, 5000, 'the first request');
    const waiting = send(s, false);
    await new Promise((r) => setTimeout(r, 200));
    // The replica leaves the fleet (its agent announces it gone) while the first request holds the slot.
    await s.agents[0]!.stop();
    const a = await waiting;
    expect(a.status).toBe(503);
    expect(JSON.parse(a.body).error).toMatchObject({
      code: 'no_replica',
      type: 'service_unavailable',
      message: expect.stringContaining('no replica has taken work for 0.5 s'),
    });
    await running;
    await waitFor(async () => (await s.store.reserved(s.replicas[0]!)).seqs === 0, 5000, 'released');
  });

  it('gives up after engineAttempts calls and answers 502', async () => {
    const s = await stack({
      engines: [{ faults: { errorRate: 1 } }, { faults: { errorRate: 1 } }, { faults: { errorRate: 1 } }],
      options: { engineAttempts: 2, queueTimeoutMs: 600_000 },
    });
    const a = await send(s, false);
    expect(a.status).toBe(502);
    expect(JSON.parse(a.body).error.code).toBe('engine_error');
    expect(await retries(s)).toBe(1);
    await expectNothingReserved(s);
  });
});
