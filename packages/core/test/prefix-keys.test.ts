import { describe, expect, it } from 'vitest';
import {
  PREFIX_BLOCK_CHARS,
  PREFIX_MAX_KEYS,
  prefixBoundaries,
  promptPrefixOfBlocks,
  promptPrefixOfText,
} from '../src/index.ts';

const sum = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0);
const hashes = (n: number): string[] => Array.from({ length: n }, (_, i) => `h${i}`);
/** A chat message serialised as the dispatcher does, padded to `chars` characters. */
const message = (role: string, text: string, chars: number): string => {
  const body = `${role}\u0000${text}`.padEnd(chars - 1, text.slice(-1));
  return `${body}\u0001`;
};

describe('prefix keys', () => {
  it('cuts at power-of-two block counts, the parts’ ends and the prompt’s end, longest first', () => {
    expect(prefixBoundaries(3)).toEqual([]);
    expect(prefixBoundaries(3, [2])).toEqual([]);
    expect(prefixBoundaries(4)).toEqual([4]);
    expect(prefixBoundaries(40)).toEqual([40, 32, 16, 8, 4]);
    // Part ends from the first boundary on and inside the prompt count, each once.
    expect(prefixBoundaries(40, [37, 2, 16, 20, 20, 45])).toEqual([40, 37, 32, 20, 16, 8, 4]);
    expect(prefixBoundaries(1 << 20)).toHaveLength(PREFIX_MAX_KEYS);
    expect(prefixBoundaries(1 << 20)[0]).toBe(1 << 20);
    // The longest boundaries are kept, part ends or powers of two alike…
    expect(prefixBoundaries(200, [125, 137, 150, 160, 170])).toEqual([200, 170, 160, 150, 137, 128, 125, 64]);
    // …and the first part's end (a shared system prompt) when it is not among them.
    expect(prefixBoundaries(220, [195, 125, 137, 150, 160, 170, 185, 210])).toEqual([
      220, 210, 195, 185, 170, 160, 150, 125,
    ]);
    expect(prefixBoundaries(220, [2, 137, 150, 160, 170, 185, 195, 210])).toEqual([
      220, 210, 195, 185, 170, 160, 150, 137,
    ]);
  });

  it('names a prefix of block hashes by the hash of its last block', () => {
    expect(promptPrefixOfBlocks(hashes(20), 12, 16)).toEqual({
      keys: ['h11', 'h7', 'h3'],
      tokens: [64, 64, 64],
    });
    expect(promptPrefixOfBlocks(hashes(20), 12, 16, [10])).toEqual({
      keys: ['h11', 'h9', 'h7', 'h3'],
      tokens: [32, 32, 64, 64],
    });
    expect(promptPrefixOfBlocks(hashes(2), 12, 16)).toEqual({ keys: [], tokens: [] });
  });

  it('gives each key the tokens since the next shorter kept boundary, summing to the keyed prompt', () => {
    // Boundaries 300, 256, 128, …, 4 blocks: parts of 44, 128, 64, …, 4 and the first 4.
    const prefix = promptPrefixOfBlocks(hashes(300), 300, 16);
    expect(prefix.keys).toEqual(['h299', 'h255', 'h127', 'h63', 'h31', 'h15', 'h7', 'h3']);
    expect(prefix.tokens).toEqual([44, 128, 64, 32, 16, 8, 4, 4].map((b) => b * 16));
    // A prompt of 1,100 blocks keeps the longest 8 boundaries (1,100, 1,024, …, 16): the shortest
    // kept key's part covers everything before it.
    const long = promptPrefixOfBlocks(hashes(1100), 1100, 16);
    expect(long.keys).toHaveLength(PREFIX_MAX_KEYS);
    expect(long.tokens.at(-1)).toBe(16 * 16);
    expect(sum(long.tokens)).toBe(1100 * 16);
    // Part ends crowding out the shorter boundaries leave the sum whole; the first part's end keeps
    // its key, with all before it its part.
    const turns = promptPrefixOfBlocks(hashes(220), 210, 16, [125, 137, 150, 160, 170, 185, 195]);
    expect(turns.keys).toEqual(['h209', 'h194', 'h184', 'h169', 'h159', 'h149', 'h136', 'h124']);
    expect(turns.tokens).toEqual([15, 10, 15, 10, 10, 13, 12, 125].map((b) => b * 16));

    // Text: each part's estimate, summing to the estimate of the prompt up to its longest boundary
    // (letters: 4 characters a token).
    const text = 'word'.repeat(640);
    const hundreds = Array.from({ length: 26 }, (_, i) => text.slice(i * 100, (i + 1) * 100));
    for (const parts of [[text], [text.slice(0, 700), text.slice(700, 2000), text.slice(2000)], hundreds]) {
      const t = promptPrefixOfText('m', parts);
      expect(t.tokens).toHaveLength(t.keys.length);
      expect(t.tokens.every((n) => n > 0)).toBe(true);
      expect(sum(t.tokens)).toBe(Math.floor(text.length / PREFIX_BLOCK_CHARS) * (PREFIX_BLOCK_CHARS / 4));
    }
    // Part ends at 10 (700 characters) and 31 blocks (2,000) join 4, 8, 16 and 32 and the end, 40.
    const split = promptPrefixOfText('m', [text.slice(0, 700), text.slice(700, 2000), text.slice(2000)]);
    expect(split.tokens).toEqual([8, 1, 15, 6, 2, 4, 4].map((b) => b * 16));
  });

  it('keys the end of a shared system prompt, so prompts that diverge after it share its key', () => {
    const system = message('system', 'you are the product assistant ', 2000);
    const systemEnd = promptPrefixOfText('llama', [system]).keys[0];
    const a = promptPrefixOfText('llama', [system, message('user', 'alice asks ', 700)]);
    const b = promptPrefixOfText('llama', [system, message('user', 'bob wonders ', 300)]);
    expect(a.keys).toContain(systemEnd);
    expect(b.keys).toContain(systemEnd);
    // The system prompt's last whole block is its 31st: the two share the keys at 4, 8, 16 and 31
    // blocks, none of their own.
    expect(a.keys.filter((k) => b.keys.includes(k))).toEqual(promptPrefixOfText('llama', [system]).keys);
    expect(promptPrefixOfText('llama', [system.slice(0, 31 * PREFIX_BLOCK_CHARS)]).keys[0]).toBe(systemEnd);
    // A long conversation after it keeps that key, the shortest of its longest boundaries'.
    const turns = Array.from({ length: 12 }, (_, i) =>
      message(i % 2 ? 'assistant' : 'user', `turn ${i} `, 300),
    );
    const long = promptPrefixOfText('llama', [system, ...turns]);
    expect(long.keys).toHaveLength(PREFIX_MAX_KEYS);
    expect(long.keys.at(-1)).toBe(systemEnd);
    expect(long.keys[0]).toBe(promptPrefixOfText('llama', [[system, ...turns].join('')]).keys[0]);
  });

  it('gives a follow-up that resends the history the keys of the earlier prompt’s boundaries', () => {
    const turn1 = [message('system', 'be brief ', 400), message('user', 'x', 700)];
    const turn2 = [...turn1, message('assistant', 'y', 900), message('user', 'more ', 100)];
    const k1 = promptPrefixOfText('llama', turn1).keys;
    const k2 = promptPrefixOfText('llama', turn2).keys;
    expect(k1.length).toBeGreaterThan(0);
    expect(k2.length).toBeGreaterThan(k1.length);
    expect(k2).toEqual(expect.arrayContaining(k1));
    // The earlier prompt's end, the answer's end and the follow-up's end.
    expect(k2.slice(0, 3)).toContain(k1[0]);
    // Split at the same places, the same text has the same keys; joined, it keeps the
    // power-of-two boundaries' keys and its own end.
    expect(promptPrefixOfText('llama', [turn2.join('')]).keys.every((k) => k2.includes(k))).toBe(true);
    // Another model's equal prompt shares none.
    expect(promptPrefixOfText('mistral', turn2).keys.some((k) => k2.includes(k))).toBe(false);
  });

  it('gives a prompt shorter than the first boundary no keys', () => {
    expect(promptPrefixOfText('m', ['x'.repeat(4 * PREFIX_BLOCK_CHARS - 1)]).keys).toEqual([]);
    expect(promptPrefixOfText('m', ['x'.repeat(100), 'y'.repeat(100), 'z'.repeat(55)]).keys).toEqual([]);
    expect(promptPrefixOfText('m', ['x'.repeat(4 * PREFIX_BLOCK_CHARS)]).keys).toHaveLength(1);
    expect(promptPrefixOfBlocks(hashes(10), 3, 16, [1, 2])).toEqual({ keys: [], tokens: [] });
  });
});
