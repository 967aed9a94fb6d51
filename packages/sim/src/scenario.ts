/**
 * Scenarios: built-in ones by name, user files (JSON or YAML) by path, and their compilation into
 * the runner's input (engines, tenants and the arrival list), minus the policies.
 */
import { dirname, isAbsolute, resolve } from 'node:path';
import {
  ConfigError,
  DEFAULT_CACHED_TOKEN_WEIGHT,
  DEFAULT_SLO_CLASSES,
  ErrorCode,
  type LengthSpec,
  modelSpec,
  parseWith,
  type RequestDescriptor,
  readStructuredFile,
  type SloClass,
  type Tenant,
} from '@fairway/core';
import {
  cachedTokenWeightFor,
  cachedTokenWeightOf,
  type EngineConfig,
  LinearStepCostModel,
  type StepNoise,
} from '@fairway/perf';
import type { PrefixAffinityMode } from '@fairway/scheduler';
import { naturalCompare } from './metrics.ts';
import { QLM_SCENARIOS } from './qlm-scenarios.ts';
import { type Scenario, type ScenarioInput, scenarioSchema } from './scenario-schema.ts';
import { AZURE_SCENARIOS } from './scenarios/azure.ts';
import { FAIRSERVE_SCENARIOS } from './scenarios/fairserve.ts';
import { PREFIX_SCENARIOS } from './scenarios/prefix.ts';
import { VTC_SCENARIOS } from './scenarios/vtc.ts';
import { VTC_APPENDIX_SCENARIOS } from './scenarios/vtc-appendix.ts';
import { loadTrace, splitTenantIds, TRACE_FILES, type TraceRow, traceWorkload } from './trace.ts';
import { generateWorkload } from './workload.ts';

const BUILTIN: Readonly<Record<string, ScenarioInput>> = {
  ...VTC_SCENARIOS,
  ...VTC_APPENDIX_SCENARIOS,
  ...AZURE_SCENARIOS,
  ...FAIRSERVE_SCENARIOS,
  ...QLM_SCENARIOS,
  ...PREFIX_SCENARIOS,
};

/** A scenario ready to run: validated, named, and where relative trace paths resolve from. */
export interface LoadedScenario {
  readonly name: string;
  readonly scenario: Scenario;
  /** Directory relative trace paths resolve against (the file's directory; cwd for built-ins). */
  readonly baseDir: string;
}

/** Names and one-line descriptions of the built-in scenarios. */
export function listScenarios(): { name: string; description: string }[] {
  return Object.entries(BUILTIN).map(([name, s]) => ({ name, description: s.description ?? '' }));
}

/** Validates scenario data (already parsed from YAML/JSON); errors name each bad field. */
export function parseScenario(data: unknown, source?: string): Scenario {
  return parseWith(scenarioSchema, data, source, ErrorCode.SCENARIO_INVALID);
}

/**
 * Loads a built-in scenario by name, or a scenario file by path (anything containing a path
 * separator or ending in .json/.yaml/.yml). Throws a `ConfigError` with code `SCENARIO_INVALID`
 * (or `CONFIG_UNREADABLE`) that names the problem.
 */
export function loadScenario(nameOrPath: string): LoadedScenario {
  const builtin = BUILTIN[nameOrPath];
  if (builtin) {
    return {
      name: nameOrPath,
      scenario: parseScenario(builtin, nameOrPath),
      baseDir: process.cwd(),
    };
  }
  if (!/[\\/]|\.(json|ya?ml)$/i.test(nameOrPath))
    throw new ConfigError(ErrorCode.SCENARIO_INVALID, undefined, [
      {
        path: 'scenario',
        message: `unknown scenario "${nameOrPath}"; built-in: ${Object.keys(BUILTIN).join(', ')} (or give a .json/.yaml file)`,
      },
    ]);
  const path = isAbsolute(nameOrPath) ? nameOrPath : resolve(nameOrPath);
  const scenario = parseScenario(readStructuredFile(path), path);
  const base = path.replace(/^.*[\\/]/, '').replace(/\.(json|ya?ml)$/i, '');
  return { name: scenario.name ?? base, scenario, baseDir: dirname(path) };
}

