import { createLogger, type Logger } from '@fairway/core';
import { Command, InvalidArgumentError, Option } from 'commander';
import type { EngineSimOptionsInput } from './options.ts';
import { type EngineSimHandle, startEngineSim } from './server.ts';

/** Longest a graceful shutdown may take before the process exits anyway, ms. */
const SHUTDOWN_GRACE_MS = 5_000;

function num(value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n)) throw new InvalidArgumentError('must be a number');
  return n;
}

function json(value: string): unknown {
  try {
    return JSON.parse(value) as unknown;
  } catch {
    throw new InvalidArgumentError('must be JSON, e.g. {"enable_kv_cache_events":true}');
  }
}

function lengthSpec(value: string): unknown {
  const n = Number(value);
  if (Number.isFinite(n)) return n;
  try {
    return JSON.parse(value) as unknown;
  } catch {
    throw new InvalidArgumentError(
      'must be a token count or a JSON length distribution, e.g. {"kind":"uniform","min":16,"max":512}',
    );
  }
}

/** Flags of `fairway engine-sim` as commander parses them. */
interface EngineSimFlags {
  host?: string;
  port?: number;
  model?: string;
  servedModelName?: string;
  gpu?: string;
  /** `--tensor-parallel-size` / `--tp` (commander names it after the last long flag). */
  tp?: number;
  kvCapacityTokens?: number;
  blockSize?: number;
  maxNumSeqs?: number;
  maxNumBatchedTokens?: number;
  batchPolicy?: 'prefill-priority' | 'decode-priority';
  enableChunkedPrefill?: boolean;
  preemption?: 'recompute' | 'eviction-free';
  schedulingPolicy?: 'fcfs' | 'priority';
  task?: 'generate' | 'embed';
  embeddingDimensions?: number;
  matryoshka?: boolean;
  maxModelLen?: number;
  enablePrefixCaching?: boolean;
  prefixCachingHashAlgo?: 'sha256' | 'sha256_cbor';
  kvEventsConfig?: unknown;
  enablePromptTokensDetails?: boolean;
  speed?: number;
  seed?: number;
  tokenizer?: string;
  streamFlushMs?: number;
  outputTokens?: unknown;
  slowStartMs?: number;
  headersDelayMs?: number;
  errorRate?: number;
  dropRate?: number;
  dropAfterTokens?: number;
  hangRate?: number;
  hangAfterTokens?: number;
  logLevel?: 'debug' | 'info' | 'warn' | 'error' | 'silent';
}

/** Adds the engine-sim flags (named after `vllm serve`'s where one exists) to a command. */
export function addEngineSimFlags(cmd: Command): Command {
  return cmd
    .option('--host <host>', 'interface to listen on', '127.0.0.1')
    .option('--port <port>', 'TCP port (0 picks a free one)', num, 8000)
    .option('--model <preset>', 'model preset of the engine model, e.g. llama-2-7b')
    .option('--served-model-name <name>', 'model name clients send (default: the preset name)')
    .option('--gpu <preset>', 'GPU preset, e.g. A100-80GB')
    .option('--tensor-parallel-size, --tp <n>', 'tensor-parallel degree', num)
    .option('--kv-capacity-tokens <n>', 'KV cache capacity in tokens (default: from GPU memory)', num)
    .option('--block-size <n>', 'tokens per KV block', num)
    .option('--max-num-seqs <n>', 'most sequences per batch', num)
    .option('--max-num-batched-tokens <n>', 'most tokens per step', num)
    .addOption(
      new Option('--batch-policy <policy>', 'batch formation').choices([
        'prefill-priority',
        'decode-priority',
      ]),
    )
    .option('--enable-chunked-prefill', 'split long prompts over several steps')
    .addOption(
      new Option('--preemption <mode>', 'when KV blocks run out').choices(['recompute', 'eviction-free']),
    )
    .addOption(
      new Option('--scheduling-policy <policy>', 'waiting-queue order').choices(['fcfs', 'priority']),
    )
    .addOption(
      new Option('--task <task>', 'generate text, or serve embeddings').choices(['generate', 'embed']),
    )
    .option('--embedding-dimensions <n>', "an embedding model's vector length", num)
    .option('--matryoshka', 'the embedding model may return shorter vectors (`dimensions`)')
    .option('--max-model-len <n>', 'longest prompt + output', num)
    .option('--enable-prefix-caching', 'keep computed KV blocks for prompts that share a prefix')
    .addOption(
      new Option(
        '--prefix-caching-hash-algo <algo>',
        "block hashes: sha256 (of the tokens' JSON) or sha256_cbor (vLLM's, of the token ids, seeded by PYTHONHASHSEED)",
      ).choices(['sha256', 'sha256_cbor']),
    )
    .option(
      '--kv-events-config <json>',
      'publish KV cache events over ZMQ, as vLLM, e.g. {"enable_kv_cache_events":true,"endpoint":"tcp://*:5557"}',
      json,
    )
    .option('--enable-prompt-tokens-details', 'report usage.prompt_tokens_details.cached_tokens')
    .option('--speed <factor>', 'model ms per real ms (10 = ten times faster than the GPU)', num)
    .option('--seed <n>', 'seed of output lengths, faults and ids', num)
    .option('--tokenizer <path>', "the model's tokenizer.json: count prompts with it (default: a stand-in)")
    .option(
      '--stream-flush-ms <ms>',
      "coalesce each stream's chunks into one write per interval (0: per step)",
      num,
    )
    .option(
      '--output-tokens <spec>',
      'natural output length: a count or a JSON length distribution',
      lengthSpec,
    )
    .option('--slow-start-ms <ms>', 'fault: unhealthy (503) for this long after start', num)
    .option('--headers-delay-ms <ms>', 'fault: delay before each generation is answered', num)
    .option('--error-rate <p>', 'fault: fraction of generations answered 500', num)
    .option('--drop-rate <p>', 'fault: fraction of generations whose connection is dropped', num)
    .option('--drop-after-tokens <n>', 'fault: tokens sent before dropping', num)
    .option('--hang-rate <p>', 'fault: fraction of generations that hang mid-stream', num)
    .option('--hang-after-tokens <n>', 'fault: tokens sent before hanging', num)
    .addOption(
      new Option('--log-level <level>', 'log level')
        .choices(['debug', 'info', 'warn', 'error', 'silent'])
        .default('info'),
    );
}

