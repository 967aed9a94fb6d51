import { DEFAULT_SLO_CLASSES } from '@fairway/core';
import { QueueDeadlines } from '@fairway/scheduler';
import { afterEach, describe, expect, it } from 'vitest';
import { type Stack, startStack, waitFor } from './support/stack.ts';

const MODEL = 'llama-2-7b';
const KEY = 'sk-deadline-alpha-0001';
const DEADLINE_S = 1;

interface Answer {
  readonly status: number;
  readonly queueMs: number | undefined;
  readonly retryAfter: string | null;
  readonly code: string | undefined;
}

describe('QueueDeadlines', () => {
  it('predicts the wait from the queues ahead (own band and earlier ones) and the drain rate', () => {
    const d = new QueueDeadlines();
    d.observe('p', 0, 10, 0);
    d.observe('p', 1, 40, 0);
    // Band 0 waits behind 10 at 5/s: 2 s, 1 s past a 1 s deadline.
    expect(d.lateBy('p', 0, 1000, 5, 0)).toBe(1000);
    expect(d.lateBy('p', 0, 3000, 5, 0)).toBeUndefined();
    // Band 1 waits behind both: 50 at 5/s.
    expect(d.lateBy('p', 1, 1000, 5, 0)).toBe(9000);
    // Two seconds later each queue is taken to have drained by 10 (optimistic: the next
    // admission's answer from the store brings the true depths): 0 + 30 ahead, 6 s.
    expect(d.lateBy('p', 1, 1000, 5, 2000)).toBe(5000);
    // No measured drain: no prediction, nothing refused.
    expect(d.lateBy('p', 1, 1000, 0, 0)).toBeUndefined();
  });
});

/**
 * At several times the fleet's capacity, every request either starts before its class's queue
 * deadline or is refused at once with Retry-After: the queue is bounded in time, not only in count.
 */
describe('deadline-aware admission', () => {
  const stacks: Stack[] = [];
  afterEach(async () => {
    for (const s of stacks.splice(0)) await s.close();
  });
  async function flood(deadlineS: number): Promise<Answer[]> {
    const s = await startStack({
      config: {
        tenants: [{ id: 'alpha', keys: [{ key: KEY }] }],
        pools: [{ id: 'llama', model: MODEL }],
        sloClasses: DEFAULT_SLO_CLASSES.map((c) => ({ ...c, queueDeadlineS: deadlineS })),
      },
      engines: [{ maxNumSeqs: 2, speed: 4 }],
      options: { queueTimeoutMs: 120_000 },
      redis: true,
    });
    stacks.push(s);
    const send = async (): Promise<Answer> => {
      const res = await fetch(`${s.dispatchers[0]!.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          model: MODEL,
          messages: [{ role: 'user', content: 'hello' }],
          max_tokens: 64,
          fairway_output_tokens: 64,
        }),
      });
      const body = (await res.json()) as { error?: { code?: string } };
      const q = res.headers.get('x-fairway-queue-ms');
      return {
        status: res.status,
        queueMs: q === null ? undefined : Number(q),
        retryAfter: res.headers.get('retry-after'),
        code: body.error?.code,
      };
    };
    // Warm up until the engine's finish rate is measured (two-second windows of its counter).
    const registry = s.infra.registry;
    await waitFor(
      async () => {
        await Promise.all(Array.from({ length: 4 }, send));
        return registry.list().some((v) => registry.finishRateOf(v.registration.replicaId) > 0);
      },
      20_000,
      'a measured finish rate',
    );
    // Then 60 clients at once, each sending three requests back to back.
    const answers = await Promise.all(
      Array.from({ length: 60 }, async () => [await send(), await send(), await send()]),
    );
    return answers.flat();
  }

  it('refuses at once, with Retry-After, what would start past the deadline; what it admits starts in time', async () => {
    const answers = await flood(DEADLINE_S);
    const refused = answers.filter((a) => a.status === 429);
    const served = answers.filter((a) => a.status === 200);
    expect(refused.length).toBeGreaterThan(0);
    expect(served.length).toBeGreaterThan(0);
    for (const r of refused) {
      expect(r.code).toBe('queue_deadline_exceeded');
      expect(Number(r.retryAfter)).toBeGreaterThanOrEqual(1);
    }
    expect(answers.every((a) => a.status === 200 || a.status === 429)).toBe(true);
    // Admission predicts from a depth the store reported and the measured rate: allow it some
    // error, but nothing like the open-ended wait without a deadline (next test).
    const worst = Math.max(...served.map((a) => a.queueMs ?? 0));
    expect(worst).toBeLessThan(3 * DEADLINE_S * 1000);
  }, 120_000);

  it('queues everything, for as long as it takes, when the deadline is far away', async () => {
    const answers = await flood(3600);
    expect(answers.every((a) => a.status === 200)).toBe(true);
    const worst = Math.max(...answers.map((a) => a.queueMs ?? 0));
    expect(worst).toBeGreaterThan(3 * DEADLINE_S * 1000);
  }, 120_000);
});
