import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Clock } from '@fairway/core';
import type { Cluster, Redis } from 'ioredis';
import type { BatchKeys } from './batch-keys.ts';
import { defaultStorageLimits, type StorageLimits } from './batch-limits.ts';
import {
  type BatchObject,
  type BatchStamp,
  type BatchStatus,
  batchObject,
  type FileObject,
  fileObject,
} from './batch-objects.ts';
import { type StorageRefusal, scriptRefusal } from './errors.ts';

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

type Reply = number[];

interface BatchCommands {
  batchRecordLine(
    results: string,
    batch: string,
    index: string,
    outcome: string,
    counter: string,
  ): Promise<number>;
  batchMoveStatus(batch: string, to: string, stamp: string, at: string, ...from: string[]): Promise<number>;
  batchBeginFile(...args: string[]): Promise<Reply>;
  batchAppendChunk(
    meta: string,
    chunks: string,
    storage: string,
    expiry: string,
    id: string,
    chunk: Buffer,
    maxBytes: string,
    deadlineMs: string,
  ): Promise<Reply>;
  batchCommitFile(...args: string[]): Promise<number>;
  batchRemoveFile(...args: string[]): Promise<number>;
  batchPurgeFiles(...args: string[]): Promise<Reply>;
  batchCreateBatch(...args: string[]): Promise<Reply>;
}

const INCLUDE = /^--- @include "([^"]+)"\s*$/m;

/** Loads `commands/<name>-<keys>.lua` as an ioredis command whose name carries the code's hash. */
function defineCommands(redis: Redis | Cluster): BatchCommands {
  const dir = join(import.meta.dirname, 'commands');
  const define = (name: string, keys: number): string => {
    let lua = readFileSync(join(dir, `${name}-${keys}.lua`), 'utf8');
    for (let m = INCLUDE.exec(lua); m !== null; m = INCLUDE.exec(lua))
      lua = lua.replace(m[0], readFileSync(join(dir, `${m[1]}.lua`), 'utf8'));
    // Two builds never run each other's code under one name.
    const cmd = `fairwayBatch_${name}_${createHash('sha1').update(lua).digest('hex').slice(0, 8)}`;
    if (!(cmd in redis)) redis.defineCommand(cmd, { numberOfKeys: keys, lua });
    return cmd;
  };
  const names = {
    record: define('recordLine', 2),
    move: define('moveStatus', 1),
    begin: define('beginFile', 4),
    append: define('appendChunk', 4),
    commit: define('commitFile', 3),
    remove: define('removeFile', 3),
    purge: define('purgeFiles', 3),
    create: define('createBatch', 3),
  };
  const r = redis as unknown as Record<string, (...args: (string | Buffer)[]) => Promise<never>>;
  const call =
    (name: string) =>
    (...a: (string | Buffer)[]) =>
      r[name]!.call(redis, ...a);
  return {
    batchRecordLine: call(names.record),
    batchMoveStatus: call(names.move),
    batchBeginFile: call(names.begin),
    batchAppendChunk: call(names.append),
    batchCommitFile: call(names.commit),
    batchRemoveFile: call(names.remove),
    batchPurgeFiles: call(names.purge),
    batchCreateBatch: call(names.create),
  };
}

/**
 * The size of each piece of a file stored as one list element, bytes: a little under 1 MiB, so a
 * piece with Redis's own headers still fits the allocator's 1 MiB size class (a piece of exactly
 * 1 MiB takes the next one, 1.25 MiB).
 */
export const FILE_CHUNK_BYTES = 1024 * 1024 - 1024;
/** How long an upload may go without data before it is given up (and its bytes freed), ms. */
const UPLOAD_IDLE_MS = 5 * 60_000;
const MINUTE_MS = 60_000;

/** A file being written: append its pieces in order, then commit it (or abort it). */
export interface FileUpload {
  readonly id: string;
  /** Adds the next bytes; a refusal when they would pass the tenant's byte quota. */
  append(chunk: Buffer): Promise<StorageRefusal | undefined>;
  /**
   * Makes the file readable, with the name and purpose the upload carried; `expiresInS` (capped
   * by the tenant's retention) shortens its life.
   */
  commit(o?: { filename?: string; purpose?: string; expiresInS?: number | undefined }): Promise<FileObject>;
  /** Deletes what was written and frees its bytes. */
  abort(): Promise<void>;
}

/** An upload that vanished while being written (it went idle past its deadline, or was deleted). */
export class UploadGoneError extends Error {
  override readonly name = 'UploadGoneError';
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
  readonly #limitsOf: (tenant: string) => StorageLimits;

  /**
   * @param redis one Redis or a Redis Cluster client
   * @param limitsOf each tenant's storage limits @default the config's defaults for every tenant
   */
  constructor(
    redis: Redis | Cluster,
    keys: BatchKeys,
    clock: Clock,
    limitsOf: (tenant: string) => StorageLimits = defaultStorageLimits,
  ) {
    this.#redis = redis;
    this.#keys = keys;
    this.#clock = clock;
    this.#cmd = defineCommands(redis);
    this.#limitsOf = limitsOf;
  }

