import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type AdminEventInput, generateOperatorKeyPair, NatsBus, OperatorSigner } from '@fairway/bus';
import { hashApiKey } from '@fairway/dispatcher';
import {
  freePort,
  type RestartableServer,
  redisUrl,
  startRestartableNatsServer,
  uniquePrefix,
} from '@fairway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ChatOutcome, gatewayMetric as metric, sendChat } from './support/chat.ts';
import { E2E_MODEL, E2E_POOL, singleTenantConfig } from './support/fleet-config.ts';
import { type FairwayProcess, startEngineSims, startFairway, stopFleet } from './support/processes.ts';

/**
 * A NATS outage against a real fleet: two `fairway engine-sim` processes with their agents and two
 * `fairway serve` dispatchers on the machine's Redis (random prefix) and a NATS server of this
 * test's own, stopped for 10 s under streaming load and started again on the same port and
 * JetStream store. Heartbeats cannot arrive meanwhile; the dispatchers must keep serving on the
 * replica states they last knew (probing the engines directly), and the admin stream must resume
 * where it stopped.
 */
const MODEL = E2E_MODEL;
const POOL = E2E_POOL;
const KEY = 'sk-outage-alpha-0001';
const CONFIG = singleTenantConfig(KEY, 30);

const chat = (url: string, key: string, tokens: number) => sendChat(url, { key, model: MODEL, tokens });

/** The operator's key: dispatchers apply only admin events it signed. */
const operator = generateOperatorKeyPair();
const signer = OperatorSigner.fromPem(operator.privateKeyPem);

/** Publishes a signed admin event, retrying while the client is still reconnecting. */
async function publishAdmin(bus: NatsBus, event: AdminEventInput): Promise<number> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    try {
      return await bus.publishAdminEvent(signer.sign(event, bus.prefix));
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

/** Polls until `key` is served by every dispatcher (its admin events were applied everywhere). */
async function keyWorks(
  dispatchers: readonly FairwayProcess[],
  key: string,
  timeoutMs = 15_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (const d of dispatchers) {
    for (;;) {
      const a = await chat(d.url, key, 2);
      if (a.ok) break;
      if (Date.now() > deadline) throw new Error(`key not accepted by ${d.url}: ${a.status} ${a.text}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

describe('a NATS outage under load', () => {
  const prefix = uniquePrefix('outage');
  let nats: RestartableServer;
  let admin: NatsBus;
  const engines: FairwayProcess[] = [];
  const dispatchers: FairwayProcess[] = [];
  /** Each dispatcher's operator listener (`/metrics`). */
  const metricsUrls: string[] = [];

  beforeAll(async () => {
    nats = await startRestartableNatsServer();
    const dir = mkdtempSync(join(tmpdir(), 'fairway-outage-'));
    const configPath = join(dir, 'fairway.yaml');
    writeFileSync(configPath, CONFIG);
    const operatorKey = join(dir, 'operator.pub.pem');
    writeFileSync(operatorKey, operator.publicKeyPem);
    const common = ['--nats-url', nats.url, '--prefix', prefix, '--pool', POOL, '--log-level', 'warn'];
    engines.push(...(await startEngineSims(2, ['--speed', '1', '--max-num-seqs', '8', ...common])));
    const operatorPorts = [await freePort(), await freePort()];
    metricsUrls.push(...operatorPorts.map((p) => `http://127.0.0.1:${p}`));
    dispatchers.push(
      ...(await Promise.all(
        ['a', 'b'].map((id, i) =>
          startFairway(['serve', '--id', id], /listening on (http:\/\/\S+)/, {
            FAIRWAY_OPERATOR_PORT: String(operatorPorts[i]),
            FAIRWAY_CONFIG: configPath,
            REDIS_URL: redisUrl(),
            NATS_URL: nats.url,
            FAIRWAY_PREFIX: prefix,
            FAIRWAY_OPERATOR_PUBLIC_KEY_FILE: operatorKey,
            PORT: '0',
            FAIRWAY_LOG_LEVEL: 'error',
          }),
        ),
      )),
    );
    admin = await NatsBus.connect({ servers: nats.url, prefix, name: 'test admin' });
    await keyWorks(dispatchers, KEY);
  }, 90_000);

  afterAll(async () => {
    await admin?.close().catch(() => undefined);
    await stopFleet([...dispatchers, ...engines], nats, prefix);
  }, 60_000);

  it('keeps serving for the 10 s NATS is down and applies admin events published once it is back', async () => {
    // An admin change before the outage: the admin consumer has a position to resume from.
    const at = Date.now();
    await publishAdmin(admin, { type: 'tenantUpsert', at, tenant: { id: 'beta' } });
    await publishAdmin(admin, {
      type: 'keyAdd',
      at,
      tenantId: 'beta',
      keyHash: hashApiKey('sk-outage-beta-0001'),
    });
    await keyWorks(dispatchers, 'sk-outage-beta-0001');

    const outcomes: ChatOutcome[] = [];
    let running = true;
    const workers = Array.from({ length: 8 }, async (_, w) => {
      for (let i = 0; running; i++) outcomes.push(await chat(dispatchers[(w + i) % 2]!.url, KEY, 20));
    });
    await new Promise((r) => setTimeout(r, 1000));
    await nats.halt();
    await new Promise((r) => setTimeout(r, 2000));
    // The dispatchers know the bus is down (and say so in their metrics).
    for (const u of metricsUrls) expect(await metric(u, 'fairway_bus_connected')).toBe(0);
    const during = outcomes.length;
    await new Promise((r) => setTimeout(r, 8000));
    const served = outcomes.length - during;
    await nats.resume();
    // Published right after NATS is back: every dispatcher's admin consumer resumes and applies it.
    await publishAdmin(admin, {
      type: 'keyAdd',
      at: Date.now(),
      tenantId: 'beta',
      keyHash: hashApiKey('sk-outage-beta-0002'),
    });
    await new Promise((r) => setTimeout(r, 4000));
    running = false;
    await Promise.all(workers);
    await keyWorks(dispatchers, 'sk-outage-beta-0002');
    for (const u of metricsUrls) expect(await metric(u, 'fairway_bus_connected')).toBe(1);

    const ok = outcomes.filter((o) => o.ok).length;
    const failures = outcomes.filter((o) => !o.ok).map((o) => `${o.status} ${o.text.slice(0, 160)}`);
    console.info(
      `NATS down 10 s under load: ${outcomes.length} requests, ${ok} succeeded (${((100 * ok) / outcomes.length).toFixed(1)}%), ` +
        `${served} ended during the outage`,
    );
    // Requests kept completing while NATS was down, not only after it came back.
    expect(served).toBeGreaterThan(0);
    expect(ok / outcomes.length, failures.join('\n')).toBeGreaterThanOrEqual(0.95);
  }, 120_000);
});
