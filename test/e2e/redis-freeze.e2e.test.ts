import { type FreezableServer, natsUrl, startRedisServer, uniquePrefix } from '@fairway/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ChatOutcome, sendChat } from './support/chat.ts';
import { E2E_MODEL } from './support/fleet-config.ts';
import { stopFleet } from './support/processes.ts';
import { type SmallFleet, startSmallFleet } from './support/small-fleet.ts';

const KEY = 'sk-redis-freeze-0001';

const chat = (url: string): Promise<ChatOutcome> =>
  sendChat(url, { key: KEY, model: E2E_MODEL, tokens: 4, stream: false });

/**
 * A Redis that hangs rather than dies (SIGSTOP: its connections stay open and nothing answers, as
 * behind a network that drops packets), under a real fleet: two `fairway engine-sim` processes and
 * one `fairway serve` on a Redis of the test's own. Requests must be answered, not left waiting
 * for as long as the hang lasts, and whatever the store runs once it goes on must not stay held.
 */
describe('a frozen Redis', () => {
  const prefix = uniquePrefix('redis-freeze');
  let redis: FreezableServer;
  let fleet: SmallFleet | undefined;

  beforeAll(async () => {
    redis = await startRedisServer();
    fleet = await startSmallFleet({
      id: 'redis-freeze',
      key: KEY,
      redisUrl: redis.url,
      natsUrl: natsUrl(),
      prefix,
      attempt: async (d) => (await chat(d.url)).status,
    });
  }, 90_000);

  afterAll(async () => {
    redis?.thaw();
    await stopFleet(fleet === undefined ? [] : [fleet.dispatcher, ...fleet.engines], undefined, prefix);
    await redis?.stop();
  }, 60_000);

  it('answers 503 not_ready while it hangs, serves again once it goes on, and leaves nothing held', async () => {
    const d = (fleet as SmallFleet).dispatcher;
    redis.freeze();
    let during: ChatOutcome[];
    try {
      // A dispatcher without a bound on store commands would leave these waiting for the whole hang.
      during = await Promise.all(Array.from({ length: 4 }, () => chat(d.url)));
    } finally {
      redis.thaw();
    }
    expect(during.map((o) => o.status)).toEqual([503, 503, 503, 503]);
    expect(during.every((o) => o.text.includes('not_ready'))).toBe(true);

    const after: ChatOutcome[] = [];
    for (let i = 0; i < 8; i++) after.push(await chat(d.url));
    expect(after.map((o) => `${o.status} ${o.status === 200 ? '' : o.text.slice(0, 200)}`)).toEqual(
      Array.from({ length: 8 }, () => '200 '),
    );

    // The admissions that timed out ran once Redis went on; the dispatcher removes them (its
    // lease heartbeat retries until the store answers), so no request record is left.
    const client = new Redis(redis.url);
    try {
      const deadline = Date.now() + 20_000;
      let left = await client.keys(`*${prefix}*req:*`);
      while (left.length > 0 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 250));
        left = await client.keys(`*${prefix}*req:*`);
      }
      expect(left).toEqual([]);
    } finally {
      client.disconnect();
    }
  }, 90_000);
});
