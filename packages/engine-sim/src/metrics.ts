import type { EngineStats } from '@fairway/perf';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';

/** vLLM's buckets for `time_to_first_token_seconds`. */
const TTFT_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640,
  2560,
];
/** vLLM's buckets for `inter_token_latency_seconds`. */
const ITL_BUCKETS = [
  0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80,
];
/** vLLM's buckets for request-level latencies (e2e, queue, prefill, decode and inference time). */
const REQUEST_BUCKETS = [
  0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680,
];
/** vLLM's buckets for `iteration_tokens_total` (tokens per engine step). */
const ITERATION_TOKEN_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384];

/** Why a request finished, as vLLM labels `request_success_total`. */
export type FinishedReason = 'stop' | 'length' | 'abort';

/**
 * Phase durations of a finished request, model seconds, as vLLM's engine core timestamps them:
 * queued → first scheduled (queue), → first token (prefill), → last token (decode); inference is
 * prefill + decode. A phase the request never reached is undefined and not observed.
 */
export interface RequestTimings {
  /** Arrival to finish. */
  readonly e2eS: number;
  readonly queueS?: number | undefined;
  readonly prefillS?: number | undefined;
  readonly decodeS?: number | undefined;
  readonly inferenceS?: number | undefined;
  /** Output tokens generated; a mean time per output token is observed when there are two or more. */
  readonly generated: number;
}

/**
 * The simulated engine's `/metrics`, with vLLM's names, labels, buckets and semantics. Gauges and
 * token counters are read from the engine model at scrape time; latency histograms are observed in
 * model seconds on the engine's step schedule (see `RealtimeDriver.currentStepModelMs`), so at any
 * speed factor they read as the simulated GPU would report at speed 1 — `fairway profile` needs no
 * scaling. Request-level histograms (queue, prefill, decode, inference, e2e, mean time per output
 * token) are observed when the request finishes, as vLLM does.
 */
export class EngineSimMetrics {
  readonly registry = new Registry();
  readonly #ttft: Histogram<'model_name'>;
  readonly #itl: Histogram<'model_name'>;
  readonly #e2e: Histogram<'model_name'>;
  readonly #queue: Histogram<'model_name'>;
  readonly #tpot: Histogram<'model_name'>;
  readonly #prefill: Histogram<'model_name'>;
  readonly #decode: Histogram<'model_name'>;
  readonly #inference: Histogram<'model_name'>;
  readonly #requestTpot: Histogram<'model_name'>;
  readonly #iterationTokens: Histogram<'model_name'>;
  readonly #success: Counter<'model_name' | 'finished_reason'>;
  readonly #labels: { model_name: string };

