import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { purgeStore } from '@fairway/store';
import { freePort, redisUrl, type TestServer } from '@fairway/testkit';
import { Redis } from 'ioredis';

/** The `fairway` executable as a user runs it (`npx fairway` resolves to this script). */
export const FAIRWAY_BIN = resolve(
  import.meta.dirname,
  '..',
  '..',
  '..',
  'packages',
  'cli',
  'bin',
  'fairway.js',
);

/** A process started by a test. */
export interface StartedProcess {
  readonly proc: ChildProcess;
  /** The first line that matched `ready`, and its first capture group. */
  readonly line: string;
  readonly url: string;
  /** Output lines so far (stdout and stderr), for failure messages. */
  readonly output: string[];
  /** SIGKILL: the process dies at once, holding whatever it held. */
  kill9(): void;
  /** SIGTERM, then waits for the exit. */
  stop(): Promise<void>;
}

/** A `fairway` process started by a test. */
export type FairwayProcess = StartedProcess;

/** Options of {@link startProcess}. */
export interface StartProcessOptions {
  /** Added to the test's environment. */
  readonly env?: Readonly<Record<string, string>>;
  /** @default 30_000 */
  readonly timeoutMs?: number;
  /** The stream whose lines `ready` is matched against. @default 'stdout' */
  readonly readyOn?: 'stdout' | 'stderr';
  /** Keep this many output lines for failure messages. @default 200 */
  readonly keepLines?: number;
  /**
   * Leave the other stream unread (paused; `proc.stdout` or `proc.stderr` to read it later): a
   * log shipper that has fallen behind. @default false
   */
  readonly leaveOtherUnread?: boolean;
}

/**
 * Spawns `command args…` and resolves once a line of `readyOn` matches `ready` (whose first group,
 * if any, is the URL), or rejects with the process's output after the timeout or when it exits.
 */
