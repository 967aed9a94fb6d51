import { afterEach, describe, expect, it } from 'vitest';
import { type Stack, startStack, waitFor } from './support/stack.ts';

const MODEL = 'llama-2-7b';
const KEY = 'sk-test-alpha-0001';
const HEADERS = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };

describe('a dispatcher holding many queued requests', () => {
  const stacks: Stack[] = [];
  afterEach(async () => {
    for (const s of stacks.splice(0)) await s.close();
  });

  it('holds 40 requests waiting for capacity without a listener-leak warning, and serves them all', async () => {
    const s = await startStack({
      config: {
        tenants: [{ id: 'alpha', keys: [{ key: KEY }] }],
        pools: [{ id: 'llama', model: MODEL }],
      },
      engines: [{ maxNumSeqs: 1, speed: 1 }],
      redis: true,
    });
    stacks.push(s);
    const d = s.dispatchers[0]!;
    const warnings: string[] = [];
    const onWarning = (w: Error): void => {
      warnings.push(`${w.name}: ${w.message}`);
    };
    process.on('warning', onWarning);
    const hog = new AbortController();
    try {
      const running = await fetch(`${d.url}/v1/chat/completions`, {
        method: 'POST',
        headers: HEADERS,
        body: JSON.stringify({
          model: MODEL,
          messages: [{ role: 'user', content: 'hold the only slot' }],
          max_tokens: 3000,
          fairway_output_tokens: 3000,
          stream: true,
        }),
        signal: hog.signal,
      });
      expect(running.status).toBe(200);
      const queued = Array.from({ length: 40 }, (_, i) =>
        fetch(`${d.url}/v1/chat/completions`, {
          method: 'POST',
          headers: HEADERS,
          body: JSON.stringify({
            model: MODEL,
            messages: [{ role: 'user', content: `queued ${i}` }],
            max_tokens: 4,
            fairway_output_tokens: 2,
          }),
        }).then(async (r) => ({ status: r.status, body: await r.text() })),
      );
      await waitFor(async () => (await s.store.snapshot('llama', 0)).queued.alpha === 40, 5000, 'queued');
      hog.abort();
      const answers = await Promise.all(queued);
      expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
      // Warnings are emitted on the next tick.
      await new Promise((r) => setTimeout(r, 50));
      expect(warnings.filter((w) => w.includes('MaxListeners'))).toEqual([]);
    } finally {
      hog.abort();
      process.off('warning', onWarning);
    }
  });
});
