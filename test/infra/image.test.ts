import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, matchesGlob, relative } from 'node:path';
import { promisify } from 'node:util';
import { DockerfileParser, type Instruction } from 'dockerfile-ast';
import { validate } from 'dockerfile-utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startProcess } from '../e2e/support/processes.ts';
import { REPO_ROOT } from './support/repo.ts';

/**
 * The production image, checked as far as a machine without a container runtime allows: the
 * Dockerfile is linted and held to the image's promises (multi-stage, the repository's npm,
 * non-root, a node health check, the default config inside), and its build stage — every COPY and
 * RUN, with the same npm — is replayed in a temporary directory, whose CLI must then run.
 */

const run = promisify(execFile);
const DOCKERFILE = join(REPO_ROOT, 'infra/Dockerfile');
const text = readFileSync(DOCKERFILE, 'utf8');
const dockerfile = DockerfileParser.parse(text);
const rootManifest = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as {
  packageManager: string;
};
const NPM_VERSION = rootManifest.packageManager.replace(/^npm@/, '');

/** The instructions of each stage, in order (a stage starts at its FROM). */
function stages(): Instruction[][] {
  const out: Instruction[][] = [];
  for (const instruction of dockerfile.getInstructions()) {
    if (instruction.getKeyword() === 'FROM') out.push([]);
    out.at(-1)?.push(instruction);
  }
  return out;
}

function args(instruction: Instruction): string[] {
  return instruction.getArguments().map((a) => a.getValue());
}

/** JSON-form arguments (`["node", "x"]`) as plain strings. */
function jsonArgs(instruction: Instruction): string[] {
  const content = instruction.getArgumentsContent() ?? '';
  const start = content.indexOf('[');
  return JSON.parse(content.slice(start)) as string[];
}

/** `.dockerignore` as Docker applies it: a path is out when it or a parent directory matches. */
const ignorePatterns = readFileSync(join(REPO_ROOT, '.dockerignore'), 'utf8')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l !== '' && !l.startsWith('#'));
function ignored(path: string): boolean {
  const parts = path.split('/');
  return parts.some((_, i) => {
    const prefix = parts.slice(0, i + 1).join('/');
    return ignorePatterns.some((p) => matchesGlob(prefix, p));
  });
}

describe('infra/Dockerfile', () => {
  const [build, runtime] = stages();

  it('passes the Dockerfile linter with no finding', () => {
    expect(validate(text).map((d) => `${d.range.start.line + 1}: ${d.message}`)).toEqual([]);
  });

  it('builds in one stage and runs in another, from a maintained LTS base image pinned to a full version', () => {
    expect(stages()).toHaveLength(2);
    const base = dockerfile.getInitialARGs().find((a) => a.getProperty()?.getName() === 'NODE_IMAGE');
    expect(base?.getProperty()?.getValue()).toMatch(/^node:\d+\.\d+\.\d+-[a-z]+-slim$/);
    const engines = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')).engines.node as string;
    const major = Number(/node:(\d+)/.exec(base?.getProperty()?.getValue() ?? '')?.[1]);
    // A long-term-support line still maintained (Node 20 reached its end of life on 2026-04-30),
    // and one the packages' engines accept.
    expect(major % 2).toBe(0);
    expect(major).toBeGreaterThanOrEqual(22);
    expect(major).toBeGreaterThanOrEqual(Number(/>=(\d+)/.exec(engines)?.[1]));
  });

  it("installs with package.json's packageManager npm and copies every workspace manifest first", () => {
    const runs = build!.filter((i) => i.getKeyword() === 'RUN').map((i) => i.getArgumentsContent());
    expect(runs[0]).toContain(`npm install -g npm@${NPM_VERSION} `);
    const copied = build!
      .filter((i) => i.getKeyword() === 'COPY')
      .flatMap((i) => args(i).slice(0, -1))
      .filter((p) => p.endsWith('package.json'));
    const workspaces = readdirSync(join(REPO_ROOT, 'packages'))
      .filter((d) => existsSync(join(REPO_ROOT, 'packages', d, 'package.json')))
      .map((d) => `packages/${d}/package.json`);
    expect(copied.sort()).toEqual(['package.json', ...workspaces].sort());
  });

  it('runs as an unprivileged user, with a health check by node itself', () => {
    const user = runtime!.find((i) => i.getKeyword() === 'USER');
    expect(user && args(user)[0]).toBe('node');
    const health = runtime!.find((i) => i.getKeyword() === 'HEALTHCHECK');
    expect(health).toBeDefined();
    const command = jsonArgs(health!);
    expect(command[0]).toBe('node');
    expect(existsSync(join(REPO_ROOT, command[1]!))).toBe(true);
    const commands = dockerfile.getInstructions().map((i) => i.getRawArgumentsContent() ?? '');
    expect(commands.filter((c) => /\b(curl|wget)\b/.test(c))).toEqual([]);
  });

  it('keeps node_modules, tests, benchmarks and secrets out of the build context', () => {
    for (const path of ['node_modules/zod', 'packages/core/node_modules/x', 'packages/core/test/a.test.ts'])
      expect(ignored(path), path).toBe(true);
    expect(ignored('.env')).toBe(true);
    for (const path of ['package.json', 'packages/core/src/index.ts', 'infra/fairway.example.yaml'])
      expect(ignored(path), path).toBe(false);
  });
});

