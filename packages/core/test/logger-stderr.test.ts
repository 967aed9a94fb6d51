import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { STDERR_BACKLOG_BYTES } from '../src/logger.ts';

const LOGGER = fileURLToPath(new URL('../src/logger.ts', import.meta.url));

/** A fresh Node process running `body` with `createLogger` imported, its stdout and stderr piped. */
function spawnLogging(body: string) {
  return spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      '--input-type=module',
      '-e',
      `import { createLogger } from ${JSON.stringify(LOGGER)};\n${body}`,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
}

/**
 * Runs `body` in a fresh Node process with `createLogger` imported and nobody reading its stderr
 * until it writes `logged` on stdout (or `giveUpMs` passes, `logged` then false): a log shipper
 * that has fallen behind. Then reads every stderr line until the process ends.
 */
async function runUnread(
  body: string,
  options: { resumeAfterMs?: number; giveUpMs?: number } = {},
): Promise<{ logged: boolean; lines: string[] }> {
  const child = spawnLogging(body);
  child.stderr.pause();
  let text = '';
  const closed = new Promise<void>((resolve) => child.on('close', () => resolve()));
  const logged = await new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), options.giveUpMs ?? 20_000);
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      if (!chunk.includes('logged')) return;
      clearTimeout(timer);
      resolve(true);
    });
  });
  await new Promise((r) => setTimeout(r, options.resumeAfterMs ?? 0));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    text += chunk;
  });
  child.stderr.resume();
  await closed;
  return { logged, lines: text.split('\n').filter((l) => l.length > 0) };
}

/**
 * Code for a process's body that logs lines `{ n }` of about 400 bytes, numbered from `from` up
 * to `to` (exclusive), `perTurn` per event-loop turn, through `log`; then writes `logged` on
 * stdout and stays 3 s for its stderr to be read.
 */
function logLines(from: number, to: number, perTurn: number): string {
  return `
    let n = ${from};
    const tick = () => {
      for (let k = 0; k < ${perTurn}; k++) log.info({ n: n++ }, 'x'.repeat(300));
      if (n < ${to}) { setImmediate(tick); return; }
      process.stdout.write('logged\\n');
      setTimeout(() => process.exit(0), 3000);
    };
    tick();
  `;
}

/** Runs `body` in a fresh Node process with `createLogger` imported; its stderr lines as they arrive. */
function run(body: string): {
  lines: Promise<string[]>;
  arrived: (n: number) => Promise<number>;
  stop: () => void;
} {
  const child = spawnLogging(body);
  child.stdout.resume();
  let text = '';
  const waiting: { n: number; resolve: (at: number) => void }[] = [];
  const started = Date.now();
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    text += chunk;
    const n = text.split('\n').filter((l) => l.length > 0).length;
    for (const w of waiting.splice(0)) {
      if (n >= w.n) w.resolve(Date.now() - started);
      else waiting.push(w);
    }
  });
  const lines = new Promise<string[]>((resolve) =>
    child.on('close', () => resolve(text.split('\n').filter((l) => l.length > 0))),
  );
  return {
    lines,
    arrived: (n) => new Promise((resolve) => waiting.push({ n, resolve })),
    stop: () => child.kill('SIGKILL'),
  };
}

