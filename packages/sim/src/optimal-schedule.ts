import {
  type EngineConfig,
  EngineModel,
  LinearStepCostModel,
  type PlannedBatch,
  type ResolvedEngineConfig,
  resolveEngineConfig,
  type StepCostCoefficients,
} from '@fairway/perf';
import type { Highs } from 'highs';
import { SimError, SimErrorCode } from './errors.ts';

/**
 * Optimal schedules for one engine, after InferMax section 3.3: the constraint-satisfaction problem
 * over a sequence of batches, written as a mixed-integer linear program and solved with HiGHS.
 *
 * What is modelled (request i, batch j; state after batch j, j = 0 the initial state):
 * - `m[i,j]` computed KV tokens (the engine's `computed`), `G[i,j]` tokens generated, `g[i,j]`
 *   generates a token in batch j, `e[i,j]` evicted (preempted by recompute) before batch j,
 *   `d[i,j]` in the decode phase during batch j, `dec[i,j]` decodes (1 token), `pf[i,j]` prefill
 *   tokens processed, `z[i,j]` in the batch — the paper's I, m, g, e, d, c and cz.
 * - The paper's constraints (1)–(5): termination `Σ_j g = O`; recompute after an eviction, which
 *   the engine does by making the prompt `I + G` (the paper's non-decreasing input size: after an
 *   eviction everything known, prompt and output so far, is prefilled again); memory is zero after
 *   an eviction and grows by what is processed; a decoding request processes at most 1 token; per
 *   batch at most C tokens, at most P prompt tokens, the KV cache within M and at most R_max
 *   requests running. A token is generated exactly when every known token is computed
 *   (`g = 1 ⇔ m[i,j] = I + G[i,j-1]`).
 * - The engine model's own rules where they are stricter than the paper's: the KV cache is counted
 *   in blocks of `blockSize` tokens (`blocks ≥ tokens / blockSize`, integer); a request admitted for
 *   a prefill holds its whole prompt from its first chunk (vLLM v0 allocates the prompt at
 *   admission); a decode holds the token it computes; a request frees its blocks when it finishes.
 *   Without `chunkedPrefill` a prefill completes in the batch it starts in.
 * - Batch time is the engine's {@link LinearStepCostModel} exactly: `max(floor, base + a·prefill +
 *   b·decodes) + kv·K + q·Σchunk² (+ all-reduce)`, the max written as two lower bounds on `t[j]`;
 *   `K` (KV read) uses `kr[i,j] ≥ m[i,j-1] − L·(1 − z[i,j])`; `Σchunk²` is bounded below by tangents
 *   of `c²`, exact at every chunk size a prefill without chunking can take (`I + G`), within
 *   `q·(spacing/2)²` per chunk under chunked prefill (the returned schedule is priced exactly by
 *   replaying it through the engine model, so the gap shows in `objectiveMs` vs the replay).
 * - Batch j starts at `S[j] ≥ S[j-1] + t[j-1]` and no earlier than the arrival of each request it
 *   runs (the paper's online setting, `Acc_j ≥ T_i`).
 * - Objective: `makespan` (the paper's "latency": the time to finish every request) or
 *   `total-latency` (Σ over requests of finish − arrival).
 *
 * Simplifications, stated: output lengths are known (as in the paper); the number of batches J is
 * bounded by `upper bound / cheapest batch` where the upper bound is the best engine heuristic's
 * value, so every schedule at least as good fits in J batches and the optimum over J batches is the
 * optimum over all schedules — unless J is capped by {@link OPTIMAL_LIMITS}, which the result
 * reports (`exact: false`). The engine's watermark is not applied (it is the built-in scheduler's
 * admission margin, not capacity). Eviction-free optimal schedules forbid evictions (`e ≡ 0`) under
 * the same memory rules rather than reserving `input + max_tokens`.
 */

/** A request of an instance: its prompt, its true output length, and when it arrives. */
export interface ScheduleRequest {
  readonly id: string;
  readonly inputTokens: number;
  readonly outputTokens: number;
  /** Arrival, ms from the start. @default 0 (offline, as InferMax section 4) */
  readonly arrivalMs?: number | undefined;
}

/** What to minimise: the time to finish everything, or the sum of request latencies. */
export type ScheduleObjective = 'makespan' | 'total-latency';

/** Options of {@link solveOptimalSchedule} and {@link scheduleLowerBound}. */
export interface OptimalScheduleOptions {
  /** The engine whose batches are scheduled: C, P, KV blocks, R_max, chunking, cost model. */
  readonly engine: EngineConfig;
  /** @default 'makespan' */
  readonly objective?: ScheduleObjective | undefined;
  /** Whether the optimal schedule may evict (preempt by recompute). @default true */
  readonly preemption?: boolean | undefined;
  /** Whether a batch may mix prefills and decodes (hybrid batching). @default true */
  readonly hybrid?: boolean | undefined;
  /** HiGHS time limit, seconds; a solve stopped by it reports `status: 'feasible'`. @default 60 */
  readonly timeLimitS?: number | undefined;
}

/** Size limits of the exact solver; `fairway sim --policy optimal` reports them when exceeded. */
export const OPTIMAL_LIMITS = {
  /** Most requests in an instance. */
  maxRequests: 8,
  /** Most batches the model is built over; a larger bound J makes the result not exact. */
  maxBatches: 60,
  /** Most prompt + output tokens of one request. */
  maxTokensPerRequest: 4096,
} as const;

