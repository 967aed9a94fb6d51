import { decodeIterationMs, maxDecodeContext } from '../perf-model/decode-model.ts';
import type { PerformanceModel } from '../perf-model/performance-model.ts';
import { prefillMs } from '../perf-model/prefill-model.ts';
import {
  byId,
  type PlacementCandidate,
  type PlacementContext,
  type PlacementPolicy,
  type ReplicaState,
  type SequenceProgress,
} from '../placement/placement-policy.ts';
import { type AladdinOptions, resolveAladdinOptions } from './replica-view.ts';
import { futureKvPeak, type KvCourse } from './slo-feasibility.ts';
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
   * TTFT target, ms from arrival: constraint (c) — the prefill of the requests placed on a replica
   * and not yet prefilled, with the new one, must end within what is left of it. @default none
   */
  readonly ttftMs?: number | undefined;
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

/** The room the store may fill on one replica, and its constraint-(c) prompt bound. */
interface ReplicaBounds {
  readonly tokenCapacity: number;
  readonly seqCapacity: number;
  /** Largest next prompt whose prefill, with the replica's pending ones, ends within the TTFT left. */
  readonly ttftPrompt: number;
  /** `tokenCapacity` comes from the replica's future KV demand (see {@link timeIndexedKvRoom}). */
  readonly timeIndexedKv: boolean;
}

/**
 * Constraint (e), time-indexed (Aladdin section 4.2): the reservation total the store may reach on
 * `r` so that, whenever the next request's reservation is held in full from now on, the replica's
 * KV demand stays within `kvCapacity` at every future iteration. Each sequence the replica reports
 * grows one token per iteration from its context now up to its reservation, then frees its cache;
 * reservations no report covers yet (dispatched since) are held in full, by the store, which
 * compares what it holds with this total. Where sequences finish
 * before the others have grown, this exceeds the sum-of-reservations bound; where one has streamed
 * past what the last report says, it is below it. Undefined when the replica does not report its
 * sequences with their reservations.
 */
export function timeIndexedKvRoom(r: ReplicaState, kvCapacity: number): number | undefined {
  const sequences = r.sequences;
  if (sequences === undefined) return undefined;
  const demand = demandOf(sequences);
  if (demand === undefined) return undefined;
  // The store compares its own total with this: whatever it holds beyond the reported
  // reservations (dispatched since the reports) counts in full on top of the peak. This does not
  // read the view's reservations, which may lag the reports (another dispatcher's dispatch this
  // one has not heard of yet) and would then hide room the reports show.
  return demand.reported + kvCapacity - demand.peak;
}

/**
 * The future KV peak of a replica's reported sequences and the reservations they account for,
 * computed once per report list (placement asks for every request; the list changes a few times a
 * second). Undefined when a sequence is reported without its reservation.
 */
const demands = new WeakMap<readonly SequenceProgress[], { peak: number; reported: number } | undefined>();
function demandOf(sequences: readonly SequenceProgress[]): { peak: number; reported: number } | undefined {
  if (demands.has(sequences)) return demands.get(sequences);
  const courses: KvCourse[] = [];
  let reported = 0;
  for (const s of sequences) {
    if (s.reservedTokens === undefined) {
      demands.set(sequences, undefined);
      return undefined;
    }
    const context = s.inputTokens + s.generated;
    reported += s.reservedTokens;
    courses.push({ context, remaining: Math.max(1, s.reservedTokens - context) });
  }
  const demand = { peak: futureKvPeak(courses), reported };
  demands.set(sequences, demand);
  return demand;
}

/**
 * Aladdin's constraints (section 4.2, (b)–(e)) as the room the store may fill on each replica, for
 * a request that has waited `waitedMs`; what {@link aladdinPlacement} and the SLO-aware baselines
 * ({@link sloAwarePlacement}) share, so that they differ only in the order they try replicas.
 *
 * With a performance model and SLO targets:
 * - (b) the batch's weighted context stays within θ of the ATGT context limit `l_d(b + 1)` (Eq. 4),
 *   with the decode model's per-sequence cost raised by the amortised prefill stall;
 * - (c) the new request's prefill, with every prompt placed on the replica and not yet prefilled,
 *   after the engine's step in flight, must end within its TTFT less the time it has waited: that
 *   bounds its prompt — except on the
 *   replica where a prompt finishes soonest, when no replica can meet it (Algorithm 1 would open a
 *   new bin; a fixed fleet gives the request its earliest first token instead of holding it);
 * - (d) the new request's prefill, with every prefill still pending, must fit the least ATGT slack
 *   of the running sequences (when the replica reports them), which bounds its prompt too;
 * - (e) KV: where the replica reports its sequences with their reservations, the batch's future
 *   KV demand stays within capacity at every iteration with the new reservation held in full
 *   ({@link timeIndexedKvRoom}); otherwise the sum of reservations (prompt + reserved output) does;
 * - sequences: at most `max_num_seqs`, and no more than the ATGT allows at an empty context.
 * A prompt bound reaches the store through the reservation (prompt + predicted output): a
 * reservation of at most `bound + minPredictedOutput` tokens guarantees a prompt of at most `bound`.
 */
