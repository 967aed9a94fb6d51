import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fairwayConfigSchema } from '@fairway/core';
import { ApiErrors } from '@fairway/dispatcher';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import {
  CLI_REFERENCE_PATH,
  cliCommands,
  cliProgram,
  renderCliReference,
} from '../../scripts/cli-reference.ts';
import { CONFIG_REFERENCE_PATH, renderConfigReference } from '../../scripts/config-reference.ts';
import { sourceFiles } from '../support/imports.ts';

/**
 * The documentation, held to the code: links resolve, the generated references are current, every
 * flag, config key, environment variable, error code and metric the code defines is documented,
 * and the pages speak of the product rather than the history of its making.
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** Markdown files under `dir` (recursively), relative to the root. */
function markdownUnder(dir: string): string[] {
  const abs = join(ROOT, dir);
  if (!existsSync(abs)) return [];
  return readdirSync(abs, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.md') && !f.split('/').includes('node_modules'))
    .map((f) => join(dir, f))
    .sort();
}

const PACKAGE_READMES = readdirSync(join(ROOT, 'packages'))
  .map((p) => join('packages', p, 'README.md'))
  .filter((f) => existsSync(join(ROOT, f)));
/** The documentation: the front page, docs/ by reader, the reports, the packages' own pages. */
const DOC_FILES = ['README.md', ...markdownUnder('docs'), ...markdownUnder('reports'), ...PACKAGE_READMES];
/** What the product says of itself in prose: the front page and docs/. */
const PRODUCT_DOCS = ['README.md', ...markdownUnder('docs')];

const read = (file: string): string => readFileSync(join(ROOT, file), 'utf8');
const productText = PRODUCT_DOCS.map(read).join('\n');

/** A Markdown file's text outside fenced code blocks and HTML comments, line by line (numbers kept). */
function proseLines(text: string): string[] {
  let fenced = false;
  return text
    .replace(/<!--[\s\S]*?-->/g, (c) => c.replace(/[^\n]/g, ' '))
    .split('\n')
    .map((line) => {
      if (/^\s*(```|~~~)/.test(line)) {
        fenced = !fenced;
        return '';
      }
      return fenced ? '' : line;
    });
}

/** The link targets of a line, outside inline code spans: `[text](target)` and `![alt](target)`. */
function linksOf(line: string): string[] {
  const outsideCode = line.replace(/`[^`]*`/g, (c) => ' '.repeat(c.length));
  return [...outsideCode.matchAll(/!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map((m) => m[1] as string);
}

/**
 * GitHub's anchor for a heading: the rendered text (code spans, links and emphasis reduced to their
 * text), lower case, every character that is not a letter, digit, space, `-` or `_` dropped, spaces
 * made dashes; a repeated anchor gets `-1`, `-2`, … in order.
 */
function headingAnchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const line of proseLines(text)) {
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (m === null) continue;
    const rendered = (m[1] as string)
      .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
      .replace(/`([^`]*)`/g, '$1')
      .replace(/(\*\*|__|\*)/g, '');
    const base = rendered
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

describe('the documentation', () => {
  it('is organised by reader, with the pages the front page maps', () => {
    for (const reader of ['users', 'operators', 'researchers', 'contributors'])
      expect(markdownUnder(join('docs', reader)).length, reader).toBeGreaterThan(0);
    expect(read('README.md').split('\n').length).toBeLessThanOrEqual(250);
  });

  it('opens with the command that runs fairway and the one that runs every test, as CI runs it', () => {
    const firstBlock = /```sh\n([\s\S]*?)```/.exec(read('README.md'))?.[1] ?? '';
    expect(firstBlock).toMatch(/^npm install && npx fairway up\b/m);
    expect(firstBlock).toMatch(/^npm test\b/m);
    expect(read('.ci/run')).toMatch(/^npm test$/m);
  });

  it('has relative links that resolve to files, and anchors that name a heading there', () => {
    const broken: string[] = [];
    for (const file of DOC_FILES) {
      const lines = proseLines(read(file));
      lines.forEach((line, i) => {
        for (const target of linksOf(line)) {
          if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // http:, https:, mailto:
          const [path = '', anchor] = target.split('#', 2);
          const resolved =
            path === '' ? join(ROOT, file) : resolve(join(ROOT, dirname(file)), decodeURI(path));
          const where = `${file}:${i + 1} → ${target}`;
          if (!existsSync(resolved)) {
            broken.push(`${where} (no such file)`);
            continue;
          }
          if (anchor === undefined || anchor === '') continue;
          if (statSync(resolved).isDirectory() || !resolved.endsWith('.md')) {
            broken.push(`${where} (an anchor into something that is not a Markdown file)`);
            continue;
          }
          if (!headingAnchors(readFileSync(resolved, 'utf8')).has(anchor))
            broken.push(`${where} (no heading #${anchor} in ${relative(ROOT, resolved)})`);
        }
      });
    }
    expect(broken).toEqual([]);
  });

  it('leaves no page unlinked: every page under docs/ is reached from the front page or another page', () => {
    const reached = new Set<string>();
    for (const file of DOC_FILES)
      for (const line of proseLines(read(file)))
        for (const target of linksOf(line)) {
          const path = target.split('#', 1)[0] ?? '';
          if (path === '' || /^[a-z][a-z0-9+.-]*:/i.test(path)) continue;
          const resolved = relative(ROOT, resolve(join(ROOT, dirname(file)), decodeURI(path)));
          if (resolved !== file) reached.add(resolved);
        }
    expect(markdownUnder('docs').filter((f) => !reached.has(f))).toEqual([]);
  });

  it('finds an anchor by GitHub’s rules (the link check can fail)', () => {
    const anchors = headingAnchors(
      '# Peers (what users run today, and the gap)\n## `fairway admin key-add`\n```\n# not a heading\n```\n## Peers (what users run today, and the gap)\n',
    );
    expect([...anchors]).toEqual([
      'peers-what-users-run-today-and-the-gap',
      'fairway-admin-key-add',
      'peers-what-users-run-today-and-the-gap-1',
    ]);
  });
});

