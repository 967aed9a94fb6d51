import { z } from 'zod';
import { parseInput } from '../errors.ts';
import { decodeIterationMs, maxDecodeBatch } from '../perf-model/decode-model.ts';
import { kvTokens } from '../perf-model/kv-model.ts';
import type { PerformanceModel } from '../perf-model/performance-model.ts';
import { prefillMs } from '../perf-model/prefill-model.ts';

/** Token profile of a workload, learned from history. */
export interface WorkloadProfile {
  /** Mean prompt tokens per request. */
  readonly meanInputTokens: number;
  /** Mean output tokens per request. */
  readonly meanOutputTokens: number;
}

/** SLO targets a worker configuration must meet. */
export interface WorkerSlo {
  /** Time-to-first-token target, ms; checked against the prefill of a mean prompt. */
  readonly ttftMs?: number | undefined;
  /** Average token generation time target, ms per token; bounds the decode batch. */
  readonly atgtMs?: number | undefined;
}

/** What limits a configuration's decode batch. */
export type BatchBottleneck = 'kv' | 'atgt' | 'seqs';

/** One tensor-parallel degree evaluated under the workload and SLOs. */
export interface TpEvaluation {
  readonly tp: number;
  readonly feasible: boolean;
  /** Why the degree cannot meet the SLOs, when infeasible. */
  readonly reason?: string | undefined;
  /** Largest decode batch the replica sustains. */
  readonly batch: number;
  readonly bottleneck: BatchBottleneck;
  /** Decode iteration time at that batch, ms. */
  readonly iterationMs: number;
  /** Output tokens per second of one replica. */
  readonly tokensPerS: number;
  /** Output tokens per second per GPU: what the choice maximises (Aladdin Eq. 6). */
  readonly tokensPerSPerGpu: number;
}

/** The chosen degree (absent when none meets the SLOs) and every evaluation. */
export interface TpChoice {
  readonly best: TpEvaluation | undefined;
  readonly candidates: readonly TpEvaluation[];
}

const workloadSchema = z.object({
  meanInputTokens: z.number().nonnegative().finite(),
  meanOutputTokens: z.number().positive().finite(),
});

/**
 * Evaluates one (model, GPU, TP) replica: in steady continuous batching a running request holds on
 * average `l_in + l_out/2` context tokens, so the batch is the smallest of what the KV cache holds
 * (`M / m_r`), what the ATGT allows (Eq. 4 solved for b) and `max_num_seqs`; throughput is that batch
 * over one iteration's time, divided by the GPUs (Aladdin section 4.1, Eq. 6).
 */
export function evaluateTp(
  perf: PerformanceModel,
  workload: WorkloadProfile,
  slo: WorkerSlo = {},
): TpEvaluation {
  const w = parseInput('evaluateTp', workloadSchema, workload);
  const avgContext = w.meanInputTokens + w.meanOutputTokens / 2;
  const perRequestKv = Math.max(kvTokens(perf.kv, avgContext), 1);
  const kvBatch = Math.floor(perf.kvCapacityTokens / perRequestKv);
  const atgtBatch =
    slo.atgtMs === undefined ? Number.POSITIVE_INFINITY : maxDecodeBatch(perf.decode, avgContext, slo.atgtMs);
  let batch = Math.min(kvBatch, atgtBatch, perf.maxSeqs);
  const bottleneck: BatchBottleneck = batch === kvBatch ? 'kv' : batch === atgtBatch ? 'atgt' : 'seqs';
  batch = Math.max(batch, 0);
  const iterationMs = decodeIterationMs(perf.decode, batch, batch * avgContext);
  const tokensPerS = batch > 0 && iterationMs > 0 ? (batch * 1000) / iterationMs : 0;
  let reason: string | undefined;
  if (batch < 1) {
    reason =
      bottleneck === 'kv'
        ? `KV cache (${perf.kvCapacityTokens} tokens) cannot hold one request`
        : `even one sequence decodes slower than the ATGT target (${slo.atgtMs} ms)`;
  } else if (slo.ttftMs !== undefined && prefillMs(perf.prefill, w.meanInputTokens) > slo.ttftMs) {
    reason = `prefill of a mean prompt takes longer than the TTFT target (${slo.ttftMs} ms)`;
  }
  return {
    tp: perf.tp,
    feasible: reason === undefined,
    reason,
    batch,
    bottleneck,
    iterationMs,
    tokensPerS,
    tokensPerSPerGpu: tokensPerS / perf.tp,
  };
}

/**
 * Aladdin's worker configuration (section 4.1): the tensor-parallel degree whose replicas give the
 * most output tokens per second per GPU while meeting the SLOs. Ties go to the smaller degree
 * (more, smaller replicas place requests more finely).
 */
export function chooseTensorParallel(
  perTp: readonly PerformanceModel[],
  workload: WorkloadProfile,
  slo: WorkerSlo = {},
): TpChoice {
  const candidates = perTp.map((perf) => evaluateTp(perf, workload, slo)).sort((a, b) => a.tp - b.tp);
  let best: TpEvaluation | undefined;
  for (const c of candidates) {
    if (c.feasible && (!best || c.tokensPerSPerGpu > best.tokensPerSPerGpu)) best = c;
  }
  return { best, candidates };
}
