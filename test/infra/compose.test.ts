import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort, waitForPort } from '@fairway/testkit';
import { DCLinter } from 'dclint';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { cliArgsProblem } from './support/cli-args.ts';
import { REPO_ROOT } from './support/repo.ts';

/**
 * The compose stack (docs/operators/deploy.md), checked without a container runtime: the
 * compose-spec schema and dclint's rules, start order on health, every variable in .env.example,
 * every mounted file present, the Redis and NATS configs accepted by the real servers, Prometheus
 * aimed at services that exist (the Grafana dashboard is checked in grafana-dashboard.test.ts).
 */

const INFRA = join(REPO_ROOT, 'infra');
const COMPOSE = join(INFRA, 'docker-compose.yml');
const source = readFileSync(COMPOSE, 'utf8');
/** The three NATS servers every fairway process is given (NATS_URL, --nats-url). */
const NATS_URLS = 'nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222';

interface Service {
  image?: string;
  build?: { context: string; dockerfile: string };
  command?: string[];
  environment?: Record<string, string>;
  volumes?: string[];
  healthcheck?: { test: string[] };
  depends_on?: Record<string, { condition: string }>;
}
const compose = parse(source, { merge: true }) as { services: Record<string, Service> };
const services = compose.services;

/** Services Compose cannot health-check, and why (asserted to still be what the reason says). */
const UNPROBEABLE: Record<string, { image: RegExp; reason: string }> = {
  'otel-collector': {
    image: /^otel\/opentelemetry-collector-contrib:/,
    reason: 'image built FROM scratch: nothing inside to run a probe with',
  },
};

function flag(command: readonly string[] | undefined, name: string): string | undefined {
  const i = command?.indexOf(name) ?? -1;
  return i < 0 ? undefined : command?.[i + 1];
}

/** `KEY=value` lines of a dotenv file. */
function dotenv(path: string): Map<string, string> {
  return new Map(
    readFileSync(path, 'utf8')
      .split('\n')
      .filter((l) => /^[A-Z_][A-Z0-9_]*=/.test(l))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)] as [string, string]),
  );
}
const envExample = dotenv(join(INFRA, '.env.example'));

describe('infra/docker-compose.yml', () => {
  it('validates against the compose-spec schema and passes dclint', () => {
    const linter = new DCLinter({
      rules: {
        // Services and keys are ordered by start order and meaning, not alphabetically.
        'service-keys-order': 0,
        'services-alphabetical-order': 0,
        'top-level-properties-order': 0,
        'require-quotes-in-ports': [2, { quoteType: 'double' }],
      },
      quiet: false,
      debug: false,
      exclude: [],
    });
    const [result] = linter.lintFiles([COMPOSE], false);
    expect(result?.messages.map((m) => `${m.line}: ${m.rule}: ${m.message}`)).toEqual([]);
  });

  it('has the whole fleet: Redis, NATS, two dispatchers, two engines, Prometheus, Grafana, a collector', () => {
    const commands = Object.values(services).map((s) => s.command?.[0]);
    expect(commands.filter((c) => c === 'serve')).toHaveLength(2);
    expect(commands.filter((c) => c === 'engine-sim')).toHaveLength(2);
    for (const name of ['redis', 'nats-1', 'nats-2', 'nats-3', 'prometheus', 'grafana', 'otel-collector'])
      expect(Object.keys(services)).toContain(name);
  });

  it("sends the dispatchers' telemetry to the collector's OTLP/HTTP receiver, which has a pipeline for traces and for metrics", () => {
    const collector = parse(readFileSync(join(INFRA, 'otel/collector.yaml'), 'utf8')) as {
      receivers: { otlp: { protocols: { http: { endpoint: string } } } };
      service: { pipelines: Record<string, { receivers: string[]; exporters: string[] }> };
    };
    const http = new URL(`http://${collector.receivers.otlp.protocols.http.endpoint}`);
    for (const name of ['dispatcher-1', 'dispatcher-2']) {
      const endpoint = new URL(services[name]?.environment?.OTEL_EXPORTER_OTLP_ENDPOINT ?? '');
      expect(endpoint.hostname, name).toBe('otel-collector');
      expect(endpoint.port, name).toBe(http.port);
    }
    expect(services['otel-collector']?.volumes).toContain(
      './otel/collector.yaml:/etc/otelcol/collector.yaml:ro',
    );
    for (const signal of ['traces', 'metrics'])
      expect(collector.service.pipelines[signal]?.receivers, signal).toContain('otlp');
  });

  it('health-checks every service that can be probed, and starts each after what it needs is healthy', () => {
    for (const [name, service] of Object.entries(services)) {
      const exempt = UNPROBEABLE[name];
      if (exempt !== undefined) {
        expect(service.image, `${name}: ${exempt.reason}`).toMatch(exempt.image);
        expect(service.healthcheck).toBeUndefined();
        continue;
      }
      expect(service.healthcheck?.test[0], `${name} has a healthcheck`).toBe('CMD');
      for (const [dependency, { condition }] of Object.entries(service.depends_on ?? {})) {
        expect(condition, `${name} → ${dependency}`).toBe('service_healthy');
        expect(services[dependency]?.healthcheck, `${dependency} has a healthcheck`).toBeDefined();
      }
    }
    for (const name of ['dispatcher-1', 'dispatcher-2'])
      expect(Object.keys(services[name]?.depends_on ?? {}).sort()).toEqual([
        'nats-1',
        'nats-2',
        'nats-3',
        'redis',
      ]);
  });

  it('probes fairway containers with the image health check at the port each one listens on', () => {
    for (const [name, service] of Object.entries(services)) {
      if (service.build === undefined) continue;
      expect(service.build.dockerfile).toBe('infra/Dockerfile');
      const [, node, script, url] = service.healthcheck?.test ?? [];
      expect([node, script]).toEqual(['node', 'packages/cli/bin/healthcheck.js']);
      expect(url, name).toBe(`http://127.0.0.1:${flag(service.command, '--port')}/health`);
    }
  });

  it("every fairway service's command line parses with the real CLI", async () => {
    for (const [name, service] of Object.entries(services))
      if (service.build !== undefined)
        expect(await cliArgsProblem(service.command ?? []), name).toBeUndefined();
    expect(await cliArgsProblem(['engine-sim', '--advertise-ur', 'x'])).toMatch(/unknown option/);
  });

  it('engines advertise their service address, not the wildcard they bind', () => {
    for (const [name, service] of Object.entries(services)) {
      if (service.command?.[0] !== 'engine-sim') continue;
      expect(flag(service.command, '--host')).toBe('0.0.0.0');
      expect(flag(service.command, '--advertise-url')).toBe(
        `http://${name}:${flag(service.command, '--port')}`,
      );
      expect(flag(service.command, '--nats-url')).toBe(NATS_URLS);
    }
  });

  it('takes every compose variable without a default from .env.example, and keeps infra/.env out of git', () => {
    const required = [...source.matchAll(/\$\{([A-Z_][A-Z0-9_]*)(:\?[^}]*)?\}/g)].map((m) => m[1]!);
    expect(required.length).toBeGreaterThan(0);
    for (const name of new Set(required)) expect(envExample.has(name), name).toBe(true);
    expect(readFileSync(join(REPO_ROOT, '.gitignore'), 'utf8').split('\n')).toContain('.env');
  });

  it('mounts only files that exist in infra/', () => {
    for (const service of Object.values(services))
      for (const volume of service.volumes ?? []) {
        const [from] = volume.split(':');
        if (from?.startsWith('./')) expect(existsSync(join(INFRA, from)), volume).toBe(true);
      }
  });
});

