import type { QueuedRequest } from '../src/index.ts';

/** Flows the store benches spread their requests over. */
export const FLOWS = 100;

/**
 * With `BENCH_PREFIX_PARTS=1`, every bench request carries four prefix parts (64 tokens each) that
 * its flow's requests share: what a pool placing by prefix affinity sends (the store reserves each
 * part once per replica).
 */
const PARTS = process.env.BENCH_PREFIX_PARTS === '1';

/** The `i`-th request of a store bench: pool `pool`, flow `i mod FLOWS`, FIFO by `i`. */
export function benchRequest(i: number, pool = 'p', id = `q${i}`): QueuedRequest {
  const flow = i % FLOWS;
  return {
    ...(PARTS
      ? {
          prefixParts: [32, 16, 8, 4].map((b) => ({ key: `f${flow}-prompt-${b}`, tokens: 64 })),
        }
      : {}),
    id,
    pool,
    band: 0,
    flow: `f${flow}`,
    score: i,
    arrivalMs: i,
    reserveTokens: 300,
    dispatchCost: 100 + (i % 7),
    owner: 'bench',
    payload: '{"model":"m"}',
  };
}
