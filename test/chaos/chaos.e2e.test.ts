import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FAULTS } from './support/chaos-faults.ts';
import { ChaosFleet, type FleetOptions } from './support/chaos-fleet.ts';
import {
  type ExperimentOptions,
  type FaultResult,
  markdownTable,
  runExperiment,
} from './support/chaos-run.ts';

/**
 * The reduced chaos suite (`npm run chaos` runs the full one): a real fleet — its own Redis and
 * NATS (JetStream), two `fairway serve`, three `fairway engine-sim` with their agents — under open
 * streamed load, with the faults whose promises matter most (DESIGN.md, trust and failure model).
 * Its Redis has no persistence, the strict case of a restart: everything in it is lost, and the
 * dispatchers must put back what they hold (with AOF almost nothing is lost; `npm run chaos` runs
 * both). The engine killed first stays dead: the later faults run on the two others.
 */
const OPTIONS: Partial<ExperimentOptions> = {
  rate: 6,
  preMs: 2500,
  postMs: 3000,
  clientTimeoutMs: 15_000,
  timing: { pauseMs: 5000, natsDownMs: 5000, redisDownMs: 1000 },
};

const results: FaultResult[] = [];

const serverErrors = (r: FaultResult): Record<string, number> =>
  Object.fromEntries(Object.entries(r.details.statuses).filter(([s]) => Number(s) >= 500));

/** The failed requests of a result, for an assertion's message. */
const failures = (r: FaultResult): string =>
  r.records
    .filter((x) => x.kind === 'load' && x.outcome !== 'completed')
    .map((x) => JSON.stringify(x))
    .join('\n');

/** A fleet for the describe block it is called in, started before its tests and closed after. */
function fleetFor(options: Partial<FleetOptions>): (name: keyof typeof FAULTS) => Promise<FaultResult> {
  let fleet: ChaosFleet | undefined;
  beforeAll(async () => {
    fleet = await ChaosFleet.start(options);
  }, 120_000);
  afterAll(async () => {
    await fleet?.close();
  }, 30_000);
  return async (name) => {
    const r = await runExperiment(FAULTS[name], fleet as ChaosFleet, results.length, OPTIONS);
    results.push(r);
    return r;
  };
}

afterAll(() => {
  if (results.length > 0) console.info(`chaos (reduced):\n${markdownTable(results)}`);
});

describe('chaos: a fleet under streamed load', () => {
  const run = fleetFor({ dispatchers: 2, engines: 3, agents: 'embedded', redisPersistence: 'none' });

  it('engine SIGKILL: no request without a first byte is answered 5xx while another replica is healthy; started streams end with an SSE error event', async () => {
    const r = await run('engine-kill');
    expect(serverErrors(r), failures(r)).toEqual({});
    expect(r.details.midStreamBroken).toBe(0);
    expect(r.lost).toBe(0);
    expect(r.completed + r.details.midStreamErrorEvents).toBe(r.sent);
  }, 90_000);

  it('NATS stopped: at least 95% of requests still succeed and none is lost', async () => {
    const r = await run('nats-restart');
    expect(r.completed / r.sent, failures(r)).toBeGreaterThanOrEqual(0.95);
    expect(r.lost, failures(r)).toBe(0);
  }, 90_000);

  it('Redis killed and restarted empty (no persistence): every queued request is re-admitted and answered', async () => {
    const r = await run('redis-restart-none');
    expect(r.lost, failures(r)).toBe(0);
  }, 90_000);
});
