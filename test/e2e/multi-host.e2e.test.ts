import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { natsPassword } from '@fairway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NetnsLab, netnsSupport } from './support/netns.ts';
import { FAIRWAY_BIN, type StartedProcess, startProcess } from './support/processes.ts';

/**
 * fairway as it is deployed: dispatchers, engines with their agents, Redis and NATS each on a host
 * of its own, and a client on yet another. The hosts are Linux network namespaces on this machine,
 * joined by a bridge on 10.213.7.0/24; nothing is reachable from one host's loopback on another,
 * so a request is answered only if each agent registered an address the dispatchers can reach.
 * Engines listen on 0.0.0.0: engine 1 is given its address with --advertise-url, engine 2 finds it
 * (its namespace's only non-internal IPv4 address). NATS runs the shipped `infra/nats/nats-server.conf`:
 * each process connects with its role's credentials and may publish only its role's subjects.
 *
 *   npx vitest run test/e2e/multi-host.e2e.test.ts      (needs root: it creates namespaces)
 */
const exec = promisify(execFile);
const ROOT = resolve(import.meta.dirname, '..', '..');
const CLIENT = resolve(import.meta.dirname, 'support', 'netns-client.ts');
const SUBNET = '10.213.7';
const HOSTS = { infra: 2, e1: 11, e2: 12, d1: 21, d2: 22, client: 31 } as const;
const ENGINES = ['e1', 'e2'] as const;
/** Each engine host's replica, as named (with its agent's NATS user) in `infra/nats/nats-server.conf`. */
const REPLICAS = { e1: 'engine-a', e2: 'engine-b' } as const;
const NATS_CONF = resolve(ROOT, 'infra', 'nats', 'nats-server.conf');
const DISPATCHERS = ['d1', 'd2'] as const;
const MODEL = 'llama-2-7b';
const KEY = 'sk-multi-host-0001';
const REQUESTS = 100;
const CONFIG = `
tenants:
  - { id: acme, keys: [{ key: ${KEY} }] }
pools:
  - { id: llama, model: ${MODEL} }
`;

const support = netnsSupport();
if (!support.ok) console.warn(`multi-host e2e test skipped: ${support.reason}`);

