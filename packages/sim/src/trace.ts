/**
 * Replays public LLM request traces as multi-tenant workloads.
 *
 * The built-in traces are the **Azure LLM inference traces 2023** (conversation: 19,366 requests;
 * code: 8,819 requests; one hour each, collected 2023-11-16), from Azure/AzurePublicDataset,
 * published with "Splitwise: Efficient generative LLM inference using phase splitting" (Patel et
 * al., ISCA 2024), licensed **CC-BY 4.0**, in the column-renamed form shipped by microsoft/vidur
 * (`arrived_at,num_prefill_tokens,num_decode_tokens`). Keep this attribution wherever the data or
 * workloads derived from it are redistributed.
 *
 * The traces carry no tenant identity. {@link splitTenants} assigns each request to one of N tenants
 * independently at random with Zipf-skewed probabilities — tenant k (1-based) has weight k^−s — from
 * a seeded RNG, so the same seed gives the same split (see its TSDoc).
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { RequestDescriptor } from '@fairway/core';
import { ConfigError, createRng, ErrorCode, searchCdf, zipfCdf } from '@fairway/core';
import { byArrival } from './workload.ts';

/** Names of the built-in traces. */
export type TraceName = 'azure-conv' | 'azure-code' | 'vtc-artifact-real';

/**
 * File names of the built-in traces in {@link tracesDir}. `vtc-artifact-real` is the request trace
 * of the VTC artifact's published real-workload results (Apache-2.0; provenance in the traces'
 * README): 1,500 requests of 27 clients over 600 s, with a `tenant` column.
 */
export const TRACE_FILES: Readonly<Record<TraceName, string>> = {
  'azure-conv': 'azure-llm-inference-2023-conv.csv',
  'azure-code': 'azure-llm-inference-2023-code.csv',
  'vtc-artifact-real': 'vtc-artifact-real.csv',
};

/** One request of a trace. */
export interface TraceRow {
  /** Seconds from the start of the trace. */
  readonly arrivalS: number;
  readonly inputTokens: number;
  readonly outputTokens: number;
  /** The client that sent it, when the file has a `tenant` column. */
  readonly tenant?: string | undefined;
}

/**
 * Directory holding the built-in traces: `packages/sim/traces/`, vendored in the repository with
 * their licence and attribution (its README), so a fresh clone replays them with nothing beside it.
 */
export function tracesDir(): string {
  // packages/sim/src → packages/sim/traces
  return resolve(dirname(fileURLToPath(import.meta.url)), '..', 'traces');
}

/** Resolves a trace name or a file path to a file path. */
export function resolveTracePath(nameOrPath: string): string {
  if (nameOrPath in TRACE_FILES) return join(tracesDir(), TRACE_FILES[nameOrPath as TraceName]);
  return isAbsolute(nameOrPath) ? nameOrPath : resolve(nameOrPath);
}

const cache = new Map<string, readonly TraceRow[]>();

/**
 * Loads a trace (built-in name or CSV path with columns `arrived_at`, `num_prefill_tokens`,
 * `num_decode_tokens` and optionally `tenant`), sorted by arrival. Throws a `ConfigError` naming the file and line on bad
 * input. Parsed files are cached per path.
 */
export function loadTrace(nameOrPath: string): readonly TraceRow[] {
  const path = resolveTracePath(nameOrPath);
  const hit = cache.get(path);
  if (hit) return hit;
  if (!existsSync(path))
    throw new ConfigError(ErrorCode.CONFIG_UNREADABLE, path, [
      {
        path: 'trace',
        message: `trace file not found (give a CSV path or a built-in name: ${Object.keys(TRACE_FILES).join(', ')})`,
      },
    ]);
  const rows = parseTraceCsv(readFileSync(path, 'utf8'), path);
  cache.set(path, rows);
  return rows;
}

/** Parses trace CSV text; `source` names the file in errors. */
export function parseTraceCsv(text: string, source = 'trace'): TraceRow[] {
  const lines = text.split(/\r?\n/);
  const header = (lines[0] ?? '').split(',').map((h) => h.trim());
  const ia = header.indexOf('arrived_at');
  const ii = header.indexOf('num_prefill_tokens');
  const io = header.indexOf('num_decode_tokens');
  const it = header.indexOf('tenant');
  if (ia < 0 || ii < 0 || io < 0)
    throw new ConfigError(ErrorCode.SCENARIO_INVALID, source, [
      {
        path: 'header',
        message: 'expected columns arrived_at, num_prefill_tokens, num_decode_tokens',
      },
    ]);
  const rows: TraceRow[] = [];
  for (let n = 1; n < lines.length; n++) {
    const line = lines[n]!;
    if (line.trim() === '') continue;
    const cells = line.split(',');
    const arrivalS = Number(cells[ia]);
    const inputTokens = Number(cells[ii]);
    const outputTokens = Number(cells[io]);
    const tenant = it < 0 ? undefined : cells[it]?.trim();
    if (
      tenant === '' ||
      !Number.isFinite(arrivalS) ||
      !Number.isInteger(inputTokens) ||
      !Number.isInteger(outputTokens) ||
      inputTokens < 0 ||
      outputTokens < 0
    )
      throw new ConfigError(ErrorCode.SCENARIO_INVALID, source, [
        { path: `line ${n + 1}`, message: `not a valid trace row: "${line}"` },
      ]);
    rows.push(
      tenant === undefined
        ? { arrivalS, inputTokens, outputTokens }
        : { arrivalS, inputTokens, outputTokens, tenant },
    );
  }
  // Stable: requests arriving together keep the file's order.
  rows.sort((a, b) => a.arrivalS - b.arrivalS);
  return rows;
}

