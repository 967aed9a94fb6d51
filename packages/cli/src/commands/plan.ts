import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { GPUS, MODELS } from '@fairway/core';
import {
  type PerformanceFitReport,
  type PerformanceModel,
  PLACEMENT_NAMES,
  PolicyInputError,
  parsePerformanceModelFile,
} from '@fairway/policy';
import { type FleetPlan, planFleet, renderPlanPlot } from '@fairway/sim';
import type { Command } from 'commander';
import { z } from 'zod';
import { ExitCode, UsageError } from '../cli-error.ts';
import type { CliIo } from '../cli-io.ts';

/** Parsed options of `fairway plan`. */
export interface PlanOptions {
  readonly trace?: string | undefined;
  readonly model?: string | undefined;
  readonly gpu?: string | undefined;
  /** `ttft=<t>,atgt=<t>`, each in s or with an `ms` suffix. */
  readonly slo?: string | undefined;
  /** Comma-separated multiples of the trace's mean arrival rate. */
  readonly rates?: string | undefined;
  /** Simulated seconds of the trace replayed per check. */
  readonly window?: string | undefined;
  /** Comma-separated placement policies. */
  readonly placements?: string | undefined;
  /** Comma-separated tensor-parallel degrees to consider. */
  readonly tp?: string | undefined;
  readonly maxReplicas?: string | undefined;
  readonly seed?: string | undefined;
  readonly json?: boolean | undefined;
  readonly out?: string | undefined;
  /** A performance-model file from `fairway profile`, used instead of profiling the presets. */
  readonly perfModel?: string | undefined;
  /** `nvlink` or `pcie`: the link a replica's GPUs all-reduce over at TP > 1. */
  readonly interconnect?: string | undefined;
  /** `slo-aware` (default: Aladdin's room for every baseline) or `own` (KV and sequence slots only). */
  readonly baselines?: string | undefined;
  /** Seconds an idle bin stays open: also run Aladdin on an elastic fleet. */
  readonly elastic?: string | undefined;
}

/** What Aladdin's elastic fleet held open per rate (`--elastic`). */
function elasticLines(plan: FleetPlan, closeAfterS: number | undefined): string[] {
  const points = plan.policies.find((p) => p.placement === 'aladdin')?.points ?? [];
  const rows = points.flatMap((p) =>
    p.elastic === undefined
      ? []
      : [
          `${(plan.traceRate * p.rateScale).toFixed(1)} req/s: peak ${p.elastic.peakGpus}, mean ${p.elastic.meanGpus.toFixed(1)} GPUs, ${p.elastic.met ? 'meets' : 'misses'} P100`,
        ],
  );
  return rows.length === 0
    ? []
    : [
        `Aladdin, elastic (bins open when none can take a request, close after ${closeAfterS} s idle): ${rows.join('; ')}`,
      ];
}

/** Reads a performance-model file; problems (unreadable, not JSON, invalid fields) are appended. */
function readPerfModel(
  path: string,
  problems: string[],
): { model: PerformanceModel; fit: PerformanceFitReport } | undefined {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    problems.push(`--perf-model: cannot read ${path} as JSON (${(err as Error).message})`);
    return undefined;
  }
  try {
    const { model, file } = parsePerformanceModelFile(json);
    return { model, fit: { ...file.fit, kv: file.fit.kv } };
  } catch (err) {
    if (!(err instanceof PolicyInputError)) throw err;
    for (const i of err.issues)
      problems.push(`--perf-model: ${path}: ${i.path ? `${i.path}: ` : ''}${i.message}`);
    return undefined;
  }
}

const duration = z
  .string()
  .regex(/^\d+(\.\d+)?(ms|s)?$/, 'must be a duration like 1.5, 1.5s or 400ms')
  .transform((v) => (v.endsWith('ms') ? Number(v.slice(0, -2)) / 1000 : Number(v.replace(/s$/, ''))))
  .refine((v) => v > 0, 'must be positive');

/** Parses `ttft=…,atgt=…` into seconds; problems name the key. */
export function parseSlo(text: string): { ttftS: number; atgtS: number } | string[] {
  const fields: Record<string, string> = {};
  const problems: string[] = [];
  for (const part of text.split(',')) {
    const [k, v] = part.split('=').map((x) => x.trim());
    if (!k || v === undefined) problems.push(`--slo: "${part}" is not key=value`);
    else fields[k] = v;
  }
  const out: Record<string, number> = {};
  for (const key of ['ttft', 'atgt']) {
    const raw = fields[key];
    if (raw === undefined) {
      problems.push(`--slo: ${key} is required (e.g. --slo ttft=1s,atgt=25ms)`);
      continue;
    }
    const r = duration.safeParse(raw);
    if (!r.success) problems.push(`--slo: ${key}: ${r.error.issues[0]?.message ?? 'invalid'}`);
    else out[key] = r.data;
  }
  for (const k of Object.keys(fields))
    if (k !== 'ttft' && k !== 'atgt') problems.push(`--slo: unknown key "${k}" (known: ttft, atgt)`);
  if (problems.length > 0) return problems;
  return { ttftS: out.ttft as number, atgtS: out.atgt as number };
}

