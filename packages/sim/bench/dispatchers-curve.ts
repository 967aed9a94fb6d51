/**
 * The cost of coalesced charging across dispatchers: VTC's service difference with N gateways
 * sharing one store, each flushing streamed-output charges every F ms (or every 512 tokens),
 * against a centralised VTC that charges every token as it is generated (VTC Algorithm 2). Prints,
 * per scenario, the largest accumulated service difference of backlogged clients (VTC Theorem 4.4's
 * quantity) as a table over N × F, its ratio to the centralised run, and the store's charge calls
 * per simulated second (the load coalescing saves).
 *
 * With `--scale`, the same question at fleet scale: one pool of R replicas (A100-80GB, Llama-2-7B)
 * overloaded by eight weighted tenants (`--tenants`), run with 1 (every token charged), 32, 64 and 128
 * dispatchers over several seeds (median and worst ratio to centralised), then the store's load
 * for P such pools on 1–8 Redis shards (a pool lives on one shard: its keys share a hash slot),
 * with Redis modelled as an M/D/1 server of `--redis-op-us` per script call plus `--rtt-us` of
 * network, and the fairness of the largest fleet re-run with that latency added to every flush.
 *
 * With `--shards`, one pool spread over several stores (Redis primaries) as `ShardedReplicas`
 * does it: tenants hashed to shards, every replica's capacity shared among the shards by hand-off
 * (a finishing request's room goes to the shard with the least counter, on a view of the shards
 * `--view-ms` old) or, with `--controller epoch`, by their backlogged weight times a service gain
 * (`--service-gain`, the exponent of each epoch's step; 0: backlogged weight alone), rebalanced
 * every second. Prints, for 1 (one store) and 2–4 shards with
 * `--dispatchers` dispatchers, the accumulated service difference against the centralised run
 * (median and worst over the seeds), throughput against one store, the busiest store's share
 * of the store calls (what bounds the pool: 1/S when the shards share the load evenly), store
 * calls per finished request, and the part of finished requests whose room was handed on.
 *
 * Usage: npm run bench:dispatchers [-- --scenario vtc-overload,vtc-poisson-short-long --duration 600]
 *        npm run bench:dispatchers -- --scale [--replicas 32 --pools 32 --seeds 3 --duration 60 --tenants 8
 *          --redis-op-us 40 --rtt-us 250]
 *        npm run bench:dispatchers -- --shards [--replicas 32 --seeds 5 --duration 60 --dispatchers 8 --tenants 8
 *          --view-ms 25 | --controller epoch --service-gain 0.35]
 */
import { parseArgs } from 'node:util';
import { orderingPolicyByName, placementByName, weightedVtcPolicy } from '@fairway/policy';
import {
  type AdmitAndDispatchInput,
  type AdmitAndDispatchResult,
  type AdmitInput,
  type AdmitResult,
  type ChargeItem,
  type DispatchInput,
  type DispatchResult,
  MemoryStore,
  type RequeueInput,
  type SettleAndDispatchInput,
  type SettleAndDispatchResult,
  type SettleInput,
} from '@fairway/store';
import { computeMetrics } from '../src/metrics.ts';
import type { PoolShardsOptions } from '../src/pool-shards.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario, parseScenario } from '../src/scenario.ts';

const DISPATCHERS = [1, 2, 4, 8];
const FLUSH_MS = [10, 50, 200, 1000];

