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
