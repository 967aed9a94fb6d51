import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { loadHighsSolver } from '@fairway/policy';
import {
  buildReport,
  buildRunInput,
  computeInteractionMetrics,
  computeMetrics,
  formatReport,
  listScenarios,
  loadScenario,
  renderPlots,
  reportJson,
  runSimulation,
  SLO_POLICIES,
  type SloPolicy,
  sloPolicySetup,
} from '@fairway/sim';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { ExitCode, UsageError } from '../cli-error.ts';
import type { CliIo } from '../cli-io.ts';
import { PLACEMENT_POLICIES } from '../placement-table.ts';
import { ORDERING_POLICIES } from '../policy-table.ts';
import { progressBar } from '../progress-bar.ts';
import { optimalSimCommand } from './sim-optimal.ts';

/** Parsed options of `fairway sim`. */
export interface SimOptions {
  readonly scenario?: string | undefined;
  readonly policy: string;
  readonly placement: string;
  readonly seed?: number | undefined;
  readonly duration?: number | undefined;
  readonly json?: boolean | undefined;
  readonly out?: string | undefined;
  readonly list?: boolean | undefined;
  readonly rpm?: number | undefined;
  /** Gateway replicas sharing one store. */
  readonly dispatchers?: number | undefined;
  /** Interval at which each gateway charges streamed output, ms. */
  readonly flushMs?: number | undefined;
  /** Step-time noise distribution for every engine (none, lognormal, normal). */
  readonly stepNoise?: 'none' | 'lognormal' | 'normal' | undefined;
  /** Its coefficient of variation. */
  readonly stepNoiseCv?: number | undefined;
  /** Prefix-cache affinity of the gateways (off, bounded, unbounded). */
  readonly prefixAffinity?: 'off' | 'bounded' | 'unbounded' | undefined;
  readonly kvEvents?: boolean | undefined;
  /** Load bound of bounded affinity, × the pool's mean reserved KV tokens. */
  readonly affinityLoadFactor?: number | undefined;
  readonly groupBands?: boolean | undefined;
}

function integer(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n)) throw new InvalidArgumentError('must be an integer');
  return n;
}

function positive(value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError('must be a positive number of seconds');
  return n;
}

function nonNegative(value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0) throw new InvalidArgumentError('must be a number ≥ 0');
  return n;
}

/**
 * Policies the SLO experiments run (`fcfs`, `edf`, `qlm` and QLM's ablations): `fairway sim` runs
 * them exactly as `runSloExperiment` does — one queue for FCFS and EDF, QLM's control for `qlm*`.
 */
function sloPolicyOf(name: string): SloPolicy | undefined {
  return (SLO_POLICIES as readonly string[]).includes(name) ? (name as SloPolicy) : undefined;
}

function policyNames(): string[] {
  return [...new Set([...Object.keys(ORDERING_POLICIES), ...SLO_POLICIES])];
}

/** Adds `fairway sim` to the program. */
export function registerSimCommand(program: Command, io: CliIo, setCode: (code: number) => void): void {
  program
    .command('sim')
    .description('simulate a vLLM fleet under a scenario and print fairness, latency and throughput')
    .option('-s, --scenario <name|file>', 'built-in scenario name, or a scenario file (.json/.yaml)')
    .addOption(
      new Option(
        '-p, --policy <name>',
        `ordering policy: ${policyNames().join(', ')}, optimal (InferMax optimal schedule, small one-engine scenarios)`,
      ).default('fcfs'),
    )
    .addOption(
      new Option(
        '--placement <name>',
        `placement policy: ${Object.keys(PLACEMENT_POLICIES).join(', ')}`,
      ).default('least-kv'),
    )
    .option('--rpm <n>', 'requests per minute per tenant (policy rpm)', integer)
    .option('--seed <n>', "override the scenario's seed", integer)
    .option('--duration <s>', "override the scenario's duration (simulated seconds)", positive)
    .option('--dispatchers <n>', 'gateway replicas (dispatchers) sharing one store (default 1)', integer)
    .option('--flush-ms <ms>', 'each dispatcher charges streamed output this often (default 50)', positive)
    .addOption(
      new Option(
        '--step-noise <dist>',
        "jitter every engine step's time (replaces the scenario's setting; default: the scenario's, else none)",
      ).choices(['none', 'lognormal', 'normal']),
    )
    .option(
      '--step-noise-cv <x>',
      "coefficient of variation of --step-noise (default 0.10, vLLM's measured decode-step jitter)",
      nonNegative,
    )
    .addOption(
      new Option(
        '--prefix-affinity <mode>',
        "send requests that share a prompt prefix back to the replica that served it: bounded by load (fair), unbounded (affinity only) or off (default: the scenario's, else off)",
      ).choices(['off', 'bounded', 'unbounded']),
    )
    .option(
      '--affinity-load-factor <x>',
      "bounded affinity's load bound, × the pool's mean reserved KV tokens (default 1.25)",
      nonNegative,
    )
    .option(
      '--kv-events',
      "with --prefix-affinity: steer each request to the replica whose prefix cache holds the longest run of its prompt's blocks, as dispatchers fed vLLM's KV cache events do, and charge those tokens as cached (default: the scenario's, else off)",
    )
    .option(
      '--group-bands',
      "under --policy qlm*: split each SLO class's queue by the request groups' prompt buckets, so the plan's group order and assignment are carried out (policy.control.groupBands)",
    )
    .option('--json', 'print exactly one JSON object on stdout')
    .option('--out <dir>', 'also write report.json and SVG plots to this directory')
    .option('--list', 'list the built-in scenarios')
    .action(async (opts: SimOptions) => {
      setCode(await simCommand(opts, io));
    });
}