/** An optimal (or best found) schedule, replayed through the engine model. */
export interface OptimalSchedule {
  /** `optimal`: proven within HiGHS's gap; `feasible`: a time limit stopped the search. */
  readonly status: 'optimal' | 'feasible';
  /** True when J covers every schedule as good as the best heuristic (see the module comment). */
  readonly exact: boolean;
  readonly objective: ScheduleObjective;
  /** The schedule's objective, priced by replaying it through the engine model, ms. */
  readonly valueMs: number;
  /** Valid lower bound on the optimum, ms (the solver's dual bound, or the analytic bound). */
  readonly lowerBoundMs: number;
  /** The MILP's own objective value (equal to `valueMs` up to the chunk² approximation), ms. */
  readonly milpValueMs: number;
  readonly makespanMs: number;
  readonly totalLatencyMs: number;
  readonly preemptions: number;
  /** The batches, in order, each with its start time, ms. */
  readonly batches: readonly (PlannedBatch & { readonly startMs: number })[];
  /** Per request: first token and finish, ms. */
  readonly requests: readonly {
    readonly id: string;
    readonly firstTokenMs: number;
    readonly finishMs: number;
  }[];
  /** The model's size. */
  readonly size: { readonly batches: number; readonly columns: number; readonly rows: number };
  readonly solveMs: number;
}

/** A schedule's value measured by replay. */
export interface ScheduleOutcome {
  readonly makespanMs: number;
  readonly totalLatencyMs: number;
  readonly preemptions: number;
  readonly steps: number;
  readonly requests: readonly {
    readonly id: string;
    readonly firstTokenMs: number;
    readonly finishMs: number;
  }[];
  /** The batches run, as plans {@link replaySchedule} takes. */
  readonly batches: readonly PlannedBatch[];
  /** When each of those batches started, ms. */
  readonly batchStartsMs: readonly number[];
}

/** The value of a schedule outcome under an objective. */
export function objectiveValue(outcome: ScheduleOutcome, objective: ScheduleObjective): number {
  return objective === 'makespan' ? outcome.makespanMs : outcome.totalLatencyMs;
}

/**
 * Runs the engine's built-in scheduler (its config: vLLM-style, Sarathi-style, eviction-free, …)
 * over an instance, feeding each request at its arrival; the engine idles until the next arrival
 * when it has nothing to do.
 */
export function runHeuristic(requests: readonly ScheduleRequest[], engine: EngineConfig): ScheduleOutcome {
  return drive(requests, engine, (model) => model.step());
}

/**
 * Replays a schedule through the engine model: each batch starts when the previous one ends, or
 * later when one of its requests has not arrived; `stepPlanned` enforces the KV, budget and phase
 * rules and prices each batch. Throws `INVALID_BATCH_PLAN` when a batch breaks a rule.
 */
export function replaySchedule(
  requests: readonly ScheduleRequest[],
  engine: EngineConfig,
  batches: readonly PlannedBatch[],
): ScheduleOutcome {
  let next = 0;
  return drive(
    requests,
    engine,
    (model) => model.stepPlanned(batches[next++]!),
    () => next < batches.length,
    (now) => {
      const b = batches[next];
      let start = now;
      for (const r of b?.run ?? []) start = Math.max(start, arrivalOf(requests, r.id));
      return start;
    },
  );
}

function arrivalOf(requests: readonly ScheduleRequest[], id: string): number {
  const r = requests.find((q) => q.id === id);
  if (!r) throw new SimError(SimErrorCode.INVALID_BATCH_PLAN, `unknown request "${id}" in the schedule`);
  return r.arrivalMs ?? 0;
}

function drive(
  requests: readonly ScheduleRequest[],
  engine: EngineConfig,
  step: (model: EngineModel) => ReturnType<EngineModel['step']>,
  more?: () => boolean,
  startOf?: (now: number) => number,
): ScheduleOutcome {
  const model = new EngineModel(engine);
  const order = [...requests].sort((a, b) => (a.arrivalMs ?? 0) - (b.arrivalMs ?? 0));
  const first = new Map<string, number>();
  const finish = new Map<string, number>();
  let now = 0;
  let added = 0;
  let steps = 0;
  let preemptions = 0;
  const plans: PlannedBatch[] = [];
  const starts: number[] = [];
  const admit = (): void => {
    while (added < order.length && (order[added]!.arrivalMs ?? 0) <= now) {
      const r = order[added++]!;
      model.add({
        id: r.id,
        inputTokens: r.inputTokens,
        outputTokens: r.outputTokens,
        maxTokens: r.outputTokens,
      });
    }
  };
  for (;;) {
    if (startOf && more) {
      if (!more()) break;
      now = startOf(now);
    } else if (!model.hasWork()) {
      if (added >= order.length) break;
      now = Math.max(now, order[added]!.arrivalMs ?? 0);
    }
    admit();
    const r = step(model);
    plans.push(model.lastBatch());
    starts.push(now);
    steps++;
    const end = now + r.durationMs;
    for (const e of r.events) {
      if (e.kind === 'first-token' && !first.has(e.id)) first.set(e.id, end);
      else if (e.kind === 'finished') {
        if (e.ignored)
          throw new SimError(
            SimErrorCode.NO_SCHEDULE,
            `the engine cannot fit request "${e.id}" in its KV cache`,
            {
              subject: e.id,
            },
          );
        finish.set(e.id, end);
      } else if (e.kind === 'preempted') preemptions++;
    }
    now = end;
    if (steps > 10_000_000) throw new SimError(SimErrorCode.NO_SCHEDULE, 'the engine does not terminate');
  }
  let makespanMs = 0;
  let totalLatencyMs = 0;
  const out: { id: string; firstTokenMs: number; finishMs: number }[] = [];
  for (const r of requests) {
    const f = finish.get(r.id);
    if (f === undefined)
      throw new SimError(SimErrorCode.NO_SCHEDULE, `request "${r.id}" did not finish in the schedule`, {
        subject: r.id,
      });
    makespanMs = Math.max(makespanMs, f);
    totalLatencyMs += f - (r.arrivalMs ?? 0);
    out.push({ id: r.id, firstTokenMs: first.get(r.id) ?? f, finishMs: f });
  }
  return {
    makespanMs,
    totalLatencyMs,
    preemptions,
    steps,
    requests: out,
    batches: plans,
    batchStartsMs: starts,
  };
}

