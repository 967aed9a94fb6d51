import { DataPointType, type HistogramMetricData, type MetricData } from '@opentelemetry/sdk-metrics';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { PrometheusRegistryProducer } from '../src/prometheus-producer.ts';

function registry() {
  const registers = [new Registry()];
  const requests = new Counter({
    name: 'x_requests_total',
    help: 'requests',
    labelNames: ['tenant'],
    registers,
  });
  const depth = new Gauge({ name: 'x_queue_depth', help: 'depth', labelNames: ['pool'], registers });
  const wait = new Histogram({
    name: 'x_wait_seconds',
    help: 'wait',
    buckets: [0.1, 1],
    labelNames: ['band'],
    registers,
  });
  return { registry: registers[0]!, requests, depth, wait };
}

async function collect(producer: PrometheusRegistryProducer): Promise<Map<string, MetricData>> {
  const { resourceMetrics } = await producer.collect();
  return new Map(resourceMetrics.scopeMetrics.flatMap((s) => s.metrics).map((m) => [m.descriptor.name, m]));
}

describe('PrometheusRegistryProducer (the OTLP metrics export reads the /metrics registry)', () => {
  it('carries counters as monotonic sums, gauges as gauges, labels as attributes', async () => {
    const r = registry();
    r.requests.inc({ tenant: 'acme' }, 3);
    r.requests.inc({ tenant: 'globex' });
    let observed = 0;
    const producer = new PrometheusRegistryProducer(() => 1_700_000_000_000, {
      registry: r.registry,
      observe: () => {
        observed++;
        r.depth.set({ pool: 'llama-7b' }, 7);
      },
    });
    const metrics = await collect(producer);
    expect(observed).toBe(1); // refreshed as a scrape is
    const requests = metrics.get('x_requests_total')!;
    expect(requests).toMatchObject({ dataPointType: DataPointType.SUM, isMonotonic: true });
    expect(requests.dataPoints.map((p) => [p.attributes.tenant, p.value]).sort()).toEqual([
      ['acme', 3],
      ['globex', 1],
    ]);
    const depth = metrics.get('x_queue_depth')!;
    expect(depth.dataPointType).toBe(DataPointType.GAUGE);
    expect(depth.dataPoints.map((p) => [p.attributes, p.value])).toEqual([[{ pool: 'llama-7b' }, 7]]);
  });

  it("turns prom-client's cumulative le buckets into per-bucket counts with the same sum and count", async () => {
    const r = registry();
    for (const s of [0.05, 0.5, 0.7, 3]) r.wait.observe({ band: '0' }, s);
    const producer = new PrometheusRegistryProducer(() => Date.now(), {
      registry: r.registry,
      observe: () => {},
    });
    const wait = (await collect(producer)).get('x_wait_seconds') as HistogramMetricData;
    expect(wait.dataPointType).toBe(DataPointType.HISTOGRAM);
    expect(wait.dataPoints).toHaveLength(1);
    const [point] = wait.dataPoints;
    expect(point!.attributes).toEqual({ band: '0' });
    expect(point!.value.buckets).toEqual({ boundaries: [0.1, 1], counts: [1, 2, 1] });
    expect(point!.value.count).toBe(4);
    expect(point!.value.sum).toBeCloseTo(4.25);
  });

  it('exports nothing until a registry is attached, then what it holds', async () => {
    const r = registry();
    r.requests.inc({ tenant: 'acme' });
    const producer = new PrometheusRegistryProducer(() => Date.now());
    expect((await producer.collect()).resourceMetrics.scopeMetrics).toEqual([]);
    producer.attach({ registry: r.registry, observe: () => {} });
    expect((await collect(producer)).has('x_requests_total')).toBe(true);
  });
});
