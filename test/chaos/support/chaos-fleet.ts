import { createWriteStream, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type RestartableRedisServer,
  type RestartableServer,
  startRestartableNatsServer,
  startRestartableRedisServer,
} from '@fairway/testkit';
import { type FairwayProcess, startFairway } from '../../e2e/support/processes.ts';

/** The model every engine serves and every request asks for. */
export const MODEL = 'llama-2-7b';
const POOL = 'llama';
const PREFIX = 'chaos';

/** Tenants whose streamed requests make the load, with their API keys. */
export const LOAD_TENANTS = [
  { id: 'acme', key: 'sk-chaos-acme-0001' },
  { id: 'globex', key: 'sk-chaos-globex-0001' },
  { id: 'initech', key: 'sk-chaos-initech-0001' },
] as const;

/** How many tenants with an RPM limit the config has: one per experiment, so windows never mix. */
const CAPPED_TENANTS = 8;

/** The `n`-th tenant with an RPM limit, whose overshoot a fault may cause. */
export function cappedTenant(n: number): { id: string; key: string } {
  const i = (n % CAPPED_TENANTS) + 1;
  return { id: `capped-${i}`, key: `sk-chaos-capped-000${i}` };
}

/** Shape of a chaos fleet. */
export interface FleetOptions {
  /** `fairway serve` processes. @default 3 */
  readonly dispatchers: number;
  /** `fairway engine-sim` processes. @default 3 */
  readonly engines: number;
  /**
   * `separate`: each engine has its own `fairway agent` process (an engine dies alone, as vLLM
   * beside its agent, which announces it gone); `embedded`: `engine-sim --nats-url` runs the agent
   * in the engine process
   * and both die or pause together, as a node does; only the heartbeat's silence tells the
   * dispatchers. @default 'embedded'
   */
  readonly agents: 'separate' | 'embedded';
  /** Redis with an append-only file (`appendfsync everysec`) or no persistence. @default 'aof' */
  readonly redisPersistence: 'aof' | 'none';
  /** Engine speed factor (model ms per real ms). @default 2 */
  readonly engineSpeed: number;
  /** `--max-num-seqs` of each engine. @default 4 */
  readonly maxNumSeqs: number;
  /** Dispatcher lease, ms (`FAIRWAY_LEASE_MS`). @default 5000 */
  readonly leaseMs: number;
  /** RPM limit of {@link CAPPED_TENANT}. @default 20 */
  readonly cappedRpm: number;
  /** Gateway queue timeout, s. @default 60 */
  readonly queueTimeoutS: number;
  /**
   * The dispatchers' log level: `info` logs every request by its `x-request-id` (see
   * `RequestRecord.requestId`), to trace a failed one through both dispatchers. @default 'warn'
   */
  readonly dispatcherLogLevel: 'warn' | 'info' | 'debug';
  /**
   * A directory each dispatcher's whole output is appended to (`d<n>.log`; the harness keeps only
   * its last lines), kept after the fleet closes. @default none
   */
  readonly logDir: string | undefined;
}

/** Defaults of {@link FleetOptions}. */
export const DEFAULT_FLEET: FleetOptions = {
  dispatchers: 3,
  engines: 3,
  agents: 'embedded',
  redisPersistence: 'aof',
  engineSpeed: 2,
  maxNumSeqs: 4,
  leaseMs: 5000,
  cappedRpm: 20,
  queueTimeoutS: 60,
  dispatcherLogLevel: 'warn',
  logDir: undefined,
};

function configYaml(o: FleetOptions): string {
  const tenants = LOAD_TENANTS.map((t) => `  - { id: ${t.id}, keys: [{ key: ${t.key} }] }`);
  for (let n = 0; n < CAPPED_TENANTS; n++) {
    const t = cappedTenant(n);
    tenants.push(`  - { id: ${t.id}, limits: { rpm: ${o.cappedRpm} }, keys: [{ key: ${t.key} }] }`);
  }
  return [
    'tenants:',
    ...tenants,
    'pools:',
    `  - { id: ${POOL}, model: ${MODEL} }`,
    'policy:',
    '  ordering: vtc',
    '  placement: least-kv',
    `  queueTimeoutS: ${o.queueTimeoutS}`,
    '',
  ].join('\n');
}

/**
 * The environment of a fleet process: the harness's own, with every variable that would point a
 * process elsewhere blanked (CI sets `REDIS_URL` / `NATS_URL` to the machine's servers; fairway
 * ignores empty values), then the fleet's own values.
 */
