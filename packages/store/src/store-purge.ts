import type { Redis } from 'ioredis';
import { StoreKeys } from './keys.ts';

/**
 * Deletes every key a store keeps under `prefix` (queues, counters, requests, reservations,
 * windows, leases, its layout claim), with SCAN so Redis is never blocked; returns how many.
 * For tests and benchmarks cleaning up, and for an operator retiring a prefix once its fleet is
 * drained (e.g. after a layout change). Anything still running on the prefix loses its state.
 */
export async function purgeStore(redis: Redis, prefix: string): Promise<number> {
  const pattern = new StoreKeys(prefix).pattern();
  let deleted = 0;
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    if (keys.length > 0) deleted += await redis.del(...keys);
    cursor = next;
  } while (cursor !== '0');
  return deleted;
}
