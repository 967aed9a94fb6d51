import { startRedisCluster, startRedisServer } from '@fairway/testkit';
import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatchKeys } from '../src/batch-keys.ts';
import type { StorageLimits } from '../src/batch-limits.ts';
import { BatchStore, type FileUpload } from '../src/batch-store.ts';

/** A client on a throw-away server, and how to stop both. */
interface Backend {
  readonly client: Redis | Cluster;
  stop(): Promise<void>;
}

const backends: { name: string; start: () => Promise<Backend> }[] = [
  {
    name: 'one Redis',
    start: async () => {
      const server = await startRedisServer();
      const client = new Redis(server.url);
      return {
        client,
        stop: async () => {
          client.disconnect();
          await server.stop();
        },
      };
    },
  },
  {
    name: 'a 3-primary Redis Cluster',
    start: async () => {
      const cluster = await startRedisCluster({ primaries: 3 });
      // As the dispatcher opens it (connectInfrastructure): auto-pipelined, but for scripts.
      const client = new Cluster(
        cluster.nodes.map((n) => ({ host: '127.0.0.1', port: n.port })),
        {
          enableAutoPipelining: true,
          autoPipeliningIgnoredCommands: ['fcall', 'eval', 'evalsha'],
          redisOptions: { maxRetriesPerRequest: 2 },
        },
      );
      return {
        client,
        stop: async () => {
          client.disconnect();
          await cluster.stop();
        },
      };
    },
  },
];

