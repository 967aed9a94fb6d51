import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A server process started for tests, with the URL clients connect to. */
export interface TestServer {
  readonly url: string;
  readonly port: number;
  stop(): Promise<void>;
}

/** Error raised when a required server binary cannot be found or does not come up. */
export class TestServerError extends Error {
  override readonly name = 'TestServerError';
}

/** Asks the kernel for a free TCP port on 127.0.0.1. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === 'object' && addr ? resolve(addr.port) : reject(new Error('no port'))));
    });
  });
}

/** Resolves once something accepts TCP connections on the port, or rejects after `timeoutMs`. */
export async function waitForPort(port: number, timeoutMs = 10_000, host = '127.0.0.1'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = new Socket();
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
      s.connect(port, host);
    });
    if (ok) return;
    if (Date.now() > deadline)
      throw new TestServerError(`nothing listens on ${host}:${port} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function startProcess(
  bin: string,
  args: string[],
  installHint: string,
  env?: Readonly<Record<string, string>>,
): ChildProcess {
  const child = spawn(bin, args, { stdio: 'ignore', ...(env ? { env: { ...process.env, ...env } } : {}) });
  child.on('error', (err) => {
    // The spawn failure surfaces through waitForPort; this keeps it from being an unhandled event.
    child.emit('fairway-spawn-error', err);
  });
  child.once('fairway-spawn-error', () => undefined);
  child.unref();
  if (child.pid === undefined) {
    throw new TestServerError(`cannot start ${bin}: not installed? (${installHint})`);
  }
  return child;
}

async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  // Referenced while it stops, so a script (not only a test runner) waits for it.
  child.ref();
  await new Promise<void>((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
    setTimeout(() => {
      child.kill('SIGKILL');
      resolve();
    }, 3000).unref();
  });
}

/**
 * Starts a server on a port from {@link freePort} and waits for it to listen. Another process can
 * take the port between the kernel naming it and the server binding it (the server then exits at
 * once), so a server that exits before it listens is started again on a new port, up to 3 times.
 */
async function startOnFreePort(
  start: (port: number) => ChildProcess,
): Promise<{ port: number; child: ChildProcess }> {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const child = start(port);
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    // Settled either way, so a poll still running after the server exited cannot reject unheard.
    const listening = waitForPort(port).then(
      () => 'listening' as const,
      (err: unknown) => err as Error,
    );
    const outcome = await Promise.race([listening, exited]);
    if (outcome === 'listening') return { port, child };
    if (outcome instanceof Error) {
      await stopProcess(child);
      throw outcome;
    }
    if (attempt >= 3)
      throw new TestServerError(
        `the server exited (code ${outcome}) before listening on port ${port}, 3 times`,
      );
  }
}

/**
 * Starts a throw-away `redis-server` with no persistence on a free port; with `password`, it
 * refuses clients that do not give it (`--requirepass`; the returned URL does not carry it).
 */
export async function startRedisServer(
  options: { readonly password?: string } = {},
): Promise<FreezableServer> {
  const auth = options.password === undefined ? [] : ['--requirepass', options.password];
  const { port, child } = await startOnFreePort((p) =>
    startProcess(
      'redis-server',
      ['--port', String(p), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...auth],
      'apt-get install -y redis-server',
    ),
  );
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    freeze: () => {
      child.kill('SIGSTOP');
    },
    thaw: () => {
      child.kill('SIGCONT');
    },
    stop: () => {
      child.kill('SIGCONT');
      return stopProcess(child);
    },
  };
}

/** A server a test can freeze: it stops answering while its connections stay open. */
export interface FreezableServer extends TestServer {
  /**
   * SIGSTOP: the server stops answering but its connections stay open (the kernel still accepts
   * bytes), as a hung server or a network that drops packets looks to its clients.
   */
  freeze(): void;
  /** SIGCONT: a frozen server goes on. */
  thaw(): void;
}

/** A `redis-server` that can be restarted on the same port, keeping or losing its data. */
export interface RestartableRedisServer extends TestServer {
  /** Whether it persists with an append-only file (`appendfsync everysec`) in its temp directory. */
  readonly aof: boolean;
  /**
   * Stops the server and starts it again on the same port: `SIGTERM` shuts it down as
   * `SHUTDOWN` does (the AOF is flushed), `SIGKILL` crashes it (up to a second of AOF may be lost).
   * Resolves once it accepts connections again; `downMs` is how long it stays down.
   */
  restart(options?: { readonly signal?: 'SIGTERM' | 'SIGKILL'; readonly downMs?: number }): Promise<void>;
}

/**
 * Starts a `redis-server` on a free port with its working directory in a temp directory, with an
 * append-only file (`aof: true`, `appendfsync everysec`) or no persistence at all, that a test can
 * restart on the same port (clients reconnect to the same URL).
 */
export async function startRestartableRedisServer(options: {
  readonly aof: boolean;
}): Promise<RestartableRedisServer> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'fairway-redis-'));
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', ''];
  args.push(...(options.aof ? ['--appendonly', 'yes', '--appendfsync', 'everysec'] : ['--appendonly', 'no']));
  const start = async (): Promise<ChildProcess> => {
    const c = startProcess('redis-server', args, 'apt-get install -y redis-server');
    await waitForPort(port);
    return c;
  };
  let child = await start();
  const halt = async (signal: 'SIGTERM' | 'SIGKILL'): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    // Referenced while it stops: nothing else may keep this process's event loop alive.
    child.ref();
    await new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.kill(signal);
    });
  };
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    aof: options.aof,
    restart: async ({ signal = 'SIGTERM', downMs = 0 } = {}) => {
      await halt(signal);
      if (downMs > 0) await new Promise((r) => setTimeout(r, downMs));
      child = await start();
    },
    stop: async () => {
      await stopProcess(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A Redis primary, one replica and one Sentinel monitoring them, each on its own free port. */
export interface RedisSentinelGroup {
  readonly primaryPort: number;
  readonly replicaPort: number;
  readonly sentinelPort: number;
  /** The name the sentinel monitors the primary under. */
  readonly name: string;
  stop(): Promise<void>;
}

/**
 * Starts a primary, a replica of it and a Sentinel (`redis-server --sentinel`, quorum 1, down
 * after 1 s) on free ports, their files in a temp directory; resolves once the replica is in sync
 * and the sentinel knows it (so `SENTINEL FAILOVER` can promote it).
 */
export async function startRedisSentinelGroup(
  name = 'fairway',
  options: {
    /** The sentinel refuses clients that do not give it (`requirepass` in its config). */
    readonly sentinelPassword?: string;
  } = {},
): Promise<RedisSentinelGroup> {
  const dir = mkdtempSync(join(tmpdir(), 'fairway-sentinel-'));
  const hint = 'apt-get install -y redis-server';
  const [primaryPort, replicaPort, sentinelPort] = [await freePort(), await freePort(), await freePort()];
  const base = (port: number) => ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', ''];
  const children: ChildProcess[] = [];
  const stop = async (): Promise<void> => {
    for (const c of children.reverse()) await stopProcess(c);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    children.push(startProcess('redis-server', [...base(primaryPort), '--dbfilename', 'primary.rdb'], hint));
    await waitForPort(primaryPort);
    children.push(
      startProcess(
        'redis-server',
        [
          ...base(replicaPort),
          '--dbfilename',
          'replica.rdb',
          '--replicaof',
          '127.0.0.1',
          String(primaryPort),
        ],
        hint,
      ),
    );
    await waitForPort(replicaPort);
    const conf = join(dir, 'sentinel.conf');
    writeFileSync(
      conf,
      [
        `port ${sentinelPort}`,
        'bind 127.0.0.1',
        `dir ${dir}`,
        `sentinel monitor ${name} 127.0.0.1 ${primaryPort} 1`,
        `sentinel down-after-milliseconds ${name} 1000`,
        `sentinel failover-timeout ${name} 5000`,
        ...(options.sentinelPassword === undefined ? [] : [`requirepass ${options.sentinelPassword}`]),
        '',
      ].join('\n'),
    );
    children.push(startProcess('redis-server', [conf, '--sentinel'], hint));
    await waitForPort(sentinelPort);
  } catch (err) {
    await stop();
    throw err;
  }
  return { primaryPort, replicaPort, sentinelPort, name, stop };
}

/** One primary of a {@link RedisCluster}. */
export interface RedisClusterNode {
  readonly port: number;
  /** `redis://127.0.0.1:<port>`. */
  readonly url: string;
}

