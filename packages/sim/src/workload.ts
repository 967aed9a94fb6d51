/**
 * Synthetic workloads: per-tenant streams of requests with an arrival process, token-length
 * distributions, an active interval, an SLO class, an app, users and multi-call interactions.
 * Output is a `RequestDescriptor[]` sorted by arrival that replays exactly for a seed; each stream
 * draws from its own forked RNG, so adding or changing one stream leaves the others unchanged.
 */
import type { RequestDescriptor, Rng } from '@fairway/core';
import { createRng, type LengthSpec, lengthSampler } from '@fairway/core';
import { followUpTiming, type InteractionSpec, interactionSizeSampler } from './workload-interaction.ts';
import { type ArrivalSpec, arrivalTimes } from './workload-rate.ts';

/** One stream of requests from one tenant. */
export interface StreamSpec {
  readonly tenant: string;
  /** Stable name, used for request ids and the RNG fork. @default tenant (then `tenant.2`, `tenant.3`…) */
  readonly name?: string | undefined;
  readonly app?: string | undefined;
  /** Users behind this stream; each interaction picks one uniformly (`<tenant>/u<k>`). @default 1 */
  readonly users?: number | undefined;
  /** @default 'interactive' */
  readonly sloClass?: string | undefined;
  /** Model the requests ask for. @default the workload's model */
  readonly model?: string | undefined;
  readonly arrival: ArrivalSpec;
  /** Prompt tokens. */
  readonly input: LengthSpec;
  /** True output tokens (the engine stops there). */
  readonly output: LengthSpec;
  /**
   * `max_tokens` sent with each request, or `'output'` to send each request's true output length
   * (as the VTC artifact does: it sets `max_new_tokens` to the sampled output length).
   * @default the output distribution's maximum, else 2048
   */
  readonly maxTokens?: number | 'output' | undefined;
  /** System-prompt tokens counted inside the input (FairServe's n_sys). @default 0 */
  readonly systemTokens?: number | undefined;
  /** Seconds from the start of the run. @default 0 */
  readonly startS?: number | undefined;
  /** Seconds from the start of the run. @default the workload's duration */
  readonly endS?: number | undefined;
  /** Interactions of several calls; omitted means one call per arrival. */
  readonly interaction?: InteractionSpec | undefined;
  /** Prompts that share prefixes, with the block hashes prefix caching compares. */
  readonly prefix?: PrefixSpec | undefined;
}

/**
 * How a stream's prompts share prefixes. Each request carries the chained hashes of its full KV
 * blocks (prompt, then answer): equal hashes mean equal tokens up to the end of the block.
 */
export interface PrefixSpec {
  /**
   * Tokens every prompt of the stream starts with (an agent's system prompt), before the sampled
   * input; the requests' `systemTokens` unless the stream sets its own. @default 0
   */
  readonly sharedTokens?: number | undefined;
  /**
   * Name of the shared tokens: streams that name the same prefix start with the same tokens (one
   * system prompt many tenants' apps send), so their requests share its KV blocks.
   * @default the stream's own (no other stream shares it)
   */
  readonly sharedPrefix?: string | undefined;
  /**
   * The calls of one interaction are turns of one conversation: each turn's prompt is the previous
   * turn's prompt and answer followed by the sampled input (the new user message). @default false
   */
  readonly conversation?: boolean | undefined;
  /** Tokens per KV block the hashes are made for (the engines' `blockSize`). @default 16 */
  readonly blockSize?: number | undefined;
  /**
   * A conversation ends before a turn whose prompt plus `max_tokens` would exceed this (the
   * model's context length). @default 4096
   */
  readonly maxContextTokens?: number | undefined;
}

/** The chained block hashes of a prompt of `tokens` tokens (and its answer) under a prefix spec. */
function prefixHashes(p: PrefixSpec, stream: string, key: string, tokens: number): string[] {
  const bs = p.blockSize ?? 16;
  const shared = p.sharedTokens ?? 0;
  const sharedName = p.sharedPrefix === undefined ? stream : `prefix:${p.sharedPrefix}`;
  const out: string[] = [];
  for (let b = 0; b < Math.floor(tokens / bs); b++)
    out.push((b + 1) * bs <= shared ? `${sharedName}:shared/${b}` : `${stream}:${key}/${b}`);
  return out;
}

/** A whole synthetic workload. */
export interface WorkloadSpec {
  readonly streams: readonly StreamSpec[];
  /** Seconds; no request arrives at or after it. */
  readonly durationS: number;
  readonly seed: number;
  /** Default model name of the requests. */
  readonly model: string;
}

