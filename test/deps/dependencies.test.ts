import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { importsOf, readManifest, sourceFiles } from '../support/imports.ts';

/**
 * Dependency hygiene: every dependency a package.json declares is imported by that package, and
 * every package a file imports is declared. The image installs exactly `dependencies`, so an unused
 * one ships dead weight and an undeclared one works only by the accident of npm's hoisting.
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

function importsOfAll(files: readonly string[]): Map<string, string[]> {
  const users = new Map<string, string[]>();
  for (const file of files)
    for (const name of importsOf(file)) users.set(name, [...(users.get(name) ?? []), relative(ROOT, file)]);
  return users;
}

/** Command names a package puts on PATH (its `bin`). */
function binsOf(name: string): string[] {
  const manifest = readManifest(join(ROOT, 'node_modules', name));
  if (manifest.bin === undefined) return [];
  if (typeof manifest.bin === 'string') return [manifest.name.split('/').pop() ?? manifest.name];
  return Object.keys(manifest.bin);
}

const rootManifest = readManifest(ROOT);
const workspaceDirs = readdirSync(join(ROOT, 'packages'))
  .map((d) => join(ROOT, 'packages', d))
  .filter((d) => {
    try {
      return statSync(join(d, 'package.json')).isFile();
    } catch {
      return false;
    }
  });
const workspaceNames = new Set(workspaceDirs.map((d) => readManifest(d).name));
const rootDev = new Set(Object.keys(rootManifest.devDependencies ?? {}));
/** Commands the repository runs: npm scripts, CI, the image build. */
const commandText = [
  ...Object.values(rootManifest.scripts ?? {}),
  readFileSync(join(ROOT, '.ci/run'), 'utf8'),
].join('\n');

describe('workspace package dependencies', () => {
  for (const dir of workspaceDirs) {
    const manifest = readManifest(dir);
    const deps = new Set(Object.keys(manifest.dependencies ?? {}));
    const devDeps = new Set(Object.keys(manifest.devDependencies ?? {}));
    const runtime = importsOfAll([...sourceFiles(join(dir, 'src')), ...sourceFiles(join(dir, 'bin'))]);
    const development = importsOfAll([...sourceFiles(join(dir, 'test')), ...sourceFiles(join(dir, 'bench'))]);

    it(`${manifest.name}: every dependency is imported by its src or bin`, () => {
      expect([...deps].filter((d) => !runtime.has(d))).toEqual([]);
    });

    it(`${manifest.name}: everything its src and bin import is a dependency`, () => {
      const undeclared = [...runtime].filter(([name]) => !deps.has(name));
      expect(undeclared.map(([name, files]) => `${name} (${files[0]})`)).toEqual([]);
    });

    it(`${manifest.name}: every devDependency is imported by its tests or benchmarks`, () => {
      expect([...devDeps].filter((d) => !development.has(d) && !runtime.has(d))).toEqual([]);
    });

    it(`${manifest.name}: everything its tests and benchmarks import is declared (or a root dev tool)`, () => {
      const undeclared = [...development].filter(
        ([name]) => !deps.has(name) && !devDeps.has(name) && !rootDev.has(name) && name !== manifest.name,
      );
      expect(undeclared.map(([name, files]) => `${name} (${files[0]})`)).toEqual([]);
    });
  }
});

describe('root dependencies', () => {
  const files = [
    ...sourceFiles(join(ROOT, 'test')),
    ...sourceFiles(join(ROOT, 'scripts')),
    ...sourceFiles(join(ROOT, 'vitest.config.ts')),
  ];
  const rootImports = importsOfAll(files);
  const workspaceImports = importsOfAll(
    workspaceDirs.flatMap((d) => ['src', 'bin', 'test', 'bench'].flatMap((s) => sourceFiles(join(d, s)))),
  );

  it('declares no runtime dependencies (the workspaces do)', () => {
    expect(Object.keys(rootManifest.dependencies ?? {})).toEqual([]);
  });

  it('every devDependency is imported, run as a command, or the types of a used package', () => {
    const used = (name: string): boolean => {
      if (rootImports.has(name) || workspaceImports.has(name)) return true;
      if (name.startsWith('@types/')) {
        const typed = name.slice('@types/'.length);
        return typed === 'node' || rootImports.has(typed) || workspaceImports.has(typed);
      }
      return binsOf(name).some((bin) => new RegExp(`(^|[\\s;&|(])${bin}\\s`, 'm').test(commandText));
    };
    expect([...rootDev].filter((d) => !used(d))).toEqual([]);
  });

  it('everything the root tests and scripts import is a root devDependency or a workspace', () => {
    const undeclared = [...rootImports].filter(([name]) => !rootDev.has(name) && !workspaceNames.has(name));
    expect(undeclared.map(([name, files]) => `${name} (${files[0]})`)).toEqual([]);
  });
});
