import type { Clock } from '@fairway/core';
import { Cluster, type Redis } from 'ioredis';

/** Options of {@link MemoryGuard}. */
export interface MemoryGuardOptions {
  /** Fraction of Redis's memory above which new files and batches are refused. @default 0.8 */
  readonly refuseAbove: number;
  /** Redis's memory, bytes, when it sets no `maxmemory`; with neither, nothing is refused. @default none */
  readonly redisMemoryBytes?: number | undefined;
  /** How long one reading of `INFO memory` is used, ms. @default 1000 */
  readonly cacheMs?: number;
}

/** What Redis holds and may hold, bytes. */
export interface MemoryReading {
  readonly usedBytes: number;
  readonly limitBytes: number;
}

function field(info: string, name: string): number {
  const m = new RegExp(`^${name}:(\\d+)`, 'm').exec(info);
  return m === null ? 0 : Number(m[1]);
}

/**
 * Keeps the Files and Batch API from filling Redis: chat admission needs Redis too, and a Redis
 * at its `maxmemory` (with no eviction, as fairway ships it) refuses every write. Reads
 * `INFO memory` at most once per `cacheMs` (on a Redis Cluster, every primary's, the fullest
 * counting) and says when new files and batches must wait.
 */
export class MemoryGuard {
  readonly #redis: Redis | Cluster;
  readonly #clock: Clock;
  readonly #refuseAbove: number;
  readonly #fallbackBytes: number | undefined;
  readonly #cacheMs: number;
  #last: { atMs: number; reading: Promise<MemoryReading | undefined> } | undefined;

  constructor(redis: Redis | Cluster, clock: Clock, o: MemoryGuardOptions) {
    this.#redis = redis;
    this.#clock = clock;
    this.#refuseAbove = o.refuseAbove;
    this.#fallbackBytes = o.redisMemoryBytes;
    this.#cacheMs = o.cacheMs ?? 1000;
  }

  /** The fraction above which {@link overLimit} answers. */
  get refuseAbove(): number {
    return this.#refuseAbove;
  }

  /** The reading when Redis is above the threshold, else undefined (also when no limit is known). */
  async overLimit(): Promise<MemoryReading | undefined> {
    const r = await this.reading();
    return r !== undefined && r.usedBytes > r.limitBytes * this.#refuseAbove ? r : undefined;
  }

  /** The latest reading (at most `cacheMs` old); undefined when no memory limit is known. */
  reading(): Promise<MemoryReading | undefined> {
    const now = this.#clock.now();
    if (this.#last === undefined || now - this.#last.atMs >= this.#cacheMs) {
      const reading = this.#read();
      // A failed read is not kept: the next request reads again.
      reading.catch(() => {
        if (this.#last?.reading === reading) this.#last = undefined;
      });
      this.#last = { atMs: now, reading };
    }
    return this.#last.reading;
  }

  async #read(): Promise<MemoryReading | undefined> {
    const nodes = this.#redis instanceof Cluster ? this.#redis.nodes('master') : [this.#redis];
    const infos = await Promise.all(nodes.map((n) => n.info('memory')));
    let fullest: MemoryReading | undefined;
    for (const info of infos) {
      const limitBytes = field(info, 'maxmemory') || this.#fallbackBytes;
      if (limitBytes === undefined) continue;
      const r = { usedBytes: field(info, 'used_memory'), limitBytes };
      if (fullest === undefined || r.usedBytes / r.limitBytes > fullest.usedBytes / fullest.limitBytes)
        fullest = r;
    }
    return fullest;
  }
}
