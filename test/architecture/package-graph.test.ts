import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { readManifest, sourceFiles, specifiersOf } from '../support/imports.ts';

/**
 * The package graph (docs/contributors/packages.md): which workspace may depend on which, checked against what
 * each package declares and what its files import. The packages that serve live traffic never load
 * the simulator or the simulated engine, not even through another package; every `@fairway`
 * import is declared; the runtime graph has no cycle; no file reaches into another package's files.
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const SCOPE = '@fairway/';

/**
 * What each package may depend on at run time (`dependencies`), by short name: the layering,
 * bottom up. A new package, or a new edge, is a decision to make here and in the documented table.
 */
const ALLOWED: Readonly<Record<string, readonly string[]>> = {
  core: [],
  policy: ['core'],
  perf: ['core', 'policy'],
  store: ['core', 'policy'],
  scheduler: ['core', 'policy', 'store'],
  bus: ['core'],
  engine: ['core', 'policy'],
  sim: ['core', 'policy', 'perf', 'store', 'scheduler'],
  'engine-sim': ['core', 'engine', 'perf', 'sim'],
  agent: ['core', 'bus', 'engine'],
  dispatcher: ['core', 'policy', 'perf', 'store', 'scheduler', 'bus', 'engine'],
  batch: ['core', 'dispatcher'],
  cli: ['core', 'policy', 'bus', 'engine', 'engine-sim', 'sim', 'agent', 'dispatcher', 'batch'],
  testkit: [],
};

/** Packages on the live request path: none of them may load a simulator. */
const LIVE = [
  'core',
  'policy',
  'perf',
  'store',
  'scheduler',
  'bus',
  'engine',
  'agent',
  'dispatcher',
  'batch',
];
/** The simulators. */
const SIMULATORS = new Set(['sim', 'engine-sim']);

interface Workspace {
  /** Short name (`dispatcher` for `@fairway/dispatcher`). */
  readonly name: string;
  readonly dir: string;
  readonly dependencies: ReadonlySet<string>;
  readonly devDependencies: ReadonlySet<string>;
}

const short = (specifier: string): string | undefined =>
  specifier.startsWith(SCOPE) ? specifier.slice(SCOPE.length).split('/')[0] : undefined;

function workspaces(): Workspace[] {
  return readdirSync(join(ROOT, 'packages'))
    .map((d) => join(ROOT, 'packages', d))
    .filter((d) => {
      try {
        return statSync(join(d, 'package.json')).isFile();
      } catch {
        return false;
      }
    })
    .map((dir) => {
      const m = readManifest(dir);
      const scoped = (deps: Record<string, string> | undefined): Set<string> =>
        new Set(Object.keys(deps ?? {}).flatMap((d) => short(d) ?? []));
      return {
        name: short(m.name) ?? m.name,
        dir,
        dependencies: scoped(m.dependencies),
        devDependencies: scoped(m.devDependencies),
      };
    });
}

/** One import a file makes, with the file it is in (relative to the repository). */
interface Import {
  readonly file: string;
  readonly specifier: string;
}

function importsIn(dirs: readonly string[]): Import[] {
  return dirs.flatMap((d) =>
    sourceFiles(d).flatMap((file) =>
      [...specifiersOf(file)].map((specifier) => ({ file: relative(ROOT, file), specifier })),
    ),
  );
}

/** A cycle in `graph` as the path that closes it (`a → b → a`), or undefined if it has none. */
function findCycle(graph: ReadonlyMap<string, Iterable<string>>): string[] | undefined {
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (node: string): string[] | undefined => {
    if (state.get(node) === 'done') return undefined;
    if (state.get(node) === 'open') return [...path.slice(path.indexOf(node)), node];
    state.set(node, 'open');
    path.push(node);
    for (const next of graph.get(node) ?? []) {
      const cycle = visit(next);
      if (cycle !== undefined) return cycle;
    }
    path.pop();
    state.set(node, 'done');
    return undefined;
  };
  for (const node of graph.keys()) {
    const cycle = visit(node);
    if (cycle !== undefined) return cycle;
  }
  return undefined;
}

/** Every package `name` loads at run time, through any chain of `dependencies`. */
function closure(graph: ReadonlyMap<string, Iterable<string>>, name: string): Set<string> {
  const seen = new Set<string>();
  const stack = [...(graph.get(name) ?? [])];
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    if (seen.has(next)) continue;
    seen.add(next);
    stack.push(...(graph.get(next) ?? []));
  }
  return seen;
}

