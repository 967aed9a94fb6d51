import OpenAI from 'openai';
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type EngineSimHandle, startEngineSim } from '../src/server.ts';

// What a new user does first: point the official OpenAI SDK at the simulated engine.
describe('engine-sim with the official openai client', () => {
  let sim: EngineSimHandle;
  let openai: OpenAI;

  beforeAll(async () => {
    sim = await startEngineSim({ speed: 20, kvCapacityTokens: 50_000, servedModelName: 'tiny-llama' });
    openai = new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(() => sim.close());

  it('streams a chat completion one token per chunk and reports usage in the final chunk', async () => {
    const stream = await openai.chat.completions.create({
      model: 'tiny-llama',
      // Counted as the engine does: Llama-2's template `<s>[INST] … [/INST]` around the text, whose
      // 400-letter run the word-piece stand-in counts as 50 tokens; 9 of template.
      messages: [{ role: 'user', content: 'x'.repeat(400) }],
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 64,
      // vLLM extension field used by tests to fix the natural output length.
      ...({ fairway_output_tokens: 12 } as object),
    });
    let content = 0;
    let text = '';
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | null | undefined;
    let roleSeen = false;
    for await (const chunk of stream) {
      expect(chunk.object).toBe('chat.completion.chunk');
      expect(chunk.model).toBe('tiny-llama');
      const choice = chunk.choices[0];
      if (choice) {
        if (choice.delta.role === 'assistant') roleSeen = true;
        if (choice.delta.content) {
          content++;
          text += choice.delta.content;
        }
        finish = choice.finish_reason ?? finish;
      } else usage = chunk.usage;
    }
    expect(roleSeen).toBe(true);
    expect(content).toBe(12);
    expect(text.length).toBeGreaterThan(0);
    expect(finish).toBe('stop');
    expect(usage).toEqual({ prompt_tokens: 59, completion_tokens: 12, total_tokens: 71 });
  });

  it('answers a non-streamed chat completion with usage and finish_reason length at max_tokens', async () => {
    const res = await openai.chat.completions.create({
      model: 'tiny-llama',
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: 'hello' },
      ],
      max_tokens: 5,
      ...({ ignore_eos: true } as object),
    });
    expect(res.object).toBe('chat.completion');
    expect(res.choices[0]?.finish_reason).toBe('length');
    expect(res.choices[0]?.message.role).toBe('assistant');
    // `<s>[INST] <<SYS>>\nbe brief\n<</SYS>>\n\nhello [/INST]`: 3 words, 23 marks, newlines and spaces, <s>.
    expect(res.usage).toMatchObject({ prompt_tokens: 28, completion_tokens: 5, total_tokens: 33 });
  });

  it('serves text completions, streamed and not', async () => {
    const res = await openai.completions.create(
      { model: 'tiny-llama', prompt: 'abcdefgh', max_tokens: 20 },
      { headers: { 'x-fairway-output-tokens': '7' } },
    );
    expect(res.object).toBe('text_completion');
    expect(res.usage).toMatchObject({ prompt_tokens: 2, completion_tokens: 7 });
    expect(res.choices[0]?.finish_reason).toBe('stop');

    const stream = await openai.completions.create({
      model: 'tiny-llama',
      prompt: [1, 2, 3, 4, 5],
      max_tokens: 3,
      stream: true,
      stream_options: { include_usage: true },
    });
    const texts: string[] = [];
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const c of stream) {
      if (c.choices[0]?.text) texts.push(c.choices[0].text);
      if (c.usage) usage = c.usage;
    }
    expect(texts).toHaveLength(3);
    expect(usage).toMatchObject({ prompt_tokens: 5, completion_tokens: 3 });
  });

  it('rejects an unknown model with 404 the way vLLM does', async () => {
    const err = await openai.chat.completions
      .create({ model: 'nope', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect((err as InstanceType<typeof OpenAI.NotFoundError>).message).toContain(
      'The model `nope` does not exist.',
    );
  });

  it('rejects a prompt longer than the context with a 400 naming the limit', async () => {
    const err = await openai.completions
      .create({ model: 'tiny-llama', prompt: ' word'.repeat(5000), max_tokens: 10 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(String((err as Error).message)).toContain('maximum context length is 4096 tokens');
  });

  it('lists the served model', async () => {
    const models = await openai.models.list();
    expect(models.data.map((m) => m.id)).toEqual(['tiny-llama']);
  });

  it('exposes a Prometheus /metrics page with every vLLM metric fairway reads', async () => {
    const text = await (await fetch(`${sim.url}/metrics`)).text();
    const families = parsePrometheusTextFormat(text);
    const byName = new Map(families.map((f) => [f.name, f]));
    const expected: [string, string][] = [
      ['vllm:num_requests_running', 'GAUGE'],
      ['vllm:num_requests_waiting', 'GAUGE'],
      ['vllm:kv_cache_usage_perc', 'GAUGE'],
      ['vllm:cache_config_info', 'GAUGE'],
      ['vllm:prompt_tokens_total', 'COUNTER'],
      ['vllm:generation_tokens_total', 'COUNTER'],
      ['vllm:num_preemptions_total', 'COUNTER'],
      ['vllm:request_success_total', 'COUNTER'],
      ['vllm:time_to_first_token_seconds', 'HISTOGRAM'],
      ['vllm:e2e_request_latency_seconds', 'HISTOGRAM'],
      ['vllm:request_queue_time_seconds', 'HISTOGRAM'],
      ['vllm:inter_token_latency_seconds', 'HISTOGRAM'],
    ];
    for (const [name, type] of expected) expect(byName.get(name)?.type, name).toBe(type);
    const running = byName.get('vllm:num_requests_running')!.metrics[0]!;
    expect(running.labels).toEqual({ model_name: 'tiny-llama' });
    const info = byName.get('vllm:cache_config_info')!.metrics[0]!;
    expect(info.labels).toMatchObject({ block_size: '16', num_gpu_blocks: String(50_000 / 16) });
    // The requests above generated tokens: the counter follows the engine model.
    const generated = Number(byName.get('vllm:generation_tokens_total')!.metrics[0]!.value);
    expect(generated).toBeGreaterThanOrEqual(12 + 5 + 7 + 3);
  });
});
