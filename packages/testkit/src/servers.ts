import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
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

function startProcess(bin: string, args: string[], installHint: string): ChildProcess {
  const child = spawn(bin, args, { stdio: 'ignore' });
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
  await new Promise<void>((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
    setTimeout(() => {
      child.kill('SIGKILL');
      resolve();
    }, 3000).unref();
  });
}

/** Starts a throw-away `redis-server` with no persistence on a free port. */
export async function startRedisServer(): Promise<TestServer> {
  const port = await freePort();
  const child = startProcess(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    'apt-get install -y redis-server',
  );
  await waitForPort(port);
  return { url: `redis://127.0.0.1:${port}`, port, stop: () => stopProcess(child) };
}

/** Starts a throw-away `nats-server -js` with its JetStream store in a temp directory. */
export async function startNatsServer(): Promise<TestServer> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'fairway-nats-'));
  const bin = process.env.NATS_SERVER_BIN ?? 'nats-server';
  const child = startProcess(
    bin,
    ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', dir],
    'apt-get install -y nats-server',
  );
  await waitForPort(port);
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
export interface RestartableServer extends TestServer {
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
    stop: async () => {
      await halt();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
