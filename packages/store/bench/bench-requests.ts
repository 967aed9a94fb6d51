import type { QueuedRequest } from '../src/index.ts';

/** Flows the store benches spread their requests over. */
export const FLOWS = 100;

/** The `i`-th request of a store bench: pool `pool`, flow `i mod FLOWS`, FIFO by `i`. */
export function benchRequest(i: number, pool = 'p', id = `q${i}`): QueuedRequest {
  return {
    id,
    pool,
    band: 0,
    flow: `f${i % FLOWS}`,
    score: i,
    arrivalMs: i,
    reserveTokens: 300,
    dispatchCost: 100 + (i % 7),
    owner: 'bench',
    payload: '{"model":"m"}',
  };
}
