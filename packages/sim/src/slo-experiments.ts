/**
 * SLO-class experiments (QLM section 8): one scenario under FCFS (vLLM), EDF, QLM and QLM without
 * each serving operation (the paper's ablation). Every policy runs the production gateway and
 * store; the baselines queue all classes in one band ordered by arrival (FCFS) or deadline (EDF),
 * QLM queues each class in its own band, in arrival (request-group) order inside it, and adds its control (request
 * groups, RWT estimator, global scheduler, pull / evict / load balancing / model swap). In a
 * multi-model pool every policy may swap models, the baselines at request granularity.
 */
import { DEFAULT_SLO_CLASSES, type RequestDescriptor, type SloClass } from '@fairway/core';
import { type EngineConfig, fitEnginePerformance, qlmProfile, swapCostOf } from '@fairway/perf';
import {
  edfPolicy,
  fcfsPolicy,
  leastKvPlacement,
  type MilpBudget,
  type MilpSolver,
  type OrderingPolicy,
  type PerformanceModel,
  type QlmFlags,
  type QueuePlanner,
  type RwtProfile,
  type SwapMechanism,
} from '@fairway/policy';
import { computeMetrics, type SimMetrics } from './metrics.ts';
import { QlmControl, type QlmControlStats, type SwapCost } from './qlm-control.ts';
import { classTtftP99 } from './report.ts';
import { runSimulation } from './runner.ts';
import { buildRunInput, type LoadedScenario, loadScenario, type ScenarioRunInput } from './scenario.ts';

/** Policies an SLO experiment compares. */
export const SLO_POLICIES = [
  'fcfs',
  'edf',
  'qlm',
  'qlm-no-pull',
  'qlm-no-evict',
  'qlm-no-lb',
  'qlm-no-swap',
] as const;
/** One of {@link SLO_POLICIES}. */
export type SloPolicy = (typeof SLO_POLICIES)[number];

/** Options of {@link runSloExperiment}. */
export interface SloExperimentOptions {
  /** Built-in scenario name or a loaded scenario. */
  readonly scenario: string | LoadedScenario;
  readonly policy: SloPolicy;
  readonly seed?: number | undefined;
  /** Simulated seconds (shortens or extends the workload). */
  readonly durationS?: number | undefined;
  /**
   * Simulated seconds the run goes on after the workload's last arrival time, with no arrivals,
   * so that late requests can still be served (throughput is over the whole run). @default 0
   */
  readonly drainS?: number | undefined;
  /**
   * Under QLM: each class's band split by the request groups' prompt buckets at the gateways, so
   * the plan's order of a class's groups and their assignment to replicas are carried out
   * (`QlmControlOptions.groupBands`). @default false
   */
  readonly groupBands?: boolean | undefined;
  /** QLM's MILP solver (e.g. `loadHighsSolver()`); without one QLM plans with EDF + local search. */
  readonly solver?: MilpSolver | undefined;
  /** Budget of each MILP solve. @default { maxNodes: 50, timeLimitS: 30 } */
  readonly budget?: MilpBudget | undefined;
  /** Planning interval, simulated ms. @default 1000 */
  readonly intervalMs?: number | undefined;
  /** @default QLM's three classes (DESIGN.md "SLO classes") */
  readonly sloClasses?: readonly SloClass[] | undefined;
  /**
   * Least queued work, in multiples of the swap cost, that makes a replica swap models (see
   * `OperationOptions.minSwapWorkFactor`). @default 10 for QLM; 0 for the baselines, which swap
   * whenever the head of their queue needs another model, as the QLM paper's baselines do
   */
  readonly minSwapWorkFactor?: number | undefined;
  /** How replicas of a multi-model pool load another model. @default 'sleep-wake' */
  readonly swapMechanism?: SwapMechanism | undefined;
  readonly onProgress?: ((simulatedS: number) => void) | undefined;
}

/** Attainment of one class. */
export interface ClassAttainment {
  readonly sloClass: string;
  readonly requests: number;
  readonly met: number;
  /** met / requests; undefined when no request's outcome is known. */
  readonly attainment: number | undefined;
  /** 99th-percentile TTFT of the class's requests that got a first token, s. */
  readonly ttftP99S: number | undefined;
  /** Requests with no first token at the end whose deadline lies beyond it (not in `requests`). */
  readonly pending: number;
  /** Requests no replica like the fleet's serves (context too long; in `requests`, as misses). */
  readonly refused: number;
}

/**
 * Bounds on a class's attainment over every request it was given that a replica could serve
 * (`refused` left out): `low` counts the requests still pending at the end as misses, `high` as
 * met. They are equal when nothing is pending; undefined when the class had no such request.
 */
