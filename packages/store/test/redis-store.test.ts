import type { Redis } from 'ioredis';
import { afterAll, beforeAll } from 'vitest';
import { describeStoreConformance } from './conformance.ts';
import { connect, deletePrefix, freshRedisStore } from './redis-harness.ts';

let redis: Redis;
beforeAll(() => {
  redis = connect();
});
afterAll(async () => {
  await redis.quit();
});

describeStoreConformance('redis', async () => {
  const store = freshRedisStore(redis);
  return {
    store,
    dispose: async () => {
      await deletePrefix(redis, store);
      await store.close();
    },
  };
});
