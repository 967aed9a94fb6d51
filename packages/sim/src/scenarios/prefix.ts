/**
 * Shared-prefix workloads for vLLM's automatic prefix caching (docs/researchers/prefix-caching.md):
 * multi-turn conversations that resend their history every turn, each turn sent when the answer
 * to the previous one is complete, and agents whose calls share a
 * long system prompt, on one A100-80GB replica of Llama-2-7B with `enablePrefixCaching` on.
 */
import type { ScenarioInput } from '../scenario-schema.ts';

/** Built-in prefix-caching scenarios by name. */
export const PREFIX_SCENARIOS: Readonly<Record<string, ScenarioInput>> = {
  'multi-turn-chat': {
    description:
      'multi-turn chats resending their history (400-token system prompt, 3-8 turns) and agents sharing a 1,500-token system prompt, 1x A100-80GB llama-2-7b with prefix caching',
    durationS: 120,
    seed: 7,
    cluster: {
      engines: [{ gpu: 'A100-80GB', model: 'llama-2-7b', count: 1, options: { enablePrefixCaching: true } }],
    },
    tenants: [{ id: 'chat' }, { id: 'agents' }],
    streams: [
      {
        tenant: 'chat',
        arrival: { process: 'poisson', rate: 1 },
        // The new user message of each turn; the history before it is resent.
        input: { kind: 'uniform', min: 20, max: 200 },
        output: { kind: 'uniform', min: 50, max: 300 },
        maxTokens: 'output',
        interaction: {
          size: { kind: 'uniform', min: 3, max: 8 },
          // Closed loop: the next turn is sent 5 s (mean) after the answer is complete.
          followUp: { mode: 'after-completion', thinkS: { kind: 'exponential', mean: 5 } },
        },
        prefix: { sharedTokens: 400, conversation: true },
      },
      {
        tenant: 'agents',
        arrival: { process: 'poisson', rate: 1 },
        input: { kind: 'uniform', min: 100, max: 400 },
        output: { kind: 'uniform', min: 20, max: 100 },
        maxTokens: 'output',
        prefix: { sharedTokens: 1500 },
      },
    ],
  },
};
