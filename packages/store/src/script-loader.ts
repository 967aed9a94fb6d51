import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { luaKeyFunctions } from './keys.ts';

/** A compiled Lua command: its file's name and key count, and the full source sent to Redis. */
export interface LuaCommand {
  /** camelName from `<camelName>-<numKeys>.lua`. */
  readonly name: string;
  readonly numberOfKeys: number;
  /** Source with the generated key functions and every `--- @include` inlined once. */
  readonly lua: string;
  /** Name registered on the client: `<name>:<version>`, version = hash of `lua`. */
  readonly versionedName: string;
}

const COMMANDS_DIR = join(dirname(fileURLToPath(import.meta.url)), 'commands');
const INCLUDE = /^--- @include "([^"]+)"\s*$/;

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
 * Drops the top-level `local function`s that nothing calls, until none is left. An EVALSHA runs a
 * script's whole body on every call, so every definition costs a closure per call (≈0.1–0.2 µs
 * each measured on Redis 7.0) whether or not it is used; includes bring many a script never calls.
 * A top-level function starts with `local function <name>(` and ends at the next line that is
 * exactly `end` (the style of every file in `commands/`).
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
 * Reads every `commands/<camelName>-<numKeys>.lua`, inlines its includes (each once, dependencies
 * first) after the generated key functions, drops the functions it never calls, and names it with
 * a content-hash version so that two deployments with different scripts never run each other's code.
 */
export function loadCommands(dir: string = COMMANDS_DIR): readonly LuaCommand[] {
  const commands: LuaCommand[] = [];
  for (const file of readdirSync(dir).sort()) {
    const m = /^([a-z][A-Za-z0-9]*)-(\d+)\.lua$/.exec(file);
    if (m === null) continue;
    const out: string[] = [];
    inline(join(dir, file), new Set(), out);
    const body = pruneUnusedFunctions(out).join('\n');
    // Only the key builders the script uses: each local closure costs time on every call.
    const used = new Set([...body.matchAll(/\bkey_([A-Za-z]+)\b/g)].map((m) => m[1] as string));
    const lua = `${luaKeyFunctions(used)}\n${body}`;
    const version = createHash('sha1').update(lua).digest('hex').slice(0, 10);
    const name = m[1] as string;
    commands.push({ name, numberOfKeys: Number(m[2]), lua, versionedName: `${name}:${version}` });
  }
  return commands;
}

/** Registers every command on a client (idempotent per client); returns them by camelName. */
export function defineCommands(
  redis: Redis,
  commands: readonly LuaCommand[],
): ReadonlyMap<string, LuaCommand> {
  const byName = new Map<string, LuaCommand>();
  for (const c of commands) {
    redis.defineCommand(c.versionedName, { numberOfKeys: c.numberOfKeys, lua: c.lua });
    byName.set(c.name, c);
  }
  return byName;
}