describe.each(backends)('BatchStore on $name', ({ start }) => {
  let backend: Backend;
  let store: BatchStore;
  let now = 1_800_000_000_000;
  const clock = { now: () => now };

  const small: StorageLimits = {
    maxBytes: 100,
    maxFiles: 2,
    maxOpenBatches: 1,
    fileRetentionS: 3600,
    uploadsPerMinute: 1000,
  };
  let limited: BatchStore;

  beforeAll(async () => {
    backend = await start();
    store = new BatchStore(backend.client, new BatchKeys('bs-test'), clock);
    limited = new BatchStore(backend.client, new BatchKeys('bs-test'), clock, () => small);
  }, 60_000);

  async function begin(tenant: string, id: string, declaredBytes = 0): Promise<FileUpload> {
    const u = await limited.beginUpload(tenant, { id, filename: 'f', purpose: 'batch' }, { declaredBytes });
    if (!('append' in u)) throw new Error(`refused: ${JSON.stringify(u)}`);
    return u;
  }

  afterAll(async () => {
    await backend?.stop();
  });

  async function runningBatch(id: string, lines: number): Promise<void> {
    await store.createBatch('acme', {
      id,
      keyId: `sha256:${'a'.repeat(64)}`,
      endpoint: '/v1/completions',
      inputFileId: 'file-x',
      completionWindowS: 86_400,
      sloClass: 'batch-2',
      metadata: undefined,
    });
    await store.putLines(
      id,
      Array.from({ length: lines }, (_, i) => `{"i":${i}}`),
    );
    expect(await store.moveStatus(id, 'in_progress', 'in_progress_at', ['validating'])).toBe(true);
  }

  it('records each line once, however many runs of it race to record', async () => {
    await runningBatch('batch_race', 3);
    const outcomes = await Promise.all(
      Array.from({ length: 20 }, (_, k) => store.recordLine('batch_race', 1, `o{"run":${k}}`, 'completed')),
    );
    expect(outcomes.filter((r) => r >= 0)).toEqual([2]);
    expect(outcomes.filter((r) => r === -1)).toHaveLength(19);
    expect(await store.recordLine('batch_race', 0, 'e{}', 'failed')).toBe(1);
    expect(await store.recordLine('batch_race', 2, 'o{}', 'completed')).toBe(0);
    const b = await store.batch('acme', 'batch_race');
    expect(b?.request_counts).toEqual({ total: 3, completed: 2, failed: 1 });
    expect((await store.results('batch_race')).size).toBe(3);
  });

  it('takes no outcome once the batch is finalizing', async () => {
    await runningBatch('batch_late', 2);
    expect(await store.moveStatus('batch_late', 'finalizing', 'finalizing_at', ['in_progress'])).toBe(true);
    expect(await store.recordLine('batch_late', 0, 'o{}', 'completed')).toBe(-2);
    expect((await store.batch('acme', 'batch_late'))?.request_counts.completed).toBe(0);
  });

  it('moves a status only from the ones allowed, stamping the time in seconds', async () => {
    await runningBatch('batch_moves', 1);
    now += 5000;
    expect(
      await store.moveStatus('batch_moves', 'cancelling', 'cancelling_at', ['validating', 'in_progress']),
    ).toBe(true);
    expect(await store.moveStatus('batch_moves', 'in_progress', 'in_progress_at', ['validating'])).toBe(
      false,
    );
    const b = await store.batch('acme', 'batch_moves');
    expect(b?.status).toBe('cancelling');
    expect(b?.cancelling_at).toBe(Math.floor(now / 1000));
    expect(await store.moveStatus('batch_none', 'cancelling', undefined, ['in_progress'])).toBe(false);
  });

  it("reads another tenant's files and batches as absent", async () => {
    await store.putFile('acme', { id: 'file-iso', filename: 'a.jsonl', purpose: 'batch', content: 'x\n' });
    await runningBatch('batch_iso', 1);
    expect(await store.file('globex', 'file-iso')).toBeUndefined();
    expect(await store.fileContent('globex', 'file-iso')).toBeUndefined();
    expect(await store.deleteFile('globex', 'file-iso')).toBe(false);
    expect(await store.batch('globex', 'batch_iso')).toBeUndefined();
    expect((await store.listFiles('globex', { limit: 100 })).data).toEqual([]);
    expect((await store.listBatches('globex', { limit: 100 })).data).toEqual([]);
    expect((await store.fileContent('acme', 'file-iso'))?.toString()).toBe('x\n');
    expect(await store.deleteFile('acme', 'file-iso')).toBe(true);
    expect(await store.file('acme', 'file-iso')).toBeUndefined();
  });

  it('pages listings newest first with limit and after', async () => {
    for (let i = 0; i < 5; i++) {
      now += 1000;
      await store.putFile('pager', {
        id: `file-p${i}`,
        filename: `${i}.jsonl`,
        purpose: 'batch',
        content: '{}',
      });
    }
    const first = await store.listFiles('pager', { limit: 2 });
    expect(first.data.map((f) => f.id)).toEqual(['file-p4', 'file-p3']);
    expect(first.hasMore).toBe(true);
    const rest = await store.listFiles('pager', { limit: 10, after: 'file-p3' });
    expect(rest.data.map((f) => f.id)).toEqual(['file-p2', 'file-p1', 'file-p0']);
    expect(rest.hasMore).toBe(false);
  });

  it('expires a file at its retention by the store clock, and uncounts its bytes', async () => {
    const u = await begin('ret', 'file-ret');
    await u.append(Buffer.from('x'.repeat(40)));
    const f = await u.commit({ expiresInS: 60 });
    expect(f.expires_at).toBe(Math.floor(now / 1000) + 60);
    expect(await limited.storageUsage('ret')).toEqual({ files: 1, bytes: 40 });
    now += 61_000;
    expect(await limited.file('ret', 'file-ret')).toBeUndefined();
    expect(await limited.storageUsage('ret')).toEqual({ files: 0, bytes: 0 });
    expect(await backend.client.exists(new BatchKeys('bs-test').fileChunks('file-ret'))).toBe(0);
  });

  it('refuses past the byte and file quotas, and counts an upload from its first byte', async () => {
    const a = await begin('quota', 'file-qa');
    expect(await a.append(Buffer.alloc(60))).toBeUndefined();
    expect(
      await limited.beginUpload(
        'quota',
        { id: 'file-qx', filename: 'f', purpose: 'batch' },
        { declaredBytes: 50 },
      ),
    ).toEqual({
      limit: 'bytes',
      used: 60,
      max: 100,
    });
    const b = await begin('quota', 'file-qb');
    expect(await b.append(Buffer.alloc(50))).toEqual({ limit: 'bytes', used: 60, max: 100 });
    await b.abort();
    expect(await limited.storageUsage('quota')).toEqual({ files: 1, bytes: 60 });
    await begin('quota', 'file-qc');
    expect(
      await limited.beginUpload(
        'quota',
        { id: 'file-qd', filename: 'f', purpose: 'batch' },
        { declaredBytes: 0 },
      ),
    ).toEqual({
      limit: 'files',
      used: 2,
      max: 2,
    });
  });

  it('frees an upload its dispatcher never finished once it has been idle past its deadline', async () => {
    const u = await begin('crash', 'file-crash');
    await u.append(Buffer.alloc(30));
    expect(await limited.storageUsage('crash')).toEqual({ files: 1, bytes: 30 });
    now += 10 * 60_000;
    expect(await limited.storageUsage('crash')).toEqual({ files: 0, bytes: 0 });
    await expect(u.commit()).rejects.toThrow(/given up or deleted/);
  });

  it('allows as many open batches as the limit, counting a batch that ended out', async () => {
    const create = (id: string) =>
      limited.createBatch('opener', {
        id,
        keyId: 'k',
        endpoint: '/v1/completions',
        inputFileId: 'file-x',
        completionWindowS: 86_400,
        sloClass: 'batch-2',
        metadata: undefined,
      });
    expect(await create('batch_open1')).toMatchObject({ id: 'batch_open1' });
    expect(await create('batch_open2')).toEqual({ limit: 'open_batches', used: 1, max: 1 });
    expect(await limited.moveStatus('batch_open1', 'failed', 'failed_at', ['validating'])).toBe(true);
    expect(await create('batch_open3')).toMatchObject({ id: 'batch_open3' });
  });
});
