import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ScriptErrorCode } from './errors.ts';
import { EPOCH_KEY, luaKeyFunctions } from './keys.ts';

/** One command of the library: a `commands/<camelName>-<numKeys>.lua` file. */
export interface LuaCommand {
  /** camelName from `<camelName>-<numKeys>.lua`. */
  readonly name: string;
  readonly numberOfKeys: number;
  /** Redis function name: `fairway_<version>_<name>`. */
  readonly functionName: string;
}

/**
 * Every command as one Redis Functions library (`FUNCTION LOAD`, then `FCALL`). Redis runs a
 * library's top level once, when it is loaded, so the helpers and key builders every command
 * shares are defined once; an EVALSHA script instead re-runs its whole body, and re-creates
 * every function it defines, on every call (≈25,000 instructions of an empty dispatch's 105,000
 * on Redis 7.0, measured with callgrind).
 */
export interface LuaLibrary {
  /** `fairway_<version>`; version = hash of the code, so two builds never run each other's code. */
  readonly name: string;
  readonly version: string;
  /** The `#!lua name=…` source given to `FUNCTION LOAD`. */
  readonly code: string;
  /** Commands by camelName. */
  readonly commands: ReadonlyMap<string, LuaCommand>;
}

const COMMANDS_DIR = join(dirname(fileURLToPath(import.meta.url)), 'commands');
const INCLUDE = /^--- @include "([^"]+)"\s*$/;

/** Appends a file's lines to `out`, each include inlined at its first use only (dependencies first). */
function inline(file: string, seen: Set<string>, out: string[]): void {
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const m = INCLUDE.exec(line);
    if (m === null) {
      out.push(line);
      continue;
    }
    const target = join(dirname(file), `${m[1]}.lua`);
    if (seen.has(target)) continue;
    seen.add(target);
    inline(target, seen, out);
  }
}

const FUNCTION_START = /^local function ([A-Za-z_][A-Za-z0-9_]*)\(/;

/**
 * Drops the top-level `local function`s that nothing calls, until none is left. A top-level
 * function starts with `local function <name>(` and ends at the next line that is exactly `end`
 * (the style of every file in `commands/`).
 */
export function pruneUnusedFunctions(lines: readonly string[]): string[] {
  let out = [...lines];
  for (;;) {
    const defs: { name: string; start: number; end: number }[] = [];
    for (let i = 0; i < out.length; i++) {
      const m = FUNCTION_START.exec(out[i] as string);
      if (m === null) continue;
      let end = i;
      while (end < out.length && out[end] !== 'end') end++;
      defs.push({ name: m[1] as string, start: i, end });
      i = end;
    }
    const unused = defs.filter(({ name, start, end }) => {
      const word = new RegExp(`\\b${name}\\b`);
      return !out.some((line, i) => (i < start || i > end) && word.test(line.replace(/--.*$/, '')));
    });
    if (unused.length === 0) return out;
    const drop = new Set(
      unused.flatMap(({ start, end }) => Array.from({ length: end - start + 1 }, (_, k) => start + k)),
    );
    out = out.filter((_, i) => !drop.has(i));
  }
}

/**
 * Builds the library from every `commands/<camelName>-<numKeys>.lua`: the key builders, every
 * include once (dependencies first), each command's body as a local function, and one registered
 * function per command that binds the call's keys and arguments to the `KEYS`, `ARGV` and `BASE`
 * upvalues every helper reads, as they would be in an EVAL script. Every call passes the
 * caller's epoch as its last argument; a call whose epoch is not the store's (the state was lost,
 * see `STATE_LOST`) returns -3 before it reads or writes anything — one GET, the only cost of
 * detecting a loss on the hot path. Functions nothing calls are dropped.
 */
export function loadLibrary(dir: string = COMMANDS_DIR): LuaLibrary {
  const shared: string[] = [];
  const seen = new Set<string>();
  const bodies: string[] = [];
  const files: { name: string; numberOfKeys: number }[] = [];
  for (const file of readdirSync(dir).sort()) {
    const m = /^([a-z][A-Za-z0-9]*)-(\d+)\.lua$/.exec(file);
    if (m === null) continue;
    const name = m[1] as string;
    files.push({ name, numberOfKeys: Number(m[2]) });
    bodies.push(`local function command_${name}()`);
    for (const line of readFileSync(join(dir, file), 'utf8').split('\n')) {
      const inc = INCLUDE.exec(line);
      if (inc !== null) {
        const target = join(dir, `${inc[1]}.lua`);
        if (!seen.has(target)) {
          seen.add(target);
          inline(target, seen, shared);
        }
        continue;
      }
      // Indented, so a command's own top-level functions stay nested (pruning sees only helpers).
      bodies.push(line === '' ? line : `  ${line}`);
    }
    bodies.push('end');
  }
  const registrations = files.map(
    ({ name }) =>
      `redis.register_function('fairway_VERSION_${name}', function(keys, args) local e = table.remove(args) if redis.call('GET', args[1] .. '${EPOCH_KEY}') ~= e then return ${ScriptErrorCode.STATE_LOST} end KEYS, ARGV, BASE, LP = keys, args, args[1], {} return command_${name}() end)`,
  );
  const body = pruneUnusedFunctions([...shared, ...bodies, ...registrations]).join('\n');
  const used = new Set([...body.matchAll(/\bkey_([A-Za-z]+)\b/g)].map((k) => k[1] as string));
  const source = ['local KEYS, ARGV, BASE, LP', luaKeyFunctions(used), body].join('\n');
  const version = createHash('sha1').update(source).digest('hex').slice(0, 10);
  const commands = new Map(
    files.map(({ name, numberOfKeys }) => [
      name,
      { name, numberOfKeys, functionName: `fairway_${version}_${name}` },
    ]),
  );
  return {
    name: `fairway_${version}`,
    version,
    code: `#!lua name=fairway_${version}\n${source.replaceAll('fairway_VERSION_', `fairway_${version}_`)}`,
    commands,
  };
}
