import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
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