describe('the configs the compose stack mounts', () => {
  const children: ChildProcess[] = [];
  const dirs: string[] = [];
  afterAll(() => {
    for (const child of children) child.kill('SIGTERM');
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it('redis.conf runs a real redis-server with an fsynced append-only file', async () => {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'fairway-redis-conf-'));
    dirs.push(dir);
    const child = spawn(
      'redis-server',
      [join(INFRA, 'redis/redis.conf'), '--port', String(port), '--bind', '127.0.0.1', '--dir', dir],
      { stdio: 'ignore' },
    );
    children.push(child);
    await waitForPort(port);
    const redis = new Redis(port, '127.0.0.1');
    try {
      expect(await redis.config('GET', 'appendonly')).toEqual(['appendonly', 'yes']);
      expect(await redis.config('GET', 'appendfsync')).toEqual(['appendfsync', 'everysec']);
    } finally {
      redis.disconnect();
    }
  });

  it('nats-server.conf is accepted by nats-server with the passwords .env.example names', async () => {
    const env = { ...process.env, PATH: `${process.env.PATH}:/usr/sbin`, ...Object.fromEntries(envExample) };
    const nats = services['nats-1']!;
    for (const name of Object.keys(nats.environment ?? {})) expect(envExample.has(name), name).toBe(true);
    const { stderr, stdout } = await promisify(execFile)(
      'nats-server',
      ['-t', '-c', join(INFRA, 'nats/nats-server.conf')],
      { env },
    );
    expect(`${stdout}${stderr}`).toContain('is valid');
  });

  it('every fairway process logs in to NATS as a user of nats-server.conf; each agent only under its replica', () => {
    const conf = readFileSync(join(INFRA, 'nats/nats-server.conf'), 'utf8');
    for (const [name, service] of Object.entries(services)) {
      const user = service.environment?.NATS_USER;
      if (service.build === undefined) continue;
      expect(user, `${name}: NATS_USER`).toBeDefined();
      expect(conf).toMatch(new RegExp(`user: ${user}\\b`));
      const replica = flag(service.command, '--replica-id');
      if (replica !== undefined) {
        expect(user).toBe(`agent-${replica}`);
        expect(conf).toContain(`"fairway.replica.${replica}.>"`);
      }
    }
  });

  it('Prometheus scrapes compose services: the dispatchers and the engines', () => {
    const prometheus = parse(readFileSync(join(INFRA, 'prometheus/prometheus.yml'), 'utf8')) as {
      scrape_configs: { job_name: string; static_configs: { targets: string[] }[] }[];
    };
    const targets = prometheus.scrape_configs.flatMap((j) => j.static_configs.flatMap((s) => s.targets));
    for (const target of targets) expect(Object.keys(services), target).toContain(target.split(':')[0]);
    const scraped = new Set(targets.map((t) => t.split(':')[0]));
    for (const [name, service] of Object.entries(services))
      if (service.command?.[0] === 'serve' || service.command?.[0] === 'engine-sim')
        expect(scraped.has(name), name).toBe(true);
    for (const [name, service] of Object.entries(services)) {
      if (service.command?.[0] === 'engine-sim')
        expect(targets).toContain(`${name}:${flag(service.command, '--port')}`);
      if (service.command?.[0] === 'serve') {
        // The operator port (default 9464) binds loopback unless told otherwise.
        expect(service.environment?.FAIRWAY_OPERATOR_HOST, name).toBe('0.0.0.0');
        expect(targets).toContain(`${name}:${service.environment?.FAIRWAY_OPERATOR_PORT ?? '9464'}`);
      }
    }
  });
});
