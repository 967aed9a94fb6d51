import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parseConfig, silentLogger } from '@fairway/core';
import { describe, expect, it } from 'vitest';
import {
  enabledInstrumentations,
  metricsExportEnabled,
  startTelemetry,
  type TelemetryHandle,
  tracingEnabled,
} from '../src/index.ts';

const off = parseConfig({}, 'test');
const on = parseConfig({ telemetry: { tracing: { enabled: true, sampleRatio: 0.01 } } }, 'test');
const SRC = fileURLToPath(new URL('../src/index.ts', import.meta.url));
const CORE = fileURLToPath(new URL('../../core/src/index.ts', import.meta.url));

describe('telemetry configuration (config and the standard OTEL_* variables)', () => {
  it('is off by default: no tracer, and not one module of the OpenTelemetry SDK loaded', async () => {
    expect(tracingEnabled(off, {})).toBe(false);
    expect(metricsExportEnabled({})).toBe(false);
    // A fresh process, so that nothing another test loaded is counted.
    const dir = mkdtempSync(join(tmpdir(), 'fairway-otel-off-'));
    try {
      const script = join(dir, 'off.mts');
      writeFileSync(
        script,
        [
          "import { createRequire } from 'node:module';",
          `import { parseConfig, silentLogger } from ${JSON.stringify(CORE)};`,
          `import { startTelemetry } from ${JSON.stringify(SRC)};`,
          "const t = await startTelemetry(parseConfig({}, 'off'), {}, silentLogger);",
          'const require = createRequire(import.meta.url);',
          'const sdk = Object.keys(require.cache).filter((f) => /[\\\\/]@opentelemetry[\\\\/](sdk-|exporter-|instrumentation)|[\\\\/]@fastify[\\\\/]otel/.test(f));',
          'console.log(JSON.stringify({ tracer: t.tracer === undefined, sdk }));',
        ].join('\n'),
      );
      const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', script], {
        cwd: fileURLToPath(new URL('..', import.meta.url)),
        env: { ...process.env, OTEL_EXPORTER_OTLP_ENDPOINT: '' },
      });
      expect(JSON.parse(stdout.trim().split('\n').at(-1)!)).toEqual({ tracer: true, sdk: [] });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('is on by config or an OTLP endpoint; OTEL_TRACES_EXPORTER=none and OTEL_SDK_DISABLED turn it off', () => {
    expect(tracingEnabled(on, {})).toBe(true);
    expect(tracingEnabled(off, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' })).toBe(true);
    expect(
      tracingEnabled(off, { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://127.0.0.1:4318/v1/traces' }),
    ).toBe(true);
    expect(tracingEnabled(on, { OTEL_TRACES_EXPORTER: 'none' })).toBe(false);
    expect(tracingEnabled(on, { OTEL_SDK_DISABLED: 'true' })).toBe(false);
    expect(tracingEnabled(off, { OTEL_SDK_DISABLED: 'TRUE', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x' })).toBe(
      false,
    );
  });

  it('exports metrics over OTLP only when OTEL_METRICS_EXPORTER lists otlp', () => {
    expect(metricsExportEnabled({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x' })).toBe(false);
    expect(metricsExportEnabled({ OTEL_METRICS_EXPORTER: 'otlp' })).toBe(true);
    expect(metricsExportEnabled({ OTEL_METRICS_EXPORTER: 'prometheus, otlp' })).toBe(true);
    expect(metricsExportEnabled({ OTEL_METRICS_EXPORTER: 'otlp', OTEL_SDK_DISABLED: 'true' })).toBe(false);
  });

  it('instruments ioredis by default; OTEL_NODE_ENABLED/DISABLED_INSTRUMENTATIONS choose, an unknown name is refused', () => {
    expect([...enabledInstrumentations({})]).toEqual(['ioredis']);
    expect(
      [...enabledInstrumentations({ OTEL_NODE_ENABLED_INSTRUMENTATIONS: 'ioredis,undici,fastify' })].sort(),
    ).toEqual(['fastify', 'ioredis', 'undici']);
    expect([...enabledInstrumentations({ OTEL_NODE_DISABLED_INSTRUMENTATIONS: 'ioredis' })]).toEqual([]);
    expect(() => enabledInstrumentations({ OTEL_NODE_ENABLED_INSTRUMENTATIONS: 'pg' })).toThrow(
      expect.objectContaining({ code: 'FAIRWAY_DISPATCHER_TRACING_INVALID' }),
    );
  });

  it('samples new traces at sampleRatio (parent-based), and OTEL_TRACES_SAMPLER overrides it', async () => {
    // One SDK at a time: it is process-wide.
    const sampled = async (env: Record<string, string>) => {
      const t: TelemetryHandle = await startTelemetry(on, env, silentLogger);
      let n = 0;
      for (let i = 0; i < 2000; i++) {
        // Not ended: nothing is exported to the unreachable endpoint.
        if (t.tracer!.startSpan('x').isRecording()) n++;
      }
      await t.shutdown();
      return n;
    };
    expect(await sampled({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9' })).toBeLessThan(200); // ~1 % of 2000
    expect(
      await sampled({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_TRACES_SAMPLER: 'always_on' }),
    ).toBe(2000);
    expect(
      await sampled({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_TRACES_SAMPLER: 'always_off' }),
    ).toBe(0);
  });

  it('refuses an OTLP protocol or a sampler it does not have with a coded error', async () => {
    await expect(
      startTelemetry(on, { OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, silentLogger),
    ).rejects.toMatchObject({
      code: 'FAIRWAY_DISPATCHER_TRACING_INVALID',
    });
    await expect(
      startTelemetry(on, { OTEL_TRACES_SAMPLER: 'jaeger_remote' }, silentLogger),
    ).rejects.toMatchObject({
      code: 'FAIRWAY_DISPATCHER_TRACING_INVALID',
    });
  });

  it('rejects a sample ratio outside [0, 1] in the config', () => {
    expect(() => parseConfig({ telemetry: { tracing: { sampleRatio: 2 } } }, 'test')).toThrow(/sampleRatio/);
  });
});
