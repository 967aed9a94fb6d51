import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { freePort, TestServerError, waitForPort } from '@fairway/testkit';
import { Redis } from 'ioredis';

/** How the chaos fleet's Redis keeps its data across a restart. */
export type RedisPersistence = 'aof' | 'none';

/**
 * A Redis or NATS server the chaos suite owns: started on a port of its own (never the machine's
 * 6379 / 4222), killed or stopped as a fault, and started again on the same port with the same
 * data directory — what a supervisor (systemd, Kubernetes) does after a crash.
 */
export class RestartableServer {
  readonly name: string;
  readonly port: number;
  readonly url: string;
  #argv: readonly [string, readonly string[]];
  #child: ChildProcess | undefined;
  #exited: Promise<void> = Promise.resolve();
  readonly #output: string[] = [];

  private constructor(
    name: string,
    scheme: string,
    port: number,
    argv: readonly [string, readonly string[]],
  ) {
    this.name = name;
    this.port = port;
    this.url = `${scheme}://127.0.0.1:${port}`;
    this.#argv = argv;
  }

  /** A `redis-server` on a free port with its data (AOF when `persistence` is `aof`) in `dir`. */
  static async redis(dir: string, persistence: RedisPersistence): Promise<RestartableServer> {
    const port = await freePort();
    const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', ''];
    args.push(
      ...(persistence === 'aof'
        ? ['--appendonly', 'yes', '--appendfsync', 'everysec']
        : ['--appendonly', 'no']),
    );
    const server = new RestartableServer('redis', 'redis', port, ['redis-server', args]);
    await server.start();
    return server;
  }

  /**
   * Turns a Redis started with AOF into one without persistence: AOF off now (`CONFIG SET`) and
   * at the next start, so a restart comes back empty.
   */
  async dropPersistence(): Promise<void> {
    const [bin, args] = this.#argv;
    const at = args.indexOf('--appendonly');
    this.#argv = [bin, [...args.slice(0, at), '--appendonly', 'no']];
    const redis = new Redis(this.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
    try {
      await redis.connect();
      await redis.config('SET', 'appendonly', 'no');
    } finally {
      redis.disconnect();
    }
  }

  /** A `nats-server` with JetStream on a free port, its store in `dir`. */
  static async nats(dir: string): Promise<RestartableServer> {
    const port = await freePort();
    const bin = process.env.NATS_SERVER_BIN ?? 'nats-server';
    const server = new RestartableServer('nats', 'nats', port, [
      bin,
      ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', dir],
    ]);
    await server.start();
    return server;
  }

  /** Whether the process is alive. */
  get running(): boolean {
    const c = this.#child;
    return c !== undefined && c.exitCode === null && c.signalCode === null;
  }

  /** The operating-system process id while running. */
  get pid(): number | undefined {
    return this.running ? this.#child?.pid : undefined;
  }

  /** Starts the server (again) and resolves once it accepts connections. */
  async start(): Promise<void> {
    if (this.running) return;
    const [bin, args] = this.#argv;
    const child = spawn(bin, [...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.#child = child;
    this.#exited = new Promise((r) => child.once('exit', () => r()));
    for (const s of [child.stdout, child.stderr]) {
      createInterface({ input: s }).on('line', (l) => {
        this.#output.push(l);
        if (this.#output.length > 50) this.#output.shift();
      });
    }
    const spawnError = new Promise<never>((_, reject) => {
      child.once('error', (err) => reject(new TestServerError(`cannot start ${bin}: ${err.message}`)));
      child.once('exit', (code) =>
        reject(new TestServerError(`${bin} exited with ${code}:\n${this.#output.join('\n')}`)),
      );
    });
    spawnError.catch(() => undefined);
    await Promise.race([waitForPort(this.port, 15_000), spawnError]);
  }

  /** SIGKILL: the server dies at once, as in a crash or an OOM kill. */
  async kill9(): Promise<void> {
    if (!this.running) return;
    this.#child?.kill('SIGKILL');
    await this.#exited;
  }

  /** SIGTERM (a clean shutdown), SIGKILL after 5 s; resolves once the process is gone. */
  async stop(): Promise<void> {
    if (!this.running) return;
    const child = this.#child as ChildProcess;
    child.kill('SIGCONT');
    child.kill('SIGTERM');
    const t = setTimeout(() => child.kill('SIGKILL'), 5000);
    await this.#exited;
    clearTimeout(t);
  }
}
