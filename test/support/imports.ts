import { readdirSync, readFileSync, statSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { join } from 'node:path';
import ts from 'typescript';

/** Reading workspaces' manifests and what their files import (dependency and package-graph tests). */

const SOURCE = /\.(ts|mts|cts|js|mjs|cjs)$/;
const BUILTINS = new Set(builtinModules);

/** What the tests read of a package.json. */
export interface Manifest {
  readonly name: string;
  readonly dependencies?: Record<string, string>;
  readonly devDependencies?: Record<string, string>;
  readonly scripts?: Record<string, string>;
  readonly bin?: string | Record<string, string>;
}

/** The package.json in `dir`. */
export function readManifest(dir: string): Manifest {
  return JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Manifest;
}

/** Source files at `path` (a file or a directory, recursively, without node_modules); none if it does not exist. */
export function sourceFiles(path: string): string[] {
  let stat: ReturnType<typeof statSync>;
  try {
    stat = statSync(path);
  } catch {
    return [];
  }
  if (stat.isFile()) return SOURCE.test(path) ? [path] : [];
  return readdirSync(path, { recursive: true, encoding: 'utf8' })
    .filter((f) => SOURCE.test(f) && !f.split('/').includes('node_modules'))
    .map((f) => join(path, f));
}

/** The package a module specifier names (`@scope/name/sub` → `@scope/name`), or undefined for relative and builtin ones. */
export function packageOf(specifier: string): string | undefined {
  if (specifier.startsWith('.') || specifier.startsWith('/') || specifier.startsWith('node:'))
    return undefined;
  const parts = specifier.split('/');
  const name = specifier.startsWith('@') ? parts.slice(0, 2).join('/') : (parts[0] ?? specifier);
  return BUILTINS.has(name) ? undefined : name;
}

/**
 * Module specifiers a file names: static imports and re-exports, `import()` with a literal,
 * `import x = require()`, `require.resolve()`.
 */
export function specifiersOf(file: string): Set<string> {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, false);
  const found = new Set<string>();
  const add = (node: ts.Node | undefined): void => {
    if (node !== undefined && ts.isStringLiteralLike(node)) found.add(node.text);
  };
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) add(node.moduleSpecifier);
    else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference))
      add(node.moduleReference.expression);
    else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword)
      add(node.arguments[0]);
    else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) add(node.argument.literal);
    // `require.resolve('pkg/file')`, `createRequire(…).resolve(…)`, `import.meta.resolve(…)`: a file the package ships (a
    // tokenizer.json, say) is a use of the package as much as an import is.
    else if (
      ts.isCallExpression(node) &&
      ts.isPropertyAccessExpression(node.expression) &&
      node.expression.name.text === 'resolve' &&
      /^(require|createRequire\(.*\)|import\.meta)$/.test(node.expression.expression.getText(source))
    )
      add(node.arguments[0]);
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** Packages a file imports (see {@link specifiersOf}). */
export function importsOf(file: string): Set<string> {
  const found = new Set<string>();
  for (const specifier of specifiersOf(file)) {
    const name = packageOf(specifier);
    if (name !== undefined) found.add(name);
  }
  return found;
}
