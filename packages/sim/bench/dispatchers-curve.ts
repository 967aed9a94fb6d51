/**
 * The cost of coalesced charging across dispatchers: VTC's service difference with N gateways
 * sharing one store, each flushing streamed-output charges every F ms (or every 512 tokens),
 * against a centralised VTC that charges every token as it is generated (VTC Algorithm 2). Prints,
 * per scenario, the largest accumulated service difference of backlogged clients (VTC Theorem 4.4's
 * quantity) as a table over N × F, its ratio to the centralised run, and the store's charge calls
 * per simulated second (the load coalescing saves).
 *
 * Usage: npm run bench:dispatchers [-- --scenario vtc-overload,vtc-poisson-short-long --duration 600]
 */
import { parseArgs } from 'node:util';
import { orderingPolicyByName, placementByName } from '@fairway/policy';
import { type ChargeItem, type DispatchInput, type DispatchResult, MemoryStore } from '@fairway/store';
import { computeMetrics } from '../src/metrics.ts';
import { runSimulation } from '../src/runner.ts';
import { buildRunInput, loadScenario } from '../src/scenario.ts';

const DISPATCHERS = [1, 2, 4, 8];
const FLUSH_MS = [10, 50, 200, 1000];

/** A MemoryStore that counts the calls that carry charges (flushes). */
class CountingStore extends MemoryStore {
  chargeCalls = 0;
  override async charge(items: readonly ChargeItem[]): Promise<void> {
    this.chargeCalls++;
    return super.charge(items);
  }
  override async dispatch(input: DispatchInput): Promise<DispatchResult> {
    if (input.charges !== undefined && input.charges.length > 0) this.chargeCalls++;
    return super.dispatch(input);
  }
}

const { values } = parseArgs({
  options: {
    scenario: { type: 'string', default: 'vtc-overload,vtc-poisson-short-long' },
    duration: { type: 'string' },
  },
});

async function measure(
  scenario: string,
  dispatchers: number,
  flushMs: number,
  flushTokens?: number,
): Promise<{ diff: number; maxDiff: number; chargesPerS: number }> {
  const input = buildRunInput(loadScenario(scenario), {
    durationS: values.duration === undefined ? undefined : Number(values.duration),
  });
  const store = new CountingStore({ validate: false });
  const run = await runSimulation({
    ...input,
    ordering: orderingPolicyByName('vtc'),
    placement: placementByName('least-kv'),
    dispatchers,
    flushMs,
    ...(flushTokens !== undefined ? { flushTokens } : {}),
    store,
  });
  const m = computeMetrics(run);
  return {
    diff: m.fairness.accumulatedMaxDiff,
    maxDiff: m.fairness.maxDiff,
    chargesPerS: store.chargeCalls / input.durationS,
  };
}

const pad = (s: string, n: number) => s.padStart(n);
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
        pad(`${r.diff.toFixed(0)} (${(r.diff / base.diff).toFixed(2)}x, ${r.chargesPerS.toFixed(0)}/s)`, 22),
      );
    }
    console.log(`${pad(String(n), 10)}${cells.join('')}`);
  }
  console.log(`(${((performance.now() - started) / 1000).toFixed(1)} s wall)`);
}