/** Runs `fairway sim` and returns its exit code; bad input throws a `UsageError` or `ConfigError`. */
export async function simCommand(opts: SimOptions, io: CliIo): Promise<number> {
  if (opts.list) {
    const all = listScenarios();
    const width = Math.max(...all.map((s) => s.name.length));
    io.out(`${all.map((s) => `${s.name.padEnd(width)}  ${s.description}`).join('\n')}\n`);
    return ExitCode.OK;
  }
  if (opts.policy === 'optimal') return optimalSimCommand(opts, io);
  const problems: string[] = [];
  if (!opts.scenario) problems.push('--scenario is required (see --list for the built-in ones)');
  const policyEntry = ORDERING_POLICIES[opts.policy];
  const sloPolicy = sloPolicyOf(opts.policy);
  if (!policyEntry && !sloPolicy)
    problems.push(`unknown policy "${opts.policy}"; known: ${policyNames().join(', ')}`);
  const placementEntry = PLACEMENT_POLICIES[opts.placement];
  if (!placementEntry)
    problems.push(
      `unknown placement "${opts.placement}"; known: ${Object.keys(PLACEMENT_POLICIES).join(', ')}`,
    );
  if (opts.policy === 'rpm' && (opts.rpm === undefined || opts.rpm <= 0))
    problems.push('policy rpm needs --rpm <n> (requests per minute per tenant, > 0)');
  if (opts.dispatchers !== undefined && opts.dispatchers < 1)
    problems.push('--dispatchers must be at least 1');
  if (opts.affinityLoadFactor !== undefined && opts.affinityLoadFactor < 1)
    problems.push('--affinity-load-factor must be at least 1');
  if (opts.groupBands === true && !sloPolicy?.startsWith('qlm'))
    problems.push('--group-bands needs --policy qlm (or one of its ablations)');
  if (opts.stepNoiseCv !== undefined && opts.stepNoise === undefined)
    problems.push('--step-noise-cv needs --step-noise <lognormal|normal>');
  if (problems.length > 0 || (!policyEntry && !sloPolicy) || !placementEntry || !opts.scenario)
    throw new UsageError(problems);

  const loaded = loadScenario(opts.scenario);
  const stepNoise =
    opts.stepNoise === undefined
      ? undefined
      : { distribution: opts.stepNoise, ...(opts.stepNoiseCv !== undefined ? { cv: opts.stepNoiseCv } : {}) };
  const input = buildRunInput(loaded, {
    seed: opts.seed,
    durationS: opts.duration,
    stepNoise,
    prefixAffinity: opts.prefixAffinity,
    affinityLoadFactor: opts.affinityLoadFactor,
    kvEvents: opts.kvEvents,
  });
  // FairServe policies learn from past traffic: the same scenario under the next seed.
  const history = buildRunInput(loaded, { seed: input.seed + 1, durationS: opts.duration }).arrivals;
  const slo = sloPolicy
    ? sloPolicySetup(input, history, {
        policy: sloPolicy,
        groupBands: opts.groupBands === true,
        // QLM plans with HiGHS under a node limit, so a seed replays exactly.
        solver: sloPolicy.startsWith('qlm') ? await loadHighsSolver() : undefined,
      })
    : undefined;
  const bar = progressBar(io, opts.json, 'simulating {bar} {percentage}% | {value}/{total} simulated s');
  bar?.start(Math.round(input.durationS), 0);
  const started = performance.now();
  let run: Awaited<ReturnType<typeof runSimulation>>;
  try {
    run = await runSimulation({
      ...input,
      ordering:
        slo?.ordering ??
        (policyEntry as NonNullable<typeof policyEntry>).create({
          tenantWeights: input.tenantWeights,
          rpm: opts.rpm,
          history,
          seed: input.seed,
          userPriorities: input.userPriorities,
          cachedTokenWeight: input.cachedTokenWeight,
        }),
      sloClasses: slo?.gatewayClasses ?? input.sloClasses,
      control: slo?.control,
      placement: placementEntry.create(input.seed),
      dispatchers: opts.dispatchers,
      flushMs: opts.flushMs,
      onProgress: bar ? (simulatedS: number) => bar.update(Math.round(simulatedS)) : undefined,
    });
  } finally {
    bar?.stop();
  }
  const wallMs = performance.now() - started;
  const metrics = computeMetrics(run, {
    sloClasses: input.sloClasses,
    // Service is measured as the counters charge it: cached prompt tokens at the fleet's weight.
    cachedTokenWeight: input.cachedTokenWeight,
  });
  const report = buildReport(run, metrics, wallMs, {
    interactions: computeInteractionMetrics(run),
    ...(slo?.control ? { control: slo.control.stats() } : {}),
  });
  const json = reportJson(report);
  if (opts.json) io.out(`${json}\n`);
  else io.out(formatReport(report));
  if (opts.out) {
    const dir = resolve(opts.out);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'report.json'), `${JSON.stringify(report, null, 2)}\n`);
    for (const p of await renderPlots(metrics, `${report.scenario} · ${report.policy}`))
      writeFileSync(join(dir, p.file), p.svg);
    if (!opts.json) io.out(`wrote report.json and plots to ${dir}\n`);
  }
  return ExitCode.OK;
}