export function startProcess(
  command: string,
  args: readonly string[],
  ready: RegExp,
  options: StartProcessOptions = {},
): Promise<StartedProcess> {
  const timeoutMs = options.timeoutMs ?? 30_000;
  const keep = options.keepLines ?? 200;
  const proc = spawn(command, args, {
    env: { ...process.env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const what = `${command} ${args.join(' ')}`;
  const readyStream = options.readyOn === 'stderr' ? proc.stderr! : proc.stdout!;
  const otherStream = options.readyOn === 'stderr' ? proc.stdout! : proc.stderr!;
  const record = (l: string): void => {
    output.push(l);
    if (output.length > keep) output.shift();
  };
  if (options.leaveOtherUnread === true) otherStream.pause();
  else createInterface({ input: otherStream }).on('line', record);
  return new Promise((resolvePromise, reject) => {
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`${what} did not start in ${timeoutMs} ms:\n${output.join('\n')}`));
    }, timeoutMs);
    proc.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited with ${code}:\n${output.join('\n')}`));
    });
    let started = false;
    createInterface({ input: readyStream }).on('line', (l) => {
      record(l);
      const m = started ? null : ready.exec(l);
      if (m === null) return;
      started = true;
      clearTimeout(timer);
      resolvePromise({
        proc,
        line: l,
        url: m[1] ?? '',
        output,
        kill9: () => proc.kill('SIGKILL'),
        async stop() {
          if (proc.exitCode !== null || proc.signalCode !== null) return;
          proc.kill('SIGTERM');
          const t = setTimeout(() => proc.kill('SIGKILL'), 5000);
          await exited;
          clearTimeout(t);
        },
      });
    });
  });
}

/**
 * Spawns `fairway <args>` and resolves once a stdout line matches `ready` (whose first group is
 * the URL), or rejects with the process's output after `timeoutMs`. `launcher` is a command line
 * that runs it, e.g. `ip netns exec <ns>`.
 */
export function startFairway(
  args: readonly string[],
  ready: RegExp,
  env: Readonly<Record<string, string>> = {},
  timeoutMs = 30_000,
  launcher: readonly string[] = [],
): Promise<FairwayProcess> {
  const [command, ...rest] = [...launcher, process.execPath, FAIRWAY_BIN, ...args];
  return startProcess(command!, rest, ready, { env, timeoutMs });
}

/**
 * Starts `count` `fairway engine-sim` processes on free ports as replicas `sim-1` … `sim-<count>`
 * (seed = replica number), each with `args` (NATS URL, prefix, pool, speed, slots …; a function
 * gives engine `k`, from 0, its own) and `env`.
 */
export function startEngineSims(
  count: number,
  args: readonly string[] | ((k: number) => readonly string[]),
  env: Readonly<Record<string, string>> = {},
): Promise<FairwayProcess[]> {
  return Promise.all(
    Array.from({ length: count }, (_, k) =>
      startFairway(
        [
          'engine-sim',
          '--port',
          '0',
          '--seed',
          String(k + 1),
          '--replica-id',
          `sim-${k + 1}`,
          ...(typeof args === 'function' ? args(k) : args),
        ],
        /listening on (http:\/\/\S+)/,
        env,
      ),
    ),
  );
}

/**
 * Waits until `d` serves: calls `attempt` (one request through it, answering its HTTP status)
 * every 100 ms until it answers 200 — the dispatcher has heard the replicas it needs register —
 * or fails after `timeoutMs` with the dispatcher's output.
 */
export async function untilServed(
  d: FairwayProcess,
  attempt: () => Promise<number>,
  timeoutMs = 15_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while ((await attempt()) !== 200) {
    if (Date.now() > deadline) throw new Error(`dispatcher ${d.url} never served:\n${d.output.join('\n')}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Waits until each of `dispatchers` has served `times` requests: `attempt(d, k)` sends one through
 * `d` (the `k`-th, from 0) and settles with it, a rejection counting as not served.
 */
export async function untilEachServed(
  dispatchers: readonly FairwayProcess[],
  times: number,
  attempt: (d: FairwayProcess, k: number) => Promise<unknown>,
): Promise<void> {
  for (const d of dispatchers)
    for (let k = 0; k < times; k++)
      await untilServed(d, () =>
        attempt(d, k).then(
          () => 200,
          () => 503,
        ),
      );
}

/** The first of `names` found on PATH (a program a test needs from the system), if any. */
export function onPath(...names: string[]): string | undefined {
  for (const name of names)
    for (const dir of (process.env.PATH ?? '').split(delimiter)) {
      const p = join(dir, name);
      if (dir !== '' && existsSync(p)) return p;
    }
  return undefined;
}

/**
 * Starts `fairway serve --id <id>` on free ports with a config file, Redis, NATS and a subject
 * prefix (plus `env`), as an operator runs it; resolves with the process and its operator URL.
 */
export async function startServe(
  id: string,
  o: {
    readonly configPath: string;
    readonly redisUrl: string;
    readonly natsUrl: string;
    readonly prefix: string;
  },
  env: Readonly<Record<string, string>> = {},
): Promise<{ readonly proc: FairwayProcess; readonly operatorUrl: string }> {
  // Another process can take the operator port between the kernel naming it and the dispatcher
  // binding it (the dispatcher then exits, naming EADDRINUSE): start again on a new port, 3 times.
  for (let attempt = 1; ; attempt++) {
    const operatorPort = await freePort();
    try {
      const proc = await startFairway(['serve', '--id', id], /listening on (http:\/\/\S+)/, {
        FAIRWAY_CONFIG: o.configPath,
        REDIS_URL: o.redisUrl,
        NATS_URL: o.natsUrl,
        FAIRWAY_PREFIX: o.prefix,
        PORT: '0',
        FAIRWAY_OPERATOR_PORT: String(operatorPort),
        ...env,
      });
      return { proc, operatorUrl: `http://127.0.0.1:${operatorPort}` };
    } catch (err) {
      if (attempt >= 3 || !String((err as Error).message).includes('EADDRINUSE')) throw err;
    }
  }
}

/**
 * Ends a fleet a test started: stops its processes and its NATS server, and deletes its store keys
 * (everything under `prefix`) from the machine's Redis.
 */
export async function stopFleet(
  processes: readonly FairwayProcess[],
  nats: TestServer | undefined,
  prefix: string,
): Promise<void> {
  await Promise.all(processes.map((p) => p.stop()));
  await nats?.stop();
  const redis = new Redis(redisUrl());
  await purgeStore(redis, prefix);
  redis.disconnect();
}
