/** Types for `parse-prometheus-text-format` 1.1.1, which ships none. Values stay strings, as parsed. */
declare module 'parse-prometheus-text-format' {
  /** One sample (or, for histograms and summaries, one label set with its buckets or quantiles). */
  export interface PrometheusSample {
    readonly value?: string;
    readonly labels?: Readonly<Record<string, string>>;
    readonly timestamp_ms?: string;
    readonly buckets?: Readonly<Record<string, string>>;
    readonly quantiles?: Readonly<Record<string, string>>;
    readonly count?: string;
    readonly sum?: string;
  }

  /** One metric family. */
  export interface PrometheusFamily {
    readonly name: string;
    readonly help: string;
    readonly type: 'COUNTER' | 'GAUGE' | 'HISTOGRAM' | 'SUMMARY' | 'UNTYPED';
    readonly metrics: readonly PrometheusSample[];
  }

  /** Parses Prometheus text exposition format; throws on an invalid line. */
  export default function parsePrometheusTextFormat(text: string): PrometheusFamily[];
}
