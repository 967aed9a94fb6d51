import { describe, expect, it } from 'vitest';
import {
  estimateTextTokens,
  PREFIX_BLOCK_CHARS,
  PREFIX_MAX_KEYS,
  prefixBoundaries,
  promptPrefixOfBlocks,
  promptPrefixOfText,
} from '../src/index.ts';

describe('prefix keys', () => {
  it('cuts at power-of-two block counts from the first boundary on, longest first', () => {
    expect(prefixBoundaries(3)).toEqual([]);
    expect(prefixBoundaries(4)).toEqual([4]);
    expect(prefixBoundaries(40)).toEqual([32, 16, 8, 4]);
    expect(prefixBoundaries(1 << 20)).toHaveLength(PREFIX_MAX_KEYS);
    expect(prefixBoundaries(1 << 20)[0]).toBe(1 << 20);
  });

  it('names a prefix of block hashes by the hash of its last block', () => {
    const hashes = Array.from({ length: 20 }, (_, i) => `h${i}`);
    expect(promptPrefixOfBlocks(hashes, 12, 16)).toEqual({ keys: ['h7', 'h3'], tokens: [64, 64] });
    expect(promptPrefixOfBlocks(hashes.slice(0, 2), 12, 16)).toEqual({ keys: [], tokens: [] });
  });

  it('gives each key the tokens of the part it adds, so the parts of a prompt never exceed it', () => {
    const hashes = Array.from({ length: 300 }, (_, i) => `h${i}`);
    // Boundaries 256, 128, …, 4 blocks: parts of 128, 64, …, 4 and the first 4.
    const prefix = promptPrefixOfBlocks(hashes, 300, 16);
    expect(prefix.keys).toEqual(['h255', 'h127', 'h63', 'h31', 'h15', 'h7', 'h3']);
    expect(prefix.tokens.reduce((a, b) => a + b, 0)).toBe(256 * 16);
    // A prompt of 1,024+ blocks keeps the longest 8 keys: their parts cover the prompt from the
    // shortest kept key's half on.
    const long = promptPrefixOfBlocks(
      Array.from({ length: 1100 }, (_, i) => `h${i}`),
      1100,
      16,
    );
    expect(long.keys).toHaveLength(PREFIX_MAX_KEYS);
    expect(long.tokens.reduce((a, b) => a + b, 0)).toBe((1024 - 4) * 16);

    // Text: each part's estimate, summing to at most the whole prompt's.
    const text = 'word '.repeat(400) + '0123456789'.repeat(30);
    const t = promptPrefixOfText('m', [text]);
    expect(t.tokens).toHaveLength(t.keys.length);
    expect(t.tokens.every((n) => n > 0)).toBe(true);
    const covered = (t.keys.length > 0 ? 2 ** (t.keys.length + 1) : 0) * PREFIX_BLOCK_CHARS;
    expect(t.tokens.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(
      estimateTextTokens(text.slice(0, covered)) + t.keys.length,
    );
    expect(promptPrefixOfText('m', [text.slice(0, 700), text.slice(700)])).toEqual(t);
  });

  it('gives a follow-up that resends the history the key of the earlier prompt’s longest boundary', () => {
    const turn1 = ['system: be brief\u0001', 'user: '.padEnd(700, 'x'), '\u0001'];
    const turn2 = [...turn1, 'assistant: '.padEnd(900, 'y'), '\u0001', 'user: more\u0001'];
    const k1 = promptPrefixOfText('llama', turn1).keys;
    const k2 = promptPrefixOfText('llama', turn2).keys;
    expect(k1.length).toBeGreaterThan(0);
    expect(k2.length).toBeGreaterThan(k1.length);
    expect(k2).toContain(k1[0]);
    // Split differently, the same text has the same keys.
    expect(promptPrefixOfText('llama', [turn2.join('')]).keys).toEqual(k2);
    // Another model's equal prompt shares none.
    expect(promptPrefixOfText('mistral', turn2).keys.some((k) => k2.includes(k))).toBe(false);
  });

  it('gives a prompt shorter than the first boundary no keys', () => {
    expect(promptPrefixOfText('m', ['x'.repeat(4 * PREFIX_BLOCK_CHARS - 1)]).keys).toEqual([]);
    expect(promptPrefixOfText('m', ['x'.repeat(4 * PREFIX_BLOCK_CHARS)]).keys).toHaveLength(1);
  });
});