/** A throw-away Redis Cluster, each node on its own free port. */
export interface RedisCluster {
  /** Every node, primaries and replicas (`CLUSTER NODES` tells which is which). */
  readonly nodes: readonly RedisClusterNode[];
  /** `host:port,…` of every node: what `fairway serve --redis-cluster` takes. */
  readonly seeds: string;
  stop(): Promise<void>;
}

function redisCli(args: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('redis-cli', args, { timeout: 20_000 }, (err, stdout, stderr) => {
      if (err) reject(new TestServerError(`redis-cli ${args.join(' ')}: ${stderr || err.message}`));
      else resolve(stdout);
    });
  });
}

/**
 * Starts `primaries` `redis-server` processes in cluster mode (no persistence, each with its
 * cluster bus on a free port of its own and its node file in a temp directory) and `replicas`
 * more per primary, gives each primary an equal range of the 16384 slots with `redis-cli
 * --cluster create` (which attaches the replicas too), and resolves once every node reports
 * `cluster_state:ok` and knows every other.
 */
export async function startRedisCluster(
  options: { readonly primaries?: number; readonly replicas?: number } = {},
): Promise<RedisCluster> {
  const primaries = options.primaries ?? 3;
  const replicas = options.replicas ?? 0;
  if (!Number.isInteger(primaries) || primaries < 3)
    throw new TestServerError(
      `startRedisCluster: primaries must be an integer ≥ 3 (redis-cli's minimum), got ${primaries}`,
    );
  const dir = mkdtempSync(join(tmpdir(), 'fairway-cluster-'));
  const hint = 'apt-get install -y redis-server';
  const children: ChildProcess[] = [];
  const nodes: RedisClusterNode[] = [];
  const stop = async (): Promise<void> => {
    await Promise.all(children.map((c) => stopProcess(c)));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (let i = 0; i < primaries * (1 + replicas); i++) {
      const busPort = await freePort();
      const { port, child } = await startOnFreePort((p) =>
        startProcess(
          'redis-server',
          [
            '--port',
            String(p),
            '--bind',
            '127.0.0.1',
            '--cluster-enabled',
            'yes',
            '--cluster-port',
            String(busPort),
            '--cluster-config-file',
            join(dir, `nodes-${i}-${p}.conf`),
            '--cluster-node-timeout',
            '2000',
            '--dir',
            dir,
            '--save',
            '',
            '--appendonly',
            'no',
          ],
          hint,
        ),
      );
      children.push(child);
      nodes.push({ port, url: `redis://127.0.0.1:${port}` });
    }
    await redisCli([
      '--cluster',
      'create',
      ...nodes.map((n) => `127.0.0.1:${n.port}`),
      '--cluster-replicas',
      String(replicas),
      '--cluster-yes',
    ]);
    const deadline = Date.now() + 20_000;
    for (const n of nodes) {
      for (;;) {
        const info = await redisCli(['-p', String(n.port), 'cluster', 'info']);
        if (
          /cluster_state:ok/.test(info) &&
          /cluster_known_nodes:(\d+)/.exec(info)?.[1] === String(nodes.length)
        )
          break;
        if (Date.now() > deadline)
          throw new TestServerError(`the cluster node on port ${n.port} is not ok after 20 s:\n${info}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    // Replicas attached and in sync, as every node sees them (a fail-over needs both).
    for (const n of nodes) {
      for (;;) {
        const known = await redisCli(['-p', String(n.port), 'cluster', 'nodes']);
        const attached = known.split('\n').filter((l) => /[ ,](slave|replica)[ ,]/.test(l)).length;
        const repl = await redisCli(['-p', String(n.port), 'info', 'replication']);
        const synced = /role:master/.test(repl)
          ? /connected_slaves:(\d+)/.exec(repl)?.[1] === String(replicas)
          : /master_link_status:up/.test(repl);
        if (attached === primaries * replicas && synced) break;
        if (Date.now() > deadline)
          throw new TestServerError(
            `the cluster's replicas are not attached after 20 s (${attached} attached, port ${n.port}):\n${known}\n${repl}`,
          );
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return { nodes, seeds: nodes.map((n) => `127.0.0.1:${n.port}`).join(','), stop };
}

/** Options of {@link startNatsServer}. */
export interface NatsServerOptions {
  /**
   * A nats-server config file to run with (e.g. the shipped `infra/nats/nats-server.conf`); the
   * port, the loopback address and the JetStream store directory are still given as flags, which
   * win over the file. @default none: an open server with JetStream
   */
  readonly configPath?: string;
  /** Extra environment of the server, e.g. the passwords a config file reads as `$NAME`. */
  readonly env?: Readonly<Record<string, string>>;
}

/** Starts a throw-away `nats-server` with JetStream, its store in a temp directory. */
export async function startNatsServer(options: NatsServerOptions = {}): Promise<TestServer> {
  const dir = mkdtempSync(join(tmpdir(), 'fairway-nats-'));
  const bin = process.env.NATS_SERVER_BIN ?? 'nats-server';
  const config = options.configPath === undefined ? ['-js'] : ['-c', options.configPath];
  const { port, child } = await startOnFreePort((p) =>
    startProcess(
      bin,
      [...config, '-a', '127.0.0.1', '-p', String(p), '-sd', dir],
      'apt-get install -y nats-server',
      options.env,
    ),
  );
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    stop: async () => {
      await stopProcess(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A `nats-server` a test can stop and start again on the same port with the same JetStream store. */
export interface RestartableServer extends FreezableServer {
  /** Stops the server (SIGTERM, or SIGKILL when `kill`); clients see the connection drop. */
  halt(kill?: boolean): Promise<void>;
  /** Starts it again on the same port and store; resolves once it accepts connections. */
  resume(): Promise<void>;
}

/**
 * Starts a `nats-server -js` on a free port that can be halted and resumed (a NATS outage), keeping
 * its port and JetStream directory so streams and their sequences survive, as a restarted server
 * in production does.
 */
export async function startRestartableNatsServer(): Promise<RestartableServer> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'fairway-nats-'));
  const bin = process.env.NATS_SERVER_BIN ?? 'nats-server';
  const args = ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', dir];
  let child: ChildProcess | undefined;
  const start = async (): Promise<void> => {
    child = startProcess(bin, args, 'apt-get install -y nats-server');
    await waitForPort(port);
  };
  const halt = async (kill = false): Promise<void> => {
    const c = child;
    child = undefined;
    if (c === undefined || c.exitCode !== null || c.signalCode !== null) return;
    if (!kill) return stopProcess(c);
    await new Promise<void>((resolve) => {
      c.once('exit', () => resolve());
      c.kill('SIGKILL');
    });
  };
  await start();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    halt,
    resume: start,
    freeze: () => {
      child?.kill('SIGSTOP');
    },
    thaw: () => {
      child?.kill('SIGCONT');
    },
    stop: async () => {
      child?.kill('SIGCONT');
      await halt();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** One server of a {@link NatsCluster}. */
export interface NatsClusterNode {
  /** `n1`, `n2`, … (`server_name`, as JetStream reports leaders). */
  readonly name: string;
  readonly url: string;
  readonly port: number;
  /** SIGKILLs the server: its clients and routes drop at once. */
  kill(): Promise<void>;
}

/** A NATS cluster with JetStream on every server, on loopback ports. */
export interface NatsCluster {
  readonly nodes: readonly NatsClusterNode[];
  /** Every server's client URL, comma-separated (how fairway's NATS_URL names a cluster). */
  readonly urls: string;
  stop(): Promise<void>;
}

/**
 * Starts `size` `nats-server -js` processes forming one cluster (routes between every pair,
 * `server_name` n1…), each with its own JetStream store, and resolves once each accepts clients.
 * JetStream elects its meta leader a moment later; clients retry until it has.
 */
export async function startNatsCluster(size = 3): Promise<NatsCluster> {
  const bin = process.env.NATS_SERVER_BIN ?? 'nats-server';
  const ports = await Promise.all(Array.from({ length: size * 2 }, () => freePort()));
  const client = ports.slice(0, size);
  const route = ports.slice(size);
  const routes = route.map((p) => `nats://127.0.0.1:${p}`).join(',');
  const dirs: string[] = [];
  const children: ChildProcess[] = [];
  for (let i = 0; i < size; i++) {
    const dir = mkdtempSync(join(tmpdir(), 'fairway-nats-cluster-'));
    dirs.push(dir);
    children.push(
      startProcess(
        bin,
        [
          ...['-js', '-a', '127.0.0.1', '-p', String(client[i]), '-sd', dir],
          ...['--server_name', `n${i + 1}`, '--cluster_name', 'fairway-test'],
          ...['--cluster', `nats://127.0.0.1:${route[i]}`, '--routes', routes],
        ],
        'apt-get install -y nats-server',
      ),
    );
  }
  await Promise.all(client.map((p) => waitForPort(p as number)));
  const nodes = client.map((port, i) => {
    const child = children[i] as ChildProcess;
    return {
      name: `n${i + 1}`,
      url: `nats://127.0.0.1:${port}`,
      port: port as number,
      kill: async () => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        await new Promise<void>((resolve) => {
          child.once('exit', () => resolve());
          child.kill('SIGKILL');
        });
      },
    };
  });
  return {
    nodes,
    urls: nodes.map((n) => n.url).join(','),
    stop: async () => {
      await Promise.all(children.map((c) => stopProcess(c)));
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
    },
  };
}
