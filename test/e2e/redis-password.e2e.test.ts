import { randomBytes } from 'node:crypto';
import { resolve } from 'node:path';
import { startUp } from '@fairway/cli';
import { silentLogger } from '@fairway/core';
import { natsUrl, startRedisServer, type TestServer, uniquePrefix } from '@fairway/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFairway } from './support/processes.ts';

const EXAMPLE_CONFIG = resolve(import.meta.dirname, '..', '..', 'infra', 'fairway.example.yaml');

/**
 * `REDIS_PASSWORD` beside a `REDIS_URL` that carries no password: `fairway serve` and `fairway up`
 * give it to the URL's Redis (a real `redis-server --requirepass` on a free port), and a password
 * in the URL wins over it.
 */
describe('REDIS_PASSWORD with REDIS_URL', () => {
  const password = randomBytes(12).toString('hex');
  let redis: TestServer;
  let client: Redis;
  beforeAll(async () => {
    redis = await startRedisServer({ password });
    client = new Redis(redis.url, { password });
  });
  afterAll(async () => {
    client?.disconnect();
    await redis?.stop();
  });

  /** `fairway serve` on the password-protected Redis with `env`; resolves once it listens. */
  const serve = (prefix: string, env: Record<string, string>) =>
    startFairway(
      ['serve', '-c', EXAMPLE_CONFIG, '--port', '0', '--operator-port', '0'],
      /listening on (http:\S+)/,
      {
        NATS_URL: natsUrl(),
        FAIRWAY_PREFIX: prefix,
        FAIRWAY_LOG_LEVEL: 'warn',
        ...env,
      },
    );

  it('fairway serve gives REDIS_PASSWORD to a URL without one', async () => {
    const prefix = uniquePrefix('redis-pw');
    const d = await serve(prefix, { REDIS_URL: redis.url, REDIS_PASSWORD: password });
    try {
      expect(d.line).toContain(`store ${redis.url}`);
    } finally {
      await d.stop();
    }
  });

  it("fairway serve keeps the URL's own password over REDIS_PASSWORD", async () => {
    const url = new URL(redis.url);
    url.password = password;
    const d = await serve(uniquePrefix('redis-pw'), { REDIS_URL: url.toString(), REDIS_PASSWORD: 'not-it' });
    await d.stop();
  });

  it('fairway up keeps its store on the Redis of --redis-url with REDIS_PASSWORD', async () => {
    const prefix = uniquePrefix('redis-pw-up');
    const up = await startUp({
      port: 0,
      operatorPort: 0,
      engines: 1,
      speed: 20,
      prefix,
      redisUrl: redis.url,
      env: { REDIS_PASSWORD: password },
      logger: silentLogger,
    });
    try {
      expect(up.dispatcher.infrastructure.storeKind).toBe('redis');
      const res = await fetch(`${up.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${up.keys[0]?.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: up.model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
      });
      await res.arrayBuffer();
      expect(res.status).toBe(200);
      expect(await client.keys(`{${prefix}}*`)).not.toEqual([]);
    } finally {
      await up.close();
    }
  });
});
