import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const LOGGER = fileURLToPath(new URL('../src/logger.ts', import.meta.url));

/** Runs `body` in a fresh Node process with `createLogger` imported; its stderr lines as they arrive. */
function run(body: string): {
  lines: Promise<string[]>;
  arrived: (n: number) => Promise<number>;
  stop: () => void;
} {
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      '--input-type=module',
      '-e',
      `import { createLogger } from ${JSON.stringify(LOGGER)};\n${body}`,
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
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
});