export function aladdinBounds(
  options: AladdinPlacementOptions = {},
): (replica: ReplicaState, waitedMs: number) => ReplicaBounds {
  const opts = resolveAladdinOptions(options);
  const meanIn = options.workload?.meanInputTokens ?? 0;
  const meanOut = Math.max(options.workload?.meanOutputTokens ?? 1, 1);
  const predict = options.predictOutput ?? (() => meanOut);
  const short = options.shortOutput ?? predict;
  const minPred = options.minPredictedOutput ?? 0;
  // Reservations count the whole predicted output; the ATGT limit is on l_in + γ·l_out.
  const weighted = options.workload ? (meanIn + meanOut) / (meanIn + opts.gamma * meanOut) : 1;
  const promptRoom = (r: ReplicaState, maxPrompt: number): number =>
    maxPrompt < 1 ? r.reservedTokens : r.reservedTokens + maxPrompt + minPred;

  return (r, waitedMs) => {
    const perf = options.perfOf?.(r.id);
    const kvCapacity =
      perf === undefined ? r.tokenCapacity : Math.min(r.tokenCapacity, perf.kvCapacityTokens);
    const kvRoom = timeIndexedKvRoom(r, kvCapacity);
    const timeIndexedKv = kvRoom !== undefined;
    if (perf === undefined)
      return {
        tokenCapacity: Math.max(0, Math.floor(kvRoom ?? r.tokenCapacity)),
        seqCapacity: r.seqCapacity,
        ttftPrompt: Number.POSITIVE_INFINITY,
        timeIndexedKv,
      };
    let seqCapacity = Math.min(r.seqCapacity, perf.maxSeqs);
    let tokenCapacity = kvRoom ?? kvCapacity;

    // Prompts on the replica not yet prefilled: they are prefilled with the next one.
    let pending = 0;
    if (r.sequences !== undefined) {
      let seen = 0;
      for (const s of r.sequences) {
        seen += s.reservedTokens ?? s.inputTokens + predict(s.inputTokens);
        if (!s.prefilled) pending += s.inputTokens;
      }
      // Requests reserved here that the replica does not report yet (dispatched this round): their
      // prompts are their reservations less their outputs.
      const unseen = Math.max(0, r.reservedSeqs - r.sequences.length);
      if (unseen > 0) pending += Math.max(0, r.reservedTokens - seen - unseen * minPred);
    }

    let ttftPrompt = Number.POSITIVE_INFINITY;
    if (options.ttftMs !== undefined && perf.prefill.k1 > 0)
      ttftPrompt =
        (options.ttftMs - waitedMs - (r.stepRemainingMs ?? 0) - perf.prefill.c1) / perf.prefill.k1 - pending;

    const atgt = options.atgtMs;
    if (atgt === undefined)
      return {
        tokenCapacity: Math.max(0, Math.floor(tokenCapacity)),
        seqCapacity,
        ttftPrompt,
        timeIndexedKv,
      };

    const stall = options.workload ? prefillMs(perf.prefill, meanIn) / meanOut : 0;
    const decode = { ...perf.decode, c2: perf.decode.c2 + stall };
    const batch = r.reservedSeqs + 1;
    if (decode.c2 > 0) seqCapacity = Math.min(seqCapacity, Math.floor((atgt - decode.c3) / decode.c2));
    tokenCapacity = Math.min(tokenCapacity, opts.theta * maxDecodeContext(decode, batch, atgt) * weighted);

    if (r.sequences !== undefined) {
      let context = 0;
      for (const s of r.sequences) context += s.inputTokens + s.generated;
      const iterationMs = decodeIterationMs(perf.decode, batch, context + meanIn);
      let budget = Number.POSITIVE_INFINITY;
      for (const s of r.sequences) {
        if (!s.prefilled || s.generated < 1) continue;
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
        tokenCapacity = Math.min(tokenCapacity, promptRoom(r, maxPrompt));
      }
    }
    return {
      tokenCapacity: Math.max(0, Math.floor(tokenCapacity)),
      seqCapacity: Math.max(0, seqCapacity),
      ttftPrompt,
      timeIndexedKv,
    };
  };
}

/**
 * The candidates of one placement in `order`: each fresh replica with the room Aladdin's
 * constraints (b)–(e) leave on it for a request that has waited `ctx.waitedMs` (stale replicas get
 * none). Constraint (c) is waived on the replica with the largest prompt bound when a prompt that
 * misses there misses everywhere — see {@link aladdinBounds}.
 */
