import { describe, expect, it } from 'vitest';
import { promptPrefix } from '../src/prompt-prefix.ts';
import type { Endpoint, RequestBody } from '../src/request-descriptor.ts';

const promptPrefixKeys = (endpoint: Endpoint, body: RequestBody): string[] =>
  promptPrefix(endpoint, body).keys;

const system = { role: 'system', content: 'You answer questions about caching. '.repeat(10) };
const user1 = { role: 'user', content: 'What does vLLM cache when prefix caching is on? '.repeat(6) };

describe('promptPrefix', () => {
  it('gives a chat follow-up that resends the history the keys of the turn before it', () => {
    const turn1 = promptPrefixKeys('chat', { model: 'm', messages: [system, user1] } as RequestBody);
    const turn2 = promptPrefixKeys('chat', {
      model: 'm',
      messages: [
        system,
        user1,
        { role: 'assistant', content: [{ type: 'text', text: 'Full blocks of prompt and output.' }] },
        { role: 'user', content: 'And on eviction?' },
      ],
    } as RequestBody);
    expect(turn1.length).toBeGreaterThan(0);
    expect(turn2).toContain(turn1[0]);
  });

  it('gives chats that start with one system prompt the key of its end, whatever follows it', () => {
    // 2,550 characters serialised: its last whole block is its 39th.
    const product = { role: 'system', content: 'You are the product assistant. '.repeat(82) };
    const systemEnd = promptPrefixKeys('chat', { model: 'm', messages: [product] } as RequestBody)[0];
    for (const question of [
      'How do I reset my password?',
      'Which plans include single sign-on? '.repeat(20),
    ]) {
      const keys = promptPrefixKeys('chat', {
        model: 'm',
        messages: [product, { role: 'user', content: question }],
      } as RequestBody);
      expect(keys).toContain(systemEnd);
    }
    // The key names the whole system prompt up to that block: one that differs in it shares none.
    const c = product.content;
    const other = { role: 'system', content: `${c.slice(0, 2450)}!${c.slice(2451)}` };
    const otherKeys = promptPrefixKeys('chat', {
      model: 'm',
      messages: [other, { role: 'user', content: 'How do I reset my password?' }],
    } as RequestBody);
    expect(otherKeys).not.toContain(systemEnd);
  });

  it('keys a Responses request like the chat request its messages make, and a completion by its prompt', () => {
    const chat = promptPrefixKeys('chat', { model: 'm', messages: [system, user1] } as RequestBody);
    const responses = promptPrefixKeys('responses', {
      model: 'm',
      instructions: system.content,
      input: user1.content,
    } as RequestBody);
    expect(responses).toEqual(chat);
    const prompt = 'Once upon a time '.repeat(40);
    expect(promptPrefixKeys('completions', { model: 'm', prompt } as RequestBody)).toEqual(
      promptPrefixKeys('completions', { model: 'm', prompt: [prompt] } as RequestBody),
    );
  });

  it('gives short prompts and embeddings no keys', () => {
    expect(
      promptPrefixKeys('chat', { model: 'm', messages: [{ role: 'user', content: 'hi' }] } as RequestBody),
    ).toEqual([]);
    expect(promptPrefixKeys('embeddings', { model: 'm', input: 'x'.repeat(10_000) } as RequestBody)).toEqual(
      [],
    );
  });
});