  constructor(modelName: string, stats: () => EngineStats) {
    const registers = [this.registry];
    const labels = { model_name: modelName };
    this.#labels = labels;
    const gauge = (name: string, help: string, read: (s: EngineStats) => number): void => {
      new Gauge({
        name,
        help,
        labelNames: ['model_name'],
        registers,
        collect() {
          this.set(labels, read(stats()));
        },
      });
    };
    // Counters mirror the model's totals: each scrape adds what accumulated since the last one.
    const counter = (name: string, help: string, read: (s: EngineStats) => number): void => {
      let last = 0;
      new Counter({
        name,
        help,
        labelNames: ['model_name'],
        registers,
        collect() {
          const now = read(stats());
          if (now > last) this.inc(labels, now - last);
          else if (last === 0) this.inc(labels, 0);
          last = Math.max(last, now);
        },
      });
    };
    gauge('vllm:num_requests_running', 'Number of requests in model execution batches.', (s) => s.running);
    gauge('vllm:num_requests_waiting', 'Number of requests waiting to be processed.', (s) => s.waiting);
    gauge('vllm:kv_cache_usage_perc', 'KV-cache usage. 1 means 100 percent usage.', (s) => s.kvUsage);
    new Gauge({
      name: 'vllm:cache_config_info',
      help: 'Information of the LLMEngine CacheConfig.',
      labelNames: ['block_size', 'num_gpu_blocks', 'cache_dtype', 'enable_prefix_caching'],
      registers,
      collect() {
        const s = stats();
        this.set(
          {
            block_size: String(s.blockSize),
            num_gpu_blocks: String(s.numGpuBlocks),
            cache_dtype: 'auto',
            enable_prefix_caching: s.prefixCaching ? 'True' : 'False',
          },
          1,
        );
      },
    });
    counter('vllm:prompt_tokens_total', 'Number of prefill tokens processed.', (s) => s.promptTokensTotal);
    counter(
      'vllm:generation_tokens_total',
      'Number of generation tokens processed.',
      (s) => s.generationTokensTotal,
    );
    counter(
      'vllm:num_preemptions_total',
      'Cumulative number of preemption from the engine.',
      (s) => s.preemptionsTotal,
    );
    counter(
      'vllm:prefix_cache_queries_total',
      'Prefix cache queries, in terms of number of queried tokens.',
      (s) => s.prefixCacheQueriesTotal,
    );
    counter(
      'vllm:prefix_cache_hits_total',
      'Prefix cache hits, in terms of number of cached tokens.',
      (s) => s.prefixCacheHitsTotal,
    );
    this.#success = new Counter({
      name: 'vllm:request_success_total',
      help: 'Count of successfully processed requests.',
      labelNames: ['model_name', 'finished_reason'],
      registers,
    });
    for (const reason of ['stop', 'length', 'abort'] as const) {
      this.#success.inc({ ...labels, finished_reason: reason }, 0);
    }
    const histogram = (name: string, help: string, buckets: number[]): Histogram<'model_name'> => {
      const h = new Histogram({ name, help, labelNames: ['model_name'], buckets, registers });
      h.zero(labels);
      return h;
    };
    this.#ttft = histogram(
      'vllm:time_to_first_token_seconds',
      'Histogram of time to first token in seconds.',
      TTFT_BUCKETS,
    );
    this.#itl = histogram(
      'vllm:inter_token_latency_seconds',
      'Histogram of inter-token latency in seconds.',
      ITL_BUCKETS,
    );
    this.#e2e = histogram(
      'vllm:e2e_request_latency_seconds',
      'Histogram of e2e request latency in seconds.',
      REQUEST_BUCKETS,
    );
    // The name before vLLM 0.11 of the same per-token observations; scrapers of older vLLM read it.
    this.#tpot = histogram(
      'vllm:time_per_output_token_seconds',
      'Histogram of time per output token in seconds.',
      ITL_BUCKETS,
    );
    this.#requestTpot = histogram(
      'vllm:request_time_per_output_token_seconds',
      'Histogram of time_per_output_token_seconds per request.',
      ITL_BUCKETS,
    );
    this.#queue = histogram(
      'vllm:request_queue_time_seconds',
      'Histogram of time spent in WAITING phase for request.',
      REQUEST_BUCKETS,
    );
    this.#prefill = histogram(
      'vllm:request_prefill_time_seconds',
      'Histogram of time spent in PREFILL phase for request.',
      REQUEST_BUCKETS,
    );
    this.#decode = histogram(
      'vllm:request_decode_time_seconds',
      'Histogram of time spent in DECODE phase for request.',
      REQUEST_BUCKETS,
    );
    this.#inference = histogram(
      'vllm:request_inference_time_seconds',
      'Histogram of time spent in RUNNING phase for request.',
      REQUEST_BUCKETS,
    );
    this.#iterationTokens = histogram(
      'vllm:iteration_tokens_total',
      'Histogram of number of tokens per engine_step.',
      ITERATION_TOKEN_BUCKETS,
    );
  }

  /** Records a time to first token, model seconds. */
  observeTtft(seconds: number): void {
    this.#ttft.observe(this.#labels, seconds);
  }

  /** Records the gap between two output tokens of a request, model seconds. */
  observeInterToken(seconds: number): void {
    this.#itl.observe(this.#labels, seconds);
    this.#tpot.observe(this.#labels, seconds);
  }

  /** Records one engine step: prompt tokens prefilled plus tokens generated in it. */
  observeIteration(tokens: number): void {
    if (tokens > 0) this.#iterationTokens.observe(this.#labels, tokens);
  }

  /** Records a finished request: its phase durations (model seconds) and why it finished. */
  observeFinished(timings: RequestTimings, reason: FinishedReason): void {
    const l = this.#labels;
    this.#e2e.observe(l, timings.e2eS);
    if (timings.queueS !== undefined) this.#queue.observe(l, timings.queueS);
    if (timings.prefillS !== undefined) this.#prefill.observe(l, timings.prefillS);
    if (timings.decodeS !== undefined) {
      this.#decode.observe(l, timings.decodeS);
      if (timings.generated > 1) this.#requestTpot.observe(l, timings.decodeS / (timings.generated - 1));
    }
    if (timings.inferenceS !== undefined) this.#inference.observe(l, timings.inferenceS);
    this.#success.inc({ ...l, finished_reason: reason });
  }

  /** The Prometheus text exposition. */
  render(): Promise<string> {
    return this.registry.metrics();
  }

  /** The `Content-Type` of {@link render}'s output. */
  get contentType(): string {
    return this.registry.contentType;
  }
}
