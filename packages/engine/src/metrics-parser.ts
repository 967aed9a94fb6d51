import parsePrometheusTextFormat, { type PrometheusFamily } from 'parse-prometheus-text-format';
import { MetricsFormatError } from './errors.ts';

/** Metric names fairway reads from vLLM's `/metrics` (DESIGN.md "vLLM surface"). */
export const VLLM_METRIC = {
  running: 'vllm:num_requests_running',
  waiting: 'vllm:num_requests_waiting',
  kvCacheUsage: 'vllm:kv_cache_usage_perc',
  /** The name before vLLM 0.10; read when the new one is absent. */
  gpuCacheUsage: 'vllm:gpu_cache_usage_perc',
  cacheConfig: 'vllm:cache_config_info',
  promptTokens: 'vllm:prompt_tokens_total',
  generationTokens: 'vllm:generation_tokens_total',
  preemptions: 'vllm:num_preemptions_total',
  requestSuccess: 'vllm:request_success_total',
  timeToFirstToken: 'vllm:time_to_first_token_seconds',
  e2eLatency: 'vllm:e2e_request_latency_seconds',
  queueTime: 'vllm:request_queue_time_seconds',
  interTokenLatency: 'vllm:inter_token_latency_seconds',
  /** The per-token histogram's name before vLLM 0.11 (same observations as `interTokenLatency`). */
  timePerOutputToken: 'vllm:time_per_output_token_seconds',
  prefillTime: 'vllm:request_prefill_time_seconds',
  decodeTime: 'vllm:request_decode_time_seconds',
  inferenceTime: 'vllm:request_inference_time_seconds',
  iterationTokens: 'vllm:iteration_tokens_total',
  /** Prompt tokens looked up in the prefix cache (vLLM V1). */
  prefixCacheQueries: 'vllm:prefix_cache_queries_total',
  /** Of those, tokens found in the cache. */
  prefixCacheHits: 'vllm:prefix_cache_hits_total',
  /** The names before `prefixCacheQueries` and `prefixCacheHits` (deprecated in vLLM 0.10). */
  gpuPrefixCacheQueries: 'vllm:gpu_prefix_cache_queries_total',
  gpuPrefixCacheHits: 'vllm:gpu_prefix_cache_hits_total',
} as const;

/** Sum and count of one histogram, added over its series. */
export interface HistogramTotals {
  /** Sum of the observations (seconds for latency histograms). */
  readonly sum: number;
  readonly count: number;
}

/** What a replica's `/metrics` says about its load and capacity. Counters are totals since start. */
export interface VllmMetrics {
  /** Requests in the running batch (`vllm:num_requests_running`). */
  readonly running: number;
  /** Requests in the engine's waiting queue (`vllm:num_requests_waiting`). */
  readonly waiting: number;
  /** Fraction of KV blocks in use, 0–1 (`kv_cache_usage_perc`, else `gpu_cache_usage_perc`). */
  readonly kvCacheUsage: number;
  /** Tokens per KV block, from `vllm:cache_config_info`; undefined when not exported. */
  readonly blockSize: number | undefined;
  /** KV blocks on the GPU(s), from `vllm:cache_config_info`; undefined when not exported. */
  readonly numGpuBlocks: number | undefined;
  /** `blockSize × numGpuBlocks`: the replica's KV capacity in tokens. */
  readonly kvCapacityTokens: number | undefined;
  readonly promptTokensTotal: number;
  readonly generationTokensTotal: number;
  readonly preemptionsTotal: number;
  /** Finished requests, summed over `finished_reason`. */
  readonly requestSuccessTotal: number;
  /** Prompt tokens looked up in the prefix cache; 0 when not exported. */
  readonly prefixCacheQueriesTotal: number;
  /** Prompt tokens found in the prefix cache; 0 when not exported. */
  readonly prefixCacheHitsTotal: number;
  /**
   * Hits over queries since the engine started, 0–1; undefined before any query (or when the
   * engine caches no prefixes). Differences between two scrapes give the recent rate.
   */
  readonly prefixCacheHitRate: number | undefined;
  /** `enable_prefix_caching` of `vllm:cache_config_info`; undefined when not exported. */
  readonly prefixCaching: boolean | undefined;
  /** Distinct `model_name` label values seen. */
  readonly modelNames: readonly string[];
  /** Every metric family on the page, by name, as parsed. */
  readonly families: ReadonlyMap<string, PrometheusFamily>;
  /**
   * Sum and count of every histogram on the page, by family name (e.g.
   * `vllm:inter_token_latency_seconds`), over the series of the wanted model. Differences between
   * two scrapes give the mean of what was observed in between.
   */
  readonly histograms: ReadonlyMap<string, HistogramTotals>;
}

