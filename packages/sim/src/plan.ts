/**
 * Capacity planning (Aladdin sections 4–5, `fairway plan`): for a trace scaled to several arrival
 * rates, the fewest GPUs with which every request meets its TTFT and ATGT targets (P100), under
 * each placement policy, at the tensor-parallel degree that maximises per-GPU throughput under the
 * SLOs. Performance models are fitted from profiling runs of the simulated engine (with their fit
 * error reported); each candidate fleet size is checked by simulating a window of the trace
 * through the production gateway. Pass/fail need not be monotone in the fleet size (a larger fleet
 * can change where best fit packs, and P100 hangs on single requests), so the search scans fleet
 * sizes upward from one and takes the first that passes ({@link fewestPassing}). Baselines get the
 * same information as Aladdin by default: the room Aladdin's SLO constraints leave on each replica
 * and the replicas' sequence reports ({@link sloAwarePlacement}); they differ only in order.
 */

import { createRng, type RequestDescriptor, type SloClass } from '@fairway/core';
import {
  type EngineConfig,
  fitEnginePerformance,
  performanceEngineConfig,
  resolveEngineConfig,
} from '@fairway/perf';
import {
  chooseTensorParallel,
  fcfsPolicy,
  fitWorkerCount,
  maxDecodeBatch,
  type PerformanceFitReport,
  type PerformanceModel,
  PLACEMENT_NAMES,
  type PlacementPolicy,
  placementByName,
  sloAwarePlacement,
  type TpEvaluation,
  type WorkerCountModel,
  type WorkloadProfile,
} from '@fairway/policy';
import type { SimRun } from './records.ts';
import { runSimulation } from './runner.ts';
import { loadTrace, traceWorkload } from './trace.ts';

/** SLO targets of a plan, seconds. */
export interface PlanSlo {
  /** Time to first token. */
  readonly ttftS: number;
  /** Average token generation time, seconds per output token after the first. */
  readonly atgtS: number;
}

