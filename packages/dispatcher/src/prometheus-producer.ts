import type { HrTime } from '@opentelemetry/api';
import {
  AggregationTemporality,
  type CollectionResult,
  DataPointType,
  type MetricData,
  type MetricProducer,
} from '@opentelemetry/sdk-metrics';
import type { Registry } from 'prom-client';

/** What the OTel metrics export reads: the registry `/metrics` serves, refreshed as a scrape is. */
export interface PrometheusSource {
  readonly registry: Registry;
  /** Sets the gauges read from the fleet, as `/metrics` does just before it answers. */
  readonly observe: () => void;
}

type PromValue = { value: number; labels: Record<string, string | number>; metricName?: string };
type PromMetric = { name: string; help: string; type: string; values: PromValue[] };

const hrTime = (ms: number): HrTime => [Math.floor(ms / 1000), Math.round((ms % 1000) * 1e6)];

/** Labels as OTel attributes (`le`, a bucket's bound, is not one). */
function attributesOf(labels: Record<string, string | number>): Record<string, string | number> {
  const { le: _le, ...rest } = labels;
  return rest;
}

const keyOf = (labels: Record<string, string | number>): string =>
  JSON.stringify(Object.entries(attributesOf(labels)).sort(([a], [b]) => a.localeCompare(b)));

/**
 * prom-client's cumulative `le` buckets as OTel explicit-bucket counts: boundaries are the finite
 * bounds, counts per bucket (not cumulative), the last one above the largest bound.
 */
function histogramPoints(metric: PromMetric, start: HrTime, end: HrTime) {
  const series = new Map<
    string,
    { attributes: Record<string, string | number>; le: [number, number][]; sum: number; count: number }
  >();
  for (const v of metric.values) {
    const key = keyOf(v.labels);
    const entry = series.get(key) ?? { attributes: attributesOf(v.labels), le: [], sum: 0, count: 0 };
    series.set(key, entry);
    if (v.metricName === `${metric.name}_bucket`) entry.le.push([Number(v.labels.le), v.value]);
    else if (v.metricName === `${metric.name}_sum`) entry.sum = v.value;
    else if (v.metricName === `${metric.name}_count`) entry.count = v.value;
  }
  return [...series.values()].map((s) => {
    const cumulative = s.le.sort(([a], [b]) => a - b);
    const boundaries = cumulative.filter(([le]) => Number.isFinite(le)).map(([le]) => le);
    const counts: number[] = [];
    let below = 0;
    for (const [, total] of cumulative) {
      counts.push(total - below);
      below = total;
    }
    // A series without a +Inf bucket still needs its overflow bucket.
    while (counts.length < boundaries.length + 1) counts.push(Math.max(0, s.count - below));
    return {
      startTime: start,
      endTime: end,
      attributes: s.attributes,
      value: { buckets: { boundaries, counts }, sum: s.sum, count: s.count },
    };
  });
}

/** One prom-client metric as OTel metric data (summaries, which OTLP cannot carry as such, are left out). */
function toMetricData(metric: PromMetric, start: HrTime, end: HrTime): MetricData | undefined {
  const descriptor = { name: metric.name, description: metric.help, unit: '', valueType: 1 };
  const points = () =>
    metric.values.map((v) => ({
      startTime: start,
      endTime: end,
      attributes: attributesOf(v.labels),
      value: v.value,
    }));
  switch (metric.type) {
    case 'counter':
      return {
        descriptor,
        aggregationTemporality: AggregationTemporality.CUMULATIVE,
        dataPointType: DataPointType.SUM,
        isMonotonic: true,
        dataPoints: points(),
      };
    case 'gauge':
      return {
        descriptor,
        aggregationTemporality: AggregationTemporality.CUMULATIVE,
        dataPointType: DataPointType.GAUGE,
        dataPoints: points(),
      };
    case 'histogram':
      return {
        descriptor,
        aggregationTemporality: AggregationTemporality.CUMULATIVE,
        dataPointType: DataPointType.HISTOGRAM,
        dataPoints: histogramPoints(metric, start, end),
      };
    default:
      return undefined;
  }
}

/**
 * Feeds an OTel metric reader the numbers of a dispatcher's Prometheus registry, so an OTLP
 * export carries exactly what `/metrics` shows (same names, labels as attributes, cumulative
 * counters and histograms since the process started). Nothing is counted twice: the registry
 * stays the one place metrics are recorded.
 */
export class PrometheusRegistryProducer implements MetricProducer {
  #source: PrometheusSource | undefined;
  readonly #startMs: number;
  readonly #now: () => number;

  /** `now` is the wall clock (ms since the epoch) data points are stamped with. */
  constructor(now: () => number, source?: PrometheusSource) {
    this.#now = now;
    this.#startMs = now();
    this.#source = source;
  }

  /** Reads `source` from now on (the dispatcher is built after the SDK starts). */
  attach(source: PrometheusSource): void {
    this.#source = source;
  }

  async collect(): Promise<CollectionResult> {
    const source = this.#source;
    const scopeMetrics = [];
    if (source !== undefined) {
      source.observe();
      const start = hrTime(this.#startMs);
      const end = hrTime(this.#now());
      const metrics = ((await source.registry.getMetricsAsJSON()) as unknown as PromMetric[])
        .map((m) => toMetricData(m, start, end))
        .filter((m): m is MetricData => m !== undefined && m.dataPoints.length > 0);
      scopeMetrics.push({ scope: { name: '@fairway/dispatcher' }, metrics });
    }
    // The reader puts the SDK's resource on what it exports.
    return { resourceMetrics: { resource: undefined as never, scopeMetrics }, errors: [] };
  }
}