/**
 * The documented package table (docs/contributors/packages.md): each row's package and the
 * workspaces its "may depend on" column names (`—` for none).
 */
function documentedTable(): Map<string, string[]> {
  const page = readFileSync(join(ROOT, 'docs', 'contributors', 'packages.md'), 'utf8');
  const rows = new Map<string, string[]>();
  for (const line of page.split('\n')) {
    const cells = line.split('|').map((c) => c.trim());
    const pkg = /^`packages\/([a-z-]+)`$/.exec(cells[1] ?? '')?.[1];
    if (pkg === undefined) continue;
    rows.set(pkg, [...(cells[3] ?? '').matchAll(/`([a-z-]+)`/g)].map((m) => m[1] as string).sort());
  }
  return rows;
}

const all = workspaces();
const runtimeGraph = new Map(all.map((w) => [w.name, w.dependencies]));

describe('the package graph', () => {
  it('places every workspace in the layering, and names no package that does not exist', () => {
    expect(all.map((w) => w.name).sort()).toEqual(Object.keys(ALLOWED).sort());
  });

  it('is the graph the documented package table shows', () => {
    const documented = Object.fromEntries(documentedTable());
    const allowed = Object.fromEntries(Object.entries(ALLOWED).map(([k, v]) => [k, [...v].sort()]));
    expect(documented).toEqual(allowed);
  });

  it('has no cycle among run-time dependencies', () => {
    expect(findCycle(runtimeGraph)).toBeUndefined();
  });

  it('has no cycle when devDependencies count too (turbo orders tasks by both, and warns of a cycle)', () => {
    const full = new Map(all.map((w) => [w.name, new Set([...w.dependencies, ...w.devDependencies])]));
    expect(findCycle(full)).toBeUndefined();
  });

  it('finds a cycle when there is one (the check above can fail)', () => {
    const graph = new Map([
      ['a', ['b']],
      ['b', ['c']],
      ['c', ['a']],
    ]);
    expect(findCycle(graph)).toEqual(['a', 'b', 'c', 'a']);
    expect(findCycle(new Map([['a', ['b']]]))).toBeUndefined();
  });

  for (const w of all) {
    describe(`@fairway/${w.name}`, () => {
      const runtime = importsIn([join(w.dir, 'src'), join(w.dir, 'bin')]);
      const development = importsIn([join(w.dir, 'test'), join(w.dir, 'bench')]);

      it('depends only on the packages its layer allows', () => {
        const allowed = new Set(ALLOWED[w.name] ?? []);
        expect([...w.dependencies].filter((d) => !allowed.has(d))).toEqual([]);
      });

      it('declares every @fairway package its src and bin import as a dependency', () => {
        const undeclared = runtime.filter((i) => {
          const name = short(i.specifier);
          return name !== undefined && name !== w.name && !w.dependencies.has(name);
        });
        expect(undeclared.map((i) => `${i.specifier} (${i.file})`)).toEqual([]);
      });

      it('declares every @fairway package its tests and benchmarks import', () => {
        const undeclared = development.filter((i) => {
          const name = short(i.specifier);
          return (
            name !== undefined && name !== w.name && !w.dependencies.has(name) && !w.devDependencies.has(name)
          );
        });
        expect(undeclared.map((i) => `${i.specifier} (${i.file})`)).toEqual([]);
      });

      it("imports other packages by name only, never their files (no '@fairway/x/…', no '../../x')", () => {
        const reaching = [...runtime, ...development].filter((i) => {
          if (i.specifier.startsWith(SCOPE)) return i.specifier.slice(SCOPE.length).includes('/');
          if (!i.specifier.startsWith('.')) return false;
          const target = resolve(dirname(join(ROOT, i.file)), i.specifier);
          return relative(w.dir, target).startsWith('..');
        });
        expect(reaching.map((i) => `${i.specifier} (${i.file})`)).toEqual([]);
      });

      if (LIVE.includes(w.name))
        it('serves live traffic without loading the simulator or the simulated engine', () => {
          const direct = runtime.filter((i) => SIMULATORS.has(short(i.specifier) ?? ''));
          expect(direct.map((i) => `${i.specifier} (${i.file})`)).toEqual([]);
          expect([...closure(runtimeGraph, w.name)].filter((d) => SIMULATORS.has(d))).toEqual([]);
        });
    });
  }
});