describe('the generated references', () => {
  it('the configuration reference is what `npm run docs:config` writes from the schema now', () => {
    expect(read(CONFIG_REFERENCE_PATH), 'run `npm run docs:config`').toBe(renderConfigReference());
  });

  it('the command-line reference is what `npm run docs:cli` writes from the CLI now', async () => {
    expect(read(CLI_REFERENCE_PATH), 'run `npm run docs:cli`').toBe(await renderCliReference());
  });
});

describe('what the code defines, the docs name', () => {
  it('every flag of every `fairway` command', async () => {
    const program = await cliProgram();
    const flags = new Set<string>();
    for (const o of program.options) if (o.long !== undefined) flags.add(o.long);
    for (const { command } of cliCommands(program))
      for (const o of command.options) if (o.long !== undefined) flags.add(o.long);
    expect(flags.size).toBeGreaterThan(50);
    const missing = [...flags].filter((f) => !new RegExp(`${f}(?![\\w-])`).test(productText));
    expect(missing).toEqual([]);
  });

  it('every key of the config file, in the configuration reference', () => {
    interface Node {
      type?: string;
      properties?: Record<string, Node>;
      items?: Node;
      additionalProperties?: Node | boolean;
    }
    const paths: string[] = [];
    const walk = (n: Node, path: string): void => {
      if (n.items !== undefined) walk(n.items, `${path}[]`);
      if (typeof n.additionalProperties === 'object') walk(n.additionalProperties, `${path}.<name>`);
      for (const [k, child] of Object.entries(n.properties ?? {})) {
        const p = path === '' ? k : `${path}.${k}`;
        paths.push(p);
        walk(child, p);
      }
    };
    walk(fairwayConfigSchema.toJSONSchema({ io: 'input', unrepresentable: 'any' }) as Node, '');
    expect(paths.length).toBeGreaterThan(100);
    const reference = read(CONFIG_REFERENCE_PATH);
    expect(paths.filter((p) => !reference.includes(`| \`${p}\` |`))).toEqual([]);
  });

  it('every environment variable the commands read, in the configuration reference', () => {
    const names = new Set<string>();
    const files = readdirSync(join(ROOT, 'packages'))
      .filter((p) => p !== 'testkit')
      .flatMap((p) => [
        ...sourceFiles(join(ROOT, 'packages', p, 'src')),
        ...sourceFiles(join(ROOT, 'packages', p, 'bin')),
      ]);
    for (const file of files) {
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(/\benv(?:\.|\[['"])([A-Z][A-Z0-9_]+)/g)) names.add(m[1] as string);
      // Variables read through a zod schema of the environment (`serveEnvSchema`, `natsEnvSchema`, …).
      for (const schema of text.matchAll(/EnvSchema = z\.object\(\{([\s\S]*?)\n\}\);/g))
        for (const m of (schema[1] as string).matchAll(/^\s{2}([A-Z][A-Z0-9_]+):/gm))
          names.add(m[1] as string);
    }
    expect(names.size).toBeGreaterThan(30);
    const reference = read(CONFIG_REFERENCE_PATH);
    expect([...names].filter((n) => !reference.includes(`\`${n}\``)).sort()).toEqual([]);
    // …and the reference lists none the sources do not read (OTel's own variables are the SDK's).
    const listed = [...reference.matchAll(/^\| `([A-Z][A-Z0-9_]+)` \|/gm)].map((m) => m[1] as string);
    expect(listed.filter((n) => !names.has(n) && !n.startsWith('OTEL_'))).toEqual([]);
  });

  it('every error code a client can see, in the users’ error page', () => {
    const page = read('docs/users/errors.md');
    const missing = Object.values(ApiErrors).filter(
      (e) => !page.includes(`| ${e.status} | \`${e.type}\` | \`${e.code}\` |`),
    );
    expect(missing).toEqual([]);
  });

  it('every metric the dispatcher exports', () => {
    const source = read('packages/dispatcher/src/gateway-metrics.ts');
    const metrics = [...source.matchAll(/name: '(fairway_[a-z_]+)'/g)].map((m) => m[1] as string);
    expect(metrics.length).toBeGreaterThan(10);
    expect(metrics.filter((m) => !productText.includes(m))).toEqual([]);
  });
});

/** Phrases of a diary, not of a product: issue and session numbers, how busy a machine was. */
const HISTORY = [/\bissues?\s+#?\d+/i, /\bsession\s+#?\d+/i, /\bload average/i];

/** The names a test file gives its suites and tests: first arguments of `describe`, `it`, `test` (and `.skip`, `.each(…)`, …). */
function testNames(file: string): string[] {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const names: string[] = [];
  const rootName = (e: ts.Expression): string | undefined => {
    if (ts.isIdentifier(e)) return e.text;
    if (ts.isPropertyAccessExpression(e)) return rootName(e.expression);
    if (ts.isCallExpression(e)) return rootName(e.expression);
    return undefined;
  };
  const visit = (node: ts.Node): void => {
    if (ts.isCallExpression(node) && ['describe', 'it', 'test'].includes(rootName(node.expression) ?? '')) {
      const first = node.arguments[0];
      if (first !== undefined && (ts.isStringLiteral(first) || ts.isNoSubstitutionTemplateLiteral(first)))
        names.push(first.text);
      else if (first !== undefined && ts.isTemplateExpression(first))
        names.push([first.head.text, ...first.templateSpans.map((s) => s.literal.text)].join(' '));
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return names;
}

describe('the product speaks of the product', () => {
  it('README, docs, reports and package pages name no issue or session numbers and no machine load', () => {
    const found: string[] = [];
    for (const file of DOC_FILES)
      read(file)
        .split('\n')
        .forEach((line, i) => {
          if (HISTORY.some((h) => h.test(line))) found.push(`${file}:${i + 1}: ${line.trim()}`);
        });
    expect(found).toEqual([]);
  });

  it('test and suite names say what they hold, not which issue or session they came from', () => {
    const files = [
      ...sourceFiles(join(ROOT, 'test')),
      ...readdirSync(join(ROOT, 'packages')).flatMap((p) => sourceFiles(join(ROOT, 'packages', p, 'test'))),
    ].filter((f) => /\.test\.ts$/.test(f));
    expect(files.length).toBeGreaterThan(50);
    const found = files.flatMap((f) =>
      testNames(f)
        .filter((n) => HISTORY.some((h) => h.test(n)))
        .map((n) => `${relative(ROOT, f)}: ${n}`),
    );
    expect(found).toEqual([]);
  });

  it('finds such a name when there is one (the check above can fail)', () => {
    expect(HISTORY.some((h) => h.test('holds the limit (issue 16)'))).toBe(true);
    expect(HISTORY.some((h) => h.test('session 7: after the merge'))).toBe(true);
    expect(HISTORY.some((h) => h.test('measured at load average 1.6'))).toBe(true);
    expect(HISTORY.some((h) => h.test('keeps sessionStorage across reloads'))).toBe(false);
  });
});
