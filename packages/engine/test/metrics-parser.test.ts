import { describe, expect, it } from 'vitest';
import { MetricsFormatError } from '../src/errors.ts';
import { parseVllmMetrics } from '../src/metrics-parser.ts';

// Shaped like vLLM 0.8's page (python prometheus_client): `_total` counters with `_created`
// companions, an engine label, the older `gpu_cache_usage_perc`, two served models.
const OLD_VLLM = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama"} 3.0
vllm:num_requests_running{engine="0",model_name="other"} 9.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} 2.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="llama"} 0.25
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",gpu_memory_utilization="0.9",num_cpu_blocks="2048",num_gpu_blocks="7000"} 1.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="llama"} 1234.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="llama"} 1.7e9
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="llama"} 567.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="llama"} 4.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="llama"} 10.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="llama"} 5.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="llama"} 1.0`;

describe('parseVllmMetrics', () => {
  it('reads load, capacity and counters, falling back to gpu_cache_usage_perc', () => {
    const m = parseVllmMetrics(OLD_VLLM, { modelName: 'llama' });
    expect(m).toMatchObject({
      running: 3,
      waiting: 2,
      kvCacheUsage: 0.25,
      blockSize: 16,
      numGpuBlocks: 7000,
      kvCapacityTokens: 112_000,
      promptTokensTotal: 1234,
      generationTokensTotal: 567,
      preemptionsTotal: 4,
      requestSuccessTotal: 16,
    });
    expect(m.modelNames).toEqual(['llama', 'other']);
  });

  it('sums series across models when no model is named', () => {
    expect(parseVllmMetrics(OLD_VLLM).running).toBe(12);
  });

  it('prefers kv_cache_usage_perc and averages it across data-parallel engines', () => {
    const page = `${OLD_VLLM}
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="llama"} 0.7
`;
    expect(parseVllmMetrics(page, { modelName: 'llama' }).kvCacheUsage).toBeCloseTo(0.6);
  });

  it('names the missing gauge when the page is not a vLLM page', () => {
    const page = '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n';
    expect(() => parseVllmMetrics(page)).toThrow(MetricsFormatError);
    expect(() => parseVllmMetrics(page)).toThrow(/vllm:kv_cache_usage_perc/);
    const noWaiting = `${page}# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0\n`;
    expect(() => parseVllmMetrics(noWaiting)).toThrow(/vllm:num_requests_waiting/);
  });

  it('rejects text that is not Prometheus exposition format', () => {
    expect(() => parseVllmMetrics('vllm:x{a=b} 1\n')).toThrow(MetricsFormatError);
  });

  it('leaves capacity undefined when cache_config_info is absent', () => {
    const page = OLD_VLLM.split('\n')
      .filter((l) => !l.includes('cache_config_info'))
      .join('\n');
    const m = parseVllmMetrics(page);
    expect([m.blockSize, m.numGpuBlocks, m.kvCapacityTokens]).toEqual([undefined, undefined, undefined]);
  });

  it('sums histogram sums and counts over engines, for the wanted model only', () => {
    const page = `${OLD_VLLM}
# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="llama"} 3.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="llama"} 4.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="llama"} 4.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="llama"} 0.05
vllm:inter_token_latency_seconds_count{engine="1",model_name="llama"} 6.0
vllm:inter_token_latency_seconds_sum{engine="1",model_name="llama"} 0.07
vllm:inter_token_latency_seconds_count{engine="0",model_name="other"} 100.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="other"} 9.0
vllm:inter_token_latency_seconds_created{engine="0",model_name="llama"} 1.7e9
`;
    const h = parseVllmMetrics(page, { modelName: 'llama' }).histograms.get(
      'vllm:inter_token_latency_seconds',
    );
    expect(h?.count).toBe(10);
    expect(h?.sum).toBeCloseTo(0.12, 9);
    expect(parseVllmMetrics(page).histograms.get('vllm:inter_token_latency_seconds')?.count).toBe(110);
    // Counters ending in _count or _sum that are not histograms are not taken for one.
    expect(parseVllmMetrics(page).histograms.has('vllm:request_success')).toBe(false);
  });

  it('reads the prefix-cache counters of two data-parallel engines into a hit rate', () => {
    const page = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama"} 1.0
vllm:num_requests_running{engine="1",model_name="llama"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama"} 0.1
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",num_gpu_blocks="7000"} 1.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="llama"} 3000.0
vllm:prefix_cache_queries_total{engine="1",model_name="llama"} 1000.0
# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{engine="0",model_name="llama"} 1.7e9
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="llama"} 2400.0
vllm:prefix_cache_hits_total{engine="1",model_name="llama"} 600.0
`;
    const m = parseVllmMetrics(page, { modelName: 'llama' });
    expect(m.prefixCacheQueriesTotal).toBe(4000);
    expect(m.prefixCacheHitsTotal).toBe(3000);
    expect(m.prefixCacheHitRate).toBe(0.75);
    expect(m.prefixCaching).toBe(true);
  });

  it('reads no prefix-cache hit rate from a page without the counters', () => {
    const m = parseVllmMetrics(OLD_VLLM, { modelName: 'llama' });
    expect([m.prefixCacheQueriesTotal, m.prefixCacheHitsTotal, m.prefixCacheHitRate]).toEqual([
      0,
      0,
      undefined,
    ]);
    expect(m.prefixCaching).toBeUndefined();
  });
});
