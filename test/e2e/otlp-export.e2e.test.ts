import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { redisUrl, uniquePrefix } from '@fairway/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FairwayProcess, startFairway } from './support/processes.ts';

/** An OTLP/HTTP JSON attribute. */
interface OtlpAttribute {
  key: string;
  value: { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number };
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: OtlpAttribute[];
}
interface OtlpExport {
  resourceSpans: { resource: { attributes: OtlpAttribute[] }; scopeSpans: { spans: OtlpSpan[] }[] }[];
}
interface OtlpNumberPoint {
  attributes?: OtlpAttribute[];
  asDouble?: number;
  asInt?: string | number;
}
interface OtlpMetric {
  name: string;
  sum?: { dataPoints: OtlpNumberPoint[]; isMonotonic?: boolean };
  gauge?: { dataPoints: OtlpNumberPoint[] };
  histogram?: { dataPoints: { attributes?: OtlpAttribute[]; count: string | number }[] };
}
interface OtlpMetricsExport {
  resourceMetrics: { resource: { attributes: OtlpAttribute[] }; scopeMetrics: { metrics: OtlpMetric[] }[] }[];
}

/** An OTLP/HTTP JSON receiver on a free port that keeps what it is sent. */
async function startCollector(): Promise<{
  received: { path: string; type: string; body: unknown }[];
  port: number;
  close(): Promise<void>;
}> {
  const received: { path: string; type: string; body: unknown }[] = [];
  const server = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({
        path: req.url ?? '',
        type: String(req.headers['content-type']),
        body: JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown,
      });
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    received,
    port: (server.address() as AddressInfo).port,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

async function until(done: () => boolean, what: () => string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting: ${what()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function attr(list: OtlpAttribute[] | undefined, key: string): unknown {
  const v = list?.find((a) => a.key === key)?.value;
  if (v === undefined) return undefined;
  return v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.boolValue ?? v.doubleValue));
}

const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';

describe('fairway up exports its traces over OTLP/HTTP (JSON) to a collector', () => {
  const received: { path: string; type: string; body: OtlpExport }[] = [];
  let collector: Server;
  let fairway: FairwayProcess;
  let key: string;

  beforeAll(async () => {
    collector = createServer((req: IncomingMessage, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        received.push({
          path: req.url ?? '',
          type: String(req.headers['content-type']),
          body: JSON.parse(Buffer.concat(chunks).toString('utf8')) as OtlpExport,
        });
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((r) => collector.listen(0, '127.0.0.1', r));
    const port = (collector.address() as AddressInfo).port;
    fairway = await startFairway(
      ['up', '--port', '0', '--operator-port', '0', '--speed', '20', '--log-level', 'warn'],
      /^fairway is up: (http:\/\/\S+)/,
      {
        REDIS_URL: '',
        NATS_URL: '',
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_SERVICE_NAME: 'fairway-under-test',
        OTEL_BSP_SCHEDULE_DELAY: '100',
      },
    );
    await new Promise((r) => setTimeout(r, 200)); // the rest of the banner
    key = /Bearer (sk-[A-Za-z0-9-]+)/.exec(fairway.output.join('\n'))?.[1] ?? '';
    expect(key).not.toBe('');
  });
  afterAll(async () => {
    await fairway?.stop();
    await new Promise((r) => collector?.close(r));
  });

  it('sends the request span tree, in the client trace, with GenAI attributes', async () => {
    const res = await fetch(`${fairway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${key}`,
        'content-type': 'application/json',
        traceparent: `00-${TRACE_ID}-b7ad6b7169203331-01`,
      },
      body: JSON.stringify({
        model: 'llama-2-7b',
        messages: [{ role: 'user', content: 'a confidential prompt' }],
        max_tokens: 8,
        stream: true,
      }),
    });
    expect(res.status).toBe(200);
    await res.text();
    const deadline = Date.now() + 15_000;
    const spans = (): OtlpSpan[] =>
      received.flatMap((r) => r.body.resourceSpans.flatMap((rs) => rs.scopeSpans.flatMap((s) => s.spans)));
    while (!spans().some((s) => s.name === 'fairway.settle') || !spans().some((s) => s.kind === 2)) {
      if (Date.now() > deadline) throw new Error(`no complete trace exported: ${JSON.stringify(received)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(received[0]?.path).toBe('/v1/traces');
    expect(received[0]?.type).toContain('application/json');
    expect(attr(received[0]?.body.resourceSpans[0]?.resource.attributes, 'service.name')).toBe(
      'fairway-under-test',
    );
    const all = spans().filter((s) => s.traceId.toLowerCase() === TRACE_ID);
    const server = all.find((s) => s.kind === 2);
    expect(server?.name).toBe('POST /v1/chat/completions');
    expect(server?.parentSpanId?.toLowerCase()).toBe('b7ad6b7169203331');
    expect(attr(server?.attributes, 'gen_ai.request.model')).toBe('llama-2-7b');
    expect(attr(server?.attributes, 'fairway.tenant')).toBe('acme');
    expect(attr(server?.attributes, 'gen_ai.usage.output_tokens')).toBeGreaterThan(0);
    expect(attr(server?.attributes, 'fairway.request_id')).toBe(res.headers.get('x-request-id'));
    const names = all.map((s) => s.name).sort();
    expect(names).toEqual(
      [
        'POST /v1/chat/completions',
        'chat llama-2-7b',
        'fairway.admission',
        'fairway.dispatch',
        'fairway.queue',
        'fairway.settle',
        'fairway.stream',
      ].sort(),
    );
    const engine = all.find((s) => s.kind === 3);
    expect(attr(engine?.attributes, 'gen_ai.operation.name')).toBe('chat');
    expect(attr(engine?.attributes, 'server.address')).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(JSON.stringify(received)).not.toContain('confidential');
    expect(JSON.stringify(received)).not.toContain(key);
  });
});

describe('with Redis and OTEL_METRICS_EXPORTER=otlp: Redis calls in the request trace, metrics beside Prometheus', () => {
  let collector: Awaited<ReturnType<typeof startCollector>>;
  let fairway: FairwayProcess;
  let key: string;
  const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';

  beforeAll(async () => {
    collector = await startCollector();
    fairway = await startFairway(
      [
        'up',
        '--port',
        '0',
        '--operator-port',
        '0',
        '--speed',
        '20',
        '--log-level',
        'warn',
        '--redis-url',
        redisUrl(),
        '--prefix',
        uniquePrefix(),
      ],
      /^fairway is up: (http:\/\/\S+)/,
      {
        NATS_URL: '',
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${collector.port}`,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_SERVICE_NAME: 'fairway-under-test',
        OTEL_BSP_SCHEDULE_DELAY: '100',
        OTEL_METRICS_EXPORTER: 'otlp',
        OTEL_METRIC_EXPORT_INTERVAL: '300',
        OTEL_NODE_ENABLED_INSTRUMENTATIONS: 'ioredis,undici,fastify',
      },
    );
    await new Promise((r) => setTimeout(r, 200)); // the rest of the banner
    key = /Bearer (sk-[A-Za-z0-9-]+)/.exec(fairway.output.join('\n'))?.[1] ?? '';
    expect(key).not.toBe('');
  });
  afterAll(async () => {
    await fairway?.stop();
    await collector?.close();
  });

  const spans = (): OtlpSpan[] =>
    collector.received
      .filter((r) => r.path === '/v1/traces')
      .flatMap((r) =>
        (r.body as OtlpExport).resourceSpans.flatMap((rs) => rs.scopeSpans.flatMap((s) => s.spans)),
      )
      .filter((s) => s.traceId.toLowerCase() === TRACE);

  it("shows the request's Redis calls under its admission and settle spans, the engine's HTTP call under the engine span, fastify's request span beside them", async () => {
    const res = await fetch(`${fairway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${key}`,
        'content-type': 'application/json',
        traceparent: `00-${TRACE}-00f067aa0ba902b7-01`,
      },
      body: JSON.stringify({
        model: 'llama-2-7b',
        messages: [{ role: 'user', content: 'a confidential prompt' }],
        max_tokens: 8,
      }),
    });
    expect(res.status).toBe(200);
    await res.json();
    const redisSpans = () =>
      spans().filter(
        (s) =>
          attr(s.attributes, 'db.system.name') === 'redis' || attr(s.attributes, 'db.system') === 'redis',
      );
    const byId = () => new Map(spans().map((s) => [s.spanId, s]));
    const parentName = (s: OtlpSpan) => byId().get(s.parentSpanId ?? '')?.name;
    await until(
      () =>
        spans().some((s) => s.name === 'fairway.settle') &&
        redisSpans().some((s) => parentName(s) === 'fairway.admission') &&
        redisSpans().some((s) => parentName(s) === 'fairway.settle'),
      () => JSON.stringify(spans().map((s) => [s.name, parentName(s)])),
    );
    // Admission and enqueue are one call of a Redis function.
    expect(redisSpans().some((s) => s.name === 'fcall' && parentName(s) === 'fairway.admission')).toBe(true);
    for (const span of redisSpans()) {
      expect(span.kind).toBe(3); // CLIENT
      expect(['fairway.admission', 'fairway.settle']).toContain(parentName(span));
    }
    // The engine call over HTTP (undici), under fairway's engine span.
    const http = spans().find((s) => s.kind === 3 && parentName(s) === 'chat llama-2-7b');
    expect(http?.name).toBe('POST');
    // @fastify/otel's request span, in the client's trace beside fairway's own server span.
    const fastify = spans().find((s) => attr(s.attributes, 'fastify.root') === '@fastify/otel');
    expect(fastify?.parentSpanId?.toLowerCase()).toBe('00f067aa0ba902b7');
    expect(attr(fastify?.attributes, 'http.route')).toBe('/v1/chat/completions');
    expect(JSON.stringify(collector.received)).not.toContain('confidential');
    expect(JSON.stringify(collector.received)).not.toContain(key);
  });

  it("sends /metrics' numbers to the OTLP metrics endpoint", async () => {
    const metric = (name: string): { resource: OtlpAttribute[]; metric: OtlpMetric } | undefined => {
      for (const r of collector.received.filter((x) => x.path === '/v1/metrics').reverse())
        for (const rm of (r.body as OtlpMetricsExport).resourceMetrics)
          for (const sm of rm.scopeMetrics)
            for (const m of sm.metrics)
              if (m.name === name) return { resource: rm.resource.attributes, metric: m };
      return undefined;
    };
    const completed = () =>
      metric('fairway_requests_total')?.metric.sum?.dataPoints.find(
        (p) => attr(p.attributes, 'tenant') === 'acme' && attr(p.attributes, 'outcome') === 'completed',
      );
    await until(
      () => Number(completed()?.asDouble ?? completed()?.asInt ?? 0) >= 1,
      () => `fairway_requests_total: ${JSON.stringify(metric('fairway_requests_total')?.metric ?? 'none')}`,
    );
    const requests = metric('fairway_requests_total')!;
    expect(requests.metric.sum?.isMonotonic).toBe(true);
    expect(attr(requests.resource, 'service.name')).toBe('fairway-under-test');
    // No command line among the resource's attributes: a password may be given as a flag.
    expect(requests.resource.map((a) => a.key)).not.toContain('process.command_args');
    expect(metric('fairway_queue_wait_seconds')?.metric.histogram?.dataPoints.length).toBeGreaterThan(0);
    expect(collector.received.find((x) => x.path === '/v1/metrics')?.type).toContain('application/json');
  });
});