/** Options of {@link planFleet}. */
export interface FleetPlanOptions {
  /** Built-in trace name (`azure-conv`, `azure-code`) or a CSV path. */
  readonly trace: string;
  /**
   * A fitted performance model (e.g. from `fairway profile`) to plan with instead of profiling the
   * simulator's preset: its TP degree is used, and the simulated replicas run at its speed and
   * capacity, so the plan is for the hardware it was measured on. `model`, `gpu` and `tps` are
   * then ignored. @default none (profile the preset at each TP degree)
   */
  readonly performanceModel?:
    | { readonly model: PerformanceModel; readonly fit: PerformanceFitReport }
    | undefined;
  readonly model: string;
  readonly gpu: string;
  readonly slo: PlanSlo;
  /** Arrival rates as multiples of the trace's mean rate. @default [1, 2, 4] */
  readonly rateScales?: readonly number[] | undefined;
  /**
   * The rates of `rateScales` to search fleets for; the others still shape what the plan learns
   * from the trace (the output predictor's history lies outside every rate's window), so a point
   * comes out as it does in the whole plan. @default all of `rateScales`
   */
  readonly searchScales?: readonly number[] | undefined;
  /** Simulated seconds of the trace replayed for each check (at the scaled rate). @default 300 */
  readonly windowS?: number | undefined;
  /** Where the window starts in the trace, trace seconds. @default 0 */
  readonly startS?: number | undefined;
  /** Simulated seconds after the window for the requests in it to finish. @default 120 */
  readonly drainS?: number | undefined;
  /** Placement policies to plan for. @default every registered one */
  readonly placements?: readonly string[] | undefined;
  /** Tensor-parallel degrees to consider (those whose weights fit). @default [1, 2, 4, 8] */
  readonly tps?: readonly number[] | undefined;
  /**
   * Link the GPUs of one replica all-reduce over at TP > 1 (Aladdin's A100 testbed: PCIe).
   * @default NVLink where the GPU has it
   */
  readonly interconnect?: 'nvlink' | 'pcie' | undefined;
  /**
   * What the baseline placements know: `slo-aware` gives them Aladdin's SLO-aware room on every
   * replica and the replicas' sequence reports (equal information: only the order differs);
   * `own` leaves them the replicas' KV and sequence capacity. @default 'slo-aware'
   */
  readonly baselineCapacity?: 'slo-aware' | 'own' | undefined;
  /** Largest fleet searched, replicas. @default 64 */
  readonly maxReplicas?: number | undefined;
  /**
   * Aladdin's θ: the share of each decode budget (ATGT context limit, running requests' slack) it
   * fills. P100 leaves no room for the linear models' error (prefill is slightly superlinear), so
   * the plan keeps a 20% margin. @default 0.8
   */
  readonly theta?: number | undefined;
  /**
   * Quantile of similar prompts' outputs Aladdin assumes a running request may end at when it
   * bounds the next prefill (its ATGT slack): 0 protects even the shortest, as P100 needs. @default 0
   */
  readonly shortQuantile?: number | undefined;
  /** Aladdin's γ (weight of output tokens in the context). @default 0.5 */
  readonly gamma?: number | undefined;
  /**
   * Aladdin's re-prediction (section 4.3): a request whose output outruns its prediction is
   * predicted again with the conditional average output of its prompt bucket's longer outputs
   * (learned from the trace outside the windows, like the first prediction), and its
   * reservation grows (the gateway's `repredict`). @default false
   */
  readonly repredict?: boolean | undefined;
  /**
   * Requests taken out of an engine's queue onto a replica with room, as the live dispatchers'
   * `policy.moves` does (`RunInput.moves`). @default none
   */
  readonly moves?: { readonly afterMs: number } | undefined;
  /**
   * Also run Aladdin on an elastic fleet of up to `maxReplicas` bins (Algorithm 1 opening a bin
   * when no open one can take a request, at once, and closing one idle for `closeAfterS`), and
   * report the bins it held open at peak and on average over the window (`PlanPoint.elastic`).
   * @default none
   */
  readonly elastic?:
    | {
        readonly closeAfterS: number;
        /** Most bins it may open. @default maxReplicas */
        readonly bins?: number | undefined;
      }
    | undefined;
  /**
   * Fleet sizes to simulate for each rate after the search (given the size it found), besides the
   * searched ones, so two plans can be compared at equal fleets (their runs are in
   * `PlanPoint.probes`). @default none
   */
  readonly probeReplicas?: ((rateScale: number, found: number | undefined) => readonly number[]) | undefined;
  readonly seed?: number | undefined;
  /** Called with a line of progress now and then. */
  readonly onProgress?: ((message: string) => void) | undefined;
}

/** The fewest replicas found for one rate. */
export interface PlanPoint {
  /** Multiple of the trace's mean rate. */
  readonly rateScale: number;
  /** Arrival rate, requests per second. */
  readonly rate: number;
  /** Fewest replicas meeting P100, or undefined when even `maxReplicas` did not. */
  readonly replicas: number | undefined;
  /** Fleet sizes above `replicas` found to miss P100 (pass/fail is not monotone in replicas). */
  readonly missesAbove: readonly number[];
  /** `replicas × tp`. */
  readonly gpus: number | undefined;
  /** Simulations run for this point. */
  readonly runs: number;
  /** Every simulation of this point (search and `probeReplicas`), by fleet size. */
  readonly probes: readonly PlanProbe[];
  /** Aladdin on an elastic fleet (`FleetPlanOptions.elastic`): the GPUs its open bins held. */
  readonly elastic?:
    | {
        readonly peakGpus: number;
        readonly meanGpus: number;
        /** Whether every feasible request met both SLOs (P100) on it. */
        readonly met: boolean;
        readonly opened: number;
      }
    | undefined;
}

