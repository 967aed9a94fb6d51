import { startRedisCluster, startRedisServer } from '@fairway/testkit';
import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatchKeys } from '../src/batch-keys.ts';
import { BatchStore } from '../src/batch-store.ts';

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

  beforeAll(async () => {
    backend = await start();
    store = new BatchStore(backend.client, new BatchKeys('bs-test'), clock);
  }, 60_000);

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
});
