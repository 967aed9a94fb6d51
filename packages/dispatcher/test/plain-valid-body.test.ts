import { describe, expect, it } from 'vitest';
import { chatCompletionSchema, completionSchema, plainValidBody } from '../src/openai-schemas.ts';

const CHATS: Record<string, unknown>[] = [
  { model: 'm', messages: [{ role: 'user', content: 'hi' }] },
  {
    model: 'llama-2-7b',
    messages: [
      { role: 'system', content: 'be brief' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'look' },
          { type: 'image_url', image_url: {} },
        ],
      },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'c1', function: { name: 'f', arguments: '{}' } }],
      },
      { role: 'tool', content: 'ok', tool_call_id: 'c1', name: 'f' },
    ],
    stream: true,
    stream_options: { include_usage: true, continuous_usage_stats: false },
    max_tokens: 64,
    max_completion_tokens: null,
    n: 3,
    temperature: 0.7,
    top_p: 1,
    stop: ['\n', 'END'],
    user: 'alice',
    priority: -3,
    fairway_output_tokens: 10,
    tools: [{ type: 'function', function: { name: 'f' } }],
    functions: null,
    seed: 7,
    verbosity: 'medium',
    web_search_options: {},
    prompt_cache_key: 'conversation-1',
    safety_identifier: 'user-1',
  },
];

const COMPLETIONS: Record<string, unknown>[] = [
  { model: 'm', prompt: 'once upon a time' },
  { model: 'm', prompt: ['one prompt'], stream: false, stop: 'x', max_tokens: null, temperature: 0 },
];

/** Odd values every field is tried with. */
const ODD: unknown[] = [
  null,
  undefined,
  -1,
  0,
  1,
  1.5,
  2.5,
  1e7,
  true,
  '',
  'x',
  'x'.repeat(2000),
  [],
  [1],
  ['a', 'b'],
  {},
  { role: 'user', content: 'x' },
  { include_usage: 'yes' },
];

const FIELDS = [
  'model',
  'messages',
  'prompt',
  'stream',
  'stream_options',
  'max_tokens',
  'max_completion_tokens',
  'n',
  'temperature',
  'top_p',
  'stop',
  'user',
  'priority',
  'fairway_output_tokens',
  'tools',
  'functions',
  'verbosity',
  'web_search_options',
  'prompt_cache_key',
  'safety_identifier',
];

/** Each base with one field (or one field of its first message) set to each odd value. */
function variants(bases: Record<string, unknown>[]): unknown[] {
  const out: unknown[] = [];
  for (const base of bases) {
    for (const f of FIELDS) for (const v of ODD) out.push({ ...base, [f]: v });
    const messages = base.messages as Record<string, unknown>[] | undefined;
    if (messages === undefined) continue;
    for (const f of ['role', 'content', 'name', 'tool_calls', 'tool_call_id'])
      for (const v of ODD)
        out.push({ ...base, messages: [{ ...messages[0], [f]: v }, ...messages.slice(1)] });
    out.push({ ...base, messages: Array.from({ length: 4097 }, () => messages[0]) });
    out.push({
      ...base,
      messages: [{ role: 'user', content: Array.from({ length: 300 }, () => ({ type: 'image_url' })) }],
    });
  }
  return out;
}

describe('plainValidBody (the request validation without zod)', () => {
  it('takes ordinary chat and completion requests without zod', () => {
    for (const b of CHATS) expect(plainValidBody('chat', b), JSON.stringify(b)).toBe(true);
    for (const b of COMPLETIONS) expect(plainValidBody('completions', b), JSON.stringify(b)).toBe(true);
  });

  it('never takes a body the schema refuses, whatever one field holds', () => {
    let refused = 0;
    const check = (endpoint: 'chat' | 'completions', body: unknown): void => {
      const zodOk = (endpoint === 'chat' ? chatCompletionSchema : completionSchema).safeParse(body).success;
      if (!zodOk) refused++;
      if (plainValidBody(endpoint, body)) expect(zodOk, JSON.stringify(body).slice(0, 300)).toBe(true);
    };
    for (const b of variants(CHATS)) check('chat', b);
    for (const b of variants(COMPLETIONS)) check('completions', b);
    for (const b of [null, [], 'x', 1]) {
      check('chat', b);
      check('completions', b);
    }
    // The corpus does exercise refusals.
    expect(refused).toBeGreaterThan(300);
  });
});