  /** Now, in Unix seconds (OpenAI's timestamps). */
  nowS(): number {
    return Math.floor(this.#clock.now() / 1000);
  }

  /** `tenant`'s storage limits. */
  limits(tenant: string): StorageLimits {
    return this.#limitsOf(tenant);
  }

  #tenantKeys(tenant: string): [expiry: string, created: string, storage: string] {
    const k = this.#keys;
    return [k.tenantFileExpiry(tenant), k.tenantFiles(tenant), k.tenantStorage(tenant)];
  }

  /**
   * Starts an upload of `tenant`'s, counted against its limits at once: its upload rate, its file
   * count and its bytes with the `declaredBytes` the request announces (so an upload that cannot
   * fit is refused before its body is read). Expired files are purged first. A refusal names the
   * limit; `force` (a batch's output, which must be kept) skips every limit.
   */
  async beginUpload(
    tenant: string,
    f: { id: string; filename: string; purpose: string },
    o: { declaredBytes: number; force?: boolean },
  ): Promise<StorageRefusal | FileUpload> {
    const lim = this.#limitsOf(tenant);
    const now = this.#clock.now();
    const meta: Record<string, string> = {
      id: f.id,
      tenant,
      filename: f.filename,
      purpose: f.purpose,
      created_at: String(Math.floor(now / 1000)),
    };
    const reply = await this.#cmd.batchBeginFile(
      ...this.#tenantKeys(tenant),
      this.#keys.tenantUploads(tenant),
      this.#keys.base,
      String(now),
      f.id,
      String(now + UPLOAD_IDLE_MS),
      String(o.force === true ? -1 : lim.maxFiles),
      String(o.force === true ? -1 : lim.maxBytes),
      String(o.declaredBytes),
      String(o.force === true ? -1 : lim.uploadsPerMinute),
      String(MINUTE_MS),
      ...Object.entries(meta).flat(),
    );
    const refused = scriptRefusal(reply);
    if (refused === 'gone') throw new UploadGoneError(`upload ${f.id} vanished as it began`);
    if (refused !== undefined) return refused;
    const maxBytes = o.force === true ? -1 : lim.maxBytes;
    const [expiryKey, , storageKey] = this.#tenantKeys(tenant);
    const k = this.#keys;
    return {
      id: f.id,
      append: async (chunk) => {
        const r = scriptRefusal(
          await this.#cmd.batchAppendChunk(
            k.file(f.id),
            k.fileChunks(f.id),
            storageKey,
            expiryKey,
            f.id,
            chunk,
            String(maxBytes),
            String(this.#clock.now() + UPLOAD_IDLE_MS),
          ),
        );
        if (r === 'gone')
          throw new UploadGoneError(`upload ${f.id} was given up or deleted while it was written`);
        return r;
      },
      commit: async (c = {}) => {
        const lifeS = Math.min(c.expiresInS ?? lim.fileRetentionS, lim.fileRetentionS);
        const learnt: string[] = [];
        if (c.filename !== undefined) learnt.push('filename', c.filename);
        if (c.purpose !== undefined) learnt.push('purpose', c.purpose);
        const expiresAtMs = this.#clock.now() + lifeS * 1000;
        const expiresAtS = Math.floor(expiresAtMs / 1000);
        const code = await this.#cmd.batchCommitFile(
          k.file(f.id),
          k.fileChunks(f.id),
          expiryKey,
          f.id,
          String(expiresAtMs),
          String(expiresAtS),
          ...learnt,
        );
        if (code !== 0) throw new UploadGoneError(`upload ${f.id} was given up or deleted before it ended`);
        return fileObject(await this.#redis.hgetall(k.file(f.id)));
      },
      abort: async () => {
        await this.#cmd.batchRemoveFile(...this.#tenantKeys(tenant), k.base, f.id, tenant);
      },
    };
  }

  /** Stores a whole file of `tenant`'s under `id` (a batch's output: past every limit, as it must be kept). */
  async putFile(
    tenant: string,
    f: { id: string; filename: string; purpose: string; content: string | Buffer },
  ): Promise<FileObject> {
    const content = typeof f.content === 'string' ? Buffer.from(f.content, 'utf8') : f.content;
    const upload = await this.beginUpload(tenant, f, { declaredBytes: content.length, force: true });
    if (!('append' in upload)) throw new Error(`batch store: a forced upload was refused (${upload.limit})`);
    for (let i = 0; i < content.length; i += FILE_CHUNK_BYTES)
      await upload.append(content.subarray(i, i + FILE_CHUNK_BYTES));
    return upload.commit();
  }

  /** Purges `tenant`'s expired files; what its files hold then. */
  async storageUsage(tenant: string): Promise<{ files: number; bytes: number }> {
    const [, files = 0, bytes = 0] = await this.#cmd.batchPurgeFiles(
      ...this.#tenantKeys(tenant),
      this.#keys.base,
      String(this.#clock.now()),
    );
    return { files, bytes };
  }

  /** The metadata of `tenant`'s readable file `id`: not another tenant's, not uploading, not expired. */
  async #meta(tenant: string, id: string): Promise<Record<string, string> | undefined> {
    return this.#readable(tenant, await this.#redis.hgetall(this.#keys.file(id)));
  }

  #readable(tenant: string, h: Record<string, string>): Record<string, string> | undefined {
    if (h.tenant !== tenant || h.status === 'uploading') return undefined;
    // Redis drops an expired file's keys on its own clock; this clock decides as well.
    if (h.expires_at !== undefined && Number.parseInt(h.expires_at, 10) * 1000 <= this.#clock.now())
      return undefined;
    return h;
  }

  /** `tenant`'s file `id`, or undefined (absent, expired, still uploading, or another tenant's). */
  async file(tenant: string, id: string): Promise<FileObject | undefined> {
    const h = await this.#meta(tenant, id);
    return h === undefined ? undefined : fileObject(h);
  }

  /**
   * The content of `tenant`'s file `id` piece by piece, read from Redis one piece at a time as
   * the consumer asks (a download holds one piece in memory); undefined if there is no such file.
   */
  async fileChunks(tenant: string, id: string): Promise<AsyncIterable<Buffer> | undefined> {
    if ((await this.#meta(tenant, id)) === undefined) return undefined;
    const key = this.#keys.fileChunks(id);
    const n = await this.#redis.llen(key);
    if (n === 0) {
      const whole = await this.#redis.getBuffer(this.#keys.fileContent(id));
      if (whole === null) return undefined;
      return (async function* () {
        yield whole;
      })();
    }
    const redis = this.#redis;
    return (async function* () {
      for (let i = 0; i < n; i++) {
        const piece = await redis.lindexBuffer(key, i);
        if (piece === null) throw new UploadGoneError(`file ${id} was deleted while it was read`);
        yield piece;
      }
    })();
  }

  /** The content of `tenant`'s file `id` in one buffer, or undefined. */
  async fileContent(tenant: string, id: string): Promise<Buffer | undefined> {
    const chunks = await this.fileChunks(tenant, id);
    if (chunks === undefined) return undefined;
    const parts: Buffer[] = [];
    for await (const c of chunks) parts.push(c);
    return Buffer.concat(parts);
  }

  /** Deletes `tenant`'s file `id`, freeing its share of the tenant's quota; false if it has none such. */
  async deleteFile(tenant: string, id: string): Promise<boolean> {
    if ((await this.#meta(tenant, id)) === undefined) return false;
    return (await this.#cmd.batchRemoveFile(...this.#tenantKeys(tenant), this.#keys.base, id, tenant)) === 1;
  }

  /** `tenant`'s files, newest first, optionally of one purpose (expired ones are purged first). */
  async listFiles(
    tenant: string,
    q: PageQuery & { purpose?: string | undefined },
  ): Promise<Page<FileObject>> {
    await this.storageUsage(tenant);
    const ids = await this.#redis.zrevrange(this.#keys.tenantFiles(tenant), 0, -1);
    const metas = await Promise.all(
      this.#page(ids, q.after).map((id) => this.#redis.hgetall(this.#keys.file(id))),
    );
    const files = metas
      .map((h) => this.#readable(tenant, h))
      .filter((h) => h !== undefined)
      .map(fileObject);
    const matching = q.purpose === undefined ? files : files.filter((f) => f.purpose === q.purpose);
    return { data: matching.slice(0, q.limit), hasMore: matching.length > q.limit };
  }

  /** Creates a batch of `tenant`'s in status `validating`, unless it has as many open as it may. */
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
      /** Past the tenant's open-batch limit (tests). */
      force?: boolean;
    },
  ): Promise<BatchObject | StorageRefusal> {
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
    const reply = await this.#cmd.batchCreateBatch(
      this.#keys.batch(b.id),
      this.#keys.tenantBatches(tenant),
      this.#keys.tenantOpenBatches(tenant),
      this.#keys.base,
      String(this.#clock.now()),
      String(b.force === true ? -1 : this.#limitsOf(tenant).maxOpenBatches),
      b.id,
      ...Object.entries(h).flat(),
    );
    const refused = scriptRefusal(reply);
    if (refused === 'gone') throw new Error('batch store: createBatch answered "gone"');
    return refused ?? batchObject(h);
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
    await this.putLineRange(id, 0, lines);
    await this.setLineTotal(id, lines.length);
  }

  /** Stores request lines `from`… of a batch (by index, JSON); idempotent. */
  async putLineRange(id: string, from: number, lines: readonly string[]): Promise<void> {
    if (lines.length === 0) return;
    const m = this.#redis.multi();
    for (let i = 0; i < lines.length; i += 1000) {
      const chunk: Record<string, string> = {};
      lines.slice(i, i + 1000).forEach((l, k) => {
        chunk[String(from + i + k)] = l;
      });
      m.hset(this.#keys.lines(id), chunk);
    }
    await m.exec();
  }

  /** Sets how many request lines a batch has, once they are all stored. */
  async setLineTotal(id: string, total: number): Promise<void> {
    await this.#redis.hset(this.#keys.batch(id), 'total', String(total));
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
