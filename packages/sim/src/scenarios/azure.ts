/**
 * One-hour replays of the Azure LLM inference traces 2023 (CC-BY 4.0; see `trace.ts` for the
 * attribution) on four A100-80GB replicas of Llama-2-7B, the fleet size DESIGN.md uses for the
 * simulator's speed target. The traces carry no tenants, so requests are split over 10 tenants
 * with Zipf(s = 1) shares, seeded (`trace.ts`, `splitTenants`).
 */
import type { ScenarioInput } from '../scenario-schema.ts';

const FLEET = { engines: [{ gpu: 'A100-80GB', model: 'llama-2-7b', tp: 1, count: 4 }] };

/** Built-in trace scenarios by name. */
export const AZURE_SCENARIOS: Readonly<Record<string, ScenarioInput>> = {
  'azure-conv': {
    description:
      'Azure LLM inference trace 2023, conversation (19,366 requests, 1 h), 10 Zipf-skewed tenants, 4x A100-80GB llama-2-7b',
    durationS: 3600,
    seed: 42,
    cluster: FLEET,
    trace: { name: 'azure-conv', split: { tenants: 10, zipfS: 1 } },
  },
  'azure-code': {
    description:
      'Azure LLM inference trace 2023, code (8,819 requests, 1 h, very bursty), 10 Zipf-skewed tenants, 4x A100-80GB llama-2-7b',
    durationS: 3600,
    seed: 42,
    cluster: FLEET,
    trace: { name: 'azure-code', split: { tenants: 10, zipfS: 1 } },
  },
};