/** What a scenario compiles to: everything the runner needs except the policies. */
export interface ScenarioRunInput {
  readonly scenario: string;
  readonly seed: number;
  readonly durationS: number;
  readonly engines: readonly { readonly id: string; readonly config: EngineConfig }[];
  readonly tenants: readonly Tenant[];
  /** Tenant id → weight. */
  readonly tenantWeights: Readonly<Record<string, number>>;
  /** Sorted by `arrivalMs`, `outputTokens` set. */
  readonly arrivals: readonly RequestDescriptor[];
  /** The scenario's SLO classes (its own, or QLM's three by default); every arrival's class is one. */
  readonly sloClasses: readonly SloClass[];
  /** FairServe's user priority factor E of the tenants that set one (absent: 1). */
  readonly userPriorities: Readonly<Record<string, number>>;
  /**
   * Weight of a prompt token served from the prefix cache in the fairness counters: the relative
   * cost derived from the engines' performance presets (the largest if they differ).
   */
  readonly cachedTokenWeight: number;
  /** The gateways' prefix-cache affinity (scenario or override). @default 'off' */
  readonly prefixAffinity?: PrefixAffinityMode | undefined;
  /** Load bound of `bounded` affinity. @default 1.25 */
  readonly affinityLoadFactor?: number | undefined;
  /** Least bound of `bounded` affinity, × the pool's mean KV capacity. @default 0.05 */
  readonly affinityFloor?: number | undefined;
  /** Affinity by the engines' KV cache events (scenario or override). @default false */
  readonly kvEvents?: boolean | undefined;
}

/**
 * The cached-token weight of a fleet: its engines' relative cost derived from their cost models
 * (`cachedTokenWeightOf`), the largest of them; `DEFAULT_CACHED_TOKEN_WEIGHT` when none is known.
 */
export function fleetCachedTokenWeight(engines: readonly { readonly config: EngineConfig }[]): number {
  let w: number | undefined;
  for (const e of engines) {
    const c = e.config.costModel;
    const own =
      c instanceof LinearStepCostModel
        ? cachedTokenWeightOf(c.coefficients)
        : cachedTokenWeightFor(e.config.model, e.config.gpu, e.config.tp ?? 1);
    if (own !== undefined) w = Math.max(w ?? 0, own);
  }
  return w ?? DEFAULT_CACHED_TOKEN_WEIGHT;
}

/** Run-time overrides of a scenario's settings. */
export interface ScenarioOverrides {
  readonly seed?: number | undefined;
  /** Simulated seconds; shortens or extends the workload too. */
  readonly durationS?: number | undefined;
  /** Step-time noise for every engine, replacing what the scenario's engine groups set. */
  readonly stepNoise?: StepNoise | undefined;
  /** Prefix-cache affinity, replacing the scenario's. */
  readonly prefixAffinity?: PrefixAffinityMode | undefined;
  /** Load bound of `bounded` affinity, replacing the scenario's. */
  readonly affinityLoadFactor?: number | undefined;
  /** Affinity by the engines' KV cache events, replacing the scenario's. */
  readonly kvEvents?: boolean | undefined;
}

type ScenarioLength = NonNullable<Scenario['streams']>[number]['input'];

/** Turns a `trace` length spec into the empirical distribution of that trace column. */
function resolveLengths(spec: ScenarioLength, loaded: LoadedScenario, field: string): LengthSpec {
  if (spec.kind !== 'trace') return spec;
  const name =
    spec.trace in TRACE_FILES || isAbsolute(spec.trace) ? spec.trace : resolve(loaded.baseDir, spec.trace);
  let rows: readonly TraceRow[];
  try {
    rows = loadTrace(name);
  } catch (cause) {
    throw new ConfigError(
      ErrorCode.SCENARIO_INVALID,
      loaded.name,
      [
        {
          path: `${field}.trace`,
          message:
            cause instanceof ConfigError
              ? `${cause.source ?? name}: ${cause.issues.map((i) => i.message).join('; ')}`
              : String(cause),
        },
      ],
      { cause },
    );
  }
  return {
    kind: 'empirical',
    values: rows.map((r) => Math.max(1, spec.column === 'input' ? r.inputTokens : r.outputTokens)),
  };
}

