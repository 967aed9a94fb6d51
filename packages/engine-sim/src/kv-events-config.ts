import { ConfigError, ErrorCode } from '@fairway/core';
import { z } from 'zod';

const count = z.number().int().nonnegative();

/** `tcp://host:port` (port a number or `*`) or `ipc://path`: the ZMQ endpoints the publisher takes. */
const ENDPOINT = /^(tcp:\/\/(\[[0-9a-fA-F:.]+\]|[^\s:/[\]]+):(\d{1,5}|\*)|ipc:\/\/\S+)$/u;

/**
 * vLLM's `--kv-events-config` (its `KVEventsConfig`), field names as vLLM spells them: whether and
 * where the engine publishes its KV cache events (`BlockStored`, `BlockRemoved`,
 * `AllBlocksCleared`) over ZMQ.
 */
export const kvEventsConfigSchema = z
  .object({
    /** Publish KV cache events. @default false */
    enable_kv_cache_events: z.boolean().default(false),
    /** `zmq` publishes, `null` drops the events. @default `zmq` when enabled, else `null` */
    publisher: z.enum(['null', 'zmq']).optional(),
    /**
     * ZMQ endpoint of the PUB socket. As vLLM: bound when it has a wildcard (`*`, `::`) or is
     * `ipc://`, connected to otherwise. @default 'tcp://*:5557'
     */
    endpoint: z
      .string()
      .regex(ENDPOINT, 'must be a ZMQ endpoint such as tcp://*:5557, tcp://127.0.0.1:5557 or ipc:///path')
      .default('tcp://*:5557'),
    /** ROUTER endpoint that replays missed batches in vLLM; accepted, not served by engine-sim. */
    replay_endpoint: z.string().min(1).nullish(),
    /** Batches kept for replay. @default 10000 */
    buffer_steps: count.default(10_000),
    /** ZMQ send high-water mark of the PUB socket, messages. @default 100000 */
    hwm: count.default(100_000),
    /** Most batches waiting to be sent; past it a batch is dropped (its seq is skipped). @default 100000 */
    max_queue_size: z.number().int().positive().default(100_000),
    /** First frame of every message; subscribers filter on it. @default '' */
    topic: z.string().default(''),
  })
  .strict()
  .transform((c) => ({ ...c, publisher: c.publisher ?? (c.enable_kv_cache_events ? 'zmq' : 'null') }));

/** `--kv-events-config` as given. */
export type KvEventsConfigInput = z.input<typeof kvEventsConfigSchema>;
/** `--kv-events-config` with vLLM's defaults applied. */
export type KvEventsConfig = z.output<typeof kvEventsConfigSchema>;

/** Environment variables the simulated engine reads as vLLM does. */
export type EngineSimEnv = Readonly<Record<string, string | undefined>>;

/**
 * `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES` as vLLM reads it (`bool(int(value))`, default `1`): true
 * when events carry a block hash as the integer of its low 64 bits, false for the hash's bytes.
 * Throws a `ConfigError` on a value that is not an integer, where vLLM fails to start.
 */
export function intBlockHashes(env: EngineSimEnv): boolean {
  const raw = env.VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES;
  if (raw === undefined) return true;
  const m = /^\s*[+-]?(\d+)\s*$/u.exec(raw);
  if (!m)
    throw new ConfigError(ErrorCode.CONFIG_INVALID, 'engine-sim environment', [
      { path: 'VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES', message: `must be an integer (0 or 1), got "${raw}"` },
    ]);
  return /[1-9]/u.test(m[1]!);
}

/**
 * Whether vLLM binds the publisher's endpoint (a wildcard address, or `ipc://`) rather than
 * connecting to it.
 */
export function bindsEndpoint(endpoint: string): boolean {
  return endpoint.includes('*') || endpoint.includes('::') || endpoint.startsWith('ipc://');
}
