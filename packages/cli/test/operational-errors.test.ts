import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { freePort } from '@fairway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeError, ExitCode } from '../src/cli-error.ts';

const BIN = resolve(import.meta.dirname, '..', 'bin', 'fairway.js');
const CONFIG = resolve(import.meta.dirname, '..', '..', '..', 'infra', 'fairway.example.yaml');

/** Runs the `fairway` binary as a user does; resolves with its exit code and output, whatever the code. */
function fairwayBin(args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((res) => {
    execFile(process.execPath, [BIN, ...args], { timeout: 50_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : -1;
      res({ code, stdout, stderr });
    });
  });
}

describe('fairway admin keygen --out-dir', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'fairway-keygen-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('creates a missing folder, readable by its owner only, and writes the key pair in it', async () => {
    const out = join(dir, 'infra', 'secrets');
    const r = await fairwayBin(['admin', 'keygen', '--out-dir', out]);
    expect(r.code, r.stderr).toBe(0);
    expect(statSync(out).mode & 0o777).toBe(0o700);
    expect(statSync(join(out, 'fairway-operator.key')).mode & 0o777).toBe(0o600);
    expect(existsSync(join(out, 'fairway-operator.pub'))).toBe(true);
  });

  it('names the path and the system reason when the folder cannot be made, and exits 3', async () => {
    // A file where a folder should be: refused whoever runs the test, root included.
    const file = join(dir, 'a-file');
    writeFileSync(file, '');
    const r = await fairwayBin(['admin', 'keygen', '--out-dir', join(file, 'secrets')]);
    expect(r.code).toBe(ExitCode.UNAVAILABLE);
    expect(r.stderr).toBe(
      `error: cannot create the folder ${join(file, 'secrets')}: not a directory (ENOTDIR)\n`,
    );
  });
});

describe('an operational failure', () => {
  it('names the unreachable Redis server, without "internal error", and exits 3 (serve)', async () => {
    const port = await freePort();
    const r = await fairwayBin([
      'serve',
      '--config',
      CONFIG,
      '--port',
      '0',
      '--operator-port',
      '0',
      '--redis-url',
      `redis://127.0.0.1:${port}`,
    ]);
    expect(r.code).toBe(ExitCode.UNAVAILABLE);
    expect(r.stderr).toContain(`error: cannot reach Redis at redis://127.0.0.1:${port}: `);
    expect(r.stderr).toContain('ECONNREFUSED');
    expect(r.stderr).not.toMatch(/internal error/);
  });

  it.each([
    [
      Object.assign(new Error("EACCES: permission denied, open '/etc/fairway/token'"), {
        code: 'EACCES',
        syscall: 'open',
        path: '/etc/fairway/token',
      }),
      'error: cannot open /etc/fairway/token: permission denied (EACCES)',
    ],
    [
      Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:4222'), {
        code: 'ECONNREFUSED',
        syscall: 'connect',
        address: '127.0.0.1',
        port: 4222,
      }),
      'error: cannot connect to 127.0.0.1:4222: connection refused (ECONNREFUSED)',
    ],
    [
      new Error('could not start', {
        cause: Object.assign(new Error('getaddrinfo ENOTFOUND redis.internal'), {
          code: 'ENOTFOUND',
          syscall: 'getaddrinfo',
          hostname: 'redis.internal',
        }),
      }),
      'error: cannot resolve redis.internal: host not found (ENOTFOUND)',
    ],
  ])('is described from the system error it carries: %s', (err, line) => {
    expect(describeError(err)).toEqual({ lines: [line], code: ExitCode.UNAVAILABLE });
  });
});