/** The engine rules the MILP uses, from a resolved config. */
interface Rules {
  readonly config: ResolvedEngineConfig;
  readonly c: StepCostCoefficients;
  readonly budget: number;
  readonly prefillBudget: number;
  readonly blockSize: number;
  readonly blocks: number;
  readonly chunked: boolean;
}

function rulesOf(engine: EngineConfig): Rules {
  const config = resolveEngineConfig({ ...engine, watermark: 0 });
  const cost = config.costModel;
  if (!(cost instanceof LinearStepCostModel))
    throw new SimError(
      SimErrorCode.INSTANCE_TOO_LARGE,
      `the optimal-schedule solver needs the linear InferMax cost model, not "${cost.name}"`,
    );
  return {
    config,
    c: cost.coefficients,
    budget: config.maxNumBatchedTokens,
    prefillBudget: Math.min(config.maxNumPrefillTokens, config.maxNumBatchedTokens),
    blockSize: config.blockSize,
    blocks: Math.floor(config.kvCapacityTokens / config.blockSize),
    chunked: config.chunkedPrefill,
  };
}

/** Rejects instances the solver cannot take, naming the limit. */
function checkInstance(requests: readonly ScheduleRequest[], rules: Rules): void {
  const tooLarge = (msg: string): never => {
    throw new SimError(SimErrorCode.INSTANCE_TOO_LARGE, msg);
  };
  if (requests.length === 0) tooLarge('the instance has no requests');
  if (requests.length > OPTIMAL_LIMITS.maxRequests)
    tooLarge(
      `${requests.length} requests: the optimal-schedule solver takes at most ${OPTIMAL_LIMITS.maxRequests} (OPTIMAL_LIMITS.maxRequests)`,
    );
  const ids = new Set<string>();
  for (const r of requests) {
    if (ids.has(r.id)) tooLarge(`duplicate request id "${r.id}"`);
    ids.add(r.id);
    if (
      !Number.isInteger(r.inputTokens) ||
      r.inputTokens < 1 ||
      !Number.isInteger(r.outputTokens) ||
      r.outputTokens < 1
    )
      tooLarge(`request "${r.id}": inputTokens and outputTokens must be integers ≥ 1`);
    const longest = r.inputTokens + r.outputTokens - 1;
    if (r.outputTokens > OPTIMAL_LIMITS.maxBatches)
      tooLarge(
        `request "${r.id}" generates ${r.outputTokens} tokens, one per batch: at most ${OPTIMAL_LIMITS.maxBatches} (OPTIMAL_LIMITS.maxBatches)`,
      );
    if (r.inputTokens + r.outputTokens > OPTIMAL_LIMITS.maxTokensPerRequest)
      tooLarge(
        `request "${r.id}" has ${r.inputTokens + r.outputTokens} tokens: at most ${OPTIMAL_LIMITS.maxTokensPerRequest} (OPTIMAL_LIMITS.maxTokensPerRequest)`,
      );
    if (Math.ceil(longest / rules.blockSize) > rules.blocks)
      tooLarge(
        `request "${r.id}" needs ${longest} KV tokens, more than the engine's ${rules.blocks * rules.blockSize}`,
      );
    if (!rules.chunked && r.inputTokens > rules.prefillBudget)
      tooLarge(
        `request "${r.id}": a ${r.inputTokens}-token prompt exceeds the prefill budget ${rules.prefillBudget} without chunked prefill`,
      );
  }
}

/** The heuristics whose schedules lie in the solver's space, for the upper bound that sizes J. */
function heuristicConfigs(
  requests: readonly ScheduleRequest[],
  engine: EngineConfig,
  rules: Rules,
  preemption: boolean,
  hybrid: boolean,
): EngineConfig[] {
  const out: EngineConfig[] = [];
  // Without chunking the engine runs a prompt over the prefill budget alone, outside the solver's
  // rules: such heuristics only bound the optimum when every prompt and refill fits the budget.
  const unchunkedOk = requests.every((r) => r.inputTokens + r.outputTokens - 1 <= rules.prefillBudget);
  const base = { ...engine, watermark: 0, costModel: rules.config.costModel };
  const modes: ('recompute' | 'eviction-free')[] = preemption
    ? ['recompute', 'eviction-free']
    : ['eviction-free'];
  for (const mode of modes) {
    if (unchunkedOk)
      out.push({ ...base, batchPolicy: 'prefill-priority', chunkedPrefill: false, preemption: mode });
    if (rules.chunked)
      out.push({ ...base, batchPolicy: 'prefill-priority', chunkedPrefill: true, preemption: mode });
    if (hybrid) {
      if (rules.chunked)
        out.push({ ...base, batchPolicy: 'decode-priority', chunkedPrefill: true, preemption: mode });
      if (unchunkedOk)
        out.push({ ...base, batchPolicy: 'decode-priority', chunkedPrefill: false, preemption: mode });
    }
  }
  return out;
}

/**
 * The best value any in-space heuristic reaches (an upper bound on the optimum). Its schedule is
 * valid for the solver when the heuristic never runs an over-budget prompt alone, which
 * {@link checkInstance} rules out, and reserves no more than the solver's memory rules.
 */
