/**
 * Profiling a running vLLM-compatible engine (`fairway profile`, Aladdin section 3 and appendix A):
 * planned loads are sent through the public OpenAI API and `/metrics` is scraped around each
 * phase; prefill, decode-iteration and KV samples are derived from histogram deltas and gauges
 * only, so the same run works against real vLLM and fairway's engine-sim. The samples are fitted
 * with the policy package's least squares into a performance model with its fit errors.
 *
 * Times are taken as the engine reports them. engine-sim reports model time (what the simulated
 * GPU would take at speed 1) at any speed factor, so profiling it at a high speed needs no scaling.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { type Clock, createRng, type Rng, systemClock } from '@fairway/core';
import {
  type DecodeSample,
  fitPerformanceModel,
  type KvSample,
  type PerformanceFitReport,
  type PerformanceModel,
  type PerformanceModelFile,
  type PrefillSample,
  toPerformanceModelFile,
} from '@fairway/policy';
import { EngineProfileError } from './errors.ts';
import { histogramOf, VLLM_METRIC, type VllmMetrics } from './metrics-parser.ts';
import { VllmClient } from './vllm-client.ts';

/** Options of {@link profileEngineMetrics}. */
export interface EngineProfileOptions {
  /** Base URL of the engine's OpenAI server, e.g. `http://10.0.0.5:8000`. */
  readonly url: string;
  /** Served model name to profile. @default the first model `/v1/models` lists */
  readonly model?: string | undefined;
  /** Sent as `Authorization: Bearer` when the engine runs with `--api-key`. */
  readonly apiKey?: string | undefined;
  /**
   * Prompt tokens of the single-request prefill phases. @default 128, 256, 512, 1024, 2048, 3072,
   * 4096 (Aladdin's prefill model is linear; attention grows quadratically beyond), those that fit
   * the context length and KV cache
   */
  readonly prefillTokens?: readonly number[] | undefined;
  /** Requests per prefill length. @default 2 */
  readonly prefillRepeats?: number | undefined;
  /** Concurrent sequences of the decode phases. @default 1, 2, 4, 8, 16, 32, 64 (up to `maxSeqs`) */
  readonly batchSizes?: readonly number[] | undefined;
  /** Prompt tokens of each sequence in the decode phases. @default 128, 512, 1024, 2048 */
  readonly contexts?: readonly number[] | undefined;
  /** Tokens each sequence decodes inside one measuring window of a decode phase. @default 16 */
  readonly windowTokens?: number | undefined;
  /**
   * Measuring windows per decode phase; the one with the shortest mean inter-token latency is
   * kept, since whatever disturbs an engine (a hiccup, a slow scrape, a simulator falling behind
   * its speed factor) only ever adds time. @default 3
   */
  readonly windows?: number | undefined;
  /** Most sequences the engine batches (vLLM `--max-num-seqs`; not on `/metrics`). @default 256 */
  readonly maxSeqs?: number | undefined;
  /** Real ms between `/metrics` polls while waiting for a phase to reach its state. @default 5 */
  readonly pollMs?: number | undefined;
  /** Real ms a phase may take before it is given up (and reported skipped). @default 120000 */
  readonly phaseTimeoutMs?: number | undefined;
  /** Seed of the random prompt token ids (random, so prefix caching cannot hit). @default 0 */
  readonly seed?: number | undefined;
  /** Called after each phase with phases done, phases planned and what was measured. */
  readonly onProgress?: ((done: number, total: number, phase: string) => void) | undefined;
}

/** What a profiling run measured. */
export interface EngineProfileSamples {
  readonly url: string;
  readonly servedModel: string;
  /** `num_gpu_blocks × block_size` from `vllm:cache_config_info`. */
  readonly kvCapacityTokens: number;
  readonly maxModelLen: number;
  readonly prefill: readonly PrefillSample[];
  readonly decode: readonly DecodeSample[];
  readonly kv: readonly KvSample[];
  /** Phases left out, and why (KV or context too small, timeouts, preemptions). */
  readonly skipped: readonly string[];
}

