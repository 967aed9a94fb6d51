import { type HistogramTotals, VLLM_METRIC, VllmClient, type VllmMetrics } from '@fairway/engine';
import { costModelPreset } from '@fairway/perf';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runEngineSimCommand } from '../src/cli.ts';
import { chainBlockHashes } from '../src/prompt-blocks.ts';
import { wordPieceCounter, wordPieces } from '../src/prompt-tokens.ts';
import { type EngineSimHandle, startEngineSim } from '../src/server.ts';

const MODEL = 'llama-2-7b';
const GPU = 'A100-80GB';
const SPEED = 20;
const cost = costModelPreset(MODEL, GPU);

// A long system prompt two conversations share, then a user turn of its own for each.
const SYSTEM = Array.from({ length: 300 }, (_, i) => `rule${i}`).join(' ');
/** Tokens of the rendered prompt both requests start with: the template's opening and the system block. */
const SHARED = wordPieceCounter.count(`[INST] <<SYS>>\n${SYSTEM}\n<</SYS>>\n\n`);

function ask(user: string): OpenAI.ChatCompletionMessageParam[] {
  return [
    { role: 'system', content: SYSTEM },
    { role: 'user', content: user },
  ];
}

function delta(after: VllmMetrics, before: VllmMetrics, name: string): HistogramTotals {
  const a = after.histograms.get(name);
  const b = before.histograms.get(name);
  if (!a || !b) throw new Error(`no ${name} on the metrics page`);
  return { sum: a.sum - b.sum, count: a.count - b.count };
}

describe('engine-sim --enable-prefix-caching', () => {
  let sim: EngineSimHandle;
  let openai: OpenAI;
  let client: VllmClient;

  beforeAll(async () => {
    sim = await startEngineSim({
      model: MODEL,
      gpu: GPU,
      speed: SPEED,
      enablePrefixCaching: true,
      enablePromptTokensDetails: true,
    });
    openai = new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    client = new VllmClient({ url: sim.url });
  });
  afterAll(async () => {
    await client.close();
    await sim.close();
  });

  it('reports the shared system prompt as cached tokens, prefills only the rest, and counts it on /metrics', async () => {
    const before = await client.metrics();
    expect(before.prefixCaching).toBe(true);
    // Equal-length user turns: the two prompts differ only in what the cache holds.
    const first = await openai.chat.completions.create({
      model: MODEL,
      messages: ask('first question about apples'),
      max_tokens: 1,
    });
    const middle = await client.metrics();
    // Nothing was cached yet: vLLM leaves prompt_tokens_details out when no token was cached.
    expect(first.usage?.prompt_tokens_details).toBeUndefined();
    const prompt = first.usage!.prompt_tokens;
    expect(prompt).toBeGreaterThan(SHARED);

    const stream = await openai.chat.completions.create({
      model: MODEL,
      messages: ask('other question about grapes'),
      max_tokens: 1,
      stream: true,
      stream_options: { include_usage: true },
    });
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
    const after = await client.metrics();
    expect(usage?.prompt_tokens).toBe(prompt);
    const cached = usage?.prompt_tokens_details?.cached_tokens ?? 0;
    // Every full block of the shared prefix hits, and hits come in whole blocks.
    expect(cached).toBeGreaterThanOrEqual(Math.floor(SHARED / 16) * 16);
    expect(cached % 16).toBe(0);
    expect(cached).toBeLessThan(prompt);

    // vLLM's counters: every prompt token is a query, the cached ones are hits.
    expect(middle.prefixCacheQueriesTotal - before.prefixCacheQueriesTotal).toBe(prompt);
    expect(middle.prefixCacheHitsTotal - before.prefixCacheHitsTotal).toBe(0);
    expect(after.prefixCacheQueriesTotal - middle.prefixCacheQueriesTotal).toBe(prompt);
    expect(after.prefixCacheHitsTotal - middle.prefixCacheHitsTotal).toBe(cached);
    expect(after.prefixCacheHitRate).toBeGreaterThan(0);

    // In the model's time, the second prefill is the GPU's step over the uncached tokens only,
    // reading the cached ones' KV: far shorter than the first.
    const firstPrefill = delta(middle, before, VLLM_METRIC.prefillTime);
    const secondPrefill = delta(after, middle, VLLM_METRIC.prefillTime);
    expect([firstPrefill.count, secondPrefill.count]).toEqual([1, 1]);
    const rest = prompt - cached;
    const expected =
      cost.stepMs({ decodeSeqs: 0, prefillTokens: rest, prefillChunkSq: rest * rest, kvTokensRead: cached }) /
      1000;
    expect(secondPrefill.sum).toBeGreaterThan(expected * 0.98);
    expect(secondPrefill.sum).toBeLessThan(expected * 1.02);
    expect(secondPrefill.sum).toBeLessThan(firstPrefill.sum / 2);
  });

  it('reports cached tokens in a non-streamed answer that repeats a prompt', async () => {
    const messages = ask('a question asked twice');
    await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 2 });
    const again = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 2 });
    const prompt = again.usage!.prompt_tokens;
    // A prompt found whole still computes its last token: the block holding it is prefilled.
    expect(again.usage?.prompt_tokens_details?.cached_tokens).toBe(Math.floor((prompt - 1) / 16) * 16);
  });
});