function heuristicUpperBound(
  requests: readonly ScheduleRequest[],
  engine: EngineConfig,
  rules: Rules,
  objective: ScheduleObjective,
  preemption: boolean,
  hybrid: boolean,
): ScheduleOutcome | undefined {
  let best: ScheduleOutcome | undefined;
  for (const cfg of heuristicConfigs(requests, engine, rules, preemption, hybrid)) {
    try {
      const o = runHeuristic(requests, cfg);
      if (!best || objectiveValue(o, objective) < objectiveValue(best, objective)) best = o;
    } catch (err) {
      // An eviction-free heuristic reserving input + max_tokens may not fit at all: no bound from it.
      if (!(err instanceof SimError && err.code === SimErrorCode.NO_SCHEDULE)) throw err;
    }
  }
  return best;
}

/** The cheapest possible non-empty batch, ms. */
function cheapestBatchMs(c: StepCostCoefficients): number {
  return Math.max(c.floorMs, c.baseMs + Math.min(c.perPrefillTokenMs, c.perDecodeSeqMs)) + c.allReduceBaseMs;
}

/**
 * A lower bound on the optimal makespan that needs no solver: every request processes at least its
 * prompt and one token per further output token, at least `max O` batches run (one token per
 * request per batch), each costs at least the floor, and KV read and prefill attention cost ≥ 0.
 * Total latency is at least the sum over requests of the same bound for the request alone.
 */
export function analyticLowerBound(
  requests: readonly ScheduleRequest[],
  engine: EngineConfig,
  objective: ScheduleObjective = 'makespan',
): number {
  const { c } = rulesOf(engine);
  const one = (rs: readonly ScheduleRequest[]): number => {
    const nb = Math.max(...rs.map((r) => r.outputTokens));
    let linear = 0;
    let tokens = 0;
    for (const r of rs) {
      linear +=
        c.perPrefillTokenMs * r.inputTokens +
        Math.min(c.perPrefillTokenMs, c.perDecodeSeqMs) * (r.outputTokens - 1);
      tokens += r.inputTokens + r.outputTokens - 1;
    }
    return (
      Math.max(nb * c.floorMs, nb * c.baseMs + linear) +
      nb * c.allReduceBaseMs +
      c.allReducePerTokenMs * tokens
    );
  };
  if (objective === 'makespan') {
    const lastArrival = Math.max(...requests.map((r) => r.arrivalMs ?? 0));
    const latest = requests.filter((r) => (r.arrivalMs ?? 0) === lastArrival);
    return Math.max(one(requests), lastArrival + one(latest));
  }
  return requests.reduce((sum, r) => sum + one([r]), 0);
}

function num(v: number): string {
  const r = Math.abs(v) < 1e-12 ? 0 : v;
  return Number(r.toPrecision(12)).toString();
}

/** CPLEX LP text, written row by row. */
class Lp {
  readonly rows: string[] = [];
  readonly bounds: string[] = [];
  readonly ints: string[] = [];
  readonly bins: string[] = [];
  readonly cols = new Set<string>();

  col(name: string, kind: 'cont' | 'int' | 'bin', lo: number, hi: number | undefined): string {
    this.cols.add(name);
    if (kind === 'bin') this.bins.push(name);
    else {
      if (kind === 'int') this.ints.push(name);
      this.bounds.push(hi === undefined ? ` ${name} >= ${num(lo)}` : ` ${num(lo)} <= ${name} <= ${num(hi)}`);
    }
    return name;
  }

  row(terms: readonly (readonly [number, string])[], op: '<=' | '>=' | '=', rhs: number): void {
    const parts: string[] = [];
    for (const [coef, v] of terms) {
      if (coef === 0) continue;
      parts.push(`${coef < 0 ? '-' : '+'} ${num(Math.abs(coef))} ${v}`);
      if (parts.length % 8 === 0) parts.push('\n  ');
    }
    if (parts.length === 0) parts.push('0 zero');
    this.rows.push(` r${this.rows.length}: ${parts.join(' ')} ${op} ${num(rhs)}`);
  }

  text(objective: readonly (readonly [number, string])[], relax: boolean): string {
    const obj = objective.map(([c, v]) => `${c < 0 ? '-' : '+'} ${num(Math.abs(c))} ${v}`).join(' ');
    const chunks = (xs: readonly string[]) => {
      const out: string[] = [];
      for (let i = 0; i < xs.length; i += 10) out.push(` ${xs.slice(i, i + 10).join(' ')}`);
      return out;
    };
    return [
      'Minimize',
      ` obj: ${obj}`,
      'Subject To',
      ...this.rows,
      'Bounds',
      ...this.bounds,
      ...(relax ? this.bins.map((b) => ` 0 <= ${b} <= 1`) : []),
      ' zero = 0',
      ...(relax ? [] : ['General', ...chunks(this.ints), 'Binary', ...chunks(this.bins)]),
      'End',
      '',
    ].join('\n');
  }
}

/** The MILP of an instance over J batches, with the names needed to read a schedule back. */
interface Model {
  readonly lp: Lp;
  readonly objective: readonly (readonly [number, string])[];
  readonly J: number;
}

const v = (name: string, i: number, j: number) => `${name}_${i}_${j}`;

