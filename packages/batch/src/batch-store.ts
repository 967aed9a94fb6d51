import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Clock } from '@fairway/core';
import type { Cluster, Redis } from 'ioredis';
import type { BatchKeys } from './batch-keys.ts';
import {
  type BatchObject,
  type BatchStamp,
  type BatchStatus,
  batchObject,
  type FileObject,
  fileObject,
} from './batch-objects.ts';

/** A counter a recorded line increments. */
export type LineCounter = 'completed' | 'failed' | 'expired' | 'skipped';

/** A page of a listing. */
export interface Page<T> {
  readonly data: T[];
  readonly hasMore: boolean;
}

/** How a listing is paged (OpenAI's `limit` and `after`, newest first). */
export interface PageQuery {
  readonly limit: number;
  /** The id the page starts after. */
  readonly after?: string | undefined;
}

interface BatchCommands {
  batchRecordLine(
    results: string,
    batch: string,
    index: string,
    outcome: string,
    counter: string,
  ): Promise<number>;
  batchMoveStatus(batch: string, to: string, stamp: string, at: string, ...from: string[]): Promise<number>;
}

/** Loads `commands/<name>-<keys>.lua` as an ioredis command whose name carries the code's hash. */
function defineCommands(redis: Redis | Cluster): BatchCommands {
  const dir = join(import.meta.dirname, 'commands');
  const define = (name: string, keys: number): string => {
    const lua = readFileSync(join(dir, `${name}-${keys}.lua`), 'utf8');
    // Two builds never run each other's code under one name.
    const cmd = `fairwayBatch_${name}_${createHash('sha1').update(lua).digest('hex').slice(0, 8)}`;
    if (!(cmd in redis)) redis.defineCommand(cmd, { numberOfKeys: keys, lua });
    return cmd;
  };
  const record = define('recordLine', 2);
  const move = define('moveStatus', 1);
  const r = redis as unknown as Record<string, (...args: string[]) => Promise<number>>;
  return {
    batchRecordLine: (...a) => r[record]!.call(redis, ...a),
    batchMoveStatus: (...a) => r[move]!.call(redis, ...a),
  };
}

/**
 * The Files and Batch API's durable state in Redis: files and their content, batches with their
 * status, timestamps and counters, their request lines and each line's recorded outcome. Every
 * read for a client names the tenant, and a file or batch of another tenant reads as absent.
 * On a Redis Cluster every key is in the slot of `{prefix}` ({@link BatchKeys}), so its scripts and
 * transactions run as on one Redis, on the primary serving that slot.
 */
export class BatchStore {
  readonly #redis: Redis | Cluster;
  readonly #keys: BatchKeys;
  readonly #clock: Clock;
  readonly #cmd: BatchCommands;

  /** @param redis one Redis or a Redis Cluster client */
  constructor(redis: Redis | Cluster, keys: BatchKeys, clock: Clock) {
    this.#redis = redis;
    this.#keys = keys;
    this.#clock = clock;
    this.#cmd = defineCommands(redis);
  }