/** A MemoryStore that counts its calls: all of them (one Redis script call each) and those carrying charges. */
class CountingStore extends MemoryStore {
  chargeCalls = 0;
  calls = 0;
  /** Calls by store operation. */
  readonly byOp = new Map<string, number>();
  /** Calls by pool (a sharded pool's shards apart), for the operations that name one. */
  readonly byPool = new Map<string, number>();
  #pool(pool: string): void {
    if (!this.#inside) this.byPool.set(pool, (this.byPool.get(pool) ?? 0) + 1);
  }
  /** Inside a counted call: the memory store's combined operations call its own parts. */
  #inside = false;
  async #count<T>(op: string, call: () => Promise<T>): Promise<T> {
    if (this.#inside) return call();
    this.calls++;
    this.byOp.set(op, (this.byOp.get(op) ?? 0) + 1);
    this.#inside = true;
    try {
      return await call();
    } finally {
      this.#inside = false;
    }
  }
  override async admit(input: AdmitInput): Promise<AdmitResult> {
    this.#pool(input.req.pool);
    return this.#count('admit', () => super.admit(input));
  }
  override async admitAndDispatch(input: AdmitAndDispatchInput): Promise<AdmitAndDispatchResult> {
    this.#pool(input.admit.req.pool);
    return this.#count('admitAndDispatch', () => super.admitAndDispatch(input));
  }
  override async charge(items: readonly ChargeItem[]): Promise<void> {
    this.chargeCalls++;
    return this.#count('charge', () => super.charge(items));
  }
  override async dispatch(input: DispatchInput): Promise<DispatchResult> {
    this.#pool(input.pool);
    if (input.charges !== undefined && input.charges.length > 0) this.chargeCalls++;
    return this.#count('dispatch', () => super.dispatch(input));
  }
  override async settle(input: SettleInput): Promise<boolean> {
    return this.#count('settle', () => super.settle(input));
  }
  override async settleAndDispatch(input: SettleAndDispatchInput): Promise<SettleAndDispatchResult> {
    this.#pool(input.dispatch.pool);
    return this.#count('settleAndDispatch', () => super.settleAndDispatch(input));
  }
  override async requeue(input: RequeueInput): Promise<boolean> {
    return this.#count('requeue', () => super.requeue(input));
  }
}

const { values } = parseArgs({
  options: {
    scenario: { type: 'string', default: 'vtc-overload,vtc-poisson-short-long' },
    duration: { type: 'string' },
    scale: { type: 'boolean', default: false },
    shards: { type: 'boolean', default: false },
    'service-gain': { type: 'string' },
    controller: { type: 'string', default: 'handoff' },
    'view-ms': { type: 'string' },
    dispatchers: { type: 'string', default: '8' },
    replicas: { type: 'string', default: '32' },
    pools: { type: 'string', default: '32' },
    seeds: { type: 'string', default: '3' },
    tenants: { type: 'string', default: '8' },
    'redis-op-us': { type: 'string', default: '40' },
    'rtt-us': { type: 'string', default: '250' },
  },
});

interface Measured {
  readonly diff: number;
  readonly maxDiff: number;
  readonly chargesPerS: number;
  /** Store (Redis script) calls per simulated second. */
  readonly callsPerS: number;
  /** The same by operation, and dispatches that found nothing to dispatch. */
  readonly byOpPerS: Readonly<Record<string, number>>;
  /** Tokens (input and output) served per simulated second. */
  readonly tokensPerS: number;
  /** The busiest pool's (shard's) share of the calls that name a pool. */
  readonly busiestPoolShare: number;
  /** Store calls per finished request. */
  readonly callsPerRequest: number;
  /** The part of finished requests whose room was handed to another shard; undefined without hand-off. */
  readonly handedOff: number | undefined;
}

async function measureRun(
  input: ReturnType<typeof buildRunInput>,
  dispatchers: number,
  flushMs: number,
  flushTokens?: number,
  shards?: PoolShardsOptions,
): Promise<Measured> {
  const store = new CountingStore({ validate: false });
  const weights = input.tenantWeights;
  const weighted = Object.values(weights).some((w) => w !== 1);
  const run = await runSimulation({
    ...input,
    ordering: weighted ? weightedVtcPolicy((t) => weights[t] ?? 1) : orderingPolicyByName('vtc'),
    placement: placementByName('least-kv'),
    dispatchers,
    flushMs,
    ...(flushTokens !== undefined ? { flushTokens } : {}),
    ...(shards !== undefined ? { shards } : {}),
    store,
  });
  const m = computeMetrics(run);
  const pooled = [...store.byPool.values()];
  return {
    diff: m.fairness.accumulatedMaxDiff,
    maxDiff: m.fairness.maxDiff,
    chargesPerS: store.chargeCalls / input.durationS,
    callsPerS: store.calls / input.durationS,
    byOpPerS: Object.fromEntries([...store.byOp].map(([op, n]) => [op, n / input.durationS])),
    tokensPerS: m.throughput.tokensPerS,
    busiestPoolShare:
      Math.max(0, ...pooled) /
      Math.max(
        1,
        pooled.reduce((a, x) => a + x, 0),
      ),
    callsPerRequest: store.calls / Math.max(1, m.requests.completed),
    handedOff:
      run.shardHandoffs === undefined
        ? undefined
        : run.shardHandoffs.handedOff / Math.max(1, run.shardHandoffs.completions),
  };
}

