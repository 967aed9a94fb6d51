import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Stack, startStack, waitFor } from './support/stack.ts';

/**
 * A request without `max_tokens` reserves the pool's `reserveOutputTokens`, not the whole output
 * cap: budgets and token limits are spent on what requests use, answers are not cut short, and a
 * token budget is never overshot.
 */

const MODEL = 'llama-2-7b';
const TINY = 'sk-tiny-budget-0001';
const METERED = 'sk-metered-tpm-0001';
const SHARED = 'sk-shared-budget-0001';

interface Answer {
  status: number;
  body: {
    usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
    choices?: { finish_reason: string }[];
    error?: { code: string };
  };
}

describe('default output reservation', () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startStack({
      redis: true,
      config: {
        tenants: [
          { id: 'tiny', keys: [{ key: TINY }], quotas: { tokensPerDay: 50 } },
          { id: 'metered', keys: [{ key: METERED }], limits: { tpm: 400 } },
          { id: 'shared', keys: [{ key: SHARED }], quotas: { tokensPerDay: 150 } },
        ],
        pools: [{ id: 'llama', model: MODEL, reserveOutputTokens: 64 }],
      },
    });
  });
  afterAll(async () => s?.close());

  async function chat(key: string, body: Record<string, unknown>): Promise<Answer> {
    const res = await s.dispatchers[0]!.dispatcher.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      payload: { model: MODEL, messages: [{ role: 'user', content: 'hi' }], ...body },
    });
    return { status: res.statusCode, body: res.json() };
  }

  it('lets a tenant with a 50-token daily budget use it up, never past it', async () => {
    let used = 0;
    const answers: Answer[] = [];
    for (let i = 0; i < 20; i++) {
      const a = await chat(TINY, { fairway_output_tokens: 7 });
      answers.push(a);
      if (a.status !== 200) break;
      used += a.body.usage?.total_tokens ?? 0;
    }
    const last = answers.at(-1) as Answer;
    expect(last.status).toBe(429);
    expect(last.body.error?.code).toBe('insufficient_quota');
    // Served until what was left could not hold the prompt and one token: near 50, never above.
    expect(used).toBeLessThanOrEqual(50);
    expect(used).toBeGreaterThanOrEqual(40);
    // The answer that met the end of the budget was cut at what the budget held.
    expect(answers.some((a) => a.body.choices?.[0]?.finish_reason === 'length')).toBe(true);
  });

  it('never overshoots a budget with requests arriving at once', async () => {
    const answers = await Promise.all(
      Array.from({ length: 10 }, (_, i) => chat(SHARED, { fairway_output_tokens: 20 + i })),
    );
    const served = answers.filter((a) => a.status === 200);
    const used = served.reduce((n, a) => n + (a.body.usage?.total_tokens ?? 0), 0);
    expect(served.length).toBeGreaterThan(0);
    expect(used).toBeLessThanOrEqual(150);
    for (const a of answers.filter((x) => x.status !== 200))
      expect(a.body.error?.code).toBe('insufficient_quota');
  });

  it('reserves the pool default against token limits and still lets the answer run past it', async () => {
    // 400 tokens a minute: the whole cap (1024) could never be admitted; 64 + the prompt can.
    const a = await chat(METERED, { fairway_output_tokens: 300 });
    expect(a.status).toBe(200);
    expect(a.body.usage?.completion_tokens).toBe(300);
    expect(a.body.choices?.[0]?.finish_reason).toBe('stop');
    // The window was trued up to the true usage: about 300 of 400 are spent.
    const next = await chat(METERED, { max_tokens: 200, fairway_output_tokens: 1 });
    expect(next.status).toBe(429);
    expect(next.body.error?.code).toBe('rate_limit_exceeded');
    await waitFor(async () => (await s.store.reserved('sim-1')).tokens === 0, 3000, 'release');
  });
});