/** Compiles a loaded scenario into the runner's input (engines, tenants, arrivals). */
export function buildRunInput(loaded: LoadedScenario, overrides: ScenarioOverrides = {}): ScenarioRunInput {
  const s = loaded.scenario;
  const seed = overrides.seed ?? s.seed;
  const durationS = overrides.durationS ?? s.durationS;
  const engines: { id: string; config: EngineConfig }[] = [];
  for (const g of s.cluster.engines) {
    for (let k = 0; k < g.count; k++) {
      engines.push({
        id: `replica-${engines.length}`,
        config: {
          gpu: g.gpu,
          model: g.model,
          tp: g.tp,
          ...(g.kvCapacityTokens !== undefined ? { kvCapacityTokens: g.kvCapacityTokens } : {}),
          ...g.options,
          ...(overrides.stepNoise !== undefined ? { stepNoise: overrides.stepNoise } : {}),
        },
      });
    }
  }
  const model = s.cluster.engines[0]!.model;
  const declared = new Map((s.tenants ?? []).map((t) => [t.id, t]));
  let arrivals: RequestDescriptor[];
  let tenantIds: string[];
  if (s.trace) {
    const t = s.trace;
    const trace = t.name in TRACE_FILES || isAbsolute(t.name) ? t.name : resolve(loaded.baseDir, t.name);
    tenantIds = t.split
      ? splitTenantIds(t.split.tenants)
      : [...new Set(loadTrace(trace).map((r) => r.tenant ?? ''))].sort(naturalCompare);
    for (const id of declared.keys())
      if (!tenantIds.includes(id))
        throw new ConfigError(ErrorCode.SCENARIO_INVALID, loaded.name, [
          {
            path: 'tenants',
            message: `tenant "${id}" is not one of the trace's tenants (${tenantIds[0]}…${tenantIds.at(-1)})`,
          },
        ]);
    const apps: Record<string, string> = {};
    for (const [id, d] of declared) if (d.app) apps[id] = d.app;
    arrivals = traceWorkload({
      trace,
      split: t.split,
      seed,
      model,
      rateScale: t.rateScale,
      startS: t.startS,
      durationS,
      sloClass: t.sloClass,
      maxTokensExact: t.maxTokens === 'output',
      apps,
      maxModelLen: modelSpec(model).maxModelLen,
    });
  } else {
    const streams = (s.streams ?? []).map((st, i) => ({
      ...st,
      app: st.app ?? declared.get(st.tenant)?.app,
      input: resolveLengths(st.input, loaded, `streams[${i}].input`),
      output: resolveLengths(st.output, loaded, `streams[${i}].output`),
      interaction: st.interaction && {
        ...st.interaction,
        size:
          st.interaction.size.kind === 'fairserve'
            ? st.interaction.size
            : resolveLengths(st.interaction.size, loaded, `streams[${i}].interaction.size`),
      },
    }));
    tenantIds = [...new Set([...declared.keys(), ...streams.map((st) => st.tenant)])];
    arrivals = generateWorkload({ streams, durationS, seed, model });
  }
  const tenants: Tenant[] = tenantIds.map((id) => ({ id, weight: declared.get(id)?.weight ?? 1 }));
  const tenantWeights: Record<string, number> = {};
  for (const t of tenants) tenantWeights[t.id] = t.weight;
  const sloClasses = s.sloClasses ?? DEFAULT_SLO_CLASSES;
  const userPriorities: Record<string, number> = {};
  for (const [id, t] of declared) if (t.priority !== undefined) userPriorities[id] = t.priority;
  return {
    scenario: loaded.name,
    seed,
    durationS,
    engines,
    tenants,
    tenantWeights,
    arrivals,
    sloClasses,
    userPriorities,
    cachedTokenWeight: fleetCachedTokenWeight(engines),
    ...((overrides.prefixAffinity ?? s.prefixAffinity) !== undefined
      ? { prefixAffinity: overrides.prefixAffinity ?? s.prefixAffinity }
      : {}),
    ...((overrides.affinityLoadFactor ?? s.affinityLoadFactor) !== undefined
      ? { affinityLoadFactor: overrides.affinityLoadFactor ?? s.affinityLoadFactor }
      : {}),
    ...(s.affinityFloor !== undefined ? { affinityFloor: s.affinityFloor } : {}),
    ...((overrides.kvEvents ?? s.kvEvents) === true ? { kvEvents: true } : {}),
  };
}