function buildModel(
  requests: readonly ScheduleRequest[],
  rules: Rules,
  J: number,
  objective: ScheduleObjective,
  preemption: boolean,
  hybrid: boolean,
  horizonMs: number,
): Model {
  const lp = new Lp();
  const { c, budget, blockSize, chunked } = rules;
  const P = rules.prefillBudget;
  const n = requests.length;
  const maxSeqs = rules.config.maxNumSeqs;
  const maxBatchMs =
    Math.max(c.floorMs, c.baseMs + Math.max(c.perPrefillTokenMs, c.perDecodeSeqMs) * budget) +
    c.perKvTokenMs * requests.reduce((s, r) => s + r.inputTokens + r.outputTokens, 0) +
    c.perChunkSqMs * budget * budget +
    c.allReduceBaseMs +
    c.allReducePerTokenMs * budget;
  for (let j = 1; j <= J; j++) {
    lp.col(`y_${j}`, 'bin', 0, 1);
    lp.col(`t_${j}`, 'cont', 0, maxBatchMs);
    lp.col(`S_${j}`, 'cont', 0, horizonMs);
    if (j > 1) {
      lp.row(
        [
          [1, `y_${j}`],
          [-1, `y_${j - 1}`],
        ],
        '<=',
        0,
      );
      lp.row(
        [
          [1, `S_${j}`],
          [-1, `S_${j - 1}`],
          [-1, `t_${j - 1}`],
        ],
        '>=',
        0,
      );
    }
  }
  const objectiveTerms: [number, string][] = [];
  if (objective === 'makespan') {
    lp.col('E', 'cont', 0, undefined);
    lp.row(
      [
        [1, 'E'],
        [-1, `S_${J}`],
        [-1, `t_${J}`],
      ],
      '>=',
      0,
    );
    objectiveTerms.push([1, 'E']);
  }
  const heldCol = blockSize > 1 ? 'blk' : 'held';
  for (let i = 0; i < n; i++) {
    const r = requests[i]!;
    const I = r.inputTokens;
    const O = r.outputTokens;
    const L = I + O - 1;
    const H = I + O;
    const T = r.arrivalMs ?? 0;
    const pfMax = Math.min(L, P, budget);
    // Tangent points of c² for the prefill-attention term: every prompt a prefill can have (I + G),
    // plus, under chunking, an even grid of at most 16 chunk sizes.
    const tangents = new Set<number>();
    for (let g = 0; g < O; g++) if (I + g <= pfMax) tangents.add(I + g);
    if (chunked) {
      const step = Math.max(1, Math.ceil(pfMax / 16));
      for (let k = step; k <= pfMax; k += step) tangents.add(k);
      tangents.add(pfMax);
    }
    if (objective === 'total-latency') {
      lp.col(`F_${i}`, 'cont', 0, undefined);
      objectiveTerms.push([1, `F_${i}`]);
    }
    for (let j = 1; j <= J; j++) {
      const m = lp.col(v('m', i, j), 'int', 0, L);
      const G = lp.col(v('G', i, j), 'int', 0, O);
      const g = lp.col(v('g', i, j), 'bin', 0, 1);
      const dec = lp.col(v('dec', i, j), 'bin', 0, 1);
      const pf = lp.col(v('pf', i, j), 'int', 0, pfMax);
      const z = lp.col(v('z', i, j), 'bin', 0, 1);
      const kr = lp.col(v('kr', i, j), 'cont', 0, L);
      const sq = lp.col(v('sq', i, j), 'cont', 0, undefined);
      const fin = lp.col(v('fin', i, j), 'bin', 0, 1);
      const held = lp.col(v('held', i, j), 'cont', 0, H);
      const e = preemption ? lp.col(v('e', i, j), 'bin', 0, 1) : undefined;
      const d = j > 1 ? lp.col(v('d', i, j), 'bin', 0, 1) : undefined;
      const mPrev: [number, string][] = j > 1 ? [[1, v('m', i, j - 1)]] : [];
      const GPrev: [number, string][] = j > 1 ? [[1, v('G', i, j - 1)]] : [];
      const finPrev: [number, string][] = j > 1 ? [[1, v('fin', i, j - 1)]] : [];
      // Memory: m grows by what is processed, or drops to 0 on an eviction (which processes nothing).
      const grow: [number, string][] = [
        [1, m],
        ...mPrev.map(([k, x]) => [-k, x] as [number, string]),
        [-1, dec],
        [-1, pf],
      ];
      if (e) {
        lp.row([...grow, [-H, e]], '<=', 0);
        lp.row([...grow, [H, e]], '>=', 0);
        lp.row(
          [
            [1, m],
            [H, e],
          ],
          '<=',
          H,
        );
        lp.row(
          [
            [1, dec],
            [1, e],
          ],
          '<=',
          1,
        );
        lp.row(
          [
            [1, pf],
            [pfMax, e],
          ],
          '<=',
          pfMax,
        );
      } else lp.row(grow, '=', 0);
      // Generation: g = 1 exactly when every known token (prompt + output so far) is computed.
      lp.row([[1, m], ...GPrev.map(([k, x]) => [-k, x] as [number, string]), [-1, g]], '<=', I - 1);
      lp.row([[1, m], ...GPrev.map(([k, x]) => [-k, x] as [number, string]), [-H, g]], '>=', I - H);
      lp.row([[1, G], ...GPrev.map(([k, x]) => [-k, x] as [number, string]), [-1, g]], '=', 0);
      if (j === J) lp.row([[1, G]], '=', O);
      // Finished: G = O.
      lp.row(
        [
          [1, G],
          [-O, fin],
        ],
        '>=',
        0,
      );
      lp.row(
        [
          [1, G],
          [-1, fin],
        ],
        '<=',
        O - 1,
      );
      // Phase: decoding once a token was generated since the last eviction; a decode is 1 token.
      if (d) {
        const gPrev = v('g', i, j - 1);
        const dPrev: [number, string][] = j > 2 ? [[1, v('d', i, j - 1)]] : [];
        lp.row([[1, d], ...dPrev.map(([k, x]) => [-k, x] as [number, string]), [-1, gPrev]], '<=', 0);
        lp.row(
          [
            [1, d],
            ...dPrev.map(([k, x]) => [-k, x] as [number, string]),
            ...(e ? [[1, e] as [number, string]] : []),
          ],
          '>=',
          0,
        );
        lp.row([[1, d], [-1, gPrev], ...(e ? [[1, e] as [number, string]] : [])], '>=', 0);
        if (e)
          lp.row(
            [
              [1, d],
              [1, e],
            ],
            '<=',
            1,
          );
        lp.row(
          [
            [1, dec],
            [-1, d],
          ],
          '<=',
          0,
        );
        lp.row(
          [
            [1, pf],
            [pfMax, d],
          ],
          '<=',
          pfMax,
        );
      } else lp.row([[1, dec]], '=', 0);
      // Without chunked prefill a prefill completes (and generates) in the batch it runs in.
      if (!chunked)
        lp.row(
          [
            [1, pf],
            [-pfMax, g],
          ],
          '<=',
          0,
        );
      // In the batch: z = 1 iff it processes something; not before it arrives.
      lp.row(
        [
          [1, z],
          [-1, dec],
        ],
        '>=',
        0,
      );
      lp.row(
        [
          [1, pf],
          [-pfMax, z],
        ],
        '<=',
        0,
      );
      lp.row(
        [
          [1, z],
          [-1, dec],
          [-1, pf],
        ],
        '<=',
        0,
      );
      lp.row(
        [
          [1, `y_${j}`],
          [-1, z],
        ],
        '>=',
        0,
      );
      lp.row(
        [
          [1, z],
          [-1, g],
        ],
        '>=',
        0,
      );
      if (T > 0)
        lp.row(
          [
            [1, `S_${j}`],
            [-T, z],
          ],
          '>=',
          0,
        );
      // KV read: the context computed before the batch (+1 per decode, counted per batch below).
      lp.row([[1, kr], ...mPrev.map(([k, x]) => [-k, x] as [number, string]), [-L, z]], '>=', -L);
      for (const k of tangents)
        lp.row(
          [
            [1, sq],
            [-2 * k, pf],
          ],
          '>=',
          -k * k,
        );
      // Held KV tokens: what is computed while unfinished, the whole prompt while prefilling.
      lp.row([[1, held], [-1, m], ...finPrev.map(([k, x]) => [L * k, x] as [number, string])], '>=', 0);
      // Valid cuts (implied at integer points, they tighten the relaxation): a request generating
      // holds its prompt and output so far; a decoding, unfinished request holds at least its prompt
      // and reads it.
      lp.row([[1, held], [-(I + O), g], ...GPrev.map(([k, x]) => [-k, x] as [number, string])], '>=', -O);
      if (d) {
        lp.row([[1, held], [-I, d], ...finPrev.map(([k, x]) => [I * k, x] as [number, string])], '>=', 0);
        lp.row([...mPrev, [-I, d]], '>=', 0);
        lp.row(
          [
            [1, kr],
            [-I, dec],
          ],
          '>=',
          0,
        );
      }
      if (chunked) {
        const pr = lp.col(v('pr', i, j), 'bin', 0, 1);
        // m > 0 outside the decode phase ⇒ prefilling (pr = 1).
        lp.row([[L, pr], [-1, m], ...(d ? [[L, d] as [number, string]] : [])], '>=', 0);
        lp.row([[1, held], ...GPrev.map(([k, x]) => [-k, x] as [number, string]), [-H, pr]], '>=', I - H);
      }
      if (blockSize > 1) {
        const blk = lp.col(v('blk', i, j), 'int', 0, Math.ceil(H / blockSize));
        lp.row(
          [
            [blockSize, blk],
            [-1, held],
          ],
          '>=',
          0,
        );
      }
      if (maxSeqs < n) {
        const run = lp.col(v('run', i, j), 'bin', 0, 1);
        lp.row(
          [
            [H, run],
            [-1, held],
          ],
          '>=',
          0,
        );
      }
      if (objective === 'total-latency') {
        // F_i ≥ end of the batch it finishes in.
        const fl: [number, string][] = [
          [-horizonMs, fin],
          ...finPrev.map(([k, x]) => [horizonMs * k, x] as [number, string]),
        ];
        lp.row([[1, `F_${i}`], [-1, `S_${j}`], [-1, `t_${j}`], ...fl], '>=', -horizonMs);
      }
    }
  }
  // Identical requests are interchangeable: the lower index finishes no later.
  for (let i = 0; i + 1 < n; i++) {
    const a = requests[i]!;
    const b = requests[i + 1]!;
    if (
      a.inputTokens !== b.inputTokens ||
      a.outputTokens !== b.outputTokens ||
      (a.arrivalMs ?? 0) !== (b.arrivalMs ?? 0)
    )
      continue;
    const terms: [number, string][] = [];
    for (let j = 1; j <= J; j++) terms.push([1, v('fin', i, j)], [-1, v('fin', i + 1, j)]);
    lp.row(terms, '>=', 0);
  }
  for (let j = 1; j <= J; j++) {
    const all = (name: string, k = 1) => requests.map((_, i) => [k, v(name, i, j)] as [number, string]);
    lp.row([...all('dec'), ...all('pf')], '<=', budget);
    lp.row(all('pf'), '<=', P);
    lp.row(all(heldCol), '<=', blockSize > 1 ? rules.blocks : rules.blocks * blockSize);
    if (maxSeqs < n) lp.row(all('run'), '<=', maxSeqs);
    if (!hybrid) {
      const hp = lp.col(`hp_${j}`, 'bin', 0, 1);
      lp.row([...all('dec'), [n, hp]], '<=', n);
      for (let i = 0; i < n; i++)
        lp.row(
          [
            [1, v('pf', i, j)],
            [-rules.budget, hp],
          ],
          '<=',
          0,
        );
    }
    const shared: [number, string][] = [
      ...all('kr', -c.perKvTokenMs),
      ...all('dec', -c.perKvTokenMs),
      ...all('sq', -c.perChunkSqMs),
      ...all('dec', -c.allReducePerTokenMs),
      ...all('pf', -c.allReducePerTokenMs),
    ];
    lp.row([[1, `t_${j}`], [-(c.floorMs + c.allReduceBaseMs), `y_${j}`], ...shared], '>=', 0);
    lp.row(
      [
        [1, `t_${j}`],
        [-(c.baseMs + c.allReduceBaseMs), `y_${j}`],
        ...all('pf', -c.perPrefillTokenMs),
        ...all('dec', -c.perDecodeSeqMs),
        ...shared,
      ],
      '>=',
      0,
    );
  }
  return { lp, objective: objectiveTerms, J };
}

