import { type RestartableServer, redisUrl, startRestartableNatsServer, uniquePrefix } from '@fairway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ChatOutcome, sendChat } from './support/chat.ts';
import { E2E_MODEL } from './support/fleet-config.ts';
import { stopFleet } from './support/processes.ts';
import { type SmallFleet, startSmallFleet } from './support/small-fleet.ts';

const KEY = 'sk-freeze-alpha-0001';
const FREEZE_MS = 8000;

const chat = (url: string): Promise<ChatOutcome> => sendChat(url, { key: KEY, model: E2E_MODEL, tokens: 4 });

/**
 * A NATS server that hangs rather than dies (SIGSTOP: its connections stay open, nothing answers,
 * as behind a network that drops packets), under a real fleet: two `fairway engine-sim` processes
 * with their agents and one `fairway serve` on the machine's Redis. No heartbeat arrives and no
 * connection breaks until pings time out; the dispatcher must keep placing on the replicas it
 * last heard from.
 */
describe('a frozen NATS server under load', () => {
  const prefix = uniquePrefix('freeze');
  let nats: RestartableServer;
  let fleet: SmallFleet | undefined;

  beforeAll(async () => {
    nats = await startRestartableNatsServer();
    fleet = await startSmallFleet({
      id: 'nats-freeze',
      key: KEY,
      redisUrl: redisUrl(),
      natsUrl: nats.url,
      prefix,
      attempt: async (d) => (await chat(d.url)).status,
    });
  }, 90_000);

  afterAll(async () => {
    nats?.thaw();
    await stopFleet(fleet === undefined ? [] : [fleet.dispatcher, ...fleet.engines], nats, prefix);
  }, 60_000);

  it(`serves every request while the server hangs for ${FREEZE_MS / 1000} s, and after`, async () => {
    const d = (fleet as SmallFleet).dispatcher;
    const during: ChatOutcome[] = [];
    let running = true;
    nats.freeze();
    const lanes = Array.from({ length: 4 }, async () => {
      while (running) during.push(await chat(d.url));
    });
    await new Promise((r) => setTimeout(r, FREEZE_MS));
    running = false;
    await Promise.all(lanes);
    nats.thaw();
    const failed = during.filter((o) => !o.ok).map((o) => `${o.status} ${o.text.slice(0, 160)}`);
    expect(failed).toEqual([]);
    expect(during.length).toBeGreaterThan(20);
    // The bus is back: the fleet goes on serving on heartbeats again.
    const after: ChatOutcome[] = [];
    for (let i = 0; i < 10; i++) after.push(await chat(d.url));
    expect(after.filter((o) => !o.ok)).toEqual([]);
  }, 60_000);
});
