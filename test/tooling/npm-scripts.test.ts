import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

/**
 * The root package.json's test scripts: each `vitest run …` they hold selects test files, as
 * vitest itself resolves its arguments (`vitest list --filesOnly`), so a script never names a
 * project or folder that does not exist.
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const VITEST = join(ROOT, 'node_modules', 'vitest', 'vitest.mjs');
const scripts: Record<string, string> =
  (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts?: Record<string, string> })
    .scripts ?? {};

/** The arguments after `vitest run` in a script, up to the end of its command. */
function vitestRunArgs(script: string): string[] | undefined {
  const m = /(?:^|&&|;)\s*vitest run\b([^&;|]*)/.exec(script);
  return m === undefined || m === null ? undefined : (m[1] ?? '').trim().split(/\s+/).filter(Boolean);
}

/** The test files `vitest run <args>` would run, relative to the repository root. */
async function filesSelected(args: readonly string[]): Promise<string[]> {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    [VITEST, 'list', ...args, '--filesOnly', '--json'],
    { cwd: ROOT, maxBuffer: 16 * 1024 * 1024 },
  );
  return (JSON.parse(stdout) as { file: string }[]).map((f) => relative(ROOT, f.file));
}

describe('root npm scripts', () => {
  const runs = Object.entries(scripts).flatMap(([name, script]) => {
    const args = vitestRunArgs(script);
    return args === undefined ? [] : [[name, args] as const];
  });

  it('include the unit test script', () => {
    expect(runs.map(([name]) => name)).toContain('test:unit');
  });

  for (const [name, args] of runs)
    it(`${name}: vitest run${args.map((a) => ` ${a}`).join('')} selects test files`, async () => {
      const files = await filesSelected(args);
      expect(files.length).toBeGreaterThan(0);
    });

  it("test:unit runs every package's tests and no others", async () => {
    const unit = await filesSelected(vitestRunArgs(scripts['test:unit'] ?? '') ?? []);
    const all = await filesSelected([]);
    expect(unit.sort()).toEqual(all.filter((f) => f.startsWith('packages/')).sort());
  });
});
