/** The model every single-pool e2e fleet serves, and its pool. */
export const E2E_MODEL = 'llama-2-7b';
export const E2E_POOL = 'llama';

/** engine-sim arguments that register it in {@link E2E_POOL} over NATS under `prefix`, logging warnings only. */
export const poolEngineArgs = (natsUrl: string, prefix: string): string[] => [
  '--nats-url',
  natsUrl,
  '--prefix',
  prefix,
  '--pool',
  E2E_POOL,
  '--log-level',
  'warn',
];

/**
 * The `fairway serve` config of a fleet with one tenant (`alpha`, one key) and one pool serving
 * {@link E2E_MODEL}: VTC ordering, least-KV placement, the given queue timeout.
 */
export function singleTenantConfig(key: string, queueTimeoutS: number): string {
  return `
tenants:
  - { id: alpha, keys: [{ key: ${key} }] }
pools:
  - { id: ${E2E_POOL}, model: ${E2E_MODEL} }
policy:
  ordering: vtc
  placement: least-kv
  queueTimeoutS: ${queueTimeoutS}
`;
}
