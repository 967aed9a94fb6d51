import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyPluginAsync } from 'fastify';

/** The console's own files (packages/dispatcher/src/console): the page, its script and style. */
const CONSOLE_DIR = fileURLToPath(new URL('../console/', import.meta.url));

const require = createRequire(import.meta.url);

const JS = 'text/javascript; charset=utf-8';
const CSS = 'text/css; charset=utf-8';

/**
 * Every file the console serves, by URL path: nothing else is read from disk. The front-end
 * libraries are the installed npm packages' own ESM builds (vendored at install time; htm's
 * beside the CommonJS entry `require` resolves to).
 */
const FILES: Record<string, { path: string; type: string }> = {
  '/console': { path: join(CONSOLE_DIR, 'index.html'), type: 'text/html; charset=utf-8' },
  '/console/app.js': { path: join(CONSOLE_DIR, 'app.js'), type: JS },
  '/console/console.css': { path: join(CONSOLE_DIR, 'console.css'), type: CSS },
  '/console/vendor/preact.mjs': { path: require.resolve('preact'), type: JS },
  '/console/vendor/preact-hooks.mjs': { path: require.resolve('preact/hooks'), type: JS },
  '/console/vendor/htm.mjs': { path: join(dirname(require.resolve('htm')), 'htm.mjs'), type: JS },
  '/console/vendor/uPlot.esm.js': {
    path: require.resolve('uplot/dist/uPlot.esm.js'),
    type: JS,
  },
  '/console/vendor/uPlot.min.css': {
    path: require.resolve('uplot/dist/uPlot.min.css'),
    type: CSS,
  },
};

/**
 * The live console on the operator port: `GET /console` and its static files, read once from the
 * repository and the installed front-end packages (Preact, htm, uPlot) — no build step, nothing
 * fetched at run time. The page itself holds no data: it asks the admin API (and
 * `/admin/v1/overview`) with the admin token the operator enters, or a link carries once (`/console#token=…`), kept in
 * sessionStorage.
 */
export const consoleRoutes: FastifyPluginAsync = async (app) => {
  const loaded = Object.entries(FILES).map(([url, f]) => ({ url, type: f.type, body: readFileSync(f.path) }));
  const csp =
    `default-src 'self'; script-src 'self' ${importMapHash(loaded[0]?.body.toString('utf8') ?? '')}; ` +
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'";
  for (const f of loaded)
    app.get(f.url, async (_request, reply) =>
      reply
        .header('content-type', f.type)
        .header('cache-control', 'no-cache')
        // Scripts and styles from this origin only; data from the admin API on the same origin.
        .header('content-security-policy', csp)
        .header('x-content-type-options', 'nosniff')
        .header('referrer-policy', 'no-referrer')
        .send(f.body),
    );
};

/** The CSP source allowing the page's one inline script, its import map (by hash). */
function importMapHash(page: string): string {
  const map = /<script type="importmap">([\s\S]*?)<\/script>/.exec(page)?.[1] ?? '';
  return `'sha256-${createHash('sha256').update(map, 'utf8').digest('base64')}'`;
}

/** The URL paths the console serves (for the operator port's route list). */
export const CONSOLE_PATHS: readonly string[] = Object.keys(FILES);