export function attainmentBounds(
  c: Pick<ClassAttainment, 'requests' | 'met' | 'pending' | 'refused'>,
): { readonly low: number; readonly high: number } | undefined {
  const n = c.requests - c.refused + c.pending;
  return n > 0 ? { low: c.met / n, high: (c.met + c.pending) / n } : undefined;
}

/** What one policy achieved on one scenario. */
export interface SloExperimentResult {
  readonly scenario: string;
  readonly policy: SloPolicy;
  readonly seed: number;
  /** Seconds of arrivals. */
  readonly durationS: number;
  /** Seconds simulated after them. */
  readonly drainS: number;
  readonly classes: readonly ClassAttainment[];
  readonly requests: { readonly arrived: number; readonly completed: number };
  readonly throughput: {
    readonly completedPerS: number;
    readonly outputTokensPerS: number;
  };
  /** Model swaps completed (multi-model pools). */
  readonly swaps: number;
  /** Running requests evicted and re-queued. */
  readonly evictions: number;
  /** What the control did (absent for single-model baselines, which run without one). */
  readonly control?: QlmControlStats | undefined;
  readonly metrics: SimMetrics;
}

/** Which ordering, band mapping, planner and operations a policy uses. */
interface PolicySetup {
  readonly planner: QueuePlanner | undefined;
  readonly flags: QlmFlags;
  readonly bands: 'classes' | 'single';
  readonly ordering: (classes: readonly SloClass[]) => OrderingPolicy;
}

function setupOf(policy: SloPolicy): PolicySetup {
  const single = { bands: 'single' as const, flags: { evict: false } };
  const qlm = (flags: QlmFlags): PolicySetup => ({
    planner: 'qlm',
    flags,
    bands: 'classes',
    // Inside a class, requests leave in arrival order: the order of a class's request groups
    // (each served FCFS, QLM definition 4.1) as the global scheduler keeps them.
    ordering: () => ({ ...fcfsPolicy(), name: 'qlm' }),
  });
  switch (policy) {
    case 'fcfs':
      return { ...single, planner: 'fcfs', ordering: () => fcfsPolicy() };
    case 'edf':
      return { ...single, planner: 'edf', ordering: (c) => edfPolicy(c) };
    case 'qlm':
      return qlm({});
    case 'qlm-no-pull':
      return qlm({ pull: false });
    case 'qlm-no-evict':
      return qlm({ evict: false });
    case 'qlm-no-lb':
      return qlm({ loadBalance: false });
    case 'qlm-no-swap':
      return qlm({ swap: false });
  }
}

function lengthsOf(arrivals: readonly RequestDescriptor[], model: string) {
  const mine = arrivals.filter((a) => a.model === model);
  return {
    inputTokens: mine.map((a) => a.inputTokens),
    outputTokens: mine.map((a) => a.outputTokens ?? a.maxTokens),
  };
}

/** Options of {@link sloPolicySetup}: the policy and QLM's knobs (see {@link SloExperimentOptions}). */
export type SloSetupOptions = Pick<
  SloExperimentOptions,
  | 'policy'
  | 'groupBands'
  | 'solver'
  | 'budget'
  | 'intervalMs'
  | 'sloClasses'
  | 'minSwapWorkFactor'
  | 'swapMechanism'
>;

/** What the runner needs to run one SLO policy: its ordering, the gateway's bands and the control. */
export interface SloPolicySetup {
  readonly ordering: OrderingPolicy;
  /** Classes as the gateway bands them: one band for the single-queue baselines. */
  readonly gatewayClasses: readonly SloClass[];
  /** Classes attainment is scored against (the scenario's). */
  readonly sloClasses: readonly SloClass[];
  /** QLM's control, or the baselines' in a multi-model pool (which must swap models too). */
  readonly control: QlmControl | undefined;
}

/**
 * Builds one SLO policy for a run: FCFS (vLLM) and EDF are one queue over every class, ordered by
 * arrival or deadline; QLM bands the classes and adds its control (request groups, RWT estimator,
 * global scheduler, pull / evict / load balancing / model swap). Estimator profiles come from
 * profiling runs of each (model, GPU, TP) in the fleet and the workload's lengths; output-length
 * priors are learned from `history` (the same scenario under another seed), never from the run.
 */