interface Planned {
  readonly label: string;
  readonly run: () => Promise<void>;
}

function deltaOf(after: VllmMetrics, before: VllmMetrics, ...names: string[]) {
  const a = histogramOf(after, ...names);
  const b = histogramOf(before, ...names);
  if (!a || !b) return undefined;
  return { sum: a.sum - b.sum, count: a.count - b.count };
}

/**
 * Drives the planned loads against one engine and returns the samples (see the module comment):
 * - prefill: one request at a time at each prompt length, `max_tokens: 1`; its prefill time is
 *   the `request_prefill_time_seconds` delta (else TTFT minus queue time);
 * - decode: `b` concurrent long generations of an `l`-token prompt; once every sequence has its
 *   first token, the mean inter-token latency over a window of pure decode iterations is one
 *   decode iteration of `b` sequences, with the batch's context from the generation counter;
 * - KV: `kv_cache_usage_perc × capacity` per sequence at the window's ends, against its context.
 * Prompts are random token ids (exact lengths, no prefix-cache hits). Throws
 * {@link EngineProfileError} when the engine lacks the metrics or nothing could be measured.
 */
export async function profileEngineMetrics(options: EngineProfileOptions): Promise<EngineProfileSamples> {
  const client = new VllmClient({
    url: options.url,
    ...(options.apiKey === undefined ? {} : { apiKey: options.apiKey }),
    ...(options.model === undefined ? {} : { modelName: options.model }),
  });
  try {
    return await profileWith(client, options);
  } finally {
    await client.close();
  }
}