/** Reads the batches of a solution back as engine plans. */
function readSchedule(
  requests: readonly ScheduleRequest[],
  J: number,
  value: (name: string) => number,
): PlannedBatch[] {
  const out: PlannedBatch[] = [];
  const live = requests.map(() => 0);
  const done = requests.map(() => false);
  for (let j = 1; j <= J; j++) {
    if (Math.round(value(`y_${j}`)) !== 1) continue;
    const preempt: string[] = [];
    const run: { id: string; tokens: number }[] = [];
    requests.forEach((r, i) => {
      const e = Math.round(value(v('e', i, j)) || 0);
      if (e === 1 && live[i]! > 0 && !done[i]) preempt.push(r.id);
      const tokens = Math.round(value(v('dec', i, j)) + value(v('pf', i, j)));
      if (tokens > 0) run.push({ id: r.id, tokens });
      live[i] = Math.round(value(v('m', i, j)));
      if (Math.round(value(v('fin', i, j))) === 1) done[i] = true;
    });
    if (run.length > 0 || preempt.length > 0) out.push({ preempt, run });
  }
  return out;
}

let highsPromise: Promise<Highs> | undefined;

/** HiGHS (WebAssembly), loaded once per process. */
function loadHighs(): Promise<Highs> {
  highsPromise ??= import('highs').then((m) => m.default());
  return highsPromise;
}

