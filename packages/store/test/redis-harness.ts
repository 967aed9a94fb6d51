import { redisUrl, uniquePrefix } from '@fairway/testkit';
import { Redis, type RedisOptions } from 'ioredis';
import { purgeStore, RedisStore, type StoreOptions } from '../src/index.ts';

/** Deletes every key of a store prefix (tests clean up after themselves). */
export async function deletePrefix(redis: Redis, store: RedisStore): Promise<void> {
  await purgeStore(redis, store.keys.prefix);
}

/** Opens a client on the test Redis (`options`: e.g. auto-pipelining, as the dispatcher connects). */
export function connect(options: RedisOptions = {}): Redis {
  return new Redis(redisUrl(), { lazyConnect: false, maxRetriesPerRequest: 2, ...options });
}

/** A Redis store on a fresh prefix of the test Redis, and its cleanup. */
export function freshRedisStore(redis: Redis, options: StoreOptions = {}): RedisStore {
  return new RedisStore({ redis, prefix: uniquePrefix('store'), ...options });
}
