import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, describe, expect, it } from 'vitest';
import { type Stack, startStack } from './support/stack.ts';

const MODEL = 'llama-2-7b';
const KEY = 'sk-trace-alpha-0001';

/**
 * An engine call that fails on one replica and is retried on another shows in the request's trace
 * as two dispatches and two engine calls, the first failed, both propagated to their engines.
 */
describe('tracing a request retried on another replica', () => {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  let s: Stack | undefined;
  afterAll(async () => {
    await s?.close();
    await provider.shutdown();
  });

  it('records the failed engine call, the second dispatch and the call that answered', async () => {
    s = await startStack({
      config: {
        tenants: [{ id: 'alpha', keys: [{ key: KEY }] }],
        pools: [{ id: 'llama', model: MODEL }],
        policy: { ordering: 'vtc', placement: 'least-kv' },
      },
      engines: [{ faults: { errorRate: 1 } }, {}],
      tracer: provider.getTracer('test'),
    });
    const stack = s;
    const statuses = await Promise.all(
      Array.from({ length: 6 }, async () => {
        const res = await fetch(`${stack.dispatchers[0]!.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
          body: JSON.stringify({
            model: MODEL,
            messages: [{ role: 'user', content: 'hello there' }],
            max_tokens: 5,
          }),
        });
        await res.text();
        return res.status;
      }),
    );
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200]);
    const deadline = Date.now() + 10_000;
    const settled = () => exporter.getFinishedSpans().filter((x) => x.name === 'fairway.settle').length;
    while (settled() < 6 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const spans = exporter.getFinishedSpans();
    const engineCalls = spans.filter((x) => x.kind === SpanKind.CLIENT);
    const failed = engineCalls.filter((x) => x.status.code === SpanStatusCode.ERROR);
    expect(failed.length).toBeGreaterThan(0);
    for (const f of failed) {
      expect(f.attributes['fairway.replica']).toBe('sim-1');
      const trace = spans.filter((x) => x.spanContext().traceId === f.spanContext().traceId);
      const calls = trace.filter((x) => x.kind === SpanKind.CLIENT);
      expect(calls.map((c) => c.attributes['fairway.replica'])).toEqual(['sim-1', 'sim-2']);
      expect(calls[1]?.status.code).not.toBe(SpanStatusCode.ERROR);
      const dispatches = trace.filter((x) => x.name === 'fairway.dispatch');
      expect(dispatches.map((d) => d.attributes['fairway.attempt'])).toEqual([1, 2]);
      const server = trace.find((x) => x.kind === SpanKind.SERVER);
      expect(server?.attributes['http.response.status_code']).toBe(200);
      // Both engines were told the trace: the failing one too.
      const [first, second] = calls;
      expect(stack.sims[0]!.traceparents).toContain(
        `00-${first!.spanContext().traceId}-${first!.spanContext().spanId}-01`,
      );
      expect(stack.sims[1]!.traceparents).toContain(
        `00-${second!.spanContext().traceId}-${second!.spanContext().spanId}-01`,
      );
    }
  });
});