function boundedCandidates(
  ordered: readonly ReplicaState[],
  bounds: (replica: ReplicaState, waitedMs: number) => ReplicaBounds,
  minPredictedOutput: number,
  ctx: PlacementContext,
): PlacementCandidate[] {
  const waited = ctx.waitedMs ?? 0;
  const fresh = ordered.filter((r) => !r.stale).map((r) => ({ r, b: bounds(r, waited) }));
  let soonest: ReplicaState | undefined;
  let soonestPrompt = Number.NEGATIVE_INFINITY;
  for (const { r, b } of fresh)
    if (b.ttftPrompt > soonestPrompt) {
      soonest = r;
      soonestPrompt = b.ttftPrompt;
    }
  return fresh.map(({ r, b }) => {
    let tokenCapacity = b.tokenCapacity;
    if (r !== soonest && Number.isFinite(b.ttftPrompt)) {
      const room = b.ttftPrompt < 1 ? r.reservedTokens : r.reservedTokens + b.ttftPrompt + minPredictedOutput;
      tokenCapacity = Math.max(0, Math.min(tokenCapacity, Math.floor(room)));
    }
    return { replica: r, tokenCapacity, seqCapacity: b.seqCapacity, timeIndexedKv: b.timeIndexedKv };
  });
}

/**
 * Aladdin's request placement, Algorithm 1 (section 4.2), as a gateway {@link PlacementPolicy}:
 * replicas sorted by capacity norm from fullest to emptiest — the L2 norm of reserved sequences
 * and reserved tokens, each over the replica's capacity — and the request goes to the first on
 * which constraints (b)–(e) hold ({@link aladdinBounds}): the store reserves it on the first
 * candidate whose room takes its reservation, in the same atomic step that picks it (one Redis
 * round trip), so the store's first-with-room pick is Algorithm 1's first feasible bin. Stale
 * replicas come last with no room. Without a performance model replicas are ordered by fullness
 * only and offered their own sequence capacity, and KV room by constraint (e) alone: time-indexed
 * where the replica's sequences are reported with their reservations ({@link timeIndexedKvRoom}),
 * else the sum of reservations.
 */
export function aladdinPlacement(options: AladdinPlacementOptions = {}): PlacementPolicy {
  const bounds = aladdinBounds(options);
  const minPred = options.minPredictedOutput ?? 0;
  const order = (replicas: readonly ReplicaState[]) => byCapacityNorm(replicas);
  const policy: PlacementPolicy = {
    name: 'aladdin',
    order,
    forDispatcher: () => policy,
    capacity: (r: ReplicaState) => {
      const b = bounds(r, 0);
      return { tokenCapacity: b.tokenCapacity, seqCapacity: b.seqCapacity };
    },
    place: (replicas: readonly ReplicaState[], ctx: PlacementContext) =>
      boundedCandidates(order(replicas), bounds, minPred, ctx),
  };
  return policy;
}

/**
 * A baseline placement (round-robin, JSQ, power of two, …) given the same information as Aladdin:
 * it tries replicas in its own order, but each replica offers only the room Aladdin's constraints
 * (b)–(e) leave on it ({@link aladdinBounds}: SLO-aware capacity from the performance model and the
 * replica's sequence reports). Comparing it with {@link aladdinPlacement} isolates the order —
 * best fit by capacity norm — from the SLO knowledge.
 */
export function sloAwarePlacement(base: PlacementPolicy, options: AladdinPlacementOptions): PlacementPolicy {
  const bounds = aladdinBounds(options);
  const minPred = options.minPredictedOutput ?? 0;
  return {
    name: base.name,
    order: (replicas) => base.order(replicas),
    forDispatcher: (id) => sloAwarePlacement(base.forDispatcher(id), options),
    capacity: (r) => {
      const b = bounds(r, 0);
      return { tokenCapacity: b.tokenCapacity, seqCapacity: b.seqCapacity };
    },
    place: (replicas, ctx) => boundedCandidates(base.order(replicas), bounds, minPred, ctx),
  };
}

/** Fresh replicas fullest first by capacity norm (ties by id), then stale ones by id. */
function byCapacityNorm(replicas: readonly ReplicaState[]): readonly ReplicaState[] {
  const fresh: { r: ReplicaState; norm: number }[] = [];
  const stale: ReplicaState[] = [];
  for (const r of replicas) {
    if (r.stale) stale.push(r);
    else fresh.push({ r, norm: fullness(r) });
  }
  fresh.sort((a, b) => b.norm - a.norm || byId(a.r, b.r));
  stale.sort(byId);
  return [...fresh.map((f) => f.r), ...stale];
}

/**
 * Aladdin's `capacity_norm`, normalised: the L2 norm of the replica's sequences and tokens, each
 * over its capacity (the larger of what the store reserved and what the engine reports).
 */
function fullness(r: ReplicaState): number {
  const seqs = r.seqCapacity > 0 ? Math.max(r.reservedSeqs, r.running) / r.seqCapacity : 1;
  const tokens = r.tokenCapacity > 0 ? r.reservedTokens / r.tokenCapacity : 1;
  return Math.hypot(seqs, Math.max(tokens, r.kvUsage));
}