function fleetEnv(own: Readonly<Record<string, string>>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const k of Object.keys(process.env)) {
    if (/^(FAIRWAY_|REDIS_|NATS_(URL|USER|PASS|TOKEN|CREDS))|^(PORT|HOST)$/.test(k)) env[k] = '';
  }
  // No operator listener: its default port is fixed, and a fleet runs several dispatchers here.
  return { ...env, FAIRWAY_OPERATOR_PORT: '0', ...own };
}

const LISTENING = /listening on (http:\/\/\S+)/;
const LOG_LEVEL = ['--log-level', 'warn'];

/** Every fleet not yet closed, so an interrupted run can still stop its processes. */
const open = new Set<ChaosFleet>();

/**
 * A real fairway fleet as separate processes — its own Redis and NATS (JetStream), engines with
 * their agents, dispatchers — started from the `fairway` CLI for one chaos experiment.
 */
export class ChaosFleet {
  readonly options: FleetOptions;
  readonly dir: string;
  readonly redis: RestartableRedisServer;
  readonly nats: RestartableServer;
  readonly engines: FairwayProcess[] = [];
  readonly agents: FairwayProcess[] = [];
  readonly dispatchers: FairwayProcess[] = [];
  #closed = false;

  private constructor(
    options: FleetOptions,
    dir: string,
    redis: RestartableRedisServer,
    nats: RestartableServer,
  ) {
    this.options = options;
    this.dir = dir;
    this.redis = redis;
    this.nats = nats;
  }

  /** Starts Redis, NATS, the engines and their agents, then the dispatchers; closes all on failure. */
  static async start(options: Partial<FleetOptions> = {}): Promise<ChaosFleet> {
    const o = { ...DEFAULT_FLEET, ...options };
    const dir = mkdtempSync(join(tmpdir(), 'fairway-chaos-'));
    let redis: RestartableRedisServer | undefined;
    let nats: RestartableServer | undefined;
    try {
      redis = await startRestartableRedisServer({ aof: o.redisPersistence === 'aof' });
      nats = await startRestartableNatsServer();
    } catch (err) {
      await redis?.stop();
      rmSync(dir, { recursive: true, force: true });
      throw err;
    }
    const fleet = new ChaosFleet(o, dir, redis, nats);
    open.add(fleet);
    try {
      await fleet.#startProcesses();
    } catch (err) {
      await fleet.close();
      throw err;
    }
    return fleet;
  }

  /** Closes every fleet still open (an interrupted run). */
  static async closeAll(): Promise<void> {
    await Promise.all([...open].map((f) => f.close()));
  }

  /** Base URLs of the dispatchers, in start order. */
  get dispatcherUrls(): string[] {
    return this.dispatchers.map((d) => d.url);
  }

  async #startProcesses(): Promise<void> {
    const o = this.options;
    writeFileSync(this.#configPath, configYaml(o));
    const engines = await Promise.allSettled(
      Array.from({ length: o.engines }, (_, i) => this.#startEngine(i, 0)),
    );
    this.#keep(engines, this.engines);
    if (o.agents === 'separate') {
      const agents = await Promise.allSettled(this.engines.map((e, i) => this.#startAgent(i, e.url)));
      this.#keep(agents, this.agents);
    }
    const dispatchers = await Promise.allSettled(
      Array.from({ length: o.dispatchers }, (_, i) => this.#startDispatcher(i, 0)),
    );
    this.#keep(dispatchers, this.dispatchers);
  }

  get #configPath(): string {
    return join(this.dir, 'fairway.yaml');
  }

  get #bus(): string[] {
    return ['--nats-url', this.nats.url, '--prefix', PREFIX];
  }

  #startEngine(i: number, port: number): Promise<FairwayProcess> {
    const o = this.options;
    const args = ['engine-sim', '--port', String(port), '--model', MODEL, '--speed', String(o.engineSpeed)];
    args.push('--max-num-seqs', String(o.maxNumSeqs), '--seed', String(i + 1), ...LOG_LEVEL);
    if (o.agents === 'embedded') args.push(...this.#bus, '--pool', POOL, '--replica-id', `engine-${i + 1}`);
    return startFairway(args, LISTENING, fleetEnv({}));
  }

  #startAgent(i: number, engineUrl: string): Promise<FairwayProcess> {
    const args = ['agent', '--engine-url', engineUrl, '--replica-id', `engine-${i + 1}`, '--model', MODEL];
    args.push('--pool', POOL, '--max-num-seqs', String(this.options.maxNumSeqs), ...this.#bus, ...LOG_LEVEL);
    return startFairway(args, /fairway agent: replica (\S+)/, fleetEnv({}));
  }

  #startDispatcher(i: number, port: number): Promise<FairwayProcess> {
    const env = fleetEnv({
      FAIRWAY_CONFIG: this.#configPath,
      REDIS_URL: this.redis.url,
      NATS_URL: this.nats.url,
      FAIRWAY_PREFIX: PREFIX,
      PORT: String(port),
      FAIRWAY_LEASE_MS: String(this.options.leaseMs),
      FAIRWAY_LOG_LEVEL: this.options.dispatcherLogLevel,
    });
    const args = ['serve', '--id', `d${i + 1}`, '--redis-url', this.redis.url, '--nats-url', this.nats.url];
    const started = startFairway(args, LISTENING, env);
    const logDir = this.options.logDir;
    if (logDir === undefined) return started;
    return started.then((p) => {
      const log = createWriteStream(join(logDir, `d${i + 1}.log`), { flags: 'a' });
      p.proc.stdout?.on('data', (b: Buffer) => log.write(b));
      p.proc.stderr?.on('data', (b: Buffer) => log.write(b));
      p.proc.once('exit', () => log.end());
      return p;
    });
  }

  /** Starts engine `i` again on its port (with its agent, if embedded) after it was killed. */
  async restartEngine(i: number): Promise<void> {
    const old = this.engines[i]!;
    await old.stop();
    this.engines[i] = await this.#startEngine(i, Number(new URL(old.url).port));
  }

  /** Starts dispatcher `i` again on its port after it was killed. */
  async restartDispatcher(i: number): Promise<void> {
    const old = this.dispatchers[i]!;
    await old.stop();
    this.dispatchers[i] = await this.#startDispatcher(i, Number(new URL(old.url).port));
  }

  /** Keeps the processes that started; throws the first failure after keeping the rest (to close them). */
  #keep(results: PromiseSettledResult<FairwayProcess>[], into: FairwayProcess[]): void {
    for (const r of results) if (r.status === 'fulfilled') into.push(r.value);
    const failed = results.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
  }