/** One simulation of a plan: a fleet size and how the window's requests fared on it. */
export interface PlanProbe {
  readonly replicas: number;
  /** Whether every feasible request met both SLOs (P100). */
  readonly met: boolean;
  /** Feasible requests of the window. */
  readonly requests: number;
  /** Share of feasible requests that finished within the TTFT SLO. */
  readonly ttftAttainment: number;
  /** Share of feasible requests that finished within the ATGT SLO (one-token outputs meet it). */
  readonly atgtAttainment: number;
  /** P99 TTFT of the feasible requests that got a first token, s. */
  readonly ttftP99S: number | undefined;
  /** P99 ATGT of the feasible requests that finished with more than one token, s. */
  readonly atgtP99S: number | undefined;
  readonly preemptions: number;
  /** Re-predictions the gateway made (`repredict`). */
  readonly repredictions: number;
  /** Requests moved out of an engine's queue (`moves`); absent without moves. */
  readonly moves?: number | undefined;
}

/** One placement policy's plan. */
export interface PolicyPlan {
  readonly placement: string;
  readonly points: readonly PlanPoint[];
  /** Aladdin's worker-count model `n = ceil(k·r + c)` fitted to the points (two needed). */
  readonly workerModel: WorkerCountModel | undefined;
}

/** What `fairway plan` reports. */
export interface FleetPlan {
  readonly trace: string;
  readonly model: string;
  readonly gpu: string;
  readonly slo: PlanSlo;
  readonly windowS: number;
  /** Mean arrival rate of the trace, requests per second. */
  readonly traceRate: number;
  readonly workload: WorkloadProfile;
  /** Chosen tensor-parallel degree and every candidate's evaluation. */
  readonly tp: { readonly chosen: number; readonly candidates: readonly TpEvaluation[] };
  /** Fitted performance model of the chosen configuration and its fit error. */
  readonly performance: { readonly model: PerformanceModel; readonly fit: PerformanceFitReport };
  /** Requests of the windows that no fleet could serve within the SLOs (their prefill or a lone decode is too slow). */
  readonly infeasible: number;
  readonly policies: readonly PolicyPlan[];
  /** `1 − gpus(aladdin) / gpus(jsq)` per rate scale, where both found a fleet. */
  readonly aladdinSavingsVsJsq: readonly { readonly rateScale: number; readonly saving: number }[];
  /**
   * `1 − gpus(aladdin) / gpus(best baseline)` per rate scale: the baseline needing the fewest GPUs
   * at that rate (undefined saving when Aladdin or every baseline found no fleet).
   */
  readonly aladdinSavingsVsBest: readonly {
    readonly rateScale: number;
    readonly best: string | undefined;
    readonly saving: number | undefined;
  }[];
}

/**
 * The fewest fleet size in `1..max` for which `passes` holds, scanning upward: no monotonicity in
 * the fleet size is assumed (a bisection would return a larger size when a smaller one passes
 * below a failing one). Runs `passes` at most `max` times; undefined when none passes.
 */
export async function fewestPassing(
  passes: (replicas: number) => Promise<boolean>,
  max: number,
  from = 1,
): Promise<number | undefined> {
  for (let n = Math.max(1, from); n <= max; n++) if (await passes(n)) return n;
  return undefined;
}