export function sloPolicySetup(
  input: Pick<ScenarioRunInput, 'engines'> & { readonly sloClasses?: readonly SloClass[] | undefined },
  history: readonly RequestDescriptor[],
  options: SloSetupOptions,
): SloPolicySetup {
  const classes = options.sloClasses ?? input.sloClasses ?? DEFAULT_SLO_CLASSES;
  const setup = setupOf(options.policy);
  const models = [...new Set(input.engines.map((e) => e.config.model))];
  const multiModel = models.length > 1;
  const gatewayClasses = setup.bands === 'single' ? classes.map((c) => ({ ...c, band: 0 })) : classes;
  // Controls run QLM, and the baselines of a multi-model pool (which must swap models too).
  let control: QlmControl | undefined;
  if (setup.bands === 'classes' || multiModel) {
    const configs = new Map<string, EngineConfig>();
    for (const e of input.engines)
      configs.set(`${e.config.model}|${e.config.gpu}|${e.config.tp ?? 1}`, e.config);
    const profiles = new Map<string, RwtProfile>();
    const perfs = new Map<string, PerformanceModel>();
    const profileOf = (model: string, gpu: string, tp: number): RwtProfile => {
      const key = `${model}|${gpu}|${tp}`;
      let p = profiles.get(key);
      if (p === undefined) {
        const config: EngineConfig = { ...(configs.get(key) ?? { gpu, tp }), model, gpu, tp };
        let perf = perfs.get(key);
        if (perf === undefined) {
          perf = fitEnginePerformance(config).model;
          perfs.set(key, perf);
        }
        p = qlmProfile(perf, config, lengthsOf(history, model));
        profiles.set(key, p);
      }
      return p;
    };
    const first = input.engines[0]!.config;
    const batch = profileOf(first.model, first.gpu, first.tp ?? 1).batchSize;
    let sum = 0;
    let sum2 = 0;
    for (const a of history) {
      const o = a.outputTokens ?? a.maxTokens;
      sum += o;
      sum2 += o * o;
    }
    const n = Math.max(1, history.length);
    const mean = sum / n;
    const swappable: Record<string, (gpu: string, tp: number) => SwapCost> = {};
    if (multiModel)
      for (const m of models) swappable[m] = swapCostOf(m, options.swapMechanism ?? 'sleep-wake');
    control = new QlmControl(
      {
        sloClasses: classes,
        gatewayBandOf: (c) => gatewayClasses.find((x) => x.name === c)?.band ?? 0,
        groupBands: setup.bands === 'classes' && options.groupBands === true,
        planner: setup.planner,
        flags: setup.flags,
        solver: options.solver,
        budget: options.budget,
        intervalMs: options.intervalMs,
        profileOf,
        swappable: multiModel ? swappable : undefined,
        // The baselines order single requests, as vLLM's and EDF's queues do.
        groupSize: setup.bands === 'single' ? 1 : undefined,
        minSwapWorkFactor: options.minSwapWorkFactor ?? (setup.bands === 'single' ? 0 : 10),
        outputPrior: { mean, variance: Math.max(0, sum2 / n - mean * mean) },
      },
      batch,
    );
  }

  return { ordering: setup.ordering(classes), gatewayClasses, sloClasses: classes, control };
}

/**
 * Runs one policy on one scenario (see {@link sloPolicySetup}) and reports SLO attainment per
 * class, throughput, swaps and evictions. Deterministic for a seed when the MILP budget is
 * node-limited.
 */
export async function runSloExperiment(options: SloExperimentOptions): Promise<SloExperimentResult> {
  const loaded = typeof options.scenario === 'string' ? loadScenario(options.scenario) : options.scenario;
  const input = buildRunInput(loaded, { seed: options.seed, durationS: options.durationS });
  const history = buildRunInput(loaded, { seed: input.seed + 1, durationS: options.durationS }).arrivals;
  const { ordering, gatewayClasses, sloClasses: classes, control } = sloPolicySetup(input, history, options);
  const drainS = options.drainS ?? 0;
  const run = await runSimulation({
    ...input,
    durationS: input.durationS + drainS,
    ordering,
    placement: leastKvPlacement(),
    sloClasses: gatewayClasses,
    control,
    onProgress: options.onProgress,
  });
  const metrics = computeMetrics(run, { sloClasses: classes });
  let evictions = 0;
  for (const r of run.records) evictions += r.evictions ?? 0;
  return {
    scenario: input.scenario,
    policy: options.policy,
    seed: input.seed,
    durationS: input.durationS,
    drainS,
    classes: metrics.slo.map((s) => ({
      sloClass: s.sloClass,
      requests: s.requests,
      met: s.met,
      attainment: s.attainment,
      ttftP99S: classTtftP99(run, s.sloClass),
      pending: s.pending,
      refused: s.refused,
    })),
    requests: { arrived: metrics.requests.arrived, completed: metrics.requests.completed },
    throughput: {
      completedPerS: metrics.throughput.completedPerS,
      outputTokensPerS: metrics.throughput.outputTokensPerS,
    },
    swaps: run.swaps ?? 0,
    evictions,
    ...(control ? { control: control.stats() } : {}),
    metrics,
  };
}
