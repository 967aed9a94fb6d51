import type { QueuedRequest } from '../src/index.ts';

/** Flows the store benches spread their requests over. */
export const FLOWS = 100;

/**
 * With `BENCH_PREFIX_PARTS=n`, every bench request carries n prefix parts (256 tokens between them)
 * that its flow's requests share: what a pool placing by prefix affinity sends (the store reserves
 * each part once per replica; a prompt has at most `PREFIX_MAX_KEYS`, 8).
 */
const PARTS = Number(process.env.BENCH_PREFIX_PARTS ?? 0);

/** The `i`-th request of a store bench: pool `pool`, flow `i mod FLOWS`, FIFO by `i`. */
export function benchRequest(i: number, pool = 'p', id = `q${i}`): QueuedRequest {
  const flow = i % FLOWS;
  return {
    ...(PARTS > 0
      ? {
          prefixParts: Array.from({ length: PARTS }, (_, k) => ({
            key: `f${flow}-prompt-${PARTS - k}`,
            tokens: Math.floor(256 / PARTS),
          })),
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
