import { silentLogger } from '@fairway/core';
import { type RedisSentinelGroup, startRedisSentinelGroup, uniquePrefix } from '@fairway/testkit';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startUp, type UpHandle } from '../src/index.ts';

/**
 * `fairway up` on Redis behind Sentinel, as `fairway serve` runs: `REDIS_SENTINELS` and
 * `REDIS_SENTINEL_NAME` name the sentinels and the primary they monitor, and the store lives on that
 * primary (a real primary, replica and sentinel on free ports).
 */
describe('fairway up through Redis Sentinel', () => {
  let group: RedisSentinelGroup;
  let up: UpHandle | undefined;
  const prefix = uniquePrefix('up-sentinel');
  beforeAll(async () => {
    group = await startRedisSentinelGroup();
  });
  afterAll(async () => {
    await up?.close();
    await group?.stop();
  });

  it('keeps its store on the primary the sentinels name', async () => {
    up = await startUp({
      port: 0,
      operatorPort: 0,
      engines: 1,
      speed: 20,
      prefix,
      env: { REDIS_SENTINELS: `127.0.0.1:${group.sentinelPort}`, REDIS_SENTINEL_NAME: group.name },
      logger: silentLogger,
    });
    expect(up.dispatcher.infrastructure.storeKind).toBe('redis');
    const res = await fetch(`${up.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${up.keys[0]?.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: up.model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
    });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    const primary = new Redis({ host: '127.0.0.1', port: group.primaryPort });
    try {
      expect(await primary.keys(`{${prefix}}*`)).not.toEqual([]);
    } finally {
      primary.disconnect();
    }
  });
});
