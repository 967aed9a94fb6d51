import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FAULTS } from './support/chaos-faults.ts';
import { ChaosFleet } from './support/chaos-fleet.ts';
import {
  type ExperimentOptions,
  type FaultResult,
  markdownTable,
  runExperiment,
} from './support/chaos-run.ts';

/**
 * The reduced chaos suite (`npm run chaos` runs the full one): one real fleet — its own Redis
 * (AOF) and NATS, two `fairway serve`, three `fairway engine-sim` with their agents — under open
 * streamed load, with the faults whose promises matter most (DESIGN.md, trust and failure model).
 * The engine killed first stays dead: the later faults run on the two others.
 */
const OPTIONS: Partial<ExperimentOptions> = {
  rate: 6,
  preMs: 2500,
  postMs: 3000,
  clientTimeoutMs: 15_000,
  timing: { pauseMs: 5000, natsDownMs: 5000, redisDownMs: 1000 },
};

const serverErrors = (r: FaultResult): Record<string, number> =>
  Object.fromEntries(Object.entries(r.details.statuses).filter(([s]) => Number(s) >= 500));

describe('chaos: a real fleet under streamed load', () => {
  let fleet: ChaosFleet;
  const results: FaultResult[] = [];

  beforeAll(async () => {
    fleet = await ChaosFleet.start({
      dispatchers: 2,
      engines: 3,
      agents: 'embedded',
      redisPersistence: 'aof',
    });
  }, 120_000);

  afterAll(async () => {
    if (results.length > 0) console.info(`chaos (reduced):\n${markdownTable(results)}`);
    await fleet?.close();
  }, 30_000);

  const run = async (name: keyof typeof FAULTS): Promise<FaultResult> => {
    const r = await runExperiment(FAULTS[name], fleet, results.length, OPTIONS);
    results.push(r);
    return r;
  };

  it('engine SIGKILL: no request without a first byte is answered 5xx while another replica is healthy; started streams end with an SSE error event', async () => {
    const r = await run('engine-kill');
    expect(serverErrors(r), JSON.stringify(r.details)).toEqual({});
    expect(r.details.midStreamBroken).toBe(0);
    expect(r.lost).toBe(0);
    expect(r.completed + r.details.midStreamErrorEvents).toBe(r.sent);
  }, 90_000);

  it('NATS stopped under load: at least 95% of requests still succeed and none is lost', async () => {
    const r = await run('nats-restart');
    expect(r.completed / r.sent, JSON.stringify(r.details)).toBeGreaterThanOrEqual(0.95);
    expect(r.lost).toBe(0);
  }, 90_000);

  it('Redis restart with AOF under load: no queued request is lost and the RPM window survives', async () => {
    const r = await run('redis-restart-aof');
    expect(r.lost, JSON.stringify(r.details)).toBe(0);
    expect(r.limitOvershoot).toBeLessThanOrEqual(r.details.probe.rpm);
  }, 90_000);

  it('Redis restart without persistence under load: every queued request is re-admitted and answered', async () => {
    const r = await run('redis-restart-none');
    expect(r.lost, JSON.stringify(r.details)).toBe(0);
  }, 90_000);
});
