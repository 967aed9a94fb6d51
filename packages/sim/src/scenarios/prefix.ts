/**
 * Shared-prefix workloads for vLLM's automatic prefix caching (docs/researchers/prefix-caching.md):
 * multi-turn conversations that resend their history every turn, each turn sent when the answer
 * to the previous one is complete; agents whose calls share a long system prompt; many tenants
 * whose apps send one system prompt; coding assistants whose long conversations are mostly pasted
 * files, where prefill dominates. `multi-turn-chat` runs on one A100-80GB replica of Llama-2-7B;
 * the fleet scenarios on four, overloaded, where placement decides which replica's cache a turn
 * finds (`reports/prefix-affinity.md`).
 */
import type { ScenarioInput } from '../scenario-schema.ts';

/** Four A100-80GB replicas of Llama-2-7B with prefix caching. */
const FLEET: ScenarioInput['cluster'] = {
  engines: [{ gpu: 'A100-80GB', model: 'llama-2-7b', count: 4, options: { enablePrefixCaching: true } }],
};

type Stream = NonNullable<ScenarioInput['streams']>[number];

/** How a tenant's conversations look: token ranges per turn, turns, think time, shared prompt. */
interface Conversations {
  /** New prompt tokens per turn, [min, max]. */
  readonly input: readonly [number, number];
  /** Answer tokens, [min, max]. */
  readonly output: readonly [number, number];
  /** Turns per conversation, [min, max]. */
  readonly turns: readonly [number, number];
  /** Mean think time between an answer and the next turn, s. */
  readonly thinkS: number;
  /** The system prompt every conversation of the tenant starts with, tokens. */
  readonly sharedTokens: number;
  /** Longest history a turn resends. @default unbounded */
  readonly maxContextTokens?: number;
}

/** A closed-loop tenant whose conversations resend their history, each turn after the last answer. */
function conversationStream(tenant: string, rate: number, c: Conversations): Stream {
  return {
    tenant,
    arrival: { process: 'poisson', rate },
    input: { kind: 'uniform', min: c.input[0], max: c.input[1] },
    output: { kind: 'uniform', min: c.output[0], max: c.output[1] },
    maxTokens: 'output',
    interaction: {
      size: { kind: 'uniform', min: c.turns[0], max: c.turns[1] },
      followUp: { mode: 'after-completion', thinkS: { kind: 'exponential', mean: c.thinkS } },
    },
    prefix: {
      sharedTokens: c.sharedTokens,
      conversation: true,
      ...(c.maxContextTokens === undefined ? {} : { maxContextTokens: c.maxContextTokens }),
    },
  };
}

/** A chat tenant: conversations of 4–12 turns. */
const chatStream = (tenant: string, rate: number): Stream =>
  conversationStream(tenant, rate, {
    input: [50, 400],
    output: [50, 300],
    turns: [4, 12],
    thinkS: 3,
    sharedTokens: 600,
  });

/**
 * A coding-assistant tenant: conversations of 3–6 turns into which files and tool output are pasted
 * (600–1,500 new tokens a turn, short answers) and that resend their history, up to 7,500 tokens.
 */
const codingStream = (tenant: string, rate: number): Stream =>
  conversationStream(tenant, rate, {
    input: [600, 1500],
    output: [30, 120],
    turns: [3, 6],
    thinkS: 2,
    sharedTokens: 300,
    maxContextTokens: 7500,
  });

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
  'multi-turn-chat-fleet': {
    description:
      'four chat tenants (one sending four times the conversations of each other) resending their history, closed loop, 4-12 turns, 600-token system prompt per tenant; 4x A100-80GB llama-2-7b with prefix caching, overloaded',
    durationS: 180,
    seed: 11,
    cluster: FLEET,
    tenants: [{ id: 'heavy' }, { id: 'chat-a' }, { id: 'chat-b' }, { id: 'chat-c' }],
    streams: [
      chatStream('heavy', 2),
      chatStream('chat-a', 0.5),
      chatStream('chat-b', 0.5),
      chatStream('chat-c', 0.5),
    ],
  },
  'agents-shared-prompt': {
    description:
      'three agent tenants, each with its own 3,000-token system prompt, running tool loops of 2-8 calls that resend the loop so far (closed loop, 0.5 s tool time); 4x A100-80GB llama-2-7b with prefix caching',
    durationS: 180,
    seed: 13,
    cluster: FLEET,
    tenants: [{ id: 'agent-a' }, { id: 'agent-b' }, { id: 'agent-c' }],
    streams: (['agent-a', 'agent-b', 'agent-c'] as const).map((tenant, i) => ({
      tenant,
      arrival: { process: 'poisson' as const, rate: [2, 1, 1][i]! },
      // A tool result or a user task: the call's new tokens after the loop so far.
      input: { kind: 'uniform' as const, min: 50, max: 300 },
      output: { kind: 'uniform' as const, min: 20, max: 150 },
      maxTokens: 'output' as const,
      interaction: {
        size: { kind: 'uniform' as const, min: 2, max: 8 },
        followUp: { mode: 'after-completion' as const, thinkS: { kind: 'exponential' as const, mean: 0.5 } },
      },
      prefix: { sharedTokens: 3000, conversation: true, maxContextTokens: 4096 },
    })),
  },
  'coding-assistant-fleet': {
    description:
      'four coding-assistant tenants (one sending three times the conversations of each other) pasting files and tool output (600-1,500 tokens a turn) into 3-6-turn conversations that resend their history, short answers, closed loop; 4x A100-80GB llama-3-8b with prefix caching, overloaded',
    durationS: 120,
    seed: 19,
    cluster: {
      engines: [{ gpu: 'A100-80GB', model: 'llama-3-8b', count: 4, options: { enablePrefixCaching: true } }],
    },
    tenants: [{ id: 'heavy' }, { id: 'code-a' }, { id: 'code-b' }, { id: 'code-c' }],
    streams: [
      codingStream('heavy', 4.8),
      codingStream('code-a', 1.6),
      codingStream('code-b', 1.6),
      codingStream('code-c', 1.6),
    ],
  },
  'tenants-shared-prompt': {
    description:
      'eight tenants whose apps send one 2,000-token system prompt, each running short closed-loop conversations (2-6 turns) after it; one tenant sends four times the others; 4x A100-80GB llama-2-7b with prefix caching, overloaded',
    durationS: 180,
    seed: 17,
    cluster: FLEET,
    tenants: Array.from({ length: 8 }, (_, i) => ({ id: `t${i + 1}` })),
    streams: Array.from({ length: 8 }, (_, i) => ({
      tenant: `t${i + 1}`,
      arrival: { process: 'poisson' as const, rate: i === 0 ? 2 : 0.5 },
      input: { kind: 'uniform' as const, min: 50, max: 300 },
      output: { kind: 'uniform' as const, min: 50, max: 250 },
      maxTokens: 'output' as const,
      interaction: {
        size: { kind: 'uniform' as const, min: 2, max: 6 },
        followUp: { mode: 'after-completion' as const, thinkS: { kind: 'exponential' as const, mean: 3 } },
      },
      prefix: { sharedTokens: 2000, sharedPrefix: 'product-system-prompt', conversation: true },
    })),
  },
};
