import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import type { Command } from 'commander';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildProgram } from '../src/main.ts';
import { fairway } from './support/run-cli.ts';

const exec = promisify(execFile);
const BIN = resolve(import.meta.dirname, '..', 'bin', 'fairway.js');
const ROOT = resolve(import.meta.dirname, '..', '..', '..');

/** The program and every command under it, depth first. */
function allCommands(cmd: Command): Command[] {
  return [cmd, ...cmd.commands.flatMap(allCommands)];
}

const program = await buildProgram(
  { out: () => {}, err: () => {}, stderrIsTty: false, progressStream: process.stderr },
  () => {},
);

describe('fairway --help and --version', () => {
  it('describes `up` as running the whole stack', async () => {
    const r = await fairway('--help');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/up \[options\]\s+run the whole stack in one process/);
  });

  it('shows no source identifier in place of a word in any help text', () => {
    // A rename of the flag parsers once replaced "whole" in the `up` description with "wholeNumber".
    const parsers = /\b(wholeNumber|positiveWholeNumber|positiveNumber)\b/;
    for (const cmd of allCommands(program)) expect(cmd.helpInformation(), cmd.name()).not.toMatch(parsers);
  });

  it("prints the CLI package's version and exits 0", async () => {
    const { version } = JSON.parse(readFileSync(resolve(import.meta.dirname, '..', 'package.json'), 'utf8'));
    const { stdout } = await exec(process.execPath, [BIN, '--version']);
    expect(stdout.trim()).toBe(version);
    expect((await fairway('-V')).code).toBe(0);
  });
});

describe("the README's command examples", () => {
  it('give every option the command requires', () => {
    const readme = readFileSync(resolve(ROOT, 'README.md'), 'utf8');
    const examples = [...readme.matchAll(/^\| `npx fairway ([\w-]+)([^`]*)`/gm)];
    expect(examples.map((m) => m[1])).toContain('agent');
    for (const [, name, rest] of examples) {
      const cmd = program.commands.find((c) => c.name() === name);
      expect(cmd, `README names an unknown command ${name}`).toBeDefined();
      for (const option of cmd?.options.filter((o) => o.mandatory) ?? [])
        expect(rest, `README's ${name} example`).toContain(option.long);
    }
  });
});

describe('a port the command cannot listen on', () => {
  let busy: Server;
  let port: number;
  beforeAll(async () => {
    busy = createServer();
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', r));
    port = (busy.address() as { port: number }).port;
  });
  afterAll(() => new Promise<void>((r) => busy.close(() => r())));

  it('is reported as in use, naming the flag, with exit code 2 (engine-sim)', async () => {
    const r = await fairway('engine-sim', '--port', String(port), '--log-level', 'silent');
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(`error: port ${port} on 127.0.0.1 is already in use (set --port)\n`);
  });

  it('is reported the same by `fairway up`, whose process then exits', async () => {
    // The embedded default (in-memory store, in-process bus), whatever REDIS_URL/NATS_URL CI exports.
    const err = await exec(process.execPath, [BIN, 'up', '--port', String(port), '--operator-port', '0'], {
      timeout: 50_000,
      env: { ...process.env, REDIS_URL: '', NATS_URL: '' },
    }).catch((e: { code: number; stderr: string; killed: boolean }) => e);
    const { stderr } = err as { stderr: string };
    expect(err, stderr).toMatchObject({ code: 2, killed: false });
    expect(stderr).toContain(`error: port ${port} on 127.0.0.1 is already in use (set --port)\n`);
    expect(stderr).not.toMatch(/internal error/);
  });

  it('names --host when the address is not one of this host', async () => {
    // 192.0.2.0/24 is TEST-NET-1: never assigned to a host.
    const r = await fairway('engine-sim', '--host', '192.0.2.1', '--port', '0', '--log-level', 'silent');
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(
      'error: cannot listen on 192.0.2.1: it is not an address of this host (set --host)\n',
    );
  });
});

describe('fairway engine-sim on hardware its model does not fit', () => {
  it('refuses to start, as vLLM does when the weights leave no room for the KV cache, naming --tp', async () => {
    // Llama-2-13B's 26 GB of weights on one 24-GB A10G.
    const r = await fairway('engine-sim', '--model', 'llama-2-13b', '--gpu', 'A10G-24GB', '--port', '0');
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(
      'error: engine-sim options: tp: llama-2-13b on 1 × A10G-24GB leaves no memory for the KV cache: use more GPUs (--tp) or a larger GPU\n',
    );
  });
});

describe('fairway sim', () => {
  it('says how many requests were still queued or running when the run ended', async () => {
    const r = await fairway('sim', '--scenario', 'vtc-overload', '--duration', '120');
    expect(r.code, r.stderr).toBe(0);
    const [arrived, completed, rejected] = (
      /requests arrived \/ completed \/ rejected\s+(\d+) \/ (\d+) \/ (\d+)/.exec(r.stdout) ?? []
    )
      .slice(1)
      .map(Number);
    const [queued, running] = (
      /unfinished at the end: queued \/ running\s+(\d+) \/ (\d+)/.exec(r.stdout) ?? []
    )
      .slice(1)
      .map(Number);
    // vtc-overload sends more than the engine serves: most of the backlog is still queued.
    expect(queued).toBeGreaterThan(completed!);
    expect(completed! + rejected! + queued! + running!).toBe(arrived);

    const json = JSON.parse(
      (await fairway('sim', '--scenario', 'vtc-overload', '--duration', '120', '--json')).stdout,
    );
    expect(json.requests).toEqual({ arrived, completed, rejected, queued, running });
  });
});