async function profileWith(client: VllmClient, options: EngineProfileOptions): Promise<EngineProfileSamples> {
  const url = client.url;
  const cards = await client.models();
  const card = options.model === undefined ? cards[0] : cards.find((c) => c.id === options.model);
  if (!card) {
    throw new EngineProfileError(
      url,
      options.model === undefined
        ? 'the engine lists no model'
        : `the engine does not serve "${options.model}" (it serves ${cards.map((c) => c.id).join(', ')})`,
    );
  }
  const model = card.id;
  const first = await client.metrics();
  const capacity = first.kvCapacityTokens;
  if (capacity === undefined) {
    throw new EngineProfileError(url, `the engine does not export ${VLLM_METRIC.cacheConfig}`);
  }
  if (!histogramOf(first, VLLM_METRIC.interTokenLatency, VLLM_METRIC.timePerOutputToken)) {
    throw new EngineProfileError(
      url,
      `the engine exports neither ${VLLM_METRIC.interTokenLatency} nor ${VLLM_METRIC.timePerOutputToken}`,
    );
  }
  if (!histogramOf(first, VLLM_METRIC.prefillTime, VLLM_METRIC.timeToFirstToken)) {
    throw new EngineProfileError(
      url,
      `the engine exports neither ${VLLM_METRIC.prefillTime} nor ${VLLM_METRIC.timeToFirstToken}`,
    );
  }
  const maxModelLen = card.maxModelLen ?? 4096;
  const maxSeqs = options.maxSeqs ?? 256;
  const pollMs = options.pollMs ?? 5;
  const timeoutMs = options.phaseTimeoutMs ?? 120_000;
  const windowTokens = options.windowTokens ?? 16;
  const windows = options.windows ?? 3;
  const repeats = options.prefillRepeats ?? 2;
  const rng = createRng(options.seed ?? 0).fork('profile-prompts');

  const prefill: PrefillSample[] = [];
  const decode: DecodeSample[] = [];
  const kv: KvSample[] = [];
  const skipped: string[] = [];

  const generate = (promptTokens: number, maxTokens: number, signal?: AbortSignal) =>
    client.complete(
      'completions',
      {
        model,
        prompt: promptIds(rng, promptTokens),
        max_tokens: maxTokens,
        ignore_eos: true,
        temperature: 0,
      },
      signal ? { signal } : {},
    );

  const waitFor = async (label: string, done: (m: VllmMetrics) => boolean): Promise<VllmMetrics> => {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const m = await client.metrics();
      if (done(m)) return m;
      if (performance.now() > deadline) throw new PhaseTimeout(label);
      await sleep(pollMs);
    }
  };
  const idle = (label: string) => waitFor(`${label}: engine idle`, (m) => m.running === 0 && m.waiting === 0);

  const plan: Planned[] = [];
  const prefillLengths = (options.prefillTokens ?? [128, 256, 512, 1024, 2048, 3072, 4096]).filter((n) => {
    const fits = n + 1 < maxModelLen && n + 32 < capacity * 0.9;
    if (!fits) skipped.push(`prefill ${n}: exceeds the context length or KV cache`);
    return fits;
  });
  for (const n of prefillLengths) {
    plan.push({
      label: `prefill ${n} tokens`,
      run: async () => {
        let before = await idle(`prefill ${n}`);
        for (let i = 0; i < repeats; i++) {
          await generate(n, 1);
          const after = await waitFor(`prefill ${n}`, (m) => {
            const d = deltaOf(m, before, VLLM_METRIC.prefillTime, VLLM_METRIC.timeToFirstToken);
            return d !== undefined && d.count >= 1;
          });
          const ms = prefillMsBetween(after, before);
          if (ms !== undefined && ms > 0) prefill.push({ inputTokens: n, ms });
          before = after;
        }
      },
    });
  }

  for (const b of options.batchSizes ?? [1, 2, 4, 8, 16, 32, 64]) {
    for (const l of options.contexts ?? [128, 512, 1024, 2048]) {
      const label = `decode b=${b} l=${l}`;
      // Room for the window plus the decodes early arrivals run while later prompts prefill.
      const perSeq = l + windows * windowTokens + 64;
      if (b > maxSeqs || b * (perSeq + 16) > capacity * 0.85 || perSeq + 64 >= maxModelLen) {
        skipped.push(`${label}: exceeds max_num_seqs, the KV cache or the context length`);
        continue;
      }
      plan.push({ label, run: () => decodePhase(b, l, label) });
    }
  }

  const decodePhase = async (b: number, l: number, label: string): Promise<void> => {
    const start = await idle(label);
    const controllers = Array.from({ length: b }, () => new AbortController());
    // Long enough for the ramp and the windows; short enough that an engine which does not abort
    // a request whose client left (some vLLM versions, non-streamed) soon frees the batch anyway.
    const maxTokens = Math.min(maxModelLen - l - 1, 1024);
    const running = controllers.map((c) => generate(l, maxTokens, c.signal).catch(() => undefined));
    try {
      const ttft = (m: VllmMetrics) => deltaOf(m, start, VLLM_METRIC.timeToFirstToken)?.count ?? 0;
      // Everyone has its first token: from here on, iterations are pure decodes of b sequences.
      const marks = [await waitFor(label, (m) => ttft(m) >= b && m.running >= b)];
      for (let w = 0; w < windows; w++) {
        const from = marks[marks.length - 1] as VllmMetrics;
        marks.push(
          await waitFor(
            label,
            (m) => m.generationTokensTotal - from.generationTokensTotal >= b * windowTokens,
          ),
        );
      }
      const last = marks[marks.length - 1] as VllmMetrics;
      if (last.preemptionsTotal > start.preemptionsTotal) {
        skipped.push(`${label}: the engine preempted sequences`);
        return;
      }
      const generated = (m: VllmMetrics) => m.generationTokensTotal - start.generationTokensTotal;
      let best: DecodeSample | undefined;
      for (let w = 1; w < marks.length; w++) {
        const from = marks[w - 1] as VllmMetrics;
        const to = marks[w] as VllmMetrics;
        const itl = deltaOf(to, from, VLLM_METRIC.interTokenLatency, VLLM_METRIC.timePerOutputToken);
        if (!itl || itl.count < b) continue;
        const ms = (itl.sum / itl.count) * 1000;
        // An observation's iteration attends over every sequence's prompt and tokens so far.
        const contextTokens = Math.round(b * l + (generated(from) + generated(to) - b) / 2);
        if (best === undefined || ms < best.ms) best = { batchSize: b, contextTokens, ms };
      }
      if (best === undefined) {
        skipped.push(`${label}: too few inter-token observations`);
        return;
      }
      decode.push(best);
      for (const m of marks) {
        kv.push({
          contextTokens: Math.round(l + generated(m) / b),
          kvTokens: Math.round((m.kvCacheUsage * capacity) / b),
        });
      }
    } finally {
      for (const c of controllers) c.abort();
      await Promise.all(running);
    }
  };

  let done = 0;
  for (const p of plan) {
    try {
      await p.run();
    } catch (err) {
      if (!(err instanceof PhaseTimeout)) throw err;
      skipped.push(`${p.label}: timed out after ${timeoutMs} ms`);
    }
    options.onProgress?.(++done, plan.length, p.label);
  }
  await idle('end').catch(() => undefined);
  if (prefill.length < 2 || decode.length < 3) {
    throw new EngineProfileError(
      url,
      `measured ${prefill.length} prefill and ${decode.length} decode samples; need at least 2 and 3 (skipped: ${skipped.join('; ') || 'none'})`,
    );
  }
  return { url, servedModel: model, kvCapacityTokens: capacity, maxModelLen, prefill, decode, kv, skipped };
}

