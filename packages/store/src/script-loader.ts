import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Cluster, Redis } from 'ioredis';
import { ScriptErrorCode, StoreInputError } from './errors.ts';
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
 *
 * Commands call Redis through the `redisCall` upvalue, bound to `redis.call` at the first call
 * (the library's top level runs where `redis` has no `call`): `redis.call` itself is a global
 * lookup through the globals' metatable and then a field lookup, ≈270 instructions per command
 * run from Lua (callgrind).
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
      `redis.register_function('fairway_VERSION_${name}', function(keys, args) if redisCall == nil then redisCall = redis.call end local e = table.remove(args) if redisCall('GET', args[1] .. '${EPOCH_KEY}') ~= e then return ${ScriptErrorCode.STATE_LOST} end KEYS, ARGV, BASE, LP = keys, args, args[1], {} return command_${name}() end)`,
  );
  const body = pruneUnusedFunctions([...shared, ...bodies, ...registrations]).join('\n');
  const used = new Set([...body.matchAll(/\bkey_([A-Za-z]+)\b/g)].map((k) => k[1] as string));
  const source = ['local KEYS, ARGV, BASE, LP, redisCall', luaKeyFunctions(used), body].join('\n');
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

/** A Redis client the store runs on: one server (or a Sentinel-managed primary), or a Cluster. */
export type RedisClient = Redis | Cluster;

/** Whether a client talks to a Redis Cluster (ioredis' `Cluster`), whose every primary needs the library. */
export function isCluster(client: RedisClient): client is Cluster {
  return (client as Cluster).isCluster === true;
}

/**
 * Refuses a Cluster client that would auto-pipeline FCALLs: ioredis groups auto-pipelined commands
 * by the slot of their first argument, which for FCALL is the function name, not a key, so two
 * calls in one event-loop turn to slots on different primaries fail the whole batch ("All keys in
 * the pipeline should belong to the same slots allocation group"). Such a client must list
 * `fcall` in `autoPipeliningIgnoredCommands` (plain reads stay auto-pipelined).
 */
export function checkClient(client: RedisClient): void {
  if (!isCluster(client)) return;
  const o = client.options;
  if (o.enableAutoPipelining === true && !(o.autoPipeliningIgnoredCommands ?? []).includes('fcall'))
    throw new StoreInputError('options', [
      {
        path: 'redis',
        message:
          "a Cluster client with enableAutoPipelining must list 'fcall' in autoPipeliningIgnoredCommands (ioredis batches auto-pipelined commands by their first argument, for FCALL the function name)",
      },
    ]);
}

/** Per client, the loading of the current library (by whichever store on it called first). */
const loading = new WeakMap<RedisClient, Promise<void>>();
/** Clients whose Redis (every primary, on a Cluster) holds the current library, as far as they know. */
const loaded = new WeakSet<RedisClient>();

/** Whether an FCALL failed because the server it reached lacks the function (restart, FUNCTION FLUSH, new primary). */
export function functionMissing(err: unknown): boolean {
  return err instanceof Error && /function not found/i.test(err.message);
}

async function loadOn(node: Redis, library: LuaLibrary): Promise<void> {
  try {
    await node.function('LOAD', library.code);
  } catch (err) {
    // Another client (a store in another process) loaded the same version first.
    if (!(err instanceof Error && /already exists/i.test(err.message))) throw err;
  }
}

/**
 * Makes sure the library is loaded where `client` sends its calls: on its server, or on every
 * primary of a Cluster (`FUNCTION LOAD` on each; a primary's replicas get it by replication, so
 * a replica promoted by a fail-over has it already). Resolves at once once done for this client;
 * concurrent callers share one loading.
 */
export function ensureLibrary(client: RedisClient, library: LuaLibrary): Promise<void> | undefined {
  if (loaded.has(client)) return undefined;
  let p = loading.get(client);
  if (p === undefined) {
    p = (async () => {
      if (isCluster(client)) {
        // The slot map (and so the primaries) is known once the client is ready; a first command waits for it.
        if (client.status !== 'ready') await client.cluster('INFO');
        await Promise.all(client.nodes('master').map((node) => loadOn(node, library)));
      } else await loadOn(client, library);
      loaded.add(client);
    })();
    p.catch(() => loading.delete(client));
    loading.set(client, p);
  }
  return p;
}

/**
 * After an FCALL found the function missing on the server it reached (a Redis restarted without
 * persistence, a FUNCTION FLUSH, a primary added or re-created), loads the library again — on
 * every primary of a Cluster, since the reply does not say which node answered; primaries that
 * still have it answer "already exists" — so the caller can retry its call once.
 */
export function reloadLibrary(client: RedisClient, library: LuaLibrary): Promise<void> {
  loaded.delete(client);
  loading.delete(client);
  return ensureLibrary(client, library) ?? Promise.resolve();
}
