import { describe, expect, it } from 'vitest';
import { chatBodyOf, chatExpresses, ResponsesFromChat } from '../src/responses-chat.ts';

/** Reads the typed events of a Responses stream. */
function events(sse: string): { type: string; sequence_number: number; [k: string]: unknown }[] {
  return sse
    .split('\n\n')
    .filter((e) => e.startsWith('event: '))
    .map((e) => JSON.parse(e.slice(e.indexOf('data: ') + 6)));
}

describe('the Responses API over chat completions', () => {
  it('translates input items, function tools and a JSON schema to the chat body', () => {
    const body = chatBodyOf({
      model: 'm',
      instructions: 'be brief',
      input: [
        { role: 'user', content: [{ type: 'input_text', text: 'weather?' }] },
        { type: 'function_call', call_id: 'c1', name: 'weather', arguments: '{"city":"Oslo"}' },
        { type: 'function_call_output', call_id: 'c1', output: 'rain' },
      ],
      tools: [{ type: 'function', name: 'weather', parameters: { type: 'object' } }],
      tool_choice: { type: 'function', name: 'weather' },
      text: { format: { type: 'json_schema', name: 'w', schema: { type: 'object' } } },
      max_output_tokens: 20,
      stream: true,
    });
    expect(body).toEqual({
      model: 'm',
      max_tokens: 20,
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: [{ type: 'text', text: 'weather?' }] },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'c1', type: 'function', function: { name: 'weather', arguments: '{"city":"Oslo"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'c1', content: 'rain' },
      ],
      tools: [{ type: 'function', function: { name: 'weather', parameters: { type: 'object' } } }],
      tool_choice: { type: 'function', function: { name: 'weather' } },
      response_format: { type: 'json_schema', json_schema: { name: 'w', schema: { type: 'object' } } },
      stream: true,
      stream_options: { include_usage: true },
    });
  });

  it('leaves to the engine what chat cannot express', () => {
    expect(chatExpresses({ input: 'hi' })).toBe(true);
    expect(chatExpresses({ input: 'hi', tools: [{ type: 'web_search' }] })).toBe(false);
    expect(chatExpresses({ input: 'hi', reasoning: { effort: 'low' } })).toBe(false);
    expect(chatExpresses({ input: [{ type: 'reasoning' }] })).toBe(false);
    expect(chatExpresses({ input: 'hi', include: ['message.output_text.logprobs'] })).toBe(false);
  });

  it('writes a streamed text and tool call as ordered, numbered items with usage at the end', () => {
    const r = new ResponsesFromChat({ input: 'hi' }, 'asked-model', 1);
    let sse = r.chunk({ id: 'chatcmpl-x', choices: [{ delta: { content: 'Hel' } }] });
    sse += r.chunk({ id: 'chatcmpl-x', choices: [{ delta: { content: 'lo' } }] });
    sse += r.chunk({
      id: 'chatcmpl-x',
      choices: [
        { delta: { tool_calls: [{ index: 0, id: 'call_1', function: { name: 'f', arguments: '{"a"' } }] } },
      ],
    });
    sse += r.chunk({
      id: 'chatcmpl-x',
      choices: [
        {
          delta: { tool_calls: [{ index: 0, function: { arguments: ':1}' } }] },
          finish_reason: 'tool_calls',
        },
      ],
    });
    sse += r.chunk({ id: 'chatcmpl-x', choices: [], usage: { prompt_tokens: 5, completion_tokens: 7 } });
    sse += r.end();
    const ev = events(sse);
    expect(ev.map((e) => e.sequence_number)).toEqual(ev.map((_, i) => i));
    expect(ev.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    const done = ev.at(-1)?.response as { model: string; output: unknown[]; usage: { total_tokens: number } };
    expect(done.model).toBe('asked-model');
    expect(done.usage.total_tokens).toBe(12);
    expect(done.output).toEqual([
      expect.objectContaining({ type: 'message', content: [expect.objectContaining({ text: 'Hello' })] }),
      expect.objectContaining({ type: 'function_call', call_id: 'call_1', name: 'f', arguments: '{"a":1}' }),
    ]);
  });

  it('says incomplete when the answer was cut at its output cap', () => {
    const r = new ResponsesFromChat({ input: 'hi' }, 'm', 1);
    const whole = r.whole({
      id: 'chatcmpl-y',
      choices: [{ message: { content: 'partial' }, finish_reason: 'length' }],
      usage: { prompt_tokens: 1, completion_tokens: 3 },
    });
    expect(whole).toMatchObject({
      status: 'incomplete',
      incomplete_details: { reason: 'max_output_tokens' },
    });
  });
});