  /**
   * Resolves once every dispatcher answers and every running engine has served: bursts of small
   * requests through each dispatcher (concurrent, so least-KV spreads them) until both hold.
   */
  async warmUp(timeoutMs = 45_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    const tenant = LOAD_TENANTS[0];
    for (;;) {
      const statuses = await Promise.all(
        this.dispatcherUrls.flatMap((url) =>
          Array.from({ length: this.engines.length * 2 }, () =>
            fetch(`${url}/v1/chat/completions`, {
              method: 'POST',
              headers: { authorization: `Bearer ${tenant.key}`, 'content-type': 'application/json' },
              body: JSON.stringify({
                model: MODEL,
                messages: [{ role: 'user', content: 'warm up' }],
                max_tokens: 2,
              }),
              signal: AbortSignal.timeout(5000),
            }).then(
              async (r) => {
                await r.arrayBuffer();
                return r.status;
              },
              () => 0,
            ),
          ),
        ),
      );
      const alive = this.engines.filter((e) => e.proc.exitCode === null && e.proc.signalCode === null);
      const served = await Promise.all(alive.map((e) => engineServed(e.url)));
      if (statuses.every((s) => s === 200) && served.every(Boolean)) return;
      if (Date.now() > deadline) {
        const logs = this.dispatchers.map((d, i) => `d${i + 1}:\n${d.output.slice(-10).join('\n')}`);
        throw new Error(
          `fleet not serving after ${timeoutMs} ms (statuses ${statuses.join(',')}, engines served ${served.join(',')}):\n${logs.join('\n')}`,
        );
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  /** Stops every process (continuing paused ones first), then removes the temp directory. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    open.delete(this);
    // testkit's servers are unref'd children with unref'd timers: without a timer of our own,
    // a process with nothing else to do would exit while waiting for them to stop.
    const keepAlive = setInterval(() => undefined, 1000);
    try {
      const fairway = [...this.dispatchers, ...this.agents, ...this.engines];
      for (const p of fairway) p.proc.kill('SIGCONT');
      await Promise.all(fairway.map((p) => p.stop()));
      await Promise.all([this.redis.stop(), this.nats.stop()]);
      rmSync(this.dir, { recursive: true, force: true });
    } finally {
      clearInterval(keepAlive);
    }
  }
}

/** Whether an engine-sim has counted prompt tokens (vLLM's `vllm:prompt_tokens_total`). */
async function engineServed(url: string): Promise<boolean> {
  try {
    const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(2000) })).text();
    return text
      .split('\n')
      .some((l) => l.startsWith('vllm:prompt_tokens_total') && Number(l.slice(l.lastIndexOf(' ') + 1)) > 0);
  } catch {
    return false;
  }
}
