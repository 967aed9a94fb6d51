import { performance } from 'node:perf_hooks';
import {
  buildReport,
  buildRunInput,
  computeMetrics,
  formatReport,
  loadScenario,
  OPTIMAL_LIMITS,
  type RequestRecord,
  reportJson,
  SimError,
  SimErrorCode,
  solveOptimalSchedule,
} from '@fairway/sim';
import { ExitCode, UsageError } from '../cli-error.ts';
import type { CliIo } from '../cli-io.ts';
import type { SimOptions } from './sim.ts';

/**
 * `fairway sim --policy optimal`: the scenario's requests on its single engine, scheduled by the
 * InferMax optimal-schedule MILP (minimum makespan) and replayed through the engine model; the
 * report has the same shape as any other policy's. Only small scenarios: one engine, at most
 * `OPTIMAL_LIMITS.maxRequests` requests; a larger one is a usage error naming the limit.
 */
export async function optimalSimCommand(opts: SimOptions, io: CliIo): Promise<number> {
  if (!opts.scenario) throw new UsageError(['--scenario is required (see --list for the built-in ones)']);
  const loaded = loadScenario(opts.scenario);
  const input = buildRunInput(loaded, { seed: opts.seed, durationS: opts.duration });
  const problems: string[] = [];
  if (input.engines.length !== 1)
    problems.push(
      `policy optimal schedules one engine; scenario "${input.scenario}" has ${input.engines.length}`,
    );
  if (input.arrivals.length > OPTIMAL_LIMITS.maxRequests)
    problems.push(
      `policy optimal solves at most ${OPTIMAL_LIMITS.maxRequests} requests (OPTIMAL_LIMITS.maxRequests); scenario "${input.scenario}" has ${input.arrivals.length} in ${input.durationS} s (try --duration)`,
    );
  if (problems.length > 0) throw new UsageError(problems);
  const requests = input.arrivals.map((a) => ({
    id: a.id,
    inputTokens: a.inputTokens,
    outputTokens: Math.max(1, Math.min(a.outputTokens ?? a.maxTokens, a.maxTokens)),
    arrivalMs: a.arrivalMs,
  }));
  const started = performance.now();
  let opt: Awaited<ReturnType<typeof solveOptimalSchedule>>;
  try {
    opt = await solveOptimalSchedule(requests, { engine: input.engines[0]!.config });
  } catch (err) {
    if (err instanceof SimError && err.code === SimErrorCode.INSTANCE_TOO_LARGE)
      throw new UsageError([err.message]);
    throw err;
  }
  const wallMs = performance.now() - started;
  const replica = input.engines[0]!.id;
  const preempted = new Map<string, number>();
  const dispatched = new Map<string, number>();
  for (const b of opt.batches) {
    for (const id of b.preempt ?? []) preempted.set(id, (preempted.get(id) ?? 0) + 1);
    for (const r of b.run) if (!dispatched.has(r.id)) dispatched.set(r.id, b.startMs);
  }
  const byId = new Map(opt.requests.map((r) => [r.id, r]));
  const records: RequestRecord[] = input.arrivals.map((a, i) => {
    const done = byId.get(a.id)!;
    return {
      req: a,
      arrivalS: a.arrivalMs / 1000,
      dispatchS: (dispatched.get(a.id) ?? done.finishMs) / 1000,
      replica,
      firstTokenS: done.firstTokenMs / 1000,
      finishS: done.finishMs / 1000,
      generated: requests[i]!.outputTokens,
      preemptions: preempted.get(a.id) ?? 0,
    };
  });
  const run = {
    scenario: input.scenario,
    policy: `optimal (${opt.status}${opt.exact ? '' : ', over a capped number of batches'}; lower bound ${opt.lowerBoundMs.toFixed(1)} ms)`,
    placement: 'single engine',
    seed: input.seed,
    durationS: Math.max(input.durationS, opt.makespanMs / 1000),
    records,
    samples: [],
    engineSteps: opt.batches.length,
    preemptions: opt.preemptions,
    tenantWeights: input.tenantWeights ?? {},
  };
  const report = buildReport(run, computeMetrics(run), wallMs);
  if (opts.json) io.out(`${reportJson(report)}\n`);
  else io.out(formatReport(report));
  return ExitCode.OK;
}