describe("the image's build stage, replayed with the same npm", () => {
  const root = mkdtempSync(join(tmpdir(), 'fairway-image-'));
  const app = join(root, 'app');
  let npm: readonly string[] = ['npm'];

  /** COPY <sources…> <dest> relative to WORKDIR /app, honouring .dockerignore. */
  function replayCopy(instruction: Instruction): void {
    const parts = args(instruction);
    const dest = parts.at(-1)!;
    for (const source of parts.slice(0, -1)) {
      const target =
        dest.endsWith('/') || parts.length > 2 ? join(app, dest, source.split('/').pop()!) : join(app, dest);
      mkdirSync(dirname(target), { recursive: true });
      cpSync(join(REPO_ROOT, source), target, {
        recursive: true,
        filter: (from) => !ignored(relative(REPO_ROOT, from)),
      });
    }
  }

  beforeAll(async () => {
    mkdirSync(app);
    const { stdout } = await run('npm', ['--version']);
    // The image installs npm X; here the machine's npm if it is X, else X through npx.
    if (stdout.trim() !== NPM_VERSION) npm = ['npx', '--yes', `npm@${NPM_VERSION}`];
    const [build] = stages();
    for (const instruction of build!) {
      const keyword = instruction.getKeyword();
      if (keyword === 'COPY') replayCopy(instruction);
      if (keyword !== 'RUN') continue;
      const command = instruction.getArgumentsContent() ?? '';
      if (command.startsWith('npm install -g npm@')) continue;
      const [bin, ...rest] = command.split(/\s+/);
      expect(bin).toBe('npm');
      await run(npm[0]!, [...npm.slice(1), ...rest], { cwd: app, timeout: 240_000 });
    }
  }, 300_000);

  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('installs no devDependency', () => {
    const lock = JSON.parse(readFileSync(join(app, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, { dev?: boolean }>;
    };
    const devOnly = Object.entries(lock.packages)
      .filter(([path, entry]) => entry.dev === true && existsSync(join(app, path)))
      .map(([path]) => path);
    expect(devOnly).toEqual([]);
    expect(existsSync(join(app, 'node_modules/vitest'))).toBe(false);
    expect(existsSync(join(app, 'node_modules/tsx'))).toBe(true); // the CLI's runtime loader
  });

  it('yields a CLI that runs: --help lists the commands', async () => {
    const { stdout } = await run(process.execPath, [join(app, 'packages/cli/bin/fairway.js'), '--help'], {
      cwd: app,
      env: { ...process.env, NODE_ENV: 'production' },
    });
    for (const command of ['up', 'serve', 'agent', 'engine-sim']) expect(stdout).toContain(command);
  });

  it('`fairway up` finds its default config there and its /health passes the image health check', async () => {
    const up = await startProcess(
      process.execPath,
      [
        join(app, 'packages/cli/bin/fairway.js'),
        'up',
        '--port',
        '0',
        '--speed',
        '20',
        '--log-level',
        'error',
      ],
      /^fairway is up: (http:\/\/\S+)/,
      {
        // No operator listener (its default port is fixed; other tests may hold it).
        env: { REDIS_URL: '', NATS_URL: '', NODE_ENV: 'production', FAIRWAY_OPERATOR_PORT: '0' },
        timeoutMs: 60_000,
      },
    );
    const check = join(app, 'packages/cli/bin/healthcheck.js');
    try {
      await expect(run(process.execPath, [check, `${up.url}/health`])).resolves.toBeDefined();
    } finally {
      await up.stop();
    }
    // Nothing listening any more: the check fails, as Docker needs it to.
    await expect(run(process.execPath, [check, `${up.url}/health`])).rejects.toMatchObject({ code: 1 });
  }, 90_000);
});