/** How trace requests are assigned to tenants. */
export interface TenantSplit {
  /** Number of tenants, named `t01`, `t02`, … (zero-padded to the width of `tenants`). */
  readonly tenants: number;
  /** Zipf exponent: tenant k gets a share ∝ k^−s; 0 is an even split. @default 1 */
  readonly zipfS?: number | undefined;
  /** Seed of the split; the same seed gives the same assignment. @default the run's seed */
  readonly seed?: number | undefined;
}

/** Tenant ids of a split, in rank order (`t01` has the largest share). */
export function splitTenantIds(tenants: number): string[] {
  const width = String(tenants).length;
  return Array.from({ length: tenants }, (_, k) => `t${String(k + 1).padStart(Math.max(2, width), '0')}`);
}

/**
 * Assigns each of `count` requests to a tenant: request i draws tenant k with probability
 * k^−s / Σ_j j^−s, independently, from `createRng(seed).fork('tenant-split')`.
 */
export function splitTenants(count: number, split: TenantSplit, seed: number): string[] {
  const ids = splitTenantIds(split.tenants);
  const cdf = zipfCdf(split.tenants, split.zipfS ?? 1);
  const rng = createRng(split.seed ?? seed).fork('tenant-split');
  const out = new Array<string>(count);
  for (let i = 0; i < count; i++) out[i] = ids[searchCdf(cdf, rng.next())]!;
  return out;
}

/** Options for turning a trace into requests. */
export interface TraceWorkloadOptions {
  /** Built-in trace name or CSV path. */
  readonly trace: string;
  /** How requests are assigned to tenants; undefined takes each row's `tenant` column. */
  readonly split?: TenantSplit | undefined;
  readonly seed: number;
  readonly model: string;
  /** Arrival-rate multiplier: 2 replays the trace twice as fast. @default 1 */
  readonly rateScale?: number | undefined;
  /** Offset into the trace (trace seconds) where the window starts. @default 0 */
  readonly startS?: number | undefined;
  /** Window length in *scaled* seconds (simulated time). @default to the end of the trace */
  readonly durationS?: number | undefined;
  /** SLO class of every request. @default 'interactive' */
  readonly sloClass?: string | undefined;
  /** Tenant id → app id. */
  readonly apps?: Readonly<Record<string, string>> | undefined;
  /**
   * `max_tokens` is exactly the true output length (as the VTC artifact's client asks) instead of
   * the factor and floor below. @default false
   */
  readonly maxTokensExact?: boolean | undefined;
  /** `max_tokens` is the true output length times this factor, at least `maxTokensFloor`. @default 2 */
  readonly maxTokensFactor?: number | undefined;
  /** @default 256 */
  readonly maxTokensFloor?: number | undefined;
  /**
   * Context length of the serving model: `max_tokens` is capped so the prompt plus it fits, as a
   * client that knows the context asks (a prompt that alone reaches it is still refused, by the
   * engine). @default unlimited
   */
  readonly maxModelLen?: number | undefined;
}

/**
 * Requests of a trace window, arrival times shifted to start at 0 and divided by `rateScale`,
 * assigned to tenants by {@link splitTenants} (over the whole trace, so a window sees the same
 * tenant for a request whatever its bounds), or by the trace's own `tenant` column when no split
 * is given.
 *
 * @throws ConfigError when there is neither a split nor a `tenant` column
 */
export function traceWorkload(opts: TraceWorkloadOptions): RequestDescriptor[] {
  const rows = loadTrace(opts.trace);
  const tenants = opts.split
    ? splitTenants(rows.length, opts.split, opts.seed)
    : rows.map((r, i) => {
        if (r.tenant === undefined)
          throw new ConfigError(ErrorCode.SCENARIO_INVALID, opts.trace, [
            { path: `row ${i + 1}`, message: 'the trace has no tenant column: give a tenant split' },
          ]);
        return r.tenant;
      });
  const scale = opts.rateScale ?? 1;
  const start = opts.startS ?? 0;
  const end = opts.durationS === undefined ? Number.POSITIVE_INFINITY : start + opts.durationS * scale;
  const factor = opts.maxTokensFactor ?? 2;
  const floor = opts.maxTokensFloor ?? 256;
  const prefix = opts.trace in TRACE_FILES ? opts.trace : 'trace';
  const out: RequestDescriptor[] = [];
  rows.forEach((r, i) => {
    if (r.arrivalS < start || r.arrivalS >= end) return;
    const tenant = tenants[i]!;
    const outputTokens = Math.max(1, r.outputTokens);
    const inputTokens = Math.max(1, r.inputTokens);
    const room = Math.max(1, (opts.maxModelLen ?? Number.POSITIVE_INFINITY) - inputTokens);
    out.push({
      id: `${prefix}-${i}`,
      tenant,
      app: opts.apps?.[tenant],
      model: opts.model,
      sloClass: opts.sloClass ?? 'interactive',
      inputTokens,
      maxTokens: opts.maxTokensExact
        ? Math.min(room, outputTokens)
        : Math.min(room, Math.max(floor, Math.ceil(outputTokens * factor))),
      outputTokens,
      arrivalMs: Math.round(((r.arrivalS - start) / scale) * 1e6) / 1000,
    });
  });
  return out.sort(byArrival);
}