const SAMPLE_LINE = /^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const MODEL_LABEL = /(?:^|,)\s*model_name\s*=\s*"((?:[^"\\]|\\.)*)"/;

/**
 * Sums `<name>_sum` and `<name>_count` of every histogram family. Read from the text because the
 * Prometheus parser in use drops the sum and count of labelled histograms.
 */
function histogramTotals(text: string, modelName: string | undefined): Map<string, HistogramTotals> {
  const types = new Set<string>();
  const totals = new Map<string, { sum: number; count: number }>();
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line.startsWith('# TYPE ')) {
      const [, , name, type] = line.split(/\s+/);
      if (name && type === 'histogram') types.add(name);
      continue;
    }
    if (line === '' || line.startsWith('#')) continue;
    const m = SAMPLE_LINE.exec(line);
    if (!m) continue;
    const metric = m[1] as string;
    const suffix = metric.endsWith('_sum') ? '_sum' : metric.endsWith('_count') ? '_count' : undefined;
    if (!suffix) continue;
    const family = metric.slice(0, -suffix.length);
    if (!types.has(family)) continue;
    const model = m[2] === undefined ? undefined : MODEL_LABEL.exec(m[2])?.[1];
    if (modelName !== undefined && model !== undefined && model !== modelName) continue;
    const value = toNumber(m[3]);
    if (Number.isNaN(value))
      throw new MetricsFormatError(`${metric} has a non-numeric value "${m[3]}"`, family);
    const t = totals.get(family) ?? { sum: 0, count: 0 };
    if (suffix === '_sum') t.sum += value;
    else t.count += value;
    totals.set(family, t);
  }
  return totals;
}

/** Options of {@link parseVllmMetrics}. */
export interface ParseVllmMetricsOptions {
  /** Only count series whose `model_name` label equals this (series without the label always count). */
  readonly modelName?: string;
}

function toNumber(raw: string | undefined): number {
  if (raw === undefined) return Number.NaN;
  if (raw === '+Inf') return Number.POSITIVE_INFINITY;
  if (raw === '-Inf') return Number.NEGATIVE_INFINITY;
  return Number(raw);
}

/** Totals of the first of `names` (a histogram and its older name) the page exports. */
export function histogramOf(m: VllmMetrics, ...names: string[]): HistogramTotals | undefined {
  for (const n of names) {
    const h = m.histograms.get(n);
    if (h) return h;
  }
  return undefined;
}

/**
 * Parses a vLLM `/metrics` page. Series of one metric are summed (vLLM labels them by engine
 * index under data parallelism and by finish reason), after filtering by model name. Throws
 * {@link MetricsFormatError} when the page is not Prometheus text or lacks the load gauges.
 */