describe('the default logger on stderr', () => {
  it('writes every line logged before a process exits, however it exits', async () => {
    const { lines } = run(`
      const log = createLogger({ name: 'exit' });
      for (let i = 0; i < 3; i++) log.info({ i }, 'line');
      process.exit(3);
    `);
    const got = (await lines).map((l) => JSON.parse(l) as { i: number; msg: string });
    expect(got.map((l) => l.i)).toEqual([0, 1, 2]);
    const thrown = run(`
      const log = createLogger({ name: 'crash' });
      log.info({ i: 0 }, 'before the crash');
      process.on('exit', () => log.info({ i: 1 }, 'from an exit handler'));
      throw new Error('boom');
    `);
    const all = await thrown.lines;
    const json = all.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { i: number });
    expect(json.map((l) => l.i)).toEqual([0, 1]);
  });

  it('writes a line by the end of the turn that logged it, without waiting for more', async () => {
    // The process logs one line, then stays alive with nothing more to say: the line must not
    // wait for more lines or for the exit.
    const { arrived, stop } = run(`
      const log = createLogger({ name: 'idle' });
      setTimeout(() => log.info('alone'), 10);
      setInterval(() => undefined, 1000);
    `);
    try {
      await arrived(1);
    } finally {
      stop();
    }
  });

  it('keeps the order of lines from several loggers and turns', async () => {
    const { lines } = run(`
      const a = createLogger({ name: 'a' });
      const b = createLogger({ name: 'b' }).child({ part: 'x' });
      let n = 0;
      const tick = () => {
        for (let k = 0; k < 40; k++) (n % 2 ? a : b).info({ n: n++ }, 'x'.repeat(300));
        if (n < 400) setImmediate(tick); else process.exit(0);
      };
      tick();
    `);
    const got = (await lines).map((l) => (JSON.parse(l) as { n: number }).n);
    expect(got).toEqual(Array.from({ length: 400 }, (_, i) => i));
  });

  it('never stops the process while its reader is behind, and delivers every line in order once it reads', async () => {
    // 5,000 lines of about 400 bytes: far more than a pipe holds. The process logs them over many
    // turns and says so on stdout while nothing reads its stderr, then stays until it is read.
    const { logged, lines } = await runUnread(`
      const log = createLogger({ name: 'behind' });
      ${logLines(0, 5000, 50)}
    `);
    expect(logged).toBe(true);
    expect(lines.map((l) => (JSON.parse(l) as { n: number }).n)).toEqual(
      Array.from({ length: 5000 }, (_, i) => i),
    );
  });

  it('never stops the process when another process sharing stderr puts the pipe back in blocking mode', async () => {
    // esbuild's service (what tsx starts to compile a module) shares this stderr, and its runtime
    // makes the pipe blocking again after the logger made it non-blocking.
    const { logged, lines } = await runUnread(`
      const log = createLogger({ name: 'after-esbuild' });
      log.info({ n: 0 }, 'first');
      const { transform } = await import('esbuild');
      await transform('let a = 1');
      ${logLines(1, 5001, 50)}
    `);
    expect(logged).toBe(true);
    expect(lines.map((l) => (JSON.parse(l) as { n: number }).n)).toEqual(
      Array.from({ length: 5001 }, (_, i) => i),
    );
  });

  it('drops whole lines beyond its backlog, keeps the rest in order and says how many it dropped', async () => {
    // About twice the backlog, logged while nothing reads.
    const total = 200 * Math.ceil((2 * STDERR_BACKLOG_BYTES) / 400 / 200);
    const { logged, lines } = await runUnread(`
      const log = createLogger({ name: 'flood' });
      ${logLines(0, total, 200)}
    `);
    expect(logged).toBe(true);
    const parsed = lines.map((l) => JSON.parse(l) as { n?: number; dropped?: number; level: number });
    const numbered = parsed.flatMap((p) => (p.n === undefined ? [] : [p.n]));
    const notices = parsed.filter((p) => p.dropped !== undefined);
    expect(numbered[0]).toBe(0);
    for (let i = 1; i < numbered.length; i++) expect(numbered[i]).toBeGreaterThan(numbered[i - 1] as number);
    expect(notices).toHaveLength(1);
    expect(notices[0]?.level).toBe(40);
    expect(numbered.length + (notices[0]?.dropped ?? 0)).toBe(total);
    expect(numbered.length).toBeGreaterThan(total / 4);
  });

  it('at exit, writes the lines it holds for a reader that catches up within the wait', async () => {
    const { logged, lines } = await runUnread(
      `
      const log = createLogger({ name: 'exit-behind' });
      for (let n = 0; n < 3000; n++) log.info({ n }, 'x'.repeat(300));
      process.stdout.write('logged\\n');
      setImmediate(() => process.exit(0));
    `,
      { resumeAfterMs: 300 },
    );
    expect(logged).toBe(true);
    expect(lines.map((l) => (JSON.parse(l) as { n: number }).n)).toEqual(
      Array.from({ length: 3000 }, (_, i) => i),
    );
  });
});
