import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatReset } from '../src/rate-limit-headers.ts';
import { type Stack, startStack } from './support/stack.ts';

/**
 * Every answer to a key with RPM or TPM limits says where the key stands, as OpenAI's
 * `x-ratelimit-*` headers do: the tightest limit of each kind, what is left, and when it resets.
 */

const MODEL = 'llama-2-7b';
const LIMITED = 'sk-rate-limited-0001';
const USER_LIMITED = 'sk-rate-user-00001';
const FREE = 'sk-rate-free-000001';

/** OpenAI's reset durations: `20ms`, `1.5s`, `1m0.779s`. */
const RESET = /^(\d+ms|(\d+m)?\d+(\.\d+)?s)$/;

const body = (extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  messages: [{ role: 'user', content: 'hi' }],
  max_tokens: 20,
  fairway_output_tokens: 3,
  ...extra,
});

describe('x-ratelimit-* headers', () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startStack({
      redis: true,
      config: {
        tenants: [
          { id: 'limited', keys: [{ key: LIMITED }], limits: { rpm: 3, tpm: 1000 } },
          { id: 'apps', keys: [{ key: USER_LIMITED, app: 'chat' }], limits: { rpm: 100, tpm: 100_000 } },
          { id: 'free', keys: [{ key: FREE }] },
        ],
        apps: [{ id: 'chat', stages: [{ input: 10, output: 10 }], limits: { rpm: 2 } }],
        pools: [{ id: 'llama', model: MODEL }],
      },
    });
  });
  afterAll(async () => s?.close());

  const post = (key: string, payload: Record<string, unknown>, headers: Record<string, string> = {}) =>
    fetch(`${s.dispatchers[0]!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
      body: JSON.stringify(payload),
    });

  it('counts down the requests and tokens left in the window, on plain and streamed answers', async () => {
    const first = await post(LIMITED, body());
    expect(first.status).toBe(200);
    const { usage } = (await first.json()) as { usage: { prompt_tokens: number } };
    expect(first.headers.get('x-ratelimit-limit-requests')).toBe('3');
    expect(first.headers.get('x-ratelimit-remaining-requests')).toBe('2');
    expect(first.headers.get('x-ratelimit-limit-tokens')).toBe('1000');
    // The request counts its prompt and its output cap until it settles.
    const tokensLeft = Number(first.headers.get('x-ratelimit-remaining-tokens'));
    expect(tokensLeft).toBeLessThanOrEqual(1000 - 20 - usage.prompt_tokens + 2);
    expect(tokensLeft).toBeGreaterThan(900);
    expect(first.headers.get('x-ratelimit-reset-requests')).toMatch(RESET);
    expect(first.headers.get('x-ratelimit-reset-tokens')).toMatch(RESET);

    const streamed = await post(LIMITED, body({ stream: true }));
    expect(streamed.status).toBe(200);
    expect(streamed.headers.get('x-ratelimit-remaining-requests')).toBe('1');
    await streamed.text();
  });

  it('tells a refused request which limit refused it and when it resets', async () => {
    const third = await post(LIMITED, body());
    expect(third.status).toBe(200);
    const refused = await post(LIMITED, body());
    expect(refused.status).toBe(429);
    expect(refused.headers.get('x-ratelimit-limit-requests')).toBe('3');
    expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    const reset = refused.headers.get('x-ratelimit-reset-requests') ?? '';
    expect(reset).toMatch(RESET);
    // The reset agrees with Retry-After (which rounds up to whole seconds).
    expect(Number.parseFloat(reset) / (reset.endsWith('ms') ? 1000 : 1)).toBeLessThanOrEqual(
      Number(refused.headers.get('retry-after')),
    );
    // Refused again at once, from the dispatcher's memory of the refusal: the headers still come.
    const again = await post(LIMITED, body());
    expect(again.status).toBe(429);
    expect(again.headers.get('x-ratelimit-remaining-requests')).toBe('0');
  });

  it('reports the tightest of the caller’s limits: its app’s when that is tighter', async () => {
    const res = await post(USER_LIMITED, body());
    expect(res.status).toBe(200);
    expect(res.headers.get('x-ratelimit-limit-requests')).toBe('2');
    expect(res.headers.get('x-ratelimit-remaining-requests')).toBe('1');
    expect(res.headers.get('x-ratelimit-limit-tokens')).toBe('100000');
  });

  it('sends none to a key without limits', async () => {
    const res = await post(FREE, body());
    expect(res.status).toBe(200);
    for (const h of res.headers.keys()) expect(h).not.toMatch(/^x-ratelimit-/);
  });
});

describe('formatReset', () => {
  it('writes durations as OpenAI does', () => {
    expect(formatReset(250)).toBe('250ms');
    expect(formatReset(1000)).toBe('1s');
    expect(formatReset(1500)).toBe('1.5s');
    expect(formatReset(360_000)).toBe('6m0s');
    expect(formatReset(61_250)).toBe('1m1.25s');
    expect(formatReset(3_723_000)).toBe('1h2m3s');
    expect(formatReset(-5)).toBe('0ms');
  });
});