interface Solved {
  readonly status: 'optimal' | 'feasible' | 'infeasible' | 'none';
  /** The search ran to its end (not stopped by the time limit): no schedule beats the cutoff. */
  readonly complete: boolean;
  readonly objective: number;
  readonly bound: number;
  readonly value: (name: string) => number;
}

function runHighs(highs: Highs, text: string, timeLimitS: number, mip: boolean, cutoff = Infinity): Solved {
  const model = highs.createModel({ format: 'lp', data: text });
  try {
    model.options.set({ output_flag: false, time_limit: timeLimitS, mip_rel_gap: 1e-6 });
    // Prune every node that cannot beat the best heuristic (whose schedule is the fallback).
    if (mip && Number.isFinite(cutoff)) model.options.set({ objective_bound: cutoff });
    model.run();
    const ms = highs.constants.modelStatus;
    const status = model.getModelStatus();
    const complete = status === ms.optimal || status === ms.infeasible || status === ms.objectiveBound;
    if (status === ms.infeasible)
      return { status: 'infeasible', complete, objective: NaN, bound: NaN, value: () => NaN };
    const feasible = model.info.get('primal_solution_status') === highs.constants.solutionStatus.feasible;
    const bound = mip ? Number(model.info.get('mip_dual_bound')) : model.getObjectiveValue();
    if (!feasible) return { status: 'none', complete, objective: NaN, bound, value: () => NaN };
    const index = new Map<string, number>();
    const cols = model.getLp().numCols;
    for (let k = 0; k < cols; k++) index.set(model.getColName(k), k);
    const colValue = model.getSolution().colValue;
    return {
      status: status === ms.optimal ? 'optimal' : 'feasible',
      complete,
      objective: model.getObjectiveValue(),
      bound: status === ms.optimal && !mip ? model.getObjectiveValue() : bound,
      value: (name) => {
        const k = index.get(name);
        return k === undefined ? 0 : colValue[k]!;
      },
    };
  } finally {
    model.dispose();
  }
}

/** The number of batches J that holds every schedule at least as good as `upperBoundMs`. */
function batchBound(
  requests: readonly ScheduleRequest[],
  rules: Rules,
  objective: ScheduleObjective,
  upperMs: number,
) {
  const lastArrival = Math.max(...requests.map((r) => r.arrivalMs ?? 0));
  // Busy time ≤ makespan; under total latency every request finishes by its arrival + the bound.
  const busyMs = objective === 'makespan' ? upperMs : lastArrival + upperMs;
  const need = Math.floor(busyMs / cheapestBatchMs(rules.c) + 1e-9);
  // Without an in-space heuristic there is no bound: J is the cap and the result is not exact.
  const horizonMs = Number.isFinite(busyMs) ? busyMs + lastArrival : 1e7;
  return {
    J: Math.min(need, OPTIMAL_LIMITS.maxBatches),
    exact: need <= OPTIMAL_LIMITS.maxBatches,
    horizonMs,
  };
}

/**
 * The optimal schedule of a small instance on one engine (InferMax section 3.3; see the module
 * comment for the formulation), replayed through the engine model so its value is the simulator's
 * own. Throws `INSTANCE_TOO_LARGE` naming the limit an instance exceeds, `NO_SCHEDULE` when the
 * time limit ends the search without a schedule.
 */