/** An output-length predictor from history: the mean output of prompts of a similar length (Aladdin section 2.3). */
export function bucketedOutputPredictor(
  rows: readonly { inputTokens: number; outputTokens: number }[],
  lowQuantile = 0.1,
): {
  /** Mean output of the prompt's length bucket. */
  predict: (inputTokens: number) => number;
  /** The `lowQuantile` of the bucket's outputs: a short but plausible length. */
  short: (inputTokens: number) => number;
  /** Smallest bucket mean. */
  min: number;
  /** Mean of the bucket's outputs longer than `generated` (Aladdin's conditional average); undefined if none. */
  conditionalMean: (inputTokens: number, generated: number) => number | undefined;
} {
  const bucket = (n: number) => Math.max(0, Math.floor(Math.log2(Math.max(1, n))));
  const outs = new Map<number, number[]>();
  const all: number[] = [];
  for (const r of rows) {
    const o = Math.max(1, r.outputTokens);
    const b = bucket(r.inputTokens);
    const list = outs.get(b) ?? [];
    list.push(o);
    outs.set(b, list);
    all.push(o);
  }
  const stats = (xs: number[]) => {
    const sorted = [...xs].sort((a, b) => a - b);
    let sum = 0;
    for (const x of sorted) sum += x;
    return {
      mean: sorted.length ? sum / sorted.length : 1,
      low: sorted[Math.floor(lowQuantile * (sorted.length - 1))] ?? 1,
    };
  };
  const overall = stats(all);
  const byBucket = new Map<number, { mean: number; low: number }>();
  for (const [b, xs] of outs) byBucket.set(b, xs.length >= 20 ? stats(xs) : overall);
  // Sorted outputs with suffix sums: the conditional mean is one binary search.
  const suffixed = (xs: readonly number[]) => {
    const sorted = [...xs].sort((a, b) => a - b);
    const suffix = new Array<number>(sorted.length + 1).fill(0);
    for (let i = sorted.length - 1; i >= 0; i--)
      suffix[i] = (suffix[i + 1] as number) + (sorted[i] as number);
    return { sorted, suffix };
  };
  const allTail = suffixed(all);
  const tails = new Map<number, ReturnType<typeof suffixed>>();
  for (const [b, xs] of outs) tails.set(b, xs.length >= 20 ? suffixed(xs) : allTail);
  const tailMean = (t: ReturnType<typeof suffixed>, generated: number): number | undefined => {
    let lo = 0;
    let hi = t.sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((t.sorted[mid] as number) > generated) hi = mid;
      else lo = mid + 1;
    }
    const n = t.sorted.length - lo;
    return n === 0 ? undefined : (t.suffix[lo] as number) / n;
  };
  let min = overall.mean;
  for (const s of byBucket.values()) min = Math.min(min, s.mean);
  return {
    predict: (n) => (byBucket.get(bucket(n)) ?? overall).mean,
    short: (n) => (byBucket.get(bucket(n)) ?? overall).low,
    min,
    conditionalMean: (n, generated) => tailMean(tails.get(bucket(n)) ?? allTail, generated),
  };
}

/**
 * Plans the fleet (see the module comment). Runs many simulations; `windowS` and the rate list
 * bound its run time.
 */
