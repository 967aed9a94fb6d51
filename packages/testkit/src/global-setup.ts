import { startNatsServer, startRedisServer, type TestServer } from './servers.ts';

const started: TestServer[] = [];

/**
 * Vitest global setup: gives every test worker a real Redis and a real NATS. `REDIS_URL` and
 * `NATS_URL` are used when set; otherwise throw-away servers start on free ports and stop at the end.
 */
export async function setup(): Promise<void> {
  if (!process.env.REDIS_URL) {
    const redis = await startRedisServer();
    started.push(redis);
    process.env.REDIS_URL = redis.url;
  }
  if (!process.env.NATS_URL) {
    const nats = await startNatsServer();
    started.push(nats);
    process.env.NATS_URL = nats.url;
  }
}

export async function teardown(): Promise<void> {
  await Promise.all(started.map((s) => s.stop()));
}
