import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { KEY_LAYOUT, ScriptErrorCode, StoreErrorCode, StoreKeys, scriptErrorFromCode } from '../src/index.ts';
import { loadCommands, pruneUnusedFunctions } from '../src/script-loader.ts';

const commandsDir = join(dirname(fileURLToPath(import.meta.url)), '../src/commands');

describe('loadCommands', () => {
  const commands = loadCommands();

  it('loads every <camelName>-<numKeys>.lua with a versioned name', () => {
    const files = readdirSync(commandsDir).filter((f) => f.endsWith('.lua'));
    expect(commands.map((c) => `${c.name}-${c.numberOfKeys}.lua`).sort()).toEqual(files.sort());
    for (const c of commands) expect(c.versionedName).toMatch(new RegExp(`^${c.name}:[0-9a-f]{10}$`));
  });

  it('opens every script with a header naming its input and output', () => {
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
    for (const c of commands) {
      expect(c.lua).not.toMatch(/--- @include/);
      expect(c.lua.match(/local function fmt\(/g) ?? []).toHaveLength(c.lua.includes('fmt(') ? 1 : 0);
    }
  });

  it('defines exactly the key builders a script uses', () => {
    for (const c of commands) {
      const defined = [...c.lua.matchAll(/local function key_(\w+)\(/g)].map((m) => m[1]);
      const used = new Set([...c.lua.matchAll(/\bkey_(\w+)\(/g)].map((m) => m[1]));
      expect(new Set(defined)).toEqual(used);
      for (const k of defined) expect(Object.keys(KEY_LAYOUT)).toContain(k);
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

  it('leaves no script defining a function it never calls', () => {
    for (const c of loadCommands()) {
      for (const [, name] of c.lua.matchAll(/^local function (\w+)\(/gm)) {
        const calls = c.lua.match(new RegExp(`\\b${name}\\b`, 'g')) ?? [];
        expect(calls.length, `${c.name}: ${name}`).toBeGreaterThan(1);
      }
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
