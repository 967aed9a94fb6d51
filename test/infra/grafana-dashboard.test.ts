import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { startUp, type UpHandle } from '@fairway/cli';
import { silentLogger } from '@fairway/core';
import { freePort } from '@fairway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { onPath } from '../e2e/support/processes.ts';
import { promFamilies } from '../e2e/support/prometheus.ts';
import { REPO_ROOT } from './support/repo.ts';

/**
 * The Grafana dashboard the compose stack provisions (infra/grafana): a well-formed dashboard whose
 * panels query the Prometheus datasource picked in its `datasource` variable (the provisioned one by
 * default, any other where the dashboard is imported), whose every panel queries only metrics that a running
 * fairway fleet (`fairway up`: a dispatcher and engine-sims) really exports — names read from
 * the dispatcher's and an engine's /metrics, not from a list kept by hand.
 */

const GRAFANA = join(REPO_ROOT, 'infra', 'grafana');

interface Target {
  refId: string;
  expr: string;
  legendFormat?: string;
  datasource?: { type: string; uid: string };
}
interface Panel {
  id: number;
  type: string;
  title: string;
  datasource: { type: string; uid: string };
  gridPos: { x: number; y: number; w: number; h: number };
  targets: Target[];
}
interface Dashboard {
  uid: string;
  title: string;
  schemaVersion: number;
  panels: Panel[];
  templating: { list: { name: string; type: string; query?: string }[] };
}

/** How a panel names the datasource chosen in the dashboard's `datasource` variable. */
const DATASOURCE_VARIABLE = '$' + '{datasource}';

/** Every `datasource` object anywhere in a JSON value, with where it is. */
function datasourceRefs(node: unknown, path = ''): { path: string; ref: unknown }[] {
  if (Array.isArray(node)) return node.flatMap((item, i) => datasourceRefs(item, `${path}[${i}]`));
  if (node === null || typeof node !== 'object') return [];
  return Object.entries(node).flatMap(([key, value]) => [
    ...(key === 'datasource' ? [{ path: `${path}.${key}`, ref: value }] : []),
    ...datasourceRefs(value, `${path}.${key}`),
  ]);
}

const dashboard = JSON.parse(readFileSync(join(GRAFANA, 'dashboards', 'fairway.json'), 'utf8')) as Dashboard;

/** PromQL functions and aggregations the dashboard may call (a misspelt one fails the test). */
const PROMQL_FUNCTIONS = new Set([
  'sum',
  'max',
  'min',
  'avg',
  'count',
  'topk',
  'rate',
  'irate',
  'increase',
  'histogram_quantile',
  'scalar',
  'clamp_min',
  'clamp_max',
]);
/** PromQL keywords that take a label list or stand between operands. */
const PROMQL_KEYWORDS = new Set([
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'and',
  'or',
  'unless',
  'bool',
  'offset',
]);

/**
 * The metric names and functions an expression uses: string literals, label matchers, ranges,
 * label lists and number literals are taken out; what remains is identifiers, a function when
 * followed by `(`.
 */
function promqlNames(expr: string): { metrics: string[]; functions: string[] } {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, ' ')
    .replace(/\{[^}]*\}|\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ')
    .replace(/(?<![A-Za-z0-9_:])\d+(\.\d+)?([eE][+-]?\d+)?/g, ' ');
  const metrics: string[] = [];
  const functions: string[] = [];
  for (const m of bare.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\()?/g)) {
    const word = m[1] as string;
    if (m[2] !== undefined) functions.push(word);
    else if (!PROMQL_KEYWORDS.has(word)) metrics.push(word);
  }
  return { metrics, functions };
}