  /** Now, in Unix seconds (OpenAI's timestamps). */
  nowS(): number {
    return Math.floor(this.#clock.now() / 1000);
  }

  /** Stores a file of `tenant`'s under `id`. */
  async putFile(
    tenant: string,
    f: { id: string; filename: string; purpose: string; content: string | Buffer },
  ): Promise<FileObject> {
    const bytes = typeof f.content === 'string' ? Buffer.byteLength(f.content) : f.content.length;
    const meta = {
      id: f.id,
      tenant,
      filename: f.filename,
      purpose: f.purpose,
      bytes: String(bytes),
      created_at: String(this.nowS()),
    };
    await this.#redis
      .multi()
      .set(this.#keys.fileContent(f.id), f.content)
      .hset(this.#keys.file(f.id), meta)
      .zadd(this.#keys.tenantFiles(tenant), this.#clock.now(), f.id)
      .exec();
    return fileObject(meta);
  }

  /** `tenant`'s file `id`, or undefined (absent, or another tenant's). */
  async file(tenant: string, id: string): Promise<FileObject | undefined> {
    const h = await this.#redis.hgetall(this.#keys.file(id));
    return h.tenant === tenant ? fileObject(h) : undefined;
  }

  /** The content of `tenant`'s file `id`, or undefined. */
  async fileContent(tenant: string, id: string): Promise<Buffer | undefined> {
    const [owner, content] = await Promise.all([
      this.#redis.hget(this.#keys.file(id), 'tenant'),
      this.#redis.getBuffer(this.#keys.fileContent(id)),
    ]);
    return owner === tenant && content !== null ? content : undefined;
  }

  /** Deletes `tenant`'s file `id`; false if it has none such. */
  async deleteFile(tenant: string, id: string): Promise<boolean> {
    if ((await this.#redis.hget(this.#keys.file(id), 'tenant')) !== tenant) return false;
    await this.#redis
      .multi()
      .del(this.#keys.file(id), this.#keys.fileContent(id))
      .zrem(this.#keys.tenantFiles(tenant), id)
      .exec();
    return true;
  }

  /** `tenant`'s files, newest first, optionally of one purpose. */
  async listFiles(
    tenant: string,
    q: PageQuery & { purpose?: string | undefined },
  ): Promise<Page<FileObject>> {
    const ids = await this.#redis.zrevrange(this.#keys.tenantFiles(tenant), 0, -1);
    const metas = await Promise.all(
      this.#page(ids, q.after).map((id) => this.#redis.hgetall(this.#keys.file(id))),
    );
    const files = metas.filter((h) => h.tenant === tenant).map(fileObject);
    const matching = q.purpose === undefined ? files : files.filter((f) => f.purpose === q.purpose);
    return { data: matching.slice(0, q.limit), hasMore: matching.length > q.limit };
  }

  /** Creates a batch of `tenant`'s in status `validating`. */
  async createBatch(
    tenant: string,
    b: {
      id: string;
      /** The key that created it (`sha256:<hex>`): its lines run, and are charged, as that key. */
      keyId: string;
      endpoint: string;
      inputFileId: string;
      completionWindowS: number;
      sloClass: string;
      metadata: Record<string, string> | undefined;
    },
  ): Promise<BatchObject> {
    const now = this.nowS();
    const h: Record<string, string> = {
      id: b.id,
      tenant,
      key_id: b.keyId,
      endpoint: b.endpoint,
      input_file_id: b.inputFileId,
      completion_window: '24h',
      status: 'validating',
      created_at: String(now),
      expires_at: String(now + b.completionWindowS),
      slo_class: b.sloClass,
      total: '0',
      completed: '0',
      failed: '0',
      expired: '0',
      skipped: '0',
      settled: '0',
    };
    if (b.metadata !== undefined) h.metadata = JSON.stringify(b.metadata);
    await this.#redis
      .multi()
      .hset(this.#keys.batch(b.id), h)
      .zadd(this.#keys.tenantBatches(tenant), this.#clock.now(), b.id)
      .exec();
    return batchObject(h);
  }

  /** `tenant`'s batch `id`, or undefined (absent, or another tenant's). */
  async batch(tenant: string, id: string): Promise<BatchObject | undefined> {
    const h = await this.#redis.hgetall(this.#keys.batch(id));
    return h.tenant === tenant ? batchObject(h) : undefined;
  }

  /** A batch's stored fields (for the workers), or undefined. */
  async batchFields(id: string): Promise<Record<string, string> | undefined> {
    const h = await this.#redis.hgetall(this.#keys.batch(id));
    return h.id === undefined ? undefined : h;
  }

  /** `tenant`'s batches, newest first. */
  async listBatches(tenant: string, q: PageQuery): Promise<Page<BatchObject>> {
    const ids = this.#page(await this.#redis.zrevrange(this.#keys.tenantBatches(tenant), 0, -1), q.after);
    const hashes = await Promise.all(
      ids.slice(0, q.limit + 1).map((id) => this.#redis.hgetall(this.#keys.batch(id))),
    );
    const batches = hashes.filter((h) => h.tenant === tenant).map(batchObject);
    return { data: batches.slice(0, q.limit), hasMore: batches.length > q.limit };
  }

  /** Moves a batch to `to` if its status is one of `from`, stamping `stamp` now; true if it moved. */
  async moveStatus(
    id: string,
    to: BatchStatus,
    stamp: BatchStamp | undefined,
    from: readonly BatchStatus[],
  ): Promise<boolean> {
    return (
      (await this.#cmd.batchMoveStatus(
        this.#keys.batch(id),
        to,
        stamp ?? '',
        String(this.nowS()),
        ...from,
      )) === 1
    );
  }

  /** Sets fields of a batch. */
  async setBatchFields(id: string, fields: Record<string, string>): Promise<void> {
    await this.#redis.hset(this.#keys.batch(id), fields);
  }

  /** Stores a batch's request lines (by index, JSON) and its total; idempotent. */
  async putLines(id: string, lines: readonly string[]): Promise<void> {
    const m = this.#redis.multi();
    for (let i = 0; i < lines.length; i += 1000) {
      const chunk: Record<string, string> = {};
      lines.slice(i, i + 1000).forEach((l, k) => {
        chunk[String(i + k)] = l;
      });
      m.hset(this.#keys.lines(id), chunk);
    }
    m.hset(this.#keys.batch(id), 'total', String(lines.length));
    await m.exec();
  }

  /** A batch's request line `index` (JSON), or undefined. */
  async line(id: string, index: number): Promise<string | undefined> {
    return (await this.#redis.hget(this.#keys.lines(id), String(index))) ?? undefined;
  }

  /** True once line `index` of a batch has an outcome. */
  async recorded(id: string, index: number): Promise<boolean> {
    return (await this.#redis.hexists(this.#keys.results(id), String(index))) === 1;
  }

  /**
   * Records line `index`'s outcome unless one is recorded already, counting it once; returns the
   * lines left to settle, -1 when it was recorded before, -2 when the batch takes no more outcomes.
   */
  recordLine(id: string, index: number, outcome: string, counter: LineCounter): Promise<number> {
    return this.#cmd.batchRecordLine(
      this.#keys.results(id),
      this.#keys.batch(id),
      String(index),
      outcome,
      counter,
    );
  }

  /** Every recorded outcome of a batch by line index. */
  async results(id: string): Promise<Map<number, string>> {
    const h = await this.#redis.hgetall(this.#keys.results(id));
    return new Map(Object.entries(h).map(([k, v]) => [Number.parseInt(k, 10), v]));
  }

  /** Drops a batch's working set (lines and outcomes) once its files are written. */
  async dropWorkingSet(id: string): Promise<void> {
    await this.#redis.del(this.#keys.lines(id), this.#keys.results(id));
  }

  #page(ids: string[], after: string | undefined): string[] {
    if (after === undefined) return ids;
    const i = ids.indexOf(after);
    return i < 0 ? [] : ids.slice(i + 1);
  }
}