async function measure(
  scenario: string,
  dispatchers: number,
  flushMs: number,
  flushTokens?: number,
): Promise<Measured> {
  const input = buildRunInput(loadScenario(scenario), {
    durationS: values.duration === undefined ? undefined : Number(values.duration),
  });
  return measureRun(input, dispatchers, flushMs, flushTokens);
}

const pad = (s: string, n: number) => s.padStart(n);
async function curves(): Promise<void> {
  for (const scenario of values.scenario.split(',')) {
    const started = performance.now();
    const base = await measure(scenario, 1, 50, 1);
    console.log(
      `\n${scenario}: VTC, accumulated service difference of backlogged clients (cost units; ratio to centralised)`,
    );
    console.log(
      `centralised (1 dispatcher, every token charged): ${base.diff.toFixed(0)}  ` +
        `(windowed Max Diff ${base.maxDiff.toFixed(1)}, ${base.chargesPerS.toFixed(0)} charge calls/s)`,
    );
    console.log(`${pad('N \\ flush', 10)}${FLUSH_MS.map((f) => pad(`${f} ms`, 22)).join('')}`);
    for (const n of DISPATCHERS) {
      const cells: string[] = [];
      for (const f of FLUSH_MS) {
        const r = await measure(scenario, n, f);
        cells.push(
          pad(
            `${r.diff.toFixed(0)} (${(r.diff / base.diff).toFixed(2)}x, ${r.chargesPerS.toFixed(0)}/s)`,
            22,
          ),
        );
      }
      console.log(`${pad(String(n), 10)}${cells.join('')}`);
    }
    console.log(`(${((performance.now() - started) / 1000).toFixed(1)} s wall)`);
  }
}

/** Weights of the scale and shards runs' tenants (eight unless `--tenants`, which cycles through them). */
const SCALE_WEIGHTS = [1, 1, 1, 1, 2, 2, 4, 4];
/** Requests/s one A100-80GB replica completes on 256/256-token Llama-2-7B requests (measured in the simulator: 11.5 at saturation). */
const REPLICA_RATE = 11.5;

/** The tenants, as the runs' headers say. */
const describeTenants = (): string =>
  values.tenants === '8'
    ? `8 tenants weighted ${SCALE_WEIGHTS.join('/')}`
    : `${values.tenants} tenants weighted ${SCALE_WEIGHTS.join('/')} in turn`;

/** The tenants' weights: `--tenants` of them, cycling through {@link SCALE_WEIGHTS}. */
const tenantWeights = (): number[] =>
  Array.from({ length: Number(values.tenants) }, (_, i) => SCALE_WEIGHTS[i % SCALE_WEIGHTS.length]!);

/** One pool of `replicas` replicas, overloaded 2× by the weighted tenants sending equal rates. */
function scaleInput(replicas: number, seed: number, durationS: number): ReturnType<typeof buildRunInput> {
  const weights = tenantWeights();
  const rate = (2 * REPLICA_RATE * replicas) / weights.length;
  const scenario = parseScenario(
    {
      durationS,
      seed,
      cluster: { engines: [{ gpu: 'A100-80GB', model: 'llama-2-7b', tp: 1, count: replicas }] },
      tenants: weights.map((weight, i) => ({ id: `tenant${i + 1}`, weight })),
      streams: weights.map((_, i) => ({
        tenant: `tenant${i + 1}`,
        arrival: { process: 'poisson', rate },
        input: { kind: 'lognormal', median: 256, p90: 700, min: 8, max: 2048 },
        output: { kind: 'lognormal', median: 256, p90: 700, min: 8, max: 2048 },
      })),
    },
    'scale',
  );
  return buildRunInput({ name: 'scale', scenario, baseDir: process.cwd() });
}

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

/** Mean time in an M/D/1 server of `serviceUs` per call at `ratePerS` calls/s, µs; Infinity when saturated. */
function md1Us(ratePerS: number, serviceUs: number): { rho: number; sojournUs: number } {
  const rho = (ratePerS * serviceUs) / 1e6;
  return {
    rho,
    sojournUs: rho >= 1 ? Number.POSITIVE_INFINITY : serviceUs + (rho * serviceUs) / (2 * (1 - rho)),
  };
}

