import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Stack, startStack, waitFor } from './support/stack.ts';

/**
 * FairServe's interaction stages, live: the store counts the calls of each open interaction
 * (`x-fairway-interaction`) whichever dispatcher admitted them, and WSC prices each call by its
 * app's expected tokens at that stage (`apps[].stages`).
 */

const MODEL = 'llama-2-7b';
const KEY = 'sk-fairserve-stage-0001';

describe('FairServe interaction stages across dispatchers (Redis)', () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startStack({
      config: {
        tenants: [{ id: 'acme', keys: [{ key: KEY }] }],
        // Stage 1 of the agent's interactions is expected to be ten times smaller than stage 0:
        // the same call costs ten times more there.
        apps: [
          {
            id: 'agent',
            stages: [
              { input: 50, output: 50 },
              { input: 5, output: 5 },
            ],
          },
        ],
        pools: [{ id: 'llama', model: MODEL }],
        policy: { ordering: 'wsc' },
      },
      dispatchers: 2,
      redis: true,
    });
  });
  afterAll(async () => s?.close());

  /** The flow counters' total in the pool's interactive band. */
  const counted = async (): Promise<number> => {
    const snap = await s.store.snapshot('llama', 0);
    return Object.values(snap.counters).reduce((a, b) => a + b, 0);
  };

  /** Sends one call of `interaction` through dispatcher `d` and waits until it is charged in full. */
  const call = async (d: number, interaction: string): Promise<number> => {
    const before = await counted();
    const res = await fetch(`${s.dispatchers[d]!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${KEY}`,
        'content-type': 'application/json',
        'x-fairway-app': 'agent',
        'x-fairway-interaction': interaction,
      },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: 'plan the next step' }],
        max_tokens: 8,
        fairway_output_tokens: 8,
      }),
    });
    expect(res.status).toBe(200);
    await res.json();
    // Settled: the counter holds the call's final cost and no longer moves.
    let last = Number.NaN;
    await waitFor(async () => {
      const now = await counted();
      const steady = now === last && now > before;
      last = now;
      return steady;
    }, 5000);
    return last - before;
  };

  it('prices a call by its stage in the interaction, counted whichever dispatcher admitted the calls before it', async () => {
    const first = await call(0, 'conv-1');
    // The second call of conv-1 arrives at the other dispatcher: stage 1, ten times the price.
    const second = await call(1, 'conv-1');
    expect(second / first).toBeCloseTo(10, 6);
    // Another interaction starts at stage 0 again.
    const other = await call(1, 'conv-2');
    expect(other).toBeCloseTo(first, 6);
    // Stages past the app's last are priced as its last.
    const third = await call(0, 'conv-1');
    expect(third).toBeCloseTo(second, 6);
  });
});