export async function planFleet(options: FleetPlanOptions): Promise<FleetPlan> {
  const log = options.onProgress ?? (() => {});
  const rows = loadTrace(options.trace);
  const traceSpan = Math.max(1, (rows.at(-1)?.arrivalS ?? 1) - (rows[0]?.arrivalS ?? 0));
  const traceRate = rows.length / traceSpan;
  const windowS = options.windowS ?? 300;
  const startS = options.startS ?? 0;
  const drainS = options.drainS ?? 120;
  const seed = options.seed ?? 1;
  const ttftMs = options.slo.ttftS * 1000;
  const atgtMs = options.slo.atgtS * 1000;
  let inSum = 0;
  let outSum = 0;
  for (const r of rows) {
    inSum += Math.max(1, r.inputTokens);
    outSum += Math.max(1, r.outputTokens);
  }
  const workload: WorkloadProfile = {
    meanInputTokens: inSum / Math.max(1, rows.length),
    meanOutputTokens: outSum / Math.max(1, rows.length),
  };

  // Worker configuration: a performance model per TP degree that fits, fitted over the batches an
  // ATGT-bound replica runs (the decode model is linear; the engine's step time is not, far out).
  const fitted = new Map<number, { model: PerformanceModel; fit: PerformanceFitReport }>();
  const given = options.performanceModel;
  const modelName = given?.model.model ?? options.model;
  const gpuName = given?.model.gpu ?? options.gpu;
  if (given) {
    fitted.set(given.model.tp, given);
    log(
      `using the given performance model of ${given.model.model} on ${given.model.gpu} × ${given.model.tp}: fit error ${(given.fit.worstMape * 100).toFixed(1)}%`,
    );
  }
  const link = options.interconnect === undefined ? {} : { interconnect: options.interconnect };
  for (const tp of given ? [] : (options.tps ?? [1, 2, 4, 8])) {
    const config: EngineConfig = { model: options.model, gpu: options.gpu, tp, ...link };
    try {
      resolveEngineConfig(config);
    } catch {
      continue;
    }
    const coarse = fitEnginePerformance(config).model;
    const ctx = workload.meanInputTokens + workload.meanOutputTokens / 2;
    const relevant = maxDecodeBatch(coarse.decode, ctx, atgtMs);
    const maxBatch = Math.max(
      8,
      Math.min(coarse.maxSeqs, Number.isFinite(relevant) ? 2 * relevant : coarse.maxSeqs),
    );
    const fine = fitEnginePerformance(config, { maxBatch });
    fitted.set(tp, { model: { ...fine.model, maxSeqs: coarse.maxSeqs }, fit: fine.report });
    log(
      `profiled ${options.model} on ${options.gpu} × ${tp}: fit error ${(fine.report.worstMape * 100).toFixed(1)}%`,
    );
  }
  const choice = chooseTensorParallel(
    [...fitted.values()].map((f) => f.model),
    workload,
    { ttftMs, atgtMs },
  );
  const chosenTp = choice.best?.tp ?? [...fitted.keys()][0];
  const perf = chosenTp === undefined ? undefined : fitted.get(chosenTp);
  if (chosenTp === undefined || perf === undefined)
    throw new RangeError(`${options.model} fits on no tensor-parallel degree of ${options.gpu}`);

  // Aladdin's output predictor learns from the trace outside the windows it is checked on.
  const history = rows.filter(
    (r) =>
      r.arrivalS < startS || r.arrivalS >= startS + windowS * Math.max(...(options.rateScales ?? [1, 2, 4])),
  );
  const predictor = bucketedOutputPredictor(
    history.length > 100 ? history : rows,
    options.shortQuantile ?? 0,
  );
  const engineConfig: EngineConfig = given
    ? performanceEngineConfig(given.model)
    : { model: options.model, gpu: options.gpu, tp: chosenTp, ...link };
  const { costModel, maxModelLen } = resolveEngineConfig(engineConfig);
  const feasibleAlone = (r: RequestDescriptor): boolean => {
    // The engine refuses what does not fit its context (vLLM's 400); no fleet serves it.
    if (r.inputTokens + r.maxTokens > maxModelLen || r.inputTokens >= maxModelLen) return false;
    const prefill = costModel.stepMs({
      decodeSeqs: 0,
      prefillTokens: r.inputTokens,
      prefillChunkSq: r.inputTokens * r.inputTokens,
      kvTokensRead: 0,
    });
    const decode = costModel.stepMs({
      decodeSeqs: 1,
      prefillTokens: 0,
      prefillChunkSq: 0,
      kvTokensRead: r.inputTokens + (r.outputTokens ?? 1),
    });
    return prefill <= ttftMs && ((r.outputTokens ?? 1) <= 1 || decode <= atgtMs);
  };
  const slo: SloClass = {
    name: 'interactive',
    ttftS: options.slo.ttftS,
    atgtS: options.slo.atgtS,
    band: 0,
    sheddable: false,
  };

  let infeasible = 0;
  const windows = new Map<number, RequestDescriptor[]>();
  for (const scale of options.rateScales ?? [1, 2, 4]) {
    const arrivals = traceWorkload({
      trace: options.trace,
      split: { tenants: 1 },
      seed,
      model: modelName,
      rateScale: scale,
      startS,
      durationS: windowS,
    });
    infeasible += arrivals.filter((a) => !feasibleAlone(a)).length;
    windows.set(scale, arrivals);
  }

  const aladdin = {
    perfOf: () => perf.model,
    atgtMs,
    ttftMs,
    workload,
    predictOutput: predictor.predict,
    shortOutput: predictor.short,
    minPredictedOutput: predictor.min,
    theta: options.theta ?? 0.8,
    ...(options.gamma !== undefined ? { gamma: options.gamma } : {}),
  };
  const sloAware = (options.baselineCapacity ?? 'slo-aware') === 'slo-aware';
  const placementFor = (name: string): PlacementPolicy => {
    const policy = placementByName(name, createRng(seed), { aladdin });
    return name === 'aladdin' || !sloAware ? policy : sloAwarePlacement(policy, aladdin);
  };

  const repredict = options.repredict === true;
  const meets = async (
    placement: string,
    arrivals: readonly RequestDescriptor[],
    replicas: number,
    elastic?: { readonly closeAfterS: number; readonly meanUntilS?: number },
  ): Promise<PlanProbe & { readonly elastic?: SimRun['elastic'] }> => {
    const run = await runSimulation({
      scenario: `plan-${placement}`,
      seed,
      durationS: windowS + drainS,
      engines: Array.from({ length: replicas }, (_, i) => ({ id: `replica-${i}`, config: engineConfig })),
      arrivals,
      ordering: fcfsPolicy(),
      placement: placementFor(placement),
      reserve: 'predicted',
      outputPredictor: (r) => predictor.predict(r.inputTokens),
      ...(repredict
        ? {
            repredict: true,
            outputRepredictor: (r: RequestDescriptor, generated: number) =>
              predictor.conditionalMean(r.inputTokens, generated),
          }
        : {}),
      reportSequences: placement === 'aladdin' || sloAware,
      ...(options.moves === undefined ? {} : { moves: options.moves }),
      sloClasses: [slo],
      ...(elastic === undefined ? {} : { elastic }),
    });
    let requests = 0;
    let ttftMet = 0;
    let atgtMet = 0;
    const ttfts: number[] = [];
    const atgts: number[] = [];
    for (const r of run.records) {
      if (!feasibleAlone(r.req)) continue;
      requests++;
      if (r.rejected || r.firstTokenS === undefined) continue;
      const ttft = r.firstTokenS - r.arrivalS;
      ttfts.push(ttft);
      if (ttft <= options.slo.ttftS + 1e-9) ttftMet++;
      if (r.finishS === undefined) continue;
      if (r.generated <= 1) {
        atgtMet++;
        continue;
      }
      const atgt = (r.finishS - r.firstTokenS) / (r.generated - 1);
      atgts.push(atgt);
      if (atgt <= options.slo.atgtS + 1e-9) atgtMet++;
    }
    const p99 = (xs: number[]) =>
      xs.length === 0 ? undefined : xs.sort((a, b) => a - b)[Math.ceil(0.99 * xs.length) - 1];
    return {
      replicas,
      met: ttftMet === requests && atgtMet === requests,
      requests,
      ttftAttainment: requests === 0 ? 1 : ttftMet / requests,
      atgtAttainment: requests === 0 ? 1 : atgtMet / requests,
      ttftP99S: p99(ttfts),
      atgtP99S: p99(atgts),
      preemptions: run.preemptions,
      repredictions: run.prediction?.repredictions ?? 0,
      ...(options.moves === undefined ? {} : { moves: run.records.reduce((n, r) => n + (r.moves ?? 0), 0) }),
      ...(run.elastic === undefined ? {} : { elastic: run.elastic }),
    };
  };

  const maxReplicas = options.maxReplicas ?? 64;
  const policies: PolicyPlan[] = [];
  for (const placement of options.placements ?? PLACEMENT_NAMES) {
    const points: PlanPoint[] = [];
    for (const [scale, arrivals] of windows) {
      if (options.searchScales !== undefined && !options.searchScales.includes(scale)) continue;
      let runs = 0;
      const probes: PlanProbe[] = [];
      const check = async (n: number) => {
        runs++;
        const probe = await meets(placement, arrivals, n);
        probes.push(probe);
        const ok = probe.met;
        log(
          `${placement} × ${scale} (${(traceRate * scale).toFixed(1)} req/s): ${n} replicas ${ok ? 'meet' : 'miss'} P100`,
        );
        return ok;
      };
      const replicas = await fewestPassing(check, maxReplicas);
      for (const n of options.probeReplicas?.(scale, replicas) ?? [])
        if (n >= 1 && !probes.some((p) => p.replicas === n)) {
          runs++;
          probes.push(await meets(placement, arrivals, n));
        }
      probes.sort((a, b) => a.replicas - b.replicas);
      let elastic: PlanPoint['elastic'];
      if (options.elastic !== undefined && placement === 'aladdin') {
        runs++;
        const probe = await meets(placement, arrivals, options.elastic.bins ?? maxReplicas, {
          closeAfterS: options.elastic.closeAfterS,
          meanUntilS: windowS,
        });
        const used = probe.elastic;
        if (used !== undefined)
          elastic = {
            peakGpus: used.peakOpen * chosenTp,
            meanGpus: used.meanOpen * chosenTp,
            met: probe.met,
            opened: used.opened,
          };
        log(
          `aladdin elastic × ${scale}: peak ${used?.peakOpen} bins, mean ${used?.meanOpen.toFixed(1)}, ${probe.met ? 'meet' : 'miss'} P100`,
        );
      }
      points.push({
        ...(elastic === undefined ? {} : { elastic }),
        rateScale: scale,
        rate: traceRate * scale,
        replicas,
        missesAbove: probes
          .filter((p) => replicas !== undefined && p.replicas > replicas && !p.met)
          .map((p) => p.replicas),
        gpus: replicas === undefined ? undefined : replicas * chosenTp,
        runs,
        probes,
      });
    }
    const known = points.filter((p) => p.replicas !== undefined);
    let workerModel: WorkerCountModel | undefined;
    if (new Set(known.map((p) => p.rate)).size >= 2) {
      try {
        workerModel = fitWorkerCount(
          known.map((p) => ({ rate: p.rate, replicas: p.replicas as number })),
          { thresholdRate: Number.NEGATIVE_INFINITY, envelope: true },
        );
      } catch {
        workerModel = undefined;
      }
    }
    policies.push({ placement, points, workerModel });
  }

  const gpusOf = (name: string, scale: number) =>
    policies.find((p) => p.placement === name)?.points.find((p) => p.rateScale === scale)?.gpus;
  const savings: { rateScale: number; saving: number }[] = [];
  for (const scale of windows.keys()) {
    const a = gpusOf('aladdin', scale);
    const j = gpusOf('jsq', scale);
    if (a !== undefined && j !== undefined && j > 0) savings.push({ rateScale: scale, saving: 1 - a / j });
  }
  const savingsVsBest = [...windows.keys()].map((scale) => {
    let best: string | undefined;
    let bestGpus = Number.POSITIVE_INFINITY;
    for (const p of policies) {
      if (p.placement === 'aladdin') continue;
      const g = gpusOf(p.placement, scale);
      if (g !== undefined && g < bestGpus) {
        best = p.placement;
        bestGpus = g;
      }
    }
    const a = gpusOf('aladdin', scale);
    return {
      rateScale: scale,
      best,
      saving: a === undefined || best === undefined ? undefined : 1 - a / bestGpus,
    };
  });
  return {
    trace: options.trace,
    model: modelName,
    gpu: gpuName,
    slo: options.slo,
    windowS,
    traceRate,
    workload,
    tp: { chosen: chosenTp, candidates: choice.candidates },
    performance: perf ? { model: perf.model, fit: perf.fit } : (undefined as never),
    infeasible,
    policies,
    aladdinSavingsVsJsq: savings,
    aladdinSavingsVsBest: savingsVsBest,
  };
}