/** A phase did not reach its state in time. */
class PhaseTimeout extends Error {}

/** Mean prefill of the requests finished between two scrapes, ms. */
function prefillMsBetween(after: VllmMetrics, before: VllmMetrics): number | undefined {
  const prefill = deltaOf(after, before, VLLM_METRIC.prefillTime);
  if (prefill && prefill.count > 0) return (prefill.sum / prefill.count) * 1000;
  const ttft = deltaOf(after, before, VLLM_METRIC.timeToFirstToken);
  if (!ttft || ttft.count === 0) return undefined;
  const queue = deltaOf(after, before, VLLM_METRIC.queueTime);
  const queued = queue && queue.count === ttft.count ? queue.sum : 0;
  return ((ttft.sum - queued) / ttft.count) * 1000;
}

/** Random token ids: exact prompt lengths, and no two prompts share a prefix. */
function promptIds(rng: Rng, n: number): number[] {
  return Array.from({ length: n }, () => rng.int(1000, 29_999));
}

/** Identity of the profiled replica that `/metrics` does not tell. */
export interface ProfiledReplica {
  /** Model name as presets and the fleet config spell it. @default the served model name */
  readonly model?: string | undefined;
  readonly gpu: string;
  readonly tp: number;
  /** @default 256 */
  readonly maxSeqs?: number | undefined;
}

/** A fitted profile: the model, its fit errors and the file to write. */
export interface FittedEngineProfile {
  readonly model: PerformanceModel;
  readonly report: PerformanceFitReport;
  readonly file: PerformanceModelFile;
  readonly samples: EngineProfileSamples;
}

/**
 * Fits a performance model to a profiling run's samples by least squares and builds its
 * zod-validated file content (`at` from `clock`).
 */
export function fitEngineProfile(
  samples: EngineProfileSamples,
  replica: ProfiledReplica,
  clock: Clock = systemClock,
): FittedEngineProfile {
  const { model, report } = fitPerformanceModel({
    model: replica.model ?? samples.servedModel,
    gpu: replica.gpu,
    tp: replica.tp,
    kvCapacityTokens: samples.kvCapacityTokens,
    maxSeqs: replica.maxSeqs ?? 256,
    prefill: samples.prefill,
    decode: samples.decode,
    kv: samples.kv,
  });
  const file = toPerformanceModelFile(model, report, {
    source: 'engine',
    url: samples.url,
    servedModel: samples.servedModel,
    at: new Date(clock.now()).toISOString(),
    samples: { prefill: samples.prefill.length, decode: samples.decode.length, kv: samples.kv.length },
  });
  return { model, report, file, samples };
}