export async function solveOptimalSchedule(
  requests: readonly ScheduleRequest[],
  options: OptimalScheduleOptions,
): Promise<OptimalSchedule> {
  const started = performance.now();
  const rules = rulesOf(options.engine);
  checkInstance(requests, rules);
  const objective = options.objective ?? 'makespan';
  const preemption = options.preemption ?? true;
  const hybrid = options.hybrid ?? true;
  const heuristic = heuristicUpperBound(requests, options.engine, rules, objective, preemption, hybrid);
  const upper = heuristic ? objectiveValue(heuristic, objective) : Infinity;
  const { J, exact, horizonMs } = batchBound(requests, rules, objective, upper);
  const model = buildModel(requests, rules, J, objective, preemption, hybrid, horizonMs);
  const highs = await loadHighs();
  const shift0 = objective === 'total-latency' ? requests.reduce((s, r) => s + (r.arrivalMs ?? 0), 0) : 0;
  // Loose enough that the heuristic's own schedule (and anything near it) stays in the search.
  const cutoff = (upper + shift0) * (1 + 1e-4) + 1e-3;
  const solved = runHighs(
    highs,
    model.lp.text(model.objective, false),
    options.timeLimitS ?? 60,
    true,
    cutoff,
  );
  if (solved.status === 'infeasible' && heuristic === undefined)
    throw new SimError(SimErrorCode.NO_SCHEDULE, `no schedule fits in ${J} batches (the MILP is infeasible)`);
  if (solved.status === 'none' && heuristic === undefined)
    throw new SimError(
      SimErrorCode.NO_SCHEDULE,
      `HiGHS found no schedule within ${options.timeLimitS ?? 60} s`,
    );
  const replayEngine = { ...options.engine, watermark: 0, costModel: rules.config.costModel };
  const found = solved.status === 'optimal' || solved.status === 'feasible';
  let batches = found ? readSchedule(requests, J, solved.value) : [];
  let outcome = found ? replaySchedule(requests, replayEngine, batches) : undefined;
  // A search stopped before it beat the best heuristic returns the heuristic's schedule, as
  // `feasible` with the solver's bound.
  const fallback =
    heuristic !== undefined &&
    (!outcome ||
      objectiveValue(heuristic, objective) < objectiveValue(outcome, objective) * (1 - 1e-6) - 1e-6);
  if (fallback) {
    batches = [...heuristic.batches];
    outcome = replaySchedule(requests, replayEngine, batches);
  }
  if (!outcome) throw new SimError(SimErrorCode.NO_SCHEDULE, 'no schedule found');
  // A complete search with the heuristic as cutoff that found nothing better proves it optimal.
  const provedHeuristic =
    fallback && exact && solved.complete && (solved.status === 'infeasible' || solved.status === 'none');
  const shift = shift0;
  const bound = provedHeuristic
    ? objectiveValue(outcome, objective) + shift
    : Number.isFinite(solved.bound)
      ? solved.bound
      : -Infinity;
  const starts = outcome.batchStartsMs;
  const analytic = analyticLowerBound(requests, options.engine, objective);
  const valueMs = objectiveValue(outcome, objective);
  return {
    status: (solved.status === 'optimal' && !fallback) || provedHeuristic ? 'optimal' : 'feasible',
    exact,
    objective,
    valueMs,
    lowerBoundMs: exact ? Math.min(valueMs, Math.max(analytic, bound - shift)) : analytic,
    milpValueMs: found ? solved.objective - shift : valueMs,
    makespanMs: outcome.makespanMs,
    totalLatencyMs: outcome.totalLatencyMs,
    preemptions: outcome.preemptions,
    batches: batches.map((b, k) => ({ ...b, startMs: starts[k]! })),
    requests: outcome.requests,
    size: { batches: J, columns: model.lp.cols.size, rows: model.lp.rows.length },
    solveMs: performance.now() - started,
  };
}

/**
 * A valid lower bound on the optimum for an instance of any size the model can be written for:
 * the larger of the analytic bound and the LP relaxation of the MILP (binaries and integers
 * relaxed), when J covers every schedule as good as the best heuristic; the analytic bound alone
 * otherwise. Also returns the heuristic upper bound.
 */
export async function scheduleLowerBound(
  requests: readonly ScheduleRequest[],
  options: OptimalScheduleOptions,
): Promise<{
  readonly lowerBoundMs: number;
  readonly upperBoundMs: number;
  readonly source: 'lp-relaxation' | 'analytic';
}> {
  const rules = rulesOf(options.engine);
  const objective = options.objective ?? 'makespan';
  const preemption = options.preemption ?? true;
  const hybrid = options.hybrid ?? true;
  const heuristic = heuristicUpperBound(requests, options.engine, rules, objective, preemption, hybrid);
  const upper = heuristic ? objectiveValue(heuristic, objective) : Infinity;
  const analytic = analyticLowerBound(requests, options.engine, objective);
  if (!heuristic) return { lowerBoundMs: analytic, upperBoundMs: upper, source: 'analytic' };
  const lastArrival = Math.max(...requests.map((r) => r.arrivalMs ?? 0));
  const need = Math.floor(
    (objective === 'makespan' ? upper : lastArrival + upper) / cheapestBatchMs(rules.c) + 1e-9,
  );
  // The relaxation grows with requests × batches; beyond this it is not worth solving.
  if (need * requests.length > 20_000)
    return { lowerBoundMs: analytic, upperBoundMs: upper, source: 'analytic' };
  const horizonMs = (objective === 'makespan' ? upper : lastArrival + upper) + lastArrival;
  const model = buildModel(requests, rules, need, objective, preemption, hybrid, horizonMs);
  const solved = runHighs(
    await loadHighs(),
    model.lp.text(model.objective, true),
    options.timeLimitS ?? 60,
    false,
  );
  const shift = objective === 'total-latency' ? requests.reduce((s, r) => s + (r.arrivalMs ?? 0), 0) : 0;
  if (solved.status !== 'optimal' || !(solved.bound - shift > analytic))
    return { lowerBoundMs: analytic, upperBoundMs: upper, source: 'analytic' };
  return { lowerBoundMs: solved.bound - shift, upperBoundMs: upper, source: 'lp-relaxation' };
}