describe('engine-sim prompt hashing', () => {
  it('splits text into the word pieces it counts, covering the text', () => {
    for (const text of ['', 'hello world', '  two  spaces', `[INST] <<SYS>>\n${SYSTEM}`, 'x'.repeat(20)]) {
      const pieces = wordPieces(text);
      expect(pieces.join('')).toBe(text);
      expect(pieces.length).toBe(wordPieceCounter.count(text));
    }
  });

  it('chains block hashes: equal prefixes give equal hashes, and one changed token changes every later one', () => {
    const a = Array.from({ length: 70 }, (_, i) => i);
    const b = [...a];
    b[20] = -1;
    const ha = chainBlockHashes(a, 16);
    const hb = chainBlockHashes(b, 16);
    expect(ha).toHaveLength(4); // the last 6 tokens fill no block
    expect(hb[0]).toBe(ha[0]);
    for (let i = 1; i < 4; i++) expect(hb[i]).not.toBe(ha[i]);
    // The same block of tokens after a different prefix hashes differently.
    expect(chainBlockHashes(a.slice(16, 32), 16)[0]).not.toBe(ha[1]);
  });
});

describe('engine-sim command line', () => {
  it('takes vLLM’s --enable-prefix-caching and --enable-prompt-tokens-details flags', async () => {
    const sim = await runEngineSimCommand(
      [
        '--port',
        '0',
        '--speed',
        '20',
        '--log-level',
        'silent',
        '--enable-prefix-caching',
        '--enable-prompt-tokens-details',
      ],
      { handleSignals: false },
    );
    const openai = new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    try {
      await openai.chat.completions.create({
        model: sim.servedModelName,
        messages: ask('one'),
        max_tokens: 1,
      });
      const r = await openai.chat.completions.create({
        model: sim.servedModelName,
        messages: ask('two'),
        max_tokens: 1,
      });
      expect(r.usage?.prompt_tokens_details?.cached_tokens).toBeGreaterThanOrEqual(
        Math.floor(SHARED / 16) * 16,
      );
    } finally {
      await sim.close();
    }
  });
});

describe('engine-sim without --enable-prefix-caching', () => {
  it('caches nothing and reports no prompt_tokens_details, as vLLM without the flags', async () => {
    const sim = await startEngineSim({ model: MODEL, gpu: GPU, speed: SPEED });
    const openai = new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const client = new VllmClient({ url: sim.url });
    try {
      for (let i = 0; i < 2; i++) {
        const r = await openai.chat.completions.create({
          model: MODEL,
          messages: ask('same'),
          max_tokens: 1,
        });
        expect(r.usage?.prompt_tokens_details).toBeUndefined();
      }
      const m = await client.metrics();
      expect(m.prefixCaching).toBe(false);
      expect([m.prefixCacheQueriesTotal, m.prefixCacheHitsTotal]).toEqual([0, 0]);
    } finally {
      await client.close();
      await sim.close();
    }
  });
});
