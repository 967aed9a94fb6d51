/**
 * Workloads of the VTC paper's appendix B (Sheng et al., OSDI 2024) that the main suites lack, on
 * the same A10G engine with a 10,000-token KV pool and 256-token prompts and outputs:
 *
 * - `vtc-weighted`: Figure 16 — four overloaded clients with weights 1:2:3:4 (weighted VTC
 *   should serve them in that proportion; plain VTC equally);
 * - `vtc-overload-multi`: Table 6 / Figure 19 (right) — eight overloaded clients at the artifact's
 *   rates (`overload-multi` in `fair_bench/exp_suite.py`: three at 24 and five at 36 req/min).
 */
import type { ScenarioInput } from '../scenario-schema.ts';
import { A10G_VTC } from './vtc.ts';

const client = (i: number, rate: number) => ({
  tenant: `client${i}`,
  arrival: { process: 'uniform' as const, rate },
  input: 256,
  output: 256,
});

/** Built-in VTC appendix scenarios by name. */
export const VTC_APPENDIX_SCENARIOS: Readonly<Record<string, ScenarioInput>> = {
  'vtc-weighted': {
    description:
      'VTC Figure 16: four overloaded clients (60 req/min each, 256/256 tokens) with weights 1:2:3:4 for weighted VTC',
    durationS: 600,
    seed: 42,
    cluster: A10G_VTC,
    tenants: [1, 2, 3, 4].map((w) => ({ id: `client${w}`, weight: w })),
    streams: [1, 2, 3, 4].map((i) => client(i, 1)),
  },
  'vtc-overload-multi': {
    description:
      'VTC Table 6 / Figure 19: eight overloaded clients, three at 24 and five at 36 req/min (uniform), 256/256 tokens',
    durationS: 360,
    seed: 42,
    cluster: A10G_VTC,
    tenants: Array.from({ length: 8 }, (_, i) => ({ id: `client${i + 1}`, weight: 1 })),
    streams: [0.4, 0.4, 0.4, 0.6, 0.6, 0.6, 0.6, 0.6].map((rate, i) => client(i + 1, rate)),
  },
};
