import type { RedisCluster } from '@fairway/testkit';
import { Cluster } from 'ioredis';
import { StoreKeys, slotGroupPrefix } from '../src/index.ts';

/** A cluster client on a test cluster, as the dispatcher opens one (auto-pipelined, but for FCALL: see `checkClient`). */
export function connectCluster(cluster: RedisCluster, pipelined = true): Cluster {
  const client = new Cluster(
    cluster.nodes.map((n) => ({ host: '127.0.0.1', port: n.port })),
    {
      enableAutoPipelining: pipelined,
      autoPipeliningIgnoredCommands: ['fcall', 'eval', 'evalsha'],
      redisOptions: { maxRetriesPerRequest: 2 },
    },
  );
  // Commands report their own errors; connection errors while a test's cluster stops are expected.
  client.on('error', () => undefined);
  return client;
}

/** The port of the primary serving the slot of a store's hash tag (`group` undefined: the default group). */
export async function primaryOf(client: Cluster, prefix: string, group: string | undefined): Promise<number> {
  const key = new StoreKeys(slotGroupPrefix(prefix, group)).layout();
  const slot = Number(await client.cluster('KEYSLOT', key));
  for (const [from, to, primary] of await client.cluster('SLOTS'))
    if (primary !== undefined && slot >= from && slot <= to) return primary[1];
  throw new Error(`no primary serves slot ${slot}`);
}

/**
 * The primary serving the group's slot once it is no longer `former` (or after 10 s, whatever it
 * is then). `CLUSTER SLOTS` is answered by whichever node the client asks, and a node learns of a
 * fail-over by gossip: clients are redirected (MOVED) to the new primary before every node says so.
 */
export async function primaryAfterFailover(
  client: Cluster,
  prefix: string,
  group: string | undefined,
  former: number,
): Promise<number> {
  let port = await primaryOf(client, prefix, group);
  for (let i = 0; port === former && i < 100; i++) {
    await new Promise((r) => setTimeout(r, 100));
    port = await primaryOf(client, prefix, group);
  }
  return port;
}

/**
 * Group names for `count` groups whose slots are served by `count` different primaries, the
 * default group's primary first (so the default group and `count - 1` named ones spread over
 * every primary of a `count`-primary cluster).
 */
export async function spreadGroups(client: Cluster, prefix: string, count: number): Promise<string[]> {
  const used = new Set([await primaryOf(client, prefix, undefined)]);
  const names: string[] = [];
  for (let i = 0; names.length < count - 1; i++) {
    if (i > 200) throw new Error(`cannot spread ${count} groups over the cluster's primaries`);
    const name = `g${i}`;
    const port = await primaryOf(client, prefix, name);
    if (used.has(port)) continue;
    used.add(port);
    names.push(name);
  }
  return names;
}
