import { Writable } from 'node:stream';
import { startUp, type UpHandle } from '@fairway/cli';
import { createLogger } from '@fairway/core';
import { SpanKind } from '@opentelemetry/api';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const PROMPT = 'Tell the secret recipe of the marmalade cake.';
const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const PARENT_SPAN = '00f067aa0ba902b7';

async function waitFor<T>(get: () => T | undefined, timeoutMs: number, what: string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = get();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('tracing and request logs through fairway up (in-memory span exporter)', () => {
  let up: UpHandle;
  let key: string;
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(
        ...chunk
          .toString('utf8')
          .split('\n')
          .filter((l) => l.length > 0),
      );
      done();
    },
  });
  const access = (): Record<string, unknown>[] =>
    lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.log === 'access');

  beforeAll(async () => {
    up = await startUp({
      port: 0,
      operatorPort: 0,
      speed: 20,
      env: {},
      logger: createLogger({ level: 'info', destination }),
      tracer: provider.getTracer('test'),
    });
    key = up.keys[0]!.key;
  });
  afterAll(async () => {
    await up?.close();
    await provider.shutdown();
  });

  const chat = (body: object, headers: Record<string, string> = {}) =>
    fetch(`${up.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });

  it('records admission → queue → dispatch → engine → stream → settle under the client traceparent, and forwards the trace to the engine', async () => {
    exporter.reset();
    const res = await chat(
      {
        model: up.model,
        messages: [{ role: 'user', content: PROMPT }],
        max_tokens: 20,
        stream: true,
        fairway_output_tokens: 12,
      },
      { traceparent: `00-${TRACE_ID}-${PARENT_SPAN}-01`, 'x-request-id': 'client-req.42' },
    );
    expect(res.status).toBe(200);
    expect(res.headers.get('x-request-id')).toBe('client-req.42');
    const text = await res.text();
    expect(text).toContain('data: [DONE]');

    const spans = await waitFor(
      () => {
        const all = exporter.getFinishedSpans().filter((s) => s.spanContext().traceId === TRACE_ID);
        return all.some((s) => s.name === 'fairway.settle') && all.some((s) => s.kind === SpanKind.SERVER)
          ? all
          : undefined;
      },
      10_000,
      'the settle and server spans',
    );
    const one = (name: string): ReadableSpan => {
      const found = spans.filter((s) => s.name === name);
      expect(found, name).toHaveLength(1);
      return found[0]!;
    };
    const server = one('POST /v1/chat/completions');
    expect(server.kind).toBe(SpanKind.SERVER);
    expect(server.parentSpanContext?.spanId).toBe(PARENT_SPAN);
    expect(server.attributes).toMatchObject({
      'fairway.request_id': 'client-req.42',
      'fairway.tenant': up.keys[0]!.tenant,
      'gen_ai.operation.name': 'chat',
      'gen_ai.request.model': up.model,
      'gen_ai.request.max_tokens': 20,
      'gen_ai.usage.output_tokens': 12,
      'http.response.status_code': 200,
    });
    const sid = server.spanContext().spanId;
    const admission = one('fairway.admission');
    const queue = one('fairway.queue');
    const dispatch = one('fairway.dispatch');
    const engine = one(`chat ${up.model}`);
    const stream = one('fairway.stream');
    const settle = one('fairway.settle');
    for (const s of [admission, queue, dispatch, engine, settle])
      expect(s.parentSpanContext?.spanId).toBe(sid);
    expect(stream.parentSpanContext?.spanId).toBe(engine.spanContext().spanId);
    // In request order.
    const start = (s: ReadableSpan) => s.startTime[0] * 1e9 + s.startTime[1];
    expect(start(admission)).toBeLessThanOrEqual(start(queue));
    expect(start(queue)).toBeLessThanOrEqual(start(dispatch));
    expect(start(dispatch)).toBeLessThanOrEqual(start(engine));
    expect(start(engine)).toBeLessThanOrEqual(start(settle));
    expect(admission.attributes['fairway.slo_class']).toBe('interactive');
    expect(queue.attributes['fairway.flow']).toMatch(new RegExp(`^${up.keys[0]!.tenant}`));
    expect(typeof queue.attributes['fairway.band']).toBe('number');
    const replica = dispatch.attributes['fairway.replica'];
    expect(replica).toMatch(/^sim-\d$/);
    const sim = up.engines[Number(String(replica).slice(4)) - 1]!;
    expect(engine.kind).toBe(SpanKind.CLIENT);
    expect(engine.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.request.model': up.model,
      'gen_ai.request.max_tokens': 20,
      'gen_ai.usage.output_tokens': 12,
      'server.address': new URL(sim.url).host,
      'fairway.replica': replica,
    });
    expect(engine.attributes['gen_ai.usage.input_tokens']).toBeGreaterThan(0);
    expect(stream.events.map((e) => e.name)).toEqual(['gen_ai.first_token']);
    // The engine received the engine span's context in the same trace.
    expect(sim.traceparents).toContain(`00-${TRACE_ID}-${engine.spanContext().spanId}-01`);
    // Neither the prompt nor the key is in any span.
    const dumped = JSON.stringify(spans.map((s) => [s.name, s.attributes, s.events]));
    expect(dumped).not.toContain('marmalade');
    expect(dumped).not.toContain(key);
  });

  it('starts a new trace without a traceparent and records the engine response id of a non-streamed completion', async () => {
    exporter.reset();
    const res = await chat({ model: up.model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { id: string };
    const id = res.headers.get('x-request-id');
    expect(id).toMatch(/^fw-/);
    const engine = await waitFor(
      () => exporter.getFinishedSpans().find((s) => s.kind === SpanKind.CLIENT),
      10_000,
      'the engine span',
    );
    expect(engine.attributes['gen_ai.response.id']).toBe(body.id);
    const server = await waitFor(
      () => exporter.getFinishedSpans().find((s) => s.kind === SpanKind.SERVER),
      10_000,
      'the server span',
    );
    expect(server.parentSpanContext).toBeUndefined();
    expect(server.attributes['fairway.request_id']).toBe(id);
    expect(engine.spanContext().traceId).toBe(server.spanContext().traceId);
  });

  it('answers every error with an x-request-id, traces it and logs exactly one access line per request, never the key or prompt', async () => {
    lines.length = 0;
    exporter.reset();
    const base = up.url;
    const json = { 'content-type': 'application/json' };
    const answers: Response[] = [];
    // 401 missing and invalid key, 400 validation, 404, 405, 413, 415, and a bad client id (replaced).
    answers.push(
      await fetch(`${base}/v1/chat/completions`, {
        method: 'POST',
        headers: json,
        body: JSON.stringify({ model: up.model, messages: [{ role: 'user', content: PROMPT }] }),
      }),
    );
    answers.push(
      await fetch(`${base}/v1/chat/completions`, {
        method: 'POST',
        headers: { ...json, authorization: 'Bearer sk-not-a-key' },
        body: JSON.stringify({ model: up.model, messages: [{ role: 'user', content: PROMPT }] }),
      }),
    );
    answers.push(await chat({ model: up.model, messages: 'not messages' }));
    answers.push(await fetch(`${base}/v1/nowhere`));
    answers.push(await fetch(`${base}/v1/chat/completions`));
    answers.push(
      await chat({ model: up.model, messages: [{ role: 'user', content: 'x'.repeat(5_000_000) }] }),
    );
    answers.push(
      await fetch(`${base}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'text/plain' },
        body: PROMPT,
      }),
    );
    answers.push(
      await chat(
        { model: 'no-such-model', messages: [{ role: 'user', content: PROMPT }] },
        { 'x-request-id': 'has spaces and is not a token' },
      ),
    );
    answers.push(
      await chat({ model: up.model, messages: [{ role: 'user', content: PROMPT }], max_tokens: 4 }, {}),
    );
    expect(answers.map((r) => r.status)).toEqual([401, 401, 400, 404, 405, 413, 415, 404, 200]);
    const ids = answers.map((r) => r.headers.get('x-request-id'));
    for (const [i, id] of ids.entries()) expect(id, `answer ${i}`).toMatch(/^fw-[0-9a-f-]{36}$/);
    expect(new Set(ids).size).toBe(ids.length);
    for (const r of answers) {
      const body = await r.text();
      if (r.status >= 400) expect(JSON.parse(body)).toHaveProperty('error.message');
    }

    const logged = await waitFor(
      () => (access().length >= answers.length ? access() : undefined),
      5000,
      'the access lines',
    );
    await new Promise((r) => setTimeout(r, 100)); // nothing more comes
    expect(access()).toHaveLength(answers.length);
    expect(logged.map((l) => l.requestId)).toEqual(ids);
    expect(logged.map((l) => l.status)).toEqual([401, 401, 400, 404, 405, 413, 415, 404, 200]);
    expect(logged[3]).toMatchObject({ outcome: 'ROUTE_NOT_FOUND', route: '/v1/nowhere' });
    expect(logged[4]).toMatchObject({ outcome: 'METHOD_NOT_ALLOWED', method: 'GET' });
    expect(logged[1]).toMatchObject({
      outcome: 'INVALID_API_KEY',
      method: 'POST',
      route: '/v1/chat/completions',
    });
    expect(logged[7]).toMatchObject({
      outcome: 'MODEL_NOT_FOUND',
      tenant: up.keys[0]!.tenant,
      model: 'no-such-model',
    });
    const ok = logged[8]!;
    expect(ok).toMatchObject({
      outcome: 'completed',
      tenant: up.keys[0]!.tenant,
      model: up.model,
      completionTokens: 4,
    });
    expect(ok.promptTokens).toBeGreaterThan(0);
    expect(ok.replica).toMatch(/^sim-\d$/);
    for (const f of ['queueMs', 'ttftMs', 'totalMs']) expect(typeof ok[f], f).toBe('number');
    for (const l of lines) {
      expect(l).not.toContain(key);
      expect(l).not.toContain('sk-not-a-key');
      expect(l).not.toContain('marmalade');
    }
    // Errors are traced too, with their request id and status.
    const servers = await waitFor(
      () => {
        const s = exporter.getFinishedSpans().filter((x) => x.kind === SpanKind.SERVER);
        return s.length >= answers.length ? s : undefined;
      },
      5000,
      'a server span per request',
    );
    const invalidKey = servers.find((s) => s.attributes['fairway.request_id'] === ids[1]);
    expect(invalidKey?.attributes['http.response.status_code']).toBe(401);
  });

  it('logs one access line for a stream the client abandons, and ends its trace as failed', async () => {
    lines.length = 0;
    exporter.reset();
    const res = await chat(
      {
        model: up.model,
        messages: [{ role: 'user', content: PROMPT }],
        max_tokens: 2000,
        stream: true,
        fairway_output_tokens: 2000,
      },
      { 'x-request-id': 'leaving-early' },
    );
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    await reader.read(); // the first chunk arrived: the request runs on the engine
    await reader.cancel(); // closes the connection
    const line = await waitFor(
      () => access().find((l) => l.requestId === 'leaving-early'),
      10_000,
      'the access line of the abandoned stream',
    );
    await new Promise((r) => setTimeout(r, 300)); // nothing more comes
    expect(access().filter((l) => l.requestId === 'leaving-early')).toHaveLength(1);
    expect(['cancelled', 'client_closed']).toContain(line.outcome);
    expect(line.replica).toMatch(/^sim-\d$/);
    const server = await waitFor(
      () => exporter.getFinishedSpans().find((s) => s.attributes['fairway.request_id'] === 'leaving-early'),
      10_000,
      'the server span',
    );
    expect(server.status.code).toBe(2); // ERROR
  });

  it('answers malformed HTTP with an x-request-id too', async () => {
    const { connect } = await import('node:net');
    const u = new URL(up.url);
    const raw = await new Promise<string>((resolve, reject) => {
      const sock = connect(Number(u.port), u.hostname, () => sock.write('GARBAGE / HTTP/1.1\r\n\r\n'));
      let got = '';
      sock.on('data', (d) => {
        got += d.toString();
      });
      sock.on('close', () => resolve(got));
      sock.on('error', reject);
    });
    expect(raw).toMatch(/^HTTP\/1\.1 400/);
    expect(raw).toMatch(/\r\nX-Request-Id: fw-[0-9a-f-]{36}\r\n/i);
  });
});