async function scale(): Promise<void> {
  const replicas = Number(values.replicas);
  const pools = Number(values.pools);
  const seeds = Array.from({ length: Number(values.seeds) }, (_, i) => i + 1);
  const durationS = values.duration === undefined ? 60 : Number(values.duration);
  const opUs = Number(values['redis-op-us']);
  const rttUs = Number(values['rtt-us']);
  const flushMs = 50;
  const started = performance.now();
  console.log(
    `\nscale: one pool of ${replicas} A100-80GB replicas (Llama-2-7B), ${describeTenants()}, ` +
      `offered 2x capacity, ${durationS} s, seeds ${seeds.join(',')}; charges flushed every ${flushMs} ms`,
  );
  const central = await Promise.all(
    seeds.map((seed) => measureRun(scaleInput(replicas, seed, durationS), 1, flushMs, 1)),
  );
  console.log(
    `centralised (1 dispatcher, every token charged): accumulated service difference median ${median(central.map((r) => r.diff)).toFixed(0)}`,
  );
  console.log(
    `${pad('dispatchers', 12)}${pad('diff ×central (median)', 24)}${pad('worst', 8)}${pad('store calls/s per pool', 24)}`,
  );
  let largest: Measured[] = [];
  for (const n of [32, 64, 128]) {
    const runs: Measured[] = [];
    for (const seed of seeds) runs.push(await measureRun(scaleInput(replicas, seed, durationS), n, flushMs));
    const ratios = runs.map((r, i) => r.diff / Math.max(1, central[i]!.diff));
    console.log(
      `${pad(String(n), 12)}${pad(`${median(ratios).toFixed(2)}x`, 24)}${pad(`${Math.max(...ratios).toFixed(2)}x`, 8)}${pad(median(runs.map((r) => r.callsPerS)).toFixed(0), 24)}`,
    );
    largest = runs;
  }
  const callsPerPool = median(largest.map((r) => r.callsPerS));
  const ops = largest[0]?.byOpPerS ?? {};
  console.log(
    `store calls/s per pool by operation at 128 dispatchers (seed 1): ${Object.entries(ops)
      .sort((a, b) => b[1] - a[1])
      .map(([op, n]) => `${op} ${n.toFixed(0)}`)
      .join(', ')}`,
  );
  console.log(
    `\nstore load: ${pools} pools of ${replicas} replicas (${pools * replicas} GPUs), 128 dispatchers, ${callsPerPool.toFixed(0)} calls/s per pool; ` +
      `Redis modelled as M/D/1 at ${opUs} µs per call, ${rttUs} µs round trip`,
  );
  console.log(
    `${pad('shards', 8)}${pad('pools/shard', 13)}${pad('calls/s/shard', 15)}${pad('utilisation', 13)}${pad('call latency', 14)}`,
  );
  let worstLatencyUs = 0;
  for (const shards of [1, 2, 4, 8]) {
    const perShard = Math.ceil(pools / shards);
    const rate = perShard * callsPerPool;
    const q = md1Us(rate, opUs);
    const latencyUs = rttUs + q.sojournUs;
    if (Number.isFinite(latencyUs)) worstLatencyUs = Math.max(worstLatencyUs, latencyUs);
    console.log(
      `${pad(String(shards), 8)}${pad(String(perShard), 13)}${pad(rate.toFixed(0), 15)}${pad(`${(q.rho * 100).toFixed(0)}%`, 13)}${pad(Number.isFinite(latencyUs) ? `${(latencyUs / 1000).toFixed(2)} ms` : 'saturated', 14)}`,
    );
  }
  const maxPoolsPerShard = Math.floor((0.7 * 1e6) / opUs / callsPerPool);
  console.log(
    `one shard stays under 70% utilisation up to ${maxPoolsPerShard} such pools (${maxPoolsPerShard * replicas} GPUs)`,
  );
  // A store call's latency delays when its charges count: model it as that much longer a flush.
  const lagged: number[] = [];
  for (const [i, seed] of seeds.entries()) {
    const r = await measureRun(scaleInput(replicas, seed, durationS), 128, flushMs + worstLatencyUs / 1000);
    lagged.push(r.diff / Math.max(1, central[i]!.diff));
  }
  console.log(
    `128 dispatchers with the worst unsaturated call latency (${(worstLatencyUs / 1000).toFixed(2)} ms) added to each flush: ` +
      `diff ${median(lagged).toFixed(2)}x centralised (median), ${Math.max(...lagged).toFixed(2)}x worst`,
  );
  console.log(`(${((performance.now() - started) / 1000).toFixed(1)} s wall)`);
}

