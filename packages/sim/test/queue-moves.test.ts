import { describe, expect, it } from 'vitest';
import { runUnderPredicted } from './support/under-predicted.ts';

/** Three replicas; with moves, requests an engine queues move after 1 s without an output token. */
const run = (moves: boolean) => runUnderPredicted('moves', 3, moves ? { moves: { afterMs: 1000 } } : {});

const meanTtft = (r: Awaited<ReturnType<typeof run>>) =>
  r.records.reduce((a, x) => a + ((x.firstTokenS as number) - x.arrivalS), 0) / r.records.length;

describe('simulation with requests moved out of engine queues (policy.moves)', () => {
  it('moves requests an engine queues to replicas with room, and they start sooner', async () => {
    const without = await run(false);
    const moved = await run(true);
    for (const r of [...without.records, ...moved.records]) {
      expect(r.finishS).toBeDefined();
      expect(r.generated).toBe(1200);
    }
    expect(without.records.some((r) => r.moves !== undefined)).toBe(false);
    const n = moved.records.reduce((a, r) => a + (r.moves ?? 0), 0);
    expect(n).toBeGreaterThan(0);
    // A request moves at most twice, and only before its first token.
    expect(Math.max(...moved.records.map((r) => r.moves ?? 0))).toBeLessThanOrEqual(2);
    expect(meanTtft(moved)).toBeLessThan(meanTtft(without) / 2);
  });
});