function numberList(flag: string, text: string | undefined, integer: boolean, problems: string[]) {
  if (text === undefined) return undefined;
  const values = text.split(',').map((x) => Number(x.trim()));
  if (values.some((v) => !Number.isFinite(v) || v <= 0 || (integer && !Number.isInteger(v)))) {
    problems.push(`${flag}: must be a comma-separated list of positive ${integer ? 'integers' : 'numbers'}`);
    return undefined;
  }
  return values;
}

/** Adds `fairway plan` to the program. */
export function registerPlanCommand(program: Command, io: CliIo, setCode: (code: number) => void): void {
  program
    .command('plan')
    .description(
      'fewest GPUs meeting the SLOs of every request (P100) per placement policy, the tensor-parallel degree, and GPUs against arrival rate',
    )
    .option('--trace <name|file>', 'built-in trace (azure-conv, azure-code) or a CSV trace')
    .option('--model <name>', `model: ${Object.keys(MODELS).join(', ')}`)
    .option('--gpu <name>', `GPU: ${Object.keys(GPUS).join(', ')}`)
    .option(
      '--perf-model <file>',
      'plan with a performance model from fairway profile (its model, GPU and TP) instead of the presets',
    )
    .option('--slo <ttft=…,atgt=…>', 'SLO targets, in s or ms, e.g. ttft=1s,atgt=25ms')
    .option('--rates <list>', 'arrival rates as multiples of the trace mean rate (default 1,2,4)')
    .option('--window <s>', 'simulated seconds of the trace replayed per check (default 300)')
    .option('--placements <list>', `placement policies (default ${PLACEMENT_NAMES.join(',')})`)
    .option('--tp <list>', 'tensor-parallel degrees to consider (default 1,2,4,8)')
    .option('--max-replicas <n>', 'largest fleet searched (default 64)')
    .option(
      '--interconnect <link>',
      'nvlink or pcie: how a replica’s GPUs all-reduce at TP > 1 (default NVLink where the GPU has it)',
    )
    .option(
      '--baselines <info>',
      'slo-aware (default: baselines get Aladdin’s SLO-aware room and sequence reports) or own (KV and sequence slots only)',
    )
    .option(
      '--elastic <s>',
      'also run Aladdin on an elastic fleet of up to --max-replicas bins: one opens when no open bin can take a request, one idle this many seconds closes; prints the GPUs open at peak and on average',
    )
    .option('--seed <n>', 'seed (default 1)')
    .option('--json', 'print exactly one JSON object on stdout')
    .option('--out <dir>', 'also write plan.json and gpus-vs-rate.svg to this directory')
    .action(async (opts: PlanOptions) => {
      setCode(await planCommand(opts, io));
    });
}