/** Turns parsed flags into {@link startEngineSim} options (validated there). */
export function engineSimOptionsFromFlags(f: EngineSimFlags): EngineSimOptionsInput {
  const faults = Object.fromEntries(
    Object.entries({
      slowStartMs: f.slowStartMs,
      headersDelayMs: f.headersDelayMs,
      errorRate: f.errorRate,
      dropRate: f.dropRate,
      dropAfterTokens: f.dropAfterTokens,
      hangRate: f.hangRate,
      hangAfterTokens: f.hangAfterTokens,
    }).filter(([, v]) => v !== undefined),
  );
  const options = {
    host: f.host,
    port: f.port,
    model: f.model,
    servedModelName: f.servedModelName,
    gpu: f.gpu,
    tp: f.tp,
    kvCapacityTokens: f.kvCapacityTokens,
    blockSize: f.blockSize,
    maxNumSeqs: f.maxNumSeqs,
    maxNumBatchedTokens: f.maxNumBatchedTokens,
    batchPolicy: f.batchPolicy,
    chunkedPrefill: f.enableChunkedPrefill,
    preemption: f.preemption,
    schedulingPolicy: f.schedulingPolicy,
    task: f.task,
    embeddingDimensions: f.embeddingDimensions,
    matryoshka: f.matryoshka,
    maxModelLen: f.maxModelLen,
    enablePrefixCaching: f.enablePrefixCaching,
    prefixCachingHashAlgo: f.prefixCachingHashAlgo,
    kvEventsConfig: f.kvEventsConfig,
    enablePromptTokensDetails: f.enablePromptTokensDetails,
    speed: f.speed,
    seed: f.seed,
    tokenizer: f.tokenizer,
    streamFlushMs: f.streamFlushMs,
    outputTokens: f.outputTokens,
    faults,
  };
  return Object.fromEntries(
    Object.entries(options).filter(([, v]) => v !== undefined),
  ) as EngineSimOptionsInput;
}

/** Hooks of {@link runEngineSimCommand}. */
export interface RunEngineSimHooks {
  /** Logger; by default a pino logger on stderr at `--log-level`. */
  readonly logger?: Logger;
  /** Environment variables read as vLLM reads them (`PYTHONHASHSEED`, …). @default process.env */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Close the engine on SIGINT / SIGTERM. @default true */
  readonly handleSignals?: boolean;
}

/**
 * `fairway engine-sim [flags]`: parses `argv` (the arguments after the command name), starts the
 * simulated engine and resolves with its handle once it listens. Throws commander's errors on bad
 * flags and a `ConfigError` naming the field on invalid values.
 */
export async function runEngineSimCommand(
  argv: readonly string[],
  hooks: RunEngineSimHooks = {},
): Promise<EngineSimHandle> {
  const cmd = addEngineSimFlags(
    new Command('engine-sim')
      .description('a vLLM-compatible simulated engine whose timing comes from the engine model')
      .exitOverride(),
  );
  cmd.parse([...argv], { from: 'user' });
  const flags = cmd.opts<EngineSimFlags>();
  const logger = hooks.logger ?? createLogger({ level: flags.logLevel ?? 'info', name: 'engine-sim' });
  const handle = await startEngineSim({
    ...engineSimOptionsFromFlags(flags),
    logger,
    ...(hooks.env === undefined ? {} : { env: hooks.env }),
  });
  if (hooks.handleSignals ?? true) {
    const stop = (signal: string): void => {
      logger.info({ signal }, 'engine-sim shutting down');
      // A close stuck on a half-open connection must not keep the process alive.
      setTimeout(() => process.exit(1), SHUTDOWN_GRACE_MS).unref();
      handle.close().then(
        () => process.exit(0),
        () => process.exit(1),
      );
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  }
  return handle;
}
