import { redisUrl, uniquePrefix } from '@fairway/testkit';
import { Redis } from 'ioredis';
import { RedisStore, type StoreOptions } from '../src/index.ts';

/** Deletes every key of a store prefix (tests clean up after themselves). */
export async function deletePrefix(redis: Redis, store: RedisStore): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', store.keys.pattern(), 'COUNT', 1000);
    if (keys.length > 0) await redis.del(...keys);
    cursor = next;
  } while (cursor !== '0');
}

/** Opens a client on the test Redis. */
export function connect(): Redis {
  return new Redis(redisUrl(), { lazyConnect: false, maxRetriesPerRequest: 2 });
}

/** A Redis store on a fresh prefix of the test Redis, and its cleanup. */
export function freshRedisStore(redis: Redis, options: StoreOptions = {}): RedisStore {
  return new RedisStore({ redis, prefix: uniquePrefix('store'), ...options });
}