export function parseVllmMetrics(text: string, options: ParseVllmMetricsOptions = {}): VllmMetrics {
  let parsed: PrometheusFamily[];
  try {
    // The parser drops the last sample when the page does not end with a newline.
    parsed = parsePrometheusTextFormat(text.endsWith('\n') ? text : `${text}\n`);
  } catch (cause) {
    throw new MetricsFormatError(`not Prometheus text: ${(cause as Error).message}`, undefined, { cause });
  }
  const families = new Map<string, PrometheusFamily>();
  for (const f of parsed) families.set(f.name, f);
  const modelNames = new Set<string>();
  for (const f of parsed) {
    if (!f.name.startsWith('vllm:')) continue;
    for (const s of f.metrics) {
      const m = s.labels?.model_name;
      if (m !== undefined) modelNames.add(m);
    }
  }

  const wanted = (labels: Readonly<Record<string, string>> | undefined): boolean =>
    options.modelName === undefined ||
    labels?.model_name === undefined ||
    labels.model_name === options.modelName;

  const sum = (name: string): number | undefined => {
    const f = families.get(name);
    if (!f) return undefined;
    let total = 0;
    for (const s of f.metrics) {
      if (!wanted(s.labels)) continue;
      const v = toNumber(s.value);
      if (Number.isNaN(v)) throw new MetricsFormatError(`${name} has a non-numeric value "${s.value}"`, name);
      total += v;
    }
    return total;
  };
  // A fraction is averaged over series (one per engine under data parallelism), not summed.
  const mean = (name: string): number | undefined => {
    const f = families.get(name);
    if (!f) return undefined;
    const n = f.metrics.filter((s) => wanted(s.labels)).length;
    const total = sum(name);
    return total === undefined || n === 0 ? total : total / n;
  };
  const required = (name: string): number => {
    const v = sum(name);
    if (v === undefined) throw new MetricsFormatError(`metrics page lacks ${name}`, name);
    return v;
  };

  let kvCacheUsage = mean(VLLM_METRIC.kvCacheUsage);
  if (kvCacheUsage === undefined) kvCacheUsage = mean(VLLM_METRIC.gpuCacheUsage);
  if (kvCacheUsage === undefined) {
    throw new MetricsFormatError(
      `metrics page lacks ${VLLM_METRIC.kvCacheUsage} (and the older ${VLLM_METRIC.gpuCacheUsage})`,
      VLLM_METRIC.kvCacheUsage,
    );
  }

  let blockSize: number | undefined;
  let numGpuBlocks: number | undefined;
  let prefixCaching: boolean | undefined;
  const info = families.get(VLLM_METRIC.cacheConfig);
  if (info) {
    // Under data parallelism each engine exports the same cache config; capacity adds up.
    let blocks = 0;
    for (const s of info.metrics) {
      if (!wanted(s.labels)) continue;
      const bs = toNumber(s.labels?.block_size);
      const nb = toNumber(s.labels?.num_gpu_blocks);
      if (Number.isFinite(bs)) blockSize = bs;
      if (Number.isFinite(nb)) blocks += nb;
      const pc = s.labels?.enable_prefix_caching;
      if (pc !== undefined) prefixCaching = pc === 'True' || pc === 'true';
    }
    if (blocks > 0) numGpuBlocks = blocks;
  }

  const prefixCacheQueriesTotal =
    sum(VLLM_METRIC.prefixCacheQueries) ?? sum(VLLM_METRIC.gpuPrefixCacheQueries) ?? 0;
  const prefixCacheHitsTotal = sum(VLLM_METRIC.prefixCacheHits) ?? sum(VLLM_METRIC.gpuPrefixCacheHits) ?? 0;
  return {
    running: required(VLLM_METRIC.running),
    waiting: required(VLLM_METRIC.waiting),
    kvCacheUsage,
    blockSize,
    numGpuBlocks,
    kvCapacityTokens:
      blockSize !== undefined && numGpuBlocks !== undefined ? blockSize * numGpuBlocks : undefined,
    promptTokensTotal: sum(VLLM_METRIC.promptTokens) ?? 0,
    generationTokensTotal: sum(VLLM_METRIC.generationTokens) ?? 0,
    preemptionsTotal: sum(VLLM_METRIC.preemptions) ?? 0,
    requestSuccessTotal: sum(VLLM_METRIC.requestSuccess) ?? 0,
    prefixCacheQueriesTotal,
    prefixCacheHitsTotal,
    prefixCacheHitRate:
      prefixCacheQueriesTotal > 0 ? prefixCacheHitsTotal / prefixCacheQueriesTotal : undefined,
    prefixCaching,
    modelNames: [...modelNames],
    families,
    histograms: histogramTotals(text, options.modelName),
  };
}
