import { decodeIterationMs, maxDecodeContext } from '../perf-model/decode-model.ts';
import type { PerformanceModel } from '../perf-model/performance-model.ts';
import { prefillMs } from '../perf-model/prefill-model.ts';
import { orderBy, type PlacementPolicy, type ReplicaState } from '../placement/placement-policy.ts';
import { type AladdinOptions, resolveAladdinOptions } from './replica-view.ts';
import type { WorkloadProfile } from './worker-config.ts';

/** Options of {@link aladdinPlacement}. */
export interface AladdinPlacementOptions extends AladdinOptions {
  /**
   * Performance model of a replica, by id. A replica without one is ordered by fullness only and
   * offered its own KV and sequence capacity. @default none
   */
  readonly perfOf?: ((replica: string) => PerformanceModel | undefined) | undefined;
  /** Decode SLO: average token generation time target, ms per output token. @default none */
  readonly atgtMs?: number | undefined;
  /**
   * Mean prompt and output tokens of the workload: they convert reservations (prompt + predicted
   * output) into Aladdin's γ-weighted context, and amortise the prefill stall every request costs
   * the running ones over an output (each running request sees about one prefill per request that
   * joins its batch). @default none (γ is taken as 1 and stalls are not amortised)
   */
  readonly workload?: WorkloadProfile | undefined;
  /**
   * Predicted output tokens of a request by its prompt — the prediction the gateway reserves with
   * (Aladdin section 2.3) — for the expected length of running sequences. @default the workload mean
   */
  readonly predictOutput?: ((inputTokens: number) => number) | undefined;
  /**
   * A low estimate of a running sequence's total output (e.g. a low quantile of the outputs of
   * similar prompts): its ATGT slack is computed as if it ended that soon, so a request that turns
   * out short is not stalled past its target by a long prefill. @default `predictOutput`
   */
  readonly shortOutput?: ((inputTokens: number) => number) | undefined;
  /**
   * Smallest value `predictOutput` returns: a reservation of at most `maxPrompt + this` tokens
   * guarantees a prompt of at most `maxPrompt`, which is how the prefill-stall bound is handed to
   * the store. @default 0
   */
  readonly minPredictedOutput?: number | undefined;
}

/**
 * Aladdin's request placement (section 4.2) as a gateway {@link PlacementPolicy}: replicas fullest
 * first by capacity norm — the L2 norm of reserved sequences and reserved tokens, each over the
 * replica's capacity — so the store's first-with-room pick is the best fit; stale replicas last.
 *
 * With a performance model and an ATGT target, each replica's SLO constraints become the room the
 * store may fill (`capacity`), so the store's fit does the bin packing:
 * - (b) the batch's weighted context stays within θ of the ATGT context limit `l_d(b + 1)` (Eq. 4),
 *   with the decode model's per-sequence cost raised by the amortised prefill stall;
 * - (d) the new request's prefill, with every prefill still pending on the replica, must fit the
 *   least ATGT slack of its running sequences (when the replica reports them): that bounds its
 *   prompt, and through the reservation (prompt + predicted output) the room;
 * - (e) KV: reservations hold prompt + predicted output, so they never exceed the KV capacity;
 * - sequences: at most `max_num_seqs`, and no more than the ATGT allows at an empty context.
 * The new request's own TTFT (constraint c) depends on how long it has waited, which the store's
 * pick decides; it is met by having enough replicas, which `fairway plan` searches for.
 */
export function aladdinPlacement(options: AladdinPlacementOptions = {}): PlacementPolicy {
  const opts = resolveAladdinOptions(options);
  const meanIn = options.workload?.meanInputTokens ?? 0;
  const meanOut = Math.max(options.workload?.meanOutputTokens ?? 1, 1);
  const predict = options.predictOutput ?? (() => meanOut);
  const short = options.shortOutput ?? predict;
  const minPred = options.minPredictedOutput ?? 0;
  // Reservations count the whole predicted output; the ATGT limit is on l_in + γ·l_out.
  const weighted = options.workload ? (meanIn + meanOut) / (meanIn + opts.gamma * meanOut) : 1;

  const capacity = (r: ReplicaState): { tokenCapacity: number; seqCapacity: number } => {
    const perf = options.perfOf?.(r.id);
    if (perf === undefined) return { tokenCapacity: r.tokenCapacity, seqCapacity: r.seqCapacity };
    let seqCapacity = Math.min(r.seqCapacity, perf.maxSeqs);
    let tokenCapacity = Math.min(r.tokenCapacity, perf.kvCapacityTokens);
    const atgt = options.atgtMs;
    if (atgt === undefined) return { tokenCapacity, seqCapacity };

    const stall = options.workload ? prefillMs(perf.prefill, meanIn) / meanOut : 0;
    const decode = { ...perf.decode, c2: perf.decode.c2 + stall };
    const batch = r.reservedSeqs + 1;
    if (decode.c2 > 0) seqCapacity = Math.min(seqCapacity, Math.floor((atgt - decode.c3) / decode.c2));
    tokenCapacity = Math.min(tokenCapacity, opts.theta * maxDecodeContext(decode, batch, atgt) * weighted);

    if (r.sequences !== undefined) {
      let context = 0;
      let seen = 0;
      for (const s of r.sequences) {
        context += s.inputTokens + s.generated;
        seen += s.inputTokens + predict(s.inputTokens);
      }
      const iterationMs = decodeIterationMs(perf.decode, batch, context + meanIn);
      let budget = Number.POSITIVE_INFINITY;
      // Requests reserved here that the replica does not report yet (dispatched this round) will
      // be prefilled with the next one: their prompts are their reservations less their outputs.
      const unseen = Math.max(0, r.reservedSeqs - r.sequences.length);
      let pending = unseen > 0 ? Math.max(0, r.reservedTokens - seen - unseen * minPred) : 0;
      for (const s of r.sequences) {
        if (!s.prefilled) {
          pending += s.inputTokens;
          continue;
        }
        if (s.generated < 1) continue;
        const length = Math.max(short(s.inputTokens), s.generated + 1);
        const slack = opts.theta * atgt * (length - 1) - s.decodeMs - (length - s.generated) * iterationMs;
        // A sequence already past its target is lost; holding the replica for it saves nothing.
        if (slack >= 0) budget = Math.min(budget, slack);
      }
      if (Number.isFinite(budget)) {
        const maxPrompt =
          perf.prefill.k1 > 0
            ? (budget - perf.prefill.c1) / perf.prefill.k1 - pending
            : Number.POSITIVE_INFINITY;
        tokenCapacity = Math.min(
          tokenCapacity,
          maxPrompt < 1 ? r.reservedTokens : r.reservedTokens + maxPrompt + minPred,
        );
      }
    }
    return { tokenCapacity: Math.max(0, Math.floor(tokenCapacity)), seqCapacity: Math.max(0, seqCapacity) };
  };

  const policy: PlacementPolicy = {
    name: 'aladdin',
    order: (replicas: readonly ReplicaState[]) => orderBy(replicas, (r) => [-fullness(r)]),
    forDispatcher: () => policy,
    ...(options.perfOf !== undefined ? { capacity } : {}),
  };
  return policy;
}

function fullness(r: ReplicaState): number {
  const seqs = r.seqCapacity > 0 ? Math.max(r.reservedSeqs, r.running) / r.seqCapacity : 1;
  const tokens = r.tokenCapacity > 0 ? r.reservedTokens / r.tokenCapacity : 1;
  return Math.hypot(seqs, Math.max(tokens, r.kvUsage));
}
