import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { EngineError, EngineProfileError, fitEngineProfile, profileEngineMetrics } from '@fairway/engine';
import type { Command } from 'commander';
import { ExitCode, UsageError } from '../cli-error.ts';
import type { CliIo } from '../cli-io.ts';
import { progressBar } from '../progress-bar.ts';

/** Parsed options of `fairway profile`. */
export interface ProfileOptions {
  /** Base URL of the engine's OpenAI server. */
  readonly engine?: string | undefined;
  /** Served model to profile. */
  readonly model?: string | undefined;
  readonly gpu?: string | undefined;
  readonly tp?: string | undefined;
  readonly maxSeqs?: string | undefined;
  readonly apiKey?: string | undefined;
  readonly seed?: string | undefined;
  readonly out?: string | undefined;
  readonly json?: boolean | undefined;
}

/** Adds `fairway profile` to the program. */
export function registerProfileCommand(program: Command, io: CliIo, setCode: (code: number) => void): void {
  program
    .command('profile')
    .description(
      'fit a performance model (KV usage, prefill time, decode iteration time) from a running vLLM-compatible engine’s /metrics, with each fit’s error',
    )
    .option(
      '--engine <url>',
      'base URL of the engine (vLLM or fairway engine-sim), e.g. http://127.0.0.1:8000',
    )
    .option('--model <name>', 'served model to profile (default: the first the engine lists)')
    .option('--gpu <name>', 'GPU of the replica, recorded in the model (default unknown)')
    .option('--tp <n>', 'tensor-parallel degree of the replica (default 1)')
    .option('--max-seqs <n>', 'the engine’s --max-num-seqs, not visible on /metrics (default 256)')
    .option('--api-key <key>', 'the engine’s --api-key, if it has one')
    .option('--seed <n>', 'seed of the random prompt token ids (default 0)')
    .option('--out <file>', 'write the performance-model JSON file here')
    .option('--json', 'print exactly one JSON object (the performance-model file) on stdout')
    .action(async (opts: ProfileOptions) => {
      setCode(await profileCommand(opts, io));
    });
}

function integer(
  flag: string,
  text: string | undefined,
  min: number,
  problems: string[],
): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (text.trim() === '' || !Number.isInteger(n) || n < min) {
    problems.push(`${flag}: must be an integer ≥ ${min} (got "${text}")`);
    return undefined;
  }
  return n;
}

const pct = (x: number): string => `${(x * 100).toFixed(1)}%`;
/** `+ 1.2` or `− 1.2`: a term of a printed formula. */
const term = (x: number): string => `${x < 0 ? '−' : '+'} ${Math.abs(x).toPrecision(4)}`;

/** Runs `fairway profile` and returns its exit code; bad input throws a `UsageError`. */
export async function profileCommand(opts: ProfileOptions, io: CliIo): Promise<number> {
  const problems: string[] = [];
  if (!opts.engine) problems.push('--engine is required (e.g. --engine http://127.0.0.1:8000)');
  else if (!URL.canParse(opts.engine) || !/^https?:$/.test(new URL(opts.engine).protocol))
    problems.push(`--engine: must be an http(s) URL (got "${opts.engine}")`);
  const tp = integer('--tp', opts.tp, 1, problems) ?? 1;
  const maxSeqs = integer('--max-seqs', opts.maxSeqs, 1, problems) ?? 256;
  const seed = integer('--seed', opts.seed, 0, problems) ?? 0;
  if (problems.length > 0 || !opts.engine) throw new UsageError(problems);

  const bar = progressBar(io, opts.json, 'profiling {bar} {value}/{total} phases | {phase}');
  let started = false;
  const t0 = performance.now();
  let samples: Awaited<ReturnType<typeof profileEngineMetrics>>;
  try {
    samples = await profileEngineMetrics({
      url: opts.engine,
      model: opts.model,
      apiKey: opts.apiKey,
      maxSeqs,
      seed,
      onProgress: (done, total, phase) => {
        if (!bar) return;
        if (!started) {
          bar.start(total, 0, { phase });
          started = true;
        }
        bar.update(done, { phase });
      },
    });
  } catch (err) {
    // The engine is down or cannot be profiled: an environment problem, said in one line.
    if (err instanceof EngineError || err instanceof EngineProfileError) {
      io.err(`error: ${err.message}\n`);
      return ExitCode.UNAVAILABLE;
    }
    throw err;
  } finally {
    bar?.stop();
  }
  const wallS = (performance.now() - t0) / 1000;
  const fitted = fitEngineProfile(samples, { gpu: opts.gpu ?? 'unknown', tp, maxSeqs });
  const { model, report, file } = fitted;
  const text = `${JSON.stringify(file, null, 2)}\n`;
  if (opts.out) writeFileSync(resolve(opts.out), text);
  if (opts.json) {
    io.out(`${JSON.stringify(file)}\n`);
    return ExitCode.OK;
  }
  const lines = [
    `${model.model} on ${model.gpu} × ${model.tp} at ${samples.url} (${wallS.toFixed(1)} s): KV capacity ${model.kvCapacityTokens} tokens`,
    `prefill ms = ${model.prefill.k1.toPrecision(4)}·prompt tokens ${term(model.prefill.c1)}   MAPE ${pct(report.prefill.mape)} (max ${pct(report.prefill.maxApe)}, ${report.prefill.samples} samples)`,
    `decode iteration ms = ${model.decode.k2.toPrecision(4)}·batch context ${term(model.decode.c2)}·batch size ${term(model.decode.c3)}   MAPE ${pct(report.decode.mape)} (max ${pct(report.decode.maxApe)}, ${report.decode.samples} samples)`,
    report.kv
      ? `KV tokens per sequence = ${model.kv.h.toPrecision(4)}·context ${term(model.kv.j)}   MAPE ${pct(report.kv.mape)} (${report.kv.samples} samples)`
      : 'KV tokens per sequence: no samples, one per context token assumed',
    ...samples.skipped.map((s) => `skipped ${s}`),
    ...(opts.out ? [`wrote ${resolve(opts.out)}`] : []),
    '',
  ];
  io.out(lines.join('\n'));
  return ExitCode.OK;
}
