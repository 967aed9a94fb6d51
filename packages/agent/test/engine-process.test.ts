import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '@fairway/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import { argsWithModel, EngineProcess, type EngineProcessEvent, EngineStartError } from '../src/index.ts';

const SERVER = join(import.meta.dirname, 'fixtures', 'tiny-server.mjs');

async function get(port: number, path: string): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`);
  if (!res.ok) throw new Error(`HTTP ${res.status}`);
  return res.text();
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function waitFor(check: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('EngineProcess', () => {
  const cleanup: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const c of cleanup.splice(0)) await c();
  });

  async function make(
    extraArgs: string[] = [],
    options: Partial<ConstructorParameters<typeof EngineProcess>[0]> = {},
  ) {
    const port = await freePort();
    const events: EngineProcessEvent[] = [];
    const proc = new EngineProcess({
      command: process.execPath,
      args: [SERVER, '--port', String(port), ...extraArgs],
      probe: () => get(port, '/health'),
      probeIntervalMs: 20,
      startTimeoutMs: 5000,
      stopTimeoutMs: 2000,
      ...options,
    });
    proc.on((e) => events.push(e));
    cleanup.push(() => proc.stop());
    return { proc, port, events };
  }

  it('starts the command and resolves only once its health probe passes', async () => {
    const { proc, port } = await make(['--model', 'm1', '--start-delay-ms', '300']);
    await proc.start();
    expect(proc.running).toBe(true);
    expect(await get(port, '/model')).toBe('m1');
  });

  it('fails the start with the process output when the engine exits while starting', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fairway-ep-'));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    const marker = join(dir, 'fail');
    writeFileSync(marker, '');
    const { proc } = await make(['--fail-if-file', marker]);
    const err = await proc.start().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(EngineStartError);
    expect((err as EngineStartError).message).toMatch(/exited while starting \(code 3/);
    expect((err as EngineStartError).lastOutput.join('\n')).toMatch(/marker file present/);
    expect(proc.running).toBe(false);
  });

  it('fails the start when the engine is not healthy within the start timeout', async () => {
    const { proc } = await make(['--start-delay-ms', '5000'], { startTimeoutMs: 300 });
    await expect(proc.start()).rejects.toThrow(/not healthy after 300 ms/);
    expect(proc.pid).toBeUndefined();
  });

  it('restarts a crashed engine after a back-off and reports it', async () => {
    const { proc, port, events } = await make([], { backoffInitialMs: 100 });
    await proc.start();
    const firstPid = proc.pid!;
    process.kill(firstPid, 'SIGKILL');
    await waitFor(() => events.filter((e) => e.type === 'ready').length === 2);
    expect(events.map((e) => e.type)).toEqual([
      'starting',
      'ready',
      'exit',
      'restarting',
      'starting',
      'ready',
    ]);
    expect(events.find((e) => e.type === 'restarting')).toMatchObject({ inMs: 100, attempt: 1 });
    expect(proc.pid).not.toBe(firstPid);
    expect(proc.restarts).toBe(1);
    expect(await get(port, '/health')).toBe('ok');
  });

  it('backs off exponentially, capped, while restarts keep failing, and recovers', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fairway-ep-'));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    const marker = join(dir, 'fail');
    const { proc, events } = await make(['--fail-if-file', marker], {
      backoffInitialMs: 40,
      backoffMaxMs: 160,
      backoffFactor: 2,
    });
    await proc.start();
    writeFileSync(marker, '');
    process.kill(proc.pid!, 'SIGKILL');
    await waitFor(() => events.filter((e) => e.type === 'restarting').length >= 5);
    rmSync(marker);
    await waitFor(() => events.filter((e) => e.type === 'ready').length === 2);
    const delays = events.flatMap((e) => (e.type === 'restarting' ? [e.inMs] : []));
    expect(delays.slice(0, 5)).toEqual([40, 80, 160, 160, 160]);
    expect(events.filter((e) => e.type === 'startFailed').length).toBeGreaterThanOrEqual(4);
    expect(proc.running).toBe(true);
  });

  it('restarts with new arguments for a full model swap', async () => {
    const { proc, port } = await make(['--model', 'm1']);
    await proc.start();
    const before = proc.pid!;
    await proc.restart(argsWithModel(proc.args, 'm2'));
    expect(await get(port, '/model')).toBe('m2');
    expect(alive(before)).toBe(false);
    expect(proc.restarts).toBe(0);
  });

  it('stops the engine and does not restart it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fairway-ep-'));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    const count = join(dir, 'count');
    const { proc, events } = await make(['--count-file', count], { backoffInitialMs: 10 });
    await proc.start();
    const pid = proc.pid!;
    await proc.stop();
    expect(alive(pid)).toBe(false);
    await new Promise((r) => setTimeout(r, 100));
    expect(events.map((e) => e.type)).toEqual(['starting', 'ready']);
    expect(existsSync(count)).toBe(true);
  });
});

describe('argsWithModel', () => {
  it('replaces the positional model of vllm serve', () => {
    expect(argsWithModel(['serve', 'meta/llama-7b', '--port', '8000'], 'meta/llama-13b')).toEqual([
      'serve',
      'meta/llama-13b',
      '--port',
      '8000',
    ]);
  });
  it('replaces --model in either spelling, or appends it, then adds extra arguments', () => {
    expect(argsWithModel(['engine-sim', '--model', 'a'], 'b', ['--tp', '2'])).toEqual([
      'engine-sim',
      '--model',
      'b',
      '--tp',
      '2',
    ]);
    expect(argsWithModel(['x', '--model=a'], 'b')).toEqual(['x', '--model=b']);
    expect(argsWithModel(['x'], 'b')).toEqual(['x', '--model', 'b']);
  });
});
