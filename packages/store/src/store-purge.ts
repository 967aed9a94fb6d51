import type { Redis } from 'ioredis';
import { StoreKeys, slotGroupPrefix } from './keys.ts';
import { isCluster, type RedisClient } from './script-loader.ts';

async function purgeNode(node: Redis, pattern: string): Promise<number> {
  let deleted = 0;
  let cursor = '0';
  do {
    const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    // The keys of one pattern share a hash tag, so one slot: one DEL takes them, on a Cluster node too.
    if (keys.length > 0) deleted += await node.del(...keys);
    cursor = next;
  } while (cursor !== '0');
  return deleted;
}

/**
 * Deletes every key a store keeps under `prefix` (queues, counters, requests, reservations,
 * windows, leases, its layout claim) — and under each of `groups`' prefixes, the slot groups of a
 * `SlotGroupStore` (see {@link slotGroupPrefix}) — with SCAN so Redis is never blocked (on every
 * primary of a Cluster); returns how many. For tests and benchmarks cleaning up, and for an
 * operator retiring a prefix once its fleet is drained (e.g. after a layout change). Anything
 * still running on the prefix loses its state.
 */
export async function purgeStore(
  redis: RedisClient,
  prefix: string,
  groups: readonly string[] = [],
): Promise<number> {
  const patterns = [prefix, ...groups.map((g) => slotGroupPrefix(prefix, g))].map((p) =>
    new StoreKeys(p).pattern(),
  );
  const nodes = isCluster(redis) ? redis.nodes('master') : [redis];
  let deleted = 0;
  for (const node of nodes) for (const pattern of patterns) deleted += await purgeNode(node, pattern);
  return deleted;
}