/** Resolves each stream's stable name (tenant, then `tenant.2`, … for a tenant's further streams). */
export function streamNames(streams: readonly StreamSpec[]): string[] {
  const seen = new Map<string, number>();
  return streams.map((s) => {
    if (s.name) return s.name;
    const n = (seen.get(s.tenant) ?? 0) + 1;
    seen.set(s.tenant, n);
    return n === 1 ? s.tenant : `${s.tenant}.${n}`;
  });
}

/** Generates the requests of one stream (unsorted across interactions). */
export function generateStream(
  stream: StreamSpec,
  name: string,
  opts: { durationS: number; model: string; rng: Rng },
): RequestDescriptor[] {
  // Separate forks: changing lengths does not move arrivals, and vice versa.
  const arrivalRng = opts.rng.fork('arrivals');
  const lengthRng = opts.rng.fork('lengths');
  const interactionRng = opts.rng.fork('interactions');
  const startS = stream.startS ?? 0;
  const endS = Math.min(stream.endS ?? opts.durationS, opts.durationS);
  if (endS <= startS) return [];
  const starts = arrivalTimes(stream.arrival, startS, endS, arrivalRng);
  const input = lengthSampler(stream.input);
  const output = lengthSampler(stream.output);
  const cap = stream.maxTokens;
  const maxTokensOf =
    cap === 'output' ? (out: number) => out : (out: number) => Math.max(cap ?? output.max ?? 2048, out);
  const sizeOf = stream.interaction ? interactionSizeSampler(stream.interaction.size) : undefined;
  const users = Math.max(1, stream.users ?? 1);
  const out: RequestDescriptor[] = [];
  let seq = 0;
  for (let i = 0; i < starts.length; i++) {
    const size = sizeOf ? Math.max(1, sizeOf(interactionRng)) : 1;
    const user = users > 1 ? `${stream.tenant}/u${interactionRng.int(1, users)}` : undefined;
    const interactionId = sizeOf ? `${name}:i${i}` : undefined;
    let t = starts[i]!;
    /** Tokens of the conversation so far: earlier turns' prompts and answers. */
    let history = 0;
    const closedLoop = stream.interaction?.followUp?.mode === 'after-completion';
    let thinkS: number | undefined;
    for (let stage = 0; stage < size; stage++) {
      if (t >= opts.durationS) break;
      const sampled = input.sample(lengthRng);
      const outputTokens = output.sample(lengthRng);
      const p = stream.prefix;
      const inputTokens = p ? (history > 0 ? history : (p.sharedTokens ?? 0)) + sampled : sampled;
      if (p && inputTokens + maxTokensOf(outputTokens) > (p.maxContextTokens ?? 4096)) break;
      const id = `${name}-${seq++}`;
      const key = p?.conversation ? (interactionId ?? id) : id;
      if (p?.conversation) history = inputTokens + outputTokens;
      out.push({
        id,
        tenant: stream.tenant,
        app: stream.app,
        user,
        model: stream.model ?? opts.model,
        sloClass: stream.sloClass ?? 'interactive',
        inputTokens,
        systemTokens: stream.systemTokens ?? (p?.sharedTokens || undefined),
        maxTokens: maxTokensOf(outputTokens),
        outputTokens,
        arrivalMs: roundMs(t * 1000),
        interactionId,
        interactionStage: sizeOf ? stage : undefined,
        interactionSize: sizeOf ? size : undefined,
        ...(p ? { blockHashes: prefixHashes(p, name, key, inputTokens + outputTokens) } : {}),
        ...(thinkS === undefined ? {} : { thinkMs: roundMs(thinkS * 1000) }),
      });
      const next = followUpTiming(stream.interaction?.followUp, outputTokens, interactionRng);
      if (closedLoop) thinkS = next.thinkS;
      t += next.gapS;
    }
  }
  return out;
}

/** Rounds to whole microseconds so arrival times print and compare the same everywhere. */
function roundMs(ms: number): number {
  return Math.round(ms * 1000) / 1000;
}

/** Orders requests by arrival, then id, giving one total order for equal timestamps. */
export function byArrival(a: RequestDescriptor, b: RequestDescriptor): number {
  return a.arrivalMs - b.arrivalMs || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

/** Generates every stream of the workload and merges them in arrival order. */
export function generateWorkload(spec: WorkloadSpec): RequestDescriptor[] {
  const root = createRng(spec.seed);
  const names = streamNames(spec.streams);
  const all: RequestDescriptor[] = [];
  spec.streams.forEach((s, i) => {
    const name = names[i]!;
    for (const r of generateStream(s, name, {
      durationS: spec.durationS,
      model: spec.model,
      rng: root.fork(`stream:${name}`),
    }))
      all.push(r);
  });
  return all.sort(byArrival);
}