/** One pool over 1–4 stores: fairness against the centralised run, throughput and store load. */
async function shardsCurve(): Promise<void> {
  const replicas = Number(values.replicas);
  const seeds = Array.from({ length: Number(values.seeds) }, (_, i) => i + 1);
  const durationS = values.duration === undefined ? 60 : Number(values.duration);
  const dispatchers = Number(values.dispatchers);
  const flushMs = 50;
  const controller = values.controller;
  if (controller !== 'handoff' && controller !== 'epoch') throw new Error('--controller: handoff or epoch');
  const serviceGain = values['service-gain'] === undefined ? undefined : Number(values['service-gain']);
  const viewMs = values['view-ms'] === undefined ? undefined : Number(values['view-ms']);
  const started = performance.now();
  console.log(
    `\nshards: one pool of ${replicas} A100-80GB replicas (Llama-2-7B), ${describeTenants()}, ` +
      `offered 2x capacity, ${durationS} s, seeds ${seeds.join(',')}; ${dispatchers} dispatchers, charges flushed every ${flushMs} ms; ` +
      (controller === 'handoff'
        ? `a finishing request's room handed to the backlogged shard with the least counter (view ${viewMs ?? 'default'} ms old)`
        : `shares follow the backlogged weight times a service gain (exponent ${serviceGain ?? 'default'}) every 1 s ` +
          '(a rise one epoch after the falls that make room for it)'),
  );
  const central = await Promise.all(
    seeds.map((seed) => measureRun(scaleInput(replicas, seed, durationS), 1, flushMs, 1)),
  );
  console.log(
    `centralised (1 dispatcher, one store, every token charged): accumulated service difference median ${median(central.map((r) => r.diff)).toFixed(0)}`,
  );
  console.log(
    `${pad('stores', 8)}${pad('diff ×central (median)', 24)}${pad('worst', 8)}${pad('tokens/s ×one store', 21)}` +
      `${pad('busiest store share of calls', 30)}${pad('calls/request', 15)}${pad('handed on', 10)}`,
  );
  let oneStore: Measured[] = [];
  for (const count of [1, 2, 3, 4]) {
    const runs: Measured[] = [];
    for (const seed of seeds)
      runs.push(
        await measureRun(
          scaleInput(replicas, seed, durationS),
          dispatchers,
          flushMs,
          undefined,
          count === 1
            ? undefined
            : {
                count,
                controller,
                ...(serviceGain !== undefined ? { serviceGain } : {}),
                ...(viewMs !== undefined ? { viewMs } : {}),
              },
        ),
      );
    if (count === 1) oneStore = runs;
    const ratios = runs.map((r, i) => r.diff / Math.max(1, central[i]!.diff));
    const tput = runs.map((r, i) => r.tokensPerS / Math.max(1, oneStore[i]!.tokensPerS));
    const handed = runs.flatMap((r) => (r.handedOff === undefined ? [] : [r.handedOff]));
    console.log(
      `${pad(String(count), 8)}${pad(`${median(ratios).toFixed(2)}x`, 24)}${pad(`${Math.max(...ratios).toFixed(2)}x`, 8)}` +
        `${pad(`${median(tput).toFixed(3)} (worst ${Math.min(...tput).toFixed(3)})`, 21)}${pad(`${(median(runs.map((r) => r.busiestPoolShare)) * 100).toFixed(0)}%`, 30)}` +
        `${pad(median(runs.map((r) => r.callsPerRequest)).toFixed(2), 15)}${pad(handed.length > 0 ? `${(median(handed) * 100).toFixed(0)}%` : '', 10)}`,
    );
  }
  console.log(`(${((performance.now() - started) / 1000).toFixed(1)} s wall)`);
}

if (values.shards) await shardsCurve();
else if (values.scale) await scale();
else await curves();
