import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { KEY_LAYOUT, ScriptErrorCode, StoreErrorCode, StoreKeys, scriptErrorFromCode } from '../src/index.ts';
import { loadLibrary, pruneUnusedFunctions } from '../src/script-loader.ts';

const commandsDir = join(dirname(fileURLToPath(import.meta.url)), '../src/commands');

describe('loadLibrary', () => {
  const library = loadLibrary();
  const commands = [...library.commands.values()];

  it('has one function per <camelName>-<numKeys>.lua, named by the library version', () => {
    const files = readdirSync(commandsDir).filter((f) => f.endsWith('.lua'));
    expect(commands.map((c) => `${c.name}-${c.numberOfKeys}.lua`).sort()).toEqual(files.sort());
    expect(library.name).toBe(`fairway_${library.version}`);
    expect(library.code.startsWith(`#!lua name=${library.name}\n`)).toBe(true);
    for (const c of commands) {
      expect(c.functionName).toBe(`fairway_${library.version}_${c.name}`);
      expect(library.code).toContain(`redis.register_function('${c.functionName}',`);
    }
  });

  it('opens every command file with a header naming its input and output', () => {
    for (const c of commands) {
      const src = readFileSync(join(commandsDir, `${c.name}-${c.numberOfKeys}.lua`), 'utf8');
      expect(src.startsWith('--[[')).toBe(true);
      const header = src.slice(0, src.indexOf(']]'));
      expect(header).toContain('Input:');
      expect(header).toContain('Output');
      for (let k = 1; k <= c.numberOfKeys; k++) expect(header).toContain(`KEYS[${k}]`);
    }
  });

  it('inlines each include once and leaves no include directive', () => {
    expect(library.code).not.toMatch(/--- @include/);
    expect(library.code.match(/local function fmt\(/g) ?? []).toHaveLength(1);
    expect(library.code.match(/local function enqueue\(/g) ?? []).toHaveLength(1);
  });

  it('defines exactly the key builders it uses', () => {
    const defined = [...library.code.matchAll(/local function key_(\w+)\(/g)].map((m) => m[1]);
    const used = new Set([...library.code.matchAll(/\bkey_(\w+)\(/g)].map((m) => m[1]));
    expect(new Set(defined)).toEqual(used);
    for (const k of defined) expect(Object.keys(KEY_LAYOUT)).toContain(k);
  });

  it('is versioned by its code: the same files give the same version, a changed include another', () => {
    expect(library.version).toMatch(/^[0-9a-f]{10}$/);
    const dir = mkdtempSync(join(tmpdir(), 'fairway-lua-'));
    try {
      cpSync(commandsDir, dir, { recursive: true });
      expect(loadLibrary(dir).version).toBe(library.version);
      const numbers = join(dir, 'includes', 'numbers.lua');
      writeFileSync(numbers, readFileSync(numbers, 'utf8').replace("'%.17g'", "'%.16g'"));
      const changed = loadLibrary(dir);
      expect(changed.version).not.toBe(library.version);
      expect([...changed.commands.values()].map((c) => c.functionName)).not.toContain(
        commands[0]?.functionName,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('pruneUnusedFunctions', () => {
  it('drops functions nothing calls, also those only dropped functions called', () => {
    const src = [
      'local function used(x)',
      '  return x',
      'end',
      'local function helper(x)',
      '  return x + 1',
      'end',
      'local function unused(x)',
      '  return helper(x) -- used(x) in a comment does not count',
      'end',
      'return used(1)',
    ];
    expect(pruneUnusedFunctions(src)).toEqual([
      'local function used(x)',
      '  return x',
      'end',
      'return used(1)',
    ]);
  });

  it('leaves the library no function it never calls', () => {
    const code = loadLibrary().code;
    for (const [, name] of code.matchAll(/^local function (\w+)\(/gm)) {
      const calls = code.match(new RegExp(`\\b${name}\\b`, 'g')) ?? [];
      expect(calls.length, name).toBeGreaterThan(1);
    }
  });
});

describe('StoreKeys', () => {
  const keys = new StoreKeys('fw');

  it('puts every key of a store in one hash slot', () => {
    expect(keys.key('fifo', 'pool', 0, 'tenant')).toBe('{fw}:fifo:4.pool:1.0:tenant');
    expect(keys.key('leases')).toBe('{fw}:leases:');
    expect(keys.pattern()).toBe('{fw}:*');
  });

  it('never lets names with separators collide', () => {
    expect(keys.key('fifo', 'a:1', 0, 'b')).not.toBe(keys.key('fifo', 'a', '1:0', 'b'));
    expect(keys.key('backlog', 'a', 1)).not.toBe(keys.key('backlog', 'a:1', ''));
  });
});

describe('scriptErrorFromCode', () => {
  it('maps script codes to typed errors with stable codes', () => {
    expect(scriptErrorFromCode('dispatch:1', ScriptErrorCode.STATE_CORRUPT).code).toBe(
      StoreErrorCode.STATE_CORRUPT,
    );
    expect(scriptErrorFromCode('admit:1', ScriptErrorCode.BAD_ARGUMENTS).code).toBe(
      StoreErrorCode.SCRIPT_ARGS,
    );
    expect(scriptErrorFromCode('x:1', -99).message).toContain('-99');
  });
});