function table(plan: FleetPlan): string {
  const scales = plan.policies[0]?.points.map((p) => p) ?? [];
  const head = ['placement', ...scales.map((p) => `${p.rate.toFixed(1)} req/s`)];
  const rows = plan.policies.map((p) => [
    p.placement,
    ...p.points.map((pt) => (pt.gpus === undefined ? '>max' : String(pt.gpus))),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join('  ');
  return [line(head), ...rows.map(line)].join('\n');
}

/** Runs `fairway plan` and returns its exit code; bad input throws a `UsageError`. */
export async function planCommand(opts: PlanOptions, io: CliIo): Promise<number> {
  const problems: string[] = [];
  if (!opts.trace) problems.push('--trace is required (azure-conv, azure-code or a CSV file)');
  const perf = opts.perfModel === undefined ? undefined : readPerfModel(opts.perfModel, problems);
  if (opts.perfModel === undefined) {
    if (!opts.model) problems.push('--model is required');
    else if (!(opts.model in MODELS))
      problems.push(`--model: unknown model "${opts.model}"; known: ${Object.keys(MODELS).join(', ')}`);
    if (!opts.gpu) problems.push('--gpu is required');
    else if (!(opts.gpu in GPUS))
      problems.push(`--gpu: unknown GPU "${opts.gpu}"; known: ${Object.keys(GPUS).join(', ')}`);
  } else {
    for (const flag of ['model', 'gpu', 'tp'] as const)
      if (opts[flag] !== undefined) problems.push(`--${flag}: not with --perf-model (the file names it)`);
  }
  let slo: { ttftS: number; atgtS: number } | undefined;
  if (!opts.slo) problems.push('--slo is required (e.g. --slo ttft=1s,atgt=25ms)');
  else {
    const parsed = parseSlo(opts.slo);
    if (Array.isArray(parsed)) problems.push(...parsed);
    else slo = parsed;
  }
  const rates = numberList('--rates', opts.rates, false, problems);
  const window = numberList('--window', opts.window, false, problems)?.[0];
  const tps = numberList('--tp', opts.tp, true, problems);
  const maxReplicas = numberList('--max-replicas', opts.maxReplicas, true, problems)?.[0];
  const seed = numberList('--seed', opts.seed, true, problems)?.[0];
  const closeAfterS = opts.elastic === undefined ? undefined : Number(opts.elastic);
  if (closeAfterS !== undefined && !(Number.isFinite(closeAfterS) && closeAfterS >= 0))
    problems.push(`--elastic: "${opts.elastic}" is not a number of seconds ≥ 0`);
  const placements = opts.placements?.split(',').map((p) => p.trim());
  const interconnect = opts.interconnect;
  if (interconnect !== undefined && interconnect !== 'nvlink' && interconnect !== 'pcie')
    problems.push(`--interconnect: "${interconnect}" is neither nvlink nor pcie`);
  const baselines = opts.baselines;
  if (baselines !== undefined && baselines !== 'slo-aware' && baselines !== 'own')
    problems.push(`--baselines: "${baselines}" is neither slo-aware nor own`);
  for (const p of placements ?? [])
    if (!(PLACEMENT_NAMES as readonly string[]).includes(p))
      problems.push(`--placements: unknown placement "${p}"; known: ${PLACEMENT_NAMES.join(', ')}`);
  const model = perf?.model.model ?? opts.model;
  const gpu = perf?.model.gpu ?? opts.gpu;
  if (problems.length > 0 || !opts.trace || !model || !gpu || !slo) throw new UsageError(problems);

  const plan = await planFleet({
    trace: opts.trace,
    model,
    gpu,
    performanceModel: perf,
    slo,
    rateScales: rates,
    windowS: window,
    placements,
    tps,
    maxReplicas,
    seed,
    interconnect: interconnect as 'nvlink' | 'pcie' | undefined,
    baselineCapacity: baselines as 'slo-aware' | 'own' | undefined,
    ...(closeAfterS === undefined ? {} : { elastic: { closeAfterS } }),
    onProgress: opts.json ? undefined : (m) => io.err(`${m}\n`),
  });
  if (opts.json) io.out(`${JSON.stringify(plan)}\n`);
  else {
    const fit = plan.performance.fit;
    const savings = plan.aladdinSavingsVsBest
      .filter((s) => s.saving !== undefined)
      .map(
        (s) =>
          `${(plan.traceRate * s.rateScale).toFixed(1)} req/s: ${((s.saving as number) * 100).toFixed(0)}% (vs ${s.best})`,
      )
      .join(', ');
    io.out(
      [
        `${plan.model} on ${plan.gpu}, SLO TTFT ≤ ${plan.slo.ttftS} s and ATGT ≤ ${plan.slo.atgtS * 1000} ms for every request (P100)`,
        `tensor parallelism: ${plan.tp.chosen} GPU(s) per replica (${plan.tp.candidates
          .map((c) => `tp${c.tp} ${c.feasible ? `${c.tokensPerSPerGpu.toFixed(0)} tok/s/GPU` : 'infeasible'}`)
          .join(', ')})`,
        `performance model${opts.perfModel ? ` (from ${opts.perfModel})` : ''} fit error (MAPE): prefill ${(fit.prefill.mape * 100).toFixed(1)}%, decode ${(fit.decode.mape * 100).toFixed(1)}%, KV ${((fit.kv?.mape ?? 0) * 100).toFixed(1)}%`,
        `GPUs needed (window ${plan.windowS} s of ${plan.trace}; ${plan.infeasible} requests excluded as infeasible on any fleet):`,
        table(plan),
        ...(savings ? [`Aladdin vs the best baseline: ${savings} fewer GPUs`] : []),
        ...elasticLines(plan, closeAfterS),
        '',
      ].join('\n'),
    );
  }
  if (opts.out) {
    const dir = resolve(opts.out);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'plan.json'), `${JSON.stringify(plan, null, 2)}\n`);
    writeFileSync(join(dir, 'gpus-vs-rate.svg'), await renderPlanPlot(plan));
    if (!opts.json) io.out(`wrote plan.json and gpus-vs-rate.svg to ${dir}\n`);
  }
  return ExitCode.OK;
}
