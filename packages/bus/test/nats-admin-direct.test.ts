import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startNatsServer, type TestServer, uniquePrefix } from '@fairway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AdminEventRecord, NatsBus } from '../src/index.ts';
import { waitFor } from './helpers.ts';

/**
 * A subscriber that cannot start a JetStream consumer — as while a NATS cluster elects its meta
 * leader after a server died — still replays and applies the admin events, in order and once
 * each, read from the stream by direct gets. Here the consumer is refused by a real
 * nats-server's permissions: the `reader` user may look the stream up and get its messages by
 * sequence, nothing more.
 */
describe('NatsBus admin events without a consumer', () => {
  let nats: TestServer;
  let dir: string;
  const prefix = uniquePrefix('direct');
  const stream = `${prefix}_admin`;
  const buses: NatsBus[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fairway-nats-direct-'));
    const config = join(dir, 'nats-server.conf');
    writeFileSync(
      config,
      `jetstream {}
authorization {
  users = [
    { user: "writer", password: "writer-pass" }
    {
      user: "reader", password: "reader-pass",
      permissions: {
        publish: { allow: ["$JS.API.INFO", "$JS.API.STREAM.INFO.${stream}", "$JS.API.DIRECT.GET.${stream}"] }
        subscribe: { allow: ["_INBOX.>"] }
      }
    }
  ]
}
`,
    );
    nats = await startNatsServer({ configPath: config });
  });
  afterAll(async () => {
    for (const b of buses) await b.close().catch(() => undefined);
    await nats?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const connect = async (user: string): Promise<NatsBus> => {
    const bus = await NatsBus.connect({
      servers: `nats://${user}:${user}-pass@127.0.0.1:${nats.port}`,
      prefix,
      name: user,
    });
    buses.push(bus);
    return bus;
  };

  it('applies the stored and the new events by direct gets, in order and once each', async () => {
    const writer = await connect('writer');
    await writer.publishAdminEvent({ type: 'tenantUpsert', at: 1, tenant: { id: 'a' } });
    await writer.publishAdminEvent({ type: 'tenantUpsert', at: 2, tenant: { id: 'b' } });

    const reader = await connect('reader');
    const seen: AdminEventRecord[] = [];
    await reader.subscribeAdminEvents((r) => {
      seen.push(r);
    });
    await waitFor(() => seen.length >= 2, 20_000, 'the stored events');
    await writer.publishAdminEvent({ type: 'tenantDelete', at: 3, tenantId: 'a' });
    await waitFor(() => seen.length >= 3, 20_000, 'the event published later');
    // Another retry or two: nothing is applied twice.
    await new Promise((r) => setTimeout(r, 2500));
    expect(seen.map((r) => [r.seq, r.event.type])).toEqual([
      [1, 'tenantUpsert'],
      [2, 'tenantUpsert'],
      [3, 'tenantDelete'],
    ]);
    expect(seen[2]?.subject).toBe(`${prefix}.admin.tenantDelete`);
  }, 60_000);

  it("replays the stream's history by direct gets, as a starting dispatcher reads it", async () => {
    const writer = await connect('writer');
    const first = await writer.publishAdminEvent({ type: 'tenantUpsert', at: 4, tenant: { id: 'c' } });
    await writer.publishAdminEvent({ type: 'tenantDelete', at: 5, tenantId: 'c' });
    const reader = await connect('reader');
    const replayed = await reader.replayAdminEvents(first);
    expect(replayed.map((r) => [r.seq, r.event.type])).toEqual([
      [first, 'tenantUpsert'],
      [first + 1, 'tenantDelete'],
    ]);
  }, 30_000);
});
