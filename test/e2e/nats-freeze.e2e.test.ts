import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type RestartableServer, redisUrl, startRestartableNatsServer, uniquePrefix } from '@fairway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ChatOutcome, sendChat } from './support/chat.ts';
import { E2E_MODEL, E2E_POOL, singleTenantConfig } from './support/fleet-config.ts';
import {
  type FairwayProcess,
  startEngineSims,
  startServe,
  stopFleet,
  untilServed,
} from './support/processes.ts';

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
  const engines: FairwayProcess[] = [];
  let dispatcher: FairwayProcess | undefined;

  beforeAll(async () => {
    nats = await startRestartableNatsServer();
    const dir = mkdtempSync(join(tmpdir(), 'fairway-freeze-'));
    const configPath = join(dir, 'fairway.yaml');
    writeFileSync(configPath, singleTenantConfig(KEY, 30));
    engines.push(
      ...(await startEngineSims(2, [
        ...['--nats-url', nats.url, '--prefix', prefix, '--pool', E2E_POOL, '--log-level', 'warn'],
        ...['--speed', '100', '--max-num-seqs', '64'],
      ])),
    );
    dispatcher = (
      await startServe(
        'freeze',
        { configPath, redisUrl: redisUrl(), natsUrl: nats.url, prefix },
        { FAIRWAY_LOG_LEVEL: 'error' },
      )
    ).proc;
    const d = dispatcher;
    await untilServed(d, async () => (await chat(d.url)).status);
  }, 90_000);

  afterAll(async () => {
    nats?.thaw();
    await stopFleet([...(dispatcher === undefined ? [] : [dispatcher]), ...engines], nats, prefix);
  }, 60_000);

  it(`serves every request while the server hangs for ${FREEZE_MS / 1000} s, and after`, async () => {
    const d = dispatcher as FairwayProcess;
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
