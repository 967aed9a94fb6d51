import { parseConfig, silentLogger } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import { startTracing, tracingEnabled } from '../src/index.ts';

const off = parseConfig({}, 'test');
const on = parseConfig({ telemetry: { tracing: { enabled: true, sampleRatio: 0.01 } } }, 'test');

describe('tracing configuration (config and the standard OTEL_* variables)', () => {
  it('is off by default and then builds no tracer', async () => {
    expect(tracingEnabled(off, {})).toBe(false);
    const t = startTracing(off, {}, silentLogger);
    expect(t.tracer).toBeUndefined();
    await t.shutdown();
  });

  it('is on by config or an OTLP endpoint, and OTEL_SDK_DISABLED wins over both', () => {
    expect(tracingEnabled(on, {})).toBe(true);
    expect(tracingEnabled(off, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' })).toBe(true);
    expect(
      tracingEnabled(off, { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://127.0.0.1:4318/v1/traces' }),
    ).toBe(true);
    expect(tracingEnabled(on, { OTEL_SDK_DISABLED: 'true' })).toBe(false);
    expect(tracingEnabled(off, { OTEL_SDK_DISABLED: 'TRUE', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x' })).toBe(
      false,
    );
  });

  it('samples new traces at sampleRatio (parent-based), and OTEL_TRACES_SAMPLER overrides it', async () => {
    const sampled = (env: Record<string, string>) => {
      const t = startTracing(on, env, silentLogger);
      let n = 0;
      for (let i = 0; i < 2000; i++) {
        // Not ended: nothing is exported to the unreachable endpoint.
        if (t.tracer!.startSpan('x').isRecording()) n++;
      }
      return { n, t };
    };
    const ratio = sampled({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9' });
    expect(ratio.n).toBeLessThan(200); // ~1 % of 2000
    const always = sampled({
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9',
      OTEL_TRACES_SAMPLER: 'always_on',
    });
    expect(always.n).toBe(2000);
    await Promise.all([ratio.t.shutdown(), always.t.shutdown()]);
  });

  it('refuses an OTLP protocol it does not speak with a coded error', () => {
    expect(() => startTracing(on, { OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, silentLogger)).toThrow(
      expect.objectContaining({ code: 'FAIRWAY_DISPATCHER_TRACING_INVALID' }),
    );
  });

  it('rejects a sample ratio outside [0, 1] in the config', () => {
    expect(() => parseConfig({ telemetry: { tracing: { sampleRatio: 2 } } }, 'test')).toThrow(/sampleRatio/);
  });
});
