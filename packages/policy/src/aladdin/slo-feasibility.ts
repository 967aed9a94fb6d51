import { decodeIterationMs, maxDecodeContext } from '../perf-model/decode-model.ts';
import { prefillMs } from '../perf-model/prefill-model.ts';
import {
  expectedLength,
  kvCapacityOf,
  type PlacedRequest,
  type ReplicaView,
  type ResolvedAladdinOptions,
  seqCapacityOf,
} from './replica-view.ts';

/** Why a replica cannot take a request. */
export type InfeasibleReason =
  /** More sequences than the replica may batch. */
  | 'seqs'
  /** The batch's KV demand would exceed capacity before its requests finish (constraint e). */
  | 'kv'
  /** A request's time to first token would exceed its target (constraint c). */
  | 'ttft'
  /** A request's average token generation time would exceed its target (constraints b and d). */
  | 'atgt';

/** Predicted state of a replica once the request is added. */
export interface ReplicaPrediction {
  /** Sequences in the batch. */
  readonly batch: number;
  /** Decode iteration time with the γ-weighted context, ms. */
  readonly iterationMs: number;
  /** Prefill time of every not-yet-started request on the replica, ms: the stall running decodes see. */
  readonly prefillStallMs: number;
  /** Highest KV demand over the batch's remaining iterations, tokens. */
  readonly peakKvTokens: number;
}

/** Outcome of checking one replica for one new request. */
export type FeasibilityResult =
  | ({ readonly ok: true } & ReplicaPrediction)
  | ({
      readonly ok: false;
      readonly reason: InfeasibleReason;
      /** Request whose SLO would break (for `ttft` / `atgt`). */
      readonly requestId?: string;
      /** Predicted value against its limit, in the reason's unit (sequences, tokens or ms). */
      readonly predicted: number;
      readonly limit: number;
    } & ReplicaPrediction);

/** A sequence's KV context now, and the decode iterations it still has to run. */
export interface KvCourse {
  readonly context: number;
  readonly remaining: number;
}

/**
 * Highest sum of KV context over the future iterations of a batch, tokens plus `perSequence` for
 * each running sequence (Aladdin constraint e): every sequence grows by one token per iteration
 * and frees its cache when it finishes, so the peak falls just before some sequence's last
 * iteration. O(n log n).
 */
export function futureKvPeak(courses: readonly KvCourse[], perToken = 1, perSequence = 0): number {
  const items = [...courses].sort((a, b) => b.remaining - a.remaining);
  // Walking by decreasing remaining length, the active set at s = remaining_k − 1 is the prefix.
  let peak = 0;
  let count = 0;
  let contextSum = 0;
  for (let i = 0; i < items.length; i++) {
    const it = items[i] as KvCourse;
    count++;
    contextSum += it.context;
    const next = items[i + 1];
    if (next && next.remaining === it.remaining) continue;
    const s = it.remaining - 1;
    peak = Math.max(peak, perToken * (contextSum + count * s) + count * perSequence);
  }
  return peak;
}

/** Highest KV-cache demand over the future iterations of the requests on a replica ({@link futureKvPeak}). */
export function peakKvDemand(replica: ReplicaView, requests: readonly PlacedRequest[]): number {
  const kv = replica.perf.kv;
  return futureKvPeak(
    requests.map((r) => ({
      remaining: expectedLength(r) - r.generated,
      context: r.inputTokens + r.generated,
    })),
    kv.h,
    kv.j,
  );
}

/**
 * Whether `replica` can take `incoming` without breaking an SLO of any request on it (Aladdin
 * section 4.2, constraints b–e): it predicts the decode iteration time with the request added and
 * rejects the replica when the batch's γ-weighted context exceeds θ of the ATGT context limit (Eq. 4),
 * when a running request's average token time (time decoded so far, plus the prefill stall of the
 * pending requests, plus its remaining iterations) would exceed its ATGT, when a not-yet-started
 * request's TTFT (waited + prefill of the pending batch) would exceed its target, or when the batch's
 * peak KV demand would exceed capacity.
 */
export function checkPlacement(
  replica: ReplicaView,
  incoming: PlacedRequest,
  options: ResolvedAladdinOptions,
): FeasibilityResult {
  const requests = [...replica.requests, incoming];
  const batch = requests.length;
  const { decode, prefill } = replica.perf;

  let weighted = 0;
  let pendingInput = 0;
  let minAtgt = Number.POSITIVE_INFINITY;
  for (const r of requests) {
    const length = expectedLength(r);
    weighted += r.inputTokens + r.generated + options.gamma * (length - r.generated);
    if (!r.started) pendingInput += r.inputTokens;
    if (r.atgtMs !== undefined) minAtgt = Math.min(minAtgt, r.atgtMs);
  }
  const iterationMs = decodeIterationMs(decode, batch, weighted);
  const prefillStallMs = prefillMs(prefill, pendingInput);
  const peakKvTokens = peakKvDemand(replica, requests);
  const prediction: ReplicaPrediction = { batch, iterationMs, prefillStallMs, peakKvTokens };

  const seqCap = seqCapacityOf(replica);
  if (batch > seqCap) return { ok: false, reason: 'seqs', predicted: batch, limit: seqCap, ...prediction };
  const kvCap = kvCapacityOf(replica);
  if (peakKvTokens > kvCap) {
    return { ok: false, reason: 'kv', predicted: peakKvTokens, limit: kvCap, ...prediction };
  }

  if (Number.isFinite(minAtgt)) {
    // Constraint (b): Σ(l_in + γ·l_out) ≤ θ·l_d(b), with l_d from the tightest ATGT in the batch.
    const limit = options.theta * maxDecodeContext(decode, batch, minAtgt);
    if (weighted > limit) {
      const tightest = requests.find((r) => r.atgtMs === minAtgt);
      return {
        ok: false,
        reason: 'atgt',
        ...(tightest ? { requestId: tightest.id } : {}),
        predicted: weighted,
        limit,
        ...prediction,
      };
    }
  }

  for (const r of requests) {
    if (r.started && r.atgtMs !== undefined) {
      // Constraint (d), looking forward: the pending prefill stalls this request once, and its
      // remaining tokens come at the new iteration time; its average must stay within target.
      const length = expectedLength(r);
      const total = (r.decodeMs ?? 0) + prefillStallMs + (length - r.generated) * iterationMs;
      const atgt = total / Math.max(length - 1, 1);
      if (atgt > r.atgtMs) {
        return {
          ok: false,
          reason: 'atgt',
          requestId: r.id,
          predicted: atgt,
          limit: r.atgtMs,
          ...prediction,
        };
      }
    }
    if (!r.started && r.ttftMs !== undefined) {
      // Constraint (c): the pending requests are prefilled together, so each waits for the whole batch.
      const ttft = (r.waitedMs ?? 0) + prefillStallMs;
      if (ttft > r.ttftMs) {
        return {
          ok: false,
          reason: 'ttft',
          requestId: r.id,
          predicted: ttft,
          limit: r.ttftMs,
          ...prediction,
        };
      }
    }
  }
  return { ok: true, ...prediction };
}
