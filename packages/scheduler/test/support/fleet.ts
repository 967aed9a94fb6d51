import type { ReplicaInfo, ReplicaSource } from '../../src/index.ts';

/**
 * Replicas of pool `m` whose sizes and reported load a test sets directly, idle as far as their
 * engines report until the test says otherwise.
 */
export class Fleet implements ReplicaSource {
  readonly #infos = new Map<string, ReplicaInfo>();

  /** @param replicas id, KV-cache tokens and sequence slots (default 256) of each replica */
  constructor(...replicas: [id: string, kvTokens: number, seqs?: number][]) {
    for (const [id, kv, seqs] of replicas)
      this.#infos.set(id, {
        id,
        pool: 'm',
        kvCapacityTokens: kv,
        maxNumSeqs: seqs ?? 256,
        running: 0,
        waiting: 0,
        kvUsage: 0,
        stale: false,
      });
  }

  /** Changes what a replica reports. */
  set(id: string, over: Partial<ReplicaInfo>): void {
    const info = this.#infos.get(id);
    if (info === undefined) throw new Error(`no replica ${id}`);
    this.#infos.set(id, { ...info, ...over });
  }

  /** The replica leaves the fleet. */
  down(id: string): void {
    this.#infos.delete(id);
  }

  replicas(pool: string): readonly ReplicaInfo[] {
    return [...this.#infos.values()].filter((r) => r.pool === pool);
  }

  pools(): readonly string[] {
    return ['m'];
  }

  /** Whether the replica is listed and not stale now (what a live source answers mid-round). */
  isAvailable(id: string): boolean {
    return this.#infos.get(id)?.stale === false;
  }
}
