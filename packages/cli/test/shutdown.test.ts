import { type ChildProcess, spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { silentLogger } from '@fairway/core';
import { natsUrl, startRedisServer, type TestServer, uniquePrefix } from '@fairway/testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { boundedShutdown, DEFAULT_SHUTDOWN_TIMEOUT_MS, shutdownTimeoutMs } from '../src/shutdown.ts';

const BIN = resolve(import.meta.dirname, '..', 'bin', 'fairway.js');
const CONFIG = resolve(import.meta.dirname, '..', '..', '..', 'infra', 'fairway.example.yaml');

describe('shutdownTimeoutMs', () => {
  it('takes the flag, else FAIRWAY_SHUTDOWN_TIMEOUT_MS, else 10 s', () => {
    expect(shutdownTimeoutMs({ FAIRWAY_SHUTDOWN_TIMEOUT_MS: '2500' }, 700)).toBe(700);
    expect(shutdownTimeoutMs({ FAIRWAY_SHUTDOWN_TIMEOUT_MS: '2500' })).toBe(2500);
    expect(shutdownTimeoutMs({})).toBe(DEFAULT_SHUTDOWN_TIMEOUT_MS);
    expect(DEFAULT_SHUTDOWN_TIMEOUT_MS).toBe(10_000);
  });

  it('refuses a bound that is not a whole number of ms, naming the variable', () => {
    expect(() => shutdownTimeoutMs({ FAIRWAY_SHUTDOWN_TIMEOUT_MS: '10s' })).toThrow(
      /FAIRWAY_SHUTDOWN_TIMEOUT_MS: must be a whole number/,
    );
    expect(() => shutdownTimeoutMs({}, 0)).toThrow(/--shutdown-timeout/);
  });
});

describe('boundedShutdown', () => {
  it('is clean when the graceful part finishes in time, and never forces', async () => {
    let forced = false;
    const outcome = await boundedShutdown({
      stop: async () => undefined,
      force: async () => {
        forced = true;
      },
      timeoutMs: 1000,
      logger: silentLogger,
    });
    expect(outcome).toBe('clean');
    expect(forced).toBe(false);
  });

  it('forces what is left once the bound passes, and gives up on a force that hangs too', async () => {
    let forced = false;
    const outcome = await boundedShutdown({
      stop: () => new Promise(() => undefined),
      force: () => {
        forced = true;
        return new Promise(() => undefined);
      },
      timeoutMs: 50,
      logger: silentLogger,
    });
    expect(outcome).toBe('forced');
    expect(forced).toBe(true);
  });

  it('reports a graceful part that fails', async () => {
    const outcome = await boundedShutdown({
      stop: async () => {
        throw new Error('boom');
      },
      timeoutMs: 1000,
      logger: silentLogger,
    });
    expect(outcome).toBe('failed');
  });
});

describe('fairway serve on SIGTERM while its Redis is down', () => {
  let redis: TestServer | undefined;
  let serve: ChildProcess | undefined;
  afterAll(async () => {
    serve?.kill('SIGKILL');
    await redis?.stop();
  });

  it('exits within its shutdown bound, having warned about the lost Redis once per connection', async () => {
    redis = await startRedisServer();
    const proc = spawn(
      process.execPath,
      [
        BIN,
        'serve',
        '--config',
        CONFIG,
        '--port',
        '0',
        '--operator-port',
        '0',
        '--redis-url',
        redis.url,
        '--nats-url',
        natsUrl(),
        '--prefix',
        uniquePrefix('shutdown'),
      ],
      { env: { ...process.env, FAIRWAY_SHUTDOWN_TIMEOUT_MS: '2000' }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    serve = proc;
    const stderr: string[] = [];
    createInterface({ input: proc.stderr }).on('line', (l) => stderr.push(l));
    const exited = new Promise<{ code: number | null; at: number }>((r) =>
      proc.once('exit', (code) => r({ code, at: performance.now() })),
    );
    const listening = await new Promise<boolean>((r) => {
      createInterface({ input: proc.stdout }).on('line', (l) => {
        if (/listening on/.test(l)) r(true);
      });
      void exited.then(() => r(false));
    });
    expect(listening, stderr.join('\n')).toBe(true);

    await redis.stop();
    // Long enough for an unthrottled reconnect loop to have written dozens of lines.
    await new Promise((r) => setTimeout(r, 3000));
    const sent = performance.now();
    proc.kill('SIGTERM');
    const timeout = new Promise<'still running'>((r) => setTimeout(() => r('still running'), 30_000));
    const end = await Promise.race([exited, timeout]);
    expect(end, stderr.join('\n')).not.toBe('still running');
    const { code, at } = end as { code: number | null; at: number };
    // The bound is 2 s; the margin covers the second the forced part may take and a loaded machine.
    expect(at - sent).toBeLessThan(2000 + 8000);
    // Whether the graceful part could finish without Redis is the dispatcher's business; if it
    // did not, the exit code says so.
    expect([0, 1]).toContain(code);
    if (code === 1) expect(stderr.some((l) => l.includes('shutdown did not finish in time'))).toBe(true);
    const lostRedis = stderr.filter((l) => l.includes('redis connection error'));
    expect(lostRedis.length, lostRedis.join('\n')).toBeLessThanOrEqual(2);
    expect(stderr.filter((l) => /batch: worker error/.test(l)).length).toBeLessThanOrEqual(1);
  });
});