describe.skipIf(!support.ok)('fairway on several hosts (Linux network namespaces)', () => {
  const lab = new NetnsLab(SUBNET);
  const dir = mkdtempSync(join(tmpdir(), 'fairway-multi-host-'));
  /** Redis and NATS, stopped last. */
  const infraProcesses: StartedProcess[] = [];
  /** Engines with their agents, and dispatchers. */
  const fleetProcesses: StartedProcess[] = [];
  const engines = new Map<string, StartedProcess>();
  const dispatchers = new Map<string, StartedProcess>();
  const url = (host: string, port: number): string => `http://${lab.address(host)}:${port}`;
  const passwords = {
    dispatcher: natsPassword(),
    admin: natsPassword(),
    e1: natsPassword(),
    e2: natsPassword(),
  };
  // A test process that dies before afterAll still removes what it created.
  const removeLab = (): void => lab.destroy();
  process.once('exit', removeLab);

  const start = async (
    host: string,
    command: readonly string[],
    ready: RegExp,
    options: { env?: Record<string, string>; readyOn?: 'stderr' } = {},
  ): Promise<StartedProcess> => {
    const [bin, ...args] = [...lab.launcher(host), ...command];
    const p = await startProcess(bin!, args, ready, { timeoutMs: 75_000, keepLines: 5000, ...options });
    (host === 'infra' ? infraProcesses : fleetProcesses).push(p);
    return p;
  };

  beforeAll(async () => {
    lab.create(HOSTS);
    const infra = lab.address('infra');
    writeFileSync(join(dir, 'fairway.yaml'), CONFIG);
    const redisArgs = [
      '--bind',
      infra,
      '--port',
      '6379',
      '--protected-mode',
      'no',
      '--save',
      '',
      '--dir',
      dir,
    ];
    const natsArgs = ['-c', NATS_CONF, '-a', infra, '-p', '4222', '-sd', join(dir, 'js')];
    const natsPasswords = {
      FAIRWAY_DISPATCHER_NATS_PASSWORD: passwords.dispatcher,
      FAIRWAY_ADMIN_NATS_PASSWORD: passwords.admin,
      FAIRWAY_AGENT_ENGINE_A_NATS_PASSWORD: passwords.e1,
      FAIRWAY_AGENT_ENGINE_B_NATS_PASSWORD: passwords.e2,
    };
    await Promise.all([
      start('infra', ['redis-server', ...redisArgs], /Ready to accept connections/),
      start('infra', ['nats-server', ...natsArgs], /Server is ready/, {
        readyOn: 'stderr',
        env: natsPasswords,
      }),
    ]);
    const natsUrl = `nats://${infra}:4222`;
    const fairway = [process.execPath, FAIRWAY_BIN];
    const engineStarts = ENGINES.map(async (host) => {
      const advertise = host === 'e1' ? ['--advertise-url', url(host, 8000)] : [];
      const args = ['engine-sim', '--host', '0.0.0.0', '--port', '8000', '--speed', '10']
        .concat(['--seed', String(HOSTS[host]), '--nats-url', natsUrl, '--replica-id', REPLICAS[host]])
        .concat(['--pool', 'llama', '--log-level', 'warn', ...advertise]);
      // Each node's agent has a NATS user of its own, allowed to publish only its replica's subjects.
      const credentials = { NATS_USER: `agent-${REPLICAS[host]}`, NATS_PASSWORD: passwords[host] };
      const ready = /registered as (http:\/\/\S+)\)/;
      engines.set(host, await start(host, [...fairway, ...args], ready, { env: credentials }));
    });
    const env = {
      FAIRWAY_CONFIG: join(dir, 'fairway.yaml'),
      REDIS_URL: `redis://${infra}:6379`,
      NATS_URL: natsUrl,
      NATS_USER: 'dispatcher',
      NATS_PASSWORD: passwords.dispatcher,
      FAIRWAY_LOG_LEVEL: 'info',
    };
    const serveStarts = DISPATCHERS.map(async (host) => {
      const args = ['serve', '--host', '0.0.0.0', '--port', '8080', '--id', host];
      dispatchers.set(host, await start(host, [...fairway, ...args], /listening on (http:\/\/\S+)/, { env }));
    });
    await Promise.all([...engineStarts, ...serveStarts]);
  }, 90_000);

  afterAll(async () => {
    // Dispatchers and agents first (they leave the fleet), then Redis and NATS, then the network.
    await Promise.all(fleetProcesses.map((p) => p.stop()));
    await Promise.all(infraProcesses.map((p) => p.stop()));
    lab.destroy();
    process.removeListener('exit', removeLab);
    rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  it('registers every engine at its advertised address, never 0.0.0.0 or loopback', async () => {
    for (const host of ENGINES) expect(engines.get(host)?.url).toBe(url(host, 8000));
    /** Replica id → URL, from the registrations a dispatcher's registry logged. */
    const registered = (host: string): Record<string, string> => {
      const seen: Record<string, string> = {};
      for (const line of dispatchers.get(host)?.output ?? []) {
        if (!line.includes('registry: replica registered')) continue;
        const entry = JSON.parse(line) as { replicaId: string; url: string };
        seen[entry.replicaId] = entry.url;
      }
      return seen;
    };
    const expected = { [REPLICAS.e1]: url('e1', 8000), [REPLICAS.e2]: url('e2', 8000) };
    for (const host of DISPATCHERS) {
      // A dispatcher hears an agent at its next registration or on its own discover request.
      const deadline = Date.now() + 15_000;
      while (Object.keys(registered(host)).length < ENGINES.length && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 100));
      expect(registered(host), `dispatcher ${host}`).toEqual(expected);
    }
  });

  it(`answers ${REQUESTS} requests through each dispatcher from a client on another host`, async () => {
    const plan = {
      dispatchers: DISPATCHERS.map((h) => url(h, 8080)),
      engines: ENGINES.map((h) => url(h, 8000)),
      key: KEY,
      model: MODEL,
      requests: REQUESTS,
      concurrency: 8,
      outputTokens: 8,
      readyTimeoutMs: 30_000,
    };
    const { stdout } = await exec(
      'ip',
      ['netns', 'exec', lab.namespaces.find((n) => n.endsWith('-client'))!, process.execPath].concat([
        '--import',
        'tsx',
        CLIENT,
        JSON.stringify(plan),
      ]),
      { cwd: ROOT, timeout: 60_000 },
    );
    const result = JSON.parse(stdout) as {
      dispatchers: { url: string; answered: number; failures: string[] }[];
      engines: { url: string; completed: number }[];
    };
    expect(result.dispatchers).toEqual(
      plan.dispatchers.map((u) => ({ url: u, answered: REQUESTS, failures: [] })),
    );
    // Both engine hosts served (the readiness probes add a request or two to the total).
    for (const e of result.engines) expect(e.completed, e.url).toBeGreaterThan(0);
    const total = result.engines.reduce((a, e) => a + e.completed, 0);
    expect(total).toBeGreaterThanOrEqual(DISPATCHERS.length * REQUESTS);
  }, 70_000);
});