describe('infra/grafana: the fleet dashboard', () => {
  it('is provisioned from the folder compose mounts; its datasource variable defaults to the provisioned Prometheus', () => {
    const provider = parse(
      readFileSync(join(GRAFANA, 'provisioning', 'dashboards', 'fairway.yml'), 'utf8'),
    ) as {
      providers: { type: string; options: { path: string } }[];
    };
    const compose = readFileSync(join(REPO_ROOT, 'infra', 'docker-compose.yml'), 'utf8');
    const path = provider.providers[0]?.options.path ?? '';
    expect(provider.providers[0]?.type).toBe('file');
    expect(compose).toContain(`./grafana/dashboards:${path}:ro`);
    expect(compose).toContain('./grafana/provisioning:/etc/grafana/provisioning:ro');
    const datasources = parse(
      readFileSync(join(GRAFANA, 'provisioning', 'datasources', 'prometheus.yml'), 'utf8'),
    ) as { datasources: { uid: string; type: string; url: string }[] };
    const ds = datasources.datasources[0];
    // A datasource variable with no current value starts on the default datasource of its type.
    expect(ds).toMatchObject({ type: 'prometheus', url: 'http://prometheus:9090', isDefault: true });
  });

  it('queries the Prometheus chosen in its datasource variable, never a datasource uid written in', () => {
    const variable = dashboard.templating.list.find((v) => v.name === 'datasource');
    expect(variable).toMatchObject({ type: 'datasource', query: 'prometheus' });
    for (const p of dashboard.panels) {
      expect(p.datasource, p.title).toEqual({ type: 'prometheus', uid: DATASOURCE_VARIABLE });
      for (const t of p.targets) expect(t.datasource, `${p.title} ${t.refId}`).toEqual(p.datasource);
    }
    const written = datasourceRefs(dashboard).filter(
      ({ ref }) => (ref as { uid?: string } | undefined)?.uid !== DATASOURCE_VARIABLE,
    );
    expect(written.map((w) => w.path)).toEqual([]);
  });

  it('is a well-formed dashboard: unique panel ids and ref ids, panels within the 24-column grid and not overlapping', () => {
    expect(dashboard.uid).toMatch(/^[a-zA-Z0-9_-]{1,40}$/);
    expect(dashboard.title.length).toBeGreaterThan(0);
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36);
    const ids = dashboard.panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    const cells = new Set<string>();
    for (const p of dashboard.panels) {
      expect(['timeseries', 'stat', 'gauge', 'table', 'bargauge'], p.title).toContain(p.type);
      const g = p.gridPos;
      expect(g.x >= 0 && g.w > 0 && g.x + g.w <= 24 && g.y >= 0 && g.h > 0, p.title).toBe(true);
      for (let x = g.x; x < g.x + g.w; x++)
        for (let y = g.y; y < g.y + g.h; y++) {
          expect(cells.has(`${x},${y}`), `${p.title} overlaps another panel at ${x},${y}`).toBe(false);
          cells.add(`${x},${y}`);
        }
      expect(p.targets.length, p.title).toBeGreaterThan(0);
      const refs = p.targets.map((t) => t.refId);
      expect(new Set(refs).size, p.title).toBe(refs.length);
    }
  });

  it('has the panels operators ask for', () => {
    const exprs = dashboard.panels.flatMap((p) => p.targets.map((t) => t.expr)).join('\n');
    for (const metric of [
      'fairway_output_tokens_total', // fleet throughput
      'fairway_tenant_service_total', // share of service …
      'fairway_tenant_weight', // … against weight
      'fairway_queue_wait_seconds_bucket', // queue wait by class
      'fairway_slo_requests_total', // SLO attainment
      'fairway_time_to_first_token_seconds_bucket',
      'fairway_time_per_output_token_seconds_bucket',
      'fairway_replica_kv_usage_ratio',
      'fairway_throttles_total',
      'fairway_desired_replicas',
    ])
      expect(exprs, metric).toContain(metric);
  });

  describe('against a running fleet', () => {
    let up: UpHandle;
    let exported: Set<string>;
    beforeAll(async () => {
      up = await startUp({
        port: 0,
        operatorPort: await freePort(),
        speed: 50,
        env: {},
        logger: silentLogger,
      });
      const dispatcher = await (await fetch(`${up.dispatcher.operatorUrl}/metrics`)).text();
      const engine = await (await fetch(`${up.engines[0]?.url}/metrics`)).text();
      // `up` is Prometheus's own, per scrape target.
      exported = new Set(['up', ...promFamilies(dispatcher), ...promFamilies(engine)]);
    }, 60_000);
    afterAll(async () => {
      await up?.close();
    });

    it('queries only metrics fairway exports, with known PromQL functions', () => {
      const missing: string[] = [];
      const unknown: string[] = [];
      let used = 0;
      for (const p of dashboard.panels)
        for (const { expr } of p.targets) {
          const { metrics, functions } = promqlNames(expr);
          expect(metrics.length, `${p.title}: ${expr}`).toBeGreaterThan(0);
          for (const f of functions) if (!PROMQL_FUNCTIONS.has(f)) unknown.push(`${p.title}: ${f}`);
          for (const name of metrics) {
            used++;
            // Histogram series carry a suffix the family name does not.
            const family = name.replace(/_(bucket|sum|count)$/, '');
            if (!exported.has(name) && !exported.has(family)) missing.push(`${p.title}: ${name}`);
          }
        }
      expect(used).toBeGreaterThanOrEqual(20);
      expect(unknown).toEqual([]);
      expect(missing).toEqual([]);
    });
  });

  const promtool = onPath('promtool');
  it.skipIf(promtool === undefined)(
    'every expression parses with promtool (when Prometheus is installed)',
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'fairway-promtool-'));
      try {
        const rules = dashboard.panels.flatMap((p) =>
          p.targets.map((t) => ({
            record: `fairway_dashboard:panel${p.id}_${t.refId.toLowerCase()}`,
            expr: t.expr,
          })),
        );
        const file = join(dir, 'rules.yml');
        writeFileSync(file, stringify({ groups: [{ name: 'dashboard', rules }] }));
        const { stdout } = await promisify(execFile)(promtool as string, ['check', 'rules', file]);
        expect(stdout).toContain(`${rules.length} rules found`);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );
});
